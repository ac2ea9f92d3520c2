/* evictor.c — scdb's eviction policies on a llama.cpp sequence
 * (scdb_llama.h, "live eviction"): attention read by cb_eval, folded into
 * scdb's accumulators over a shadow of the sequence, the kept set applied
 * with llama_memory_seq_rm. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evict.h"
#include "kernels.h"
#include "llama_int.h"

#define LL_CHUNK 64       /* tokens per llama_decode while folding */

struct scdb_llama_evictor {
    scdb_llama_evict_params p;
    llama_batch batch;           /* LL_CHUNK tokens, made at the first decode
                                  * and kept: llama_batch_init mallocs a seq
                                  * id array per token, 0.7-1.1 us a call
                                  * in a loop, ~0.2% of the family's step,
                                  * outside every share the bench times */
    int has_batch;
    scdb_evict_policy *policy;
    scdb_evict_acc *acc;
    scdb_kv_cache *shadow;       /* pos of the live slots; V of the new ones
                                  * (read once, by the accumulators' update:
                                  * older rows are stale after an eviction) */
    scdb_kv_cache *slim;         /* pos only (1 x 1 x 1): what an eviction
                                  * compacts, instead of the shadow's K and V */
    int heads;                   /* per-head accumulators (a learned file's
                                  * scorer may keep a set per head) */
    scdb_kv_cache *tiny;         /* keep sets per head: L x G x 1, K[l][i][g]
                                  * the blob cell slot i of set (l, g) holds;
                                  * scdb_evict_run compacts it per set */
    int *src;                    /* [K][n_cells] the gather of the new blob */
    int32_t *in_pos;             /* [n_cells] the blob's cells' positions */
    scdb_llama_layout layout;    /* of the context (from its blob) */
    int size_known;              /* llama_state_seq_get_size was found equal
                                  * to scdb_llama_blob_bytes(layout, n): the
                                  * size is computed, not asked (asking
                                  * runs a whole write pass) */
    uint8_t *blob, *out;
    size_t blob_cap, out_cap;
    int n_layer, n_head, n_kv_heads, head_dim, n_cells;
    int *cell_slot;              /* [n_cells] slot of a live cell, -1 free */
    int *slot_cell;              /* [n_cells] cell of a slot */
    int started, since;          /* cells added since the last eviction */
    int stopped;                 /* started, then stopped by an error that
                                  * left it unlike the sequence (err says) */
    int32_t last_pos;            /* -1: empty */
    int uncaptured;              /* decodes since the last full capture */
    /* capture, valid during a decode: capturing 1 every layer's
     * attention (and Vcur while v_mode != 1), 2 layer 0's only (the new
     * token's cell: capture_every) */
    int capturing, n_new;
    int no_mask;                 /* the mask was found unusable: layer 0's
                                  * attention instead (a split); on a
                                  * decode that is not full, the cells
                                  * came off the mask while it stays 0 */
    float *probs;                /* [L][n_head][LL_CHUNK][n_cells] as llama gives */
    int n_kv;                    /* cells the step's attention covers */
    int *got_probs, *got_v;      /* per layer */
    /* V of the new tokens: read by the callback as Vcur-N (a graph split
     * per layer) until the cache's own V tensors (found as kqv-N's V
     * operand, host memory, the layout the state blob writes) are seen to
     * hold exactly the same values for one chunk; then from the cache
     * after the decode, and Vcur-N is no longer asked for (half the
     * splits).  v_mode 0: Vcur, checking; 1: the cache; -1: Vcur for good */
    struct ggml_tensor **vcache; /* per layer, NULL until seen */
    int v_mode;
    /* keep sets per head written into the cache's own tensors (the layer's
     * cache_k_lN, found as kq-N's K operand, and cache_v_lN) instead of a
     * state read and write: at the first such eviction the tensors are
     * checked to hold byte for byte what the sequence's blob holds, and
     * that eviction is then applied in place too.  0 not checked yet (or
     * the tensors not seen yet: checked again at the next), 1 in place,
     * -1 never (the state writer) */
    struct ggml_tensor **kcache; /* per layer, NULL until seen */
    int in_place;
    int *tgt;                    /* [n_cells] a cell per slot (see evict_sets) */
    int bad;
    float *folded;               /* [L][H][LL_CHUNK][n_cells] over slots */
    int32_t *old_pos;
    int32_t *lpos, *old_lpos;    /* [n_cells] the position llama.cpp's cell of
                                  * a slot has: the slot's own, except after
                                  * keep sets per head written in place,
                                  * where a cell keeps its position and the
                                  * slot's is the newest of the sets' */
    ggml_backend_sched_eval_callback user_cb;
    void *user_ud;
    struct ggml_threadpool *pool; /* attached to the context (start) */
    int pool_threads;
    struct ggml_threadpool **retired; /* pools of earlier starts: a context
                                  * started before may still run on one */
    int n_retired;
    int chunk;                   /* tokens per llama_decode: <= LL_CHUNK, the
                                  * context's n_ubatch and n_batch (one
                                  * ubatch per decode: kq_soft_max is one) */
    char err[LL_ERR_MAX];
};

scdb_llama_evict_params scdb_llama_evict_default_params(void)
{
    scdb_llama_evict_params p = {0};
    p.policy = "learned";
    p.cadence = 1;
    p.capture_every = 2;
    return p;
}

const char *scdb_llama_evictor_error(const scdb_llama_evictor *e) { return e ? e->err : ""; }

int ll_evictor_v_mode(const scdb_llama_evictor *e) { return e ? e->v_mode : 0; }
void ll_evictor_no_mask(scdb_llama_evictor *e) { if (e) e->no_mask = 1; }
void ll_evictor_state_writer(scdb_llama_evictor *e) { if (e) e->in_place = -1; }
long ll_evictor_queries(const scdb_llama_evictor *e) { return e && e->acc ? (long)e->acc->n_queries : 0; }
void ll_evictor_v_from_vcur(scdb_llama_evictor *e) { if (e) e->v_mode = -1; }
const scdb_kv_cache *ll_evictor_shadow(const scdb_llama_evictor *e) { return e ? e->shadow : NULL; }

const int32_t *scdb_llama_evictor_positions(const scdb_llama_evictor *e, int *n)
{
    if (n)
        *n = e && e->shadow ? e->shadow->n : 0;
    return e && e->shadow ? e->lpos : NULL;
}

const int32_t *scdb_llama_evictor_set_positions(const scdb_llama_evictor *e, int k, int *n)
{
    if (n)
        *n = 0;
    if (!e || !e->acc || !e->heads || scdb_evict_acc_mode(e->acc) != SCDB_EVICT_MODE_SPLIT || k < 0 ||
        k >= scdb_evict_acc_n_sets(e->acc))
        return NULL;
    if (n)
        *n = e->acc->n;
    return scdb_evict_acc_head_pos(e->acc) + (size_t)k * e->acc->capacity;
}

