/*
 * scdb_llama.h — libscdb-llama: scdb for llama.cpp.
 *
 * A companion of libscdb (client/scdb.h) for serving processes that run
 * their models in llama.cpp, written against the public C API (llama.h) of
 * the pinned release: llama.cpp v0.4.0, as node-llama-cpp 3.21.1 ships it
 * (scripts/install-llama.sh).  It adds what an engine integration needs
 * and libscdb cannot know:
 *
 *   producer (base model)                     consumer (a specialist / an adapter)
 *   ---------------------                     -----------------------------------
 *   cparams: scdb_llama_producer_cparams()    scdb_llama_consumer_open(): its
 *     (a cb_eval that reads attn_norm-N)        fingerprint (model + adapter
 *   scdb_llama_producer_prefill():              files) checked by the broker
 *     llama_decode of the prompt, H_in of     scdb_llama_restore(ctx, seq, tokens)
 *     every layer captured on the way,          -> the broker decodes the stored
 *     then stored by the broker once:            prefix into THIS model's KV
 *     scdb_put_states (SCD codes), or           space; RoPE'd, permuted and
 *     the sequence's own KV (raw/<model>)        written into the context's
 *                                                sequence as llama.cpp's own
 *                                                state blob; returns the count;
 *                                              llama_decode the rest at
 *                                                positions n_restored, ...
 *
 * THE STATE BLOB.  llama.cpp has one public way to write a sequence's KV:
 * llama_state_seq_set_data, which reads the blob llama_state_seq_get_data
 * writes.  Its layout is internal to llama.cpp (src/llama-context.cpp,
 * src/llama-kv-cache.cpp state_write / state_read of the pinned release),
 * mirrored here once and checked against the library actually loaded
 * (scdb_llama_probe):
 *
 *   u32 magic 0xaf143cd8 | i32 seq_id | u32 n_stream
 *   per stream: u32 cell_count; if cell_count > 0:
 *     per cell:  i32 pos | u32 n_seq_id (1) | i32 seq_id
 *     u32 v_trans | u32 n_layer
 *     per layer: i32 k_type | u64 k_row_bytes | cell_count K rows
 *     v_trans 0, per layer: i32 v_type | u64 v_row_bytes | cell_count V rows
 *     v_trans 1, per layer: i32 v_type | u32 v_elem_bytes | u32 n_embd_v
 *                           | per V dimension, cell_count elements
 *
 * Types are ggml's: 0 F32, 1 F16 (quantized KV caches are refused:
 * llama.cpp rotates them with a Hadamard transform this writer does not
 * apply).  A sequence of a context with one stream per sequence
 * (kv_unified off, n_seq_max > 1) lives in stream seq_id; the other streams
 * are written with cell_count 0.
 *
 * RoPE.  llama.cpp keeps K after RoPE, as scdb does, with the same angles
 * (pos * theta^(-2j/hd)); for the llama architecture it rotates adjacent
 * pairs, and GGUF conversion permutes the rows of W_q and W_k so that this
 * equals scdb's (and Hugging Face's) rotate-half.  So within each KV head
 *
 *     llama.cpp dimension 2j + p  holds  scdb dimension p * hd/2 + j,
 *                                         p in {0, 1}, j < hd/2
 *
 * for K only; V is not permuted.  scdb_llama_blob_write applies it,
 * scdb_llama_blob_read undoes it.
 *
 * Threads: the functions here are as thread-safe as the objects they are
 * given (a llama_context is not; a consumer or producer holds one libscdb
 * handle, which is not).  Ownership is stated per call.  Every function
 * returns an scdb_err; messages go to errbuf where one is taken, else to
 * scdb_llama_last_error() of the object.
 */
#ifndef SCDB_LLAMA_H
#define SCDB_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "llama.h"
#include "scdb.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SCDB_LLAMA_RELEASE "v0.4.0"          /* llama.cpp, as pinned */
#define SCDB_LLAMA_STATE_MAGIC 0xaf143cd8u   /* io_magic, llama-context.cpp */

/* Load llama.cpp's CPU (and other) backends from the folder its library was
 * loaded from ($SCDB_LLAMA_LIBDIR overrides), once per process, and quiet
 * its log below warnings ($SCDB_LLAMA_LOG=1 keeps all of it).  Every other
 * call here calls it.  SCDB_EUNSUPPORTED (no backend could be loaded: the
 * message names the folder). */
