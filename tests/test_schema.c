/*
 * test_schema.c — safetensors reader/writer (schema/safetensors.h).
 *
 * Every validation rule has a case with a hand-written header; then a writer
 * round trip through mmap, random and mutated garbage, and allocation fault
 * injection (fail the Nth allocation, for every N until the call succeeds;
 * see schema/CMakeLists.txt for the --wrap link options).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"

/* ------------------------------------------------ allocation fault hooks */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);

static long g_fail_at = -1;   /* index of the allocation to fail; -1: none */
static long g_alloc_seen;
static bool g_failed;

static bool fault_now(void)
{
    if (g_fail_at < 0)
        return false;
    if (g_alloc_seen++ == g_fail_at) {
        g_failed = true;
        errno = ENOMEM;
        return true;
    }
    return false;
}

void *__wrap_malloc(size_t n) { return fault_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return fault_now() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return fault_now() ? NULL : __real_realloc(p, n); }

static void fault_arm(long n)
{
    g_alloc_seen = 0;
    g_failed = false;
    g_fail_at = n;
}

static void fault_disarm(void) { g_fail_at = -1; }

/* ------------------------------------------------------------- helpers */

static char g_dir[64];

static int group_setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/scdb_test_schema_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *de;
        char p[512];
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
                if (unlink(p) != 0)
                    rmdir(p);
            }
        closedir(d);
    }
    return rmdir(g_dir);
}

/* Path of `name` in the test directory, in a static buffer: only for
 * immediate use as an argument.  TPATH declares a local copy to keep. */
static const char *tpath(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return p;
}
#define TPATH(var, name) char var[256]; snprintf(var, sizeof var, "%s/%s", g_dir, name)

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A file image: u64 header length, `jlen` bytes of header, `dlen` data bytes
 * (byte i of data = i & 0xff).  Allocated at its exact size so ASan sees any
 * read past the end. */
static uint8_t *mk_raw(uint64_t n, const char *json, size_t jlen, size_t dlen, size_t *len)
{
    *len = 8 + jlen + dlen;
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(n >> (8 * i));
    memcpy(b + 8, json, jlen);
    for (size_t i = 0; i < dlen; i++)
        b[8 + jlen + i] = (uint8_t)i;
    return b;
}

static uint8_t *mk(const char *json, size_t dlen, size_t *len)
{
    return mk_raw(strlen(json), json, strlen(json), dlen, len);
}

/* Open `json` + dlen data bytes and require `want`; on an error the message
 * must be non-empty and contain `needle` (if given). */
static void check_open_at(const char *json, size_t dlen, scdb_err want,
                          const char *needle, int line)
{
    size_t len;
    uint8_t *b = mk(json, dlen, &len);
    scdb_st_file *f = (scdb_st_file *)(uintptr_t)1;
    char eb[512] = "";
    scdb_err rc = scdb_st_open_buffer(b, len, &f, eb, sizeof eb);
    if (rc != want)
        fail_msg("line %d: header %s: got %s, want %s (%s)", line, json,
                 scdb_strerror(rc), scdb_strerror(want), eb);
    if (rc == SCDB_OK) {
        assert_non_null(f);
    } else {
        assert_null(f);
        if (!eb[0])
            fail_msg("line %d: empty error message", line);
        if (needle && !strstr(eb, needle))
            fail_msg("line %d: message \"%s\" lacks \"%s\"", line, eb, needle);
    }
    scdb_st_close(&f);
    assert_null(f);
    free(b);
}
#define CHECK(json, dlen, want, needle) check_open_at(json, dlen, want, needle, __LINE__)

#define T_A(off) "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" off "}"

/* ------------------------------------------------- header length, JSON */

static void test_trunc_short_file(void **state)
{
    (void)state;
    uint8_t zero[8] = {0};
    for (size_t n = 0; n < 8; n++) {
        uint8_t *b = malloc(n ? n : 1);
        memcpy(b, zero, n);
        scdb_st_file *f = NULL;
        char eb[128] = "";
        assert_int_equal(scdb_st_open_buffer(b, n, &f, eb, sizeof eb), SCDB_ETRUNC);
        assert_null(f);
        assert_non_null(strstr(eb, "shorter"));
        free(b);
    }
    scdb_st_file *f = NULL;
    assert_int_equal(scdb_st_open_buffer(NULL, 0, &f, NULL, 0), SCDB_ETRUNC);
    assert_int_equal(scdb_st_open_buffer(NULL, 5, &f, NULL, 0), SCDB_EINVAL);
    assert_int_equal(scdb_st_open_buffer(zero, 8, NULL, NULL, 0), SCDB_EINVAL);
}

static void test_trunc_header(void **state)
{
    (void)state;
    size_t len;
    scdb_st_file *f = NULL;
    /* claims 10 header bytes, has 5 */
    uint8_t *b = mk_raw(10, "{}   ", 5, 0, &len);
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_ETRUNC);
    assert_null(f);
    free(b);
    /* one byte short */
    b = mk_raw(3, "{}", 2, 0, &len);
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_ETRUNC);
    free(b);
    /* exactly the header, no data: valid, empty */
    b = mk_raw(2, "{}", 2, 0, &len);
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_count(f), 0);
    assert_int_equal(scdb_st_meta_count(f), 0);
    assert_null(scdb_st_find(f, "a"));
    assert_null(scdb_st_at(f, 0));
    scdb_st_close(&f);
    free(b);
    /* header length 0: no JSON at all */
    b = mk_raw(0, "", 0, 4, &len);
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_EFORMAT);
    free(b);
}

static void test_header_too_big(void **state)
{
    (void)state;
    size_t len;
    scdb_st_file *f = NULL;
    char eb[256] = "";
    uint8_t *b = mk_raw((uint64_t)SCDB_ST_MAX_HEADER + 1, "{}", 2, 0, &len);
    assert_int_equal(scdb_st_open_buffer(b, len, &f, eb, sizeof eb), SCDB_ETOOBIG);
    assert_non_null(strstr(eb, "100000001"));
    free(b);
    b = mk_raw(UINT64_MAX, "{}", 2, 0, &len);
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_ETOOBIG);
    free(b);
    /* within the limit but past the file */
    b = mk_raw(SCDB_ST_MAX_HEADER, "{}", 2, 0, &len);
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_ETRUNC);
    free(b);
    assert_null(f);
}

