/* fidelity.c — a pair's fidelity default chosen on held-back windows of
 * the consumer's training text (issue 40): `scdb calibrate --fidelity`.
 *
 * Per window (prefix + continuation cut from the end of the consumer's
 * domain's training text, or of --texts, as a lora pair's held-back KL
 * windows are: never held-out text; tokens of the models' own tokenizer
 * for GGUF models, llama.cpp's, else bytes), the producer's codes of the prefix (the codebook's code
 * dtype: int8 unless --f16, as the fleet serves them) are decoded with the
 * pair, then each candidate setting -- none; tail, initial and selective at
 * each fraction -- is applied by the reference engine
 * (scdb_engine_recompute_cache) and the continuation teacher-forced
 * against the consumer's own prefill: top-1, ppl ratio, KL.  The default is
 * the cheapest candidate (recomputed tokens, plus a layer of the prefix for
 * the selective scorer) whose mean over the windows meets the target
 * (top-1 >= 0.95 and ppl <= +1% by default), among those costing at most
 * max_cost of the prefix (15% by default: beyond it the TTFT gain over an
 * own prefill melts away, and a default is what every request pays); when
 * none does, the most faithful of them (highest top-1, then lowest KL), the
 * figures saying "target not met" and naming the cheapest setting over the
 * bound that met it, if one did (--fidelity-max-cost 1: no bound). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "engine.h"
#include "kernels.h"
#include "model.h"
#include "scdb_cli.h"

#define FID_MAX_CAND 64

typedef struct cand {
    scdb_recompute rc;
    double nll, kl, agree, rec;
    long n;
} cand;

static void score_rows(const float *logits, const float *ologp, const int32_t *next, int C, int V,
                       float *lp, cand *c)
{
    for (int t = 0; t < C; t++) {
        const float *o = ologp + (size_t)t * V;
        scdb_k_log_softmax_cpu(logits + (size_t)t * V, V, lp);
        double k = 0;
        int ao = 0, am = 0;
        for (int v = 0; v < V; v++) {
            k += exp((double)o[v]) * ((double)o[v] - lp[v]);
            if (o[v] > o[ao]) ao = v;
            if (lp[v] > lp[am]) am = v;
        }
        c->kl += k;
        c->agree += ao == am;
        c->nll -= lp[next[t]];
        c->n++;
    }
}

static void copy_cache(scdb_kv_cache *dst, const scdb_kv_cache *src)
{
    size_t d = (size_t)scdb_kv_dim(src);
    for (int l = 0; l < src->n_layers; l++) {
        memcpy(scdb_kv_k(dst, l, 0), scdb_kv_k(src, l, 0), (size_t)src->n * d * sizeof(float));
        memcpy(scdb_kv_v(dst, l, 0), scdb_kv_v(src, l, 0), (size_t)src->n * d * sizeof(float));
    }
    memcpy(dst->pos, src->pos, (size_t)src->n * sizeof *dst->pos);
    dst->n = src->n;
}

/* --texts: the files read whole and joined (.gz through gzip -dc), at most
 * 64 MiB in all */
static int read_texts(const cli_fidelity_opts *o, unsigned char **text, size_t *len)
{
    const size_t cap = (size_t)64 << 20;
    unsigned char *all = NULL;
    size_t n = 0;
    for (int i = 0; i < o->n_texts; i++) {
        unsigned char *t = NULL;
        size_t tl = 0;
        scdb_err e = scdb_codec_read_text(o->texts[i], cap - n, &t, &tl);
        if (e) {
            fprintf(stderr, "calibrate --fidelity: %s: %s\n", o->texts[i], scdb_strerror(e));
            free(all);
            return 1;
        }
        unsigned char *g = realloc(all, n + tl + 1);
        if (!g) {
            free(t);
            free(all);
            fprintf(stderr, "calibrate --fidelity: out of memory\n");
            return 1;
        }
        all = g;
        memcpy(all + n, t, tl);
        n += tl;
        free(t);
    }
    *text = all;
    *len = n;
    return 0;
}

