/* The scheduler (scheduler.h): the queues, each step's plan, admission,
 * fairness, preemption and the fork of a request's later choices. */
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"

/* ------------------------------------------------------------ queues */

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

lm_status lm_scheduler_init(lm_scheduler *s, int max_running, int max_batch_tokens, lm_error *err) {
    memset(s, 0, sizeof *s);
    if (max_running <= 0 || max_batch_tokens <= 0)
        return lm_fail(err, LM_ERR_INVALID, "the scheduler needs a running sequence and a token per step");
    s->max_running = max_running;
    s->max_batch_tokens = max_batch_tokens;
    return LM_OK;
}

void lm_scheduler_free(lm_scheduler *s) {
    free(s->running.items);
    free(s->waiting.items);
    free(s->retiring.items);
    memset(s, 0, sizeof *s);
}

lm_status lm_step_plan_init(lm_step_plan *plan, int max_seqs, int max_running, lm_error *err) {
    memset(plan, 0, sizeof *plan);
    plan->max_seqs = max_seqs;
    plan->entries = calloc((size_t)max_seqs, sizeof *plan->entries);
    plan->preempted = malloc(sizeof *plan->preempted * (size_t)max_running);
    plan->too_large = malloc(sizeof *plan->too_large * (size_t)max_running);
    if (!plan->entries || !plan->preempted || !plan->too_large)
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the step plan");
    return LM_OK;
}

void lm_step_plan_free(lm_step_plan *plan) {
    free(plan->entries);
    free(plan->preempted);
    free(plan->too_large);
    memset(plan, 0, sizeof *plan);
}

int lm_scheduler_n_running(const lm_scheduler *s) { return s->running.n; }
int lm_scheduler_n_waiting(const lm_scheduler *s) { return s->waiting.n; }
lm_sequence *lm_scheduler_running(const lm_scheduler *s, int i) { return s->running.items[i]; }
lm_sequence *lm_scheduler_waiting(const lm_scheduler *s, int i) { return s->waiting.items[i]; }

bool lm_scheduler_add(lm_scheduler *s, lm_sequence *seq) { return seq_list_push(&s->waiting, seq); }

void lm_scheduler_remove(lm_scheduler *s, lm_sequence *seq) {
    if (seq->state == LM_SEQ_RUNNING) seq_list_remove(&s->running, seq);
    else seq_list_remove(&s->waiting, seq);
    /* Choices still waiting to fork from this one now prefill on their own. */
    for (int i = 0; i < s->waiting.n; i++)
        if (s->waiting.items[i]->fork_parent == seq) s->waiting.items[i]->fork_parent = NULL;
}

bool lm_scheduler_retire(lm_scheduler *s, lm_sequence *seq) { return seq_list_push(&s->retiring, seq); }
int lm_scheduler_n_retiring(const lm_scheduler *s) { return s->retiring.n; }
lm_sequence *lm_scheduler_retiring(const lm_scheduler *s, int i) { return s->retiring.items[i]; }
void lm_scheduler_clear_retiring(lm_scheduler *s) { s->retiring.n = 0; }

/* ------------------------------------------------------------ planning */

static bool in_plan(const lm_step_plan *plan, const lm_sequence *seq) {
    for (int k = 0; k < plan->n; k++)
        if (plan->entries[k].seq == seq) return true;
    return false;
}

/* Preemption by recompute: the caches go back to the pools now, the tokens
 * stay; the sequence moves to the front of the queue when the running
 * half of the plan ends (settle_preempted) and re-prefills everything
 * later. */
static void preempt(lm_scheduler *s, lm_cache_manager *cm, lm_step_plan *plan, lm_sequence *seq) {
    lm_prefix_cache_retire(cm, seq); /* its caches are consistent between steps: resume there */
    lm_cache_release(cm, seq);
    seq->n_drafts = 0;
    seq->state = LM_SEQ_PREEMPTED;
    plan->preempted[plan->n_preempted++] = seq;
    s->preemptions++;
}

/* The newest running sequence that is neither `seq` nor planned already. */
static lm_sequence *preemption_victim(const lm_scheduler *s, const lm_step_plan *plan, const lm_sequence *seq) {
    for (int j = s->running.n - 1; j >= 0; j--) {
        lm_sequence *cand = s->running.items[j];
        if (cand != seq && cand->state == LM_SEQ_RUNNING && !in_plan(plan, cand)) return cand;
    }
    return NULL;
}

/* The running list is only read while the plan is made; preemptions are
 * applied here, after it, and the sequences too large to run go back to
 * being running ones (still in the list) for the engine to finish. */
static void settle_preempted(lm_scheduler *s, lm_step_plan *plan) {
    for (int i = 0; i < plan->n_preempted; i++) {
        lm_sequence *seq = plan->preempted[i];
        seq_list_remove(&s->running, seq);
        seq->state = LM_SEQ_WAITING;
        if (!seq_list_push_front(&s->waiting, seq)) seq_list_push(&s->waiting, seq);
    }
    for (int i = 0; i < plan->n_too_large; i++) plan->too_large[i]->state = LM_SEQ_RUNNING;
}

/* Plans the running sequences: decode tokens first (pass 0) so a long
 * prompt never starves the streams already generating, then prompt chunks
 * (pass 1), in admission order, within the token budget. */