static void test_json_invalid(void **state)
{
    (void)state;
    CHECK("{", 0, SCDB_EFORMAT, "JSON");
    CHECK("{\"a\":}", 0, SCDB_EFORMAT, "JSON");
    CHECK("{\"a\" 1}", 0, SCDB_EFORMAT, NULL);
    CHECK("nul", 0, SCDB_EFORMAT, NULL);
    CHECK("{} x", 0, SCDB_EFORMAT, "after");
    CHECK("{}{}", 0, SCDB_EFORMAT, "after");
    CHECK("{\"a\":\"unterminated}", 0, SCDB_EFORMAT, NULL);
    CHECK("   ", 0, SCDB_EFORMAT, NULL);
    /* whitespace around the object is fine (writers pad with spaces) */
    CHECK("{}        ", 0, SCDB_OK, NULL);
    CHECK(" \n{}\t\r ", 0, SCDB_OK, NULL);

    /* NUL bytes after the object are not JSON whitespace */
    size_t len;
    scdb_st_file *f = NULL;
    uint8_t *b = mk_raw(4, "{}\0\0", 4, 0, &len);
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_EFORMAT);
    free(b);
    /* the header ends exactly at the end of the buffer, mid-token: must
     * not read the byte after it (ASan) */
    b = mk_raw(12, "{\"a\":{\"dtyp", 11, 0, &len);
    b[0] = 11;
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_EFORMAT);
    free(b);
}

static void test_json_not_object(void **state)
{
    (void)state;
    CHECK("[]", 0, SCDB_EFORMAT, "not a JSON object");
    CHECK("[{\"dtype\":\"F32\"}]", 0, SCDB_EFORMAT, "not a JSON object");
    CHECK("1", 0, SCDB_EFORMAT, "not a JSON object");
    CHECK("\"x\"", 0, SCDB_EFORMAT, "not a JSON object");
    CHECK("null", 0, SCDB_EFORMAT, "not a JSON object");
    CHECK("true", 0, SCDB_EFORMAT, "not a JSON object");
}

/* ------------------------------------------------------ tensor entries */

static void test_entry_not_object(void **state)
{
    (void)state;
    CHECK("{\"w1\":1}", 0, SCDB_EFORMAT, "'w1'");
    CHECK("{\"w1\":[]}", 0, SCDB_EFORMAT, "'w1'");
    CHECK("{\"w1\":\"F32\"}", 0, SCDB_EFORMAT, "'w1'");
    CHECK("{\"w1\":null}", 0, SCDB_EFORMAT, "'w1'");
    CHECK("{" T_A("[0,8]") ",\"w2\":true}", 8, SCDB_EFORMAT, "'w2'");
}

static void test_missing_fields(void **state)
{
    (void)state;
    CHECK("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, SCDB_EFORMAT, "\"dtype\"");
    CHECK("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, SCDB_EFORMAT, "\"shape\"");
    CHECK("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, SCDB_EFORMAT, "\"data_offsets\"");
    CHECK("{\"w\":{}}", 8, SCDB_EFORMAT, "'w'");
    /* keys are case-sensitive */
    CHECK("{\"w\":{\"DType\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
          SCDB_EFORMAT, "\"dtype\"");
}

static void test_ill_typed_fields(void **state)
{
    (void)state;
#define E(dt, sh, off) "{\"w\":{\"dtype\":" dt ",\"shape\":" sh ",\"data_offsets\":" off "}}"
    CHECK(E("1", "[2]", "[0,8]"), 8, SCDB_EFORMAT, "dtype");
    CHECK(E("null", "[2]", "[0,8]"), 8, SCDB_EFORMAT, "dtype");
    CHECK(E("[\"F32\"]", "[2]", "[0,8]"), 8, SCDB_EFORMAT, "dtype");
    CHECK(E("\"F32\"", "\"2\"", "[0,8]"), 8, SCDB_EFORMAT, "shape");
    CHECK(E("\"F32\"", "{}", "[0,8]"), 8, SCDB_EFORMAT, "shape");
    CHECK(E("\"F32\"", "2", "[0,8]"), 8, SCDB_EFORMAT, "shape");
    CHECK(E("\"F32\"", "[\"2\"]", "[0,8]"), 8, SCDB_EFORMAT, "shape[0]");
    CHECK(E("\"F32\"", "[2,null]", "[0,8]"), 8, SCDB_EFORMAT, "shape[1]");
    CHECK(E("\"F32\"", "[[2]]", "[0,8]"), 8, SCDB_EFORMAT, "shape[0]");
    CHECK(E("\"F32\"", "[true]", "[0,8]"), 8, SCDB_EFORMAT, "shape[0]");
    CHECK(E("\"F32\"", "[2]", "\"0,8\""), 8, SCDB_EFORMAT, "data_offsets");
    CHECK(E("\"F32\"", "[2]", "[0]"), 8, SCDB_EFORMAT, "data_offsets");
    CHECK(E("\"F32\"", "[2]", "[]"), 8, SCDB_EFORMAT, "data_offsets");
    CHECK(E("\"F32\"", "[2]", "[0,8,8]"), 8, SCDB_EFORMAT, "data_offsets");
    CHECK(E("\"F32\"", "[2]", "[\"0\",8]"), 8, SCDB_EFORMAT, "data_offsets[0]");
    CHECK(E("\"F32\"", "[2]", "[0,null]"), 8, SCDB_EFORMAT, "data_offsets[1]");
    CHECK(E("\"F32\"", "[2]", "{\"begin\":0,\"end\":8}"), 8, SCDB_EFORMAT, "data_offsets");
    /* a field given twice */
    CHECK("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
          8, SCDB_EFORMAT, "duplicate field");
    /* unknown fields are ignored (forward compatibility) */
    CHECK("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":[1]}}",
          8, SCDB_OK, NULL);
}

