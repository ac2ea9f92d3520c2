/* suite.c — the multi-domain text suite of the eviction bench and of policy
 * training (data/evict_suite/manifest.json, written by tools/evict_suite.py;
 * rule in evict.h, "Domain suite"): load the manifest, read a portion's text
 * and check it against the manifest, and the selection rule itself (crc32
 * of the path), so a test can check that every recorded file is where the
 * rule puts it. */
#include "evict_train.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MANIFEST (64u << 20)

static const char *const PART_NAMES[SCDB_EVICT_N_PARTS] = {"train", "val", "eval"};

const char *scdb_evict_part_name(scdb_evict_part p)
{
    return (unsigned)p < SCDB_EVICT_N_PARTS ? PART_NAMES[p] : NULL;
}

uint32_t scdb_evict_crc32(const void *data, size_t n)
{
    /* IEEE 802.3 (zlib's crc32), bitwise: the suite checks a few MB once */
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

scdb_evict_part scdb_evict_suite_part_of(const char *path)
{
    uint32_t b = scdb_evict_crc32(path, strlen(path)) % 8;
    return b < 2 ? SCDB_EVICT_PART_EVAL : b == 2 ? SCDB_EVICT_PART_VAL : SCDB_EVICT_PART_TRAIN;
}

uint32_t scdb_evict_suite_order_key(const char *path)
{
    size_t n = strlen(path);
    char *s = malloc(n + 7);
    uint32_t k;
    if (!s) return 0;
    memcpy(s, "order:", 6);
    memcpy(s + 6, path, n + 1);
    k = scdb_evict_crc32(s, n + 6);
    free(s);
    return k;
}

static void free_domain(scdb_evict_suite_domain *d)
{
    free(d->name);
    free(d->what);
    for (int p = 0; p < SCDB_EVICT_N_PARTS; p++) {
        scdb_evict_suite_portion *q = &d->part[p];
        free(q->text_path);
        for (int i = 0; i < q->n_files; i++) {
            free(q->files[i].path);
            free(q->files[i].package);
            free(q->files[i].version);
        }
        free(q->files);
    }
}

void scdb_evict_suite_free(scdb_evict_suite **ps)
{
    if (!ps || !*ps) return;
    scdb_evict_suite *s = *ps;
    for (int i = 0; i < s->n_domains; i++) free_domain(&s->domains[i]);
    free(s->domains);
    free(s->dir);
    free(s);
    *ps = NULL;
}

static char *dup_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? strdup(v->valuestring) : NULL;
}

static int get_num(const cJSON *o, const char *key, double lo, double hi, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) return -1;
    *out = v->valuedouble;
    return 0;
}

static scdb_err load_portion(const char *dir, const char *dname, const cJSON *jp,
                             scdb_evict_suite_portion *q, char *errbuf, size_t errlen)
{
    char *file = dup_str(jp, "file");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(jp, "files");
    double bytes, crc, cand = 0;
    if (!file || strchr(file, '/') || get_num(jp, "bytes", 0, 1e12, &bytes) ||
        get_num(jp, "crc32", 0, 4294967295.0, &crc) || !cJSON_IsArray(files)) {
        scdb_errf(errbuf, errlen, "domain %s: a portion lacks file (a plain name), bytes, crc32 or files", dname);
        free(file);
        return SCDB_EFORMAT;
    }
    get_num(jp, "candidates", 0, 1e9, &cand);
    size_t l = strlen(dir) + strlen(file) + 2;
    q->text_path = malloc(l);
    if (!q->text_path) { free(file); return SCDB_ENOMEM; }
    snprintf(q->text_path, l, "%s/%s", dir, file);
    free(file);
    q->present = 1;
    q->bytes = (size_t)bytes;
    q->crc32 = (uint32_t)crc;
    q->candidates = (int)cand;
    int n = cJSON_GetArraySize(files);
    q->files = calloc((size_t)(n > 0 ? n : 1), sizeof *q->files);
    if (!q->files) return SCDB_ENOMEM;
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        scdb_evict_suite_file *r = &q->files[q->n_files];
        double off, b, at, c;
        r->path = dup_str(f, "path");
        r->package = dup_str(f, "package");
        r->version = dup_str(f, "version");
        q->n_files++;
        if (!r->path || !r->package || !r->version || get_num(f, "offset", 0, 1e12, &off) ||
            get_num(f, "bytes", 0, 1e12, &b) || get_num(f, "at", 0, 1e12, &at) ||
            get_num(f, "crc32", 0, 4294967295.0, &c)) {
            scdb_errf(errbuf, errlen, "domain %s: file entry %d is incomplete", dname, q->n_files - 1);
            return SCDB_EFORMAT;
        }
        r->offset = (size_t)off;
        r->bytes = (size_t)b;
        r->at = (size_t)at;
        r->crc32 = (uint32_t)c;
    }
    return SCDB_OK;
}

