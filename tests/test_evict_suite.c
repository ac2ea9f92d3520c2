/* test_evict_suite.c — the eviction suite (evict.h, "Domain suite"), the
 * learned policy's version-3 inputs and the trainer's reward: the selection
 * rule agrees with tools/evict_suite.py on known paths and is
 * deterministic; the shipped manifest matches the shipped texts chunk by
 * chunk, its portions and domains are disjoint, the split is the fixed one
 * and no suite file is one the model family was trained or held out on;
 * damaged suites are refused; the rank / age inputs on a constructed
 * attention pattern (a network reading one rank input keeps what that
 * heuristic keeps); version-3 policy files round-trip and bad ones are
 * refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "evict_train.h"
#include "evict_internal.h"
#include "helpers/assert_close.h"
#include "model.h"
#include "safetensors.h"

#define MANIFEST SCDB_DATA_DIR "/evict_suite/manifest.json"

static char tmpdir[256];

static int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/scdb_test_evict_suite_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ the rule */

static void test_rule_matches_python(void **state)
{
    (void)state;
    /* computed with Python's zlib.crc32, as tools/evict_suite.py does */
    static const struct { const char *path; scdb_evict_part part; uint32_t order; } want[] = {
        {"/usr/share/man/man1/tail.1.gz", SCDB_EVICT_PART_EVAL, 0x004ecab3u},
        {"/usr/share/doc/git/README.md", SCDB_EVICT_PART_EVAL, 0xcc527978u},
        {"/etc/adduser.conf", SCDB_EVICT_PART_EVAL, 0x5a29b175u},
        {"/usr/share/vim/vim90/syntax/c.vim", SCDB_EVICT_PART_TRAIN, 0xd3bf2d3du},
        {"/usr/lib/python3/dist-packages/yaml/parser.py", SCDB_EVICT_PART_TRAIN, 0x1ee4839eu},
        {"/a", SCDB_EVICT_PART_TRAIN, 0x15ca78ffu},
        {"", SCDB_EVICT_PART_EVAL, 0xea2f04dau},
    };
    assert_int_equal(scdb_evict_crc32("123456789", 9), 0xCBF43926u);
    assert_int_equal(scdb_evict_crc32("", 0), 0u);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(scdb_evict_suite_part_of(want[i].path), want[i].part);
        assert_int_equal(scdb_evict_suite_order_key(want[i].path), want[i].order);
        /* deterministic: a second call agrees */
        assert_int_equal(scdb_evict_suite_part_of(want[i].path), want[i].part);
    }
    assert_string_equal(scdb_evict_part_name(SCDB_EVICT_PART_TRAIN), "train");
    assert_string_equal(scdb_evict_part_name(SCDB_EVICT_PART_VAL), "val");
    assert_string_equal(scdb_evict_part_name(SCDB_EVICT_PART_EVAL), "eval");
    assert_null(scdb_evict_part_name(SCDB_EVICT_N_PARTS));

    /* the rule's three portions over many paths: about 2/8, 1/8, 5/8 */
    int cnt[SCDB_EVICT_N_PARTS] = {0};
    char p[64];
    for (int i = 0; i < 8000; i++) {
        snprintf(p, sizeof p, "/usr/share/doc/pkg%d/README", i);
        cnt[scdb_evict_suite_part_of(p)]++;
    }
    assert_true(cnt[SCDB_EVICT_PART_EVAL] > 1800 && cnt[SCDB_EVICT_PART_EVAL] < 2200);
    assert_true(cnt[SCDB_EVICT_PART_VAL] > 850 && cnt[SCDB_EVICT_PART_VAL] < 1150);
    assert_true(cnt[SCDB_EVICT_PART_TRAIN] > 4700 && cnt[SCDB_EVICT_PART_TRAIN] < 5300);
}

/* ------------------------------------------------------------ the shipped suite */

static void test_shipped_suite(void **state)
{
    (void)state;
    scdb_evict_suite *s = NULL;
    char err[512] = "";
    /* the split is fixed: changing it must be a deliberate change here */
    static const char *const seen[] = {"prose", "man1", "c-source", "python", "shell",
                                       "config", "html"};
    static const char *const unseen[] = {"changelog", "man5", "man8", "c-header", "perl",
                                         "cmake", "vim"};
    assert_int_equal(scdb_evict_suite_load(MANIFEST, &s, err, sizeof err), SCDB_OK);
    assert_int_equal(s->n_domains, 14);
    for (size_t i = 0; i < 7; i++) {
        int a = scdb_evict_suite_find(s, seen[i]), b = scdb_evict_suite_find(s, unseen[i]);
        assert_true(a >= 0 && b >= 0);
        assert_true(s->domains[a].seen);
        assert_false(s->domains[b].seen);
    }
    assert_int_equal(scdb_evict_suite_find(s, "no-such-domain"), -1);
    scdb_err rc = scdb_evict_suite_verify(s, err, sizeof err);
    if (rc) fprintf(stderr, "verify: %s\n", err);
    assert_int_equal(rc, SCDB_OK);

    /* each text is big enough for the bench's windows (513 bytes, 8 of them
     * evenly spaced) and the portions' files are disjoint by the rule */
    for (int i = 0; i < s->n_domains; i++)
        for (int p = 0; p < SCDB_EVICT_N_PARTS; p++) {
            const scdb_evict_suite_portion *q = &s->domains[i].part[p];
            if (!q->present) continue;
            assert_true(q->bytes >= 16 * 1024);
            assert_true(q->n_files >= 5);
            char *text = NULL;
            size_t len = 0;
            assert_int_equal(scdb_evict_suite_read(s, i, (scdb_evict_part)p, &text, &len, err,
                                                   sizeof err), SCDB_OK);
            assert_int_equal(len, q->bytes);
            free(text);
        }
    char *t = NULL;
    size_t l = 0;
    int u = scdb_evict_suite_find(s, "perl");
    assert_int_equal(scdb_evict_suite_read(s, u, SCDB_EVICT_PART_TRAIN, &t, &l, err, sizeof err),
                     SCDB_ENOTFOUND);

    /* no file the model family trained or was held out on, nothing of the
     * standard library the `python` model trains on */
    char *tj = NULL;
    size_t tl = 0;
    assert_int_equal(scdb_read_file(SCDB_DATA_DIR "/models/TRAINING.json", 64u << 20, &tj, &tl),
                     SCDB_OK);
    cJSON *doc = cJSON_ParseWithLength(tj, tl);
    free(tj);
    assert_non_null(doc);
    cJSON *doms = cJSON_GetObjectItem(doc, "domains"), *d;
    int checked = 0;
    cJSON_ArrayForEach(d, doms) {
        const char *lists[] = {"train_files", "heldout_files"};
        for (int k = 0; k < 2; k++) {
            cJSON *f;
            cJSON_ArrayForEach(f, cJSON_GetObjectItem(d, lists[k])) {
                for (int i = 0; i < s->n_domains; i++)
                    for (int p = 0; p < SCDB_EVICT_N_PARTS; p++)
                        for (int j = 0; j < s->domains[i].part[p].n_files; j++)
                            assert_string_not_equal(s->domains[i].part[p].files[j].path,
                                                    f->valuestring);
                checked++;
            }
        }
    }
    assert_true(checked > 1000);
    cJSON_Delete(doc);
    for (int i = 0; i < s->n_domains; i++)
        for (int p = 0; p < SCDB_EVICT_N_PARTS; p++)
            for (int j = 0; j < s->domains[i].part[p].n_files; j++)
                assert_null(strstr(s->domains[i].part[p].files[j].path, "/usr/lib/python3.11/"));
    scdb_evict_suite_free(&s);
    scdb_evict_suite_free(&s);   /* NULLed: a second free is harmless */
}

/* ------------------------------------------------------------ damaged suites */

/* Copy the shipped suite into tmpdir/name with the manifest passed through
 * edit (which may change the parsed document) and, if flip_text, one byte
 * of prose.eval.txt flipped; returns the new manifest's path. */
