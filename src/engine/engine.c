/* The continuous-batching engine's loop: one engine thread owns the model
 * and the parts (engine_internal.h).  Each step the scheduler plans who
 * runs (scheduler.h: decode tokens and prompt chunks within a token
 * budget, admissions while KV blocks and state slots last, preemptions
 * when blocks run out), the runner executes the plan (runner.h: one
 * forward over the flattened StepBatch, the draws, the stop rules, the
 * events), and the speculator drafts for the next step.  This file is the
 * thread, submit and cancel, and a sequence's end. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/request_images.h"

/* --------------------------------------------------------- a sequence's end */

/* Gives a finished sequence's caches back and frees it. */
static void drop_sequence(loom_engine *e, lm_sequence *seq) {
    lm_cache_release(&e->cache, seq);
    seq->state = LM_SEQ_FINISHED;
    loom_request *r = seq->request;
    lm_sequence_free(seq);
    lm_request_unref(r); /* each choice holds one engine reference */
}

void lm_engine_finish(loom_engine *e, lm_sequence *seq, loom_finish_reason reason, int32_t stop_token,
                      int stop_string, const char *error) {
    loom_event ev = {.type = error ? LOOM_EVENT_ERROR : LOOM_EVENT_FINISH,
                     .choice = seq->choice,
                     .finish_reason = reason,
                     .stop_token = stop_token,
                     .stop_string = stop_string,
                     .prompt_tokens = seq->n_prompt,
                     .completion_tokens = lm_sequence_generated(seq),
                     .cached_tokens = seq->cached_tokens,
                     .drafted_tokens = seq->drafted,
                     .accepted_tokens = seq->accepted,
                     .error = error};
    if (!error && seq->has_detokenizer && stop_string < 0)
        lm_sequence_flush_text(seq, &ev.text, &ev.text_len);
    lm_request_push(seq->request, &ev);
    bool running = seq->state == LM_SEQ_RUNNING;
    lm_scheduler_remove(&e->scheduler, seq);
    e->requests_finished++;
    /* A turn that ended normally keeps its caches until the step ends: its
     * state is rolled back to what it accepted, then offered to the prefix
     * cache (lm_engine_settle_retiring). */
    if (e->cache.prefix_on && running && !error &&
        (reason == LOOM_FINISH_STOP || reason == LOOM_FINISH_LENGTH)) {
        seq->state = LM_SEQ_RETIRING;
        if (lm_scheduler_retire(&e->scheduler, seq)) return;
    }
    drop_sequence(e, seq);
}

void lm_engine_settle_retiring(loom_engine *e, bool states_ok) {
    for (int i = 0; i < lm_scheduler_n_retiring(&e->scheduler); i++) {
        lm_sequence *seq = lm_scheduler_retiring(&e->scheduler, i);
        if (states_ok) lm_prefix_cache_retire(&e->cache, seq);
        drop_sequence(e, seq);
    }
    lm_scheduler_clear_retiring(&e->scheduler);
}

void lm_engine_finish_error(loom_engine *e, lm_sequence *seq, const char *message) {
    lm_engine_finish(e, seq, LOOM_FINISH_ERROR, -1, -1, message);
}

/* ------------------------------------------------------------- the step */

static void cancel_requested(loom_engine *e) {
    lm_scheduler *s = &e->scheduler;
    for (int i = 0; i < lm_scheduler_n_running(s);) {
        lm_sequence *seq = lm_scheduler_running(s, i);
        if (atomic_load(&seq->request->cancelled)) lm_engine_finish(e, seq, LOOM_FINISH_CANCELLED, -1, -1, NULL);
        else i++;
    }
    for (int i = 0; i < lm_scheduler_n_waiting(s);) {
        lm_sequence *seq = lm_scheduler_waiting(s, i);
        if (atomic_load(&seq->request->cancelled)) lm_engine_finish(e, seq, LOOM_FINISH_CANCELLED, -1, -1, NULL);
        else i++;
    }
}

/* One step: the scheduler's plan, run.  Returns false when there was
 * nothing to run. */
static bool step(loom_engine *e) {
    lm_speculator_step_start(&e->speculator);
    cancel_requested(e);
    lm_scheduler_plan_running(&e->scheduler, &e->cache, &e->plan);
    /* before admission counts the running queue, as they leave it */
    for (int i = 0; i < e->plan.n_too_large; i++)
        lm_engine_finish_error(e, e->plan.too_large[i], "the KV cache is too small for this sequence");
    lm_scheduler_plan_admissions(&e->scheduler, &e->cache, &e->plan);
    if (e->plan.n == 0) return false;
    lm_runner_run(&e->runner, e, &e->plan);
    return true;
}

