/* cmd_calibrate.c — `scdb calibrate`: fit a producer codebook and one pair
 * per consumer (codec.h, "calibration") and write them under OUTDIR:
 *     OUTDIR/codebooks/<producer>.safetensors
 *     OUTDIR/pairs/<producer>__<consumer>.safetensors   (+ the identity pair)
 * or, with --codebook FILE, only pairs for consumers added later, against
 * that frozen codebook (its id, hence every stored block, stays valid); or,
 * with --restamp, rewrite an old pair's file-hash consumer fingerprint.
 * Per-layer figures and progress go to stderr, a summary to stdout. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codec.h"
#include "gguf.h"
#include "gguf_llama.h"
#include "model.h"
#include "scdb_cli.h"
#ifdef SCDB_HAVE_LLAMA
#include "scdb_llama_calib.h"
#endif

int cli_cmd_calibrate(int argc, char **argv);

#define MAX_CONS 64     /* --codebook: consumers one at a time in one session */
#define MAX_JOINT 8     /* a codebook fit holds every consumer's statistics */
#define MAX_TEXTS 64

/* "bytes", or "tokens" when the models' vocabulary is not bytes (--engine
 * llama.cpp): what a span of held-back text is counted in, for messages */
static const char *span_unit = "bytes";
static int refuse_non_byte_vocab(const scdb_model *m, const char *role);   /* "which engine" */
static int llama_threads = 2;   /* --threads: llama.cpp's, for the states */

static void usage(FILE *f)
{
    fprintf(f,
"usage: scdb calibrate --producer DIR --consumer DIR [--consumer DIR ...]\n"
"                      --ranks rK,rV,rH --patch-layers K [--candidates N] -o OUTDIR\n"
"                      [--texts FILE... | --domains fleet|D1,D2,...] [--heldback-text FILE]\n"
"                      [--pca] [--post-rope]\n"
"                      [--no-token-layer0]\n"
"                      [--candidate-kv] [--candidate-layers l1,l2,...] [--windows N]\n"
"                      [--window T] [--eval-windows N] [--hidden H] [--steps S]\n"
"                      [--budget B] [--own-layer] [--no-identity] [--device D]\n"
"                      [--engine auto|llama.cpp|reference] [--threads T]\n"
"       scdb calibrate --codebook FILE --consumer DIR [--consumer DIR ...] -o OUTDIR\n"
"                      [--producer DIR] [--patch-layers K] [--texts FILE... | --domains ...]\n"
"                      [--heldback-text FILE]\n"
"                      [--windows N] [--window T] [--eval-windows N] [--hidden H]\n"
"                      [--steps S] [--own-layer] [--device D] [--engine E] [--threads T]\n"
"       scdb calibrate --codebook FILE --lora-pairs --consumer ADAPTER [...] -o OUTDIR\n"
"                      [--shared FILE [--own-windows N] [--fleet-windows N]]\n"
"                      [--dec-rank R] [--align-rank R] [--no-token-corr] [--producer DIR]\n"
"                      [--sample-stride K] [--texts FILE... | --domains ...] [--heldback-text FILE]\n"
"                      [--patch-layers K] [--windows N] [--eval-windows N] [--steps S]\n"
"       scdb calibrate --restamp PAIR --codebook FILE --consumer DIR -o OUTDIR\n"
"       scdb calibrate --fidelity --codebook FILE --consumer DIR [...] -o OUTDIR\n"
"                      [--pairs DIR] [--producer DIR] [--target-top1 X] [--target-ppl R]\n"
"                      [--fidelity-windows N] [--fidelity-prefix P] [--fidelity-fractions LIST]\n"
"                      [--fidelity-max-cost F] [--texts FILE...] [--engine E] [--threads T]\n"
"                      [--f16] [--verbose]\n"
"       scdb calibrate --restamp-codebook FILE --producer DIR -o OUTDIR\n\n"
"Fits the producer's SCD codebook jointly for all consumers (ridge reduced-rank\n"
"regression; --pca: plain PCA of the producer's states, the ablation) and one\n"
"pair per consumer (least-squares REUSE decoders, Adam-trained patch aligners,\n"
"patch order greedy by measured next-token KL).\n\n"
"With --codebook FILE, consumers added later: only their pairs are fitted, against\n"
"that frozen codebook (decoders from its codes, aligners on its patch candidates,\n"
"patch order greedy among them); the codebook file, its id and so every stored\n"
"block stay as they are.  The pair records late_added = 1.  The producer is\n"
"--producer DIR, else the codebook's producer beside the first consumer\n"
"(DIR/../<producer>, or DIR/../../models/<producer> for an adapter in\n"
"data/adapters, else <producer>.gguf beside a GGUF consumer); it must be the\n"
"weights the codebook was fitted for.\n"
"--patch-layers defaults to all the codebook's candidates; the codebook's\n"
"options (--ranks, --candidates, --pca, ...) are refused.  Any number of\n"
"consumers (up to 64) go in one run: the producer's states over the statistics\n"
"text are computed once, then each consumer in turn runs over the same windows\n"
"(its samples only) and gets its pair; a pair equals the one a run with that\n"
"consumer alone fits on the same text (--texts: the default text is split over\n"
"the domains of the producer and of every consumer given).  Progress and the\n"
"seconds of each consumer are printed.\n\n"
"With --lora-pairs (and --codebook), the consumers are LoRA adapters of the\n"
"codebook's producer and get adapter pairs (schema/FORMATS.md, \"Pair\", kind\n"
"lora): a shared part OUTDIR/pairs/<producer>__fleet.safetensors is fitted once\n"
"on the mean of all the adapters' states (decoders, aligners; the base's Wk/Wv\n"
"and token layer), then each adapter's pair holds only its own parts: low-rank\n"
"corrections of the shared decoders (--dec-rank, default 16) and aligners\n"
"(--align-rank, default 32), its means and its Wk/Wv deltas, and refers to the\n"
"shared part by checksum and to the base by fingerprint.  --shared FILE uses a\n"
"shared part fitted before (adapters added to the fleet: their states, their own\n"
"parts only); its statistics windows are then --own-windows (24) of each added\n"
"adapter's own domain and --fleet-windows (4) of every other domain of the fleet\n"
"(<family>/TRAINING.json and ../adapters/TRAINING.json), sampled every 4th token\n"
"(unless --texts, --domains or --windows choose them as for a fleet), and the\n"
"run prints the seconds (wall and cpu) per added adapter, all included.  The\n"
"held-back KL windows (patch order) come from the end of each adapter's\n"
"training text, not from its held-out text.\n\n"
"GGUF models (llama.cpp's files; scdb export-gguf writes them): with --engine\n"
"llama.cpp (the default for GGUF files in a build with llama.cpp) every model's\n"
"states come from llama.cpp -- the producer and each consumer (a GGUF model, or a\n"
"GGUF LoRA adapter over its GGUF base) loaded there, each layer's normalised\n"
"attention input read from its graph (attn_norm-N), K after RoPE from its cache --\n"
"and the text is tokenized once per file with the models' own vocabulary\n"
"(llama_tokenize, no BOS), windows being --window tokens of it; so any\n"
"llama-architecture GGUF model can be calibrated.  Every consumer must have the\n"
"producer's vocabulary, token for token.  The held-back KL windows (--eval-windows\n"
"of 385 tokens, the last tokens of their text) are scored in scdb's reference\n"
"engine on the same GGUF weights.  With a vocabulary of its own (not bytes) pass\n"
"--heldback-text FILE apart from --texts, whose files are then read whole.\n"
"--engine reference runs scdb's own engine, whose windows are bytes: a GGUF\n"
"model with another vocabulary is refused there.\n\n"
"Your own adapters and models: a consumer the project did not train has no text\n"
"of its own here (its domain is not in <family>/TRAINING.json, there is no\n"
"<family>/../heldout/<domain>.txt).  Pass its training text with --texts FILE:\n"
"the statistics windows come from the start of each file and such a consumer's\n"
"held-back KL windows from the last file right after them, never overlapping;\n"
"or --heldback-text FILE for the held-back windows alone.  Every consumer's text\n"
"is checked before any work starts, and a missing one is named with what to\n"
"pass.\n\n"
"With --restamp PAIR, a pair written before weights fingerprints were defined\n"
"over tensors (its consumer_fp is 16 hex digits, a hash of model.safetensors)\n"
"is checked against --consumer DIR and written to OUTDIR/pairs/ with the tensor\n"
"fingerprint (schema/FORMATS.md, \"Weights fingerprint\"); nothing else changes.\n"
"A pair that predates its codebook's re-stamp gets the codebook's producer_fp.\n\n"
"With --fidelity (issue 40), each consumer's existing pair (--pairs DIR, default\n"
"DATA/pairs: <producer>__<name>.safetensors) gets its fidelity default, written\n"
"to OUTDIR/<same name> (OUTDIR may be the pairs folder): on --fidelity-windows (8)\n"
"held-back windows of --fidelity-prefix (448) + 64 tokens from the end of the\n"
"consumer's TRAINING text (never its held-out text), the pair's decode (int8\n"
"codes unless --f16) is repaired by each recompute setting -- none; tail,\n"
"initial and selective at each --fidelity-fractions (0.02,...,0.5) -- and\n"
"scored against the consumer's own prefill; of the settings costing at most\n"
"--fidelity-max-cost (0.15) of the prefix, the cheapest that meets --target-top1\n"
"(0.95) and --target-ppl (1.01) is stored with its figures (pair metadata\n"
"recompute, recompute_figures); none meeting it: the most faithful of them,\n"
"marked \"target not met\", the figures naming a costlier setting that met it.\n"
"The broker hands it to the pair's consumers at registration; scdb audit\n"
"re-measures it.  --texts FILE... replaces the consumers' training text (read\n"
"whole, joined; a model the project did not train has none: without --texts its\n"
"pair is skipped, said so, exit 1).  GGUF models (--engine auto or llama.cpp)\n"
"have the windows tokenized by llama.cpp with their own vocabulary, so a BPE\n"
"model's pair gets a default too; the scoring stays in scdb's reference engine\n"
"on the same weights.\n\n"
"With --restamp-codebook FILE, a codebook whose producer_fp is such a 16-digit\n"
"hash is checked against --producer DIR and written to OUTDIR/codebooks/ with\n"
"the tensor fingerprint, keeping its id (so its namespace and every stored\n"
"block) and its codes; then --restamp its pairs against the new file.\n\n"
"  --ranks rK,rV,rH     code widths of K, V (every coded layer) and H_in (candidates)\n"
"  --patch-layers K     default patch budget of each pair (<= candidates)\n"
"  --candidates N       patch candidates, chosen by measured REUSE criticality\n"
"                       (default: K); candidates carry an H_in code instead of K/V\n"
"                       codes unless --candidate-kv\n"
"  --candidate-layers L fix the candidates instead of measuring them\n"
"  --budget B           code values per token in all: the K/V ranks of the\n"
"                       non-candidate layers are then allocated per layer by\n"
"                       measured KL (rK, rV of --ranks only seed the candidate\n"
"                       choice); default: uniform rK, rV\n"
"  --own-layer          each layer's decoders and aligner read only that layer's\n"
"                       code (the paper's layer-local decoders); default\n"
"                       (--all-layers): they read the token's whole code row\n"
"                       (every layer's code), fitted on samples\n"
"  --texts FILE...      calibration text (plain or .gz); default: each model's\n"
"                       domain training files listed in <family>/TRAINING.json,\n"
"                       else the FIRST half of <family>/../heldout/<domain>.txt\n"
"                       (the quality bench evaluates on the SECOND half).  A\n"
"                       consumer with no text of its own takes its held-back KL\n"
"                       windows from the last FILE right after the statistics'\n"
"                       share (or its last bytes, the statistics stopping short)\n"
"  --heldback-text FILE every consumer's held-back KL windows from the last bytes\n"
"                       of FILE (plain or .gz); if FILE is also a --texts file,\n"
"                       its statistics stop before them\n"
"  --domains fleet|D1,D2,...  broad calibration text: the statistics windows are\n"
"                       split evenly over these training domains, 'fleet' = every\n"
"                       domain of <family>/TRAINING.json and of\n"
"                       <family>/../adapters/TRAINING.json (the family's and its\n"
"                       adapters'); 1024 bytes of each file in turn; files listed\n"
"                       as held-out or as eviction-suite eval are never read.\n"
"                       The held-back KL windows then come from each consumer's\n"
"                       domain's training text right after the statistics' share,\n"
"                       so no held-out text is read at all\n"
"  --windows N          statistics windows in all (default 256), split evenly\n"
"                       over the producer's and consumers' domains\n"
"  --window T           tokens per window (default 384)\n"
"  --sample-stride K    keep every K-th token of a window as a sample for the\n"
"                       pairs' fits (default 8; 4 with --shared)\n"
"  --own-windows N, --fleet-windows N  with --shared: statistics windows of each\n"
"                       added adapter's domain (24) and of every other fleet\n"
"                       domain (4)\n"
"  --eval-windows N     held-back KL windows per consumer (default 6, 385 bytes\n"
"                       each; from the end of the first half of its held-out\n"
"                       text, or see --domains, --lora-pairs, --texts)\n"
"  --no-token-input     decoders read the codes only (default with --all-layers and\n"
"                       a token layer 0, pre-RoPE K: each REUSE layer's decoders\n"
"                       also read h0, the consumer's layer-0 H_in of the token,\n"
"                       RMSNorm(E[tok]) * attn_norm, which decode computes from the\n"
"                       token ids as the token layer does; fitted jointly with the\n"
"                       codes' decoders; the codes and the codebook are unchanged)\n"
"  --no-token-corr      --lora-pairs with token input: an adapter's decoder\n"
"                       corrections read the codes only, h0's decoders are the\n"
"                       shared part's (default: the corrections read [z | h0])\n"
"  --no-token-layer0    code layer 0 too (default: layer 0 is regenerated by the\n"
"                       consumer from token ids, zero payload, exact)\n"
"  --post-rope          code K after RoPE (ablation)\n"
"  --hidden H, --steps S  aligner width (128) and Adam steps (1500)\n"
"  --no-identity        do not write the producer -> producer pair\n"
"  --device D           auto | cpu | cuda (default auto: CUDA when a device\n"
"                       answers).  On cuda the statistics windows' forwards and\n"
"                       moments, the measured-KL decodes and forwards and the\n"
"                       aligners' Adam loops run on the GPU (codec.h:\n"
"                       scdb_calib_set_device); the fits stay on the CPU\n"
"  --engine E           auto | llama.cpp | reference (default auto: llama.cpp when\n"
"                       the producer and every consumer are GGUF files and the\n"
"                       build has llama.cpp, else the reference engine)\n"
"  --threads T          llama.cpp's threads for the states (default 2).  On a\n"
"                       small model or a busy machine use 1: ggml's threads meet\n"
"                       at a spinning barrier after every operation\n"
"  -o OUTDIR            output root (e.g. data)\n");
}