static void test_bad_numbers(void **state)
{
    (void)state;
    CHECK(E("\"F32\"", "[-1]", "[0,8]"), 8, SCDB_EFORMAT, "shape[0]");
    CHECK(E("\"F32\"", "[2,-0.5]", "[0,8]"), 8, SCDB_EFORMAT, "shape[1]");
    CHECK(E("\"F32\"", "[1.5]", "[0,8]"), 8, SCDB_EFORMAT, "shape[0]");
    CHECK(E("\"F32\"", "[2]", "[-8,0]"), 8, SCDB_EFORMAT, "data_offsets[0]");
    CHECK(E("\"F32\"", "[2]", "[0.5,8]"), 8, SCDB_EFORMAT, "data_offsets[0]");
    CHECK(E("\"F32\"", "[2]", "[0,8.25]"), 8, SCDB_EFORMAT, "data_offsets[1]");
    CHECK(E("\"F32\"", "[2]", "[0,-1e999]"), 8, SCDB_EFORMAT, "data_offsets[1]");
    /* integral values in other spellings are accepted (cJSON sees doubles) */
    CHECK(E("\"F32\"", "[2.0]", "[0,8e0]"), 8, SCDB_OK, NULL);
}

static void test_too_many_dims(void **state)
{
    (void)state;
    CHECK(E("\"F32\"", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4, SCDB_EFORMAT, "dims");
    CHECK(E("\"F32\"", "[1,1,1,1,1,1,1,2]", "[0,8]"), 8, SCDB_OK, NULL);
}

static void test_unknown_dtype(void **state)
{
    (void)state;
    CHECK(E("\"F64\"", "[2]", "[0,8]"), 8, SCDB_EDTYPE, "F64");
    CHECK(E("\"f32\"", "[2]", "[0,8]"), 8, SCDB_EDTYPE, "f32");
    CHECK(E("\"\"", "[2]", "[0,8]"), 8, SCDB_EDTYPE, "'w'");
    CHECK(E("\"U8\"", "[8]", "[0,8]"), 8, SCDB_EDTYPE, "U8");
    CHECK(E("\"BOOL\"", "[8]", "[0,8]"), 8, SCDB_EDTYPE, "BOOL");
}

static void test_offsets_range(void **state)
{
    (void)state;
    CHECK(E("\"F32\"", "[0]", "[8,4]"), 8, SCDB_ERANGE, "begin > end");
    CHECK(E("\"F32\"", "[2]", "[12,20]"), 16, SCDB_ERANGE, "past");
    CHECK(E("\"F32\"", "[2]", "[0,8]"), 7, SCDB_ERANGE, "[0, 8]");
    CHECK(E("\"F32\"", "[2]", "[1e300,1e300]"), 16, SCDB_ERANGE, "data_offsets[0]");
    CHECK(E("\"F32\"", "[0]", "[9007199254740992,9007199254740992]"), 16, SCDB_ERANGE, NULL);
    CHECK(E("\"F32\"", "[2]", "[8,16]"), 16, SCDB_OK, NULL);   /* ends at EOF */
    CHECK(E("\"F32\"", "[0]", "[16,16]"), 16, SCDB_OK, NULL);  /* empty at EOF */
    CHECK(E("\"F32\"", "[0]", "[17,17]"), 16, SCDB_ERANGE, NULL);
}

static void test_size_mismatch(void **state)
{
    (void)state;
    CHECK(E("\"F32\"", "[2]", "[0,4]"), 16, SCDB_ESHAPE, "'w'");
    CHECK(E("\"F32\"", "[2]", "[0,12]"), 16, SCDB_ESHAPE, "needs 8");
    CHECK(E("\"F16\"", "[3]", "[0,8]"), 16, SCDB_ESHAPE, "F16 [3]");
    CHECK(E("\"I32\"", "[]", "[0,0]"), 16, SCDB_ESHAPE, "needs 4");   /* scalar = 1 elem */
    CHECK(E("\"BF16\"", "[2,2]", "[0,8]"), 16, SCDB_OK, NULL);
}

static void test_shape_overflow(void **state)
{
    (void)state;
    CHECK(E("\"F32\"", "[4294967296,4294967296]", "[0,8]"), 16, SCDB_ESHAPE, "overflow");
    CHECK(E("\"F32\"", "[4503599627370496,4503599627370496]", "[0,8]"), 16, SCDB_ESHAPE, NULL);
    CHECK(E("\"F32\"", "[4611686018427387904]", "[0,8]"), 16, SCDB_ESHAPE, NULL); /* 2^62 elems */
    CHECK(E("\"F32\"", "[1e16]", "[0,8]"), 16, SCDB_ESHAPE, "too large");
    CHECK(E("\"F32\"", "[1e999]", "[0,8]"), 16, SCDB_ESHAPE, "too large");
    /* a zero dimension makes the size 0 whatever the others are */
    CHECK(E("\"F32\"", "[4503599627370496,4503599627370496,0]", "[0,0]"), 16, SCDB_OK, NULL);
}

static void test_overlap(void **state)
{
    (void)state;
#define T(n, off) "\"" n "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" off "}"
#define T0(n, off) "\"" n "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":" off "}"
#define T4(n, off) "\"" n "\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":" off "}"
    CHECK("{" T("a", "[0,8]") "," T("b", "[4,12]") "}", 16, SCDB_EOVERLAP, "'b'");
    CHECK("{" T("b", "[4,12]") "," T("a", "[0,8]") "}", 16, SCDB_EOVERLAP, "'a'");
    CHECK("{" T("a", "[0,8]") "," T("b", "[0,8]") "}", 16, SCDB_EOVERLAP, NULL);
    /* containment, reported against the enclosing tensor */
    CHECK("{" T4("big", "[0,16]") "," T("a", "[0,8]") "," T("b", "[8,16]") "}", 16,
          SCDB_EOVERLAP, "'big'");
    CHECK("{" T("x", "[0,8]") "," T4("big", "[16,32]") "," T("in", "[20,28]") "}", 32,
          SCDB_EOVERLAP, "'in'");
    /* adjacent, gaps and zero-size tensors anywhere are fine */
    CHECK("{" T("a", "[0,8]") "," T("b", "[8,16]") "}", 16, SCDB_OK, NULL);
    CHECK("{" T("a", "[4,12]") "," T("b", "[20,28]") "}", 32, SCDB_OK, NULL);
    CHECK("{" T("a", "[0,8]") "," T0("e", "[4,4]") "," T0("f", "[4,4]") "}", 8, SCDB_OK, NULL);
}

static void test_duplicates(void **state)
{
    (void)state;
    CHECK("{" T("a", "[0,8]") "," T("a", "[8,16]") "}", 16, SCDB_EFORMAT, "duplicate tensor name 'a'");
    CHECK("{" T0("z", "[0,0]") "," T0("z", "[0,0]") "}", 0, SCDB_EFORMAT, "'z'");
    CHECK("{\"__metadata__\":{},\"__metadata__\":{}}", 0, SCDB_EFORMAT, "__metadata__");
    CHECK("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, SCDB_EFORMAT, "'k'");
}

static void test_metadata(void **state)
{
    (void)state;
    CHECK("{\"__metadata__\":{\"k\":1}}", 0, SCDB_EFORMAT, "'k'");
    CHECK("{\"__metadata__\":{\"ok\":\"x\",\"k\":null}}", 0, SCDB_EFORMAT, "'k'");
    CHECK("{\"__metadata__\":{\"k\":{\"a\":\"b\"}}}", 0, SCDB_EFORMAT, "'k'");
    CHECK("{\"__metadata__\":{\"k\":[\"a\"]}}", 0, SCDB_EFORMAT, "'k'");
    CHECK("{\"__metadata__\":\"x\"}", 0, SCDB_EFORMAT, "__metadata__");
    CHECK("{\"__metadata__\":[]}", 0, SCDB_EFORMAT, "__metadata__");
    CHECK("{\"__metadata__\":null}", 0, SCDB_EFORMAT, "__metadata__");

    const char *json = "{\"__metadata__\":{\"zeta\":\"last\",\"format\":\"pt\",\"e\":\"\","
                       "\"esc\":\"a\\\"b\\\\c\\n\\u00e9\"}," T("a", "[0,8]") "}";
    size_t len;
    uint8_t *b = mk(json, 8, &len);
    scdb_st_file *f = NULL;
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_count(f), 1);
    assert_int_equal(scdb_st_meta_count(f), 4);
    assert_string_equal(scdb_st_meta(f, "format"), "pt");
    assert_string_equal(scdb_st_meta(f, "e"), "");
    assert_string_equal(scdb_st_meta(f, "esc"), "a\"b\\c\n\xc3\xa9");
    assert_null(scdb_st_meta(f, "missing"));
    assert_null(scdb_st_meta(f, NULL));
    assert_null(scdb_st_find(f, "__metadata__"));
    const char *k, *v;
    const char *keys[] = {"e", "esc", "format", "zeta"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(scdb_st_meta_at(f, i, &k, &v), SCDB_OK);
        assert_string_equal(k, keys[i]);
    }
    assert_string_equal(v, "last");
    assert_int_equal(scdb_st_meta_at(f, 4, &k, &v), SCDB_ERANGE);
    assert_int_equal(scdb_st_meta_at(f, -1, &k, &v), SCDB_ERANGE);
    assert_int_equal(scdb_st_meta_at(f, 0, NULL, &v), SCDB_EINVAL);
    assert_int_equal(scdb_st_meta_at(NULL, 0, &k, &v), SCDB_EINVAL);
    scdb_st_close(&f);
    free(b);
}

/* -------------------------------------------------------- valid reading */

static void test_valid_buffer(void **state)
{
    (void)state;
    /* JSON order differs from data order; a gap at [8,16); a scalar; a
     * zero-size tensor; an unknown field. */
    const char *json =
        "{\"b\":{\"dtype\":\"I32\",\"shape\":[2,3],\"data_offsets\":[16,40]},"
        "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[40,44]},"
        "\"z\":{\"dtype\":\"BF16\",\"shape\":[3,0,2],\"data_offsets\":[44,44]},"
        "\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8],\"extra\":1}}";
    size_t len;
    uint8_t *b = mk(json, 48, &len);
    const uint8_t *data = b + 8 + strlen(json);
    scdb_st_file *f = NULL;
    char eb[64] = "junk";
    assert_int_equal(scdb_st_open_buffer(b, len, &f, eb, sizeof eb), SCDB_OK);
    assert_string_equal(eb, "");
    assert_int_equal(scdb_st_count(f), 4);

    const char *order[] = {"a", "b", "s", "z"};
    for (int i = 0; i < 4; i++)
        assert_string_equal(scdb_st_at(f, i)->name, order[i]);
    assert_null(scdb_st_at(f, -1));
    assert_null(scdb_st_at(f, 4));

    const scdb_st_tensor *t = scdb_st_find(f, "b");
    assert_non_null(t);
    assert_int_equal(t->dtype, SCDB_I32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->shape[2], 0);
    assert_int_equal(t->nbytes, 24);
    assert_ptr_equal(t->data, data + 16);              /* zero-copy */

    t = scdb_st_find(f, "s");
    assert_int_equal(t->ndim, 0);
    assert_int_equal(t->nbytes, 4);
    assert_ptr_equal(t->data, data + 40);

    t = scdb_st_find(f, "z");
    assert_int_equal(t->ndim, 3);
    assert_int_equal(t->nbytes, 0);

    t = scdb_st_find(f, "a");
    assert_int_equal(t->dtype, SCDB_F16);
    assert_ptr_equal(t->data, data);
    assert_int_equal(((const uint8_t *)t->data)[7], 7);

    assert_null(scdb_st_find(f, "c"));
    assert_null(scdb_st_find(f, ""));
    assert_null(scdb_st_find(f, NULL));
    assert_null(scdb_st_find(NULL, "a"));
    scdb_st_close(&f);
    free(b);
}

static void test_expect(void **state)
{
    (void)state;
    const char *json = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                       "\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[24,28]}}";
    size_t len;
    uint8_t *b = mk(json, 28, &len);
    scdb_st_file *f = NULL;
    assert_int_equal(scdb_st_open_buffer(b, len, &f, NULL, 0), SCDB_OK);

    const scdb_st_tensor *t = NULL;
    char eb[256];
    int64_t ok[2] = {2, 3}, swapped[2] = {3, 2}, three[3] = {2, 3, 1};
    assert_int_equal(scdb_st_expect(f, "w", SCDB_F32, 2, ok, &t, eb, sizeof eb), SCDB_OK);
    assert_non_null(t);
    assert_string_equal(t->name, "w");
    assert_int_equal(scdb_st_expect(f, "w", SCDB_F32, 2, ok, NULL, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_expect(f, "s", SCDB_I32, 0, NULL, &t, eb, sizeof eb), SCDB_OK);

    assert_int_equal(scdb_st_expect(f, "x", SCDB_F32, 2, ok, &t, eb, sizeof eb), SCDB_ENOTFOUND);
    assert_null(t);
    assert_non_null(strstr(eb, "'x' not found"));
    assert_int_equal(scdb_st_expect(f, "w", SCDB_F16, 2, ok, &t, eb, sizeof eb), SCDB_EDTYPE);
    assert_non_null(strstr(eb, "expected dtype F16, file has F32"));
    assert_int_equal(scdb_st_expect(f, "w", SCDB_F32, 2, swapped, &t, eb, sizeof eb), SCDB_ESHAPE);
    assert_non_null(strstr(eb, "expected shape [3, 2], file has [2, 3]"));
    assert_int_equal(scdb_st_expect(f, "w", SCDB_F32, 3, three, &t, eb, sizeof eb), SCDB_ESHAPE);
    assert_int_equal(scdb_st_expect(f, "w", SCDB_F32, 1, ok, &t, eb, sizeof eb), SCDB_ESHAPE);
    assert_int_equal(scdb_st_expect(f, "s", SCDB_I32, 1, ok, &t, eb, sizeof eb), SCDB_ESHAPE);
    assert_non_null(strstr(eb, "file has []"));
    /* bad arguments */
    assert_int_equal(scdb_st_expect(f, "w", SCDB_F32, 2, NULL, &t, eb, sizeof eb), SCDB_EINVAL);
    assert_int_equal(scdb_st_expect(f, "w", SCDB_F32, -1, ok, &t, eb, sizeof eb), SCDB_EINVAL);
    assert_int_equal(scdb_st_expect(f, "w", SCDB_F32, 9, ok, &t, eb, sizeof eb), SCDB_EINVAL);
    assert_int_equal(scdb_st_expect(NULL, "w", SCDB_F32, 2, ok, &t, eb, sizeof eb), SCDB_EINVAL);
    assert_int_equal(scdb_st_expect(f, NULL, SCDB_F32, 2, ok, &t, eb, sizeof eb), SCDB_EINVAL);
    assert_int_equal(scdb_st_expect(f, "w", (scdb_dtype)42, 2, ok, &t, eb, 4), SCDB_EDTYPE);
    assert_int_equal(strlen(eb), 3);                     /* truncated, terminated */
    scdb_st_close(&f);
    free(b);
}

static void test_open_file_errors(void **state)
{
    (void)state;
    scdb_st_file *f = NULL;
    char eb[512];
    assert_int_equal(scdb_st_open(tpath("missing.safetensors"), &f, eb, sizeof eb),
                     SCDB_ENOTFOUND);
    assert_non_null(strstr(eb, "missing.safetensors"));
    assert_int_equal(scdb_st_open(g_dir, &f, eb, sizeof eb), SCDB_EIO);
    assert_int_equal(scdb_st_open(NULL, &f, eb, sizeof eb), SCDB_EINVAL);
    assert_int_equal(scdb_st_open(g_dir, NULL, eb, sizeof eb), SCDB_EINVAL);

    FILE *fp = fopen(tpath("empty.safetensors"), "wb");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(scdb_st_open(tpath("empty.safetensors"), &f, eb, sizeof eb), SCDB_ETRUNC);
    assert_non_null(strstr(eb, "empty.safetensors"));

    fp = fopen(tpath("short.safetensors"), "wb");
    fwrite("\x02\0\0\0", 1, 4, fp);
    fclose(fp);
    assert_int_equal(scdb_st_open(tpath("short.safetensors"), &f, eb, sizeof eb), SCDB_ETRUNC);

    /* a bad file through the mmap path names the tensor */
    size_t len;
    uint8_t *b = mk(E("\"F32\"", "[2]", "[0,12]"), 8, &len);
    fp = fopen(tpath("bad.safetensors"), "wb");
    fwrite(b, 1, len, fp);
    fclose(fp);
    free(b);
    assert_int_equal(scdb_st_open(tpath("bad.safetensors"), &f, eb, sizeof eb), SCDB_ERANGE);
    assert_non_null(strstr(eb, "'w'"));
    assert_non_null(strstr(eb, "bad.safetensors"));
    assert_null(f);
}

/* ---------------------------------------------------------------- writer */

static void test_writer_roundtrip(void **state)
{
    (void)state;
    float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
    uint16_t f16[3] = {0x3c00, 0xc000, 0x7bff};          /* odd count: 6 bytes */
    uint16_t bf16[5] = {0x3f80, 0x4000, 0xbf80, 0x0001, 0x7f80};
    int32_t i32[4] = {-1, 0, 2147483647, -2147483647 - 1};
    float scalar = 42.0f;
    int64_t s_f32[2] = {2, 3}, s_f16[1] = {3}, s_bf16[3] = {1, 1, 5}, s_i32[1] = {4};
    int64_t s_e16[2] = {0, 7}, s_ei32[2] = {3, 0};
    const char *weird = "h.0.attn \"q\"\\\t\xc3\xa9";

    scdb_st_writer *w = NULL;
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "f16", SCDB_F16, 1, s_f16, f16), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "f32", SCDB_F32, 2, s_f32, f32), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "empty16", SCDB_F16, 2, s_e16, NULL), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, weird, SCDB_BF16, 3, s_bf16, bf16), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "i32", SCDB_I32, 1, s_i32, i32), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "scalar", SCDB_F32, 0, NULL, &scalar), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "empty_i32", SCDB_I32, 2, s_ei32, i32), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "format", "pt"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "note", "old"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "note", "quote \" slash \\ nl \n \xc3\xa9"), SCDB_OK);
    TPATH(path, "rt.safetensors");
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    assert_false(file_exists(tpath("rt.safetensors.tmp")));
    scdb_st_writer_free(&w);
    assert_null(w);

    /* raw layout: header length multiple of 8, JSON padded with spaces */
    char *raw = NULL;
    size_t rawlen = 0;
    assert_int_equal(scdb_read_file(path, 1 << 20, &raw, &rawlen), SCDB_OK);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | (uint8_t)raw[i];
    assert_int_equal(n % 8, 0);
    assert_int_equal(raw[8], '{');
    size_t last = 8 + n - 1;
    while (raw[last] == ' ')
        last--;
    assert_int_equal(raw[last], '}');
    assert_true(8 + n - 1 - last < 8);
    assert_int_equal(rawlen, 8 + n + 24 + 16 + 4 + 6 + 10);

    scdb_st_file *f = NULL;
    char eb[256] = "";
    assert_int_equal(scdb_st_open(path, &f, eb, sizeof eb), SCDB_OK);
    assert_int_equal(scdb_st_count(f), 7);

    const scdb_st_tensor *t = NULL;
    assert_int_equal(scdb_st_expect(f, "f32", SCDB_F32, 2, s_f32, &t, eb, sizeof eb), SCDB_OK);
    assert_memory_equal(t->data, f32, sizeof f32);
    assert_int_equal(scdb_st_expect(f, "f16", SCDB_F16, 1, s_f16, &t, eb, sizeof eb), SCDB_OK);
    assert_memory_equal(t->data, f16, sizeof f16);
    assert_int_equal(scdb_st_expect(f, weird, SCDB_BF16, 3, s_bf16, &t, eb, sizeof eb), SCDB_OK);
    assert_memory_equal(t->data, bf16, sizeof bf16);
    assert_int_equal(scdb_st_expect(f, "i32", SCDB_I32, 1, s_i32, &t, eb, sizeof eb), SCDB_OK);
    assert_memory_equal(t->data, i32, sizeof i32);
    assert_int_equal(scdb_st_expect(f, "scalar", SCDB_F32, 0, NULL, &t, eb, sizeof eb), SCDB_OK);
    assert_memory_equal(t->data, &scalar, 4);
    assert_int_equal(scdb_st_expect(f, "empty16", SCDB_F16, 2, s_e16, &t, eb, sizeof eb), SCDB_OK);
    assert_int_equal(t->nbytes, 0);
    assert_int_equal(scdb_st_expect(f, "empty_i32", SCDB_I32, 2, s_ei32, &t, eb, sizeof eb),
                     SCDB_OK);
    assert_int_equal(t->nbytes, 0);

    /* contiguous data section, 4-byte dtypes first, every tensor aligned */
    const uint8_t *base = (const uint8_t *)scdb_st_at(f, 0)->data;
    assert_int_equal((uintptr_t)base % 8, 0);
    size_t off = 0;
    for (int i = 0; i < scdb_st_count(f); i++) {
        t = scdb_st_at(f, i);
        assert_ptr_equal(t->data, base + off);
        assert_int_equal((uintptr_t)t->data % scdb_dtype_size(t->dtype), 0);
        if (i > 0 && scdb_dtype_size(t->dtype) == 4)
            assert_int_equal(scdb_dtype_size(scdb_st_at(f, i - 1)->dtype), 4);
        off += t->nbytes;
    }
    assert_int_equal(off, 60);
    /* the mapped bytes are the file's bytes */
    assert_memory_equal(base, raw + 8 + n, 60);

    assert_int_equal(scdb_st_meta_count(f), 2);
    assert_string_equal(scdb_st_meta(f, "format"), "pt");
    assert_string_equal(scdb_st_meta(f, "note"), "quote \" slash \\ nl \n \xc3\xa9");
    scdb_st_close(&f);
    free(raw);
}

