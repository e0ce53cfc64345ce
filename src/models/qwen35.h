/* Qwen3.5 text model (model-spec §A): Gated DeltaNet and gated full-attention
 * decoder layers with SwiGLU MLPs, forward over a StepBatch. */
#ifndef LOOM_MODELS_QWEN35_H
#define LOOM_MODELS_QWEN35_H

#include "engine/kv_cache.h"
#include "engine/state_cache.h"
#include "engine/step_batch.h"
#include "io/checkpoint.h"
#include "models/qwen35_config.h"
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

/* How the checkpoint stores the MTP head's RMSNorm weights (model-spec
 * §C.1: all zero-centred).  Some converters (mlx) add the 1 at conversion. */
typedef enum {
    LM_MTP_NORMS_AUTO,         /* detect: a mean above 0.5 means the 1 is already in (vllm-mlx) */
    LM_MTP_NORMS_ZERO_CENTRED, /* stored w, the scale is 1 + w (Hugging Face checkpoints) */
    LM_MTP_NORMS_SHIFTED,      /* stored 1 + w (converted checkpoints) */
} lm_mtp_norms;

typedef struct {
    lm_mtp_norms mtp_norms;
} lm_qwen35_load_options;

struct lm_qwen35_mtp; /* models/qwen35_mtp.h */

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
    /* The Multi-Token-Prediction head (models/qwen35_mtp.h), loaded with the
     * model when the config declares one.  A head that is absent, incomplete
     * or unsupported leaves has_mtp false (the engine then runs without
     * speculation) and mtp_missing says why. */
    struct lm_qwen35_mtp *mtp;
    bool has_mtp;
    char mtp_missing[LM_ERROR_MESSAGE_MAX];
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
    float *mtp_buffer; /* the MTP head's own rows (models/qwen35_mtp.c) */
    size_t mtp_capacity; /* floats */
} lm_qwen35_workspace;

/* Optional capture of intermediate states for tests: hidden[l] receives the
 * [n_tokens, H] hidden state entering layer l, hidden[L] the final normed one. */
typedef struct {
    float **hidden;
    float *final_hidden_all; /* [n_tokens, H]: post-final-norm state of every row (MTP input) */
} lm_qwen35_capture;

/* What one step keeps of a sequence's Gated DeltaNet layers so a speculative
 * verify can be rolled back to any accepted prefix without another forward
 * (model-spec §C.5, "replay"): the states before the step and, per row, the
 * pre-conv inputs and the delta-rule inputs. */
typedef struct lm_gdn_record {
    int capacity;        /* rows one step may record */
    int n_rows;          /* rows recorded by the last step */
    size_t conv_floats, recurrent_floats;
    float *conv_before;  /* [n_linear][conv_floats] */
    float *state_before; /* [n_linear][recurrent_floats] */
    float *mixed;        /* [n_linear][capacity][conv_dim] */
    float *k;            /* [n_linear][capacity][key_dim], l2-normalised */
    float *v;            /* [n_linear][capacity][value_dim] */
    float *g, *beta;     /* [n_linear][capacity][Hv] */
    float *scratch;      /* [capacity][max(conv_dim, value_dim)] */
} lm_gdn_record;

/* Loads the text model and, when the config declares one, the MTP head
 * (a head that cannot be used does not fail the load: see has_mtp). */
lm_status lm_qwen35_load(const lm_checkpoint *checkpoint, const lm_qwen35_config *config,
                         lm_qwen35_model *model, lm_error *err);
/* The same with options (NULL: the defaults, as lm_qwen35_load). */
lm_status lm_qwen35_load_with(const lm_checkpoint *checkpoint, const lm_qwen35_config *config,
                              const lm_qwen35_load_options *options, lm_qwen35_model *model,
                              lm_error *err);
/* A model of the config's shape with random bf16 weights (benchmarks). */
lm_status lm_qwen35_load_random(const lm_qwen35_config *config, uint64_t seed,
                                lm_qwen35_model *model, lm_error *err);
void lm_qwen35_free(lm_qwen35_model *model);

lm_status lm_qwen35_caches_init(const lm_qwen35_model *model, int block_size, int n_blocks,
                                int n_state_slots, lm_qwen35_caches *caches, lm_error *err);
void lm_qwen35_caches_free(lm_qwen35_caches *caches);

void lm_qwen35_workspace_free(lm_qwen35_workspace *ws);

/* Loads decoder layer `index`, tensors `<prefix>layers.<index>.*`, as a layer
 * of the given type with the model's MLP.  norm_offset is added to its
 * zero-centred norm weights: 1 for weights stored as offsets, 0 when a
 * converter already added it.  The caller sets layer->cache_index. */
lm_status lm_qwen35_load_layer(lm_qwen35_model *model, const char *prefix, int index,
                               lm_layer_type type, float norm_offset, lm_qwen35_layer *layer,
                               lm_error *err);

/* Checks a batch against the model (token ids) and the caches it will use:
 * kv blocks when kv has layers, state slots when state is non-NULL and the
 * model has Gated DeltaNet layers. */
lm_status lm_qwen35_validate_batch(const lm_qwen35_model *model, const lm_kv_cache *kv,
                                   const lm_state_cache *state, const lm_step_batch *batch,
                                   lm_error *err);

/* Moves the rows of x [n_tokens, width] that the batch wants logits of (see
 * lm_qwen35_forward) to its front, in batch order; returns their count. */
int lm_qwen35_gather_logit_rows(const lm_step_batch *batch, float *x, int width);

/* One gated full-attention decoder layer (model-spec §A.4, §A.5) over the
 * batch: h [n_tokens, H], a residual stream, is updated in place; keys and
 * values go to kv->layers[layer->cache_index] at the batch's positions.  The
 * MTP head runs its layer through this. */
lm_status lm_qwen35_attention_layer_forward(const lm_qwen35_model *model, lm_backend *be,
                                            const lm_qwen35_layer *layer, lm_kv_cache *kv,
                                            lm_qwen35_workspace *ws, const lm_step_batch *batch,
                                            float *h, lm_error *err);

/* Runs the batch through the model, appending its tokens to the caches.
 * logits: [lm_step_batch_logit_rows(batch), vocab]; hidden (optional): the
 * post-final-norm hidden state of the same rows [rows, H] (the MTP input). */
lm_status lm_gdn_record_init(const lm_qwen35_model *model, int capacity, lm_gdn_record *record,
                             lm_error *err);
void lm_gdn_record_free(lm_gdn_record *record);
/* Rewinds the Gated DeltaNet conv and recurrent states of `slot` to the state
 * after the first n_keep rows of the recorded step (n_keep >= 1). */
void lm_qwen35_rollback_linear_state(const lm_qwen35_model *model, lm_backend *be,
                                     lm_state_cache *state, int slot, const lm_gdn_record *record,
                                     int n_keep);

lm_status lm_qwen35_forward(const lm_qwen35_model *model, lm_backend *be, lm_qwen35_caches *caches,
                            lm_qwen35_workspace *ws, const lm_step_batch *batch, float *logits,
                            float *hidden, const lm_qwen35_capture *capture, lm_error *err);

#endif
