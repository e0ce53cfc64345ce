/* Qwen3.5 text model (model-spec §A): Gated DeltaNet and gated full-attention
 * decoder layers with SwiGLU MLPs, forward over a StepBatch, behind the
 * model interface (models/model.h) as the family "qwen3_5". */
#ifndef LOOM_MODELS_QWEN35_H
#define LOOM_MODELS_QWEN35_H

#include "io/checkpoint.h"
#include "models/qwen35/qwen35_config.h"
#include "models/expert_weights.h"
#include "models/model.h"
#include "models/rank_share.h"
#include "models/registry.h"
#include "models/weights.h"
#include "ops/ops.h"

extern const lm_model_family lm_qwen35_family;

typedef struct {
    lm_matrix in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj;
    lm_mem conv_weight; /* [conv_dim, K] */
    lm_mem neg_exp_A;   /* -exp(A_log) [Hv], made once at load */
    lm_mem dt_bias;     /* [Hv] */
    lm_mem norm;        /* gated RMSNorm weight [dv], plain (not zero-centred) */
} lm_qwen35_linear_attention;

typedef struct {
    lm_matrix q_proj, k_proj, v_proj, o_proj;
    lm_mem q_norm, k_norm; /* 1 + w */
} lm_qwen35_full_attention;

typedef lm_swiglu lm_qwen35_mlp;

/* The sparse MoE block of a Qwen3.5-MoE layer (model-spec §B.2): routed
 * SwiGLU experts (per-expert tensors or slices of fused ones) and a shared
 * expert scaled by a per-token sigmoid gate. */
typedef struct {
    lm_matrix router;            /* mlp.gate [E, H] */
    lm_expert_weights experts;   /* per-expert tensors or slices of fused ones */
    lm_qwen35_mlp shared;        /* mlp.shared_expert, width shared_expert_intermediate_size */
    lm_matrix shared_gate;       /* mlp.shared_expert_gate [1, H] */
} lm_qwen35_moe;

typedef struct {
    lm_layer_type type;
    int cache_index; /* index among layers of its type: KV layer or state layer */
    lm_mem input_norm, post_attention_norm; /* 1 + w */
    lm_qwen35_linear_attention linear;
    lm_qwen35_full_attention full;
    bool is_moe;     /* the MLP is mlp (dense) or moe */
    lm_qwen35_mlp mlp;
    lm_qwen35_moe moe;
} lm_qwen35_layer;

struct lm_qwen35_mtp; /* models/qwen35_mtp.h */
struct lm_qwen35_vision; /* models/qwen35_vision.h */

typedef struct {
    lm_model base; /* first: the model interface */
    lm_qwen35_config config;
    lm_checkpoint *checkpoint; /* owned; NULL for random weights */
    lm_weights weights;
    lm_matrix embed_tokens, lm_head; /* lm_head: this rank's rows when vocab_split */
    bool lm_head_tied;
    bool vocab_split; /* tensor parallelism: the lm_head split by vocabulary (lm_vocab_splits) */
    lm_mem final_norm; /* 1 + w */
    lm_qwen35_layer *layers;
    int n_full_layers, n_linear_layers;
    lm_rope_params rope;
    lm_moe_routing routing; /* MoE models: softmax, top-k, renormalised */
    /* derived sizes (this rank's share under tensor parallelism) */
    int key_dim, value_dim, conv_dim;
    /* Tensor parallelism (models/rank_share.h): config holds this rank's
     * heads and MLP widths (the checkpoint's divided by share.n_ranks),
     * share where its slices begin; share.comm is NULL for the whole model. */
    lm_rank_share share;
    /* The Multi-Token-Prediction head (models/qwen35_mtp.h), loaded with the
     * model when the config declares one.  A head that is absent, incomplete
     * or unsupported leaves has_mtp false (the engine then runs without
     * speculation) and mtp_missing says why. */
    struct lm_qwen35_mtp *mtp;
    bool has_mtp;
    char mtp_missing[LM_ERROR_MESSAGE_MAX];
    /* The vision tower (models/qwen35_vision.h), when config.json has a
     * vision_config and the checkpoint its tensors; else NULL. */
    struct lm_qwen35_vision *vision;
} lm_qwen35_model;

/* Loads the text model of a checkpoint and, when the config declares one,
 * the MTP head (a head that cannot be used does not fail the load: see
 * has_mtp).  The model takes the checkpoint (closed with the model, also on
 * failure); checkpoint NULL makes random weights of the config's shape. */
lm_status lm_qwen35_load(lm_checkpoint *checkpoint, const lm_qwen35_config *config,
                         const lm_model_load_options *options, lm_backend *backend,
                         lm_qwen35_model **out, lm_error *err);

/* Frees what a layer owns beyond the weights (its experts' descriptors). */
void lm_qwen35_layer_free(lm_qwen35_layer *layer);

/* Loads decoder layer `index`, tensors `<prefix>layers.<index>.*`, as a layer
 * of the given type with the model's MLP (dense or MoE).  norm_offset is added to its
 * zero-centred norm weights: 1 for weights stored as offsets, 0 when a
 * converter already added it.  The caller sets layer->cache_index. */
lm_status lm_qwen35_load_layer(lm_qwen35_model *model, const char *prefix, int index,
                               lm_layer_type type, float norm_offset, lm_qwen35_layer *layer,
                               lm_error *err);

#endif
