/* Plain, obviously-correct versions of every CPU op.  The optimised kernels in
 * ops/cpu are tested against these; they are also the fallback where no
 * vector code exists.  Same contracts as lm_backend_ops (see ops/ops.h). */
#ifndef LOOM_OPS_CPU_REFERENCE_H
#define LOOM_OPS_CPU_REFERENCE_H

#include "ops/ops.h"

/* Element e of a weight row as float32, whatever the dtype. */
float lm_ref_weight_at(const lm_matrix *w, int64_t row, int64_t col);

void lm_ref_matmul(float *y, const float *x, int n, const lm_matrix *w);
void lm_ref_embed(float *out, const int32_t *ids, int n, const lm_matrix *table);
void lm_ref_rmsnorm(float *out, const float *x, const float *weight, int rows, int dim, float eps);
void lm_ref_gated_rmsnorm(float *out, const float *x, const float *z, const float *weight, int rows,
                          int dim, float eps);
void lm_ref_l2norm_scale(float *x, int rows, int dim, float eps, float scale);
void lm_ref_rope(float *x, int n, int n_heads, int head_dim, const int32_t *positions,
                 const lm_rope_params *rope);
void lm_ref_silu_mul(float *out, const float *gate, const float *up, int64_t n);
void lm_ref_sigmoid_mul(float *x, const float *gate, int64_t n);
void lm_ref_add(float *x, const float *y, int64_t n);
void lm_ref_kv_write(const lm_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots);
void lm_ref_attention(float *out, const float *q, const lm_kv_layer *kv,
                      const lm_attention_batch *batch);
void lm_ref_causal_conv1d_silu(float *out, const float *in, int T, int C, float *state,
                               const float *weight, int K);
/* The token-by-token recurrence of model-spec §A.7. */
void lm_ref_gated_delta_rule(float *out, const float *q, const float *k, const float *v,
                             const float *g, const float *beta, float *state, int T, int Hk,
                             int Hv, int dk, int dv);

/* Which position component (0 = t, 1 = h, 2 = w) frequency i reads. */
int lm_rope_section_of(const lm_rope_params *rope, int i);

#endif
