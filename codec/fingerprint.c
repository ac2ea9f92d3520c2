/* fingerprint.c — the weights fingerprints codebooks and pairs record
 * (schema/FORMATS.md, "Weights fingerprint"): the tensor fingerprint of
 * schema/weights_fp.h for every file written now, and the 16-digit file
 * hash of files written before it, recognised by its length; the checks of
 * a loaded model against what a file records; and re-stamping a pair's
 * 16-digit consumer fingerprint and its producer fingerprint after its
 * codebook's (codebook.c, scdb_codebook_restamp). */
#include "codec_internal.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "weights_fp.h"

#define LEGACY_HEX 16

int cx_fp_valid(const char *s)
{
    if (scdb_weights_fp_valid(s)) return 1;
    if (!s || strlen(s) != LEGACY_HEX) return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
    return 1;
}

/* XXH3-64 of DIR/model.safetensors: the fingerprint of files written before
 * the tensor definition. */
static scdb_err legacy_fp(const char *dir, char hex[LEGACY_HEX + 1], char *errbuf, size_t errlen)
{
    char path[1200], *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    scdb_err rc = scdb_read_file(path, (size_t)1 << 34, &buf, &len);
    if (rc) {
        scdb_errf(errbuf, errlen, "%s: %s (a 16-digit fingerprint is the hash of that file)", path,
                  scdb_strerror(rc));
        return rc;
    }
    snprintf(hex, LEGACY_HEX + 1, "%016llx", (unsigned long long)XXH3_64bits(buf, len));
    free(buf);
    return SCDB_OK;
}

scdb_err cx_model_fp_like(const scdb_model *m, const char *recorded, char out[SCDB_CODEC_FP_LEN],
                          char *errbuf, size_t errlen)
{
    const char *dir = scdb_model_dir(m);
    if (recorded && strlen(recorded) == LEGACY_HEX) return legacy_fp(dir, out, errbuf, errlen);
    return cx_model_fp(m, out, errbuf, errlen);
}

scdb_err cx_model_fp(const scdb_model *m, char out[SCDB_CODEC_FP_LEN], char *errbuf, size_t errlen)
{
    /* an adapter: its merged weights' over the base the load used (found by
     * lookup or given explicitly: scdb_model_load_opts.base) */
    if (scdb_model_base_dir(m))
        return scdb_weights_fp_adapter(scdb_model_base_dir(m), scdb_model_dir(m), out, errbuf, errlen);
    return scdb_weights_fp_ex(scdb_model_dir(m), scdb_model_models_dir(m), out, errbuf, errlen);
}

scdb_err scdb_pair_restamp(const char *path, const scdb_codebook *cb, const scdb_model *consumer,
                           const char *out, char *errbuf, size_t errlen)
{
    scdb_pair *p = NULL;
    char fp[SCDB_CODEC_FP_LEN];
    scdb_err rc;
    if (!path || !cb || !consumer || !out) return SCDB_EINVAL;
    if ((rc = scdb_pair_load(path, cb, &p, errbuf, errlen))) return rc;
    scdb_pair_info *in = &p->info;
    if (strcmp(in->consumer, scdb_model_cfg(consumer)->name)) {
        scdb_errf(errbuf, errlen, "%s: pair for consumer '%s', not '%s'", path, in->consumer,
                  scdb_model_cfg(consumer)->name);
        rc = SCDB_EMISMATCH;
        goto done;
    }
    /* the producer's: the codebook's, once that was re-stamped */
    int stale_producer = strcmp(in->producer_fp, cb->info.producer_fp) != 0;
    if (strlen(in->consumer_fp) != LEGACY_HEX && !stale_producer) {
        scdb_errf(errbuf, errlen, "%s: consumer_fp %s is a tensor fingerprint already, and producer_fp is "
                  "its codebook's", path, in->consumer_fp);
        rc = SCDB_EINVAL;
        goto done;
    }
    /* the weights must be those the pair was fitted on */
    if ((rc = scdb_pair_check_models(p, NULL, consumer, errbuf, errlen))) goto done;
    if (strlen(in->consumer_fp) == LEGACY_HEX) {
        if ((rc = cx_model_fp(consumer, fp, errbuf, errlen))) goto done;
        memcpy(in->consumer_fp, fp, sizeof fp);
    }
    if (stale_producer) memcpy(in->producer_fp, cb->info.producer_fp, sizeof in->producer_fp);
    rc = scdb_pair_save(p, out);
    if (rc) scdb_errf(errbuf, errlen, "%s: %s", out, scdb_strerror(rc));
done:
    scdb_pair_free(&p);
    return rc;
}
