/* Qwen3.5 text model (model-spec §A): Gated DeltaNet and gated full-attention
 * decoder layers with SwiGLU MLPs, forward over a StepBatch. */
#ifndef LOOM_MODELS_QWEN35_H
#define LOOM_MODELS_QWEN35_H

#include "engine/kv_cache.h"
#include "engine/state_cache.h"
#include "engine/step_batch.h"
#include "io/checkpoint.h"
#include "io/qwen35_config.h"
#include "models/weights.h"
#include "ops/ops.h"

typedef struct {
    lm_matrix in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj;
    float *conv_weight; /* [conv_dim, K] */
    float *neg_exp_A;   /* -exp(A_log) [Hv] */
    float *dt_bias;     /* [Hv] */
    float *norm;        /* gated RMSNorm weight [dv], plain (not zero-centred) */
} lm_qwen35_linear_attention;

typedef struct {
    lm_matrix q_proj, k_proj, v_proj, o_proj;
    float *q_norm, *k_norm; /* 1 + w */
} lm_qwen35_full_attention;

typedef struct {
    lm_matrix gate_proj, up_proj, down_proj;
} lm_qwen35_mlp;

typedef struct {
    lm_layer_type type;
    int cache_index; /* index among layers of its type: KV layer or state layer */
    float *input_norm, *post_attention_norm; /* 1 + w */
    lm_qwen35_linear_attention linear;
    lm_qwen35_full_attention full;
    lm_qwen35_mlp mlp;
} lm_qwen35_layer;

typedef struct {
    lm_qwen35_config config;
    lm_weights weights;
    lm_matrix embed_tokens, lm_head;
    bool lm_head_tied;
    float *final_norm; /* 1 + w */
    lm_qwen35_layer *layers;
    int n_full_layers, n_linear_layers;
    lm_rope_params rope;
    float *rope_inv_freq; /* [rot_dim/2], rope.inv_freq points here */
    /* derived sizes */
    int key_dim, value_dim, conv_dim;
} lm_qwen35_model;

/* Caches for one model: KV blocks for full-attention layers and state slots
 * for Gated DeltaNet layers. */
typedef struct {
    lm_kv_cache kv;
    lm_state_cache state;
} lm_qwen35_caches;

/* Per-forward scratch memory, grown to the largest batch seen and reused. */
typedef struct {
    float *buffer;
    size_t capacity; /* floats */
    int32_t *slots, *seq_of, *ctx_len;
    const int32_t **tables;
    int token_capacity, seq_capacity;
} lm_qwen35_workspace;

/* Optional capture of intermediate states for tests: hidden[l] receives the
 * [n_tokens, H] hidden state entering layer l, hidden[L] the final normed one. */
typedef struct {
    float **hidden;
} lm_qwen35_capture;

lm_status lm_qwen35_load(const lm_checkpoint *checkpoint, const lm_qwen35_config *config,
                         lm_qwen35_model *model, lm_error *err);
/* A model of the config's shape with random bf16 weights (benchmarks). */
lm_status lm_qwen35_load_random(const lm_qwen35_config *config, uint64_t seed,
                                lm_qwen35_model *model, lm_error *err);
void lm_qwen35_free(lm_qwen35_model *model);

/* Rounds the rotary frequencies to bf16, as a model whose inv_freq buffer
 * was cast to bf16 computes them (the transformers oracle of the fixtures
 * did this: it cast the whole model to bf16 before computing in float64). */
void lm_qwen35_round_rope_to_bf16(lm_qwen35_model *model);

lm_status lm_qwen35_caches_init(const lm_qwen35_model *model, int block_size, int n_blocks,
                                int n_state_slots, lm_qwen35_caches *caches, lm_error *err);
void lm_qwen35_caches_free(lm_qwen35_caches *caches);

void lm_qwen35_workspace_free(lm_qwen35_workspace *ws);

/* Runs the batch through the model, appending its tokens to the caches.
 * logits: [lm_step_batch_logit_rows(batch), vocab]; hidden (optional): the
 * post-final-norm hidden state of the same rows [rows, H] (the MTP input). */
lm_status lm_qwen35_forward(const lm_qwen35_model *model, lm_backend *be, lm_qwen35_caches *caches,
                            lm_qwen35_workspace *ws, const lm_step_batch *batch, float *logits,
                            float *hidden, const lm_qwen35_capture *capture, lm_error *err);

#endif
