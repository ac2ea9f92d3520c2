/* calib_text.c — where calibration and evaluation text comes from (codec.h,
 * scdb_codec_domain_text): a model family's training files as listed in its
 * TRAINING.json, or a half of its held-out text. */
#include "codec_internal.h"

#include <cjson/cJSON.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

scdb_err scdb_codec_read_text(const char *path, size_t max_bytes, unsigned char **text,
                              size_t *len)
{
    size_t n = strlen(path);
    *text = NULL;
    *len = 0;
    if (n > 3 && !strcmp(path + n - 3, ".gz")) {
        char cmd[1200];
        struct stat sb;
        if (strchr(path, '\'') || n > 1000) return SCDB_EINVAL;
        if (stat(path, &sb)) return SCDB_ENOTFOUND;
        snprintf(cmd, sizeof cmd, "gzip -dc -- '%s' 2>/dev/null", path);
        FILE *f = popen(cmd, "r");
        if (!f) return SCDB_ESYS;
        char *buf;
        size_t got;
        scdb_err rc = scdb_read_stream(f, max_bytes, &buf, &got);
        int st = pclose(f);
        if (rc) return rc;
        if (got == 0 && st != 0) { free(buf); return SCDB_EIO; }
        *text = (unsigned char *)buf;
        *len = got;
        return SCDB_OK;
    }
    char *buf;
    size_t l;
    scdb_err rc = scdb_read_file(path, (size_t)1 << 30, &buf, &l);
    if (rc) return rc;
    if (l > max_bytes) l = max_bytes;
    *text = (unsigned char *)buf;
    *len = l;
    return SCDB_OK;
}

const char *scdb_codec_text_domain(const scdb_model *m)
{
    const scdb_model_config *c = scdb_model_cfg(m);
    return strcmp(c->finetune, "lora") ? c->domain : c->name;
}

static void family_dir(const scdb_model *m, char *out, size_t cap)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s", scdb_model_dir(m));
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = '\0';
    snprintf(out, cap, "%s", dirname(tmp));
}

/* 1 if path is in the JSON array a (strings or {"path": ...} objects). */
static int listed_in(const cJSON *a, const char *path)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, a) {
        const cJSON *s = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "path") : it;
        if (cJSON_IsString(s) && !strcmp(s->valuestring, path)) return 1;
    }
    return 0;
}

/* Files calibration must not read although a TRAINING.json lists them for
 * training: every domain's heldout_files there, and every eval file of the
 * eviction suite (<data>/evict_suite/manifest.json, beside the family). */
typedef struct excl {
    cJSON *suite;            /* the manifest, NULL when there is none */
    const cJSON *training;   /* the TRAINING.json's "domains" */
} excl;

static int excluded(const excl *x, const char *path)
{
    const cJSON *d;
    cJSON_ArrayForEach(d, x->training)
        if (listed_in(cJSON_GetObjectItemCaseSensitive(d, "heldout_files"), path)) return 1;
    const cJSON *sd = x->suite ? cJSON_GetObjectItemCaseSensitive(x->suite, "domains") : NULL;
    cJSON_ArrayForEach(d, sd) {
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(d, "eval");
        if (listed_in(ev ? cJSON_GetObjectItemCaseSensitive(ev, "files") : NULL, path)) return 1;
    }
    return 0;
}

static cJSON *load_suite(const char *training_json)
{
    char tmp[1200], path[1400];
    char *json;
    size_t jl;
    snprintf(tmp, sizeof tmp, "%s", training_json);
    snprintf(path, sizeof path, "%s/../evict_suite/manifest.json", dirname(tmp));
    if (scdb_read_file(path, 1 << 26, &json, &jl)) return NULL;
    cJSON *r = cJSON_ParseWithLength(json, jl);
    free(json);
    return r;
}

scdb_err scdb_codec_training_text(const char *training_json, const char *domain, size_t max_bytes,
                                  size_t per_file, unsigned char **text, size_t *len, char *desc,
                                  size_t desclen)
{
    char *json = NULL;
    size_t jl;
    cJSON *root = NULL;
    unsigned char *out = NULL;
    size_t got = 0;
    int used = 0, listed = 0, skipped = 0;
    excl x = {0};
    scdb_err rc;

    if (!training_json || !domain || !text || !len || max_bytes == 0) return SCDB_EINVAL;
    *text = NULL;
    *len = 0;
    if ((rc = scdb_read_file(training_json, 1 << 26, &json, &jl))) return rc;
    root = cJSON_ParseWithLength(json, jl);
    free(json);
    if (!root) return SCDB_EFORMAT;
    const cJSON *doms = cJSON_GetObjectItemCaseSensitive(root, "domains");
    const cJSON *dom = doms ? cJSON_GetObjectItemCaseSensitive(doms, domain) : NULL;
    const cJSON *files = dom ? cJSON_GetObjectItemCaseSensitive(dom, "train_files") : NULL;
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) == 0) { rc = SCDB_ENOTFOUND; goto done; }
    x.training = doms;
    x.suite = load_suite(training_json);
    listed = cJSON_GetArraySize(files);
    out = malloc(max_bytes + 1);
    if (!out) { rc = SCDB_ENOMEM; goto done; }
    if (per_file == 0) per_file = max_bytes / 24 > 2048 ? max_bytes / 24 : 2048;
    /* visit the list in a fixed stride so every part of it contributes */
    const int stride = 7919;   /* prime: a permutation unless listed % 7919 == 0 */
    for (int i = 0; i < listed && got < max_bytes; i++) {
        int k = listed % stride ? (int)(((long long)i * stride) % listed) : i;
        const cJSON *it = cJSON_GetArrayItem(files, k);
        if (cJSON_IsObject(it))   /* an adapter fleet's entries: {"path": ..., "package": ...} */
            it = cJSON_GetObjectItemCaseSensitive(it, "path");
        if (!cJSON_IsString(it)) continue;
        if (excluded(&x, it->valuestring)) { skipped++; continue; }
        unsigned char *t;
        size_t tl;
        if (scdb_codec_read_text(it->valuestring, per_file, &t, &tl)) continue;
        size_t take = tl < max_bytes - got ? tl : max_bytes - got;
        memcpy(out + got, t, take);
        got += take;
        free(t);
        used++;
        if (got < max_bytes) out[got++] = '\n';
    }
    if (got == 0) { rc = SCDB_ENOTFOUND; goto done; }
    if (desc && desclen)
        snprintf(desc, desclen, "%zu bytes from %d of the %d training files of domain '%s' (%s%s)",
                 got, used, listed, domain, scdb_data_relative(training_json),
                 skipped ? "; held-out or eval files skipped" : "");
    *text = out;
    *len = got;
    out = NULL;
    rc = SCDB_OK;
