/*
 * test_help.c — the operator's help texts and manuals name what the code
 * accepts (issue 25 item 10), checked against the tables the code itself
 * uses, so neither can drift:
 *
 *   - every key of the config parser's table (scdb_broker_config_key) is a
 *     flag in `scdb-broker --help` and is described in scdb-broker.ini(5):
 *     [broker] keys under BROKER KEYS, remote_NAME as NAME under REMOTE KEYS;
 *   - the man page's RELOAD paragraph "A reload applies these keys:" names
 *     exactly the keys a reload applies (scdb_broker_config_reloadable), and
 *     so does the end of `scdb-broker --help`;
 *   - every benchmark of `scdb bench`'s dispatch table (scdb_bench_name) is
 *     listed by `scdb --help` and by scdb(1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench.h"
#include "broker.h"
#include "scdb_common.h"

/* stdout of a command line, whole (malloc'd). */
static char *run(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    assert_non_null(p);
    assert_non_null(buf);
    for (size_t r; (r = fread(buf + n, 1, cap - 1 - n, p)) > 0;) {
        n += r;
        if (n + 1 == cap) {
            buf = realloc(buf, cap *= 2);
            assert_non_null(buf);
        }
    }
    buf[n] = 0;
    assert_int_equal(pclose(p), 0);
    return buf;
}

/* The whole file into *out (the caller's pointer: GCC 12's -O3
 * -Wdangling-pointer took a local's address handed to scdb_read_file for
 * one that outlives it). */
static void slurp(const char *path, char **out)
{
    size_t len = 0;
    scdb_err e;
    *out = NULL;
    e = scdb_read_file(path, 1 << 24, out, &len);
    if (e) fail_msg("%s: %s", path, scdb_strerror(e));
}

static int word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

/* 1 when w occurs in [s, end) as a whole word (not inside a longer name). */
static int has_word(const char *s, const char *end, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = s; p + n <= end; p++)
        if (!memcmp(p, w, n) && (p == s || !word_char(p[-1])) &&
            (p + n == end || !word_char(p[n])))
            return 1;
    return 0;
}

/* The text of man page section NAME (".SH NAME" up to the next .SH). */
static void section(const char *man, const char *name, const char **s, const char **e)
{
    char h[80];
    snprintf(h, sizeof h, "\n.SH %s\n", name);
    *s = strstr(man, h);
    assert_non_null(*s);
    *s += strlen(h);
    *e = strstr(*s, "\n.SH ");
    if (!*e) *e = *s + strlen(*s);
}

static void test_serve_help_has_every_key(void **state)
{
    char *help = run(SCDB_BROKER_BIN " --help");
    const char *key, *end = help + strlen(help);
    int n = 0, missing = 0;
    (void)state;
    for (int i = 0; (key = scdb_broker_config_key(i)); i++, n++) {
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", key);
        for (char *q = flag + 2; *q; q++)
            if (*q == '_') *q = '-';
        if (!has_word(help, end, flag)) {
            print_error("scdb-broker --help: no %s\n", flag);
            missing++;
        }
    }
    assert_true(n > 30);
    assert_int_equal(missing, 0);
    /* the keys a reload applies, at the end, exactly */
    {
        const char *r = strstr(help, "A reload (SIGHUP) applies these keys");
        const char *re;
        assert_non_null(r);
        re = strstr(r, "\nexit status");
        assert_non_null(re);
        for (int i = 0; (key = scdb_broker_config_key(i)); i++)
            if (has_word(r, re, key) != scdb_broker_config_reloadable(key)) {
                print_error("scdb-broker --help: reload list and %s disagree\n", key);
                missing++;
            }
        assert_int_equal(missing, 0);
    }
    free(help);
}

