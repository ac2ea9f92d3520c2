/* cmd_models.c — `scdb models`: the model family report.
 *
 * For every model under DATA/models (a directory with config.json), the
 * held-out bits-per-byte on every domain text under DATA/heldout/<domain>.txt,
 * a markdown table, the specialisation checks (each specialist beats base on
 * its own domain; base beats each specialist on general English), and
 * optional JSON: {"models":[{"name":...,"bpb":{"<domain>":...}}],
 * "domains":[...]}.  The family's domains are english, code, manpages and
 * python (the specialist added later); a model directory in either
 * checkpoint layout (own or Hugging Face) is scored. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "bench.h"
#include "scdb_cli.h"

#define MAX_ITEMS 32

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of entries in dir that have `probe` (e.g. "config.json")
 * inside (probe NULL: regular files ending in suffix). */
static int list_dir(const char *dir, const char *probe, const char *suffix,
                    char **names, int max)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) && n < max) {
        char path[2048];
        FILE *f;
        if (e->d_name[0] == '.') continue;
        if (probe) {
            if (snprintf(path, sizeof path, "%s/%s/%s", dir, e->d_name, probe) >= (int)sizeof path)
                continue;
            if (!(f = fopen(path, "r"))) continue;
            fclose(f);
            names[n++] = strdup(e->d_name);
        } else {
            size_t l = strlen(e->d_name), sl = strlen(suffix);
            if (l > sl && !strcmp(e->d_name + l - sl, suffix))
                names[n++] = strndup(e->d_name, l - sl);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    return n;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb models [--data DIR] [--max-bytes N] [--json FILE]\n\n"
            "Held-out bits-per-byte (lower is better) of every model under DIR/models\n"
            "on every domain text DIR/heldout/<domain>.txt, and the specialisation\n"
            "checks: each specialist beats base on its own domain, base beats every\n"
            "specialist on general English.  Exit status 1 if a check fails.\n\n"
            "  --data DIR       asset directory (default: %s)\n"
            "  --max-bytes N    bytes of each held-out text to score (default 32768)\n"
            "  --window N       context window in bytes (default: the model's max_seq_len)\n"
            "  --json FILE      also write {\"models\":[{\"name\":..,\"bpb\":{domain: bpb}}],\n"
            "                   \"domains\":[..]}\n"
            "  -h, --help       this text\n",
            cli_data_dir());
}

