/* attention.c — causal grouped-query attention over a slot-indexed cache.
 *
 * Per query head h (KV head g = h / group): S = Q_h K_g^T / sqrt(d) through
 * one sgemm with strided operands, mask by position (slot_pos > q_pos is
 * -inf), row softmax, then O_h = P V_g through a second sgemm.  The plain
 * loop reference lives in tests/test_kernels.c. */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>

scdb_err scdb_k_attention_cpu(const float *q, const int32_t *q_pos, int n_q,
                              int n_heads, const float *k, const float *v,
                              const int32_t *slot_pos, int n_slots,
                              int n_kv_heads, int head_dim, float *out,
                              float *probs, float *scratch)
{
    float *s_own = NULL;
    int group, qs, kvs;
    float scale;

    if (n_q <= 0) return SCDB_OK;
    if (n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0 || n_slots < 0 ||
        n_heads % n_kv_heads != 0)
        return SCDB_EINVAL;
    group = n_heads / n_kv_heads;
    qs = n_heads * head_dim;
    kvs = n_kv_heads * head_dim;
    scale = 1.0f / sqrtf((float)head_dim);

    if (n_slots == 0) {
        for (size_t i = 0; i < (size_t)n_q * qs; i++) out[i] = 0.0f;
        return SCDB_OK;
    }
    if (!scratch && !probs) {
        s_own = malloc((size_t)n_q * n_slots * sizeof(float));
        if (!s_own) return SCDB_ENOMEM;
        scratch = s_own;
    }
    for (int h = 0; h < n_heads; h++) {
        int g = h / group;
        float *S = probs ? probs + (size_t)h * n_q * n_slots : scratch;
        scdb_k_gemm_cpu(0, 1, n_q, n_slots, head_dim, scale, q + (size_t)h * head_dim,
                        qs, k + (size_t)g * head_dim, kvs, 0.0f, S, n_slots);
        for (int i = 0; i < n_q; i++) {
            float *row = S + (size_t)i * n_slots;
            for (int j = 0; j < n_slots; j++)
                if (slot_pos[j] > q_pos[i]) row[j] = -INFINITY;
        }
        scdb_k_softmax_cpu(S, n_q, n_slots);
        scdb_k_gemm_cpu(0, 0, n_q, head_dim, n_slots, 1.0f, S, n_slots,
                        v + (size_t)g * head_dim, kvs, 0.0f,
                        out + (size_t)h * head_dim, qs);
    }
    free(s_own);
    return SCDB_OK;
}
