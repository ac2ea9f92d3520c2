/* blob.c — llama.cpp's sequence state blob <-> scdb's slot-indexed KV cache
 * (the layout and the RoPE permutation: scdb_llama.h, "THE STATE BLOB").
 * No llama.cpp call here: the layout is plain bytes. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels.h"
#include "llama_int.h"

#define GGML_F32 0
#define GGML_F16 1

static size_t type_size(int t) { return t == GGML_F32 ? 4 : t == GGML_F16 ? 2 : 0; }

void ll_msg(char *errbuf, size_t errlen, const char *fmt, ...)
{
    if (!errbuf || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
}

/* Rows of n values between f32 and the layout's type.  F16 goes through
 * the CPU's F16C instructions where it has them (round to nearest even,
 * as scdb_f32_to_f16: the same bits, checked by test_llama's byte
 * comparison with llama.cpp's own blob), else the scalar conversion. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define LL_HAVE_F16C_PATH 1
__attribute__((target("avx,f16c"))) static void f16c_from_f32(const float *s, uint8_t *d, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(d + 2 * i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) {
        uint16_t h = scdb_f32_to_f16(s[i]);
        memcpy(d + 2 * i, &h, 2);
    }
}
__attribute__((target("avx,f16c"))) static void f16c_to_f32(const uint8_t *s, float *d, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i))));
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        d[i] = scdb_f16_to_f32(h);
    }
}
/* AVX and F16C from CPUID leaf 1 (ECX bits 28, 29), and the OS saving the
 * YMM registers (OSXSAVE, bit 27, then XCR0 bits 1-2): what gcc and clang
 * both compile (clang's __builtin_cpu_supports knows no "f16c"). */
static int have_f16c(void)
{
    static int have = -1;
    if (have < 0) {
        unsigned a, b, c, d;
        have = 0;
        if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27)) && (c & (1u << 28)) &&
            (c & (1u << 29))) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            have = (lo & 6u) == 6u;
        }
    }
    return have;
}
#endif

