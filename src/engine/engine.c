/* The continuous-batching engine: one engine thread owns the model, the
 * caches and the scheduler.  Each step it gathers the running sequences'
 * next tokens (a decode token each, or a chunk of a prompt) within a token
 * budget, admits waiting sequences while KV blocks and state slots last,
 * preempts (to recompute later) when blocks run out, runs one forward over
 * the flattened StepBatch, samples, applies stop rules and posts events. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "engine/request_images.h"
#include "models/registry.h"
#include "models/tensor_parallel.h"

/* ------------------------------------------------------------ small arrays */

static bool seq_list_push(lm_seq_list *list, lm_sequence *seq) {
    if (list->n == list->cap) {
        int cap = list->cap ? list->cap * 2 : 16;
        lm_sequence **bigger = realloc(list->items, sizeof *bigger * (size_t)cap);
        if (!bigger) return false;
        list->items = bigger;
        list->cap = cap;
    }
    list->items[list->n++] = seq;
    return true;
}

static bool seq_list_push_front(lm_seq_list *list, lm_sequence *seq) {
    if (!seq_list_push(list, seq)) return false;
    memmove(list->items + 1, list->items, sizeof *list->items * (size_t)(list->n - 1));
    list->items[0] = seq;
    return true;
}

static void seq_list_remove(lm_seq_list *list, lm_sequence *seq) {
    for (int i = 0; i < list->n; i++)
        if (list->items[i] == seq) {
            memmove(list->items + i, list->items + i + 1, sizeof *list->items * (size_t)(list->n - i - 1));
            list->n--;
            return;
        }
}

/* --------------------------------------------------------- resource moves */

static int blocks_for(const loom_engine *e, int n_tokens) {
    return (n_tokens + e->kv_block_size - 1) / e->kv_block_size;
}

static void release_resources(loom_engine *e, lm_sequence *seq) {
    lm_kv_blocks_release(&e->kv_blocks, seq->blocks, seq->n_blocks);
    if (seq->resume_tail >= 0) lm_kv_blocks_release(&e->kv_blocks, &seq->resume_tail, 1);
    seq->resume_tail = seq->resume_snapshot = -1;
    seq->n_blocks = seq->n_chain = 0;
    seq->branch_point = seq->last_snapshot = 0;
    if (seq->state_slot >= 0) lm_id_pool_give_back(&e->state_slots, &seq->state_slot, 1);
    seq->state_slot = -1;
    seq->n_cached = 0;
}

/* Grows seq's block table to hold n_tokens; false if the pool is short. */
static bool ensure_blocks(loom_engine *e, lm_sequence *seq, int n_tokens) {
    int need = blocks_for(e, n_tokens);
    if (need <= seq->n_blocks) return true;
    if (!lm_sequence_reserve_blocks(seq, need) ||
        !lm_kv_blocks_take(&e->kv_blocks, need - seq->n_blocks, seq->blocks + seq->n_blocks))
        return false;
    seq->n_blocks = need;
    return true;
}

bool lm_engine_ensure_blocks(loom_engine *e, lm_sequence *seq, int n_tokens) {
    return ensure_blocks(e, seq, n_tokens);
}

/* A state slot: zeroed for a sequence that starts from nothing, else the
 * snapshot its admission resumes from. */
static bool take_state_slot(loom_engine *e, lm_sequence *seq) {
    if (lm_id_pool_take(&e->state_slots, 1, &seq->state_slot, NULL) != LM_OK) return false;
    if (seq->resume_snapshot >= 0) lm_model_restore_state(e->context, seq->resume_snapshot, seq->state_slot);
    else lm_model_reset_state(e->context, seq->state_slot);
    seq->resume_snapshot = -1;
    return true;
}

/* Gives a finished sequence's caches back and frees it. */
static void drop_sequence(loom_engine *e, lm_sequence *seq) {
    release_resources(e, seq);
    seq->state = LM_SEQ_FINISHED;
    loom_request *r = seq->request;
    lm_sequence_free(seq);
    lm_request_unref(r); /* each choice holds one engine reference */
}

static void finish(loom_engine *e, lm_sequence *seq, loom_finish_reason reason, int32_t stop_token,
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
    if (running) seq_list_remove(&e->running, seq);
    else seq_list_remove(&e->waiting, seq);
    /* Choices still waiting to fork from this one now prefill on their own. */
    for (int i = 0; i < e->waiting.n; i++)
        if (e->waiting.items[i]->fork_parent == seq) e->waiting.items[i]->fork_parent = NULL;
    e->counters.requests_finished++;
    /* A turn that ended normally keeps its caches until the step ends: its
     * state is rolled back to what it accepted, then offered to the prefix
     * cache (settle_retiring). */
    if (e->prefix_on && running && !error &&
        (reason == LOOM_FINISH_STOP || reason == LOOM_FINISH_LENGTH)) {
        seq->state = LM_SEQ_RETIRING;
        if (seq_list_push(&e->retiring, seq)) return;
    }
    drop_sequence(e, seq);
}

/* After a step: the sequences that finished in it leave their caches to
 * the prefix cache (unless a rollback failed and their states are lost). */
static void settle_retiring(loom_engine *e, bool states_ok) {
    for (int i = 0; i < e->retiring.n; i++) {
        if (states_ok) lm_prefix_cache_retire(e, e->retiring.items[i]);
        drop_sequence(e, e->retiring.items[i]);
    }
    e->retiring.n = 0;
}

void lm_engine_finish_error(loom_engine *e, lm_sequence *seq, const char *message) {
    finish(e, seq, LOOM_FINISH_ERROR, -1, -1, message);
}

/* ------------------------------------------------------------- scheduling */

static void cancel_requested(loom_engine *e) {
    lm_seq_list *lists[2] = {&e->running, &e->waiting};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < lists[l]->n;) {
            lm_sequence *seq = lists[l]->items[i];
            if (atomic_load(&seq->request->cancelled))
                finish(e, seq, LOOM_FINISH_CANCELLED, -1, -1, NULL); /* removes it */
            else
                i++;
        }
}

static bool in_plan(const lm_plan_entry *plan, int n, const lm_sequence *seq) {
    for (int k = 0; k < n; k++)
        if (plan[k].seq == seq) return true;
    return false;
}

/* Preemption by recompute: the caches go back to the pools now, the tokens
 * stay; the sequence moves to the front of the queue when the scheduling
 * pass ends (settle_preempted) and re-prefills everything later. */
static void preempt(loom_engine *e, lm_sequence *seq) {
    lm_prefix_cache_retire(e, seq); /* its caches are consistent between steps: resume there */
    release_resources(e, seq);
    seq->n_drafts = 0;
    seq->state = LM_SEQ_PREEMPTED;
    e->preempted[e->n_preempted++] = seq;
    e->counters.preemptions++;
}