static void test_writer_empty_and_overwrite(void **state)
{
    (void)state;
    TPATH(path, "ow.safetensors");
    scdb_st_writer *w = NULL;
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);     /* no tensors */
    scdb_st_file *f = NULL;
    assert_int_equal(scdb_st_open(path, &f, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_count(f), 0);
    assert_int_equal(scdb_st_meta_count(f), 0);
    scdb_st_close(&f);

    /* writing again replaces the file; an open mapping keeps the old bytes */
    int32_t v1[2] = {1, 2}, v2[3] = {7, 8, 9};
    int64_t s2[1] = {2}, s3[1] = {3};
    assert_int_equal(scdb_st_writer_add(w, "v", SCDB_I32, 1, s2, v1), SCDB_OK);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_file *old = NULL;
    assert_int_equal(scdb_st_open(path, &old, NULL, 0), SCDB_OK);
    scdb_st_writer_free(&w);

    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "v", SCDB_I32, 1, s3, v2), SCDB_OK);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    assert_int_equal(scdb_st_open(path, &f, NULL, 0), SCDB_OK);
    const scdb_st_tensor *t = NULL;
    assert_int_equal(scdb_st_expect(f, "v", SCDB_I32, 1, s3, &t, NULL, 0), SCDB_OK);
    assert_memory_equal(t->data, v2, sizeof v2);
    assert_int_equal(scdb_st_expect(old, "v", SCDB_I32, 1, s2, &t, NULL, 0), SCDB_OK);
    assert_memory_equal(t->data, v1, sizeof v1);
    scdb_st_close(&old);
    scdb_st_close(&f);

    /* a missing directory: error (logged; silenced here), nothing created */
    scdb_log_level lvl = scdb_log_get_level();
    scdb_log_set_level(SCDB_LOG_OFF);
    assert_int_equal(scdb_st_writer_write(w, tpath("nodir/x.safetensors")), SCDB_ENOTFOUND);
    scdb_log_set_level(lvl);
    assert_false(file_exists(tpath("nodir")));
    assert_int_equal(scdb_st_writer_write(w, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_write(w, ""), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_write(NULL, path), SCDB_EINVAL);
    scdb_st_writer_free(&w);
}