scdb_err scdb_llama_evictor_new(const scdb_llama_evict_params *pp, scdb_llama_evictor **out,
                                char *errbuf, size_t errlen)
{
    if (!out)
        return SCDB_EINVAL;
    *out = NULL;
    scdb_llama_evict_params p = pp ? *pp : scdb_llama_evict_default_params();
    if (!p.policy)
        p.policy = "learned";
    if (p.budget < 1 || p.cadence < 0 || p.seq < 0) {
        ll_msg(errbuf, errlen, "an evictor needs a budget >= 1 (got %d) and a cadence >= 0 (got %d)",
               p.budget, p.cadence);
        return SCDB_EINVAL;
    }
    if (p.capture_every < 0 || p.capture_every > 64) {
        ll_msg(errbuf, errlen, "capture_every %d: want 1 to 64 (0: the default, %d)",
               p.capture_every, scdb_llama_evict_default_params().capture_every);
        return SCDB_EINVAL;
    }
    if (p.capture_every == 0)
        p.capture_every = scdb_llama_evict_default_params().capture_every;
    scdb_evict_kind kind;
    if (scdb_evict_kind_parse(p.policy, &kind) || kind == SCDB_EVICT_FULL ||
        kind == SCDB_EVICT_H2O_HEAD || kind == SCDB_EVICT_SNAPKV_HEAD ||
        kind == SCDB_EVICT_TOVA_LAYER) {
        ll_msg(errbuf, errlen, "policy '%s': want streaming, h2o, snapkv, tova or learned (one "
               "keep set: llama_memory_seq_rm removes a position from every layer)", p.policy);
        return SCDB_EINVAL;
    }
    scdb_llama_evictor *e = calloc(1, sizeof *e);
    if (!e)
        return SCDB_ENOMEM;
    e->p = p;
    e->last_pos = -1;
    scdb_err err;
    if (kind == SCDB_EVICT_LEARNED) {
        if (!p.policy_file) {
            ll_msg(errbuf, errlen, "policy 'learned' needs its file (policy_file)");
            err = SCDB_EINVAL;
            goto fail;
        }
        err = scdb_evict_policy_load(p.policy_file, &e->policy, errbuf, errlen);
    } else {
        err = scdb_evict_policy_new(kind, &e->policy);
    }
    if (err)
        goto fail;
    *out = e;
    return SCDB_OK;
fail:
    free(e);
    return err;
}

static void free_state(scdb_llama_evictor *e)
{
    scdb_evict_acc_free(&e->acc);
    scdb_kv_cache_free(&e->shadow);
    scdb_kv_cache_free(&e->slim);
    scdb_kv_cache_free(&e->tiny);
    free(e->src);
    free(e->in_pos);
    free(e->blob);
    free(e->out);
    e->src = NULL;
    e->in_pos = NULL;
    e->blob = e->out = NULL;
    e->blob_cap = e->out_cap = 0;
    free(e->cell_slot);
    free(e->slot_cell);
    free(e->probs);
    free(e->folded);
    free(e->got_probs);
    free(e->got_v);
    free(e->vcache);
    e->vcache = NULL;
    e->v_mode = 0;
    free(e->kcache);
    free(e->tgt);
    e->kcache = NULL;
    e->tgt = NULL;
    e->in_place = 0;
    free(e->old_pos);
    free(e->lpos);
    free(e->old_lpos);
    e->lpos = e->old_lpos = NULL;
    e->cell_slot = e->slot_cell = e->got_probs = e->got_v = NULL;
    e->probs = e->folded = NULL;
    e->old_pos = NULL;
    e->layout = (scdb_llama_layout){0};
    e->size_known = 0;
    e->started = 0;
}

void scdb_llama_evictor_free(scdb_llama_evictor **pe)
{
    if (!pe || !*pe)
        return;
    free_state(*pe);
    if ((*pe)->has_batch)
        llama_batch_free((*pe)->batch);
    ll_pool_free((*pe)->pool);    /* its contexts were freed before (cparams) */
    for (int i = 0; i < (*pe)->n_retired; i++)
        ll_pool_free((*pe)->retired[i]);
    free((*pe)->retired);
    scdb_evict_policy_free(&(*pe)->policy);
    free(*pe);
    *pe = NULL;
}

static int is_view(const struct ggml_tensor *t)
{
    return t->op == GGML_OP_RESHAPE || t->op == GGML_OP_VIEW || t->op == GGML_OP_PERMUTE ||
           t->op == GGML_OP_TRANSPOSE;
}

/* The cells each new token sees, off kq_soft_max's mask operand (llama.cpp's
 * attn_inp_kq_mask: [n_kv][n_tokens], 0 where the token attends, -inf where
 * not; an input, set on the host before the graph runs, so readable when
 * the first node is asked about): written as layer 0 head 0's rows of
 * probs, 1 where seen.  No graph split.  0 if the mask is not that shape. */
static int mask_cells(scdb_llama_evictor *e, const struct ggml_tensor *t)
{
    const struct ggml_tensor *mk = t->src[1];
    /* the input itself, as llama.cpp names and writes it: not a tensor
     * computed from it (its data would not be there yet at ask time) */
    if (!mk || mk->op != GGML_OP_NONE || !(mk->flags & GGML_TENSOR_FLAG_INPUT) ||
        strcmp(mk->name, "attn_inp_kq_mask") != 0 ||
        mk->type != GGML_TYPE_F32 || !mk->buffer || !ggml_backend_buffer_is_host(mk->buffer) ||
        !mk->data || mk->ne[0] != t->ne[0] || mk->ne[0] > e->n_cells || mk->ne[1] < e->n_new ||
        mk->ne[2] != 1 || mk->ne[3] != 1 || mk->nb[0] != sizeof(float))
        return 0;
    e->n_kv = (int)mk->ne[0];
    for (int q = 0; q < e->n_new; q++) {
        const float *row = (const float *)((const char *)mk->data + (size_t)q * mk->nb[1]);
        float *dst = e->probs + (size_t)q * (size_t)e->n_kv;     /* att(e, 0, 0, q, m) */
        for (int c = 0; c < e->n_kv; c++)
            dst[c] = row[c] > -INFINITY ? 1.0f : 0.0f;
    }
    e->got_probs[0] = 1;
    return 1;
}

/* Note in slot[l] the layer's cache tensor t's operand 0 views (its view
 * root, when it is named root_prefix + N): kqv-N's V is cache_v_lN,
 * kq-N's K cache_k_lN */
static void note_cache(const struct ggml_tensor *t, const char *op, const char *root_prefix,
                       int n_layer, struct ggml_tensor **slot)
{
    int l = ll_layer_of(t->name, op);
    if (l < 0 || l >= n_layer || slot[l] || !t->src[0])
        return;
    struct ggml_tensor *c = t->src[0];
    while (c->view_src)
        c = c->view_src;
    if (!strncmp(c->name, root_prefix, strlen(root_prefix)))
        slot[l] = c;
}