/* --------------------------------------------------------------- thread */

static void take_inbox(loom_engine *e) {
    for (int i = 0; i < e->n_inbox; i++) {
        loom_request *r = e->inbox[i];
        lm_sequence *parent = NULL;
        for (int c = 0; c < r->params.n; c++) {
            lm_sequence *seq = NULL;
            lm_error err = {0};
            uint64_t entropy = lm_rng_derive(e->entropy_seed, e->entropy_counter++);
            if (lm_sequence_create(r, c, e->tokenizer, e->eos_ids, e->n_eos, entropy, &seq, &err) != LM_OK ||
                !lm_scheduler_add(&e->scheduler, seq)) {
                loom_event ev = {.type = LOOM_EVENT_ERROR, .choice = c, .finish_reason = LOOM_FINISH_ERROR,
                                 .error = seq ? "out of memory" : err.message};
                lm_request_push(r, &ev);
                lm_sequence_free(seq);
                lm_request_unref(r);
                continue;
            }
            if (c == 0) parent = seq;
            else seq->fork_parent = parent;
            lm_speculator_seq_start(&e->speculator, seq, r->params.n == 1 && !r->params.no_speculation);
        }
    }
    e->n_inbox = 0;
}

static void publish_stats(loom_engine *e) {
    e->stats.running = lm_scheduler_n_running(&e->scheduler);
    e->stats.waiting = lm_scheduler_n_waiting(&e->scheduler) + e->n_inbox;
    e->stats.requests_finished = e->requests_finished;
    e->stats.preemptions = e->scheduler.preemptions;
    lm_cache_stats(&e->cache, &e->stats);
    lm_runner_stats(&e->runner, &e->stats);
    lm_speculator_stats(&e->speculator, &e->stats);
    lm_step_sampler_stats(&e->sampler, &e->stats);
    lm_engine_images_stats(&e->images, &e->stats);
}

/* loom_engine_reset_prefix_cache's requests, answered under the mutex. */
static void answer_resets(loom_engine *e) {
    if (e->resets_done == e->resets_asked) return;
    if (e->cache.prefix_on) lm_prefix_cache_reset(&e->cache);
    e->resets_done = e->resets_asked;
    publish_stats(e);
    pthread_cond_broadcast(&e->reset_done);
}

static bool idle(const loom_engine *e) {
    return e->n_inbox == 0 && lm_scheduler_n_running(&e->scheduler) == 0 &&
           lm_scheduler_n_waiting(&e->scheduler) == 0 && !e->has_work;
}

/* Finishes the first sequence of a queue, cancelled; false when empty. */
static bool cancel_first(loom_engine *e, bool running) {
    lm_scheduler *s = &e->scheduler;
    if (running ? lm_scheduler_n_running(s) == 0 : lm_scheduler_n_waiting(s) == 0) return false;
    lm_engine_finish(e, running ? lm_scheduler_running(s, 0) : lm_scheduler_waiting(s, 0), LOOM_FINISH_CANCELLED,
                     -1, -1, NULL);
    return true;
}

void *lm_engine_main(void *arg) {
    loom_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mutex);
        if (!e->held) take_inbox(e);
        answer_resets(e);
        publish_stats(e);
        while (!e->shutdown && (e->held || idle(e))) {
            pthread_cond_wait(&e->wake, &e->mutex);
            lm_speculator_idle(&e->speculator);
            if (!e->held) take_inbox(e);
            answer_resets(e);
        }
        e->has_work = false;
        bool stopping = e->shutdown;
        publish_stats(e);
        pthread_mutex_unlock(&e->mutex);
        if (stopping) break;
        if (!step(e) && lm_scheduler_n_running(&e->scheduler) == 0) {
            /* Waiting sequences that cannot be admitted with nothing running
             * would wait forever: they need more than the whole cache. */
            for (int i = 0; i < lm_scheduler_n_waiting(&e->scheduler);) {
                lm_sequence *seq = lm_scheduler_waiting(&e->scheduler, i);
                if (seq->fork_parent) { i++; continue; }
                lm_engine_finish_error(e, seq, "the request needs more KV cache or state slots than the engine has");
            }
        }
    }
    while (cancel_first(e, true)) {}
    while (cancel_first(e, false)) {}
    pthread_mutex_lock(&e->mutex);
    take_inbox(e);
    e->resets_done = e->resets_asked; /* nobody waits on a stopped engine */
    pthread_cond_broadcast(&e->reset_done);
    pthread_mutex_unlock(&e->mutex);
    while (cancel_first(e, false)) {}
    return NULL;
}

/* ------------------------------------------------------------ tests' hooks */