static void row_out(int type, const float *src, uint8_t *dst, size_t n)
{
    if (type == GGML_F32) {
        memcpy(dst, src, n * 4);
        return;
    }
#ifdef LL_HAVE_F16C_PATH
    if (have_f16c()) {
        f16c_from_f32(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        uint16_t h = scdb_f32_to_f16(src[i]);
        memcpy(dst + 2 * i, &h, 2);
    }
}

static void row_in(int type, const uint8_t *src, float *dst, size_t n)
{
    if (type == GGML_F32) {
        memcpy(dst, src, n * 4);
        return;
    }
#ifdef LL_HAVE_F16C_PATH
    if (have_f16c()) {
        f16c_to_f32(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = scdb_f16_to_f32(h);
    }
}

/* The RoPE permutation of one K row of kv = heads x hd values: within each
 * head, llama.cpp's dimension 2j + p holds scdb's p * hd/2 + j. */
static void to_llama_rope(const float *ours, float *llama, int kv, int hd)
{
    const int half = hd / 2;
    for (int h = 0; h < kv; h += hd)
        for (int j = 0; j < half; j++) {
            llama[h + 2 * j] = ours[h + j];
            llama[h + 2 * j + 1] = ours[h + half + j];
        }
}

static void from_llama_rope(const float *llama, float *ours, int kv, int hd)
{
    const int half = hd / 2;
    for (int h = 0; h < kv; h += hd)
        for (int j = 0; j < half; j++) {
            ours[h + j] = llama[h + 2 * j];
            ours[h + half + j] = llama[h + 2 * j + 1];
        }
}

size_t scdb_llama_blob_bytes(const scdb_llama_layout *L, int n)
{
    size_t kv = (size_t)L->n_kv_heads * L->head_dim;
    size_t b = 12 + 4 * (size_t)L->n_stream;             /* magic, seq, n_stream, counts */
    if (n <= 0)
        return b;
    b += (size_t)n * 12 + 8;                             /* cells, v_trans, n_layer */
    b += (size_t)L->n_layer * (12 + (size_t)n * kv * type_size(L->k_type));
    b += (size_t)L->n_layer * (12 + (size_t)n * kv * type_size(L->v_type));
    return b;
}

static int layout_ok(const scdb_llama_layout *L)
{
    return L && L->n_layer > 0 && L->n_kv_heads > 0 && L->head_dim > 0 && L->head_dim % 2 == 0 &&
           L->n_stream > 0 && type_size(L->k_type) && type_size(L->v_type);
}

static void put_u32(uint8_t **p, uint32_t v) { memcpy(*p, &v, 4); *p += 4; }
static void put_u64(uint8_t **p, uint64_t v) { memcpy(*p, &v, 8); *p += 8; }

static void put_elem(uint8_t **p, int type, float x)
{
    if (type == GGML_F32) {
        memcpy(*p, &x, 4);
        *p += 4;
    } else {
        uint16_t h = scdb_f32_to_f16(x);
        memcpy(*p, &h, 2);
        *p += 2;
    }
}

scdb_err scdb_llama_blob_write(const scdb_llama_layout *L, llama_seq_id seq,
                               const scdb_kv_cache *c, int n, void *dst, size_t cap, size_t *len)
{
    if (!c || !dst || !layout_ok(L) || n < 0 || n > c->n || seq < 0 ||
        (L->n_stream > 1 && seq >= L->n_stream))
        return SCDB_EINVAL;
    if (c->n_layers != L->n_layer || c->n_kv_heads != L->n_kv_heads || c->head_dim != L->head_dim)
        return SCDB_ESHAPE;
    size_t need = scdb_llama_blob_bytes(L, n);
    if (cap < need)
        return SCDB_ETOOBIG;
    const int kv = L->n_kv_heads * L->head_dim, hd = L->head_dim;
    const int strm = L->n_stream > 1 ? seq : 0;
    float *row = malloc((size_t)kv * sizeof *row);
    if (!row)
        return SCDB_ENOMEM;
    uint8_t *p = dst;
    put_u32(&p, SCDB_LLAMA_STATE_MAGIC);
    put_u32(&p, (uint32_t)seq);
    put_u32(&p, (uint32_t)L->n_stream);
    for (int s = 0; s < L->n_stream; s++) {
        if (s != strm || n == 0) {
            put_u32(&p, 0);
            continue;
        }
        put_u32(&p, (uint32_t)n);
        for (int i = 0; i < n; i++) {
            put_u32(&p, (uint32_t)c->pos[i]);
            put_u32(&p, 1);
            put_u32(&p, (uint32_t)seq);
        }
        put_u32(&p, (uint32_t)L->v_trans);
        put_u32(&p, (uint32_t)L->n_layer);
        for (int l = 0; l < L->n_layer; l++) {
            put_u32(&p, (uint32_t)L->k_type);
            put_u64(&p, (uint64_t)kv * type_size(L->k_type));
            for (int i = 0; i < n; i++) {
                const float *k = scdb_kv_k(c, l, i);
                to_llama_rope(k, row, kv, hd);
                row_out(L->k_type, row, p, (size_t)kv);
                p += (size_t)kv * type_size(L->k_type);
            }
        }
        for (int l = 0; l < L->n_layer; l++) {
            put_u32(&p, (uint32_t)L->v_type);
            if (!L->v_trans) {
                put_u64(&p, (uint64_t)kv * type_size(L->v_type));
                for (int i = 0; i < n; i++) {
                    row_out(L->v_type, scdb_kv_v(c, l, i), p, (size_t)kv);
                    p += (size_t)kv * type_size(L->v_type);
                }
            } else {
                put_u32(&p, (uint32_t)type_size(L->v_type));
                put_u32(&p, (uint32_t)kv);
                for (int d = 0; d < kv; d++)
                    for (int i = 0; i < n; i++)
                        put_elem(&p, L->v_type, scdb_kv_v(c, l, i)[d]);
            }
        }
    }
    free(row);
    if (len)
        *len = (size_t)(p - (uint8_t *)dst);
    return SCDB_OK;
}

/* A bounded reader: every read checks what is left. */
typedef struct rd {
    const uint8_t *p, *end;
} rd;

static int get_u32(rd *r, uint32_t *v)
{
    if (r->end - r->p < 4)
        return 0;
    memcpy(v, r->p, 4);
    r->p += 4;
    return 1;
}

static int get_u64(rd *r, uint64_t *v)
{
    if (r->end - r->p < 8)
        return 0;
    memcpy(v, r->p, 8);
    r->p += 8;
    return 1;
}

static float get_elem(const uint8_t *p, int type)
{
    if (type == GGML_F32) {
        float x;
        memcpy(&x, p, 4);
        return x;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return scdb_f16_to_f32(h);
}

#define NEED(cond, what)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            ll_msg(errbuf, errlen, "llama.cpp state blob truncated at byte %zu (%s)",         \
                   (size_t)(r.p - (const uint8_t *)blob), what);                              \
            return SCDB_ETRUNC;                                                               \
        }                                                                                     \
    } while (0)
