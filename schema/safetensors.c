/*
 * safetensors.c — validating, zero-copy safetensors reader and an atomic
 * writer.  The layout and every rule enforced are described in
 * safetensors.h and schema/FORMATS.md.
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_META_KEY "__metadata__"
/* JSON numbers are doubles in cJSON: integers below 2^53 are exact. */
#define ST_EXACT_LIMIT 9007199254740992.0
/* NUL bytes after the header copy: cJSON may look one byte past the length
 * it is given (cJSON issues #804, firedancer #7399). */
#define ST_HDR_PAD 8

/* ------------------------------------------------------------- reader */

typedef struct st_entry {
    scdb_st_tensor t;
    uint64_t begin, end;          /* data_offsets, relative to data section */
} st_entry;

typedef struct st_meta {
    const char *key, *val;
} st_meta;

struct scdb_st_file {
    void *map;                    /* our mmap, or NULL for a caller's buffer */
    size_t map_len;
    const uint8_t *data;          /* start of the data section */
    size_t data_len;
    int count;
    st_entry *ents;               /* sorted by (begin, end, name) */
    st_entry **by_name;           /* sorted by name, for bsearch */
    int meta_count;
    st_meta *meta;                /* sorted by key */
    char *strings;                /* arena: names, metadata keys and values */
};

/* Format a message into errbuf (if any), log it at debug level, return e. */
static scdb_err st_fail(char *errbuf, size_t errlen, scdb_err e,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static scdb_err st_fail(char *errbuf, size_t errlen, scdb_err e,
                        const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    scdb_debug("safetensors: %s", msg);
    if (errbuf && errlen)
        snprintf(errbuf, errlen, "%s", msg);
    return e;
}

static uint64_t st_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* A JSON number that must be a non-negative integer.  SCDB_EFORMAT if it is
 * not a number, negative or fractional; `too_big` if it is >= 2^53 (which a
 * double cannot hold exactly). */
static scdb_err st_uint(const cJSON *j, scdb_err too_big, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return SCDB_EFORMAT;
    double d = j->valuedouble;
    if (d != d || d < 0)
        return SCDB_EFORMAT;
    if (d >= ST_EXACT_LIMIT)            /* includes +inf from "1e999" */
        return too_big;
    uint64_t v = (uint64_t)d;
    if ((double)v != d)
        return SCDB_EFORMAT;
    *out = v;
    return SCDB_OK;
}

static bool st_mul_overflows(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return true;
    *out = a * b;
    return false;
}

/* Byte size of a tensor, order-independent: any zero dim gives 0 even if the
 * other dims would overflow.  false on overflow (of uint64 or size_t). */
static bool st_nbytes(scdb_dtype dt, int ndim, const int64_t *shape, size_t *out)
{
    uint64_t n = scdb_dtype_size(dt);
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) {
            *out = 0;
            return true;
        }
    for (int i = 0; i < ndim; i++)
        if (st_mul_overflows(n, (uint64_t)shape[i], &n))
            return false;
    if (n > SIZE_MAX)
        return false;
    *out = (size_t)n;
    return true;
}

static void st_fmt_shape(char *buf, size_t len, int ndim, const int64_t *shape)
{
    size_t used = 0;
    int w = snprintf(buf, len, "[");
    for (int i = 0; i < ndim && w >= 0 && (used += (size_t)w) < len; i++)
        w = snprintf(buf + used, len - used, i ? ", %" PRId64 : "%" PRId64, shape[i]);
    if (w >= 0 && (used += (size_t)w) < len)
        snprintf(buf + used, len - used, "]");
}