static void test_writer_validation(void **state)
{
    (void)state;
    scdb_st_writer *w = NULL;
    float d[4] = {0};
    int64_t s[SCDB_ST_MAX_DIMS + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    int64_t neg[2] = {2, -1}, big[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    int64_t huge[1] = {INT64_C(1) << 53}, zero_big[3] = {0, INT64_C(1) << 52, INT64_C(1) << 52};
    int64_t four[1] = {4};

    assert_int_equal(scdb_st_writer_new(NULL), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, NULL, SCDB_F32, 1, four, d), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_add(w, "", SCDB_F32, 1, four, d), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_add(w, "__metadata__", SCDB_F32, 1, four, d), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_add(w, "bad\xff", SCDB_F32, 1, four, d), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_add(w, "overlong\xc0\xaf", SCDB_F32, 1, four, d), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_add(w, "surrogate\xed\xa0\x80", SCDB_F32, 1, four, d),
                     SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_add(w, "cut\xe2\x82", SCDB_F32, 1, four, d), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_add(w, "x", (scdb_dtype)SCDB_DTYPE_COUNT, 1, four, d),
                     SCDB_EDTYPE);
    assert_int_equal(scdb_st_writer_add(w, "x", (scdb_dtype)-1, 1, four, d), SCDB_EDTYPE);
    assert_int_equal(scdb_st_writer_add(w, "x", SCDB_F32, SCDB_ST_MAX_DIMS + 1, s, d), SCDB_ESHAPE);
    assert_int_equal(scdb_st_writer_add(w, "x", SCDB_F32, -1, s, d), SCDB_ESHAPE);
    assert_int_equal(scdb_st_writer_add(w, "x", SCDB_F32, 2, neg, d), SCDB_ESHAPE);
    assert_int_equal(scdb_st_writer_add(w, "x", SCDB_F32, 2, big, d), SCDB_ESHAPE);
    assert_int_equal(scdb_st_writer_add(w, "x", SCDB_F32, 1, huge, d), SCDB_ESHAPE);
    assert_int_equal(scdb_st_writer_add(w, "x", SCDB_F32, 1, NULL, d), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_add(w, "x", SCDB_F32, 1, four, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_add(NULL, "x", SCDB_F32, 1, four, d), SCDB_EINVAL);
    /* valid: 8 dims, 3-byte UTF-8, zero size with huge other dims */
    assert_int_equal(scdb_st_writer_add(w, "x", SCDB_F32, SCDB_ST_MAX_DIMS, s, d), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "\xe2\x82\xac", SCDB_F32, 1, four, d), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "z", SCDB_F32, 3, zero_big, NULL), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "x", SCDB_I32, 1, four, d), SCDB_EINVAL);  /* dup */
    assert_int_equal(scdb_st_writer_meta(w, NULL, "v"), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_meta(w, "k", NULL), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_meta(w, "k\xff", "v"), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_meta(w, "k", "v\xff"), SCDB_EINVAL);
    assert_int_equal(scdb_st_writer_meta(NULL, "k", "v"), SCDB_EINVAL);

    TPATH(path, "val.safetensors");
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
    scdb_st_file *f = NULL;
    assert_int_equal(scdb_st_open(path, &f, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_count(f), 3);
    assert_int_equal(scdb_st_expect(f, "z", SCDB_F32, 3, zero_big, NULL, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_expect(f, "\xe2\x82\xac", SCDB_F32, 1, four, NULL, NULL, 0), SCDB_OK);
    scdb_st_close(&f);
}

static void test_null_safety(void **state)
{
    (void)state;
    scdb_st_file *f = NULL;
    scdb_st_close(NULL);
    scdb_st_close(&f);
    scdb_st_writer *w = NULL;
    scdb_st_writer_free(NULL);
    scdb_st_writer_free(&w);
    assert_int_equal(scdb_st_count(NULL), 0);
    assert_int_equal(scdb_st_meta_count(NULL), 0);
    assert_null(scdb_st_at(NULL, 0));
    assert_null(scdb_st_meta(NULL, "k"));
}

/* --------------------------------------------------------------- garbage */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;   /* scdb_xorshift64 */

/* Open buf; if it is accepted, every tensor must lie inside buf. */
static scdb_err open_must_not_crash(const uint8_t *buf, size_t len)
{
    scdb_st_file *f = NULL;
    char eb[128];
    scdb_err rc = scdb_st_open_buffer(buf, len, &f, eb, sizeof eb);
    if (rc != SCDB_OK) {
        assert_null(f);
        assert_true(rc > SCDB_OK && rc < SCDB_ERR_COUNT);
        return rc;
    }
    for (int i = 0; i < scdb_st_count(f); i++) {
        const scdb_st_tensor *t = scdb_st_at(f, i);
        const uint8_t *p = t->data;
        assert_true(p >= buf + 8 && p + t->nbytes <= buf + len);
        assert_ptr_equal(scdb_st_find(f, t->name), t);
        volatile uint8_t sink = 0;
        for (size_t k = 0; k < t->nbytes; k++)
            sink ^= p[k];
        (void)sink;
    }
    scdb_st_close(&f);
    return rc;
}

static void test_garbage_random(void **state)
{
    (void)state;
    for (size_t len = 0; len < 600; len++) {
        for (int rep = 0; rep < 8; rep++) {
            uint8_t *b = malloc(len ? len : 1);
            for (size_t i = 0; i < len; i++)
                b[i] = (uint8_t)scdb_xorshift64(&g_rng);
            /* half the time, a plausible header length so JSON gets parsed */
            if (len >= 8 && (rep & 1)) {
                uint64_t n = scdb_xorshift64(&g_rng) % (len - 7);
                for (int i = 0; i < 8; i++)
                    b[i] = (uint8_t)(n >> (8 * i));
                if (rep & 2 && n > 0)
                    b[8] = '{';
            }
            open_must_not_crash(b, len);
            free(b);
        }
    }
}

/* Token soup: random sequences of JSON fragments that look like headers. */
static void test_garbage_json_tokens(void **state)
{
    (void)state;
    static const char *tok[] = {
        "{", "}", "[", "]", ",", ":", "\"a\"", "\"b\"", "\"dtype\"", "\"shape\"",
        "\"data_offsets\"", "\"__metadata__\"", "\"F32\"", "\"F16\"", "\"BF16\"", "\"I32\"",
        "0", "1", "2", "4", "8", "16", "-1", "1.5", "1e999", "9007199254740993", "null",
        "true", " ", "\"\\u0000\"", "\"\\ud800\"", "\"", "\\",
    };
    char json[512];
    for (int iter = 0; iter < 30000; iter++) {
        size_t jl = 0;
        int ntok = (int)(scdb_xorshift64(&g_rng) % 40);
        if (iter % 2)
            jl += (size_t)snprintf(json, sizeof json, "{\"t\":{\"dtype\":");
        for (int k = 0; k < ntok; k++) {
            const char *s = tok[scdb_xorshift64(&g_rng) % SCDB_ARRAY_LEN(tok)];
            size_t sl = strlen(s);
            if (jl + sl >= sizeof json)
                break;
            memcpy(json + jl, s, sl);
            jl += sl;
        }
        size_t dlen = scdb_xorshift64(&g_rng) % 24, len;
        uint8_t *b = mk_raw(jl, json, jl, dlen, &len);
        open_must_not_crash(b, len);
        free(b);
    }
}

/* Mutations of a valid written file: byte flips, truncation, header length. */
static void test_garbage_mutations(void **state)
{
    (void)state;
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[3] = {1, 2, 3};
    int64_t sa[2] = {2, 3}, sh[1] = {3};
    scdb_st_writer *w = NULL;
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "a", SCDB_F32, 2, sa, a), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "h", SCDB_F16, 1, sh, h), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "k", "v"), SCDB_OK);
    TPATH(path, "mut.safetensors");
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
    char *orig = NULL;
    size_t olen = 0;
    assert_int_equal(scdb_read_file(path, 1 << 20, &orig, &olen), SCDB_OK);
    assert_int_equal(open_must_not_crash((const uint8_t *)orig, olen), SCDB_OK);

    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = olen;
        if (iter % 3 == 0)
            len = scdb_xorshift64(&g_rng) % (olen + 1);            /* truncate */
        uint8_t *b = malloc(len ? len : 1);
        memcpy(b, orig, len);
        int flips = 1 + (int)(scdb_xorshift64(&g_rng) % 4);
        for (int k = 0; k < flips && len > 0; k++) {
            size_t at = scdb_xorshift64(&g_rng) % len;
            if (scdb_xorshift64(&g_rng) % 2)
                b[at] ^= (uint8_t)(1u << (scdb_xorshift64(&g_rng) % 8));
            else
                b[at] = (uint8_t)"0123456789{}[]\",:-. e"[scdb_xorshift64(&g_rng) % 21];
        }
        if (open_must_not_crash(b, len) == SCDB_OK)
            accepted++;
        else
            rejected++;
        free(b);
    }
    /* flips in the data section keep the file valid; most others break it */
    assert_true(accepted > 100);
    assert_true(rejected > 100);
    free(orig);
}

