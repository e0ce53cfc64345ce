/* The cuda backend's fuser: which runs of plain ops one fused kernel
 * takes (plain C over plain descriptors, so a CPU-only test proves it:
 * tests/test_fusion_plan.c).
 *
 * The backend's fusible entries (matmul, rmsnorm, add, silu_mul,
 * sigmoid_scale_rows, attention, sigmoid_mul, gated_delta_rule,
 * gated_rmsnorm, gdn_gates, causal_conv1d_silu, copy_rows, l2norm_scale,
 * rope, kv_write, discard) do not launch: they append one lm_fuse_op
 * to the step's window (fusion_window.c), which is lowered at the first op
 * it does not know and at every host wait.  lm_fuse_plan reads the window
 * left to right and, at each op, takes the first pattern that starts
 * there and matches whole (the order below), else the op alone.  That is
 * exactly the choice the models made by name before the fusion moved
 * here: a residual product's add is taken by matmul_add before the next
 * add_rmsnorm could see it, a norm whose products follow goes with them.
 *
 * An intermediate the fused kernel does not write (swiglu's up half,
 * matmul_add's product, matmul_gated_add's product, sum and SiLU'd input)
 * must be dead: the model says so with discard ops right after the
 * pattern's last op, covering it.  Without them the pattern is refused
 * and the parts run, so memory after a lowering is what the parts leave,
 * up to bytes the caller declared dead. */
#ifndef LOOM_OPS_CUDA_FUSION_PLAN_H
#define LOOM_OPS_CUDA_FUSION_PLAN_H

#include "ops/cuda/fused_ops.h"

typedef enum {
    LM_FUSE_OP_MATMUL,             /* out = a · wᵀ, rows n */
    LM_FUSE_OP_RMSNORM,            /* out = rmsnorm(a) · b, rows × dim */
    LM_FUSE_OP_ADD,                /* out += a, count */
    LM_FUSE_OP_SILU_MUL,           /* out = silu(a) · b, count */
    LM_FUSE_OP_SIGMOID_SCALE_ROWS, /* out[r] *= sigmoid(a[r]), rows × dim */
    LM_FUSE_OP_DISCARD,            /* out's count bytes are dead */
    LM_FUSE_OP_ATTENTION,          /* out = attention(q = a) over attn.kv, attn.batch */
    LM_FUSE_OP_SIGMOID_MUL,        /* out *= sigmoid(a), count */
    LM_FUSE_OP_DELTA_RULE,         /* out = the delta rule of q = a, rule.* */
    LM_FUSE_OP_GATED_RMSNORM,      /* out = rmsnorm(a) · c · silu(b), rows × dim */
    LM_FUSE_OP_GDN_GATES,          /* out = beta, a = g, in place; b = neg_exp_A, c = dt_bias; rows n, dim H */
    LM_FUSE_OP_CONV,               /* out = causal_conv1d_silu(a), conv.*; b = weight */
    LM_FUSE_OP_COPY_ROWS,          /* out rows (stride rows.dst) = a's (rows.src), rows × dim */
    LM_FUSE_OP_L2NORM_SCALE,       /* out = l2norm(out) · u.scale per row (eps), rows × dim */
    LM_FUSE_OP_ROPE,               /* out rotated, rope.*; a = positions; rows n */
    LM_FUSE_OP_KV_WRITE,           /* a = k, b = v into u.kv; c = slots; rows n */
} lm_fuse_op_kind;

/* Host descriptors are copied: the caller's may be gone at the flush. */
typedef struct {
    lm_kv_layer kv;
    lm_attention_batch batch;
} lm_fuse_attention;

typedef struct {
    lm_mem states;
    int64_t slot_stride;
    lm_seq_batch seqs;
    int channels, taps; /* C, K */
} lm_fuse_conv;

typedef struct {
    int64_t dst, src; /* row strides, in floats */
} lm_fuse_rows;

typedef struct {
    lm_rope_params params;
    int n_heads;
} lm_fuse_rope;

typedef struct {
    lm_mem k, v, g, beta, states;
    int64_t slot_stride;
    lm_seq_batch seqs;
    int Hk, Hv, dk, dv;
} lm_fuse_delta_rule;

typedef struct {
    lm_fuse_op_kind kind;
    lm_mem out, a, b, c;
    lm_matrix w;   /* MATMUL */
    int64_t count; /* ADD, SILU_MUL, SIGMOID_MUL: elements; DISCARD: bytes */
    int rows, dim; /* MATMUL: rows = n */
    float eps;
    union {
        lm_fuse_attention attn;  /* ATTENTION */
        lm_fuse_delta_rule rule; /* DELTA_RULE */
        lm_fuse_conv conv;       /* CONV */
        lm_fuse_rows stride;     /* COPY_ROWS */
        float scale;             /* L2NORM_SCALE */
        lm_fuse_rope rope;       /* ROPE (dim: head_dim) */
        lm_kv_layer kv;          /* KV_WRITE */
    } u;
} lm_fuse_op;

/* The patterns, in the order they are tried at an op. */
typedef enum {
    LM_FUSE_PLAIN,                /* one op, its own kernel (a discard: nothing) */
    LM_FUSE_GDN_PREPARE,          /* gdn_gates conv copy_rows×3 l2norm_scale×2, discard of the conv's output */
    LM_FUSE_ATTENTION_PREPARE,    /* copy_rows×2 rmsnorm×2 rope×2 kv_write */
    LM_FUSE_MATMUL_GATED_ADD,     /* [silu_mul] matmul sigmoid_scale_rows add add, discards */
    LM_FUSE_NORMED_MATMUL_SWIGLU, /* rmsnorm, then matmul_swiglu of its output */
    LM_FUSE_NORMED_MATMUL_GROUP,  /* rmsnorm, then 1-4 matmuls of its output */
    LM_FUSE_MATMUL_SWIGLU,        /* matmul matmul silu_mul, discard of the up half */
    LM_FUSE_MATMUL_ADD,           /* matmul add, discard of the product */
    LM_FUSE_MATMUL_GROUP,         /* 2-4 matmuls of one input */
    LM_FUSE_ADD_RMSNORM,          /* add, [discards,] then rmsnorm of the sum */
    LM_FUSE_GATED_ATTENTION,      /* attention, then sigmoid_mul of its output */
    LM_FUSE_GATED_DELTA_RULE_NORM, /* the delta rule, then gated_rmsnorm of its output in place */
    LM_FUSE_N_PATTERNS
} lm_fuse_pattern;

const char *lm_fuse_pattern_name(lm_fuse_pattern p);

/* One step of the plan: ops [first, first + count) of the window, taken
 * by `pattern` (discards included). */
typedef struct {
    lm_fuse_pattern pattern;
    int first, count;
} lm_fuse_step;

/* Per pattern, what the plans made of it: fused (a whole match) and
 * refused (a candidate: its first two ops fit, the rest did not). */
typedef struct {
    long fused[LM_FUSE_N_PATTERNS];
    long refused[LM_FUSE_N_PATTERNS];
} lm_fuse_stats;

/* Plans ops[0, n) into steps (room for n; every op in exactly one step,
 * in order); returns the number of steps.  stats (may be NULL) counts. */
int lm_fuse_plan(const lm_fuse_op *ops, int n, lm_fuse_step *steps, lm_fuse_stats *stats);

#endif
