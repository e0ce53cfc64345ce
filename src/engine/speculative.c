/* The engine's side of speculative decoding: which sequences draft and how
 * many tokens, verifying the drafts in the next step, and asking the model
 * to roll back what was rejected.  The arithmetic (the MTP head, the replay
 * of recurrent state) sits behind the model interface's draft and rollback
 * parts (models/model.h).
 *
 * A speculating sequence alternates: a step verifies its pending token and
 * its n_drafts drafts (n_drafts + 1 rows, all with logits); the rows are
 * sampled in order with the request's own sampler while they agree with the
 * drafts; the model then catches its MTP head up on the committed rows and
 * drafts again.  n_drafts is always a plain count of drafts waiting to be
 * verified. */
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"

void lm_engine_queue_catch_up(loom_engine *e, lm_sequence *seq, int from, int count, int row) {
    if (!seq->speculate || e->spec_k == 0) return;
    /* A cold sequence (drafting did not pay) costs the head nothing. */
    if (!lm_spec_wants_head(&e->spec, &seq->spec_ctl)) return;
    e->catch_up_seq[e->n_catch_up] = seq;
    /* the step's rows of seq start at `row`: their positions are the
     * target's (model-spec §C.6), drafts past them at index + rope delta */
    e->catch_up[e->n_catch_up++] = (lm_draft_seq){.hidden_row = row,
                                                  .from = from,
                                                  .count = count,
                                                  .next_tokens = seq->tokens + from + 1,
                                                  .positions = e->step_positions + 3 * (size_t)row,
                                                  .position_delta = seq->request->rope_delta};
}

/* Verify: sample row by row with the sequence's own sampler and keep going
 * while the sample equals the next draft.  Every emitted token is drawn
 * from the target distribution exactly as plain decoding would draw it
 * (one draw per token, same RNG stream), so greedy output is plain greedy
 * output and seeded sampling reproduces plain seeded sampling. */
int lm_engine_verify_drafts(loom_engine *e, lm_sequence *seq, int first_row, int k) {
    int n_before = seq->n_cached, kept = 0;
    e->spec_counters.verify_steps++;
    seq->drafted += k;
    for (int i = 0; i <= k; i++) {
        int32_t draft = i < k ? seq->drafts[i] : -1;
        int at = seq->n_tokens, retiring = e->retiring.n;
        if (!lm_engine_sample_and_accept(e, seq, first_row + i)) {
            /* A turn that ended here and keeps its caches until the step
             * ends (for the prefix cache: it joined the retiring list; else
             * it is freed) goes back to the rows it accepted, as a running
             * sequence's state would. */
            if (e->retiring.n > retiring) {
                seq->n_cached = n_before + i + 1;
                if (i < k)
                    e->rollbacks[e->n_rollbacks++] = (lm_rollback_seq){.state_slot = seq->state_slot, .n_keep = i + 1};
            }
            return 0;
        }
        kept = i + 1;
        if (seq->tokens[at] != draft) break;
        seq->accepted++;
        e->spec_counters.accepted++;
    }
    seq->n_cached = n_before + kept;
    seq->n_drafts = 0;
    lm_spec_observe_verify(&e->spec, &seq->spec_ctl, k, kept - 1);
    /* Rejected rows left the recurrent state ahead of the accepted prefix;
     * the model replays it after the step (KV entries past n_cached are
     * simply overwritten later). */
    if (kept < k + 1)
        e->rollbacks[e->n_rollbacks++] = (lm_rollback_seq){.state_slot = seq->state_slot, .n_keep = kept};
    return kept;
}

bool lm_engine_apply_rollbacks(loom_engine *e) {
    if (e->n_rollbacks == 0) return true;
    lm_error err = {0};
    bool ok = lm_model_rollback(e->context, e->rollbacks, e->n_rollbacks, &err) == LM_OK;
    if (!ok) {
        /* A sequence whose state was not restored cannot continue; nobody
         * drafts this step (the catch-up list may name the finished). */
        e->n_catch_up = 0;
        for (int r = 0; r < e->n_rollbacks; r++)
            for (int i = 0; i < e->running.n; i++)
                if (e->running.items[i]->state_slot == e->rollbacks[r].state_slot) {
                    lm_engine_finish_error(e, e->running.items[i], err.message);
                    break;
                }
    }
    e->n_rollbacks = 0;
    return ok;
}

/* Drafts a sequence may make now: bounded by K, its remaining max_tokens
 * and the context limit (the KV blocks are asked for once chosen). */
static int draft_budget(const loom_engine *e, const lm_sequence *seq) {
    const loom_request_params *p = &seq->request->params;
    int k = e->spec_k;
    int left = p->max_tokens - lm_sequence_generated(seq) - 1; /* the verify emits one more */
    if (k > left) k = left;
    int room = e->max_model_len - seq->n_tokens - 1;
    if (k > room) k = room;
    return k > 0 ? k : 0;
}

