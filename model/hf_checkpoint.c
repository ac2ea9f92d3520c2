/* hf_checkpoint.c — the weights of a Hugging Face Llama checkpoint.
 *
 * A directory as transformers' save_pretrained() writes it:
 *
 *   config.json                         (parsed by config.c)
 *   model.safetensors                   one file, or
 *   model.safetensors.index.json        {"metadata": {...},
 *                                        "weight_map": {tensor: shard, ...}}
 *   model-00001-of-0000M.safetensors    the shards it names
 *
 * model.safetensors wins when both are present (transformers' order).  Every
 * shard the index names is opened (mmap, zero-copy for F32), and each
 * tensor is looked up in the shard the index maps it to.  Names map onto
 * the reference model one to one; HF's Llama applies RoPE in the same
 * "rotate half" convention as kernels/cpu/ops.c (pairs (i, i + head_dim/2):
 * transformers' convert script permutes Meta's interleaved q/k rows into
 * that order), so q_proj / k_proj are used as they are:
 *
 *   model.embed_tokens.weight                   tok_embeddings
 *   model.layers.N.input_layernorm.weight       attention_norm
 *   model.layers.N.self_attn.{q,k,v,o}_proj     wq, wk, wv, wo
 *   model.layers.N.post_attention_layernorm     ffn_norm
 *   model.layers.N.mlp.gate_proj / up_proj      w1 / w3
 *   model.layers.N.mlp.down_proj                w2
 *   model.norm.weight                           norm
 *   lm_head.weight                              output (embed_tokens when
 *                                               tie_word_embeddings)
 *
 * Tensors the model does not use (rotary inv_freq buffers, ...) are
 * ignored. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model_internal.h"

#define INDEX_NAME "model.safetensors.index.json"
#define MAX_INDEX (64u << 20)   /* an index is a few hundred KiB at most */

/* Where the tensors are: one file, or an index over shards. */
typedef struct hf_src {
    cJSON *index;              /* parsed index, NULL for one file */
    const cJSON *map;          /* its weight_map */
    char **shards;             /* distinct shard names, in order of first use */
    int n_shards;              /* == m->n_files once all are open */
} hf_src;

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A shard name must be a plain file name inside the model directory: no
 * directory part, not "." / "..", not hidden. */
static int plain_name(const char *s)
{
    return s[0] && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\');
}

static scdb_err open_file(scdb_model *m, const char *name, char *errbuf, size_t errlen)
{
    char path[1400], msg[512] = "";
    scdb_st_file *f = NULL;
    snprintf(path, sizeof path, "%s/%s", m->dir, name);
    scdb_err rc = scdb_st_open(path, &f, msg, sizeof msg);
    if (rc == SCDB_ENOTFOUND) { scdb_errf(errbuf, errlen, "%s: no such file", path); return rc; }
    if (rc) { scdb_errf(errbuf, errlen, "%s", msg); return rc; }   /* the reader names the file */
    return md_model_add_file(m, &f);
}

static scdb_err read_index(scdb_model *m, hf_src *s, char *errbuf, size_t errlen)
{
    char path[1400], *buf = NULL;
    size_t len = 0;
    scdb_err rc;

    snprintf(path, sizeof path, "%s/" INDEX_NAME, m->dir);
    if ((rc = scdb_read_file(path, MAX_INDEX, &buf, &len))) {
        scdb_errf(errbuf, errlen, "%s: %s", path, scdb_strerror(rc));
        return rc;
    }
    s->index = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!s->index || !cJSON_IsObject(s->index)) {
        scdb_errf(errbuf, errlen, "%s: not a JSON object", path);
        return SCDB_EFORMAT;
    }
    s->map = cJSON_GetObjectItemCaseSensitive(s->index, "weight_map");
    if (!cJSON_IsObject(s->map)) {
        scdb_errf(errbuf, errlen, "%s: no \"weight_map\" object", path);
        return SCDB_EFORMAT;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, s->map) {
        if (!cJSON_IsString(e)) {
            scdb_errf(errbuf, errlen, "%s: weight_map entry '%s' is not a file name string", INDEX_NAME, e->string);
            return SCDB_EFORMAT;
        }
        if (!plain_name(e->valuestring)) {
            scdb_errf(errbuf, errlen, "%s: weight_map entry '%s' -> '%s' points outside the model directory "
                 "(shards must be plain file names in %s)", INDEX_NAME, e->string,
                 e->valuestring, m->dir);
            return SCDB_ERANGE;
        }
        int k = 0;
        while (k < s->n_shards && strcmp(s->shards[k], e->valuestring)) k++;
        if (k < s->n_shards) continue;
        char **grown = realloc(s->shards, (size_t)(s->n_shards + 1) * sizeof *grown);
        if (!grown) return SCDB_ENOMEM;
        s->shards = grown;
        s->shards[s->n_shards++] = e->valuestring;   /* owned by s->index */
    }
    if (s->n_shards == 0) {
        scdb_errf(errbuf, errlen, "%s: weight_map is empty", path);
        return SCDB_EFORMAT;
    }
    for (int k = 0; k < s->n_shards; k++) {
        if ((rc = open_file(m, s->shards[k], errbuf, errlen))) {
            if (rc == SCDB_ENOTFOUND) {
                char tmp[512];
                snprintf(tmp, sizeof tmp, "%s", errbuf ? errbuf : "");
                scdb_errf(errbuf, errlen, "shard %s named by %s is missing (%s)", s->shards[k], INDEX_NAME, tmp);
            }
            return rc;
        }
    }
    return SCDB_OK;
}

