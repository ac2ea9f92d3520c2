/* test_common.c — common/: the option value parser (scdb_common.h "option
 * values"): every way a value can be wrong gets its own code and a message
 * that names the option; the progress report (scdb_common.h "progress"): a
 * log gets whole lines, a bounded count, a terminal one redrawn line; paths
 * named relative to the data directory. */
#include <float.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "scdb_common.h"

static char why[256];

/* parse s as an int in [lo, hi]; the code, why filled */
static scdb_err pint(const char *s, int lo, int hi, int *out)
{
    why[0] = 0;
    return scdb_parse_int("--windows", s, lo, hi, out, why, sizeof why);
}

static void assert_why(const char *want)
{
    if (!strstr(why, want)) print_error("message '%s' lacks '%s'\n", why, want);
    assert_non_null(strstr(why, want));
    assert_non_null(strstr(why, "--"));   /* names the option */
}

static void test_int_good(void **state)
{
    int v = -7;
    (void)state;
    assert_int_equal(pint("8", 1, 100, &v), SCDB_OK);
    assert_int_equal(v, 8);
    assert_int_equal(pint("+8", 1, 100, &v), SCDB_OK);
    assert_int_equal(v, 8);
    assert_int_equal(pint("-3", -5, 5, &v), SCDB_OK);
    assert_int_equal(v, -3);
    assert_int_equal(pint("007", 0, 10, &v), SCDB_OK);   /* decimal, not octal */
    assert_int_equal(v, 7);
    assert_int_equal(pint("2147483647", 0, INT_MAX, &v), SCDB_OK);
    assert_int_equal(v, INT_MAX);
    assert_int_equal(pint("-2147483648", INT_MIN, 0, &v), SCDB_OK);
    assert_int_equal(v, INT_MIN);
    assert_int_equal(pint("1", 1, 1, &v), SCDB_OK);      /* both bounds inclusive */
}

static void test_int_empty(void **state)
{
    int v = 42;
    (void)state;
    assert_int_equal(pint("", 1, 100, &v), SCDB_EINVAL);
    assert_why("--windows: empty value (want an integer in [1, 100])");
    assert_int_equal(pint(NULL, 1, 100, &v), SCDB_EINVAL);
    assert_why("empty value");
    assert_int_equal(v, 42);                              /* untouched on failure */
}

static void test_int_garbage(void **state)
{
    const char *bad[] = {"abc", " 8", "\t8", "-", "+", "x8", ".5", "--8", "\n"};
    int v = 42;
    (void)state;
    for (size_t i = 0; i < SCDB_ARRAY_LEN(bad); i++) {
        assert_int_equal(pint(bad[i], 0, 100, &v), SCDB_EINVAL);
        assert_why("not an integer (want one in [0, 100])");
    }
    assert_int_equal(v, 42);
}

static void test_int_trailing(void **state)
{
    int v = 42;
    (void)state;
    assert_int_equal(pint("8x", 1, 100, &v), SCDB_EINVAL);
    assert_why("--windows '8x': junk after the number ('x')");
    assert_int_equal(pint("8 ", 1, 100, &v), SCDB_EINVAL);
    assert_why("junk after the number (' ')");
    assert_int_equal(pint("1e3", 1, 10000, &v), SCDB_EINVAL);   /* not a real */
    assert_why("('e3')");
    assert_int_equal(pint("0x10", 0, 100, &v), SCDB_EINVAL);
    assert_why("('x10')");
    assert_int_equal(pint("5.0", 1, 100, &v), SCDB_EINVAL);
    assert_why("('.0')");
    assert_int_equal(v, 42);
}