scdb_err scdb_llama_init(char *errbuf, size_t errlen);

/* A context's KV layout, as its own state blob shows it. */
typedef struct scdb_llama_layout {
    int n_layer, n_kv_heads, head_dim;   /* the model's */
    int n_stream;                        /* 1, or n_seq_max (kv_unified off) */
    int k_type, v_type;                  /* ggml types: 0 F32, 1 F16 */
    int v_trans;                         /* 1: V stored transposed (flash
                                          * attention off) */
} scdb_llama_layout;

/* The layout of ctx's KV cache, and the self-test of this library against
 * the llama.cpp actually loaded: one token (id 0) is decoded into sequence
 * seq at position 0, the sequence's blob is read, parsed with the layout
 * above, written again by scdb_llama_blob_write from what was parsed, and
 * the two must be byte-identical; the rewritten blob is then set back
 * (llama_state_seq_set_data must accept it) and the sequence cleared.  seq
 * must be empty (it is empty again after the call, whatever happens).
 * Errors: SCDB_EINVAL (seq not one of the context's: 0 ..
 * llama_n_seq_max - 1), SCDB_EBUSY (seq is not empty), SCDB_EMISMATCH (the blob is not
 * the pinned release's layout, or llama.cpp refused our blob: the message
 * says what differed and names the pinned release), SCDB_EUNSUPPORTED (a
 * quantized KV type, a model that is not the llama architecture's KV
 * shape), SCDB_EIO (llama_decode failed), SCDB_ENOMEM. */
scdb_err scdb_llama_probe(struct llama_context *ctx, llama_seq_id seq, scdb_llama_layout *out,
                          char *errbuf, size_t errlen);

/* Bytes of the blob of n_tokens cells under layout L. */
size_t scdb_llama_blob_bytes(const scdb_llama_layout *L, int n_tokens);

/* Write the blob of cache slots [0, n_tokens) (positions from c->pos) as
 * sequence seq's state into dst (cap bytes, at least scdb_llama_blob_bytes);
 * K permuted into llama.cpp's RoPE convention and both converted to the
 * layout's types (F32 -> F16 rounds to nearest even).  *len gets the bytes
 * written.  Errors: SCDB_ESHAPE (the cache's geometry is not L's),
 * SCDB_EINVAL (n_tokens out of range, seq outside the streams),
 * SCDB_ETOOBIG (cap), SCDB_EUNSUPPORTED (a type other than F32/F16). */
scdb_err scdb_llama_blob_write(const scdb_llama_layout *L, llama_seq_id seq,
                               const scdb_kv_cache *c, int n_tokens, void *dst, size_t cap,
                               size_t *len);

/* Parse a blob llama_state_seq_get_data wrote under layout L into cache
 * dst (slots [0, cells); dst->n set; K back in scdb's RoPE convention).
 * Strict: every count and size must be the layout's and the blob must end
 * exactly where its last row does.  Errors: SCDB_EFORMAT (wrong magic, a
 * cell with n_seq_id != 1, v_trans / n_layer / type / row size not L's: the
 * message says which), SCDB_ETRUNC (shorter than it claims), SCDB_ETOOBIG
 * (more cells than dst holds), SCDB_ESHAPE (dst geometry), SCDB_EINVAL. */
scdb_err scdb_llama_blob_read(const scdb_llama_layout *L, const void *blob, size_t len,
                              scdb_kv_cache *dst, char *errbuf, size_t errlen);

/* Read sequence seq of ctx into dst through its blob (as above).  Errors:
 * those of scdb_llama_blob_read, SCDB_EIO (llama.cpp wrote nothing),
 * SCDB_EINVAL (seq not one of the context's). */
scdb_err scdb_llama_seq_read(struct llama_context *ctx, const scdb_llama_layout *L,
                             llama_seq_id seq, scdb_kv_cache *dst, char *errbuf, size_t errlen);

