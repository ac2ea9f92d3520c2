/* acc_launch.c — the launch sequence of the CUDA accumulator update
 * (acc_launch.h), shared by the CUDA twin and libscdb.  No CUDA headers:
 * host arithmetic only. */
#include "acc_launch.h"

const char *const kn_acc_kernel_names[SCDB_KACC_N_KERNELS] = {
    "scdb_kacc_new_slots", "scdb_kacc_query_ent", "scdb_kacc_query_slots",
    "scdb_kacc_query_hdr", "scdb_kacc_finish"};

static int bad_buf(const scdb_k_acc_buf *a)
{
    return !a || a->n_layers <= 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 ||
           a->n_heads % a->n_kv_heads || a->capacity <= 0 || a->window <= 0 || !a->pos ||
           !a->n_obs || !a->mass || !a->rel || !a->var || !a->ent_num || !a->ent_den ||
           !a->vnorm || !a->last || !a->win || !a->n || !a->ring_next || !a->ring_fill ||
           !a->last_pos || !a->n_queries;
}

size_t scdb_k_acc_update_scratch_bytes(const scdb_k_acc_buf *a)
{
    /* the L x H row entropies, then the visible count */
    return a ? ((size_t)a->n_layers * a->n_heads * sizeof(float) + 63) / 64 * 64 + 64 : 0;
}

scdb_err kn_acc_update_launch(const scdb_k_acc_buf *a, int n_old, const scdb_kv_cache *c,
                                  const float *probs, int probs_slots, int n_new, void *scratch,
                                  kn_acc_launch_fn launch, void *ctx)
{
    scdb_k_acc_buf buf;
    const int32_t *cpos;
    const float *cv;
    float *ent;
    int *nvis;
    int ccap, hd, n, lh;
    scdb_err rc;

    if (bad_buf(a) || !c || n_new <= 0 || n_old < 0 || !scratch || !launch) return SCDB_EINVAL;
    if (c->n_layers != a->n_layers || c->n_kv_heads != a->n_kv_heads || c->capacity > a->capacity)
        return SCDB_ESHAPE;
    n = c->n;
    if (n_old + n_new != n || (probs && probs_slots < n)) return SCDB_EINVAL;
    buf = *a;
    cpos = c->pos;
    cv = c->v;
    ccap = c->capacity;
    hd = c->head_dim;
    lh = a->n_layers * a->n_heads;
    ent = scratch;
    nvis = (int *)((char *)scratch + ((size_t)lh * sizeof(float) + 63) / 64 * 64);
    {
        void *args[] = {&buf, &cpos, &cv, &ccap, &hd, &n_old};
        if ((rc = launch(ctx, SCDB_KACC_NEW_SLOTS, (unsigned)n_new, SCDB_KACC_REDUCE_THREADS, args)))
            return rc;
    }
    for (int q = 0; probs && q < n_new; q++) {
        void *ea[] = {&buf, &cpos, &probs, &probs_slots, &n_new, &q, &n_old, &n, &ent, &nvis};
        void *sa[] = {&buf, &cpos, &probs, &probs_slots, &n_new, &q, &n_old, &n, &ent, &nvis};
        void *ha[] = {&buf, &cpos, &n_old, &q};
        unsigned sg = (unsigned)((a->capacity + SCDB_KACC_SLOT_THREADS - 1) / SCDB_KACC_SLOT_THREADS);
        if ((rc = launch(ctx, SCDB_KACC_QUERY_ENT, (unsigned)lh, SCDB_KACC_REDUCE_THREADS, ea)) ||
            (rc = launch(ctx, SCDB_KACC_QUERY_SLOTS, sg, SCDB_KACC_SLOT_THREADS, sa)) ||
            (rc = launch(ctx, SCDB_KACC_QUERY_HDR, 1, 1, ha)))
            return rc;
    }
    {
        void *args[] = {&buf, &n};
        return launch(ctx, SCDB_KACC_FINISH, 1, 1, args);
    }
}