/* Validate one tensor entry and fill e (all but name and data). */
static scdb_err st_parse_entry(const cJSON *j, const char *name, size_t data_len,
                               st_entry *e, char *errbuf, size_t errlen)
{
    const cJSON *jd = NULL, *js = NULL, *jo = NULL;
    if (!cJSON_IsObject(j))
        return st_fail(errbuf, errlen, SCDB_EFORMAT,
                       "tensor '%.100s': entry is not a JSON object", name);
    for (const cJSON *c = j->child; c; c = c->next) {
        const cJSON **slot = NULL;
        if (!c->string)
            continue;
        if (!strcmp(c->string, "dtype"))
            slot = &jd;
        else if (!strcmp(c->string, "shape"))
            slot = &js;
        else if (!strcmp(c->string, "data_offsets"))
            slot = &jo;
        if (!slot)
            continue;                   /* unknown fields are ignored */
        if (*slot)
            return st_fail(errbuf, errlen, SCDB_EFORMAT,
                           "tensor '%.100s': duplicate field \"%s\"", name, c->string);
        *slot = c;
    }

    /* dtype */
    if (!jd)
        return st_fail(errbuf, errlen, SCDB_EFORMAT,
                       "tensor '%.100s': missing \"dtype\"", name);
    if (!cJSON_IsString(jd) || !jd->valuestring)
        return st_fail(errbuf, errlen, SCDB_EFORMAT,
                       "tensor '%.100s': \"dtype\" is not a string", name);
    if (scdb_dtype_parse(jd->valuestring, &e->t.dtype) != SCDB_OK)
        return st_fail(errbuf, errlen, SCDB_EDTYPE,
                       "tensor '%.100s': unknown dtype \"%.32s\" (want F32, F16, BF16 or I32)",
                       name, jd->valuestring);

    /* shape */
    if (!js)
        return st_fail(errbuf, errlen, SCDB_EFORMAT,
                       "tensor '%.100s': missing \"shape\"", name);
    if (!cJSON_IsArray(js))
        return st_fail(errbuf, errlen, SCDB_EFORMAT,
                       "tensor '%.100s': \"shape\" is not an array", name);
    int ndim = 0;
    for (const cJSON *c = js->child; c; c = c->next, ndim++) {
        uint64_t dim;
        if (ndim >= SCDB_ST_MAX_DIMS)
            return st_fail(errbuf, errlen, SCDB_EFORMAT,
                           "tensor '%.100s': more than %d dims", name, SCDB_ST_MAX_DIMS);
        scdb_err rc = st_uint(c, SCDB_ESHAPE, &dim);
        if (rc == SCDB_ESHAPE)
            return st_fail(errbuf, errlen, rc,
                           "tensor '%.100s': shape[%d] is too large (>= 2^53)", name, ndim);
        if (rc != SCDB_OK)
            return st_fail(errbuf, errlen, rc,
                           "tensor '%.100s': shape[%d] is not a non-negative integer",
                           name, ndim);
        e->t.shape[ndim] = (int64_t)dim;
    }
    e->t.ndim = ndim;
    if (!st_nbytes(e->t.dtype, ndim, e->t.shape, &e->t.nbytes))
        return st_fail(errbuf, errlen, SCDB_ESHAPE,
                       "tensor '%.100s': byte size of the shape overflows", name);

    /* data_offsets */
    if (!jo)
        return st_fail(errbuf, errlen, SCDB_EFORMAT,
                       "tensor '%.100s': missing \"data_offsets\"", name);
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return st_fail(errbuf, errlen, SCDB_EFORMAT,
                       "tensor '%.100s': \"data_offsets\" is not a [begin, end] array", name);
    uint64_t off[2];
    const cJSON *c = jo->child;
    for (int i = 0; i < 2; i++, c = c->next) {
        scdb_err rc = st_uint(c, SCDB_ERANGE, &off[i]);
        if (rc == SCDB_ERANGE)
            return st_fail(errbuf, errlen, rc,
                           "tensor '%.100s': data_offsets[%d] is past any data section",
                           name, i);
        if (rc != SCDB_OK)
            return st_fail(errbuf, errlen, rc,
                           "tensor '%.100s': data_offsets[%d] is not a non-negative integer",
                           name, i);
    }
    e->begin = off[0];
    e->end = off[1];
    if (e->begin > e->end)
        return st_fail(errbuf, errlen, SCDB_ERANGE,
                       "tensor '%.100s': data_offsets [%" PRIu64 ", %" PRIu64 "]: begin > end",
                       name, e->begin, e->end);
    if (e->end > data_len)
        return st_fail(errbuf, errlen, SCDB_ERANGE,
                       "tensor '%.100s': data_offsets [%" PRIu64 ", %" PRIu64 "] end past "
                       "the data section (%zu bytes)", name, e->begin, e->end, data_len);
    if (e->end - e->begin != e->t.nbytes) {
        char sh[128];
        st_fmt_shape(sh, sizeof sh, ndim, e->t.shape);
        return st_fail(errbuf, errlen, SCDB_ESHAPE,
                       "tensor '%.100s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                       " bytes but %s %s needs %zu", name, e->begin, e->end,
                       e->end - e->begin, scdb_dtype_name(e->t.dtype), sh, e->t.nbytes);
    }
    return SCDB_OK;
}

