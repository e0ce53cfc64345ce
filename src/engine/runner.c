/* The runner (runner.h): a plan's batch, its forward, and its commit. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

lm_status lm_runner_init(lm_runner *r, int max_step_seqs, int max_step_tokens, lm_error *err) {
    memset(r, 0, sizeof *r);
    r->seqs = calloc((size_t)max_step_seqs, sizeof *r->seqs);
    r->tokens = malloc(sizeof(int32_t) * (size_t)max_step_tokens);
    r->positions = malloc(sizeof(int32_t) * 3 * (size_t)max_step_tokens);
    r->input_rows = calloc((size_t)max_step_tokens, sizeof *r->input_rows);
    if (!r->seqs || !r->tokens || !r->positions || !r->input_rows)
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the engine's step buffers");
    return LM_OK;
}

void lm_runner_free(lm_runner *r) {
    free(r->seqs);
    free(r->tokens);
    free(r->positions);
    free((void *)r->input_rows);
    memset(r, 0, sizeof *r);
}

void lm_runner_stats(const lm_runner *r, loom_stats *stats) {
    stats->prompt_tokens = r->prompt_tokens;
    stats->generation_tokens = r->generation_tokens;
    stats->steps = r->steps;
}

/* ------------------------------------------------------------ the batch */

/* The rows of a planned sequence write keys and values at positions
 * [n_cached, n_cached + n_new): never into a block another sequence reads
 * or the prefix cache holds.  A sequence that would is a bug: it fails
 * rather than corrupting what others share. */
static void keep_writable(loom_engine *e, lm_step_plan *plan) {
    int kept = 0;
    for (int i = 0; i < plan->n; i++) {
        if (!lm_cache_writable(&e->cache, plan->entries[i].seq, plan->entries[i].n_new)) {
            lm_engine_finish_error(e, plan->entries[i].seq,
                                   "internal error: a step would write into a shared KV block");
            continue;
        }
        plan->entries[kept++] = plan->entries[i];
    }
    plan->n = kept;
}

/* The StepBatch of a plan (host memory; the model uploads it). */
static lm_step_batch build_batch(lm_runner *r, const lm_step_plan *plan) {
    int n_tokens = 0;
    bool any_rows = false;
    for (int i = 0; i < plan->n; i++) {
        const lm_plan_entry *p = &plan->entries[i];
        lm_sequence *seq = p->seq;
        bool verify = p->n_drafts > 0;
        r->seqs[i] = (lm_step_seq){.first = n_tokens,
                                   .n_new = p->n_new,
                                   .n_cached = seq->n_cached,
                                   .state_slot = seq->state_slot,
                                   .block_table = seq->blocks,
                                   .n_blocks = seq->n_blocks,
                                   .all_logits = verify,
                                   .no_logits = !p->wants_logits,
                                   .record_for_rollback = verify};
        for (int j = 0; j < p->n_new; j++) {
            int pos = seq->n_cached + j;
            /* verify rows: the pending token, then the drafts */
            r->tokens[n_tokens] = j == 0 || !verify ? seq->tokens[pos] : seq->drafts[j - 1];
            lm_engine_position(seq, pos, r->positions + 3 * (size_t)n_tokens);
            r->input_rows[n_tokens] = lm_engine_input_row(seq, pos);
            any_rows |= r->input_rows[n_tokens] != NULL;
            n_tokens++;
        }
        if (seq->n_cached < seq->n_prompt)
            r->prompt_tokens += (uint64_t)(p->n_new < seq->n_prompt - seq->n_cached ? p->n_new
                                                                                   : seq->n_prompt - seq->n_cached);
    }
    return (lm_step_batch){.n_tokens = n_tokens, .tokens = r->tokens, .positions = r->positions,
                           .input_rows = any_rows ? r->input_rows : NULL, .n_seqs = plan->n, .seqs = r->seqs};
}

/* ------------------------------------------------------------ tokens */

/* The drawn token joins seq: stop rules, grammar state, events.  Returns
 * false if the sequence finished. */
