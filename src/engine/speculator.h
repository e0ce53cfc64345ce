/* The speculator: the engine's side of MTP speculative decoding.  It owns
 * the adaptive-K controller (spec_control.h) and its step timing, the
 * rows the MTP head catches up on after a step, the rollbacks of verifies
 * that rejected rows, and the draft counters.  The arithmetic (the MTP
 * head, the replay of recurrent state) sits behind the model interface's
 * draft and rollback parts (models/model.h).
 *
 * A speculating sequence alternates: a step verifies its pending token and
 * its n_drafts drafts (n_drafts + 1 rows, all with logits); the runner
 * samples the rows in order with the request's own sampler while they
 * agree with the drafts (telling the speculator each verify's outcome);
 * the speculator then catches the MTP head up on the committed rows and
 * drafts again.  n_drafts is always a plain count of drafts waiting to be
 * verified.
 *
 * Engine thread only (the setters: before any request). */
#ifndef LOOM_ENGINE_SPECULATOR_H
#define LOOM_ENGINE_SPECULATOR_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/cache_manager.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/spec_control.h"
#include "engine/step_plan.h"
#include "engine/step_sampler.h"
#include "loom.h"
#include "models/model.h"

#define LM_MAX_SPECULATIVE LM_SEQUENCE_MAX_DRAFTS

typedef struct {
    int k;                   /* the most drafts per step, 0 = off */
    int draft_vocab;         /* ids the drafts choose from (lm_speculator_draft_vocab) */
    int max_running, max_model_len;
    lm_model_context *context; /* borrowed: the MTP head and the rollbacks run there */
    lm_spec_control control; /* chooses each step's drafts (when k > 0) */
    int base_rows, base_tokens; /* the next step's rows and sampled tokens without drafts */
    bool timing;                /* a step ran since `start`, without an idle wait */
    uint64_t start;             /* the clock at its start */
    int rows;                   /* its rows */
    double head_seconds;        /* its MTP head call */
    lm_spec_candidate *candidates; /* [max_running] */
    lm_draft_seq *catch_up;        /* [max step sequences]: after a step, for the MTP head */
    lm_sequence **catch_up_seq;    /* whose each entry is */
    int n_catch_up;
    lm_rollback_seq *rollbacks; /* [max step sequences]: verifies that rejected rows */
    int n_rollbacks;
    uint64_t drafted, accepted, verify_steps;
    loom_draft_override draft_override; /* tests only: replaces the MTP's drafts */
    void *draft_override_ctx;
} lm_speculator;

/* k = 0 makes a speculator that does nothing (no buffers). */
lm_status lm_speculator_init(lm_speculator *sp, int k, int max_step_tokens, int max_step_seqs, int max_running,
                             lm_error *err);
/* Once the context exists: where it runs, and the context limit (final
 * only once the KV pool is sized). */
void lm_speculator_bind(lm_speculator *sp, lm_model_context *context, int max_model_len);
void lm_speculator_free(lm_speculator *sp);
/* The draft head's vocabulary for the context (lm_context_options.
 * draft_vocab), from loom_engine_options.draft_vocab: -1 the whole
 * vocabulary, N > 0 the first N ids, 0 the default: LOOM_DEFAULT_DRAFT_VOCAB
 * where the vocabulary is larger (a draft round of the 0.8B shape's head
 * then reads a fifth of its bytes: lm_speculator_round_bytes); the whole
 * one over several ranks (n_ranks > 1: the lm_head is split).  Kept in
 * sp->draft_vocab; 0 (the whole one) when the context needs no cut. */
int lm_speculator_draft_vocab(lm_speculator *sp, int asked, const lm_model_info *info, int n_ranks);
/* Weight bytes one MTP draft round reads with a draft head of draft_vocab
 * ids: the head's fc and layer, and that share of the lm_head. */
int64_t lm_speculator_round_bytes(const lm_model_info *info, int draft_vocab);
bool lm_speculator_on(const lm_speculator *sp);

/* A new sequence: whether it speculates (a single choice that allows it). */
void lm_speculator_seq_start(lm_speculator *sp, lm_sequence *seq, bool allowed);

/* Step timing: a step of this many rows costs the time from one step's
 * start to the next one's, less the MTP head's call; not across an idle
 * wait.  step_start at every step's start; planned once the plan is made
 * (the next step without drafts, as the controller sees it); step_end when
 * it committed; idle when the engine waited. */
void lm_speculator_step_start(lm_speculator *sp);
void lm_speculator_planned(lm_speculator *sp, const lm_step_plan *plan, int n_tokens);
void lm_speculator_step_end(lm_speculator *sp);
void lm_speculator_idle(lm_speculator *sp);

/* The step begins: no catch-up or rollback queued. */
void lm_speculator_clear(lm_speculator *sp);
/* seq committed positions [from, from+count) in this step, from step row
 * `row` (its positions at `positions`), for the MTP head to catch up on. */
void lm_speculator_queue_catch_up(lm_speculator *sp, lm_sequence *seq, int from, int count, int row,
                                  const int32_t *positions);
/* A verify of k drafts of seq: its start, each accepted draft, and its end
 * with the rows kept (1..k+1: the rest are rolled back after the step). */
void lm_speculator_verify_start(lm_speculator *sp, lm_sequence *seq, int k);
void lm_speculator_accepted(lm_speculator *sp, lm_sequence *seq);
void lm_speculator_verify_end(lm_speculator *sp, lm_sequence *seq, int k, int kept);
/* A verify whose sequence finished at row i (of k + 1) but keeps its
 * caches to the step's end: its state goes back to the i + 1 rows. */
void lm_speculator_keep_finished(lm_speculator *sp, lm_sequence *seq, int i, int k);
/* Rolls back every verify of the step that rejected rows.  On failure
 * (the states of the sequences involved are lost) nobody drafts this step
 * and `lost` is called with each state slot involved; false then. */
typedef void (*lm_state_lost_fn)(void *ctx, int32_t state_slot, const char *message);
bool lm_speculator_apply_rollbacks(lm_speculator *sp, lm_state_lost_fn lost, void *ctx);
/* After a step: runs the MTP head over the queued rows and drafts each
 * sequence's next tokens (its n_drafts and drafts); the cold running
 * sequences may be brought back. */
void lm_speculator_catch_up_and_draft(lm_speculator *sp, const lm_scheduler *s, lm_cache_manager *cm,
                                      lm_step_sampler *sampler);
/* Its part of the engine's stats. */
void lm_speculator_stats(const lm_speculator *sp, loom_stats *stats);

#endif
