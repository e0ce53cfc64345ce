/* Making and unmaking an engine: the options resolved, the model opened,
 * the context limit chosen, the context and every part constructed in
 * turn (each failing with a message, all undone by loom_engine_destroy),
 * and the engine thread started. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "models/registry.h"
#include "models/tensor_parallel.h"
#include "text/tokenizer_gguf.h"

void loom_engine_options_default(loom_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->kv_block_size = 32;
    o->max_running = 64;
    o->max_batch_tokens = 0; /* by device: loom_default_batch_tokens */
    o->max_waiting = 1024;
}

/* A GPU reads every weight once per step whatever its rows, and a MoE
 * model's experts once per step for the tokens routed to them: the larger
 * the step, the fewer reads per prompt token (H200, 35B-A3B shape, 4096-
 * token prompt: 8159 tokens/s in steps of 512, 13654 in 2048, 15389 in
 * 4096; docs/PERF.md).  A CPU is compute-bound already at 512. */
int loom_default_max_model_len(int max_position_embeddings) {
    if (max_position_embeddings <= 0) return LOOM_MAX_MODEL_LEN_UNKNOWN;
    return max_position_embeddings < LOOM_MAX_MODEL_LEN_CAP ? max_position_embeddings : LOOM_MAX_MODEL_LEN_CAP;
}

int loom_default_batch_tokens(const char *backend) {
    return backend && strcmp(backend, "cuda") == 0 ? 2048 : 512;
}

void loom_request_params_default(loom_request_params *p) {
    memset(p, 0, sizeof *p);
    p->max_tokens = 16;
    p->skip_special_tokens = true;
    p->n = 1;
    lm_sampling_defaults(&p->sampling);
}

/* The options with their defaults filled in; false when out of range. */
static bool resolve_options(const loom_engine_options *options, loom_engine_options *o, const char **why) {
    *o = *options;
    loom_engine_options defaults;
    loom_engine_options_default(&defaults);
    if (o->kv_block_size <= 0) o->kv_block_size = defaults.kv_block_size;
    if (o->max_running <= 0) o->max_running = defaults.max_running;
    if (o->max_batch_tokens <= 0) o->max_batch_tokens = loom_default_batch_tokens(o->backend);
    if (o->max_waiting <= 0) o->max_waiting = defaults.max_waiting;
    *why = "engine options out of range";
    if (o->kv_block_size > 4096 || o->max_running > 4096 || o->max_batch_tokens > (1 << 20) ||
        o->speculative_tokens < 0 || o->speculative_tokens > LM_MAX_SPECULATIVE || o->draft_vocab < -1 ||
        o->tensor_parallel_size < 0 ||
        o->tensor_parallel_size > LM_COMM_MAX_RANKS)
        return false;
    *why = "unknown MTP norm convention";
    return (unsigned)o->mtp_norms <= LOOM_MTP_NORMS_SHIFTED;
}

/* The backend and the model's weights. */
static lm_status open_model(loom_engine *e, lm_error *err) {
    const loom_engine_options *o = &e->options;
    /* loom_engine_options' progress callback has lm_progress's shape; the
     * engine holds it (the weights keep a pointer) and silences it once
     * the load is done. */
    e->load_progress = (lm_progress){.add = o->load_progress, .ctx = o->load_progress_ctx};
    lm_status st = lm_backend_create(o->backend ? o->backend : "cpu", o->threads, &e->backend, err);
    if (st == LM_OK && o->compute_dtype) st = lm_backend_set_compute(e->backend, o->compute_dtype, err);
    if (st == LM_OK) {
        /* loom_mtp_norms and lm_mtp_norms list the conventions in the same order. */
        bool int8 = o->quantize && strcmp(o->quantize, "int8") == 0;
        bool fp8 = o->quantize && strcmp(o->quantize, "fp8") == 0;
        lm_model_load_options load = {.mode = o->mmap_weights ? LM_LOAD_MMAP : LM_LOAD_READ,
                                      .mtp_norms = (lm_mtp_norms)o->mtp_norms,
                                      .quantize_int8 = int8,
                                      .quantize_fp8 = fp8,
                                      .random_seed = o->random_seed,
                                      .progress = o->load_progress ? &e->load_progress : NULL};
        if (o->quantize && !int8 && !fp8 && strcmp(o->quantize, "none") != 0)
            st = lm_fail(err, LM_ERR_INVALID, "unknown weight quantization '%.40s' (none, int8 or fp8)", o->quantize);
        else if (o->tensor_parallel_size > 1) {
            load.random_weights = o->random_weights;
            load.random_seed = o->random_seed;
            load.expert_parallel = o->expert_parallel;
            st = lm_tensor_parallel_open(o->random_weights ? NULL : o->model_dir, o->config_path, &load, e->backend,
                                         o->tensor_parallel_size, &e->model, err);
        } else if (o->random_weights)
            st = o->config_path ? lm_model_open_random_with(o->config_path, &load, e->backend, &e->model, err)
                                : lm_fail(err, LM_ERR_INVALID, "random weights need a config path");
        else if (!o->model_dir)
            st = lm_fail(err, LM_ERR_INVALID, "no model folder given");
        else
            st = lm_model_open(o->model_dir, &load, e->backend, &e->model, err);
    }
    e->load_progress.add = NULL;
    if (st == LM_OK) e->vocab_size = lm_model_describe(e->model)->vocab_size;
    return st;
}

