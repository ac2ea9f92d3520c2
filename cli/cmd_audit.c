/* cmd_audit.c — checking a pair against the weights a consumer runs, and a
 * codebook against the weights its producer runs:
 *   scdb fingerprint DIR...   the weights fingerprint of model directories
 *                             (schema/FORMATS.md, "Weights fingerprint")
 *   scdb audit                measured quality of what a running broker
 *                             decodes for a consumer, against the
 *                             consumer's own prefill (below)
 *
 * Where audit's prompts come from.  The store keeps blocks under chained
 * hashes of their tokens and keeps no tokens, so neither the broker nor
 * this command can list what is stored: the operator names the prompts
 * (--text / --tokens FILE, one prompt per file, its stored prefix starting
 * at its first token), and audit measures those whose prefix is stored,
 * reporting the others as not stored.  Without files it takes windows of
 * the consumer's own held-out text (the family layout's
 * heldout/<domain>.txt, second half), which a broker holds only if someone
 * stored them: --store puts what is missing as the codebook's producer
 * (--producer DIR), making the audit self-contained.  With --producer DIR
 * the producer registers with DIR's weights fingerprint first, so a
 * codebook fitted for other producer weights is reported (and nothing is
 * stored: those codes would decode as another model's).
 *
 * Per prompt: the longest stored prefix (whole blocks, at most
 * --prefix-tokens) is decoded by the broker into an arena (scdb_get, the
 * path a serving consumer takes), the consumer continues from it
 * teacher-forced over the next --cont tokens of the prompt, and so it does
 * from its own prefill of the same prefix: KL(own || decoded) and top-1
 * agreement of the next-token distributions, and the perplexity of both.
 * When the registration carries a fidelity default (issue 40: the config's
 * `fidelity` for the pair, else the pair's calibrated `recompute`), each
 * prompt is measured again restored with it (the reference engine's
 * recompute, engine/engine.h), and the summary says whether that default
 * still meets the fidelity target (top-1 >= 0.95, ppl <= +1%) on these
 * prompts.
 *
 * Exit codes: 0 ok, 1 refused / nothing measured / a file could not be
 * used, 2 usage error, 3 no broker answered. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "engine.h"
#include "kernels.h"
#include "model.h"
#include "scdb.h"
#include "scdb_cli.h"
#include "wire.h"
#include "weights_fp.h"

int cli_cmd_fingerprint(int argc, char **argv)
{
    int ret = 0, n = 0;
    const char *models_dir = NULL, *base = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: scdb fingerprint [--models-dir DIR] DIR [DIR...]\n"
                   "       scdb fingerprint --base BASE ADAPTER\n\n"
                   "Print the weights fingerprint of each model directory (scdb's own layout or a\n"
                   "Hugging Face checkpoint, one file or sharded), llama GGUF model file, or LoRA\n"
                   "adapter (a PEFT directory with adapter_config.json, or a GGUF adapter file:\n"
                   "the fingerprint of its merged weights over its base; --base names the base\n"
                   "instead of the adapter's own lookup).  A GGUF export of a model in f32 has\n"
                   "the model's fingerprint (scdb export-gguf).  The fingerprint is\n"
                   "32 hex digits over the tensors the model computes with (schema/FORMATS.md,\n"
                   "\"Weights fingerprint\"), the value a pair records as consumer_fp and a\n"
                   "consumer sends when it registers.  An adapter's base (PEFT's\n"
                   "base_model_name_or_path; a GGUF adapter's general.base_model.0.name, as\n"
                   "NAME.gguf) is looked up in --models-dir, else beside the adapter.  One line per\n"
                   "directory: FINGERPRINT  DIR.  Exit 1 if a directory could not be\n"
                   "fingerprinted (the reason on stderr).\n");
            return 0;
        }
        if (!strcmp(argv[i], "--models-dir") || !strcmp(argv[i], "--base")) {
            if (i + 1 == argc) {
                fprintf(stderr, "scdb fingerprint: %s needs a path\n", argv[i]);
                return SCDB_CLI_USAGE;
            }
            if (!strcmp(argv[i], "--base")) base = argv[++i];
            else models_dir = argv[++i];
            continue;
        }
        if (argv[i][0] == '-') {
            fprintf(stderr, "scdb fingerprint: unknown option '%s' (try scdb fingerprint --help)\n", argv[i]);
            return SCDB_CLI_USAGE;
        }
    }
    for (int i = 1; i < argc; i++) {
        char fp[SCDB_WEIGHTS_FP_HEX + 1], err[512] = "";
        if (!strcmp(argv[i], "--models-dir") || !strcmp(argv[i], "--base")) { i++; continue; }
        scdb_err e = base ? scdb_weights_fp_adapter(base, argv[i], fp, err, sizeof err)
                          : scdb_weights_fp_ex(argv[i], models_dir, fp, err, sizeof err);
        n++;
        if (e) {
            fprintf(stderr, "scdb fingerprint: %s (%s)\n", err[0] ? err : argv[i], scdb_strerror(e));
            ret = SCDB_CLI_REFUSED;
            continue;
        }
        printf("%s  %s\n", fp, argv[i]);
    }
    if (!n) {
        fprintf(stderr, "scdb fingerprint: give one or more model directories (try scdb fingerprint --help)\n");
        return SCDB_CLI_USAGE;
    }
    return ret;
}

/* ------------------------------------------------------------ audit */

