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
    int max_tokens, n_cached, n_blocks;
    int prefill_chunk; /* rows a forward */
    int logit_chunk;   /* rows a forward with all_logits (<= prefill_chunk) */
    int32_t *positions; /* [prefill_chunk][3] */
    /* Text tokens fed without positions sit at index + position_delta (the
     * rope delta of an image prompt, model-spec §D.5). */
    int position_delta;
} lm_sequence_runner;

/* max_tokens bounds the sequence length (prompt + generated). */
lm_status lm_sequence_runner_init(lm_sequence_runner *r, lm_model *model, int max_tokens,
                                  lm_error *err);
/* The same with a vision workspace for images of up to max_image_patches
 * patches (0: none), for lm_model_encode_image on r->context. */
lm_status lm_sequence_runner_init_vision(lm_sequence_runner *r, lm_model *model, int max_tokens,
                                         int max_image_patches, lm_error *err);
/* The same with `chunk` rows a forward (128 above; `loom bench` gives the
 * engine's step budget, so its prefill measures the steps a server runs). */
lm_status lm_sequence_runner_init_sized(lm_sequence_runner *r, lm_model *model, int max_tokens, int chunk,
                                        int max_image_patches, lm_error *err);
void lm_sequence_runner_free(lm_sequence_runner *r);

/* Appends n tokens.  logits receives [n, V] when all_logits, else the last
 * row [1, V]; hidden (optional) the matching post-final-norm rows;
 * layer_hidden (optional, tests) the states entering each layer
 * (lm_forward_out), which needs the n tokens in one step. */
lm_status lm_sequence_runner_feed(lm_sequence_runner *r, const int32_t *ids, int n, bool all_logits,
                                  float *logits, float *hidden, float **layer_hidden,
                                  lm_error *err);

/* As lm_sequence_runner_feed, with the tokens' own positions ([n][3], NULL:
 * index + position_delta) and input rows ([n], NULL or entries NULL: the
 * token table's embedding) for image placeholders. */
lm_status lm_sequence_runner_feed_inputs(lm_sequence_runner *r, const int32_t *ids,
                                         const int32_t *positions, const float *const *input_rows,
                                         int n, bool all_logits, float *logits, float *hidden,
                                         float **layer_hidden, lm_error *err);

/* Appends n tokens and leaves in *next the last row's argmax (lowest id
 * among the largest), computed where the logits are: only the id comes
 * back, as in the engine's greedy steps (`loom bench` decodes with it). */
lm_status lm_sequence_runner_feed_greedy(lm_sequence_runner *r, const int32_t *ids, int n, int32_t *next,
                                         lm_error *err);

#endif