/* Replace sequence seq of ctx with cache slots [0, n_tokens) (through the
 * blob; n_tokens 0 clears it).  llama.cpp clears the sequence before it
 * reads the blob: a refused write leaves it empty, not as it was.
 * Errors: those of scdb_llama_blob_write, SCDB_EMISMATCH
 * (llama_state_seq_set_data refused it: no room in the context, ...),
 * SCDB_EINVAL (seq not one of the context's), SCDB_ENOMEM. */
scdb_err scdb_llama_seq_write(struct llama_context *ctx, const scdb_llama_layout *L,
                              llama_seq_id seq, const scdb_kv_cache *c, int n_tokens,
                              char *errbuf, size_t errlen);

/* ---- consumer -------------------------------------------------------- */

typedef struct scdb_llama_consumer scdb_llama_consumer;

typedef struct scdb_llama_consumer_params {
    const char *endpoint;        /* the broker (NULL: scdb_opts' default)    */
    const char *consumer;        /* the pair's consumer name ("c-header")    */
    const char *codebook;        /* NULL / "": raw/<consumer>                */
    struct llama_model *model;   /* the loaded model (not owned)             */
    struct llama_adapter_lora *adapter; /* NULL, or the consumer's adapter
                                  * loaded over model (not owned)            */
    float adapter_scale;         /* 1.0                                      */
    const char *model_path;      /* the GGUF file model was loaded from, and */
    const char *adapter_path;    /* adapter's: the fingerprint the broker
                                  * checks the pair against is computed from
                                  * them (NULL model_path: none is sent, no
                                  * check)                                   */
    int timeout_ms;              /* 0: libscdb's default                     */
} scdb_llama_consumer_params;
scdb_llama_consumer_params scdb_llama_consumer_default_params(void);

/* Connect, compute the weights fingerprint of model_path (+ adapter_path),
 * register as consumer of `consumer` under codebook: the broker refuses a
 * pair calibrated for other weights.  *out is owned by the caller
 * (scdb_llama_consumer_close).  Errors: scdb_connect's, scdb_register's
 * (SCDB_ENOTFOUND: no such pair; SCDB_EMISMATCH: the pair is for other
 * weights — the message names both fingerprints), scdb_weights_fingerprint's,
 * SCDB_EINVAL (no model, or an adapter path without an adapter). */
scdb_err scdb_llama_consumer_open(const scdb_llama_consumer_params *p,
                                  scdb_llama_consumer **out, char *errbuf, size_t errlen);
void scdb_llama_consumer_close(scdb_llama_consumer **c);
const char *scdb_llama_consumer_error(const scdb_llama_consumer *c);
/* The libscdb handle (owned by the consumer). */
scdb *scdb_llama_consumer_handle(scdb_llama_consumer *c);
const char *scdb_llama_consumer_fingerprint(const scdb_llama_consumer *c); /* "" if none */

/* Make ctx this consumer's: ctx's model must be the consumer's model
 * object, and its active adapters become the consumer's (llama.cpp applies
 * adapters per context; a switch costs a scheduler re-reserve).  Call it
 * before decoding a sequence of this consumer on a context other
 * consumers also use.  Errors: SCDB_EMISMATCH (another model), SCDB_EIO
 * (llama_set_adapters_lora failed). */
scdb_err scdb_llama_consumer_use(scdb_llama_consumer *c, struct llama_context *ctx);

typedef struct scdb_llama_restore_params {
    llama_seq_id seq;            /* the sequence to replace (0)             */
    int patch_layers;            /* as scdb_get_opts (-1: the pair's)       */
    int recompute_tail;          /* fidelity: restore all but the last N
                                  * tokens of the stored prefix, so that the
                                  * consumer prefills them itself over the
                                  * restored KV (0).  The only recompute form
                                  * llama.cpp allows: a sequence's new tokens
                                  * go at pos_max + 1, so a token in the
                                  * middle cannot be recomputed in place.    */
    int min_tokens;              /* restore nothing below this many (1)     */
    int pair_default;            /* 1: when recompute_tail is 0, take the
                                  * registration's fidelity default
                                  * (scdb_recompute_default: the broker
                                  * config's, else the pair's calibrated
                                  * one) if it is a tail or none; an initial
                                  * or selective default is refused
                                  * (SCDB_EUNSUPPORTED: llama.cpp cannot
                                  * recompute inside the prefix) (0)         */
} scdb_llama_restore_params;
scdb_llama_restore_params scdb_llama_restore_default_params(void);

