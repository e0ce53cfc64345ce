/* What the cpu backend keeps in lm_backend.impl: its thread pool. */
#ifndef LOOM_OPS_CPU_BACKEND_H
#define LOOM_OPS_CPU_BACKEND_H

#include "base/threadpool.h"
#include "ops/ops.h"

typedef struct {
    lm_pool *pool;
} lm_cpu_backend;

static inline lm_pool *lm_cpu_pool(lm_backend *be) { return ((lm_cpu_backend *)be->impl)->pool; }

#endif
