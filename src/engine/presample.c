#include "engine/presample.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_presampler_init(lm_presampler *p, int threads, int vocab, int max_rows, lm_error *err) {
    memset(p, 0, sizeof *p);
    if (threads <= 1) return LM_OK;
    if (threads > 64) threads = 64;
    p->n_workers = threads;
    p->vocab = vocab;
    p->max_rows = max_rows;
    p->scratch = calloc((size_t)threads, sizeof *p->scratch);
    p->rows = malloc(sizeof(float) * (size_t)vocab * (size_t)threads);
    p->jobs = calloc((size_t)max_rows, sizeof *p->jobs);
    p->results = calloc((size_t)max_rows, sizeof *p->results);
    p->owner = calloc((size_t)max_rows, sizeof *p->owner);
    lm_status st = p->scratch && p->rows && p->jobs && p->results && p->owner
                       ? LM_OK
                       : lm_fail(err, LM_ERR_NOMEM, "out of memory for %d sampling threads", threads);
    for (int w = 0; w < threads && st == LM_OK; w++) st = lm_sampler_scratch_init(&p->scratch[w], vocab, err);
    if (st == LM_OK) st = lm_pool_create(threads, &p->pool, err);
    if (st != LM_OK) lm_presampler_free(p);
    return st;
}

void lm_presampler_free(lm_presampler *p) {
    if (p->pool) lm_pool_destroy(p->pool);
    for (int w = 0; p->scratch && w < p->n_workers; w++)
        if (p->scratch[w].vocab) lm_sampler_scratch_free(&p->scratch[w]);
    free(p->scratch);
    free(p->rows);
    free(p->jobs);
    free(p->results);
    free(p->owner);
    memset(p, 0, sizeof *p);
}

typedef struct {
    lm_presampler *p;
    const float *logits;
    int n;
} run_args;

/* Worker w draws jobs w, w + n_workers, ... (each with its own scratch
 * and row copy: the sampler changes the row it is given). */
static void draw_rows(void *ctx, int w, int n_tasks) {
    run_args *a = ctx;
    lm_presampler *p = a->p;
    float *row = p->rows + (size_t)w * (size_t)p->vocab;
    for (int j = w; j < a->n; j += n_tasks) {
        const lm_presample_job *job = &p->jobs[j];
        memcpy(row, a->logits + (size_t)job->row * (size_t)p->vocab, sizeof(float) * (size_t)p->vocab);
        lm_error err = {0};
        if (lm_sample(job->params, row, p->vocab, &job->ctx, job->rng, &p->scratch[w], &p->results[job->row], &err) ==
            LM_OK)
            p->owner[job->row] = job->owner;
    }
}

void lm_presampler_run(lm_presampler *p, const float *logits, int n) {
    /* no result of an earlier step can be taken for this one's */
    memset(p->owner, 0, sizeof *p->owner * (size_t)p->max_rows);
    run_args a = {p, logits, n};
    int tasks = n < p->n_workers ? n : p->n_workers;
    if (tasks > 0) lm_pool_run(p->pool, tasks, draw_rows, &a);
}

const lm_sample_result *lm_presampler_take(lm_presampler *p, const void *seq, int row) {
    if (!p->pool || row < 0 || row >= p->max_rows || p->owner[row] != seq || !seq) return NULL;
    p->owner[row] = NULL; /* once */
    return &p->results[row];
}
