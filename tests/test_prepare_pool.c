/* The server's preparation pool (server/prepare_pool.c): a fixed set of
 * threads and a bounded queue in place of a thread per request. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "server/prepare_pool.h"

/* What the items of a test share: counts, and a gate that holds every
 * thread inside run() until it opens. */
typedef struct {
    atomic_int ran, running, most_running;
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    bool gate_open;
    int entered; /* run() calls that reached the gate */
} shared;

typedef struct {
    shared *sh;
    int runs; /* this item's run() calls: exactly one each */
} item;

static void shared_init(shared *sh, bool gate_open) {
    atomic_init(&sh->ran, 0);
    atomic_init(&sh->running, 0);
    atomic_init(&sh->most_running, 0);
    pthread_mutex_init(&sh->mutex, NULL);
    pthread_cond_init(&sh->changed, NULL);
    sh->gate_open = gate_open;
    sh->entered = 0;
}

static void shared_destroy(shared *sh) {
    pthread_mutex_destroy(&sh->mutex);
    pthread_cond_destroy(&sh->changed);
}

static void run_item(void *cls, void *arg) {
    shared *sh = cls;
    item *it = arg;
    int now = atomic_fetch_add(&sh->running, 1) + 1;
    for (int most = atomic_load(&sh->most_running); now > most && !atomic_compare_exchange_weak(&sh->most_running, &most, now);) {
    }
    pthread_mutex_lock(&sh->mutex);
    sh->entered++;
    pthread_cond_broadcast(&sh->changed);
    while (!sh->gate_open) pthread_cond_wait(&sh->changed, &sh->mutex);
    pthread_mutex_unlock(&sh->mutex);
    it->runs++;
    atomic_fetch_sub(&sh->running, 1);
    atomic_fetch_add(&sh->ran, 1);
}

static void open_gate(shared *sh) {
    pthread_mutex_lock(&sh->mutex);
    sh->gate_open = true;
    pthread_cond_broadcast(&sh->changed);
    pthread_mutex_unlock(&sh->mutex);
}

/* Waits (at most 10 s) until n run() calls reached the gate. */
static bool wait_entered(shared *sh, int n) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&sh->mutex);
    int rc = 0;
    while (sh->entered < n && rc == 0) rc = pthread_cond_timedwait(&sh->changed, &sh->mutex, &until);
    bool ok = sh->entered >= n;
    pthread_mutex_unlock(&sh->mutex);
    return ok;
}

static bool submit(lm_prepare_pool *p, item *it) {
    if (!lm_prepare_pool_reserve(p)) return false;
    lm_prepare_pool_push(p, it);
    return true;
}

/* Many more items than threads: each runs exactly once, never more at once
 * than there are threads, and all have run once the pool stops. */
static void test_every_item_runs_once_on_the_pool(void) {
    enum { N = 600, THREADS = 3 };
    static item items[N];
    shared sh;
    shared_init(&sh, true);
    lm_error err = {0};
    lm_prepare_pool *p = NULL;
    CHECK_OK(lm_prepare_pool_start(THREADS, N, run_item, &sh, &p, &err), &err);
    bool all_taken = true;
    for (int i = 0; i < N; i++) {
        items[i] = (item){.sh = &sh};
        all_taken = all_taken && submit(p, &items[i]);
    }
    lm_prepare_pool_free(p);
    bool once = true;
    for (int i = 0; i < N; i++) once = once && items[i].runs == 1;
    int most = atomic_load(&sh.most_running);
    shared_destroy(&sh);
    CHECK_MSG(all_taken, "a queue of %d refused one of %d items", N, N);
    CHECK_MSG(once, "an item ran twice or never");
    CHECK_MSG(atomic_load(&sh.ran) == N, "%d of %d items ran", atomic_load(&sh.ran), N);
    CHECK_MSG(most <= THREADS, "%d items ran at once on %d threads", most, THREADS);
}

/* A full queue refuses at once (the server answers 503) instead of
 * waiting or growing; what it took still runs, and a place freed by a
 * thread taking an item is given again. */