/* The tensor `name` (NULL, with a message and *rc set, when it cannot be
 * found) and the file name to mention. */
static const scdb_st_tensor *find(scdb_model *m, const hf_src *s, const char *name,
                                  const char **where, scdb_err *rc, char *errbuf, size_t errlen)
{
    *rc = SCDB_ENOTFOUND;
    if (!s->index) {
        *where = "model.safetensors";
        const scdb_st_tensor *t = scdb_st_find(m->files[0], name);
        if (!t) scdb_errf(errbuf, errlen, "tensor '%s' missing from model.safetensors", name);
        return t;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s->map, name);
    if (!e) {
        scdb_errf(errbuf, errlen, "tensor '%s' missing: %s's weight_map does not name it", name, INDEX_NAME);
        return NULL;
    }
    int k = 0;
    while (k < s->n_shards && strcmp(s->shards[k], e->valuestring)) k++;
    *where = s->shards[k];
    const scdb_st_tensor *t = scdb_st_find(m->files[k], name);
    if (!t) scdb_errf(errbuf, errlen, "tensor '%s' missing: %s maps it to %s, which does not contain it", name,
                 INDEX_NAME, s->shards[k]);
    return t;
}

scdb_err md_hf_load_weights(scdb_model *m, char *errbuf, size_t errlen)
{
    const scdb_model_config *c = &m->cfg;
    hf_src s = {0};
    char path[1400], name[160];
    scdb_err rc;

    snprintf(path, sizeof path, "%s/model.safetensors", m->dir);
    if (exists(path)) {
        if ((rc = open_file(m, "model.safetensors", errbuf, errlen))) goto done;
    } else {
        snprintf(path, sizeof path, "%s/" INDEX_NAME, m->dir);
        if (!exists(path)) {
            scdb_errf(errbuf, errlen, "%s: no model.safetensors and no " INDEX_NAME, m->dir);
            rc = SCDB_ENOTFOUND;
            goto done;
        }
        if ((rc = read_index(m, &s, errbuf, errlen))) goto done;
    }

    int qd = scdb_model_q_dim(c), kvd = scdb_model_kv_dim(c);
    const char *where = NULL;
    const scdb_st_tensor *t;
#define BIND(n, d0, d1, p)                                                          \
    do {                                                                           \
        if (!(t = find(m, &s, n, &where, &rc, errbuf, errlen))) goto done;         \
        if ((rc = md_model_bind(m, t, n, where, d0, d1, p, errbuf, errlen))) goto done; \
    } while (0)
    BIND("model.embed_tokens.weight", c->vocab_size, c->d_model, &m->tok_embeddings);
    BIND("model.norm.weight", c->d_model, 0, &m->norm);
    if (c->tied_embeddings) {
        m->output = m->tok_embeddings;
    } else {
        t = find(m, &s, "lm_head.weight", &where, &rc, errbuf, errlen);
        if (!t) {
            size_t o = errbuf ? strlen(errbuf) : 0;
            if (errbuf && o < errlen)
                snprintf(errbuf + o, errlen - o, " (config.json: tie_word_embeddings is false)");
            goto done;
        }
        if ((rc = md_model_bind(m, t, "lm_head.weight", where, c->vocab_size, c->d_model,
                                  &m->output, errbuf, errlen)))
            goto done;
    }
    for (int l = 0; l < c->n_layers; l++) {
        scdb_layer_weights *w = &m->layers[l];
        struct { const char *n; int64_t d0, d1; const float **p; } spec[] = {
            {"input_layernorm.weight", c->d_model, 0, &w->attn_norm},
            {"self_attn.q_proj.weight", qd, c->d_model, &w->wq},
            {"self_attn.k_proj.weight", kvd, c->d_model, &w->wk},
            {"self_attn.v_proj.weight", kvd, c->d_model, &w->wv},
            {"self_attn.o_proj.weight", c->d_model, qd, &w->wo},
            {"post_attention_layernorm.weight", c->d_model, 0, &w->ffn_norm},
            {"mlp.gate_proj.weight", c->d_ff, c->d_model, &w->w1},
            {"mlp.up_proj.weight", c->d_ff, c->d_model, &w->w3},
            {"mlp.down_proj.weight", c->d_model, c->d_ff, &w->w2},
        };
        for (size_t i = 0; i < SCDB_ARRAY_LEN(spec); i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, spec[i].n);
            BIND(name, spec[i].d0, spec[i].d1, spec[i].p);
        }
    }
#undef BIND
    rc = SCDB_OK;
done:
    free(s.shards);
    cJSON_Delete(s.index);
    return rc;
}
