/* Plain, obviously-correct versions of every op, on host memory: the "ref"
 * backend (ref/backend.c) runs them, the tuned cpu kernels are tested
 * against them and fall back to them where no vector code exists.  Same
 * contracts as lm_backend_ops (ops/ops.h), with lm_mem views resolved to
 * host pointers.  Sums run in float64 where a kernel reduces. */
#ifndef LOOM_OPS_REF_REFERENCE_H
#define LOOM_OPS_REF_REFERENCE_H

#include <math.h>

#include "ops/host/host_memory.h"

/* Element (row, col) of a weight matrix as float32, whatever the dtype. */
float lm_ref_weight_at(const lm_host_matrix *w, int64_t row, int64_t col);

void lm_ref_matmul(float *y, const float *x, int n, const lm_host_matrix *w);
void lm_ref_embed(float *out, const int32_t *ids, int n, const lm_host_matrix *table);
void lm_ref_rmsnorm(float *out, const float *x, const float *weight, int rows, int dim, float eps);
void lm_ref_gated_rmsnorm(float *out, const float *x, const float *z, const float *weight, int rows,
                          int dim, float eps);
void lm_ref_l2norm_scale(float *x, int rows, int dim, float eps, float scale);
void lm_ref_rope(float *x, int n, int n_heads, int head_dim, const int32_t *positions,
                 const lm_rope_params *rope);
void lm_ref_silu_mul(float *out, const float *gate, const float *up, int64_t n);
void lm_ref_layernorm(float *out, const float *x, const float *weight, const float *bias, int rows,
                      int dim, float eps);
void lm_ref_gelu(float *x, int64_t n, lm_gelu_kind kind);
/* One element of gelu in float32, shared by the host backends' scalar paths. */
float lm_ref_gelu_scalar(float x, lm_gelu_kind kind);
void lm_ref_add_weighted_rows(float *x, const lm_host_matrix *table, const int32_t *ids,
                              const float *weights, int n, int taps);
void lm_ref_sigmoid_mul(float *x, const float *gate, int64_t n);
void lm_ref_add(float *x, const float *y, int64_t n);
void lm_ref_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                      int rows, int width);
void lm_ref_gather_rows(float *dst, const float *src, const int32_t *row_ids, int n, int width);
void lm_ref_argmax_rows(int32_t *ids, const float *x, int rows, int n);
void lm_ref_kv_write(const lm_host_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots);
void lm_ref_attention(float *out, const float *q, const lm_host_kv_layer *kv,
                      const lm_host_attention_batch *batch);
void lm_ref_gdn_gates(float *beta, float *g, const float *neg_exp_A, const float *dt_bias, int n,
                      int H);

/* One sequence: in, out [T, C]; state [C, K-1]. */
void lm_ref_causal_conv1d_silu(float *out, const float *in, int T, int C, float *state,
                               const float *weight, int K);
/* One sequence, the token-by-token recurrence of model-spec §A.7:
 * q, k [T, Hk, dk]; v, out [T, Hv, dv]; g, beta [T, Hv]; state [Hv, dk, dv]. */
void lm_ref_gated_delta_rule(float *out, const float *q, const float *k, const float *v,
                             const float *g, const float *beta, float *state, int T, int Hk,
                             int Hv, int dk, int dv);

/* Every sequence of a batch, one after the other, each by the one-sequence
 * function above (the contracts of the batched ops in ops.h). */
void lm_ref_causal_conv1d_silu_batch(float *out, const float *in, int C, const float *weight, int K,
                                     float *states, int64_t slot_stride,
                                     const lm_host_seq_batch *seqs);
void lm_ref_gated_delta_rule_batch(float *out, const float *q, const float *k, const float *v,
                                   const float *g, const float *beta, float *states,
                                   int64_t slot_stride, const lm_host_seq_batch *seqs, int Hk,
                                   int Hv, int dk, int dv);

/* The scalar float32 gate formulas shared by every host backend, so the
 * results are bit-identical across them (and with the model code they
 * replace): beta = sigmoid(b), g = neg_exp_A * softplus(a + dt_bias). */
/* Mixture of experts (ops.h): routing with the correction bias resolved
 * (NULL: none); expert SwiGLUs one row at a time, scratch as ops.h sizes it. */
#define LM_MOE_MAX_EXPERTS 1024
void lm_ref_sigmoid_scale_rows(float *x, const float *gate, int rows, int width);
void lm_ref_add_rows(float *x, const float *bias, int rows, int width);
void lm_ref_moe_route(int32_t *ids, float *weights, const float *logits, int n,
                      const lm_moe_routing *routing, const float *correction_bias);
void lm_ref_moe_experts(float *out, const float *x, int n, const int32_t *ids,
                        const float *weights, int k, const lm_moe_experts *experts, void *scratch);

static inline float lm_ref_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
static inline float lm_ref_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Which position component (0 = t, 1 = h, 2 = w) frequency i (of the
 * rot_dim/2 rotate-half or interleaved pairs) reads; with two_d, pairs
 * below rot_dim/4 read h and the rest w. */
int lm_rope_section_of(const lm_rope_params *rope, int i);
/* inv_freq of pair i (ops.h), in float32 as transformers computes it; with
 * two_d, pair i and pair i + rot_dim/4 share frequency i of rot_dim/4. */
float lm_rope_inv_freq(const lm_rope_params *rope, int i);

/* sample_rows (ops.h), in sample.c. */
void lm_ref_sample_rows(int32_t *ids, int32_t *drew, float *logits, int rows, int vocab,
                        const lm_sample_row *params, const lm_sample_entry *entries);

#endif