static bool accept_token(lm_runner *r, loom_engine *e, lm_sequence *seq, const lm_sample_result *result) {
    const loom_request_params *p = &seq->request->params;
    lm_error err = {0};
    int32_t token = result->token;
    lm_token_outcome outcome;
    if (lm_sequence_accept(seq, token, e->eos_ids, e->n_eos, e->max_model_len, &outcome, &err) != LM_OK) {
        lm_engine_finish_error(e, seq, err.message);
        return false;
    }
    r->generation_tokens++;
    if (seq->grammar && outcome.stop_token < 0) {
        bool done = false;
        if (lm_step_sampler_grammar_accept(&e->sampler, seq, token, &done, &err) != LM_OK) {
            lm_engine_finish_error(e, seq, err.message);
            return false;
        }
        /* complete and nothing may follow: the output is whole */
        if (done && !outcome.finished) {
            outcome.finished = true;
            outcome.reason = LOOM_FINISH_STOP;
        }
    }
    if (outcome.stop_token < 0) { /* stop tokens are counted, not shown */
        loom_event ev = {.type = LOOM_EVENT_TOKEN,
                         .choice = seq->choice,
                         .token = token,
                         .text = seq->has_detokenizer ? outcome.text : NULL,
                         .text_len = outcome.text_len,
                         .logprob = result->logprob,
                         .n_top = p->sampling.logprobs > 0 ? result->n_top : 0,
                         .top = result->top,
                         .prompt_tokens = seq->n_prompt,
                         .cached_tokens = seq->cached_tokens};
        if (seq->has_detokenizer && !ev.text) ev.text = "";
        lm_request_push(seq->request, &ev);
    }
    if (outcome.finished) {
        lm_engine_finish(e, seq, outcome.reason, outcome.stop_token, outcome.stop_string, NULL);
        return false;
    }
    return true;
}

/* Samples the next token of seq from logit row `row` of the step, applies
 * the stop rules and posts the events.  Returns false if the sequence
 * finished. */
static bool sample_and_accept(lm_runner *r, loom_engine *e, lm_sequence *seq, int row) {
    lm_error err = {0};
    lm_sample_result storage;
    const lm_sample_result *result;
    if (lm_step_sampler_draw(&e->sampler, seq, row, &storage, &result, &err) != LM_OK) {
        lm_engine_finish_error(e, seq, err.message);
        return false;
    }
    return accept_token(r, e, seq, result);
}

/* Verify: sample row by row with the sequence's own sampler and keep going
 * while the sample equals the next draft.  Every emitted token is drawn
 * from the target distribution exactly as plain decoding would draw it
 * (one draw per token, same RNG stream), so greedy output is plain greedy
 * output and seeded sampling reproduces plain seeded sampling.  Returns
 * the rows kept (1..k+1), or 0 if the sequence finished. */
static int verify_drafts(lm_runner *r, loom_engine *e, lm_sequence *seq, int first_row, int k) {
    lm_speculator *sp = &e->speculator;
    int n_before = seq->n_cached, kept = 0;
    lm_speculator_verify_start(sp, seq, k);
    for (int i = 0; i <= k; i++) {
        int32_t draft = i < k ? seq->drafts[i] : -1;
        int at = seq->n_tokens, retiring = lm_scheduler_n_retiring(&e->scheduler);
        if (!sample_and_accept(r, e, seq, first_row + i)) {
            /* A turn that ended here and keeps its caches until the step
             * ends (for the prefix cache: it joined the retiring list; else
             * it is freed) goes back to the rows it accepted, as a running
             * sequence's state would. */
            if (lm_scheduler_n_retiring(&e->scheduler) > retiring) {
                seq->n_cached = n_before + i + 1;
                lm_speculator_keep_finished(sp, seq, i, k);
            }
            return 0;
        }
        kept = i + 1;
        if (seq->tokens[at] != draft) break;
        lm_speculator_accepted(sp, seq);
    }
    seq->n_cached = n_before + kept;
    lm_speculator_verify_end(sp, seq, k, kept);
    return kept;
}

