#include "base/membw.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUFFER_BYTES ((size_t)512 << 20)
#define PASSES 5

typedef struct {
    const uint64_t *data;
    size_t n;
    uint64_t sums[256];
} read_job;

static void read_part(void *ctx, int task, int n_tasks) {
    read_job *job = ctx;
    long begin, end;
    lm_split_range((long)job->n, n_tasks, task, &begin, &end);
    /* Four independent accumulators keep several loads in flight. */
    uint64_t a = 0, b = 0, c = 0, d = 0;
    long i = begin;
    for (; i + 4 <= end; i += 4) {
        a += job->data[i];
        b += job->data[i + 1];
        c += job->data[i + 2];
        d += job->data[i + 3];
    }
    for (; i < end; i++) a += job->data[i];
    job->sums[task % 256] = a + b + c + d;
}

double lm_measure_read_bandwidth(lm_pool *pool) {
    uint64_t *data = aligned_alloc(64, BUFFER_BYTES);
    if (!data) return 0;
    memset(data, 1, BUFFER_BYTES); /* touch every page so the pass measures DRAM, not faults */
    read_job job = {.data = data, .n = BUFFER_BYTES / sizeof(uint64_t)};
    double best = 0;
    int tasks = lm_pool_size(pool);
    if (tasks > 256) tasks = 256;
    for (int pass = 0; pass < PASSES; pass++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        lm_pool_run(pool, tasks, read_part, &job);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        double rate = (double)BUFFER_BYTES / s;
        if (rate > best) best = rate;
    }
    free(data);
    return best;
}