typedef struct scdb_llama_restore_result {
    int n_restored;              /* positions [0, n) of seq hold the prefix  */
    int recompute_tail;          /* stored tokens left for the caller to
                                  * prefill (recompute_tail or the default) */
    int n_matched;               /* tokens the store matched                 */
    double get_ms;               /* the broker's lookup + decode (libscdb)   */
    double write_ms;             /* permute + convert + set_data             */
    uint64_t decode_ns;          /* of get_ms: the broker's decode           */
} scdb_llama_restore_result;

/* Restore the longest stored prefix of tokens into sequence seq of ctx,
 * decoded by the broker into this consumer's KV space; the caller then
 * decodes tokens [n_restored, n) at positions n_restored, ...  Whole blocks
 * only; nothing matched (or fewer than min_tokens) leaves seq as it was and
 * returns n_restored 0.  ctx is made the consumer's first
 * (scdb_llama_consumer_use).  The context's layout is probed once per
 * context and kept (scdb_llama_probe; the first restore into a context
 * runs the self-test, on sequence seq, which must then be empty).
 * The last 16 contexts' layouts are kept, by address: before freeing a
 * context the consumer restored into, call scdb_llama_consumer_forget (a
 * new context at a freed one's address would otherwise get its layout; a
 * write llama.cpp refuses forgets it too).
 * Errors: those of scdb_llama_consumer_use, scdb_llama_probe, scdb_get
 * (libscdb's; message in scdb_llama_consumer_error), scdb_llama_seq_write;
 * SCDB_ESHAPE (the broker's KV geometry is not the context's),
 * SCDB_EINVAL (recompute_tail < 0, seq not one of the context's). */
scdb_err scdb_llama_restore(scdb_llama_consumer *c, struct llama_context *ctx,
                            const llama_token *tokens, size_t n_tokens,
                            const scdb_llama_restore_params *p,
                            scdb_llama_restore_result *out);
/* Drop what the consumer keeps of ctx (its layout), before ctx is freed. */
void scdb_llama_consumer_forget(scdb_llama_consumer *c, const struct llama_context *ctx);

/* ---- producer -------------------------------------------------------- */

typedef struct scdb_llama_producer scdb_llama_producer;

typedef struct scdb_llama_producer_params {
    const char *endpoint;        /* NULL: scdb_opts' default                 */
    const char *producer;        /* the model's name at the broker ("base")  */
    const char *codebook;        /* NULL / "": raw/<producer>: the
                                  * sequence's own KV is stored (read back
                                  * through its blob); else an "scd"
                                  * codebook the broker encodes             */
    const char *model_path;      /* fingerprint, as for consumers (NULL: none) */
    int max_tokens;              /* the longest prompt (0: 512)             */
    int timeout_ms;
} scdb_llama_producer_params;
scdb_llama_producer_params scdb_llama_producer_default_params(void);

scdb_err scdb_llama_producer_open(const scdb_llama_producer_params *p,
                                  scdb_llama_producer **out, char *errbuf, size_t errlen);
void scdb_llama_producer_close(scdb_llama_producer **p);
const char *scdb_llama_producer_error(const scdb_llama_producer *p);
scdb *scdb_llama_producer_handle(scdb_llama_producer *p);

/* Set cparams' cb_eval so that contexts made from them can capture: the
 * callback asks llama.cpp for nothing (no cost) except during
 * scdb_llama_producer_prefill, and then only for attn_norm-N, the
 * normalised attention input H_in of each layer.  A cb_eval the caller had
 * set is kept and still called.  The producer must outlive the contexts. */
void scdb_llama_producer_cparams(scdb_llama_producer *p, struct llama_context_params *cparams);

typedef struct scdb_llama_put_result {
    scdb_put_result put;         /* libscdb's                                */
    double prefill_ms;           /* llama_decode of the prompt (capturing)   */
    double put_ms;               /* the put (encode + store at the broker)   */
} scdb_llama_put_result;

