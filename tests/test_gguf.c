/* test_gguf.c — the GGUF reader and writer (schema/gguf.c).  Claims:
 *
 *   - round trip: every KV type the writer takes (scalars, numeric arrays,
 *     string arrays with empty strings) and tensors of F32 / F16 / BF16 and a
 *     quantized type come back as written, from a buffer and from the file,
 *     tensors at offsets that are multiples of the alignment (32, or
 *     general.alignment), the file laid out as ggml's writer lays it out;
 *   - typed getters refuse the wrong type (SCDB_EFORMAT) and a missing key
 *     (SCDB_ENOTFOUND); F16 / BF16 widen as the safetensors reader does; a
 *     quantized tensor is refused by to_f32 (SCDB_EDTYPE);
 *   - truncated at every byte: an error before the data section
 *     (SCDB_ETRUNC), SCDB_ERANGE inside the tensors' data, accepted once the
 *     last tensor's bytes are there;
 *   - every malformed input gets its own scdb_err and a message naming it;
 *   - the writer refuses what it cannot write;
 *   - running out of memory at any allocation of an open or an image
 *     returns SCDB_ENOMEM and leaks nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_fault.h"
#include "gguf.h"
#include "safetensors.h"
#include "scdb_common.h"

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/scdb_test_gguf_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    return scdb_rm_tree(tmpdir) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ a sample */

static float f32v[6] = {1.0f, -2.5f, 3.25f, 0.0f, -0.0f, 1e-8f};
static uint16_t f16v[4] = {0x3c00, 0xc000, 0x0001, 0x7c00};       /* 1, -2, 2^-24, inf */
static uint16_t bf16v[3] = {0x3f80, 0xbf00, 0x4049};               /* 1, -0.5, ~3.14 */
static uint8_t q8v[2 * 34];                                        /* two Q8_0 blocks */

