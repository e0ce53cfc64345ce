/* The backend seam: every numeric kernel the models use.
 *
 * Model code calls only these functions.  Each backend (ops/cpu, later
 * ops/cuda) fills an lm_backend_ops table; the inline wrappers below dispatch
 * through it.  All activations are float32, row-major.  Pointers refer to the
 * backend's memory (host memory for cpu).  Unless stated otherwise an output
 * may not alias an input.  Kernels do not fail: callers validate shapes when
 * the model is loaded, so a kernel only ever sees consistent sizes. */
#ifndef LOOM_OPS_OPS_H
#define LOOM_OPS_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/error.h"

typedef struct lm_backend lm_backend;

/* A weight matrix [rows, cols] row-major, as checkpoints store Linear weights
 * ([out, in]).  dtype is LM_DTYPE_BF16 or LM_DTYPE_F32 (F16 accepted too). */
typedef struct {
    const void *data;
    lm_dtype dtype;
    int64_t rows, cols;
} lm_matrix;

/* Rotary embedding on the first rot_dim dims of each head (rot_dim/2
 * frequencies inv_freq[i] = theta^(-2i/rot_dim)).  Frequency i takes its
 * position from component section_of(i) of the token's (t, h, w) position:
 *   interleaved sections (Qwen3.5): H if i%3==1 && i<3*sections[1],
 *                                   W if i%3==2 && i<3*sections[2], else T;
 *   contiguous sections (GLM): i < s0 -> T, i < s0+s1 -> H, else W.
 * Pairing: rotate-half (x_j, x_{j+rot_dim/2}) or interleaved pairs (x_2i, x_2i+1). */
typedef struct {
    int rot_dim;
    float theta;
    /* Optional [rot_dim/2] table overriding theta^(-2i/rot_dim): models
     * precompute it once, and can reproduce a checkpoint's rounding of it. */
    const float *inv_freq;
    int sections[3];
    bool interleaved_sections;
    bool pair_interleaved; /* false = rotate-half (NeoX) */
} lm_rope_params;

/* One full-attention layer's paged KV cache: k and v pools of
 * [n_blocks, block_size, n_kv_heads, head_dim] float32.  Token slot s lives at
 * block s / block_size, offset s % block_size. */
typedef struct {
    float *k, *v;
    int n_blocks, block_size, n_kv_heads, head_dim;
} lm_kv_layer;

/* The tokens of one attention call.  Token i belongs to sequence token_seq[i]
 * and attends to the first ctx_len[i] cached entries of that sequence (its
 * own entry included: causal).  block_tables[s] maps a sequence's logical
 * block to a pool block. */
typedef struct {
    int n_tokens;
    const int32_t *token_seq;
    const int32_t *ctx_len;
    const int32_t *const *block_tables;
    int n_heads, n_kv_heads, head_dim;
    float scale;
} lm_attention_batch;

typedef struct {
    const char *name;
    /* y[n, w.rows] = x[n, w.cols] · wᵀ */
    void (*matmul)(lm_backend *be, float *y, const float *x, int n, const lm_matrix *w);
    /* out[i] = table row ids[i] as float32 (table [vocab, dim]) */
    void (*embed)(lm_backend *be, float *out, const int32_t *ids, int n, const lm_matrix *table);
    /* out = x / sqrt(mean(x²) + eps) * weight, per row of dim; out may alias x.
     * Zero-centred (1 + w) norms pass weights with the 1 already added. */
    void (*rmsnorm)(lm_backend *be, float *out, const float *x, const float *weight, int rows,
                    int dim, float eps);
    /* out = rmsnorm(x) * weight * silu(z), per row of dim (Qwen3.5 GDN output norm). */
    void (*gated_rmsnorm)(lm_backend *be, float *out, const float *x, const float *z,
                          const float *weight, int rows, int dim, float eps);
    /* x /= sqrt(sum(x²) + eps) per row of dim, then x *= scale; in place. */
    void (*l2norm_scale)(lm_backend *be, float *x, int rows, int dim, float eps, float scale);
    /* In-place rotary embedding of x [n, n_heads, head_dim]; positions [n][3]. */
    void (*rope)(lm_backend *be, float *x, int n, int n_heads, int head_dim,
                 const int32_t *positions, const lm_rope_params *rope);
    /* out = silu(gate) * up, elementwise; out may alias gate or up. */
    void (*silu_mul)(lm_backend *be, float *out, const float *gate, const float *up, int64_t n);
    /* x *= sigmoid(gate), elementwise. */
    void (*sigmoid_mul)(lm_backend *be, float *x, const float *gate, int64_t n);
    /* x += y, elementwise. */
    void (*add)(lm_backend *be, float *x, const float *y, int64_t n);
    /* Writes k, v rows [n, n_kv_heads*head_dim] into the pool at token slots. */
    void (*kv_write)(lm_backend *be, const lm_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots);
    /* out [n, n_heads*head_dim] = softmax(q·Kᵀ·scale) · V over the paged cache, GQA
     * (query head h reads kv head h / (n_heads / n_kv_heads)). */
    void (*attention)(lm_backend *be, float *out, const float *q, const lm_kv_layer *kv,
                      const lm_attention_batch *batch);
    /* Causal depthwise conv of one sequence, then SiLU.  in [T, C] (pre-conv),
     * weight [C, K] (tap K-1 hits the current token), state [C, K-1] holding
     * the previous K-1 inputs (oldest first), updated to the last K-1 inputs.
     * out [T, C]. */
    void (*causal_conv1d_silu)(lm_backend *be, float *out, const float *in, int T, int C,
                               float *state, const float *weight, int K);
    /* Gated delta rule of one sequence (model-spec §A.7 steps 5-6):
     * q, k [T, Hk, dk] (already l2-normalised, q scaled), v [T, Hv, dv],
     * g (log decay) and beta [T, Hv]; state [Hv, dk, dv] updated in place;
     * out [T, Hv, dv].  Value head hv uses key head hv / (Hv / Hk). */
    void (*gated_delta_rule)(lm_backend *be, float *out, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, float *state,
                             int T, int Hk, int Hv, int dk, int dv);
} lm_backend_ops;

