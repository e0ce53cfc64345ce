/* The cuda backend's private state and the kernels' entry points (one .cu
 * file per group of ops).  Private to src/ops/cuda: models and the engine
 * see only ops/ops.h.
 *
 * Memory is plain cudaMalloc (no managed memory); every op is queued on the
 * backend's one stream; a kernel never fails (ops.h): launch errors are
 * kept and reported by the next synchronize or download.  Activations are
 * float32 as the interface says; the dense matmuls read bf16 weights with
 * cuBLASLt (activations rounded to bf16 on the way in, float32 accumulate
 * and output). */
#ifndef LOOM_OPS_CUDA_CUDA_BACKEND_H
#define LOOM_OPS_CUDA_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ops/ops.h" /* C declarations, C linkage (lm_fail) also from the .cu files */
#include "ops/cuda/fused_ops.h"

struct lm_buffer {
    void *device;  /* cudaMalloc'd, never NULL (1 byte for empty buffers) */
    size_t size;
};

/* What the backend keeps between ops (lm_backend.impl). */
typedef struct lm_cuda_state lm_cuda_state;

lm_status lm_backend_cuda_create(int device, lm_backend **out, lm_error *err);
void lm_cuda_backend_destroy(lm_backend *be);
extern const lm_backend_ops lm_cuda_backend_ops;

/* The device address of a view (no bounds check: ops.h's contract). */
static inline void *lm_cuda_ptr(lm_mem m) { return (char *)m.buffer->device + m.offset; }
static inline float *lm_cuda_f32(lm_mem m) { return (float *)lm_cuda_ptr(m); }
static inline int32_t *lm_cuda_i32(lm_mem m) { return (int32_t *)lm_cuda_ptr(m); }

/* ---- memory (backend.cu) ---- */
lm_status lm_cuda_alloc(lm_backend *be, size_t bytes, const char *what, lm_buffer **out, lm_error *err);
lm_status lm_cuda_import(lm_backend *be, const void *data, size_t bytes, const char *what,
                         lm_buffer **out, lm_error *err);
void lm_cuda_free(lm_backend *be, lm_buffer *b);
size_t lm_cuda_buffer_size(const lm_buffer *b);
void lm_cuda_upload(lm_backend *be, lm_mem dst, const void *src, size_t bytes);
lm_status lm_cuda_download(lm_backend *be, void *dst, lm_mem src, size_t bytes, lm_error *err);
void lm_cuda_copy(lm_backend *be, lm_mem dst, lm_mem src, size_t bytes);
void lm_cuda_fill(lm_backend *be, lm_mem dst, uint8_t byte, size_t bytes);
lm_status lm_cuda_synchronize(lm_backend *be, lm_error *err);
lm_status lm_cuda_memory_info(lm_backend *be, size_t *free_bytes, size_t *total_bytes, lm_error *err);
lm_status lm_cuda_set_compute_dtype(lm_backend *be, lm_dtype dtype, lm_error *err); /* matmul.cu */
lm_dtype lm_cuda_compute_dtype(const lm_backend *be);

/* ---- the ops, by file ---- */
/* elementwise.cu */
void lm_cuda_silu_mul(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n);
void lm_cuda_sigmoid_mul(lm_backend *be, lm_mem x, lm_mem gate, int64_t n);
void lm_cuda_add(lm_backend *be, lm_mem x, lm_mem y, int64_t n);
void lm_cuda_add_rows(lm_backend *be, lm_mem x, lm_mem bias, int rows, int width);
void lm_cuda_sigmoid_scale_rows(lm_backend *be, lm_mem x, lm_mem gate, int rows, int width);
void lm_cuda_gelu(lm_backend *be, lm_mem x, int64_t n, lm_gelu_kind kind);
/* rows.cu */
void lm_cuda_copy_rows(lm_backend *be, lm_mem dst, int64_t dst_stride, lm_mem src, int64_t src_stride,
                       int rows, int width);
