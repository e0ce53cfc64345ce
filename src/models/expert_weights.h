/* Loading the feed-forward blocks every family shares: a SwiGLU MLP's three
 * matrices, and a mixture-of-experts layer's routed experts in either
 * checkpoint layout (model-spec §B.3, §E.2.5):
 *   fused       <mlp>experts.gate_up_proj [E, 2I, H] (gate rows first) and
 *               <mlp>experts.down_proj [E, H, I], cut into per-expert views
 *               without copying;
 *   per expert  <mlp>experts.<e>.{gate,up,down}_proj.weight.
 * The fused form, with no `.weight` suffix, is transformers' own
 * Qwen3_5MoeExperts (models/qwen3_5_moe/modeling_qwen3_5_moe.py: `gate, up
 * = linear(x, gate_up_proj[e]).chunk(2, dim=-1)`, so gate rows first) and
 * what Qwen3.6 checkpoints store, the MTP head's experts included
 * (mtp.layers.0.mlp.experts.*).  FP8 stacks carry `<name>_scale_inv` [E,
 * ceil(rows/br), ceil(cols/bc)] (transformers' FP8 experts name them so),
 * read by models/weights.c's FP8 path like any matrix's. */
#ifndef LOOM_MODELS_EXPERT_WEIGHTS_H
#define LOOM_MODELS_EXPERT_WEIGHTS_H

#include "models/rank_share.h"
#include "models/weights.h"
#include "ops/ops.h"

/* (silu(x·gateᵀ) ⊙ x·upᵀ)·downᵀ with gate/up [width, H] and down [H, width]. */
typedef struct {
    lm_matrix gate_proj, up_proj, down_proj;
} lm_swiglu;

/* prefix + "gate_proj.weight", "up_proj.weight", "down_proj.weight". */
lm_status lm_swiglu_load(lm_weights *w, const char *prefix, int64_t width, int64_t hidden,
                         lm_swiglu *out, lm_error *err);

/* Rank `rank` of `n_ranks`' share of a SwiGLU of `width` columns a rank
 * (the checkpoint's width · n_ranks): rows of gate and up, a window of
 * down's columns (lm_weights_linear_slice).  One rank: lm_swiglu_load. */
lm_status lm_swiglu_load_share(lm_weights *w, const char *prefix, int64_t width, int64_t hidden, int rank,
                               int n_ranks, lm_swiglu *out, lm_error *err);

/* The routed experts of one layer (or a rank's range of them): host
 * descriptors of backend memory. */
typedef struct {
    lm_matrix *matrices;   /* [3][view.n_experts]: gate, up, down of each expert held (owned) */
    lm_moe_experts view;   /* the op's view of them */
    int layer_experts;     /* the layer's experts, held here or not */
    bool fused;            /* which layout the checkpoint had */
} lm_expert_weights;

/* mlp_prefix ends in "mlp." (e.g. "model.language_model.layers.3.mlp."). */
lm_status lm_expert_weights_load(lm_weights *w, const char *mlp_prefix, int n_experts, int inter,
                                 int hidden, lm_expert_weights *out, lm_error *err);
/* A rank's share of the layer's n_experts (share NULL or one rank: every
 * expert whole).  Tensor parallelism: every expert, each its share of
 * `inter` columns a rank (lm_swiglu_load_share; of fused experts the same
 * rows and columns of each stacked matrix).  Expert parallelism: experts
 * [share->expert_first, + expert_count) whole, `inter` their width; of
 * fused experts only their matrices of the stacks are read;
 * view.first_expert is the first's id. */
lm_status lm_expert_weights_load_share(lm_weights *w, const char *mlp_prefix, int n_experts, int inter, int hidden,
                                       const lm_rank_share *share, lm_expert_weights *out, lm_error *err);
void lm_expert_weights_free(lm_expert_weights *e);

/* Bytes one token's pass through top_k of the layer's experts reads here
 * (with expert parallelism, on average the top_k · held / layer's that
 * are held here). */
double lm_expert_bytes_per_token(const lm_expert_weights *e, int top_k);
double lm_matrix_bytes(const lm_matrix *m);
double lm_swiglu_bytes(const lm_swiglu *s);

#endif
