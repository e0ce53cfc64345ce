/* The preparation pool: a ring of item pointers under one mutex, the
 * threads waiting on one condition.  Reservations count against the
 * capacity like queued items, so a reserved push always finds room. */
#include "server/prepare_pool.h"

#include <pthread.h>
#include <stdlib.h>

struct lm_prepare_pool {
    pthread_mutex_t mutex;
    pthread_cond_t work; /* an item was pushed, or the pool stops */
    void **ring;
    int capacity, head, count; /* count: items in the ring */
    int reserved;              /* places held for pushes to come */
    bool stopping, joined;
    lm_prepare_fn run;
    void *cls;
    pthread_t *threads;
    int n_threads; /* started */
};

static void *pool_thread(void *arg) {
    lm_prepare_pool *p = arg;
    pthread_mutex_lock(&p->mutex);
    for (;;) {
        /* A stopping pool still runs what was queued or reserved before. */
        while (p->count == 0 && !(p->stopping && p->reserved == 0)) pthread_cond_wait(&p->work, &p->mutex);
        if (p->count == 0) break;
        void *item = p->ring[p->head];
        p->head = (p->head + 1) % p->capacity;
        p->count--;
        pthread_mutex_unlock(&p->mutex);
        p->run(p->cls, item);
        pthread_mutex_lock(&p->mutex);
    }
    pthread_mutex_unlock(&p->mutex);
    return NULL;
}

static void join_threads(lm_prepare_pool *p) {
    pthread_mutex_lock(&p->mutex);
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    p->n_threads = 0;
    p->joined = true;
}

static void pool_destroy(lm_prepare_pool *p) {
    pthread_mutex_destroy(&p->mutex);
    pthread_cond_destroy(&p->work);
    free(p->ring);
    free(p->threads);
    free(p);
}

lm_status lm_prepare_pool_start(int threads, int capacity, lm_prepare_fn run, void *cls, lm_prepare_pool **out,
                                lm_error *err) {
    *out = NULL;
    if (threads < 1 || threads > LM_PREPARE_MAX_THREADS || capacity < 1 || capacity > LM_PREPARE_MAX_QUEUE || !run)
        return lm_fail(err, LM_ERR_INVALID, "preparation pool: %d threads and a queue of %d out of range", threads,
                       capacity);
    lm_prepare_pool *p = calloc(1, sizeof *p);
    if (!p) return lm_fail(err, LM_ERR_NOMEM, "out of memory for the preparation pool");
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->work, NULL);
    p->capacity = capacity;
    p->run = run;
    p->cls = cls;
    p->ring = malloc(sizeof *p->ring * (size_t)capacity);
    p->threads = malloc(sizeof *p->threads * (size_t)threads);
    if (!p->ring || !p->threads) {
        pool_destroy(p);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for a preparation queue of %d", capacity);
    }
    for (; p->n_threads < threads; p->n_threads++)
        if (pthread_create(&p->threads[p->n_threads], NULL, pool_thread, p) != 0) {
            int failed = p->n_threads + 1;
            join_threads(p);
            pool_destroy(p);
            return lm_fail(err, LM_ERR_INTERNAL, "cannot start preparation thread %d of %d", failed, threads);
        }
    *out = p;
    return LM_OK;
}

bool lm_prepare_pool_reserve(lm_prepare_pool *p) {
    pthread_mutex_lock(&p->mutex);
    bool room = !p->stopping && p->count + p->reserved < p->capacity;
    if (room) p->reserved++;
    pthread_mutex_unlock(&p->mutex);
    return room;
}

void lm_prepare_pool_push(lm_prepare_pool *p, void *item) {
    pthread_mutex_lock(&p->mutex);
    p->ring[(p->head + p->count) % p->capacity] = item;
    p->count++;
    p->reserved--;
    /* a stopping pool's threads may wait for the last reservation to land */
    if (p->stopping) pthread_cond_broadcast(&p->work);
    else pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mutex);
}

int lm_prepare_pool_waiting(lm_prepare_pool *p) {
    pthread_mutex_lock(&p->mutex);
    int n = p->count + p->reserved;
    pthread_mutex_unlock(&p->mutex);
    return n;
}

void lm_prepare_pool_stop(lm_prepare_pool *p) {
    if (p && !p->joined) join_threads(p);
}

void lm_prepare_pool_free(lm_prepare_pool *p) {
    if (!p) return;
    lm_prepare_pool_stop(p);
    pool_destroy(p);
}
