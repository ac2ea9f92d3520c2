/* acc_launch.h — the CUDA accumulator update (kernels.h: acc_update) as a
 * sequence of kernel launches behind a launcher callback, so that its two
 * callers run the same sequence: the CUDA twin (kernels/cuda/evict_ops.cu,
 * through the runtime's cudaLaunchKernel) and libscdb (client/cuda.c,
 * through the driver's cuLaunchKernel on a fatbin of the same kernels:
 * libscdb links no CUDA library).  Plain C: compiled into both.
 *
 *   per call:   new_slots   one block per appended slot: clear it, its
 *                           position, its mean V norm
 *   per query:  query_ent   one block per (layer, head) row: the visible
 *                           count and the row's normalised entropy
 *               query_slots one thread per slot of the capacity: decay,
 *                           the attention sums, the ring row, the features
 *               query_hdr   one thread: ring_next, ring_fill, last_pos,
 *                           n_queries
 *   last:       finish      one thread: the header's n
 *
 * Every kernel takes its arguments as the launcher's void *args[] (the
 * cudaLaunchKernel / cuLaunchKernel convention); the kernels' names, in
 * kernel-id order, are kn_acc_kernel_names. */
#ifndef SCDB_ACC_LAUNCH_H
#define SCDB_ACC_LAUNCH_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    SCDB_KACC_NEW_SLOTS = 0,
    SCDB_KACC_QUERY_ENT,
    SCDB_KACC_QUERY_SLOTS,
    SCDB_KACC_QUERY_HDR,
    SCDB_KACC_FINISH,
    SCDB_KACC_N_KERNELS
};

#define SCDB_KACC_REDUCE_THREADS 128   /* new_slots, query_ent: one block */
#define SCDB_KACC_SLOT_THREADS 256     /* query_slots */

extern const char *const kn_acc_kernel_names[SCDB_KACC_N_KERNELS];

/* Launch kernel `kernel` on grid x block threads (1-D) with args; returns
 * SCDB_EDEVICE (logged) when the launch fails. */
typedef scdb_err (*kn_acc_launch_fn)(void *ctx, int kernel, unsigned grid, unsigned block,
                                         void **args);

/* kernels.h's acc_update on the CUDA kernels: the argument checks of the
 * CPU twin, then the sequence above.  scratch must be device memory of
 * scdb_k_acc_update_scratch_bytes(a) bytes. */
scdb_err kn_acc_update_launch(const scdb_k_acc_buf *a, int n_old, const scdb_kv_cache *c,
                                  const float *probs, int probs_slots, int n_new, void *scratch,
                                  kn_acc_launch_fn launch, void *ctx);

#ifdef __cplusplus
}
#endif

#endif