static int parse_ints(const char *s, int *v, int max)
{
    int n = 0;
    char *end;
    while (*s && n < max) {
        errno = 0;
        long x = strtol(s, &end, 10);
        if (errno || end == s || x < 0 || x > 1 << 20) return -1;
        v[n++] = (int)x;
        if (*end == ',') s = end + 1;
        else if (*end == '\0') s = end;
        else return -1;
    }
    return *s ? -1 : n;
}

static int mkdirs(const char *root, const char *sub, char *out, size_t cap)
{
    mkdir(root, 0755);
    snprintf(out, cap, "%s/%s", root, sub);
    if (mkdir(out, 0755) && errno != EEXIST) return -1;
    return 0;
}

/* --domains: the statistics' domains and each one's share of bytes */
typedef struct cal_domains {
    scdb_text_domains td;
    size_t share;
} cal_domains;

#define DOMAIN_PER_FILE 1024

/* With --domains (dd): the windows come from the consumer's domain's
 * training text after the statistics' share (same per-file cap, so the same
 * start: disjoint from what the statistics read). */
static scdb_err eval_text(const scdb_model *m, const cal_domains *dd, size_t span, size_t need,
                          unsigned char **t, size_t *len, char *desc, size_t desclen)
{
    if (!dd) return scdb_codec_domain_text(m, SCDB_TEXT_HELDOUT_FIRST, (size_t)1 << 30, t, len, desc, desclen);
    const char *dom = scdb_codec_text_domain(m);
    for (int k = 0; k < dd->td.n; k++) {
        if (strcmp(dd->td.name[k], dom)) continue;
        char what[400];
        scdb_err rc = scdb_codec_training_text(dd->td.json[k], dom, dd->share + span, DOMAIN_PER_FILE,
                                               t, len, what, sizeof what);
        if (rc) return rc;
        if (*len < dd->share + span) {   /* too short: the windows would overlap the statistics */
            free(*t);
            *t = NULL;
            return SCDB_ERANGE;
        }
        snprintf(desc, desclen, "training text after the statistics' %zu: %s", dd->share, what);
        return SCDB_OK;
    }
    /* a consumer whose domain has no readable training text here: each window
     * from another of the statistics' domains (spread over the list), after
     * its share */
    size_t per = need, got = 0, nwin = span / need;
    unsigned char *out = malloc(span);
    if (!out) return SCDB_ENOMEM;
    for (size_t w = 0; w < nwin; w++) {
        int k = (int)(w * (size_t)dd->td.n / nwin);
        unsigned char *x;
        size_t xl;
        size_t chunk = per;
        scdb_err rc = scdb_codec_training_text(dd->td.json[k], dd->td.name[k], dd->share + span,
                                               DOMAIN_PER_FILE, &x, &xl, NULL, 0);
        if (rc == SCDB_OK && xl < dd->share + chunk) rc = SCDB_ERANGE;
        if (rc) { free(out); return rc; }
        memcpy(out + got, x + dd->share, chunk);
        got += chunk;
        free(x);
    }
    *t = out;
    *len = got;
    snprintf(desc, desclen, "%zu of the %d statistics domains' training text after their shares, a "
             "window each (domain '%s' has no readable training text)", nwin, dd->td.n, dom);
    return SCDB_OK;
}

/* n_eval held-back KL windows for slot ci from the end of text (tokenized
 * once: the session's engine, else bytes, where they are its last
 * n_eval * need bytes).  0 or 1 (said why: what, the text, for the message). */
static int add_heldback(scdb_calib *cal, int ci, const scdb_model *m, const unsigned char *t, size_t len,
                        int n_eval, int need, const char *what)
{
    size_t ntok = 0;
    scdb_err rc = scdb_calib_add_eval_text(cal, ci, t, len, n_eval, &ntok);
    if (rc == SCDB_ERANGE) {
        fprintf(stderr, "calibrate: the held-back text of '%s' (%s) is too short: %zu tokens, %d held-back "
                "windows of %d tokens need %zu\n", scdb_model_cfg(m)->name, what, ntok, n_eval, need,
                (size_t)n_eval * (size_t)need);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "calibrate: eval window: %s\n", scdb_strerror(rc));
        return 1;
    }
    return 0;
}

/* Held-back KL windows of consumer m: the end of its held-out text's first
 * half (with --domains: see eval_text); added to session slot ci when cal,
 * else only their span measured (*span, what the statistics text must leave
 * out).  0 or 1 (said why). */
static int eval_windows(scdb_calib *cal, int ci, const scdb_model *m, int n_eval, int need,
                        const cal_domains *dd, size_t *span_out)
{
    unsigned char *t;
    size_t len;
    char desc[512];
    scdb_err rc = eval_text(m, dd, (size_t)n_eval * (size_t)need, (size_t)need, &t, &len, desc, sizeof desc);
    if (rc && dd) {
        fprintf(stderr, "calibrate: no training text for the held-back windows of '%s' in domain '%s' "
                "(%s; --domains must include it, with at least %zu bytes)\n", scdb_model_cfg(m)->name,
                scdb_codec_text_domain(m), scdb_strerror(rc), dd->share + (size_t)n_eval * (size_t)need);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "calibrate: no held-out text for '%s' (%s)\n", scdb_model_cfg(m)->name,
                scdb_strerror(rc));
        return 1;
    }
    size_t span = (size_t)n_eval * (size_t)need;
    if (len < (dd ? span : 2 * span)) {
        fprintf(stderr, "calibrate: held-out text of '%s' too short\n", scdb_model_cfg(m)->name);
        free(t);
        return 1;
    }
    if (cal && add_heldback(cal, ci, m, t, len, n_eval, need, desc)) {
        free(t);
        return 1;
    }
    if (cal)
        fprintf(stderr, "calibrate: %d held-back KL windows for '%s' from the last %zu %s of %s\n",
                n_eval, scdb_model_cfg(m)->name, span, span_unit, desc);
    *span_out = span;
    free(t);
    return 0;
}

/* Load the frozen codebook of a late add (or a restamp) and the producer it
 * was fitted for: --producer DIR, else DIR/../<producer> of the first
 * consumer.  0 or the exit code (a message said why). */
static int load_frozen(const char *cb_path, const char *producer_dir, const char *first_consumer,
                       scdb_codebook **cb, scdb_model **prod)
{
    char err[512] = "", dir[1200];
    scdb_err rc = scdb_codebook_load(cb_path, cb, err, sizeof err);
    if (rc) {
        fprintf(stderr, "calibrate: --codebook %s: %s (%s)\n", cb_path, err, scdb_strerror(rc));
        return 1;
    }
    const scdb_codebook_info *ci = scdb_codebook_get_info(*cb);
    if (!producer_dir) {
        char tmp[1024];
        const char *slash;
        snprintf(tmp, sizeof tmp, "%s", first_consumer);
        while (strlen(tmp) > 1 && tmp[strlen(tmp) - 1] == '/') tmp[strlen(tmp) - 1] = '\0';
        slash = strrchr(tmp, '/');
        if (slash) snprintf(dir, sizeof dir, "%.*s/%s", (int)(slash - tmp), tmp, ci->producer);
        else snprintf(dir, sizeof dir, "../%s", ci->producer);
        producer_dir = dir;
        /* an adapter fleet (data/adapters/<a>) beside the models (data/models/<producer>) */
        char cfg[1300];
        struct stat st;
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        if (stat(cfg, &st)) {
            if (slash) snprintf(dir, sizeof dir, "%.*s/../models/%s", (int)(slash - tmp), tmp, ci->producer);
            else snprintf(dir, sizeof dir, "../../models/%s", ci->producer);
            snprintf(cfg, sizeof cfg, "%s/config.json", dir);
            if (stat(cfg, &st)) {   /* a GGUF beside it, else name the first place in the error */
                if (slash) snprintf(dir, sizeof dir, "%.*s/%s", (int)(slash - tmp), tmp, ci->producer);
                else snprintf(dir, sizeof dir, "../%s", ci->producer);
                snprintf(cfg, sizeof cfg, "%s.gguf", dir);
                if (scdb_gguf_is_file(cfg)) scdb_str_cut(dir, sizeof dir, cfg);
            }
        }
    }
    if ((rc = scdb_model_load(producer_dir, prod, err, sizeof err))) {
        fprintf(stderr, "calibrate: producer %s of codebook %s: %s (%s)%s\n", producer_dir, ci->id_hex, err,
                scdb_strerror(rc), dir[0] && producer_dir == dir ? "; give --producer DIR" : "");
        return 1;
    }
    if ((rc = scdb_codebook_check_producer(*cb, *prod, err, sizeof err))) {
        fprintf(stderr, "calibrate: %s: %s (%s)\n", producer_dir, err, scdb_strerror(rc));
        return 1;
    }
    return 0;
}

/* --fidelity: each consumer's pair (PAIRS/<producer>__<name>.safetensors)
 * gets the cheapest recompute setting that meets the target on held-back
 * windows of its training text (cli/fidelity.c), written to OUTDIR with the
 * figures measured (pair metadata recompute, recompute_figures). */
static int pick_engine(int eng, const scdb_model *prod, scdb_model *const *cons, int n_cons, int *llama);
static int gguf_files(const scdb_model *m, const char **model, const char **adapter);

