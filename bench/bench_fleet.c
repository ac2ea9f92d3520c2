/* bench_fleet.c — `scdb bench fleet`: one producer's stored prefixes served
 * to a whole fleet of consumers (full fine-tunes and LoRA adapters).
 *
 * The producer (the codebook's, data/models/<producer>) prefills each
 * held-out window's prefix once and its SCD codes (int8 by default) are what
 * is stored, once per prefix whatever the number of consumers.  Every
 * consumer -- each model in data/models and each adapter in data/adapters
 * with a pair <producer>__<consumer>.safetensors in the pairs directory --
 * then continues teacher-forced from a prefix cache built three ways, all in
 * the same run:
 *
 *   oracle   its own prefill of the prefix
 *   scd      the stored codes decoded with its pair (REUSE + its default
 *            patch layers)
 *   raw      the producer's f16 KV reused as is (what a cache that ignores
 *            the adapter serves: the cross-adapter hit bug)
 *
 * and ppl (ratio to the oracle's), KL(oracle || method) and top-1 agreement
 * over the continuation are recorded.  TTFT: building the consumer's prefix
 * cache from the codes already in memory + the forward of the first
 * continuation token, vs its own prefill of the prefix + that forward (best
 * of --reps per window, median over windows); the get from a broker is not
 * included (bench broker measures it).  The consumer's text is the SECOND
 * half of its domain's held-out text (an adapter's domain is its name:
 * data/heldout/<adapter>.txt), or --text FILE|DIR for every consumer.
 *
 * Fleet totals: bytes the producer's codes take (one copy per prefix) vs
 * what a cache keyed by adapter stores (one raw f16 KV copy per consumer
 * that uses the prefix), and the prefill tokens (and milliseconds) the
 * consumers did not spend.  Fails (exit 1) if any decode fails, a pair does
 * not match its models, or a consumer has no evaluated token. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "codec.h"
#include "model.h"

#define MAX_CONSUMERS 64
#define MAX_TEXTS 64

typedef struct fopts {
    const char *data, *codebook, *pairs, *text, *json, *png, *only;
    int prefix, cont, windows, reps, int8;
} fopts;

typedef struct facc { double nll, kl, agree; long n; } facc;

typedef struct ftext {
    char name[256];
    unsigned char *buf;
    size_t len;
    int users;          /* consumers evaluated on it */
    int windows;        /* windows cut from it (the stored prefixes) */
} ftext;

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb bench fleet [--data DIR] [--codebook FILE] [--pairs DIR] [--text FILE|DIR]\n"
"                        [--consumers a,b,...] [--prefix P] [--cont C] [--windows N]\n"
"                        [--reps R] [--f16] [--json FILE] [--png FILE]\n\n"
"One producer's stored prefixes served to every consumer of the fleet: the\n"
"models in DATA/models and the adapters in DATA/adapters that have a pair\n"
"PAIRS/<producer>__<consumer>.safetensors.  Per (consumer, text): SCD (int8\n"
"codes) and raw reuse vs the consumer's own prefill: ppl ratio, KL, top-1;\n"
"TTFT from the codes in memory vs own prefill; pair bytes; calibration\n"
"seconds (from PAIRS/<producer>__<consumer>.calibration.log when there).\n"
"Totals: bytes stored once vs one raw KV copy per consumer (per-adapter keying).\n\n"
"  --data DIR        data directory (default: scdb's, e.g. data)\n"
"  --codebook FILE   default DATA/codebooks/base.safetensors\n"
"  --pairs DIR       default DATA/pairs\n"
"  --text FILE|DIR   evaluate every consumer on FILE, or on every *.txt of DIR\n"
"                    (default: each on the second half of its own domain's\n"
"                    held-out text)\n"
"  --consumers LIST  only these consumers (names)\n"
"  --prefix P        prefix tokens (320)     --cont C   continuation (64)\n"
"  --windows N       windows per text (4)    --reps R   TTFT repetitions (3)\n"
"  --f16             f16 codes instead of int8\n"
"  --json FILE       rows as JSON            --png FILE plot (tools/plot_fleet.py)\n");
}

