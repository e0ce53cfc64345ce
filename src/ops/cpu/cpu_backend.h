/* What the cpu backend keeps in lm_backend.impl: its thread pool, what the
 * CPU offers, the compute precision and the bf16 path's scratch. */
#ifndef LOOM_OPS_CPU_BACKEND_H
#define LOOM_OPS_CPU_BACKEND_H

#include <stdint.h>

#include "base/threadpool.h"
#include "ops/cpu/cpu_features.h"
#include "ops/ops.h"

typedef struct {
    lm_pool *pool;
    lm_cpu_features features;
    lm_dtype compute; /* LM_DTYPE_F32 (default) or LM_DTYPE_BF16 (features.avx512_bf16) */
    /* bf16 compute: the activations of one matmul rounded to bf16, grown on
     * demand.  A failed growth is kept in `error` (the matmul writes zeros)
     * and reported by the next synchronize or download, as ops.h says. */
    uint16_t *bf16_scratch;
    size_t bf16_scratch_elems;
    lm_status error;
    char error_message[128];
} lm_cpu_backend;

static inline lm_pool *lm_cpu_pool(lm_backend *be) { return ((lm_cpu_backend *)be->impl)->pool; }

#endif