static int fidelity_mode(const char *cb_path, const char *producer_dir, const char *const *cons_dir,
                         int n_cons, const char *pairs_dir, const char *outdir, int f16, int engine,
                         const cli_fidelity_opts *fo_in)
{
    scdb_codebook *cb = NULL;
    scdb_model *prod = NULL;
    char err[768] = "", pdir[1200];
    int ret = 1, skipped = 0, use_llama = 0;
    scdb_err rc;
    cli_fidelity_opts fo_v = *fo_in, *fo = &fo_v;
#ifdef SCDB_HAVE_LLAMA
    scdb_llama_states *lls = NULL;
    scdb_calib_engine eng;
#endif

    if (load_frozen(cb_path, producer_dir, cons_dir[0], &cb, &prod)) goto done;
    /* the windows' tokens: llama.cpp's tokenizer for GGUF models (the only
     * one a vocabulary that is not bytes has); the measuring stays in the
     * reference engine on the same weights */
    if (pick_engine(engine, prod, NULL, 0, &use_llama)) goto done;
#ifdef SCDB_HAVE_LLAMA
    if (use_llama) {
        const char *model, *adapter;
        gguf_files(prod, &model, &adapter);
        if ((rc = scdb_llama_states_new(64, llama_threads, &lls, err, sizeof err)) ||
            (rc = scdb_llama_states_add(lls, prod, model, adapter, err, sizeof err))) {
            fprintf(stderr, "calibrate --fidelity: llama.cpp: producer %s (%s)\n", err, scdb_strerror(rc));
            goto done;
        }
        scdb_llama_states_engine(lls, &eng);
        fo->eng = &eng;
        fprintf(stderr, "calibrate --fidelity: windows tokenized by llama.cpp %s (%s); measured in scdb's "
                "reference engine on the same weights\n", SCDB_LLAMA_RELEASE, scdb_llama_states_vocab_desc(lls));
    }
#endif
    if (!f16 && (rc = scdb_codebook_set_code_dtype(cb, SCDB_CODES_INT8))) {
        fprintf(stderr, "calibrate --fidelity: int8 codes: %s\n", scdb_strerror(rc));
        goto done;
    }
    if (pairs_dir) snprintf(pdir, sizeof pdir, "%s", pairs_dir);
    else snprintf(pdir, sizeof pdir, "%s/pairs", cli_data_dir());
    if (mkdir(outdir, 0755) && errno != EEXIST) {
        fprintf(stderr, "calibrate --fidelity: cannot create %s\n", outdir);
        goto done;
    }
    const char *producer = scdb_codebook_get_info(cb)->producer;
    for (int i = 0; i < n_cons; i++) {
        scdb_model *cons = NULL;
        scdb_pair *pair = NULL;
        scdb_recompute r;
        char in[1500], out[1500], fig[256];
        const char *name;
        double t0 = scdb_now();
        if ((rc = scdb_model_load(cons_dir[i], &cons, err, sizeof err))) {
            fprintf(stderr, "calibrate --fidelity: %s: %s (%s)\n", cons_dir[i], err, scdb_strerror(rc));
            goto done;
        }
        name = scdb_model_cfg(cons)->name;
        int cons_llama = 0;
        if (pick_engine(engine, prod, &cons, 1, &cons_llama) || cons_llama != use_llama) {
            if (cons_llama != use_llama)
                fprintf(stderr, "calibrate --fidelity: %s: the producer and this consumer need different "
                        "engines (GGUF files both, or neither)\n", cons_dir[i]);
            scdb_model_free(&cons);
            goto done;
        }
#ifdef SCDB_HAVE_LLAMA
        if (use_llama) {   /* its vocabulary must be the producer's, token for token */
            const char *model, *adapter, *pm, *pa;
            scdb_llama_states *chk = NULL;   /* borrows cons: freed before it */
            gguf_files(cons, &model, &adapter);
            gguf_files(prod, &pm, &pa);
            if ((rc = scdb_llama_states_new(64, llama_threads, &chk, err, sizeof err)) ||
                (rc = scdb_llama_states_add(chk, prod, pm, pa, err, sizeof err)) ||
                (rc = scdb_llama_states_add(chk, cons, model, adapter, err, sizeof err))) {
                fprintf(stderr, "calibrate --fidelity: llama.cpp: consumer %s (%s)\n", err, scdb_strerror(rc));
                scdb_llama_states_free(&chk);
                scdb_model_free(&cons);
                goto done;
            }
            scdb_llama_states_free(&chk);
        }
#endif
        snprintf(in, sizeof in, "%s/%s__%s.safetensors", pdir, producer, name);
        snprintf(out, sizeof out, "%s/%s__%s.safetensors", outdir, producer, name);
        if ((rc = scdb_pair_load(in, cb, &pair, err, sizeof err)) ||
            (rc = scdb_pair_check_models(pair, prod, cons, err, sizeof err))) {
            fprintf(stderr, "calibrate --fidelity: %s: %s (%s)\n", in, err, scdb_strerror(rc));
            scdb_model_free(&cons);
            goto done;
        }
        if (fo->verbose) fprintf(stderr, "calibrate --fidelity: %s\n", name);
        int bad = cli_fidelity_pick(cb, prod, cons, pair, fo, &r, fig, sizeof fig);
        if (bad == 2) {          /* no training text: skipped, said so */
            skipped++;
            scdb_pair_free(&pair);
            scdb_model_free(&cons);
            continue;
        }
        if (!bad && (rc = scdb_pair_set_recompute(pair, &r, fig))) bad = 1;
        if (!bad && (rc = scdb_pair_save(pair, out))) {
            fprintf(stderr, "calibrate --fidelity: cannot write %s (%s)\n", out, scdb_strerror(rc));
            bad = 1;
        }
        if (!bad) printf("%s: %s (%.1f s)\n", out, fig, scdb_now() - t0);
        fflush(stdout);
        scdb_pair_free(&pair);
        scdb_model_free(&cons);
        if (bad) goto done;
    }
    ret = skipped ? 1 : 0;
done:
#ifdef SCDB_HAVE_LLAMA
    scdb_llama_states_free(&lls);
#endif
    scdb_model_free(&prod);
    scdb_codebook_free(&cb);
    return ret;
}

static int restamp(const char *pair_path, const char *cb_path, const char *cons_dir, const char *outdir)
{
    scdb_codebook *cb = NULL;
    scdb_model *cons = NULL;
    char err[512] = "", dir[1200], path[1400];
    int ret = 1;
    scdb_err rc = scdb_codebook_load(cb_path, &cb, err, sizeof err);
    if (rc) {
        fprintf(stderr, "calibrate: --codebook %s: %s (%s)\n", cb_path, err, scdb_strerror(rc));
        goto done;
    }
    if ((rc = scdb_model_load(cons_dir, &cons, err, sizeof err))) {
        fprintf(stderr, "calibrate: %s: %s (%s)\n", cons_dir, err, scdb_strerror(rc));
        goto done;
    }
    if (mkdirs(outdir, "pairs", dir, sizeof dir)) {
        fprintf(stderr, "calibrate: cannot create %s\n", dir);
        goto done;
    }
    snprintf(path, sizeof path, "%s/%s__%s.safetensors", dir, scdb_codebook_get_info(cb)->producer,
             scdb_model_cfg(cons)->name);
    if ((rc = scdb_pair_restamp(pair_path, cb, cons, path, err, sizeof err))) {
        fprintf(stderr, "calibrate: --restamp %s: %s (%s)\n", pair_path, err, scdb_strerror(rc));
        goto done;
    }
    printf("restamped %s -> %s\n", pair_path, path);
    ret = 0;
done:
    scdb_model_free(&cons);
    scdb_codebook_free(&cb);
    return ret;
}

static int restamp_codebook(const char *cb_path, const char *prod_dir, const char *outdir)
{
    scdb_model *prod = NULL;
    char err[512] = "", dir[1200], path[1400];
    const char *base = strrchr(cb_path, '/');
    int ret = 1;
    scdb_err rc = scdb_model_load(prod_dir, &prod, err, sizeof err);
    if (rc) {
        fprintf(stderr, "calibrate: %s: %s (%s)\n", prod_dir, err, scdb_strerror(rc));
        goto done;
    }
    if (mkdirs(outdir, "codebooks", dir, sizeof dir)) {
        fprintf(stderr, "calibrate: cannot create %s\n", dir);
        goto done;
    }
    snprintf(path, sizeof path, "%s/%s", dir, base ? base + 1 : cb_path);
    if ((rc = scdb_codebook_restamp(cb_path, prod, path, err, sizeof err))) {
        fprintf(stderr, "calibrate: --restamp-codebook %s: %s (%s)\n", cb_path, err, scdb_strerror(rc));
        goto done;
    }
    printf("restamped %s -> %s\n", cb_path, path);
    ret = 0;
done:
    scdb_model_free(&prod);
    return ret;
}

/* --domains fleet | D1,D2,...: the fleet's domains, or those named (each
 * must be one of them).  0 or 1 (said why). */
static int pick_domains(const scdb_model *prod, const char *spec, scdb_text_domains *out)
{
    static scdb_text_domains all;
    scdb_err rc = scdb_codec_fleet_domains(prod, &all);
    if (rc) {
        fprintf(stderr, "calibrate: --domains: the training domains of %s's family: %s\n",
                scdb_model_cfg(prod)->name, scdb_strerror(rc));
        return 1;
    }
    if (!strcmp(spec, "fleet")) *out = all;
    else out->n = 0;
    for (const char *s = strcmp(spec, "fleet") ? spec : ""; *s;) {
        size_t n = strcspn(s, ",");
        int k = 0;
        while (k < all.n && (strlen(all.name[k]) != n || strncmp(all.name[k], s, n))) k++;
        if (k == all.n) {
            fprintf(stderr, "calibrate: --domains: '%.*s' is not a training domain of the family (", (int)n, s);
            for (int j = 0; j < all.n; j++) fprintf(stderr, "%s%s", j ? ", " : "", all.name[j]);
            fprintf(stderr, ")\n");
            return 1;
        }
        int dup = 0;
        for (int j = 0; j < out->n; j++) dup |= !strcmp(out->name[j], all.name[k]);
        if (!dup) {
            snprintf(out->name[out->n], sizeof out->name[0], "%s", all.name[k]);
            snprintf(out->json[out->n], sizeof out->json[0], "%s", all.json[k]);
            out->n++;
        }
        s += n;
        if (*s == ',') s++;
    }
    /* a domain none of whose files is readable here is left out, said so */
    int kept = 0;
    for (int k = 0; k < out->n; k++) {
        unsigned char *t;
        size_t len;
        scdb_err r = scdb_codec_training_text(out->json[k], out->name[k], 1, DOMAIN_PER_FILE, &t, &len,
                                              NULL, 0);
        if (r) {
            fprintf(stderr, "calibrate: --domains: domain '%s' left out: %s (%s)\n", out->name[k],
                    r == SCDB_ENOTFOUND ? "none of its training files is readable here" : "unreadable",
                    scdb_strerror(r));
            continue;
        }
        free(t);
        if (kept != k) {
            memcpy(out->name[kept], out->name[k], sizeof out->name[0]);
            memcpy(out->json[kept], out->json[k], sizeof out->json[0]);
        }
        kept++;
    }
    out->n = kept;
    if (out->n == 0) { fprintf(stderr, "calibrate: --domains names no readable domain\n"); return 1; }
    return 0;
}

/* How much of an adapter's training text is read for its held-back windows
 * (they are its last bytes; the statistics read its start). */
#define TRAIN_HELDBACK_BYTES ((size_t)256 << 10)

/* Held-back KL windows of an adapter for its lora pair: the end of its
 * domain's training text (never its held-out text).  0 or 1 (said why). */
static int eval_windows_train(scdb_calib *cal, const scdb_model *m, int n_eval, int need)
{
    unsigned char *t;
    size_t len, span = (size_t)n_eval * (size_t)need;
    char desc[512];
    scdb_err rc = scdb_codec_domain_text(m, SCDB_TEXT_TRAIN, TRAIN_HELDBACK_BYTES, &t, &len, desc, sizeof desc);
    if (rc) {
        fprintf(stderr, "calibrate: no training text for '%s' (%s)\n", scdb_model_cfg(m)->name, scdb_strerror(rc));
        return 1;
    }
    if (len < 2 * span) {
        fprintf(stderr, "calibrate: training text of '%s' too short for %d held-back windows\n",
                scdb_model_cfg(m)->name, n_eval);
        free(t);
        return 1;
    }
    if (add_heldback(cal, 0, m, t, len, n_eval, need, desc)) {
        free(t);
        return 1;
    }
    fprintf(stderr, "calibrate: %d held-back KL windows for '%s' from the last %zu %s of %s\n", n_eval,
            scdb_model_cfg(m)->name, span, span_unit, desc);
    free(t);
    return 0;
}

/* ---------------------------------------------- whose text (issue 42)
 *
 * An adapter or model the project did not train has no text of its own
 * here: no domain in its family's TRAINING.json, no held-out file.  Every
 * consumer's text is settled before any work starts (plan_texts): those
 * without their own take their held-back KL windows from the operator's
 * text (op_text), and a consumer that has neither is refused with the
 * option to pass. */

/* The operator's held-back text: the last bytes of --heldback-text FILE
 * (then every consumer's), else the bytes of the last --texts file right
 * after its statistics' share (then the held-back windows of the consumers
 * with no text of their own).  Never overlaps the statistics windows: the
 * --texts file it shares bytes with (texts_i) is read for statistics up to
 * stats_cap bytes only. */
typedef struct op_text {
    unsigned char *t;   /* its last n_eval * need bytes are the windows */
    size_t len;
    int texts_i;        /* the --texts file cut short for it; -1: none */
    size_t stats_cap;
    char desc[1200];
} op_text;