static int pos_int(const char *what, const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 1 << 20) {
        fprintf(stderr, "bench fleet: %s wants a positive integer, not '%s'\n", what, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static void score(const float *logits, const float *ologp, const int32_t *next, int C, int V, float *lp,
                  facc *a)
{
    for (int t = 0; t < C; t++) {
        const float *o = ologp + (size_t)t * V;
        scdb_k_log_softmax_cpu(logits + (size_t)t * V, V, lp);
        double k = 0.0;
        int ao = 0, am = 0;
        for (int v = 0; v < V; v++) {
            k += exp((double)o[v]) * ((double)o[v] - lp[v]);
            if (o[v] > o[ao]) ao = v;
            if (lp[v] > lp[am]) am = v;
        }
        a->kl += k;
        a->agree += ao == am;
        a->nll -= lp[next[t]];
        a->n++;
    }
}

/* seconds recorded in a pair's calibration log: the consumer's own line of
 * a fleet run ("  consumer NAME: S s"), else "calibrated in S s"; NAN */
static double calib_seconds(const char *pairs, const char *prod, const char *name)
{
    char path[1400], line[512], want[300];
    double s = NAN, total = NAN;
    snprintf(path, sizeof path, "%s/%s__%s.calibration.log", pairs, prod, name);
    FILE *f = fopen(path, "r");
    snprintf(want, sizeof want, "  consumer %s: %%lf s", name);
    if (!f) {   /* a fleet run's log: <producer>__fleet.calibration.log */
        snprintf(path, sizeof path, "%s/%s__fleet.calibration.log", pairs, prod);
        if (!(f = fopen(path, "r"))) return NAN;
        total = NAN;
        while (fgets(line, sizeof line, f)) {
            double x;
            if (sscanf(line, want, &x) == 1) s = x;
        }
        fclose(f);
        return s;
    }
    while (fgets(line, sizeof line, f)) {
        double x;
        if (sscanf(line, want, &x) == 1) s = x;
        else if (sscanf(line, "calibrated in %lf s", &x) == 1) total = x;
    }
    fclose(f);
    return isnan(s) ? total : s;
}

static int listed(const char *only, const char *name)
{
    if (!only) return 1;
    size_t n = strlen(name);
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !strncmp(p, name, n)) return 1;
        p += k + (e != NULL);
    }
    return 0;
}

/* consumer directories: DATA/models/<x> and DATA/adapters/<x>, sorted */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int list_dirs(const char *root, char **out, int max)
{
    DIR *d = opendir(root);
    struct dirent *e;
    int n = 0;
    if (!d) return 0;
    while ((e = readdir(d)) && n < max) {
        char p[1200];
        struct stat st;
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", root, e->d_name);
        if (stat(p, &st) || !S_ISDIR(st.st_mode)) continue;
        out[n++] = strdup(p);
    }
    closedir(d);
    qsort(out, (size_t)n, sizeof *out, cmp_str);
    return n;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static int load_text_arg(const char *arg, ftext *t, int max)
{
    struct stat st;
    int n = 0;
    if (stat(arg, &st)) { fprintf(stderr, "bench fleet: --text %s: no such file\n", arg); return -1; }
    char *files[MAX_TEXTS];
    int nf = 0;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(arg);
        struct dirent *e;
        while (d && (e = readdir(d)) && nf < MAX_TEXTS) {
            size_t l = strlen(e->d_name);
            if (l > 4 && !strcmp(e->d_name + l - 4, ".txt")) {
                char p[1200];
                snprintf(p, sizeof p, "%s/%s", arg, e->d_name);
                files[nf++] = strdup(p);
            }
        }
        if (d) closedir(d);
        qsort(files, (size_t)nf, sizeof *files, cmp_str);
    } else {
        files[nf++] = strdup(arg);
    }
    for (int i = 0; i < nf && n < max; i++) {
        if (scdb_codec_read_text(files[i], (size_t)1 << 26, &t[n].buf, &t[n].len)) {
            fprintf(stderr, "bench fleet: cannot read %s\n", files[i]);
            for (int k = i; k < nf; k++) free(files[k]);
            return -1;
        }
        snprintf(t[n].name, sizeof t[n].name, "%s", base_name(files[i]));
        n++;
        free(files[i]);
    }
    return n;
}

