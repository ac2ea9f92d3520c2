/* test_evict_suite.c — the eviction suite (evict.h, "Domain suite") and the
 * trainer's reward: the selection rule agrees with tools/evict_suite.py on
 * known paths and is deterministic; the shipped manifest matches the
 * shipped texts chunk by chunk, its portions and domains are disjoint, the
 * split is the fixed one and no suite file is one the model family was
 * trained or held out on; damaged suites are refused. */
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

#include "evict.h"
#include "evict_internal.h"
#include "model.h"

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
    cJSON *files = files_of(doc, "python", "train");
    cJSON *x = cJSON_DetachItemFromArray(files, 0);
    cJSON_InsertItemInArray(files, 1, x);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_matches_python),
        cmocka_unit_test(test_shipped_suite),
        cmocka_unit_test(test_damaged_suites),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