/* dirname of m's directory: where its TRAINING.json would be */
static void family_of(const scdb_model *m, char *out, size_t cap)
{
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s", scdb_model_dir(m));
    snprintf(out, cap, "%s", dirname(tmp));
}

/* 1 if m has held-back text of its own here: a lora pair's is its domain's
 * training text (eval_windows_train), a full pair's the first half of its
 * held-out text or, with --domains, see eval_text. */
static int own_heldback(const scdb_model *m, int lora, const cal_domains *dd, int n_eval, int need)
{
    unsigned char *t = NULL;
    size_t len = 0, span = (size_t)n_eval * (size_t)need;
    scdb_err rc;
    int ok;
    if (lora) {
        rc = scdb_codec_domain_text(m, SCDB_TEXT_TRAIN, TRAIN_HELDBACK_BYTES, &t, &len, NULL, 0);
        ok = !rc && len >= 2 * span;
    } else {
        rc = eval_text(m, dd, span, (size_t)need, &t, &len, NULL, 0);
        ok = !rc && len >= (dd ? span : 2 * span);
    }
    free(t);
    return ok;
}

/* 1 if m's domain has statistics text of its own here: its training text
 * (src TRAIN), or that else the first half of its held-out text (AUTO). */
static int own_stats(const scdb_model *m, scdb_text_source src)
{
    unsigned char *t = NULL;
    size_t len = 0;
    scdb_err rc = scdb_codec_domain_text(m, src, 4096, &t, &len, NULL, 0);
    free(t);
    return !rc && len > 0;
}

/* Which text of its own m lacks, for the error: "domain 'D' of
 * FAMILY/TRAINING.json" (what=1), "FAMILY/../heldout/D.txt" (2), both (3). */
static void own_where(const scdb_model *m, int what, char *out, size_t cap)
{
    char fam[1200], data[1300], held[1400];
    family_of(m, fam, sizeof fam);
    snprintf(data, sizeof data, "%s/..", fam);
    scdb_model_heldout_path(data, scdb_codec_text_domain(m), held, sizeof held);
    if (what == 1)
        snprintf(out, cap, "no training text: domain '%s' of %s/TRAINING.json", scdb_codec_text_domain(m), fam);
    else if (what == 2)
        snprintf(out, cap, "no held-out text %s", held);
    else
        snprintf(out, cap, "no training text (domain '%s' of %s/TRAINING.json) and no held-out text %s",
                 scdb_codec_text_domain(m), fam, held);
}

/* Settle every consumer's text before any work: own[i] is 1 where consumer
 * i's held-back windows come from its own text, 0 where from *op (read
 * here).  The statistics text must be there too: --texts, --domains, or
 * (else) each domain's own (adding: each added adapter's training text).
 * per_bytes is what the statistics read of each --texts file.  0, or 2
 * with one line per consumer lacking text and one saying what to pass. */
static int plan_texts(const scdb_model *prod, scdb_model *const *cons, int n_cons, int lora, int adding,
                      const cal_domains *dd, const char *const *texts, int n_texts, const char *hb_path,
                      size_t per_bytes, int window, int n_eval, int need, int *own, op_text *op)
{
    size_t span = (size_t)n_eval * (size_t)need;
    int need_op = 0, lack_stats = 0, lack_held = 0;
    char where[2800];
    scdb_err rc;

    op->texts_i = -1;
    for (int i = 0; i < n_cons; i++) {
        const char *name = scdb_model_cfg(cons[i])->name;
        own[i] = !hb_path && own_heldback(cons[i], lora, dd, n_eval, need);
        need_op |= !own[i];
        /* the statistics: without --texts and --domains each domain's own */
        int stats_ok = n_texts > 0 || dd ||
                       (adding ? own_stats(cons[i], SCDB_TEXT_TRAIN) : own_stats(cons[i], SCDB_TEXT_AUTO));
        if (!stats_ok) {
            own_where(cons[i], adding ? 1 : 3, where, sizeof where);
            fprintf(stderr, "calibrate: consumer '%s' (%s) has no calibration text here: %s\n", name,
                    scdb_model_dir(cons[i]), where);
            lack_stats = 1;
        } else if (!own[i] && !hb_path && n_texts == 0) {
            own_where(cons[i], lora ? 1 : 2, where, sizeof where);
            fprintf(stderr, "calibrate: consumer '%s' (%s) has no text here for its held-back KL windows: %s\n",
                    name, scdb_model_dir(cons[i]), where);
            lack_held = 1;
        }
    }
    if (n_texts == 0 && !dd && !adding && !own_stats(prod, SCDB_TEXT_AUTO)) {
        own_where(prod, 3, where, sizeof where);
        fprintf(stderr, "calibrate: the producer '%s' (%s) has no calibration text here: %s\n",
                scdb_model_cfg(prod)->name, scdb_model_dir(prod), where);
        lack_stats = 1;
    }
    if (lack_stats || lack_held) {
        if (lack_stats || !dd)
            fprintf(stderr, "calibrate: pass the training text: --texts FILE... (the statistics windows come from "
                    "the start of each file; the held-back KL windows of a consumer with no text of its own, "
                    "%zu bytes, right after them in the last file, which needs at least %zu bytes)%s\n",
                    span, span + (size_t)window, lack_stats ? "" : ", or --heldback-text FILE for the "
                    "held-back windows alone");
        else
            fprintf(stderr, "calibrate: pass --heldback-text FILE (the held-back KL windows, its last %zu bytes; "
                    "--domains chooses the statistics)\n", span);
        return 2;
    }
    struct stat hs, ts;
    if (hb_path) {
        if (!need_op) return 0;
        if ((rc = scdb_codec_read_text(hb_path, (size_t)1 << 30, &op->t, &op->len))) {
            fprintf(stderr, "calibrate: --heldback-text %s: %s\n", hb_path, scdb_strerror(rc));
            return 2;
        }
        if (op->len < span) {
            fprintf(stderr, "calibrate: --heldback-text %s: %zu bytes, %d held-back windows need %zu\n", hb_path,
                    op->len, n_eval, span);
            return 2;
        }
        snprintf(op->desc, sizeof op->desc, "the last %zu bytes of %s", span, scdb_data_relative(hb_path));
        /* the same file among --texts: its statistics stop before them */
        for (int k = 0; k < n_texts && !stat(hb_path, &hs); k++)
            if (!stat(texts[k], &ts) && ts.st_dev == hs.st_dev && ts.st_ino == hs.st_ino) {
                op->texts_i = k;
                op->stats_cap = op->len - span;
            }
        return 0;
    }
    if (n_texts == 0) return 0;
    /* the last --texts file: the span right after its statistics' share,
     * or its last bytes when it is shorter (the statistics then stop before
     * them).  Kept from the statistics whether a consumer needs it or not,
     * so that the statistics, and so a pair, do not depend on which other
     * consumers share the run. */
    const char *last = texts[n_texts - 1];
    unsigned char *t;
    size_t len;
    if ((rc = scdb_codec_read_text(last, per_bytes + span, &t, &len))) {
        fprintf(stderr, "calibrate: %s: %s\n", last, scdb_strerror(rc));
        return 2;
    }
    if (len < span + (size_t)window) {
        free(t);
        if (!need_op) return 0;
        fprintf(stderr, "calibrate: %s: %zu bytes; the held-back KL windows of a consumer with no text of its own "
                "(%zu bytes) come from the last --texts file after at least one statistics window: it needs at "
                "least %zu bytes\n", last, len, span, span + (size_t)window);
        return 2;
    }
    size_t at = len - span < per_bytes ? len - span : per_bytes;
    op->texts_i = n_texts - 1;
    op->stats_cap = at;
    op->len = span;
    op->t = malloc(span);
    if (!op->t) { free(t); fprintf(stderr, "calibrate: %s\n", scdb_strerror(SCDB_ENOMEM)); return 2; }
    memcpy(op->t, t + at, span);
    free(t);
    snprintf(op->desc, sizeof op->desc, "bytes %zu-%zu of %s (--texts: right after its statistics' share)", at,
             at + span, scdb_data_relative(last));
    return 0;
}

/* A full pair's own held-back windows are the end of the first half of its
 * held-out text; a --texts file that is that text must not be read that
 * far by the statistics (what file k gives them: per_bytes, or op's cap).
 * Refused rather than cut, so that the statistics stay the same whichever
 * consumers share the run.  0, or 2 (said why). */
static int texts_overlap_own(scdb_model *const *cons, int n_cons, int lora, const cal_domains *dd,
                             const int *own, const char *const *texts, int n_texts, size_t per_bytes,
                             const op_text *op, int n_eval, int need)
{
    size_t span = (size_t)n_eval * (size_t)need;
    struct stat hs, ts;
    if (lora || dd) return 0;   /* held-back text from training files or after --domains' share */
    for (int i = 0; i < n_cons; i++) {
        char fam[1200], data[1300], held[1400];
        if (!own[i]) continue;
        family_of(cons[i], fam, sizeof fam);
        snprintf(data, sizeof data, "%s/..", fam);
        scdb_model_heldout_path(data, scdb_codec_text_domain(cons[i]), held, sizeof held);
        if (stat(held, &hs)) continue;
        size_t half = (size_t)hs.st_size / 2, from = half >= span ? half - span : 0;
        for (int k = 0; k < n_texts; k++) {
            if (stat(texts[k], &ts) || ts.st_dev != hs.st_dev || ts.st_ino != hs.st_ino) continue;
            size_t read = per_bytes < (size_t)ts.st_size ? per_bytes : (size_t)ts.st_size;
            if (k == op->texts_i && read > op->stats_cap) read = op->stats_cap;
            if (read <= from) continue;
            fprintf(stderr, "calibrate: --texts %s is the held-out text of consumer '%s', whose held-back KL windows "
                    "are its bytes %zu-%zu (the end of its first half): the statistics would read them (its first "
                    "%zu bytes); pass other text, fewer --windows, or --heldback-text FILE\n", texts[k],
                    scdb_model_cfg(cons[i])->name, from, half, read);
            return 2;
        }
    }
    return 0;
}

/* Held-back KL windows of consumer m from the operator's text (slot ci).
 * 0 or 1 (said why). */
static int op_windows(scdb_calib *cal, int ci, const scdb_model *m, const op_text *op, int n_eval, int need)
{
    if (add_heldback(cal, ci, m, op->t, op->len, n_eval, need, op->desc)) return 1;
    fprintf(stderr, "calibrate: %d held-back KL windows for '%s' from %s\n", n_eval, scdb_model_cfg(m)->name,
            op->desc);
    return 0;
}

/* Held-back KL windows of consumer m in slot ci: from its own text (a lora
 * pair's: its training text; a full pair's: eval_windows) or the
 * operator's (own 0).  With cal NULL only the span its own text must keep
 * from the statistics.  0 or 1 (said why). */
static int heldback_windows(scdb_calib *cal, int ci, const scdb_model *m, int lora, int own, const op_text *op,
                            int n_eval, int need, const cal_domains *dd, size_t *span_out)
{
    if (!own) return cal ? op_windows(cal, ci, m, op, n_eval, need) : 0;
    if (lora) return cal ? eval_windows_train(cal, m, n_eval, need) : 0;
    return eval_windows(cal, ci, m, n_eval, need, dd, span_out);
}

static long file_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

/* Statistics windows for adapters added to a fleet (--shared): own_w
 * windows of each adapter's own domain's training text (its start: the
 * held-back KL windows come from the end of a longer read, see
 * eval_windows_train) and fleet_w windows of every other domain of the
 * fleet (the family's and its adapters' TRAINING.json; one window per
 * training file in turn), so that an adapter's corrections are fitted
 * mostly where it is used and still on every kind of text a shared prefix
 * may hold, from tens of windows instead of the fleet fit's hundreds.
 * 0 or 1 (said why). */
