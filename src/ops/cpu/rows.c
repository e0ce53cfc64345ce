/* Moving rows (copy_rows, gather_rows), argmax_rows and add_weighted_rows on the cpu backend.
 * Row moves are memcpy on the calling thread: a step moves at most a few
 * MB, and memcpy is already at memory speed on one core. */
#include <string.h>

#include "base/simd.h"
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

/* ---- add_weighted_rows: interpolated position embeddings ---- */

/* Rows per task: a row is width x taps multiply-adds (1152 x 4 to 1536 x 16
 * in the released towers); split over the pool past this many. */
#define WEIGHTED_PARALLEL_MIN_MACS 65536

typedef struct {
    float *x;
    const lm_host_matrix *table;
    const int32_t *ids;
    const float *weights;
    int n, taps;
} weighted_job;

static LM_ALWAYS_INLINE lm_vf load_table(const lm_host_matrix *t, int64_t row, int64_t c, int count) {
    int64_t i = row * t->cols + c;
    switch (t->dtype) {
    case LM_DTYPE_BF16: return lm_vf_load_bf16_part((const uint16_t *)t->data + i, count);
    case LM_DTYPE_F16: return lm_vf_load_f16_part((const uint16_t *)t->data + i, count);
    default: return lm_vf_load_part((const float *)t->data + i, count);
    }
}

static void weighted_task(void *ctx, int task, int n_tasks) {
    const weighted_job *j = ctx;
    long begin, end;
    lm_split_range(j->n, n_tasks, task, &begin, &end);
    int64_t width = j->table->cols;
    for (long i = begin; i < end; i++) {
        const int32_t *ids = j->ids + i * j->taps;
        const float *w = j->weights + i * j->taps;
        float *x = j->x + i * width;
        for (int64_t c = 0; c < width; c += LM_VF_WIDTH) {
            int count = width - c < LM_VF_WIDTH ? (int)(width - c) : LM_VF_WIDTH;
            lm_vf acc = lm_vf_zero();
            for (int k = 0; k < j->taps; k++) /* in k order, as ops.h says */
                acc = lm_vf_fma(lm_vf_set1(w[k]), load_table(j->table, ids[k], c, count), acc);
            lm_vf_store_part(x + c, lm_vf_add(lm_vf_load_part(x + c, count), acc), count);
        }
    }
}

void lm_cpu_add_weighted_rows(lm_pool *pool, float *x, const lm_host_matrix *table,
                              const int32_t *ids, const float *weights, int n, int taps) {
    if (n <= 0 || table->cols <= 0) return;
    if (lm_dtype_is_block(table->dtype)) { /* Q8_0 or ggml blocks: the reference, element by element */
        lm_ref_add_weighted_rows(x, table, ids, weights, n, taps);
        return;
    }
    weighted_job job = {x, table, ids, weights, n, taps};
    int threads = lm_pool_size(pool);
    int tasks = (int64_t)n * table->cols * (taps > 0 ? taps : 1) >= WEIGHTED_PARALLEL_MIN_MACS && n > 1
                    ? (n < threads ? n : threads)
                    : 1;
    if (tasks == 1)
        weighted_task(&job, 0, 1);
    else
        lm_pool_run(pool, tasks, weighted_task, &job);
}
