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

static scdb_err train_text(const scdb_model *m, size_t max_bytes, unsigned char **text,
                           size_t *len, char *desc, size_t desclen)
{
    char fam[1200], path[1300];
    char *json = NULL;
    size_t jl;
    cJSON *root = NULL;
    unsigned char *out = NULL;
    size_t got = 0;
    int used = 0, listed = 0;
    scdb_err rc;

    family_dir(m, fam, sizeof fam);
    snprintf(path, sizeof path, "%s/TRAINING.json", fam);
    if ((rc = scdb_read_file(path, 1 << 26, &json, &jl))) return rc;
    root = cJSON_ParseWithLength(json, jl);
    free(json);
    if (!root) return SCDB_EFORMAT;
    const cJSON *doms = cJSON_GetObjectItemCaseSensitive(root, "domains");
    const cJSON *dom = doms ? cJSON_GetObjectItemCaseSensitive(doms, scdb_codec_text_domain(m)) : NULL;
    const cJSON *files = dom ? cJSON_GetObjectItemCaseSensitive(dom, "train_files") : NULL;
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) == 0) { rc = SCDB_ENOTFOUND; goto done; }
    listed = cJSON_GetArraySize(files);
    out = malloc(max_bytes + 1);
    if (!out) { rc = SCDB_ENOMEM; goto done; }
    size_t per_file = max_bytes / 24 > 2048 ? max_bytes / 24 : 2048;
    /* visit the list in a fixed stride so every part of it contributes */
    const int stride = 7919;   /* prime: a permutation unless listed % 7919 == 0 */
    for (int i = 0; i < listed && got < max_bytes; i++) {
        int k = listed % stride ? (int)(((long long)i * stride) % listed) : i;
        const cJSON *it = cJSON_GetArrayItem(files, k);
        if (cJSON_IsObject(it))   /* an adapter fleet's entries: {"path": ..., "package": ...} */
            it = cJSON_GetObjectItemCaseSensitive(it, "path");
        if (!cJSON_IsString(it)) continue;
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
        snprintf(desc, desclen, "%zu bytes from %d of the %d training files of domain '%s' (%s)",
                 got, used, listed, scdb_codec_text_domain(m), scdb_data_relative(path));
    *text = out;
    *len = got;
    out = NULL;
    rc = SCDB_OK;
done:
    free(out);
    cJSON_Delete(root);
    return rc;
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