static int fleet_text(scdb_calib *cal, const scdb_model *prod, scdb_model *const *cons, int n_cons,
                      int own_w, int fleet_w, int window, double t0)
{
    static scdb_text_domains td;   /* 80 KB: not on the stack */
    char desc[512];
    int added;
    scdb_err rc;
    for (int i = 0; i < n_cons; i++) {
        unsigned char *t = NULL;
        size_t len;
        const char *dom = scdb_codec_text_domain(cons[i]);
        int dup = 0;
        for (int k = 0; k < i; k++) dup |= !strcmp(scdb_codec_text_domain(cons[k]), dom);
        if (dup) continue;
        double tk = scdb_now();
        rc = scdb_codec_domain_text(cons[i], SCDB_TEXT_TRAIN, (size_t)own_w * window + window, &t, &len, desc,
                                    sizeof desc);
        if (rc) {
            fprintf(stderr, "calibrate: no training text for '%s' (%s)\n", dom, scdb_strerror(rc));
            return 1;
        }
        rc = scdb_calib_add_text(cal, t, len, own_w, &added);
        free(t);
        if (rc) { fprintf(stderr, "calibrate: %s\n", scdb_strerror(rc)); return 1; }
        fprintf(stderr, "calibrate: own domain '%s': %d windows, %s (%.1f s; %.1f s in all)\n", dom, added, desc,
                scdb_now() - tk, scdb_now() - t0);
    }
    if (fleet_w == 0) return 0;
    if ((rc = scdb_codec_fleet_domains(prod, &td))) {
        fprintf(stderr, "calibrate: the fleet's domains: %s\n", scdb_strerror(rc));
        return 1;
    }
    int nd = 0, nw = 0;
    double tf = scdb_now();
    for (int k = 0; k < td.n; k++) {
        unsigned char *t = NULL;
        size_t len;
        int own = 0;
        for (int i = 0; i < n_cons; i++) own |= !strcmp(scdb_codec_text_domain(cons[i]), td.name[k]);
        if (own) continue;
        rc = scdb_codec_training_text(td.json[k], td.name[k], (size_t)fleet_w * window + window, (size_t)window,
                                      &t, &len, NULL, 0);
        if (rc) {
            fprintf(stderr, "calibrate: fleet domain '%s' left out: %s\n", td.name[k], scdb_strerror(rc));
            continue;
        }
        rc = scdb_calib_add_text(cal, t, len, fleet_w, &added);
        free(t);
        if (rc) { fprintf(stderr, "calibrate: %s\n", scdb_strerror(rc)); return 1; }
        nd++;
        nw += added;
    }
    fprintf(stderr, "calibrate: a sample of the fleet: %d windows from %d other domains (%.1f s; %.1f s in all)\n", nw,
            nd, scdb_now() - tf, scdb_now() - t0);
    return 0;
}

/* --shared: the shared part in dir, where the pairs fitted against it
 * refer to it (<producer>__fleet.safetensors beside them): written there
 * unless a file with its checksum is there already; another shared part
 * in its place is refused (the new pairs would not load beside it).  0 or 1. */
static int place_shared(const scdb_codebook *cb, const scdb_pair *shared, const char *dir)
{
    char path[1400], err[512] = "";
    const char *want = scdb_pair_get_info(shared)->checksum;
    scdb_pair *there = NULL;
    scdb_err rc;

    if (snprintf(path, sizeof path, "%s/%s__%s.safetensors", dir, scdb_codebook_get_info(cb)->producer,
                 SCDB_PAIR_SHARED_STEM) >= (int)sizeof path) {
        fprintf(stderr, "calibrate: output directory %s: path too long\n", dir);
        return 1;
    }
    if (access(path, F_OK) == 0) {
        if ((rc = scdb_pair_load_shared(path, cb, &there, err, sizeof err))) {
            fprintf(stderr, "calibrate: %s is in the way of --shared's copy: %s (%s)\n", path, err,
                    scdb_strerror(rc));
            return 1;
        }
        int same = !strcmp(scdb_pair_get_info(there)->checksum, want);
        if (!same)
            fprintf(stderr, "calibrate: %s is another shared part (checksum %s, --shared's is %s): the pairs "
                    "fitted now would not load beside it; choose another -o\n", path,
                    scdb_pair_get_info(there)->checksum, want);
        scdb_pair_free(&there);
        return !same;
    }
    if ((rc = scdb_pair_save(shared, path))) {
        fprintf(stderr, "calibrate: %s: %s\n", path, scdb_strerror(rc));
        return 1;
    }
    if ((rc = scdb_pair_load_shared(path, cb, &there, err, sizeof err)) ||
        strcmp(scdb_pair_get_info(there)->checksum, want)) {
        fprintf(stderr, "calibrate: the copy %s of the shared part does not read back as checksum %s%s%s\n", path,
                want, rc ? ": " : "", rc ? err : "");
        scdb_pair_free(&there);
        return 1;
    }
    scdb_pair_free(&there);
    fprintf(stderr, "calibrate: shared part copied to %s (the pairs refer to it beside them)\n", path);
    return 0;
}

/* --lora-pairs: the shared part (fitted over every adapter, or --shared),
 * then each adapter's lora pair.  0 or 1. */
static int lora_fleet(scdb_calib *cal, const scdb_codebook *cb, const scdb_model *prod,
                      scdb_model *const *cons, int n_cons, const char *shared_path, const char *dir,
                      int n_eval, int need, int n_patch, int hidden, int steps, int dec_rank, int align_rank,
                      int tok_in, int tok_corr, const int *own, const op_text *op, double t0, double t_stats,
                      double cpu_stats)
{
    scdb_calib_fleet *fl = NULL;
    scdb_pair *shared = NULL;
    char path[1400], err[512] = "";
    double state_s[MAX_CONS] = {0}, pair_s[MAX_CONS] = {0}, state_cpu[MAX_CONS] = {0};
    int ret = 1;
    scdb_err rc;
    const char *pname = scdb_model_cfg(prod)->name;

    if (shared_path) {
        if ((rc = scdb_pair_load_shared(shared_path, cb, &shared, err, sizeof err))) {
            fprintf(stderr, "calibrate: --shared %s: %s (%s)\n", shared_path, err, scdb_strerror(rc));
            goto done;
        }
        fprintf(stderr, "calibrate: shared part %s (checksum %s) read\n", shared_path,
                scdb_pair_get_info(shared)->checksum);
        /* the pairs refer to it by stem beside them: it goes to OUTDIR/pairs
         * too, or is there already (the same checksum) */
        if (place_shared(cb, shared, dir)) goto done;
    } else {
        if ((rc = scdb_calib_fleet_new(cal, &fl))) {
            fprintf(stderr, "calibrate: fleet: %s\n", scdb_strerror(rc));
            goto done;
        }
        for (int i = 0; i < n_cons; i++) {
            double tc = scdb_now();
            clock_t cc = clock();
            if (i > 0 && (rc = scdb_calib_swap_consumer(cal, 0, cons[i]))) {
                fprintf(stderr, "calibrate: consumer '%s': %s\n", scdb_model_cfg(cons[i])->name, scdb_strerror(rc));
                goto done;
            }
            if ((rc = scdb_calib_fleet_add(fl, cal))) {
                fprintf(stderr, "calibrate: fleet: %s\n", scdb_strerror(rc));
                goto done;
            }
            state_s[i] = i > 0 ? scdb_now() - tc : 0.0;
            state_cpu[i] = i > 0 ? (double)(clock() - cc) / CLOCKS_PER_SEC : 0.0;
            fprintf(stderr, "calibrate: adapter %d/%d '%s': states over the windows (%.1f s, cpu %.1f s; %.1f s in all)\n",
                    i + 1, n_cons, scdb_model_cfg(cons[i])->name, state_s[i], state_cpu[i], scdb_now() - t0);
        }
        double ts = scdb_now();
        scdb_pair_fit pf = {.hidden = hidden, .steps = steps, .all_layers = 1, .token_input = tok_in};
        if ((rc = scdb_calib_fit_shared(cal, cb, fl, &pf, &shared))) {
            fprintf(stderr, "calibrate: shared part: %s\n", scdb_strerror(rc));
            goto done;
        }
        snprintf(path, sizeof path, "%s/%s__%s.safetensors", dir, scdb_codebook_get_info(cb)->producer,
                 SCDB_PAIR_SHARED_STEM);
        if ((rc = scdb_pair_save(shared, path))) {
            fprintf(stderr, "calibrate: %s: %s\n", path, scdb_strerror(rc));
            goto done;
        }
        printf("shared part of %d adapters: checksum %s, %ld bytes, %.1f s%s\n  written %s\n", n_cons,
               scdb_pair_get_info(shared)->checksum, file_bytes(path), scdb_now() - ts,
               scdb_pair_get_info(shared)->token_input ? ", token input" : "", path);
    }
    for (int i = 0; i < n_cons; i++) {
        const char *cname = scdb_model_cfg(cons[i])->name;
        double tc = scdb_now();
        clock_t cc = clock();
        scdb_pair *p = NULL;
        fprintf(stderr, "calibrate: lora pair %d/%d '%s' (%.1f s)\n", i + 1, n_cons, cname, tc - t0);
        if (fl) rc = scdb_calib_fleet_use(fl, cal, i);
        else rc = i > 0 ? scdb_calib_swap_consumer(cal, 0, cons[i]) : SCDB_OK;
        if (rc) {
            fprintf(stderr, "calibrate: consumer '%s': %s\n", cname, scdb_strerror(rc));
            goto done;
        }
        if (!fl && i > 0) {   /* --shared: its states were computed just now */
            state_s[i] = scdb_now() - tc;
            state_cpu[i] = (double)(clock() - cc) / CLOCKS_PER_SEC;
            tc = scdb_now();
            cc = clock();
        }
        if (heldback_windows(cal, 0, cons[i], 1, own[i], op, n_eval, need, NULL, NULL)) goto done;
        scdb_lora_fit lf = {.dec_rank = dec_rank, .align_rank = align_rank, .n_patch = n_patch,
                            .token_corr = tok_corr};
        if ((rc = scdb_calib_fit_lora_pair(cal, cb, shared, &lf, &p, err, sizeof err))) {
            fprintf(stderr, "calibrate: lora pair %s -> %s: %s (%s)\n", pname, cname, err, scdb_strerror(rc));
            goto done;
        }
        snprintf(path, sizeof path, "%s/%s__%s.safetensors", dir, pname, cname);
        if ((rc = scdb_pair_save(p, path))) {
            fprintf(stderr, "calibrate: %s: %s\n", path, scdb_strerror(rc));
            scdb_pair_free(&p);
            goto done;
        }
        {   /* it must load where it was written: beside its shared part */
            scdb_pair *back = NULL;
            rc = scdb_pair_load(path, cb, &back, err, sizeof err);
            scdb_pair_free(&back);
            if (rc) {
                fprintf(stderr, "calibrate: %s does not load back: %s (%s)\n", path, err, scdb_strerror(rc));
                scdb_pair_free(&p);
                goto done;
            }
        }
        const scdb_pair_info *pi = scdb_pair_get_info(p);
        printf("lora pair %s -> %s: %ld bytes, patch order", pname, cname, file_bytes(path));
        for (int k = 0; k < pi->n_aligners; k++) printf(" %d", pi->patch_order[k]);
        printf(" (default budget %d), ranks dec %d align %d delta %d (%s)%s", pi->n_patch, pi->dec_rank,
               pi->align_rank, pi->lora_rank, pi->lora_targets[0] ? pi->lora_targets : "none",
               !pi->token_input ? "" : pi->token_corr ? ", token input (corrections of [z | h0])"
                                                      : ", token input (corrections of z)");
        double kl0, t10, kl, t1;
        if (!scdb_calib_eval(cal, cb, p, 0, 0, &kl0, &t10) && !scdb_calib_eval(cal, cb, p, 0, -1, &kl, &t1))
            printf("; held-back KL reuse %.4f (top-1 %.3f) -> full %.4f (top-1 %.3f)", kl0, t10, kl, t1);
        printf("\n  written %s\n", path);
        scdb_pair_free(&p);
        pair_s[i] = scdb_now() - tc;
        double pc = (double)(clock() - cc) / CLOCKS_PER_SEC;
        if (!fl && i == 0) {
            /* an added adapter: its states came with the producer's in the
             * statistics pass, which ran for the added adapters alone */
            printf("  consumer %s: %.1f s (cpu %.1f s: the statistics windows, the producer's states and its own, "
                   "%.1f s, cpu %.1f s + its pair %.1f s, cpu %.1f s)\n", cname, t_stats + pair_s[i],
                   cpu_stats + pc, t_stats, cpu_stats, pair_s[i], pc);
        } else {
            printf("  consumer %s: %.1f s (cpu %.1f s: its states over the windows %.1f s, cpu %.1f s%s + its pair "
                   "%.1f s, cpu %.1f s)\n", cname, state_s[i] + pair_s[i], state_cpu[i] + pc, state_s[i],
                   state_cpu[i], i == 0 ? ", computed with the statistics" : "", pair_s[i], pc);
        }
        fflush(stdout);
    }
    double sum = 0;
    for (int i = 0; i < n_cons; i++) sum += state_s[i] + pair_s[i];
    if (fl) {
        printf("producer states over %d windows computed once (%d producer passes) for %d adapters: statistics %.1f s, "
               "adapters %.1f s (mean %.1f s each after the statistics; the first adapter's states came with them)\n",
               scdb_calib_windows(cal), scdb_calib_producer_passes(cal), n_cons, t_stats, sum, sum / n_cons);
    } else {
        /* adding to a fleet: everything this run did was for the added adapters */
        double wall = scdb_now() - t0, cpu = (double)clock() / CLOCKS_PER_SEC;
        printf("added %d adapter%s to the fleet of shared part %s: %.1f s, cpu %.1f s in all (loading, %d statistics "
               "windows, held-back windows, pairs): %.1f s, cpu %.1f s per added adapter\n", n_cons,
               n_cons == 1 ? "" : "s", scdb_pair_get_info(shared)->checksum, wall, cpu, scdb_calib_windows(cal),
               wall / n_cons, cpu / n_cons);
    }
    ret = 0;
done:
    scdb_pair_free(&shared);
    scdb_calib_fleet_free(&fl);
    return ret;
}

