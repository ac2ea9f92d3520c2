/* test_job_queue.c — the broker's job queues (broker/job_queue.c): lanes of
 * per-client FIFOs served round robin, so that one client's burst never
 * holds another's get; and the worker_cpus list parser (config.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include <cmocka.h>

#include "broker_int.h"

/* A job of client `client` (0: internal) and kind op, tagged `tag`. */
static bk_job *job(bk_op op, uint64_t client, uint64_t tag)
{
    bk_job *j = calloc(1, sizeof *j);
    assert_non_null(j);
    j->op = op;
    j->req_id = tag;
    if (op == OP_SESSION_EVICT) {
        j->client = client;
    } else if (client) {
        j->req = calloc(1, sizeof *j->req);
        assert_non_null(j->req);
        j->req->client = client;
    }
    return j;
}

static uint64_t pop_tag(bk_queue *q)
{
    bk_job *j = bk_queue_pop(q);
    uint64_t tag;
    assert_non_null(j);
    assert_true(j->t_start_ns >= j->t_queued_ns && j->t_queued_ns > 0);
    tag = j->req_id;
    free(j->req);
    free(j);
    return tag;
}

/* Client 1 queues a burst of 5 gets, then clients 2 and 3 one each: they
 * are served after client 1's first, not after its whole burst; client
 * 1's gets stay in their order. */
static void burst_does_not_hold_others(void **state)
{
    bk_queue q;
    static const uint64_t want[] = {11, 21, 31, 12, 13, 14, 15};
    (void)state;
    bk_queue_init(&q);
    for (uint64_t i = 1; i <= 5; i++) bk_queue_push(&q, job(OP_GET, 1, 10 + i));
    bk_queue_push(&q, job(OP_GET, 2, 21));
    bk_queue_push(&q, job(OP_GET, 3, 31));
    assert_int_equal(q.len, 7);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) assert_int_equal(pop_tag(&q), want[i]);
    assert_int_equal(q.len, 0);
    bk_queue_destroy(&q);
}

/* Two clients with bursts interleave one job per turn. */
static void round_robin_between_bursts(void **state)
{
    bk_queue q;
    static const uint64_t want[] = {11, 21, 12, 22, 13, 23, 24};
    (void)state;
    bk_queue_init(&q);
    for (uint64_t i = 1; i <= 3; i++) bk_queue_push(&q, job(OP_GET, 1, 10 + i));
    for (uint64_t i = 1; i <= 4; i++) bk_queue_push(&q, job(OP_LOOKUP, 2, 20 + i));
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) assert_int_equal(pop_tag(&q), want[i]);
    bk_queue_destroy(&q);
}

/* Evictions have their own lane: with both lanes full, pops alternate, so
 * a get waits behind at most one eviction and evictions never starve. */
static void lanes_alternate(void **state)
{
    bk_queue q;
    static const uint64_t want[] = {1, 101, 2, 102, 3, 103, 104};
    (void)state;
    bk_queue_init(&q);
    assert_int_equal(bk_job_lane(OP_GET), BK_LANE_READ);
    assert_int_equal(bk_job_lane(OP_LOOKUP), BK_LANE_READ);
    assert_int_equal(bk_job_lane(OP_PUT), BK_LANE_READ);
    assert_int_equal(bk_job_lane(OP_SESSION_EVICT), BK_LANE_BACK);
    assert_int_equal(bk_job_lane(BK_JOB_REMOTE_INSERT), BK_LANE_BACK);
    /* a burst of evictions from client 5, queued first ... */
    for (uint64_t i = 1; i <= 4; i++) bk_queue_push(&q, job(OP_SESSION_EVICT, 5, 100 + i));
    /* ... then three gets of client 6 */
    for (uint64_t i = 1; i <= 3; i++) bk_queue_push(&q, job(OP_GET, 6, i));
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) assert_int_equal(pop_tag(&q), want[i]);
    bk_queue_destroy(&q);
}

