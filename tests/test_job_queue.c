/* test_job_queue.c — the broker's job queues (broker/job_queue.c): lanes of
 * per-client FIFOs served round robin, so that one client's burst never
 * holds another's get; and the worker_cpus list parser (config.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* The config keys: worker_cpus checked when set, worker_nice in range. */
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
        cmocka_unit_test(cpu_lists),
        cmocka_unit_test(placement_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
