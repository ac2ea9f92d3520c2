/* pair.c — per (producer, consumer) pair artifacts: file format, validation
 * against the codebook and the models, and decode into a consumer's
 * slot-indexed KV cache. */
#include "codec_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reference counts, and the process's cache of shared parts loaded for lora
 * pairs (codec_internal.h, struct scdb_pair): one mutex for both (loads and
 * frees are rare next to decodes, which take no lock). */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static scdb_pair *shared_cache;

scdb_pair *cx_pair_alloc(void)
{
    scdb_pair *p = calloc(1, sizeof(scdb_pair));
    if (p) p->refs = 1;
    return p;
}

scdb_err cx_pair_alloc_layers(scdb_pair *p, int n)
{
    if (!p || p->L || n < 1 || n > SCDB_CODEC_MAX_LAYERS) return SCDB_EINVAL;
    if (!(p->L = calloc((size_t)n, sizeof *p->L))) return SCDB_ENOMEM;
    p->n_L = n;
    return SCDB_OK;
}

scdb_pair *cx_pair_ref(scdb_pair *p)
{
    pthread_mutex_lock(&shared_mu);
    p->refs++;
    pthread_mutex_unlock(&shared_mu);
    return p;
}

int cx_shared_cache_count(void)
{
    int n = 0;
    pthread_mutex_lock(&shared_mu);
    for (const scdb_pair *q = shared_cache; q; q = q->next_cached) n++;
    pthread_mutex_unlock(&shared_mu);
    return n;
}

static void pair_unref(scdb_pair *p);

static void pair_destroy(scdb_pair *p)
{
    for (int l = 0; l < p->n_L; l++) {
        cx_player *L = &p->L[l];
        free(L->dk); free(L->mk); free(L->dv); free(L->mv); free(L->wk); free(L->wv);
        scdb_aligner_clear(&L->al);
        free(L->cku); free(L->ckv); free(L->cvu); free(L->cvv);
        free(L->au); free(L->av); free(L->adb2);
        free(L->lka); free(L->lkb); free(L->lva); free(L->lvb);
        free(L->b2e);
        cx_tok_free(L);
    }
    free(p->L);
    free(p->emb); free(p->norm0); free(p->wk0); free(p->wv0);
    if (p->shared) pair_unref(p->shared);
    free(p);
}

/* Drop one owner; the last frees p (and leaves the cache first). */
static void pair_unref(scdb_pair *p)
{
    int last;
    pthread_mutex_lock(&shared_mu);
    last = --p->refs == 0;
    if (last && p->cached)
        for (scdb_pair **q = &shared_cache; *q; q = &(*q)->next_cached)
            if (*q == p) { *q = p->next_cached; break; }
    pthread_mutex_unlock(&shared_mu);
    if (last) pair_destroy(p);
}

scdb_err scdb_pair_set_recompute(scdb_pair *p, const scdb_recompute *r, const char *figures)
{
    if (!p || !r || scdb_recompute_check(r, -1, NULL, 0) || r->policy == SCDB_RECOMPUTE_DEFAULT)
        return SCDB_EINVAL;
    if (figures) {
        if (strlen(figures) >= sizeof p->info.recompute_figures) return SCDB_EINVAL;
        for (const char *c = figures; *c; c++)
            if ((unsigned char)*c < 0x20) return SCDB_EINVAL;
    }
    p->info.recompute = *r;
    snprintf(p->info.recompute_figures, sizeof p->info.recompute_figures, "%s", figures ? figures : "");
    return SCDB_OK;
}

void scdb_pair_free(scdb_pair **pp)
{
    if (!pp || !*pp) return;
    pair_unref(*pp);
    *pp = NULL;
}

/* The cached shared part of codebook id with checksum sum, one more
 * reference; NULL when there is none. */
static scdb_pair *cache_find(const scdb_codec_id *cb_id, const char *sum)
{
    scdb_pair *hit = NULL;
    pthread_mutex_lock(&shared_mu);
    for (scdb_pair *q = shared_cache; q && !hit; q = q->next_cached)
        if (!memcmp(&q->info.codebook_id, cb_id, sizeof *cb_id) && !strcmp(q->info.checksum, sum)) hit = q;
    if (hit) hit->refs++;
    pthread_mutex_unlock(&shared_mu);
    return hit;
}

/* Put a freshly loaded shared part into the cache; if another thread put
 * the same one there meanwhile, p is dropped for that one. */
static scdb_pair *cache_put(scdb_pair *p)
{
    scdb_pair *hit = NULL;
    pthread_mutex_lock(&shared_mu);
    for (scdb_pair *q = shared_cache; q && !hit; q = q->next_cached)
        if (!memcmp(&q->info.codebook_id, &p->info.codebook_id, sizeof q->info.codebook_id) &&
            !strcmp(q->info.checksum, p->info.checksum))
            hit = q;
    if (hit) {
        hit->refs++;
    } else {
        p->cached = 1;
        p->next_cached = shared_cache;
        shared_cache = p;
    }
    pthread_mutex_unlock(&shared_mu);
    if (!hit) return p;
    pair_unref(p);
    return hit;
}

const scdb_pair_info *scdb_pair_get_info(const scdb_pair *p) { return &p->info; }

const char *scdb_pair_kind_name(int kind)
{
    static const char *names[] = {"full", "shared", "lora"};
    return kind >= 0 && kind < (int)SCDB_ARRAY_LEN(names) ? names[kind] : NULL;
}

/* The layers whose Wk/Wv a lora pair's deltas correct: the token layer and
 * the patch layers. */
static int lora_layer(const scdb_pair *p, int l)
{
    if (l == 0 && p->info.has_tokens) return 1;
    for (int i = 0; i < p->info.n_aligners; i++) if (p->info.patch_order[i] == l) return 1;
    return 0;
}

static int lora_targets(const scdb_pair *p, char which)
{
    return p->info.lora_rank > 0 && strchr(p->info.lora_targets, which) != NULL;
}

/* A lora pair's own tensors (codec.h, "Adapter pairs"). */
static scdb_err bundle_lora_parts(const scdb_pair *p, cx_bundle *b)
{
    const scdb_pair_info *in = &p->info;
    int kv = in->kv_dim, d = in->d_model, rc_ = in->dec_rank, ra = in->align_rank, lr = in->lora_rank;
    scdb_err rc;
    for (int l = 0; l < in->n_layers; l++) {
        const cx_player *L = &p->L[l];
        int iw = cx_in_width(p, l);
        if (p->layers[l].kind == SCDB_CB_CODED) {
            if ((rc = cx_bundle_add(b, SCDB_F32, L->mk, kv, 0, "layers.%d.mean_k", l)) ||
                (rc = cx_bundle_add(b, SCDB_F32, L->mv, kv, 0, "layers.%d.mean_v", l)))
                return rc;
            if (rc_ > 0 && iw > 0 &&
                ((rc = cx_bundle_add(b, SCDB_F16, L->cku, kv, rc_, "layers.%d.dec_k.u", l)) ||
                 (rc = cx_bundle_add(b, SCDB_F16, L->ckv, rc_, iw, "layers.%d.dec_k.v", l)) ||
                 (rc = cx_bundle_add(b, SCDB_F16, L->cvu, kv, rc_, "layers.%d.dec_v.u", l)) ||
                 (rc = cx_bundle_add(b, SCDB_F16, L->cvv, rc_, iw, "layers.%d.dec_v.v", l))))
                return rc;
        }
        if (!lora_layer(p, l)) continue;
        if (l > 0 || !in->has_tokens) {
            if ((ra > 0 && ((rc = cx_bundle_add(b, SCDB_F16, L->au, d, ra, "layers.%d.align.u", l)) ||
                            (rc = cx_bundle_add(b, SCDB_F16, L->av, ra, iw, "layers.%d.align.v", l)))) ||
                (rc = cx_bundle_add(b, SCDB_F32, L->adb2, d, 0, "layers.%d.align.db2", l)))
                return rc;
        }
        if (lora_targets(p, 'k') &&
            ((rc = cx_bundle_add(b, SCDB_F16, L->lka, lr, d, "layers.%d.lora_k.a", l)) ||
             (rc = cx_bundle_add(b, SCDB_F16, L->lkb, kv, lr, "layers.%d.lora_k.b", l))))
            return rc;
        if (lora_targets(p, 'v') &&
            ((rc = cx_bundle_add(b, SCDB_F16, L->lva, lr, d, "layers.%d.lora_v.a", l)) ||
             (rc = cx_bundle_add(b, SCDB_F16, L->lvb, kv, lr, "layers.%d.lora_v.b", l))))
            return rc;
    }
    return SCDB_OK;
}