void lm_engine_hold(loom_engine *e, bool held) {
    pthread_mutex_lock(&e->mutex);
    e->held = held;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mutex);
}

void lm_engine_set_grammar_token_work(loom_engine *e, uint64_t units) { e->sampler.grammar_token_work = units; }

void lm_engine_set_clock(loom_engine *e, lm_spec_clock clock, void *ctx) {
    lm_spec_control_set_clock(&e->speculator.control, clock, ctx);
}

void lm_engine_simulate_costs(loom_engine *e, const lm_spec_sim_clock *costs) {
    lm_spec_control_simulate(&e->speculator.control, costs);
}

void lm_engine_set_draft_override(loom_engine *e, lm_draft_override fn, void *ctx) {
    e->speculator.draft_override = fn;
    e->speculator.draft_override_ctx = ctx;
}

void loom_engine_set_draft_override(loom_engine *engine, loom_draft_override fn, void *ctx) {
    lm_engine_set_draft_override(engine, fn, ctx);
}

/* ------------------------------------------------------------ public API */

int lm_engine_report(lm_status st, const char *message, char *error, size_t size) {
    if (error && size) snprintf(error, size, "%s", message);
    return (int)st;
}

static bool valid_ids(const int32_t *ids, int n, int vocab) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) return false;
    return true;
}

#define MAX_CHOICES 64
#define MAX_STOP_STRINGS 16
#define MAX_STOP_STRING_BYTES 1024
#define MAX_STOP_TOKEN_IDS 256
#define MAX_KEEP_SPECIAL_IDS 64

static lm_status validate(const loom_engine *e, const loom_request_params *p, lm_error *err) {
    int V = e->vocab_size;
    if (p->n_prompt <= 0 || !p->prompt) return lm_fail(err, LM_ERR_INVALID, "the prompt is empty");
    if (!valid_ids(p->prompt, p->n_prompt, V))
        return lm_fail(err, LM_ERR_INVALID, "the prompt holds a token id outside the vocabulary (size %d)", V);
    if (p->max_tokens < 1) return lm_fail(err, LM_ERR_INVALID, "max_tokens must be at least 1");
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return lm_fail(err, LM_ERR_INVALID, "min_tokens must be between 0 and max_tokens");
    if (p->n < 1 || p->n > MAX_CHOICES || p->n > e->options.max_running)
        return lm_fail(err, LM_ERR_INVALID, "n must be between 1 and %d",
                       MAX_CHOICES < e->options.max_running ? MAX_CHOICES : e->options.max_running);
    if (p->n_stop < 0 || p->n_stop > MAX_STOP_STRINGS)
        return lm_fail(err, LM_ERR_INVALID, "at most %d stop strings", MAX_STOP_STRINGS);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || strlen(p->stop[i]) > MAX_STOP_STRING_BYTES)
            return lm_fail(err, LM_ERR_INVALID, "stop strings are at most %d bytes", MAX_STOP_STRING_BYTES);
    if (p->grammar && !e->tokenizer)
        return lm_fail(err, LM_ERR_INVALID, "a grammar needs a tokenizer, and this model has none");
    if (p->n_stop > 0 && !e->tokenizer)
        return lm_fail(err, LM_ERR_INVALID, "stop strings need a tokenizer, and this model has none");
    if (p->n_stop_token_ids < 0 || p->n_stop_token_ids > MAX_STOP_TOKEN_IDS ||
        (p->n_stop_token_ids && !valid_ids(p->stop_token_ids, p->n_stop_token_ids, V)))
        return lm_fail(err, LM_ERR_INVALID, "stop_token_ids must be at most %d ids inside the vocabulary",
                       MAX_STOP_TOKEN_IDS);
    if (p->n_keep_special_token_ids < 0 || p->n_keep_special_token_ids > MAX_KEEP_SPECIAL_IDS ||
        (p->n_keep_special_token_ids && !valid_ids(p->keep_special_token_ids, p->n_keep_special_token_ids, V)))
        return lm_fail(err, LM_ERR_INVALID, "keep_special_token_ids must be at most %d ids inside the vocabulary",
                       MAX_KEEP_SPECIAL_IDS);
    char message[256];
    if (!lm_sampling_validate(&p->sampling, V, message, sizeof message))
        return lm_fail(err, LM_ERR_INVALID, "%s", message);
    if ((int64_t)p->n_prompt + (p->max_tokens_fit ? 1 : p->max_tokens) > e->max_model_len)
        return lm_fail(err, (lm_status)LOOM_ERR_TOO_LONG,
                       "this model's maximum context length is %d tokens; the request has %d prompt "
                       "tokens and max_tokens %d",
                       e->max_model_len, p->n_prompt, p->max_tokens);
    return LM_OK;
}