scdb_err scdb_evict_suite_load(const char *manifest, scdb_evict_suite **out, char *errbuf,
                               size_t errlen)
{
    char *txt = NULL;
    size_t len = 0;
    cJSON *doc = NULL;
    scdb_evict_suite *s = NULL;
    scdb_err rc;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!manifest) return SCDB_EINVAL;
    if ((rc = scdb_read_file(manifest, MAX_MANIFEST, &txt, &len))) {
        scdb_errf(errbuf, errlen, "%s: cannot read: %s", manifest, scdb_strerror(rc));
        return rc;
    }
    doc = cJSON_ParseWithLength(txt, len);
    free(txt);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "suite");
    const cJSON *doms = cJSON_GetObjectItemCaseSensitive(doc, "domains");
    if (!doc || !cJSON_IsString(kind) || strcmp(kind->valuestring, "scdb-evict-suite") ||
        !cJSON_IsArray(doms)) {
        scdb_errf(errbuf, errlen, "%s: not an scdb-evict-suite manifest", manifest);
        cJSON_Delete(doc);
        return SCDB_EFORMAT;
    }
    rc = SCDB_ENOMEM;
    if (!(s = calloc(1, sizeof *s))) goto fail;
    {
        const char *slash = strrchr(manifest, '/');
        size_t dl = slash ? (size_t)(slash - manifest) : 1;
        if (!(s->dir = malloc(dl + 1))) goto fail;
        memcpy(s->dir, slash ? manifest : ".", dl);
        s->dir[dl] = 0;
    }
    int n = cJSON_GetArraySize(doms);
    if (!(s->domains = calloc((size_t)(n > 0 ? n : 1), sizeof *s->domains))) goto fail;
    const cJSON *d;
    cJSON_ArrayForEach(d, doms) {
        scdb_evict_suite_domain *dom = &s->domains[s->n_domains++];
        const cJSON *seen = cJSON_GetObjectItemCaseSensitive(d, "seen");
        const cJSON *parts = cJSON_GetObjectItemCaseSensitive(d, "portions");
        dom->name = dup_str(d, "name");
        dom->what = dup_str(d, "what");
        if (!dom->name || !dom->name[0] || !cJSON_IsBool(seen) || !cJSON_IsObject(parts)) {
            scdb_errf(errbuf, errlen, "%s: domain %d lacks name, seen or portions", manifest, s->n_domains - 1);
            rc = SCDB_EFORMAT;
            goto fail;
        }
        dom->seen = cJSON_IsTrue(seen);
        const cJSON *jp;
        cJSON_ArrayForEach(jp, parts) {
            int p = -1;
            for (int k = 0; k < SCDB_EVICT_N_PARTS; k++)
                if (jp->string && !strcmp(jp->string, PART_NAMES[k])) p = k;
            if (p < 0 || dom->part[p].present) {
                scdb_errf(errbuf, errlen, "%s: domain %s: unknown or repeated portion '%s'", manifest, dom->name,
                     jp->string ? jp->string : "?");
                rc = SCDB_EFORMAT;
                goto fail;
            }
            if ((rc = load_portion(s->dir, dom->name, jp, &dom->part[p], errbuf, errlen)))
                goto fail;
        }
    }
    cJSON_Delete(doc);
    *out = s;
    return SCDB_OK;
fail:
    cJSON_Delete(doc);
    scdb_evict_suite_free(&s);
    return rc;
}

int scdb_evict_suite_find(const scdb_evict_suite *s, const char *name)
{
    for (int i = 0; s && name && i < s->n_domains; i++)
        if (!strcmp(s->domains[i].name, name)) return i;
    return -1;
}