int cli_cmd_models(int argc, char **argv)
{
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'}, {"max-bytes", required_argument, 0, 'm'},
        {"json", required_argument, 0, 'j'}, {"window", required_argument, 0, 'w'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *data = cli_data_dir(), *json_path = NULL;
    long max_bytes = 32768, window = 0;
    char *models[MAX_ITEMS], *domains[MAX_ITEMS];
    double bpb[MAX_ITEMS][MAX_ITEMS];
    scdb_model_config cfgs[MAX_ITEMS];
    int nm, nd, c, rc = 1;
    char dir[2048], err[512];

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char why[160];
        int64_t v = 0;
        scdb_err bad = SCDB_OK;
        switch (c) {
        case 'd': data = optarg; break;
        case 'j': json_path = optarg; break;
        case 'm':
            if (!(bad = scdb_parse_i64("--max-bytes", optarg, 2, LONG_MAX, &v, why, sizeof why)))
                max_bytes = (long)v;
            break;
        case 'w':
            if (!(bad = scdb_parse_i64("--window", optarg, 0, INT_MAX, &v, why, sizeof why)))
                window = (long)v;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (bad) {
            fprintf(stderr, "scdb models: %s\n", why);
            return 2;
        }
    }
    if (optind < argc || max_bytes < 2 || window < 0) { usage(stderr); return 2; }

    snprintf(dir, sizeof dir, "%s/models", data);
    nm = list_dir(dir, "config.json", NULL, models, MAX_ITEMS);
    if (nm <= 0) { fprintf(stderr, "scdb models: no models under %s\n", dir); return 1; }
    snprintf(dir, sizeof dir, "%s/heldout", data);
    nd = list_dir(dir, NULL, ".txt", domains, MAX_ITEMS);
    if (nd <= 0) { fprintf(stderr, "scdb models: no held-out texts under %s\n", dir); return 1; }

    scdb_progress prog;
    scdb_progress_begin(&prog, stderr, (long)nm * nd);
    for (int i = 0; i < nm; i++) {
        scdb_model *m;
        snprintf(dir, sizeof dir, "%s/models/%s", data, models[i]);
        scdb_err e = scdb_model_load(dir, &m, err, sizeof err);
        if (e) {
            scdb_progress_end(&prog);
            fprintf(stderr, "scdb models: %s: %s (%s)\n", dir, err, scdb_strerror(e));
            goto done;
        }
        cfgs[i] = *scdb_model_cfg(m);
        for (int j = 0; j < nd; j++) {
            char path[2048], *text;
            size_t len;
            scdb_model_heldout_path(data, domains[j], path, sizeof path);
            if ((e = scdb_read_file(path, 1 << 30, &text, &len))) {
                scdb_progress_end(&prog);
                fprintf(stderr, "scdb models: %s: %s\n", path, scdb_strerror(e));
                scdb_model_free(&m);
                goto done;
            }
            /* the step being started: a long one is on screen while it runs */
            scdb_progress_step(&prog, (long)i * nd + j, "  scoring %s on %s (%ld/%ld)", models[i], domains[j],
                               (long)i * nd + j + 1, (long)nm * nd);
            e = scdb_model_bpb(m, (unsigned char *)text, len,
                               window ? (int)window : cfgs[i].max_seq_len,
                               (size_t)max_bytes, &bpb[i][j]);
            free(text);
            if (e) {
                scdb_progress_end(&prog);
                fprintf(stderr, "scdb models: %s on %s: %s\n", models[i], domains[j], scdb_strerror(e));
                scdb_model_free(&m);
                goto done;
            }
        }
        scdb_model_free(&m);
    }
    scdb_progress_end(&prog);

    printf("Held-out bits per byte (lower is better; %ld bytes per domain):\n\n", max_bytes);
    printf("| model | fine-tune |");
    for (int j = 0; j < nd; j++) printf(" %s |", domains[j]);
    printf("\n|---|---|");
    for (int j = 0; j < nd; j++) printf("---|");
    printf("\n");
    for (int i = 0; i < nm; i++) {
        printf("| %s | %s |", models[i], cfgs[i].finetune[0] ? cfgs[i].finetune : "-");
        for (int j = 0; j < nd; j++) printf(" %.3f |", bpb[i][j]);
        printf("\n");
    }

    /* specialisation checks */
    int base = -1, english = -1, ok = 1;
    for (int i = 0; i < nm; i++) if (!cfgs[i].parent[0]) base = i;
    for (int j = 0; j < nd; j++) if (!strcmp(domains[j], "english")) english = j;
    printf("\n");
    if (base < 0) {
        printf("check: no base model (a model without a parent) found\n");
        ok = 0;
    }
    for (int i = 0; base >= 0 && i < nm; i++) {
        if (i == base) continue;
        int own = -1;
        for (int j = 0; j < nd; j++) if (!strcmp(domains[j], cfgs[i].domain)) own = j;
        if (own < 0) {
            printf("check: %s: no held-out text for its domain '%s'\n", models[i], cfgs[i].domain);
            ok = 0;
            continue;
        }
        int win = bpb[i][own] < bpb[base][own];
        printf("check: %-9s beats %s on %-9s %.3f vs %.3f bpb (%+.1f%%)  %s\n", models[i],
               models[base], cfgs[i].domain, bpb[i][own], bpb[base][own],
               100.0 * (bpb[i][own] / bpb[base][own] - 1.0), win ? "ok" : "FAILED");
        ok &= win;
        if (english >= 0) {
            win = bpb[base][english] < bpb[i][english];
            printf("check: %-9s beats %s on %-9s %.3f vs %.3f bpb (%+.1f%%)  %s\n", models[base],
                   models[i], "english", bpb[base][english], bpb[i][english],
                   100.0 * (bpb[base][english] / bpb[i][english] - 1.0), win ? "ok" : "FAILED");
            ok &= win;
        }
    }

    if (json_path) {
        cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "models");
        for (int i = 0; i < nm; i++) {
            cJSON *o = cJSON_CreateObject(), *b = cJSON_AddObjectToObject(o, "bpb");
            cJSON_AddStringToObject(o, "name", models[i]);
            cJSON_AddStringToObject(o, "domain", cfgs[i].domain);
            cJSON_AddStringToObject(o, "finetune", cfgs[i].finetune);
            for (int j = 0; j < nd; j++) cJSON_AddNumberToObject(b, domains[j], bpb[i][j]);
            cJSON_AddItemToArray(arr, o);
        }
        cJSON *jd = cJSON_AddArrayToObject(root, "domains");
        for (int j = 0; j < nd; j++) cJSON_AddItemToArray(jd, cJSON_CreateString(domains[j]));
        cJSON_AddNumberToObject(root, "max_bytes", (double)max_bytes);
        cJSON_AddBoolToObject(root, "specialisation_ok", ok);
        int bad = scdb_bench_write_json(json_path, root, "scdb models");
        cJSON_Delete(root);
        if (bad) goto done;
    }
    rc = ok ? 0 : 1;
done:
    for (int i = 0; i < nm; i++) free(models[i]);
    for (int j = 0; j < nd; j++) free(domains[j]);
    return rc;
}