done:
    free(out);
    cJSON_Delete(x.suite);
    cJSON_Delete(root);
    return rc;
}

static scdb_err train_text(const scdb_model *m, size_t max_bytes, unsigned char **text,
                           size_t *len, char *desc, size_t desclen)
{
    char fam[1200], path[1300];
    family_dir(m, fam, sizeof fam);
    snprintf(path, sizeof path, "%s/TRAINING.json", fam);
    return scdb_codec_training_text(path, scdb_codec_text_domain(m), max_bytes, 0, text, len, desc,
                                    desclen);
}

/* Append the domains of one TRAINING.json not yet in the list. */
static scdb_err add_domains(const char *path, scdb_text_domains *out)
{
    char *json;
    size_t jl;
    scdb_err rc = scdb_read_file(path, 1 << 26, &json, &jl);
    if (rc) return rc;
    cJSON *root = cJSON_ParseWithLength(json, jl);
    free(json);
    if (!root) return SCDB_EFORMAT;
    const cJSON *d;
    rc = SCDB_OK;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(root, "domains")) {
        int dup = 0;
        if (!d->string || strlen(d->string) >= sizeof out->name[0]) continue;
        for (int k = 0; k < out->n; k++) dup |= !strcmp(out->name[k], d->string);
        if (dup) continue;
        if (out->n == SCDB_TEXT_MAX_DOMAINS) { rc = SCDB_ERANGE; break; }
        snprintf(out->name[out->n], sizeof out->name[0], "%s", d->string);
        snprintf(out->json[out->n], sizeof out->json[0], "%s", path);
        out->n++;
    }
    cJSON_Delete(root);
    return rc;
}

scdb_err scdb_codec_fleet_domains(const scdb_model *m, scdb_text_domains *out)
{
    char fam[1200], path[1300];
    if (!m || !out) return SCDB_EINVAL;
    out->n = 0;
    family_dir(m, fam, sizeof fam);
    snprintf(path, sizeof path, "%s/TRAINING.json", fam);
    scdb_err rc = add_domains(path, out);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/../adapters/TRAINING.json", fam);
    rc = add_domains(path, out);
    return rc == SCDB_ENOTFOUND ? SCDB_OK : rc;   /* a family without adapters */
}

scdb_err scdb_codec_domain_text(const scdb_model *m, scdb_text_source src, size_t max_bytes,
                                unsigned char **text, size_t *len, char *desc, size_t desclen)
{
    char fam[1200], path[1400];
    if (!m || !text || !len) return SCDB_EINVAL;
    *text = NULL;
    *len = 0;
    if (src == SCDB_TEXT_AUTO || src == SCDB_TEXT_TRAIN) {
        scdb_err rc = train_text(m, max_bytes, text, len, desc, desclen);
        if (rc == SCDB_OK || src == SCDB_TEXT_TRAIN) return rc;
        src = SCDB_TEXT_HELDOUT_FIRST;
    }
    family_dir(m, fam, sizeof fam);
    {
        char data[1300];
        snprintf(data, sizeof data, "%s/..", fam);
        scdb_model_heldout_path(data, scdb_codec_text_domain(m), path, sizeof path);
    }
    char *buf;
    size_t l;
    scdb_err rc = scdb_read_file(path, (size_t)1 << 30, &buf, &l);
    if (rc) return rc;
    size_t half = l / 2, off = src == SCDB_TEXT_HELDOUT_SECOND ? half : 0;
    size_t n = src == SCDB_TEXT_HELDOUT_SECOND ? l - half : half;
    if (n > max_bytes) n = max_bytes;
    memmove(buf, buf + off, n);
    *text = (unsigned char *)buf;
    *len = n;
    if (desc && desclen)
        snprintf(desc, desclen, "%zu bytes: %s half of %s", n,
                 src == SCDB_TEXT_HELDOUT_SECOND ? "second" : "first", scdb_data_relative(path));
    return SCDB_OK;
}
