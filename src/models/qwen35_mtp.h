/* The Qwen3.5 Multi-Token-Prediction head (model-spec §C): one gated
 * full-attention decoder layer, with its own paged KV cache, that predicts
 * token p+2 from the target's post-final-norm hidden state at p and the token
 * at p+1.  It is loaded with the model (lm_qwen35_load) and shares its
 * embedding and lm_head. */
#ifndef LOOM_MODELS_QWEN35_MTP_H
#define LOOM_MODELS_QWEN35_MTP_H

#include "models/qwen35.h"

typedef struct lm_qwen35_mtp {
    char prefix[32]; /* where the tensors live: "mtp.", "model.mtp." or "language_model.mtp." */
    lm_matrix fc;    /* [H, 2H]; input = [normed embedding | normed hidden] */
    float *pre_fc_norm_embedding, *pre_fc_norm_hidden, *norm; /* scales (1 + w) */
    lm_qwen35_layer layer; /* full attention, the model's MLP; cache_index 0 */
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

/* A KV cache for the head: one layer per MTP layer, block_size tokens per
 * block.  Made with the same block size and count as the main KV cache, a
 * sequence can use the same block table for both. */
lm_status lm_qwen35_mtp_cache_init(const lm_qwen35_model *m, int block_size, int n_blocks,
                                   lm_kv_cache *mtp_kv, lm_error *err);

/* Runs the head over a batch (model-spec §C.2, §C.3).  Row i carries:
 * batch->tokens[i] = the NEXT token t_{p+1}, batch->positions[i] = p (the
 * hidden state's position), hidden[i] = the target's post-final-norm hidden
 * state h_p ([n_tokens, H]; lm_qwen35_forward returns it for its logit rows).
 * Each sequence's n_cached counts its entries already in mtp_kv, and its rows
 * are appended there (rows from an earlier call at the same positions are
 * overwritten: set n_cached back to roll drafts off).  For the rows the batch
 * asks logits of (as lm_qwen35_forward): logits [rows, V] and, when
 * hidden_out is non-NULL, h' = the post-mtp.norm state [rows, H], the hidden
 * input of the next recursive draft step (hidden_out may be hidden). */
lm_status lm_qwen35_mtp_forward(const lm_qwen35_model *m, lm_backend *be, lm_kv_cache *mtp_kv,
                                lm_qwen35_workspace *ws, const lm_step_batch *batch,
                                const float *hidden, float *logits, float *hidden_out,
                                lm_error *err);

/* The MTP logits of one sequence from scratch, as the fixtures'
 * `mtp_logits` define them: row p (0 <= p < n) takes hidden[p] and
 * next_ids[p] at position p with causal attention over rows 0..p.
 * logits: [n, V].  (For a prompt t_0..t_{T-1}: hidden = the target's rows
 * 0..T-2, next_ids = t_1..t_{T-1}.) */
lm_status lm_qwen35_mtp_sequence_logits(const lm_qwen35_model *m, lm_backend *be,
                                        const float *hidden, const int32_t *next_ids, int n,
                                        float *logits, lm_error *err);

#endif
