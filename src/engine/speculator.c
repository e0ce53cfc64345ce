/* The speculator (speculator.h): which sequences draft and how many
 * tokens, the bookkeeping of verifying the drafts in the next step, and
 * asking the model to roll back what was rejected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/speculator.h"

lm_status lm_speculator_init(lm_speculator *sp, int k, int max_step_tokens, int max_step_seqs, int max_running,
                             lm_error *err) {
    memset(sp, 0, sizeof *sp);
    sp->k = k;
    sp->max_running = max_running;
    if (k > 0) {
        lm_status st = lm_spec_control_init(&sp->control, k, max_step_tokens, max_running, err);
        if (st != LM_OK) return st;
        sp->candidates = calloc((size_t)max_running, sizeof *sp->candidates);
        if (!sp->candidates) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    sp->catch_up = calloc((size_t)max_step_seqs, sizeof *sp->catch_up);
    sp->catch_up_seq = calloc((size_t)max_step_seqs, sizeof *sp->catch_up_seq);
    sp->rollbacks = calloc((size_t)max_step_seqs, sizeof *sp->rollbacks);
    if (!sp->catch_up || !sp->catch_up_seq || !sp->rollbacks)
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the engine's step buffers");
    return LM_OK;
}

void lm_speculator_bind(lm_speculator *sp, lm_model_context *context, int max_model_len) {
    sp->context = context;
    sp->max_model_len = max_model_len;
}

void lm_speculator_free(lm_speculator *sp) {
    lm_spec_control_free(&sp->control);
    free(sp->candidates);
    free(sp->catch_up);
    free(sp->catch_up_seq);
    free(sp->rollbacks);
    memset(sp, 0, sizeof *sp);
}

bool lm_speculator_on(const lm_speculator *sp) { return sp->k > 0; }

int lm_speculator_draft_vocab(lm_speculator *sp, int asked, const lm_model_info *info, int n_ranks) {
    int vocab = info->vocab_size, n = asked == 0 ? LOOM_DEFAULT_DRAFT_VOCAB : asked < 0 ? vocab : asked;
    /* Over ranks the lm_head is split by vocabulary (each rank reads 1/n
     * of it already): drafts keep the whole, as the model does. */
    if (n > vocab || n_ranks > 1) n = vocab;
    sp->draft_vocab = n;
    /* Drafts read only the cut's rows of the vocabulary projection, and
     * the verify samples from the whole vocabulary as without the cut: a
     * draft outside the cut is never proposed, never needed for exactness
     * (a greedy draft is a point mass: the verify's draw from the target,
     * accepted when it equals the draft, is the target's draw). */
    return n < vocab ? n : 0;
}

void lm_speculator_seq_start(lm_speculator *sp, lm_sequence *seq, bool allowed) {
    seq->speculate = sp->k > 0 && allowed;
    if (seq->speculate) lm_spec_seq_start(&sp->control, &seq->spec_ctl);
}

int64_t lm_speculator_round_bytes(const lm_model_info *info, int draft_vocab) {
    if (info->vocab_size <= 0) return (int64_t)info->mtp_round_bytes;
    int n = draft_vocab > 0 && draft_vocab < info->vocab_size ? draft_vocab : info->vocab_size;
    return (int64_t)info->mtp_round_bytes + (int64_t)((double)info->lm_head_bytes * n / info->vocab_size);
}

/* ------------------------------------------------------------ step timing */

void lm_speculator_step_start(lm_speculator *sp) {
    /* Speculation learns what a step of this many rows costs: the time
     * from one step's start to the next one's (scheduling, forward,
     * sampling, rollbacks, events, the engine loop), less the MTP head's
     * call, timed apart (spec_control.h); not across an idle wait. */
    if (sp->k == 0) return;
    lm_timed_work work = {.phase = LM_TIMED_STEP, .end = sp->timing, .rows = sp->rows};
    uint64_t now = lm_spec_now(&sp->control, &work);
    if (sp->timing)
        lm_spec_observe_forward(&sp->control, sp->rows, (double)(now - sp->start) * 1e-9 - sp->head_seconds);
    sp->start = now;
    sp->timing = false;
    sp->head_seconds = 0;
}

