/* registry.c — the models, codebooks (namespaces), pairs (decoders) and
 * eviction policies a broker serves: one bk_registry per loaded
 * configuration (at start, and at each SIGHUP reload), reference-counted
 * (broker_int.h). */
#include "broker_int.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_SEQ 2048

const scdb_broker_model *bk_reg_model(const bk_registry *r, const char *name)
{
    for (int i = 0; i < r->n_models; i++)
        if (!strcmp(r->models[i].name, name)) return &r->models[i];
    return NULL;
}

const scdb_broker_codebook *bk_reg_codebook(const bk_registry *r, const char *name)
{
    for (int i = 0; i < r->n_codebooks; i++)
        if (!strcmp(r->codebooks[i].name, name)) return &r->codebooks[i];
    return NULL;
}

const bk_pair *bk_reg_pair(const bk_registry *r, const scdb_broker_codebook *cb,
                           const scdb_broker_model *consumer)
{
    for (int i = 0; i < r->n_pairs; i++)
        if (r->pairs[i].cb == cb && r->pairs[i].consumer == consumer) return &r->pairs[i];
    return NULL;
}

static scdb_err load_model(const scdb_broker_model_cfg *mc, const char *models_dir,
                           scdb_broker_model *m, char *errbuf, size_t errlen)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", mc->name);
    m->raw_dtype = mc->raw_dtype;
    if (mc->config[0]) {
        scdb_model_config conf;
        char why[256] = "";
        /* a config.json, a model directory or a LoRA adapter directory */
        scdb_err e = scdb_model_config_load_any(mc->config, models_dir[0] ? models_dir : NULL, &conf, why,
                                                sizeof why);
        if (e) {
            /* why names the file and the problem when the loader gave one */
            if (why[0])
                snprintf(errbuf, errlen, "model %s: %s", mc->name, why);
            else
                snprintf(errbuf, errlen, "model %s: %s: %s", mc->name, mc->config,
                         scdb_strerror(e));
            return e;
        }
        m->n_layers = conf.n_layers;
        m->n_kv_heads = conf.n_kv_heads;
        m->head_dim = conf.head_dim;
        m->max_seq_len = conf.max_seq_len;
        m->n_heads = conf.n_heads;
        m->vocab_size = conf.vocab_size;
        if ((mc->n_heads && mc->n_heads != m->n_heads) ||
            (mc->n_layers && mc->n_layers != m->n_layers) ||
            (mc->n_kv_heads && mc->n_kv_heads != m->n_kv_heads) ||
            (mc->head_dim && mc->head_dim != m->head_dim)) {
            snprintf(errbuf, errlen, "model %s: dimensions differ from %s", mc->name,
                     mc->config);
            return SCDB_EINVAL;
        }
        if (mc->max_seq_len) m->max_seq_len = mc->max_seq_len;
        return SCDB_OK;
    }
    if (mc->n_layers <= 0 || mc->n_kv_heads <= 0 || mc->head_dim <= 0) {
        snprintf(errbuf, errlen,
                 "model %s: give config = PATH/config.json or n_layers, n_kv_heads, head_dim",
                 mc->name);
        return SCDB_EINVAL;
    }
    m->n_layers = mc->n_layers;
    m->n_kv_heads = mc->n_kv_heads;
    m->head_dim = mc->head_dim;
    m->max_seq_len = mc->max_seq_len > 0 ? mc->max_seq_len : DEFAULT_MAX_SEQ;
    if (mc->n_heads && mc->n_heads % mc->n_kv_heads) {
        snprintf(errbuf, errlen, "model %s: n_heads %d is not a multiple of n_kv_heads %d",
                 mc->name, mc->n_heads, mc->n_kv_heads);
        return SCDB_EINVAL;
    }
    m->n_heads = mc->n_heads;
    return SCDB_OK;
}

/* "what name: " before the message a loader left in errbuf (unless it
 * starts so already).  name is a codebook's or a pair's ("a -> b": two
 * names), so head holds two names and the word: a shorter one cut long
 * names and the check below then compared a truncated head. */
static void prefix_msg(char *errbuf, size_t errlen, const char *what, const char *name)
{
    char tmp[1024], head[2 * SCDB_BROKER_NAME_MAX + 32];
    if (!errbuf || !errlen) return;
    snprintf(head, sizeof head, "%s %s: ", what, name);
    if (!strncmp(errbuf, head, strlen(head))) return;
    snprintf(tmp, sizeof tmp, "%s%s", head, errbuf);
    snprintf(errbuf, errlen, "%s", tmp);
}

