/* listen.c — the broker's sockets: the ipc:// ROUTER (socket file mode,
 * one broker per endpoint), the tcp:// ROUTER with CURVE (a plaintext tcp
 * endpoint is refused), and the ZAP handler that lets only the client keys
 * of curve_allow_file in. */
#include "broker_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* 1 if something accepts connections on the unix socket at path. */
static int socket_alive(const char *path)
{
    struct sockaddr_un sa;
    int fd, ok;

    if (strlen(path) >= sizeof sa.sun_path) return 0;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path));
    ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

static scdb_err read_curve_key(const char *path, uint8_t key[32], char *errbuf, size_t errlen)
{
    char *text = NULL;
    size_t len = 0, a = 0, z;
    struct stat st;
    scdb_err e = scdb_read_file(path, 4096, &text, &len);

    if (e) {
        snprintf(errbuf, errlen, "curve_secret_file %s: %s", path, scdb_strerror(e));
        return SCDB_EINVAL;
    }
    if (stat(path, &st) == 0 && (st.st_mode & 077))
        scdb_warn("curve_secret_file %s is readable by group or others (mode %03o)", path,
                  (unsigned)(st.st_mode & 0777));
    while (a < len && (text[a] == ' ' || text[a] == '\n' || text[a] == '\r' || text[a] == '\t'))
        a++;
    z = a;
    while (z < len && text[z] != ' ' && text[z] != '\n' && text[z] != '\r' && text[z] != '\t')
        z++;
    text[z] = 0;
    if (z - a != 40 || !zmq_z85_decode(key, text + a)) {
        free(text);
        snprintf(errbuf, errlen, "curve_secret_file %s: expected a 40-character Z85 key", path);
        return SCDB_EINVAL;
    }
    free(text);
    return SCDB_OK;
}

scdb_err bk_check_endpoints(const scdb_broker_config *c, char *errbuf, size_t errlen)
{
    const char *path = c->endpoint + 6;

    if (strncmp(c->endpoint, "ipc://", 6) || !*path) {
        snprintf(errbuf, errlen, "endpoint '%s' must be ipc://PATH", c->endpoint);
        return SCDB_EINVAL;
    }
    if (path[0] == '@') {
        snprintf(errbuf, errlen,
                 "endpoint '%s': abstract sockets have no permissions; use a path",
                 c->endpoint);
        return SCDB_EINVAL;
    }
    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        snprintf(errbuf, errlen, "endpoint path '%s' is too long for a unix socket", path);
        return SCDB_EINVAL;
    }
    if (c->socket_mode & ~0660u) {
        snprintf(errbuf, errlen, "socket_mode %03o is looser than 0660", c->socket_mode);
        return SCDB_EINVAL;
    }
    if (c->tcp_endpoint[0]) {
        if (strncmp(c->tcp_endpoint, "tcp://", 6)) {
            snprintf(errbuf, errlen, "tcp_endpoint '%s' must be tcp://HOST:PORT",
                     c->tcp_endpoint);
            return SCDB_EINVAL;
        }
        if (!c->curve_secret_file[0]) {
            snprintf(errbuf, errlen,
                     "refusing plaintext %s: set curve_secret_file (CURVE is required on tcp)",
                     c->tcp_endpoint);
            return SCDB_EINVAL;
        }
        if (!zmq_has("curve")) {
            snprintf(errbuf, errlen, "this libzmq has no CURVE support: tcp is unavailable");
            return SCDB_EUNSUPPORTED;
        }
    }
    return SCDB_OK;
}

static void *router_new(scdb_broker *b, int *ok)
{
    void *s = zmq_socket(b->zctx, ZMQ_ROUTER);
    int linger = 1000;
    int64_t hard = (int64_t)(b->cfg.max_request_bytes > (UINT64_MAX >> 3)
                                 ? INT64_MAX
                                 : 2 * b->cfg.max_request_bytes + (1 << 20));

    /* frames past max_request_bytes get an error reply; one frame past the
     * hard limit drops the connection (memory protection) */
    *ok = s && !zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger) &&
          !zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &hard, sizeof hard);
    return s;
}

static scdb_err bind_ipc(scdb_broker *b, char *errbuf, size_t errlen)
{
    const char *path = b->cfg.endpoint + 6;
    char dir[256];
    char *slash;
    mode_t old;
    int ok, rc;

    snprintf(b->ipc_path, sizeof b->ipc_path, "%s", path);
    snprintf(dir, sizeof dir, "%s", path);
    slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        if (scdb_mkdir_p(dir, 0750)) {
            snprintf(errbuf, errlen, "cannot create %s: %s", dir, strerror(errno));
            return SCDB_ESYS;
        }
    }
    if (socket_alive(path)) {
        snprintf(errbuf, errlen, "another broker is listening on %s", b->cfg.endpoint);
        return SCDB_EBUSY;
    }
    b->router[0] = router_new(b, &ok);
    if (!ok) goto zfail;
    b->n_router = 1;
    old = umask(0177);        /* the socket file is born 0600 ... */
    rc = zmq_bind(b->router[0], b->cfg.endpoint);
    umask(old);
    if (rc) goto zfail;
    /* ... then gets exactly socket_mode (and socket_group) */
    return bk_socket_perms(&b->cfg, path, errbuf, errlen);
zfail:
    snprintf(errbuf, errlen, "cannot bind %s: %s", b->cfg.endpoint, zmq_strerror(zmq_errno()));
    return SCDB_ESYS;
}

/* The tcp allow-list: one Z85 public key (40 characters) per line; blank
 * lines and '#' comments are skipped.  SCDB_EFORMAT names the bad line. */