static bool evict_cb(struct ggml_tensor *t, bool ask, void *ud)
{
    scdb_llama_evictor *e = ud;
    int lp = -1, lv = -1;
    if (e->capturing == 2) {
        /* the new token's cell only: off the mask, or where it cannot be
         * read, layer 0's attention */
        if (!e->got_probs[0] && ll_layer_of(t->name, "kq_soft_max") == 0) {
            if (!ask || e->no_mask || !mask_cells(e, t)) {
                e->no_mask = 1;
                lp = 0;
            }
        } else if (e->v_mode != 1) {
            lv = ll_layer_of(t->name, "Vcur");  /* the V norms: not from the cache */
        }
    } else if (e->capturing) {
        lp = ll_layer_of(t->name, "kq_soft_max");
        if (lp < 0 && e->v_mode != 1)
            lv = ll_layer_of(t->name, "Vcur");
        /* kqv-N = V x kq_soft_max-N and kq-N = K x Q, V and K views of the
         * layer's cache */
        if (ask && lp < 0 && lv < 0 && e->v_mode == 0)
            note_cache(t, "kqv", "cache_v_l", e->n_layer, e->vcache);
        if (ask && lp < 0 && lv < 0 && e->heads && !e->in_place)
            note_cache(t, "kq", "cache_k_l", e->n_layer, e->kcache);
    }
    if ((lp < 0 || lp >= e->n_layer) && (lv < 0 || lv >= e->n_layer || is_view(t))) {
        if (e->user_cb)
            return e->user_cb(t, ask, e->user_ud);
        return ask ? false : true;
    }
    if (ask)
        return true;
    if (lp >= 0) {
        /* [n_kv][n_tokens][n_head] */
        int64_t nkv = t->ne[0], nt = t->ne[1], nh = t->ne[2] * t->ne[3];
        if (t->type != GGML_TYPE_F32 || nt != e->n_new || nh != e->n_head || nkv > e->n_cells ||
            e->got_probs[lp]) {
            e->bad = 1;
            return true;
        }
        e->n_kv = (int)nkv;
        ggml_backend_tensor_get(t, e->probs + (size_t)lp * e->n_head * LL_CHUNK * e->n_cells, 0,
                                (size_t)(nkv * nt * nh) * sizeof(float));
        e->got_probs[lp] = 1;
    } else {
        int kv = e->n_kv_heads * e->head_dim;
        if (e->got_v[lv])
            return true;      /* the same values under the same name once more */
        if (t->type != GGML_TYPE_F32 || ggml_nelements(t) != (int64_t)kv * e->n_new ||
            !ggml_is_contiguous(t)) {
            e->bad = 1;
            return true;
        }
        float *dst = scdb_kv_v(e->shadow, lv, e->shadow->n);
        /* the new slots are consecutive rows of the shadow's layer lv */
        ggml_backend_tensor_get(t, dst, 0, (size_t)kv * (size_t)e->n_new * sizeof(float));
        e->got_v[lv] = 1;
    }
    return true;
}

void scdb_llama_evictor_cparams(scdb_llama_evictor *e, struct llama_context_params *cp)
{
    if (!e || !cp)
        return;
    cp->flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (cp->cb_eval == evict_cb)
        return;
    e->user_cb = cp->cb_eval;
    e->user_ud = cp->cb_eval_user_data;
    cp->cb_eval = evict_cb;
    cp->cb_eval_user_data = e;
}

scdb_err scdb_llama_evictor_start(scdb_llama_evictor *e, struct llama_context *ctx)
{
    if (!e || !ctx)
        return SCDB_EINVAL;
    free_state(e);
    const struct llama_model *m = llama_get_model(ctx);
    e->n_layer = llama_model_n_layer(m);
    e->n_head = llama_model_n_head(m);
    e->n_kv_heads = llama_model_n_head_kv(m);
    e->head_dim = llama_model_n_embd(m) / e->n_head;
    e->n_cells = (int)llama_n_ctx_seq(ctx);
    if (e->p.seq >= (int)llama_n_seq_max(ctx)) {
        /* (llama.cpp asserts on a sequence beyond its streams) */
        snprintf(e->err, sizeof e->err, "sequence %d: the context has sequences 0 to %u",
                 e->p.seq, llama_n_seq_max(ctx) - 1);
        return SCDB_EINVAL;
    }
    e->chunk = LL_CHUNK;
    if ((int)llama_n_ubatch(ctx) < e->chunk)
        e->chunk = (int)llama_n_ubatch(ctx);
    if ((int)llama_n_batch(ctx) < e->chunk)
        e->chunk = (int)llama_n_batch(ctx);
    if (e->chunk < 1) {
        snprintf(e->err, sizeof e->err, "the context's n_batch / n_ubatch are %u / %u",
                 llama_n_batch(ctx), llama_n_ubatch(ctx));
        return SCDB_EINVAL;
    }
    int sinks = 0, recent = 0;
    scdb_evict_policy_protect(e->policy, NULL, e->p.budget + 1, e->p.budget, &sinks, &recent);
    if (e->p.budget > e->n_cells) {
        snprintf(e->err, sizeof e->err, "budget %d is over the context's %d cells", e->p.budget,
                 e->n_cells);
        return SCDB_EINVAL;
    }
    if (e->p.budget <= sinks) {
        snprintf(e->err, sizeof e->err, "budget %d keeps nothing but the policy's %d sink cells: "
                 "want more than %d", e->p.budget, sinks, sinks);
        return SCDB_EINVAL;
    }
    /* every tensor the callback asks for splits the decode's graph (two
     * per layer); without a pool of its own, ggml starts and joins the
     * context's threads at each split (+155% on a step of the family at 2
     * threads, bench evict --engine llama.cpp): a pool, attached to the
     * context, kept for the evictor's life */
    int nt = llama_n_threads(ctx), ntb = llama_n_threads_batch(ctx);
    int want = nt > ntb ? nt : ntb;
    if (e->p.threadpool) {
        llama_attach_threadpool(ctx, e->p.threadpool, e->p.threadpool);
    } else if (want > 1 && want > e->pool_threads) {
        struct ggml_threadpool *tp = ll_pool_new(want);
        struct ggml_threadpool **rt =
            e->pool ? realloc(e->retired, (size_t)(e->n_retired + 1) * sizeof *rt) : NULL;
        if (tp && (rt || !e->pool)) {
            llama_attach_threadpool(ctx, tp, tp);
            if (e->pool) {           /* a context started before may run on it */
                e->retired = rt;
                e->retired[e->n_retired++] = e->pool;
            }
            e->pool = tp;
            e->pool_threads = want;
        } else {                     /* no memory: no pool (slower, still right;
                                      * a smaller one makes ggml warn per graph) */
            if (rt)
                e->retired = rt;
            ll_pool_free(tp);
        }
    } else if (e->pool) {
        llama_attach_threadpool(ctx, e->pool, e->pool);
    }
    /* a learned file whose per-head scorer takes budgets this small: the
     * per-head layout, as in scdb's engine (its gate chooses at the first
     * eviction); the sets are written into llama.cpp's tensors in place,
     * or through the state writer (evict_sets) */
    e->heads = e->p.sets && scdb_evict_policy_kind(e->policy) == SCDB_EVICT_LEARNED &&
               scdb_evict_policy_per_head(e->policy, e->p.budget, e->n_cells);
    scdb_evict_acc_shape sh = {.n_layers = e->n_layer, .n_heads = e->n_head,
                               .n_kv_heads = e->n_kv_heads, .capacity = e->n_cells,
                               .per_head = e->heads};
    size_t cells = (size_t)e->n_cells;
    scdb_err err;
    if ((err = scdb_evict_acc_new(&sh, &e->acc)) ||
        (err = scdb_kv_cache_new(e->n_layer, e->n_kv_heads, e->head_dim, e->n_cells, &e->shadow)) ||
        (err = scdb_kv_cache_new(1, 1, 1, e->n_cells, &e->slim)) ||
        (e->heads && (err = scdb_kv_cache_new(e->n_layer, e->n_kv_heads, 1, e->n_cells, &e->tiny))))
        goto fail;
    e->cell_slot = malloc(cells * sizeof *e->cell_slot);
    e->slot_cell = malloc(cells * sizeof *e->slot_cell);
    e->old_pos = malloc(cells * sizeof *e->old_pos);
    e->lpos = malloc(cells * sizeof *e->lpos);
    e->old_lpos = malloc(cells * sizeof *e->old_lpos);
    e->got_probs = calloc((size_t)e->n_layer, sizeof *e->got_probs);
    e->got_v = calloc((size_t)e->n_layer, sizeof *e->got_v);
    e->vcache = calloc((size_t)e->n_layer, sizeof *e->vcache);
    size_t pf = (size_t)e->n_layer * e->n_head * LL_CHUNK * cells;
    e->probs = malloc(pf * sizeof *e->probs);
    if (e->heads) {
        /* (and three rows of cells for the sets written in place) */
        size_t ns = (size_t)e->n_layer * (size_t)e->n_kv_heads;
        e->src = malloc((ns > 3 ? ns : 3) * cells * sizeof *e->src);
        e->in_pos = malloc(cells * sizeof *e->in_pos);
        e->tgt = malloc(cells * sizeof *e->tgt);
        e->kcache = calloc((size_t)e->n_layer, sizeof *e->kcache);
        if (!e->src || !e->in_pos || !e->tgt || !e->kcache) {
            err = SCDB_ENOMEM;
            goto fail;
        }
    }
    e->folded = malloc(pf * sizeof *e->folded);
    if (!e->cell_slot || !e->slot_cell || !e->old_pos || !e->lpos || !e->old_lpos || !e->got_probs || !e->got_v || !e->vcache ||
        !e->probs || !e->folded) {
        err = SCDB_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < cells; i++)
        e->cell_slot[i] = -1;
    /* the sequence as it is: its blob gives positions and V */
    llama_memory_t mem = llama_get_memory(ctx);
    if (llama_memory_seq_pos_max(mem, e->p.seq) >= 0) {
        size_t bn = llama_state_seq_get_size(ctx, e->p.seq);
        uint8_t *blob = malloc(bn ? bn : 1);
        if (!blob) {
            err = SCDB_ENOMEM;
            goto fail;
        }
        size_t got = llama_state_seq_get_data(ctx, blob, bn, e->p.seq);
        scdb_llama_layout L = {.n_layer = e->n_layer, .n_kv_heads = e->n_kv_heads,
                               .head_dim = e->head_dim};
        err = ll_layout_from_blob(blob, got, &L, NULL, e->err, sizeof e->err);
        if (!err && !L.v_trans) {
            snprintf(e->err, sizeof e->err, "the context has flash attention on: its attention "
                     "probabilities (kq_soft_max) exist only with it off "
                     "(scdb_llama_evictor_cparams turns it off)");
            err = SCDB_EUNSUPPORTED;
        }
        if (!err)
            err = scdb_llama_blob_read(&L, blob, got, e->shadow, e->err, sizeof e->err);
        free(blob);
        if (err)
            goto fail;
        for (int i = 0; i < e->shadow->n; i++) {
            if (i > 0 && e->shadow->pos[i] <= e->shadow->pos[i - 1]) {
                snprintf(e->err, sizeof e->err, "the sequence's cells are not in position order: "
                         "start the evictor on a fresh prefill or restore");
                err = SCDB_EUNSUPPORTED;
                goto fail;
            }
            e->cell_slot[i] = i;
            e->slot_cell[i] = i;
            e->lpos[i] = e->shadow->pos[i];
        }
        if ((err = scdb_evict_acc_update(e->acc, e->shadow, NULL, 0, e->shadow->n)))
            goto fail;
        e->last_pos = e->shadow->pos[e->shadow->n - 1];
    }
    e->started = 1;
    e->stopped = 0;
    e->since = 0;
    e->uncaptured = 0;
    e->no_mask = 0;
    return SCDB_OK;
fail:
    free_state(e);
    return err;
}