static scdb_err add_codebook(bk_registry *r, const char *name, const char *kind_name,
                             const scdb_broker_model *producer, const char *file,
                             scdb_dtype dtype, const char *codes_dtype, char *errbuf,
                             size_t errlen)
{
    const scdb_codec_kind *kind = scdb_codec_kind_find(kind_name);
    scdb_broker_codebook *cb = &r->codebooks[r->n_codebooks];
    scdb_err e;

    if (!kind) {
        snprintf(errbuf, errlen, "codebook %s: unknown kind '%s'", name, kind_name);
        return SCDB_EINVAL;
    }
    memset(cb, 0, sizeof *cb);
    snprintf(cb->name, sizeof cb->name, "%s", name);
    snprintf(cb->kind, sizeof cb->kind, "%s", kind->name);
    cb->producer = producer;
    snprintf(cb->codes_dtype, sizeof cb->codes_dtype, "%s", codes_dtype);
    e = kind->open_codebook(cb, file, dtype, errbuf, errlen);
    if (e) {
        prefix_msg(errbuf, errlen, "codebook", name);
        return e;
    }
    r->n_codebooks++;
    return SCDB_OK;
}

/* A pair's consumers' recompute default (issue 40): the config's
 * `fidelity` (checked when it was parsed), else the pair file's (a
 * calibrated "none" too: source "pair"), else none (source ""). */
static void pair_fidelity(bk_pair *p, const char *fidelity)
{
    scdb_recompute r = {SCDB_RECOMPUTE_NONE, 0, 0.0f};
    p->fidelity = r;
    p->fidelity_source = "";
    if (fidelity && fidelity[0] && !scdb_recompute_parse(fidelity, &r, NULL, 0) &&
        r.policy != SCDB_RECOMPUTE_DEFAULT) {
        p->fidelity = r;
        p->fidelity_source = "config";
    } else if (p->dec.recompute.policy != SCDB_RECOMPUTE_NONE || p->dec.recompute_set) {
        p->fidelity = p->dec.recompute;
        p->fidelity_source = "pair";
    }
}

static scdb_err add_pair(bk_registry *r, const scdb_broker_codebook *cb,
                         const scdb_broker_model *consumer, const char *file,
                         const char *fidelity, char *errbuf, size_t errlen)
{
    const scdb_codec_kind *kind = scdb_codec_kind_find(cb->kind);
    bk_pair *p = (bk_pair *)bk_reg_pair(r, cb, consumer);
    scdb_decoder dec = {0};
    scdb_err e;

    e = kind->new_decoder(cb, consumer, file, &dec, errbuf, errlen);
    if (e) {
        char what[2 * SCDB_BROKER_NAME_MAX + 8];
        snprintf(what, sizeof what, "%s -> %s", cb->name, consumer->name);
        prefix_msg(errbuf, errlen, "pair", what);
        return e;
    }
    if (p) {                       /* an explicit pair replaces the default */
        if (p->dec.destroy) p->dec.destroy(p->dec.ctx);
    } else {
        p = &r->pairs[r->n_pairs++];
        p->cb = cb;
        p->consumer = consumer;
    }
    p->dec = dec;
    pair_fidelity(p, fidelity);
    return SCDB_OK;
}

/* Eviction policies for live sessions: every heuristic under its kind's
 * name, then the configured learned ones (a name may not shadow a
 * heuristic). */
static scdb_err load_policies(bk_registry *r, const scdb_broker_config *c, char *errbuf,
                              size_t errlen)
{
    r->policies = calloc((size_t)SCDB_EVICT_KIND_COUNT + (size_t)c->n_policies,
                         sizeof *r->policies);
    if (!r->policies) {
        snprintf(errbuf, errlen, "out of memory");
        return SCDB_ENOMEM;
    }
    for (int k = 0; k < SCDB_EVICT_KIND_COUNT; k++) {
        bk_policy *p = &r->policies[r->n_policies];
        if (k == SCDB_EVICT_LEARNED) continue;
        snprintf(p->name, sizeof p->name, "%s", scdb_evict_kind_name((scdb_evict_kind)k));
        if (scdb_evict_policy_new((scdb_evict_kind)k, &p->policy)) {
            snprintf(errbuf, errlen, "out of memory");
            return SCDB_ENOMEM;
        }
        r->n_policies++;
    }
    for (int i = 0; i < c->n_policies; i++) {
        const scdb_broker_policy_cfg *pc = &c->policies[i];
        bk_policy *p = &r->policies[r->n_policies];
        char why[256] = "";
        scdb_err e;

        if (bk_reg_policy(r, pc->name)) {
            snprintf(errbuf, errlen, "policy %s: the name is taken (a built-in heuristic)",
                     pc->name);
            return SCDB_EINVAL;
        }
        if (!pc->file[0]) {
            snprintf(errbuf, errlen, "policy %s: give file = PATH (a learned policy)", pc->name);
            return SCDB_EINVAL;
        }
        e = scdb_evict_policy_load(pc->file, &p->policy, why, sizeof why);
        if (e) {
            if (why[0])       /* names the file and the problem */
                snprintf(errbuf, errlen, "policy %s: %s", pc->name, why);
            else
                snprintf(errbuf, errlen, "policy %s: %s: %s", pc->name, pc->file,
                         scdb_strerror(e));
            return e;
        }
        snprintf(p->name, sizeof p->name, "%s", pc->name);
        r->n_policies++;
        scdb_info("policy %s: learned, from %s", p->name, pc->file);
    }
    return SCDB_OK;
}

