/* test_heap_trim.c — the broker gives freed heap back off its event loop
 * (issue 42 item 6; broker/heap_trim.c).  After a reload the main thread
 * drops the last reference to the previous registry; malloc_trim, which
 * walks every malloc arena of the process, used to run right there,
 * between two requests.  malloc_trim is wrapped here (GNU ld --wrap): the
 * wrapper records the thread that calls it and, called from any thread but
 * the test's, holds it until the test lets it go, so a caller that waited
 * for the trim would be seen waiting.
 *
 *   last_unref_does_not_trim_on_the_caller  the last unref of a registry
 *       returns while the trim it asked for is still held, and the trim
 *       runs on the thread named scdb-trim
 *   requests_during_a_pass_make_one_more  three requests while a pass is
 *       held make one more pass, not three
 *   free_finishes_a_pass_asked_for  a trim asked for just before the
 *       trimmer is freed still runs (the broker's last registry at exit)
 */
#define _GNU_SOURCE 1
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "broker_int.h"

static pthread_t g_test_thread;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_calls, g_on_test_thread;
static char g_name[16];
static sem_t g_entered, g_release;

int __real_malloc_trim(size_t pad);
int __wrap_malloc_trim(size_t pad)
{
    int mine = pthread_equal(pthread_self(), g_test_thread);

    pthread_mutex_lock(&g_mu);
    g_calls++;
    if (mine) g_on_test_thread++;
    pthread_getname_np(pthread_self(), g_name, sizeof g_name);
    pthread_mutex_unlock(&g_mu);
    sem_post(&g_entered);
    if (!mine) sem_wait(&g_release);
    return __real_malloc_trim(pad);
}

static int calls(void)
{
    int n;
    pthread_mutex_lock(&g_mu);
    n = g_calls;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* 0 when a malloc_trim call entered within 5 s */
static int entered(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    return sem_timedwait(&g_entered, &ts);
}

static void wait_passes(bk_trimmer *t, uint64_t n)
{
    double until = scdb_now() + 5;
    while (bk_trimmer_count(t, NULL) < n) {
        if (scdb_now() > until) fail_msg("the trimmer made %llu passes, not %llu",
                                         (unsigned long long)bk_trimmer_count(t, NULL),
                                         (unsigned long long)n);
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

static int setup(void **state)
{
    (void)state;
    g_test_thread = pthread_self();
    g_calls = g_on_test_thread = 0;
    g_name[0] = 0;
    sem_init(&g_entered, 0, 0);
    sem_init(&g_release, 0, 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sem_destroy(&g_entered);
    sem_destroy(&g_release);
    return 0;
}

static void last_unref_does_not_trim_on_the_caller(void **state)
{
    bk_trimmer *t = NULL;
    bk_registry *r = calloc(1, sizeof *r);
    (void)state;
    assert_non_null(r);
    assert_int_equal(bk_trimmer_new(&t), SCDB_OK);
    r->refs = 2;
    r->trim = t;
    bk_registry_unref(r);                /* not the last: nothing */
    assert_int_equal(calls(), 0);
    bk_registry_unref(r);                /* the last: freed, trim asked */
    /* back here while the trim is held: the caller did not wait for it */
    assert_int_equal(entered(), 0);
    assert_int_equal(g_on_test_thread, 0);
    assert_string_equal(g_name, "scdb-trim");
    assert_int_equal(bk_trimmer_count(t, NULL), 0);
    sem_post(&g_release);
    wait_passes(t, 1);
    bk_trimmer_free(&t);
    assert_null(t);
    assert_int_equal(calls(), 1);
    bk_trimmer_free(&t);                 /* NULL: nothing */
}

static void requests_during_a_pass_make_one_more(void **state)
{
    bk_trimmer *t = NULL;
    uint64_t last_ns = 0;
    (void)state;
    assert_int_equal(bk_trimmer_new(&t), SCDB_OK);
    bk_trimmer_request(t);
    assert_int_equal(entered(), 0);      /* the first pass, held */
    for (int i = 0; i < 3; i++) bk_trimmer_request(t);
    sem_post(&g_release);
    assert_int_equal(entered(), 0);      /* one more pass for the three */
    sem_post(&g_release);
    wait_passes(t, 2);
    assert_int_equal(bk_trimmer_count(t, &last_ns), 2);
    assert_true(last_ns > 0);
    bk_trimmer_free(&t);
    assert_int_equal(calls(), 2);
    assert_int_equal(g_on_test_thread, 0);
}

static void free_finishes_a_pass_asked_for(void **state)
{
    bk_trimmer *t = NULL;
    (void)state;
    assert_int_equal(bk_trimmer_new(&t), SCDB_OK);
    bk_trimmer_request(t);
    sem_post(&g_release);                /* let it through when it comes */
    bk_trimmer_free(&t);
    assert_int_equal(calls(), 1);
    assert_int_equal(g_on_test_thread, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(last_unref_does_not_trim_on_the_caller, setup, teardown),
        cmocka_unit_test_setup_teardown(requests_during_a_pass_make_one_more, setup, teardown),
        cmocka_unit_test_setup_teardown(free_finishes_a_pass_asked_for, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