/* kq_soft_max-l as llama.cpp wrote it: [n_head][m tokens][nkv cells] */
static inline const float *att(const scdb_llama_evictor *e, int l, int h, int t, int m)
{
    return e->probs + (size_t)l * e->n_head * LL_CHUNK * (size_t)e->n_cells +
           ((size_t)h * m + t) * (size_t)e->n_kv;
}

#define SCDB_LLAMA_MAX_KV 4096   /* KV width gathered on the stack */

/* Layer l's V in the cache, usable for reading the new tokens' V: host
 * memory, F32 or F16, kv wide (no padding), the context's cells per
 * stream, and the sequence's stream there */
static int vcache_usable(const scdb_llama_evictor *e, int strm)
{
    const int kv = e->n_kv_heads * e->head_dim;
    for (int l = 0; l < e->n_layer; l++) {
        const struct ggml_tensor *v = e->vcache[l];
        if (!v || !v->buffer || !ggml_backend_buffer_is_host(v->buffer) || !v->data ||
            (v->type != GGML_TYPE_F32 && v->type != GGML_TYPE_F16) || v->ne[0] != kv ||
            v->ne[1] != e->n_cells || v->ne[2] <= strm)
            return 0;
    }
    return 1;
}

/* element (d, cell) of stream strm: V is stored transposed, a row of cells
 * per element (the layout the state blob is written from) */
static float vcache_at(const struct ggml_tensor *v, int strm, int d, int cell)
{
    size_t i = ((size_t)strm * (size_t)v->ne[0] + (size_t)d) * (size_t)v->ne[1] + (size_t)cell;
    if (v->type == GGML_TYPE_F32)
        return ((const float *)v->data)[i];
    return ggml_fp16_to_fp32(((const ggml_fp16_t *)v->data)[i]);
}

/* The new slots' V rows [n, n + m) from the cache (v_mode 1), or, on the
 * first chunk (v_mode 0), the check: the cache must hold exactly what
 * Vcur-N gave, rounded to the cache's type; then the rows are the cache's
 * (v_mode 1) or stay Vcur's for good (v_mode -1). */
static void v_from_cache(scdb_llama_evictor *e, int n, int m)
{
    const int kv = e->n_kv_heads * e->head_dim;
    if (e->v_mode < 0)
        return;
    /* one stream per sequence when the cache has several (kv_unified off) */
    const int strm = e->vcache[0] && e->vcache[0]->ne[2] > 1 ? e->p.seq : 0;
    if (!vcache_usable(e, strm)) {
        e->v_mode = -1;
        return;
    }
    if (e->v_mode == 0) {
        for (int l = 0; l < e->n_layer; l++) {
            const struct ggml_tensor *v = e->vcache[l];
            for (int t = 0; t < m; t++) {
                const float *row = scdb_kv_v(e->shadow, l, n + t);
                int c = e->slot_cell[n + t];
                for (int d = 0; d < kv; d++) {
                    float x = row[d];
                    if (v->type == GGML_TYPE_F16)
                        x = ggml_fp16_to_fp32(ggml_fp32_to_fp16(x));
                    if (vcache_at(v, strm, d, c) != x) {
                        e->v_mode = -1;
                        return;
                    }
                }
            }
        }
        e->v_mode = 1;
    }
    /* a row is kv elements a row of cells apart: gathered, then converted
     * at once (an F16 conversion per element was most of the read) */
    uint16_t h[SCDB_LLAMA_MAX_KV];
    for (int l = 0; l < e->n_layer; l++) {
        const struct ggml_tensor *v = e->vcache[l];
        const size_t stride = (size_t)v->ne[1];
        for (int t = 0; t < m; t++) {
            float *row = scdb_kv_v(e->shadow, l, n + t);
            size_t i0 = (size_t)strm * (size_t)v->ne[0] * stride + (size_t)e->slot_cell[n + t];
            if (v->type == GGML_TYPE_F32) {
                const float *src = (const float *)v->data + i0;
                for (int d = 0; d < kv; d++)
                    row[d] = src[(size_t)d * stride];
            } else if (kv <= SCDB_LLAMA_MAX_KV) {
                const uint16_t *src = (const uint16_t *)v->data + i0;
                for (int d = 0; d < kv; d++)
                    h[d] = src[(size_t)d * stride];
                scdb_f16_to_f32_n(h, row, (size_t)kv);
            } else {
                for (int d = 0; d < kv; d++)
                    row[d] = vcache_at(v, strm, d, e->slot_cell[n + t]);
            }
        }
    }
}