static int st_cmp_offset(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

static int st_cmp_name(const void *a, const void *b)
{
    return strcmp((*(st_entry *const *)a)->t.name, (*(st_entry *const *)b)->t.name);
}

static int st_cmp_name_key(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(st_entry *const *)elem)->t.name);
}

static int st_cmp_meta(const void *a, const void *b)
{
    return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

static int st_cmp_meta_key(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const st_meta *)elem)->key);
}

static char *st_arena_put(char **cursor, const char *s)
{
    size_t n = strlen(s) + 1;
    char *dst = *cursor;
    memcpy(dst, s, n);
    *cursor += n;
    return dst;
}

static bool st_is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Validate buf[0..len) and fill f (allocated, zeroed).  On failure f may
 * hold partial allocations; the caller closes it. */
static scdb_err st_parse(scdb_st_file *f, const uint8_t *buf, size_t len,
                         char *errbuf, size_t errlen)
{
    scdb_err rc = SCDB_OK;
    char *hdr = NULL;
    cJSON *root = NULL;

    if (len < 8) {
        rc = st_fail(errbuf, errlen, SCDB_ETRUNC,
                     "file is %zu bytes, shorter than the 8-byte header length", len);
        goto out;
    }
    uint64_t n = st_le64(buf);
    if (n > SCDB_ST_MAX_HEADER) {
        rc = st_fail(errbuf, errlen, SCDB_ETOOBIG,
                     "header length %" PRIu64 " exceeds the %u-byte limit",
                     n, SCDB_ST_MAX_HEADER);
        goto out;
    }
    if (n > len - 8) {
        rc = st_fail(errbuf, errlen, SCDB_ETRUNC,
                     "header length %" PRIu64 " runs past the end of the file (%zu bytes)",
                     n, len);
        goto out;
    }
    f->data = buf + 8 + n;
    f->data_len = len - 8 - (size_t)n;

    /* The header in the file is not NUL-terminated: parse a padded copy. */
    hdr = malloc((size_t)n + ST_HDR_PAD);
    if (!hdr) {
        rc = st_fail(errbuf, errlen, SCDB_ENOMEM, "out of memory copying the header");
        goto out;
    }
    memcpy(hdr, buf + 8, (size_t)n);
    memset(hdr + n, 0, ST_HDR_PAD);

    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, 0);
    if (!root) {
        long at = (end && end >= hdr && end <= hdr + n) ? (long)(end - hdr) : 0;
        rc = st_fail(errbuf, errlen, SCDB_EFORMAT,
                     "header is not valid JSON (near header byte %ld)", at);
        goto out;
    }
    for (const char *p = end; p && p < hdr + n; p++)
        if (!st_is_json_space(*p)) {
            rc = st_fail(errbuf, errlen, SCDB_EFORMAT,
                         "unexpected bytes after the JSON object at header byte %ld",
                         (long)(p - hdr));
            goto out;
        }
    if (!cJSON_IsObject(root)) {
        rc = st_fail(errbuf, errlen, SCDB_EFORMAT, "header is not a JSON object");
        goto out;
    }

    /* Pass 1: count entries and string bytes; check __metadata__. */
    const cJSON *jm = NULL;
    size_t nt = 0, nm = 0, strbytes = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (!c->string) {
            rc = st_fail(errbuf, errlen, SCDB_EFORMAT, "header entry without a name");
            goto out;
        }
        if (!strcmp(c->string, ST_META_KEY)) {
            if (jm) {
                rc = st_fail(errbuf, errlen, SCDB_EFORMAT, "duplicate \"__metadata__\"");
                goto out;
            }
            jm = c;
            continue;
        }
        nt++;
        strbytes += strlen(c->string) + 1;
    }
    if (jm) {
        if (!cJSON_IsObject(jm)) {
            rc = st_fail(errbuf, errlen, SCDB_EFORMAT, "\"__metadata__\" is not an object");
            goto out;
        }
        for (const cJSON *c = jm->child; c; c = c->next) {
            if (!c->string || !cJSON_IsString(c) || !c->valuestring) {
                rc = st_fail(errbuf, errlen, SCDB_EFORMAT,
                             "\"__metadata__\" value for key '%.100s' is not a string",
                             c->string ? c->string : "");
                goto out;
            }
            nm++;
            strbytes += strlen(c->string) + 1 + strlen(c->valuestring) + 1;
        }
    }
    if (nt > INT_MAX || nm > INT_MAX) {
        rc = st_fail(errbuf, errlen, SCDB_ETOOBIG, "too many header entries");
        goto out;
    }

    f->ents = calloc(nt ? nt : 1, sizeof *f->ents);
    f->by_name = calloc(nt ? nt : 1, sizeof *f->by_name);
    f->meta = calloc(nm ? nm : 1, sizeof *f->meta);
    f->strings = malloc(strbytes ? strbytes : 1);
    if (!f->ents || !f->by_name || !f->meta || !f->strings) {
        rc = st_fail(errbuf, errlen, SCDB_ENOMEM, "out of memory indexing %zu tensors", nt);
        goto out;
    }

    /* Pass 2: validate and record each tensor. */
    char *cursor = f->strings;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (c == jm)
            continue;
        st_entry *e = &f->ents[f->count];
        e->t.name = st_arena_put(&cursor, c->string);
        rc = st_parse_entry(c, e->t.name, f->data_len, e, errbuf, errlen);
        if (rc != SCDB_OK)
            goto out;
        e->t.data = f->data + e->begin;
        f->count++;
    }
    if (jm) {
        for (const cJSON *c = jm->child; c; c = c->next) {
            st_meta *m = &f->meta[f->meta_count++];
            m->key = st_arena_put(&cursor, c->string);
            m->val = st_arena_put(&cursor, c->valuestring);
        }
        qsort(f->meta, (size_t)f->meta_count, sizeof *f->meta, st_cmp_meta);
        for (int i = 1; i < f->meta_count; i++)
            if (!strcmp(f->meta[i - 1].key, f->meta[i].key)) {
                rc = st_fail(errbuf, errlen, SCDB_EFORMAT,
                             "duplicate \"__metadata__\" key '%.100s'", f->meta[i].key);
                goto out;
            }
    }

    /* Order by data offset; index by name; reject duplicates and overlaps. */
    qsort(f->ents, (size_t)f->count, sizeof *f->ents, st_cmp_offset);
    for (int i = 0; i < f->count; i++)
        f->by_name[i] = &f->ents[i];
    qsort(f->by_name, (size_t)f->count, sizeof *f->by_name, st_cmp_name);
    for (int i = 1; i < f->count; i++)
        if (!strcmp(f->by_name[i - 1]->t.name, f->by_name[i]->t.name)) {
            rc = st_fail(errbuf, errlen, SCDB_EFORMAT,
                         "duplicate tensor name '%.100s'", f->by_name[i]->t.name);
            goto out;
        }
    const st_entry *widest = NULL;      /* non-empty entry with the largest end */
    for (int i = 0; i < f->count; i++) {
        const st_entry *e = &f->ents[i];
        if (e->begin == e->end)
            continue;                    /* empty ranges overlap nothing */
        if (widest && e->begin < widest->end) {
            rc = st_fail(errbuf, errlen, SCDB_EOVERLAP,
                         "tensors '%.100s' [%" PRIu64 ", %" PRIu64 ") and '%.100s' [%"
                         PRIu64 ", %" PRIu64 ") overlap", widest->t.name, widest->begin,
                         widest->end, e->t.name, e->begin, e->end);
            goto out;
        }
        if (!widest || e->end > widest->end)
            widest = e;
    }

