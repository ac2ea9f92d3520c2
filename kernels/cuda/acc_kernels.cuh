/* acc_kernels.cuh — the kernels of the CUDA accumulator update (sequence and
 * roles in acc_launch.h), compiled twice: into the CUDA backend
 * (evict_ops.cu) and, alone, into the fatbin libscdb loads with the driver
 * API (acc_kernels_fatbin.cu).  extern "C" so the driver finds them by
 * name; parameters in the order acc_launch.c passes them.
 *
 * The arithmetic is acc.c's (kernels/cpu/acc_ops.c), written with the
 * _rn intrinsics where the compiler could otherwise contract a multiply and
 * an add into an FMA, so every slot array equals the CPU twin's bit for bit
 * given the same row entropies; those differ by logf's ulp and the order of
 * their double-precision reduction (and the V norms by the order of theirs). */
#ifndef SCDB_ACC_KERNELS_CUH
#define SCDB_ACC_KERNELS_CUH

#include <stdint.h>

extern "C" {
#include "kernels.h"
}
#include "acc_launch.h"

static __device__ int kacc_ring(const scdb_k_acc_buf &a)
{
    int r = *a.ring_next;
    return r >= 0 && r < a.window ? r : 0;
}

/* tree sum of v over the block (SCDB_KACC_REDUCE_THREADS threads) */
static __device__ double kacc_block_sum(double v, double *red)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = SCDB_KACC_REDUCE_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

extern "C" __global__ void scdb_kacc_new_slots(scdb_k_acc_buf a, const int32_t *cpos,
                                               const float *cv, int ccap, int hd, int n_old)
{
    __shared__ double red[SCDB_KACC_REDUCE_THREADS];
    const int j = n_old + (int)blockIdx.x, L = a.n_layers, G = a.n_kv_heads;
    const int rows = a.window * G;
    float *arrs[8] = {a.n_obs, a.mass, a.rel, a.var, a.ent_num, a.ent_den, a.vnorm, a.last};
    for (int t = threadIdx.x; t < 8 + rows; t += blockDim.x) {
        if (t < 8) arrs[t][j] = 0.0f;
        else a.win[(size_t)(t - 8) * a.capacity + j] = 0.0f;
    }
    double part = 0.0;
    for (int t = threadIdx.x; t < L * G; t += blockDim.x) {
        int l = t / G, g = t % G;
        const float *v = cv + ((size_t)l * ccap + j) * (size_t)(G * hd) + (size_t)g * hd;
        double ss = 0.0;
        for (int d = 0; d < hd; d++) ss += (double)v[d] * v[d];
        part += sqrt(ss);
    }
    double s = kacc_block_sum(part, red);       /* also orders the clears above */
    if (threadIdx.x == 0) {
        a.pos[j] = cpos[j];
        a.vnorm[j] = (float)(s / (L * G));
    }
}

extern "C" __global__ void scdb_kacc_query_ent(scdb_k_acc_buf a, const int32_t *cpos,
                                               const float *probs, int probs_slots, int n_new,
                                               int q, int n_old, int n, float *ent, int *nvis_out)
{
    __shared__ double red[SCDB_KACC_REDUCE_THREADS];
    const int lh = (int)blockIdx.x;
    const int32_t qp = cpos[n_old + q];
    const float *row = probs + ((size_t)lh * n_new + q) * (size_t)probs_slots;
    double e = 0.0, cnt = 0.0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        if (cpos[j] > qp) continue;
        cnt += 1.0;
        float p = row[j];
        if (p > 0.0f) e -= (double)__fmul_rn(p, logf(p));
    }
    e = kacc_block_sum(e, red);
    int nvis = (int)kacc_block_sum(cnt, red);
    if (threadIdx.x == 0) {
        float lognv = nvis > 1 ? logf((float)nvis) : 1.0f;
        ent[lh] = nvis > 1 ? (float)(e / lognv) : 0.0f;
        if (lh == 0) *nvis_out = nvis;
    }
}

extern "C" __global__ void scdb_kacc_query_slots(scdb_k_acc_buf a, const int32_t *cpos,
                                                 const float *probs, int probs_slots, int n_new,
                                                 int q, int n_old, int n, const float *ent,
                                                 const int *nvis_p)
{
    const int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= a.capacity) return;
    const int L = a.n_layers, H = a.n_heads, G = a.n_kv_heads, hpg = H / G, lhc = L * H;
    const size_t cap = (size_t)a.capacity;
    float *wrow = a.win + (size_t)kacc_ring(a) * G * cap;
    if (j >= n) {
        for (int g = 0; g < G; g++) wrow[(size_t)g * cap + j] = 0.0f;
        return;
    }
    const int32_t qp = cpos[n_old + q];
    const int nvis = *nvis_p, vis = cpos[j] <= qp;
    const float dec = a.decay;
    a.n_obs[j] *= dec;
    a.rel[j] *= dec;
    a.var[j] *= dec;
    float en = a.ent_num[j] * dec, ed = a.ent_den[j] * dec, sum = 0.0f, sq = 0.0f;
    for (int g = 0; g < G; g++) wrow[(size_t)g * cap + j] = 0.0f;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            int lh = l * H + h;
            float p = vis ? probs[((size_t)lh * n_new + q) * (size_t)probs_slots + j] : 0.0f;
            sum = __fadd_rn(sum, p);
            sq = __fadd_rn(sq, __fmul_rn(p, p));
            en = __fadd_rn(en, __fmul_rn(p, ent[lh]));
            ed = __fadd_rn(ed, p);
            float *gr = wrow + (size_t)(h / hpg) * cap + j;
            *gr = __fadd_rn(*gr, p);
        }
    a.ent_num[j] = en;
    a.ent_den[j] = ed;
    for (int g = 0; g < G; g++) {
        float *gr = wrow + (size_t)g * cap + j;
        *gr = __fdiv_rn(*gr, (float)(L * hpg));
    }
    if (!vis) {
        a.last[j] = 0.0f;
        return;
    }
    float m = __fdiv_rn(sum, (float)lhc);
    float mr = __fmul_rn(m, (float)nvis);
    float v = __fsub_rn(__fmul_rn(__fmul_rn(__fdiv_rn(sq, (float)lhc), (float)nvis), (float)nvis),
                        __fmul_rn(mr, mr));
    a.n_obs[j] = __fadd_rn(a.n_obs[j], 1.0f);
    a.mass[j] = __fadd_rn(a.mass[j], m);
    a.rel[j] = __fadd_rn(a.rel[j], mr);
    a.var[j] = __fadd_rn(a.var[j], v > 0.0f ? v : 0.0f);
    a.last[j] = m;
}

extern "C" __global__ void scdb_kacc_query_hdr(scdb_k_acc_buf a, const int32_t *cpos, int n_old,
                                               int q)
{
    if (threadIdx.x || blockIdx.x) return;
    int r = kacc_ring(a);
    *a.ring_next = (r + 1) % a.window;
    if (*a.ring_fill < a.window) *a.ring_fill += 1;
    *a.last_pos = cpos[n_old + q];
    *a.n_queries += 1;
}

extern "C" __global__ void scdb_kacc_finish(scdb_k_acc_buf a, int n)
{
    if (threadIdx.x || blockIdx.x) return;
    *a.n = n;
}

#endif