/* The model folder's tokenizer (when it has one) and the end-of-sequence
 * ids: the model's, and the tokenizer's when it names another. */
static lm_status open_tokenizer(loom_engine *e, lm_error *err) {
    const lm_model_info *info = lm_model_describe(e->model);
    if (!e->options.random_weights) {
        if (lm_tokenizer_available(e->options.model_dir)) { /* tokenizer.json, or a GGUF's metadata */
            lm_status st = lm_tokenizer_load(e->options.model_dir, &e->tokenizer, err);
            if (st != LM_OK) return st;
        }
    }
    for (int i = 0; i < info->n_eos && e->n_eos < LM_ENGINE_MAX_EOS; i++) e->eos_ids[e->n_eos++] = info->eos_ids[i];
    if (e->tokenizer && lm_tokenizer_eos_id(e->tokenizer) >= 0 && e->n_eos < LM_ENGINE_MAX_EOS) {
        int32_t id = lm_tokenizer_eos_id(e->tokenizer);
        bool known = false;
        for (int i = 0; i < e->n_eos; i++) known |= e->eos_ids[i] == id;
        if (!known) e->eos_ids[e->n_eos++] = id;
    }
    return LM_OK;
}

/* The context limit: as asked, else the one default (loom.h), lowered (and
 * said) where an explicit pool cannot hold one sequence of it; an explicit
 * limit the pool cannot hold is refused with both numbers. */
static lm_status choose_context_limit(loom_engine *e, lm_error *err) {
    const loom_engine_options *o = &e->options;
    e->max_model_len_given = o->max_model_len > 0;
    e->max_model_len = e->max_model_len_given ? o->max_model_len
                                              : loom_default_max_model_len(lm_model_describe(e->model)->max_position_embeddings);
    if (o->kv_cache_tokens > 0 && o->kv_cache_tokens < e->max_model_len) {
        if (e->max_model_len_given)
            return lm_fail(err, LM_ERR_INVALID,
                           "max model length %d needs %d tokens of KV cache for one sequence, and the KV pool "
                           "(--kv-cache-tokens) holds %lld: raise --kv-cache-tokens to at least %d, or lower "
                           "--max-model-len to at most %lld",
                           e->max_model_len, e->max_model_len, (long long)o->kv_cache_tokens, e->max_model_len,
                           (long long)o->kv_cache_tokens);
        snprintf(e->max_model_len_note, sizeof e->max_model_len_note,
                 "the default max model length %d was lowered to %lld: the KV pool (--kv-cache-tokens %lld) holds "
                 "no more for one sequence; raise --kv-cache-tokens for longer ones",
                 e->max_model_len, (long long)o->kv_cache_tokens, (long long)o->kv_cache_tokens);
        e->max_model_len = (int)o->kv_cache_tokens;
    }
    return LM_OK;
}

/* --gpu-memory-utilization: the KV pool takes what the fraction leaves
 * once the weights (loaded) and the context's fixed part are counted.  The
 * fixed part and a block's bytes are measured, not computed: two probe
 * contexts of one and two sequences' blocks, made and freed. */