#define EXPECT(cond, ...)                                                                     \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            ll_msg(errbuf, errlen, __VA_ARGS__);                                              \
            return SCDB_EFORMAT;                                                              \
        }                                                                                     \
    } while (0)

static scdb_err blob_read(const scdb_llama_layout *L, const void *blob, size_t len,
                          scdb_kv_cache *dst, float *row, char *errbuf, size_t errlen)
{
    if (dst->n_layers != L->n_layer || dst->n_kv_heads != L->n_kv_heads ||
        dst->head_dim != L->head_dim)
        return SCDB_ESHAPE;
    rd r = {blob, (const uint8_t *)blob + len};
    uint32_t magic, seq, n_stream, v_trans, n_layer;
    NEED(get_u32(&r, &magic) && get_u32(&r, &seq) && get_u32(&r, &n_stream), "header");
    EXPECT(magic == SCDB_LLAMA_STATE_MAGIC, "not a llama.cpp sequence state: magic %08x, want %08x",
           magic, SCDB_LLAMA_STATE_MAGIC);
    EXPECT(n_stream == (uint32_t)L->n_stream, "the blob has %u streams, the context %d", n_stream,
           L->n_stream);
    const int kv = L->n_kv_heads * L->head_dim, hd = L->head_dim;
    int seen = 0;
    dst->n = 0;
    for (uint32_t s = 0; s < n_stream; s++) {
        uint32_t cells;
        NEED(get_u32(&r, &cells), "cell count");
        if (!cells)
            continue;
        EXPECT(!seen, "cells of one sequence in two streams");
        seen = 1;
        if (cells > (uint32_t)dst->capacity) {
            ll_msg(errbuf, errlen, "the blob has %u cells, the cache room for %d", cells,
                   dst->capacity);
            return SCDB_ETOOBIG;
        }
        for (uint32_t i = 0; i < cells; i++) {
            uint32_t pos, nseq, sid;
            NEED(get_u32(&r, &pos) && get_u32(&r, &nseq), "cell");
            EXPECT(nseq == 1, "cell %u belongs to %u sequences, want 1", i, nseq);
            NEED(get_u32(&r, &sid), "cell's sequence");
            EXPECT((int32_t)pos >= 0, "cell %u has position %d", i, (int32_t)pos);
            dst->pos[i] = (int32_t)pos;
        }
        NEED(get_u32(&r, &v_trans) && get_u32(&r, &n_layer), "layer header");
        EXPECT(v_trans == (uint32_t)L->v_trans, "v_trans %u in the blob, %d in the layout", v_trans,
               L->v_trans);
        EXPECT(n_layer == (uint32_t)L->n_layer, "%u layers in the blob, %d in the layout", n_layer,
               L->n_layer);
        for (int l = 0; l < L->n_layer; l++) {
            uint32_t t;
            uint64_t rb;
            NEED(get_u32(&r, &t) && get_u64(&r, &rb), "K header");
            EXPECT(t == (uint32_t)L->k_type, "layer %d: K type %u, layout %d", l, t, L->k_type);
            EXPECT(rb == (uint64_t)kv * type_size(L->k_type),
                   "layer %d: K rows of %llu bytes, want %zu", l, (unsigned long long)rb,
                   (size_t)kv * type_size(L->k_type));
            NEED((size_t)(r.end - r.p) >= rb * cells, "K rows");
            for (uint32_t i = 0; i < cells; i++) {
                float *k = scdb_kv_k(dst, l, (int)i);
                row_in(L->k_type, r.p, row, (size_t)kv);
                r.p += (size_t)kv * type_size(L->k_type);
                from_llama_rope(row, k, kv, hd);
            }
        }
        for (int l = 0; l < L->n_layer; l++) {
            uint32_t t;
            NEED(get_u32(&r, &t), "V type");
            EXPECT(t == (uint32_t)L->v_type, "layer %d: V type %u, layout %d", l, t, L->v_type);
            size_t es = type_size(L->v_type);
            if (!L->v_trans) {
                uint64_t rb;
                NEED(get_u64(&r, &rb), "V row size");
                EXPECT(rb == (uint64_t)kv * es, "layer %d: V rows of %llu bytes, want %zu", l,
                       (unsigned long long)rb, (size_t)kv * es);
                NEED((size_t)(r.end - r.p) >= rb * cells, "V rows");
                for (uint32_t i = 0; i < cells; i++, r.p += (size_t)kv * es)
                    row_in(L->v_type, r.p, scdb_kv_v(dst, l, (int)i), (size_t)kv);
            } else {
                uint32_t el, ne;
                NEED(get_u32(&r, &el) && get_u32(&r, &ne), "V (transposed) header");
                EXPECT(el == es && ne == (uint32_t)kv,
                       "layer %d: transposed V of %u-byte elements x %u, want %zu x %d", l, el, ne,
                       es, kv);
                NEED((size_t)(r.end - r.p) >= (size_t)kv * cells * es, "V elements");
                for (int d = 0; d < kv; d++)
                    for (uint32_t i = 0; i < cells; i++, r.p += es)
                        scdb_kv_v(dst, l, (int)i)[d] = get_elem(r.p, L->v_type);
            }
        }
        dst->n = (int)cells;
    }
    EXPECT(r.p == r.end, "%zu bytes after the blob's last row",
           (size_t)(r.end - r.p));
    return SCDB_OK;
}