void lm_cuda_gather_rows(lm_backend *be, lm_mem dst, lm_mem src, lm_mem row_ids, int n, int width);
void lm_cuda_argmax_rows(lm_backend *be, lm_mem ids, lm_mem x, int rows, int n);
void lm_cuda_embed(lm_backend *be, lm_mem out, lm_mem ids, int n, const lm_matrix *table);
/* sample.cu */
void lm_cuda_sample_rows(lm_backend *be, lm_mem ids, lm_mem drew, lm_mem logits, int rows, int vocab, lm_mem params,
                         lm_mem entries);
/* attention.cu; kv_dtype: bf16 pools under bf16 compute (lm_kv_dtype) */
lm_dtype lm_cuda_kv_dtype(const lm_backend *be, int head_dim);
void lm_cuda_kv_write(lm_backend *be, const lm_kv_layer *kv, lm_mem k, lm_mem v, int n, lm_mem slots);
void lm_cuda_attention(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                       const lm_attention_batch *batch);
/* attention_mma.cu: the same on the tensor cores, for bf16 compute; false
 * (nothing queued) for shapes it does not take. */
bool lm_cuda_attention_mma(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                           const lm_attention_batch *batch);
/* gdn.cu */
void lm_cuda_gdn_gates(lm_backend *be, lm_mem beta, lm_mem g, lm_mem neg_exp_A, lm_mem dt_bias, int n, int H);
void lm_cuda_causal_conv1d_silu(lm_backend *be, lm_mem out, lm_mem in, int C, lm_mem weight, int K,
                                lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs);
void lm_cuda_gated_delta_rule(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v, lm_mem g, lm_mem beta,
                              lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs, int Hk, int Hv,
                              int dk, int dv);
/* gdn_chunked.cu: the chunked form for sequences of min_T or more rows
 * (the others are left alone); false when dk does not fit it or its
 * shared memory cannot be had, and nothing was queued. */
bool lm_cuda_gdn_chunked_fits(int dk);
bool lm_cuda_gated_delta_chunked(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v, lm_mem g, lm_mem beta,
                                 lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs, int Hk, int Hv,
                                 int dk, int dv, int min_T);
/* moe.cu */
void lm_cuda_moe_route(lm_backend *be, lm_mem ids, lm_mem weights, lm_mem logits, int n,
                       const lm_moe_routing *routing);
void lm_cuda_moe_experts(lm_backend *be, lm_mem out, lm_mem x, int n, lm_mem ids, lm_mem weights, int top_k,
                         const lm_moe_experts *experts, lm_mem scratch);
/* moe_mma.cu: the experts' products on the tensor cores (bf16 compute),
 * every expert at once: y [pairs, H] as moe.cu lays it out, act the
 * scratch's SwiGLU region (the kernels keep the pairs' SwiGLU rows and x
 * there in bf16), the blocks taking the tiles of up to
 * LM_CUDA_MOE_MMA_TILE pairs moe.cu's sort listed (tile_expert /
 * tile_first [*tile_count]).  lm_cuda_moe_mma_takes first: whether the
 * experts are all bf16 with 16-byte rows (or all Q8_0), H and I multiples
 * of 32 and x, act 16-byte aligned (it also sets the kernels' shared
 * memory, false when the device refuses it). */
#define LM_CUDA_MOE_TILE 64      /* pairs of one sorted tile for the row kernels */
#define LM_CUDA_MOE_MMA_TILE 128 /* pairs of one tensor-core block */
bool lm_cuda_moe_mma_takes(lm_backend *be, const float *x, const float *act, const lm_moe_experts *experts);
void lm_cuda_moe_experts_mma(lm_backend *be, float *act, float *y, const float *x, int n, const int32_t *order,
                             const int32_t *start, const int32_t *tile_expert, const int32_t *tile_first,
                             const int32_t *tile_count, int pairs, int top_k, const lm_moe_experts *experts);