/* find (or add) the text for a consumer's own held-out second half */
static int own_text(const scdb_model *m, ftext *t, int *nt)
{
    char name[256];
    snprintf(name, sizeof name, "%.200s.txt (second half)", scdb_codec_text_domain(m));
    for (int i = 0; i < *nt; i++)
        if (!strcmp(t[i].name, name)) return i;
    if (*nt == MAX_TEXTS) return -1;
    ftext *x = &t[*nt];
    if (scdb_codec_domain_text(m, SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 26, &x->buf, &x->len, NULL, 0)) {
        fprintf(stderr, "bench fleet: no held-out text for '%s' (domain %s)\n", scdb_model_cfg(m)->name,
                scdb_codec_text_domain(m));
        return -1;
    }
    snprintf(x->name, sizeof x->name, "%s", name);
    return (*nt)++;
}

typedef struct frow {
    char consumer[256], text[256];
    int lora;
    facc scd, raw, orc;
    double ttft_ms, own_ms, pair_bytes, calib_s;
    int nw;             /* windows evaluated */
} frow;

/* one consumer on one text: every window through oracle, scd and raw */
static int eval_one(const fopts *o, const scdb_model *prod, scdb_codebook *cb, const scdb_model *cons,
                    const scdb_pair *pair, ftext *t, frow *r)
{
    const scdb_model_config *pc = scdb_model_cfg(prod);
    const int P = o->prefix, C = o->cont, L = pc->n_layers, d = pc->d_model, V = pc->vocab_size;
    const int kv = scdb_model_kv_dim(pc), need = P + C + 1;
    int want = o->windows, ok = 0;
    size_t cb_bytes = scdb_codec_payload_bytes(cb, P);
    int32_t *tok = malloc((size_t)need * sizeof *tok), *pos = malloc((size_t)P * sizeof *pos);
    float *ph = malloc((size_t)L * P * d * sizeof *ph), *pk = malloc((size_t)L * P * kv * sizeof *pk);
    float *ologp = malloc((size_t)C * V * sizeof *ologp), *logits = malloc((size_t)C * V * sizeof *logits);
    float *lp = malloc((size_t)V * sizeof *lp);
    void *codes = malloc(cb_bytes + 16);
    double *tt = calloc((size_t)want + 1, sizeof *tt), *ow = calloc((size_t)want + 1, sizeof *ow);
    scdb_kv_cache *pcache = NULL, *cache = NULL;
    scdb_err rc = SCDB_ENOMEM;
    int nw = 0;

    if (!tok || !pos || !ph || !pk || !ologp || !logits || !lp || !codes || !tt || !ow) goto done;
    if ((rc = scdb_model_cache_new(prod, P, &pcache)) || (rc = scdb_model_cache_new(cons, P + C, &cache)))
        goto done;
    if (t->len < (size_t)need) {
        fprintf(stderr, "bench fleet: text %s is shorter than one window (%d bytes)\n", t->name, need);
        rc = SCDB_EINVAL;
        goto done;
    }
    size_t span = t->len - (size_t)need;
    if ((size_t)want > t->len / (size_t)need) want = (int)(t->len / (size_t)need);
    for (int i = 0; i < P; i++) pos[i] = i;
    for (int w = 0; w < want; w++) {
        size_t off = want > 1 ? span * (size_t)w / (size_t)(want - 1) : 0;
        scdb_tokenize_bytes(t->buf + off, (size_t)need, tok);
        /* the producer, once per prefix: its states, its codes (stored) */
        scdb_capture cap = {.h_in = ph, .k_post = pk};
        scdb_codec_states st = {.h_in = ph, .k_post = pk};
        pcache->n = 0;
        if ((rc = scdb_model_forward(prod, tok, NULL, P, pcache, NULL, &cap)) ||
            (rc = scdb_codec_encode(cb, &st, P, codes)))
            goto done;
        /* oracle: own prefill */
        cache->n = 0;
        if ((rc = scdb_model_forward(cons, tok, NULL, P, cache, NULL, NULL)) ||
            (rc = scdb_model_forward(cons, tok + P, NULL, C, cache, logits, NULL)))
            goto done;
        for (int i = 0; i < C; i++)
            scdb_k_log_softmax_cpu(logits + (size_t)i * V, V, ologp + (size_t)i * V);
        score(logits, ologp, tok + P + 1, C, V, lp, &r->orc);
        /* scd: the stored codes through the consumer's pair */
        cache->n = 0;
        if ((rc = scdb_pair_decode(pair, cb, codes, P, pos, tok, -1, cache, 0))) {
            fprintf(stderr, "bench fleet: %s: decode failed: %s\n", r->consumer, scdb_strerror(rc));
            goto done;
        }
        cache->n = P;
        if ((rc = scdb_model_forward(cons, tok + P, NULL, C, cache, logits, NULL))) goto done;
        score(logits, ologp, tok + P + 1, C, V, lp, &r->scd);
        /* raw: the producer's KV as is */
        for (int l = 0; l < L; l++) {
            memcpy(scdb_kv_k(cache, l, 0), scdb_kv_k(pcache, l, 0), (size_t)P * kv * sizeof(float));
            memcpy(scdb_kv_v(cache, l, 0), scdb_kv_v(pcache, l, 0), (size_t)P * kv * sizeof(float));
        }
        memcpy(cache->pos, pcache->pos, (size_t)P * sizeof(int32_t));
        cache->n = P;
        if ((rc = scdb_model_forward(cons, tok + P, NULL, C, cache, logits, NULL))) goto done;
        score(logits, ologp, tok + P + 1, C, V, lp, &r->raw);
        /* TTFT: codes -> cache + first token, vs prefill + first token */
        double bs = INFINITY, bo = INFINITY;
        for (int k = 0; k < o->reps; k++) {
            double t0 = scdb_now();
            cache->n = 0;
            if ((rc = scdb_pair_decode(pair, cb, codes, P, pos, tok, -1, cache, 0))) goto done;
            cache->n = P;
            if ((rc = scdb_model_forward(cons, tok + P, NULL, 1, cache, logits, NULL))) goto done;
            double t1 = scdb_now();
            cache->n = 0;
            if ((rc = scdb_model_forward(cons, tok, NULL, P, cache, NULL, NULL)) ||
                (rc = scdb_model_forward(cons, tok + P, NULL, 1, cache, logits, NULL)))
                goto done;
            double t2 = scdb_now();
            if (t1 - t0 < bs) bs = t1 - t0;
            if (t2 - t1 < bo) bo = t2 - t1;
        }
        tt[nw] = bs * 1e3;
        ow[nw] = bo * 1e3;
        nw++;
    }
    r->ttft_ms = scdb_bench_median(tt, (size_t)nw);
    r->own_ms = scdb_bench_median(ow, (size_t)nw);
    r->nw = nw;
    if (nw > t->windows) t->windows = nw;
    ok = 1;
done:
    if (!ok && rc) fprintf(stderr, "bench fleet: %s on %s: %s\n", r->consumer, t->name, scdb_strerror(rc));
    free(tok); free(pos); free(ph); free(pk); free(ologp); free(logits); free(lp); free(codes);
    free(tt); free(ow);
    scdb_kv_cache_free(&pcache);
    scdb_kv_cache_free(&cache);
    return ok ? 0 : -1;
}