scdb_err scdb_llama_blob_read(const scdb_llama_layout *L, const void *blob, size_t len,
                              scdb_kv_cache *dst, char *errbuf, size_t errlen)
{
    if (!blob || !dst || !layout_ok(L))
        return SCDB_EINVAL;
    float *row = malloc((size_t)L->n_kv_heads * (size_t)L->head_dim * sizeof *row);
    if (!row)
        return SCDB_ENOMEM;
    scdb_err err = blob_read(L, blob, len, dst, row, errbuf, errlen);
    free(row);
    return err;
}

scdb_err ll_layout_from_blob(const void *blob, size_t len, scdb_llama_layout *L, int *stream,
                             char *errbuf, size_t errlen)
{
    const uint8_t *b = blob;
    uint32_t w[3];
    if (len < 16) {
        ll_msg(errbuf, errlen, "llama.cpp wrote a %zu-byte sequence state", len);
        return SCDB_EMISMATCH;
    }
    memcpy(w, b, 12);
    if (w[0] != SCDB_LLAMA_STATE_MAGIC || w[2] == 0 || w[2] > 65536) {
        ll_msg(errbuf, errlen, "llama.cpp's sequence state starts %08x %08x %08x, not magic %08x, "
               "sequence, stream count (release %s)", w[0], w[1], w[2], SCDB_LLAMA_STATE_MAGIC,
               SCDB_LLAMA_RELEASE);
        return SCDB_EMISMATCH;
    }
    L->n_stream = (int)w[2];
    size_t off = 12;
    for (int s = 0; s < L->n_stream; s++) {
        uint32_t cells;
        if (off + 4 > len)
            break;
        memcpy(&cells, b + off, 4);
        off += 4;
        if (!cells)
            continue;
        size_t hdr = off + (size_t)cells * 12;
        uint32_t vt, nl;
        int32_t kt, vtp = -1;
        uint64_t krow;
        if (hdr + 20 > len)
            break;
        memcpy(&vt, b + hdr, 4);
        memcpy(&nl, b + hdr + 4, 4);
        memcpy(&kt, b + hdr + 8, 4);
        memcpy(&krow, b + hdr + 12, 8);
        size_t voff = hdr + 8 + (size_t)nl * (12 + (size_t)cells * krow);
        if (krow < (uint64_t)len && voff + 4 <= len)
            memcpy(&vtp, b + voff, 4);
        if (nl != (uint32_t)L->n_layer || vt > 1) {
            ll_msg(errbuf, errlen, "llama.cpp's sequence state has %u layers and v_trans %u; the "
                   "model %d layers (release %s's layout?)", nl, vt, L->n_layer,
                   SCDB_LLAMA_RELEASE);
            return SCDB_EMISMATCH;
        }
        L->v_trans = (int)vt;
        L->k_type = kt;
        L->v_type = vtp;
        if (stream)
            *stream = s;
        if ((kt != GGML_F32 && kt != GGML_F16) || (vtp != GGML_F32 && vtp != GGML_F16)) {
            ll_msg(errbuf, errlen, "KV cache of ggml types %d / %d: only F32 and F16 caches can "
                   "be restored (llama.cpp rotates quantized caches internally)", kt, vtp);
            return SCDB_EUNSUPPORTED;
        }
        return SCDB_OK;
    }
    ll_msg(errbuf, errlen, "llama.cpp's sequence state holds no cell (release %s's layout?)",
           SCDB_LLAMA_RELEASE);
    return SCDB_EMISMATCH;
}

