/* One kernel set of the cpu backend (base/kernel_set.h): every file of
 * src/ops/cpu/ but backend_create.c is compiled once per set of the build,
 * and each set's objects are merged into one whose only global symbol is
 * its descriptor, lm_cpu_kernels_<set> (cpu_kernels.c).  A cpu backend
 * holds the descriptor of the set chosen when it was made (cpu_backend.h)
 * and runs that set's op table.  The other entries are the kernels that
 * tests and benches call directly, on host pointers, with the contracts of
 * gdn.h and kernels.h. */
#ifndef LOOM_OPS_CPU_CPU_KERNELS_H
#define LOOM_OPS_CPU_CPU_KERNELS_H

#include <stdbool.h>

#include "base/kernel_set.h"
#include "ops/cpu/gdn.h"
#include "ops/ops.h"

typedef struct {
    lm_kernel_set set;
    /* Whether the set's code is AVX-512 (the avx512 set, a native set of an
     * AVX-512 machine): bf16 compute is offered with such a set only, on a
     * CPU with avx512_bf16. */
    bool avx512;
    const lm_backend_ops *ops; /* the cpu backend's op table on this set's kernels */

    void (*gdn_recurrent)(lm_pool *pool, const lm_gdn_problem *p, bool simd);
    bool (*gdn_chunked)(lm_pool *pool, const lm_gdn_problem *p, bool simd);
    void (*gdn_conv1d_silu)(lm_pool *pool, float *out, const float *in, int T, int C, float *state,
                            const float *weight, int K, bool simd);
    void (*gated_delta_rule)(lm_pool *pool, const lm_gdn_batch *b);
    void (*causal_conv1d_silu)(lm_pool *pool, float *out, const float *in, int C, const float *weight, int K,
                               float *states, int64_t slot_stride, const lm_host_seq_batch *seqs);
    void (*attention)(lm_pool *pool, float *out, const float *q, const lm_host_kv_layer *kv,
                      const lm_host_attention_batch *batch);
    bool (*attention_bf16_takes)(int head_dim);
    void (*attention_bf16)(lm_pool *pool, float *out, const float *q, const lm_host_kv_layer *kv,
                           const lm_host_attention_batch *batch);
} lm_cpu_kernels;

/* Inside a set: its op table (backend.c). */
extern const lm_backend_ops lm_cpu_backend_ops;

#endif
