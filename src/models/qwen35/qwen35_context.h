/* The Qwen3.5 family's context (models/model.h): its caches, rollback
 * records and step workspace in backend memory, and the step descriptor
 * that one forward uploads.  Internal to the family's files. */
#ifndef LOOM_MODELS_QWEN35_CONTEXT_H
#define LOOM_MODELS_QWEN35_CONTEXT_H

#include "models/forward_common.h"
#include "models/sharded_linear.h"
#include "models/qwen35/qwen35.h"
#include "models/step_descriptor.h"
#include "models/vision_common.h"

/* Scratch rows of one forward, [max_step_tokens, width] each. */
typedef struct {
    lm_mem h;          /* [N, H] residual stream */
    lm_mem x;          /* [N, H] normed input of a block */
    lm_mem proj, proj2; /* [N, widest projection] */
    lm_mem q, k, v;    /* [N, ...] */
    lm_mem gates;      /* [N, ...] */
    lm_mem beta, g;    /* [N, Hv] */
} lm_qwen35_scratch;

/* The MoE block's scratch (MoE models only), [N, ...] each. */
typedef struct {
    lm_mem logits;         /* [N, E] router logits */
    lm_mem ids, weights;   /* [N, top_k] int32 / float32 */
    lm_mem routed, shared; /* [N, H] */
    lm_mem shared_gate;    /* [N] */
    lm_mem expert_scratch; /* lm_moe_scratch_bytes(N, top_k, experts) */
} lm_qwen35_moe_scratch;

/* What a speculative verify keeps per state slot so it can be rolled back
 * to any accepted prefix without another forward (model-spec §C.5,
 * "replay"): the states before the step and, per row, the pre-conv inputs
 * and the delta-rule inputs.  Layer l's part of each array is
 * [state_slots][...]; rows of slot s start at row s * rows_per_slot. */
typedef struct {
    int rows_per_slot;        /* speculative_tokens + 1 */
    lm_mem conv_before;       /* [L][slots][conv_floats] */
    lm_mem state_before;      /* [L][slots][recurrent_floats] */
    lm_mem mixed;             /* [L][slots * rows][conv_dim] */
    lm_mem k, v;              /* [L][slots * rows][key_dim | value_dim], k l2-normalised */
    lm_mem g, beta;           /* [L][slots * rows][Hv] */
    lm_mem scratch;           /* [slots * rows][max(conv_dim, value_dim)] */
    int *recorded_rows;       /* host [slots]: rows the last verify recorded (0: none) */
} lm_qwen35_records;

/* Host staging of the draft rounds' step batches (speculation only). */
typedef struct {
    lm_step_seq *seqs;                          /* [S] */
    int32_t *tokens, *positions, *gather, *order; /* [N], [N][3], [N], [S] */
} lm_qwen35_draft_host;

typedef struct {
    lm_model_context base; /* first: the interface */
    lm_qwen35_model *model;
    lm_backend *be;
    lm_context_options options;
    int max_logit_rows;

    lm_buffer *buffer; /* everything below lives in this one allocation */
    lm_kv_layer *kv;   /* [n_full_layers] */
    lm_dtype kv_dtype; /* the pools' elements: what the backend's attention wants */
    lm_kv_layer mtp_kv; /* the MTP layer's pool: same geometry and block ids */
    lm_mem conv_states, recurrent_states; /* [L][slots][conv | recurrent floats] */
    size_t conv_floats, recurrent_floats;
    lm_mem snapshot_conv, snapshot_recurrent; /* [L][state_snapshots][conv | recurrent floats] */
    lm_qwen35_records records;
    lm_qwen35_scratch scratch;
    lm_qwen35_moe_scratch moe;
    lm_mem hidden_all;  /* [N, H] post-final-norm rows of the last step (MTP input) */
    lm_mem logit_x;     /* [rows, H] the normed logit rows */
    lm_mem logits;      /* [rows, V] */
    lm_mem logit_ids;   /* [rows] int32: each row's argmax */
    lm_sample_buffers sample; /* the step's draws on the device (sample_rows) */
    lm_mem descriptor;  /* the int32 step descriptor */
    size_t descriptor_ints;
    /* MTP workspace */
    lm_mem mtp_normed, mtp_concat, mtp_u, mtp_hidden; /* [N, H], [N, 2H], [N, H], [N, H] */
    lm_mem mtp_logits;  /* [max(S, max_logit_rows), V] */
    lm_mem vocab_scratch; /* a split lm_head's (lm_vocab_split_scratch of max(S, max_logit_rows) rows) */
    lm_mem draft_ids;   /* [K][S] int32 */
    /* images (max_image_patches > 0): the vision tower's workspace */
    lm_vision_workspace vision;

    int32_t *host_descriptor; /* staging, descriptor_ints */
    int32_t *host_draft_ids;  /* [K][S] */
    lm_qwen35_draft_host draft_host;
    int last_step_tokens;     /* rows of the last forward (hidden_all) */
    lm_rank_sums ranks; /* tensor parallelism: a forward's sums over the ranks */
} lm_qwen35_context;

/* Checks the batch against the context and builds + uploads its
 * descriptor.  tokens NULL: the caller supplies token ids some other way
 * (MTP draft rounds).  gather (optional, [n_tokens]) fills step->gather_rows. */
lm_status lm_qwen35_step_upload(lm_qwen35_context *ctx, const lm_step_batch *batch, bool mtp,
                                const int32_t *gather, lm_step_view *step, lm_error *err);

/* One gated full-attention decoder layer (model-spec §A.4, §A.5) over the
 * step: the residual stream h [n_tokens, H] is updated in place, keys and
 * values go to kv.  The MTP head runs its layer through this. */
void lm_qwen35_attention_layer(lm_qwen35_context *ctx, const lm_step_view *step,
                               const lm_qwen35_layer *layer, const lm_kv_layer *kv, lm_mem h);

/* The family's interface functions, in their files. */
/* The lm_head as the context runs it (split by vocabulary or whole). */
lm_vocab_head lm_qwen35_vocab_head(const lm_qwen35_context *ctx);
lm_status lm_qwen35_context_create(lm_model *m, const lm_context_options *o,
                                   lm_model_context **out, lm_error *err);
void lm_qwen35_context_destroy(lm_model_context *ctx);
void lm_qwen35_copy_block(lm_model_context *ctx, int src, int dst);
void lm_qwen35_copy_state(lm_model_context *ctx, int src, int dst);
void lm_qwen35_reset_state(lm_model_context *ctx, int slot);
void lm_qwen35_save_state(lm_model_context *ctx, int slot, int snapshot);
void lm_qwen35_restore_state(lm_model_context *ctx, int snapshot, int slot);
lm_status lm_qwen35_forward(lm_model_context *ctx, const lm_step_batch *batch,
                            const lm_forward_out *out, lm_error *err);
lm_status lm_qwen35_rollback(lm_model_context *ctx, const lm_rollback_seq *seqs, int n,
                             lm_error *err);
lm_status lm_qwen35_draft(lm_model_context *ctx, lm_draft_seq *seqs, int n, lm_error *err);

/* Views of layer l's state slots. */
static inline lm_mem lm_qwen35_conv_states(const lm_qwen35_context *ctx, int l) {
    return lm_mem_f32(ctx->conv_states,
                      (size_t)l * (size_t)ctx->options.state_slots * ctx->conv_floats);
}
static inline lm_mem lm_qwen35_recurrent_states(const lm_qwen35_context *ctx, int l) {
    return lm_mem_f32(ctx->recurrent_states,
                      (size_t)l * (size_t)ctx->options.state_slots * ctx->recurrent_floats);
}

#endif