static void test_int_overflow(void **state)
{
    int v = 42;
    int64_t w = 42;
    (void)state;
    assert_int_equal(pint("99999999999999999999", 1, 100, &v), SCDB_ERANGE);
    assert_why("--windows '99999999999999999999': overflows (want [1, 100])");
    assert_int_equal(pint("-99999999999999999999", -100, 100, &v), SCDB_ERANGE);
    assert_why("overflows");
    /* past INT_MAX but within int64: out of the int's range, not wrapped */
    assert_int_equal(pint("4294967297", INT_MIN, INT_MAX, &v), SCDB_ERANGE);
    assert_why("out of range");
    assert_int_equal(scdb_parse_i64("--n", "9223372036854775808", INT64_MIN, INT64_MAX, &w, why,
                                    sizeof why), SCDB_ERANGE);
    assert_why("overflows");
    assert_int_equal(scdb_parse_i64("--n", "9223372036854775807", INT64_MIN, INT64_MAX, &w, why,
                                    sizeof why), SCDB_OK);
    assert_true(w == INT64_MAX);
    assert_int_equal(v, 42);
}

static void test_int_range(void **state)
{
    int v = 42;
    (void)state;
    assert_int_equal(pint("0", 1, 100, &v), SCDB_ERANGE);
    assert_why("--windows '0': out of range (want [1, 100])");
    assert_int_equal(pint("101", 1, 100, &v), SCDB_ERANGE);
    assert_why("'101': out of range");
    assert_int_equal(pint("-1", 0, 100, &v), SCDB_ERANGE);
    assert_int_equal(v, 42);
}

static void test_u64(void **state)
{
    uint64_t v = 42;
    (void)state;
    assert_int_equal(scdb_parse_u64("--seed", "18446744073709551615", 0, UINT64_MAX, &v, why,
                                    sizeof why), SCDB_OK);
    assert_true(v == UINT64_MAX);
    v = 42;
    /* strtoull would read "-1" as UINT64_MAX */
    assert_int_equal(scdb_parse_u64("--seed", "-1", 0, UINT64_MAX, &v, why, sizeof why), SCDB_EINVAL);
    assert_why("--seed '-1': not an unsigned integer");
    assert_int_equal(scdb_parse_u64("--seed", "18446744073709551616", 0, UINT64_MAX, &v, why,
                                    sizeof why), SCDB_ERANGE);
    assert_why("overflows");
    assert_int_equal(scdb_parse_u64("--seed", "", 0, 10, &v, why, sizeof why), SCDB_EINVAL);
    assert_why("--seed: empty value");
    assert_int_equal(scdb_parse_u64("--seed", "12k", 0, 100, &v, why, sizeof why), SCDB_EINVAL);
    assert_why("junk after the number ('k')");
    assert_int_equal(scdb_parse_u64("--seed", "11", 0, 10, &v, why, sizeof why), SCDB_ERANGE);
    assert_why("out of range (want [0, 10])");
    assert_true(v == 42);
}

static void test_u32(void **state)
{
    uint32_t v = 42;
    (void)state;
    assert_int_equal(scdb_parse_u32("--layers", "4294967295", 1, UINT32_MAX, &v, why, sizeof why),
                     SCDB_OK);
    assert_true(v == UINT32_MAX);
    v = 42;
    /* (uint32_t)strtoul would wrap this to 1 */
    assert_int_equal(scdb_parse_u32("--layers", "4294967297", 1, UINT32_MAX, &v, why, sizeof why),
                     SCDB_ERANGE);
    assert_why("--layers '4294967297': out of range");
    assert_true(v == 42);
}