out:
    cJSON_Delete(root);
    free(hdr);
    return rc;
}

scdb_err scdb_st_open_buffer(const void *buf, size_t len, scdb_st_file **out,
                             char *errbuf, size_t errlen)
{
    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (!out || (!buf && len))
        return st_fail(errbuf, errlen, SCDB_EINVAL, "NULL argument");
    *out = NULL;
    scdb_st_file *f = calloc(1, sizeof *f);
    if (!f)
        return st_fail(errbuf, errlen, SCDB_ENOMEM, "out of memory");
    scdb_err rc = st_parse(f, buf ? buf : (const void *)"", len, errbuf, errlen);
    if (rc != SCDB_OK) {
        scdb_st_close(&f);
        return rc;
    }
    *out = f;
    return SCDB_OK;
}

scdb_err scdb_st_open(const char *path, scdb_st_file **out, char *errbuf, size_t errlen)
{
    scdb_err rc = SCDB_OK;
    scdb_st_file *f = NULL;
    int fd = -1;

    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (!path || !out)
        return st_fail(errbuf, errlen, SCDB_EINVAL, "NULL argument");
    *out = NULL;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        rc = st_fail(errbuf, errlen, (err == ENOENT || err == ENOTDIR) ? SCDB_ENOTFOUND
                                                                       : SCDB_ESYS,
                     "%.200s: open: %s", path, strerror(err));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = st_fail(errbuf, errlen, SCDB_ESYS, "%.200s: fstat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = st_fail(errbuf, errlen, SCDB_EIO, "%.200s: not a regular file", path);
        goto fail;
    }
    f = calloc(1, sizeof *f);
    if (!f) {
        rc = st_fail(errbuf, errlen, SCDB_ENOMEM, "out of memory");
        goto fail;
    }
    size_t len = (size_t)st.st_size;
    if (len > 0) {                       /* mmap of 0 bytes fails; parse "" instead */
        void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int err = errno;
            rc = st_fail(errbuf, errlen, err == ENOMEM ? SCDB_ENOMEM : SCDB_ESYS,
                         "%.200s: mmap of %zu bytes: %s", path, len, strerror(err));
            goto fail;
        }
        f->map = map;
        f->map_len = len;
    }
    close(fd);
    fd = -1;

    char msg[400] = "";
    rc = st_parse(f, f->map ? f->map : (const void *)"", len, msg, sizeof msg);
    if (rc != SCDB_OK) {
        st_fail(errbuf, errlen, rc, "%.200s: %s", path, msg);
        goto fail;
    }
    *out = f;
    return SCDB_OK;

