/* The CPU backend's op table.  Each entry is the fastest CPU version we have;
 * ops without a tuned kernel yet use the reference version directly. */
#include <stdlib.h>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/reference.h"

static void cpu_matmul(lm_backend *be, float *y, const float *x, int n, const lm_matrix *w) {
    (void)be;
    lm_ref_matmul(y, x, n, w);
}
static void cpu_embed(lm_backend *be, float *out, const int32_t *ids, int n, const lm_matrix *t) {
    (void)be;
    lm_ref_embed(out, ids, n, t);
}
static void cpu_rmsnorm(lm_backend *be, float *out, const float *x, const float *w, int rows,
                        int dim, float eps) {
    (void)be;
    lm_ref_rmsnorm(out, x, w, rows, dim, eps);
}
static void cpu_gated_rmsnorm(lm_backend *be, float *out, const float *x, const float *z,
                              const float *w, int rows, int dim, float eps) {
    (void)be;
    lm_ref_gated_rmsnorm(out, x, z, w, rows, dim, eps);
}
static void cpu_l2norm_scale(lm_backend *be, float *x, int rows, int dim, float eps, float scale) {
    (void)be;
    lm_ref_l2norm_scale(x, rows, dim, eps, scale);
}
static void cpu_rope(lm_backend *be, float *x, int n, int n_heads, int head_dim,
                     const int32_t *positions, const lm_rope_params *rope) {
    (void)be;
    lm_ref_rope(x, n, n_heads, head_dim, positions, rope);
}
static void cpu_silu_mul(lm_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    (void)be;
    lm_ref_silu_mul(out, gate, up, n);
}
static void cpu_sigmoid_mul(lm_backend *be, float *x, const float *gate, int64_t n) {
    (void)be;
    lm_ref_sigmoid_mul(x, gate, n);
}
static void cpu_add(lm_backend *be, float *x, const float *y, int64_t n) {
    (void)be;
    lm_ref_add(x, y, n);
}
static void cpu_kv_write(lm_backend *be, const lm_kv_layer *kv, const float *k, const float *v,
                         int n, const int32_t *slots) {
    (void)be;
    lm_ref_kv_write(kv, k, v, n, slots);
}
static void cpu_attention(lm_backend *be, float *out, const float *q, const lm_kv_layer *kv,
                          const lm_attention_batch *batch) {
    (void)be;
    lm_ref_attention(out, q, kv, batch);
}
static void cpu_conv1d(lm_backend *be, float *out, const float *in, int T, int C, float *state,
                       const float *weight, int K) {
    (void)be;
    lm_ref_causal_conv1d_silu(out, in, T, C, state, weight, K);
}
static void cpu_gdr(lm_backend *be, float *out, const float *q, const float *k, const float *v,
                    const float *g, const float *beta, float *state, int T, int Hk, int Hv, int dk,
                    int dv) {
    (void)be;
    lm_ref_gated_delta_rule(out, q, k, v, g, beta, state, T, Hk, Hv, dk, dv);
}

static const lm_backend_ops cpu_ops = {
    .name = "cpu",
    .matmul = cpu_matmul,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .gated_rmsnorm = cpu_gated_rmsnorm,
    .l2norm_scale = cpu_l2norm_scale,
    .rope = cpu_rope,
    .silu_mul = cpu_silu_mul,
    .sigmoid_mul = cpu_sigmoid_mul,
    .add = cpu_add,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .causal_conv1d_silu = cpu_conv1d,
    .gated_delta_rule = cpu_gdr,
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