/* ---- the fusion window (fusion_window.c, fusion_plan.h) ---- */
/* The table's matmul, rmsnorm, add, silu_mul, sigmoid_scale_rows,
 * attention, sigmoid_mul, gated_delta_rule, gated_rmsnorm, gdn_gates,
 * causal_conv1d_silu, copy_rows, l2norm_scale, rope, kv_write and discard:
 * appended to the step's window, not launched.  The window is
 * lowered (the fused kernels where a pattern matches, the plain ones
 * otherwise) by lm_cuda_fusion_flush, which the queue calls before it
 * takes any other op and before it runs (queue.cu): so at every op the
 * window does not know and at every host wait. */
typedef struct lm_cuda_fusion_window lm_cuda_fusion_window;
lm_status lm_cuda_fusion_init(lm_cuda_fusion_window **out, lm_error *err);
void lm_cuda_fusion_free(lm_cuda_fusion_window *w); /* prints LOOM_CUDA_FUSION_STATS=1's counts */
lm_cuda_fusion_window *lm_cuda_fusion_of(lm_backend *be); /* state.cu */
void lm_cuda_fusion_flush(lm_backend *be);
void lm_cuda_fuse_matmul(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w);
void lm_cuda_fuse_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, int rows, int dim, float eps);
void lm_cuda_fuse_add(lm_backend *be, lm_mem x, lm_mem y, int64_t n);
void lm_cuda_fuse_silu_mul(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n);
void lm_cuda_fuse_sigmoid_scale_rows(lm_backend *be, lm_mem x, lm_mem gate, int rows, int width);
void lm_cuda_fuse_discard(lm_backend *be, lm_mem at, size_t bytes);
void lm_cuda_fuse_attention(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                            const lm_attention_batch *batch);
void lm_cuda_fuse_sigmoid_mul(lm_backend *be, lm_mem x, lm_mem gate, int64_t n);
void lm_cuda_fuse_gated_delta_rule(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v, lm_mem g, lm_mem beta,
                                   lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs, int Hk, int Hv,
                                   int dk, int dv);
void lm_cuda_fuse_gated_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem z, lm_mem weight, int rows, int dim,
                                float eps);
void lm_cuda_fuse_gdn_gates(lm_backend *be, lm_mem beta, lm_mem g, lm_mem neg_exp_A, lm_mem dt_bias, int n, int H);
void lm_cuda_fuse_causal_conv1d_silu(lm_backend *be, lm_mem out, lm_mem in, int C, lm_mem weight, int K,
                                     lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs);
void lm_cuda_fuse_copy_rows(lm_backend *be, lm_mem dst, int64_t dst_stride, lm_mem src, int64_t src_stride, int rows,
                            int width);
void lm_cuda_fuse_l2norm_scale(lm_backend *be, lm_mem x, int rows, int dim, float eps, float scale);
void lm_cuda_fuse_rope(lm_backend *be, lm_mem x, int n, int n_heads, int head_dim, lm_mem positions,
                       const lm_rope_params *rope);
void lm_cuda_fuse_kv_write(lm_backend *be, const lm_kv_layer *kv, lm_mem k, lm_mem v, int n, lm_mem slots);

/* ---- cuda-a: matmul, norms, rotary, weighted rows ---- */
/* matmul.cu */
void lm_cuda_matmul(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w);
/* out [count] (bf16) = x rounded to nearest even, queued as `what`. */
void lm_cuda_round_to_bf16(lm_backend *be, const char *what, void *out, const float *x, int64_t count);
/* norms.cu */
void lm_cuda_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, int rows, int dim, float eps);
void lm_cuda_gated_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem z, lm_mem weight, int rows, int dim,
                           float eps);
void lm_cuda_l2norm_scale(lm_backend *be, lm_mem x, int rows, int dim, float eps, float scale);
void lm_cuda_layernorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, lm_mem bias, int rows, int dim,
                       float eps);
void lm_cuda_add_weighted_rows(lm_backend *be, lm_mem x, const lm_matrix *table, lm_mem ids, lm_mem weights,
                               int n, int taps);
/* rope.cu */
void lm_cuda_rope(lm_backend *be, lm_mem x, int n, int n_heads, int head_dim, lm_mem positions,
                  const lm_rope_params *rope);
/* ---- end cuda-a ---- */


#ifdef __cplusplus
}
#endif

#endif