static scdb_gguf_writer *sample(void)
{
    scdb_gguf_writer *w = NULL;
    assert_int_equal(scdb_gguf_writer_new(&w), SCDB_OK);
    const char *strs[3] = {"a", "", "\\x00"};
    int32_t i32s[3] = {-1, 0, 7};
    uint8_t u8s[2] = {0, 255};
    double f64s[2] = {0.5, -1e300};
    assert_int_equal(scdb_gguf_set_str(w, "general.architecture", "llama"), SCDB_OK);
    assert_int_equal(scdb_gguf_set_u32(w, "k.u32", 4000000000u), SCDB_OK);
    assert_int_equal(scdb_gguf_set_i32(w, "k.i32", -5), SCDB_OK);
    assert_int_equal(scdb_gguf_set_u64(w, "k.u64", 1ull << 40), SCDB_OK);
    assert_int_equal(scdb_gguf_set_f32(w, "k.f32", 0.25f), SCDB_OK);
    assert_int_equal(scdb_gguf_set_f64(w, "k.f64", -3.5), SCDB_OK);
    assert_int_equal(scdb_gguf_set_bool(w, "k.bool", 1), SCDB_OK);
    assert_int_equal(scdb_gguf_set_arr_str(w, "k.strs", strs, 3), SCDB_OK);
    assert_int_equal(scdb_gguf_set_arr(w, "k.i32s", SCDB_GGUF_I32, i32s, 3), SCDB_OK);
    assert_int_equal(scdb_gguf_set_arr(w, "k.u8s", SCDB_GGUF_U8, u8s, 2), SCDB_OK);
    assert_int_equal(scdb_gguf_set_arr(w, "k.f64s", SCDB_GGUF_F64, f64s, 2), SCDB_OK);
    assert_int_equal(scdb_gguf_set_arr(w, "k.empty", SCDB_GGUF_U32, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_gguf_set_i32(w, "k.i32", -6), SCDB_OK);      /* replaced in place */
    for (size_t i = 0; i < sizeof q8v; i++) q8v[i] = (uint8_t)(i * 7);
    int64_t ne_a[2] = {3, 2}, ne_b[1] = {4}, ne_c[3] = {1, 3, 1}, ne_q[2] = {32, 2};
    assert_int_equal(scdb_gguf_add_tensor(w, "a", SCDB_GGML_F32, 2, ne_a, f32v), SCDB_OK);
    assert_int_equal(scdb_gguf_add_tensor(w, "b.f16", SCDB_GGML_F16, 1, ne_b, f16v), SCDB_OK);
    assert_int_equal(scdb_gguf_add_tensor(w, "c.bf16", SCDB_GGML_BF16, 3, ne_c, bf16v), SCDB_OK);
    assert_int_equal(scdb_gguf_add_tensor(w, "q", SCDB_GGML_Q8_0, 2, ne_q, q8v), SCDB_OK);
    return w;
}

static void check_sample(const scdb_gguf_file *f, size_t align)
{
    char err[256];
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float fv;
    double d;
    int b;
    int64_t iv;
    const char *s;
    const scdb_gguf_kv *kv;

    assert_int_equal(scdb_gguf_version(f), 3);
    assert_int_equal(scdb_gguf_alignment(f), align);
    assert_int_equal(scdb_gguf_data_offset(f) % align, 0);
    assert_int_equal(scdb_gguf_kv_count(f), align == 32 ? 12 : 13);
    assert_string_equal(scdb_gguf_kv_at(f, 0)->key, "general.architecture");
    assert_string_equal(scdb_gguf_kv_at(f, 2)->key, "k.i32");         /* kept its place */
    assert_int_equal(scdb_gguf_get_str(f, "general.architecture", &s, err, sizeof err), SCDB_OK);
    assert_string_equal(s, "llama");
    assert_int_equal(scdb_gguf_get_u32(f, "k.u32", &u32, err, sizeof err), SCDB_OK);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(scdb_gguf_get_i32(f, "k.i32", &i32, err, sizeof err), SCDB_OK);
    assert_int_equal(i32, -6);
    assert_int_equal(scdb_gguf_get_u64(f, "k.u64", &u64, err, sizeof err), SCDB_OK);
    assert_true(u64 == 1ull << 40);
    assert_int_equal(scdb_gguf_get_f32(f, "k.f32", &fv, err, sizeof err), SCDB_OK);
    assert_true(fv == 0.25f);
    assert_int_equal(scdb_gguf_get_float(f, "k.f64", &d, err, sizeof err), SCDB_OK);
    assert_true(d == -3.5);
    assert_int_equal(scdb_gguf_get_bool(f, "k.bool", &b, err, sizeof err), SCDB_OK);
    assert_int_equal(b, 1);
    assert_int_equal(scdb_gguf_get_int(f, "k.u32", &iv, err, sizeof err), SCDB_OK);
    assert_true(iv == 4000000000ll);
    assert_int_equal(scdb_gguf_get_int(f, "k.i32", &iv, err, sizeof err), SCDB_OK);
    assert_true(iv == -6);
    /* wrong types and missing keys */
    assert_int_equal(scdb_gguf_get_u32(f, "k.i32", &u32, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "k.i32"));
    assert_non_null(strstr(err, "i32"));
    assert_int_equal(scdb_gguf_get_str(f, "k.u32", &s, err, sizeof err), SCDB_EFORMAT);
    assert_int_equal(scdb_gguf_get_int(f, "k.f32", &iv, err, sizeof err), SCDB_EFORMAT);
    assert_int_equal(scdb_gguf_get_float(f, "k.strs", &d, err, sizeof err), SCDB_EFORMAT);
    assert_non_null(strstr(err, "array"));
    assert_int_equal(scdb_gguf_get_u32(f, "nope", &u32, err, sizeof err), SCDB_ENOTFOUND);
    assert_non_null(strstr(err, "nope"));
    /* arrays */
    assert_int_equal(scdb_gguf_get_arr(f, "k.strs", SCDB_GGUF_STRING, &kv, err, sizeof err), SCDB_OK);
    assert_int_equal(kv->n, 3);
    assert_string_equal(kv->str[0], "a");
    assert_string_equal(kv->str[1], "");
    assert_string_equal(kv->str[2], "\\x00");
    assert_int_equal(kv->str_len[2], 4);
    assert_int_equal(scdb_gguf_get_arr(f, "k.strs", SCDB_GGUF_I32, &kv, err, sizeof err), SCDB_EFORMAT);
    assert_int_equal(scdb_gguf_get_arr(f, "k.i32s", SCDB_GGUF_I32, &kv, err, sizeof err), SCDB_OK);
    assert_int_equal(kv->n, 3);
    const int64_t want_i32s[3] = {-1, 0, 7};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(scdb_gguf_kv_int(kv, (uint64_t)i, &iv), SCDB_OK);
        assert_true(iv == want_i32s[i]);
    }
    assert_int_equal(scdb_gguf_kv_int(kv, 3, &iv), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_get_arr(f, "k.u8s", SCDB_GGUF_TYPE_COUNT, &kv, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_gguf_kv_int(kv, 1, &iv), SCDB_OK);
    assert_int_equal(iv, 255);
    assert_int_equal(scdb_gguf_get_arr(f, "k.f64s", SCDB_GGUF_F64, &kv, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_gguf_kv_float(kv, 1, &d), SCDB_OK);
    assert_true(d == -1e300);
    assert_int_equal(scdb_gguf_kv_int(kv, 0, &iv), SCDB_EFORMAT);
    assert_int_equal(scdb_gguf_get_arr(f, "k.empty", SCDB_GGUF_U32, &kv, err, sizeof err), SCDB_OK);
    assert_int_equal(kv->n, 0);
    /* tensors, in the order written, aligned, contiguous */
    assert_int_equal(scdb_gguf_tensor_count(f), 4);
    const char *names[4] = {"a", "b.f16", "c.bf16", "q"};
    uint64_t off = 0;
    for (int i = 0; i < 4; i++) {
        const scdb_gguf_tensor *t = scdb_gguf_tensor_at(f, i);
        assert_string_equal(t->name, names[i]);
        assert_ptr_equal(scdb_gguf_find_tensor(f, names[i]), t);
        assert_true(t->offset == off);
        off += (t->nbytes + align - 1) / align * align;
    }
    assert_null(scdb_gguf_tensor_at(f, 4));
    assert_null(scdb_gguf_find_tensor(f, "zz"));
    const scdb_gguf_tensor *ta = scdb_gguf_find_tensor(f, "a");
    assert_int_equal(ta->n_dims, 2);
    assert_true(ta->ne[0] == 3 && ta->ne[1] == 2 && ta->ne[2] == 1 && ta->ne[3] == 1);
    assert_int_equal(ta->nbytes, sizeof f32v);
    assert_memory_equal(ta->data, f32v, sizeof f32v);
    const scdb_gguf_tensor *tc = scdb_gguf_find_tensor(f, "c.bf16");
    assert_int_equal(tc->n_dims, 3);
    assert_memory_equal(tc->data, bf16v, sizeof bf16v);
    const scdb_gguf_tensor *tq = scdb_gguf_find_tensor(f, "q");
    assert_int_equal(tq->type, SCDB_GGML_Q8_0);
    assert_int_equal(tq->nbytes, sizeof q8v);
    assert_memory_equal(tq->data, q8v, sizeof q8v);
    /* values as f32: the safetensors widening, bit for bit */
    float got[4], want[4];
    const scdb_gguf_tensor *tb = scdb_gguf_find_tensor(f, "b.f16");
    scdb_st_tensor st = {.dtype = SCDB_F16, .ndim = 1, .nbytes = sizeof f16v, .data = f16v};
    assert_int_equal(scdb_gguf_tensor_to_f32(tb, 0, 4, got), SCDB_OK);
    assert_int_equal(scdb_st_to_f32(&st, 0, 4, want), SCDB_OK);
    assert_memory_equal(got, want, sizeof got);
    assert_true(got[0] == 1.0f && got[1] == -2.0f);
    assert_int_equal(scdb_gguf_tensor_to_f32(tc, 1, 2, got), SCDB_OK);
    assert_true(got[0] == -0.5f);
    assert_int_equal(scdb_gguf_tensor_to_f32(tc, 2, 2, got), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_tensor_to_f32(tq, 0, 32, got), SCDB_EDTYPE);
    assert_false(scdb_gguf_type_to_f32_ok(SCDB_GGML_Q4_K));
    assert_string_equal(scdb_ggml_type_name(SCDB_GGML_Q4_K), "Q4_K");
    assert_null(scdb_ggml_type_name(4));
}

static void test_roundtrip(void **state)
{
    (void)state;
    scdb_gguf_writer *w = sample();
    uint8_t *img = NULL;
    size_t len = 0;
    scdb_gguf_file *f = NULL;
    char err[256] = "", path[512];

    assert_int_equal(scdb_gguf_writer_image(w, &img, &len), SCDB_OK);
    assert_memory_equal(img, "GGUF\3\0\0\0", 8);
    assert_int_equal(len % 32, 0);                 /* the last tensor padded too */
    assert_int_equal(scdb_gguf_open_buffer(img, len, &f, err, sizeof err), SCDB_OK);
    check_sample(f, 32);
    assert_string_equal(scdb_gguf_path(f), "");
    scdb_gguf_close(&f);
    assert_null(f);
    scdb_gguf_close(&f);                            /* NULL is fine */

    /* the file: the same bytes, mapped */
    snprintf(path, sizeof path, "%s/s.gguf", tmpdir);
    assert_int_equal(scdb_gguf_writer_write(w, path), SCDB_OK);
    assert_true(scdb_gguf_is_file(path));
    assert_int_equal(access(path, F_OK), 0);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0);
    char *buf = NULL;
    size_t blen = 0;
    assert_int_equal(scdb_read_file(path, 1 << 20, &buf, &blen), SCDB_OK);
    assert_int_equal(blen, len);
    assert_memory_equal(buf, img, len);
    free(buf);
    assert_int_equal(scdb_gguf_open(path, &f, err, sizeof err), SCDB_OK);
    check_sample(f, 32);
    assert_string_equal(scdb_gguf_path(f), path);
    /* one string KV without opening the file whole */
    char peek[8];
    assert_int_equal(scdb_gguf_peek_str(path, "general.architecture", peek, sizeof peek), SCDB_OK);
    assert_string_equal(peek, "llama");
    assert_int_equal(scdb_gguf_peek_str(path, "general.architecture", peek, 3), SCDB_OK);
    assert_string_equal(peek, "ll");
    assert_int_equal(scdb_gguf_peek_str(path, "k.u32", peek, sizeof peek), SCDB_EFORMAT);
    assert_int_equal(scdb_gguf_peek_str(path, "nope", peek, sizeof peek), SCDB_ENOTFOUND);
    assert_int_equal(scdb_gguf_peek_str(tmpdir, "nope", peek, sizeof peek), SCDB_EFORMAT);
    scdb_gguf_close(&f);
    free(img);

    /* general.alignment 64 */
    assert_int_equal(scdb_gguf_set_u32(w, "general.alignment", 64), SCDB_OK);
    assert_int_equal(scdb_gguf_writer_image(w, &img, &len), SCDB_OK);
    assert_int_equal(scdb_gguf_open_buffer(img, len, &f, err, sizeof err), SCDB_OK);
    check_sample(f, 64);
    scdb_gguf_close(&f);
    free(img);

    /* not a GGUF / missing */
    assert_false(scdb_gguf_is_file(tmpdir));
    snprintf(path, sizeof path, "%s/none.gguf", tmpdir);
    assert_false(scdb_gguf_is_file(path));
    assert_int_equal(scdb_gguf_open(path, &f, err, sizeof err), SCDB_ENOTFOUND);
    assert_non_null(strstr(err, "none.gguf"));
    assert_int_equal(scdb_gguf_open(tmpdir, &f, err, sizeof err), SCDB_EIO);
    /* an empty file with no tensors and no KVs */
    scdb_gguf_writer *e = NULL;
    assert_int_equal(scdb_gguf_writer_new(&e), SCDB_OK);
    assert_int_equal(scdb_gguf_writer_image(e, &img, &len), SCDB_OK);
    assert_int_equal(len, 24);
    assert_int_equal(scdb_gguf_open_buffer(img, len, &f, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_gguf_kv_count(f), 0);
    assert_int_equal(scdb_gguf_tensor_count(f), 0);
    assert_int_equal(scdb_gguf_data_offset(f), 24);
    scdb_gguf_close(&f);
    free(img);
    scdb_gguf_writer_free(&e);
    scdb_gguf_writer_free(&w);
    assert_null(w);
}

/* Every KV and tensor of a file copied into a new writer (scdb_gguf_set_kv):
 * the same bytes; a string holding a NUL byte survives. */
static void test_copy(void **state)
{
    (void)state;
    scdb_gguf_writer *w = sample(), *c = NULL;
    uint8_t *img = NULL, *img2 = NULL;
    size_t len = 0, len2 = 0;
    scdb_gguf_file *f = NULL;
    char err[256];
    assert_int_equal(scdb_gguf_set_u32(w, "general.alignment", 64), SCDB_OK);
    assert_int_equal(scdb_gguf_writer_image(w, &img, &len), SCDB_OK);
    assert_int_equal(scdb_gguf_open_buffer(img, len, &f, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_gguf_writer_new(&c), SCDB_OK);
    for (int i = 0; i < scdb_gguf_kv_count(f); i++) assert_int_equal(scdb_gguf_set_kv(c, scdb_gguf_kv_at(f, i)), SCDB_OK);
    for (int i = 0; i < scdb_gguf_tensor_count(f); i++) {
        const scdb_gguf_tensor *t = scdb_gguf_tensor_at(f, i);
        assert_int_equal(scdb_gguf_add_tensor(c, t->name, t->type, t->n_dims, t->ne, t->data), SCDB_OK);
    }
    assert_int_equal(scdb_gguf_writer_image(c, &img2, &len2), SCDB_OK);
    assert_int_equal(len, len2);
    assert_memory_equal(img, img2, len);
    free(img2);
    /* a string with a NUL byte inside */
    const char *sv = "a\0b";
    uint64_t sl = 3;
    scdb_gguf_kv nul = {.key = "k.nul", .type = SCDB_GGUF_STRING, .elem = SCDB_GGUF_STRING, .n = 1,
                        .str = &sv, .str_len = &sl};
    assert_int_equal(scdb_gguf_set_kv(c, &nul), SCDB_OK);
    scdb_gguf_kv bad = nul;
    bad.n = 2;
    assert_int_equal(scdb_gguf_set_kv(c, &bad), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_writer_image(c, &img2, &len2), SCDB_OK);
    scdb_gguf_file *g = NULL;
    assert_int_equal(scdb_gguf_open_buffer(img2, len2, &g, err, sizeof err), SCDB_OK);
    const scdb_gguf_kv *kv = scdb_gguf_find_kv(g, "k.nul");
    assert_non_null(kv);
    assert_int_equal(kv->str_len[0], 3);
    assert_memory_equal(kv->str[0], "a\0b", 4);
    scdb_gguf_close(&g);
    scdb_gguf_close(&f);
    free(img);
    free(img2);
    scdb_gguf_writer_free(&c);
    scdb_gguf_writer_free(&w);
}

static void test_truncated(void **state)
{
    (void)state;
    scdb_gguf_writer *w = sample();
    uint8_t *img = NULL;
    size_t len = 0;
    scdb_gguf_file *f = NULL;
    char err[256];
    assert_int_equal(scdb_gguf_writer_image(w, &img, &len), SCDB_OK);
    assert_int_equal(scdb_gguf_open_buffer(img, len, &f, err, sizeof err), SCDB_OK);
    size_t data = scdb_gguf_data_offset(f);
    const scdb_gguf_tensor *last = scdb_gguf_tensor_at(f, 3);
    size_t end = data + last->offset + last->nbytes;
    scdb_gguf_close(&f);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, img, cut);
        scdb_err rc = scdb_gguf_open_buffer(c, cut, &f, err, sizeof err);
        if (cut >= end) {
            if (rc) fail_msg("cut at %zu of %zu (data ends at %zu): %s", cut, len, end, err);
        } else if (cut < data) {
            if (rc != SCDB_ETRUNC) fail_msg("cut at %zu (< data %zu): %s (%s)", cut, data, scdb_strerror(rc), err);
        } else if (rc != SCDB_ERANGE) {
            fail_msg("cut at %zu (in the data): %s (%s)", cut, scdb_strerror(rc), err);
        }
        assert_true((rc == SCDB_OK) == (f != NULL));
        scdb_gguf_close(&f);
        free(c);
    }
    free(img);
    scdb_gguf_writer_free(&w);
}

/* ------------------------------------------------------------ hand-made files */

typedef struct bb {
    uint8_t p[4096];
    size_t n;
} bb;

static void b_u32(bb *b, uint32_t v) { for (int i = 0; i < 4; i++) b->p[b->n++] = (uint8_t)(v >> (8 * i)); }
static void b_u64(bb *b, uint64_t v) { for (int i = 0; i < 8; i++) b->p[b->n++] = (uint8_t)(v >> (8 * i)); }
static void b_str(bb *b, const char *s)
{
    b_u64(b, strlen(s));
    memcpy(b->p + b->n, s, strlen(s));
    b->n += strlen(s);
}
static void b_head(bb *b, uint32_t version, uint64_t n_t, uint64_t n_kv)
{
    b->n = 0;
    memcpy(b->p, "GGUF", 4);
    b->n = 4;
    b_u32(b, version);
    b_u64(b, n_t);
    b_u64(b, n_kv);
}
/* tensor info: name, dims, type, offset */
static void b_info(bb *b, const char *name, int nd, const int64_t *ne, int32_t type, uint64_t off)
{
    b_str(b, name);
    b_u32(b, (uint32_t)nd);
    for (int i = 0; i < nd; i++) b_u64(b, (uint64_t)ne[i]);
    b_u32(b, (uint32_t)type);
    b_u64(b, off);
}
static void b_pad(bb *b, size_t a, size_t extra)
{
    while (b->n % a) b->p[b->n++] = 0;
    memset(b->p + b->n, 0, extra);
    b->n += extra;
}

static void expect_err(const bb *b, scdb_err want, const char *needle)
{
    scdb_gguf_file *f = NULL;
    char err[400] = "";
    scdb_err rc = scdb_gguf_open_buffer(b->p, b->n, &f, err, sizeof err);
    if (rc != want) fail_msg("want %s, got %s (%s)", scdb_strerror(want), scdb_strerror(rc), err);
    assert_null(f);
    if (needle && !strstr(err, needle)) fail_msg("message '%s' does not name '%s'", err, needle);
}

static void test_bad(void **state)
{
    (void)state;
    bb b;
    int64_t ne2[2] = {4, 2};

    /* a valid baseline: one KV, one F32 tensor */
    b_head(&b, 3, 1, 1);
    b_str(&b, "x");
    b_u32(&b, SCDB_GGUF_U32);
    b_u32(&b, 7);
    b_info(&b, "t", 2, ne2, SCDB_GGML_F32, 0);
    b_pad(&b, 32, 32);
    scdb_gguf_file *f = NULL;
    assert_int_equal(scdb_gguf_open_buffer(b.p, b.n, &f, NULL, 0), SCDB_OK);
    scdb_gguf_close(&f);

    /* magic and version */
    memcpy(b.p, "GGUG", 4);
    expect_err(&b, SCDB_EFORMAT, "magic");
    memcpy(b.p, "GG", 2);
    b.n = 2;
    expect_err(&b, SCDB_ETRUNC, NULL);
    b.p[1] = 'X';
    expect_err(&b, SCDB_EFORMAT, "magic");
    uint32_t bad_versions[] = {0, 1, 4, 0x03000000u};
    const char *why[] = {"versions 2 and 3 are", "convert the model again", "versions 2 and 3 are",
                         "big-endian"};
    for (size_t i = 0; i < 4; i++) {
        b_head(&b, bad_versions[i], 0, 0);
        expect_err(&b, SCDB_EUNSUPPORTED, why[i]);
    }
    /* version 2: the layout of 3, read */
    b_head(&b, 2, 0, 0);
    b_pad(&b, 32, 32);
    assert_int_equal(scdb_gguf_open_buffer(b.p, b.n, &f, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_gguf_version(f), 2);
    scdb_gguf_close(&f);
    /* counts */
    b_head(&b, 3, 0, 1ull << 62);
    expect_err(&b, SCDB_ETRUNC, "KV pairs");
    b_head(&b, 3, 1ull << 62, 0);
    expect_err(&b, SCDB_ETRUNC, "tensor infos");
    b_head(&b, 3, (uint64_t)-1, 0);
    expect_err(&b, SCDB_EFORMAT, "negative");
    /* strings and arrays */
    b_head(&b, 3, 0, 1);
    b_u64(&b, 1ull << 40);
    b_pad(&b, 1, 32);
    expect_err(&b, SCDB_ETOOBIG, "string length");
    b_head(&b, 3, 0, 1);
    b_u64(&b, 1000);
    b_str(&b, "abcdefghijklmn");
    b_pad(&b, 1, 32);
    expect_err(&b, SCDB_ETRUNC, "string length");
    b_head(&b, 3, 0, 1);
    b_str(&b, "");
    b_u32(&b, SCDB_GGUF_U8);
    b_u32(&b, 0);
    b_pad(&b, 1, 32);
    expect_err(&b, SCDB_EFORMAT, "empty key");
    b_head(&b, 3, 0, 1);
    b_u64(&b, 3);
    memcpy(b.p + b.n, "a\0b", 3);
    b.n += 3;
    b_u32(&b, SCDB_GGUF_U8);
    b_u32(&b, 0);
    b_pad(&b, 1, 32);
    expect_err(&b, SCDB_EFORMAT, "NUL");
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, 13);
    b_u32(&b, 0);
    b_pad(&b, 1, 32);
    expect_err(&b, SCDB_EFORMAT, "value type 13");
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, SCDB_GGUF_ARRAY);
    b_u32(&b, SCDB_GGUF_ARRAY);
    b_u64(&b, 0);
    b_pad(&b, 1, 32);
    expect_err(&b, SCDB_EFORMAT, "array of arrays");
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, SCDB_GGUF_ARRAY);
    b_u32(&b, SCDB_GGUF_U8);
    b_u64(&b, (1ull << 30) + 1);
    b_pad(&b, 1, 32);
    expect_err(&b, SCDB_ETOOBIG, "array");
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, SCDB_GGUF_ARRAY);
    b_u32(&b, SCDB_GGUF_U64);
    b_u64(&b, 1000);
    b_pad(&b, 8, 16);
    b_pad(&b, 1, 32);
    expect_err(&b, SCDB_ETRUNC, "'k'");
    b_head(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, SCDB_GGUF_ARRAY);
    b_u32(&b, SCDB_GGUF_STRING);
    b_u64(&b, 1ull << 29);
    b_pad(&b, 1, 32);
    expect_err(&b, SCDB_ETRUNC, "strings");
    b_head(&b, 3, 0, 2);                           /* duplicate key */
    for (int i = 0; i < 2; i++) {
        b_str(&b, "dup");
        b_u32(&b, SCDB_GGUF_U8);
        b.p[b.n++] = 1;
    }
    expect_err(&b, SCDB_EFORMAT, "'dup' appears twice");
    /* alignment */
    b_head(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, SCDB_GGUF_U64);
    b_u64(&b, 32);
    expect_err(&b, SCDB_EFORMAT, "general.alignment");
    b_head(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, SCDB_GGUF_U32);
    b_u32(&b, 48);
    expect_err(&b, SCDB_ERANGE, "power of two");
    /* tensor infos */
    int64_t ne5[5] = {1, 1, 1, 1, 1}, neg[2] = {4, -1}, big[4] = {1ll << 40, 1ll << 40, 1, 1};
    int64_t q33[2] = {33, 1};
    struct { const char *name; int nd; const int64_t *ne; int32_t type; uint64_t off; scdb_err want; const char *msg; } bad[] = {
        {"t", 5, ne5, SCDB_GGML_F32, 0, SCDB_EFORMAT, "dimensions"},
        {"t", 2, neg, SCDB_GGML_F32, 0, SCDB_EFORMAT, "negative"},
        {"t", 4, big, SCDB_GGML_F32, 0, SCDB_ESHAPE, "overflows"},
        {"t", 2, ne2, 4, 0, SCDB_EDTYPE, "ggml type 4"},
        {"t", 2, ne2, 99, 0, SCDB_EDTYPE, "ggml type 99"},
        {"t", 2, ne2, -1, 0, SCDB_EDTYPE, "ggml type -1"},
        {"t", 2, q33, SCDB_GGML_Q8_0, 0, SCDB_ESHAPE, "block"},
        {"t", 2, ne2, SCDB_GGML_F32, 16, SCDB_EFORMAT, "not a multiple of the alignment"},
        {"t", 2, ne2, SCDB_GGML_F32, 1ull << 50, SCDB_ERANGE, "outside the file"},
        {"t", 2, ne2, SCDB_GGML_F32, 32, SCDB_ERANGE, "outside the file"},
        {"", 2, ne2, SCDB_GGML_F32, 0, SCDB_EFORMAT, "empty name"},
        {"0123456789012345678901234567890123456789012345678901234567890123", 2, ne2, SCDB_GGML_F32, 0,
         SCDB_EFORMAT, "name of 64 bytes"},
    };
    for (size_t i = 0; i < SCDB_ARRAY_LEN(bad); i++) {
        b_head(&b, 3, 1, 0);
        b_info(&b, bad[i].name, bad[i].nd, bad[i].ne, bad[i].type, bad[i].off);
        b_pad(&b, 32, 32);
        expect_err(&b, bad[i].want, bad[i].msg);
    }
    /* two tensors: duplicate name, overlap */
    b_head(&b, 3, 2, 0);
    b_info(&b, "t", 2, ne2, SCDB_GGML_F32, 0);
    b_info(&b, "t", 2, ne2, SCDB_GGML_F32, 32);
    b_pad(&b, 32, 64);
    expect_err(&b, SCDB_EFORMAT, "'t' appears twice");
    int64_t ne16[1] = {16};
    b_head(&b, 3, 2, 0);
    b_info(&b, "big", 1, ne16, SCDB_GGML_F32, 0);
    b_info(&b, "small", 1, ne2, SCDB_GGML_F32, 32);
    b_pad(&b, 32, 96);
    expect_err(&b, SCDB_EOVERLAP, "overlap");
    /* a gap between tensors is fine, so is an empty tensor anywhere */
    int64_t zero[2] = {0, 3};
    b_head(&b, 3, 3, 0);
    b_info(&b, "a", 2, ne2, SCDB_GGML_F32, 0);
    b_info(&b, "b", 2, ne2, SCDB_GGML_F32, 64);
    b_info(&b, "e", 2, zero, SCDB_GGML_F32, 32);
    b_pad(&b, 32, 96);
    assert_int_equal(scdb_gguf_open_buffer(b.p, b.n, &f, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_gguf_find_tensor(f, "e")->nbytes, 0);
    scdb_gguf_close(&f);
    /* the data section must exist when there are tensors */
    b_head(&b, 3, 1, 0);
    b_info(&b, "t", 1, ne2, SCDB_GGML_F32, 0);
    expect_err(&b, SCDB_ETRUNC, "data section");
    /* NULL arguments */
    assert_int_equal(scdb_gguf_open_buffer(NULL, 4, &f, NULL, 0), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_open_buffer(b.p, b.n, NULL, NULL, 0), SCDB_EINVAL);
}

