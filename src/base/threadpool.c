#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define SPIN_ITERATIONS 200000

/* `membership` packs the current job's generation (high 32 bits), a closed
 * flag and the number of workers inside the job (low bits). */
#define MEMBER_CLOSED (UINT64_C(1) << 31)
#define MEMBER_COUNT_MASK (MEMBER_CLOSED - 1)

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

    /* The current job.  The caller writes it, opens `membership` for the new
     * generation, then bumps `generation` to wake the workers.  A worker joins
     * by incrementing the member count while the job is open; the caller runs
     * tasks itself and, once all are claimed, waits only for the workers that
     * joined, then closes the job.  A worker that was descheduled and never
     * joined therefore does not hold the caller back (on a busy machine that
     * wait cost a whole scheduler time slice per job). */
    lm_pool_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next_task;
    _Atomic uint64_t membership;
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

/* Joins job `gen` if it is still open; false when it closed already. */
static bool join_job(lm_pool *pool, unsigned gen) {
    uint64_t m = atomic_load_explicit(&pool->membership, memory_order_relaxed);
    for (;;) {
        if ((m >> 32) != gen || (m & MEMBER_CLOSED)) return false;
        if (atomic_compare_exchange_weak_explicit(&pool->membership, &m, m + 1,
                                                  memory_order_acquire, memory_order_relaxed))
            return true;
    }
}

static void *worker_main(void *arg) {
    lm_pool *pool = arg;
    /* Generation 0 is the pool's state before any job.  Reading the live
     * counter here instead would race with a job published before this
     * thread got to run, and the worker would skip that job. */
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
        if (!join_job(pool, gen)) continue; /* finished without us */
        run_tasks(pool);
        atomic_fetch_sub_explicit(&pool->membership, 1, memory_order_release);
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
    atomic_init(&pool->membership, MEMBER_CLOSED); /* generation 0: closed */
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
    /* The previous job is closed and has no members: nobody reads these now. */
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_tasks = n_tasks;
    atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
    unsigned gen = atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&pool->membership, (uint64_t)gen << 32, memory_order_release);
    atomic_store(&pool->generation, gen); /* seq_cst: pairs with the sleepers count */
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mutex);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mutex);
    }
    run_tasks(pool);
    /* Every task is claimed; wait for the members still running theirs, then
     * close the job so no late worker can join it. */
    uint64_t m = atomic_load_explicit(&pool->membership, memory_order_acquire);
    for (;;) {
        if ((m & MEMBER_COUNT_MASK) == 0 &&
            atomic_compare_exchange_weak_explicit(&pool->membership, &m, m | MEMBER_CLOSED,
                                                  memory_order_acq_rel, memory_order_acquire))
            break;
        cpu_relax();
        m = atomic_load_explicit(&pool->membership, memory_order_acquire);
    }
}