/* A client that queued again after its FIFO emptied goes to the back. */
static void emptied_client_requeues_at_back(void **state)
{
    bk_queue q;
    (void)state;
    bk_queue_init(&q);
    bk_queue_push(&q, job(OP_GET, 1, 11));
    bk_queue_push(&q, job(OP_GET, 2, 21));
    assert_int_equal(pop_tag(&q), 11);
    bk_queue_push(&q, job(OP_GET, 1, 12));
    bk_queue_push(&q, job(OP_GET, 3, 31));
    assert_int_equal(pop_tag(&q), 21);
    assert_int_equal(pop_tag(&q), 12);
    assert_int_equal(pop_tag(&q), 31);
    bk_queue_destroy(&q);
}

/* Stopped: the jobs left come out, then NULL (no wait). */
static void stop_drains_then_null(void **state)
{
    bk_queue q;
    (void)state;
    bk_queue_init(&q);
    bk_queue_push(&q, job(OP_GET, 0, 7));
    bk_queue_stop(&q);
    assert_int_equal(pop_tag(&q), 7);
    assert_null(bk_queue_pop(&q));
    bk_queue_destroy(&q);
}

/* An eviction thread's pop takes its lane only, in the lane's order; the
 * gets stay for the workers. */
static void lane_pop_takes_its_lane_only(void **state)
{
    bk_queue q;
    bk_job *j;
    (void)state;
    bk_queue_init(&q);
    bk_queue_push(&q, job(OP_GET, 1, 1));
    bk_queue_push(&q, job(OP_SESSION_EVICT, 2, 101));
    bk_queue_push(&q, job(OP_GET, 3, 2));
    bk_queue_push(&q, job(OP_SESSION_EVICT, 4, 102));
    for (uint64_t want = 101; want <= 102; want++) {
        assert_non_null(j = bk_queue_pop_lane(&q, BK_LANE_BACK));
        assert_int_equal(j->op, OP_SESSION_EVICT);
        assert_int_equal(j->req_id, want);
        free(j);
    }
    assert_int_equal(q.len, 2);
    bk_queue_stop(&q);
    assert_null(bk_queue_pop_lane(&q, BK_LANE_BACK));   /* stopped, its lane empty */
    assert_int_equal(pop_tag(&q), 1);                    /* the workers drain the rest */
    assert_int_equal(pop_tag(&q), 2);
    assert_null(bk_queue_pop(&q));
    bk_queue_destroy(&q);
}

/* Threads: one eviction thread and one worker, the worker held inside a
 * job.  An eviction pushed while the worker is busy is run by the
 * eviction thread (it does not wait for the worker); then a mixed burst
 * is drained completely (no job is left queued while a thread that could
 * take it sleeps), the eviction thread taking evictions only. */
typedef struct lane_thread {
    bk_queue *q;
    int lane;                   /* -1: any */
    pthread_mutex_t *gate;      /* the worker holds its first job until this opens */
    int n_taken, n_wrong;
    uint64_t last_tag;
} lane_thread;

static void *lane_thread_main(void *arg)
{
    lane_thread *t = arg;
    bk_job *j;
    while ((j = t->lane < 0 ? bk_queue_pop(t->q) : bk_queue_pop_lane(t->q, t->lane))) {
        if (t->lane >= 0 && j->op != OP_SESSION_EVICT) t->n_wrong++;
        if (t->gate && j->req_id == 1) {       /* the worker's long job */
            pthread_mutex_lock(t->gate);
            pthread_mutex_unlock(t->gate);
        }
        __atomic_store_n(&t->last_tag, j->req_id, __ATOMIC_RELEASE);
        __atomic_add_fetch(&t->n_taken, 1, __ATOMIC_ACQ_REL);
        free(j->req);
        free(j);
    }
    return NULL;
}

