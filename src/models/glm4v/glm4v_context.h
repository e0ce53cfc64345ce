/* The GLM-4.6V family's context (models/model.h): its KV pools and step
 * workspace in one backend allocation, and the step descriptor a forward
 * uploads.  Internal to the family's files. */
#ifndef LOOM_MODELS_GLM4V_CONTEXT_H
#define LOOM_MODELS_GLM4V_CONTEXT_H

#include "models/glm4v/glm4v.h"
#include "models/forward_common.h"
#include "models/sharded_linear.h"
#include "models/step_descriptor.h"
#include "models/vision_common.h"

/* Scratch rows of one forward, [max_step_tokens, width] each. */
typedef struct {
    lm_mem h;           /* [N, H] residual stream */
    lm_mem x;           /* [N, H] normed input of a block, then its output */
    lm_mem q, k, v;     /* [N, heads * D] */
    lm_mem attn;        /* [N, nH * D] */
    lm_mem proj, proj2; /* [N, widest MLP] */
    /* MoE models only */
    lm_mem router_logits;  /* [N, E] */
    lm_mem ids, weights;   /* [N, top_k] int32 / float32 */
    lm_mem routed, shared; /* [N, H] */
    lm_mem expert_scratch; /* lm_moe_scratch_bytes(N, top_k, experts) */
} lm_glm4v_scratch;

typedef struct {
    lm_model_context base; /* first: the interface */
    lm_glm4v_model *model;
    lm_backend *be;
    lm_context_options options;
    int max_logit_rows;
    lm_buffer *buffer;  /* everything below lives in this one allocation */
    lm_kv_layer *kv;    /* [num_hidden_layers] */
    lm_dtype kv_dtype;  /* the pools' elements: what the backend's attention wants */
    lm_glm4v_scratch scratch;
    lm_mem logit_x;     /* [rows, H] the normed logit rows */
    lm_mem logits;      /* [rows, V] */
    lm_mem logit_ids;   /* [rows] int32: each row's argmax */
    lm_sample_buffers sample; /* the step's draws on the device (sample_rows) */
    lm_mem descriptor;  /* the int32 step descriptor */
    size_t descriptor_ints;
    int32_t *host_descriptor; /* staging, descriptor_ints */
    /* images (max_image_patches > 0): the vision tower's workspace */
    lm_vision_workspace vision;
    lm_mem vocab_scratch; /* a split lm_head's (lm_vocab_split_scratch) */
    lm_rank_sums ranks; /* tensor parallelism: a forward's sums over the ranks */
} lm_glm4v_context;

lm_status lm_glm4v_context_create(lm_model *m, const lm_context_options *o,
                                  lm_model_context **out, lm_error *err);
void lm_glm4v_context_destroy(lm_model_context *ctx);
void lm_glm4v_copy_block(lm_model_context *ctx, int src, int dst);
/* Checks the batch and uploads its descriptor. */
lm_status lm_glm4v_step_upload(lm_glm4v_context *ctx, const lm_step_batch *b, lm_step_view *step,
                               lm_error *err);

#endif
