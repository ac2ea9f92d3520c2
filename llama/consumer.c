/* consumer.c — restoring a stored prefix into a llama.cpp sequence
 * (scdb_llama.h, "consumer"): the broker decodes into an arena of this
 * consumer's KV space (libscdb's scdb_get), the arena's slots are written
 * into the sequence as llama.cpp's own state blob (blob.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_int.h"

#define LL_MAX_CTX 16

struct scdb_llama_consumer {
    scdb *h;
    scdb_info info;
    struct llama_model *model;
    struct llama_adapter_lora *adapter;
    float scale;
    char fp[33];
    scdb_arena *arena;           /* the get's target, max_seq_len slots */
    uint8_t *blob;               /* the restore's blob, kept between calls */
    size_t blob_cap;
    ll_ctx_layout ctx[LL_MAX_CTX];
    int n_ctx;
    char err[LL_ERR_MAX];
};

scdb_llama_consumer_params scdb_llama_consumer_default_params(void)
{
    scdb_llama_consumer_params p = {0};
    p.adapter_scale = 1.0f;
    return p;
}

scdb_llama_restore_params scdb_llama_restore_default_params(void)
{
    scdb_llama_restore_params p = {0};
    p.patch_layers = -1;
    p.min_tokens = 1;
    return p;
}

const char *scdb_llama_consumer_error(const scdb_llama_consumer *c) { return c ? c->err : ""; }
scdb *scdb_llama_consumer_handle(scdb_llama_consumer *c) { return c ? c->h : NULL; }
const char *scdb_llama_consumer_fingerprint(const scdb_llama_consumer *c)
{
    return c ? c->fp : "";
}

scdb_err scdb_llama_consumer_open(const scdb_llama_consumer_params *p, scdb_llama_consumer **out,
                                  char *errbuf, size_t errlen)
{
    if (!out)
        return SCDB_EINVAL;
    *out = NULL;
    scdb_err err = scdb_llama_init(errbuf, errlen);
    if (err)
        return err;
    if (!p || !p->model || !p->consumer || !*p->consumer || (p->adapter_path && !p->adapter)) {
        ll_msg(errbuf, errlen, "a consumer needs its model, its name, and the adapter object "
               "when it names an adapter file");
        return SCDB_EINVAL;
    }
    scdb_llama_consumer *c = calloc(1, sizeof *c);
    if (!c)
        return SCDB_ENOMEM;
    c->model = p->model;
    c->adapter = p->adapter;
    c->scale = p->adapter_scale;
    if ((err = ll_register(p->endpoint, p->timeout_ms, SCDB_CONSUMER, p->consumer, p->codebook,
                           p->model_path, p->adapter_path, &c->h, &c->info, c->fp, errbuf,
                           errlen))) {
        free(c);
        return err;
    }
    *out = c;
    return SCDB_OK;
}

void scdb_llama_consumer_close(scdb_llama_consumer **pc)
{
    if (!pc || !*pc)
        return;
    scdb_llama_consumer *c = *pc;
    scdb_arena_free(&c->arena);
    scdb_close(&c->h);
    free(c->blob);
    free(c);
    *pc = NULL;
}

scdb_err scdb_llama_consumer_use(scdb_llama_consumer *c, struct llama_context *ctx)
{
    if (!c || !ctx)
        return SCDB_EINVAL;
    if ((const struct llama_model *)c->model != llama_get_model(ctx)) {
        snprintf(c->err, sizeof c->err, "the context runs another model than this consumer's");
        return SCDB_EMISMATCH;
    }
    struct llama_adapter_lora *a = c->adapter;
    float s = c->scale;
    if (llama_set_adapters_lora(ctx, a ? &a : NULL, a ? 1 : 0, a ? &s : NULL) != 0) {
        snprintf(c->err, sizeof c->err, "llama_set_adapters_lora failed");
        return SCDB_EIO;
    }
    return SCDB_OK;
}

void scdb_llama_consumer_forget(scdb_llama_consumer *c, const struct llama_context *ctx)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_ctx; i++)
        if (c->ctx[i].ctx == ctx) {
            memmove(&c->ctx[i], &c->ctx[i + 1], (size_t)(c->n_ctx - i - 1) * sizeof c->ctx[0]);
            c->n_ctx--;
            return;
        }
}

/* The context's layout: probed at its first restore and kept, the most
 * recently probed LL_MAX_CTX contexts (the oldest forgotten first) */