fail:
    if (fd >= 0)
        close(fd);
    scdb_st_close(&f);
    return rc;
}

void scdb_st_close(scdb_st_file **pf)
{
    if (!pf || !*pf)
        return;
    scdb_st_file *f = *pf;
    if (f->map)
        munmap(f->map, f->map_len);
    free(f->ents);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    free(f);
    *pf = NULL;
}

int scdb_st_count(const scdb_st_file *f)
{
    return f ? f->count : 0;
}

const scdb_st_tensor *scdb_st_at(const scdb_st_file *f, int i)
{
    if (!f || i < 0 || i >= f->count)
        return NULL;
    return &f->ents[i].t;
}

const scdb_st_tensor *scdb_st_find(const scdb_st_file *f, const char *name)
{
    if (!f || !name || f->count == 0)
        return NULL;
    st_entry *const *hit = bsearch(name, f->by_name, (size_t)f->count,
                                   sizeof *f->by_name, st_cmp_name_key);
    return hit ? &(*hit)->t : NULL;
}

scdb_err scdb_st_expect(const scdb_st_file *f, const char *name, scdb_dtype dt,
                        int ndim, const int64_t *shape,
                        const scdb_st_tensor **out, char *errbuf, size_t errlen)
{
    if (errbuf && errlen)
        errbuf[0] = '\0';
    if (out)
        *out = NULL;
    if (!f || !name || ndim < 0 || ndim > SCDB_ST_MAX_DIMS || (!shape && ndim > 0))
        return st_fail(errbuf, errlen, SCDB_EINVAL, "invalid argument");
    const scdb_st_tensor *t = scdb_st_find(f, name);
    if (!t)
        return st_fail(errbuf, errlen, SCDB_ENOTFOUND, "tensor '%.100s' not found", name);
    if (t->dtype != dt) {
        const char *want = scdb_dtype_name(dt);
        return st_fail(errbuf, errlen, SCDB_EDTYPE,
                       "tensor '%.100s': expected dtype %s, file has %s", name,
                       want ? want : "(invalid)", scdb_dtype_name(t->dtype));
    }
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char want[128], have[128];
        st_fmt_shape(want, sizeof want, ndim, shape);
        st_fmt_shape(have, sizeof have, t->ndim, t->shape);
        return st_fail(errbuf, errlen, SCDB_ESHAPE,
                       "tensor '%.100s': expected shape %s, file has %s", name, want, have);
    }
    if (out)
        *out = t;
    return SCDB_OK;
}

