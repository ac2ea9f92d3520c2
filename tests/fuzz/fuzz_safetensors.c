/* fuzz_safetensors.c — schema/safetensors.c: the reader, from a buffer and
 * from a file (mmap).  A file it accepts must keep its promises: every
 * tensor's bytes inside the data section (touched, for ASan), each name
 * found by scdb_st_find and scdb_st_expect with its own dtype and shape,
 * metadata in key order. */
#include "fuzz.h"

#include <string.h>
#include <unistd.h>

#include "safetensors.h"

static void walk(const scdb_st_file *f, const uint8_t *base, size_t size)
{
    int n = scdb_st_count(f);
    const char *pk = NULL;
    volatile uint8_t sink = 0;

    for (int i = 0; i < n; i++) {
        const scdb_st_tensor *t = scdb_st_at(f, i);
        FUZZ_CHECK(t && t->name);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= SCDB_ST_MAX_DIMS);
        if (t->nbytes) {
            const uint8_t *d = t->data;
            if (base) FUZZ_CHECK(d >= base + 8 && d + t->nbytes <= base + size);
            sink ^= d[0];
            sink ^= d[t->nbytes - 1];
        }
        FUZZ_CHECK(scdb_st_find(f, t->name) == t);
        FUZZ_CHECK(scdb_st_expect(f, t->name, t->dtype, t->ndim, t->shape, NULL, NULL, 0) ==
                   SCDB_OK);
    }
    FUZZ_CHECK(scdb_st_at(f, n) == NULL && scdb_st_at(f, -1) == NULL);
    for (int i = 0; i < scdb_st_meta_count(f); i++) {
        const char *k, *v;
        FUZZ_CHECK(scdb_st_meta_at(f, i, &k, &v) == SCDB_OK);
        FUZZ_CHECK(!pk || strcmp(pk, k) < 0);
        FUZZ_CHECK(scdb_st_meta(f, k) == v);
        pk = k;
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    scdb_st_file *f = NULL, *g = NULL;
    char err[256], path[64];
    scdb_err e1, e2;
    int fd;

    e1 = scdb_st_open_buffer(data, size, &f, err, sizeof err);
    FUZZ_CHECK((e1 == SCDB_OK) == (f != NULL));
    if (f) walk(f, data, size);
    scdb_st_close(&f);

    /* the same bytes as a file: same verdict */
    fd = fuzz_memfd(data, size, path, sizeof path);
    e2 = scdb_st_open(path, &g, err, sizeof err);
    FUZZ_CHECK(e2 == e1 || (size == 0 && e2 != SCDB_OK));
    if (g) walk(g, NULL, 0);
    scdb_st_close(&g);
    close(fd);
    return 0;
}