/* The newest running sequence that is neither `seq` nor planned already. */
static lm_sequence *preemption_victim(loom_engine *e, const lm_plan_entry *plan, int n,
                                      const lm_sequence *seq) {
    for (int j = e->running.n - 1; j >= 0; j--) {
        lm_sequence *cand = e->running.items[j];
        if (cand != seq && cand->state == LM_SEQ_RUNNING && !in_plan(plan, n, cand)) return cand;
    }
    return NULL;
}

/* The running list is only read while a pass plans; preemptions and the
 * sequences too large to run are applied here, after it. */
static void settle_preempted(loom_engine *e) {
    for (int i = 0; i < e->n_preempted; i++) {
        lm_sequence *seq = e->preempted[i];
        seq_list_remove(&e->running, seq);
        seq->state = LM_SEQ_WAITING;
        if (!seq_list_push_front(&e->waiting, seq)) seq_list_push(&e->waiting, seq);
    }
    e->n_preempted = 0;
    for (int i = 0; i < e->n_too_large; i++) {
        e->too_large[i]->state = LM_SEQ_RUNNING; /* it is still in the running list */
        finish(e, e->too_large[i], LOOM_FINISH_ERROR, -1, -1,
               "the KV cache is too small for this sequence");
    }
    e->n_too_large = 0;
}

/* Plans the running sequences: decode tokens first (pass 0) so a long
 * prompt never starves the streams already generating, then prompt chunks
 * (pass 1), in admission order, within the token budget. */
static int plan_running(loom_engine *e, lm_plan_entry *out, int *budget) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < e->running.n && *budget > 0; i++) {
            lm_sequence *seq = e->running.items[i];
            if (seq->state != LM_SEQ_RUNNING) continue; /* preempted in this pass */
            int need = seq->n_tokens - seq->n_cached;
            if ((pass == 0) != (need == 1)) continue;
            /* A speculating sequence verifies its pending token and its
             * drafts in one go, when the budget and blocks allow; else the
             * drafts are dropped. */
            int drafts = need == 1 ? seq->n_drafts : 0;
            if (drafts > 0 && (1 + drafts > *budget || !ensure_blocks(e, seq, seq->n_cached + 1 + drafts)))
                drafts = 0;
            seq->n_drafts = drafts;
            need += drafts;
            int take = need < *budget ? need : *budget;
            if (drafts == 0) take = lm_prefix_cache_chunk(e, seq, take);
            while (!ensure_blocks(e, seq, seq->n_cached + take)) {
                lm_sequence *victim = preemption_victim(e, out, n, seq);
                if (!victim) break;
                preempt(e, victim);
            }
            if (seq->n_blocks < blocks_for(e, seq->n_cached + take)) {
                /* Nothing left to preempt: with nothing planned either, it
                 * cannot fit even alone. */
                if (n == 0) {
                    release_resources(e, seq);
                    seq->state = LM_SEQ_PREEMPTED; /* out of this pass */
                    e->too_large[e->n_too_large++] = seq;
                }
                continue;
            }
            out[n++] = (lm_plan_entry){seq, take, seq->n_cached + take >= seq->n_tokens, drafts};
            *budget -= take;
        }
    }
    return n;
}

/* Fairness: one request holds at most half the state slots (at least one)
 * at once, so a request of n = 64 choices leaves room for the next
 * client's, whose first token then comes while the 64 generate; its other
 * choices start as its first ones finish.  (ARCHITECTURE.md, "Fairness".) */
static int request_share(const loom_engine *e) {
    int half = (e->options.max_running + 1) / 2;
    return half > 0 ? half : 1;
}

/* The request's sequences running now, and those admitted in this plan
 * (out[first..n)). */
static int request_running(const loom_engine *e, const loom_request *r, const lm_plan_entry *out, int first, int n) {
    int count = 0;
    for (int i = 0; i < e->running.n; i++) count += e->running.items[i]->request == r;
    for (int k = first; k < n; k++) count += out[k].seq->request == r;
    return count;
}

/* Admits waiting sequences (in queue order) while a slot, blocks and budget
 * last; the admitted move to the running list after the loop. */
static int plan_admissions(loom_engine *e, lm_plan_entry *out, int n, int *budget) {
    int first_admitted = n;
    for (int i = 0; i < e->waiting.n && *budget > 0; i++) {
        lm_sequence *seq = e->waiting.items[i];
        if (seq->fork_parent) continue; /* waits for choice 0's prompt */
        if (e->state_slots.n_free == 0) break;
        if (e->running.n + (n - first_admitted) >= e->options.max_running) break;
        if (request_running(e, seq->request, out, first_admitted, n) >= request_share(e))
            continue; /* its request has its share: later requests go first */
        lm_prefix_cache_admit(e, seq);
        int need = seq->n_tokens - seq->n_cached;
        int take = lm_prefix_cache_chunk(e, seq, need < *budget ? need : *budget);
        if (!ensure_blocks(e, seq, seq->n_cached + take) || !take_state_slot(e, seq)) {
            release_resources(e, seq);
            break;
        }
        lm_prefix_cache_admitted(e, seq);
        seq->state = LM_SEQ_RUNNING;
        seq->admit_order = ++e->admit_counter;
        out[n++] = (lm_plan_entry){seq, take, seq->n_cached + take == seq->n_tokens, 0};
        *budget -= take;
    }
    for (int k = first_admitted; k < n; k++) {
        seq_list_remove(&e->waiting, out[k].seq);
        seq_list_push(&e->running, out[k].seq);
    }
    return n;
}

/* Picks this step's work; returns the number of scheduled sequences. */
static int schedule(loom_engine *e, lm_plan_entry *out) {
    int budget = e->options.max_batch_tokens;
    int n = plan_running(e, out, &budget);
    settle_preempted(e);
    return plan_admissions(e, out, n, &budget);
}

/* Gives a waiting later choice the prompt state of its parent (choice 0),
 * so n choices share one prefill.  False if resources are short (it will
 * then prefill by itself). */
