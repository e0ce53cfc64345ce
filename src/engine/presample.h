/* Sampling a step's rows on several host threads (engine.c calls it).
 *
 * At 64 sequences a sampled step's rows cost the engine thread 33-154 ms
 * one after the other (docs/PERF.md: 0.5-2.4 ms a row of a 248k
 * vocabulary) while a GPU step takes about 18 ms.  Before the step's
 * results are taken in order, the plain sampled rows (no grammar, not a
 * verify) are drawn at once, a worker thread each with its own scratch and
 * row copy; each row uses its own sequence's random stream, so the tokens
 * are the ones drawing them in order would give.  The results are then
 * accepted in plan order as before.  Used with a device backend (the host
 * cores are free during sampling), or with LOOM_SAMPLE_THREADS=N. */
#ifndef LOOM_ENGINE_PRESAMPLE_H
#define LOOM_ENGINE_PRESAMPLE_H

#include <stdbool.h>

#include "base/threadpool.h"
#include "engine/sampler.h"

/* One row to draw: its sequence's parameters, context and stream. */
typedef struct {
    const void *owner; /* the sequence */
    int row;
    const loom_sampling *params;
    lm_sample_context ctx;
    lm_rng *rng;
} lm_presample_job;

typedef struct {
    lm_pool *pool;                /* NULL: off */
    int n_workers;
    lm_sampler_scratch *scratch;  /* [n_workers] */
    float *rows;                  /* [n_workers, vocab] */
    int vocab, max_rows;
    lm_presample_job *jobs;       /* [max_rows] */
    lm_sample_result *results;    /* [max_rows], by logit row */
    const void **owner;           /* [max_rows]: whose result row r holds (NULL: none) */
} lm_presampler;

/* threads <= 1: off (nothing allocated). */
lm_status lm_presampler_init(lm_presampler *p, int threads, int vocab, int max_rows, lm_error *err);
void lm_presampler_free(lm_presampler *p);
/* Draws jobs[0..n) (their rows of logits [rows, vocab]) on the workers;
 * a row whose draw fails is left to the engine thread (owner NULL). */
void lm_presampler_run(lm_presampler *p, const float *logits, int n);
/* The result drawn for seq at row, or NULL. */
const lm_sample_result *lm_presampler_take(lm_presampler *p, const void *seq, int row);

#endif