struct lm_backend {
    const lm_backend_ops *ops;
    void *impl; /* backend-private: the cpu backend keeps its thread pool here */
};

lm_status lm_backend_cpu_create(int n_threads, lm_backend **out, lm_error *err);
void lm_backend_destroy(lm_backend *be);
int lm_backend_threads(const lm_backend *be);
/* The cpu backend's worker pool (NULL for other backends). */
struct lm_pool *lm_cpu_pool_of(lm_backend *be);

static inline void lm_matmul(lm_backend *be, float *y, const float *x, int n, const lm_matrix *w) {
    be->ops->matmul(be, y, x, n, w);
}
static inline void lm_embed(lm_backend *be, float *out, const int32_t *ids, int n,
                            const lm_matrix *table) {
    be->ops->embed(be, out, ids, n, table);
}
static inline void lm_rmsnorm(lm_backend *be, float *out, const float *x, const float *weight,
                              int rows, int dim, float eps) {
    be->ops->rmsnorm(be, out, x, weight, rows, dim, eps);
}
static inline void lm_gated_rmsnorm(lm_backend *be, float *out, const float *x, const float *z,
                                    const float *weight, int rows, int dim, float eps) {
    be->ops->gated_rmsnorm(be, out, x, z, weight, rows, dim, eps);
}
static inline void lm_l2norm_scale(lm_backend *be, float *x, int rows, int dim, float eps,
                                   float scale) {
    be->ops->l2norm_scale(be, x, rows, dim, eps, scale);
}
static inline void lm_rope(lm_backend *be, float *x, int n, int n_heads, int head_dim,
                           const int32_t *positions, const lm_rope_params *rope) {
    be->ops->rope(be, x, n, n_heads, head_dim, positions, rope);
}
static inline void lm_silu_mul(lm_backend *be, float *out, const float *gate, const float *up,
                               int64_t n) {
    be->ops->silu_mul(be, out, gate, up, n);
}
static inline void lm_sigmoid_mul(lm_backend *be, float *x, const float *gate, int64_t n) {
    be->ops->sigmoid_mul(be, x, gate, n);
}
static inline void lm_add(lm_backend *be, float *x, const float *y, int64_t n) {
    be->ops->add(be, x, y, n);
}
static inline void lm_kv_write(lm_backend *be, const lm_kv_layer *kv, const float *k,
                               const float *v, int n, const int32_t *slots) {
    be->ops->kv_write(be, kv, k, v, n, slots);
}
static inline void lm_attention(lm_backend *be, float *out, const float *q, const lm_kv_layer *kv,
                                const lm_attention_batch *batch) {
    be->ops->attention(be, out, q, kv, batch);
}
static inline void lm_causal_conv1d_silu(lm_backend *be, float *out, const float *in, int T, int C,
                                         float *state, const float *weight, int K) {
    be->ops->causal_conv1d_silu(be, out, in, T, C, state, weight, K);
}
static inline void lm_gated_delta_rule(lm_backend *be, float *out, const float *q, const float *k,
                                       const float *v, const float *g, const float *beta,
                                       float *state, int T, int Hk, int Hv, int dk, int dv) {
    be->ops->gated_delta_rule(be, out, q, k, v, g, beta, state, T, Hk, Hv, dk, dv);
}

#endif