static void copy_suite(const char *name, void (*edit)(cJSON *), int flip_text, char *out,
                       size_t outlen)
{
    char dir[512], cmd[1400];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp " SCDB_DATA_DIR "/evict_suite/*.txt '%s'/",
             dir, dir);
    assert_int_equal(system(cmd), 0);
    char *txt = NULL;
    size_t len = 0;
    assert_int_equal(scdb_read_file(MANIFEST, 64u << 20, &txt, &len), SCDB_OK);
    cJSON *doc = cJSON_ParseWithLength(txt, len);
    free(txt);
    assert_non_null(doc);
    if (edit) edit(doc);
    char *js = cJSON_Print(doc);
    cJSON_Delete(doc);
    snprintf(out, outlen, "%s/manifest.json", dir);
    FILE *f = fopen(out, "w");
    assert_non_null(f);
    fputs(js, f);
    fclose(f);
    free(js);
    if (flip_text) {
        char p[600];
        snprintf(p, sizeof p, "%s/prose.eval.txt", dir);
        f = fopen(p, "r+b");
        assert_non_null(f);
        fseek(f, 5000, SEEK_SET);
        int c = fgetc(f);
        fseek(f, 5000, SEEK_SET);
        fputc(c ^ 1, f);
        fclose(f);
    }
}

static cJSON *domain_named(cJSON *doc, const char *name)
{
    cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItem(doc, "domains"))
        if (!strcmp(cJSON_GetObjectItem(d, "name")->valuestring, name)) return d;
    return NULL;
}

static cJSON *files_of(cJSON *doc, const char *dom, const char *part)
{
    return cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(domain_named(doc, dom), "portions"), part),
        "files");
}

/* a file recorded in the eval portion that the rule puts elsewhere */
static void edit_wrong_portion(cJSON *doc)
{
    cJSON *f = cJSON_GetArrayItem(files_of(doc, "man1", "eval"), 0);
    cJSON_ReplaceItemInObject(f, "path", cJSON_CreateString("/usr/share/vim/vim90/syntax/c.vim"));
}

/* the same file in two domains (same portion, so only the reuse is wrong) */
static void edit_reused(cJSON *doc)
{
    cJSON *a = cJSON_GetArrayItem(files_of(doc, "man1", "eval"), 0);
    cJSON *b = cJSON_GetArrayItem(files_of(doc, "man5", "eval"), 0);
    cJSON_ReplaceItemInObject(b, "path",
                              cJSON_CreateString(cJSON_GetObjectItem(a, "path")->valuestring));
}

/* two chunks swapped: out of the rule's order and off their places */
static void edit_order(cJSON *doc)
{
    /* the first two files swapped, as copies replacing the originals
     * (cJSON_InsertItemInArray of a detached item leaks it in Debian's
     * cJSON 1.7.15: LeakSanitizer) */
    cJSON *files = files_of(doc, "python", "train");
    cJSON *a = cJSON_Duplicate(cJSON_GetArrayItem(files, 0), 1);
    cJSON *b = cJSON_Duplicate(cJSON_GetArrayItem(files, 1), 1);
    assert_non_null(a);
    assert_non_null(b);
    cJSON_ReplaceItemInArray(files, 0, b);
    cJSON_ReplaceItemInArray(files, 1, a);
}

/* an unseen domain with a training text */
static void edit_unseen_train(cJSON *doc)
{
    cJSON *parts = cJSON_GetObjectItem(domain_named(doc, "perl"), "portions");
    cJSON *train = cJSON_GetObjectItem(cJSON_GetObjectItem(domain_named(doc, "prose"), "portions"),
                                       "train");
    cJSON_AddItemToObject(parts, "train", cJSON_Duplicate(train, 1));
}

static void edit_chunk_crc(cJSON *doc)
{
    cJSON *f = cJSON_GetArrayItem(files_of(doc, "vim", "eval"), 3);
    cJSON_ReplaceItemInObject(f, "crc32", cJSON_CreateNumber(12345));
}

static void test_damaged_suites(void **state)
{
    (void)state;
    static const struct { const char *name; void (*edit)(cJSON *); int flip; } cases[] = {
        {"flipped_byte", NULL, 1},        {"wrong_portion", edit_wrong_portion, 0},
        {"reused_file", edit_reused, 0},  {"order", edit_order, 0},
        {"unseen_train", edit_unseen_train, 0}, {"chunk_crc", edit_chunk_crc, 0},
    };
    char path[700], err[512];
    scdb_evict_suite *s = NULL;

    copy_suite("intact", NULL, 0, path, sizeof path);
    assert_int_equal(scdb_evict_suite_load(path, &s, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_evict_suite_verify(s, err, sizeof err), SCDB_OK);
    scdb_evict_suite_free(&s);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        copy_suite(cases[i].name, cases[i].edit, cases[i].flip, path, sizeof path);
        assert_int_equal(scdb_evict_suite_load(path, &s, err, sizeof err), SCDB_OK);
        assert_int_equal(scdb_evict_suite_verify(s, err, sizeof err), SCDB_EMISMATCH);
        assert_true(err[0] != 0);
        scdb_evict_suite_free(&s);
    }
    /* a flipped byte is also caught when the bench reads the text */
    copy_suite("flipped_read", NULL, 1, path, sizeof path);
    assert_int_equal(scdb_evict_suite_load(path, &s, err, sizeof err), SCDB_OK);
    char *t = NULL;
    size_t l = 0;
    assert_int_equal(scdb_evict_suite_read(s, scdb_evict_suite_find(s, "prose"), SCDB_EVICT_PART_EVAL,
                                           &t, &l, err, sizeof err), SCDB_EMISMATCH);
    assert_null(t);
    scdb_evict_suite_free(&s);

    /* garbage, truncation, a missing file, a different document */
    static const char *const bad[] = {"", "{", "[]", "{\"suite\":\"other\",\"domains\":[]}",
                                      "{\"suite\":\"scdb-evict-suite\",\"domains\":[{}]}",
                                      "{\"suite\":\"scdb-evict-suite\",\"domains\":[{\"name\":\"x\","
                                      "\"seen\":true,\"portions\":{\"bogus\":{}}}]}",
                                      "{\"suite\":\"scdb-evict-suite\",\"domains\":[{\"name\":\"x\","
                                      "\"seen\":true,\"portions\":{\"eval\":{\"file\":\"../x\","
                                      "\"bytes\":1,\"crc32\":1,\"files\":[]}}}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.json", tmpdir, i);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i], f);
        fclose(f);
        assert_int_equal(scdb_evict_suite_load(path, &s, err, sizeof err), SCDB_EFORMAT);
        assert_null(s);
    }
    snprintf(path, sizeof path, "%s/none.json", tmpdir);
    assert_int_equal(scdb_evict_suite_load(path, &s, err, sizeof err), SCDB_ENOTFOUND);
    assert_int_equal(scdb_evict_suite_load(NULL, &s, err, sizeof err), SCDB_EINVAL);
}


/* ------------------------------------------------------------ version-3 inputs */


/* 12 tokens; query q at pos q sees slots 0..q with weights
 *   1 + 20 [j = 5] + 10 [j = 2] + (q = 11 ? 40 [j = 7] : 0), normalised,
 * identical in both heads (the pattern of test_evict.c's heuristics). */
static void pattern(scdb_kv_cache **cp, scdb_evict_acc **ap)
{
    enum { N = 12 };
    scdb_kv_cache *c = NULL;
    scdb_evict_acc *a = NULL;
    scdb_evict_acc_shape sh = {1, 2, 1, 16, 32, 0};
    assert_int_equal(scdb_kv_cache_new(1, 1, 2, 16, &c), SCDB_OK);
    assert_int_equal(scdb_evict_acc_new(&sh, &a), SCDB_OK);
    static float probs[2][N][N];
    for (int i = 0; i < N; i++) {
        c->pos[i] = i;
        scdb_kv_v(c, 0, i)[0] = 1.0f + 0.1f * i;
    }
    c->n = N;
    memset(probs, 0, sizeof probs);
    for (int q = 0; q < N; q++) {
        float w[N], z = 0;
        for (int j = 0; j <= q; j++) {
            w[j] = 1.0f + 20.0f * (j == 5) + 10.0f * (j == 2) + (q == 11 ? 40.0f * (j == 7) : 0.0f);
            z += w[j];
        }
        for (int h = 0; h < 2; h++)
            for (int j = 0; j <= q; j++) probs[h][q][j] = w[j] / z;
    }
    assert_int_equal(scdb_evict_acc_update(a, c, &probs[0][0][0], N, N), SCDB_OK);
    *cp = c;
    *ap = a;
}

/* a network reading one input, decreasing in it (ranks: lower is better) */
static scdb_evict_mlp *one_input_mlp(int id, float sign)
{
    scdb_evict_mlp *m = NULL;
    assert_int_equal(scdb_evict_mlp_new_inputs(1, &id, 1, 1, &m), SCDB_OK);
    memset(m->params, 0, m->n_params * sizeof *m->params);
    m->w1[0] = sign;
    m->w2[0] = 1.0f;
    m->w3[0] = 1.0f;
    m->sinks = 0;
    m->recent = 0;
    m->recent_frac = 0.5f;   /* the budget / 2 recent slots H2O and SnapKV protect here */
    return m;
}

static void keep_with(const scdb_evict_policy *p, int budget, int *keep, int *nk)
{
    scdb_kv_cache *c;
    scdb_evict_acc *a;
    int32_t map[16];
    pattern(&c, &a);
    assert_int_equal(scdb_evict_run(p, c, a, budget, map, nk), SCDB_OK);
    for (int i = 0; i < *nk; i++) keep[i] = map[i];
    scdb_evict_acc_free(&a);
    scdb_kv_cache_free(&c);
}

