/*
 * codec_internal.h — private to codec/: the codebook and pair structs, the
 * "bundle" (tensors + metadata) that is both hashed and written, and small
 * dense linear-algebra helpers (Cholesky, Jacobi eigen-decomposition).
 */
#ifndef SCDB_CODEC_INTERNAL_H
#define SCDB_CODEC_INTERNAL_H

#include <stdio.h>

#include "codec.h"
#include "safetensors.h"


enum { CX_K = 0, CX_V = 1, CX_H = 2 };

/* One encoder: z[r] = (x - mean) enc^T, x of in_dim values. */
typedef struct cx_enc {
    int in_dim, r;
    float *mean;   /* [in_dim] */
    float *enc;    /* [r][in_dim] */
} cx_enc;

struct scdb_codebook {
    scdb_codebook_info info;
    cx_enc part[SCDB_CODEC_MAX_LAYERS][3];
    char notes[1024];             /* calibration provenance (metadata "notes") */
};

typedef struct cx_player {
    /* REUSE: K = z dk^T + mk, V = z dv^T + mv (z: the layer's code row) */
    float *dk, *mk, *dv, *mv;     /* [kv][w] [kv] [kv][w] [kv] */
    int has_aligner;
    scdb_aligner al;
    float *wk, *wv;               /* [kv][d] consumer weights (aligner layers) */
    double align_loss_before, align_loss_after;
    /* a lora pair's own parts (codec.h, "Adapter pairs"), kept for saving:
     * decoder corrections u [kv][rc], v [rc][in]; aligner correction
     * u [d][ra], v [ra][in], db2 [d]; Wk/Wv deltas B [kv][lr] A [lr][d] */
    float *cku, *ckv, *cvu, *cvv;
    float *au, *av, *adb2;
    float *lka, *lkb, *lva, *lvb;
    float *b2e;                   /* a lora pair decoding low-rank: the shared
                                     aligner's b2 + adb2 [d] */
    /* token input (info.token_input, pair_tok.c): REUSE adds h0 gk^T / h0 gv^T,
     * h0 the consumer's layer-0 H_in of the token; gk, gv [kv][d] (f16
     * values; a lora pair's are its shared part's).  A lora pair's own
     * corrections of them (token_corr): the decoder corrections' u times
     * ctk / ctv [dec_rank][d] */
    float *gk, *gv;
    float *ctk, *ctv;
} cx_player;

/* A lora pair in memory (codec.h, "Adapter pairs") is kept low-rank: its
 * own parts in L[] (means, corrections, Wk/Wv deltas, b2e) and a counted
 * reference to its shared part (`shared`), whose decoders, aligners,
 * Wk/Wv and token layer it decodes with: dk, dv, al, wk, wv, emb, norm0,
 * wk0, wv0 of the lora pair itself stay NULL.  Shared parts loaded for lora
 * pairs are kept once per process in a cache keyed by (codebook id,
 * checksum) and freed when the last pair referencing them is.  refs counts
 * the owners of a pair (scdb_pair_free drops one); `cached` marks a shared
 * part in that cache. */
struct scdb_pair {
    scdb_pair_info info;
    int refs;             /* owners: the creator and the lora pairs using it */
    int cached;           /* a shared part in the process's cache */
    scdb_pair *shared;    /* a low-rank lora pair's shared part (a reference) */
    scdb_pair *next_cached;
    int k_post_rope;
    int all_input;        /* decoders and aligners read the whole code row */
    scdb_cb_layer layers[SCDB_CODEC_MAX_LAYERS];   /* copied from the codebook */
    int code_dim;
    cx_player *L;         /* [n_L]: n_layers entries (cx_pair_alloc_layers) */
    int n_L;
    float *emb, *norm0, *wk0, *wv0;   /* token layer: [vocab][d] [d] [kv][d] [kv][d] */
    char notes[1024];
};

/* ------------------------------------------------------------ bundle */

typedef struct cx_btensor {
    char name[96];
    scdb_dtype dt;
    int ndim;
    int64_t shape[2];
    const void *data;
} cx_btensor;

typedef struct cx_bmeta {
    char key[48];
    char *val;
} cx_bmeta;

typedef struct cx_bundle {
    cx_btensor *t;
    int nt, capt;
    cx_bmeta *m;
    int nm, capm;
    void **owned;
    int nowned, capowned;
} cx_bundle;

/* scdb_st_open, with SCDB_ERANGE (a tensor past the end) reported as
 * SCDB_ETRUNC: codec files are written contiguously to their end. */
scdb_err cx_open(const char *path, scdb_st_file **f, char *errbuf, size_t errlen);
void cx_bundle_free(cx_bundle *b);
/* Add a float tensor stored as dt (F32: data referenced; F16: converted copy
 * owned by the bundle).  d1 == 0: 1-D. */