static lm_status size_pool_by_memory(loom_engine *e, lm_context_options *context, lm_error *err) {
    float util = e->options.gpu_memory_utilization;
    if (!(util > 0 && util <= 1))
        return lm_fail(err, LM_ERR_INVALID, "gpu_memory_utilization %g is out of range (0, 1]", util);
    if (!e->backend->ops->memory_info)
        return lm_fail(err, LM_ERR_INVALID,
                       "gpu_memory_utilization sizes a device's memory; the %s backend has none (use "
                       "kv_cache_tokens)", e->backend->ops->name);
    int one = lm_cache_blocks_for(&e->cache, e->max_model_len + LM_MAX_SPECULATIVE + 1);
    size_t free0, total, used[2];
    lm_status st = e->backend->ops->memory_info(e->backend, &free0, &total, err);
    for (int k = 0; k < 2 && st == LM_OK; k++) {
        lm_context_options probe = *context;
        probe.kv_blocks = one * (k + 1);
        probe.max_blocks_per_seq = one;
        lm_model_context *ctx = NULL;
        size_t free1 = 0, ignored;
        st = lm_model_context_create(e->model, &probe, &ctx, err);
        if (st == LM_OK) st = e->backend->ops->memory_info(e->backend, &free1, &ignored, err);
        lm_model_context_destroy(ctx);
        used[k] = free0 > free1 ? free0 - free1 : 0;
    }
    if (st != LM_OK) return st;
    double per_block = used[1] > used[0] ? (double)(used[1] - used[0]) / one : 0;
    double fixed = (double)used[0] - per_block * one;
    double budget = util * (double)total - (double)(total - free0) - (fixed > 0 ? fixed : 0);
    if (per_block <= 0) return lm_fail(err, LM_ERR_INTERNAL, "cannot measure a KV block's device memory");
    double blocks = budget / per_block;
    if (blocks < one && !e->max_model_len_given) {
        /* the whole pool for one sequence, less its speculative rows */
        int fits = (int)blocks * e->cache.block_size - LM_MAX_SPECULATIVE - 1;
        if (fits >= e->cache.block_size) {
            snprintf(e->max_model_len_note, sizeof e->max_model_len_note,
                     "the default max model length %d was lowered to %d: --gpu-memory-utilization %.2f leaves room "
                     "for no more after the weights; raise it, or give --max-model-len", e->max_model_len, fits, util);
            e->max_model_len = fits;
            one = lm_cache_blocks_for(&e->cache, e->max_model_len + LM_MAX_SPECULATIVE + 1);
        }
    }
    if (blocks < one)
        return lm_fail(err, LM_ERR_NOMEM,
                       "--gpu-memory-utilization %.2f of %.1f GiB leaves room for %.0f tokens of KV cache "
                       "after the weights (%.1f GiB in use); one sequence of --max-model-len %d needs %d: raise "
                       "--gpu-memory-utilization or lower --max-model-len",
                       util, (double)total / (1 << 30), blocks > 0 ? blocks * e->cache.block_size : 0.0,
                       (double)(total - free0) / (1 << 30), e->max_model_len, one * e->cache.block_size);
    if (blocks > (1 << 24)) blocks = 1 << 24;
    context->kv_blocks = (int)blocks;
    context->max_blocks_per_seq = one < context->kv_blocks ? one : context->kv_blocks;
    fprintf(stderr, "loom: KV cache: %lld tokens (%.1f GiB) in %.0f%% of the card's %.1f GiB\n",
            (long long)context->kv_blocks * e->cache.block_size, blocks * per_block / (1 << 30), util * 100,
            (double)total / (1 << 30));
    return LM_OK;
}


/* Sequences of one step. */
static int max_step_seqs(const loom_engine_options *o) {
    return o->max_running < o->max_batch_tokens ? o->max_running : o->max_batch_tokens;
}

/* Logit rows of one step: one per sequence, or k+1 for a speculative verify. */
static int max_logit_rows(const loom_engine *e) {
    int rows = max_step_seqs(&e->options) * (1 + e->speculator.k);
    return rows < e->options.max_batch_tokens ? rows : e->options.max_batch_tokens;
}

/* What the model's context must hold, with the parts that choose part of
 * it made first: the speculator (its K), the images (their workspace),
 * the cache manager (the snapshot pool), then the pool's size. */
static lm_status plan_context(loom_engine *e, lm_context_options *context, lm_error *err) {
    const loom_engine_options *o = &e->options;
    const lm_model_info *info = lm_model_describe(e->model);
    int B = o->max_batch_tokens;
    int k = 0;
    if (o->speculative_tokens > 0 && lm_model_can_draft(e->model))
        k = o->speculative_tokens < LM_MAX_SPECULATIVE ? o->speculative_tokens : LM_MAX_SPECULATIVE;
    /* When asked for but off, loom_engine_describe says why. */
    lm_status st = lm_speculator_init(&e->speculator, k, B, max_step_seqs(o), o->max_running, err);
    if (st != LM_OK) return st;
    e->cache.block_size = o->kv_block_size;
    int64_t kv_tokens = o->kv_cache_tokens > 0 ? o->kv_cache_tokens : (int64_t)e->max_model_len * 4;
    int n_blocks = (int)((kv_tokens + o->kv_block_size - 1) / o->kv_block_size);
    *context = (lm_context_options){.kv_block_size = o->kv_block_size,
                                    .kv_blocks = n_blocks,
                                    .state_slots = o->max_running,
                                    .max_step_tokens = B,
                                    .max_step_seqs = max_step_seqs(o),
                                    .max_blocks_per_seq =
                                        lm_cache_blocks_for(&e->cache, e->max_model_len + LM_MAX_SPECULATIVE + 1),
                                    .max_logit_rows = max_logit_rows(e),
                                    .speculative_tokens = k,
                                    .draft_vocab = lm_speculator_draft_vocab(&e->speculator, o->draft_vocab, info,
                                                                             o->tensor_parallel_size)};
    if (context->max_blocks_per_seq > n_blocks) context->max_blocks_per_seq = n_blocks;
    st = lm_engine_images_init(e, info, context, err);
    if (st == LM_OK) st = lm_cache_manager_configure(&e->cache, o, info, context, err);
    if (st == LM_OK && o->gpu_memory_utilization > 0) st = size_pool_by_memory(e, context, err);
    return st;
}