static void test_inputs_constructed(void **state)
{
    (void)state;
    enum { N = 12, NA = SCDB_EVICT_N_ALL_INPUTS, B = 6 };
    scdb_kv_cache *c;
    scdb_evict_acc *a;
    float feats[N * SCDB_EVICT_N_FEATURES], x[N * NA];
    pattern(&c, &a);
    assert_int_equal(scdb_evict_features(a, feats), SCDB_OK);
    assert_int_equal(scdb_evict_inputs(a, feats, B, x), SCDB_OK);
    const double lb = log((double)B);
    /* the first seven are the version-2 inputs */
    float v2[SCDB_EVICT_N_INPUTS];
    scdb_evict_mlp_transform(feats + 3 * SCDB_EVICT_N_FEATURES, v2);
    for (int k = 0; k < SCDB_EVICT_N_FEATURES; k++) assert_near(x[3 * NA + k], v2[k], 1e-6);
    assert_near(x[3 * NA + SCDB_EI_BUDGET], lb, 1e-6);
    /* age: the newest slot is 1 slot old, the oldest 12, per budget slot */
    assert_near(x[11 * NA + SCDB_EI_AGE], log(1.0) - lb, 1e-6);
    assert_near(x[0 * NA + SCDB_EI_AGE], log(12.0) - lb, 1e-6);
    /* cumulative mass: slot 2 first, then 5 (test_evict.c), then 0 */
    assert_near(x[2 * NA + SCDB_EI_R_MASS], log(1.0) - lb, 1e-6);
    assert_near(x[5 * NA + SCDB_EI_R_MASS], log(2.0) - lb, 1e-6);
    assert_near(x[0 * NA + SCDB_EI_R_MASS], log(3.0) - lb, 1e-6);
    /* the last query put 40 on slot 7, 20 on 5, 10 on 2 */
    assert_near(x[7 * NA + SCDB_EI_R_LAST], log(1.0) - lb, 1e-6);
    assert_near(x[5 * NA + SCDB_EI_R_LAST], log(2.0) - lb, 1e-6);
    assert_near(x[2 * NA + SCDB_EI_R_LAST], log(3.0) - lb, 1e-6);
    /* each rank input is a permutation of log(1..n) - log B */
    static const int ranks[] = {SCDB_EI_R_MASS, SCDB_EI_R_ALPHA, SCDB_EI_R_WIN, SCDB_EI_R_SNAPKV,
                                SCDB_EI_R_LAST, SCDB_EI_R_LIFE};
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
        int seen[N] = {0};
        for (int i = 0; i < N; i++) {
            int k = (int)lround(exp(x[i * NA + ranks[r]] + lb)) - 1;
            assert_true(k >= 0 && k < N);
            seen[k]++;
        }
        for (int k = 0; k < N; k++) assert_int_equal(seen[k], 1);
    }
    /* per-cache values, the same in every slot; vnorm_z has mean 0 */
    double zs = 0.0;
    for (int i = 0; i < N; i++) {
        assert_near(x[i * NA + SCDB_EI_CTX_N], log(12.0) - lb, 1e-6);
        assert_near(x[i * NA + SCDB_EI_CTX_ENT], x[0 * NA + SCDB_EI_CTX_ENT], 1e-7);
        zs += x[i * NA + SCDB_EI_VNORM_Z];
    }
    assert_near(zs, 0.0, 1e-4);
    assert_true(x[11 * NA + SCDB_EI_VNORM_Z] > x[0 * NA + SCDB_EI_VNORM_Z]);   /* V grows with i */
    /* the budget moves the rank and age inputs, not the order */
    float x2[N * NA];
    assert_int_equal(scdb_evict_inputs(a, feats, 3, x2), SCDB_OK);
    assert_near(x2[2 * NA + SCDB_EI_R_MASS] - x[2 * NA + SCDB_EI_R_MASS], log(2.0), 1e-6);
    assert_int_equal(scdb_evict_inputs(a, feats, 0, x2), SCDB_EINVAL);
    assert_int_equal(scdb_evict_inputs(NULL, feats, 3, x2), SCDB_EINVAL);
    scdb_evict_acc_free(&a);
    scdb_kv_cache_free(&c);

    /* a network reading only H2O's rank keeps H2O's set; SnapKV's rank,
     * SnapKV's set; TOVA's rank with one protected slot, TOVA's set */
    static const struct { int id; scdb_evict_kind kind; int recent; float frac; } same[] = {
        {SCDB_EI_R_MASS, SCDB_EVICT_H2O, 0, 0.5f},
        {SCDB_EI_R_SNAPKV, SCDB_EVICT_SNAPKV, 0, 0.5f},
        {SCDB_EI_R_LAST, SCDB_EVICT_TOVA, 1, 0.0f}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        scdb_evict_mlp *m = one_input_mlp(same[i].id, -1.0f);
        scdb_evict_policy *pl = NULL, *ph = NULL;
        int kl[16], kh[16], nl, nh;
        m->recent = same[i].recent;
        m->recent_frac = same[i].frac;
        assert_int_equal(scdb_evict_policy_from_mlp(m, &pl), SCDB_OK);
        assert_int_equal(scdb_evict_policy_new(same[i].kind, &ph), SCDB_OK);
        keep_with(pl, B, kl, &nl);
        keep_with(ph, B, kh, &nh);
        assert_int_equal(nl, B);
        assert_int_equal(nh, B);
        assert_memory_equal(kl, kh, sizeof(int) * B);
        scdb_evict_policy_free(&pl);
        scdb_evict_policy_free(&ph);
        scdb_evict_mlp_free(&m);
    }
    /* and one reading the age (older = higher) keeps StreamingLLM's oldest
     * slots first: with no protection, the six oldest */
    scdb_evict_mlp *m = one_input_mlp(SCDB_EI_AGE, 1.0f);
    m->recent_frac = 0.0f;
    scdb_evict_policy *pa = NULL;
    int ka[16], na;
    assert_int_equal(scdb_evict_policy_from_mlp(m, &pa), SCDB_OK);
    keep_with(pa, B, ka, &na);
    const int oldest[] = {0, 1, 2, 3, 4, 5};
    assert_memory_equal(ka, oldest, sizeof oldest);
    scdb_evict_policy_free(&pa);
    scdb_evict_mlp_free(&m);

    assert_string_equal(scdb_evict_input_name(SCDB_EI_R_SNAPKV), "rank_snapkv");
    assert_int_equal(scdb_evict_input_parse("rank_snapkv"), SCDB_EI_R_SNAPKV);
    assert_int_equal(scdb_evict_input_parse("nope"), -1);
    assert_null(scdb_evict_input_name(SCDB_EVICT_N_ALL_INPUTS));
    int dup[2] = {SCDB_EI_AGE, SCDB_EI_AGE}, bad = SCDB_EVICT_N_ALL_INPUTS;
    assert_int_equal(scdb_evict_mlp_new_inputs(4, dup, 2, 1, &m), SCDB_EINVAL);
    assert_int_equal(scdb_evict_mlp_new_inputs(4, &bad, 1, 1, &m), SCDB_EINVAL);
    assert_int_equal(scdb_evict_mlp_new_inputs(4, dup, 0, 1, &m), SCDB_EINVAL);
}

/* A version-3 file of m's tensors with the given `features` metadata. */
static void write_v3(const char *path, const scdb_evict_mlp *m, const char *features)
{
    scdb_st_writer *w = NULL;
    int64_t H = m->hidden, N = m->n_in, sn[1] = {N}, s1[1] = {1}, sh[1] = {H}, shn[2] = {H, N},
            shh[2] = {H, H}, s1h[2] = {1, H};
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "format", "scdb-evict-policy"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "version", "3"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "features", features), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "activation", "tanh"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "sinks", "4"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "recent", "8"), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "input.mean", SCDB_F32, 1, sn, m->in_mean), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "input.std", SCDB_F32, 1, sn, m->in_std), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc1.weight", SCDB_F32, 2, shn, m->w1), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc1.bias", SCDB_F32, 1, sh, m->b1), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc2.weight", SCDB_F32, 2, shh, m->w2), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc2.bias", SCDB_F32, 1, sh, m->b2), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "out.weight", SCDB_F32, 2, s1h, m->w3), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "out.bias", SCDB_F32, 1, s1, m->b3), SCDB_OK);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
}