static scdb_err build_bundle(const scdb_pair *p, cx_bundle *b)
{
    const scdb_pair_info *in = &p->info;
    char list[4096];
    int v[SCDB_CODEC_MAX_LAYERS];
    scdb_err rc;
    int kv = in->kv_dim, d = in->d_model;

    memset(b, 0, sizeof *b);
#define M(k, ...) do { if ((rc = cx_bundle_meta(b, k, __VA_ARGS__))) goto fail; } while (0)
    M("format", "scdb-pair");
    /* a full pair is written as version 1 (as before kinds), the others as 2 */
    M("version", "%d", in->kind == SCDB_PAIR_FULL ? 1 : 2);
    if (in->kind != SCDB_PAIR_FULL) {
        M("kind", "%s", scdb_pair_kind_name(in->kind));
        M("base_fp", "%s", in->base_fp);
    }
    if (in->kind == SCDB_PAIR_LORA) {
        M("base", "%s", in->base);
        M("shared", "%s", in->shared);
        M("shared_id", "%s", in->shared_id);
        M("dec_rank", "%d", in->dec_rank);
        M("align_rank", "%d", in->align_rank);
        M("lora_rank", "%d", in->lora_rank);
        M("lora_targets", "%s", in->lora_targets);
    }
    M("codebook_id", "%s", in->codebook_hex);
    M("producer", "%s", in->producer);
    M("consumer", "%s", in->consumer);
    M("producer_fp", "%s", in->producer_fp);
    M("consumer_fp", "%s", in->consumer_fp);
    M("arch_fp", "%s", in->arch_fp);
    M("n_layers", "%d", in->n_layers);
    M("d_model", "%d", in->d_model);
    M("n_kv_heads", "%d", in->n_kv_heads);
    M("head_dim", "%d", in->head_dim);
    M("vocab_size", "%d", in->vocab_size);
    M("rope_theta", "%.9g", (double)in->rope_theta);
    M("norm_eps", "%.9g", (double)in->norm_eps);
    M("k_space", "%s", p->k_post_rope ? "post_rope" : "pre_rope");
    for (int l = 0; l < in->n_layers; l++) v[l] = (int)p->layers[l].kind;
    cx_fmt_ints(list, sizeof list, v, in->n_layers);
    M("layer_kind", "%s", list);
    for (int l = 0; l < in->n_layers; l++) v[l] = p->layers[l].r_k;
    cx_fmt_ints(list, sizeof list, v, in->n_layers);
    M("r_k", "%s", list);
    for (int l = 0; l < in->n_layers; l++) v[l] = p->layers[l].r_v;
    cx_fmt_ints(list, sizeof list, v, in->n_layers);
    M("r_v", "%s", list);
    for (int l = 0; l < in->n_layers; l++) v[l] = p->layers[l].r_h;
    cx_fmt_ints(list, sizeof list, v, in->n_layers);
    M("r_h", "%s", list);
    M("hidden", "%d", in->hidden);
    cx_fmt_ints(list, sizeof list, in->patch_order, in->n_aligners);
    M("patch_order", "%s", list);
    M("n_patch", "%d", in->n_patch);
    M("has_tokens", "%d", in->has_tokens);
    M("decoder_input", "%s", p->all_input ? "all" : "layer");
    M("late_added", "%d", in->late_added);
    M("notes", "%s", p->notes);
    if (in->recompute.policy != SCDB_RECOMPUTE_NONE || in->recompute_figures[0]) {
        /* optional: written only when set (none is set when calibration
         * chose it: it carries its figures) */
        char rs[48];
        scdb_recompute_format(&in->recompute, rs, sizeof rs);
        M("recompute", "%s", rs);
        if (in->recompute_figures[0]) M("recompute_figures", "%s", in->recompute_figures);
    }
#undef M
    if ((rc = cx_tok_bundle(p, b))) goto fail;
    if (in->kind == SCDB_PAIR_LORA) {
        if ((rc = bundle_lora_parts(p, b))) goto fail;
        return SCDB_OK;
    }
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *CL = &p->layers[l];
        const cx_player *L = &p->L[l];
        if (CL->kind != SCDB_CB_CODED) continue;
        int iw = cx_in_width(p, l);
        if (iw > 0 &&
            ((rc = cx_bundle_add(b, SCDB_F16, L->dk, kv, iw, "layers.%d.dec_k", l)) ||
             (rc = cx_bundle_add(b, SCDB_F16, L->dv, kv, iw, "layers.%d.dec_v", l))))
            goto fail;
        if ((rc = cx_bundle_add(b, SCDB_F32, L->mk, kv, 0, "layers.%d.mean_k", l)) ||
            (rc = cx_bundle_add(b, SCDB_F32, L->mv, kv, 0, "layers.%d.mean_v", l)))
            goto fail;
    }
    for (int i = 0; i < in->n_aligners; i++) {
        int l = in->patch_order[i];
        const cx_player *L = &p->L[l];
        const scdb_aligner *a = &L->al;
        if ((rc = cx_bundle_add(b, SCDB_F16, a->w1, a->hidden, a->r, "layers.%d.align.w1", l)) ||
            (rc = cx_bundle_add(b, SCDB_F32, a->b1, a->hidden, 0, "layers.%d.align.b1", l)) ||
            (rc = cx_bundle_add(b, SCDB_F16, a->w2, d, a->hidden, "layers.%d.align.w2", l)) ||
            (rc = cx_bundle_add(b, SCDB_F32, a->b2, d, 0, "layers.%d.align.b2", l)) ||
            (rc = cx_bundle_add(b, SCDB_F16, a->skip, d, a->r, "layers.%d.align.skip", l)) ||
            (rc = cx_bundle_add(b, SCDB_F16, L->wk, kv, d, "layers.%d.wk", l)) ||
            (rc = cx_bundle_add(b, SCDB_F16, L->wv, kv, d, "layers.%d.wv", l)))
            goto fail;
    }
    if (in->has_tokens &&
        ((rc = cx_bundle_add(b, SCDB_F32, p->emb, in->vocab_size, d, "tok_embeddings")) ||
         (rc = cx_bundle_add(b, SCDB_F32, p->norm0, d, 0, "layers.0.attn_norm")) ||
         (rc = cx_bundle_add(b, SCDB_F32, p->wk0, kv, d, "layers.0.wk")) ||
         (rc = cx_bundle_add(b, SCDB_F32, p->wv0, kv, d, "layers.0.wv"))))
        goto fail;
    return SCDB_OK;
fail:
    cx_bundle_free(b);
    return rc;
}

/* Round the stored-as-f16 tensors in memory too, so that a pair fitted in
 * this process decodes exactly like the same pair loaded from its file. */
static void round_f16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = scdb_f16_to_f32(scdb_f32_to_f16(x[i]));
}