static void test_real(void **state)
{
    double d = 42;
    float f = 42;
    (void)state;
    assert_int_equal(scdb_parse_f64("--seconds", "2.5", 0, 10, &d, why, sizeof why), SCDB_OK);
    assert_true(d == 2.5);
    assert_int_equal(scdb_parse_f64("--scale", "1e-3", 0, 1, &d, why, sizeof why), SCDB_OK);
    assert_true(d == 1e-3);
    assert_int_equal(scdb_parse_float("--lr", "3", 0, 10, &f, why, sizeof why), SCDB_OK);
    assert_true(f == 3.0f);
    d = f = 42;
    assert_int_equal(scdb_parse_f64("--seconds", "", 0, 10, &d, why, sizeof why), SCDB_EINVAL);
    assert_why("--seconds: empty value (want a number in [0, 10])");
    assert_int_equal(scdb_parse_f64("--seconds", "fast", 0, 10, &d, why, sizeof why), SCDB_EINVAL);
    assert_why("--seconds 'fast': not a number");
    assert_int_equal(scdb_parse_f64("--seconds", "nan", 0, 10, &d, why, sizeof why), SCDB_EINVAL);
    assert_why("not a number");
    assert_int_equal(scdb_parse_f64("--seconds", "inf", 0, 10, &d, why, sizeof why), SCDB_EINVAL);
    assert_why("not a number");
    assert_int_equal(scdb_parse_f64("--seconds", " 1", 0, 10, &d, why, sizeof why), SCDB_EINVAL);
    assert_why("not a number");
    assert_int_equal(scdb_parse_f64("--seconds", "1.5s", 0, 10, &d, why, sizeof why), SCDB_EINVAL);
    assert_why("junk after the number ('s')");
    assert_int_equal(scdb_parse_f64("--seconds", "1e999", 0, DBL_MAX, &d, why, sizeof why),
                     SCDB_ERANGE);
    assert_why("--seconds '1e999': overflows");
    assert_int_equal(scdb_parse_f64("--seconds", "10.5", 0, 10, &d, why, sizeof why), SCDB_ERANGE);
    assert_why("out of range (want [0, 10])");
    assert_int_equal(scdb_parse_float("--lr", "-0.1", 0, 10, &f, why, sizeof why), SCDB_ERANGE);
    assert_why("--lr '-0.1': out of range");
    assert_true(d == 42 && f == 42);
}

static void test_null_args(void **state)
{
    int v;
    (void)state;
    assert_int_equal(scdb_parse_int("--x", "1", 0, 9, NULL, why, sizeof why), SCDB_EINVAL);
    /* no message buffer: the code alone */
    assert_int_equal(scdb_parse_int("--x", "z", 0, 9, &v, NULL, 0), SCDB_EINVAL);
    assert_int_equal(scdb_parse_int("--x", "10", 0, 9, &v, NULL, 0), SCDB_ERANGE);
    /* a short buffer truncates, never overruns */
    char small[8];
    memset(small, 'Q', sizeof small);
    assert_int_equal(scdb_parse_int("--windows", "abc", 0, 9, &v, small, sizeof small), SCDB_EINVAL);
    assert_int_equal(small[7], 0);
}

/* comma lists: fields in order; "" is none; an empty field, too many
 * fields are refused with nothing to free */