/* Prefill tokens [0, n) into sequence seq of ctx (which must be empty and
 * made from scdb_llama_producer_cparams' params), capturing, then store
 * every full block.  The caller may go on decoding the sequence.  Errors:
 * SCDB_EBUSY (seq not empty), SCDB_ETOOBIG (n over max_tokens), SCDB_EIO
 * (llama_decode failed), SCDB_EINVAL (ctx not made for capture: no
 * attn_norm seen; seq not one of the context's), SCDB_EMISMATCH (a raw
 * codebook: the sequence's cells are not positions 0 .. n - 1 in order),
 * those of scdb_put_states / scdb_put_cache. */
scdb_err scdb_llama_producer_prefill(scdb_llama_producer *p, struct llama_context *ctx,
                                     llama_seq_id seq, const llama_token *tokens,
                                     size_t n_tokens, scdb_llama_put_result *out);

/* ---- live eviction ---------------------------------------------------
 *
 * An evictor keeps one llama.cpp sequence within a budget of cells with one
 * of scdb's eviction policies (evict/evict.h: streaming, h2o, snapkv, tova,
 * learned) keeping ONE set of positions for all layers and heads, applied
 * with llama_memory_seq_rm, which removes a position from every layer at
 * once.  With `sets`, a learned policy file below its split keeps a set
 * per (layer, KV group) instead, as in scdb's engine ("Keep sets per head",
 * evict/evict.h; its gate chooses at the first eviction): seq_rm cannot
 * apply those, so that eviction reads the sequence's state
 * (llama_state_seq_get_data), compacts it per set exactly as scdb's engine
 * compacts its cache (slot i of set k the i-th token the set kept; the
 * slot's position the newest of the sets'), and writes it back
 * (llama_state_seq_set_data: slot i in cell i).  K is stored after RoPE,
 * so a moved row attends as before, and every kept position is older than
 * every new token.  Its inputs come from what llama.cpp exposes, read by
 * cb_eval while the evictor's own decode runs:
 *
 *   kq_soft_max-N  [n_kv cells][n_tokens][n_head]  attention of each new
 *                  query over the context's cells (exists only with flash
 *                  attention off: the evictor refuses a context with it on)
 *   Vcur-N         [kv_dim][n_tokens]              the new tokens' V (norms),
 *                  on the first chunk only when the layer's cache_v_lN
 *                  (kqv-N's V operand) is host memory and then holds the
 *                  same values: after that V is read from the cache after
 *                  the decode (half the graph splits)
 *
 * and folded into scdb's feature accumulators over a shadow of the
 * sequence (positions and V only, slot order = arrival order).  Cells are
 * mapped to slots by what the attention shows: a new token's cell is the
 * one its query sees that no earlier token held.  When the sequence holds
 * more than the budget, the policy scores, selects and compacts the shadow,
 * and every evicted position is removed from llama.cpp with
 * llama_memory_seq_rm(seq, p, p + 1): positions are kept, so the sequence
 * attends exactly as scdb's compacted cache does (attention masks by
 * position) and new tokens go on at pos_max + 1.
 *
 * The sequence must be the only one in its context's KV stream (a context
 * of n_seq_max 1, or kv_unified off), its cells [0, n) in position order
 * when the evictor starts (after a prefill or a restore into an empty
 * context): the first decode checks it. */
typedef struct scdb_llama_evictor scdb_llama_evictor;

