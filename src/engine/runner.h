/* The runner: executes one step's plan (step_plan.h).  It owns the step's
 * StepBatch buffers (flattened tokens, positions, image rows, per-sequence
 * entries), builds the batch from the plan, runs the model's forward,
 * hands the logit rows to the step sampler and the verifies to the
 * speculator, and commits what the step produced: cached lengths, the
 * prefix cache's registrations, the drawn tokens with their stop rules and
 * events, the forks of a request's later choices, rollbacks and the next
 * drafts.
 *
 * Engine thread only. */
#ifndef LOOM_ENGINE_RUNNER_H
#define LOOM_ENGINE_RUNNER_H

#include <stdint.h>

#include "engine/step_plan.h"
#include "loom.h"
#include "models/model.h"

typedef struct {
    lm_step_seq *seqs;          /* [max step sequences] */
    int32_t *tokens, *positions; /* [max step tokens], positions [.. * 3] */
    const float **input_rows;   /* [max step tokens]: image rows, else NULL */
    uint64_t prompt_tokens, generation_tokens, steps;
} lm_runner;

lm_status lm_runner_init(lm_runner *r, int max_step_seqs, int max_step_tokens, lm_error *err);
void lm_runner_free(lm_runner *r);
/* Runs the plan on engine e's parts (the plan may shrink: a sequence whose
 * image fails to encode, or that would write a shared block, finishes
 * with an error and leaves it). */
void lm_runner_run(lm_runner *r, loom_engine *e, lm_step_plan *plan);
/* Its part of the engine's stats. */
void lm_runner_stats(const lm_runner *r, loom_stats *stats);

#endif