static void test_policy_file_v3(void **state)
{
    (void)state;
    const int ids[] = {SCDB_EI_AGE, SCDB_EI_R_MASS, SCDB_EI_ALPHA, SCDB_EI_R_SNAPKV, SCDB_EI_CTX_N};
    scdb_evict_mlp *m = NULL;
    scdb_evict_policy *p = NULL;
    char path[512], err[512];
    assert_int_equal(scdb_evict_mlp_new_inputs(8, ids, 5, 3, &m), SCDB_OK);
    for (int i = 0; i < 5; i++) { m->in_mean[i] = 0.2f * i; m->in_std[i] = 1.0f + 0.25f * i; }
    m->sinks = 4;
    m->recent = 8;
    m->recent_frac = 0.0f;
    snprintf(path, sizeof path, "%s/v3.safetensors", tmpdir);
    assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    assert_string_equal(scdb_evict_policy_meta(p, "version"), "3");
    assert_string_equal(scdb_evict_policy_meta(p, "features"), "age,rank_mass,alpha,rank_snapkv,ctx_n");
    const scdb_evict_mlp *lm = scdb_evict_policy_mlp(p);
    assert_int_equal(lm->n_in, 5);
    assert_memory_equal(lm->in_id, ids, sizeof ids);
    /* same scores from the accumulators */
    scdb_kv_cache *c;
    scdb_evict_acc *a;
    float s1[16], s2[16];
    pattern(&c, &a);
    assert_int_equal(scdb_evict_mlp_score_acc(m, a, 6, s1, NULL), SCDB_OK);
    assert_int_equal(scdb_evict_mlp_score_acc(lm, a, 6, s2, NULL), SCDB_OK);
    assert_memory_equal(s1, s2, sizeof(float) * 12);
    /* the rank inputs make the scores depend on the budget */
    assert_int_equal(scdb_evict_mlp_score_acc(lm, a, 9, s2, NULL), SCDB_OK);
    assert_true(memcmp(s1, s2, sizeof(float) * 12) != 0);
    scdb_evict_acc_free(&a);
    scdb_kv_cache_free(&c);
    scdb_evict_policy_free(&p);

    /* a version-2 network still writes version 2 */
    scdb_evict_mlp *m2 = NULL;
    assert_int_equal(scdb_evict_mlp_new(4, 1, &m2), SCDB_OK);
    snprintf(path, sizeof path, "%s/v2.safetensors", tmpdir);
    assert_int_equal(scdb_evict_mlp_save(m2, path, NULL, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    assert_string_equal(scdb_evict_policy_meta(p, "version"), "2");
    scdb_evict_policy_free(&p);
    scdb_evict_mlp_free(&m2);

    /* bad feature lists: unknown, repeated, empty, more names than the
     * tensors have inputs, an empty field (the right five names otherwise:
     * strtok_r would fold it away and load the file) */
    static const char *const bad[] = {"age,rank_mass,alpha,rank_snapkv,nope",
                                      "age,rank_mass,alpha,age,ctx_n", "",
                                      "age,rank_mass,alpha,rank_snapkv,ctx_n,life",
                                      "age,rank_mass,,alpha,rank_snapkv,ctx_n",
                                      ",age,rank_mass,alpha,rank_snapkv,ctx_n",
                                      "age,rank_mass,alpha,rank_snapkv,ctx_n,", ","};
    static const scdb_err want[] = {SCDB_EMISMATCH, SCDB_EMISMATCH, SCDB_EMISMATCH, SCDB_ESHAPE,
                                    SCDB_EMISMATCH, SCDB_EMISMATCH, SCDB_EMISMATCH, SCDB_EMISMATCH};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/v3bad%zu.safetensors", tmpdir, i);
        write_v3(path, m, bad[i]);
        assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), want[i]);
        assert_null(p);
        assert_true(err[0] != 0);
    }
    snprintf(path, sizeof path, "%s/v3good.safetensors", tmpdir);
    write_v3(path, m, "age,rank_mass,alpha,rank_snapkv,ctx_n");
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    scdb_evict_policy_free(&p);
    scdb_evict_mlp_free(&m);
}

/* A version-4 file by hand: version 3's tensors, window_choices (NULL: left
 * out) and a window.weight of rows x cols (rows 0: left out). */
static void write_v4(const char *path, const scdb_evict_mlp *m, const char *choices, int rows,
                     int cols, const float *win)
{
    scdb_st_writer *w = NULL;
    int64_t H = m->hidden, N = m->n_in, sn[1] = {N}, s1[1] = {1}, sh[1] = {H}, shn[2] = {H, N},
            shh[2] = {H, H}, s1h[2] = {1, H}, sw[2] = {rows, cols};
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "format", "scdb-evict-policy"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "version", "4"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "features", "age,rank_mass"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "activation", "tanh"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "sinks", "4"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "recent", "0"), SCDB_OK);
    if (choices) assert_int_equal(scdb_st_writer_meta(w, "window_choices", choices), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "input.mean", SCDB_F32, 1, sn, m->in_mean), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "input.std", SCDB_F32, 1, sn, m->in_std), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc1.weight", SCDB_F32, 2, shn, m->w1), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc1.bias", SCDB_F32, 1, sh, m->b1), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc2.weight", SCDB_F32, 2, shh, m->w2), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc2.bias", SCDB_F32, 1, sh, m->b2), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "out.weight", SCDB_F32, 2, s1h, m->w3), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "out.bias", SCDB_F32, 1, s1, m->b3), SCDB_OK);
    if (rows) assert_int_equal(scdb_st_writer_add(w, "window.weight", SCDB_F32, 2, sw, win), SCDB_OK);
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
}

/* Version 4: the learned recent window round-trips and decides the
 * protected window per budget; damaged heads are refused; version 3 files
 * keep their fixed rule. */
static void test_policy_file_v4(void **state)
{
    (void)state;
    const int ids[] = {SCDB_EI_AGE, SCDB_EI_R_MASS};
    scdb_evict_mlp *m = NULL;
    scdb_evict_policy *p = NULL;
    char path[512], err[512];
    int sk, r;
    assert_int_equal(scdb_evict_mlp_new_inputs(4, ids, 2, 5, &m), SCDB_OK);
    m->sinks = 4;
    m->recent = 0;
    m->recent_frac = 0.5f;
    /* a version-3 network: max(recent, floor(recent_frac * B)) */
    assert_int_equal(scdb_evict_mlp_window(m, 64, NULL, NULL), -1);
    scdb_evict_mlp_protect(m, 40, &sk, &r);
    assert_int_equal(sk, 4);
    assert_int_equal(r, 20);
    /* logits (a_c + b_c z), z = log2(B / 64): B 16 (z -2): (0, 2, -2) -> 0.25;
     * B 64: a tie -> the first, 0; B 256 (z 2): (0, -2, 2) -> 0.75 */
    m->n_win = 3;
    const float fr[] = {0.0f, 0.25f, 0.75f}, ww[] = {0, 0, 0, -1, 0, 1};
    memcpy(m->win_frac, fr, sizeof fr);
    memcpy(m->win_w, ww, sizeof ww);
    snprintf(path, sizeof path, "%s/v4.safetensors", tmpdir);
    assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_OK);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    assert_string_equal(scdb_evict_policy_meta(p, "version"), "4");
    assert_string_equal(scdb_evict_policy_meta(p, "window_choices"), "0,0.25,0.75");
    const scdb_evict_mlp *lm = scdb_evict_policy_mlp(p);
    assert_int_equal(lm->n_win, 3);
    assert_memory_equal(lm->win_w, ww, sizeof ww);
    static const struct { int budget, recent; } want[] = {{16, 4}, {64, 0}, {256, 192}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        scdb_evict_policy_protect(p, NULL, 512, want[i].budget, &sk, &r);
        assert_int_equal(sk, 4);
        assert_int_equal(r, want[i].recent);
    }
    float pr[3], z;
    assert_int_equal(scdb_evict_mlp_window(lm, 256, pr, &z), 2);
    assert_true(fabsf(z - 2.0f) < 1e-6f);
    assert_true(fabsf(pr[0] + pr[1] + pr[2] - 1.0f) < 1e-6f && pr[2] > pr[0] && pr[0] > pr[1]);
    /* an explicit choice overrides the head (the trainer's enumeration) */
    scdb_evict_mlp_protect_choice(lm, 256, 1, &sk, &r);
    assert_int_equal(r, 64);
    scdb_evict_policy_free(&p);
    /* a choice out of [0, 1) cannot be written */
    m->win_frac[2] = 1.0f;
    assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_EINVAL);
    m->win_frac[2] = 0.75f;

    /* damaged heads */
    const float nan_w[] = {0, 0, 0, NAN, 0, 1};
    static const char *const seventeen = "0,0.05,0.1,0.15,0.2,0.25,0.3,0.35,0.4,0.45,0.5,0.55,0.6,0.65,0.7,0.75,0.8";
    struct { const char *choices; int rows, cols; const float *w; scdb_err want; } bad[] = {
        {NULL, 3, 2, ww, SCDB_ERANGE},              /* no window_choices */
        {"", 3, 2, ww, SCDB_ERANGE},                /* empty */
        {"0,0.25,1.5", 3, 2, ww, SCDB_ERANGE},      /* not a fraction */
        {"0,x,0.75", 3, 2, ww, SCDB_ERANGE},        /* garbage */
        {"0,,0.25,0.75", 3, 2, ww, SCDB_ERANGE},    /* an empty field (3 values, 4 fields) */
        {",0.25,0.75", 3, 2, ww, SCDB_ERANGE},      /* a leading comma */
        {"0,0.25,0.75,", 3, 2, ww, SCDB_ERANGE},    /* a trailing comma */
        {seventeen, 3, 2, ww, SCDB_ERANGE},         /* too many */
        {"0,0.25,0.75", 0, 0, ww, SCDB_ENOTFOUND},  /* no window.weight */
        {"0,0.25,0.75", 3, 1, ww, SCDB_ESHAPE},     /* wrong shape */
        {"0,0.25", 3, 2, ww, SCDB_ESHAPE},          /* choices and rows disagree */
        {"0,0.25,0.75", 3, 2, nan_w, SCDB_ERANGE},  /* non-finite */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/v4bad%zu.safetensors", tmpdir, i);
        write_v4(path, m, bad[i].choices, bad[i].rows, bad[i].cols, bad[i].w);
        err[0] = 0;
        assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), bad[i].want);
        assert_null(p);
        assert_true(err[0] != 0);
    }
    snprintf(path, sizeof path, "%s/v4good.safetensors", tmpdir);
    write_v4(path, m, "0,0.25,0.75", 3, 2, ww);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    scdb_evict_policy_free(&p);
    scdb_evict_mlp_free(&m);
}