void lm_speculator_planned(lm_speculator *sp, const lm_step_plan *plan, int n_tokens) {
    if (sp->k == 0) return;
    lm_spec_step_begin(&sp->control);
    /* The next step without drafts, as the controller sees it: a decode
     * row for each sequence that samples now, and the prompt chunks that
     * do not end now going on as large. */
    int chunks = 0, sampled = 0;
    bool decode = true; /* every row a decode or verify row: no prompt chunk */
    for (int i = 0; i < plan->n; i++) {
        const lm_plan_entry *p = &plan->entries[i];
        sampled += p->wants_logits;
        if (!p->wants_logits) chunks += p->n_new;
        decode &= p->n_new == 1 + p->n_drafts;
    }
    sp->base_rows = sampled + chunks;
    sp->base_tokens = sampled;
    sp->rows = decode ? n_tokens : 0;
}

void lm_speculator_step_end(lm_speculator *sp) {
    /* The next step's start ends this one; steps with prompt chunks are not
     * measured (their rows cost differently: most need no logits). */
    sp->timing = sp->k > 0 && sp->rows > 0;
}

void lm_speculator_idle(lm_speculator *sp) { sp->timing = false; /* idle time is no step's cost */ }

/* ------------------------------------------------------------ verify */

void lm_speculator_clear(lm_speculator *sp) {
    sp->n_catch_up = 0;
    sp->n_rollbacks = 0;
}

void lm_speculator_queue_catch_up(lm_speculator *sp, lm_sequence *seq, int from, int count, int row,
                                  const int32_t *positions) {
    if (!seq->speculate || sp->k == 0) return;
    /* A cold sequence (drafting did not pay) costs the head nothing. */
    if (!lm_spec_wants_head(&sp->control, &seq->spec_ctl)) return;
    sp->catch_up_seq[sp->n_catch_up] = seq;
    /* the step's rows of seq start at `row`: their positions are the
     * target's (model-spec §C.6), drafts past them at index + rope delta */
    sp->catch_up[sp->n_catch_up++] = (lm_draft_seq){.hidden_row = row,
                                                    .from = from,
                                                    .count = count,
                                                    .next_tokens = seq->tokens + from + 1,
                                                    .positions = positions,
                                                    .position_delta = seq->request->rope_delta};
}

void lm_speculator_verify_start(lm_speculator *sp, lm_sequence *seq, int k) {
    sp->verify_steps++;
    seq->drafted += k;
}

void lm_speculator_accepted(lm_speculator *sp, lm_sequence *seq) {
    seq->accepted++;
    sp->accepted++;
}

void lm_speculator_keep_finished(lm_speculator *sp, lm_sequence *seq, int i, int k) {
    if (i < k) sp->rollbacks[sp->n_rollbacks++] = (lm_rollback_seq){.state_slot = seq->state_slot, .n_keep = i + 1};
}

void lm_speculator_verify_end(lm_speculator *sp, lm_sequence *seq, int k, int kept) {
    seq->n_drafts = 0;
    lm_spec_observe_verify(&sp->control, &seq->spec_ctl, k, kept - 1);
    /* Rejected rows left the recurrent state ahead of the accepted prefix;
     * the model replays it after the step (KV entries past n_cached are
     * simply overwritten later). */
    if (kept < k + 1)
        sp->rollbacks[sp->n_rollbacks++] = (lm_rollback_seq){.state_slot = seq->state_slot, .n_keep = kept};
}

bool lm_speculator_apply_rollbacks(lm_speculator *sp, lm_state_lost_fn lost, void *ctx) {
    if (sp->n_rollbacks == 0) return true;
    lm_error err = {0};
    bool ok = lm_model_rollback(sp->context, sp->rollbacks, sp->n_rollbacks, &err) == LM_OK;
    if (!ok) {
        /* A sequence whose state was not restored cannot continue; nobody
         * drafts this step (the catch-up list may name the finished). */
        sp->n_catch_up = 0;
        for (int r = 0; r < sp->n_rollbacks; r++) lost(ctx, sp->rollbacks[r].state_slot, err.message);
    }
    sp->n_rollbacks = 0;
    return ok;
}

/* ------------------------------------------------------------ drafting */

/* Drafts a sequence may make now: bounded by K, its remaining max_tokens
 * and the context limit (the KV blocks are asked for once chosen). */
static int draft_budget(const lm_speculator *sp, const lm_sequence *seq) {
    const loom_request_params *p = &seq->request->params;
    int k = sp->k;
    int left = p->max_tokens - lm_sequence_generated(seq) - 1; /* the verify emits one more */
    if (k > left) k = left;
    int room = sp->max_model_len - seq->n_tokens - 1;
    if (k > room) k = room;
    return k > 0 ? k : 0;
}

static bool pending(const lm_sequence *seq) { return seq->n_cached == seq->n_tokens - 1; }

