/* pg.c — the policy gradient's pieces that the trainer (train_rl.c) and
 * its tests use: the Plackett-Luce log-probability of a drawn set and its
 * gradient, and the Adam step (the kernels' arithmetic).
 *
 * A draw (episode.c) sorts s_j + g_j over the unprotected candidates, g_j ~
 * Gumbel(0, 1), s_j the scores divided by the temperature (negated for an
 * evicted-slot draw): that draws an ordering from the Plackett-Luce
 * distribution with weights exp(s_j), and its first m entries are the drawn
 * set.  The log-probability of the drawn ordered set o_1..o_m is
 *
 *   log p = sum_k [ s_{o_k} - log Z_k ],   Z_k = sum_{j in R_k} exp(s_j),
 *   R_k = candidates not drawn before stage k,
 *
 * and its gradient, with e_j = exp(s_j),
 *
 *   d log p / d s_j = [j drawn] - e_j * sum_{k : j in R_k} 1 / Z_k
 *
 * (j never drawn: all m stages; j = o_r: stages 1..r), computed with prefix
 * sums of 1/Z_k; Z_k itself is a suffix sum over the drawn order plus the
 * undrawn mass (no cancellation).  Entropy bonus: the entropy H of the
 * first stage (softmax of the candidate scores), dH/ds_j = -p_j (log p_j +
 * H). */
#include "evict_internal.h"

#include <math.h>

void scdb_evict_adam_step(scdb_evict_adam *a, float *p, const float *g, float lr)
{
    scdb_k_adam_step_cpu(p, g, a->m, a->v, a->n, lr, ++a->t);
}

double scdb_evict_pl_grad(const scdb_evict_decision *d, float wlp, float went, float *ds,
                          double *ent, double *scratch_inv, char *drawn)
{
    int n = d->n, lo = d->sinks, hi = d->n - d->recent, m = d->m;
    double mx = -INFINITY, undrawn = 0.0, logp = 0.0, z1 = 0.0, h = 0.0;

    if (hi <= lo) { *ent = 0.0; return 0.0; }
    for (int j = lo; j < hi; j++) if (d->s[j] > mx) mx = d->s[j];
    for (int j = lo; j < hi; j++) drawn[j] = 0;
    for (int k = 0; k < m; k++) drawn[d->order[k]] = 1;
    for (int j = lo; j < hi; j++) {
        double e = exp((double)d->s[j] - mx);
        z1 += e;
        if (!drawn[j]) undrawn += e;
    }
    /* Z_k = undrawn + sum_{r >= k} e_{o_r}; cumulative 1/Z_k */
    double suffix = 0.0;
    for (int k = m - 1; k >= 0; k--) {
        suffix += exp((double)d->s[d->order[k]] - mx);
        scratch_inv[k] = suffix + undrawn;     /* Z_k for now */
    }
    double cum = 0.0;
    for (int k = 0; k < m; k++) {
        double z = scratch_inv[k];
        logp += (double)d->s[d->order[k]] - mx - log(z);
        cum += 1.0 / z;
        scratch_inv[k] = cum;                  /* sum_{k' <= k} 1/Z_k' */
    }
    /* entropy of the first stage */
    for (int j = lo; j < hi; j++) {
        double p = exp((double)d->s[j] - mx) / z1;
        if (p > 0.0) h -= p * log(p);
    }
    for (int j = lo; j < hi; j++) {
        double e = exp((double)d->s[j] - mx);
        if (!drawn[j] && m > 0) ds[j] += wlp * (float)(-e * scratch_inv[m - 1]);
        double p = e / z1;
        ds[j] += went * (float)(-p * ((p > 0.0 ? log(p) : 0.0) + h));
    }
    for (int k = 0; k < m; k++) {
        int j = d->order[k];
        double e = exp((double)d->s[j] - mx);
        ds[j] += wlp * (float)(1.0 - e * scratch_inv[k]);
    }
    (void)n;
    *ent = h;
    return logp;
}