static void test_split_list(void **state)
{
    char *f[3];
    (void)state;
    assert_int_equal(scdb_split_list("a,bb,c", f, 3), 3);
    assert_string_equal(f[0], "a");
    assert_string_equal(f[1], "bb");
    assert_string_equal(f[2], "c");
    for (int i = 0; i < 3; i++) free(f[i]);
    assert_int_equal(scdb_split_list("", f, 3), 0);
    static const char *const refused[] = {",a", "a,", "a,,b", ",", "a,b,c,d"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        assert_int_equal(scdb_split_list(refused[i], f, 3), -1);
    assert_true(scdb_list_has_empty_field(""));
    assert_true(scdb_list_has_empty_field("0,,0.5"));
    assert_true(scdb_list_has_empty_field(",0.5"));
    assert_true(scdb_list_has_empty_field("0.5,"));
    assert_false(scdb_list_has_empty_field("0,0.5"));
    assert_false(scdb_list_has_empty_field("age"));
}

/* scdb_list_has: whole fields only, anywhere in the list; a NULL or empty
 * list holds nothing; an empty field matches only the empty name */
static void test_list_has(void **state)
{
    (void)state;
    assert_true(scdb_list_has("base,code,manpages", "base"));
    assert_true(scdb_list_has("base,code,manpages", "code"));
    assert_true(scdb_list_has("base,code,manpages", "manpages"));
    assert_false(scdb_list_has("base,code,manpages", "python"));
    assert_false(scdb_list_has("base,code", "bas"));        /* a prefix */
    assert_false(scdb_list_has("base,code", "base,"));      /* across a comma */
    assert_false(scdb_list_has("basement", "base"));
    assert_false(scdb_list_has("codes", "code"));
    assert_false(scdb_list_has(NULL, "base"));
    assert_false(scdb_list_has("", "base"));
    assert_false(scdb_list_has("", ""));
    assert_true(scdb_list_has("a,,b", ""));                 /* the empty field */
    assert_true(scdb_list_has("a,b,", "b"));
}

/* ------------------------------------------------------------ progress */

static double fake_now;
static double fake_clock(void) { return fake_now; }

/* A report of n steps, dt seconds each, into a temp file (not a terminal
 * unless tty); what was written, malloc'd. */
static char *progress_run(long total, long n, double dt, int tty)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    scdb_progress p;
    scdb_progress_begin(&p, f, total);
    assert_false(p.tty);   /* a file */
    p.tty = tty;
    p.clock = fake_clock;
    fake_now = 100.0;
    p.t_last = fake_now;
    for (long i = 1; i <= n; i++) {
        fake_now += dt;
        scdb_progress_step(&p, i, "  statistics: %ld windows (%ld tokens)", i, i * 384);
    }
    scdb_progress_end(&p);
    long len = ftell(f);
    assert_true(len >= 0);
    char *out = calloc(1, (size_t)len + 1);
    assert_non_null(out);
    rewind(f);
    assert_int_equal(fread(out, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    return out;
}

/* whole lines only (no '\r', ends with '\n'): their count */
static int whole_lines(const char *s)
{
    int n = 0;
    assert_null(strchr(s, '\r'));
    for (const char *c = s; *c; c++) n += *c == '\n';
    assert_true(*s == '\0' || s[strlen(s) - 1] == '\n');
    return n;
}

static const char *last_line(const char *s)
{
    size_t n = strlen(s);
    assert_true(n > 0);
    const char *c = s + n - 1;   /* its '\n' */
    while (c > s && c[-1] != '\n') c--;
    return c;
}

static void test_progress_log(void **state)
{
    (void)state;
    /* 1000 windows over 15.6 s (steps of 1/64 s, exact in binary): a line
     * per tenth, each 1.56 s after the last */
    char *s = progress_run(1000, 1000, 1.0 / 64, 0);
    int n = whole_lines(s);
    assert_int_equal(n, 10);
    assert_string_equal(last_line(s), "  statistics: 1000 windows (384000 tokens)\n");
    assert_non_null(strstr(s, "  statistics: 100 windows (38400 tokens)\n"));   /* the first tenth */
    free(s);
    /* fast work: only its last state */
    s = progress_run(1000, 1000, 0.0, 0);
    assert_int_equal(whole_lines(s), 1);
    assert_string_equal(s, "  statistics: 1000 windows (384000 tokens)\n");
    free(s);
    /* tenths closer than a second apart are not all printed */
    s = progress_run(100, 100, 1.0 / 64, 0);
    assert_int_equal(whole_lines(s), 1 + 1);   /* 1 s passed at the 64th; the end */
    assert_string_equal(s, "  statistics: 64 windows (24576 tokens)\n  statistics: 100 windows (38400 tokens)\n");
    free(s);
    /* unknown total over 100 s: a line each SCDB_PROGRESS_EVERY_S */
    s = progress_run(0, 800, 0.125, 0);
    assert_int_equal(whole_lines(s), (int)(100 / SCDB_PROGRESS_EVERY_S));
    assert_string_equal(last_line(s), "  statistics: 800 windows (307200 tokens)\n");
    free(s);
    /* stopped early (an error): the state it reached */
    s = progress_run(1000, 37, 0.0, 0);
    assert_string_equal(s, "  statistics: 37 windows (14208 tokens)\n");
    free(s);
    /* nothing done: nothing printed */
    s = progress_run(10, 0, 0.0, 0);
    assert_string_equal(s, "");
    free(s);
}

static void test_progress_tty(void **state)
{
    (void)state;
    /* one line redrawn: '\r' before each state, one '\n' at the end */
    char *s = progress_run(1000, 1000, 1.0 / 64, 1);
    int redraws = 0, nl = 0;
    for (const char *c = s; *c; c++) { redraws += *c == '\r'; nl += *c == '\n'; }
    assert_int_equal(nl, 1);
    assert_true(redraws >= 100 && redraws <= 1000 / 7 + 1);   /* at most every 0.1 s, and the last */
    assert_non_null(strstr(s, "\r  statistics: 1000 windows (384000 tokens)\n"));
    free(s);
    /* a shorter text is padded over the longer one on screen */
    FILE *f = tmpfile();
    assert_non_null(f);
    scdb_progress p;
    scdb_progress_begin(&p, f, 2);
    p.tty = 1;
    p.clock = fake_clock;
    p.t_last = fake_now = 0.0;
    fake_now = 1.0;
    scdb_progress_step(&p, 1, "long text");
    fake_now = 2.0;
    scdb_progress_step(&p, 2, "short");
    scdb_progress_end(&p);
    char buf[64] = {0};
    rewind(f);
    assert_true(fread(buf, 1, sizeof buf - 1, f) > 0);
    fclose(f);
    assert_string_equal(buf, "\rlong text\rshort    \n");
    /* a NULL stream: quiet */
    scdb_progress_begin(&p, NULL, 5);
    scdb_progress_step(&p, 1, "x");
    scdb_progress_end(&p);
}

/* scdb_path_relative: a path below the directory by name, or the same file
 * through a link (the build tree's share folder links data/'s entries),
 * is named relative to it; anything else stays as given */
static void test_path_relative(void **state)
{
    char root[] = "/tmp/scdb_test_common_XXXXXX", p[256], dir[256], other[256];
    FILE *f;
    (void)state;
    assert_non_null(mkdtemp(root));
    snprintf(p, sizeof p, "%s/src", root);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/src/policies", root);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/share", root);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/share/policies", root);
    assert_int_equal(symlink("../src/policies", p), 0);
    snprintf(p, sizeof p, "%s/src/policies/x.safetensors", root);
    assert_non_null(f = fopen(p, "w"));
    fclose(f);
    snprintf(other, sizeof other, "%s/src/y.txt", root);
    assert_non_null(f = fopen(other, "w"));
    fclose(f);
    snprintf(dir, sizeof dir, "%s/share", root);

    /* the same file through the link: its tail below dir */
    assert_string_equal(scdb_path_relative(p, dir), "policies/x.safetensors");
    /* below dir by name, with or without a trailing slash on dir */
    snprintf(p, sizeof p, "%s/share/policies/x.safetensors", root);
    assert_string_equal(scdb_path_relative(p, dir), "policies/x.safetensors");
    strcat(dir, "/");
    assert_string_equal(scdb_path_relative(p, dir), "policies/x.safetensors");
    snprintf(p, sizeof p, "%s/share/missing.txt", root);
    assert_string_equal(scdb_path_relative(p, dir), "missing.txt");
    /* outside dir, missing, dir itself, relative, NULL: as given */
    assert_ptr_equal(scdb_path_relative(other, dir), other);
    snprintf(p, sizeof p, "%s/src/none.txt", root);
    assert_ptr_equal(scdb_path_relative(p, dir), p);
    snprintf(p, sizeof p, "%s/share", root);
    assert_ptr_equal(scdb_path_relative(p, dir), p);
    assert_string_equal(scdb_path_relative("y.txt", dir), "y.txt");
    assert_null(scdb_path_relative(NULL, dir));
    assert_string_equal(scdb_path_relative("a/b", NULL), "a/b");
    assert_int_equal(scdb_rm_tree(root), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_int_good),     cmocka_unit_test(test_int_empty),
        cmocka_unit_test(test_int_garbage),  cmocka_unit_test(test_int_trailing),
        cmocka_unit_test(test_int_overflow), cmocka_unit_test(test_int_range),
        cmocka_unit_test(test_u64),          cmocka_unit_test(test_u32),
        cmocka_unit_test(test_real),         cmocka_unit_test(test_null_args),
        cmocka_unit_test(test_split_list),   cmocka_unit_test(test_list_has),
        cmocka_unit_test(test_progress_log), cmocka_unit_test(test_progress_tty),
        cmocka_unit_test(test_path_relative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