#define MAX_PROMPTS 256

typedef struct audit_opts {
    const char *consumer_dir, *producer_dir, *model, *producer_model, *codebook, *endpoint;
    const char *files[MAX_PROMPTS];
    int file_is_text[MAX_PROMPTS];
    int n_files, prefixes, prefix_tokens, cont, timeout_ms, json, store;
} audit_opts;

typedef struct prompt {
    char source[600];
    int32_t *tok;
    size_t n;
    /* results */
    int stored, measured, predictions;
    uint32_t put_blocks;
    double kl, agree, nll_own, nll_dec, get_ms, own_ms;
    /* at the registration's fidelity default (issue 40), when it has one */
    int measured_def;
    double kl_def, agree_def, nll_def, rec_def, ttft_def_ms;
    char why[160];
} prompt;

static void audit_usage(FILE *f)
{
    fprintf(f,
"usage: scdb audit --consumer DIR --codebook NAME [--model NAME]\n"
"                  [--text FILE | --tokens FILE]... [--prefixes N]\n"
"                  [--prefix-tokens T] [--cont C] [--producer DIR\n"
"                  [--producer-model NAME] [--store]] [--endpoint URL] [--timeout-ms N]\n"
"                  [--json]\n\n"
"Measure what a running broker decodes for a consumer against the consumer's\n"
"own prefill: for each prompt whose prefix is stored, the broker decodes the\n"
"stored prefix into an arena (as for a serving consumer), the model in DIR\n"
"continues it teacher-forced over the next C tokens, and so it does from its\n"
"own prefill; the table gives KL(own || decoded), top-1 agreement and both\n"
"perplexities per prompt and over all.  Run it after any model change: it\n"
"first registers with DIR's weights fingerprint, and when the broker refuses\n"
"the pair as stale (calibrated for other weights) it says so, then measures\n"
"anyway (registered unchecked) to show what the stale pair costs.  With\n"
"--producer DIR it checks the producer side too: a producer registers with\n"
"DIR's weights fingerprint, and a codebook fitted for other producer weights\n"
"is reported as refused (exit 1; with --store nothing is stored).\n\n"
"Which prompts: the store keeps blocks under hashes of their tokens, not the\n"
"tokens, so the broker cannot list what it holds.  Give the prompts your\n"
"producers store: each --text FILE (bytes as byte tokens) or --tokens FILE\n"
"(token ids) is one prompt whose stored prefix starts at its first token.\n"
"Without files: N windows of T + C + 1 tokens spread over the second half of\n"
"the consumer's held-out text (DIR/../../heldout/<domain>.txt, the family\n"
"layout), stored only if someone stored them: --store puts the missing ones\n"
"first, as producer of the codebook with the model in --producer DIR.\n\n"
"  --consumer DIR      the consumer: a model directory (either layout), a GGUF\n"
"                      model or a LoRA adapter (required)\n"
"  --codebook NAME     the broker's codebook (namespace) to audit, e.g. base-scd\n"
"                      (required)\n"
"  --model NAME        the consumer's model name at the broker (default: its\n"
"                      config's name)\n"
"  --prefixes N        prompts to measure, at most (default 8; 1..%d)\n"
"  --prefix-tokens T   longest prefix looked up per prompt (default 384)\n"
"  --cont C            continuation tokens measured after it (default 64)\n"
"  --store             put the prompts' prefixes that are not stored\n"
"  --producer DIR      the codebook's producer model: its weights are checked\n"
"                      against the codebook's (required with --store)\n"
"  --producer-model N  its name at the broker (default: its config's name)\n"
"  --json              print the results as JSON instead of a table\n",
            MAX_PROMPTS);
    cli_endpoint_help(f);
    fprintf(f,
"  --timeout-ms N      per-request timeout (default 30000)\n\n"
"exit codes: 0 measured, 1 nothing measured (none stored, refused, a file\n"
"could not be used) or the producer's weights refused, 2 usage error, 3 no\n"
"broker answered.\n");
}