/* ------------------------------------------------ keep sets per head */

/* A sequence blob's header up to its sequence's cells: *cells of them at
 * *cell0 (12 bytes each), in stream *s_seq; *rp is left after them, where
 * that stream's layers begin. */
static scdb_err seq_cells(const scdb_llama_layout *L, const void *blob, rd *rp, uint32_t *cells,
                          const uint8_t **cell0, uint32_t *s_seq, char *errbuf, size_t errlen)
{
    rd r = *rp;
    uint32_t magic, sq, n_stream;
    NEED(get_u32(&r, &magic) && get_u32(&r, &sq) && get_u32(&r, &n_stream), "header");
    EXPECT(magic == SCDB_LLAMA_STATE_MAGIC && n_stream == (uint32_t)L->n_stream,
           "not a sequence state of this context's layout");
    *cells = 0;
    for (uint32_t s = 0; s < n_stream; s++) {
        uint32_t c;
        NEED(get_u32(&r, &c), "cell count");
        if (!c)
            continue;
        *cells = c;
        *s_seq = s;
        NEED((size_t)(r.end - r.p) >= (size_t)c * 12, "cells");
        *cell0 = r.p;
        r.p += (size_t)c * 12;
        break;             /* the sequence's stream: its layers follow */
    }
    EXPECT(*cells > 0, "the sequence holds no cells");
    *rp = r;
    return SCDB_OK;
}

