/* producer.c — capturing a llama.cpp prefill for the broker (scdb_llama.h,
 * "producer"): a cb_eval callback reads attn_norm-N (H_in of layer N, the
 * normalised input of its attention) straight into the broker's states
 * arena while llama_decode runs; the broker encodes and stores it.  For a
 * raw codebook the sequence's own KV is read back through its blob. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_int.h"

struct scdb_llama_producer {
    scdb *h;
    scdb_info info;
    int raw;                     /* raw/<model>: put the KV, not states */
    int max_tokens;
    scdb_arena *states;          /* scd: the broker's states arena */
    float *rows;                 /* its memory, [layers][n][dim] packed by n */
    int s_layers, s_dim;
    /* capture state, valid during scdb_llama_producer_prefill only */
    int capturing;
    size_t n;                    /* tokens of this prefill (the packing) */
    size_t *filled;              /* per layer: rows written so far */
    int bad;                     /* a tensor of the wrong shape was seen */
    ggml_backend_sched_eval_callback user_cb;
    void *user_ud;
    char err[LL_ERR_MAX];
};

scdb_llama_producer_params scdb_llama_producer_default_params(void)
{
    scdb_llama_producer_params p = {0};
    p.max_tokens = 512;
    return p;
}

const char *scdb_llama_producer_error(const scdb_llama_producer *p) { return p ? p->err : ""; }
scdb *scdb_llama_producer_handle(scdb_llama_producer *p) { return p ? p->h : NULL; }

static bool capture_cb(struct ggml_tensor *t, bool ask, void *ud)
{
    scdb_llama_producer *p = ud;
    int l = p->capturing ? ll_layer_of(t->name, "attn_norm") : -1;
    if (l < 0 || l >= p->s_layers) {
        if (p->user_cb)
            return p->user_cb(t, ask, p->user_ud);
        return ask ? false : true;
    }
    if (ask)
        return true;
    /* layer l's rows of the states arena: [n][dim] at scdb_states_row(l, 0) */
    if (ll_take_rows(t, scdb_states_row(p->rows, p->s_dim, p->n, l, 0), p->s_dim, p->n, &p->filled[l]))
        p->bad = 1;
    return true;
}

void scdb_llama_producer_cparams(scdb_llama_producer *p, struct llama_context_params *cp)
{
    if (!p || !cp || cp->cb_eval == capture_cb)
        return;
    p->user_cb = cp->cb_eval;
    p->user_ud = cp->cb_eval_user_data;
    cp->cb_eval = capture_cb;
    cp->cb_eval_user_data = p;
}

scdb_err scdb_llama_producer_open(const scdb_llama_producer_params *pp, scdb_llama_producer **out,
                                  char *errbuf, size_t errlen)
{
    if (!out)
        return SCDB_EINVAL;
    *out = NULL;
    scdb_err err = scdb_llama_init(errbuf, errlen);
    if (err)
        return err;
    if (!pp || !pp->producer || !*pp->producer || pp->max_tokens < 0) {
        ll_msg(errbuf, errlen, "a producer needs its model's name");
        return SCDB_EINVAL;
    }
    scdb_llama_producer *p = calloc(1, sizeof *p);
    if (!p)
        return SCDB_ENOMEM;
    p->max_tokens = pp->max_tokens ? pp->max_tokens : 512;
    char fp[33];
    if ((err = ll_register(pp->endpoint, pp->timeout_ms, SCDB_PRODUCER, pp->producer, pp->codebook,
                           pp->model_path, NULL, &p->h, &p->info, fp, errbuf, errlen)))
        goto fail;
    p->raw = strcmp(p->info.codebook_kind, "raw") == 0;
    if (!p->raw) {
        if (p->info.states_dim <= 0) {
            ll_msg(errbuf, errlen, "the broker does not encode codebook '%s' (no states)",
                   pp->codebook ? pp->codebook : "");
            err = SCDB_EUNSUPPORTED;
            goto fail;
        }
        if ((err = scdb_states_arena_new(p->h, p->max_tokens, &p->states))) {
            ll_msg(errbuf, errlen, "%s", scdb_last_error(p->h));
            goto fail;
        }
        int cap = 0;
        p->rows = scdb_arena_states(p->states, &p->s_layers, &p->s_dim, &cap);
        p->filled = calloc((size_t)p->s_layers, sizeof *p->filled);
        if (!p->filled) {
            err = SCDB_ENOMEM;
            goto fail;
        }
    }
    *out = p;
    return SCDB_OK;
fail:
    scdb_arena_free(&p->states);
    scdb_close(&p->h);
    free(p->filled);
    free(p);
    return err;
}

