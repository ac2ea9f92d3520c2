/* recompute.c — scdb_get_recompute: a get, then the tokens a recompute
 * setting chooses taken out of the arena's cache (scdb.h, "fidelity on
 * demand"; the setting and the choice: schema/recompute.h). */
#include "libscdb_int.h"

#include <stdlib.h>
#include <string.h>

void scdb_get_recompute_init(scdb_get_recompute_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->patch_layers = -1;
    o->recompute.policy = SCDB_RECOMPUTE_DEFAULT;
}

scdb_err scdb_recompute_default(const scdb *h, scdb_recompute *out, char *source)
{
    if (!h || !out || !h->registered) return SCDB_EINVAL;
    *out = h->recompute_default;
    if (source) memcpy(source, h->recompute_source, sizeof h->recompute_source);
    return SCDB_OK;
}

static scdb_err grow(scdb *h, size_t n, size_t keep)
{
    if (n > h->rc_cap) {
        int32_t *p = realloc(h->rc_pos, n * sizeof *p), *t;
        if (p) h->rc_pos = p;
        t = realloc(h->rc_tok, n * sizeof *t);
        if (t) h->rc_tok = t;
        int *ix = realloc(h->rc_idx, n * sizeof *ix);
        if (ix) h->rc_idx = ix;
        float *sc = realloc(h->rc_scores, n * sizeof *sc);
        if (sc) h->rc_scores = sc;
        if (!p || !t || !ix || !sc) return SCDB_ENOMEM;
        h->rc_cap = n;
    }
    if (keep > h->rc_keep_cap) {
        int *k = realloc(h->rc_keep, keep * sizeof *k);
        if (!k) return SCDB_ENOMEM;
        h->rc_keep = k;
        h->rc_keep_cap = keep;
    }
    return SCDB_OK;
}

scdb_err scdb_get_recompute(scdb *h, const int32_t *tokens, size_t n_tokens, scdb_arena *a,
                            int slot0, int32_t pos0, const scdb_get_recompute_opts *o,
                            scdb_get_recompute_result *out)
{
    scdb_get_recompute_opts d;
    scdb_get_opts go;
    scdb_get_result gr = {0};
    scdb_recompute rc;
    scdb_kv_cache *c;
    char why[200] = "";
    int from_default = 0, n_sel = 0, P, n_keep = 0;
    scdb_err e;

    if (!h || !a || a->h != h || (!tokens && n_tokens)) return SCDB_EINVAL;
    scdb_get_recompute_init(&d);
    if (o) memcpy(&d, o, o->size && o->size < sizeof d ? o->size : sizeof d);
    if (out) {
        size_t sz = out->size && out->size < sizeof *out ? out->size : sizeof *out;
        memset(out, 0, sz);
        out->size = sz;
    }
    if (!h->registered) return cl_fail(h, SCDB_EINVAL, "not registered (scdb_register first)");
    rc = d.recompute;
    if (rc.policy == SCDB_RECOMPUTE_DEFAULT && !rc.tokens && rc.fraction == 0.0f) {
        rc = h->recompute_default;
        from_default = 1;
    }
    /* A count the request gives is checked against n_tokens: the caller
     * asked for more than the prompt has.  The registration's default is
     * no request of the caller's (a config's tail:100 serves prompts of
     * any length): only the setting itself is checked, and its count is
     * clamped to what was restored below (scdb_recompute_select), as the
     * llama.cpp consumer does with it. */
    e = scdb_recompute_check(&rc, from_default ? -1 : n_tokens > INT32_MAX ? INT32_MAX : (int)n_tokens,
                             why, sizeof why);
    if (e) return cl_fail(h, e, "%s", why);
    if (rc.policy == SCDB_RECOMPUTE_DEFAULT)   /* check refuses a count with it */
        return cl_fail(h, SCDB_EINVAL, "recompute: policy default takes no count");
    if (rc.policy == SCDB_RECOMPUTE_SELECTIVE && !d.score)
        return cl_fail(h, SCDB_EINVAL, "recompute: selective needs the caller's scorer (opts.score)");
    if (rc.policy != SCDB_RECOMPUTE_NONE && a->dev)
        return cl_fail(h, SCDB_EUNSUPPORTED, "recompute on a CUDA IPC arena: not supported (host "
                       "arenas only; use none)");
    go.patch_layers = d.patch_layers;
    e = scdb_get_ex(h, tokens, n_tokens, a, slot0, pos0, &go, &gr);
    if (out) {
        out->get = gr;
        out->applied = rc;
        out->from_default = from_default;
        out->next_pos = pos0 + (int32_t)gr.tokens_written;
    }
    if (e || rc.policy == SCDB_RECOMPUTE_NONE || gr.tokens_written == 0) return e;

    c = a->cache;
    P = (int)gr.tokens_written;
    if (slot0 + P > c->n) return cl_fail(h, SCDB_EPROTO, "the get wrote past the cache's live slots");
    if ((e = grow(h, (size_t)P, (size_t)c->n))) return cl_fail(h, e, "out of memory");
    if (rc.policy == SCDB_RECOMPUTE_SELECTIVE &&
        d.score(d.score_arg, c, slot0, P, tokens, h->rc_scores))
        return cl_fail(h, SCDB_EINVAL, "recompute: the scorer failed (the whole prefix is restored)");
    e = scdb_recompute_select(&rc, P, h->rc_scores, h->rc_idx, &n_sel);
    if (e) return cl_fail(h, e, "recompute: cannot choose the tokens");
    for (int i = 0; i < n_sel; i++) {
        h->rc_pos[i] = c->pos[slot0 + h->rc_idx[i]];
        h->rc_tok[i] = tokens[h->rc_idx[i]];
    }
    /* every live slot but the chosen ones, in order (positions travel) */
    for (int s = 0, j = 0; s < c->n; s++) {
        if (j < n_sel && s == slot0 + h->rc_idx[j]) {
            j++;
            continue;
        }
        h->rc_keep[n_keep++] = s;
    }
    if (n_sel && (e = scdb_kv_cache_compact(c, h->rc_keep, n_keep)))
        return cl_fail(h, e, "recompute: cannot compact the arena");
    __atomic_store_n(&a->hdr->n, (uint32_t)c->n, __ATOMIC_RELEASE);
    if (out) {
        out->get.cache_n = (uint32_t)c->n;
        out->n_recompute = (uint32_t)n_sel;
        out->pos = h->rc_pos;
        out->tokens = h->rc_tok;
    }
    return SCDB_OK;
}
