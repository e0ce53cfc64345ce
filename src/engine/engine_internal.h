/* The engine's private state: the parts it connects (engine.c) and what
 * was made at create (engine_create.c).  Fields under "mutex" are shared
 * with the callers' threads; the parts are the engine thread's alone, and
 * each is reached through its own functions:
 *   scheduler (scheduler.h)     who runs this step, as one plan (step_plan.h)
 *   cache     (cache_manager.h) KV blocks, state slots, snapshots, prefix cache
 *   runner    (runner.h)        executes the plan: batch, forward, commit
 *   sampler   (step_sampler.h)  the step's draws over its logits
 *   speculator (speculator.h)   MTP drafts, verifies, rollbacks, adaptive K
 *   images    (engine_images.h) the vision side */
#ifndef LOOM_ENGINE_ENGINE_INTERNAL_H
#define LOOM_ENGINE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "base/progress.h"
#include "engine/cache_manager.h"
#include "engine/engine_images.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/spec_control.h"
#include "engine/speculator.h"
#include "engine/step_plan.h"
#include "engine/step_sampler.h"
#include "loom.h"
#include "models/model.h"
#include "text/tokenizer.h"

#define LM_ENGINE_MAX_EOS 16

/* loom_engine_set_draft_override (loom.h), by its internal name for tests. */
typedef loom_draft_override lm_draft_override;
void lm_engine_set_draft_override(loom_engine *e, lm_draft_override fn, void *ctx);
/* Tests: the adaptive speculation's time source (NULL: the monotonic
 * clock); set before any request. */
void lm_engine_set_clock(loom_engine *e, lm_spec_clock clock, void *ctx);
/* Tests: the controller's simulated clock with these costs (spec_control.h). */
void lm_engine_simulate_costs(loom_engine *e, const lm_spec_sim_clock *costs);
/* Tests: the per-token grammar budget of sequences created from now on
 * (engine/sequence_grammar.h; default LM_GRAMMAR_TOKEN_WORK); set before
 * submitting the requests it is for. */
void lm_engine_set_grammar_token_work(loom_engine *e, uint64_t units);
/* Tests: while held, the engine thread neither takes submitted requests nor
 * runs steps, so requests submitted meanwhile start together. */
void lm_engine_hold(loom_engine *e, bool held);

struct loom_engine {
    /* made at create, read-only after */
    loom_engine_options options;
    bool max_model_len_given;     /* the options named it (else the default, which may be lowered) */
    char max_model_len_note[256]; /* why the default was lowered ("" when it was not) */
    int max_model_len;
    lm_progress load_progress; /* the options' load_progress while loading, then silent */
    lm_backend *backend;
    lm_model *model;
    lm_model_context *context; /* the model's caches and workspace */
    int vocab_size;
    lm_tokenizer *tokenizer; /* NULL when the model folder has none */
    int32_t eos_ids[LM_ENGINE_MAX_EOS];
    int n_eos;
    bool thread_started;

    /* mutex */
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    loom_request **inbox; /* submitted, not yet taken by the engine thread */
    int n_inbox;
    bool shutdown, has_work;
    bool held; /* tests: the engine thread takes no request and runs no step */
    loom_stats stats;     /* published by the engine thread every step */
    pthread_cond_t reset_done; /* loom_engine_reset_prefix_cache waits on it */
    uint64_t resets_asked, resets_done;

    /* engine thread: the parts, the plan that passes from the scheduler
     * to the runner, what seeds the sequences' rngs, and the count of
     * finished requests */
    lm_scheduler scheduler;
    lm_cache_manager cache;
    lm_runner runner;
    lm_step_sampler sampler;
    lm_speculator speculator;
    lm_engine_images images;
    lm_step_plan plan;
    uint64_t entropy_seed, entropy_counter;
    uint64_t requests_finished;
};

/* engine.c: seq finishes (its event posted, out of its queue); a turn that
 * ended normally with the prefix cache on keeps its caches until the step
 * ends (lm_engine_settle_retiring), else they go back now and seq is freed. */
void lm_engine_finish(loom_engine *e, lm_sequence *seq, loom_finish_reason reason, int32_t stop_token,
                      int stop_string, const char *error);
void lm_engine_finish_error(loom_engine *e, lm_sequence *seq, const char *message);
/* engine.c: after a step, the sequences that finished in it leave their
 * caches to the prefix cache (unless a rollback failed and their states
 * are lost) and are freed. */
void lm_engine_settle_retiring(loom_engine *e, bool states_ok);
/* engine.c: the engine thread. */
void *lm_engine_main(void *arg);

/* The public API's error report: the message into error, the status back. */
int lm_engine_report(lm_status st, const char *message, char *error, size_t size);

#endif
