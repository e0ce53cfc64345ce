/* The engine's private state (engine.c).  Fields under "engine thread" are
 * touched by the engine thread alone; the rest under `mutex`. */
#ifndef LOOM_ENGINE_ENGINE_INTERNAL_H
#define LOOM_ENGINE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "engine/loaded_model.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "loom.h"
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

/* MTP rows to run after a step for one sequence: positions [from, from+count)
 * with the target's hidden rows starting at hidden_row of the step. */
typedef struct {
    lm_sequence *seq;
    int from, count, hidden_row;
    bool draft; /* the sequence has a pending token: draft after catching up */
} lm_mtp_catch_up;

#define LM_MAX_SPECULATIVE 8

/* A test hook: given a sequence's tokens so far (prompt + generated), fills
 * up to k drafts and returns how many. */
typedef int (*lm_draft_override)(void *ctx, const int32_t *tokens, int n_tokens, int n_prompt,
                                 int32_t *drafts, int k);
void lm_engine_set_draft_override(loom_engine *e, lm_draft_override fn, void *ctx);

struct loom_engine {
    loom_engine_options options;
    lm_loaded_model model;
    lm_tokenizer *tokenizer; /* NULL when the model folder has none */
    int32_t eos_ids[LM_ENGINE_MAX_EOS];
    int n_eos;
    int max_model_len;
    bool model_open, caches_open, scratch_open, thread_started;

    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    loom_request **inbox; /* submitted, not yet taken by the engine thread */
    int n_inbox;
    bool shutdown, has_work;
    loom_stats stats;     /* published by the engine thread every step */

    /* engine thread */
    lm_qwen35_caches caches;
    lm_qwen35_workspace workspace;
    lm_seq_list running, waiting;
    uint64_t admit_counter, entropy_seed, entropy_counter;
    struct {
        uint64_t prompt_tokens, generation_tokens, requests_finished, preemptions, steps;
    } counters;
    lm_step_seq *step_seqs;
    int32_t *step_tokens, *step_positions;
    float *logits, *sample_row;
    lm_sampler_scratch scratch;
    lm_plan_entry *plan;

    /* speculative decoding (engine thread) */
    int spec_k;                 /* drafts per step, 0 = off */
    lm_kv_cache mtp_kv;         /* the MTP layer's KV cache: same blocks as the main one */
    bool mtp_kv_open;
    float *hidden_all;          /* [max_batch_tokens, H] post-final-norm rows of the step */
    float *mtp_hidden;          /* [max_batch_tokens, H] MTP input / output rows */
    float *mtp_logits;          /* [max_running, V] */
    int32_t *mtp_tokens, *mtp_positions;
    lm_step_seq *mtp_seqs;
    lm_mtp_catch_up *catch_up;
    int n_catch_up;
    struct {
        uint64_t drafted, accepted, verify_steps;
    } spec_counters;
    /* Tests only: replaces the MTP's drafts (set before any request). */
    lm_draft_override draft_override;
    void *draft_override_ctx;
};

/* speculative.c: after a step, run the MTP head over the rows each
 * speculating sequence committed and draft its next spec_k tokens. */
void lm_engine_catch_up_and_draft(loom_engine *e);
/* Blocks for n_tokens (engine.c). */
bool lm_engine_ensure_blocks(loom_engine *e, lm_sequence *seq, int n_tokens);

#endif
