/* The model interface: the one contract the engine calls, whatever the
 * family (models/registry.c picks it from config.json) and the backend.
 *
 * A model is loaded once onto a backend (its weights prepared there).  A
 * context holds what one engine needs to run it: the KV pool, the
 * recurrent-state slots, the speculative rollback records and the step
 * workspace, all allocated through the backend when the context is made,
 * sized for the largest step; nothing is allocated per step.  The engine
 * keeps only ids: which KV blocks and which state slot a sequence holds.
 *
 * One step: forward(context, StepBatch) uploads the step's descriptor
 * (tokens, positions, slots, block tables, rows that need logits) into
 * fixed buffers, runs the layers, and downloads the logit rows: the one
 * place the host waits (src/ops/README.md, "Where the host waits"). */
#ifndef LOOM_MODELS_MODEL_H
#define LOOM_MODELS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "base/progress.h"
#include "io/safetensors.h"
#include "image/image_processor.h"
#include "models/gptq_quant.h"
#include "models/step_batch.h"
#include "ops/comm.h"
#include "ops/ops.h"

#define LM_MODEL_MAX_EOS 8

typedef struct lm_model lm_model;
typedef struct lm_model_context lm_model_context;

/* A model's vision tower, as the prompt side needs it (model-spec §D.4,
 * §E.5): the ids the chat template writes around an image, the placeholder
 * the processor repeats once per output row, and how images are made into
 * patch rows (preprocessor_config.json, read at load). */
typedef struct {
    bool present;
    int32_t image_token_id;        /* <|image_pad|> (Qwen3.5), <|image|> (GLM) */
    int32_t vision_start_token_id; /* <|vision_start|>, <|begin_of_image|> */
    int32_t vision_end_token_id;   /* <|vision_end|>, <|end_of_image|> */
    int depth, hidden_size, n_heads; /* the tower itself, for `loom inspect` */
    int64_t n_parameters;
    /* Of those, the merger's matrices: they run once per output row (a
     * block of merge² patches), the rest once per patch (benchmarks count
     * the tower's matmul work from these). */
    int64_t merger_parameters;
    lm_image_processor processor;
} lm_vision_info;

/* What a model is, for the engine and for people. */
typedef struct {
    char family[32];       /* "qwen3_5" */
    char architecture[64]; /* config.json's architectures[0], else its model_type */
    int vocab_size, hidden_size, n_layers;
    /* Full-attention layers: one KV pool entry per token and layer. */
    int n_kv_layers, n_kv_heads, head_dim;
    /* Recurrent layers (Gated DeltaNet): a fixed state per sequence. */
    int n_state_layers;
    size_t state_bytes_per_slot;
    int max_position_embeddings;
    int n_eos;
    int32_t eos_ids[LM_MODEL_MAX_EOS];
    /* Speculation: whether the Multi-Token-Prediction head can draft, and
     * if not, a sentence saying why. */
    bool has_mtp;
    char mtp_status[LM_ERROR_MESSAGE_MAX];
    int64_t n_parameters;        /* text model, MTP head excluded */
    int64_t n_active_parameters; /* of those, what one token uses (MoE: top-k of the experts) */
    size_t weight_bytes;         /* bytes of weights used, as stored */
    size_t decode_bytes_per_token; /* weight bytes one plain decode step reads */
    /* Speculation's bytes: what one MTP head round reads besides the
     * vocabulary projection (its fc and layer), and the vocabulary
     * projection itself (the whole lm_head; a reduced draft head reads
     * draft_vocab / vocab_size of it).  0 without a head. */
    size_t mtp_round_bytes, lm_head_bytes;
    char weights_made[160];        /* lm_weights_made_note: "" when used as stored */
    lm_vision_info vision;
} lm_model_info;

/* How the checkpoint stores the MTP head's RMSNorm weights (model-spec
 * §C.1: all zero-centred).  Some converters (mlx) add the 1 at conversion. */
typedef enum {
    LM_MTP_NORMS_AUTO,         /* detect: a mean above 0.5 means the 1 is already in (vllm-mlx) */
    LM_MTP_NORMS_ZERO_CENTRED, /* stored w, the scale is 1 + w (Hugging Face checkpoints) */
    LM_MTP_NORMS_SHIFTED,      /* stored 1 + w (converted checkpoints) */
} lm_mtp_norms;