scdb_err cx_bundle_add(cx_bundle *b, scdb_dtype dt, const float *data, int64_t d0,
                       int64_t d1, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
scdb_err cx_bundle_meta(cx_bundle *b, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* XXH3-128 over metadata (sorted by key, skipping `skip`) and tensors
 * (sorted by name: name, dtype, shape, bytes). */
void cx_bundle_hash(const cx_bundle *b, const char *skip, scdb_codec_id *out);
/* View of a file's tensors and metadata (data points into the file). */
scdb_err cx_bundle_from_file(const scdb_st_file *f, cx_bundle *b);
scdb_err cx_bundle_write(const cx_bundle *b, const char *path);

/* Read tensor `name` of exactly [d0] (d1 == 0) or [d0, d1], F32 or F16, as a
 * malloc'd f32 copy.  SCDB_ENOTFOUND, SCDB_ESHAPE, SCDB_EDTYPE, SCDB_ENOMEM. */
scdb_err cx_read_f32(const scdb_st_file *f, const char *name, int64_t d0, int64_t d1,
                     float **out, char *errbuf, size_t errlen);

/* Metadata helpers: integer / list of integers / float.  SCDB_EFORMAT. */
scdb_err cx_meta_int(const scdb_st_file *f, const char *key, int lo, int hi, int *out,
                     char *errbuf, size_t errlen);
scdb_err cx_meta_ints(const scdb_st_file *f, const char *key, int max, int lo, int hi,
                      int *out, int *count, char *errbuf, size_t errlen);
scdb_err cx_meta_float(const scdb_st_file *f, const char *key, float *out,
                       char *errbuf, size_t errlen);
scdb_err cx_meta_str(const scdb_st_file *f, const char *key, char *dst, size_t cap,
                     char *errbuf, size_t errlen);
/* "a,b,c" from ints. */
void cx_fmt_ints(char *dst, size_t cap, const int *v, int n);
/* Canonical one-line architecture string of a config. */
void cx_arch_string(const scdb_model_config *c, char *dst, size_t cap);
scdb_err cx_arch_parse(const char *s, scdb_model_config *c);

/* fingerprint.c: 1 if s is a weights fingerprint as files record it (32 or,
 * written before that definition, 16 lowercase hex digits); the
 * fingerprint of model m's weights, of the kind `recorded` is (its length);
 * and the current kind.  schema/weights_fp.h's errors (16 digits: those of
 * reading DIR/model.safetensors). */
int cx_fp_valid(const char *s);
scdb_err cx_model_fp_like(const scdb_model *m, const char *recorded, char out[SCDB_CODEC_FP_LEN],
                          char *errbuf, size_t errlen);
scdb_err cx_model_fp(const scdb_model *m, char out[SCDB_CODEC_FP_LEN], char *errbuf, size_t errlen);

/* Compute offsets / widths / code_dim / candidates of a layer table. */
void cx_layout(scdb_cb_layer *layers, int n_layers, int *code_dim);

/* ------------------------------------------------------------ codebook / pair internals */

scdb_codebook *cx_codebook_alloc(void);
scdb_pair *cx_pair_alloc(void);
/* A pair's per-layer entries, once its n_layers is known (zeroed).
 * SCDB_EINVAL (n out of range, already there), SCDB_ENOMEM. */
scdb_err cx_pair_alloc_layers(scdb_pair *p, int n);
/* Set/verify producer identity fields of a codebook from a model. */
scdb_err cx_codebook_set_producer(scdb_codebook *cb, const scdb_model *m);
/* Compute the id of an in-memory codebook (builds its bundle). */
scdb_err cx_codebook_finish(scdb_codebook *cb);
/* Lay out an in-memory pair and round its f16-stored tensors. */
scdb_err cx_pair_finish(scdb_pair *p);
/* The checksum a pair's file has (or will have when saved), as hex. */
scdb_err cx_pair_checksum(const scdb_pair *p, char hex[33]);
/* A deep copy of an in-memory pair (a lora pair's copy shares its shared
 * part, one more reference).  SCDB_ENOMEM. */
scdb_err cx_pair_clone(const scdb_pair *p, scdb_pair **out);
/* One more owner of p (scdb_pair_free drops one); p. */
scdb_pair *cx_pair_ref(scdb_pair *p);
/* Make own, a lora pair's own parts (info, notes, layers, mk/mv and the
 * corrections / deltas in L[]), the low-rank lora pair decoding with shared
 * part s: one more reference to s, b2e computed, has_aligner set for the
 * patch layers.  SCDB_EINVAL (own's patch layer without an aligner in s,
 * s not a shared part of the same layout), SCDB_ENOMEM. */
scdb_err cx_pair_attach(scdb_pair *own, scdb_pair *s);
/* The reference decode of a lora pair: the effective full-form pair, each
 * correction and delta added into a copy of its shared part's tensors in
 * f32 (not rounded to f16), aligners outside its patch order dropped.  The
 * low-rank decode equals its decode up to f32 rounding (test_codec).
 * SCDB_EINVAL (not a low-rank lora pair), SCDB_ENOMEM. */
scdb_err cx_pair_materialise(const scdb_pair *lora, scdb_pair **out);
/* Shared parts in the process's cache (tests). */
int cx_shared_cache_count(void);

/* ------------------------------------------------------------ linear algebra (double) */

/* In place: A [n][n] symmetric positive definite -> lower Cholesky factor.
 * Returns 0, or -1 if not positive definite. */
int cx_cholesky(double *A, int n);
/* Solve (L L^T) X = B for X in place, B [n][m]. */
void cx_chol_solve(const double *Lf, int n, double *B, int m);
/* Symmetric eigen-decomposition by cyclic Jacobi: A [n][n] (destroyed),
 * eigenvalues w[n] descending, eigenvectors as columns of V [n][n]. */
void cx_sym_eig(double *A, int n, double *w, double *V);

/* Least squares [z 1] -> h (tiny ridge): skip [d][r], b [d].  SCDB_ENOMEM,
 * SCDB_ERANGE (singular). */
scdb_err cx_ols(const float *z, const float *h, int n, int r, int d, float *skip, float *b);
/* Input width of layer l's decoders / aligner in a pair. */
static inline int cx_in_width(const scdb_pair *p, int l)
{ return p->all_input ? p->code_dim : p->layers[l].width; }

/* Row-major f32 GEMM shortcut: C[M][N] (+)= A[M][K] B[K][N] */
void cx_gemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                float beta, float *C, int ldc);

/* pair.c: the checks a decode of tokens [t0, t0 + n) runs before touching
 * anything (codebook, cache shape, slots, tokens, positions), shared by the
 * host and the device paths; patch[l] = 1 for the layers patched with
 * n_patch (-1: the pair's default).  SCDB_EMISMATCH, SCDB_ESHAPE,
 * SCDB_EINVAL. */
scdb_err cx_pair_decode_check(const scdb_pair *p, const scdb_codebook *cb, int n,
                                const int32_t *pos, const int32_t *tokens, int n_patch,
                                const scdb_kv_cache *cache, int slot0, unsigned char *patch);

/* pair_tok.c: token-input decoders (codec.h, scdb_pair_info.token_input;
 * schema/FORMATS.md, "Pair"), kept apart from pair.c's full / lora logic.
 *   cx_tok_free        frees a layer's token tensors
 *   cx_tok_bundle      adds a full / shared pair's token tensors (and the
 *                      metadata), or a lora pair's own (token_corr)
 *   cx_tok_meta        reads token_input / token_corr (optional keys, absent:
 *                      0) and checks them, against a lora pair's shared
 *                      part S too (SCDB_EFORMAT)
 *   cx_tok_read        reads the token tensors into p; *expected counts them
 *   cx_tok_round       f16-rounds gk / gv (cx_pair_finish)
 *   cx_tok_clone       deep-copies them
 *   cx_tok_materialise cx_pair_materialise's part: s's gk += lora's cku ctk
 *                      (V likewise) with token_corr, in f32
 *   cx_tok_h0          rows h0 [n][d] = RMSNorm(emb[tok]) * norm0 of p, the
 *                      pair holding the token layer (a lora pair's shared part)
 *   cx_tok_add         y [n][kv] += h0 g^T (host decode of a REUSE layer,
 *                      before RoPE) */
void cx_tok_free(cx_player *L);
scdb_err cx_tok_bundle(const scdb_pair *p, cx_bundle *b);
scdb_err cx_tok_meta(const scdb_st_file *f, const char *path, scdb_pair *p, const scdb_pair *S,
                     char *errbuf, size_t errlen);
scdb_err cx_tok_read(const scdb_st_file *f, const char *path, scdb_pair *p, int *expected, char *errbuf,
                     size_t errlen);
void cx_tok_round(scdb_pair *p);
int cx_tok_clone(const scdb_pair *p, scdb_pair *q);
void cx_tok_materialise(const scdb_pair *lora, scdb_pair *s);
void cx_tok_h0(const scdb_pair *p, const int32_t *tokens, int n, float *h0);
void cx_tok_add(const float *h0, int n, int d, const float *g, int kv, float *y);

/* codebook.c: the f16 codes a decode of tokens [t0, t0 + n) reads.  For
 * int8 codes, *codes becomes a malloc'd dequantised copy of the range
 * (*owned, to free; *block_n = n, *t0 = 0); f16 codes are left as they are
 * (*owned NULL).  Shared by the host and device decodes.  SCDB_ERANGE (a
 * bad scale), SCDB_ENOMEM. */
scdb_err cx_codes_as_f16(const scdb_codebook *cb, const void **codes, int *block_n, int *t0, int n,
                         uint16_t **owned);

#endif