static scdb_err read_allow_file(scdb_broker *b, const char *path, char *errbuf, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char line[256];
    int lineno = 0;

    if (!f) {
        snprintf(errbuf, errlen, "curve_allow_file %s: %s", path, strerror(errno));
        return SCDB_ENOTFOUND;
    }
    while (fgets(line, sizeof line, f)) {
        char *p = line, *e;
        void *grown;
        lineno++;
        while (*p == ' ' || *p == '\t') p++;
        for (e = p + strlen(p); e > p && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' ||
                                         e[-1] == '\t'); e--) {}
        *e = 0;
        if (!*p || *p == '#') continue;
        grown = realloc(b->allow, ((size_t)b->n_allow + 1) * sizeof *b->allow);
        if (!grown) {
            fclose(f);
            snprintf(errbuf, errlen, "out of memory");
            return SCDB_ENOMEM;
        }
        b->allow = grown;
        if (strlen(p) != 40 || !zmq_z85_decode(b->allow[b->n_allow], p)) {
            fclose(f);
            snprintf(errbuf, errlen, "curve_allow_file %s:%d: expected a 40-character Z85 "
                     "public key", path, lineno);
            return SCDB_EFORMAT;
        }
        b->n_allow++;
    }
    fclose(f);
    if (b->n_allow == 0) {
        snprintf(errbuf, errlen, "curve_allow_file %s lists no key: no client could connect",
                 path);
        return SCDB_EFORMAT;
    }
    return SCDB_OK;
}

/* Answer one ZAP request (RFC 27): 200 for a CURVE client whose key is on
 * the allow-list, 400 for anything else. */
void bk_zap_answer(scdb_broker *b)
{
    zmq_msg_t fr[8];
    int n = 0, more = 1, ok = 0;
    const char *status = "400", *text = "client key not allowed";

    while (more && n < 8) {
        zmq_msg_init(&fr[n]);
        if (zmq_msg_recv(&fr[n], b->zap, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&fr[n]);
            break;
        }
        more = zmq_msg_more(&fr[n]);
        n++;
    }
    while (more) {                    /* more frames than RFC 27 has: drain */
        zmq_msg_t x;
        zmq_msg_init(&x);
        if (zmq_msg_recv(&x, b->zap, ZMQ_DONTWAIT) < 0) more = 0;
        else more = zmq_msg_more(&x);
        zmq_msg_close(&x);
    }
    if (n < 2) goto out;              /* cannot even echo version + request id */
    /* version, request id, domain, address, identity, mechanism, key */
    if (n >= 7 && zmq_msg_size(&fr[5]) == 5 && !memcmp(zmq_msg_data(&fr[5]), "CURVE", 5) &&
        zmq_msg_size(&fr[6]) == 32) {
        for (int i = 0; i < b->n_allow && !ok; i++)
            ok = !memcmp(b->allow[i], zmq_msg_data(&fr[6]), 32);
        if (ok) {
            status = "200";
            text = "OK";
        } else {
            char z[41];
            zmq_z85_encode(z, zmq_msg_data(&fr[6]), 32);
            scdb_warn("tcp: refused CURVE client key %s (not in curve_allow_file)", z);
        }
    }
    zmq_send(b->zap, zmq_msg_data(&fr[0]), zmq_msg_size(&fr[0]), ZMQ_SNDMORE);
    zmq_send(b->zap, zmq_msg_data(&fr[1]), zmq_msg_size(&fr[1]), ZMQ_SNDMORE);
    zmq_send(b->zap, status, 3, ZMQ_SNDMORE);
    zmq_send(b->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(b->zap, "", 0, ZMQ_SNDMORE);          /* user id */
    zmq_send(b->zap, "", 0, 0);                    /* metadata */
out:
    for (int i = 0; i < n; i++) zmq_msg_close(&fr[i]);
}

static scdb_err bind_tcp(scdb_broker *b, char *errbuf, size_t errlen)
{
    uint8_t key[32];
    int one = 1, ok;
    void *s;
    scdb_err e = read_curve_key(b->cfg.curve_secret_file, key, errbuf, errlen);

    if (e) return e;
    if (b->cfg.curve_allow_file[0]) {
        /* the ZAP handler must exist before the first handshake */
        if ((e = read_allow_file(b, b->cfg.curve_allow_file, errbuf, errlen))) return e;
        b->zap = zmq_socket(b->zctx, ZMQ_REP);
        if (!b->zap || zmq_bind(b->zap, "inproc://zeromq.zap.01")) {
            snprintf(errbuf, errlen, "cannot start the CURVE allow-list handler: %s",
                     zmq_strerror(zmq_errno()));
            return SCDB_ESYS;
        }
    }
    s = router_new(b, &ok);
    if (s) b->router[b->n_router++] = s;
    if (!ok || zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one) ||
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, key, sizeof key) ||
        zmq_bind(s, b->cfg.tcp_endpoint)) {
        snprintf(errbuf, errlen, "cannot bind %s: %s", b->cfg.tcp_endpoint,
                 zmq_strerror(zmq_errno()));
        memset(key, 0, sizeof key);
        return SCDB_ESYS;
    }
    memset(key, 0, sizeof key);
    return SCDB_OK;
}

scdb_err bk_check_endpoint_free(const scdb_broker_config *c, char *errbuf, size_t errlen)
{
    if (!socket_alive(c->endpoint + 6)) return SCDB_OK;
    snprintf(errbuf, errlen, "another broker is listening on %s", c->endpoint);
    return SCDB_EBUSY;
}

scdb_err bk_listen(scdb_broker *b, char *errbuf, size_t errlen)
{
    scdb_err e = bind_ipc(b, errbuf, errlen);

    if (!e && b->cfg.tcp_endpoint[0]) e = bind_tcp(b, errbuf, errlen);
    return e;
}