typedef struct {
    lm_load_mode mode;      /* read the weights (default) or map them */
    lm_mtp_norms mtp_norms;
    /* Random weights of the config's shape instead of a checkpoint
     * (benchmarks): the folder then needs only config.json. */
    bool random_weights;
    uint64_t random_seed;
    /* Linear layers' weights made int8 (Q8_0 blocks) at load (--quantize
     * int8; models/weights.h says which matrices). */
    bool quantize_int8;
    /* Linear layers' weights made FP8 (FP8_B128: E4M3 with a float32 scale
     * per 128 of a row) at load on backends with FP8 weights (--quantize
     * fp8); a backend without them keeps the checkpoint's weights. */
    bool quantize_fp8;
    /* Set by lm_model_open from config.json's quantization_config: the
     * block shape of an FP8 checkpoint's weight_scale_inv (0: none). */
    int fp8_block_rows, fp8_block_cols;
    /* ... and of an MLX affine-quantized one ("quantization"; 0: none). */
    int mlx_bits, mlx_group;
    bool mlx_overrides; /* it names modules of their own (models/weights.h) */
    lm_int4_quant int4; /* ... and of a GPTQ or AWQ int4 one (models/gptq_quant.h) */
    /* Tensor parallelism (issue 19): this model is rank tp->rank of
     * tp->n_ranks, holding its share of the heads and MLP columns and
     * adding the ranks' partial products with tp's all_reduce_sum; every
     * rank runs the same steps.  NULL (or one rank): the whole model. */
    lm_comm *tensor_parallel;
    /* Expert parallelism (with tensor_parallel over n > 1 ranks, MoE
     * models): the routed experts are dealt out whole, rank r keeping
     * experts [r·E/n, (r+1)·E/n), instead of a share of every expert's
     * width; everything else is split as above (models/rank_share.h).
     * Each rank routes every token and computes the pairs of its own
     * experts; the all-reduce after the MoE block sums them.  E must be a
     * multiple of n.  No effect on one rank or a dense model. */
    bool expert_parallel;
    /* Where the load reports its bytes (reading the files, placing or
     * making the weights); NULL: nowhere. */
    const lm_progress *progress;
} lm_model_load_options;

/* Sizes a context is made for. */
typedef struct {
    int kv_block_size, kv_blocks; /* the KV pool: kv_blocks blocks of kv_block_size tokens */
    int state_slots;              /* recurrent-state slots (sequences running at once) */
    int max_step_tokens;          /* rows of one forward */
    int max_step_seqs;            /* sequences of one forward */
    int max_blocks_per_seq;       /* the longest block table */
    int max_logit_rows;           /* logit rows of one forward (0: one per sequence) */
    /* > 0: the MTP head's KV pool (same blocks as the main one), the step's
     * hidden rows and a rollback record per state slot for verifying this
     * many drafts.  0: no speculation. */
    int speculative_tokens;
    /* > 0: the MTP head drafts from token ids [0, draft_vocab) only, through
     * the first draft_vocab rows of the lm_head (a reduced-vocabulary draft
     * head: a draft round reads that share of the vocabulary projection);
     * the verify keeps the whole vocabulary, so outputs do not change.
     * 0 or >= the vocabulary: the whole vocabulary.  Families may ignore
     * it (a vocabulary split over ranks keeps the whole head). */
    int draft_vocab;
    /* > 0 (models with a vision tower): the vision workspace, for images of
     * up to this many patches (lm_image_patches.n_patches).  0: no images. */
    int max_image_patches;
    /* Recurrent-state snapshots (prefix caching): this many copies of one
     * slot's recurrent state, kept apart from the slots (no rollback
     * record), saved from and restored into slots by id.  0: none. */
    int state_snapshots;
} lm_context_options;

/* The most edits (lm_sample_entry) the drawn rows of one forward carry. */
#define LM_FORWARD_SAMPLE_ENTRIES 65536