void lm_scheduler_plan_running(lm_scheduler *s, lm_cache_manager *cm, lm_step_plan *plan) {
    plan->n = plan->n_preempted = plan->n_too_large = 0;
    plan->budget = s->max_batch_tokens;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < s->running.n && plan->budget > 0; i++) {
            lm_sequence *seq = s->running.items[i];
            if (seq->state != LM_SEQ_RUNNING) continue; /* preempted in this plan */
            int need = seq->n_tokens - seq->n_cached;
            if ((pass == 0) != (need == 1)) continue;
            /* A speculating sequence verifies its pending token and its
             * drafts in one go, when the budget and blocks allow; else the
             * drafts are dropped. */
            int drafts = need == 1 ? seq->n_drafts : 0;
            if (drafts > 0 &&
                (1 + drafts > plan->budget || !lm_cache_ensure_blocks(cm, seq, seq->n_cached + 1 + drafts)))
                drafts = 0;
            seq->n_drafts = drafts;
            need += drafts;
            int take = need < plan->budget ? need : plan->budget;
            if (drafts == 0) take = lm_prefix_cache_chunk(cm, seq, take);
            while (!lm_cache_ensure_blocks(cm, seq, seq->n_cached + take)) {
                lm_sequence *victim = preemption_victim(s, plan, seq);
                if (!victim) break;
                preempt(s, cm, plan, victim);
            }
            if (seq->n_blocks < lm_cache_blocks_for(cm, seq->n_cached + take)) {
                /* Nothing left to preempt: with nothing planned either, it
                 * cannot fit even alone. */
                if (plan->n == 0) {
                    lm_cache_release(cm, seq);
                    seq->state = LM_SEQ_PREEMPTED; /* out of this plan */
                    plan->too_large[plan->n_too_large++] = seq;
                }
                continue;
            }
            plan->entries[plan->n++] = (lm_plan_entry){seq, take, seq->n_cached + take >= seq->n_tokens, drafts};
            plan->budget -= take;
        }
    }
    settle_preempted(s, plan);
}

/* Fairness: one request holds at most half the state slots (at least one)
 * at once, so a request of n = 64 choices leaves room for the next
 * client's, whose first token then comes while the 64 generate; its other
 * choices start as its first ones finish.  (ARCHITECTURE.md, "Fairness".) */
static int request_share(const lm_scheduler *s) {
    int half = (s->max_running + 1) / 2;
    return half > 0 ? half : 1;
}

/* The request's sequences running now, and those admitted in this plan
 * (when there is one). */
static int request_running(const lm_scheduler *s, const loom_request *r, const lm_step_plan *plan) {
    int count = 0;
    for (int i = 0; i < s->running.n; i++) count += s->running.items[i]->request == r;
    if (plan)
        for (int k = plan->first_admitted; k < plan->n; k++) count += plan->entries[k].seq->request == r;
    return count;
}

/* Admits waiting sequences (in queue order) while a slot, blocks and budget
 * last; the admitted move to the running list after the loop. */
void lm_scheduler_plan_admissions(lm_scheduler *s, lm_cache_manager *cm, lm_step_plan *plan) {
    plan->first_admitted = plan->n;
    for (int i = 0; i < s->waiting.n && plan->budget > 0; i++) {
        lm_sequence *seq = s->waiting.items[i];
        if (seq->fork_parent) continue; /* waits for choice 0's prompt */
        if (!lm_cache_slot_free(cm)) break;
        if (s->running.n + (plan->n - plan->first_admitted) >= s->max_running) break;
        if (request_running(s, seq->request, plan) >= request_share(s))
            continue; /* its request has its share: later requests go first */
        lm_prefix_cache_admit(cm, seq);
        int need = seq->n_tokens - seq->n_cached;
        int take = lm_prefix_cache_chunk(cm, seq, need < plan->budget ? need : plan->budget);
        if (!lm_cache_ensure_blocks(cm, seq, seq->n_cached + take) || !lm_cache_take_state_slot(cm, seq)) {
            lm_cache_release(cm, seq);
            break;
        }
        lm_prefix_cache_admitted(cm, seq);
        seq->state = LM_SEQ_RUNNING;
        seq->admit_order = ++s->admit_counter;
        plan->entries[plan->n++] = (lm_plan_entry){seq, take, seq->n_cached + take == seq->n_tokens, 0};
        plan->budget -= take;
    }
    for (int k = plan->first_admitted; k < plan->n; k++) {
        seq_list_remove(&s->waiting, plan->entries[k].seq);
        seq_list_push(&s->running, plan->entries[k].seq);
    }
}

bool lm_scheduler_fork(lm_scheduler *s, lm_cache_manager *cm, lm_sequence *child, const lm_sequence *parent) {
    if (s->running.n >= s->max_running) return false;
    if (request_running(s, child->request, NULL) >= request_share(s)) return false;
    if (!lm_cache_fork(cm, child, parent)) return false;
    child->n_cached = parent->n_cached;
    child->cached_tokens = parent->cached_tokens;
    child->looked_up = true;
    child->fork_parent = NULL;
    child->state = LM_SEQ_RUNNING;
    child->admit_order = ++s->admit_counter;
    seq_list_remove(&s->waiting, child);
    seq_list_push(&s->running, child);
    return true;
}