scdb_err ll_blob_gather_heads(const scdb_llama_layout *L, const void *blob, size_t len,
                              llama_seq_id seq, const int *src, const int32_t *pos, int nk,
                              int32_t *in_pos, int in_cap, int *in_n, uint8_t *out, size_t cap,
                              size_t *out_len, char *errbuf, size_t errlen)
{
    if (!layout_ok(L) || !blob || nk < 0 || (nk && (!src || !pos || !out)) || !in_n)
        return SCDB_EINVAL;
    rd r = {blob, (const uint8_t *)blob + len};
    uint32_t v_trans, n_layer, cells = 0;
    const uint8_t *cell0 = NULL;
    uint32_t s_seq = 0;      /* the sequence's stream; the later ones follow its layers */
    const uint32_t n_stream = (uint32_t)L->n_stream;
    scdb_err err = seq_cells(L, blob, &r, &cells, &cell0, &s_seq, errbuf, errlen);
    if (err)
        return err;
    if (in_pos && cells > (uint32_t)in_cap) {
        ll_msg(errbuf, errlen, "the blob has %u cells, room for %d", cells, in_cap);
        return SCDB_ETOOBIG;
    }
    /* the caller's mapping: positions of the cells, in cell order */
    if (in_pos)
        for (uint32_t i = 0; i < cells; i++)
            memcpy(&in_pos[i], cell0 + (size_t)i * 12, 4);
    *in_n = (int)cells;
    if (!out)
        return SCDB_OK;
    NEED(get_u32(&r, &v_trans) && get_u32(&r, &n_layer), "layer header");
    EXPECT(v_trans == (uint32_t)L->v_trans && n_layer == (uint32_t)L->n_layer,
           "v_trans %u / %u layers in the blob, %d / %d in the layout", v_trans, n_layer,
           L->v_trans, L->n_layer);
    const int G = L->n_kv_heads, hd = L->head_dim, kv = G * hd;
    const size_t ks = type_size(L->k_type), vs = type_size(L->v_type);
    for (int k = 0; k < L->n_layer * G; k++)
        for (int i = 0; i < nk; i++)
            EXPECT(src[(size_t)k * nk + i] >= 0 && (uint32_t)src[(size_t)k * nk + i] < cells,
                   "set %d, slot %d: cell %d of %u", k, i, src[(size_t)k * nk + i], cells);
    size_t need = scdb_llama_blob_bytes(L, nk);
    if (cap < need)
        return SCDB_ETOOBIG;
    uint8_t *p = out;
    put_u32(&p, SCDB_LLAMA_STATE_MAGIC);
    put_u32(&p, (uint32_t)seq);
    put_u32(&p, (uint32_t)L->n_stream);
    const int strm = L->n_stream > 1 ? seq : 0;
    for (int s = 0; s < L->n_stream; s++) {
        if (s != strm || nk == 0) {
            put_u32(&p, 0);
            continue;
        }
        put_u32(&p, (uint32_t)nk);
        for (int i = 0; i < nk; i++) {
            put_u32(&p, (uint32_t)pos[i]);
            put_u32(&p, 1);
            put_u32(&p, (uint32_t)seq);
        }
        put_u32(&p, (uint32_t)L->v_trans);
        put_u32(&p, (uint32_t)L->n_layer);
        /* K: per layer a header and rows of kv elements; head g of cell i
         * is elements [g * hd, (g + 1) * hd) of its row (llama.cpp's RoPE
         * order stays within the head) */
        for (int l = 0; l < L->n_layer; l++) {
            uint32_t t;
            uint64_t rb;
            NEED(get_u32(&r, &t) && get_u64(&r, &rb), "K header");
            EXPECT(t == (uint32_t)L->k_type && rb == (uint64_t)kv * ks, "layer %d: K rows", l);
            NEED((size_t)(r.end - r.p) >= rb * cells, "K rows");
            put_u32(&p, t);
            put_u64(&p, rb);
            for (int i = 0; i < nk; i++)
                for (int g = 0; g < G; g++) {
                    int c = src[((size_t)l * G + g) * nk + i];
                    memcpy(p, r.p + (size_t)c * rb + (size_t)g * hd * ks, (size_t)hd * ks);
                    p += (size_t)hd * ks;
                }
            r.p += rb * cells;
        }
        for (int l = 0; l < L->n_layer; l++) {
            uint32_t t;
            NEED(get_u32(&r, &t), "V type");
            EXPECT(t == (uint32_t)L->v_type, "layer %d: V type %u", l, t);
            put_u32(&p, t);
            if (!L->v_trans) {
                uint64_t rb;
                NEED(get_u64(&r, &rb), "V row size");
                EXPECT(rb == (uint64_t)kv * vs, "layer %d: V rows", l);
                NEED((size_t)(r.end - r.p) >= rb * cells, "V rows");
                put_u64(&p, rb);
                for (int i = 0; i < nk; i++)
                    for (int g = 0; g < G; g++) {
                        int c = src[((size_t)l * G + g) * nk + i];
                        memcpy(p, r.p + (size_t)c * rb + (size_t)g * hd * vs, (size_t)hd * vs);
                        p += (size_t)hd * vs;
                    }
                r.p += rb * cells;
            } else {
                /* transposed: element (d, cell) at (d * cells + cell) */
                uint32_t el, ne;
                NEED(get_u32(&r, &el) && get_u32(&r, &ne), "V (transposed) header");
                EXPECT(el == vs && ne == (uint32_t)kv, "layer %d: transposed V", l);
                NEED((size_t)(r.end - r.p) >= (size_t)kv * cells * vs, "V elements");
                put_u32(&p, el);
                put_u32(&p, ne);
                for (int d = 0; d < kv; d++) {
                    const int *sk = src + ((size_t)l * G + (size_t)(d / hd)) * nk;
                    const uint8_t *row = r.p + (size_t)d * cells * vs;
                    if (vs == 2)
                        for (int i = 0; i < nk; i++, p += 2)
                            memcpy(p, row + (size_t)sk[i] * 2, 2);
                    else
                        for (int i = 0; i < nk; i++, p += 4)
                            memcpy(p, row + (size_t)sk[i] * 4, 4);
                }
                r.p += (size_t)kv * cells * vs;
            }
        }
    }
    /* llama.cpp writes every stream's count: the later ones are empty (a
     * sequence lives in one stream) */
    for (uint32_t s = s_seq + 1; s < n_stream; s++) {
        uint32_t c;
        NEED(get_u32(&r, &c), "cell count");
        EXPECT(c == 0, "cells of one sequence in two streams (%u and %u)", s_seq, s);
    }
    EXPECT(r.p == r.end, "%zu bytes after the blob's last row", (size_t)(r.end - r.p));
    if (out_len)
        *out_len = (size_t)(p - out);
    return SCDB_OK;
}

