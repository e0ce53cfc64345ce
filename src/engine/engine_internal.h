/* The engine's private state (engine.c).  Fields under "engine thread" are
 * touched by the engine thread alone; the rest under `mutex`. */
#ifndef LOOM_ENGINE_ENGINE_INTERNAL_H
#define LOOM_ENGINE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <time.h>
#include <stdbool.h>

#include "base/progress.h"
#include "engine/id_pool.h"
#include "engine/image_cache.h"
#include "engine/kv_blocks.h"
#include "engine/presample.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/spec_control.h"
#include "engine/state_snapshots.h"
#include "loom.h"
#include "models/model.h"
#include "text/tokenizer.h"

#define LM_ENGINE_MAX_EOS 16

typedef struct {
    lm_sequence **items;
    int n, cap;
} lm_seq_list;

/* One sequence's share of a step. */
typedef struct {
    lm_sequence *seq;
    int n_new;
    bool wants_logits; /* its chunk reaches its last token: sample after the step */
    int n_drafts;      /* > 0: a speculative verify of the pending token + this many drafts */
} lm_plan_entry;

#define LM_MAX_SPECULATIVE LM_SEQUENCE_MAX_DRAFTS

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
    bool max_model_len_given;      /* the options named it (else the default, which may be lowered) */
    char max_model_len_note[256];  /* why the default was lowered ("" when it was not) */
    lm_progress load_progress; /* the options' load_progress while loading, then silent */
    loom_engine_options options;
    lm_backend *backend;
    lm_model *model;
    lm_model_context *context; /* the model's caches and workspace */
    int vocab_size;
    lm_tokenizer *tokenizer; /* NULL when the model folder has none */
    lm_token_trie *grammar_trie; /* engine thread: the vocabulary's trie, built for the first grammar */
    lm_grammar_frame_cache grammar_frames; /* engine thread: token-mask frames of recent grammars */
    uint64_t grammar_token_work;  /* the sequences' grammar budget per token (LM_GRAMMAR_TOKEN_WORK) */
    int32_t eos_ids[LM_ENGINE_MAX_EOS];
    int n_eos;
    int max_model_len;
    bool scratch_open, thread_started;

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

    /* engine thread */
    lm_kv_blocks kv_blocks; /* ids of the context's KV blocks (and the prefix cache's index) */
    lm_id_pool state_slots; /* ids of its recurrent-state slots */
    int kv_block_size;
    lm_seq_list running, waiting;
    lm_sequence **preempted; /* [max_running]: preempted in this scheduling pass, in order */
    lm_sequence **too_large; /* [max_running]: cannot run even alone (finished after the pass) */
    int n_preempted, n_too_large;
    uint64_t admit_counter, entropy_seed, entropy_counter;
    struct {
        uint64_t prompt_tokens, generation_tokens, requests_finished, preemptions, steps;
    } counters;
    struct {
        uint64_t masks, ns; /* constrained decoding's engine-thread time */
    } grammar_counters;
    lm_step_seq *step_seqs;
    int32_t *step_tokens, *step_positions;
    const float **step_input_rows; /* [max_batch_tokens]: image rows, else NULL */
    float *logits, *sample_row;
    /* The step's logit rows as brought back: logits_wanted[r] false means
     * row r's draw is its argmax (lm_sample_is_raw_argmax), logit_argmax[r],
     * and its logits stayed on the device.  all_logits (the environment's
     * LOOM_DOWNLOAD_ALL_LOGITS=1, for measuring) brings every row back. */
    int32_t *logit_argmax;
    bool *logits_wanted;
    bool all_logits;
    /* Draws made where the logits are (ops.h: sample_rows; on with a
     * device backend that has it, off with LOOM_DEVICE_SAMPLING=0, on for
     * a host backend with =1): each logit row's mode and parameters, the
     * step's edits, whether each draw used its uniform, and the sequence's
     * rng from before the uniform was taken (restored when it was not). */
    bool device_sampling, any_device_draws;
    lm_sample_row *sample_rows;       /* [logit rows] */
    lm_sample_entry *sample_entries;  /* [LM_FORWARD_SAMPLE_ENTRIES] */
    int n_sample_entries;
    int32_t *sample_drew;             /* [logit rows] */
    lm_rng *rng_before;               /* [logit rows] */
    lm_sampler_scratch scratch;
    lm_presampler presampler; /* a step's sampled rows on several threads (presample.h) */
    lm_plan_entry *plan;

    /* speculative decoding (engine thread; speculative.c) */
    int spec_k;                 /* the most drafts per step, 0 = off */
    lm_spec_control spec;       /* chooses each step's drafts (when spec_k > 0) */
    int spec_base_rows, spec_base_tokens; /* the next step's rows and sampled tokens without drafts */
    bool spec_timing;                     /* a step ran since spec_start, without an idle wait */
    uint64_t spec_start;                  /* the clock at its start */
    int spec_rows;                        /* its rows */
    double spec_head_seconds;             /* its MTP head call */
    lm_spec_candidate *spec_candidates;   /* [max_running] */
    lm_draft_seq *catch_up;     /* [max step sequences]: after a step, for the MTP head */
    lm_sequence **catch_up_seq; /* whose each entry is */
    int n_catch_up;
    lm_rollback_seq *rollbacks; /* [max step sequences]: verifies that rejected rows */
    int n_rollbacks;
    struct {
        uint64_t drafted, accepted, verify_steps;
    } spec_counters;
    /* images (engine_images.c): the processor submit uses (read-only once
     * the engine runs), the vision workspace's bound, the tower's outputs
     * kept for reuse (engine thread) */
    bool images_on;
    lm_image_processor image_processor;
    lm_image_limits image_limits; /* what a request's image files may declare */
    int max_image_patches;
    lm_image_cache image_cache;
    uint64_t images_encoded;
    char image_marker[256]; /* "" when there is none */
    /* prefix caching (prefix_cache.c): on or off, whether resuming needs
     * a recurrent-state snapshot, the snapshot pool, how far apart a
     * prefill's snapshots are, the sequences that finished in this step
     * (caches kept until it ends) */
    bool prefix_on, prefix_has_state;
    lm_state_snapshots snapshots;
    size_t snapshot_bytes; /* of one snapshot's state */
    int snapshot_interval;
    lm_seq_list retiring;
    struct {
        uint64_t queries, hits;
    } prefix_counters;
    /* Tests only: replaces the MTP's drafts (set before any request). */
    lm_draft_override draft_override;
    void *draft_override_ctx;
};