const bk_policy *bk_reg_policy(const bk_registry *r, const char *name)
{
    for (int i = 0; i < r->n_policies; i++)
        if (!strcmp(r->policies[i].name, name)) return &r->policies[i];
    return NULL;
}

static scdb_err registry_build(bk_registry *r, const scdb_broker_config *c, char *errbuf,
                               size_t errlen)
{
    scdb_err e;
    int max_cb = c->n_models + c->n_codebooks, max_pairs = c->n_models + c->n_pairs;

    r->models = calloc((size_t)c->n_models + 1, sizeof *r->models);
    r->codebooks = calloc((size_t)max_cb + 1, sizeof *r->codebooks);
    r->pairs = calloc((size_t)max_pairs + 1, sizeof *r->pairs);
    if (!r->models || !r->codebooks || !r->pairs) {
        snprintf(errbuf, errlen, "out of memory");
        return SCDB_ENOMEM;
    }
    for (int i = 0; i < c->n_models; i++) {
        e = load_model(&c->models[i], c->models_dir, &r->models[i], errbuf, errlen);
        if (e) return e;
        r->n_models++;
    }
    /* every model's raw codebook, unless configured explicitly */
    for (int i = 0; i < r->n_models; i++) {
        char name[SCDB_BROKER_NAME_MAX];
        int explicit = 0;
        snprintf(name, sizeof name, "raw/%.120s", r->models[i].name);
        for (int j = 0; j < c->n_codebooks; j++)
            if (!strcmp(c->codebooks[j].name, name)) explicit = 1;
        if (explicit) continue;
        e = add_codebook(r, name, "raw", &r->models[i], "", r->models[i].raw_dtype, "", errbuf,
                         errlen);
        if (e) return e;
    }
    for (int i = 0; i < c->n_codebooks; i++) {
        const scdb_broker_codebook_cfg *cc = &c->codebooks[i];
        const scdb_broker_model *m = bk_reg_model(r, cc->model);
        if (!m) {
            snprintf(errbuf, errlen, "codebook %s: unknown producer model '%s'", cc->name,
                     cc->model);
            return SCDB_EINVAL;
        }
        e = add_codebook(r, cc->name, cc->kind, m, cc->file, cc->dtype, cc->codes_dtype, errbuf,
                         errlen);
        if (e) return e;
    }
    /* identity pairs: a raw codebook decodes into its own producer */
    for (int i = 0; i < r->n_codebooks; i++) {
        if (strcmp(r->codebooks[i].kind, "raw")) continue;
        e = add_pair(r, &r->codebooks[i], r->codebooks[i].producer, "", "", errbuf, errlen);
        if (e) return e;
    }
    for (int i = 0; i < c->n_pairs; i++) {
        const scdb_broker_pair_cfg *pc = &c->pairs[i];
        const scdb_broker_codebook *cb = bk_reg_codebook(r, pc->codebook);
        const scdb_broker_model *m = bk_reg_model(r, pc->consumer);
        if (!cb || !m) {
            snprintf(errbuf, errlen, "pair %s %s: unknown %s", pc->codebook, pc->consumer,
                     cb ? "consumer model" : "codebook");
            return SCDB_EINVAL;
        }
        if (pc->decoder[0] && strcmp(pc->decoder, cb->kind)) {
            snprintf(errbuf, errlen, "pair %s %s: decoder '%s' does not decode %s codes",
                     pc->codebook, pc->consumer, pc->decoder, cb->kind);
            return SCDB_EINVAL;
        }
        e = add_pair(r, cb, m, pc->file, pc->fidelity, errbuf, errlen);
        if (e) return e;
    }
    return load_policies(r, c, errbuf, errlen);
}