static bool fork_from(loom_engine *e, lm_sequence *child, const lm_sequence *parent) {
    if (e->running.n >= e->options.max_running) return false;
    if (request_running(e, child->request, NULL, 0, 0) >= request_share(e)) return false;
    if (!lm_sequence_reserve_blocks(child, blocks_for(e, parent->n_cached))) return false;
    if (lm_id_pool_take(&e->state_slots, 1, &child->state_slot, NULL) != LM_OK) return false;
    /* Full blocks are shared (neither writes them again); the partial
     * last one, which both go on writing, is copied. */
    int full = parent->n_cached / e->kv_block_size;
    for (int b = 0; b < full; b++) {
        child->blocks[b] = parent->blocks[b];
        lm_kv_blocks_hold(&e->kv_blocks, child->blocks[b]);
    }
    child->n_blocks = full;
    if (!ensure_blocks(e, child, parent->n_cached)) {
        release_resources(e, child);
        return false;
    }
    lm_model_copy_state(e->context, parent->state_slot, child->state_slot);
    for (int b = full; b < blocks_for(e, parent->n_cached); b++)
        lm_model_copy_block(e->context, parent->blocks[b], child->blocks[b]);
    child->n_cached = parent->n_cached;
    child->cached_tokens = parent->cached_tokens;
    child->looked_up = true;
    child->fork_parent = NULL;
    child->state = LM_SEQ_RUNNING;
    child->admit_order = ++e->admit_counter;
    seq_list_remove(&e->waiting, child);
    seq_list_push(&e->running, child);
    return true;
}

/* A grammar's mask on e->sample_row (before every sampler step: the
 * sampler's order comment).  The vocabulary trie is built once, for the
 * first sequence with a grammar; each sequence keeps its own state. */
static bool apply_grammar(loom_engine *e, lm_sequence *seq, lm_error *err) {
    if (!e->grammar_trie && lm_grammar_vocab_trie(e->tokenizer, e->vocab_size, &e->grammar_trie, err) != LM_OK)
        return false;
    if (!seq->grammar &&
        lm_sequence_grammar_create(seq->request->params.grammar, e->grammar_trie, &e->grammar_frames, &seq->grammar,
                                   err) != LM_OK)
        return false;
    seq->grammar->token_work = e->grammar_token_work;
    return lm_sequence_grammar_mask(seq->grammar, e->sample_row, e->vocab_size, seq->stop_ids, seq->n_stop_ids,
                                    err) == LM_OK;
}

void lm_engine_set_grammar_token_work(loom_engine *e, uint64_t units) { e->grammar_token_work = units; }

/* The drawn token joins seq: stop rules, grammar state, events.  Returns
 * false if the sequence finished. */