/* ---------------------------------------------- which engine (issue 39)
 *
 * The states of GGUF models come from llama.cpp when the build has it
 * (--engine auto, the default, or llama.cpp): the text tokenized with the
 * models' own vocabulary, every model's states over each window computed
 * by llama.cpp (llama/scdb_llama_calib.h).  Model directories, and GGUF
 * files in a build without llama.cpp, run in scdb's reference engine,
 * whose windows are bytes: a GGUF model whose vocabulary is not the byte
 * vocabulary is refused there, by name. */

enum { ENG_AUTO, ENG_LLAMA, ENG_REF };

/* The GGUF files m was loaded from: *model (a GGUF model) and *adapter
 * (a GGUF LoRA adapter over it, else NULL).  0 if m is not GGUF. */
static int gguf_files(const scdb_model *m, const char **model, const char **adapter)
{
    const char *dir = scdb_model_dir(m), *base = scdb_model_base_dir(m);
    *model = *adapter = NULL;
    if (!scdb_gguf_is_file(dir)) return 0;
    if (base && *base) {
        if (!scdb_gguf_is_file(base)) return 0;
        *model = base;
        *adapter = dir;
        return 1;
    }
    *model = dir;
    return 1;
}

/* 0 if the reference engine's byte windows are m's tokens (a model
 * directory, or a GGUF with the byte vocabulary); else 1, said why. */
static int refuse_non_byte_vocab(const scdb_model *m, const char *role)
{
    const char *model, *adapter;
    if (!gguf_files(m, &model, &adapter)) return 0;
    scdb_gguf_file *f = NULL;
    char err[512] = "", desc[160] = "";
    if (scdb_gguf_open(model, &f, err, sizeof err)) {
        fprintf(stderr, "calibrate: %s: %s\n", model, err);
        return 1;
    }
    int byte = scdb_gguf_llama_byte_vocab(f, desc, sizeof desc);
    scdb_gguf_close(&f);
    if (byte) return 0;
    fprintf(stderr, "calibrate: %s '%s' (%s) has a vocabulary of its own (%s), not the byte vocabulary: the "
            "reference engine cuts calibration text into byte windows, which are not its token ids; %s\n", role,
            scdb_model_cfg(m)->name, model, desc,
#ifdef SCDB_HAVE_LLAMA
            "calibrate it with --engine llama.cpp (text tokenized with its own vocabulary)"
#else
            "this build has no llama.cpp, which tokenizes with it (scripts/install-llama.sh, SCDB_LLAMA)"
#endif
            );
    return 1;
}

/* The engine for these models: *llama 1 for llama.cpp.  0, or 2 (said
 * why). */
static int pick_engine(int eng, const scdb_model *prod, scdb_model *const *cons, int n_cons, int *llama)
{
    const char *model, *adapter;
    const scdb_model *not_gguf = gguf_files(prod, &model, &adapter) ? NULL : prod;
    for (int i = 0; i < n_cons && !not_gguf; i++)
        if (!gguf_files(cons[i], &model, &adapter)) not_gguf = cons[i];
    *llama = 0;
    if (eng == ENG_LLAMA) {
#ifndef SCDB_HAVE_LLAMA
        fprintf(stderr, "calibrate: --engine llama.cpp: this build has no llama.cpp (scripts/install-llama.sh, "
                "then configure with SCDB_LLAMA); --engine reference computes the states of byte-vocabulary models "
                "in scdb's own engine\n");
        return 2;
#else
        if (not_gguf) {
            fprintf(stderr, "calibrate: --engine llama.cpp: '%s' (%s) is not a GGUF file (llama.cpp loads GGUF models "
                    "and GGUF LoRA adapters over a GGUF base; scdb export-gguf writes them)\n",
                    scdb_model_cfg(not_gguf)->name, scdb_model_dir(not_gguf));
            return 2;
        }
        *llama = 1;
        return 0;
#endif
    }
#ifdef SCDB_HAVE_LLAMA
    if (eng == ENG_AUTO && !not_gguf) {
        *llama = 1;
        return 0;
    }
#endif
    if (refuse_non_byte_vocab(prod, "producer")) return 2;
    for (int i = 0; i < n_cons; i++)
        if (refuse_non_byte_vocab(cons[i], "consumer")) return 2;
    return 0;
}

#ifdef SCDB_HAVE_LLAMA
/* llama.cpp's states of the producer and every consumer (their GGUF
 * files), windows up to n_ctx tokens.  0 or 2 (said why). */
static int open_llama_states(const scdb_model *prod, scdb_model *const *cons, int n_cons, int n_ctx,
                             scdb_llama_states **out)
{
    char err[768] = "";
    const char *model, *adapter;
    scdb_err rc = scdb_llama_states_new(n_ctx, llama_threads, out, err, sizeof err);
    if (rc) {
        fprintf(stderr, "calibrate: llama.cpp: %s (%s)\n", err, scdb_strerror(rc));
        return 2;
    }
    for (int i = -1; i < n_cons; i++) {
        const scdb_model *m = i < 0 ? prod : cons[i];
        gguf_files(m, &model, &adapter);
        if ((rc = scdb_llama_states_add(*out, m, model, adapter, err, sizeof err))) {
            fprintf(stderr, "calibrate: llama.cpp: %s %s (%s)\n", i < 0 ? "producer" : "consumer", err,
                    scdb_strerror(rc));
            return 2;
        }
    }
    fprintf(stderr, "calibrate: states in llama.cpp %s, text tokenized with the models' vocabulary (%s)\n",
            SCDB_LLAMA_RELEASE, scdb_llama_states_vocab_desc(*out));
    return 0;
}
#endif

