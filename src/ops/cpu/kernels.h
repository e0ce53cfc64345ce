/* The tuned CPU kernels behind the cpu backend's op table (backend.c), on
 * host pointers: backend.c resolves the lm_mem views and hands over the
 * backend's thread pool.  Same contracts as lm_backend_ops in ops/ops.h. */
#ifndef LOOM_OPS_CPU_KERNELS_H
#define LOOM_OPS_CPU_KERNELS_H

#include "base/threadpool.h"
#include "ops/cpu/gdn.h"
#include "ops/host/host_memory.h"

/* matmul.c */
void lm_cpu_matmul(lm_pool *pool, float *y, const float *x, int n, const lm_host_matrix *w);
void lm_cpu_embed(float *out, const int32_t *ids, int n, const lm_host_matrix *table);
/* Independent matmuls y = x·wᵀ in one pool run (the experts of a MoE layer):
 * the same bits as one lm_cpu_matmul each, one hand-off instead of many. */
#define LM_CPU_MATMUL_MANY_MAX 64
typedef struct {
    float *y;
    const float *x;
    int n;
    const lm_host_matrix *w;
} lm_cpu_matmul_call;
void lm_cpu_matmul_many(lm_pool *pool, const lm_cpu_matmul_call *calls, int n_calls);

/* elementwise.c */
void lm_cpu_rmsnorm(lm_pool *pool, float *out, const float *x, const float *weight, int rows,
                    int dim, float eps);
void lm_cpu_gated_rmsnorm(lm_pool *pool, float *out, const float *x, const float *z,
                          const float *weight, int rows, int dim, float eps);
void lm_cpu_l2norm_scale(lm_pool *pool, float *x, int rows, int dim, float eps, float scale);
void lm_cpu_rope(lm_pool *pool, float *x, int n, int n_heads, int head_dim,
                 const int32_t *positions, const lm_rope_params *rope);
void lm_cpu_layernorm(lm_pool *pool, float *out, const float *x, const float *weight,
                      const float *bias, int rows, int dim, float eps);
void lm_cpu_gelu(lm_pool *pool, float *x, int64_t n, lm_gelu_kind kind);
void lm_cpu_silu_mul(lm_pool *pool, float *out, const float *gate, const float *up, int64_t n);
void lm_cpu_sigmoid_mul(lm_pool *pool, float *x, const float *gate, int64_t n);
void lm_cpu_add(lm_pool *pool, float *x, const float *y, int64_t n);

/* moe.c */
void lm_cpu_moe_experts(lm_pool *pool, float *out, const float *x, int n, const int32_t *ids,
                        const float *weights, int k, const lm_moe_experts *experts, void *scratch);

/* rows.c */
void lm_cpu_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                      int rows, int width);
void lm_cpu_gather_rows(float *dst, const float *src, const int32_t *row_ids, int n, int width);
void lm_cpu_argmax_rows(lm_pool *pool, int32_t *ids, const float *x, int rows, int n);
void lm_cpu_add_weighted_rows(lm_pool *pool, float *x, const lm_host_matrix *table,
                              const int32_t *ids, const float *weights, int n, int taps);

/* attention_tiles.c: a tile is rows [first, first + n_rows) of one
 * sequence x query heads [h0, h0 + n_heads) of kv head kvh, at most
 * max_tile queries; tasks of the pool take (a window of rows, a kv head),
 * the last windows first. */
typedef void (*lm_cpu_attention_tile_fn)(void *ctx, int first, int n_rows, int kvh, int h0,
                                         int n_heads);
void lm_cpu_attention_tiles(lm_pool *pool, const lm_host_attention_batch *batch, int max_tile,
                            lm_cpu_attention_tile_fn tile, void *ctx);

/* attention.c */
void lm_cpu_kv_write(const lm_host_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots);
void lm_cpu_attention(lm_pool *pool, float *out, const float *q, const lm_host_kv_layer *kv,
                      const lm_host_attention_batch *batch);
/* attention_bf16.c: q, k, v and the softmax weights rounded to bf16
 * (AVX-512 BF16; the caller checks the CPU), for head dims where
 * lm_cpu_attention_bf16_takes.  It reads float32 pools (rounding each key
 * block as it goes) and bf16 pools (kv->k16: already rounded, by
 * lm_cpu_kv_write_bf16 with the same instruction), with the same bits. */
bool lm_cpu_attention_bf16_takes(int head_dim);
void lm_cpu_attention_bf16(lm_pool *pool, float *out, const float *q, const lm_host_kv_layer *kv,
                           const lm_host_attention_batch *batch);
void lm_cpu_kv_write_bf16(const lm_host_kv_layer *kv, const float *k, const float *v, int n,
                          const int32_t *slots);

/* linear_attention.c */
void lm_cpu_gdn_gates(float *beta, float *g, const float *neg_exp_A, const float *dt_bias, int n,
                      int H);
void lm_cpu_causal_conv1d_silu(lm_pool *pool, float *out, const float *in, int C,
                               const float *weight, int K, float *states, int64_t slot_stride,
                               const lm_host_seq_batch *seqs);
void lm_cpu_gated_delta_rule(lm_pool *pool, const lm_gdn_batch *b);

#endif
