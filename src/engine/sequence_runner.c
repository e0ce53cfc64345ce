#include "engine/sequence_runner.h"

#include <stdlib.h>
#include <string.h>

#define KV_BLOCK_SIZE 32
/* Rows per forward by default; with all_logits every row is a logit row,
 * so at most LOGIT_CHUNK rows a forward then (it bounds the context's
 * logits buffer: rows x vocab floats). */
#define PREFILL_CHUNK 128
#define LOGIT_CHUNK 128

lm_status lm_sequence_runner_init(lm_sequence_runner *r, lm_model *model, int max_tokens,
                                  lm_error *err) {
    return lm_sequence_runner_init_sized(r, model, max_tokens, PREFILL_CHUNK, 0, err);
}

lm_status lm_sequence_runner_init_vision(lm_sequence_runner *r, lm_model *model, int max_tokens,
                                         int max_image_patches, lm_error *err) {
    return lm_sequence_runner_init_sized(r, model, max_tokens, PREFILL_CHUNK, max_image_patches, err);
}

lm_status lm_sequence_runner_init_sized(lm_sequence_runner *r, lm_model *model, int max_tokens, int chunk,
                                        int max_image_patches, lm_error *err) {
    memset(r, 0, sizeof *r);
    if (max_tokens <= 0 || max_tokens > (1 << 24))
        return lm_fail(err, LM_ERR_INVALID, "sequence length %d out of range", max_tokens);
    if (chunk <= 0 || chunk > (1 << 20))
        return lm_fail(err, LM_ERR_INVALID, "prefill chunk of %d tokens out of range", chunk);
    r->model = model;
    r->max_tokens = max_tokens;
    r->prefill_chunk = max_tokens < chunk ? max_tokens : chunk;
    r->logit_chunk = r->prefill_chunk < LOGIT_CHUNK ? r->prefill_chunk : LOGIT_CHUNK;
    r->n_blocks = (max_tokens + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE;
    lm_context_options o = {.kv_block_size = KV_BLOCK_SIZE,
                            .kv_blocks = r->n_blocks,
                            .state_slots = 1,
                            .max_step_tokens = r->prefill_chunk,
                            .max_step_seqs = 1,
                            .max_blocks_per_seq = r->n_blocks,
                            .max_logit_rows = r->logit_chunk,
                            .max_image_patches = max_image_patches};
    lm_status st = lm_model_context_create(model, &o, &r->context, err);
    if (st != LM_OK) return st;
    r->block_table = malloc(sizeof(int32_t) * (size_t)r->n_blocks);
    r->positions = malloc(sizeof(int32_t) * 3 * (size_t)r->prefill_chunk);
    if (!r->block_table || !r->positions) {
        lm_sequence_runner_free(r);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    for (int b = 0; b < r->n_blocks; b++) r->block_table[b] = b; /* the whole pool is ours */
    lm_model_reset_state(r->context, 0);
    return LM_OK;
}

void lm_sequence_runner_free(lm_sequence_runner *r) {
    lm_model_context_destroy(r->context);
    free(r->block_table);
    free(r->positions);
    memset(r, 0, sizeof *r);
}

lm_status lm_sequence_runner_feed(lm_sequence_runner *r, const int32_t *ids, int n, bool all_logits,
                                  float *logits, float *hidden, float **layer_hidden,
                                  lm_error *err) {
    return lm_sequence_runner_feed_inputs(r, ids, NULL, NULL, n, all_logits, logits, hidden,
                                          layer_hidden, err);
}

/* The feeds' one loop; with `argmax`, the last row's argmax comes back
 * instead of its logits. */
static lm_status feed(lm_sequence_runner *r, const int32_t *ids, const int32_t *positions,
                      const float *const *input_rows, int n, bool all_logits, float *logits, float *hidden,
                      float **layer_hidden, int32_t *argmax, lm_error *err) {
    if (n <= 0) return lm_fail(err, LM_ERR_INVALID, "nothing to feed");
    if (n > r->max_tokens - r->n_cached)
        return lm_fail(err, LM_ERR_INVALID, "sequence would exceed %d tokens", r->max_tokens);
    int step = all_logits ? r->logit_chunk : r->prefill_chunk;
    if (layer_hidden && n > step)
        return lm_fail(err, LM_ERR_INVALID, "capturing layers needs the whole input in one step");
    const lm_model_info *info = lm_model_describe(r->model);
    for (int done = 0; done < n;) {
        int chunk = n - done < step ? n - done : step;
        bool last = done + chunk == n;
        if (positions)
            memcpy(r->positions, positions + 3 * (size_t)done, sizeof(int32_t) * 3 * (size_t)chunk);
        else /* text: t = h = w = index (+ an image prompt's delta) */
            for (int i = 0; i < chunk; i++)
                r->positions[3 * i] = r->positions[3 * i + 1] = r->positions[3 * i + 2] =
                    r->n_cached + i + r->position_delta;
        lm_step_seq seq = {
            .first = 0,
            .n_new = chunk,
            .n_cached = r->n_cached,
            .state_slot = 0,
            .block_table = r->block_table,
            .n_blocks = r->n_blocks,
            .all_logits = all_logits,
            .no_logits = !all_logits && !last,
        };
        lm_step_batch batch = {.n_tokens = chunk, .tokens = ids + done, .positions = r->positions,
                               .input_rows = input_rows ? input_rows + done : NULL,
                               .n_seqs = 1, .seqs = &seq};
        static const bool no_logits = false;
        lm_forward_out out = {
            .logits = all_logits ? logits + (size_t)done * info->vocab_size : logits,
            .hidden = hidden && all_logits ? hidden + (size_t)done * info->hidden_size
                      : last ? hidden : NULL,
            .layer_hidden = layer_hidden,
            .argmax = argmax && last ? argmax : NULL,
            .logits_wanted = argmax && last ? &no_logits : NULL,
        };
        lm_status st = lm_model_forward(r->context, &batch, &out, err);
        if (st != LM_OK) return st;
        r->n_cached += chunk;
        done += chunk;
    }
    return LM_OK;
}

lm_status lm_sequence_runner_feed_inputs(lm_sequence_runner *r, const int32_t *ids,
                                         const int32_t *positions, const float *const *input_rows,
                                         int n, bool all_logits, float *logits, float *hidden,
                                         float **layer_hidden, lm_error *err) {
    return feed(r, ids, positions, input_rows, n, all_logits, logits, hidden, layer_hidden, NULL, err);
}

lm_status lm_sequence_runner_feed_greedy(lm_sequence_runner *r, const int32_t *ids, int n, int32_t *next,
                                         lm_error *err) {
    if (!next) return lm_fail(err, LM_ERR_INVALID, "no place for the argmax");
    return feed(r, ids, NULL, NULL, n, false, NULL, NULL, NULL, next, err);
}