scdb_err cx_pair_finish(scdb_pair *p)
{
    cx_layout(p->layers, p->info.n_layers, &p->code_dim);
    for (int l = 0; l < p->info.n_layers; l++)
        if (p->layers[l].kind == SCDB_CB_CODED && p->L[l].dk) {
            round_f16(p->L[l].dk, (size_t)p->info.kv_dim * cx_in_width(p, l));
            round_f16(p->L[l].dv, (size_t)p->info.kv_dim * cx_in_width(p, l));
        }
    for (int i = 0; i < p->info.n_aligners && !p->shared; i++) {
        scdb_aligner *a = &p->L[p->info.patch_order[i]].al;
        round_f16(a->w1, (size_t)a->hidden * a->r);
        round_f16(a->w2, (size_t)a->d * a->hidden);
        round_f16(a->skip, (size_t)a->d * a->r);
        round_f16(p->L[p->info.patch_order[i]].wk, (size_t)p->info.kv_dim * a->d);
        round_f16(p->L[p->info.patch_order[i]].wv, (size_t)p->info.kv_dim * a->d);
    }
    cx_tok_round(p);
    cx_layout(p->layers, p->info.n_layers, &p->code_dim);
    return SCDB_OK;
}

scdb_err cx_pair_checksum(const scdb_pair *p, char hex[33])
{
    cx_bundle b;
    scdb_codec_id sum;
    scdb_err rc = build_bundle(p, &b);
    if (rc) return rc;
    cx_bundle_hash(&b, "checksum", &sum);
    scdb_codec_id_hex(&sum, hex);
    cx_bundle_free(&b);
    return SCDB_OK;
}

static int dup_f(float **dst, const float *src, size_t n)
{
    *dst = NULL;
    if (!src) return 0;
    if (!(*dst = malloc((n ? n : 1) * sizeof **dst))) return -1;
    memcpy(*dst, src, n * sizeof **dst);
    return 0;
}

scdb_err cx_pair_clone(const scdb_pair *p, scdb_pair **out)
{
    scdb_pair *q = cx_pair_alloc();
    const scdb_pair_info *in = &p->info;
    size_t kv = (size_t)in->kv_dim, d = (size_t)in->d_model, V = (size_t)in->vocab_size;
    int bad = 0;
    *out = NULL;
    if (!q) return SCDB_ENOMEM;
    if (cx_pair_alloc_layers(q, p->n_L)) { scdb_pair_free(&q); return SCDB_ENOMEM; }
    q->info = p->info;
    q->k_post_rope = p->k_post_rope;
    q->all_input = p->all_input;
    memcpy(q->layers, p->layers, sizeof q->layers);
    q->code_dim = p->code_dim;
    memcpy(q->notes, p->notes, sizeof q->notes);
    for (int l = 0; l < in->n_layers; l++) {
        const cx_player *A = &p->L[l];
        cx_player *B = &q->L[l];
        size_t iw = (size_t)cx_in_width(p, l), rc_ = (size_t)in->dec_rank, ra = (size_t)in->align_rank;
        size_t lr = (size_t)in->lora_rank;
        const scdb_aligner *a = &A->al;
        B->has_aligner = A->has_aligner;
        B->align_loss_before = A->align_loss_before;
        B->align_loss_after = A->align_loss_after;
        B->al.r = a->r; B->al.hidden = a->hidden; B->al.d = a->d;
        size_t ar = (size_t)a->r, ah = (size_t)a->hidden, ad = (size_t)a->d;
        bad |= dup_f(&B->dk, A->dk, kv * iw) | dup_f(&B->dv, A->dv, kv * iw) |
               dup_f(&B->mk, A->mk, kv) | dup_f(&B->mv, A->mv, kv) |
               dup_f(&B->wk, A->wk, kv * d) | dup_f(&B->wv, A->wv, kv * d) |
               dup_f(&B->al.w1, a->w1, ah * ar) | dup_f(&B->al.b1, a->b1, ah) |
               dup_f(&B->al.w2, a->w2, ad * ah) | dup_f(&B->al.b2, a->b2, ad) |
               dup_f(&B->al.skip, a->skip, ad * ar) |
               dup_f(&B->cku, A->cku, kv * rc_) | dup_f(&B->ckv, A->ckv, rc_ * iw) |
               dup_f(&B->cvu, A->cvu, kv * rc_) | dup_f(&B->cvv, A->cvv, rc_ * iw) |
               dup_f(&B->au, A->au, d * ra) | dup_f(&B->av, A->av, ra * iw) | dup_f(&B->adb2, A->adb2, d) |
               dup_f(&B->lka, A->lka, lr * d) | dup_f(&B->lkb, A->lkb, kv * lr) |
               dup_f(&B->lva, A->lva, lr * d) | dup_f(&B->lvb, A->lvb, kv * lr) |
               dup_f(&B->b2e, A->b2e, d);
    }
    bad |= dup_f(&q->emb, p->emb, V * d) | dup_f(&q->norm0, p->norm0, d) |
           dup_f(&q->wk0, p->wk0, kv * d) | dup_f(&q->wv0, p->wv0, kv * d);
    bad |= cx_tok_clone(p, q);
    if (p->shared) q->shared = cx_pair_ref(p->shared);
    if (bad) { scdb_pair_free(&q); return SCDB_ENOMEM; }
    *out = q;
    return SCDB_OK;
}

/* 1 if layer l is in p's patch order */
static int in_patch_order(const scdb_pair *p, int l)
{
    for (int i = 0; i < p->info.n_aligners; i++) if (p->info.patch_order[i] == l) return 1;
    return 0;
}

scdb_err cx_pair_attach(scdb_pair *own, scdb_pair *s)
{
    if (!own || !s) return SCDB_EINVAL;
    const scdb_pair_info *in = &own->info;
    int d = in->d_model;
    if (own->shared || s->info.kind != SCDB_PAIR_SHARED || s->info.n_layers != in->n_layers ||
        s->info.d_model != d || s->info.kv_dim != in->kv_dim || s->code_dim != own->code_dim ||
        s->all_input != own->all_input || s->info.has_tokens != in->has_tokens)
        return SCDB_EINVAL;
    for (int i = 0; i < in->n_aligners; i++)
        if (!s->L[in->patch_order[i]].has_aligner) return SCDB_EINVAL;
    for (int i = 0; i < in->n_aligners; i++) {
        int l = in->patch_order[i];
        cx_player *O = &own->L[l];
        const float *b2 = s->L[l].al.b2;
        float *e = malloc((size_t)d * sizeof *e);
        if (!e) return SCDB_ENOMEM;
        for (int a = 0; a < d; a++) e[a] = b2[a] + (O->adb2 ? O->adb2[a] : 0.0f);
        free(O->b2e);
        O->b2e = e;
        O->has_aligner = 1;
    }
    own->shared = cx_pair_ref(s);
    return SCDB_OK;
}

/* W [rows][cols] += U [rows][r] V [r][cols] */
static void add_lowrank(float *W, int rows, int cols, const float *U, const float *V, int r)
{
    if (r > 0 && U && V) cx_gemm_nn(rows, cols, r, U, r, V, cols, 1.0f, W, cols);
}

