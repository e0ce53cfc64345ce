/* A fixed pool of worker threads for data-parallel kernels.
 *
 * lm_pool_run(pool, n_tasks, fn, ctx) calls fn(ctx, task, n_tasks) for every
 * task in [0, n_tasks) across the workers and the calling thread, and returns
 * when all are done.  Workers spin briefly before sleeping, because decode
 * issues hundreds of small kernels per token and a futex wake-up per kernel
 * would cost more than the kernel.  One caller at a time (the engine thread). */
#ifndef LOOM_BASE_THREADPOOL_H
#define LOOM_BASE_THREADPOOL_H

#include "base/error.h"

typedef struct lm_pool lm_pool;
typedef void (*lm_pool_fn)(void *ctx, int task, int n_tasks);

/* n_threads <= 0 means one per online core. */
lm_status lm_pool_create(int n_threads, lm_pool **out, lm_error *err);
void lm_pool_destroy(lm_pool *pool);
int lm_pool_size(const lm_pool *pool); /* threads including the caller */
void lm_pool_run(lm_pool *pool, int n_tasks, lm_pool_fn fn, void *ctx);

/* Splits [0, n) into `parts` near-equal ranges; part p gets [*begin, *end). */
static inline void lm_split_range(long n, int parts, int p, long *begin, long *end) {
    long base = n / parts, extra = n % parts;
    *begin = p * base + (p < extra ? p : extra);
    *end = *begin + base + (p < extra ? 1 : 0);
}

#endif
