/* heap_trim.c — giving freed heap back to the system off the event loop
 * (broker_int.h, bk_trimmer).
 *
 *   main thread                         scdb-trim thread
 *   -----------                         ----------------
 *   last unref of a registry:           sleeps on cv
 *     registry_free                      |
 *     bk_trimmer_request ------ cv ----> malloc_trim(0): every malloc arena
 *     (returns at once)                  walked, free pages handed back
 *                                        (madvise); requests that came in
 *                                        meanwhile make one more pass
 *
 * A reload builds the new registry on a thread of its own, whose malloc
 * arena keeps what is freed there unless trimmed (registry.c).  malloc_trim
 * walks every arena of the process, the broker's heaps of a few hundred MB
 * under load, and took that long on the main thread, between two requests;
 * here it takes arena locks one at a time as any allocating thread does. */
#define _GNU_SOURCE 1           /* pthread_setname_np */
#include "broker_int.h"

#include <malloc.h>
#include <signal.h>
#include <stdlib.h>

struct bk_trimmer {
    pthread_t t;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;                /* a trim was asked for since the last one  */
    int stop;
    uint64_t trims;             /* passes made (under mu)                   */
    uint64_t last_ns;           /* the last pass's duration (under mu)      */
};

static void *trim_main(void *arg)
{
    bk_trimmer *t = arg;

    pthread_setname_np(pthread_self(), "scdb-trim");
    pthread_mutex_lock(&t->mu);
    for (;;) {
        uint64_t t0;
        while (!t->pending && !t->stop) pthread_cond_wait(&t->cv, &t->mu);
        if (!t->pending) break;          /* stopping, nothing left to do */
        t->pending = 0;
        pthread_mutex_unlock(&t->mu);
        t0 = scdb_now_ns();
        malloc_trim(0);
        t0 = scdb_now_ns() - t0;
        scdb_info("heap trimmed in %.2f ms (off the event loop)", (double)t0 / 1e6);
        pthread_mutex_lock(&t->mu);
        t->trims++;
        t->last_ns = t0;
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

scdb_err bk_trimmer_new(bk_trimmer **out)
{
    bk_trimmer *t = calloc(1, sizeof *t);
    sigset_t all, old;
    int rc;

    *out = NULL;
    if (!t) return SCDB_ENOMEM;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    /* signals go to the threads that expect them, never to this one */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&t->t, NULL, trim_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return SCDB_ESYS;
    }
    *out = t;
    return SCDB_OK;
}

void bk_trimmer_request(bk_trimmer *t)
{
    if (!t) {
        malloc_trim(0);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->pending = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

uint64_t bk_trimmer_count(bk_trimmer *t, uint64_t *last_ns)
{
    uint64_t n;

    if (!t) {
        if (last_ns) *last_ns = 0;
        return 0;
    }
    pthread_mutex_lock(&t->mu);
    n = t->trims;
    if (last_ns) *last_ns = t->last_ns;
    pthread_mutex_unlock(&t->mu);
    return n;
}

void bk_trimmer_free(bk_trimmer **tp)
{
    bk_trimmer *t = tp ? *tp : NULL;

    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->t, NULL);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
    *tp = NULL;
}
