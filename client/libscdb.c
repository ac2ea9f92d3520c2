/* libscdb.c — the top of libscdb: scdb_close, which frees what every other
 * file made (arenas, their sessions and CUDA mappings, the connection). */
#include "libscdb_int.h"

#include <stdlib.h>

void scdb_close(scdb **hp)
{
    scdb *h;

    if (!hp || !*hp) return;
    h = *hp;
    cl_hb_stop(h);
    /* CUDA IPC mappings go before the goodbye lets the broker free them */
    for (scdb_arena *a = h->arenas; a; a = a->next)
        if (a->dev) {
            cl_cuda_close(a->dev, a->cuda_device);
            a->dev = NULL;
        }
    if (h->registered && h->sock && atomic_load(&h->token)) {
        Scdb__Request req = SCDB__REQUEST__INIT;
        Scdb__Goodbye gb = SCDB__GOODBYE__INIT;
        Scdb__LookupCounts lc;
        Scdb__Reply *rep = NULL;
        int t = h->timeout_ms;
        h->timeout_ms = t < 1000 ? t : 1000;
        req.body_case = SCDB__REQUEST__BODY_GOODBYE;
        cl_lookup_counts(h, &lc);
        gb.lookups = &lc;
        req.goodbye = &gb;
        cl_call_once(h, &req, NULL, NULL, 0, &rep);
        if (rep) scdb__reply__free_unpacked(rep, NULL);
        h->timeout_ms = t;
    }
    h->registered = 0;       /* arenas: unmap only, the broker freed them */
    atomic_store(&h->token, 0);
    while (h->arenas) {
        scdb_arena *a = h->arenas;
        scdb_arena_free(&a);
    }
    free(h->rc_pos);
    free(h->rc_tok);
    free(h->rc_idx);
    free(h->rc_keep);
    free(h->rc_scores);
    cl_conn_free(h);
    *hp = NULL;
}

