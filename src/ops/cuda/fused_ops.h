/* The cuda backend's fused kernels: one launch for a run of the seam's
 * plain ops, with exactly the bits of those ops (the rule
 * tests/test_backend_ops.c proves, fused against parts).  Private to
 * src/ops/cuda (and the op test and benches): the models write the plain
 * ops (ops/ops.h), the fusion window (fusion_window.c) records them and
 * the fuser (fusion_plan.c) says which runs these kernels take.  Each
 * `bool` entry may decline a shape (false, nothing queued): the window
 * then runs the parts.  LOOM_CUDA_FUSE=0 makes every one decline. */
#ifndef LOOM_OPS_CUDA_FUSED_OPS_H
#define LOOM_OPS_CUDA_FUSED_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

#include "ops/ops.h"

/* Gated DeltaNet's inputs (model-spec §A.7 steps 1-4) for lm_cuda_gdn_prepare. */
typedef struct lm_gdn_prepare_args {
    lm_mem q, k, v;   /* out: [n, Hk, dk] l2-normalised and times q_scale, [n, Hk, dk]
                       * l2-normalised, [n, Hv, dv] */
    lm_mem beta, g;   /* in place [n, Hv]: the b and a projections -> the gates (gdn_gates) */
    lm_mem mixed;     /* in: [n, 2·Hk·dk + Hv·dv], q | k | v before the conv */
    lm_mem conv_weight; /* [conv_dim, conv_kernel] */
    lm_mem conv_states; /* causal_conv1d_silu's windows, updated */
    int64_t conv_slot_stride;
    lm_mem neg_exp_A, dt_bias; /* [Hv] */
    const lm_seq_batch *seqs;
    int n, conv_kernel, Hk, Hv, dk, dv;
    float q_scale, eps; /* l2norm_scale's */
} lm_gdn_prepare_args;

/* The gated delta rule and the gated rmsnorm of its output (model-spec
 * §A.7 steps 5-7) for lm_cuda_gated_delta_rule_norm: out [n, Hv, dv] =
 * rmsnorm(o)·norm·silu(z) per value head's row, o the delta rule's
 * output for q, k, v, g, beta over the states (as gated_delta_rule). */
typedef struct lm_delta_rule_norm_args {
    lm_mem out;             /* [n, Hv, dv] */
    lm_mem q, k, v, g, beta;
    lm_mem states;          /* updated in place */
    int64_t slot_stride;
    const lm_seq_batch *seqs;
    lm_mem z;               /* [n, Hv, dv]: the output gate */
    lm_mem norm;            /* [dv] */
    int n, Hk, Hv, dk, dv;  /* n: the rows of every sequence */
    float eps;
} lm_delta_rule_norm_args;

/* Gated full attention's inputs (model-spec §A.5 steps 2-4) for
 * lm_cuda_attention_prepare: the q projection's rows hold each head's query then
 * its output gate; the queries and keys are rms-normed per head and
 * rotated, and the keys and values go to the KV pool. */
typedef struct lm_attention_prepare_args {
    lm_mem q, gates;   /* out: [n, n_heads, head_dim] each */
    lm_mem k;          /* in: [n, n_kv_heads, head_dim]; out: normed and rotated */
    lm_mem v;          /* in: [n, n_kv_heads, head_dim] */
    lm_mem q_and_gate; /* in: [n, n_heads, 2·head_dim] */
    lm_mem q_norm, k_norm; /* [head_dim] rmsnorm weights */
    lm_mem positions;  /* int32 [n, 3], as rope */
    lm_mem kv_slots;   /* int32 [n], as kv_write */
    const lm_rope_params *rope;
    const lm_kv_layer *kv;
    int n, n_heads, n_kv_heads, head_dim;
    float eps;
} lm_attention_prepare_args;

/* The input of a layer's products taken as the norm of the residual
 * stream, for lm_cuda_normed_matmul_group and _swiglu: x =
 * rmsnorm(h) · weight, rows of the matrices' cols, written to x (which
 * must not alias h) as rmsnorm writes it, and the products read it. */