typedef struct scdb_llama_evict_params {
    llama_seq_id seq;            /* 0                                        */
    const char *policy;          /* "streaming", "h2o", "snapkv", "tova",
                                  * "learned" (default "learned")            */
    const char *policy_file;     /* learned: a policy file keeping one set   */
    int budget;                  /* cells kept after an eviction (required)  */
    int cadence;                 /* evict once the sequence is this many
                                  * cells over the budget (1); 0: only when
                                  * scdb_llama_evictor_evict is called      */
    int sets;                    /* learned: 1 keeps a set per (layer, KV
                                  * group) below the file's split, each
                                  * set's rows moved within llama.cpp's K
                                  * and V tensors in place and the cells
                                  * no set holds removed with seq_rm (host
                                  * memory, F32 / F16, checked byte for
                                  * byte against the sequence's state at
                                  * the first such eviction); where they
                                  * cannot be (a GPU build), through the
                                  * state writer (a state read and write
                                  * per eviction).  On the family an
                                  * eviction costs 2.4-2.8x a one-set one
                                  * in place, 4.4-6.2x through the writer
                                  * (bench evict --engine llama.cpp;
                                  * DESIGN.md,
                                  * "Eviction").  0 (default): one set for
                                  * all at every budget                     */
    int capture_every;           /* read every layer's attention on one
                                  * decode in this many: 2 (default), 1
                                  * every decode, up to 64.  A single-token
                                  * decode in between reads only which cell
                                  * the token took, off the attention mask
                                  * (llama.cpp's attn_inp_kq_mask, a graph
                                  * input: no split; where it cannot be
                                  * read, layer 0's attention, one split),
                                  * and folds no attention: the features
                                  * come from a sample of the queries.  A
                                  * decode of several tokens and the first
                                  * decode (V's check) read every layer;
                                  * where V cannot be read from the cache
                                  * (not host memory: a GPU build) the
                                  * decodes between read Vcur-N too (a
                                  * split per layer).  2 keeps
                                  * the learned policy's KL on the bench's
                                  * unseen domains, 4 does not (DESIGN.md,
                                  * "Attention on one step in two")     */
    struct ggml_threadpool *threadpool; /* attached to the context at start
                                  * (the caller's: free it after the
                                  * context); NULL (default): the evictor
                                  * attaches one of its own when the context
                                  * runs more than one thread (below)       */
} scdb_llama_evict_params;
scdb_llama_evict_params scdb_llama_evict_default_params(void);

/* Errors: SCDB_EINVAL (no budget, cadence < 0, unknown policy name or a
 * per-head kind: the message names it), the policy file's
 * (scdb_evict_policy_load's). */
scdb_err scdb_llama_evictor_new(const scdb_llama_evict_params *p, scdb_llama_evictor **out,
                                char *errbuf, size_t errlen);
void scdb_llama_evictor_free(scdb_llama_evictor **e);
const char *scdb_llama_evictor_error(const scdb_llama_evictor *e);
/* cparams' cb_eval reads kq_soft_max-N (and Vcur-N, above) during
 * scdb_llama_evictor_decode only (a cb_eval already set is kept and
 * called); flash attention is turned off (the probabilities need it).  The
 * contexts made from cparams call back into this evictor: free them before
 * it, and use one evictor per context. */
void scdb_llama_evictor_cparams(scdb_llama_evictor *e, struct llama_context_params *cparams);

/* A ggml thread pool of n_threads (>= 1) from the CPU backend llama.cpp
 * loaded, for llama_attach_threadpool; NULL when it has none.  Free it with
 * scdb_llama_threadpool_free after every context it is attached to.
 *
 * Why the evictor wants one: every tensor its cb_eval asks for (two per
 * layer) splits a decode into one graph computation per tensor, and
 * without an attached pool ggml starts and joins the context's threads at
 * each computation: at 2 threads a decode step of the family cost 2.5x a
 * plain one that way (bench evict --engine llama.cpp), on a pool about the
 * same as a plain one.  A pool polls for work for a while after each
 * computation (ggml's default): contexts decoding in turn on one thread
 * should share one pool rather than each spin its own. */
struct ggml_threadpool *scdb_llama_threadpool_new(int n_threads);
void scdb_llama_threadpool_free(struct ggml_threadpool *tp);

/* Take over sequence seq of ctx as it is (its cells [0, n) at positions
 * from its blob: a prefill or a restore); they have no statistics yet.
 * The context gets the params' thread pool or, when it runs more than one
 * thread (llama_n_threads, _batch), one of the evictor's own, made at a
 * start whose context runs more threads than the last one made, and freed
 * with the evictor, every one it made (an earlier context may still run on
 * an earlier one) (llama_attach_threadpool: it replaces a pool the caller
 * attached before; pass that one in the params to keep it).  A pool runs
 * one graph at a time: contexts sharing one decode in turn, never at once.
 * Errors: SCDB_EINVAL (a budget over the context's cells, or below the
 * cells the policy always keeps: the message says how many; a sequence
 * beyond the context's llama_n_seq_max),
 * SCDB_EUNSUPPORTED (flash attention on, another stream layout), those of
 * scdb_llama_probe's layout reading. */
scdb_err scdb_llama_evictor_start(scdb_llama_evictor *e, struct llama_context *ctx);