int cli_cmd_calibrate(int argc, char **argv)
{
    const char *producer_dir = NULL, *cons_dir[MAX_CONS], *texts[MAX_TEXTS], *outdir = NULL;
    const char *cb_path = NULL, *restamp_path = NULL, *restamp_cb = NULL, *cb_only = NULL;
    const char *domains_opt = NULL, *hb_path = NULL;
    op_text op = {.texts_i = -1};
    int own[MAX_CONS] = {0};
    static cal_domains dstore;   /* 80 KB: not on the stack */
    const cal_domains *dd = NULL;
    int n_cons = 0, n_texts = 0, ranks[3] = {-1, -1, -1}, n_patch = -1, n_cand = -1;
    int pca = 0, post = 0, token0 = 1, cand_kv = 0, windows = 256, window = 384, n_eval = 6;
    int hidden = 128, steps = 1500, identity = 1, fixed[SCDB_CODEC_MAX_LAYERS], n_fixed = -1;
    int budget = 0, all_layers = 1, lora = 0, dec_rank = 0, align_rank = 0, tok_in = 1, tok_corr = 0;
    int own_windows = -1, fleet_windows = -1, stride = 0, windows_set = 0;
    const char *shared_path = NULL, *pairs_dir = NULL;
    int fidelity = 0, f16 = 0, engine = ENG_AUTO, use_llama = 0, byte_tokens = 1;
#ifdef SCDB_HAVE_LLAMA
    scdb_llama_states *lls = NULL;
#endif
    cli_fidelity_opts fo = {.target_top1 = 0.95, .target_ppl = 1.01, .windows = 8, .prefix = 448,
                            .cont = 64, .fractions = {0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5},
                            .n_fractions = 7, .max_cost = 0.15};
    scdb_device_pref dev_pref = SCDB_DEVPREF_AUTO;
    scdb_device dev;
    char why[384];
    scdb_model *prod = NULL, *cons[MAX_CONS] = {0};
    scdb_calib *cal = NULL;
    scdb_codebook *cb = NULL;
    char err[512];
    int ret = 1;
    scdb_err rc;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        scdb_err bad = SCDB_OK;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--producer") && more) producer_dir = argv[++i];
        else if (!strcmp(a, "--consumer") && more) {
            if (n_cons == MAX_CONS) { fprintf(stderr, "calibrate: at most %d consumers\n", MAX_CONS); return 2; }
            cons_dir[n_cons++] = argv[++i];
        } else if (!strcmp(a, "--codebook") && more) cb_path = argv[++i];
        else if (!strcmp(a, "--restamp") && more) restamp_path = argv[++i];
        else if (!strcmp(a, "--restamp-codebook") && more) restamp_cb = argv[++i];
        else if (!strcmp(a, "--ranks") && more) {
            cb_only = a;
            if (parse_ints(argv[++i], ranks, 3) != 3) { fprintf(stderr, "calibrate: --ranks wants rK,rV,rH\n"); return 2; }
        } else if (!strcmp(a, "--patch-layers") && more) bad = scdb_parse_int(a, argv[++i], -1, INT_MAX, &n_patch, why, sizeof why);
        else if (!strcmp(a, "--candidates") && more) { cb_only = a; bad = scdb_parse_int(a, argv[++i], -1, INT_MAX, &n_cand, why, sizeof why); }
        else if (!strcmp(a, "--candidate-layers") && more) {
            cb_only = a;
            n_fixed = parse_ints(argv[++i], fixed, SCDB_CODEC_MAX_LAYERS);
            if (n_fixed < 1) { fprintf(stderr, "calibrate: bad --candidate-layers\n"); return 2; }
        } else if (!strcmp(a, "--texts") && more) {
            while (i + 1 < argc && strncmp(argv[i + 1], "-", 1)) {
                if (n_texts == MAX_TEXTS) { fprintf(stderr, "calibrate: at most %d texts\n", MAX_TEXTS); return 2; }
                texts[n_texts++] = argv[++i];
            }
        } else if (!strcmp(a, "--heldback-text") && more) hb_path = argv[++i];
        else if (!strcmp(a, "--domains") && more) domains_opt = argv[++i];
        else if (!strcmp(a, "--pca")) { cb_only = a; pca = 1; }
        else if (!strcmp(a, "--post-rope")) { cb_only = a; post = 1; }
        else if (!strcmp(a, "--no-token-layer0")) { cb_only = a; token0 = 0; }
        else if (!strcmp(a, "--candidate-kv")) { cb_only = a; cand_kv = 1; }
        else if (!strcmp(a, "--windows") && more) {
            windows_set = 1;
            bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &windows, why, sizeof why);
        } else if (!strcmp(a, "--own-windows") && more) bad = scdb_parse_int(a, argv[++i], 1, 100000, &own_windows, why, sizeof why);
        else if (!strcmp(a, "--fleet-windows") && more) bad = scdb_parse_int(a, argv[++i], 0, 100000, &fleet_windows, why, sizeof why);
        else if (!strcmp(a, "--sample-stride") && more) bad = scdb_parse_int(a, argv[++i], 1, 1024, &stride, why, sizeof why);
        else if (!strcmp(a, "--budget") && more) { cb_only = a; bad = scdb_parse_int(a, argv[++i], 0, INT_MAX, &budget, why, sizeof why); }
        else if (!strcmp(a, "--lora-pairs")) lora = 1;
        else if (!strcmp(a, "--shared") && more) shared_path = argv[++i];
        else if (!strcmp(a, "--dec-rank") && more) bad = scdb_parse_int(a, argv[++i], -1, 4096, &dec_rank, why, sizeof why);
        else if (!strcmp(a, "--align-rank") && more) bad = scdb_parse_int(a, argv[++i], -1, 4096, &align_rank, why, sizeof why);
        else if (!strcmp(a, "--all-layers")) all_layers = 1;
        else if (!strcmp(a, "--no-token-input")) tok_in = 0;
        else if (!strcmp(a, "--token-input")) tok_in = 1;
        else if (!strcmp(a, "--no-token-corr")) tok_corr = -1;
        else if (!strcmp(a, "--own-layer")) all_layers = 0;
        else if (!strcmp(a, "--window") && more) bad = scdb_parse_int(a, argv[++i], 16, INT_MAX, &window, why, sizeof why);
        else if (!strcmp(a, "--eval-windows") && more) bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &n_eval, why, sizeof why);
        else if (!strcmp(a, "--hidden") && more) bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &hidden, why, sizeof why);
        else if (!strcmp(a, "--steps") && more) bad = scdb_parse_int(a, argv[++i], 1, INT_MAX, &steps, why, sizeof why);
        else if (!strcmp(a, "--no-identity")) { cb_only = a; identity = 0; }
        else if (!strcmp(a, "-o") && more) outdir = argv[++i];
        else if (!strcmp(a, "--fidelity")) fidelity = 1;
        else if (!strcmp(a, "--threads") && more)
            bad = scdb_parse_int(a, argv[++i], 1, 256, &llama_threads, why, sizeof why);
        else if (!strcmp(a, "--engine") && more) {
            const char *e = argv[++i];
            if (!strcmp(e, "llama.cpp")) engine = ENG_LLAMA;
            else if (!strcmp(e, "reference")) engine = ENG_REF;
            else if (!strcmp(e, "auto")) engine = ENG_AUTO;
            else {
                fprintf(stderr, "calibrate: --engine wants auto, llama.cpp or reference, not '%s'\n", e);
                return 2;
            }
        }
        else if (!strcmp(a, "--pairs") && more) pairs_dir = argv[++i];
        else if (!strcmp(a, "--f16")) f16 = 1;
        else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) fo.verbose = 1;
        else if (!strcmp(a, "--target-top1") && more)
            bad = scdb_parse_f64(a, argv[++i], 0.0, 1.0, &fo.target_top1, why, sizeof why);
        else if (!strcmp(a, "--target-ppl") && more)
            bad = scdb_parse_f64(a, argv[++i], 1.0, 100.0, &fo.target_ppl, why, sizeof why);
        else if (!strcmp(a, "--fidelity-max-cost") && more)
            bad = scdb_parse_f64(a, argv[++i], 0.0, 1.0, &fo.max_cost, why, sizeof why);
        else if (!strcmp(a, "--fidelity-windows") && more)
            bad = scdb_parse_int(a, argv[++i], 1, 4096, &fo.windows, why, sizeof why);
        else if (!strcmp(a, "--fidelity-prefix") && more)
            bad = scdb_parse_int(a, argv[++i], 16, 1 << 20, &fo.prefix, why, sizeof why);
        else if (!strcmp(a, "--fidelity-fractions") && more) {
            char *p = argv[++i], *end;
            fo.n_fractions = 0;
            while (*p && fo.n_fractions < 16) {
                double v = strtod(p, &end);
                if (end == p || !(v > 0 && v <= 1) || (*end && *end != ',')) {
                    fprintf(stderr, "calibrate: --fidelity-fractions '%s': fractions in (0, 1], "
                            "comma-separated\n", argv[i]);
                    return 2;
                }
                fo.fractions[fo.n_fractions++] = v;
                p = *end ? end + 1 : end;
            }
        } else if (!strcmp(a, "--device") && more) {
            if (scdb_device_parse(argv[++i], &dev_pref)) {
                fprintf(stderr, "calibrate: --device wants auto, cpu or cuda, not '%s'\n\n", argv[i]);
                usage(stderr);
                return 2;
            }
        } else {
            fprintf(stderr, "calibrate: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "calibrate: %s\n", why);
            return 2;
        }
    }
    if (fidelity) {
        if (!cb_path || n_cons == 0 || !outdir) {
            fprintf(stderr, "calibrate: --fidelity needs --codebook FILE, --consumer DIR and -o OUTDIR\n\n");
            usage(stderr);
            return 2;
        }
        fo.texts = texts;
        fo.n_texts = n_texts;
        return fidelity_mode(cb_path, producer_dir, cons_dir, n_cons, pairs_dir, outdir, f16, engine, &fo);
    }
    if (restamp_cb) {
        if (!producer_dir || n_cons || cb_path || restamp_path || !outdir) {
            fprintf(stderr, "calibrate: --restamp-codebook FILE needs --producer DIR and -o OUTDIR, nothing else\n\n");
            usage(stderr);
            return 2;
        }
        return restamp_codebook(restamp_cb, producer_dir, outdir);
    }
    if (restamp_path) {
        if (!cb_path || n_cons != 1 || !outdir) {
            fprintf(stderr, "calibrate: --restamp PAIR needs --codebook FILE, one --consumer DIR and -o OUTDIR\n\n");
            usage(stderr);
            return 2;
        }
        return restamp(restamp_path, cb_path, cons_dir[0], outdir);
    }
    if (cb_path) {
        if (cb_only) {
            fprintf(stderr, "calibrate: %s fits a codebook; with --codebook the codebook is frozen\n\n", cb_only);
            usage(stderr);
            return 2;
        }
        if (n_cons == 0 || !outdir || windows < 1 || window < 16 || n_eval < 1 || hidden < 1 || steps < 1 ||
            n_patch < -1) {
            fprintf(stderr, "calibrate: --codebook needs --consumer and -o (and positive sizes)\n\n");
            usage(stderr);
            return 2;
        }
        identity = 0;
        if ((shared_path || dec_rank || align_rank || tok_corr) && !lora) {
            fprintf(stderr, "calibrate: --shared, --dec-rank, --align-rank and --no-token-corr go with --lora-pairs\n\n");
            usage(stderr);
            return 2;
        }
        if (lora && !all_layers) {
            fprintf(stderr, "calibrate: --lora-pairs decoders read every layer's code (not --own-layer)\n");
            return 2;
        }
        if ((own_windows >= 0 || fleet_windows >= 0) && !shared_path) {
            fprintf(stderr, "calibrate: --own-windows and --fleet-windows go with --shared (adapters added to a "
                    "fleet)\n\n");
            usage(stderr);
            return 2;
        }
    } else if (lora || shared_path || tok_corr) {
        fprintf(stderr, "calibrate: --lora-pairs needs --codebook FILE (adapter pairs decode a frozen codebook)\n\n");
        usage(stderr);
        return 2;
    } else {
        if (n_cons > MAX_JOINT) {
            fprintf(stderr, "calibrate: at most %d consumers when fitting a codebook (add more later "
                    "with --codebook)\n", MAX_JOINT);
            return 2;
        }
        if (n_fixed > 0) n_cand = n_fixed;
        if (n_cand < 0) n_cand = n_patch;
        if (!producer_dir || n_cons == 0 || ranks[0] < 0 || n_patch < 0 || !outdir || windows < 1 ||
            window < 16 || n_eval < 1 || hidden < 1 || steps < 1 || n_patch > n_cand) {
            fprintf(stderr, "calibrate: need --producer, --consumer, --ranks, --patch-layers (<= --candidates), -o\n\n");
            usage(stderr);
            return 2;
        }
    }
    if (scdb_device_resolve(dev_pref, &dev, why, sizeof why)) {
        fprintf(stderr, "calibrate: %s\n", why);
        return 1;
    }
    fprintf(stderr, "calibrate: device %s (%s)\n", scdb_device_name(dev), why);
    double t0 = scdb_now();
    clock_t c0 = clock();
    if (cb_path) {
        if (load_frozen(cb_path, producer_dir, cons_dir[0], &cb, &prod)) goto done;
        const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
        if (n_patch < 0 || n_patch > ci->n_candidates) n_patch = ci->n_candidates;
        fprintf(stderr, "calibrate: frozen codebook %s (producer %s, %d candidates): fitting pairs only\n",
                ci->id_hex, ci->producer, ci->n_candidates);
    } else if ((rc = scdb_model_load(producer_dir, &prod, err, sizeof err))) {
        fprintf(stderr, "calibrate: %s: %s (%s)\n", producer_dir, err, scdb_strerror(rc));
        goto done;
    }
    for (int i = 0; i < n_cons; i++)
        if ((rc = scdb_model_load(cons_dir[i], &cons[i], err, sizeof err))) {
            fprintf(stderr, "calibrate: %s: %s (%s)\n", cons_dir[i], err, scdb_strerror(rc));
            goto done;
        }
    const scdb_model_config *pc = scdb_model_cfg(prod);
    if (pick_engine(engine, prod, cons, n_cons, &use_llama)) {
        ret = 2;
        goto done;
    }
    if (use_llama) {
#ifdef SCDB_HAVE_LLAMA
        int n_ctx = window > 320 + 64 + 1 ? window : 320 + 64 + 1;
        if (dev_pref == SCDB_DEVPREF_CUDA) {
            fprintf(stderr, "calibrate: --engine llama.cpp runs the session on the cpu (--device cpu or auto)\n");
            ret = 2;
            goto done;
        }
        dev = SCDB_DEV_CPU;
        if (open_llama_states(prod, cons, n_cons, n_ctx, &lls)) {
            ret = 2;
            goto done;
        }
        byte_tokens = scdb_llama_states_byte_vocab(lls);
        if (!byte_tokens) span_unit = "tokens";
#endif
    } else {
        fprintf(stderr, "calibrate: states in scdb's reference engine, text cut into byte windows\n");
    }
    /* With a frozen codebook the consumers take one session slot in turn
     * (scdb_calib_swap_consumer): the producer's states over the statistics
     * windows are computed once for all of them, and each consumer keeps
     * only its samples (its all-layers decoders and aligners are fitted on
     * them), so memory does not grow with the fleet. */
    int slots = cb ? 1 : n_cons;
    /* adapters added to a fleet (--shared) without a text option: statistics
     * from each one's own domain and a sample of the fleet's (fleet_text) */
    int adding = lora && shared_path && !domains_opt && n_texts == 0 && !windows_set;
    if (adding) {
        if (own_windows < 0) own_windows = 24;
        if (fleet_windows < 0) fleet_windows = 4;
        if (!stride) stride = 4;
    }
    scdb_calib_opts o = {.window = window, .n_eval = n_eval, .samples_only = cb && all_layers,
                         .sample_stride = stride, .verbose = 1};
    if (cb && n_cons > 1 && dev != SCDB_DEV_CPU) {
        fprintf(stderr, "calibrate: several consumers against a frozen codebook run on the cpu only "
                "(--device cpu, or one consumer per run)\n");
        goto done;
    }
    int need = 320 + 64 + 1;
    size_t want = (size_t)window * (size_t)windows;
    if (domains_opt) {
        if (n_texts > 0) {
            fprintf(stderr, "calibrate: --domains and --texts both choose the statistics text: give one\n");
            goto done;
        }
        if (pick_domains(prod, domains_opt, &dstore.td)) goto done;
        dstore.share = want / (size_t)dstore.td.n + (size_t)window;
        dd = &dstore;
        fprintf(stderr, "calibrate: statistics over %d training domains (%s), %zu bytes each\n",
                dd->td.n, domains_opt, dd->share);
    }
    /* every consumer's text, before any work (issue 42) */
    int per_text = n_texts > 0 ? (windows + n_texts - 1) / n_texts : 0;
    if (plan_texts(prod, cons, n_cons, lora, adding, dd, texts, n_texts, hb_path, (size_t)per_text * (size_t)window,
                   window, n_eval, need, own, &op) ||
        texts_overlap_own(cons, n_cons, lora, dd, own, texts, n_texts, (size_t)per_text * (size_t)window, &op, n_eval,
                          need)) {
        ret = 2;
        goto done;
    }
    if (!byte_tokens && op.texts_i >= 0) {
        /* the statistics' share and the held-back span are counted in bytes
         * of the one file; in tokens of a vocabulary of its own they would
         * overlap */
        fprintf(stderr, "calibrate: with a vocabulary of its own the held-back KL windows are counted in tokens: "
                "pass --heldback-text FILE, a file that is not among --texts\n");
        ret = 2;
        goto done;
    }
    if ((rc = scdb_calib_new(prod, (const scdb_model *const *)cons, slots, &o, &cal))) {
        fprintf(stderr, "calibrate: %s (consumers must share the producer's architecture)\n",
                scdb_strerror(rc));
        goto done;
    }
#ifdef SCDB_HAVE_LLAMA
    if (lls) {
        scdb_calib_engine ce;
        scdb_llama_states_engine(lls, &ce);
        if ((rc = scdb_calib_set_engine(cal, &ce))) {
            fprintf(stderr, "calibrate: llama.cpp states: %s\n", scdb_strerror(rc));
            goto done;
        }
    }
