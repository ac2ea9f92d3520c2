/* job_queue.c — the job queues of the worker pool and the writer: lanes of
 * per-client FIFOs served round robin (broker_int.h, bk_queue, has the
 * picture).  No allocation: a lane's ring links the first job of each
 * client that has jobs queued there (bk_job.next); a client's later jobs
 * hang off its first (flow_next, flow_tail).  A push scans the ring for
 * the client: O(clients with jobs queued in that lane), never more than
 * max_inflight. */
#include "broker_int.h"

#include <string.h>

int bk_job_lane(bk_op op)
{
    return op == OP_SESSION_EVICT || op == BK_JOB_REMOTE_INSERT ? BK_LANE_BACK : BK_LANE_READ;
}

void bk_queue_init(bk_queue *q)
{
    memset(q, 0, sizeof *q);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    for (int k = 0; k < BK_LANES; k++) pthread_cond_init(&q->lane_cv[k], NULL);
}

void bk_queue_destroy(bk_queue *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    for (int k = 0; k < BK_LANES; k++) pthread_cond_destroy(&q->lane_cv[k]);
}

static void ring_append(bk_queue *q, int lane, bk_job *j)
{
    j->next = NULL;
    if (q->lane[lane].tail)
        q->lane[lane].tail->next = j;
    else
        q->lane[lane].head = j;
    q->lane[lane].tail = j;
}

void bk_queue_push(bk_queue *q, bk_job *j)
{
    bk_job *f;

    j->lane = bk_job_lane(j->op);
    j->flow = j->op == OP_SESSION_EVICT ? j->client : j->req ? j->req->client : 0;
    j->flow_next = NULL;
    j->flow_tail = j;
    j->t_queued_ns = scdb_now_ns();
    pthread_mutex_lock(&q->mu);
    for (f = q->lane[j->lane].head; f && f->flow != j->flow; f = f->next) {}
    if (f) {                          /* behind the client's earlier jobs */
        f->flow_tail->flow_next = j;
        f->flow_tail = j;
    } else {                          /* the client's turn comes last */
        ring_append(q, j->lane, j);
    }
    __atomic_add_fetch(&q->len, 1, __ATOMIC_RELAXED);
    /* a thread of this lane alone if one sleeps and is not already woken
     * for an earlier job; else one that takes anything */
    if (q->idle_lane[j->lane] > q->woken_lane[j->lane]) {
        q->woken_lane[j->lane]++;
        pthread_cond_signal(&q->lane_cv[j->lane]);
    } else {
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
}

/* Take lane's first job (q->mu held): the first job of its first client,
 * that client moved to the back of the ring if it has more. */
static bk_job *take(bk_queue *q, int lane)
{
    bk_job *j = q->lane[lane].head;
    if (!j) return NULL;
    q->lane[lane].head = j->next;
    if (!j->next) q->lane[lane].tail = NULL;
    if (j->flow_next) {       /* the client's next job: back of the ring */
        bk_job *n = j->flow_next;
        n->flow_tail = j->flow_tail;
        ring_append(q, lane, n);
    }
    j->next = j->flow_next = j->flow_tail = NULL;
    return j;
}

bk_job *bk_queue_pop(bk_queue *q)
{
    bk_job *j = NULL;

    pthread_mutex_lock(&q->mu);
    for (;;) {
        for (int k = 0; k < BK_LANES && !j; k++) {
            int lane = (q->next_lane + k) % BK_LANES;
            if ((j = take(q, lane))) q->next_lane = (lane + 1) % BK_LANES; /* the other first next time */
        }
        if (j || q->stop) break;
        pthread_cond_wait(&q->cv, &q->mu);
    }
    if (j) __atomic_sub_fetch(&q->len, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&q->mu);
    if (j) j->t_start_ns = scdb_now_ns();
    return j;
}

bk_job *bk_queue_pop_lane(bk_queue *q, int lane)
{
    bk_job *j = NULL;

    pthread_mutex_lock(&q->mu);
    while (!(j = take(q, lane)) && !q->stop) {
        q->idle_lane[lane]++;
        pthread_cond_wait(&q->lane_cv[lane], &q->mu);
        q->idle_lane[lane]--;
        if (q->woken_lane[lane]) q->woken_lane[lane]--;
    }
    if (j) __atomic_sub_fetch(&q->len, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&q->mu);
    if (j) j->t_start_ns = scdb_now_ns();
    return j;
}

void bk_queue_stop(bk_queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    for (int k = 0; k < BK_LANES; k++) pthread_cond_broadcast(&q->lane_cv[k]);
    pthread_mutex_unlock(&q->mu);
}