/* Later choices of seq's request copy its prompt state and sample from the
 * same logits (or, with no room now, prefill by themselves later). */
static void fork_choices(lm_runner *r, loom_engine *e, lm_sequence *seq, int logit_row) {
    for (int w = 0; w < lm_scheduler_n_waiting(&e->scheduler);) {
        lm_sequence *child = lm_scheduler_waiting(&e->scheduler, w);
        if (child->fork_parent == seq) {
            if (lm_scheduler_fork(&e->scheduler, &e->cache, child, seq)) {
                sample_and_accept(r, e, child, logit_row);
                continue; /* the child left the waiting list */
            }
            child->fork_parent = NULL; /* no room now: it will prefill by itself */
        }
        w++;
    }
}

/* A failed rollback: the running sequence of that state slot is lost. */
static void state_lost(void *ctx, int32_t state_slot, const char *message) {
    loom_engine *e = ctx;
    for (int i = 0; i < lm_scheduler_n_running(&e->scheduler); i++) {
        lm_sequence *seq = lm_scheduler_running(&e->scheduler, i);
        if (seq->state_slot == state_slot) {
            lm_engine_finish_error(e, seq, message);
            return;
        }
    }
}

/* ------------------------------------------------------------ the step */

void lm_runner_run(lm_runner *r, loom_engine *e, lm_step_plan *plan) {
    keep_writable(e, plan);
    lm_engine_prepare_images(e, plan);
    if (plan->n == 0) return; /* every planned sequence failed (an image, a shared block) */

    lm_step_batch batch = build_batch(r, plan);
    lm_error err = {0};
    lm_step_sampler_plan_rows(&e->sampler, plan);
    lm_forward_out out = lm_step_sampler_forward_out(&e->sampler);
    lm_speculator_planned(&e->speculator, plan, batch.n_tokens);
    lm_status st = lm_model_forward(e->context, &batch, &out, &err);
    r->steps++;
    if (st != LM_OK) {
        for (int i = 0; i < plan->n; i++) lm_engine_finish_error(e, plan->entries[i].seq, err.message);
        lm_engine_settle_retiring(e, false);
        return;
    }
    lm_step_sampler_presample(&e->sampler, plan);
    lm_speculator *sp = &e->speculator;
    int row = 0;
    lm_speculator_clear(sp);
    for (int i = 0; i < plan->n; i++) {
        const lm_plan_entry *p = &plan->entries[i];
        lm_sequence *seq = p->seq;
        int n_before = seq->n_cached;
        int first_row = r->seqs[i].first;
        const int32_t *positions = r->positions + 3 * (size_t)first_row;
        if (p->n_drafts > 0) {
            int kept = verify_drafts(r, e, seq, row, p->n_drafts);
            row += p->n_drafts + 1;
            if (kept > 0) {
                lm_speculator_queue_catch_up(sp, seq, n_before, kept, first_row, positions);
                lm_prefix_cache_progress(&e->cache, seq, false);
            }
            continue;
        }
        seq->n_cached += p->n_new;
        if (!p->wants_logits) {
            lm_speculator_queue_catch_up(sp, seq, n_before, p->n_new, first_row, positions);
            lm_prefix_cache_progress(&e->cache, seq, true);
            continue;
        }
        lm_prefix_cache_progress(&e->cache, seq, false);
        int logit_row = row++;
        if (seq->n_tokens == seq->n_prompt && seq->choice == 0) fork_choices(r, e, seq, logit_row);
        if (sample_and_accept(r, e, seq, logit_row))
            lm_speculator_queue_catch_up(sp, seq, n_before, p->n_new, first_row, positions);
    }
    bool states_ok = lm_speculator_apply_rollbacks(sp, state_lost, e);
    lm_speculator_catch_up_and_draft(sp, &e->scheduler, &e->cache, &e->sampler);
    lm_engine_settle_retiring(e, states_ok);
    lm_speculator_step_end(sp);
}