const char *scdb_st_meta(const scdb_st_file *f, const char *key)
{
    if (!f || !key || f->meta_count == 0)
        return NULL;
    const st_meta *m = bsearch(key, f->meta, (size_t)f->meta_count, sizeof *f->meta,
                               st_cmp_meta_key);
    return m ? m->val : NULL;
}

int scdb_st_meta_count(const scdb_st_file *f)
{
    return f ? f->meta_count : 0;
}

scdb_err scdb_st_meta_at(const scdb_st_file *f, int i, const char **key, const char **val)
{
    if (!f || !key || !val)
        return SCDB_EINVAL;
    if (i < 0 || i >= f->meta_count)
        return SCDB_ERANGE;
    *key = f->meta[i].key;
    *val = f->meta[i].val;
    return SCDB_OK;
}

/* ------------------------------------------------------------- writer */

typedef struct st_wentry {
    char *name;
    scdb_dtype dtype;
    int ndim;
    int64_t shape[SCDB_ST_MAX_DIMS];
    size_t nbytes;
    const void *data;                /* borrowed from the caller */
} st_wentry;

typedef struct st_wmeta {
    char *key, *val;
} st_wmeta;

struct scdb_st_writer {
    st_wentry *ents;
    int count, cap;
    st_wmeta *meta;
    int meta_count, meta_cap;
};

static char *st_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF),
 * so the header is valid JSON text for strict readers. */
static bool st_utf8_ok(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        int n;
        unsigned cp, min;
        if (c < 0x80) {
            s++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1; cp = c & 0x1F; min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2; cp = c & 0x0F; min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3; cp = c & 0x07; min = 0x10000;
        } else {
            return false;
        }
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80)
                return false;            /* also stops at the NUL */
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        s += n + 1;
    }
    return true;
}

scdb_err scdb_st_writer_new(scdb_st_writer **out)
{
    if (!out)
        return SCDB_EINVAL;
    *out = calloc(1, sizeof **out);
    return *out ? SCDB_OK : SCDB_ENOMEM;
}

void scdb_st_writer_free(scdb_st_writer **pw)
{
    if (!pw || !*pw)
        return;
    scdb_st_writer *w = *pw;
    for (int i = 0; i < w->count; i++)
        free(w->ents[i].name);
    for (int i = 0; i < w->meta_count; i++) {
        free(w->meta[i].key);
        free(w->meta[i].val);
    }
    free(w->ents);
    free(w->meta);
    free(w);
    *pw = NULL;
}

/* Make room for one more element in a growable array. */
static scdb_err st_grow(void **arr, int *cap, int count, size_t elem)
{
    if (count < *cap)
        return SCDB_OK;
    if (*cap > INT_MAX / 2)
        return SCDB_ENOMEM;             /* over a billion entries */
    int ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p)
        return SCDB_ENOMEM;
    *arr = p;
    *cap = ncap;
    return SCDB_OK;
}