/* Where one forward leaves its results (host memory). */
typedef struct {
    float *logits; /* [lm_step_batch_logit_rows, vocab] */
    /* optional [logit rows]: each row's argmax over the vocabulary (lowest
     * id among the largest, NaN never), computed where the logits are. */
    int32_t *argmax;
    /* optional [logit rows], with argmax: false leaves that row of logits
     * undownloaded (its bytes undefined); NULL: every row is downloaded.  A
     * greedy batch on a GPU then brings back ids, not [rows, vocab] floats. */
    const bool *logits_wanted;
    /* optional [logit rows], with argmax, when the backend has sample_rows
     * (lm_backend_samples_rows): rows of mode LM_SAMPLE_ROW_DRAW are drawn
     * where the logits are (ops.h: sample_rows, with sample_entries, at
     * most LM_FORWARD_SAMPLE_ENTRIES of them): argmax[r] receives the
     * drawn token and drew[r] whether the draw used its uniform.  Such a
     * row's logits are not downloaded (its logits_wanted is false). */
    const lm_sample_row *sample_rows;
    const lm_sample_entry *sample_entries;
    int n_sample_entries;
    int32_t *drew;
    float *hidden; /* optional: the post-final-norm state of the same rows [rows, H] */
    /* optional (tests): layer_hidden[l] receives the [n_tokens, H] state
     * entering layer l, layer_hidden[n_layers] the final normed state of the
     * logit rows (every row with all_logits). */
    float **layer_hidden;
} lm_forward_out;

/* After a forward: one speculating sequence's catch-up rows for the MTP
 * head and the drafts it wants (model-spec §C.4). */
typedef struct {
    int hidden_row;           /* the forward's row of the first committed position */
    int from, count;          /* committed positions [from, from + count) */
    const int32_t *next_tokens; /* [count]: the token at position from + 1 + i */
    const int32_t *block_table; /* its KV blocks, enough for from + count + n_drafts */
    int n_blocks;
    /* The target's positions of the committed rows ([count][3]; NULL: text,
     * position from + i in every component) and the offset of positions
     * past them (model-spec §C.6, §D.5: index + rope_delta). */
    const int32_t *positions;
    int position_delta;
    int n_drafts;             /* drafts wanted after catching up (0: catch up only) */
    int32_t *drafts;          /* out: n_drafts token ids */
} lm_draft_seq;

/* After a verify step that recorded state_slot: keep the first n_keep rows. */
typedef struct {
    int state_slot;
    int n_keep;
} lm_rollback_seq;

typedef struct {
    void (*destroy)(lm_model *m);
    lm_status (*context_create)(lm_model *m, const lm_context_options *options,
                                lm_model_context **out, lm_error *err);
    void (*context_destroy)(lm_model_context *ctx);
    lm_status (*forward)(lm_model_context *ctx, const lm_step_batch *batch,
                         const lm_forward_out *out, lm_error *err);
    /* Cache moves for forking a sequence and admitting a new one. */
    void (*copy_block)(lm_model_context *ctx, int src, int dst);
    void (*copy_state)(lm_model_context *ctx, int src_slot, int dst_slot);
    void (*reset_state)(lm_model_context *ctx, int slot);
    /* Prefix caching: a slot's recurrent state copied into snapshot
     * `snapshot` (< state_snapshots) and back into a slot (which then has
     * nothing recorded for a rollback).  NULL when the family has no
     * recurrent state. */
    void (*save_state)(lm_model_context *ctx, int slot, int snapshot);
    void (*restore_state)(lm_model_context *ctx, int snapshot, int slot);
    /* Optional (NULL when the family has no such part). */
    lm_status (*draft)(lm_model_context *ctx, lm_draft_seq *seqs, int n, lm_error *err);
    lm_status (*rollback)(lm_model_context *ctx, const lm_rollback_seq *seqs, int n,
                          lm_error *err);
    /* The MTP head's logits over one sequence from scratch, as the
     * fixtures' mtp_logits: row p from hidden[p] and next_ids[p] ([n, V]),
     * at positions[p] ([n][3]; NULL: text, p in every component). */
    lm_status (*mtp_sequence_logits)(lm_model *m, const float *hidden, const int32_t *next_ids,
                                     const int32_t *positions, int n, float *logits, lm_error *err);
    /* The vision tower over one image's patch rows (lm_image_preprocess):
     * embeds [lm_image_tokens(patches), hidden_size], the rows that replace
     * its placeholders, in order.  Needs a context made with
     * max_image_patches >= patches->n_patches.  NULL without a tower. */
    lm_status (*encode_image)(lm_model_context *ctx, const lm_image_patches *patches,
                              float *embeds, lm_error *err);
    /* What `loom inspect` prints beyond lm_model_info (config, MTP head). */
    void (*describe)(const lm_model *m, FILE *out);
} lm_model_ops;

