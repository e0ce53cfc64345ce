/* The CPU backend: its op table (kernels in matmul.c, elementwise.c,
 * attention.c, linear_attention.c) and its thread pool. */
#include <stdlib.h>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernels.h"

static const lm_backend_ops cpu_ops = {
    .name = "cpu",
    .matmul = lm_cpu_matmul,
    .embed = lm_cpu_embed,
    .rmsnorm = lm_cpu_rmsnorm,
    .gated_rmsnorm = lm_cpu_gated_rmsnorm,
    .l2norm_scale = lm_cpu_l2norm_scale,
    .rope = lm_cpu_rope,
    .silu_mul = lm_cpu_silu_mul,
    .sigmoid_mul = lm_cpu_sigmoid_mul,
    .add = lm_cpu_add,
    .kv_write = lm_cpu_kv_write,
    .attention = lm_cpu_attention,
    .causal_conv1d_silu = lm_cpu_causal_conv1d_silu,
    .gated_delta_rule = lm_cpu_gated_delta_rule,
};

lm_status lm_backend_cpu_create(int n_threads, lm_backend **out, lm_error *err) {
    lm_backend *be = calloc(1, sizeof *be);
    lm_cpu_backend *cpu = calloc(1, sizeof *cpu);
    if (!be || !cpu) {
        free(be);
        free(cpu);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory creating the cpu backend");
    }
    lm_status st = lm_pool_create(n_threads, &cpu->pool, err);
    if (st != LM_OK) {
        free(be);
        free(cpu);
        return st;
    }
    be->ops = &cpu_ops;
    be->impl = cpu;
    *out = be;
    return LM_OK;
}

void lm_backend_destroy(lm_backend *be) {
    if (!be) return;
    lm_cpu_backend *cpu = be->impl;
    if (cpu) lm_pool_destroy(cpu->pool);
    free(cpu);
    free(be);
}

int lm_backend_threads(const lm_backend *be) {
    return lm_pool_size(((const lm_cpu_backend *)be->impl)->pool);
}

struct lm_pool *lm_cpu_pool_of(lm_backend *be) {
    return be && be->ops == &cpu_ops ? ((lm_cpu_backend *)be->impl)->pool : NULL;
}