scdb_err scdb_evict_suite_read(const scdb_evict_suite *s, int domain, scdb_evict_part part,
                               char **text, size_t *len, char *errbuf, size_t errlen)
{
    const scdb_evict_suite_portion *q;
    scdb_err rc;
    if (!text || !len) return SCDB_EINVAL;
    *text = NULL;
    *len = 0;
    if (!s || domain < 0 || domain >= s->n_domains || (unsigned)part >= SCDB_EVICT_N_PARTS)
        return SCDB_EINVAL;
    q = &s->domains[domain].part[part];
    if (!q->present) {
        scdb_errf(errbuf, errlen, "domain %s has no %s text", s->domains[domain].name, PART_NAMES[part]);
        return SCDB_ENOTFOUND;
    }
    if ((rc = scdb_read_file(q->text_path, q->bytes + 1, text, len))) {
        scdb_errf(errbuf, errlen, "%s: %s", q->text_path, scdb_strerror(rc));
        return rc;
    }
    if (*len != q->bytes || scdb_evict_crc32(*text, *len) != q->crc32) {
        scdb_errf(errbuf, errlen, "%s: %zu bytes, crc32 %08x; the manifest says %zu bytes, crc32 %08x", q->text_path,
             *len, scdb_evict_crc32(*text, *len), q->bytes, q->crc32);
        free(*text);
        *text = NULL;
        *len = 0;
        return SCDB_EMISMATCH;
    }
    return SCDB_OK;
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

scdb_err scdb_evict_suite_verify(const scdb_evict_suite *s, char *errbuf, size_t errlen)
{
    const char **all = NULL;
    size_t n_all = 0, cap = 0;
    scdb_err rc = SCDB_OK;

    if (!s) return SCDB_EINVAL;
    for (int i = 0; i < s->n_domains && !rc; i++) {
        const scdb_evict_suite_domain *d = &s->domains[i];
        if (scdb_evict_suite_find(s, d->name) != i) {
            scdb_errf(errbuf, errlen, "domain %s appears twice", d->name);
            rc = SCDB_EMISMATCH;
            break;
        }
        for (int p = 0; p < SCDB_EVICT_N_PARTS && !rc; p++) {
            const scdb_evict_suite_portion *q = &d->part[p];
            int want = d->seen || p == SCDB_EVICT_PART_EVAL;
            if (q->present != want) {
                scdb_errf(errbuf, errlen, "domain %s (%s) %s a %s text", d->name, d->seen ? "seen" : "unseen",
                     q->present ? "has" : "lacks", PART_NAMES[p]);
                rc = SCDB_EMISMATCH;
                break;
            }
            if (!q->present) continue;
            char *text = NULL;
            size_t len = 0;
            if ((rc = scdb_evict_suite_read(s, i, (scdb_evict_part)p, &text, &len, errbuf, errlen)))
                break;
            size_t end = 0;
            for (int f = 0; f < q->n_files && !rc; f++) {
                const scdb_evict_suite_file *r = &q->files[f];
                if (scdb_evict_suite_part_of(r->path) != (scdb_evict_part)p) {
                    scdb_errf(errbuf, errlen, "%s: %s belongs to the %s portion by the rule", q->text_path, r->path,
                         PART_NAMES[scdb_evict_suite_part_of(r->path)]);
                    rc = SCDB_EMISMATCH;
                } else if (f > 0 && (scdb_evict_suite_order_key(r->path) <
                                         scdb_evict_suite_order_key(q->files[f - 1].path) ||
                                     (scdb_evict_suite_order_key(r->path) ==
                                          scdb_evict_suite_order_key(q->files[f - 1].path) &&
                                      strcmp(r->path, q->files[f - 1].path) <= 0))) {
                    scdb_errf(errbuf, errlen, "%s: %s is out of the rule's order", q->text_path, r->path);
                    rc = SCDB_EMISMATCH;
                } else if (r->at != (f ? end + 1 : 0) || r->at + r->bytes > len ||
                           scdb_evict_crc32(text + r->at, r->bytes) != r->crc32 ||
                           (f && text[r->at - 1] != '\n')) {
                    scdb_errf(errbuf, errlen, "%s: the chunk of %s at byte %zu does not match the manifest",
                         q->text_path, r->path, r->at);
                    rc = SCDB_EMISMATCH;
                }
                end = r->at + r->bytes;
                if (n_all == cap) {
                    size_t nc = cap ? 2 * cap : 1024;
                    const char **g = realloc(all, nc * sizeof *g);
                    if (!g) { rc = SCDB_ENOMEM; break; }
                    all = g;
                    cap = nc;
                }
                all[n_all++] = r->path;
            }
            if (!rc && end != len) {
                scdb_errf(errbuf, errlen, "%s: the chunks cover %zu of %zu bytes", q->text_path, end, len);
                rc = SCDB_EMISMATCH;
            }
            free(text);
        }
    }
    if (!rc && n_all > 1) {
        qsort(all, n_all, sizeof *all, cmp_path);
        for (size_t i = 1; i < n_all; i++)
            if (!strcmp(all[i], all[i - 1])) {
                scdb_errf(errbuf, errlen, "%s is used twice (two portions or two domains)", all[i]);
                rc = SCDB_EMISMATCH;
                break;
            }
    }
    free(all);
    return rc;
}