void scdb_llama_producer_close(scdb_llama_producer **pp)
{
    if (!pp || !*pp)
        return;
    scdb_llama_producer *p = *pp;
    scdb_arena_free(&p->states);
    scdb_close(&p->h);
    free(p->filled);
    free(p);
    *pp = NULL;
}

scdb_err scdb_llama_producer_prefill(scdb_llama_producer *p, struct llama_context *ctx,
                                     llama_seq_id seq, const llama_token *tokens, size_t n,
                                     scdb_llama_put_result *out)
{
    scdb_llama_put_result r = {0};
    if (out)
        *out = r;
    if (!p || !ctx || !tokens || !n)
        return SCDB_EINVAL;
    if (n > (size_t)p->max_tokens) {
        snprintf(p->err, sizeof p->err, "%zu tokens, the producer was opened for %d", n,
                 p->max_tokens);
        return SCDB_ETOOBIG;
    }
    if (!ll_seq_ok(ctx, seq, p->err, sizeof p->err))
        return SCDB_EINVAL;
    llama_memory_t mem = llama_get_memory(ctx);
    if (llama_memory_seq_pos_max(mem, seq) >= 0) {
        snprintf(p->err, sizeof p->err, "sequence %d is not empty", seq);
        return SCDB_EBUSY;
    }
    scdb_err err;
    if (!p->raw) {
        p->n = n;
        p->bad = 0;
        memset(p->filled, 0, (size_t)p->s_layers * sizeof *p->filled);
        p->capturing = 1;
    }
    double t0 = ll_now_ms();
    err = scdb_llama_decode(ctx, seq, tokens, n, 0, 0);
    p->capturing = 0;
    r.prefill_ms = ll_now_ms() - t0;
    if (err) {
        snprintf(p->err, sizeof p->err, "llama_decode failed");
        return err;
    }
    double t1 = ll_now_ms();
    if (p->raw) {
        scdb_llama_layout L;
        scdb_kv_cache *c = NULL;
        /* the layout of the sequence just written: probe needs an empty
         * sequence, so read it from the blob's own header instead */
        const struct llama_model *m = llama_get_model(ctx);
        L.n_layer = llama_model_n_layer(m);
        L.n_kv_heads = llama_model_n_head_kv(m);
        L.head_dim = llama_model_n_embd(m) / llama_model_n_head(m);
        if ((err = scdb_kv_cache_new(L.n_layer, L.n_kv_heads, L.head_dim, (int)n, &c)))
            return err;
        size_t bn = llama_state_seq_get_size(ctx, seq);
        uint8_t *blob = malloc(bn ? bn : 1);
        if (!blob) {
            scdb_kv_cache_free(&c);
            return SCDB_ENOMEM;
        }
        size_t got = llama_state_seq_get_data(ctx, blob, bn, seq);
        err = ll_layout_from_blob(blob, got, &L, NULL, p->err, sizeof p->err);
        if (!err)
            err = scdb_llama_blob_read(&L, blob, got, c, p->err, sizeof p->err);
        free(blob);
        /* token i's KV is cell i's: the put stores slot i under token i */
        for (int i = 0; !err && i < c->n; i++)
            if (c->pos[i] != i) {
                snprintf(p->err, sizeof p->err, "cell %d holds position %d, want %d: another "
                         "sequence shares the context's KV stream?", i, c->pos[i], i);
                err = SCDB_EMISMATCH;
            }
        if (!err && c->n != (int)n) {
            snprintf(p->err, sizeof p->err, "the sequence holds %d cells after a prefill of %zu",
                     c->n, n);
            err = SCDB_EMISMATCH;
        }
        if (!err && (err = scdb_put_cache(p->h, (const int32_t *)tokens, n, c, &r.put)))
            snprintf(p->err, sizeof p->err, "%s", scdb_last_error(p->h));
        scdb_kv_cache_free(&c);
        if (err)
            return err;
    } else {
        for (int l = 0; l < p->s_layers; l++)
            if (p->filled[l] != n || p->bad) {
                snprintf(p->err, sizeof p->err, "the prefill captured %zu of %zu rows of layer "
                         "%d%s: was the context made with scdb_llama_producer_cparams?",
                         p->filled[l], n, l, p->bad ? " (a tensor of another shape)" : "");
                return SCDB_EINVAL;
            }
        if ((err = scdb_put_states(p->h, (const int32_t *)tokens, n, 0, p->states, &r.put))) {
            snprintf(p->err, sizeof p->err, "%s", scdb_last_error(p->h));
            return err;
        }
    }
    r.put_ms = ll_now_ms() - t1;
    if (out)
        *out = r;
    return SCDB_OK;
}
