/* loom_engine_describe: what the engine was made with (include/loom.h). */
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"

void loom_engine_describe(const loom_engine *e, loom_engine_info *out) {
    memset(out, 0, sizeof *out);
    const lm_model_info *m = lm_model_describe(e->model);
    snprintf(out->family, sizeof out->family, "%s", m->family);
    snprintf(out->architecture, sizeof out->architecture, "%s", m->architecture);
    out->n_parameters = m->n_parameters;
    out->n_active_parameters = m->n_active_parameters;
    out->weight_bytes = m->weight_bytes;
    snprintf(out->weights_made, sizeof out->weights_made, "%s", m->weights_made);
    snprintf(out->backend, sizeof out->backend, "%s", e->backend->ops->name);
    const char *kernels = lm_backend_cpu_kernels(e->backend);
    snprintf(out->cpu_kernels, sizeof out->cpu_kernels, "%s", kernels ? kernels : "");
    out->threads = lm_backend_threads(e->backend);
    out->max_model_len = e->max_model_len;
    snprintf(out->max_model_len_note, sizeof out->max_model_len_note, "%s", e->max_model_len_note);
    out->max_position_embeddings = m->max_position_embeddings;
    out->kv_block_size = e->cache.block_size;
    out->kv_cache_tokens = (int64_t)e->cache.kv_blocks.n_blocks * e->cache.block_size;
    /* the dtype the model's context asked the backend for (lm_kv_dtype) */
    lm_dtype kv_dtype = lm_kv_dtype(e->backend, m->head_dim);
    snprintf(out->kv_cache_dtype, sizeof out->kv_cache_dtype, "%s", kv_dtype == LM_DTYPE_BF16 ? "bf16" : "f32");
    int kv_layers = m->n_kv_layers + (e->speculator.k > 0 ? 1 : 0); /* the MTP layer keeps a pool too */
    out->kv_cache_bytes = out->kv_cache_tokens * kv_layers * 2 * (int64_t)m->n_kv_heads * m->head_dim *
                          (int64_t)lm_dtype_size(kv_dtype);
    out->state_slots = e->cache.state_slots.n_ids;
    out->max_batch_tokens = e->options.max_batch_tokens;
    out->speculative_tokens = e->speculator.k;
    out->draft_vocab = e->speculator.k > 0 ? e->speculator.draft_vocab : 0;
    out->decode_step_bytes = (int64_t)m->decode_bytes_per_token;
    if (e->speculator.k > 0) {
        out->draft_round_bytes = lm_speculator_round_bytes(m, e->speculator.draft_vocab);
        out->draft_round_bytes_full = lm_speculator_round_bytes(m, m->vocab_size);
    }
    if (e->options.speculative_tokens > 0 && e->speculator.k == 0)
        snprintf(out->speculative_status, sizeof out->speculative_status, "%s",
                 m->mtp_status[0] ? m->mtp_status : "the model has no MTP head");
    out->vision = e->images.on;
    snprintf(out->compute, sizeof out->compute, "%s", lm_backend_compute(e->backend));
    out->prefix_caching = e->cache.prefix_on;
    out->prefix_snapshot_bytes =
        e->cache.prefix_on && e->cache.prefix_has_state ? (int64_t)e->cache.snapshots.capacity * (int64_t)e->cache.snapshot_bytes : 0;
}