/* After the images' rows: a max_tokens_fit request gets what the context
 * leaves (at least one token, and its min_tokens), others must fit. */
static lm_status fit_context(const loom_engine *e, loom_request *r, const loom_request_params *p,
                             lm_error *err) {
    int64_t prompt = r->params.n_prompt, room = (int64_t)e->max_model_len - prompt;
    if (p->max_tokens_fit && room >= 1 && room >= p->min_tokens) {
        if (r->params.max_tokens > room) r->params.max_tokens = (int)room;
        return LM_OK;
    }
    if (prompt + p->max_tokens <= e->max_model_len && !p->max_tokens_fit) return LM_OK;
    int image_rows = (int)(prompt - p->n_prompt + p->n_images);
    if (p->max_tokens_fit)
        return lm_fail(err, (lm_status)LOOM_ERR_TOO_LONG,
                       "this model's maximum context length is %d tokens; the request has %lld prompt "
                       "tokens (%d of them for its images), which leave no room for %d output tokens",
                       e->max_model_len, (long long)prompt, image_rows, p->min_tokens > 1 ? p->min_tokens : 1);
    return lm_fail(err, (lm_status)LOOM_ERR_TOO_LONG,
                   "this model's maximum context length is %d tokens; the request has %lld prompt "
                   "tokens (%d of them for its images) and max_tokens %d",
                   e->max_model_len, (long long)prompt, image_rows, p->max_tokens);
}

int loom_submit(loom_engine *e, const loom_request_params *params, loom_request **out, char *error,
                size_t error_size) {
    lm_error err = {0};
    lm_status st = validate(e, params, &err);
    if (st != LM_OK) return lm_engine_report(st, err.message, error, error_size);
    loom_request *r;
    st = lm_request_create(params, &r, &err);
    if (st != LM_OK) return lm_engine_report(st, err.message, error, error_size);
    /* Images: decoded and cut into patches here, in the caller's thread. */
    st = lm_request_attach_images(r, params, &lm_model_describe(e->model)->vision,
                                  e->images.on ? &e->images.processor : NULL, e->images.max_patches,
                                  &e->images.limits, e->max_model_len, &err);
    if (st == LM_OK) st = fit_context(e, r, params, &err);
    if (st != LM_OK) {
        r->refs = 1;
        lm_request_unref(r);
        return lm_engine_report(st, err.message, error, error_size);
    }
    r->refs = 1 + params->n; /* the caller, and one per choice for the engine */
    r->engine = e;
    pthread_mutex_lock(&e->mutex);
    int status = LOOM_OK;
    if (e->shutdown) status = LOOM_ERR_SHUTDOWN;
    else if (e->n_inbox + e->stats.waiting >= e->options.max_waiting) status = LOOM_ERR_BUSY;
    if (status == LOOM_OK) {
        e->inbox[e->n_inbox++] = r;
        e->stats.waiting++;
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->mutex);
    if (status != LOOM_OK) {
        r->refs = 1;
        lm_request_unref(r);
        return lm_engine_report((lm_status)status,
                      status == LOOM_ERR_BUSY ? "the server is busy: too many requests are waiting"
                                              : "the engine is shutting down",
                      error, error_size);
    }
    *out = r;
    return LOOM_OK;
}

void loom_cancel(loom_request *r) {
    if (!r || atomic_exchange(&r->cancelled, true)) return;
    loom_engine *e = r->engine;
    pthread_mutex_lock(&e->mutex);
    e->has_work = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mutex);
}

void loom_request_free(loom_request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mutex);
    bool open = r->choices_open > 0;
    pthread_mutex_unlock(&r->mutex);
    if (open) loom_cancel(r);
    lm_request_unref(r);
}

void loom_engine_stats(loom_engine *e, loom_stats *stats) {
    pthread_mutex_lock(&e->mutex);
    *stats = e->stats;
    pthread_mutex_unlock(&e->mutex);
}

int loom_engine_reset_prefix_cache(loom_engine *e, char *error, size_t error_size) {
    pthread_mutex_lock(&e->mutex);
    if (e->shutdown) {
        pthread_mutex_unlock(&e->mutex);
        return lm_engine_report((lm_status)LOOM_ERR_SHUTDOWN, "the engine is shutting down", error, error_size);
    }
    uint64_t ticket = ++e->resets_asked;
    pthread_cond_signal(&e->wake);
    while (e->resets_done < ticket) pthread_cond_wait(&e->reset_done, &e->mutex);
    pthread_mutex_unlock(&e->mutex);
    return LOOM_OK;
}

int loom_engine_vocab_size(const loom_engine *e) { return e->vocab_size; }
