#include "engine/sequence_runner.h"

#include <stdlib.h>
#include <string.h>

#define KV_BLOCK_SIZE 32
#define PREFILL_CHUNK 512

lm_status lm_sequence_runner_init(lm_sequence_runner *r, const lm_qwen35_model *model,
                                  lm_backend *backend, int max_tokens, lm_error *err) {
    memset(r, 0, sizeof *r);
    if (max_tokens <= 0 || max_tokens > (1 << 24))
        return lm_fail(err, LM_ERR_INVALID, "sequence length %d out of range", max_tokens);
    r->model = model;
    r->backend = backend;
    r->max_tokens = max_tokens;
    r->prefill_chunk = PREFILL_CHUNK;
    int n_blocks = (max_tokens + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE;
    lm_status st = lm_qwen35_caches_init(model, KV_BLOCK_SIZE, n_blocks, 1, &r->caches, err);
    if (st != LM_OK) return st;
    r->block_table = malloc(sizeof(int32_t) * (size_t)n_blocks);
    r->positions = malloc(sizeof(int32_t) * 3 * PREFILL_CHUNK);
    if (!r->block_table || !r->positions) {
        lm_sequence_runner_free(r);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    st = lm_kv_cache_alloc(&r->caches.kv, n_blocks, r->block_table, err);
    if (st == LM_OK) st = lm_state_cache_acquire(&r->caches.state, &r->state_slot, err);
    if (st != LM_OK) lm_sequence_runner_free(r);
    return st;
}

void lm_sequence_runner_free(lm_sequence_runner *r) {
    lm_qwen35_caches_free(&r->caches);
    lm_qwen35_workspace_free(&r->workspace);
    free(r->block_table);
    free(r->positions);
    memset(r, 0, sizeof *r);
}

lm_status lm_sequence_runner_feed(lm_sequence_runner *r, const int32_t *ids, int n, bool all_logits,
                                  float *logits, float *hidden, const lm_qwen35_capture *capture,
                                  lm_error *err) {
    if (n <= 0) return lm_fail(err, LM_ERR_INVALID, "nothing to feed");
    if (n > r->max_tokens - r->n_cached)
        return lm_fail(err, LM_ERR_INVALID, "sequence would exceed %d tokens", r->max_tokens);
    if (capture && n > r->prefill_chunk)
        return lm_fail(err, LM_ERR_INVALID, "capture needs the whole input in one step");
    const lm_qwen35_config *c = &r->model->config;
    for (int done = 0; done < n;) {
        int chunk = n - done < r->prefill_chunk ? n - done : r->prefill_chunk;
        bool last = done + chunk == n;
        for (int i = 0; i < chunk; i++) /* text: t = h = w = index */
            r->positions[3 * i] = r->positions[3 * i + 1] = r->positions[3 * i + 2] = r->n_cached + i;
        lm_step_seq seq = {
            .first = 0,
            .n_new = chunk,
            .n_cached = r->n_cached,
            .state_slot = r->state_slot,
            .block_table = r->block_table,
            .n_blocks = r->caches.kv.n_blocks,
            .all_logits = all_logits,
        };
        lm_step_batch batch = {.n_tokens = chunk, .tokens = ids + done, .positions = r->positions,
                               .n_seqs = 1, .seqs = &seq};
        /* Intermediate chunks without all_logits still produce one row: keep
         * it out of the caller's buffer unless it is the last. */
        float *out = all_logits ? logits + (size_t)done * c->vocab_size : logits;
        float *hid = hidden && all_logits ? hidden + (size_t)done * c->hidden_size : hidden;
        if (!all_logits && !last) hid = NULL;
        lm_status st = lm_qwen35_forward(r->model, r->backend, &r->caches, &r->workspace, &batch,
                                         out, hid, capture, err);
        if (st != LM_OK) return st;
        r->n_cached += chunk;
        done += chunk;
    }
    return LM_OK;
}