static int audit_usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "scdb audit: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (try scdb audit --help)\n");
    return SCDB_CLI_USAGE;
}

static int parse_count(const char *opt, const char *arg, int lo, int hi, int *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(arg, &end, 10);
    if (!*arg || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "scdb audit: %s %s: want a whole number in [%d, %d] (try scdb audit --help)\n",
                opt, arg, lo, hi);
        return SCDB_CLI_USAGE;
    }
    *out = (int)v;
    return -1;
}

static int audit_parse(audit_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->prefixes = 8;
    o->prefix_tokens = 384;
    o->cont = 64;
    o->timeout_ms = 30000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = -1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { audit_usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--store")) { o->store = 1; continue; }
        if (i + 1 >= argc) {
            if (!strncmp(a, "--", 2)) return audit_usage_error("option %s needs a value", a);
            return audit_usage_error("unexpected argument '%s'", a);
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--consumer")) o->consumer_dir = v;
        else if (!strcmp(a, "--producer")) o->producer_dir = v;
        else if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--producer-model")) o->producer_model = v;
        else if (!strcmp(a, "--codebook")) o->codebook = v;
        else if (!strcmp(a, "--endpoint")) o->endpoint = v;
        else if (!strcmp(a, "--text") || !strcmp(a, "--tokens")) {
            if (o->n_files == MAX_PROMPTS) return audit_usage_error("at most %s prompt files", "256");
            o->file_is_text[o->n_files] = !strcmp(a, "--text");
            o->files[o->n_files++] = v;
        } else if (!strcmp(a, "--prefixes")) rc = parse_count(a, v, 1, MAX_PROMPTS, &o->prefixes);
        else if (!strcmp(a, "--prefix-tokens")) rc = parse_count(a, v, 1, 1 << 20, &o->prefix_tokens);
        else if (!strcmp(a, "--cont")) rc = parse_count(a, v, 1, 1 << 20, &o->cont);
        else if (!strcmp(a, "--timeout-ms")) rc = parse_count(a, v, 1, 1 << 30, &o->timeout_ms);
        else return audit_usage_error("unknown option %s", a);
        if (rc >= 0) return rc;
    }
    if (!o->consumer_dir) return audit_usage_error("%s", "--consumer DIR is required");
    if (!o->codebook) return audit_usage_error("%s", "--codebook NAME is required (the namespace to audit)");
    if (o->store && !o->producer_dir) return audit_usage_error("%s", "--store needs --producer DIR");
    if (o->producer_model && !o->producer_dir)
        return audit_usage_error("%s", "--producer-model needs --producer DIR");
    return -1;
}

/* The prompts: one per file, or windows of the held-out text. */
static int load_prompts(const audit_opts *o, const scdb_model *cons, prompt *p, int *np)
{
    int n = 0;
    if (o->n_files) {
        for (int i = 0; i < o->n_files && n < o->prefixes; i++, n++) {
            int rc = cli_read_tokens("audit", o->files[i], o->file_is_text[i], &p[n].tok, &p[n].n);
            if (rc >= 0) { *np = n; return rc; }
            snprintf(p[n].source, sizeof p[n].source, "%s", o->files[i]);
        }
        *np = n;
        return -1;
    }
    unsigned char *text = NULL;
    size_t len = 0, need = (size_t)o->prefix_tokens + (size_t)o->cont + 1;
    char desc[512] = "";
    scdb_err e = scdb_codec_domain_text(cons, SCDB_TEXT_HELDOUT_SECOND, (size_t)1 << 30, &text, &len, desc,
                                        sizeof desc);
    if (e) {
        fprintf(stderr, "scdb audit: no prompt files and no held-out text for domain '%s' beside %s (%s): "
                "give --text FILE\n", scdb_model_cfg(cons)->domain, o->consumer_dir, scdb_strerror(e));
        *np = 0;
        return SCDB_CLI_REFUSED;
    }
    if (len < need) {
        fprintf(stderr, "scdb audit: %s is shorter than one prompt (%zu tokens)\n", desc, need);
        free(text);
        *np = 0;
        return SCDB_CLI_REFUSED;
    }
    int want = o->prefixes, maxw = (int)(len / need);
    if (want > maxw) want = maxw;
    for (; n < want; n++) {
        size_t off = want > 1 ? (len - need) * (size_t)n / (size_t)(want - 1) : 0;
        p[n].tok = malloc(need * sizeof *p[n].tok);
        if (!p[n].tok) { free(text); *np = n; fprintf(stderr, "scdb audit: out of memory\n"); return 1; }
        scdb_tokenize_bytes(text + off, need, p[n].tok);
        p[n].n = need;
        snprintf(p[n].source, sizeof p[n].source, "held-out +%zu", off);
    }
    free(text);
    *np = n;
    return -1;
}

/* log-probabilities of logits [c][V] into lp, in place */
static void log_softmax_rows(float *x, int c, int V)
{
    for (int t = 0; t < c; t++) scdb_k_log_softmax_cpu(x + (size_t)t * V, V, x + (size_t)t * V);
}

/* Put the prefix of p (its whole blocks up to T tokens) as the producer. */
static scdb_err store_prompt(scdb *ph, const scdb_model *prod, const prompt *p, int T, uint32_t *blocks)
{
    const scdb_info *in = scdb_get_info(ph);
    int bt = (int)in->block_tokens;
    int n = (int)((p->n > (size_t)T ? (size_t)T : p->n) / (size_t)bt) * bt;
    scdb_kv_cache *c = NULL;
    scdb_arena *a = NULL;
    scdb_put_result r = {0};
    scdb_err e;
    *blocks = 0;
    if (n == 0) return SCDB_OK;
    if ((e = scdb_model_cache_new(prod, n, &c))) return e;
    if (in->states_dim > 0) {                   /* the broker encodes (scd) */
        int L, D, cap;
        float *st;
        if ((e = scdb_states_arena_new(ph, n, &a))) goto done;
        st = scdb_arena_states(a, &L, &D, &cap);
        scdb_capture cap_ = {.h_in = st};
        if ((e = scdb_model_forward(prod, p->tok, NULL, n, c, NULL, &cap_))) goto done;
        e = scdb_put_states(ph, p->tok, (size_t)n, 0, a, &r);
    } else {                                    /* raw KV */
        if ((e = scdb_model_forward(prod, p->tok, NULL, n, c, NULL, NULL))) goto done;
        e = scdb_put_cache(ph, p->tok, (size_t)n, c, &r);
    }
    *blocks = r.n_new;
done:
    scdb_arena_free(&a);
    scdb_kv_cache_free(&c);
    return e;
}

/* Decoded vs own prefill for one prompt. */
static scdb_err measure(scdb *h, const scdb_model *m, const audit_opts *o, prompt *p)
{
    const int V = scdb_model_cfg(m)->vocab_size;
    scdb_lookup_result lr;
    scdb_get_result gr;
    scdb_arena *a = NULL;
    scdb_kv_cache *own = NULL;
    float *ld = NULL, *lo = NULL;
    size_t look = p->n > (size_t)o->prefix_tokens ? (size_t)o->prefix_tokens : p->n;
    scdb_err e;

    if ((e = scdb_lookup(h, p->tok, look, &lr))) return e;
    p->stored = (int)lr.matched_tokens;
    if (!p->stored) { snprintf(p->why, sizeof p->why, "not stored"); return SCDB_OK; }
    int m0 = p->stored, c = o->cont;
    if ((size_t)m0 + 1 >= p->n) { snprintf(p->why, sizeof p->why, "no continuation after the prefix"); return SCDB_OK; }
    if ((size_t)(m0 + c + 1) > p->n) c = (int)(p->n - (size_t)m0 - 1);
    if (m0 + c > scdb_model_cfg(m)->max_seq_len) c = scdb_model_cfg(m)->max_seq_len - m0;
    if (c < 1) { snprintf(p->why, sizeof p->why, "prefix fills the context"); return SCDB_OK; }
    ld = malloc((size_t)c * V * sizeof *ld);
    lo = malloc((size_t)c * V * sizeof *lo);
    if (!ld || !lo) { e = SCDB_ENOMEM; goto done; }
    /* decoded: the broker's get into an arena, continued in place */
    if ((e = scdb_arena_new(h, m0 + c, &a))) goto done;
    if ((e = scdb_get(h, p->tok, (size_t)m0, a, 0, 0, &gr))) goto done;
    if ((int)gr.tokens_written != m0) {
        snprintf(p->why, sizeof p->why, "get wrote %u of %d tokens", gr.tokens_written, m0);
        goto done;
    }
    p->get_ms = (double)gr.decode_ns / 1e6;
    if ((e = scdb_model_forward(m, p->tok + m0, NULL, c, scdb_arena_cache(a), ld, NULL))) goto done;
    /* own prefill of the same prefix */
    if ((e = scdb_model_cache_new(m, m0 + c, &own))) goto done;
    double t0 = scdb_now();
    if ((e = scdb_model_forward(m, p->tok, NULL, m0, own, NULL, NULL))) goto done;
    p->own_ms = (scdb_now() - t0) * 1e3;
    if ((e = scdb_model_forward(m, p->tok + m0, NULL, c, own, lo, NULL))) goto done;
    log_softmax_rows(ld, c, V);
    log_softmax_rows(lo, c, V);
    for (int t = 0; t < c; t++) {
        const float *x = lo + (size_t)t * V, *y = ld + (size_t)t * V;
        int ao = 0, ad = 0, target = p->tok[m0 + 1 + t];
        double kl = 0;
        for (int v = 0; v < V; v++) {
            kl += exp((double)x[v]) * ((double)x[v] - (double)y[v]);
            if (x[v] > x[ao]) ao = v;
            if (y[v] > y[ad]) ad = v;
        }
        p->kl += kl;
        p->agree += ao == ad;
        if (target >= 0 && target < V) {
            p->nll_own -= x[target];
            p->nll_dec -= y[target];
        }
    }
    p->predictions = c;
    p->measured = 1;
    {   /* the same at the registration's fidelity default */
        scdb_recompute d;
        if (!scdb_recompute_default(h, &d, NULL) && d.policy != SCDB_RECOMPUTE_NONE) {
            scdb_engine_restore_opts ro;
            scdb_engine_restore_result rr;
            scdb_engine_restore_init(&ro);
            scdb_arena_cache(a)->n = 0;
            double t1 = scdb_now();
            if ((e = scdb_engine_restore(h, m, p->tok, m0, a, 0, &ro, &rr)) ||
                (e = scdb_model_forward(m, p->tok + m0, NULL, c, scdb_arena_cache(a), ld, NULL)))
                goto done;
            p->ttft_def_ms = (scdb_now() - t1) * 1e3;
            p->rec_def = rr.recomputed;
            log_softmax_rows(ld, c, V);
            for (int t = 0; t < c; t++) {
                const float *x = lo + (size_t)t * V, *y = ld + (size_t)t * V;
                int ao = 0, ad = 0, target = p->tok[m0 + 1 + t];
                double kl = 0;
                for (int v = 0; v < V; v++) {
                    kl += exp((double)x[v]) * ((double)x[v] - (double)y[v]);
                    if (x[v] > x[ao]) ao = v;
                    if (y[v] > y[ad]) ad = v;
                }
                p->kl_def += kl;
                p->agree_def += ao == ad;
                if (target >= 0 && target < V) p->nll_def -= y[target];
            }
            p->measured_def = 1;
        }
    }
done:
    scdb_kv_cache_free(&own);
    scdb_arena_free(&a);
    free(ld);
    free(lo);
    return e;
}

/* The producer side (--producer DIR): its weights against the codebook's. */
typedef struct producer_check {
    char fp[SCDB_WEIGHTS_FP_HEX + 1];
    const char *check;          /* NULL: not checked; "accepted", "refused" */
    char refusal[600];
} producer_check;

static void print_results(const audit_opts *o, const char *name, const char *fp, const char *check,
                          const char *refusal, const producer_check *pc, const scdb_info *info,
                          const prompt *p, int np, const scdb *h)
{
    double kl = 0, agree = 0, no = 0, nd = 0, kld = 0, agd = 0, nlld = 0, nod = 0, recd = 0;
    long pred = 0, predd = 0;
    int measured = 0;
    scdb_recompute dflt = {SCDB_RECOMPUTE_NONE, 0, 0};
    char dsrc[16] = "", dname[48];
    if (h) scdb_recompute_default(h, &dflt, dsrc);
    scdb_recompute_format(&dflt, dname, sizeof dname);
    for (int i = 0; i < np; i++) {
        if (p[i].measured_def) {
            predd += p[i].predictions;
            kld += p[i].kl_def;
            agd += p[i].agree_def;
            nlld += p[i].nll_def;
            nod += p[i].nll_own;
            recd += p[i].rec_def;
        }
        if (!p[i].measured) continue;
        measured++;
        pred += p[i].predictions;
        kl += p[i].kl;
        agree += p[i].agree;
        no += p[i].nll_own;
        nd += p[i].nll_dec;
    }
    if (o->json) {
        cJSON *r = cJSON_CreateObject(), *arr;
        cJSON_AddStringToObject(r, "consumer_dir", o->consumer_dir);
        cJSON_AddStringToObject(r, "model", name);
        cJSON_AddStringToObject(r, "codebook", o->codebook);
        cJSON_AddStringToObject(r, "decoder", info->decoder);
        cJSON_AddStringToObject(r, "weights_fp", fp);
        cJSON_AddStringToObject(r, "weights_check", check);
        cJSON_AddStringToObject(r, "broker_message", refusal);
        if (pc->check) {
            cJSON_AddStringToObject(r, "producer_dir", o->producer_dir);
            cJSON_AddStringToObject(r, "producer_weights_fp", pc->fp);
            cJSON_AddStringToObject(r, "producer_weights_check", pc->check);
            cJSON_AddStringToObject(r, "producer_broker_message", pc->refusal);
        }
        arr = cJSON_AddArrayToObject(r, "prompts");
        for (int i = 0; i < np; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "source", p[i].source);
            cJSON_AddNumberToObject(e, "tokens", (double)p[i].n);
            cJSON_AddNumberToObject(e, "stored_tokens", p[i].stored);
            if (o->store) cJSON_AddNumberToObject(e, "blocks_put", p[i].put_blocks);
            cJSON_AddBoolToObject(e, "measured", p[i].measured);
            if (p[i].measured) {
                cJSON_AddNumberToObject(e, "predictions", p[i].predictions);
                cJSON_AddNumberToObject(e, "kl", p[i].kl / p[i].predictions);
                cJSON_AddNumberToObject(e, "top1", p[i].agree / p[i].predictions);
                cJSON_AddNumberToObject(e, "ppl_own", exp(p[i].nll_own / p[i].predictions));
                cJSON_AddNumberToObject(e, "ppl_decoded", exp(p[i].nll_dec / p[i].predictions));
                cJSON_AddNumberToObject(e, "broker_decode_ms", p[i].get_ms);
                cJSON_AddNumberToObject(e, "own_prefill_ms", p[i].own_ms);
            } else {
                cJSON_AddStringToObject(e, "why", p[i].why);
            }
            cJSON_AddItemToArray(arr, e);
        }
        cJSON *s = cJSON_AddObjectToObject(r, "summary");
        cJSON_AddNumberToObject(s, "prompts", np);
        cJSON_AddNumberToObject(s, "measured", measured);
        cJSON_AddNumberToObject(s, "predictions", (double)pred);
        if (pred) {
            cJSON_AddNumberToObject(s, "kl", kl / (double)pred);
            cJSON_AddNumberToObject(s, "top1", agree / (double)pred);
            cJSON_AddNumberToObject(s, "ppl_own", exp(no / (double)pred));
            cJSON_AddNumberToObject(s, "ppl_decoded", exp(nd / (double)pred));
            cJSON_AddNumberToObject(s, "ppl_vs_own", exp((nd - no) / (double)pred) - 1.0);
        }
        if (predd) {   /* at the fidelity default (issue 40) */
            cJSON *f = cJSON_AddObjectToObject(s, "fidelity_default");
            double t1 = agd / (double)predd, pr = exp((nlld - nod) / (double)predd);
            cJSON_AddStringToObject(f, "setting", dname);
            cJSON_AddStringToObject(f, "source", dsrc);
            cJSON_AddNumberToObject(f, "kl", kld / (double)predd);
            cJSON_AddNumberToObject(f, "top1", t1);
            cJSON_AddNumberToObject(f, "ppl_vs_own", pr - 1.0);
            cJSON_AddNumberToObject(f, "recomputed_tokens_per_prompt", recd / measured);
            cJSON_AddBoolToObject(f, "target_met", t1 >= 0.95 && pr <= 1.01);
        }
        char *txt = cJSON_Print(r);
        if (txt) puts(txt);
        free(txt);
        cJSON_Delete(r);
        return;
    }
    printf("# scdb audit: consumer %s (%s), codebook %s, decoder %s\n\n", name, o->consumer_dir, o->codebook,
           info->decoder);
    printf("weights %s: %s%s%s\n", fp, check, refusal[0] ? " -- " : "", refusal);
    if (pc->check)
        printf("producer %s weights %s: %s%s%s\n", o->producer_dir, pc->fp, pc->check,
               pc->refusal[0] ? " -- " : "", pc->refusal);
    printf("\n");
    printf("| prompt | stored tokens | continuation | KL(own||decoded) | top-1 | ppl own | ppl decoded | "
           "broker decode ms | own prefill ms |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < np; i++) {
        if (!p[i].measured) {
            printf("| %s | %d | %s | | | | | | |\n", p[i].source, p[i].stored, p[i].why);
            continue;
        }
        int c = p[i].predictions;
        printf("| %s | %d | %d | %.4f | %.3f | %.3f | %.3f | %.2f | %.2f |\n", p[i].source, p[i].stored, c,
               p[i].kl / c, p[i].agree / c, exp(p[i].nll_own / c), exp(p[i].nll_dec / c), p[i].get_ms,
               p[i].own_ms);
    }
    if (pred)
        printf("\n%d of %d prompts measured, %ld predictions: KL %.4f, top-1 %.3f, perplexity %.3f decoded vs "
               "%.3f own (%+.1f%%)\n", measured, np, pred, kl / (double)pred, agree / (double)pred,
               exp(nd / (double)pred), exp(no / (double)pred), 100.0 * (exp((nd - no) / (double)pred) - 1.0));
    else
        printf("\nnone of the %d prompts has a stored prefix to measure\n", np);
    if (predd) {
        double t1 = agd / (double)predd, pr = exp((nlld - nod) / (double)predd);
        printf("at the fidelity default %s (%s; %.0f tokens recomputed per prompt): KL %.4f, top-1 %.3f, "
               "perplexity %+.1f%% vs own: the target (top-1 >= 0.95, ppl <= +1%%) is %s\n", dname, dsrc,
               recd / measured, kld / (double)predd, t1, 100.0 * (pr - 1.0),
               t1 >= 0.95 && pr <= 1.01 ? "met" : "NOT met");
    }
}