static const scdb_llama_layout *layout_of(scdb_llama_consumer *c, struct llama_context *ctx,
                                          llama_seq_id seq, scdb_err *err)
{
    for (int i = 0; i < c->n_ctx; i++)
        if (c->ctx[i].ctx == ctx)
            return &c->ctx[i].L;
    scdb_llama_layout L;
    if ((*err = scdb_llama_probe(ctx, seq, &L, c->err, sizeof c->err)))
        return NULL;
    if (L.n_layer != c->info.n_layers || L.n_kv_heads != c->info.n_kv_heads ||
        L.head_dim != c->info.head_dim) {
        snprintf(c->err, sizeof c->err, "the context's KV is %d layers x %d heads x %d, the "
                 "broker decodes %d x %d x %d for this consumer", L.n_layer, L.n_kv_heads,
                 L.head_dim, c->info.n_layers, c->info.n_kv_heads, c->info.head_dim);
        *err = SCDB_ESHAPE;
        return NULL;
    }
    if (c->n_ctx == LL_MAX_CTX) {
        memmove(&c->ctx[0], &c->ctx[1], (LL_MAX_CTX - 1) * sizeof c->ctx[0]);
        c->n_ctx--;
    }
    ll_ctx_layout *slot = &c->ctx[c->n_ctx++];
    slot->ctx = ctx;
    slot->L = L;
    return &slot->L;
}

scdb_err scdb_llama_restore(scdb_llama_consumer *c, struct llama_context *ctx,
                            const llama_token *tokens, size_t n, const scdb_llama_restore_params *pp,
                            scdb_llama_restore_result *out)
{
    scdb_llama_restore_params p = pp ? *pp : scdb_llama_restore_default_params();
    scdb_llama_restore_result r = {0};
    if (out)
        *out = r;
    if (!c || !ctx || (!tokens && n))
        return SCDB_EINVAL;
    if (p.recompute_tail < 0 || p.seq < 0) {
        snprintf(c->err, sizeof c->err, "recompute_tail %d / sequence %d: must not be negative",
                 p.recompute_tail, p.seq);
        return SCDB_EINVAL;
    }
    if (!ll_seq_ok(ctx, p.seq, c->err, sizeof c->err))
        return SCDB_EINVAL;
    scdb_err err = scdb_llama_consumer_use(c, ctx);
    if (err)
        return err;
    const scdb_llama_layout *L = layout_of(c, ctx, p.seq, &err);
    if (!L)
        return err;
    double t0 = ll_now_ms();
    if (!c->arena && (err = scdb_arena_new(c->h, 0, &c->arena))) {
        snprintf(c->err, sizeof c->err, "%s", scdb_last_error(c->h));
        return err;
    }
    scdb_kv_cache *kv = scdb_arena_cache(c->arena);
    kv->n = 0;
    scdb_get_opts go = {.patch_layers = p.patch_layers};
    scdb_get_result gr;
    if ((err = scdb_get_ex(c->h, (const int32_t *)tokens, n, c->arena, 0, 0, &go, &gr))) {
        snprintf(c->err, sizeof c->err, "%s", scdb_last_error(c->h));
        return err;
    }
    r.get_ms = ll_now_ms() - t0;
    r.decode_ns = gr.decode_ns;
    r.n_matched = (int)gr.tokens_written;
    int tail = p.recompute_tail;
    if (!tail && p.pair_default) {
        scdb_recompute d;
        char src[16] = "";
        if ((err = scdb_recompute_default(c->h, &d, src)))
            return err;
        if (d.policy == SCDB_RECOMPUTE_TAIL) {
            tail = scdb_recompute_count(&d, r.n_matched);
        } else if (d.policy == SCDB_RECOMPUTE_INITIAL || d.policy == SCDB_RECOMPUTE_SELECTIVE) {
            char txt[64];
            scdb_recompute_format(&d, txt, sizeof txt);
            snprintf(c->err, sizeof c->err, "the %s's fidelity default is '%s': llama.cpp can only "
                     "recompute a tail (it appends at pos_max + 1); set recompute_tail instead",
                     src[0] ? src : "pair", txt);
            return SCDB_EUNSUPPORTED;
        }
    }
    r.recompute_tail = tail < r.n_matched ? tail : r.n_matched;
    int keep = (int)gr.tokens_written - tail;
    if (keep < 0)
        keep = 0;
    if (keep > 0 && keep >= p.min_tokens) {
        double t1 = ll_now_ms();
        if ((err = ll_seq_write(ctx, L, p.seq, kv, keep, &c->blob, &c->blob_cap, c->err,
                                sizeof c->err))) {
            /* a layout kept for a context freed since, whose address a new
             * one has: probe again at the next restore */
            if (err == SCDB_EMISMATCH)
                scdb_llama_consumer_forget(c, ctx);
            return err;
        }
        r.write_ms = ll_now_ms() - t1;
        r.n_restored = keep;
    }
    if (out)
        *out = r;
    return SCDB_OK;
}
