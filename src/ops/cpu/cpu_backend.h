/* What the cpu backend keeps in lm_backend.impl: its thread pool, its
 * kernel set, what the CPU offers, the compute precision and the bf16
 * path's scratch.  The same layout in every kernel set. */
#ifndef LOOM_OPS_CPU_BACKEND_H
#define LOOM_OPS_CPU_BACKEND_H

#include <stdint.h>

#include "base/cpu_features.h"
#include "base/threadpool.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/ops.h"

typedef struct {
    lm_pool *pool;
    const lm_cpu_kernels *kernels; /* the set chosen at create; be->ops is kernels->ops */
    lm_cpu_features features;      /* as detected */
    lm_dtype compute; /* LM_DTYPE_F32 (default) or LM_DTYPE_BF16 (features.avx512_bf16, kernels->avx512) */
    /* bf16 compute: the activations of one matmul rounded to bf16, grown on
     * demand.  A failed growth is kept in `error` (the matmul writes zeros)
     * and reported by the next synchronize or download, as ops.h says. */
    uint16_t *bf16_scratch;
    size_t bf16_scratch_elems;
    lm_status error;
    char error_message[128];
} lm_cpu_backend;

static inline lm_pool *lm_cpu_pool(lm_backend *be) { return ((lm_cpu_backend *)be->impl)->pool; }
/* The kernel set a cpu backend runs (tests and benches call its kernels). */
static inline const lm_cpu_kernels *lm_cpu_kernels_of(const lm_backend *be) {
    return ((const lm_cpu_backend *)be->impl)->kernels;
}

#endif