/* Map the chunk's cells to slots and fold its attention; then the new slots
 * are live.  n old live slots; the new ones are slots [n, n + m). */
static scdb_err fold(scdb_llama_evictor *e, const llama_pos *pos, int m, int full)
{
    const int n = e->shadow->n, L = e->n_layer, H = e->n_head, nkv = e->n_kv;
    /* the layers whose attention was read (0: the mask's cells only) */
    const int Ls = full ? L : (e->no_mask ? 1 : 0);
    /* the cell of token t: seen by its query, held by no earlier token.
     * Layer 0's first head sees it (a query always sees itself: its own
     * score is finite, and a probability that underflowed to 0 there is
     * what the full scan below is for); the scan of every head runs only
     * when that one does not single out one cell, so a free cell (most of
     * them, never seen) costs one read, not L x H */
    for (int t = 0; t < m; t++) {
        int found = -1, count = 0;
        const float *a0 = att(e, 0, 0, t, m);
        for (int c = 0; c < nkv; c++)
            if (e->cell_slot[c] < 0 && a0[c] > 0.0f) {
                found = c;
                count++;
            }
        for (int c = 0; c < nkv && count != 1 && Ls > 0; c++) {
            if (c == 0) {
                found = -1;
                count = 0;
            }
            if (e->cell_slot[c] >= 0)
                continue;
            int seen = 0;
            for (int l = 0; l < Ls && !seen; l++)
                for (int h = 0; h < H && !seen; h++)
                    seen = att(e, l, h, t, m)[c] > 0.0f;
            if (seen) {
                found = c;
                count++;
            }
        }
        if (count != 1) {
            snprintf(e->err, sizeof e->err, "token at position %d sees %d cells no earlier token "
                     "held (want 1): another sequence shares the context's KV stream?", pos[t],
                     count);
            for (int u = 0; u < t; u++)     /* the shadow as before the chunk */
                e->cell_slot[e->slot_cell[n + u]] = -1;
            return SCDB_EUNSUPPORTED;
        }
        e->cell_slot[found] = n + t;
        e->slot_cell[n + t] = found;
    }
    v_from_cache(e, n, m);
    /* probs over slots: [L][H][m][n + m] */
    const int S = n + m;
    for (int l = 0; l < L && full; l++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < m; t++) {
                const float *src = att(e, l, h, t, m);
                float *dst = e->folded + (((size_t)l * H + h) * m + t) * (size_t)S;
                for (int s = 0; s < S; s++) {
                    int c = e->slot_cell[s];
                    dst[s] = c < nkv ? src[c] : 0.0f;
                }
            }
    for (int t = 0; t < m; t++)
        e->shadow->pos[n + t] = e->lpos[n + t] = pos[t];
    e->shadow->n = S;
    /* (a decode whose attention was not read: the new slots' positions
     * and V norms, no query's attention) */
    scdb_err err = scdb_evict_acc_update(e->acc, e->shadow, full ? e->folded : NULL, S, m);
    if (err) {
        snprintf(e->err, sizeof e->err, "the accumulators' update: %s", scdb_strerror(err));
        e->shadow->n = n;
        for (int t = 0; t < m; t++)
            e->cell_slot[e->slot_cell[n + t]] = -1;
    }
    return err;
}

/* A buffer kept across evictions, grown to at least need bytes; -1 if it
 * cannot be. */
static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    uint8_t *nb = realloc(*buf, need);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = need;
    return 0;
}

/* The cache's own tensor of layer l (K or V) as the state blob writes it:
 * host memory, F32 or F16 as the blob says, kv x cells per stream,
 * contiguous, the sequence's stream there */
static int cache_tensor_ok(const scdb_llama_evictor *e, const struct ggml_tensor *t, int type,
                           int strm)
{
    const size_t kv = (size_t)e->n_kv_heads * (size_t)e->head_dim;
    const size_t ts = type == GGML_TYPE_F32 ? 4 : type == GGML_TYPE_F16 ? 2 : 0;
    return t && ts && t->buffer && ggml_backend_buffer_is_host(t->buffer) && t->data &&
           (int)t->type == type && t->ne[0] == (int64_t)kv && t->ne[1] == e->n_cells &&
           t->ne[2] > strm && t->ne[3] == 1 && t->nb[0] == ts && t->nb[1] == kv * ts &&
           t->nb[2] == kv * (size_t)e->n_cells * ts;
}

static int seq_stream(const scdb_llama_evictor *e)
{
    return e->layout.n_stream > 1 ? e->p.seq : 0;
}

/* Whether keep sets per head can be written into the cache's tensors: 1
 * when no other sequence can share the sequence's cells (a stream per
 * sequence, or a context of one sequence: in one stream
 * llama_memory_seq_cp shares cells, and a write in place would change the
 * other sequence too), and the tensors are what cache_tensor_ok wants and
 * hold, for each of the blob's n cells (the b-th in cell order is cell
 * tgt[b]), exactly the blob's bytes of every layer's K row and V
 * elements; 0 when that cannot be told yet (a tensor not seen by the
 * callback yet, no memory for the check): the next such eviction checks
 * again; -1 when not. */
static int cache_matches_blob(scdb_llama_evictor *e, struct llama_context *ctx, size_t got, int n)
{
    if (e->layout.n_stream < 2 && llama_n_seq_max(ctx) > 1)
        return -1;
    for (int l = 0; l < e->n_layer; l++)
        if (!e->kcache || !e->vcache || !e->kcache[l] || !e->vcache[l])
            return 0;
    const int L = e->n_layer, strm = seq_stream(e), nc = e->n_cells;
    const size_t kv = (size_t)e->n_kv_heads * (size_t)e->head_dim;
    const size_t ks = e->layout.k_type == GGML_TYPE_F32 ? 4 : 2;
    const size_t vs = e->layout.v_type == GGML_TYPE_F32 ? 4 : 2;
    const uint8_t **kb = malloc((size_t)L * sizeof *kb), **vb = malloc((size_t)L * sizeof *vb);
    if (!kb || !vb) {
        free(kb);
        free(vb);
        return 0;
    }
    int cells = 0, ok = !ll_blob_layer_rows(&e->layout, e->blob, got, kb, vb, &cells, NULL, 0) &&
                        cells == n;
    for (int l = 0; l < L && ok; l++) {
        const struct ggml_tensor *K = e->kcache[l], *V = e->vcache[l];
        ok = cache_tensor_ok(e, K, e->layout.k_type, strm) &&
             cache_tensor_ok(e, V, e->layout.v_type, strm);
        for (int b = 0; b < n && ok; b++)
            ok = !memcmp(kb[l] + (size_t)b * kv * ks,
                         (const uint8_t *)K->data + (((size_t)strm * nc + (size_t)e->tgt[b]) * kv) * ks,
                         kv * ks);
        /* V: element d of the blob's b-th cell against cell tgt[b]'s */
        for (size_t d = 0; d < kv && ok; d++) {
            const uint8_t *bl = vb[l] + d * (size_t)n * vs;
            const uint8_t *cr = (const uint8_t *)V->data + ((size_t)strm * kv + d) * nc * vs;
            int diff = 0;
            if (vs == 2)
                for (int b = 0; b < n; b++)
                    diff |= ((const uint16_t *)(const void *)bl)[b] !=
                            ((const uint16_t *)(const void *)cr)[e->tgt[b]];
            else
                for (int b = 0; b < n; b++)
                    diff |= ((const uint32_t *)(const void *)bl)[b] !=
                            ((const uint32_t *)(const void *)cr)[e->tgt[b]];
            ok = !diff;
        }
    }
    free(kb);
    free(vb);
    return ok ? 1 : -1;
}