/* Families embed this as their first member. */
struct lm_model {
    const lm_model_ops *ops;
    lm_model_info info;
    lm_backend *backend; /* not owned: outlives the model */
};

/* Families embed this as their first member too. */
struct lm_model_context {
    lm_model *model;
};

static inline const lm_model_info *lm_model_describe(const lm_model *m) { return &m->info; }
static inline lm_status lm_model_context_create(lm_model *m, const lm_context_options *o,
                                                lm_model_context **out, lm_error *err) {
    return m->ops->context_create(m, o, out, err);
}
static inline void lm_model_context_destroy(lm_model_context *ctx) {
    if (ctx) ctx->model->ops->context_destroy(ctx);
}
static inline lm_status lm_model_forward(lm_model_context *ctx, const lm_step_batch *b,
                                         const lm_forward_out *out, lm_error *err) {
    return ctx->model->ops->forward(ctx, b, out, err);
}
static inline void lm_model_copy_block(lm_model_context *ctx, int src, int dst) {
    ctx->model->ops->copy_block(ctx, src, dst);
}
static inline void lm_model_copy_state(lm_model_context *ctx, int src, int dst) {
    ctx->model->ops->copy_state(ctx, src, dst);
}
static inline void lm_model_reset_state(lm_model_context *ctx, int slot) {
    ctx->model->ops->reset_state(ctx, slot);
}
static inline void lm_model_save_state(lm_model_context *ctx, int slot, int snapshot) {
    if (ctx->model->ops->save_state) ctx->model->ops->save_state(ctx, slot, snapshot);
}
static inline void lm_model_restore_state(lm_model_context *ctx, int snapshot, int slot) {
    if (ctx->model->ops->restore_state) ctx->model->ops->restore_state(ctx, snapshot, slot);
}
static inline bool lm_model_can_draft(const lm_model *m) {
    return m->info.has_mtp && m->ops->draft && m->ops->rollback;
}
static inline lm_status lm_model_draft(lm_model_context *ctx, lm_draft_seq *seqs, int n,
                                       lm_error *err) {
    return ctx->model->ops->draft(ctx, seqs, n, err);
}
static inline lm_status lm_model_rollback(lm_model_context *ctx, const lm_rollback_seq *seqs,
                                          int n, lm_error *err) {
    return ctx->model->ops->rollback(ctx, seqs, n, err);
}
static inline bool lm_model_has_mtp_logits(const lm_model *m) {
    return m->info.has_mtp && m->ops->mtp_sequence_logits;
}
static inline lm_status lm_model_mtp_sequence_logits(lm_model *m, const float *hidden,
                                                     const int32_t *next_ids,
                                                     const int32_t *positions, int n, float *logits,
                                                     lm_error *err) {
    return m->ops->mtp_sequence_logits(m, hidden, next_ids, positions, n, logits, err);
}
static inline bool lm_model_has_vision(const lm_model *m) {
    return m->info.vision.present && m->ops->encode_image;
}
static inline lm_status lm_model_encode_image(lm_model_context *ctx, const lm_image_patches *p,
                                              float *embeds, lm_error *err) {
    return ctx->model->ops->encode_image(ctx, p, embeds, err);
}
static inline void lm_model_print_description(const lm_model *m, FILE *out) {
    if (m->ops->describe) m->ops->describe(m, out);
}
static inline void lm_model_free(lm_model *m) {
    if (m) m->ops->destroy(m);
}

#endif