scdb_err cx_pair_materialise(const scdb_pair *lora, scdb_pair **out)
{
    const scdb_pair_info *in;
    scdb_pair *s = NULL;
    scdb_err rc;
    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!lora || !lora->shared) return SCDB_EINVAL;
    in = &lora->info;
    int kv = in->kv_dim, d = in->d_model, rc_ = in->dec_rank, ra = in->align_rank, lr = in->lora_rank;
    if ((rc = cx_pair_clone(lora->shared, &s))) return rc;
    for (int l = 0; l < in->n_layers; l++) {
        const cx_player *O = &lora->L[l];
        cx_player *S = &s->L[l];
        int iw = cx_in_width(s, l);
        if (s->layers[l].kind == SCDB_CB_CODED) {
            free(S->mk);
            free(S->mv);
            if (dup_f(&S->mk, O->mk, (size_t)kv) | dup_f(&S->mv, O->mv, (size_t)kv)) { rc = SCDB_ENOMEM; goto fail; }
            if (S->dk) add_lowrank(S->dk, kv, iw, O->cku, O->ckv, rc_);
            if (S->dv) add_lowrank(S->dv, kv, iw, O->cvu, O->cvv, rc_);
        }
        int keep = in_patch_order(lora, l);
        if (S->has_aligner && !keep) {
            scdb_aligner_clear(&S->al);
            free(S->wk); free(S->wv);
            S->wk = S->wv = NULL;
            S->has_aligner = 0;
        }
        if (keep) {
            add_lowrank(S->al.skip, d, iw, O->au, O->av, ra);
            if (O->adb2) for (int a = 0; a < d; a++) S->al.b2[a] += O->adb2[a];
            add_lowrank(S->wk, kv, d, O->lkb, O->lka, lr);
            add_lowrank(S->wv, kv, d, O->lvb, O->lva, lr);
        }
        if (l == 0 && in->has_tokens && s->wk0 && s->wv0) {
            add_lowrank(s->wk0, kv, d, O->lkb, O->lka, lr);
            add_lowrank(s->wv0, kv, d, O->lvb, O->lva, lr);
        }
    }
    cx_tok_materialise(lora, s);
    s->info = lora->info;
    s->info.kind = SCDB_PAIR_FULL;
    memcpy(s->notes, lora->notes, sizeof s->notes);
    *out = s;
    return SCDB_OK;
fail:
    scdb_pair_free(&s);
    return rc;
}

scdb_err scdb_pair_save(const scdb_pair *p, const char *path)
{
    cx_bundle b;
    scdb_codec_id sum;
    char hex[33];
    if (!p || !path) return SCDB_EINVAL;
    scdb_err rc = build_bundle(p, &b);
    if (rc) return rc;
    cx_bundle_hash(&b, "checksum", &sum);
    scdb_codec_id_hex(&sum, hex);
    if (!(rc = cx_bundle_meta(&b, "checksum", "%s", hex))) rc = cx_bundle_write(&b, path);
    cx_bundle_free(&b);
    return rc;
}

/* want_shared: 0 a consumer's pair (full or lora), 1 a shared part, 2 a
 * shared part through the process's cache. */
static scdb_err load_pair(const char *path, const scdb_codebook *cb, int want_shared,
                          scdb_pair **out, char *errbuf, size_t errlen);

scdb_err scdb_pair_load(const char *path, const scdb_codebook *cb, scdb_pair **out,
                        char *errbuf, size_t errlen)
{
    return load_pair(path, cb, 0, out, errbuf, errlen);
}

scdb_err scdb_pair_load_shared(const char *path, const scdb_codebook *cb, scdb_pair **out,
                               char *errbuf, size_t errlen)
{
    return load_pair(path, cb, 1, out, errbuf, errlen);
}

/* A lora pair's metadata beyond a full pair's, and its references: the base
 * must be the codebook's producer (the base registered with the broker),
 * the shared part must be beside it with the recorded checksum and base.
 * On success *shared is the loaded shared part. */
static scdb_err lora_refs(const scdb_st_file *f, const char *path, const scdb_codebook *cb,
                          scdb_pair *p, scdb_pair **shared, char *errbuf, size_t errlen)
{
    scdb_pair_info *in = &p->info;
    const scdb_codebook_info *ci = &cb->info;
    char sp[1400], sub[512] = "";
    scdb_err rc;
    *shared = NULL;
    if ((rc = cx_meta_str(f, "base", in->base, sizeof in->base, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "shared", in->shared, sizeof in->shared, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "shared_id", in->shared_id, sizeof in->shared_id, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "dec_rank", 0, in->kv_dim, &in->dec_rank, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "align_rank", 0, in->d_model, &in->align_rank, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "lora_rank", 0, in->kv_dim < in->d_model ? in->kv_dim : in->d_model,
                          &in->lora_rank, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "lora_targets", in->lora_targets, sizeof in->lora_targets, errbuf, errlen)))
        return rc;
    scdb_codec_id sid;
    if (scdb_codec_id_parse(in->shared_id, &sid)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'shared_id' is not 32 hex digits", path);
        return SCDB_EFORMAT;
    }
    if (!in->shared[0] || strchr(in->shared, '/') || !strcmp(in->shared, ".") || !strcmp(in->shared, "..")) {
        scdb_errf(errbuf, errlen, "%s: metadata 'shared' = '%s' is not a file stem", path, in->shared);
        return SCDB_EFORMAT;
    }
    static const char *targets[] = {"", "k", "v", "k,v"};
    int tok = 0;
    for (size_t i = 0; i < SCDB_ARRAY_LEN(targets); i++) tok |= !strcmp(in->lora_targets, targets[i]);
    if (!tok || (in->lora_rank == 0) != (in->lora_targets[0] == '\0')) {
        scdb_errf(errbuf, errlen, "%s: metadata 'lora_targets' = '%s' with lora_rank %d (want '', 'k', 'v' or "
                  "'k,v', empty iff the rank is 0)", path, in->lora_targets, in->lora_rank);
        return SCDB_EFORMAT;
    }
    if (!p->all_input) {
        scdb_errf(errbuf, errlen, "%s: a lora pair's decoders read every layer's code (decoder_input = all)", path);
        return SCDB_EFORMAT;
    }
    /* the base it references must be the one registered: the codebook's producer */
    int same = !strcmp(in->base_fp, ci->producer_fp) ||
               (ci->id_producer_fp[0] && !strcmp(in->base_fp, ci->id_producer_fp));
    if (!same) {
        scdb_errf(errbuf, errlen, "%s: adapter pair references base '%s' with weights %s, but the registered "
                  "base (producer '%s' of codebook %s) has weights %s", path, in->base, in->base_fp,
                  ci->producer, ci->id_hex, ci->producer_fp);
        return SCDB_EMISMATCH;
    }
    const char *slash = strrchr(path, '/');
    int spn = slash ? snprintf(sp, sizeof sp, "%.*s/%s.safetensors", (int)(slash - path), path, in->shared)
                    : snprintf(sp, sizeof sp, "%s.safetensors", in->shared);
    if (spn < 0 || (size_t)spn >= sizeof sp) {
        scdb_errf(errbuf, errlen, "%s: the path of the shared part '%s' beside it is too long", path,
                  in->shared);
        return SCDB_ERANGE;
    }
    if (access(sp, F_OK)) {
        scdb_errf(errbuf, errlen, "%s: the shared part it references (%s, checksum %s) is missing", path, sp,
                  in->shared_id);
        return SCDB_ENOTFOUND;
    }
    scdb_pair *S = NULL;
    /* through the process's cache: every adapter of a fleet shares one copy */
    if ((rc = load_pair(sp, cb, 2, &S, sub, sizeof sub))) {
        scdb_errf(errbuf, errlen, "%s: its shared part: %s", path, sub);
        return rc;
    }
    if (strcmp(S->info.checksum, in->shared_id)) {
        scdb_errf(errbuf, errlen, "%s: references shared part %s with checksum %s, but %s has checksum %s "
                  "(refitted: refit the adapter pairs with it)", path, in->shared, in->shared_id, sp,
                  S->info.checksum);
        scdb_pair_free(&S);
        return SCDB_EMISMATCH;
    }
    if (strcmp(S->info.base_fp, in->base_fp)) {
        scdb_errf(errbuf, errlen, "%s: references base weights %s, but its shared part %s holds base weights %s",
                  path, in->base_fp, sp, S->info.base_fp);
        scdb_pair_free(&S);
        return SCDB_EMISMATCH;
    }
    if (S->info.hidden != in->hidden || S->all_input != p->all_input) {
        scdb_errf(errbuf, errlen, "%s: aligner width %d / decoder input differ from shared part %s's (%d)", path,
                  in->hidden, sp, S->info.hidden);
        scdb_pair_free(&S);
        return SCDB_EFORMAT;
    }
    *shared = S;
    return SCDB_OK;
}