/* Keep sets per head written in place: the policy runs as for the state
 * writer, on a 1-wide cache whose K holds, per (layer, group), the cell of
 * the slot.  New slot i takes the cell of from[i], the latest old slot
 * any set keeps at i (strictly increasing in i, as each set's old slots
 * are): every other cell of the sequence is removed (seq_rm, a call per
 * run), and each set's row of slot i is copied into that cell from the
 * cell the set kept there (K's row of the group's head, V's elements:
 * the blob's bytes, no conversion).  Slots go from the last down: a set's
 * source at slot i is an old slot no later than from[i], and the cells
 * written later are those of earlier old slots still, so no row is
 * overwritten before it is read.  Cells keep their llama.cpp positions
 * (lpos, which later seq_rm calls use); the slot's policy position is
 * the newest of the sets' there (as the state writer would write it),
 * which can be older than its cell's. */
static scdb_err evict_sets_in_place(scdb_llama_evictor *e, struct llama_context *ctx,
                                    int32_t *kept, int *nk)
{
    const int n = e->shadow->n, L = e->n_layer, G = e->n_kv_heads, hd = e->head_dim;
    const int strm = seq_stream(e), nc = e->n_cells;
    const size_t kv = (size_t)G * (size_t)hd;
    const size_t ks = e->layout.k_type == GGML_TYPE_F32 ? 4 : 2;
    const size_t vs = e->layout.v_type == GGML_TYPE_F32 ? 4 : 2;
    for (int sl = 0; sl < n; sl++) {
        e->tiny->pos[sl] = e->shadow->pos[sl];
        for (int l = 0; l < L; l++)
            for (int g = 0; g < G; g++)
                scdb_kv_k(e->tiny, l, sl)[g] = scdb_kv_v(e->tiny, l, sl)[g] =
                    (float)e->slot_cell[sl];
    }
    e->tiny->n = n;
    scdb_err err = scdb_evict_run(e->policy, e->tiny, e->acc, e->p.budget, kept, nk);
    if (err) {
        snprintf(e->err, sizeof e->err, "eviction: %s", scdb_strerror(err));
        return err;
    }
    /* from here on the accumulators hold m slots: a failure stops the
     * evictor (start it again), never a shadow that is not the sequence */
    const int m = *nk;
    int *mark = e->in_pos;       /* old slot j is a target */
    int *from = e->src;          /* new slot i's cell was old slot from[i]'s */
    for (int j = 0; j < n; j++)
        mark[j] = 0;
    for (int i = 0; i < m; i++) {
        int ji = -1, bad = 0;
        for (int l = 0; l < L && !bad; l++)
            for (int g = 0; g < G && !bad; g++) {
                float c = scdb_kv_k(e->tiny, l, i)[g];
                int sj = c >= 0.0f && c < (float)nc ? e->cell_slot[(int)c] : -1;
                bad = sj < 0;
                if (sj > ji)
                    ji = sj;
            }
        if (bad || ji < 0 || (i > 0 && ji <= from[i - 1])) {
            snprintf(e->err, sizeof e->err, "keep sets per head: slot %d's cells are not the "
                     "sequence's, in slot order (the evictor is stopped)", i);
            e->started = 0;
            e->stopped = 1;
            return SCDB_EMISMATCH;
        }
        from[i] = ji;
        e->tgt[i] = e->slot_cell[ji];
        mark[ji] = 1;
    }
    int *ms = e->src + (size_t)nc, *md = ms + nc;    /* a set's moves (from is [0, nc)) */
    for (int l = 0; l < L; l++) {
        uint8_t *K = (uint8_t *)e->kcache[l]->data + (size_t)strm * nc * kv * ks;
        uint8_t *V = (uint8_t *)e->vcache[l]->data + (size_t)strm * kv * nc * vs;
        for (int g = 0; g < G; g++) {
            int nm = 0;
            for (int i = m - 1; i >= 0; i--) {
                int src = (int)scdb_kv_k(e->tiny, l, i)[g], dst = e->tgt[i];
                if (src != dst) {
                    ms[nm] = src;
                    md[nm++] = dst;
                }
            }
            for (int j = 0; j < nm; j++)
                memcpy(K + ((size_t)md[j] * kv + (size_t)g * hd) * ks,
                       K + ((size_t)ms[j] * kv + (size_t)g * hd) * ks, (size_t)hd * ks);
            /* V transposed: a row of cells per element, each row in order */
            for (size_t d = (size_t)g * hd; d < (size_t)(g + 1) * hd; d++) {
                if (vs == 2) {
                    uint16_t *row = (uint16_t *)(void *)(V + d * nc * 2);
                    for (int j = 0; j < nm; j++)
                        row[md[j]] = row[ms[j]];
                } else {
                    uint32_t *row = (uint32_t *)(void *)(V + d * nc * 4);
                    for (int j = 0; j < nm; j++)
                        row[md[j]] = row[ms[j]];
                }
            }
        }
    }
    llama_memory_t mem = llama_get_memory(ctx);
    for (int i = 0; i < n;) {
        if (mark[i]) {
            i++;
            continue;
        }
        int i1 = i;
        while (i1 < n && !mark[i1])
            i1++;
        if (!llama_memory_seq_rm(mem, e->p.seq, e->old_lpos[i], e->old_lpos[i1 - 1] + 1)) {
            snprintf(e->err, sizeof e->err, "llama_memory_seq_rm refused positions [%d, %d] "
                     "(the evictor is stopped)", e->old_lpos[i], e->old_lpos[i1 - 1]);
            e->started = 0;
            e->stopped = 1;
            return SCDB_EIO;
        }
        i = i1;
    }
    for (int j = 0; j < n; j++)
        e->cell_slot[e->slot_cell[j]] = -1;
    for (int i = 0; i < m; i++) {
        e->slot_cell[i] = e->tgt[i];
        e->cell_slot[e->tgt[i]] = i;
        e->lpos[i] = e->old_lpos[from[i]];
    }
    memcpy(e->shadow->pos, e->tiny->pos, (size_t)m * sizeof *e->shadow->pos);
    e->shadow->n = m;
    if (llama_memory_seq_pos_max(mem, e->p.seq) != e->last_pos) {
        snprintf(e->err, sizeof e->err, "after the eviction, sequence %d ends at position %d, "
                 "want %d", e->p.seq, llama_memory_seq_pos_max(mem, e->p.seq), e->last_pos);
        e->started = 0;
        e->stopped = 1;
        return SCDB_EMISMATCH;
    }
    return SCDB_OK;
}

/* Keep sets per (layer, KV group), which llama_memory_seq_rm cannot apply
 * (it removes a position from every layer): the sequence's state is read
 * from llama.cpp, evicted and compacted per set exactly as scdb's engine
 * does (scdb_evict_run on the accumulators' per-head layout: slot i of set
 * k holds the i-th token the set kept, the slot's position the newest of
 * the sets'), and written back with llama_state_seq_set_data, which puts
 * slot i in cell i.  The compaction runs on a 1-wide cache whose K holds,
 * per (layer, group), the blob cell of the slot; the new blob is gathered
 * from the old one's bytes (ll_blob_gather_heads: no conversion).  K is
 * stored after RoPE, so a row moved to another cell attends as before;
 * every kept position is older than every new token.  kept[] gets the
 * slots' positions, *nk their count. */