/* a version-5 file by hand: skip rows x cols (0: no tensor), the head
 * optional */
static void write_v5(const char *path, const scdb_evict_mlp *m, int rows, int cols,
                     const float *skip, const char *version, const char *extra)
{
    scdb_st_writer *w = NULL;
    int64_t H = m->hidden, N = m->n_in, sn[1] = {N}, s1[1] = {1}, sh[1] = {H}, shn[2] = {H, N},
            shh[2] = {H, H}, s1h[2] = {1, H}, ss[2] = {rows, cols};
    assert_int_equal(scdb_st_writer_new(&w), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "format", "scdb-evict-policy"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "version", version), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "features", "age,rank_mass"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "activation", "tanh"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "sinks", "4"), SCDB_OK);
    assert_int_equal(scdb_st_writer_meta(w, "recent", "0"), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "input.mean", SCDB_F32, 1, sn, m->in_mean), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "input.std", SCDB_F32, 1, sn, m->in_std), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc1.weight", SCDB_F32, 2, shn, m->w1), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc1.bias", SCDB_F32, 1, sh, m->b1), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc2.weight", SCDB_F32, 2, shh, m->w2), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "fc2.bias", SCDB_F32, 1, sh, m->b2), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "out.weight", SCDB_F32, 2, s1h, m->w3), SCDB_OK);
    assert_int_equal(scdb_st_writer_add(w, "out.bias", SCDB_F32, 1, s1, m->b3), SCDB_OK);
    if (rows) assert_int_equal(scdb_st_writer_add(w, "skip.weight", SCDB_F32, 2, ss, skip), SCDB_OK);
    if (extra) {
        /* a tensor the version does not define, [2, 2] like a 2-choice head */
        const int64_t se[2] = {2, 2};
        assert_int_equal(scdb_st_writer_add(w, extra, SCDB_F32, 2, se, skip), SCDB_OK);
    }
    assert_int_equal(scdb_st_writer_write(w, path), SCDB_OK);
    scdb_st_writer_free(&w);
}

/* Version 5: the budget-modulated skip round-trips (with and without a
 * window head) and adds exactly sum_k (u_k + v_k z) x_k to the network's
 * score; damaged skips are refused. */
static void test_policy_file_v5(void **state)
{
    (void)state;
    const int ids[] = {SCDB_EI_AGE, SCDB_EI_R_MASS};
    scdb_evict_mlp *m = NULL, *m0 = NULL;
    scdb_evict_policy *p = NULL;
    char path[512], err[512];
    assert_int_equal(scdb_evict_mlp_new_inputs(4, ids, 2, 5, &m), SCDB_OK);
    assert_int_equal(scdb_evict_mlp_clone(m, &m0), SCDB_OK);
    m->sinks = 4;
    m->skip = 1;
    const float sw[] = {0.5f, -0.25f, -1.0f, 2.0f};   /* (u, v) for age, rank_mass */
    memcpy(m->skip_w, sw, sizeof sw);
    /* the skip's term on constructed rows: B 128 (z 1): age 0.5 - 0.25, mass -1 + 2 */
    const float x[4] = {1.0f, 2.0f, -3.0f, 0.5f};
    float sc[2] = {0.0f, 0.0f}, s0[2], s1[2];
    scdb_evict_mlp_add_skip(m, x, 2, 128, sc);
    assert_true(fabsf(sc[0] - (0.25f * 1.0f + 1.0f * 2.0f)) < 1e-6f);
    assert_true(fabsf(sc[1] - (0.25f * -3.0f + 1.0f * 0.5f)) < 1e-6f);
    /* scores from raw features (a network reading alpha and mass, which
     * they carry): the same network without a skip, plus the skip's term */
    {
        const int fid[] = {SCDB_EI_ALPHA, SCDB_EI_MASS};
        scdb_evict_mlp *f0 = NULL, *f1 = NULL;
        assert_int_equal(scdb_evict_mlp_new_inputs(4, fid, 2, 7, &f0), SCDB_OK);
        assert_int_equal(scdb_evict_mlp_clone(f0, &f1), SCDB_OK);
        f1->skip = 1;
        memcpy(f1->skip_w, sw, sizeof sw);
        const float raw[2 * SCDB_EVICT_N_FEATURES] = {1, 2, 0.1f, 0.5f, 0.3f, 4,
                                                      0.2f, 1, 0.05f, 0.9f, 0.8f, 1};
        float xo[4], add[2] = {0.0f, 0.0f};
        scdb_evict_mlp_score_budget(f0, raw, 2, 32, s0, NULL);
        scdb_evict_mlp_score_budget(f1, raw, 2, 32, s1, xo);
        scdb_evict_mlp_add_skip(f1, xo, 2, 32, add);
        assert_true(fabsf(add[0]) > 1e-3f && fabsf(add[0] - add[1]) > 1e-3f);
        for (int i = 0; i < 2; i++) assert_true(fabsf(s1[i] - (s0[i] + add[i])) < 1e-5f);
        scdb_evict_mlp_free(&f0);
        scdb_evict_mlp_free(&f1);
    }
    /* round trip, with a head and without */
    for (int head = 0; head < 2; head++) {
        m->n_win = head ? 2 : 0;
        m->win_frac[0] = 0.0f;
        m->win_frac[1] = 0.5f;
        m->win_w[0] = 1.0f;
        snprintf(path, sizeof path, "%s/v5_%d.safetensors", tmpdir, head);
        assert_int_equal(scdb_evict_mlp_save(m, path, NULL, NULL, 0), SCDB_OK);
        assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
        assert_string_equal(scdb_evict_policy_meta(p, "version"), "5");
        const scdb_evict_mlp *lm = scdb_evict_policy_mlp(p);
        assert_int_equal(lm->skip, 1);
        assert_int_equal(lm->n_win, head ? 2 : 0);
        assert_memory_equal(lm->skip_w, sw, sizeof sw);
        scdb_evict_policy_free(&p);
    }
    m->n_win = 0;
    /* damaged skips */
    const float nan_s[] = {0.5f, NAN, -1.0f, 2.0f};
    struct { int rows, cols; const float *w; const char *version, *extra; scdb_err want; } bad[] = {
        {0, 0, sw, "5", NULL, SCDB_ENOTFOUND},     /* no skip.weight */
        {2, 1, sw, "5", NULL, SCDB_ESHAPE},        /* wrong shape */
        {1, 2, sw, "5", NULL, SCDB_ESHAPE},        /* rows != inputs */
        {2, 2, nan_s, "5", NULL, SCDB_ERANGE},     /* non-finite */
        {2, 2, sw, "7", NULL, SCDB_EMISMATCH},     /* unknown version */
        {2, 2, sw, "6", NULL, SCDB_EMISMATCH},     /* a skip in a version-6 file */
        {2, 2, sw, "3", NULL, SCDB_EMISMATCH},     /* a skip in a version-3 file */
        {2, 2, sw, "5", "window.weight", SCDB_EMISMATCH}, /* a head without window_choices */
        {2, 2, sw, "5", "fc3.weight", SCDB_EMISMATCH},    /* a tensor no version defines */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/v5bad%zu.safetensors", tmpdir, i);
        write_v5(path, m, bad[i].rows, bad[i].cols, bad[i].w, bad[i].version, bad[i].extra);
        err[0] = 0;
        assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), bad[i].want);
        assert_null(p);
        assert_true(err[0] != 0);
    }
    /* truncated */
    snprintf(path, sizeof path, "%s/v5_0.safetensors", tmpdir);
    {
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char buf[65536];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        snprintf(path, sizeof path, "%s/v5trunc.safetensors", tmpdir);
        f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, len - 12, f), len - 12);
        fclose(f);
        /* data cut short: the safetensors reader's SCDB_ERANGE (FORMATS.md) */
        assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_ERANGE);
        assert_null(p);
    }
    snprintf(path, sizeof path, "%s/v5good.safetensors", tmpdir);
    write_v5(path, m, 2, 2, sw, "5", NULL);
    assert_int_equal(scdb_evict_policy_load(path, &p, err, sizeof err), SCDB_OK);
    scdb_evict_policy_free(&p);
    scdb_evict_mlp_free(&m);
    scdb_evict_mlp_free(&m0);
}

/* ------------------------------------------------------------ the trainer's reward */

