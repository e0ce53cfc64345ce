/* The scheduler: who runs in each step.  It owns the waiting and running
 * queues (and the sequences retiring at the step's end), admits waiting
 * sequences while state slots, KV blocks and the token budget last, keeps
 * the fairness rule (a request holds at most half the state slots), and
 * decides preemptions; its decision is one lm_step_plan (step_plan.h).  It
 * asks the cache manager for blocks and slots and runs nothing itself.
 *
 * Engine thread only. */
#ifndef LOOM_ENGINE_SCHEDULER_H
#define LOOM_ENGINE_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "engine/cache_manager.h"
#include "engine/sequence.h"
#include "engine/step_plan.h"

typedef struct {
    lm_sequence **items;
    int n, cap;
} lm_seq_list;

typedef struct {
    int max_running, max_batch_tokens;
    lm_seq_list running, waiting;
    lm_seq_list retiring; /* finished in this step, their caches kept until it ends */
    uint64_t admit_counter;
    uint64_t preemptions;
} lm_scheduler;

lm_status lm_scheduler_init(lm_scheduler *s, int max_running, int max_batch_tokens, lm_error *err);
void lm_scheduler_free(lm_scheduler *s);
/* The plan's storage for this scheduler's steps (max_seqs entries). */
lm_status lm_step_plan_init(lm_step_plan *plan, int max_seqs, int max_running, lm_error *err);
void lm_step_plan_free(lm_step_plan *plan);

/* The queues, read by index (their order: admission order for running,
 * queue order for waiting). */
int lm_scheduler_n_running(const lm_scheduler *s);
int lm_scheduler_n_waiting(const lm_scheduler *s);
lm_sequence *lm_scheduler_running(const lm_scheduler *s, int i);
lm_sequence *lm_scheduler_waiting(const lm_scheduler *s, int i);

/* A new sequence joins the waiting queue's end; false if out of memory. */
bool lm_scheduler_add(lm_scheduler *s, lm_sequence *seq);
/* seq leaves its queue (running or waiting, by its state); choices
 * waiting to fork from it now prefill on their own. */
void lm_scheduler_remove(lm_scheduler *s, lm_sequence *seq);
/* A finished sequence whose caches stay until the step ends; false if out
 * of memory (then it is not kept). */
bool lm_scheduler_retire(lm_scheduler *s, lm_sequence *seq);
int lm_scheduler_n_retiring(const lm_scheduler *s);
lm_sequence *lm_scheduler_retiring(const lm_scheduler *s, int i);
/* The step ended: the list is empty again (its sequences were dropped). */
void lm_scheduler_clear_retiring(lm_scheduler *s);

/* A step's plan, in two halves so the engine can finish the sequences too
 * large to run (plan->too_large) between them, before admission counts
 * the running queue: first the running sequences (decode tokens first,
 * then prompt chunks; preempting the newest when blocks run out), then
 * admissions of waiting sequences into what is left. */
void lm_scheduler_plan_running(lm_scheduler *s, lm_cache_manager *cm, lm_step_plan *plan);
void lm_scheduler_plan_admissions(lm_scheduler *s, lm_cache_manager *cm, lm_step_plan *plan);
/* Gives waiting child (a later choice) the prompt state of its parent
 * (choice 0), so n choices share one prefill, and runs it.  False if the
 * slots, the request's share or the caches are short (it will then
 * prefill by itself). */
bool lm_scheduler_fork(lm_scheduler *s, lm_cache_manager *cm, lm_sequence *child, const lm_sequence *parent);

#endif