static scdb_err evict_sets(scdb_llama_evictor *e, struct llama_context *ctx, int32_t *kept, int *nk)
{
    const int n = e->shadow->n, L = e->n_layer, G = e->n_kv_heads;
    scdb_err err;
    if (e->in_place > 0)
        return evict_sets_in_place(e, ctx, kept, nk);
    size_t bn = e->size_known ? scdb_llama_blob_bytes(&e->layout, n)
                              : llama_state_seq_get_size(ctx, e->p.seq);
    if (grow(&e->blob, &e->blob_cap, bn))
        return SCDB_ENOMEM;
    size_t got = llama_state_seq_get_data(ctx, e->blob, bn, e->p.seq);
    if (!got) {
        snprintf(e->err, sizeof e->err, "llama_state_seq_get_data wrote nothing for sequence %d",
                 e->p.seq);
        return SCDB_EIO;
    }
    if (!e->layout.n_layer) {
        scdb_llama_layout Lo = {.n_layer = L, .n_kv_heads = G, .head_dim = e->head_dim};
        if ((err = ll_layout_from_blob(e->blob, got, &Lo, NULL, e->err, sizeof e->err)))
            return err;
        e->layout = Lo;
    }
    if (!e->size_known)
        e->size_known = got == bn && bn == scdb_llama_blob_bytes(&e->layout, n);
    int in_n = 0;
    if ((err = ll_blob_gather_heads(&e->layout, e->blob, got, e->p.seq, NULL, NULL, 0, e->in_pos,
                                    e->n_cells, &in_n, NULL, 0, NULL, e->err, sizeof e->err)))
        return err;
    if (in_n != n) {
        snprintf(e->err, sizeof e->err, "llama.cpp holds %d cells of sequence %d, the evictor %d",
                 in_n, e->p.seq, n);
        return SCDB_EMISMATCH;
    }
    /* slot order: the k-th cell the blob lists is the k-th used cell,
     * slot cell_slot[that cell] */
    for (int c = 0, b = 0; c < e->n_cells && b < n; c++) {
        int sl = e->cell_slot[c];
        if (sl < 0)
            continue;
        if (e->in_pos[b] != e->lpos[sl]) {
            snprintf(e->err, sizeof e->err, "cell %d holds position %d, the evictor's slot %d "
                     "position %d", c, e->in_pos[b], sl, e->lpos[sl]);
            return SCDB_EMISMATCH;
        }
        e->tiny->pos[sl] = e->shadow->pos[sl];
        e->tgt[b] = c;
        for (int l = 0; l < L; l++)
            for (int g = 0; g < G; g++)
                scdb_kv_k(e->tiny, l, sl)[g] = scdb_kv_v(e->tiny, l, sl)[g] = (float)b;
        b++;
    }
    e->tiny->n = n;
    if (!e->in_place) {
        e->in_place = cache_matches_blob(e, ctx, got, n);
        if (e->in_place > 0)
            return evict_sets_in_place(e, ctx, kept, nk);
    }
    /* what can fail is checked before the run compacts the accumulators:
     * the output's room here, the blob's whole shape by the gather (a
     * blob of another shape failed above or fails there, and the run is
     * not repeated: see below) */
    if (grow(&e->out, &e->out_cap, scdb_llama_blob_bytes(&e->layout, n < e->p.budget ? n : e->p.budget)))
        return SCDB_ENOMEM;
    if ((err = scdb_evict_run(e->policy, e->tiny, e->acc, e->p.budget, kept, nk))) {
        snprintf(e->err, sizeof e->err, "eviction: %s", scdb_strerror(err));
        return err;
    }
    const int m = *nk;
    for (int l = 0; l < L; l++)
        for (int g = 0; g < G; g++)
            for (int i = 0; i < m; i++)
                e->src[((size_t)l * G + g) * m + i] = (int)scdb_kv_k(e->tiny, l, i)[g];
    size_t len = 0;
    /* from here on the accumulators hold m slots and llama.cpp n: a
     * failure leaves the evictor stopped (start it again), never a shadow
     * that is not the sequence */
    if ((err = ll_blob_gather_heads(&e->layout, e->blob, got, e->p.seq, e->src, e->tiny->pos, m,
                                    NULL, 0, &in_n, e->out, e->out_cap, &len, e->err,
                                    sizeof e->err))) {
        e->started = 0;
        e->stopped = 1;
        return err;
    }
    if (llama_state_seq_set_data(ctx, e->out, len, e->p.seq) != len) {
        /* (llama.cpp clears the sequence before it reads a blob back) */
        snprintf(e->err, sizeof e->err, "llama_state_seq_set_data refused the %d cells kept per "
                 "head for sequence %d (llama.cpp cleared the sequence; the evictor is stopped)",
                 m, e->p.seq);
        e->started = 0;
        e->stopped = 1;
        return SCDB_EMISMATCH;
    }
    memcpy(e->shadow->pos, e->tiny->pos, (size_t)m * sizeof *e->shadow->pos);
    memcpy(e->lpos, e->tiny->pos, (size_t)m * sizeof *e->lpos);
    e->shadow->n = m;
    for (int c = 0; c < e->n_cells; c++)
        e->cell_slot[c] = c < m ? c : -1;
    for (int i = 0; i < m; i++)
        e->slot_cell[i] = i;
    if (llama_memory_seq_pos_max(llama_get_memory(ctx), e->p.seq) != e->last_pos) {
        snprintf(e->err, sizeof e->err, "after the state write, sequence %d ends at position %d, "
                 "want %d", e->p.seq, llama_memory_seq_pos_max(llama_get_memory(ctx), e->p.seq),
                 e->last_pos);
        e->started = 0;
        e->stopped = 1;
        return SCDB_EMISMATCH;
    }
    return SCDB_OK;
}

static scdb_err evict(scdb_llama_evictor *e, struct llama_context *ctx, scdb_llama_evict_result *r)
{
    const int n = e->shadow->n;
    memcpy(e->old_pos, e->shadow->pos, (size_t)n * sizeof *e->old_pos);
    memcpy(e->old_lpos, e->lpos, (size_t)n * sizeof *e->old_lpos);
    int *cells = malloc((size_t)n * sizeof *cells);
    int32_t *kept = malloc((size_t)e->p.budget * sizeof *kept);
    if (!cells || !kept) {
        free(cells);
        free(kept);
        return SCDB_ENOMEM;
    }
    memcpy(cells, e->slot_cell, (size_t)n * sizeof *cells);
    int nk = 0;
    if (e->heads && scdb_evict_policy_wants_sets(e->policy, e->acc, e->p.budget)) {
        scdb_err err = evict_sets(e, ctx, kept, &nk);
        if (!err) {
            r->evictions++;
            r->evicted += n - nk;
            r->sets_in_place += e->in_place > 0;  /* (from the first, once checked) */
        }
        free(cells);
        free(kept);
        return err;
    }
    /* the policies read the accumulators, not the cache: compact the
     * positions-only twin (the shadow's K and V rows of old slots are never
     * read again), then take its positions back */
    memcpy(e->slim->pos, e->shadow->pos, (size_t)n * sizeof *e->slim->pos);
    e->slim->n = n;
    scdb_err err = scdb_evict_run(e->policy, e->slim, e->acc, e->p.budget, kept, &nk);
    if (!err) {
        memcpy(e->shadow->pos, e->slim->pos, (size_t)nk * sizeof *e->shadow->pos);
        e->shadow->n = nk;
    }
    if (err) {
        snprintf(e->err, sizeof e->err, "eviction: %s", scdb_strerror(err));
        goto done;
    }
    /* slots are in position order and the sequence holds exactly their
     * positions: a run of removed slots is one seq_rm over the span from
     * its first position to its last (positions between are absent), and
     * each call scans every cell of the stream */
    llama_memory_t mem = llama_get_memory(ctx);
    int j = 0, removed = 0;
    for (int i = 0; i < n;) {
        if (j < nk && kept[j] == e->old_pos[i]) {
            e->lpos[j] = e->old_lpos[i];
            e->slot_cell[j] = cells[i];
            e->cell_slot[cells[i]] = j;
            j++;
            i++;
            continue;
        }
        int i1 = i;
        while (i1 < n && !(j < nk && kept[j] == e->old_pos[i1]))
            e->cell_slot[cells[i1++]] = -1;
        if (!llama_memory_seq_rm(mem, e->p.seq, e->old_lpos[i], e->old_lpos[i1 - 1] + 1)) {
            snprintf(e->err, sizeof e->err, "llama_memory_seq_rm refused positions [%d, %d]",
                     e->old_lpos[i], e->old_lpos[i1 - 1]);
            err = SCDB_EIO;
            goto done;
        }
        removed += i1 - i;
        i = i1;
    }
    if (j != nk) {
        snprintf(e->err, sizeof e->err, "the kept positions are not a subsequence of the cache's");
        err = SCDB_EINVAL;
        goto done;
    }
    r->evictions++;
    r->evicted += removed;
done:
    free(cells);
    free(kept);
    return err;
}