int cli_cmd_audit(int argc, char **argv)
{
    audit_opts o;
    prompt *p = NULL;
    int np = 0, ret = SCDB_CLI_REFUSED, rc;
    scdb_model *cons = NULL, *prod = NULL;
    scdb *h = NULL, *ph = NULL;
    char fp[SCDB_WEIGHTS_FP_HEX + 1] = "", err[512] = "", refusal[600] = "", name[SCDB_MODEL_NAME_MAX];
    const char *check = "accepted";
    producer_check pc = {.check = NULL};
    scdb_err e;

    if ((rc = audit_parse(&o, argc, argv)) >= 0) return rc;
    if ((e = scdb_model_load(o.consumer_dir, &cons, err, sizeof err))) {
        fprintf(stderr, "scdb audit: --consumer %s: %s\n", o.consumer_dir, err[0] ? err : scdb_strerror(e));
        return SCDB_CLI_REFUSED;
    }
    snprintf(name, sizeof name, "%s", o.model ? o.model : scdb_model_cfg(cons)->name);
    if ((e = scdb_weights_fingerprint(o.consumer_dir, fp, err, sizeof err))) {
        fprintf(stderr, "scdb audit: --consumer %s: no weights fingerprint: %s (%s)\n", o.consumer_dir, err,
                scdb_strerror(e));
        goto done;
    }
    p = calloc(MAX_PROMPTS, sizeof *p);
    if (!p) goto done;
    if ((rc = load_prompts(&o, cons, p, &np)) >= 0) { ret = rc; goto done; }
    scdb_opts so = {.endpoint = o.endpoint, .timeout_ms = o.timeout_ms, .name = "scdb audit"};
    if ((rc = cli_connect("audit", &so, &h)) >= 0) { ret = rc; goto done; }
    /* checked first; a stale pair is reported, then measured unchecked */
    if (scdb_set_weights_fp(h, fp)) goto done;
    e = scdb_register(h, SCDB_CONSUMER, name, o.codebook, NULL);
    if (e == SCDB_EMISMATCH) {
        check = "refused";
        snprintf(refusal, sizeof refusal, "%s", scdb_last_error(h));
        fprintf(stderr, "scdb audit: the broker refuses these weights: %s\n"
                "scdb audit: measuring anyway, registered without the fingerprint\n", refusal);
        scdb_set_weights_fp(h, NULL);
        e = scdb_register(h, SCDB_CONSUMER, name, o.codebook, NULL);
    }
    if (e) {
        fprintf(stderr, "scdb audit: register %s under %s: %s: %s\n", name, o.codebook, scdb_strerror(e),
                scdb_last_error(h));
        ret = e == SCDB_ETIMEDOUT ? SCDB_CLI_UNREACHABLE : SCDB_CLI_REFUSED;
        goto done;
    }
    const scdb_info *info = scdb_get_info(h);
    if (info->n_layers != scdb_model_cfg(cons)->n_layers ||
        info->n_kv_heads != scdb_model_cfg(cons)->n_kv_heads || info->head_dim != scdb_model_cfg(cons)->head_dim) {
        fprintf(stderr, "scdb audit: the broker's %s has KV %d/%d/%d, %s has %d/%d/%d\n", name, info->n_layers,
                info->n_kv_heads, info->head_dim, o.consumer_dir, scdb_model_cfg(cons)->n_layers,
                scdb_model_cfg(cons)->n_kv_heads, scdb_model_cfg(cons)->head_dim);
        goto done;
    }
    if (o.producer_dir) {       /* the producer's weights, checked as the consumer's */
        if ((e = scdb_model_load(o.producer_dir, &prod, err, sizeof err))) {
            fprintf(stderr, "scdb audit: --producer %s: %s\n", o.producer_dir, err[0] ? err : scdb_strerror(e));
            goto done;
        }
        if ((e = scdb_weights_fingerprint(o.producer_dir, pc.fp, err, sizeof err))) {
            fprintf(stderr, "scdb audit: --producer %s: no weights fingerprint: %s (%s)\n", o.producer_dir,
                    err, scdb_strerror(e));
            goto done;
        }
        if ((rc = cli_connect("audit", &so, &ph)) >= 0) { ret = rc; goto done; }
        const char *pname = o.producer_model ? o.producer_model : scdb_model_cfg(prod)->name;
        if (scdb_set_weights_fp(ph, pc.fp)) goto done;
        e = scdb_register(ph, SCDB_PRODUCER, pname, o.codebook, NULL);
        pc.check = "accepted";
        if (e == SCDB_EMISMATCH) {
            pc.check = "refused";
            snprintf(pc.refusal, sizeof pc.refusal, "%s", scdb_last_error(ph));
            fprintf(stderr, "scdb audit: the broker refuses the producer's weights: %s\n", pc.refusal);
            if (o.store) {
                fprintf(stderr, "scdb audit: nothing stored (codes of these weights would decode as the "
                        "codebook producer's)\n");
                goto done;
            }
        } else if (e) {
            fprintf(stderr, "scdb audit: register producer %s under %s: %s: %s\n", pname, o.codebook,
                    scdb_strerror(e), scdb_last_error(ph));
            goto done;
        }
    }
    if (o.store) {
        for (int i = 0; i < np; i++)
            if ((e = store_prompt(ph, prod, &p[i], o.prefix_tokens, &p[i].put_blocks))) {
                fprintf(stderr, "scdb audit: put %s: %s: %s\n", p[i].source, scdb_strerror(e), scdb_last_error(ph));
                goto done;
            }
    }
    int measured = 0;
    for (int i = 0; i < np; i++) {
        if ((e = measure(h, cons, &o, &p[i]))) {
            fprintf(stderr, "scdb audit: %s: %s: %s\n", p[i].source, scdb_strerror(e), scdb_last_error(h));
            ret = e == SCDB_ETIMEDOUT ? SCDB_CLI_UNREACHABLE : SCDB_CLI_REFUSED;
            goto done;
        }
        measured += p[i].measured;
    }
    print_results(&o, name, fp, check, refusal, &pc, info, p, np, h);
    if (!measured)
        fprintf(stderr, "scdb audit: nothing measured: none of the %d prompts has a stored prefix under %s "
                "(give the prompts your producers store with --text, or --store --producer DIR)\n", np,
                o.codebook);
    ret = measured && !(pc.check && !strcmp(pc.check, "refused")) ? 0 : SCDB_CLI_REFUSED;
done:
    if (p) for (int i = 0; i < MAX_PROMPTS; i++) free(p[i].tok);
    free(p);
    scdb_close(&ph);
    scdb_close(&h);
    scdb_model_free(&prod);
    scdb_model_free(&cons);
    return ret;
}