static void test_trainer_reward(void **state)
{
    (void)state;
    enum { P = 48, T = 24, EVERY = 4, B = 16 };
    scdb_model *model = NULL;
    char err[512];
    assert_int_equal(scdb_model_load(SCDB_DATA_DIR "/models/base", &model, err, sizeof err), SCDB_OK);
    const char *txt = "The cache keeps what the next tokens attend to. The cache keeps what the "
                      "next tokens attend to, and drops the rest of it.";
    int32_t tok[P + T + 1];
    scdb_tokenize_bytes((const unsigned char *)txt, P + T + 1, tok);
    scdb_evict_window *w = NULL;
    assert_int_equal(scdb_evict_window_new(model, tok, P, T, &w), SCDB_OK);

    static const int ids[] = {SCDB_EI_ALPHA, SCDB_EI_AGE, SCDB_EI_R_MASS, SCDB_EI_R_SNAPKV};
    scdb_evict_mlp *m = NULL;
    scdb_evict_policy *p = NULL;
    assert_int_equal(scdb_evict_mlp_new_inputs(8, ids, 4, 5, &m), SCDB_OK);
    m->sinks = 2;
    m->recent = 3;
    assert_int_equal(scdb_evict_policy_from_mlp(m, &p), SCDB_OK);
    float kl_steps[T];
    scdb_evict_eval e;
    assert_int_equal(scdb_evict_window_eval(w, p, B, EVERY, kl_steps, &e), SCDB_OK);
    assert_true(e.kl > 0.0);

    /* a near-deterministic draw (tau 1e-4) is the policy's own top-B, so the
     * branch's reward is the deterministic run's KL over the same steps:
     * from the first eviction, and from a later state */
    scdb_evict_sampler smp;
    memset(&smp, 0, sizeof smp);
    smp.mlp = m;
    smp.tau = 1e-4f;
    smp.draw_evicted = 1;
    smp.rng = 42;
    double klm, want = 0.0;
    assert_int_equal(scdb_evict_window_reset(w), SCDB_OK);
    assert_int_equal(scdb_evict_window_branch(w, &smp, p, B, EVERY, T, &klm), SCDB_OK);
    for (int t = 0; t < T; t++) want += kl_steps[t] / T;
    assert_near(klm, want, 1e-6 * want);
    assert_int_equal(smp.n_dec, 1);
    assert_int_equal(smp.dec[0].step, 0);
    assert_int_equal(smp.dec[0].n, P);
    assert_int_equal(smp.dec[0].m, P - B);        /* the evicted draw: every slot evicted */
    scdb_evict_sampler_clear(&smp);
    double kl8;
    assert_int_equal(scdb_evict_window_steps(w, p, B, EVERY, 8, &kl8), SCDB_OK);
    want = 0.0;
    for (int t = 0; t < 8; t++) want += kl_steps[t];
    assert_near(kl8, want, 1e-6 * want);
    assert_int_equal(scdb_evict_window_branch(w, &smp, p, B, EVERY, 12, &klm), SCDB_OK);
    want = 0.0;
    for (int t = 8; t < 20; t++) want += kl_steps[t] / 12;
    assert_near(klm, want, 1e-6 * want);
    assert_int_equal(smp.n_dec, 1);
    assert_int_equal(smp.dec[0].step, 8);
    assert_int_equal(smp.dec[0].n, B + EVERY);
    scdb_evict_sampler_clear(&smp);
    /* no sampler: the policy's own eviction at the branch point too (the
     * imitation's branches), so the same KL as the deterministic run, for
     * the learned policy and for a heuristic (whose run differs from it) */
    assert_int_equal(scdb_evict_window_branch(w, NULL, p, B, EVERY, 12, &klm), SCDB_OK);
    want = 0.0;
    for (int t = 8; t < 20; t++) want += kl_steps[t] / 12;
    assert_near(klm, want, 1e-6 * want);
    {
        scdb_evict_policy *h = NULL;
        float hk[T];
        scdb_evict_eval he;
        assert_int_equal(scdb_evict_policy_new(SCDB_EVICT_SNAPKV, &h), SCDB_OK);
        assert_int_equal(scdb_evict_window_eval(w, h, B, EVERY, hk, &he), SCDB_OK);
        assert_int_equal(scdb_evict_window_reset(w), SCDB_OK);
        assert_int_equal(scdb_evict_window_branch(w, NULL, h, B, EVERY, T, &klm), SCDB_OK);
        assert_near(klm, he.kl, 1e-6 * he.kl);
        assert_true(fabs(he.kl - e.kl) > 1e-9);
        assert_int_equal(scdb_evict_window_steps(w, p, B, EVERY, 8, NULL), SCDB_OK);
        scdb_evict_policy_free(&h);
    }
    /* the branch left the student where it was */
    assert_int_equal(scdb_evict_window_steps(w, p, B, EVERY, 6, NULL), SCDB_EINVAL);
    assert_int_equal(scdb_evict_window_branch(w, &smp, p, B, EVERY, T, &klm), SCDB_EINVAL);

    /* a budget that holds everything: nothing drawn, reward 0 */
    assert_int_equal(scdb_evict_window_reset(w), SCDB_OK);
    assert_int_equal(scdb_evict_window_branch(w, &smp, p, P + T, EVERY, T, &klm), SCDB_OK);
    assert_true(klm == 0.0);
    assert_int_equal(smp.n_dec, 0);

    /* exploring draws (tau 1) from the same state: rewards <= 0, not all
     * equal, each draw evicting P - B distinct candidates */
    double R[6], A[6], mean;
    smp.tau = 1.0f;
    for (int k = 0; k < 6; k++) {
        smp.rng = 1000 + 77 * (uint64_t)k;
        assert_int_equal(scdb_evict_window_branch(w, &smp, p, B, EVERY, 12, &klm), SCDB_OK);
        R[k] = -klm;
        assert_true(R[k] <= 0.0);
        const scdb_evict_decision *d = &smp.dec[smp.n_dec - 1];
        assert_int_equal(d->m, P - B);
        char seen[P];
        memset(seen, 0, sizeof seen);
        for (int j = 0; j < d->m; j++) {
            assert_true(d->order[j] >= d->sinks && d->order[j] < d->n - d->recent);
            assert_false(seen[d->order[j]]);
            seen[d->order[j]] = 1;
        }
    }
    int distinct = 0;
    for (int k = 1; k < 6; k++) distinct |= R[k] != R[0];
    assert_true(distinct);
    double sd = scdb_evict_loo_advantages(R, 6, A, &mean);
    double sa = 0.0;
    for (int k = 0; k < 6; k++) sa += A[k];
    assert_true(sd > 0.0);
    assert_near(sa, 0.0, 1e-9);
    for (int k = 0; k < 6; k++) assert_true((A[k] > 0) == (R[k] > mean) || A[k] == 0.0);
    scdb_evict_sampler_clear(&smp);

    /* the advantages on constructed rewards */
    const double Rc[4] = {-1, -2, -3, -6};
    double Ac[4];
    sd = scdb_evict_loo_advantages(Rc, 4, Ac, &mean);
    assert_near(mean, -3.0, 1e-12);
    assert_near(sd, sqrt(3.5), 1e-12);
    assert_near(Ac[0], (-1.0 - (-11.0 / 3)) / sqrt(3.5), 1e-12);   /* R_0 - mean of the others */
    assert_near(Ac[3], (-6.0 - (-2.0)) / sqrt(3.5), 1e-12);
    const double Re[3] = {-0.5, -0.5, -0.5};
    double Ae[3];
    assert_true(scdb_evict_loo_advantages(Re, 3, Ae, NULL) == 0.0);
    for (int k = 0; k < 3; k++) assert_true(Ae[k] == 0.0);

    scdb_evict_policy_free(&p);
    scdb_evict_mlp_free(&m);
    scdb_evict_window_free(&w);
    scdb_model_free(&model);
}

/* The trainer's defaults on one model directory and one corpus. */
static void rl_opts_one(scdb_evict_rl_opts *o, const char *const *dirs,
                        const scdb_evict_corpus *c)
{
    scdb_evict_rl_defaults(o);
    o->model_dirs = dirs;
    o->n_models = 1;
    o->corpora = c;
    o->n_corpora = 1;
}

/* A few steps of the trainer on the bundled base model and one domain:
 * the API end to end (validation against the heuristics, a network out). */
