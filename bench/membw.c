/* Memory bandwidth of this machine, measured with loom's own thread pool:
 *   read: every thread sums its share of a large float array (read-only);
 *   copy: every thread copies its share of one array into another
 *         (reported as bytes read + bytes written).
 * Best of several runs, in GB/s (1e9 bytes per second).  This is the roofline
 * that the decode matvec (bench/matvec) is compared against.
 *
 * usage: membw [threads (default: all cores)] [megabytes (default 512)] [runs (default 7)] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

typedef struct {
    const float *src;
    float *dst;
    long n;          /* floats */
    double *partial; /* one sum per task, so the read pass cannot be optimised away */
} bw_job;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void read_task(void *ctx, int task, int n_tasks) {
    bw_job *job = ctx;
    long begin, end;
    lm_split_range(job->n, n_tasks, task, &begin, &end);
    const float *p = job->src;
#if defined(__AVX512F__)
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    long i = begin;
    for (; i + 64 <= end; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < end; i++) s += p[i];
#else
    float acc[16] = {0};
    long i = begin;
    for (; i + 16 <= end; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += p[i + l];
    float s = 0;
    for (int l = 0; l < 16; l++) s += acc[l];
    for (; i < end; i++) s += p[i];
#endif
    job->partial[task] = s;
}

static void copy_task(void *ctx, int task, int n_tasks) {
    bw_job *job = ctx;
    long begin, end;
    lm_split_range(job->n, n_tasks, task, &begin, &end);
    memcpy(job->dst + begin, job->src + begin, (size_t)(end - begin) * sizeof(float));
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    long megabytes = argc > 2 ? atol(argv[2]) : 512;
    int runs = argc > 3 ? atoi(argv[3]) : 7;
    if (megabytes < 1 || megabytes > 16384 || runs < 1 || runs > 1000) {
        fprintf(stderr, "usage: membw [threads] [megabytes 1..16384] [runs 1..1000]\n");
        return 2;
    }
    lm_error err = {0};
    lm_pool *pool = NULL;
    if (lm_pool_create(threads, &pool, &err) != LM_OK) {
        fprintf(stderr, "membw: %s\n", err.message);
        return 1;
    }
    long n = megabytes * (1L << 20) / (long)sizeof(float);
    float *src = aligned_alloc(64, (size_t)n * sizeof(float));
    float *dst = aligned_alloc(64, (size_t)n * sizeof(float));
    double partial[64] = {0};
    if (!src || !dst) {
        fprintf(stderr, "membw: out of memory for %ld MB\n", megabytes);
        return 1;
    }
    for (long i = 0; i < n; i++) src[i] = (float)(i & 1023) * 1e-3f;
    memset(dst, 0, (size_t)n * sizeof(float)); /* fault the pages in before timing */

    int n_tasks = lm_pool_size(pool);
    if (n_tasks > 64) n_tasks = 64;
    bw_job job = {src, dst, n, partial};
    double bytes = (double)n * sizeof(float);
    printf("membw: %d threads, %ld MB per array, best of %d runs (GB/s = 1e9 B/s)\n",
           lm_pool_size(pool), megabytes, runs);

    double best_read = 0, worst_read = 1e30, checksum = 0;
    for (int r = 0; r < runs; r++) {
        double t0 = now_seconds();
        lm_pool_run(pool, n_tasks, read_task, &job);
        double gbs = bytes / (now_seconds() - t0) / 1e9;
        for (int t = 0; t < n_tasks; t++) checksum += partial[t];
        if (gbs > best_read) best_read = gbs;
        if (gbs < worst_read) worst_read = gbs;
    }
    double best_copy = 0, worst_copy = 1e30;
    for (int r = 0; r < runs; r++) {
        double t0 = now_seconds();
        lm_pool_run(pool, n_tasks, copy_task, &job);
        double gbs = 2 * bytes / (now_seconds() - t0) / 1e9;
        if (gbs > best_copy) best_copy = gbs;
        if (gbs < worst_copy) worst_copy = gbs;
    }
    printf("read  (sum):  best %6.2f GB/s  worst %6.2f GB/s\n", best_read, worst_read);
    printf("copy (r + w): best %6.2f GB/s  worst %6.2f GB/s\n", best_copy, worst_copy);
    printf("(checksum %g)\n", checksum + dst[n / 2]);
    free(src);
    free(dst);
    lm_pool_destroy(pool);
    return 0;
}
