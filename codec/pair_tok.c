/* pair_tok.c — token-input decoders (codec.h, scdb_pair_info.token_input;
 * schema/FORMATS.md, "Pair"): a REUSE layer's decoders read, besides the
 * codes z, h0 = the consumer's layer-0 H_in of the token (RMSNorm(E[tok]) *
 * attn_norm, what the TOKEN layer computes), so that
 *     K = RoPE(z dec_k^T + mean_k + h0 dec_k_tok^T),  V likewise.
 * The consumer has the token ids at decode, so the input is free; the codes
 * and the codebook are unchanged.  Kept apart from pair.c: the format's
 * token tensors, their reading / checking / cloning, a lora pair's
 * corrections of them, and the host decode's h0 rows. */
#include "codec_internal.h"

#include <stdlib.h>
#include <string.h>

void cx_tok_free(cx_player *L)
{
    free(L->gk); free(L->gv); free(L->ctk); free(L->ctv);
    L->gk = L->gv = L->ctk = L->ctv = NULL;
}

static int coded(const scdb_pair *p, int l) { return p->layers[l].kind == SCDB_CB_CODED; }

scdb_err cx_tok_bundle(const scdb_pair *p, cx_bundle *b)
{
    const scdb_pair_info *in = &p->info;
    int kv = in->kv_dim, d = in->d_model, r = in->dec_rank;
    scdb_err rc;
    /* absent when off: a pair without token input is written (and hashed)
     * exactly as before the key existed */
    if (!in->token_input) return SCDB_OK;
    if ((rc = cx_bundle_meta(b, "token_input", "1"))) return rc;
    if (in->kind == SCDB_PAIR_LORA) {
        if ((rc = cx_bundle_meta(b, "token_corr", "%d", in->token_corr ? 1 : 0))) return rc;
        if (!in->token_corr) return SCDB_OK;
        for (int l = 0; l < in->n_layers; l++) {
            const cx_player *L = &p->L[l];
            if (!coded(p, l) || r <= 0 || cx_in_width(p, l) == 0) continue;
            if ((rc = cx_bundle_add(b, SCDB_F16, L->ctk, r, d, "layers.%d.dec_k.v_tok", l)) ||
                (rc = cx_bundle_add(b, SCDB_F16, L->ctv, r, d, "layers.%d.dec_v.v_tok", l)))
                return rc;
        }
        return SCDB_OK;
    }
    for (int l = 0; l < in->n_layers; l++) {
        const cx_player *L = &p->L[l];
        if (!coded(p, l)) continue;
        if ((rc = cx_bundle_add(b, SCDB_F16, L->gk, kv, d, "layers.%d.dec_k_tok", l)) ||
            (rc = cx_bundle_add(b, SCDB_F16, L->gv, kv, d, "layers.%d.dec_v_tok", l)))
            return rc;
    }
    return SCDB_OK;
}

scdb_err cx_tok_meta(const scdb_st_file *f, const char *path, scdb_pair *p, const scdb_pair *S,
                     char *errbuf, size_t errlen)
{
    scdb_pair_info *in = &p->info;
    scdb_err rc;
    in->token_input = in->token_corr = 0;
    if (scdb_st_meta(f, "token_input") &&
        (rc = cx_meta_int(f, "token_input", 0, 1, &in->token_input, errbuf, errlen)))
        return rc;
    if (scdb_st_meta(f, "token_corr") &&
        (rc = cx_meta_int(f, "token_corr", 0, 1, &in->token_corr, errbuf, errlen)))
        return rc;
    if (in->token_input && !in->has_tokens) {
        scdb_errf(errbuf, errlen, "%s: token_input = 1 but the pair has no token layer (has_tokens = 0): its "
                  "decoders' h0 is the token layer's", path);
        return SCDB_EFORMAT;
    }
    if (in->token_input && p->k_post_rope) {
        scdb_errf(errbuf, errlen, "%s: token_input = 1 with k_space post_rope (h0's K term is pre-RoPE)", path);
        return SCDB_EFORMAT;
    }
    if (in->token_corr && (!in->token_input || in->kind != SCDB_PAIR_LORA || in->dec_rank <= 0)) {
        scdb_errf(errbuf, errlen, "%s: token_corr = 1 needs a lora pair with token_input = 1 and dec_rank > 0 "
                  "(kind %s, token_input %d, dec_rank %d)", path, scdb_pair_kind_name(in->kind),
                  in->token_input, in->dec_rank);
        return SCDB_EFORMAT;
    }
    if (S && S->info.token_input != in->token_input) {
        scdb_errf(errbuf, errlen, "%s: token_input = %d, but its shared part has token_input = %d", path,
                  in->token_input, S->info.token_input);
        return SCDB_EFORMAT;
    }
    return SCDB_OK;
}

