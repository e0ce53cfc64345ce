/* The tuned CPU kernels behind the cpu backend's op table (backend.c).
 * Same contracts as lm_backend_ops in ops/ops.h. */
#ifndef LOOM_OPS_CPU_KERNELS_H
#define LOOM_OPS_CPU_KERNELS_H

#include "ops/ops.h"

/* matmul.c */
void lm_cpu_matmul(lm_backend *be, float *y, const float *x, int n, const lm_matrix *w);
void lm_cpu_embed(lm_backend *be, float *out, const int32_t *ids, int n, const lm_matrix *table);

/* elementwise.c */
void lm_cpu_rmsnorm(lm_backend *be, float *out, const float *x, const float *weight, int rows,
                    int dim, float eps);
void lm_cpu_gated_rmsnorm(lm_backend *be, float *out, const float *x, const float *z,
                          const float *weight, int rows, int dim, float eps);
void lm_cpu_l2norm_scale(lm_backend *be, float *x, int rows, int dim, float eps, float scale);
void lm_cpu_rope(lm_backend *be, float *x, int n, int n_heads, int head_dim,
                 const int32_t *positions, const lm_rope_params *rope);
void lm_cpu_silu_mul(lm_backend *be, float *out, const float *gate, const float *up, int64_t n);
void lm_cpu_sigmoid_mul(lm_backend *be, float *x, const float *gate, int64_t n);
void lm_cpu_add(lm_backend *be, float *x, const float *y, int64_t n);

/* attention.c */
void lm_cpu_kv_write(lm_backend *be, const lm_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots);
void lm_cpu_attention(lm_backend *be, float *out, const float *q, const lm_kv_layer *kv,
                      const lm_attention_batch *batch);

/* linear_attention.c */
void lm_cpu_causal_conv1d_silu(lm_backend *be, float *out, const float *in, int T, int C,
                               float *state, const float *weight, int K);
void lm_cpu_gated_delta_rule(lm_backend *be, float *out, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, float *state,
                             int T, int Hk, int Hv, int dk, int dv);

#endif