static bool accept_token(loom_engine *e, lm_sequence *seq, const lm_sample_result *result) {
    const loom_request_params *p = &seq->request->params;
    lm_error err = {0};
    int32_t token = result->token;
    lm_token_outcome outcome;
    if (lm_sequence_accept(seq, token, e->eos_ids, e->n_eos, e->max_model_len, &outcome, &err) != LM_OK) {
        finish(e, seq, LOOM_FINISH_ERROR, -1, -1, err.message);
        return false;
    }
    e->counters.generation_tokens++;
    if (seq->grammar && outcome.stop_token < 0) {
        bool done = false;
        uint64_t t0 = lm_engine_now_ns();
        lm_status accepted = lm_sequence_grammar_accept(seq->grammar, e->tokenizer, token, &done, &err);
        e->grammar_counters.ns += lm_engine_now_ns() - t0;
        if (accepted != LM_OK) {
            finish(e, seq, LOOM_FINISH_ERROR, -1, -1, err.message);
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
        finish(e, seq, outcome.reason, outcome.stop_token, outcome.stop_string, NULL);
        return false;
    }
    return true;
}

static lm_sample_context sample_context_of(const lm_sequence *seq) {
    return (lm_sample_context){.counts = &seq->counts,
                               .n_generated = lm_sequence_generated(seq),
                               .min_tokens = seq->request->params.min_tokens,
                               .stop_ids = seq->stop_ids,
                               .n_stop_ids = seq->n_stop_ids};
}

/* Whether seq's next draw needs its logits row on the host: anything but a
 * plain argmax (a grammar, sampling, penalties, logprobs), and the first
 * choice of a request of several (the others sample from its row). */
static bool needs_logits_row(const loom_engine *e, const lm_sequence *seq) {
    const loom_request_params *p = &seq->request->params;
    if (e->all_logits || p->grammar || (seq->choice == 0 && p->n > 1)) return true;
    lm_sample_context ctx = sample_context_of(seq);
    return !lm_sample_is_raw_argmax(&p->sampling, &ctx);
}

/* Plans seq's draw from logit row `row` on the device: its uniform taken
 * from the sequence's rng now (the draw is the next use of that rng), the
 * rng as it was kept to give back if the device needs no uniform.  False
 * (nothing changed) when the draw needs the row on the host. */
static bool plan_device_draw(loom_engine *e, lm_sequence *seq, int row) {
    const loom_request_params *p = &seq->request->params;
    if (!e->device_sampling || e->all_logits || p->grammar || (seq->choice == 0 && p->n > 1)) return false;
    lm_sample_context ctx = sample_context_of(seq);
    lm_rng before = seq->rng;
    double u = lm_rng_uniform(&seq->rng);
    if (!lm_sampler_device_row(&p->sampling, &ctx, u, &e->sample_rows[row], e->sample_entries,
                               LM_FORWARD_SAMPLE_ENTRIES, &e->n_sample_entries)) {
        seq->rng = before;
        return false;
    }
    e->rng_before[row] = before;
    e->any_device_draws = true;
    return true;
}

/* Which of the step's logit rows come back whole, and which are drawn on
 * the device (plan order: a verify's k + 1 rows, a sampling chunk's one
 * row). */
static void plan_logit_rows(loom_engine *e, int n) {
    int row = 0;
    e->any_device_draws = false;
    e->n_sample_entries = 0;
    for (int i = 0; i < n; i++) {
        int rows = e->plan[i].n_drafts > 0 ? e->plan[i].n_drafts + 1 : e->plan[i].wants_logits;
        lm_sequence *seq = e->plan[i].seq;
        bool whole = needs_logits_row(e, seq);
        for (int r = 0; r < rows; r++, row++) {
            bool drawn = whole && e->plan[i].n_drafts == 0 && plan_device_draw(e, seq, row);
            e->logits_wanted[row] = whole && !drawn;
            if (e->sample_rows && !drawn) e->sample_rows[row].mode = LM_SAMPLE_ROW_SKIP;
        }
    }
}

/* Samples the next token of seq from logit row `row` of the step, applies
 * the stop rules and posts the events.  Returns false if the sequence
 * finished. */
static bool sample_and_accept(loom_engine *e, lm_sequence *seq, int row) {
    int V = e->vocab_size;
    const loom_request_params *p = &seq->request->params;
    lm_error err = {0};
    lm_sample_result result = {0};
    lm_sample_context ctx = sample_context_of(seq);
    if (e->sample_rows && e->sample_rows[row].mode == LM_SAMPLE_ROW_DRAW) {
        /* drawn on the device; a draw that took no uniform (greedy, or
         * nothing left to sample) gives the rng back */
        if (!e->sample_drew[row]) seq->rng = e->rng_before[row];
        result.token = e->logit_argmax[row];
        return accept_token(e, seq, &result);
    }
    if (!e->logits_wanted[row]) {
        /* planned as a plain argmax; nothing a draw depends on changes
         * between planning and here but the output count, which can only
         * lift min_tokens' mask */
        if (needs_logits_row(e, seq)) {
            finish(e, seq, LOOM_FINISH_ERROR, -1, -1, "engine: a row's logits were left on the device");
            return false;
        }
        result.token = e->logit_argmax[row];
        return accept_token(e, seq, &result);
    }
    const lm_sample_result *drawn = lm_presampler_take(&e->presampler, seq, row);
    if (drawn) return accept_token(e, seq, drawn);
    memcpy(e->sample_row, e->logits + (size_t)V * (size_t)row, sizeof(float) * (size_t)V);
    if (p->grammar) {
        uint64_t t0 = lm_engine_now_ns();
        bool masked = apply_grammar(e, seq, &err);
        e->grammar_counters.ns += lm_engine_now_ns() - t0;
        e->grammar_counters.masks++;
        if (!masked) {
            finish(e, seq, LOOM_FINISH_ERROR, -1, -1, err.message);
            return false;
        }
    }
    if (lm_sample(&p->sampling, e->sample_row, V, &ctx, &seq->rng, &e->scratch, &result, &err) != LM_OK) {
        finish(e, seq, LOOM_FINISH_ERROR, -1, -1, err.message);
        return false;
    }
    return accept_token(e, seq, &result);
}

bool lm_engine_sample_and_accept(loom_engine *e, lm_sequence *seq, int logit_row) {
    return sample_and_accept(e, seq, logit_row);
}

/* The step's plain sampled rows (logits on the host, no grammar, not a
 * verify) drawn at once on the presampler's threads, before the results
 * are taken in plan order (row numbers as the loop below counts them). */
static void presample_step(loom_engine *e, int n) {
    if (!e->presampler.pool) return;
    int row = 0, jobs = 0;
    for (int i = 0; i < n; i++) {
        if (e->plan[i].n_drafts > 0) {
            row += e->plan[i].n_drafts + 1;
            continue;
        }
        if (!e->plan[i].wants_logits) continue;
        lm_sequence *seq = e->plan[i].seq;
        const loom_request_params *p = &seq->request->params;
        if (e->logits_wanted[row] && !p->grammar)
            e->presampler.jobs[jobs++] = (lm_presample_job){
                .owner = seq, .row = row, .params = &p->sampling, .ctx = sample_context_of(seq), .rng = &seq->rng};
        row++;
    }
    if (jobs >= 2) lm_presampler_run(&e->presampler, e->logits, jobs);
}

/* The StepBatch of a plan (host memory; the model uploads it). */
static lm_step_batch build_batch(loom_engine *e, int n) {
    int n_tokens = 0;
    bool any_rows = false;
    for (int i = 0; i < n; i++) {
        lm_sequence *seq = e->plan[i].seq;
        bool verify = e->plan[i].n_drafts > 0;
        e->step_seqs[i] = (lm_step_seq){.first = n_tokens,
                                        .n_new = e->plan[i].n_new,
                                        .n_cached = seq->n_cached,
                                        .state_slot = seq->state_slot,
                                        .block_table = seq->blocks,
                                        .n_blocks = seq->n_blocks,
                                        .all_logits = verify,
                                        .no_logits = !e->plan[i].wants_logits,
                                        .record_for_rollback = verify};
        for (int j = 0; j < e->plan[i].n_new; j++) {
            int pos = seq->n_cached + j;
            /* verify rows: the pending token, then the drafts */
            e->step_tokens[n_tokens] = j == 0 || !verify ? seq->tokens[pos] : seq->drafts[j - 1];
            lm_engine_position(seq, pos, e->step_positions + 3 * (size_t)n_tokens);
            e->step_input_rows[n_tokens] = lm_engine_input_row(seq, pos);
            any_rows |= e->step_input_rows[n_tokens] != NULL;
            n_tokens++;
        }
        if (seq->n_cached < seq->n_prompt)
            e->counters.prompt_tokens += (uint64_t)(e->plan[i].n_new < seq->n_prompt - seq->n_cached
                                                        ? e->plan[i].n_new
                                                        : seq->n_prompt - seq->n_cached);
    }
    return (lm_step_batch){.n_tokens = n_tokens, .tokens = e->step_tokens,
                           .positions = e->step_positions,
                           .input_rows = any_rows ? e->step_input_rows : NULL,
                           .n_seqs = n, .seqs = e->step_seqs};
}

/* The rows of a planned sequence write keys and values at positions
 * [n_cached, n_cached + n_new): never into a block another sequence reads
 * or the prefix cache holds.  A sequence that would is a bug: it fails
 * rather than corrupting what others share.  Returns the plan's length. */
static int keep_writable(loom_engine *e, int n) {
    int kept = 0;
    for (int i = 0; i < n; i++) {
        lm_sequence *seq = e->plan[i].seq;
        int first = seq->n_cached / e->kv_block_size;
        int last = (seq->n_cached + e->plan[i].n_new - 1) / e->kv_block_size;
        bool ok = true;
        for (int b = first; b <= last && b < seq->n_blocks; b++) ok &= lm_kv_blocks_writable(&e->kv_blocks, seq->blocks[b]);
        if (!ok) {
            lm_engine_finish_error(e, seq, "internal error: a step would write into a shared KV block");
            continue;
        }
        e->plan[kept++] = e->plan[i];
    }
    return kept;
}

/* One scheduler step: returns false when there was nothing to run. */
static bool step(loom_engine *e) {
    /* Speculation learns what a step of this many rows costs: the time
     * from one step's start to the next one's (scheduling, forward,
     * sampling, rollbacks, events, the engine loop), less the MTP head's
     * call, timed apart (spec_control.h); not across an idle wait. */
    if (e->spec_k > 0) {
        lm_timed_work work = {.phase = LM_TIMED_STEP, .end = e->spec_timing, .rows = e->spec_rows};
        uint64_t now = lm_spec_now(&e->spec, &work);
        if (e->spec_timing)
            lm_spec_observe_forward(&e->spec, e->spec_rows, (double)(now - e->spec_start) * 1e-9 - e->spec_head_seconds);
        e->spec_start = now;
        e->spec_timing = false;
        e->spec_head_seconds = 0;
    }
    cancel_requested(e);
    int n = schedule(e, e->plan);
    if (n == 0) return false;
    n = keep_writable(e, n);
    n = lm_engine_prepare_images(e, n);
    if (n == 0) return true; /* every planned sequence failed (an image, a shared block) */

    lm_step_batch batch = build_batch(e, n);
    lm_error err = {0};
    plan_logit_rows(e, n);
    lm_forward_out out = {.logits = e->logits, .argmax = e->logit_argmax, .logits_wanted = e->logits_wanted,
                          .sample_rows = e->any_device_draws ? e->sample_rows : NULL,
                          .sample_entries = e->sample_entries, .n_sample_entries = e->n_sample_entries,
                          .drew = e->sample_drew};
    if (e->spec_k > 0) {
        lm_spec_step_begin(&e->spec);
        /* The next step without drafts, as the controller sees it: a decode
         * row for each sequence that samples now, and the prompt chunks
         * that do not end now going on as large. */
        int chunks = 0, sampled = 0;
        bool decode = true; /* every row a decode or verify row: no prompt chunk */
        for (int i = 0; i < n; i++) {
            sampled += e->plan[i].wants_logits;
            if (!e->plan[i].wants_logits) chunks += e->plan[i].n_new;
            decode &= e->plan[i].n_new == 1 + e->plan[i].n_drafts;
        }
        e->spec_base_rows = sampled + chunks;
        e->spec_base_tokens = sampled;
        e->spec_rows = decode ? batch.n_tokens : 0;
    }
    lm_status st = lm_model_forward(e->context, &batch, &out, &err);
    e->counters.steps++;
    if (st != LM_OK) {
        for (int i = 0; i < n; i++) finish(e, e->plan[i].seq, LOOM_FINISH_ERROR, -1, -1, err.message);
        settle_retiring(e, false);
        return true;
    }
    presample_step(e, n);
    int row = 0;
    e->n_catch_up = 0;
    e->n_rollbacks = 0;
    for (int i = 0; i < n; i++) {
        lm_sequence *seq = e->plan[i].seq;
        int n_before = seq->n_cached;
        int first_row = e->step_seqs[i].first;
        if (e->plan[i].n_drafts > 0) {
            int kept = lm_engine_verify_drafts(e, seq, row, e->plan[i].n_drafts);
            row += e->plan[i].n_drafts + 1;
            if (kept > 0) {
                lm_engine_queue_catch_up(e, seq, n_before, kept, first_row);
                lm_prefix_cache_progress(e, seq, false);
            }
            continue;
        }
        seq->n_cached += e->plan[i].n_new;
        if (!e->plan[i].wants_logits) {
            lm_engine_queue_catch_up(e, seq, n_before, e->plan[i].n_new, first_row);
            lm_prefix_cache_progress(e, seq, true);
            continue;
        }
        lm_prefix_cache_progress(e, seq, false);
        int logit_row = row++;
        bool prompt_done = seq->n_tokens == seq->n_prompt;
        /* Later choices of the request copy this prompt state and sample
         * from the same logits. */
        if (prompt_done && seq->choice == 0)
            for (int w = 0; w < e->waiting.n;) {
                lm_sequence *child = e->waiting.items[w];
                if (child->fork_parent == seq) {
                    if (fork_from(e, child, seq)) {
                        sample_and_accept(e, child, logit_row);
                        continue; /* the child left the waiting list */
                    }
                    child->fork_parent = NULL; /* no room now: it will prefill by itself */
                }
                w++;
            }
        if (sample_and_accept(e, seq, logit_row))
            lm_engine_queue_catch_up(e, seq, n_before, e->plan[i].n_new, first_row);
    }
    bool states_ok = lm_engine_apply_rollbacks(e);
    lm_engine_catch_up_and_draft(e);
    settle_retiring(e, states_ok);
    /* The next step's start ends this one; steps with prompt chunks are not
     * measured (their rows cost differently: most need no logits). */
    e->spec_timing = e->spec_k > 0 && e->spec_rows > 0;
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
                !seq_list_push(&e->waiting, seq)) {
                loom_event ev = {.type = LOOM_EVENT_ERROR, .choice = c, .finish_reason = LOOM_FINISH_ERROR,
                                 .error = seq ? "out of memory" : err.message};
                lm_request_push(r, &ev);
                lm_sequence_free(seq);
                lm_request_unref(r);
                continue;
            }
            if (c == 0) parent = seq;
            else seq->fork_parent = parent;
            seq->speculate = e->spec_k > 0 && r->params.n == 1 && !r->params.no_speculation;
            if (seq->speculate) lm_spec_seq_start(&e->spec, &seq->spec_ctl);
        }
    }
    e->n_inbox = 0;
}