static int wait_taken(lane_thread *t, int n)
{
    for (int i = 0; i < 5000; i++) {            /* 5 s */
        if (__atomic_load_n(&t->n_taken, __ATOMIC_ACQUIRE) >= n) return 1;
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void eviction_thread_does_not_wait_for_a_decode(void **state)
{
    bk_queue q;
    pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
    lane_thread ev = {&q, BK_LANE_BACK, NULL, 0, 0, 0}, wk = {&q, -1, &gate, 0, 0, 0};
    pthread_t tev, twk;
    (void)state;
    bk_queue_init(&q);
    pthread_mutex_lock(&gate);
    assert_int_equal(pthread_create(&tev, NULL, lane_thread_main, &ev), 0);
    assert_int_equal(pthread_create(&twk, NULL, lane_thread_main, &wk), 0);
    bk_queue_push(&q, job(OP_GET, 1, 1));                /* the worker takes it and stays */
    for (int i = 0; i < 5000 && __atomic_load_n(&q.len, __ATOMIC_RELAXED); i++) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(__atomic_load_n(&q.len, __ATOMIC_RELAXED), 0);
    bk_queue_push(&q, job(OP_SESSION_EVICT, 2, 101));
    assert_true(wait_taken(&ev, 1));                      /* while the worker is held */
    assert_int_equal(__atomic_load_n(&ev.last_tag, __ATOMIC_ACQUIRE), 101);
    assert_int_equal(__atomic_load_n(&wk.n_taken, __ATOMIC_ACQUIRE), 0);
    pthread_mutex_unlock(&gate);
    assert_true(wait_taken(&wk, 1));
    /* a mixed burst: everything is taken, with nobody nudging the queue */
    for (uint64_t i = 0; i < 200; i++)
        bk_queue_push(&q, job(i % 3 ? OP_GET : OP_SESSION_EVICT, 10 + i % 7, 1000 + i));
    for (int i = 0; i < 5000 && __atomic_load_n(&ev.n_taken, __ATOMIC_ACQUIRE) +
                                        __atomic_load_n(&wk.n_taken, __ATOMIC_ACQUIRE) < 202;
         i++) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(__atomic_load_n(&ev.n_taken, __ATOMIC_ACQUIRE) +
                     __atomic_load_n(&wk.n_taken, __ATOMIC_ACQUIRE), 202);
    assert_int_equal(__atomic_load_n(&q.len, __ATOMIC_RELAXED), 0);
    bk_queue_stop(&q);
    pthread_join(tev, NULL);
    pthread_join(twk, NULL);
    assert_int_equal(ev.n_wrong, 0);
    bk_queue_destroy(&q);
}

static void cpu_lists(void **state)
{
    unsigned char c[SCDB_BROKER_MAX_CPUS];
    (void)state;
    assert_int_equal(scdb_broker_cpu_list("0,1", c), 2);
    assert_true(c[0] && c[1] && !c[2]);
    assert_int_equal(scdb_broker_cpu_list("2-5,8", c), 5);
    assert_true(!c[1] && c[2] && c[5] && !c[6] && c[8]);
    assert_int_equal(scdb_broker_cpu_list("3,3,1-3", c), 3);     /* repeats count once */
    assert_int_equal(scdb_broker_cpu_list("1023", c), 1);
    /* empty, garbage, truncated, backwards, out of bounds, wrong shape */
    assert_int_equal(scdb_broker_cpu_list("", c), -1);
    assert_int_equal(scdb_broker_cpu_list(NULL, c), -1);
    assert_int_equal(scdb_broker_cpu_list("x", c), -1);
    assert_int_equal(scdb_broker_cpu_list("0,", c), -1);
    assert_int_equal(scdb_broker_cpu_list("0-", c), -1);
    assert_int_equal(scdb_broker_cpu_list("5-2", c), -1);
    assert_int_equal(scdb_broker_cpu_list("1024", c), -1);
    assert_int_equal(scdb_broker_cpu_list("99999999999999999999", c), -1);
    assert_int_equal(scdb_broker_cpu_list("-1", c), -1);
    assert_int_equal(scdb_broker_cpu_list("0 1", c), -1);
    assert_int_equal(scdb_broker_cpu_list("0;1", c), -1);
}

/* The config keys: worker_cpus checked when set, worker_nice and
 * evict_nice in range. */
static void placement_keys(void **state)
{
    scdb_broker_config c;
    char err[256], v[64];
    (void)state;
    scdb_broker_config_defaults(&c);
    assert_int_equal(c.worker_cpus[0], 0);
    assert_int_equal(c.worker_nice, 0);
    assert_int_equal(scdb_broker_config_set(&c, "worker_cpus", "0-1", err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_broker_config_get(&c, "worker_cpus", v, sizeof v), SCDB_OK);
    assert_string_equal(v, "0-1");
    assert_int_equal(scdb_broker_config_set(&c, "worker-cpus", "1,x", err, sizeof err),
                     SCDB_EINVAL);
    assert_non_null(strstr(err, "worker-cpus"));
    assert_string_equal(c.worker_cpus, "0-1");                  /* untouched */
    assert_int_equal(scdb_broker_config_set(&c, "worker_cpus", "", err, sizeof err), SCDB_OK);
    assert_string_equal(c.worker_cpus, "");
    assert_int_equal(scdb_broker_config_set(&c, "worker_nice", "5", err, sizeof err), SCDB_OK);
    assert_int_equal(c.worker_nice, 5);
    assert_int_equal(scdb_broker_config_set(&c, "worker_nice", "-20", err, sizeof err), SCDB_OK);
    assert_int_equal(c.worker_nice, -20);
    assert_int_equal(scdb_broker_config_get(&c, "worker_nice", v, sizeof v), SCDB_OK);
    assert_string_equal(v, "-20");
    assert_int_equal(scdb_broker_config_set(&c, "worker_nice", "5", err, sizeof err), SCDB_OK);
    assert_int_equal(scdb_broker_config_set(&c, "worker_nice", "20", err, sizeof err),
                     SCDB_EINVAL);
    assert_int_equal(scdb_broker_config_set(&c, "worker_nice", "-21", err, sizeof err),
                     SCDB_EINVAL);
    assert_int_equal(scdb_broker_config_set(&c, "worker_nice", "high", err, sizeof err),
                     SCDB_EINVAL);
    assert_int_equal(scdb_broker_config_set(&c, "worker_nice", "--5", err, sizeof err),
                     SCDB_EINVAL);
    assert_int_equal(scdb_broker_config_set(&c, "worker_nice", "-", err, sizeof err),
                     SCDB_EINVAL);
    /* evict_nice: 0 (the broker's own) by default, -20 .. 19 like worker_nice */
    assert_int_equal(c.evict_nice, 0);
    assert_int_equal(scdb_broker_config_set(&c, "evict_nice", "-10", err, sizeof err), SCDB_OK);
    assert_int_equal(c.evict_nice, -10);
    assert_int_equal(scdb_broker_config_get(&c, "evict_nice", v, sizeof v), SCDB_OK);
    assert_string_equal(v, "-10");
    assert_int_equal(scdb_broker_config_set(&c, "evict_nice", "20", err, sizeof err), SCDB_EINVAL);
    assert_non_null(strstr(err, "evict_nice"));
    assert_int_equal(scdb_broker_config_set(&c, "evict_nice", "-21", err, sizeof err), SCDB_EINVAL);
    assert_int_equal(scdb_broker_config_set(&c, "evict_nice", "x", err, sizeof err), SCDB_EINVAL);
    assert_int_equal(c.evict_nice, -10);                        /* untouched */
    assert_int_equal(c.worker_nice, 5);                         /* a key of its own */
    /* evict_threads: 1 by default, 0 .. 16 */
    assert_int_equal(c.evict_threads, 1);
    assert_int_equal(scdb_broker_config_set(&c, "evict_threads", "0", err, sizeof err), SCDB_OK);
    assert_int_equal(c.evict_threads, 0);
    assert_int_equal(scdb_broker_config_set(&c, "evict-threads", "17", err, sizeof err),
                     SCDB_EINVAL);
    assert_int_equal(scdb_broker_config_set(&c, "evict_threads", "x", err, sizeof err),
                     SCDB_EINVAL);
    assert_int_equal(c.evict_threads, 0);
    /* keys without negatives still refuse them */
    assert_int_equal(scdb_broker_config_set(&c, "workers", "-1", err, sizeof err), SCDB_EINVAL);
    assert_int_equal(c.worker_nice, 5);
    scdb_broker_config_clear(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(burst_does_not_hold_others),
        cmocka_unit_test(round_robin_between_bursts),
        cmocka_unit_test(lanes_alternate),
        cmocka_unit_test(emptied_client_requeues_at_back),
        cmocka_unit_test(stop_drains_then_null),
        cmocka_unit_test(lane_pop_takes_its_lane_only),
        cmocka_unit_test(eviction_thread_does_not_wait_for_a_decode),
        cmocka_unit_test(cpu_lists),
        cmocka_unit_test(placement_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