int cli_fidelity_pick(const scdb_codebook *cb, const scdb_model *prod, const scdb_model *cons,
                      const scdb_pair *pair, const cli_fidelity_opts *o, scdb_recompute *out,
                      char *figures, size_t figlen)
{
    static const scdb_recompute_policy pol[] = {SCDB_RECOMPUTE_TAIL, SCDB_RECOMPUTE_INITIAL,
                                                SCDB_RECOMPUTE_SELECTIVE};
    const scdb_model_config *cc = scdb_model_cfg(cons);
    const int P = o->prefix, C = o->cont, V = cc->vocab_size, need = P + C + 1;
    cand cd[FID_MAX_CAND];
    int nc = 0, ret = 1, nw = 0;
    unsigned char *text = NULL;
    size_t len = 0;
    int32_t *tok = NULL, *pos = NULL, *all = NULL;
    void *codes = NULL;
    float *ologp = NULL, *logits = NULL, *lp = NULL;
    scdb_kv_cache *own = NULL, *dec = NULL, *work = NULL;
    char desc[512] = "";
    scdb_err e;

    memset(cd, 0, sizeof cd);
    cd[nc++].rc = (scdb_recompute){SCDB_RECOMPUTE_NONE, 0, 0};
    for (int p = 0; p < 3; p++)
        for (int b = 0; b < o->n_fractions && nc < FID_MAX_CAND - 1; b++)
            cd[nc++].rc = (scdb_recompute){pol[p], 0, (float)o->fractions[b]};
    if (o->n_texts > 0) {
        if (read_texts(o, &text, &len)) goto done;
    } else if ((e = scdb_codec_domain_text(cons, SCDB_TEXT_TRAIN, (size_t)1 << 20, &text, &len, desc,
                                           sizeof desc))) {
        fprintf(stderr, "calibrate --fidelity: no training text for '%s' (%s): its pair keeps no "
                "default (held-out text is never used to choose one; --texts FILE gives one)\n",
                cc->name, scdb_strerror(e));
        ret = 2;
        goto done;
    }
    /* the text's tokens: the models' own tokenizer, or its bytes */
    size_t ntok = len;
    if (o->eng) {
        if ((e = o->eng->tokenize(o->eng->ud, text, len, &all, &ntok))) {
            fprintf(stderr, "calibrate --fidelity: %s: tokenizing the text: %s\n", o->eng->name,
                    scdb_strerror(e));
            goto done;
        }
    } else if ((all = malloc((len ? len : 1) * sizeof *all))) {
        scdb_tokenize_bytes(text, len, all);
    }
    if (!all) {
        fprintf(stderr, "calibrate --fidelity: out of memory\n");
        goto done;
    }
    if (ntok < (size_t)o->windows * need) {
        fprintf(stderr, "calibrate --fidelity: training text of '%s' too short for %d windows of %d "
                "%s (it has %zu)\n", cc->name, o->windows, need, o->eng ? "tokens" : "bytes", ntok);
        goto done;
    }
    for (size_t i = 0; i < ntok; i++)
        if (all[i] < 0 || all[i] >= V) {
            fprintf(stderr, "calibrate --fidelity: token %d of the text is outside '%s''s vocabulary of %d\n",
                    (int)all[i], cc->name, V);
            goto done;
        }
    tok = malloc((size_t)need * sizeof *tok);
    pos = malloc((size_t)P * sizeof *pos);
    codes = malloc(scdb_codec_payload_bytes(cb, P));
    ologp = malloc((size_t)C * V * sizeof *ologp);
    logits = malloc((size_t)C * V * sizeof *logits);
    lp = malloc((size_t)V * sizeof *lp);
    if (!tok || !pos || !codes || !ologp || !logits || !lp ||
        scdb_model_cache_new(cons, P + C, &own) || scdb_model_cache_new(cons, P + C, &dec) ||
        scdb_model_cache_new(cons, P + C, &work)) {
        fprintf(stderr, "calibrate --fidelity: out of memory\n");
        goto done;
    }
    for (int i = 0; i < P; i++) pos[i] = i;
    /* the windows: the last windows x need tokens of the training text */
    for (int w = 0; w < o->windows; w++) {
        size_t off = ntok - (size_t)(o->windows - w) * need;
        memcpy(tok, all + off, (size_t)need * sizeof *tok);
        own->n = 0;
        dec->n = 0;
        if ((e = scdb_model_forward(cons, tok, NULL, P, own, NULL, NULL)) ||
            (e = scdb_model_forward(cons, tok + P, NULL, C, own, logits, NULL)) ||
            (e = scdb_codec_encode_tokens(cb, prod, tok, pos, P, codes)) ||
            (e = scdb_pair_decode(pair, cb, codes, P, pos, tok, -1, dec, 0))) {
            fprintf(stderr, "calibrate --fidelity: %s: window %d: %s\n", cc->name, w, scdb_strerror(e));
            goto done;
        }
        for (int t = 0; t < C; t++)
            scdb_k_log_softmax_cpu(logits + (size_t)t * V, V, ologp + (size_t)t * V);
        for (int k = 0; k < nc; k++) {
            int nrec = 0;
            copy_cache(work, dec);
            if ((e = scdb_engine_recompute_cache(cons, work, 0, P, tok, &cd[k].rc, &nrec, NULL)) ||
                (e = scdb_model_forward(cons, tok + P, NULL, C, work, logits, NULL))) {
                fprintf(stderr, "calibrate --fidelity: %s: recompute: %s\n", cc->name, scdb_strerror(e));
                goto done;
            }
            score_rows(logits, ologp, tok + P + 1, C, V, lp, &cd[k]);
            cd[k].rec += nrec;
        }
        /* own nll, once per window, into a reference kept in cd[nc] */
        for (int t = 0; t < C; t++) cd[nc].nll -= ologp[(size_t)t * V + tok[P + 1 + t]];
        cd[nc].n += C;
        nw++;
    }
    {
        int best = -1, fallback = 0, over = -1;
        double best_cost = INFINITY, over_cost = INFINITY;
        for (int k = 0; k < nc; k++) {
            double t1 = cd[k].agree / cd[k].n, pr = exp((cd[k].nll - cd[nc].nll) / cd[k].n);
            double cost = cd[k].rec / nw +
                          (cd[k].rc.policy == SCDB_RECOMPUTE_SELECTIVE ? (double)P / cc->n_layers : 0);
            if (o->verbose) {
                char s[48];
                scdb_recompute_format(&cd[k].rc, s, sizeof s);
                fprintf(stderr, "  %-16s top-1 %.3f ppl %+.2f%% KL %.4f cost %.0f\n", s, t1, (pr - 1) * 100,
                        cd[k].kl / cd[k].n, cost);
            }
            if (t1 >= o->target_top1 && pr <= o->target_ppl) {
                if (cost <= o->max_cost * P + 1e-9 && cost < best_cost) {
                    best = k;
                    best_cost = cost;
                } else if (cost > o->max_cost * P + 1e-9 && cost < over_cost) {
                    over = k;       /* met, but over the cost bound: reported only */
                    over_cost = cost;
                }
            }
        }
        if (best < 0) {          /* not met: the most faithful candidate within max_cost */
            fallback = 1;
            for (int k = 0; k < nc; k++) {
                double t1 = cd[k].agree / cd[k].n;
                double cost = cd[k].rec / nw +
                              (cd[k].rc.policy == SCDB_RECOMPUTE_SELECTIVE ? (double)P / cc->n_layers : 0);
                if (k && cost > o->max_cost * P) continue;
                if (best < 0 || t1 > cd[best].agree / cd[best].n + 1e-12 ||
                    (fabs(t1 - cd[best].agree / cd[best].n) <= 1e-12 && cd[k].kl < cd[best].kl))
                    best = k;
            }
        }
        char s[48], so[48] = "";
        if (fallback && over >= 0) scdb_recompute_format(&cd[over].rc, so, sizeof so);
        *out = cd[best].rc;
        scdb_recompute_format(out, s, sizeof s);
        snprintf(figures, figlen,
                 "%s: top-1 %.3f, ppl %+.2f%%, KL %.4f, none: top-1 %.3f, KL %.4f; %d held-back windows of "
                 "%d+%d tokens of the training text; target top-1 >= %.3g, ppl <= %+.2g%%%s%s%s",
                 s, cd[best].agree / cd[best].n, (exp((cd[best].nll - cd[nc].nll) / cd[best].n) - 1) * 100,
                 cd[best].kl / cd[best].n, cd[0].agree / cd[0].n, cd[0].kl / cd[0].n, nw, P, C,
                 o->target_top1, (o->target_ppl - 1) * 100,
                 fallback ? " (target not met within the cost bound)" : "",
                 so[0] ? "; met by " : "", so);
    }
    ret = 0;
done:
    free(text);
    free(all);
    free(tok);
    free(pos);
    free(codes);
    free(ologp);
    free(logits);
    free(lp);
    scdb_kv_cache_free(&own);
    scdb_kv_cache_free(&dec);
    scdb_kv_cache_free(&work);
    return ret;
}