scdb_err scdb_st_writer_add(scdb_st_writer *w, const char *name, scdb_dtype dt,
                            int ndim, const int64_t *shape, const void *data)
{
    if (!w || !name || !*name || !strcmp(name, ST_META_KEY) || !st_utf8_ok(name))
        return SCDB_EINVAL;
    if (scdb_dtype_size(dt) == 0)
        return SCDB_EDTYPE;
    if (ndim < 0 || ndim > SCDB_ST_MAX_DIMS)
        return SCDB_ESHAPE;
    if (ndim > 0 && !shape)
        return SCDB_EINVAL;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || (double)shape[i] >= ST_EXACT_LIMIT)
            return SCDB_ESHAPE;
    size_t nbytes;
    if (!st_nbytes(dt, ndim, shape, &nbytes))
        return SCDB_ESHAPE;
    if (nbytes > 0 && !data)
        return SCDB_EINVAL;
    for (int i = 0; i < w->count; i++)
        if (!strcmp(w->ents[i].name, name))
            return SCDB_EINVAL;

    scdb_err rc = st_grow((void **)&w->ents, &w->cap, w->count, sizeof *w->ents);
    if (rc != SCDB_OK)
        return rc;
    char *copy = st_strdup(name);
    if (!copy)
        return SCDB_ENOMEM;
    st_wentry *e = &w->ents[w->count++];
    memset(e, 0, sizeof *e);
    e->name = copy;
    e->dtype = dt;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        e->shape[i] = shape[i];
    e->nbytes = nbytes;
    e->data = data;
    return SCDB_OK;
}

scdb_err scdb_st_writer_meta(scdb_st_writer *w, const char *key, const char *value)
{
    if (!w || !key || !value || !st_utf8_ok(key) || !st_utf8_ok(value))
        return SCDB_EINVAL;
    char *v = st_strdup(value);
    if (!v)
        return SCDB_ENOMEM;
    for (int i = 0; i < w->meta_count; i++)
        if (!strcmp(w->meta[i].key, key)) {
            free(w->meta[i].val);
            w->meta[i].val = v;
            return SCDB_OK;
        }
    char *k = st_strdup(key);
    scdb_err rc = k ? st_grow((void **)&w->meta, &w->meta_cap, w->meta_count,
                              sizeof *w->meta)
                    : SCDB_ENOMEM;
    if (rc != SCDB_OK) {
        free(k);
        free(v);
        return rc;
    }
    w->meta[w->meta_count].key = k;
    w->meta[w->meta_count].val = v;
    w->meta_count++;
    return SCDB_OK;
}

/* An integer array as raw JSON numbers: cJSON would print large doubles in
 * exponent notation, which strict readers reject as integers. */
static cJSON *st_json_uints(int n, const uint64_t *v)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < n; i++) {
        char num[24];
        snprintf(num, sizeof num, "%" PRIu64, v[i]);
        cJSON *item = cJSON_CreateRaw(num);
        if (!item) {
            cJSON_Delete(arr);
            return NULL;
        }
        cJSON_AddItemToArray(arr, item);
    }
    return arr;
}

/* Build the header JSON for entries in `order`, with offsets already laid
 * out.  NULL on allocation failure. */
static char *st_header_json(const scdb_st_writer *w, const int *order,
                            const uint64_t *begin)
{
    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        goto out;
    if (w->meta_count) {
        cJSON *m = cJSON_AddObjectToObject(root, ST_META_KEY);
        if (!m)
            goto out;
        for (int i = 0; i < w->meta_count; i++)
            if (!cJSON_AddStringToObject(m, w->meta[i].key, w->meta[i].val))
                goto out;
    }
    for (int k = 0; k < w->count; k++) {
        const st_wentry *e = &w->ents[order[k]];
        uint64_t shape[SCDB_ST_MAX_DIMS], offs[2] = {begin[k], begin[k] + e->nbytes};
        for (int i = 0; i < e->ndim; i++)
            shape[i] = (uint64_t)e->shape[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            goto out;
        if (!cJSON_AddItemToObject(root, e->name, o)) {
            cJSON_Delete(o);
            goto out;
        }
        if (!cJSON_AddStringToObject(o, "dtype", scdb_dtype_name(e->dtype)))
            goto out;
        cJSON *js = st_json_uints(e->ndim, shape);
        if (!js)
            goto out;
        if (!cJSON_AddItemToObject(o, "shape", js)) {
            cJSON_Delete(js);
            goto out;
        }
        cJSON *jo = st_json_uints(2, offs);
        if (!jo)
            goto out;
        if (!cJSON_AddItemToObject(o, "data_offsets", jo)) {
            cJSON_Delete(jo);
            goto out;
        }
    }
    text = cJSON_PrintUnformatted(root);
out:
    cJSON_Delete(root);
    return text;
}

static scdb_err st_write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t k = write(fd, p, chunk);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return SCDB_EIO;
        p += k;
        n -= (size_t)k;
    }
    return SCDB_OK;
}

