/* Runs one sequence through a Qwen3.5 model: prefill (in chunks) then token
 * by token, with its own KV blocks and state slot.  The simplest user of the
 * StepBatch contract; `loom logits`, `loom run` and the golden tests use it. */
#ifndef LOOM_ENGINE_SEQUENCE_RUNNER_H
#define LOOM_ENGINE_SEQUENCE_RUNNER_H

#include "models/qwen35.h"

typedef struct {
    const lm_qwen35_model *model;
    lm_backend *backend;
    lm_qwen35_caches caches;
    lm_qwen35_workspace workspace;
    int32_t *block_table;
    int max_tokens, n_cached, state_slot, prefill_chunk;
    int32_t *positions; /* [prefill_chunk][3] */
} lm_sequence_runner;

/* max_tokens bounds the sequence length (prompt + generated). */
lm_status lm_sequence_runner_init(lm_sequence_runner *r, const lm_qwen35_model *model,
                                  lm_backend *backend, int max_tokens, lm_error *err);
void lm_sequence_runner_free(lm_sequence_runner *r);

/* Appends n tokens.  logits receives [n, V] when all_logits, else the last
 * row [1, V]; hidden (optional) the matching post-final-norm rows. */
lm_status lm_sequence_runner_feed(lm_sequence_runner *r, const int32_t *ids, int n, bool all_logits,
                                  float *logits, float *hidden, const lm_qwen35_capture *capture,
                                  lm_error *err);

#endif