static void test_trainer_runs(void **state)
{
    (void)state;
    scdb_evict_suite *s = NULL;
    char err[512], *tr = NULL, *va = NULL;
    size_t tl, vl;
    assert_int_equal(scdb_evict_suite_load(MANIFEST, &s, err, sizeof err), SCDB_OK);
    int d = scdb_evict_suite_find(s, "prose");
    assert_int_equal(scdb_evict_suite_read(s, d, SCDB_EVICT_PART_TRAIN, &tr, &tl, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_evict_suite_read(s, d, SCDB_EVICT_PART_VAL, &va, &vl, err, sizeof err), SCDB_OK);
    scdb_evict_corpus c = {"prose", (const unsigned char *)tr, tl, (const unsigned char *)va, vl};
    const char *dirs[] = {SCDB_DATA_DIR "/models/base"};
    scdb_evict_rl_opts o;
    rl_opts_one(&o, dirs, &c);
    o.updates = 4;
    o.batch = 1;
    o.states = 2;
    o.samples = 4;
    o.horizon = 8;
    o.prefill = 32;
    o.steps = 16;
    o.every = 4;
    o.hidden = 8;
    o.val_windows = 1;
    o.val_every = 2;
    scdb_evict_mlp *m = NULL;
    scdb_evict_rl_result r;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_OK);
    assert_non_null(m);
    assert_int_equal(r.updates, 4);
    assert_int_equal(r.episodes, 4);
    assert_int_equal(m->n_in, SCDB_EVICT_N_ALL_INPUTS);
    assert_true(r.val_kl_best_heuristic > 0.0 && isfinite(r.val_ratio_best));
    for (int k = SCDB_EVICT_STREAMING; k < SCDB_EVICT_LEARNED; k++)
        assert_true(r.val_kl_heuristic[k] >= r.val_kl_best_heuristic);
    scdb_evict_mlp_free(&m);
    /* an imitation warm start with an expert network among the candidates:
     * its episodes count, the network keeps its inputs */
    scdb_evict_mlp *ex = NULL;
    assert_int_equal(scdb_evict_mlp_new_inputs(4, (const int[]){SCDB_EI_AGE, SCDB_EI_R_MASS}, 2, 9, &ex),
                     SCDB_OK);
    ex->sinks = 2;
    ex->recent_frac = 0.25f;
    o.experts[0] = ex;
    o.n_experts = 1;
    o.imit_rounds = 2;
    o.imit_episodes = 2;
    o.imit_epochs = 2;
    o.imit_val_every = 2;
    o.updates = 1;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_OK);
    assert_non_null(m);
    assert_int_equal(r.episodes, 2 * 2 + 1);
    assert_int_equal(m->n_in, SCDB_EVICT_N_ALL_INPUTS);
    assert_true(isfinite(r.val_ratio_best));
    scdb_evict_mlp_free(&m);
    /* band weights from full runs, the network alone trained, and the
     * window head then fitted to full runs: a version-4 network comes out */
    o.imit_band_windows = 1;
    o.imit_train = 1;
    o.head_runs = 1;
    o.n_win = 2;
    o.win_frac[0] = 0.0f;
    o.win_frac[1] = 0.5f;
    o.updates = 0;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_OK);
    assert_non_null(m);
    assert_int_equal(m->n_win, 2);
    assert_int_equal(r.episodes, 2 * 2);
    scdb_evict_mlp_free(&m);
    o.n_win = 0;
    o.head_runs = 0;
    o.imit_train = 8;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    /* imitation of parts the network has not (no skip, no head): nothing
     * would train; and the head fit from full runs without its inputs */
    o.imit_train = 2;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.imit_train = 4;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.imit_train = 6;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.imit_train = 7;
    o.head_runs = 1;   /* band windows, no head */
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.n_win = 2;       /* a head, no band windows */
    o.imit_band_windows = 0;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.n_win = 0;
    o.head_runs = 0;
    o.imit_band_windows = -1;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.imit_band_windows = 0;
    o.imit_temp = 0.0f;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.imit_temp = 0.05f;
    o.imit_batch = 0;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.imit_batch = 8;
    o.experts[0] = NULL;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.n_experts = 5;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    /* an expert without imitation: it would be loaded and never offered */
    o.experts[0] = ex;
    o.n_experts = 1;
    o.imit_rounds = 0;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.n_experts = 0;
    o.updates = 4;
    assert_null(m);
    scdb_evict_mlp_free(&ex);
    /* refusals */
    o.samples = 1;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.samples = 4;
    o.horizon = 17;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_EINVAL);
    o.horizon = 8;
    c.val_len = 10;
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_ERANGE);
    assert_null(m);
    free(tr);
    free(va);
    scdb_evict_suite_free(&s);
}

/* Tiny training runs where a working gradient must pay, each from a seeded
 * random start.  (a) The network (the shipped inputs, width 8, 4 sinks and
 * a quarter of the budget protected, budgets 20-30% of a 64 + 32 token
 * window): 20 steps must bring the validation score below 0.8 x its
 * start, and beat by 0.1 the same run ascending the loss (which a random
 * start's badness lets improve a little by chance: perturbing a bad
 * network helps); a zero step does not improve at all.  (b)
 * The window head alone (the network's step ~0, a random network reading
 * only the age, 4 sinks, nothing else protected), starting at its
 * no-window choice: it must bring the score below 0.5 x, and ascending
 * not below 0.95 x.  So a trainer that does not learn, or
 * learns the wrong way, fails here.  (Reading only the age, the network
 * alone is no test: ascending the loss saturates it into tied scores, and
 * ties keep the newest slots, which is StreamingLLM.)  (c) Imitation alone
 * (no REINFORCE step; the network of (a) with only 4 sinks and the newest
 * slot protected, so it must learn recency too): one round of 6 episodes
 * and 8 epochs must bring the score below 0.8 x, and ascending its loss
 * must stay 0.1 above that. */
typedef struct learn_case {
    const scdb_evict_corpus *c;
    const char *const *dirs;
} learn_case;

static double learn_ratio(const learn_case *lc, int head, float sign, int zero_step)
{
    scdb_evict_rl_opts o;
    scdb_evict_mlp *m = NULL;
    scdb_evict_rl_result r;
    char err[512];
    static const float win[] = {0.0f, 0.25f, 0.5f, 0.75f};
    static const int ins[] = {SCDB_EI_BUDGET, SCDB_EI_AGE, SCDB_EI_R_MASS, SCDB_EI_R_ALPHA,
                              SCDB_EI_R_WIN, SCDB_EI_R_SNAPKV, SCDB_EI_R_LAST, SCDB_EI_VNORM_Z,
                              SCDB_EI_LIFE, SCDB_EI_R_LIFE, SCDB_EI_CTX_ENT, SCDB_EI_CTX_N};
    rl_opts_one(&o, lc->dirs, lc->c);
    o.batch = 2;
    o.states = 2;
    o.samples = 4;
    o.hidden = 8;
    o.sinks = 4;
    o.recent = 0;
    o.val_windows = 4;
    o.val_every = 10;
    o.n_val_budgets = 1;
    o.lr_sign = sign;
    if (head == 1) {
        o.updates = 10;
        o.prefill = 32;
        o.steps = 16;
        o.every = 4;
        o.horizon = 8;
        o.inputs[0] = SCDB_EI_AGE;
        o.n_inputs = 1;
        o.recent_frac = 0.0f;
        o.pool = 1;
        o.budget_lo = 0.25;
        o.budget_hi = 0.4;
        o.val_budgets[0] = 0.3;
        o.lr = 1e-9f;
        o.entropy = 0.0f;
        o.n_win = 4;
        memcpy(o.win_frac, win, sizeof win);
        o.win_lr = zero_step ? 0.0f : 0.2f;
    } else {
        o.updates = 20;
        o.prefill = 64;
        o.steps = 32;
        o.every = 8;
        o.horizon = 16;
        memcpy(o.inputs, ins, sizeof ins);
        o.n_inputs = (int)(sizeof ins / sizeof ins[0]);
        o.recent_frac = 0.25f;
        o.budget_lo = 0.2;
        o.budget_hi = 0.3;
        o.val_budgets[0] = 0.25;
        o.lr = zero_step ? 1e-9f : 0.03f;
    }
    if (head == 2) {
        /* (c) imitation alone: no REINFORCE update, the network (as in (a),
         * 4 sinks and 1 recent slot protected: the recency it learns) fits
         * the candidates' kept sets */
        o.updates = 0;
        o.recent = 1;
        o.recent_frac = 0.0f;
        o.pool = 1;
        o.budget_lo = 0.1;
        o.budget_hi = 0.3;
        o.val_budgets[0] = 0.15;
        o.imit_rounds = 1;
        o.imit_episodes = 6;
        o.imit_epochs = 8;
        o.imit_val_every = 4;
        o.imit_lr = zero_step ? 1e-9f : 0.01f;
    }
    assert_int_equal(scdb_evict_train_rl(&o, &m, &r, err, sizeof err), SCDB_OK);
    assert_non_null(m);
    assert_int_equal(m->n_win, head == 1 ? 4 : 0);
    scdb_evict_mlp_free(&m);
    return r.val_ratio_best / r.val_ratio_init;
}

/* The per-head scorer's fit (train_heads.c) on a tiny protocol: from a
 * scorer that keeps the oldest slots (a[age] = +1, no window), the
 * validation score (x the best heuristic, the scorer deciding) after a few
 * generations; sign -1 ascends the objective instead; top1 the weight of
 * the objective's top-1 term; short_share the share of half-length
 * windows (and validation on them too). */