/* The directory part of path ("." if none), malloc'd. */
static char *st_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return st_strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (dir) {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    return dir;
}

/* fsync a directory so a rename in it is durable.  Best effort: some
 * filesystems refuse fsync on directories; the file itself is synced. */
static void st_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
        scdb_warn("safetensors: cannot fsync directory %s: %s", dir, strerror(errno));
    if (fd >= 0)
        close(fd);
}

scdb_err scdb_st_writer_write(scdb_st_writer *w, const char *path)
{
    scdb_err rc = SCDB_OK;
    int *order = NULL;
    uint64_t *begin = NULL;
    char *json = NULL, *tmp = NULL, *dir = NULL;
    int fd = -1;
    bool tmp_exists = false;

    if (!w || !path || !*path)
        return SCDB_EINVAL;

    /* Data layout: larger elements first (aligned in an 8-aligned data
     * section), in order of addition within a size; contiguous. */
    size_t cnt = w->count ? (size_t)w->count : 1;
    order = malloc(cnt * sizeof *order);
    begin = malloc(cnt * sizeof *begin);
    if (!order || !begin) {
        rc = SCDB_ENOMEM;
        goto out;
    }
    int k = 0;
    uint64_t total = 0;
    for (size_t sz = 8; sz >= 1; sz /= 2)
        for (int i = 0; i < w->count; i++) {
            if (scdb_dtype_size(w->ents[i].dtype) != sz)
                continue;
            if (w->ents[i].nbytes > UINT64_MAX - total) {
                rc = SCDB_ETOOBIG;
                goto out;
            }
            order[k] = i;
            begin[k++] = total;
            total += w->ents[i].nbytes;
        }

    json = st_header_json(w, order, begin);
    if (!json) {
        rc = SCDB_ENOMEM;
        goto out;
    }
    size_t jlen = strlen(json);
    size_t hlen = (jlen + 7) / 8 * 8;
    if (hlen > SCDB_ST_MAX_HEADER) {
        scdb_error("safetensors: header of %zu bytes exceeds the %u-byte limit",
                   hlen, SCDB_ST_MAX_HEADER);
        rc = SCDB_ETOOBIG;
        goto out;
    }
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (uint8_t)((uint64_t)hlen >> (8 * i));

    size_t plen = strlen(path);
    tmp = malloc(plen + 5);
    dir = st_dirname(path);
    if (!tmp || !dir) {
        rc = SCDB_ENOMEM;
        goto out;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int err = errno;
        scdb_error("safetensors: open %s: %s", tmp, strerror(err));
        rc = (err == ENOENT || err == ENOTDIR) ? SCDB_ENOTFOUND : SCDB_EIO;
        goto out;
    }
    tmp_exists = true;
    static const char spaces[8] = "        ";
    rc = st_write_all(fd, prefix, sizeof prefix);
    if (rc == SCDB_OK)
        rc = st_write_all(fd, json, jlen);
    if (rc == SCDB_OK)
        rc = st_write_all(fd, spaces, hlen - jlen);
    for (int i = 0; rc == SCDB_OK && i < w->count; i++) {
        const st_wentry *e = &w->ents[order[i]];
        if (e->nbytes)
            rc = st_write_all(fd, e->data, e->nbytes);
    }
    if (rc != SCDB_OK) {
        scdb_error("safetensors: write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (fsync(fd) != 0) {
        scdb_error("safetensors: fsync %s: %s", tmp, strerror(errno));
        rc = SCDB_EIO;
        goto out;
    }
    int crc = close(fd);
    fd = -1;
    if (crc != 0) {
        scdb_error("safetensors: close %s: %s", tmp, strerror(errno));
        rc = SCDB_EIO;
        goto out;
    }
    if (rename(tmp, path) != 0) {
        scdb_error("safetensors: rename %s -> %s: %s", tmp, path, strerror(errno));
        rc = SCDB_EIO;
        goto out;
    }
    tmp_exists = false;
    st_sync_dir(dir);

out:
    if (fd >= 0)
        close(fd);
    if (tmp_exists)
        unlink(tmp);
    free(tmp);
    free(dir);
    cJSON_free(json);
    free(begin);
    free(order);
    return rc;
}
