/* cli_endpoint.c — which broker a client subcommand (put, lookup, get,
 * stats, audit) talks to when --endpoint is not given (scdb_cli.h):
 *
 *   1. $SCDB_ENDPOINT;
 *   2. the per-user socket (ipc://$XDG_RUNTIME_DIR/scdb/broker.sock, else
 *      ipc:///tmp/scdb-UID/broker.sock: where `scdb serve` without
 *      --endpoint listens) when a broker accepts connections there;
 *   3. the installed service's: `endpoint` in [broker] of the installed
 *      configuration beside this program (<prefix>/etc/scdb/scdb-broker.ini;
 *      for the prefix /usr, /etc/scdb/scdb-broker.ini: the package's, whose
 *      service listens on ipc:///run/scdb/broker.sock), whether or not the
 *      service runs (so "no broker answered" names the service's socket);
 *   4. the per-user socket.
 *
 * The probe in 2 is a connect() to the Unix socket, closed at once: a file
 * a killed broker left behind refuses it, and the search goes on. */
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "scdb_cli.h"
#include "scdb_common.h"
#include "wire.h"

/* The per-user default (scdb_default_endpoint without $SCDB_ENDPOINT). */
static void per_user(char *buf, size_t len)
{
    const char *x = getenv("XDG_RUNTIME_DIR");
    if (x && *x)
        snprintf(buf, len, "ipc://%s/scdb/broker.sock", x);
    else
        snprintf(buf, len, "ipc:///tmp/scdb-%u/broker.sock", (unsigned)getuid());
}

/* 1 when something accepts a connection on the ipc:// endpoint's socket. */
static int listening(const char *ep)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *path = ep + 6;
    int s, ok;

    if (strncmp(ep, "ipc://", 6) || !*path || *path == '@' || strlen(path) >= sizeof sa.sun_path)
        return 0;
    memcpy(sa.sun_path, path, strlen(path));
    s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return 0;
    ok = connect(s, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(s);
    return ok;
}

void cli_installed_config(char *buf, size_t len)
{
    const char *share = scdb_share_dir();
    size_t n = strlen(share), sl = strlen("/share/scdb");
    char prefix[PATH_MAX + 32];
    const char *base;

    /* <prefix>/share/scdb -> <prefix>; the prefix /usr (or a dpkg -x root's
     * ROOT/usr) keeps its configuration in /etc (ROOT/etc), as the install
     * rule writes it (broker/CMakeLists.txt) */
    if (n > sl && !strcmp(share + n - sl, "/share/scdb"))
        snprintf(prefix, sizeof prefix, "%.*s", (int)(n - sl), share);
    else
        snprintf(prefix, sizeof prefix, "%s/../..", share);
    base = strrchr(prefix, '/');
    if (base && !strcmp(base, "/usr"))
        snprintf(buf, len, "%.*s/etc/scdb/scdb-broker.ini", (int)(base - prefix), prefix);
    else
        snprintf(buf, len, "%s/etc/scdb/scdb-broker.ini", prefix);
}

typedef struct peek {
    char ep[512];
    int found;
} peek;

static int on_line(void *user, const char *section, const char *name, const char *value)
{
    peek *p = user;
    if (!strcmp(section, "broker") && !strcmp(name, "endpoint") && *value) {
        snprintf(p->ep, sizeof p->ep, "%s", value);
        p->found = 1;
    }
    return 1;     /* every other line is the broker's business */
}

const char *cli_endpoint(char *buf, size_t len, char *from, size_t fromlen)
{
    const char *e = getenv("SCDB_ENDPOINT");
    char cfg[PATH_MAX + 64];
    peek p = {.found = 0};

    if (e && *e) {
        snprintf(buf, len, "%s", e);
        snprintf(from, fromlen, "$SCDB_ENDPOINT");
        return buf;
    }
    per_user(buf, len);
    if (listening(buf)) {
        snprintf(from, fromlen, "a broker of yours listens there");
        return buf;
    }
    cli_installed_config(cfg, sizeof cfg);
    if (ini_parse(cfg, on_line, &p) >= 0 && p.found) {
        snprintf(buf, len, "%s", p.ep);
        snprintf(from, fromlen, "the installed service's, %s", cfg);
        return buf;
    }
    snprintf(from, fromlen, "the per-user socket; no readable installed configuration at %s", cfg);
    return buf;
}

void cli_endpoint_help(FILE *f)
{
    char ep[512], from[PATH_MAX + 128], user[512], cfg[PATH_MAX + 64];

    cli_endpoint(ep, sizeof ep, from, sizeof from);
    per_user(user, sizeof user);
    cli_installed_config(cfg, sizeof cfg);
    fprintf(f,
            "  --endpoint URL      the broker; default, the first that applies:\n"
            "                      $SCDB_ENDPOINT; %s\n"
            "                      when a broker of yours listens there (`scdb serve`\n"
            "                      without --endpoint); the [broker] endpoint of the\n"
            "                      installed service's configuration\n"
            "                      %s;\n"
            "                      else %s.\n"
            "                      Here and now: %s\n"
            "                      (%s)\n",
            user, cfg, user, ep, from);
}