scdb_err cx_tok_read(const scdb_st_file *f, const char *path, scdb_pair *p, int *expected, char *errbuf,
                     size_t errlen)
{
    const scdb_pair_info *in = &p->info;
    int kv = in->kv_dim, d = in->d_model, r = in->dec_rank;
    char nm[96], sub[400];
    scdb_err rc;
    if (!in->token_input) return SCDB_OK;
    for (int l = 0; l < in->n_layers; l++) {
        cx_player *L = &p->L[l];
        if (!coded(p, l)) continue;
        const char *n0, *n1;
        int64_t d0;
        float **o0, **o1;
        if (in->kind == SCDB_PAIR_LORA) {
            if (!in->token_corr || r <= 0 || cx_in_width(p, l) == 0) continue;
            n0 = "dec_k.v_tok"; n1 = "dec_v.v_tok"; d0 = r; o0 = &L->ctk; o1 = &L->ctv;
        } else {
            n0 = "dec_k_tok"; n1 = "dec_v_tok"; d0 = kv; o0 = &L->gk; o1 = &L->gv;
        }
        for (int k = 0; k < 2; k++) {
            snprintf(nm, sizeof nm, "layers.%d.%s", l, k ? n1 : n0);
            if ((rc = cx_read_f32(f, nm, d0, d, k ? o1 : o0, sub, sizeof sub))) {
                scdb_errf(errbuf, errlen, "%s: token_input = 1: %s", path, sub);
                return rc;
            }
            (*expected)++;
        }
    }
    return SCDB_OK;
}

static void round_f16(float *x, size_t n)
{
    for (size_t i = 0; x && i < n; i++) x[i] = scdb_f16_to_f32(scdb_f32_to_f16(x[i]));
}

void cx_tok_round(scdb_pair *p)
{
    size_t n = (size_t)p->info.kv_dim * p->info.d_model;
    if (!p->info.token_input) return;
    for (int l = 0; l < p->info.n_layers; l++) {
        round_f16(p->L[l].gk, n);
        round_f16(p->L[l].gv, n);
    }
}

static int dup(float **dst, const float *src, size_t n)
{
    *dst = NULL;
    if (!src) return 0;
    if (!(*dst = malloc((n ? n : 1) * sizeof **dst))) return -1;
    memcpy(*dst, src, n * sizeof **dst);
    return 0;
}

int cx_tok_clone(const scdb_pair *p, scdb_pair *q)
{
    size_t g = (size_t)p->info.kv_dim * p->info.d_model, c = (size_t)p->info.dec_rank * p->info.d_model;
    int bad = 0;
    for (int l = 0; l < p->info.n_layers; l++)
        bad |= dup(&q->L[l].gk, p->L[l].gk, g) | dup(&q->L[l].gv, p->L[l].gv, g) |
               dup(&q->L[l].ctk, p->L[l].ctk, c) | dup(&q->L[l].ctv, p->L[l].ctv, c);
    return bad;
}

void cx_tok_materialise(const scdb_pair *lora, scdb_pair *s)
{
    const scdb_pair_info *in = &lora->info;
    int kv = in->kv_dim, d = in->d_model, r = in->dec_rank;
    if (!in->token_input || !in->token_corr || r <= 0) return;
    for (int l = 0; l < in->n_layers; l++) {
        const cx_player *O = &lora->L[l];
        cx_player *S = &s->L[l];
        /* g += u v_tok, in f32 as the other corrections */
        if (S->gk && O->cku && O->ctk) cx_gemm_nn(kv, d, r, O->cku, r, O->ctk, d, 1.0f, S->gk, d);
        if (S->gv && O->cvu && O->ctv) cx_gemm_nn(kv, d, r, O->cvu, r, O->ctv, d, 1.0f, S->gv, d);
    }
}

void cx_tok_h0(const scdb_pair *p, const int32_t *tokens, int n, float *h0)
{
    int d = p->info.d_model;   /* p: the pair holding the token layer (a lora pair's shared part) */
    for (int i = 0; i < n; i++) memcpy(h0 + (size_t)i * d, p->emb + (size_t)tokens[i] * d, (size_t)d * sizeof *h0);
    scdb_k_rmsnorm_cpu(h0, p->norm0, n, d, p->info.norm_eps, h0);
}

void cx_tok_add(const float *h0, int n, int d, const float *g, int kv, float *y)
{
    scdb_k_gemm_cpu(0, 1, n, kv, d, 1.0f, h0, d, g, d, 1.0f, y, kv);
}
