/* share_dir.c — where the running program's shipped assets are: beside it,
 * never a path compiled in.  An installed program <prefix>/bin/X reads
 * <prefix>/share/scdb (the Debian package: /usr/share/scdb); in the build
 * tree build/cli/scdb reads build/share/scdb, which CMake fills with links
 * to the source's data/ entries and tools/ at configure time.  $SCDB_DATA
 * overrides the asset folder (models, codebooks, pairs, policies, held-out
 * texts); the share folder itself (tools/) stays the program's. */
#include "scdb_common.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char share[PATH_MAX + 32];

const char *scdb_share_dir(void)
{
    char exe[PATH_MAX], joined[PATH_MAX + 32], *slash;
    ssize_t n;

    if (share[0]) return share;
    n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(share, sizeof share, "share/scdb");     /* relative: best effort */
        return share;
    }
    exe[n] = 0;
    slash = strrchr(exe, '/');
    if (slash) *slash = 0;                                /* the bin folder */
    snprintf(joined, sizeof joined, "%s/../share/scdb", exe);
    if (!realpath(joined, share)) snprintf(share, sizeof share, "%s", joined);
    return share;
}

const char *scdb_data_dir(void)
{
    const char *e = getenv("SCDB_DATA");
    return e && *e ? e : scdb_share_dir();
}

const char *scdb_path_relative(const char *path, const char *dir)
{
    struct stat want, st;
    char joined[PATH_MAX];
    size_t n = dir ? strlen(dir) : 0, len;

    while (n > 1 && dir[n - 1] == '/') n--;               /* "DIR/" as "DIR" */
    if (!path || !n) return path;
    if (!strncmp(path, dir, n) && path[n] == '/' && path[n + 1])
        return path + n + 1;
    /* Not below dir by name: the shortest tail of path that names the same
     * file below dir (the build tree's share folder links each of data/'s
     * entries, so /src/data/policies/x is build/share/scdb/policies/x). */
    if (stat(path, &want)) return path;
    len = strlen(path);
    for (size_t i = len; i-- > 0;) {
        const char *tail = i ? path + i + 1 : path;
        if (i && path[i] != '/') continue;
        if (!i && path[0] == '/') break;                  /* no whole absolute path */
        if (!*tail) continue;                             /* "x/": no tail yet */
        if ((size_t)snprintf(joined, sizeof joined, "%.*s/%s", (int)n, dir, tail) >= sizeof joined)
            continue;
        if (!stat(joined, &st) && st.st_dev == want.st_dev && st.st_ino == want.st_ino) return tail;
    }
    return path;
}

const char *scdb_data_relative(const char *path)
{
    return scdb_path_relative(path, scdb_data_dir());
}
