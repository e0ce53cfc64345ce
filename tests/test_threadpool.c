/* The thread pool behind the cpu kernels (base/threadpool.c). */
#include <stdbool.h>
#include <string.h>

#include "base/threadpool.h"
#include "harness.h"

/* The kernels' thread pool: every task of every job runs exactly once and its
 * writes are visible when lm_pool_run returns, also with more threads than
 * cores (workers get descheduled mid-job and join late or not at all). */
typedef struct {
    int *hits;
    int job;
} pool_job;

static void pool_task(void *ctx, int task, int n_tasks) {
    pool_job *j = ctx;
    (void)n_tasks;
    volatile int spin = 0; /* long enough that workers join in */
    for (int i = 0; i < 200; i++) spin = spin + i;
    j->hits[task] += j->job; /* one writer per task slot */
}

static void test_pool_runs_each_task_once(void) {
    for (int threads = 2; threads <= 5; threads += 3) {
        lm_error err = {0};
        lm_pool *pool = NULL;
        CHECK_OK(lm_pool_create(threads, &pool, &err), &err);
        int hits[16];
        bool ok = true;
        for (int job = 1; job <= 20000 && ok; job++) {
            int n_tasks = 1 + job % 16;
            memset(hits, 0, sizeof hits);
            pool_job j = {hits, job};
            lm_pool_run(pool, n_tasks, pool_task, &j);
            for (int t = 0; t < 16; t++) ok = ok && hits[t] == (t < n_tasks ? job : 0);
        }
        lm_pool_destroy(pool);
        CHECK_MSG(ok, "%d threads: a task ran twice, never, or its write was not visible", threads);
    }
}

int main(void) {
    RUN_TEST(test_pool_runs_each_task_once);
    return test_summary("test_threadpool");
}