static void publish_stats(loom_engine *e) {
    e->stats.running = e->running.n;
    e->stats.waiting = e->waiting.n + e->n_inbox;
    e->stats.kv_blocks_total = e->kv_blocks.n_blocks;
    e->stats.kv_blocks_free = lm_kv_blocks_available(&e->kv_blocks); /* held by no sequence */
    e->stats.kv_blocks_cached = e->kv_blocks.n_idle;
    e->stats.prefix_caching = e->prefix_on;
    e->stats.prefix_cache_queries = e->prefix_counters.queries;
    e->stats.prefix_cache_hits = e->prefix_counters.hits;
    e->stats.snapshots_total = e->prefix_has_state ? e->snapshots.capacity : 0;
    e->stats.snapshots_used = e->prefix_has_state ? e->snapshots.n_used : 0;
    e->stats.snapshot_bytes_total = (uint64_t)e->stats.snapshots_total * e->snapshot_bytes;
    e->stats.snapshot_bytes_used = (uint64_t)e->stats.snapshots_used * e->snapshot_bytes;
    e->stats.state_slots_total = e->state_slots.n_ids;
    e->stats.state_slots_free = e->state_slots.n_free;
    e->stats.prompt_tokens = e->counters.prompt_tokens;
    e->stats.generation_tokens = e->counters.generation_tokens;
    e->stats.requests_finished = e->counters.requests_finished;
    e->stats.preemptions = e->counters.preemptions;
    e->stats.steps = e->counters.steps;
    e->stats.spec_drafted_tokens = e->spec_counters.drafted;
    e->stats.spec_accepted_tokens = e->spec_counters.accepted;
    e->stats.spec_verify_steps = e->spec_counters.verify_steps;
    e->stats.grammar_masks = e->grammar_counters.masks;
    e->stats.grammar_ns = e->grammar_counters.ns;
    e->stats.speculative_tokens = e->spec_k;
    e->stats.images_encoded = e->images_encoded;
    e->stats.image_cache_hits = e->image_cache.hits;
    e->stats.image_cache_bytes = e->image_cache.used;
}

