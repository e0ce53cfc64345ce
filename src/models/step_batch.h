/* StepBatch: the one contract between the scheduler and a model forward.
 * The engine builds it (host memory, ids only); the model uploads what its
 * ops need into its own step buffers and runs.
 *
 * A step carries the new tokens of every scheduled sequence flattened into one
 * array — no padding, no batch-wide offset.  The tokens of one sequence are
 * contiguous ([first, first + n_new)), each with its own 3-component
 * position (t, h, w; equal for text) and either a token id or, for image
 * placeholders, a row of the vision tower's output.  Prefill chunks and single decode
 * tokens of different sequences mix freely. */
#ifndef LOOM_MODELS_STEP_BATCH_H
#define LOOM_MODELS_STEP_BATCH_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int first;                  /* index of the sequence's first token in the batch */
    int n_new;                  /* its tokens in this step */
    int n_cached;               /* tokens already in its caches (= position index of the first new token) */
    int state_slot;             /* its recurrent-state slot (-1 when the model has no recurrent layers) */
    const int32_t *block_table; /* its KV blocks, enough for n_cached + n_new tokens */
    int n_blocks;
    bool all_logits;            /* logits for every new row (verify, `loom logits`), else the last only */
    bool no_logits;             /* a prefill chunk that is not the prompt's last: no logits at all */
    /* Speculative verify: keep, in the model's record for state_slot, what
     * rolling this step back to any accepted prefix needs. */
    bool record_for_rollback;
} lm_step_seq;

typedef struct {
    int n_tokens;
    const int32_t *tokens;    /* [n_tokens] */
    const int32_t *positions; /* [n_tokens][3] */
    /* Optional [n_tokens] (NULL: every row from the token table): row i's
     * input instead of the embedding of tokens[i] when not NULL, hidden_size
     * floats (an image placeholder's row of the vision tower's output,
     * model-spec §D.4, §E.5).  Runs of rows that are consecutive in memory
     * are moved in one upload. */
    const float *const *input_rows;
    int n_seqs;
    const lm_step_seq *seqs;  /* [n_seqs], in batch order */
} lm_step_batch;

/* Rows of logits a forward produces for this batch, in batch order. */
static inline int lm_step_batch_logit_rows(const lm_step_batch *b) {
    int rows = 0;
    for (int s = 0; s < b->n_seqs; s++)
        rows += b->seqs[s].no_logits ? 0 : b->seqs[s].all_logits ? b->seqs[s].n_new : 1;
    return rows;
}

#endif