/* engine_images.c: the vision side of the engine, set up at create
 * (context->max_image_patches is set when images are on). */
lm_status lm_engine_images_init(loom_engine *e, const lm_model_info *info,
                                lm_context_options *context, lm_error *err);
/* engine_images.c: encodes (or finds in the cache) every image whose rows
 * the plan's prefill chunks reach; a sequence whose image fails finishes
 * with the error and leaves the plan.  Returns the plan's new length. */
int lm_engine_prepare_images(loom_engine *e, int n);
/* engine_images.c: the input row of token index pos of seq (an image
 * placeholder's row of the tower's output) or NULL; and its position. */
const float *lm_engine_input_row(const lm_sequence *seq, int pos);
void lm_engine_position(const lm_sequence *seq, int pos, int32_t out[3]);

/* prefix_cache.c: chooses on/off and the snapshot pool (sets
 * context->state_snapshots), at create, before the context is made. */
lm_status lm_prefix_cache_init(loom_engine *e, const lm_model_info *info, lm_context_options *context,
                               lm_error *err);
/* prefix_cache.c: after the KV block pool exists. */
void lm_prefix_cache_start(loom_engine *e);
void lm_prefix_cache_free(loom_engine *e);
/* prefix_cache.c: admission of a sequence with nothing cached: holds the
 * longest cached prefix that can be resumed (its full blocks into the
 * block table, n_cached set; the snapshot and partial tail to restore in
 * resume_snapshot / resume_tail) and counts the first admission's
 * query. */
void lm_prefix_cache_admit(loom_engine *e, lm_sequence *seq);
/* prefix_cache.c: once the admitted sequence has its own blocks and slot:
 * copies the held partial tail into its block and lets it go. */
void lm_prefix_cache_admitted(loom_engine *e, lm_sequence *seq);
/* prefix_cache.c: the tokens of a prefill chunk of seq that may run now
 * (at most `take`): chunks end at block boundaries and at a branch point,
 * where a snapshot is taken. */
int lm_prefix_cache_chunk(const loom_engine *e, const lm_sequence *seq, int take);
/* prefix_cache.c: after a step committed rows of seq: registers its new
 * full blocks; after a prefill chunk (`prefill`), snapshots its state when
 * the chunk ended at a snapshot point. */
void lm_prefix_cache_progress(loom_engine *e, lm_sequence *seq, bool prefill);
/* prefix_cache.c: seq stops with caches consistent at n_cached (a turn's
 * end, or preemption): its partial tail block and its state are kept. */
void lm_prefix_cache_retire(loom_engine *e, lm_sequence *seq);
/* prefix_cache.c: drops every idle cached block and every snapshot. */
void lm_prefix_cache_reset(loom_engine *e);

/* speculative.c: remembers that seq committed positions [from, from+count)
 * in this step, from step row `row`, for the MTP head to catch up on. */
void lm_engine_queue_catch_up(loom_engine *e, lm_sequence *seq, int from, int count, int row);
/* speculative.c: after a step, run the MTP head over the queued rows and
 * draft each sequence's next tokens (its n_drafts and drafts). */
void lm_engine_catch_up_and_draft(loom_engine *e);
/* speculative.c: a verify step fed [pending, d_1..d_k]: accepts the rows
 * that match and queues the rollback of the rest.  Returns the rows kept
 * (1..k+1), or 0 if the sequence finished (it is freed then). */
int lm_engine_verify_drafts(loom_engine *e, lm_sequence *seq, int first_row, int k);
/* speculative.c: rolls back every verify of the step that rejected rows;
 * false when that failed (the states of the sequences involved are lost). */
bool lm_engine_apply_rollbacks(loom_engine *e);
/* engine.c, for speculative.c */
bool lm_engine_ensure_blocks(loom_engine *e, lm_sequence *seq, int n_tokens);
bool lm_engine_sample_and_accept(loom_engine *e, lm_sequence *seq, int logit_row);
void lm_engine_finish_error(loom_engine *e, lm_sequence *seq, const char *message);

/* A monotonic clock in nanoseconds (the grammar's time counter). */
static inline uint64_t lm_engine_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
