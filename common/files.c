/* files.c — whole-file and whole-stream reads, mkdir -p, rm -r. */
/* nftw */
#define _XOPEN_SOURCE 700
#include "scdb_common.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

scdb_err scdb_read_file(const char *path, size_t max_len, char **out, size_t *len)
{
    FILE *f = NULL;
    char *buf = NULL;
    struct stat st;
    scdb_err rc = SCDB_OK;

    *out = NULL;
    if (len) *len = 0;
    f = fopen(path, "rb");
    if (!f) return errno == ENOENT || errno == ENOTDIR ? SCDB_ENOTFOUND : SCDB_EIO;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) { rc = SCDB_EIO; goto fail; }
    if ((size_t)st.st_size > max_len) { rc = SCDB_ETOOBIG; goto fail; }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) { rc = SCDB_ENOMEM; goto fail; }
    if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) { rc = SCDB_EIO; goto fail; }
    buf[st.st_size] = '\0';
    *out = buf;
    if (len) *len = (size_t)st.st_size;
    buf = NULL;
fail:
    free(buf);
    fclose(f);
    return rc;
}

scdb_err scdb_read_stream(FILE *f, size_t max_len, char **out, size_t *len)
{
    size_t cap = max_len < (1 << 16) ? max_len : (1 << 16), got = 0;
    char *buf = malloc(cap + 1);

    *out = NULL;
    if (len) *len = 0;
    if (!buf) return SCDB_ENOMEM;
    while (got < max_len) {
        size_t r;
        if (got == cap) {
            size_t ncap = cap * 2 > max_len ? max_len : cap * 2;
            char *g = realloc(buf, ncap + 1);
            if (!g) {
                free(buf);
                return SCDB_ENOMEM;
            }
            buf = g;
            cap = ncap;
        }
        r = fread(buf + got, 1, cap - got, f);
        got += r;
        if (r == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return SCDB_EIO;
    }
    buf[got] = 0;
    *out = buf;
    if (len) *len = got;
    return SCDB_OK;
}

int scdb_mkdir_p(const char *path, unsigned mode)
{
    char buf[4096];
    size_t n = strlen(path);

    if (n == 0 || n >= sizeof buf) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, (mode_t)mode) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, (mode_t)mode) && errno != EEXIST) return -1;
    return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

int scdb_rm_tree(const char *path)
{
    struct stat st;

    if (lstat(path, &st)) return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int scdb_str_cut(char *dst, size_t n, const char *src)
{
    size_t l = strlen(src), cut = l >= n;
    if (cut) l = n - 1;
    memmove(dst, src, l);
    dst[l] = 0;
    return (int)cut;
}
