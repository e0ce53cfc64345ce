#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define SPIN_ITERATIONS 200000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

struct lm_pool {
    int n_threads; /* including the calling thread */
    pthread_t *threads;
    pthread_mutex_t mutex;
    pthread_cond_t wake;

    /* The current job. A new job is published by bumping `generation`. */
    lm_pool_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next_task;
    atomic_int workers_done; /* workers that finished the current job */
    atomic_uint generation;
    atomic_int sleepers;
    atomic_bool stopping;
};

static void run_tasks(lm_pool *pool) {
    for (;;) {
        int task = atomic_fetch_add_explicit(&pool->next_task, 1, memory_order_relaxed);
        if (task >= pool->n_tasks) break;
        pool->fn(pool->ctx, task, pool->n_tasks);
    }
}

static void *worker_main(void *arg) {
    lm_pool *pool = arg;
    /* Generation 0 is the pool's state before any job.  Reading the live
     * counter here instead would race with a job published before this
     * thread got to run: the worker would never take that job and the caller
     * would wait for its check-in forever. */
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        unsigned gen;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load(&pool->stopping)) {
            if (++spins < SPIN_ITERATIONS) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&pool->mutex);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stopping))
                pthread_cond_wait(&pool->wake, &pool->mutex);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mutex);
            spins = 0;
        }
        if (atomic_load(&pool->stopping)) return NULL;
        seen = gen;
        run_tasks(pool);
        /* Every worker checks in after every job, so no worker can still be
         * inside run_tasks when the caller publishes the next job. */
        atomic_fetch_add_explicit(&pool->workers_done, 1, memory_order_acq_rel);
    }
}

lm_status lm_pool_create(int n_threads, lm_pool **out, lm_error *err) {
    if (n_threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = cores > 0 ? (int)cores : 1;
    }
    if (n_threads > 1024) return lm_fail(err, LM_ERR_INVALID, "thread count %d too large", n_threads);
    lm_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return lm_fail(err, LM_ERR_NOMEM, "out of memory creating thread pool");
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->stopping, false);
    if (n_threads > 1) {
        pool->threads = calloc((size_t)n_threads - 1, sizeof *pool->threads);
        if (!pool->threads) {
            free(pool);
            return lm_fail(err, LM_ERR_NOMEM, "out of memory creating thread pool");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            if (pthread_create(&pool->threads[i], NULL, worker_main, pool) != 0) {
                pool->n_threads = i + 1;
                lm_pool_destroy(pool);
                return lm_fail(err, LM_ERR_IO, "could not start worker thread %d", i);
            }
        }
    }
    *out = pool;
    return LM_OK;
}

void lm_pool_destroy(lm_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mutex);
    atomic_store(&pool->stopping, true);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int i = 0; i < pool->n_threads - 1; i++) pthread_join(pool->threads[i], NULL);
    free(pool->threads);
    pthread_mutex_destroy(&pool->mutex);
    pthread_cond_destroy(&pool->wake);
    free(pool);
}

int lm_pool_size(const lm_pool *pool) { return pool ? pool->n_threads : 1; }

void lm_pool_run(lm_pool *pool, int n_tasks, lm_pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!pool || pool->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, n_tasks);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_tasks = n_tasks;
    atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->workers_done, 0, memory_order_relaxed);
    atomic_fetch_add(&pool->generation, 1); /* seq_cst: pairs with the sleepers count */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mutex);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mutex);
    }
    run_tasks(pool);
    while (atomic_load_explicit(&pool->workers_done, memory_order_acquire) < pool->n_threads - 1)
        cpu_relax();
}
