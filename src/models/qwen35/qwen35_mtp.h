/* The Qwen3.5 Multi-Token-Prediction head (model-spec §C): one gated
 * full-attention decoder layer, with its own paged KV cache, that predicts
 * token p+2 from the target's post-final-norm hidden state at p and the token
 * at p+1.  It is loaded with the model (lm_qwen35_load) and shares its
 * embedding and lm_head. */
#ifndef LOOM_MODELS_QWEN35_MTP_H
#define LOOM_MODELS_QWEN35_MTP_H

#include "models/qwen35/qwen35_context.h"

typedef struct lm_qwen35_mtp {
    char prefix[32]; /* where the tensors live: "mtp.", "model.mtp." or "language_model.mtp." */
    lm_matrix fc;    /* [H, 2H]; input = [normed embedding | normed hidden] */
    lm_mem pre_fc_norm_embedding, pre_fc_norm_hidden, norm; /* scales (1 + w) */
    lm_qwen35_layer layer; /* full attention, the model's MLP */
    /* The stored norm convention and what AUTO looked at: the mean of the
     * stored pre_fc_norm_embedding, pre_fc_norm_hidden and norm weights. */
    bool norms_were_shifted;
    bool norms_forced;
    float stored_norm_mean;
} lm_qwen35_mtp;

/* Loads the head of m (whose text model is loaded) from m->weights: sets
 * m->mtp and m->has_mtp, or m->mtp_missing (a sentence that starts "no MTP
 * head" or "MTP head not ...") and a status when the config declares none
 * (LM_OK), a tensor is missing or malformed
 * (LM_ERR_FORMAT, naming the first one), the head is of a kind loom does not
 * run yet (LM_ERR_UNSUPPORTED: mixture-of-experts MLP, dedicated embeddings,
 * more than one MTP layer) or memory ran out (LM_ERR_NOMEM).  lm_qwen35_load
 * calls it; it fails the model load only on LM_ERR_NOMEM. */
lm_status lm_qwen35_mtp_load(lm_qwen35_model *m, lm_mtp_norms norms, lm_error *err);
void lm_qwen35_mtp_free(lm_qwen35_model *m);
/* What `loom inspect` says of the head. */
void lm_qwen35_mtp_describe(const lm_qwen35_model *m, FILE *f);

/* Weight bytes one head round reads besides the vocabulary projection: fc
 * and the layer (a mixture-of-experts MLP: its router, shared expert and
 * top-k experts).  0 without a head. */
size_t lm_qwen35_mtp_round_bytes(const lm_qwen35_model *m);

/* The vocabulary projection drafts use: the first draft_vocab rows of the
 * lm_head (a view in *rows: contiguous, in the lm_head's dtype) when the
 * context asks for a reduced draft vocabulary and the head is whole on this
 * rank; else the lm_head itself.  The draft's logits then have
 * head.vocab columns, column j being token id j. */
lm_vocab_head lm_qwen35_draft_head(const lm_qwen35_context *ctx, lm_matrix *rows);

/* Runs the head over a step (model-spec §C.2, §C.3), on backend memory.
 * Row i carries: the NEXT token t_{p+1} (tokens, int32 [n_tokens]), the
 * position p of the hidden state (the step's positions) and that hidden
 * state h_p (hidden, [n_tokens, H]).  Each sequence's n_cached counts its
 * entries already in the head's KV cache, and its rows are appended there
 * (rows from an earlier call at the same positions are overwritten: set
 * n_cached back to roll drafts off).  For the step's logit rows: logits
 * [rows, head->vocab] through `head` (lm_qwen35_vocab_head: the whole
 * vocabulary, or lm_qwen35_draft_head) and h' = the post-mtp.norm state
 * [rows, H], the hidden input of the next recursive draft step (h_out may
 * be hidden: it is read first). */
void lm_qwen35_mtp_run(lm_qwen35_context *ctx, const lm_step_view *step, lm_mem tokens,
                       lm_mem hidden, lm_mem logits, lm_mem h_out, const lm_vocab_head *head);

/* The same over host memory (tests): uploads the batch and hidden
 * [n_tokens, H], downloads logits [rows, V] and, when h_out is non-NULL,
 * h' [rows, H].  The context must have been made with speculative_tokens > 0. */
lm_status lm_qwen35_mtp_forward(lm_qwen35_context *ctx, const lm_step_batch *batch,
                                const float *hidden, float *logits, float *h_out, lm_error *err);

/* The MTP logits of one sequence from scratch, as the fixtures'
 * `mtp_logits` define them: row p (0 <= p < n) takes hidden[p] and
 * next_ids[p] at position p with causal attention over rows 0..p.
 * logits: [n, V].  (For a prompt t_0..t_{T-1}: hidden = the target's rows
 * 0..T-2, next_ids = t_1..t_{T-1}.) */
lm_status lm_qwen35_mtp_sequence_logits(lm_model *m, const float *hidden, const int32_t *next_ids,
                                        const int32_t *positions, int n, float *logits,
                                        lm_error *err);

#endif