static double heads_ratio(const learn_case *lc, float sign, double top1, double short_share,
                          double *start)
{
    scdb_evict_rl_opts o;
    scdb_evict_mlp *m = NULL;
    scdb_evict_rl_result r;
    scdb_evict_heads h0;
    char err[512];
    rl_opts_one(&o, lc->dirs, lc->c);
    o.updates = 0;
    o.hidden = 4;
    o.prefill = 64;
    o.steps = 32;
    o.every = 8;
    o.horizon = 16;
    o.val_windows = 3;
    o.n_val_budgets = 1;
    o.val_budgets[0] = 0.15;
    o.heads_gens = 8;
    o.heads_pairs = 4;
    o.heads_episodes = 4;
    o.heads_pool = 8;
    o.heads_lo = 0.1;
    o.heads_hi = 0.2;
    o.heads_val_every = 4;
    o.heads_sigma = 0.5f;
    o.heads_lr = 0.3f;
    o.heads_sign = sign;
    o.heads_top1 = top1;
    o.heads_short = short_share;
    memset(&h0, 0, sizeof h0);
    h0.n_win = o.heads_n_win;
    h0.a[3 * SCDB_EVICT_HEAD_CTX + SCDB_EVICT_HEAD_CTX - 1] = 1.0f;   /* age: oldest first */
    h0.d[0 * SCDB_EVICT_HEAD_CTX + SCDB_EVICT_HEAD_CTX - 1] = 1.0f;   /* window 0 */
    o.heads_init = &h0;
    scdb_err rc = scdb_evict_train_rl(&o, &m, &r, err, sizeof err);
    if (rc) fail_msg("train: %s: %s", scdb_strerror(rc), err);
    assert_int_equal(r.heads_gens_run, 8);
    *start = r.heads_ratio_init;
    double ratio = r.heads_ratio_scorer / r.heads_ratio_init;   /* the scorer's own */
    /* where it beats the network (a random 4-wide one) the file gets it */
    assert_true(m->heads.on == (r.heads_split > 0.0f));
    scdb_evict_mlp_free(&m);
    return ratio;
}

/* The split: the largest validation budget up to which the scorer wins,
 * half-way (in log) to the next, never beyond the largest measured, at
 * most the cost bound; the combined score takes the scorer up to it. */
static void test_heads_split(void **state)
{
    (void)state;
    const double fr[4] = {0.5, 0.25, 0.125, 0.0625};   /* in any order */
    const double net[4] = {0.5, 0.7, 1.0, 1.0};
    const double wins[4] = {0.45, 0.6, 0.8, 0.8}, loses_top[4] = {0.6, 0.6, 0.8, 0.8};
    const double loses_low[4] = {0.45, 0.6, 0.8, 1.1};
    double comb;
    assert_true(scdb_evict_heads_split(fr, 4, wins, net, 1.0, &comb) == 0.5f);
    assert_near(comb, exp((log(0.45) + log(0.6) + 2 * log(0.8)) / 4), 1e-12);
    assert_true(scdb_evict_heads_split(fr, 4, loses_top, net, 1.0, &comb) == (float)sqrt(0.125));
    assert_near(comb, exp((log(0.5) + log(0.6) + 2 * log(0.8)) / 4), 1e-12);
    /* the cost bound: where the scorer would win, the network still decides */
    assert_true(scdb_evict_heads_split(fr, 4, wins, net, 0.3, &comb) == 0.3f);
    assert_near(comb, exp((log(0.5) + log(0.6) + 2 * log(0.8)) / 4), 1e-12);
    assert_true(scdb_evict_heads_split(fr, 4, wins, net, 0.1, &comb) == 0.1f);
    assert_near(comb, exp((log(0.5) + log(0.7) + log(1.0) + log(0.8)) / 4), 1e-12);
    /* worse at the smallest budget: no scorer, whatever wins above it */
    assert_true(scdb_evict_heads_split(fr, 4, loses_low, net, 1.0, &comb) == 0.0f);
    assert_near(comb, exp((log(0.5) + log(0.7) + 2 * log(1.0)) / 4), 1e-12);
    assert_true(scdb_evict_heads_split(fr, 4, wins, net, 1.0, NULL) == 0.5f);
}

/* Bad per-head options are refused before anything loads or trains (the
 * model directory here does not exist: with good options that is the
 * error), each with the same specific message. */
static void test_heads_bad_options(void **state)
{
    (void)state;
    static const unsigned char txt[] = "some text";
    scdb_evict_corpus c = {"prose", txt, sizeof txt - 1, txt, sizeof txt - 1};
    const char *dirs[] = {"/nonexistent/scdb-model"};
    scdb_evict_rl_opts o;
    scdb_evict_mlp *m = NULL;
    scdb_evict_rl_result r;
    char err[256];
    enum { SHORT_LO, SHORT_HI, SHORT_NAN, SHORT_TINY, TOP1, SPLIT_0, SPLIT_HI, PAIRS, POOL, WIN, N };
    for (int i = 0; i <= N; i++) {
        rl_opts_one(&o, dirs, &c);
        o.updates = 0;
        o.heads_gens = 2;
        switch (i) {
        case SHORT_LO: o.heads_short = -0.1; break;
        case SHORT_HI: o.heads_short = 1.5; break;
        case SHORT_NAN: o.heads_short = NAN; break;
        case SHORT_TINY: o.heads_short = 0.5; o.prefill = 3; break;   /* no half window */
        case TOP1: o.heads_top1 = -1.0; break;
        case SPLIT_0: o.heads_split_max = 0.0; break;
        case SPLIT_HI: o.heads_split_max = 1.5; break;
        case PAIRS: o.heads_pairs = 0; break;
        case POOL: o.heads_pool = o.heads_episodes - 1; break;
        case WIN: o.heads_win_frac[1] = 1.0f; break;
        default: break;   /* N: every option good */
        }
        err[0] = 0;
        scdb_err rc = scdb_evict_train_rl(&o, &m, &r, err, sizeof err);
        assert_null(m);
        if (i == N) {
            assert_int_not_equal(rc, SCDB_OK);
            assert_null(strstr(err, "per-head"));   /* it got as far as the model */
        } else {
            assert_int_equal(rc, SCDB_EINVAL);
            assert_non_null(strstr(err, "per-head"));
        }
    }
}

static void test_trainer_learns(void **state)
{
    (void)state;
    scdb_evict_suite *s = NULL;
    char err[512], *tr = NULL, *va = NULL;
    size_t tl, vl;
    assert_int_equal(scdb_evict_suite_load(MANIFEST, &s, err, sizeof err), SCDB_OK);
    int d = scdb_evict_suite_find(s, "prose");
    assert_int_equal(scdb_evict_suite_read(s, d, SCDB_EVICT_PART_TRAIN, &tr, &tl, err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_evict_suite_read(s, d, SCDB_EVICT_PART_VAL, &va, &vl, err, sizeof err), SCDB_OK);
    scdb_evict_corpus c = {"prose", (const unsigned char *)tr, tl, (const unsigned char *)va, vl};
    const char *dirs[] = {SCDB_DATA_DIR "/models/base"};
    learn_case lc = {&c, dirs};
    /* the zero-step controls (learn_ratio(.., 1)) score exactly 1.000 for
     * both (verified once; a run that cannot move cannot improve), so the
     * test runs only the ascending ones, to stay fast */
    double net = learn_ratio(&lc, 0, 1.0f, 0), net_flip = learn_ratio(&lc, 0, -1.0f, 0);
    double head = learn_ratio(&lc, 1, 1.0f, 0), head_flip = learn_ratio(&lc, 1, -1.0f, 0);
    double imit = learn_ratio(&lc, 2, 1.0f, 0), imit_flip = learn_ratio(&lc, 2, -1.0f, 0);
    double h_start, hf_start, ht_start, hs_start, heads = heads_ratio(&lc, 1.0f, 0.0, 0.0, &h_start);
    double heads_flip = heads_ratio(&lc, -1.0f, 0.0, 0.0, &hf_start);
    double heads_t1 = heads_ratio(&lc, 1.0f, 1.0, 0.0, &ht_start);   /* with the top-1 term */
    double heads_short = heads_ratio(&lc, 1.0f, 0.0, 0.5, &hs_start);   /* half-length windows too */
    print_message("trainer learns: network %.3f (ascending %.3f), window head %.3f (ascending "
                  "%.3f), imitation %.3f (ascending %.3f), per-head scorer %.3f (ascending %.3f, "
                  "with the top-1 term %.3f, with half-length windows %.3f; start %.3f x the best "
                  "heuristic) x the start\n", net, net_flip, head, head_flip, imit, imit_flip, heads,
                  heads_flip, heads_t1, heads_short, h_start);
    assert_true(h_start == hf_start);   /* the same start, the same windows */
    assert_true(heads < 0.6);
    assert_true(heads_flip > 0.95);     /* ascending never improves on it */
    assert_true(ht_start == h_start);
    assert_true(heads_t1 < 0.6);        /* the top-1 term leaves it learning */
    assert_true(hs_start != h_start);   /* validation has the half-length groups too */
    assert_true(heads_short < 0.6);     /* and learns on both lengths */
    assert_true(net < 0.8);
    assert_true(net_flip > net + 0.1);
    assert_true(head < 0.5);
    assert_true(head_flip > 0.95);
    assert_true(imit < 0.8);
    assert_true(imit_flip > imit + 0.1);
    free(tr);
    free(va);
    scdb_evict_suite_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_matches_python),
        cmocka_unit_test(test_shipped_suite),
        cmocka_unit_test(test_damaged_suites),
        cmocka_unit_test(test_inputs_constructed),
        cmocka_unit_test(test_policy_file_v3),
        cmocka_unit_test(test_policy_file_v4),
        cmocka_unit_test(test_policy_file_v5),
        cmocka_unit_test(test_trainer_reward),
        cmocka_unit_test(test_trainer_runs),
        cmocka_unit_test(test_heads_split),
        cmocka_unit_test(test_heads_bad_options),
        cmocka_unit_test(test_trainer_learns),
    };
    if (getenv("SCDB_TEST_FILTER")) cmocka_set_test_filter(getenv("SCDB_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