static double ppl(const facc *a) { return a->n ? exp(a->nll / (double)a->n) : NAN; }

static void jnum(cJSON *o, const char *k, double v)
{
    if (isfinite(v)) cJSON_AddNumberToObject(o, k, v);
    else cJSON_AddNullToObject(o, k);
}

int scdb_bench_fleet(int argc, char **argv)
{
    fopts o = {.prefix = 320, .cont = 64, .windows = 4, .reps = 3, .int8 = 1};
    char cbpath[1200], pairs[1200], dirs_root[1300];
    char *dirs[2 * MAX_CONSUMERS];
    int nd = 0, ret = 1, nt = 0, nrows = 0;
    ftext texts[MAX_TEXTS];
    frow *rows = NULL;
    scdb_codebook *cb = NULL;
    scdb_model *prod = NULL;
    char err[512] = "";
    scdb_err rc;

    memset(texts, 0, sizeof texts);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--data") && more) o.data = argv[++i];
        else if (!strcmp(a, "--codebook") && more) o.codebook = argv[++i];
        else if (!strcmp(a, "--pairs") && more) o.pairs = argv[++i];
        else if (!strcmp(a, "--text") && more) o.text = argv[++i];
        else if (!strcmp(a, "--consumers") && more) o.only = argv[++i];
        else if (!strcmp(a, "--json") && more) o.json = argv[++i];
        else if (!strcmp(a, "--png") && more) o.png = argv[++i];
        else if (!strcmp(a, "--f16")) o.int8 = 0;
        else if (!strcmp(a, "--prefix") && more) { if (pos_int(a, argv[++i], &o.prefix)) return 2; }
        else if (!strcmp(a, "--cont") && more) { if (pos_int(a, argv[++i], &o.cont)) return 2; }
        else if (!strcmp(a, "--windows") && more) { if (pos_int(a, argv[++i], &o.windows)) return 2; }
        else if (!strcmp(a, "--reps") && more) { if (pos_int(a, argv[++i], &o.reps)) return 2; }
        else {
            fprintf(stderr, "bench fleet: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o.data) o.data = scdb_data_dir();
    snprintf(cbpath, sizeof cbpath, "%s", o.codebook ? o.codebook : "");
    if (!o.codebook) snprintf(cbpath, sizeof cbpath, "%s/codebooks/base.safetensors", o.data);
    if (o.pairs) snprintf(pairs, sizeof pairs, "%s", o.pairs);
    else snprintf(pairs, sizeof pairs, "%s/pairs", o.data);
    if ((rc = scdb_codebook_load(cbpath, &cb, err, sizeof err))) {
        fprintf(stderr, "bench fleet: %s: %s (%s)\n", cbpath, err, scdb_strerror(rc));
        return 1;
    }
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    snprintf(dirs_root, sizeof dirs_root, "%s/models/%s", o.data, ci->producer);
    if ((rc = scdb_model_load(dirs_root, &prod, err, sizeof err)) ||
        (rc = scdb_codebook_check_producer(cb, prod, err, sizeof err))) {
        fprintf(stderr, "bench fleet: producer %s: %s (%s)\n", dirs_root, err, scdb_strerror(rc));
        goto done;
    }
    if (o.int8 && (rc = scdb_codebook_set_code_dtype(cb, SCDB_CODES_INT8))) {
        fprintf(stderr, "bench fleet: int8 codes: %s\n", scdb_strerror(rc));
        goto done;
    }
    if (o.prefix + o.cont + 1 > scdb_model_cfg(prod)->max_seq_len) {
        fprintf(stderr, "bench fleet: --prefix + --cont exceed the model's %d positions\n",
                scdb_model_cfg(prod)->max_seq_len);
        goto done;
    }
    if (o.text && (nt = load_text_arg(o.text, texts, MAX_TEXTS)) < 1) {
        if (nt == 0) fprintf(stderr, "bench fleet: --text %s: no *.txt\n", o.text);
        nt = 0;
        goto done;
    }
    snprintf(dirs_root, sizeof dirs_root, "%s/models", o.data);
    nd = list_dirs(dirs_root, dirs, MAX_CONSUMERS);
    snprintf(dirs_root, sizeof dirs_root, "%s/adapters", o.data);
    nd += list_dirs(dirs_root, dirs + nd, MAX_CONSUMERS);
    rows = calloc((size_t)nd * (size_t)(nt ? nt : 1) + 1, sizeof *rows);
    if (!rows) goto done;

    const scdb_model_config *pc = scdb_model_cfg(prod);
    const double raw_tok = (double)pc->n_layers * 2 * scdb_model_kv_dim(pc) * 2;
    const double scd_tok = (double)scdb_codec_payload_bytes(cb, o.prefix) / o.prefix;
    int ncons = 0, failed = 0;
    for (int i = 0; i < nd; i++) {
        const char *name = base_name(dirs[i]);
        char pp[1500];
        struct stat st;
        scdb_model *cons = NULL;
        scdb_pair *pair = NULL;
        snprintf(pp, sizeof pp, "%s/%s__%s.safetensors", pairs, ci->producer, name);
        if (!listed(o.only, name)) continue;
        if (stat(pp, &st)) {
            fprintf(stderr, "bench fleet: %s: no pair %s (skipped)\n", name, pp);
            continue;
        }
        if ((rc = scdb_model_load(dirs[i], &cons, err, sizeof err)) ||
            (rc = scdb_pair_load(pp, cb, &pair, err, sizeof err)) ||
            (rc = scdb_pair_check_models(pair, prod, cons, err, sizeof err))) {
            fprintf(stderr, "bench fleet: %s: %s (%s)\n", name, err, scdb_strerror(rc));
            scdb_pair_free(&pair);
            scdb_model_free(&cons);
            failed = 1;
            continue;
        }
        ncons++;
        int lora = !strcmp(scdb_model_cfg(cons)->finetune, "lora");
        int t0 = 0, t1 = nt;
        if (!o.text) {
            if ((t0 = own_text(cons, texts, &nt)) < 0) { failed = 1; goto next; }
            t1 = t0 + 1;
        }
        for (int k = t0; k < t1; k++) {
            frow *r = &rows[nrows];
            snprintf(r->consumer, sizeof r->consumer, "%s", name);
            snprintf(r->text, sizeof r->text, "%s", texts[k].name);
            r->lora = lora;
            r->pair_bytes = (double)st.st_size;
            r->calib_s = calib_seconds(pairs, ci->producer, name);
            fprintf(stderr, "bench fleet: %s (%s) on %s\n", name, lora ? "lora" : "full", texts[k].name);
            if (eval_one(&o, prod, cb, cons, pair, &texts[k], r) || r->scd.n == 0 || r->raw.n == 0) {
                fprintf(stderr, "bench fleet: %s on %s: no evaluated token\n", name, texts[k].name);
                failed = 1;
                continue;
            }
            texts[k].users++;
            nrows++;
        }
    next:
        scdb_pair_free(&pair);
        scdb_model_free(&cons);
    }
    if (ncons == 0) {
        fprintf(stderr, "bench fleet: no consumer with a pair in %s\n", pairs);
        goto done;
    }

    /* fleet totals */
    double stored = 0, keyed = 0, saved_tok = 0, all_tok = 0, own_ms = 0, ttft_ms = 0;
    int prefixes = 0;
    for (int k = 0; k < nt; k++) {
        if (texts[k].users) prefixes += texts[k].windows;
        double tokens = (double)texts[k].windows * o.prefix;
        stored += tokens * scd_tok;
        keyed += tokens * raw_tok * texts[k].users;
        all_tok += tokens * texts[k].users;
        if (texts[k].users) saved_tok += tokens * (texts[k].users - 1);   /* the producer prefilled once */
    }
    for (int i = 0; i < nrows; i++) {
        own_ms += rows[i].own_ms * rows[i].nw;
        ttft_ms += rows[i].ttft_ms * rows[i].nw;
    }

    printf("## Fleet: one producer (%s), %d consumers, %s codes (codebook %s)\n\n", ci->producer, ncons,
           o.int8 ? "int8" : "f16", ci->id_hex);
    printf("prefix %d + continuation %d tokens, %d windows per text; vs each consumer's own prefill\n\n",
           o.prefix, o.cont, o.windows);
    printf("| consumer | kind | text | SCD ppl | SCD KL | SCD top-1 | raw ppl | raw KL | raw top-1 | KL raw/SCD | "
           "TTFT ms | own prefill ms | speedup | pair KB | calib s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    cJSON *root = cJSON_CreateObject(), *jr = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < nrows; i++) {
        frow *r = &rows[i];
        double po = ppl(&r->orc), ps = ppl(&r->scd) / po, pr = ppl(&r->raw) / po;
        double kl = r->scd.kl / r->scd.n, rkl = r->raw.kl / r->raw.n;
        double t1 = r->scd.agree / r->scd.n, rt1 = r->raw.agree / r->raw.n;
        printf("| %s | %s | %s | %+.2f%% | %.4f | %.3f | %+.2f%% | %.4f | %.3f | %.1fx | %.2f | %.2f | %.2fx | %.0f | %s |\n",
               r->consumer, r->lora ? "lora" : "full", r->text, (ps - 1) * 100, kl, t1, (pr - 1) * 100, rkl,
               rt1, kl > 0 ? rkl / kl : NAN, r->ttft_ms, r->own_ms, r->own_ms / r->ttft_ms,
               r->pair_bytes / 1024, isnan(r->calib_s) ? "-" : (snprintf(err, sizeof err, "%.1f", r->calib_s), err));
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "consumer", r->consumer);
        cJSON_AddStringToObject(j, "kind", r->lora ? "lora" : "full");
        cJSON_AddStringToObject(j, "text", r->text);
        jnum(j, "bytes_per_token", scd_tok);
        jnum(j, "raw_bytes_per_token", raw_tok);
        jnum(j, "ppl_ratio", ps);
        jnum(j, "kl", kl);
        jnum(j, "top1", t1);
        jnum(j, "raw_ppl_ratio", pr);
        jnum(j, "raw_kl", rkl);
        jnum(j, "raw_top1", rt1);
        jnum(j, "ttft_ms", r->ttft_ms);
        jnum(j, "own_prefill_ms", r->own_ms);
        jnum(j, "pair_bytes", r->pair_bytes);
        jnum(j, "calib_s", r->calib_s);
        jnum(j, "tokens", (double)r->scd.n);
        cJSON_AddItemToArray(jr, j);
    }
    printf("\nstored by scdb: %.0f bytes (%d prefixes x %d tokens x %.1f B/token, once); per-adapter keying: "
           "%.0f bytes (one raw f16 KV copy, %.0f B/token, per consumer using the prefix): 1/%.1f\n",
           stored, prefixes, o.prefix, scd_tok, keyed, raw_tok, keyed / stored);
    printf("prefill tokens saved: %.0f of %.0f (%.1f%%): every consumer but the producer's one prefill "
           "per prefix; consumer-side time to first token %.1f ms via codes vs %.1f ms own prefill\n",
           saved_tok, all_tok, all_tok > 0 ? 100.0 * saved_tok / all_tok : 0.0, ttft_ms, own_ms);
    printf("(machine: shared and loaded while measured; TTFT is in-process, codes in memory)\n");
    jnum(root, "stored_bytes", stored);
    jnum(root, "stored_bytes_per_adapter_keying", keyed);
    cJSON_AddNumberToObject(root, "consumers", ncons);
    jnum(root, "prefill_tokens_saved", saved_tok);
    jnum(root, "prefill_tokens_total", all_tok);
    cJSON_AddStringToObject(root, "producer", ci->producer);
    cJSON_AddStringToObject(root, "codebook", ci->id_hex);
    cJSON_AddStringToObject(root, "codes", o.int8 ? "int8" : "f16");
    cJSON_AddNumberToObject(root, "prefix", o.prefix);
    cJSON_AddNumberToObject(root, "cont", o.cont);
    cJSON_AddNumberToObject(root, "windows", o.windows);
    cJSON_AddStringToObject(root, "ttft_includes",
                            "consumer: decode of the codes in memory (or own prefill) + first token's forward");
    int wrote = 0;
    if (o.json) {
        if (scdb_bench_write_json(o.json, root, "bench fleet")) { cJSON_Delete(root); goto done; }
        wrote = 1;
    }
    if (o.png) {
        char script[1200], jpath[1200], cmd[4000];
        snprintf(script, sizeof script, "%s/tools/plot_fleet.py", scdb_share_dir());
        snprintf(jpath, sizeof jpath, "%s", o.json ? o.json : "/tmp/scdb_bench_fleet.json");
        if (!wrote && scdb_bench_write_json(jpath, root, "bench fleet")) { cJSON_Delete(root); goto done; }
        if (access(script, R_OK) || access("/usr/bin/python3", X_OK)) {
            fprintf(stderr, "bench fleet: no PNG: %s or /usr/bin/python3 is missing\n", script);
        } else {
            snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'", script, jpath, o.png);
            if (system(cmd) != 0) fprintf(stderr, "bench fleet: no PNG: plot_fleet.py failed (matplotlib missing?)\n");
        }
    }
    cJSON_Delete(root);
    ret = failed ? 1 : 0;
    if (failed) fprintf(stderr, "bench fleet: FAILED: a consumer could not be evaluated (above)\n");
done:
    for (int i = 0; i < nd; i++) free(dirs[i]);
    for (int k = 0; k < nt; k++) free(texts[k].buf);
    free(rows);
    scdb_model_free(&prod);
    scdb_codebook_free(&cb);
    return ret;
}