typedef struct scdb_llama_evict_result {
    int cells;                   /* the sequence's cells after the call      */
    int evictions;               /* evictions during the call                */
    int evicted;                 /* positions removed during the call        */
    double stats_us;             /* folding the step's attention (this call) */
    double evict_us;             /* score + select + compact + seq_rm        */
    double decode_us;            /* llama_decode itself                      */
    int full_reads;              /* decodes that read every layer's attention */
    int mask_reads;              /* decodes that read only the new token's
                                  * cell, off the attention mask (no graph
                                  * split: capture_every)                   */
    int sets_in_place;           /* evictions of keep sets per head written
                                  * into llama.cpp's cache tensors in place
                                  * (host memory, checked against the
                                  * state blob at the first such eviction,
                                  * then in place from it on); the others
                                  * of them read and write the state       */
} scdb_llama_evict_result;

/* Decode tokens [0, n) at pos_max + 1, ... into the sequence (in chunks of
 * at most 64 tokens, the context's n_ubatch and n_batch, and the cells
 * left), folding each query's attention, and evict whenever the sequence
 * is `cadence` cells over the budget.  all_logits: as scdb_llama_decode,
 * for the last chunk.  A chunk that fails after llama.cpp decoded it
 * (its attention not seen, its cells not mapped) is removed from the
 * sequence again: the sequence and the evictor stay as they were after
 * the last chunk that succeeded.  Errors: SCDB_ECLOSED (the sequence was
 * cleared or changed outside the evictor: its pos_max is not the last
 * position decoded here; or an eviction of keep sets per head failed
 * after its policy ran: the state writer's gather or set_data, or in
 * place a kept cell not the sequence's, a seq_rm refused, the sequence
 * not ending where it did: that call returned the failure, the evictor
 * is stopped and its error says why: start it again), SCDB_EIO (llama_decode failed), SCDB_EUNSUPPORTED (the
 * attention was not seen: flash attention on; the cells do not map:
 * another sequence shares the stream), SCDB_EFULL (every cell of the
 * context is held and the cadence did not evict), the policy's errors. */
scdb_err scdb_llama_evictor_decode(scdb_llama_evictor *e, struct llama_context *ctx,
                                   const llama_token *tokens, size_t n, int all_logits,
                                   scdb_llama_evict_result *out);
/* Evict now if the sequence holds more than the budget (*out as for
 * decode; may be NULL).  Errors: those of scdb_llama_evictor_decode. */
scdb_err scdb_llama_evictor_evict(scdb_llama_evictor *e, struct llama_context *ctx,
                                  scdb_llama_evict_result *out);
/* The positions the sequence holds, in slot order (*n of them; the
 * evictor's memory, valid until its next call): llama.cpp's cells'.  With
 * keep sets per head written in place a cell keeps its position while
 * its rows are other tokens' (set_positions says whose), so these are at
 * least each set's positions there, not always one of them. */
const int32_t *scdb_llama_evictor_positions(const scdb_llama_evictor *e, int *n);
/* Once the evictor keeps a set per (layer, KV group): the positions of
 * the tokens set k (= layer * n_kv_heads + group) holds, slot by slot (*n
 * of them); NULL while it keeps one set for all (each set then holds the
 * tokens of scdb_llama_evictor_positions, unless keep sets per head were
 * written in place before) or k is out of range. */
const int32_t *scdb_llama_evictor_set_positions(const scdb_llama_evictor *e, int k, int *n);

/* Prefill helper for everyone: decode tokens [0, n) at positions pos0 ..
 * into sequence seq in batches of llama_n_batch(ctx), logits for the last
 * token only (or for all when all_logits: row i = token i; llama.cpp keeps
 * one decode's logits, so all_logits wants n_tokens <= llama_n_batch).
 * Errors: SCDB_EIO, SCDB_EINVAL (all_logits over n_batch tokens, seq not
 * one of the context's). */
scdb_err scdb_llama_decode(struct llama_context *ctx, llama_seq_id seq, const llama_token *tokens,
                           size_t n_tokens, llama_pos pos0, int all_logits);

#ifdef __cplusplus
}
#endif

#endif /* SCDB_LLAMA_H */