static void test_writer_refusals(void **state)
{
    (void)state;
    scdb_gguf_writer *w = NULL;
    int64_t ne[2] = {4, 2}, ne33[1] = {33}, neg[1] = {-1};
    float data[8] = {0};
    char path[512];
    assert_int_equal(scdb_gguf_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_gguf_add_tensor(w, "t", SCDB_GGML_F32, 2, ne, data), SCDB_OK);
    assert_int_equal(scdb_gguf_add_tensor(w, "t", SCDB_GGML_F32, 2, ne, data), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_add_tensor(w, "", SCDB_GGML_F32, 2, ne, data), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_add_tensor(w, "0123456789012345678901234567890123456789012345678901234567890123",
                                          SCDB_GGML_F32, 2, ne, data), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_add_tensor(w, "u", 5, 2, ne, data), SCDB_EDTYPE);
    assert_int_equal(scdb_gguf_add_tensor(w, "u", SCDB_GGML_F32, 5, ne, data), SCDB_ESHAPE);
    assert_int_equal(scdb_gguf_add_tensor(w, "u", SCDB_GGML_F32, 1, neg, data), SCDB_ESHAPE);
    assert_int_equal(scdb_gguf_add_tensor(w, "u", SCDB_GGML_Q8_0, 1, ne33, data), SCDB_ESHAPE);
    assert_int_equal(scdb_gguf_add_tensor(w, "u", SCDB_GGML_F32, 2, ne, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_set_u32(w, "general.alignment", 24), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_set_u64(w, "general.alignment", 32), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_set_str(w, "general.alignment", "32"), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_set_str(w, "", "x"), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_set_str(w, "k", NULL), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_set_arr(w, "k", SCDB_GGUF_STRING, data, 1), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_set_arr(w, "k", SCDB_GGUF_ARRAY, data, 1), SCDB_EINVAL);
    assert_int_equal(scdb_gguf_set_arr(w, "k", SCDB_GGUF_U8, NULL, 1), SCDB_EINVAL);
    snprintf(path, sizeof path, "%s/no/such/dir/x.gguf", tmpdir);
    assert_int_equal(scdb_gguf_writer_write(w, path), SCDB_ENOTFOUND);
    scdb_gguf_writer_free(&w);
    scdb_gguf_writer_free(&w);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    scdb_gguf_writer *w = sample();
    uint8_t *img = NULL;
    size_t len = 0;
    assert_int_equal(scdb_gguf_writer_image(w, &img, &len), SCDB_OK);
    int done = 0;
    for (long n = 0; !done && n < 1000; n++) {
        scdb_gguf_file *f = NULL;
        alloc_fault_arm(n);
        scdb_err rc = scdb_gguf_open_buffer(img, len, &f, NULL, 0);
        int hit = alloc_fault_fired();
        alloc_fault_disarm();
        if (!hit) {
            assert_int_equal(rc, SCDB_OK);
            done = 1;
        } else {
            assert_int_equal(rc, SCDB_ENOMEM);
            assert_null(f);
        }
        scdb_gguf_close(&f);
    }
    assert_true(done);
    done = 0;
    for (long n = 0; !done && n < 1000; n++) {
        uint8_t *im = NULL;
        size_t l = 0;
        alloc_fault_arm(n);
        scdb_err rc = scdb_gguf_writer_image(w, &im, &l);
        int hit = alloc_fault_fired();
        alloc_fault_disarm();
        if (!hit) {
            assert_int_equal(rc, SCDB_OK);
            assert_int_equal(l, len);
            done = 1;
        } else {
            assert_int_equal(rc, SCDB_ENOMEM);
        }
        free(im);
    }
    assert_true(done);
    free(img);
    scdb_gguf_writer_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_writer_refusals),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