#endif
    /* the CPU is the host path itself; a device gets the heavy parts */
    if (dev != SCDB_DEV_CPU && (rc = scdb_calib_set_device(cal, dev))) {
        fprintf(stderr, "calibrate: cannot use the %s: %s\n", scdb_device_name(dev),
                scdb_strerror(rc));
        goto done;
    }
    /* held-back KL windows: end of each consumer's held-out first half
     * (with a frozen codebook each consumer's are added in its turn; lora
     * pairs take theirs from the training text; a consumer with no text of
     * its own here, the operator's: plan_texts) */
    size_t reserve[MAX_CONS] = {0};
    for (int i = 0; i < n_cons && !lora; i++)
        if (heldback_windows(cb ? NULL : cal, i, cons[i], 0, own[i], &op, n_eval, need, dd, &reserve[i]))
            goto done;

    /* statistics windows */
    if (adding) {
        if (fleet_text(cal, prod, cons, n_cons, own_windows, fleet_windows, window, t0)) goto done;
    } else if (dd) {
        int per = (windows + dd->td.n - 1) / dd->td.n;
        for (int k = 0; k < dd->td.n; k++) {
            unsigned char *t = NULL;
            size_t len;
            char desc[512];
            int added;
            double tk = scdb_now();
            rc = scdb_codec_training_text(dd->td.json[k], dd->td.name[k], dd->share, DOMAIN_PER_FILE, &t,
                                          &len, desc, sizeof desc);
            if (rc) {
                fprintf(stderr, "calibrate: no training text for domain '%s' (%s)\n", dd->td.name[k],
                        scdb_strerror(rc));
                goto done;
            }
            rc = scdb_calib_add_text(cal, t, len, per, &added);
            free(t);
            if (rc) { fprintf(stderr, "calibrate: %s\n", scdb_strerror(rc)); goto done; }
            fprintf(stderr, "calibrate: domain %d/%d '%s': %d windows, %s (%.1f s; %.1f s in all)\n", k + 1,
                    dd->td.n, dd->td.name[k], added, desc, scdb_now() - tk, scdb_now() - t0);
        }
    } else if (n_texts > 0) {
        for (int i = 0; i < n_texts; i++) {
            unsigned char *t;
            size_t len;
            int added;
            /* bytes are tokens: the share's bytes; else the file, of
             * which add_text takes per_text windows of tokens */
            size_t cap = byte_tokens ? (size_t)per_text * window : (size_t)1 << 30;
            if ((rc = scdb_codec_read_text(texts[i], cap, &t, &len))) {
                fprintf(stderr, "calibrate: %s: %s\n", texts[i], scdb_strerror(rc));
                goto done;
            }
            /* the held-back windows' bytes stay out of the statistics */
            int cut = i == op.texts_i && len > op.stats_cap;
            if (cut) len = op.stats_cap;
            fprintf(stderr, "calibrate: statistics from %s (%zu bytes%s)\n", texts[i], len,
                    cut || i == op.texts_i ? "; held-back text after them, kept out" : "");
            rc = scdb_calib_add_text(cal, t, len, per_text, &added);
            free(t);
            if (rc) { fprintf(stderr, "calibrate: %s\n", scdb_strerror(rc)); goto done; }
        }
    } else {
        /* one share per distinct domain among producer + consumers */
        const scdb_model *dm[MAX_CONS + 1];
        int nd = 0;
        const scdb_model *all[MAX_CONS + 1];
        all[0] = prod;
        for (int i = 0; i < n_cons; i++) all[i + 1] = cons[i];
        for (int i = 0; i <= n_cons; i++) {
            int dup = 0;
            for (int k = 0; k < nd; k++)
                dup |= !strcmp(scdb_codec_text_domain(dm[k]), scdb_codec_text_domain(all[i]));
            if (!dup) dm[nd++] = all[i];
        }
        int per = (windows + nd - 1) / nd;
        for (int k = 0; k < nd; k++) {
            unsigned char *t = NULL;
            size_t len;
            char desc[512];
            int added;
            rc = scdb_codec_domain_text(dm[k], SCDB_TEXT_TRAIN, want / nd + window, &t, &len, desc, sizeof desc);
            if (rc) {
                /* fall back to the held-out first half, minus the KL windows */
                rc = scdb_codec_domain_text(dm[k], SCDB_TEXT_HELDOUT_FIRST, (size_t)1 << 30, &t, &len,
                                            desc, sizeof desc);
                if (rc) {
                    fprintf(stderr, "calibrate: no calibration text for domain '%s' (%s)\n",
                            scdb_codec_text_domain(dm[k]), scdb_strerror(rc));
                    goto done;
                }
                for (int i = 0; i < n_cons; i++)
                    if (!strcmp(scdb_codec_text_domain(cons[i]), scdb_codec_text_domain(dm[k])) &&
                        len > reserve[i])
                        len -= reserve[i];
            }
            fprintf(stderr, "calibrate: statistics for domain '%s': %s\n",
                    scdb_codec_text_domain(dm[k]), desc);
            rc = scdb_calib_add_text(cal, t, len, per, &added);
            free(t);
            if (rc) { fprintf(stderr, "calibrate: %s\n", scdb_strerror(rc)); goto done; }
            if (added < per)
                fprintf(stderr, "calibrate: only %d windows from domain '%s'\n", added,
                        scdb_codec_text_domain(dm[k]));
        }
    }
    if (scdb_calib_windows(cal) == 0) {
        fprintf(stderr, "calibrate: the statistics text gives no window of %d tokens%s\n", window,
                n_texts ? " (--texts: longer text, or a shorter --window)" : "");
        ret = 2;
        goto done;
    }
    double t_stats = scdb_now() - t0, cpu_stats = (double)(clock() - c0) / CLOCKS_PER_SEC;
    fprintf(stderr, "calibrate: %d statistics windows (%.1f s, cpu %.1f s)\n", scdb_calib_windows(cal), t_stats,
            cpu_stats);

    char dir[1200], path[1400];
    if (!cb) {
        scdb_cb_fit f = {.r_k = ranks[0], .r_v = ranks[1], .r_h = ranks[2], .n_candidates = n_cand,
                         .candidates = n_fixed > 0 ? fixed : NULL, .candidate_kv = cand_kv,
                         .token_layer0 = token0, .pca = pca, .k_post_rope = post, .budget = budget};
        if ((rc = scdb_calib_fit_codebook(cal, &f, &cb))) {
            fprintf(stderr, "calibrate: codebook: %s\n", scdb_strerror(rc));
            goto done;
        }
        if (mkdirs(outdir, "codebooks", dir, sizeof dir)) { fprintf(stderr, "calibrate: cannot create %s\n", dir); goto done; }
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, pc->name);
        if ((rc = scdb_codebook_save(cb, path))) { fprintf(stderr, "calibrate: %s: %s\n", path, scdb_strerror(rc)); goto done; }
    }
    const scdb_codebook_info *ci = scdb_codebook_get_info(cb);
    size_t raw = (size_t)pc->n_layers * 2 * scdb_model_kv_dim(pc) * 2;
    printf("codebook %s  producer %s  method %s  K %s-RoPE%s\n", ci->id_hex, pc->name, ci->method,
           ci->k_post_rope ? "post" : "pre", cb_path ? "  (frozen: not rewritten)" : "");
    printf("  code_dim %d f16 = %zu bytes/token (raw f16 KV %zu: 1/%.1f)\n", ci->code_dim,
           scdb_codebook_token_bytes(cb), raw, (double)raw / (double)scdb_codebook_token_bytes(cb));
    printf("  layers:");
    for (int l = 0; l < ci->n_layers; l++) {
        const scdb_cb_layer *L = &ci->layers[l];
        if (L->kind == SCDB_CB_TOKENS) printf(" %d:tokens", l);
        else printf(" %d:k%d/v%d/h%d", l, L->r_k, L->r_v, L->r_h);
    }
    printf("\n  candidates:");
    for (int k = 0; k < ci->n_candidates; k++) printf(" %d", ci->candidates[k]);
    printf("\n  %s %s\n", cb_path ? "read" : "written", cb_path ? cb_path : path);
    if (mkdirs(outdir, "pairs", dir, sizeof dir)) { fprintf(stderr, "calibrate: cannot create %s\n", dir); goto done; }
    /* token input: where the decoders are fitted on samples and h0 exists */
    if (tok_in && (!all_layers || ci->layers[0].kind != SCDB_CB_TOKENS || ci->k_post_rope)) {
        fprintf(stderr, "calibrate: no token input (%s)\n", !all_layers ? "--own-layer decoders" :
                ci->k_post_rope ? "K coded after RoPE" : "the codebook's layer 0 is coded, not a token layer");
        tok_in = 0;
    }
    if (lora) {
        if (lora_fleet(cal, cb, prod, cons, n_cons, shared_path, dir, n_eval, need, n_patch, hidden, steps, dec_rank,
                       align_rank, tok_in, tok_corr, own, &op, t0, t_stats, cpu_stats))
            goto done;
        printf("calibrated in %.1f s\n", scdb_now() - t0);
        ret = 0;
        goto done;
    }
    double cons_s[MAX_CONS] = {0};
    for (int i = (identity ? -1 : 0); i < n_cons; i++) {
        scdb_pair *p = NULL;
        scdb_pair_fit pf = {.n_patch = n_patch, .hidden = hidden, .steps = steps, .no_train = i < 0,
                            .all_layers = all_layers, .token_input = tok_in};
        const char *cname = i < 0 ? pc->name : scdb_model_cfg(cons[i])->name;
        int slot = cb_path && i >= 0 ? 0 : i;   /* a frozen codebook's consumers share slot 0 */
        double tc = scdb_now();
        clock_t cc = clock();
        if (cb_path) {
            fprintf(stderr, "calibrate: consumer %d/%d '%s' (%.1f s)\n", i + 1, n_cons, cname, tc - t0);
            if (i > 0 && (rc = scdb_calib_swap_consumer(cal, 0, cons[i]))) {
                fprintf(stderr, "calibrate: consumer '%s': %s\n", cname, scdb_strerror(rc));
                goto done;
            }
            if (heldback_windows(cal, 0, cons[i], 0, own[i], &op, n_eval, need, dd, &reserve[i])) goto done;
        }
        fprintf(stderr, "calibrate: pair %s -> %s (%.1f s)\n", pc->name, cname, scdb_now() - t0);
        if ((rc = scdb_calib_fit_pair(cal, cb, slot, &pf, &p))) {
            fprintf(stderr, "calibrate: pair %s -> %s: %s\n", pc->name, cname, scdb_strerror(rc));
            goto done;
        }
        snprintf(path, sizeof path, "%s/%s__%s.safetensors", dir, pc->name, cname);
        rc = scdb_pair_save(p, path);
        const scdb_pair_info *pi = scdb_pair_get_info(p);
        printf("pair %s -> %s: patch order", pc->name, cname);
        for (int k = 0; k < pi->n_aligners; k++) printf(" %d", pi->patch_order[k]);
        printf(" (default budget %d)%s%s", pi->n_patch, pi->late_added ? ", late-added" : "",
               pi->token_input ? ", token input" : "");
        if (i >= 0) {
            double kl0, t10, kl, t1;
            if (!scdb_calib_eval(cal, cb, p, slot, 0, &kl0, &t10) &&
                !scdb_calib_eval(cal, cb, p, slot, -1, &kl, &t1))
                printf("; held-back KL reuse %.4f (top-1 %.3f) -> full %.4f (top-1 %.3f)", kl0,
                       t10, kl, t1);
        }
        printf("\n  written %s\n", path);
        scdb_pair_free(&p);
        if (rc) { fprintf(stderr, "calibrate: %s: %s\n", path, scdb_strerror(rc)); goto done; }
        if (i >= 0) {
            cons_s[i] = scdb_now() - tc;
            if (cb_path)
                printf("  consumer %s: %.1f s (cpu %.1f s; its states over the windows, held-back windows, pair)\n",
                       cname, cons_s[i], (double)(clock() - cc) / CLOCKS_PER_SEC);
        }
    }
    if (cb_path) {
        /* the first consumer's states were computed with the producer's */
        double sum = 0;
        for (int i = 0; i < n_cons; i++) sum += cons_s[i];
        printf("producer states over %d windows computed once (%d producer passes) for %d consumer%s: "
               "statistics %.1f s, consumers %.1f s (mean %.1f s each after the statistics)\n",
               scdb_calib_windows(cal), scdb_calib_producer_passes(cal), n_cons, n_cons == 1 ? "" : "s",
               t_stats, sum, sum / n_cons);
    }
    printf("calibrated in %.1f s\n", scdb_now() - t0);
    ret = 0;
done:
    free(op.t);
    scdb_codebook_free(&cb);
    scdb_calib_free(&cal);
#ifdef SCDB_HAVE_LLAMA
    /* what llama.cpp's side said, if a call of the session's failed there */
    if (ret && lls && *scdb_llama_states_error(lls))
        fprintf(stderr, "calibrate: llama.cpp: %s\n", scdb_llama_states_error(lls));
    scdb_llama_states_free(&lls);
#endif
    for (int i = 0; i < n_cons; i++) scdb_model_free(&cons[i]);
    scdb_model_free(&prod);
    return ret;
}