/* ------------------------------------------------------- fault injection */

static void cjson_hooks_faulty(void)
{
    cJSON_Hooks hooks = {.malloc_fn = __wrap_malloc, .free_fn = free};
    cJSON_InitHooks(&hooks);
}

static void test_alloc_fail_open(void **state)
{
    (void)state;
    const char *json = "{\"__metadata__\":{\"k\":\"v\",\"k2\":\"v2\"},"
                       "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t len;
    uint8_t *b = mk(json, 16, &len);
    TPATH(path, "fault.safetensors");
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b, 1, len, fp), len);
    fclose(fp);

    cjson_hooks_faulty();
    for (int use_file = 0; use_file < 2; use_file++) {
        int injected = 0;
        for (long n = 0;; n++) {
            scdb_st_file *f = NULL;
            fault_arm(n);
            scdb_err rc = use_file ? scdb_st_open(path, &f, NULL, 0)
                                   : scdb_st_open_buffer(b, len, &f, NULL, 0);
            fault_disarm();
            if (!g_failed) {
                assert_int_equal(rc, SCDB_OK);
                assert_int_equal(scdb_st_count(f), 2);
                assert_string_equal(scdb_st_meta(f, "k2"), "v2");
                assert_non_null(scdb_st_find(f, "a"));
                scdb_st_close(&f);
                break;
            }
            injected++;
            /* cJSON reports its own allocation failures as parse errors */
            if (rc != SCDB_ENOMEM && rc != SCDB_EFORMAT)
                fail_msg("allocation %ld failed: got %s", n, scdb_strerror(rc));
            assert_null(f);
            assert_true(n < 10000);
        }
        assert_true(injected > 5);
    }
    cJSON_InitHooks(NULL);
    free(b);
}