static void registry_free(bk_registry *r)
{
    for (int i = 0; i < r->n_pairs; i++)
        if (r->pairs[i].dec.destroy) r->pairs[i].dec.destroy(r->pairs[i].dec.ctx);
    for (int i = 0; i < r->n_codebooks; i++)
        if (r->codebooks[i].destroy) r->codebooks[i].destroy(r->codebooks[i].ctx);
    for (int i = 0; i < r->n_policies; i++) scdb_evict_policy_free(&r->policies[i].policy);
    free(r->policies);
    r->policies = NULL;
    r->n_policies = 0;
    free(r->pairs);
    free(r->codebooks);
    free(r->models);
    r->pairs = NULL;
    r->codebooks = NULL;
    r->models = NULL;
    r->n_pairs = r->n_codebooks = r->n_models = 0;
    free(r);
}

scdb_err bk_registry_new(const scdb_broker_config *c, bk_registry **out, char *errbuf,
                         size_t errlen)
{
    bk_registry *r = calloc(1, sizeof *r);
    scdb_err e;

    *out = NULL;
    if (!r) {
        snprintf(errbuf, errlen, "out of memory");
        return SCDB_ENOMEM;
    }
    r->refs = 1;
    r->generation = 1;
    e = registry_build(r, c, errbuf, errlen);
    if (e) {
        registry_free(r);
        return e;
    }
    *out = r;
    return SCDB_OK;
}

bk_registry *bk_registry_ref(bk_registry *r)
{
    if (r) r->refs++;
    return r;
}

/* The last reference frees the registry: its pairs' and codebooks'
 * weights (a reload built the next one in its own thread, whose malloc
 * arena keeps what is freed here unless trimmed: without the trim the
 * broker's RSS grew by a whole registry's weights per SIGHUP, 3.4 MB per
 * pair added one reload at a time in `bench fleet`, against 1.6 MB per pair
 * loaded at start).  The trim walks every arena of the process: the
 * broker's trimmer thread does it (heap_trim.c), not the caller, which is
 * the event loop. */
void bk_registry_unref(bk_registry *r)
{
    if (r && --r->refs == 0) {
        bk_trimmer *t = r->trim;
        uint64_t gen = r->generation, t0 = scdb_now_ns();
        registry_free(r);
        scdb_info("configuration %llu freed in %.2f ms", (unsigned long long)gen,
                  (double)(scdb_now_ns() - t0) / 1e6);
        bk_trimmer_request(t);
    }
}

const scdb_broker_model *bk_model_find(const scdb_broker *b, const char *name)
{
    return bk_reg_model(b->reg, name);
}

const scdb_broker_codebook *bk_codebook_find(const scdb_broker *b, const char *name)
{
    return bk_reg_codebook(b->reg, name);
}

const bk_pair *bk_pair_find(const scdb_broker *b, const scdb_broker_codebook *cb,
                            const scdb_broker_model *consumer)
{
    return bk_reg_pair(b->reg, cb, consumer);
}

const bk_policy *bk_policy_find(const scdb_broker *b, const char *name)
{
    return bk_reg_policy(b->reg, name);
}

scdb_err scdb_broker_add_pair(scdb_broker *b, const char *codebook, const char *consumer,
                              const scdb_decoder *dec)
{
    const scdb_broker_codebook *cb = b ? bk_codebook_find(b, codebook) : NULL;
    const scdb_broker_model *m = b ? bk_model_find(b, consumer) : NULL;
    bk_pair *p;

    if (!cb || !m) {
        if (dec && dec->destroy) dec->destroy(dec->ctx);
        return SCDB_ENOTFOUND;
    }
    p = (bk_pair *)bk_pair_find(b, cb, m);
    if (p) {
        if (p->dec.destroy) p->dec.destroy(p->dec.ctx);
    } else {
        bk_registry *r = b->reg;
        void *q = realloc(r->pairs, ((size_t)r->n_pairs + 1) * sizeof *r->pairs);
        if (!q) {
            if (dec->destroy) dec->destroy(dec->ctx);
            return SCDB_ENOMEM;
        }
        r->pairs = q;
        p = &r->pairs[r->n_pairs++];
        p->cb = cb;
        p->consumer = m;
    }
    p->dec = *dec;
    pair_fidelity(p, NULL);
    return SCDB_OK;
}
