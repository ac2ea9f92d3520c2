/* llama_int.h — libscdb-llama's internals (scdb_llama.h is the API). */
#ifndef SCDB_LLAMA_INT_H
#define SCDB_LLAMA_INT_H

#include "scdb_llama.h"

#define LL_ERR_MAX 512

void ll_msg(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
double ll_now_ms(void);
/* The layout a blob of llama_state_seq_get_data shows (L's n_layer,
 * n_kv_heads and head_dim given: the model's), and the stream holding the
 * sequence's cells.  SCDB_EMISMATCH (not the pinned layout, no cell),
 * SCDB_EUNSUPPORTED (a KV type other than F32 / F16). */
scdb_err ll_layout_from_blob(const void *blob, size_t len, scdb_llama_layout *L, int *stream,
                             char *errbuf, size_t errlen);

/* scdb_llama_seq_write through a buffer the caller keeps (*buf, *cap:
 * grown as needed, freed by the caller): a restore allocates nothing. */
/* For tests: where an evictor reads the new tokens' V (0 Vcur-N, checking
 * the cache; 1 the cache; -1 Vcur-N for good), and its shadow (slot i's
 * position and, for the last chunk's slots, V) */
int ll_evictor_v_mode(const scdb_llama_evictor *e);
long ll_evictor_queries(const scdb_llama_evictor *e); /* queries folded into the accumulators */
void ll_evictor_no_mask(scdb_llama_evictor *e);  /* (tests) as if the mask could not be read */
void ll_evictor_state_writer(scdb_llama_evictor *e); /* (tests, after start) as if the cache's
                                                 * tensors could not be written: keep sets
                                                 * per head through the state writer */
void ll_evictor_v_from_vcur(scdb_llama_evictor *e); /* (tests, after start) as if the cache's
                                                      * V could not be read: Vcur-N for good */
const scdb_kv_cache *ll_evictor_shadow(const scdb_llama_evictor *e);

/* 1 when seq is one of the context's sequences (0 .. llama_n_seq_max - 1:
 * llama.cpp asserts on one beyond its streams), else 0 and errbuf says so */
int ll_seq_ok(struct llama_context *ctx, llama_seq_id seq, char *errbuf, size_t errlen);

scdb_err ll_seq_write(struct llama_context *ctx, const scdb_llama_layout *L, llama_seq_id seq,
                      const scdb_kv_cache *c, int n, uint8_t **buf, size_t *cap, char *errbuf,
                      size_t errlen);

/* Keep sets per head on a state blob's bytes (no conversion): the blob of
 * a sequence in layout L (its cells in cell order) is written to out as
 * nk cells, cell i at position pos[i] holding, at layer l and KV head g,
 * the K and V of the input's cell src[(l * n_kv_heads + g) * nk + i].
 * in_pos (may be NULL; room for in_cap) gets the input cells' positions
 * and *in_n their count; with out NULL only those are read.  SCDB_ETRUNC / SCDB_EFORMAT
 * (a blob not of L), SCDB_ETOOBIG (cap < scdb_llama_blob_bytes(L, nk), or
 * more cells than in_cap),
 * SCDB_EINVAL. */
scdb_err ll_blob_gather_heads(const scdb_llama_layout *L, const void *blob, size_t len,
                              llama_seq_id seq, const int *src, const int32_t *pos, int nk,
                              int32_t *in_pos, int in_cap, int *in_n, uint8_t *out, size_t cap,
                              size_t *out_len, char *errbuf, size_t errlen);

/* Where layer l's rows lie in a sequence blob of layout L (V transposed,
 * flash attention off): k[l] its K rows ([cells][kv] of L->k_type, in
 * cell order), v[l] its V elements ([kv][cells] of L->v_type); *n_cells
 * the cells.  Pointers into blob.  SCDB_ETRUNC / SCDB_EFORMAT (a blob not
 * of L, V not transposed), SCDB_EINVAL. */
scdb_err ll_blob_layer_rows(const scdb_llama_layout *L, const void *blob, size_t len,
                            const uint8_t **k, const uint8_t **v, int *n_cells, char *errbuf,
                            size_t errlen);

/* Connect, send the weights fingerprint of model_path (+ adapter_path;
 * none when model_path is NULL), register: what a consumer and a producer
 * both do.  On error *h is NULL and errbuf says why. */
scdb_err ll_register(const char *endpoint, int timeout_ms, scdb_role role, const char *model,
                     const char *codebook, const char *model_path, const char *adapter_path,
                     scdb **h, scdb_info *info, char fp[33], char *errbuf, size_t errlen);

/* Capture through cb_eval (producer.c, evictor.c, calib_states.c): the
 * layer N of a graph tensor named "<prefix>-N" (-1 for any other name), and
 * the rows of such a tensor (F32, ne[0] == dim, contiguous) appended to
 * rows [*filled, ...) of a layer's [n][dim] block (*filled advanced; -1,
 * nothing copied, when the type or shape is not that or the rows would
 * pass n). */
int ll_layer_of(const char *tensor_name, const char *prefix);
int ll_take_rows(const struct ggml_tensor *t, float *layer_rows, int dim, size_t n, size_t *filled);

/* A ggml thread pool of n_threads from the CPU backend llama.cpp loaded,
 * for llama_attach_threadpool; NULL when that backend has none.  Without
 * one, ggml starts and joins its threads at every graph computation, and a
 * cb_eval that asks for tensors splits a decode into one computation per
 * tensor asked for (evictor.c).  Free it after the contexts that use it
 * (or after llama_detach_threadpool). */
struct ggml_threadpool *ll_pool_new(int n_threads);
void ll_pool_free(struct ggml_threadpool *tp);

/* One context's probed layout, kept by a consumer (a few contexts each). */
typedef struct ll_ctx_layout {
    struct llama_context *ctx;
    scdb_llama_layout L;
} ll_ctx_layout;

#endif /* SCDB_LLAMA_INT_H */