scdb_err ll_blob_layer_rows(const scdb_llama_layout *L, const void *blob, size_t len,
                            const uint8_t **k, const uint8_t **v, int *n_cells, char *errbuf,
                            size_t errlen)
{
    if (!layout_ok(L) || !blob || !k || !v || !n_cells)
        return SCDB_EINVAL;
    rd r = {blob, (const uint8_t *)blob + len};
    uint32_t v_trans, n_layer, cells = 0, s_seq = 0;
    const uint8_t *cell0 = NULL;
    scdb_err err = seq_cells(L, blob, &r, &cells, &cell0, &s_seq, errbuf, errlen);
    if (err)
        return err;
    NEED(get_u32(&r, &v_trans) && get_u32(&r, &n_layer), "layer header");
    EXPECT(v_trans == 1 && L->v_trans == 1 && n_layer == (uint32_t)L->n_layer,
           "v_trans %u / %u layers in the blob, want 1 / %d", v_trans, n_layer, L->n_layer);
    const size_t kv = (size_t)L->n_kv_heads * (size_t)L->head_dim;
    const size_t ks = type_size(L->k_type), vs = type_size(L->v_type);
    for (int l = 0; l < L->n_layer; l++) {
        uint32_t t;
        uint64_t rb;
        NEED(get_u32(&r, &t) && get_u64(&r, &rb), "K header");
        EXPECT(t == (uint32_t)L->k_type && rb == kv * ks, "layer %d: K rows", l);
        NEED((size_t)(r.end - r.p) >= rb * cells, "K rows");
        k[l] = r.p;
        r.p += rb * cells;
    }
    for (int l = 0; l < L->n_layer; l++) {
        uint32_t t, el, ne;
        NEED(get_u32(&r, &t) && get_u32(&r, &el) && get_u32(&r, &ne), "V (transposed) header");
        EXPECT(t == (uint32_t)L->v_type && el == vs && ne == (uint32_t)kv,
               "layer %d: transposed V", l);
        NEED((size_t)(r.end - r.p) >= kv * cells * vs, "V elements");
        v[l] = r.p;
        r.p += kv * cells * vs;
    }
    *n_cells = (int)cells;
    return SCDB_OK;
}