static void test_man_page_has_every_key(void **state)
{
    char *man;
    slurp(SCDB_SOURCE_DIR "/broker/scdb-broker.ini.5", &man);
    const char *bs, *be, *rs, *re, *ls, *le, *key;
    int missing = 0, n_reload = 0;
    (void)state;
    section(man, "BROKER KEYS", &bs, &be);
    section(man, "REMOTE KEYS", &rs, &re);
    section(man, "RELOAD", &ls, &le);
    for (int i = 0; (key = scdb_broker_config_key(i)); i++) {
        int remote = !strncmp(key, "remote_", 7);
        if (remote ? !has_word(rs, re, key + 7) : !has_word(bs, be, key)) {
            print_error("scdb-broker.ini(5): %s is not under %s KEYS\n", remote ? key + 7 : key,
                        remote ? "REMOTE" : "BROKER");
            missing++;
        }
    }
    assert_int_equal(missing, 0);
    /* RELOAD: the paragraph that lists what a reload applies */
    ls = strstr(ls, "A reload applies these keys:");
    assert_true(ls && ls < le);
    le = strstr(ls, "\n.PP");
    assert_non_null(le);
    for (int i = 0; (key = scdb_broker_config_key(i)); i++) {
        int listed = has_word(ls, le, key), applied = scdb_broker_config_reloadable(key);
        n_reload += applied;
        if (listed != applied) {
            print_error("scdb-broker.ini(5) RELOAD: %s is %s but a reload %s it\n", key,
                        listed ? "listed" : "not listed", applied ? "applies" : "does not apply");
            missing++;
        }
    }
    assert_true(n_reload > 0);
    assert_int_equal(missing, 0);
    free(man);
}

/* Names that are not keys are not reloadable; a few that are.  (A typo in
 * reload.c's list makes that key non-reloadable, and the man page check
 * above then fails on it.) */
static void test_reloadable_names_keys(void **state)
{
    const char *key;
    int n = 0;
    (void)state;
    assert_false(scdb_broker_config_reloadable("no_such_key"));
    assert_false(scdb_broker_config_reloadable(""));
    assert_false(scdb_broker_config_reloadable("endpoint"));
    assert_true(scdb_broker_config_reloadable("log_level"));
    assert_true(scdb_broker_config_reloadable("max_inflight"));
    assert_false(scdb_broker_config_reloadable("max_inflight_per_client"));
    for (int i = 0; (key = scdb_broker_config_key(i)); i++) n += scdb_broker_config_reloadable(key);
    assert_true(n >= 2);
}

static void test_scdb_help_has_every_bench(void **state)
{
    char *help = run(SCDB_CLI_BIN " --help");
    char *man;
    slurp(SCDB_SOURCE_DIR "/cli/scdb.1", &man);
    const char *b, *hs, *he, *ms, *me;
    int n = 0, missing = 0;
    (void)state;
    hs = strstr(help, "  bench ");
    assert_non_null(hs);
    he = strstr(hs, "\n\n");
    assert_non_null(he);
    ms = strstr(man, "\n.B bench\n");
    assert_non_null(ms);
    {   /* up to the next entry or section */
        const char *tp = strstr(ms + 1, "\n.TP"), *sh = strstr(ms + 1, "\n.SH");
        me = tp && (!sh || tp < sh) ? tp : sh ? sh : ms + strlen(ms);
    }
    for (int i = 0; (b = scdb_bench_name(i)); i++, n++) {
        if (!has_word(hs, he, b)) {
            print_error("scdb --help: no bench %s\n", b);
            missing++;
        }
        if (!has_word(ms, me, b)) {
            print_error("scdb(1): no bench %s\n", b);
            missing++;
        }
    }
    assert_true(n >= 10);
    assert_null(scdb_bench_name(n));
    assert_null(scdb_bench_name(-1));
    assert_int_equal(missing, 0);
    free(help);
    free(man);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_help_has_every_key),
        cmocka_unit_test(test_man_page_has_every_key),
        cmocka_unit_test(test_reloadable_names_keys),
        cmocka_unit_test(test_scdb_help_has_every_bench),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
