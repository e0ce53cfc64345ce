/* The monotonic clock in seconds: what timings and rates are measured by
 * (the server's logs and deadlines, `loom bench`, the cuda queue's host
 * stats). */
#ifndef LOOM_BASE_CLOCK_H
#define LOOM_BASE_CLOCK_H

#include <time.h>

static inline double lm_monotonic_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