/* A lora pair's own tensors into p (shapes from its metadata); *expected
 * counts them. */
static scdb_err read_lora_parts(const scdb_st_file *f, const char *path, scdb_pair *p, const scdb_pair *S,
                                int *expected, char *errbuf, size_t errlen)
{
    scdb_pair_info *in = &p->info;
    int kv = in->kv_dim, d = in->d_model, rc_ = in->dec_rank, ra = in->align_rank, lr = in->lora_rank;
    char nm[96];
    scdb_err rc;
    for (int i = 0; i < in->n_aligners; i++)
        if (!S->L[in->patch_order[i]].has_aligner) {
            scdb_errf(errbuf, errlen, "%s: patch layer %d has no aligner in its shared part", path,
                      in->patch_order[i]);
            return SCDB_EFORMAT;
        }
    for (int l = 0; l < in->n_layers; l++) {
        cx_player *L = &p->L[l];
        int iw = cx_in_width(p, l);
        struct { const char *n; int64_t d0, d1; float **dst; int when; } spec[] = {
            {"mean_k", kv, 0, &L->mk, 1}, {"mean_v", kv, 0, &L->mv, 1},
            {"dec_k.u", kv, rc_, &L->cku, rc_ > 0}, {"dec_k.v", rc_, iw, &L->ckv, rc_ > 0},
            {"dec_v.u", kv, rc_, &L->cvu, rc_ > 0}, {"dec_v.v", rc_, iw, &L->cvv, rc_ > 0},
            {"align.u", d, ra, &L->au, 2 * (ra > 0)}, {"align.v", ra, iw, &L->av, 2 * (ra > 0)},
            {"align.db2", d, 0, &L->adb2, 2},
            {"lora_k.a", lr, d, &L->lka, 3 * lora_targets(p, 'k')},
            {"lora_k.b", kv, lr, &L->lkb, 3 * lora_targets(p, 'k')},
            {"lora_v.a", lr, d, &L->lva, 3 * lora_targets(p, 'v')},
            {"lora_v.b", kv, lr, &L->lvb, 3 * lora_targets(p, 'v')}};
        int coded = p->layers[l].kind == SCDB_CB_CODED, patch = coded && lora_layer(p, l);
        int lo = lora_layer(p, l);
        for (size_t k = 0; k < SCDB_ARRAY_LEN(spec); k++) {
            int w = spec[k].when;
            if (!w || (w == 1 && !coded) || (w == 2 && !patch) || (w == 3 && !lo)) continue;
            if (w == 1 && k >= 2 && iw == 0) continue;
            snprintf(nm, sizeof nm, "layers.%d.%s", l, spec[k].n);
            if ((rc = cx_read_f32(f, nm, spec[k].d0, spec[k].d1, spec[k].dst, errbuf, errlen))) return rc;
            (*expected)++;
        }
    }
    return SCDB_OK;
}