typedef struct lm_normed_input {
    lm_mem h;      /* [n, cols] the residual stream, read only */
    lm_mem weight; /* [cols]; zero-centred (1 + w) norms pass 1 + w */
    lm_mem x;      /* [n, cols] out: rmsnorm(h) · weight */
    float eps;
} lm_normed_input;

/* One product of a matmul group: y = x · wᵀ. */
#define LM_MATMUL_GROUP_MAX 4
typedef struct {
    lm_mem y;
    const lm_matrix *w;
} lm_matmul_out;

/* outs[i].y = x · outs[i].wᵀ for i < count (at most LM_MATMUL_GROUP_MAX),
 * each y exactly what matmul writes, one launch: the small projections (a
 * layer's gates) ride with the large ones. */
void lm_cuda_matmul_group(lm_backend *be, lm_mem x, int n, const lm_matmul_out *outs, int count);
/* The SwiGLU MLP's first half, y[n, rows] = silu(x · gateᵀ) * (x · upᵀ),
 * gate and up of one shape: the two [n, rows] intermediates saved. */
bool lm_cuda_matmul_swiglu(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *gate, const lm_matrix *up);
/* The group's products of x = rmsnorm(in->h) · in->weight, x written too:
 * the rows normed inside the products' blocks for decode steps. */
bool lm_cuda_normed_matmul_group(lm_backend *be, const lm_normed_input *in, int n, const lm_matmul_out *outs,
                                 int count);
/* matmul_swiglu of x = rmsnorm(in->h) · in->weight, x written too. */
bool lm_cuda_normed_matmul_swiglu(lm_backend *be, lm_mem y, const lm_normed_input *in, int n, const lm_matrix *gate,
                                  const lm_matrix *up);
/* y[n, w.rows] += x · wᵀ (matmul into a scratch, then add): the residual
 * add in the product's last step. */
bool lm_cuda_matmul_add(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w);
/* y[n, w.rows] += other + sigmoid(gate) ⊙ (x' · wᵀ), gate [n] one value a
 * row: matmul, sigmoid_scale_rows, add into other, add into y (an MoE
 * block's shared expert scaled by its gate, added to the routed experts'
 * sum, and that to the residual stream).  x' is x, or with x_up given
 * (its buffer not NULL; [n, w.cols]) silu(x) ⊙ x_up (silu_mul's bits).
 * other's and x's contents are undefined after. */
bool lm_cuda_matmul_gated_add(lm_backend *be, lm_mem y, lm_mem x, lm_mem x_up, int n, const lm_matrix *w, lm_mem gate,
                              lm_mem other);
/* h += delta over [rows, dim], then out = rmsnorm(h) * weight; out may
 * alias delta, not h.  Never declines. */
void lm_cuda_add_rmsnorm(lm_backend *be, lm_mem out, lm_mem h, lm_mem delta, lm_mem weight, int rows, int dim,
                         float eps);
/* out = attention ⊙ sigmoid(gates) (model-spec §A.5), gates [n,
 * n_heads*head_dim]: the gate made once an element as attention writes it. */
bool lm_cuda_gated_attention(lm_backend *be, lm_mem out, lm_mem q, lm_mem gates, const lm_kv_layer *kv,
                             const lm_attention_batch *b);
/* gdn_gates, causal_conv1d_silu, the split of the conv's output into
 * q | k | v and l2norm_scale of q and k, one launch for decode and verify
 * steps (where these are a few microseconds each, not bandwidth). */
bool lm_cuda_gdn_prepare(lm_backend *be, const lm_gdn_prepare_args *a);
/* copy_rows (the query and gate halves), rmsnorm of q and k per head, rope
 * of both and kv_write: seven launches of a decode step's attention layer
 * in one. */
bool lm_cuda_attention_prepare(lm_backend *be, const lm_attention_prepare_args *a);
/* gated_delta_rule, then gated_rmsnorm of its output rows, one launch for
 * decode and verify steps. */
bool lm_cuda_gated_delta_rule_norm(lm_backend *be, const lm_delta_rule_norm_args *a);

#ifdef __cplusplus
}
#endif

#endif
