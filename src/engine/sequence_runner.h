/* Runs one sequence through a model: prefill (in chunks) then token by
 * token, with its own KV blocks and state slot.  The simplest user of the
 * model interface; `loom logits` and the golden tests use it. */
#ifndef LOOM_ENGINE_SEQUENCE_RUNNER_H
#define LOOM_ENGINE_SEQUENCE_RUNNER_H

#include "models/model.h"

typedef struct {
    lm_model *model;
    lm_model_context *context;
    int32_t *block_table;
    int max_tokens, n_cached, n_blocks, prefill_chunk;
    int32_t *positions; /* [prefill_chunk][3] */
} lm_sequence_runner;

/* max_tokens bounds the sequence length (prompt + generated). */
lm_status lm_sequence_runner_init(lm_sequence_runner *r, lm_model *model, int max_tokens,
                                  lm_error *err);
void lm_sequence_runner_free(lm_sequence_runner *r);

/* Appends n tokens.  logits receives [n, V] when all_logits, else the last
 * row [1, V]; hidden (optional) the matching post-final-norm rows;
 * layer_hidden (optional, tests) the states entering each layer
 * (lm_forward_out), which needs the n tokens in one step. */
lm_status lm_sequence_runner_feed(lm_sequence_runner *r, const int32_t *ids, int n, bool all_logits,
                                  float *logits, float *hidden, float **layer_hidden,
                                  lm_error *err);

#endif