static scdb_err load_pair(const char *path, const scdb_codebook *cb, int want_shared,
                          scdb_pair **out, char *errbuf, size_t errlen)
{
    scdb_st_file *f = NULL;
    scdb_pair *p = NULL, *S = NULL;   /* S: a lora pair's shared part */
    cx_bundle b = {0};
    char s[64], nm[96];
    int kinds[SCDB_CODEC_MAX_LAYERS], r[3][SCDB_CODEC_MAX_LAYERS], cnt;
    scdb_err rc;

    if (!path || !cb || !out) return SCDB_EINVAL;
    *out = NULL;
    const scdb_codebook_info *ci = &cb->info;
    if ((rc = cx_open(path, &f, errbuf, errlen))) return rc;
    p = cx_pair_alloc();
    if (!p) { rc = SCDB_ENOMEM; goto fail; }
    scdb_pair_info *in = &p->info;

    const char *fmt = scdb_st_meta(f, "format");
    if (!fmt || strcmp(fmt, "scdb-pair")) {
        scdb_errf(errbuf, errlen, "%s: not an scdb pair (metadata format = '%s')", path, fmt ? fmt : "(none)");
        rc = SCDB_EFORMAT;
        goto fail;
    }
    int ver;
    if ((rc = cx_meta_int(f, "version", 0, 1 << 30, &ver, errbuf, errlen))) goto fail;
    if (ver != 1 && ver != 2) {
        scdb_errf(errbuf, errlen, "%s: pair version %d, this build reads 1 and 2", path, ver);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    in->kind = SCDB_PAIR_FULL;
    if (ver == 2) {
        if ((rc = cx_meta_str(f, "kind", s, sizeof s, errbuf, errlen))) goto fail;
        in->kind = !strcmp(s, "shared") ? SCDB_PAIR_SHARED : !strcmp(s, "lora") ? SCDB_PAIR_LORA : -1;
        if (in->kind < 0) {
            scdb_errf(errbuf, errlen, "%s: pair kind '%s' (version 2 pairs are 'shared' or 'lora')", path, s);
            rc = SCDB_EFORMAT;
            goto fail;
        }
        if ((rc = cx_meta_str(f, "base_fp", in->base_fp, sizeof in->base_fp, errbuf, errlen))) goto fail;
        if (!cx_fp_valid(in->base_fp)) {
            scdb_errf(errbuf, errlen, "%s: metadata 'base_fp' (%.40s) is not a weights fingerprint", path,
                      in->base_fp);
            rc = SCDB_EFORMAT;
            goto fail;
        }
    }
    if ((in->kind == SCDB_PAIR_SHARED) != (want_shared != 0)) {
        if (want_shared)
            scdb_errf(errbuf, errlen, "%s: a %s pair, not a fleet's shared part", path, scdb_pair_kind_name(in->kind));
        else
            scdb_errf(errbuf, errlen, "%s: a fleet's shared part (kind shared), not a consumer's pair: it is "
                      "loaded through the adapter pairs that reference it", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    /* the codebook first: a pair for another codebook is refused as such */
    if ((rc = cx_meta_str(f, "codebook_id", in->codebook_hex, sizeof in->codebook_hex, errbuf, errlen)))
        goto fail;
    if (scdb_codec_id_parse(in->codebook_hex, &in->codebook_id)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'codebook_id' is not 32 hex digits", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    if (memcmp(&in->codebook_id, &ci->id, sizeof ci->id)) {
        scdb_errf(errbuf, errlen, "%s: pair belongs to codebook %s, not %s", path, in->codebook_hex, ci->id_hex);
        rc = SCDB_EMISMATCH;
        goto fail;
    }
    /* checksum over everything else */
    const char *sumhex = scdb_st_meta(f, "checksum");
    scdb_codec_id stored, sum;
    if (!sumhex || scdb_codec_id_parse(sumhex, &stored)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'checksum' missing or not 32 hex digits", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    if ((rc = cx_bundle_from_file(f, &b))) goto fail;
    cx_bundle_hash(&b, "checksum", &sum);
    cx_bundle_free(&b);
    if (memcmp(&stored, &sum, sizeof sum)) {
        scdb_errf(errbuf, errlen, "%s: contents do not match the stored checksum (corrupt or edited)", path);
        rc = SCDB_ECHECKSUM;
        goto fail;
    }
    scdb_codec_id_hex(&stored, in->checksum);
    if (want_shared == 2) {
        /* the same contents (checksum) for the same codebook: validated when
         * the cached copy was loaded */
        scdb_pair *hit = cache_find(&ci->id, in->checksum);
        if (hit) {
            scdb_pair_free(&p);
            scdb_st_close(&f);
            *out = hit;
            return SCDB_OK;
        }
    }
    if ((rc = cx_meta_str(f, "producer", in->producer, sizeof in->producer, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "consumer", in->consumer, sizeof in->consumer, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "producer_fp", in->producer_fp, sizeof in->producer_fp, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "consumer_fp", in->consumer_fp, sizeof in->consumer_fp, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "arch_fp", in->arch_fp, sizeof in->arch_fp, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "notes", p->notes, sizeof p->notes, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "n_layers", 1, SCDB_CODEC_MAX_LAYERS, &in->n_layers, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "d_model", 1, 65536, &in->d_model, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "n_kv_heads", 1, 4096, &in->n_kv_heads, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "head_dim", 2, 65536, &in->head_dim, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "vocab_size", 1, 1 << 20, &in->vocab_size, errbuf, errlen)) ||
        (rc = cx_meta_float(f, "rope_theta", &in->rope_theta, errbuf, errlen)) ||
        (rc = cx_meta_float(f, "norm_eps", &in->norm_eps, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "hidden", 0, 1 << 16, &in->hidden, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "has_tokens", 0, 1, &in->has_tokens, errbuf, errlen)) ||
        (rc = cx_meta_str(f, "k_space", s, sizeof s, errbuf, errlen)))
        goto fail;
    in->kv_dim = in->n_kv_heads * in->head_dim;
    if ((rc = cx_pair_alloc_layers(p, in->n_layers))) goto fail;
    p->k_post_rope = !strcmp(s, "post_rope");
    if ((rc = cx_meta_str(f, "decoder_input", s, sizeof s, errbuf, errlen))) goto fail;
    if (strcmp(s, "all") && strcmp(s, "layer")) {
        scdb_errf(errbuf, errlen, "%s: metadata 'decoder_input' must be 'layer' or 'all'", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    p->all_input = in->all_input = !strcmp(s, "all");
    /* optional (issue 40): the calibrated recompute default */
    if (scdb_st_meta(f, "recompute")) {
        char rs[64], why[160] = "";
        if ((rc = cx_meta_str(f, "recompute", rs, sizeof rs, errbuf, errlen))) goto fail;
        if (scdb_recompute_parse(rs, &in->recompute, why, sizeof why) ||
            scdb_recompute_check(&in->recompute, -1, why, sizeof why) ||
            in->recompute.policy == SCDB_RECOMPUTE_DEFAULT) {
            scdb_errf(errbuf, errlen, "%s: metadata 'recompute': %s", path,
                      why[0] ? why : "'default' is not a stored setting");
            rc = SCDB_EFORMAT;
            goto fail;
        }
        if (scdb_st_meta(f, "recompute_figures") &&
            (rc = cx_meta_str(f, "recompute_figures", in->recompute_figures,
                              sizeof in->recompute_figures, errbuf, errlen)))
            goto fail;
    } else if (scdb_st_meta(f, "recompute_figures")) {
        scdb_errf(errbuf, errlen, "%s: metadata 'recompute_figures' without 'recompute'", path);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    /* optional (pairs written before it are joint fits) */
    if (scdb_st_meta(f, "late_added") &&
        (rc = cx_meta_int(f, "late_added", 0, 1, &in->late_added, errbuf, errlen)))
        goto fail;
    if (!cx_fp_valid(in->producer_fp) || !cx_fp_valid(in->consumer_fp)) {
        scdb_errf(errbuf, errlen, "%s: metadata 'producer_fp' / 'consumer_fp' (%.40s, %.40s) are not weights "
                  "fingerprints", path, in->producer_fp, in->consumer_fp);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    /* shapes must agree with the codebook's producer architecture; the
     * producer is the codebook's (a pair written before the codebook was
     * re-stamped records its old 16 digits, id_producer_fp) */
    int same_producer = !strcmp(in->producer_fp, ci->producer_fp) ||
                        (ci->id_producer_fp[0] && !strcmp(in->producer_fp, ci->id_producer_fp));
    if (strcmp(in->arch_fp, ci->arch_fp) || !same_producer ||
        in->n_layers != ci->n_layers || in->d_model != ci->d_model || in->kv_dim != ci->kv_dim ||
        in->head_dim != ci->arch.head_dim || in->vocab_size != ci->arch.vocab_size ||
        p->k_post_rope != ci->k_post_rope) {
        scdb_errf(errbuf, errlen, "%s: architecture / producer recorded in the pair (%s, %s) differ from codebook %s's",
                path, in->arch_fp, in->producer_fp, ci->id_hex);
        rc = SCDB_EMISMATCH;
        goto fail;
    }
    if ((rc = cx_meta_ints(f, "layer_kind", SCDB_CODEC_MAX_LAYERS, 0, 1, kinds, &cnt, errbuf, errlen)))
        goto fail;
    if (cnt != in->n_layers) { scdb_errf(errbuf, errlen, "%s: layer_kind has %d entries", path, cnt); rc = SCDB_EFORMAT; goto fail; }
    static const char *rk[3] = {"r_k", "r_v", "r_h"};
    for (int q = 0; q < 3; q++) {
        if ((rc = cx_meta_ints(f, rk[q], SCDB_CODEC_MAX_LAYERS, 0, 65536, r[q], &cnt, errbuf, errlen)))
            goto fail;
        if (cnt != in->n_layers) { scdb_errf(errbuf, errlen, "%s: %s has %d entries", path, rk[q], cnt); rc = SCDB_EFORMAT; goto fail; }
    }
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *C = &ci->layers[l];
        if ((int)C->kind != kinds[l] || C->r_k != r[0][l] || C->r_v != r[1][l] || C->r_h != r[2][l]) {
            scdb_errf(errbuf, errlen, "%s: layer %d code layout differs from codebook %s's", path, l, ci->id_hex);
            rc = SCDB_EMISMATCH;
            goto fail;
        }
        p->layers[l] = *C;
    }
    p->code_dim = ci->code_dim;
    if ((rc = cx_meta_ints(f, "patch_order", SCDB_CODEC_MAX_LAYERS, 0, in->n_layers - 1,
                           in->patch_order, &in->n_aligners, errbuf, errlen)) ||
        (rc = cx_meta_int(f, "n_patch", 0, in->n_aligners, &in->n_patch, errbuf, errlen)))
        goto fail;
    if (in->has_tokens != (ci->layers[0].kind == SCDB_CB_TOKENS)) {
        scdb_errf(errbuf, errlen, "%s: has_tokens = %d but the codebook's layer 0 is %s", path, in->has_tokens,
                ci->layers[0].kind == SCDB_CB_TOKENS ? "a token layer" : "coded");
        rc = SCDB_EFORMAT;
        goto fail;
    }
    int kv = in->kv_dim, d = in->d_model, expected = 0;
    if (in->kind == SCDB_PAIR_LORA && (rc = lora_refs(f, path, cb, p, &S, errbuf, errlen))) goto fail;
    if ((rc = cx_tok_meta(f, path, p, S, errbuf, errlen))) goto fail;
    for (int i = 0; i < in->n_aligners; i++) {
        int l = in->patch_order[i];
        for (int j = 0; j < i; j++)
            if (in->patch_order[j] == l) {
                scdb_errf(errbuf, errlen, "%s: layer %d appears twice in patch_order", path, l);
                rc = SCDB_EFORMAT;
                goto fail;
            }
        if (ci->layers[l].r_h == 0) {
            scdb_errf(errbuf, errlen, "%s: patch layer %d is not a candidate of codebook %s", path, l, ci->id_hex);
            rc = SCDB_EFORMAT;
            goto fail;
        }
        if (in->hidden < 1) { scdb_errf(errbuf, errlen, "%s: aligners with hidden = 0", path); rc = SCDB_EFORMAT; goto fail; }
    }
    if (S) {
        /* a lora pair: its own parts, decoding low-rank with its shared part */
        if ((rc = read_lora_parts(f, path, p, S, &expected, errbuf, errlen)) ||
            (rc = cx_tok_read(f, path, p, &expected, errbuf, errlen)))
            goto fail;
        if (scdb_st_count(f) != expected) {
            scdb_errf(errbuf, errlen, "%s: %d tensors, the metadata implies %d", path, scdb_st_count(f), expected);
            rc = SCDB_EFORMAT;
            goto fail;
        }
        if ((rc = cx_pair_attach(p, S))) goto fail;
        scdb_pair_free(&S);
        scdb_st_close(&f);
        *out = p;
        return SCDB_OK;
    }
    for (int l = 0; l < in->n_layers; l++) {
        cx_player *L = &p->L[l];
        int w = cx_in_width(p, l);
        if (p->layers[l].kind != SCDB_CB_CODED) continue;
        if (w > 0) {
            snprintf(nm, sizeof nm, "layers.%d.dec_k", l);
            if ((rc = cx_read_f32(f, nm, kv, w, &L->dk, errbuf, errlen))) goto fail;
            snprintf(nm, sizeof nm, "layers.%d.dec_v", l);
            if ((rc = cx_read_f32(f, nm, kv, w, &L->dv, errbuf, errlen))) goto fail;
            expected += 2;
        }
        snprintf(nm, sizeof nm, "layers.%d.mean_k", l);
        if ((rc = cx_read_f32(f, nm, kv, 0, &L->mk, errbuf, errlen))) goto fail;
        snprintf(nm, sizeof nm, "layers.%d.mean_v", l);
        if ((rc = cx_read_f32(f, nm, kv, 0, &L->mv, errbuf, errlen))) goto fail;
        expected += 2;
    }
    for (int i = 0; i < in->n_aligners; i++) {
        int l = in->patch_order[i], w = cx_in_width(p, l), H = in->hidden;
        cx_player *L = &p->L[l];
        scdb_aligner *a = &L->al;
        a->r = w; a->hidden = H; a->d = d;
        struct { const char *n; int64_t d0, d1; float **dst; } spec[] = {
            {"align.w1", H, w, &a->w1}, {"align.b1", H, 0, &a->b1}, {"align.w2", d, H, &a->w2},
            {"align.b2", d, 0, &a->b2}, {"align.skip", d, w, &a->skip}, {"wk", kv, d, &L->wk},
            {"wv", kv, d, &L->wv}};
        for (size_t k = 0; k < SCDB_ARRAY_LEN(spec); k++) {
            snprintf(nm, sizeof nm, "layers.%d.%s", l, spec[k].n);
            if ((rc = cx_read_f32(f, nm, spec[k].d0, spec[k].d1, spec[k].dst, errbuf, errlen))) goto fail;
            expected++;
        }
        L->has_aligner = 1;
    }
    if (in->has_tokens) {
        if ((rc = cx_read_f32(f, "tok_embeddings", in->vocab_size, d, &p->emb, errbuf, errlen)) ||
            (rc = cx_read_f32(f, "layers.0.attn_norm", d, 0, &p->norm0, errbuf, errlen)) ||
            (rc = cx_read_f32(f, "layers.0.wk", kv, d, &p->wk0, errbuf, errlen)) ||
            (rc = cx_read_f32(f, "layers.0.wv", kv, d, &p->wv0, errbuf, errlen)))
            goto fail;
        expected += 4;
    }
    if ((rc = cx_tok_read(f, path, p, &expected, errbuf, errlen))) goto fail;
    if (scdb_st_count(f) != expected) {
        scdb_errf(errbuf, errlen, "%s: %d tensors, the metadata implies %d", path, scdb_st_count(f), expected);
        rc = SCDB_EFORMAT;
        goto fail;
    }
    scdb_st_close(&f);
    *out = want_shared == 2 ? cache_put(p) : p;
    return SCDB_OK;
fail:
    cx_bundle_free(&b);
    scdb_pair_free(&S);
    scdb_pair_free(&p);
    scdb_st_close(&f);
    return rc;
}

scdb_err scdb_pair_check_models(const scdb_pair *p, const scdb_model *producer,
                                const scdb_model *consumer, char *errbuf, size_t errlen)
{
    const scdb_pair_info *in;
    char fp[SCDB_CODEC_FP_LEN];
    scdb_err rc;
    if (!p) return SCDB_EINVAL;
    in = &p->info;
    const scdb_model *ms[2] = {producer, consumer};
    const char *want[2] = {in->producer_fp, in->consumer_fp};
    const char *role[2] = {"producer", "consumer"};
    for (int i = 0; i < 2; i++) {
        if (!ms[i]) continue;
        const scdb_model_config *c = scdb_model_cfg(ms[i]);
        scdb_codec_arch_fp(c, fp);
        if (strcmp(fp, in->arch_fp)) {
            scdb_errf(errbuf, errlen, "pair %s -> %s: %s model '%s' has another architecture (%s, pair has %s)",
                    in->producer, in->consumer, role[i], c->name, fp, in->arch_fp);
            return SCDB_EMISMATCH;
        }
        if ((rc = cx_model_fp_like(ms[i], want[i], fp, errbuf, errlen))) return rc;
        if (strcmp(fp, want[i])) {
            scdb_errf(errbuf, errlen, "pair %s -> %s: %s model '%s' has weights %s, the pair was fitted on %s",
                    in->producer, in->consumer, role[i], c->name, fp, want[i]);
            return SCDB_EMISMATCH;
        }
    }
    return SCDB_OK;
}

scdb_err scdb_pair_decode(const scdb_pair *p, const scdb_codebook *cb, const void *codes,
                          int n, const int32_t *pos, const int32_t *tokens, int n_patch,
                          scdb_kv_cache *cache, int slot0)
{
    return scdb_pair_decode_range(p, cb, codes, n, 0, n, pos, tokens, n_patch, cache, slot0);
}

scdb_err cx_pair_decode_check(const scdb_pair *p, const scdb_codebook *cb, int n,
                                const int32_t *pos, const int32_t *tokens, int n_patch,
                                const scdb_kv_cache *cache, int slot0, unsigned char *patch)
{
    const scdb_pair_info *in = &p->info;

    if (memcmp(&in->codebook_id, &cb->info.id, sizeof in->codebook_id)) return SCDB_EMISMATCH;
    if (cache->n_layers != in->n_layers || cache->n_kv_heads != in->n_kv_heads ||
        cache->head_dim != in->head_dim)
        return SCDB_ESHAPE;
    if (slot0 > cache->capacity - n) return SCDB_EINVAL;
    if (in->has_tokens) {
        if (!tokens) return SCDB_EINVAL;
        for (int i = 0; i < n; i++)
            if (tokens[i] < 0 || tokens[i] >= in->vocab_size) return SCDB_EINVAL;
    }
    for (int i = 0; i < n; i++) if (pos[i] < 0) return SCDB_EINVAL;
    if (n_patch < 0 || n_patch > in->n_aligners) n_patch = n_patch < 0 ? in->n_patch : in->n_aligners;
    for (int i = 0; i < n_patch; i++) patch[in->patch_order[i]] = 1;
    return SCDB_OK;
}

/* y [n][ldy] (out used columns) += (x V^T) U^T: a lora pair's rank-r
 * correction of a product with W, whose effective weight is W + U V (x [n][ldx],
 * in used columns; V [r][in], U [out][r]; t: n * r scratch).  The device
 * decode (pair_dev.c) runs the same two products. */
static void lowrank_add(const float *x, int ldx, int n, const float *Vm, const float *U, int r, int out,
                        float *t, float *y, int ldy)
{
    if (r <= 0 || !Vm || !U) return;
    int in = ldx;
    scdb_k_gemm_cpu(0, 1, n, r, in, 1.0f, x, ldx, Vm, in, 0.0f, t, r);
    scdb_k_gemm_cpu(0, 1, n, out, r, 1.0f, t, r, U, r, 1.0f, y, ldy);
}

scdb_err scdb_pair_decode_range(const scdb_pair *p, const scdb_codebook *cb, const void *payload,
                                int block_n, int t0, int n, const int32_t *pos,
                                const int32_t *tokens, int n_patch, scdb_kv_cache *cache, int slot0)
{
    const scdb_pair_info *in;
    const void *src = payload;
    const uint16_t *codes;
    uint16_t *deq = NULL;             /* int8 codes: the range as f16 codes */
    float *z = NULL, *h = NULL, *t = NULL;   /* t: a lora pair's x V^T rows */
    float *cs = NULL;                 /* RoPE's cos / sin at pos, for every layer */
    float *h0 = NULL;                 /* token input's rows */
    unsigned char patch[SCDB_CODEC_MAX_LAYERS] = {0};
    scdb_err rc = SCDB_OK;

    if (!p || !cb || (!payload && p->code_dim > 0) || n <= 0 || !pos || !cache || slot0 < 0 ||
        t0 < 0 || block_n < n || t0 > block_n - n)
        return SCDB_EINVAL;
    in = &p->info;
    if ((rc = cx_pair_decode_check(p, cb, n, pos, tokens, n_patch, cache, slot0, patch)))
        return rc;
    if ((rc = cx_codes_as_f16(cb, &src, &block_n, &t0, n, &deq))) return rc;
    codes = src;

    int kv = in->kv_dim, d = in->d_model, D = p->code_dim;
    z = malloc(((size_t)n * D + 1) * sizeof *z);
    h = malloc((size_t)n * d * sizeof *h);
    if (!z || !h) { rc = SCDB_ENOMEM; goto done; }
    /* layer sections of the range: section l of the block starts at
     * block_n * off[l]; the range's rows follow from row t0 */
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *CL = &p->layers[l];
        if (CL->width)
            scdb_f16_to_f32_n(codes + (size_t)block_n * CL->offset + (size_t)t0 * CL->width,
                              z + (size_t)n * CL->offset, (size_t)n * CL->width);
    }
    if (p->all_input && D) {
        /* token-major rows [n][D] gathered from the layer sections */
        float *zt = malloc((size_t)n * D * sizeof *zt);
        if (!zt) { rc = SCDB_ENOMEM; goto done; }
        for (int l = 0; l < in->n_layers; l++) {
            const scdb_cb_layer *CL = &p->layers[l];
            for (int i = 0; i < n; i++)
                memcpy(zt + (size_t)i * D + CL->offset, z + (size_t)n * CL->offset + (size_t)i * CL->width,
                       (size_t)CL->width * sizeof *zt);
        }
        free(z);
        z = zt;
    }
    /* a lora pair decodes with its shared part's tensors and adds its own
     * low-rank corrections (codec_internal.h): t = x V^T, y += t U^T */
    const scdb_pair *S = p->shared;
    const scdb_pair *T0 = S ? S : p;          /* whose token layer */
    int rmax = in->dec_rank > in->align_rank ? in->dec_rank : in->align_rank;
    if (in->lora_rank > rmax) rmax = in->lora_rank;
    if (S && rmax > 0 && !(t = malloc((size_t)n * rmax * sizeof *t))) { rc = SCDB_ENOMEM; goto done; }
    if (!(cs = malloc((size_t)n * in->head_dim * sizeof *cs))) { rc = SCDB_ENOMEM; goto done; }
    scdb_k_rope_angles_cpu(pos, n, in->head_dim, in->rope_theta, cs);
    if (in->token_input) {   /* h0: the token layer's rows (its embedding and norm) */
        if (!(h0 = malloc((size_t)n * d * sizeof *h0))) { rc = SCDB_ENOMEM; goto done; }
        cx_tok_h0(T0, tokens, n, h0);
    }
    for (int l = 0; l < in->n_layers; l++) {
        const scdb_cb_layer *CL = &p->layers[l];
        const cx_player *L = &p->L[l], *W = S ? &S->L[l] : L;   /* W: decoders, aligner, Wk/Wv */
        float *K = scdb_kv_k(cache, l, slot0), *V = scdb_kv_v(cache, l, slot0);
        /* input rows: section l [n][width], or the whole rows [n][D] */
        const float *zl = p->all_input ? z : z + (size_t)n * CL->offset;
        int iw = cx_in_width(p, l);
        if (CL->kind == SCDB_CB_TOKENS || patch[l]) {
            const float *wk = W->wk, *wv = W->wv;
            if (CL->kind == SCDB_CB_TOKENS) {
                for (int i = 0; i < n; i++)
                    memcpy(h + (size_t)i * d, T0->emb + (size_t)tokens[i] * d, (size_t)d * sizeof *h);
                scdb_k_rmsnorm_cpu(h, T0->norm0, n, d, in->norm_eps, h);
                wk = T0->wk0;
                wv = T0->wv0;
            } else if (S) {
                scdb_aligner a = W->al;
                a.b2 = L->b2e;
                if ((rc = scdb_aligner_apply(&a, zl, iw, n, h))) goto done;
                lowrank_add(zl, iw, n, L->av, L->au, in->align_rank, d, t, h, d);
            } else if ((rc = scdb_aligner_apply(&L->al, zl, iw, n, h))) {
                goto done;
            }
            scdb_k_linear_cpu(h, wk, n, d, kv, K);
            if (S) lowrank_add(h, d, n, L->lka, L->lkb, in->lora_rank, kv, t, K, kv);
            scdb_k_linear_cpu(h, wv, n, d, kv, V);
            if (S) lowrank_add(h, d, n, L->lva, L->lvb, in->lora_rank, kv, t, V, kv);
            scdb_k_rope_apply_cpu(K, n, in->n_kv_heads, in->head_dim, cs, 0);
            continue;
        }
        for (int i = 0; i < n; i++) {
            memcpy(K + (size_t)i * kv, L->mk, (size_t)kv * sizeof *K);
            memcpy(V + (size_t)i * kv, L->mv, (size_t)kv * sizeof *V);
        }
        if (iw > 0) {
            scdb_k_gemm_cpu(0, 1, n, kv, iw, 1.0f, zl, iw, W->dk, iw, 1.0f, K, kv);
            if (S) lowrank_add(zl, iw, n, L->ckv, L->cku, in->dec_rank, kv, t, K, kv);
            scdb_k_gemm_cpu(0, 1, n, kv, iw, 1.0f, zl, iw, W->dv, iw, 1.0f, V, kv);
            if (S) lowrank_add(zl, iw, n, L->cvv, L->cvu, in->dec_rank, kv, t, V, kv);
        }
        if (in->token_input) {
            /* h0's decoders (a lora pair's: its shared part's, and its own
             * correction of them), before RoPE; the device decode's order */
            cx_tok_add(h0, n, d, W->gk, kv, K);
            if (S && in->token_corr) lowrank_add(h0, d, n, L->ctk, L->cku, in->dec_rank, kv, t, K, kv);
            cx_tok_add(h0, n, d, W->gv, kv, V);
            if (S && in->token_corr) lowrank_add(h0, d, n, L->ctv, L->cvu, in->dec_rank, kv, t, V, kv);
        }
        if (!p->k_post_rope) scdb_k_rope_apply_cpu(K, n, in->n_kv_heads, in->head_dim, cs, 0);
    }
    memcpy(cache->pos + slot0, pos, (size_t)n * sizeof *pos);
    if (cache->n < slot0 + n) cache->n = slot0 + n;
done:
    free(deq);
    free(z);
    free(h);
    free(t);
    free(cs);
    free(h0);
    return rc;
}