/* How many drafts each sequence makes now (spec_control.h): the queued
 * ones with a pending token, and the cold ones, which may be brought back.
 * Fills each catch-up entry's n_drafts. */
static void choose_drafts(lm_speculator *sp, const lm_scheduler *s, lm_cache_manager *cm, int n) {
    lm_spec_candidate *cands = sp->candidates;
    int n_cands = 0, head_rows = 0;
    for (int i = 0; i < n; i++) {
        lm_sequence *seq = sp->catch_up_seq[i];
        head_rows += sp->catch_up[i].count;
        sp->catch_up[i].n_drafts = 0;
        if (pending(seq) && n_cands < sp->max_running)
            cands[n_cands++] = (lm_spec_candidate){.state = &seq->spec_ctl, .budget = draft_budget(sp, seq)};
    }
    int n_warm = n_cands;
    for (int i = 0; i < lm_scheduler_n_running(s) && n_cands < sp->max_running; i++) {
        lm_sequence *seq = lm_scheduler_running(s, i);
        if (seq->speculate && seq->spec_ctl.cold && seq->state == LM_SEQ_RUNNING && pending(seq))
            cands[n_cands++] = (lm_spec_candidate){.state = &seq->spec_ctl, .budget = draft_budget(sp, seq)};
    }
    if (n_cands == 0) return;
    lm_spec_step step = {.base_rows = sp->base_rows, .base_tokens = sp->base_tokens, .head_rows = head_rows};
    lm_spec_choose(&sp->control, &step, cands, n_cands);
    for (int i = 0, c = 0; i < n && c < n_warm; i++) {
        lm_sequence *seq = sp->catch_up_seq[i];
        if (!pending(seq)) continue;
        int k = cands[c++].k;
        if (k > 0 && !lm_cache_ensure_blocks(cm, seq, seq->n_cached + k + 1)) k = 0;
        sp->catch_up[i].n_drafts = k;
    }
}

void lm_speculator_catch_up_and_draft(lm_speculator *sp, const lm_scheduler *s, lm_cache_manager *cm,
                                      lm_step_sampler *sampler) {
    int n = sp->n_catch_up;
    sp->n_catch_up = 0;
    if (n == 0) return;
    choose_drafts(sp, s, cm, n);
    /* rounds: those with logits (the vocabulary projection); a call that
     * only catches up runs the head's layer alone, priced by its rows */
    int rows = 0, rounds = 0;
    for (int i = 0; i < n; i++) {
        lm_sequence *seq = sp->catch_up_seq[i];
        lm_draft_seq *d = &sp->catch_up[i];
        d->drafts = seq->drafts;
        d->block_table = seq->blocks;
        d->n_blocks = seq->n_blocks;
        seq->n_drafts = 0;
        rows += d->count + d->n_drafts;
        if (d->n_drafts > rounds) rounds = d->n_drafts;
    }
    lm_error err = {0};
    lm_timed_work work = {.phase = LM_TIMED_HEAD, .rows = rows, .rounds = rounds};
    uint64_t head_start = lm_spec_now(&sp->control, &work);
    if (lm_model_draft(sp->context, sp->catch_up, n, &err) != LM_OK) {
        fprintf(stderr, "loom: MTP drafting failed, continuing without: %s\n", err.message);
        return;
    }
    work.end = true;
    sp->head_seconds = (double)(lm_spec_now(&sp->control, &work) - head_start) * 1e-9;
    lm_spec_observe_head(&sp->control, rounds, rows, sp->head_seconds);
    for (int i = 0; i < n; i++) {
        lm_sequence *seq = sp->catch_up_seq[i];
        int made = sp->catch_up[i].n_drafts;
        if (sp->draft_override && made > 0) {
            int kept = sp->draft_override(sp->draft_override_ctx, seq->tokens, seq->n_tokens, seq->n_prompt,
                                          seq->drafts, made);
            made = kept < 0 ? 0 : kept < made ? kept : made;
        }
        /* A draft the grammar refuses could never be accepted (the verify
         * samples under the mask): stop the drafts before it. */
        if (seq->grammar && made > 0) made = lm_step_sampler_grammar_prefix(sampler, seq, seq->drafts, made);
        seq->n_drafts = made;
        sp->drafted += (uint64_t)made;
    }
}

void lm_speculator_stats(const lm_speculator *sp, loom_stats *stats) {
    stats->spec_drafted_tokens = sp->drafted;
    stats->spec_accepted_tokens = sp->accepted;
    stats->spec_verify_steps = sp->verify_steps;
    stats->speculative_tokens = sp->k;
}