static void test_full_queue_refuses(void) {
    shared sh;
    shared_init(&sh, false);
    lm_error err = {0};
    lm_prepare_pool *p = NULL;
    CHECK_OK(lm_prepare_pool_start(1, 2, run_item, &sh, &p, &err), &err);
    item busy = {.sh = &sh}, a = {.sh = &sh}, b = {.sh = &sh}, c = {.sh = &sh}, d = {.sh = &sh};
    bool took_busy = submit(p, &busy);
    bool running = took_busy && wait_entered(&sh, 1); /* the one thread holds busy at the gate */
    bool took_a = submit(p, &a), took_b = submit(p, &b);
    int waiting = lm_prepare_pool_waiting(p);
    bool refused_c = !lm_prepare_pool_reserve(p);
    open_gate(&sh);
    bool drained = wait_entered(&sh, 3);
    for (int i = 0; i < 1000 && lm_prepare_pool_waiting(p) > 0; i++) usleep(1000);
    bool took_d = submit(p, &d);
    lm_prepare_pool_free(p);
    shared_destroy(&sh);
    CHECK(took_busy && running);
    CHECK_MSG(took_a && took_b, "a queue of 2 did not take 2 items while its thread was busy");
    CHECK_MSG(waiting == 2, "%d items waiting, not 2", waiting);
    CHECK_MSG(refused_c, "a full queue took a third item");
    CHECK(drained);
    CHECK_MSG(took_d, "the queue refused an item after it emptied");
    CHECK_MSG(busy.runs == 1 && a.runs == 1 && b.runs == 1 && c.runs == 0 && d.runs == 1,
              "runs: busy %d a %d b %d c %d d %d", busy.runs, a.runs, b.runs, c.runs, d.runs);
}

typedef struct {
    lm_prepare_pool *pool;
    atomic_bool returned;
} stopper;

static void *stop_pool(void *arg) {
    stopper *st = arg;
    lm_prepare_pool_stop(st->pool);
    atomic_store(&st->returned, true);
    return NULL;
}

/* Stopping runs what was queued and waits for a push already reserved
 * (a connection being suspended), then refuses every reservation; the
 * pool stays valid for a caller racing the stop until it is freed. */
static void test_stop_drains_then_refuses(void) {
    shared sh;
    shared_init(&sh, false);
    lm_error err = {0};
    lm_prepare_pool *p = NULL;
    CHECK_OK(lm_prepare_pool_start(2, 8, run_item, &sh, &p, &err), &err);
    item queued[4], late = {.sh = &sh};
    bool took = true;
    for (int i = 0; i < 4; i++) {
        queued[i] = (item){.sh = &sh};
        took = took && submit(p, &queued[i]);
    }
    bool reserved = lm_prepare_pool_reserve(p); /* pushed only after the stop began */
    stopper st = {.pool = p};
    atomic_init(&st.returned, false);
    pthread_t t;
    bool started = pthread_create(&t, NULL, stop_pool, &st) == 0;
    usleep(50 * 1000);
    bool refused_while_stopping = !lm_prepare_pool_reserve(p);
    bool waited = !atomic_load(&st.returned); /* the gate holds two items, two wait */
    open_gate(&sh);
    usleep(20 * 1000);
    if (reserved) lm_prepare_pool_push(p, &late);
    if (started) pthread_join(t, NULL);
    bool refused_after = !lm_prepare_pool_reserve(p);
    int ran = atomic_load(&sh.ran);
    lm_prepare_pool_stop(p); /* again: nothing */
    lm_prepare_pool_free(p);
    shared_destroy(&sh);
    CHECK(took && reserved && started);
    CHECK_MSG(waited, "the stop returned while items were still queued");
    CHECK_MSG(refused_while_stopping && refused_after, "a stopping or stopped pool took a reservation");
    CHECK_MSG(ran == 5 && late.runs == 1, "%d of 5 items ran by the stop (the reserved one %d times)", ran, late.runs);
}

static void test_bounds_refused(void) {
    shared sh;
    shared_init(&sh, true);
    lm_error err = {0};
    lm_prepare_pool *p = NULL;
    CHECK(lm_prepare_pool_start(0, 4, run_item, &sh, &p, &err) == LM_ERR_INVALID && !p);
    CHECK(lm_prepare_pool_start(LM_PREPARE_MAX_THREADS + 1, 4, run_item, &sh, &p, &err) == LM_ERR_INVALID && !p);
    CHECK(lm_prepare_pool_start(2, 0, run_item, &sh, &p, &err) == LM_ERR_INVALID && !p);
    CHECK(lm_prepare_pool_start(2, LM_PREPARE_MAX_QUEUE + 1, run_item, &sh, &p, &err) == LM_ERR_INVALID && !p);
    lm_prepare_pool_free(NULL);
    shared_destroy(&sh);
}

int main(void) {
    RUN_TEST(test_every_item_runs_once_on_the_pool);
    RUN_TEST(test_full_queue_refuses);
    RUN_TEST(test_stop_drains_then_refuses);
    RUN_TEST(test_bounds_refused);
    return test_summary("test_prepare_pool");
}
