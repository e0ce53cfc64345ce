/* The scheduler's decision for one step, as one value: the runner executes
 * it (engine/runner.h).  The plan is all the runner needs to know of who
 * runs; what the sequences hold (blocks, slot, drafts) is theirs. */
#ifndef LOOM_ENGINE_STEP_PLAN_H
#define LOOM_ENGINE_STEP_PLAN_H

#include <stdbool.h>

#include "engine/sequence.h"

/* One sequence's share of a step. */
typedef struct {
    lm_sequence *seq;
    int n_new;         /* tokens it runs: a prompt chunk, a decode token, or a verify's 1 + n_drafts */
    bool wants_logits; /* its chunk reaches its last token: sample after the step */
    int n_drafts;      /* > 0: a speculative verify of the pending token + this many drafts */
} lm_plan_entry;

typedef struct {
    lm_plan_entry *entries; /* [max_seqs], in row order: decodes, prompt chunks, then admissions */
    int n, max_seqs;
    int budget;             /* tokens of the step's budget left unplanned */
    int first_admitted;     /* entries[first_admitted..n) were admitted in this plan */
    /* Preempted in this plan (their caches gone back, they wait at the
     * queue's front to recompute), and those that cannot run even alone
     * (the engine finishes them with an error): [max_running] each. */
    lm_sequence **preempted, **too_large;
    int n_preempted, n_too_large;
} lm_step_plan;

#endif
