/* Loading the feed-forward blocks every family shares: a SwiGLU MLP's three
 * matrices, and a mixture-of-experts layer's routed experts in either
 * checkpoint layout (model-spec §B.3, §E.2.5):
 *   fused       <mlp>experts.gate_up_proj [E, 2I, H] (gate rows first) and
 *               <mlp>experts.down_proj [E, H, I], cut into per-expert views
 *               without copying;
 *   per expert  <mlp>experts.<e>.{gate,up,down}_proj.weight. */
#ifndef LOOM_MODELS_EXPERT_WEIGHTS_H
#define LOOM_MODELS_EXPERT_WEIGHTS_H

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

/* The routed experts of one layer: host descriptors of backend memory. */
typedef struct {
    lm_matrix *matrices;   /* [3][E]: gate, up, down of every expert (owned) */
    lm_moe_experts view;   /* the op's view of them */
    bool fused;            /* which layout the checkpoint had */
} lm_expert_weights;

/* mlp_prefix ends in "mlp." (e.g. "model.language_model.layers.3.mlp.").
 * With n_ranks > 1, each expert's share (I columns a rank, rank's
 * lm_swiglu_load_share; of fused experts the same rows and columns of each
 * stacked matrix). */
lm_status lm_expert_weights_load(lm_weights *w, const char *mlp_prefix, int n_experts, int inter,
                                 int hidden, lm_expert_weights *out, lm_error *err);
lm_status lm_expert_weights_load_share(lm_weights *w, const char *mlp_prefix, int n_experts, int inter, int hidden,
                                       int rank, int n_ranks, lm_expert_weights *out, lm_error *err);
void lm_expert_weights_free(lm_expert_weights *e);

/* Bytes one token's pass through top_k of these experts reads. */
double lm_expert_bytes_per_token(const lm_expert_weights *e, int top_k);
double lm_matrix_bytes(const lm_matrix *m);
double lm_swiglu_bytes(const lm_swiglu *s);

#endif
