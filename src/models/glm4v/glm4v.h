/* GLM-4.6V's text model (model-spec §E.2, §E.6) behind the model interface
 * (models/model.h) as the family "glm4v": decoder layers of grouped-query
 * attention with q/k/v biases and partial M-RoPE (contiguous sections), then
 * a SwiGLU MLP — dense in the first first_k_dense_replace layers of the MoE
 * model (glm4v_moe), a sigmoid-routed mixture of experts with shared experts
 * after; every layer dense, with "sandwich" norms and a fused gate_up MLP, in
 * the dense GLM-4.6V-Flash (glm4v). */
#ifndef LOOM_MODELS_GLM4V_H
#define LOOM_MODELS_GLM4V_H

#include "io/checkpoint.h"
#include "models/expert_weights.h"
#include "models/glm4v/glm4v_config.h"
#include "models/model.h"
#include "models/rank_share.h"
#include "models/registry.h"
#include "models/weights.h"
#include "ops/ops.h"

extern const lm_model_family lm_glm4v_family;

typedef struct {
    lm_matrix q_proj, k_proj, v_proj, o_proj;
    lm_mem q_bias, k_bias, v_bias; /* buffer NULL when attention_bias is false */
} lm_glm4v_attention;

/* The MoE block (model-spec §E.2.4). */
typedef struct {
    lm_matrix router;          /* mlp.gate [E, H] */
    lm_mem correction_bias;    /* mlp.gate.e_score_correction_bias [E], selection only */
    lm_moe_routing routing;    /* sigmoid, grouped top-k, its bias */
    lm_expert_weights experts; /* mlp.experts, per expert or fused */
    lm_swiglu shared;          /* mlp.shared_experts, width moe_intermediate_size * n_shared_experts */
} lm_glm4v_moe;

typedef struct {
    lm_mem input_norm, post_attention_norm;
    lm_mem post_self_attn_norm, post_mlp_norm; /* dense glm4v only ("sandwich"); else buffer NULL */
    lm_glm4v_attention attn;
    bool is_moe;
    lm_swiglu mlp; /* dense layers: mlp.{gate,up,down}_proj, or slices of mlp.gate_up_proj */
    lm_glm4v_moe moe;
} lm_glm4v_layer;

typedef struct {
    lm_model base; /* first: the model interface */
    lm_glm4v_config config;
    lm_checkpoint *checkpoint; /* owned; NULL for random weights */
    lm_weights weights;
    lm_matrix embed_tokens, lm_head; /* lm_head: this rank's rows when vocab_split */
    bool vocab_split; /* tensor parallelism: the lm_head split by vocabulary (lm_vocab_splits) */
    bool lm_head_tied;
    lm_mem final_norm;
    lm_glm4v_layer *layers;
    lm_rope_params rope;
    bool sandwich_norms; /* glm4v (dense): four norms per layer */
    /* Tensor parallelism (models/rank_share.h): config holds this rank's
     * heads and MLP widths (the checkpoint's divided by share.n_ranks),
     * share where its slices begin; share.comm is NULL for the whole model. */
    lm_rank_share share;
    /* The shared experts' width, moe_intermediate_size · n_shared_experts
     * of the checkpoint, this rank's share: split by the ranks also when
     * expert parallelism keeps the routed experts' width whole. */
    int shared_experts_width;
    /* The vision tower (models/glm4v_vision.h), when config.json has a
     * vision_config and the checkpoint its tensors; else NULL. */
    struct lm_glm4v_vision *vision;
} lm_glm4v_model;

#endif