scdb_err scdb_llama_evictor_evict(scdb_llama_evictor *e, struct llama_context *ctx,
                                  scdb_llama_evict_result *out)
{
    scdb_llama_evict_result r = {0};
    if (out)
        *out = r;
    if (!e || !ctx)
        return SCDB_EINVAL;
    if (!e->started) {
        if (e->stopped)          /* e->err says why */
            return SCDB_ECLOSED;
        snprintf(e->err, sizeof e->err, "the evictor was not started on a sequence");
        return SCDB_EINVAL;
    }
    if (llama_memory_seq_pos_max(llama_get_memory(ctx), e->p.seq) != e->last_pos) {
        snprintf(e->err, sizeof e->err, "sequence %d was cleared or changed outside the evictor",
                 e->p.seq);
        return SCDB_ECLOSED;
    }
    scdb_err err = SCDB_OK;
    if (e->shadow->n > e->p.budget) {
        double t0 = ll_now_ms();
        err = evict(e, ctx, &r);
        e->since = 0;
        r.evict_us = (ll_now_ms() - t0) * 1e3;
    }
    r.cells = e->shadow->n;
    if (out)
        *out = r;
    return err;
}

scdb_err scdb_llama_evictor_decode(scdb_llama_evictor *e, struct llama_context *ctx,
                                   const llama_token *tokens, size_t n, int all_logits,
                                   scdb_llama_evict_result *out)
{
    scdb_llama_evict_result r = {0};
    if (out)
        *out = r;
    if (!e || !ctx || !tokens || !n)
        return SCDB_EINVAL;
    if (!e->started) {
        if (e->stopped)          /* e->err says why */
            return SCDB_ECLOSED;
        snprintf(e->err, sizeof e->err, "the evictor was not started on a sequence");
        return SCDB_EINVAL;
    }
    llama_memory_t mem = llama_get_memory(ctx);
    if (llama_memory_seq_pos_max(mem, e->p.seq) != e->last_pos) {
        snprintf(e->err, sizeof e->err, "sequence %d ends at position %d, the evictor's at %d: it "
                 "was cleared or changed outside the evictor (start it again)", e->p.seq,
                 llama_memory_seq_pos_max(mem, e->p.seq), e->last_pos);
        return SCDB_ECLOSED;
    }
    if (!e->has_batch) {
        e->batch = llama_batch_init(LL_CHUNK, 0, 1);
        e->has_batch = 1;
    }
    if (!e->batch.token || !e->batch.pos || !e->batch.n_seq_id || !e->batch.seq_id ||
        !e->batch.logits) {
        snprintf(e->err, sizeof e->err, "out of memory for a batch of %d tokens", LL_CHUNK);
        return SCDB_ENOMEM;
    }
    llama_batch b = e->batch;
    scdb_err err = SCDB_OK;
    for (size_t i = 0; i < n && !err;) {
        /* a chunk fits the context's ubatch and the cells left (a budget
         * near the context's size decodes in smaller chunks, not EFULL) */
        int m = (int)(n - i < (size_t)e->chunk ? n - i : (size_t)e->chunk);
        if (m > e->n_cells - e->shadow->n)
            m = e->n_cells - e->shadow->n;
        if (m < 1) {
            snprintf(e->err, sizeof e->err, "the sequence holds all %d cells of the context "
                     "(budget %d, cadence %d: evict before decoding more)", e->n_cells,
                     e->p.budget, e->p.cadence);
            err = SCDB_EFULL;
            break;
        }
        b.n_tokens = m;
        for (int j = 0; j < m; j++) {
            b.token[j] = tokens[i + (size_t)j];
            b.pos[j] = e->last_pos + 1 + j;
            b.n_seq_id[j] = 1;
            b.seq_id[j][0] = e->p.seq;
            b.logits[j] = all_logits || i + (size_t)j == n - 1;
        }
        memset(e->got_probs, 0, (size_t)e->n_layer * sizeof *e->got_probs);
        memset(e->got_v, 0, (size_t)e->n_layer * sizeof *e->got_v);
        e->bad = 0;
        e->n_new = m;
        /* every layer's attention, or (capture_every) on a single token
         * between: its cell (off the mask) and, where V is not read from
         * the cache, its V (Vcur-N) */
        int full = e->p.capture_every <= 1 || m > 1 || e->v_mode == 0 ||
                   e->uncaptured >= e->p.capture_every - 1;
        e->capturing = full ? 1 : 2;
        double t0 = ll_now_ms();
        int rc = llama_decode(ctx, b);
        e->capturing = 0;
        double t1 = ll_now_ms();
        r.decode_us += (t1 - t0) * 1e3;
        if (rc != 0) {
            snprintf(e->err, sizeof e->err, "llama_decode failed (%d)", rc);
            err = SCDB_EIO;
            /* (a decode that fails takes its ubatch's cells back itself) */
            if (llama_memory_seq_pos_max(mem, e->p.seq) != e->last_pos)
                llama_memory_seq_rm(mem, e->p.seq, e->last_pos + 1, -1);
            break;
        }
        for (int l = 0; l < e->n_layer; l++)
            if (((full || l == 0) && !e->got_probs[l]) || (e->v_mode != 1 && !e->got_v[l]) ||
                e->bad) {
                snprintf(e->err, sizeof e->err, "layer %d's attention or V was not seen: was the "
                         "context made with scdb_llama_evictor_cparams (flash attention off)?", l);
                err = SCDB_EUNSUPPORTED;
                break;
            }
        if (!err)
            err = fold(e, b.pos, m, full);
        if (err) {
            /* the chunk is in llama.cpp, not in the shadow: take it out, so
             * the sequence is what it was before this call's chunk and the
             * evictor stays usable */
            llama_memory_seq_rm(mem, e->p.seq, e->last_pos + 1, -1);
            break;
        }
        e->last_pos += m;
        e->since += m;
        e->uncaptured = full ? 0 : e->uncaptured + 1;
        r.full_reads += full;
        r.mask_reads += !full && !e->no_mask;
        double t2 = ll_now_ms();
        r.stats_us += (t2 - t1) * 1e3;
        if (e->p.cadence > 0 && e->shadow->n >= e->p.budget + e->p.cadence) {
            err = evict(e, ctx, &r);
            e->since = 0;
            r.evict_us += (ll_now_ms() - t2) * 1e3;
        }
        i += (size_t)m;
    }
    r.cells = e->shadow->n;
    if (out)
        *out = r;
    return err;
}
