/* Moving rows (copy_rows, gather_rows) and argmax_rows on the cpu backend.
 * Row moves are memcpy on the calling thread: a step moves at most a few
 * MB, and memcpy is already at memory speed on one core. */
#include <string.h>

#include "ops/cpu/kernels.h"
#include "ops/ref/reference.h"

void lm_cpu_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                      int rows, int width) {
    if (width <= 0) return;
    for (int r = 0; r < rows; r++)
        memcpy(dst + r * dst_stride, src + r * src_stride, sizeof(float) * (size_t)width);
}

void lm_cpu_gather_rows(float *dst, const float *src, const int32_t *row_ids, int n, int width) {
    if (width <= 0) return;
    for (int i = 0; i < n; i++)
        memcpy(dst + (int64_t)i * width, src + (int64_t)row_ids[i] * width,
               sizeof(float) * (size_t)width);
}

/* Rows per task: one row of a 248k vocabulary is about a quarter of a
 * millisecond of compares, worth a pool run once there are a few rows. */
#define ARGMAX_PARALLEL_MIN_ELEMS 65536

typedef struct {
    int32_t *ids;
    const float *x;
    int rows, n;
} argmax_job;

static void argmax_task(void *ctx, int task, int n_tasks) {
    const argmax_job *j = ctx;
    long begin, end;
    lm_split_range(j->rows, n_tasks, task, &begin, &end);
    lm_ref_argmax_rows(j->ids + begin, j->x + begin * (int64_t)j->n, (int)(end - begin), j->n);
}

void lm_cpu_argmax_rows(lm_pool *pool, int32_t *ids, const float *x, int rows, int n) {
    if (rows <= 0) return;
    argmax_job job = {ids, x, rows, n};
    int threads = lm_pool_size(pool);
    int tasks = (int64_t)rows * n >= ARGMAX_PARALLEL_MIN_ELEMS && rows > 1
                    ? (rows < threads ? rows : threads)
                    : 1;
    if (tasks == 1)
        argmax_task(&job, 0, 1);
    else
        lm_pool_run(pool, tasks, argmax_task, &job);
}