static bool pending(const lm_sequence *seq) { return seq->n_cached == seq->n_tokens - 1; }

/* How many drafts each sequence makes now (spec_control.h): the queued
 * ones with a pending token, and the cold ones, which may be brought back.
 * Fills each catch-up entry's n_drafts. */
static void choose_drafts(loom_engine *e, int n) {
    lm_spec_candidate *cands = e->spec_candidates;
    int n_cands = 0, head_rows = 0;
    for (int i = 0; i < n; i++) {
        lm_sequence *seq = e->catch_up_seq[i];
        head_rows += e->catch_up[i].count;
        e->catch_up[i].n_drafts = 0;
        if (pending(seq) && n_cands < e->options.max_running)
            cands[n_cands++] = (lm_spec_candidate){.state = &seq->spec_ctl, .budget = draft_budget(e, seq)};
    }
    int n_warm = n_cands;
    for (int i = 0; i < e->running.n && n_cands < e->options.max_running; i++) {
        lm_sequence *seq = e->running.items[i];
        if (seq->speculate && seq->spec_ctl.cold && seq->state == LM_SEQ_RUNNING && pending(seq))
            cands[n_cands++] = (lm_spec_candidate){.state = &seq->spec_ctl, .budget = draft_budget(e, seq)};
    }
    if (n_cands == 0) return;
    lm_spec_step step = {.base_rows = e->spec_base_rows, .base_tokens = e->spec_base_tokens,
                         .head_rows = head_rows};
    lm_spec_choose(&e->spec, &step, cands, n_cands);
    for (int i = 0, c = 0; i < n && c < n_warm; i++) {
        lm_sequence *seq = e->catch_up_seq[i];
        if (!pending(seq)) continue;
        int k = cands[c++].k;
        if (k > 0 && !lm_engine_ensure_blocks(e, seq, seq->n_cached + k + 1)) k = 0;
        e->catch_up[i].n_drafts = k;
    }
}

void lm_engine_catch_up_and_draft(loom_engine *e) {
    int n = e->n_catch_up;
    e->n_catch_up = 0;
    if (n == 0) return;
    choose_drafts(e, n);
    int rows = 0, rounds = 1;
    for (int i = 0; i < n; i++) {
        lm_sequence *seq = e->catch_up_seq[i];
        lm_draft_seq *d = &e->catch_up[i];
        d->drafts = seq->drafts;
        d->block_table = seq->blocks;
        d->n_blocks = seq->n_blocks;
        seq->n_drafts = 0;
        rows += d->count + d->n_drafts;
        if (d->n_drafts > rounds) rounds = d->n_drafts;
    }
    lm_error err = {0};
    lm_timed_work work = {.phase = LM_TIMED_HEAD, .rows = rows, .rounds = rounds};
    uint64_t head_start = lm_spec_now(&e->spec, &work);
    if (lm_model_draft(e->context, e->catch_up, n, &err) != LM_OK) {
        fprintf(stderr, "loom: MTP drafting failed, continuing without: %s\n", err.message);
        return;
    }
    work.end = true;
    e->spec_head_seconds = (double)(lm_spec_now(&e->spec, &work) - head_start) * 1e-9;
    lm_spec_observe_head(&e->spec, rounds, rows, e->spec_head_seconds);
    for (int i = 0; i < n; i++) {
        lm_sequence *seq = e->catch_up_seq[i];
        int made = e->catch_up[i].n_drafts;
        if (e->draft_override && made > 0) {
            int kept = e->draft_override(e->draft_override_ctx, seq->tokens, seq->n_tokens, seq->n_prompt,
                                         seq->drafts, made);
            made = kept < 0 ? 0 : kept < made ? kept : made;
        }
        /* A draft the grammar refuses could never be accepted (the verify
         * samples under the mask): stop the drafts before it. */
        if (seq->grammar && made > 0) {
            uint64_t t0 = lm_engine_now_ns();
            made = lm_sequence_grammar_valid_prefix(seq->grammar, e->tokenizer, seq->drafts, made);
            e->grammar_counters.ns += lm_engine_now_ns() - t0;
        }
        seq->n_drafts = made;
        e->spec_counters.drafted += (uint64_t)made;
    }
}

void lm_engine_set_clock(loom_engine *e, lm_spec_clock clock, void *ctx) {
    lm_spec_control_set_clock(&e->spec, clock, ctx);
}

void lm_engine_simulate_costs(loom_engine *e, const lm_spec_sim_clock *costs) {
    lm_spec_control_simulate(&e->spec, costs);
}

void lm_engine_set_draft_override(loom_engine *e, lm_draft_override fn, void *ctx) {
    e->draft_override = fn;
    e->draft_override_ctx = ctx;
}

void loom_engine_set_draft_override(loom_engine *engine, loom_draft_override fn, void *ctx) {
    lm_engine_set_draft_override(engine, fn, ctx);
}