/* loom_engine_reset_prefix_cache's requests, answered under the mutex. */
static void answer_resets(loom_engine *e) {
    if (e->resets_done == e->resets_asked) return;
    if (e->prefix_on) lm_prefix_cache_reset(e);
    e->resets_done = e->resets_asked;
    publish_stats(e);
    pthread_cond_broadcast(&e->reset_done);
}

static void *engine_main(void *arg) {
    loom_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mutex);
        if (!e->held) take_inbox(e);
        answer_resets(e);
        publish_stats(e);
        while (!e->shutdown && (e->held || (e->n_inbox == 0 && e->running.n == 0 &&
                                            e->waiting.n == 0 && !e->has_work))) {
            pthread_cond_wait(&e->wake, &e->mutex);
            e->spec_timing = false; /* idle time is no step's cost */
            if (!e->held) take_inbox(e);
            answer_resets(e);
        }
        e->has_work = false;
        bool stopping = e->shutdown;
        publish_stats(e);
        pthread_mutex_unlock(&e->mutex);
        if (stopping) break;
        if (!step(e) && e->running.n == 0) {
            /* Waiting sequences that cannot be admitted with nothing running
             * would wait forever: they need more than the whole cache. */
            for (int i = 0; i < e->waiting.n;) {
                lm_sequence *seq = e->waiting.items[i];
                if (seq->fork_parent) { i++; continue; }
                finish(e, seq, LOOM_FINISH_ERROR, -1, -1,
                       "the request needs more KV cache or state slots than the engine has");
            }
        }
    }
    while (e->running.n) finish(e, e->running.items[0], LOOM_FINISH_CANCELLED, -1, -1, NULL);
    while (e->waiting.n) finish(e, e->waiting.items[0], LOOM_FINISH_CANCELLED, -1, -1, NULL);
    pthread_mutex_lock(&e->mutex);
    take_inbox(e);
    e->resets_done = e->resets_asked; /* nobody waits on a stopped engine */
    pthread_cond_broadcast(&e->reset_done);
    pthread_mutex_unlock(&e->mutex);
    while (e->waiting.n) finish(e, e->waiting.items[0], LOOM_FINISH_CANCELLED, -1, -1, NULL);
    return NULL;
}

void lm_engine_hold(loom_engine *e, bool held) {
    pthread_mutex_lock(&e->mutex);
    e->held = held;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mutex);
}

/* ------------------------------------------------------------ public API */

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

static int report(lm_status st, const char *message, char *error, size_t size) {
    if (error && size) snprintf(error, size, "%s", message);
    return (int)st;
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
    int one = blocks_for(e, e->max_model_len + LM_MAX_SPECULATIVE + 1);
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
        int fits = (int)blocks * e->kv_block_size - LM_MAX_SPECULATIVE - 1;
        if (fits >= e->kv_block_size) {
            snprintf(e->max_model_len_note, sizeof e->max_model_len_note,
                     "the default max model length %d was lowered to %d: --gpu-memory-utilization %.2f leaves room "
                     "for no more after the weights; raise it, or give --max-model-len", e->max_model_len, fits, util);
            e->max_model_len = fits;
            one = blocks_for(e, e->max_model_len + LM_MAX_SPECULATIVE + 1);
        }
    }
    if (blocks < one)
        return lm_fail(err, LM_ERR_NOMEM,
                       "--gpu-memory-utilization %.2f of %.1f GiB leaves room for %.0f tokens of KV cache "
                       "after the weights (%.1f GiB in use); one sequence of --max-model-len %d needs %d: raise "
                       "--gpu-memory-utilization or lower --max-model-len",
                       util, (double)total / (1 << 30), blocks > 0 ? blocks * e->kv_block_size : 0.0,
                       (double)(total - free0) / (1 << 30), e->max_model_len, one * e->kv_block_size);
    if (blocks > (1 << 24)) blocks = 1 << 24;
    context->kv_blocks = (int)blocks;
    context->max_blocks_per_seq = one < context->kv_blocks ? one : context->kv_blocks;
    fprintf(stderr, "loom: KV cache: %lld tokens (%.1f GiB) in %.0f%% of the card's %.1f GiB\n",
            (long long)context->kv_blocks * e->kv_block_size, blocks * per_block / (1 << 30), util * 100,
            (double)total / (1 << 30));
    return LM_OK;
}