/* The sequences' rng seed, the inbox, and the engine thread. */
static lm_status start_thread(loom_engine *e, lm_error *err) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    e->entropy_seed = e->options.seed ? e->options.seed
                                      : (uint64_t)now.tv_nsec ^ ((uint64_t)now.tv_sec << 32) ^ (uint64_t)(uintptr_t)e;
    e->inbox = malloc(sizeof(*e->inbox) * (size_t)e->options.max_waiting);
    if (!e->inbox) return lm_fail(err, LM_ERR_NOMEM, "out of memory for the engine's step buffers");
    pthread_mutex_init(&e->mutex, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_cond_init(&e->reset_done, NULL);
    if (pthread_create(&e->thread, NULL, lm_engine_main, e) != 0) {
        pthread_mutex_destroy(&e->mutex);
        pthread_cond_destroy(&e->wake);
        pthread_cond_destroy(&e->reset_done);
        return lm_fail(err, LM_ERR_INTERNAL, "cannot start the engine thread");
    }
    e->thread_started = true;
    return LM_OK;
}

int loom_engine_create(const loom_engine_options *options, loom_engine **out, char *error, size_t error_size) {
    loom_engine_options o;
    const char *why;
    if (!resolve_options(options, &o, &why)) return lm_engine_report(LM_ERR_INVALID, why, error, error_size);
    loom_engine *e = calloc(1, sizeof *e);
    if (!e) return lm_engine_report(LM_ERR_NOMEM, "out of memory", error, error_size);
    e->options = o;
    lm_error err = {0};
    lm_context_options context;
    lm_status st = open_model(e, &err);
    if (st == LM_OK) st = open_tokenizer(e, &err);
    if (st == LM_OK) st = choose_context_limit(e, &err);
    if (st == LM_OK) st = plan_context(e, &context, &err);
    if (st == LM_OK) st = lm_model_context_create(e->model, &context, &e->context, &err);
    if (st == LM_OK) st = lm_cache_manager_start(&e->cache, e->context, context.kv_blocks, o.max_running, &err);
    if (st == LM_OK) st = lm_scheduler_init(&e->scheduler, o.max_running, o.max_batch_tokens, &err);
    if (st == LM_OK) st = lm_step_plan_init(&e->plan, max_step_seqs(&o), o.max_running, &err);
    if (st == LM_OK) st = lm_runner_init(&e->runner, max_step_seqs(&o), o.max_batch_tokens, &err);
    if (st == LM_OK)
        st = lm_step_sampler_init(&e->sampler, e->vocab_size, max_logit_rows(e), e->backend, e->tokenizer, &err);
    if (st == LM_OK) {
        lm_speculator_bind(&e->speculator, e->context, e->max_model_len);
        st = start_thread(e, &err);
    }
    if (st != LM_OK) {
        loom_engine_destroy(e);
        return lm_engine_report(st, err.message, error, error_size);
    }
    *out = e;
    return LOOM_OK;
}

void loom_engine_destroy(loom_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mutex);
        e->shutdown = true;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->mutex);
        pthread_join(e->thread, NULL);
        pthread_mutex_destroy(&e->mutex);
        pthread_cond_destroy(&e->wake);
        pthread_cond_destroy(&e->reset_done);
    }
    lm_step_sampler_free(&e->sampler);
    lm_model_context_destroy(e->context);
    lm_cache_manager_free(&e->cache);
    if (e->tokenizer) lm_tokenizer_free(e->tokenizer);
    lm_model_free(e->model);
    lm_backend_destroy(e->backend);
    lm_scheduler_free(&e->scheduler);
    lm_step_plan_free(&e->plan);
    lm_runner_free(&e->runner);
    lm_engine_images_free(&e->images);
    lm_speculator_free(&e->speculator);
    free(e->inbox);
    free(e);
}