static void test_alloc_fail_writer(void **state)
{
    (void)state;
    float a[4] = {1, 2, 3, 4};
    uint16_t h[2] = {5, 6};
    int64_t s4[1] = {4}, s2[1] = {2};
    TPATH(path, "fault_w.safetensors");

    cjson_hooks_faulty();
    int injected = 0;
    for (long n = 0;; n++) {
        scdb_st_writer *w = NULL;
        unlink(path);
        fault_arm(n);
        scdb_err rc = scdb_st_writer_new(&w);
        if (rc == SCDB_OK)
            rc = scdb_st_writer_add(w, "h", SCDB_F16, 1, s2, h);
        if (rc == SCDB_OK)
            rc = scdb_st_writer_add(w, "a", SCDB_F32, 1, s4, a);
        if (rc == SCDB_OK)
            rc = scdb_st_writer_meta(w, "k", "v");
        if (rc == SCDB_OK)
            rc = scdb_st_writer_meta(w, "k", "v2");
        if (rc == SCDB_OK)
            rc = scdb_st_writer_write(w, path);
        fault_disarm();
        scdb_st_writer_free(&w);
        assert_false(file_exists(tpath("fault_w.safetensors.tmp")));
        if (!g_failed) {
            assert_int_equal(rc, SCDB_OK);
            break;
        }
        injected++;
        if (rc != SCDB_ENOMEM)
            fail_msg("allocation %ld failed: got %s", n, scdb_strerror(rc));
        assert_false(file_exists(path));
        assert_true(n < 10000);
    }
    assert_true(injected > 5);
    cJSON_InitHooks(NULL);

    scdb_st_file *f = NULL;
    assert_int_equal(scdb_st_open(path, &f, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_st_count(f), 2);
    assert_string_equal(scdb_st_meta(f, "k"), "v2");
    scdb_st_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trunc_short_file),
        cmocka_unit_test(test_trunc_header),
        cmocka_unit_test(test_header_too_big),
        cmocka_unit_test(test_json_invalid),
        cmocka_unit_test(test_json_not_object),
        cmocka_unit_test(test_entry_not_object),
        cmocka_unit_test(test_missing_fields),
        cmocka_unit_test(test_ill_typed_fields),
        cmocka_unit_test(test_bad_numbers),
        cmocka_unit_test(test_too_many_dims),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_offsets_range),
        cmocka_unit_test(test_size_mismatch),
        cmocka_unit_test(test_shape_overflow),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_valid_buffer),
        cmocka_unit_test(test_expect),
        cmocka_unit_test(test_open_file_errors),
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_writer_empty_and_overwrite),
        cmocka_unit_test(test_writer_validation),
        cmocka_unit_test(test_null_safety),
        cmocka_unit_test(test_garbage_random),
        cmocka_unit_test(test_garbage_json_tokens),
        cmocka_unit_test(test_garbage_mutations),
        cmocka_unit_test(test_alloc_fail_open),
        cmocka_unit_test(test_alloc_fail_writer),
    };
    return cmocka_run_group_tests_name("schema", tests, group_setup, group_teardown);
}