int loom_engine_create(const loom_engine_options *options, loom_engine **out, char *error,
                       size_t error_size) {
    loom_engine_options o = *options;
    loom_engine_options defaults;
    loom_engine_options_default(&defaults);
    if (o.kv_block_size <= 0) o.kv_block_size = defaults.kv_block_size;
    if (o.max_running <= 0) o.max_running = defaults.max_running;
    if (o.max_batch_tokens <= 0) o.max_batch_tokens = loom_default_batch_tokens(o.backend);
    if (o.max_waiting <= 0) o.max_waiting = defaults.max_waiting;
    if (o.kv_block_size > 4096 || o.max_running > 4096 || o.max_batch_tokens > (1 << 20) ||
        o.speculative_tokens < 0 || o.speculative_tokens > LM_MAX_SPECULATIVE || o.tensor_parallel_size < 0 ||
        o.tensor_parallel_size > LM_COMM_MAX_RANKS)
        return report(LM_ERR_INVALID, "engine options out of range", error, error_size);

    loom_engine *e = calloc(1, sizeof *e);
    if (!e) return report(LM_ERR_NOMEM, "out of memory", error, error_size);
    e->options = o;
    e->grammar_token_work = LM_GRAMMAR_TOKEN_WORK;
    lm_error err = {0};
    lm_status st;
    if ((unsigned)o.mtp_norms > LOOM_MTP_NORMS_SHIFTED) {
        free(e);
        return report(LM_ERR_INVALID, "unknown MTP norm convention", error, error_size);
    }
    /* loom_engine_options' progress callback has lm_progress's shape; the
     * engine holds it (the weights keep a pointer) and silences it once
     * the load is done. */
    e->load_progress = (lm_progress){.add = o.load_progress, .ctx = o.load_progress_ctx};
    st = lm_backend_create(o.backend ? o.backend : "cpu", o.threads, &e->backend, &err);
    if (st == LM_OK && o.compute_dtype) st = lm_backend_set_compute(e->backend, o.compute_dtype, &err);
    if (st == LM_OK) {
        /* loom_mtp_norms and lm_mtp_norms list the conventions in the same order. */
        bool int8 = o.quantize && strcmp(o.quantize, "int8") == 0;
        lm_model_load_options load = {.mode = o.mmap_weights ? LM_LOAD_MMAP : LM_LOAD_READ,
                                      .mtp_norms = (lm_mtp_norms)o.mtp_norms,
                                      .quantize_int8 = int8,
                                      .random_seed = o.random_seed,
                                      .progress = o.load_progress ? &e->load_progress : NULL};
        if (o.quantize && !int8 && strcmp(o.quantize, "none") != 0)
            st = lm_fail(&err, LM_ERR_INVALID, "unknown weight quantization '%.40s' (none or int8)", o.quantize);
        else if (o.tensor_parallel_size > 1) {
            load.random_weights = o.random_weights;
            load.random_seed = o.random_seed;
            load.expert_parallel = o.expert_parallel;
            st = lm_tensor_parallel_open(o.random_weights ? NULL : o.model_dir, o.config_path, &load, e->backend,
                                         o.tensor_parallel_size, &e->model, &err);
        } else if (o.random_weights)
            st = o.config_path ? lm_model_open_random_with(o.config_path, &load, e->backend, &e->model, &err)
                               : lm_fail(&err, LM_ERR_INVALID, "random weights need a config path");
        else if (!o.model_dir)
            st = lm_fail(&err, LM_ERR_INVALID, "no model folder given");
        else
            st = lm_model_open(o.model_dir, &load, e->backend, &e->model, &err);
    }
    e->load_progress.add = NULL;
    if (st != LM_OK) goto fail;
    const lm_model_info *info = lm_model_describe(e->model);
    e->vocab_size = info->vocab_size;
    if (!o.random_weights) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer.json", o.model_dir);
        FILE *f = fopen(path, "rb");
        if (f) {
            fclose(f);
            st = lm_tokenizer_load(o.model_dir, &e->tokenizer, &err);
            if (st != LM_OK) goto fail;
        }
    }
    for (int i = 0; i < info->n_eos && e->n_eos < LM_ENGINE_MAX_EOS; i++) e->eos_ids[e->n_eos++] = info->eos_ids[i];
    if (e->tokenizer && lm_tokenizer_eos_id(e->tokenizer) >= 0 && e->n_eos < LM_ENGINE_MAX_EOS) {
        int32_t id = lm_tokenizer_eos_id(e->tokenizer);
        bool known = false;
        for (int i = 0; i < e->n_eos; i++) known |= e->eos_ids[i] == id;
        if (!known) e->eos_ids[e->n_eos++] = id;
    }
    /* The context limit: as asked, else the one default (loom.h), lowered
     * (and said) where an explicit pool cannot hold one sequence of it; an
     * explicit limit the pool cannot hold is refused with both numbers. */
    e->max_model_len_given = o.max_model_len > 0;
    e->max_model_len = e->max_model_len_given ? o.max_model_len : loom_default_max_model_len(info->max_position_embeddings);
    if (o.kv_cache_tokens > 0 && o.kv_cache_tokens < e->max_model_len) {
        if (e->max_model_len_given) {
            st = lm_fail(&err, LM_ERR_INVALID,
                         "max model length %d needs %d tokens of KV cache for one sequence, and the KV pool "
                         "(--kv-cache-tokens) holds %lld: raise --kv-cache-tokens to at least %d, or lower "
                         "--max-model-len to at most %lld",
                         e->max_model_len, e->max_model_len, (long long)o.kv_cache_tokens, e->max_model_len,
                         (long long)o.kv_cache_tokens);
            goto fail;
        }
        snprintf(e->max_model_len_note, sizeof e->max_model_len_note,
                 "the default max model length %d was lowered to %lld: the KV pool (--kv-cache-tokens %lld) holds "
                 "no more for one sequence; raise --kv-cache-tokens for longer ones",
                 e->max_model_len, (long long)o.kv_cache_tokens, (long long)o.kv_cache_tokens);
        e->max_model_len = (int)o.kv_cache_tokens;
    }
    int64_t kv_tokens = o.kv_cache_tokens > 0 ? o.kv_cache_tokens : (int64_t)e->max_model_len * 4;
    int n_blocks = (int)((kv_tokens + o.kv_block_size - 1) / o.kv_block_size);
    int V = info->vocab_size, B = o.max_batch_tokens;
    int max_seqs = o.max_running < B ? o.max_running : B; /* sequences of one step */
    if (o.speculative_tokens > 0 && lm_model_can_draft(e->model))
        e->spec_k = o.speculative_tokens < LM_MAX_SPECULATIVE ? o.speculative_tokens : LM_MAX_SPECULATIVE;
    /* When asked for but off, loom_engine_describe says why. */
    /* Logit rows: one per sequence, or k+1 for a speculative verify. */
    int logit_rows = max_seqs * (1 + e->spec_k);
    if (logit_rows > B) logit_rows = B;
    if (e->spec_k > 0) {
        st = lm_spec_control_init(&e->spec, e->spec_k, B, o.max_running, &err);
        e->spec_candidates = calloc((size_t)o.max_running, sizeof *e->spec_candidates);
        if (st == LM_OK && !e->spec_candidates) st = lm_fail(&err, LM_ERR_NOMEM, "out of memory");
        if (st != LM_OK) goto fail;
    }
    e->kv_block_size = o.kv_block_size;
    lm_context_options context = {.kv_block_size = o.kv_block_size,
                                  .kv_blocks = n_blocks,
                                  .state_slots = o.max_running,
                                  .max_step_tokens = B,
                                  .max_step_seqs = max_seqs,
                                  .max_blocks_per_seq = blocks_for(e, e->max_model_len + LM_MAX_SPECULATIVE + 1),
                                  .max_logit_rows = logit_rows,
                                  .speculative_tokens = e->spec_k};
    if (context.max_blocks_per_seq > n_blocks) context.max_blocks_per_seq = n_blocks;
    st = lm_engine_images_init(e, info, &context, &err);
    if (st == LM_OK) st = lm_prefix_cache_init(e, info, &context, &err);
    if (st == LM_OK && o.gpu_memory_utilization > 0) {
        st = size_pool_by_memory(e, &context, &err);
        n_blocks = context.kv_blocks;
    }
    if (st != LM_OK) goto fail;
    st = lm_model_context_create(e->model, &context, &e->context, &err);
    if (st == LM_OK) st = lm_kv_blocks_init(&e->kv_blocks, n_blocks, o.kv_block_size, e->prefix_on, &err);
    if (st == LM_OK) st = lm_id_pool_init(&e->state_slots, o.max_running, "state slots", &err);
    if (st != LM_OK) goto fail;
    e->plan = calloc((size_t)max_seqs, sizeof *e->plan);
    e->step_seqs = calloc((size_t)max_seqs, sizeof *e->step_seqs);
    e->step_tokens = malloc(sizeof(int32_t) * (size_t)B);
    e->step_positions = malloc(sizeof(int32_t) * 3 * (size_t)B);
    e->step_input_rows = calloc((size_t)B, sizeof *e->step_input_rows);
    e->logits = malloc(sizeof(float) * (size_t)V * (size_t)logit_rows);
    e->sample_row = malloc(sizeof(float) * (size_t)V);
    e->logit_argmax = malloc(sizeof(int32_t) * (size_t)logit_rows);
    e->logits_wanted = malloc(sizeof(bool) * (size_t)logit_rows);
    const char *all_logits = getenv("LOOM_DOWNLOAD_ALL_LOGITS");
    e->all_logits = all_logits && strcmp(all_logits, "1") == 0;
    e->inbox = malloc(sizeof(*e->inbox) * (size_t)o.max_waiting);
    e->preempted = malloc(sizeof(*e->preempted) * (size_t)o.max_running);
    e->too_large = malloc(sizeof(*e->too_large) * (size_t)o.max_running);
    e->catch_up = calloc((size_t)max_seqs, sizeof *e->catch_up);
    e->catch_up_seq = calloc((size_t)max_seqs, sizeof *e->catch_up_seq);
    e->rollbacks = calloc((size_t)max_seqs, sizeof *e->rollbacks);
    if (!e->plan || !e->step_seqs || !e->step_tokens || !e->step_positions || !e->step_input_rows || !e->logits ||
        !e->sample_row || !e->logit_argmax || !e->logits_wanted || !e->inbox || !e->preempted || !e->too_large || !e->catch_up ||
        !e->catch_up_seq || !e->rollbacks) {
        st = lm_fail(&err, LM_ERR_NOMEM, "out of memory for the engine's step buffers");
        goto fail;
    }
    {
        const char *env = getenv("LOOM_DEVICE_SAMPLING");
        bool wanted = env ? strcmp(env, "0") != 0 : !lm_backend_is_host(e->backend);
        e->device_sampling = wanted && lm_backend_samples_rows(e->backend);
    }
    if (e->device_sampling) {
        e->sample_rows = calloc((size_t)logit_rows, sizeof *e->sample_rows);
        e->sample_entries = malloc(sizeof *e->sample_entries * LM_FORWARD_SAMPLE_ENTRIES);
        e->sample_drew = calloc((size_t)logit_rows, sizeof *e->sample_drew);
        e->rng_before = calloc((size_t)logit_rows, sizeof *e->rng_before);
        if (!e->sample_rows || !e->sample_entries || !e->sample_drew || !e->rng_before) {
            st = lm_fail(&err, LM_ERR_NOMEM, "out of memory for the engine's device draws");
            goto fail;
        }
    }
    st = lm_sampler_scratch_init(&e->scratch, V, &err);
    if (st != LM_OK) goto fail;
    e->scratch_open = true;
    {
        /* With a device backend the host's cores are free while the rows
         * are sampled; a host backend's pool would compete with its own. */
        const char *env = getenv("LOOM_SAMPLE_THREADS");
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int threads = env ? atoi(env) : lm_backend_is_host(e->backend) ? 0 : (int)(cores < 16 ? cores : 16);
        st = lm_presampler_init(&e->presampler, threads, V, logit_rows, &err);
        if (st != LM_OK) goto fail;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    e->entropy_seed = o.seed ? o.seed : (uint64_t)now.tv_nsec ^ ((uint64_t)now.tv_sec << 32) ^ (uint64_t)(uintptr_t)e;
    lm_prefix_cache_start(e);
    pthread_mutex_init(&e->mutex, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_cond_init(&e->reset_done, NULL);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        pthread_mutex_destroy(&e->mutex);
        pthread_cond_destroy(&e->wake);
        pthread_cond_destroy(&e->reset_done);
        st = lm_fail(&err, LM_ERR_INTERNAL, "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = true;
    *out = e;
    return LOOM_OK;
fail:
    loom_engine_destroy(e);
    return report(st, err.message, error, error_size);
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
    if (e->scratch_open) lm_sampler_scratch_free(&e->scratch);
    lm_presampler_free(&e->presampler);
    lm_model_context_destroy(e->context);
    lm_prefix_cache_free(e);
    lm_kv_blocks_free(&e->kv_blocks);
    lm_id_pool_free(&e->state_slots);
    lm_grammar_frame_cache_free(&e->grammar_frames);
    lm_token_trie_free(e->grammar_trie);
    if (e->tokenizer) lm_tokenizer_free(e->tokenizer);
    lm_model_free(e->model);
    lm_backend_destroy(e->backend);
    free(e->running.items);
    free(e->waiting.items);
    free(e->plan);
    free(e->step_seqs);
    free(e->step_tokens);
    free(e->step_positions);
    free(e->step_input_rows);
    lm_image_cache_free(&e->image_cache);
    free(e->logits);
    free(e->logit_argmax);
    free(e->logits_wanted);
    free(e->sample_rows);
    free(e->sample_entries);
    free(e->sample_drew);
    free(e->rng_before);
    free(e->sample_row);
    free(e->inbox);
    free(e->preempted);
    free(e->too_large);
    free(e->catch_up);
    free(e->catch_up_seq);
    free(e->rollbacks);
    lm_spec_control_free(&e->spec);
    free(e->spec_candidates);
    free(e);
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
    if (st != LM_OK) return report(st, err.message, error, error_size);
    loom_request *r;
    st = lm_request_create(params, &r, &err);
    if (st != LM_OK) return report(st, err.message, error, error_size);
    /* Images: decoded and cut into patches here, in the caller's thread. */
    st = lm_request_attach_images(r, params, &lm_model_describe(e->model)->vision,
                                  e->images_on ? &e->image_processor : NULL, e->max_image_patches,
                                  &e->image_limits, e->max_model_len, &err);
    if (st == LM_OK) st = fit_context(e, r, params, &err);
    if (st != LM_OK) {
        r->refs = 1;
        lm_request_unref(r);
        return report(st, err.message, error, error_size);
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
        return report((lm_status)status,
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
        return report((lm_status)LOOM_ERR_SHUTDOWN, "the engine is shutting down", error, error_size);
    }
    uint64_t ticket = ++e->resets_asked;
    pthread_cond_signal(&e->wake);
    while (e->resets_done < ticket) pthread_cond_wait(&e->reset_done, &e->mutex);
    pthread_mutex_unlock(&e->mutex);
    return LOOM_OK;
}

int loom_engine_vocab_size(const loom_engine *e) { return e->vocab_size; }
