/* y[n, rows] = x[n, cols] · Wᵀ with W bf16, f16, f32, Q8_0, FP8_B128 (the row kernels of matmul_q8.c
 * and matmul_fp8.c) or a ggml block format (matmul_ggml.c); x, y float32.
 *
 * Vectorised along cols (the dot-product direction, contiguous in both x and
 * W).  Weights are widened to float32 in registers (bf16: zero-extend and
 * shift left 16) and accumulated with FMA; activations are never rounded.
 *   - decode (n = 1) is memory-bound: each row is read start to end as one
 *     sequential stream with 4 accumulators.  On the Zen 4/5 machines this
 *     was measured against tiles interleaving 4-8 rows (several streams per
 *     core): one stream per core ran 2-2.5x faster.  Rows are split among
 *     the pool's threads in contiguous chunks.
 *   - prefill (n > 1) passes over a weight row once per TILE_MAX_T tokens,
 *     with one accumulator per token, so each weight vector loaded feeds
 *     TILE_MAX_T FMAs.  Rows are taken in panels of PANEL_BYTES and cols in
 *     blocks of PREFILL_COL_BLOCK, so a panel stays in L2 while every token
 *     tile passes over it (weights come from memory once per call) and a
 *     token tile's x block stays in L1.
 *
 * Determinism: the arithmetic of one output (row, token) depends only on n
 * and the token's index (which tile width covers it), never on the thread
 * that computes it, so results are bitwise identical for any thread count. */
#include <stdint.h>
#include <string.h>

#include "base/bf16.h"
#include "base/ggml_quant.h"
#include "base/simd.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/matmul_fp8.h"
#include "ops/cpu/matmul_ggml.h"
#include "ops/cpu/matmul_q8.h"
#include "ops/ref/reference.h"

#ifndef TILE_MAX_T
#define TILE_MAX_T 4 /* tokens per row pass, at most 8 */
#endif
#ifndef PREFILL_COL_BLOCK /* these can be overridden with -D to tune */
#define PREFILL_COL_BLOCK 1024
#endif
#ifndef PANEL_BYTES
#define PANEL_BYTES (256 * 1024)
#endif
#ifndef TASKS_PER_THREAD
#define TASKS_PER_THREAD 4
#endif
/* Tokens per pass over a Q8_0 row: two accumulators per token stay in
 * registers (32 zmm on AVX-512, 16 ymm on AVX2). */
#define Q8_TILE_T (LM_VF_WIDTH == 16 ? 8 : 4)
/* Task and panel row counts are multiples of this (whole cache lines of y). */
#define TASK_ROW_ALIGN 16

typedef struct {
    float *y;
    const float *x;
    const void *w;
    int64_t rows, cols;
    int n;
    lm_dtype dtype;
    int64_t col_block; /* cols per block (cols itself at decode) */
    int64_t rows_per_task;
    int64_t panel_rows;
} matmul_job;

static LM_ALWAYS_INLINE lm_vf load_weights(const void *w, lm_dtype dt, int64_t i) {
    if (dt == LM_DTYPE_BF16) return lm_vf_load_bf16((const uint16_t *)w + i);
    if (dt == LM_DTYPE_F16) return lm_vf_load_f16((const uint16_t *)w + i);
    return lm_vf_load((const float *)w + i);
}

static LM_ALWAYS_INLINE lm_vf load_weights_part(const void *w, lm_dtype dt, int64_t i, int count) {
    if (dt == LM_DTYPE_BF16) return lm_vf_load_bf16_part((const uint16_t *)w + i, count);
    if (dt == LM_DTYPE_F16) return lm_vf_load_f16_part((const uint16_t *)w + i, count);
    return lm_vf_load_part((const float *)w + i, count);
}

/* One weight row × T tokens over cols [k0, k1):
 *   y[t0+t, row] (+)= Σ_k x[t0+t, k] · W[row, k]      for t < T.
 * T is a compile-time constant at every call site (always_inline), so the
 * accumulators live in registers.  A single token (decode) gets 4
 * accumulators along k instead, to hide the FMA latency. */
static LM_ALWAYS_INLINE void dot_row(const matmul_job *job, lm_dtype dt, int T, int64_t row, int t0,
                                     int64_t k0, int64_t k1) {
    const int64_t cols = job->cols;
    const int64_t wrow = row * cols;
    const float *xt[8];
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) xt[t] = job->x + (int64_t)(t0 + t) * cols;
    lm_vf acc[8];
    LM_PRAGMA_UNROLL
    for (int i = 0; i < (T > 4 ? T : 4); i++) acc[i] = lm_vf_zero();

    int64_t k = k0;
    if (T == 1) {
        for (; k + 4 * LM_VF_WIDTH <= k1; k += 4 * LM_VF_WIDTH) {
            LM_PRAGMA_UNROLL
            for (int a = 0; a < 4; a++)
                acc[a] = lm_vf_fma(load_weights(job->w, dt, wrow + k + a * LM_VF_WIDTH),
                                   lm_vf_load(xt[0] + k + a * LM_VF_WIDTH), acc[a]);
        }
    }
    int a = 0; /* single token: the leftover vectors continue round the accumulators */
    for (; k + LM_VF_WIDTH <= k1; k += LM_VF_WIDTH) {
        lm_vf wv = load_weights(job->w, dt, wrow + k);
        if (T == 1) {
            acc[a] = lm_vf_fma(wv, lm_vf_load(xt[0] + k), acc[a]);
            a = (a + 1) & 3;
            continue;
        }
        LM_PRAGMA_UNROLL
        for (int t = 0; t < T; t++) acc[t] = lm_vf_fma(wv, lm_vf_load(xt[t] + k), acc[t]);
    }
    if (k < k1) {
        int count = (int)(k1 - k);
        lm_vf wv = load_weights_part(job->w, dt, wrow + k, count);
        if (T == 1) {
            acc[a] = lm_vf_fma(wv, lm_vf_load_part(xt[0] + k, count), acc[a]);
        } else {
            LM_PRAGMA_UNROLL
            for (int t = 0; t < T; t++)
                acc[t] = lm_vf_fma(wv, lm_vf_load_part(xt[t] + k, count), acc[t]);
        }
    }
    if (T == 1) acc[0] = lm_vf_add(lm_vf_add(acc[0], acc[1]), lm_vf_add(acc[2], acc[3]));
    bool first = k0 == 0;
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        float *yt = job->y + (int64_t)(t0 + t) * job->rows + row;
        float s = lm_vf_reduce_add(acc[t]);
        *yt = first ? s : *yt + s;
    }
}

typedef void (*row_fn)(const matmul_job *job, int64_t row, int t0, int64_t k0, int64_t k1);

#define DEFINE_ROW(SUFFIX, DT, T)                                                                  \
    static void row_##SUFFIX##_##T(const matmul_job *j, int64_t r, int t0, int64_t k0,             \
                                   int64_t k1) {                                                   \
        dot_row(j, DT, T, r, t0, k0, k1);                                                          \
    }
#define DEFINE_ROWS(SUFFIX, DT)                                                                    \
    DEFINE_ROW(SUFFIX, DT, 1)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 2)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 3)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 4)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 5)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 6)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 7)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 8)                                                                      \
    static const row_fn rows_##SUFFIX[9] = {NULL,                                                  \
                                            row_##SUFFIX##_1,                                      \
                                            row_##SUFFIX##_2,                                      \
                                            row_##SUFFIX##_3,                                      \
                                            row_##SUFFIX##_4,                                      \
                                            row_##SUFFIX##_5,                                      \
                                            row_##SUFFIX##_6,                                      \
                                            row_##SUFFIX##_7,                                      \
                                            row_##SUFFIX##_8};

DEFINE_ROWS(bf16, LM_DTYPE_BF16)
DEFINE_ROWS(f16, LM_DTYPE_F16)
DEFINE_ROWS(f32, LM_DTYPE_F32)

static void matmul_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const matmul_job *job = ctx;
    int64_t row_begin = (int64_t)task * job->rows_per_task;
    int64_t row_end = row_begin + job->rows_per_task;
    if (row_end > job->rows) row_end = job->rows;
    if (job->dtype == LM_DTYPE_FP8_B128) { /* matmul_fp8.c, tiled as Q8_0 below */
        for (int64_t p0 = row_begin; p0 < row_end; p0 += job->panel_rows) {
            int64_t p1 = p0 + job->panel_rows < row_end ? p0 + job->panel_rows : row_end;
            for (int t0 = 0; t0 < job->n; t0 += Q8_TILE_T) {
                int T = job->n - t0 < Q8_TILE_T ? job->n - t0 : Q8_TILE_T;
                for (int64_t r = p0; r < p1; r++)
                    lm_cpu_fp8_rows[T](job->y, job->x, job->w, job->rows, job->cols, r, t0);
            }
        }
        return;
    }
    if (job->dtype == LM_DTYPE_Q8_0) {
        /* matmul_q8.c: whole rows, no column blocks; tiles of Q8_TILE_T
         * tokens, so widening a block's int8 weights is shared by more
         * tokens (the arithmetic of a (row, token) is the same for any tile) */
        for (int64_t p0 = row_begin; p0 < row_end; p0 += job->panel_rows) {
            int64_t p1 = p0 + job->panel_rows < row_end ? p0 + job->panel_rows : row_end;
            for (int t0 = 0; t0 < job->n; t0 += Q8_TILE_T) {
                int T = job->n - t0 < Q8_TILE_T ? job->n - t0 : Q8_TILE_T;
                for (int64_t r = p0; r < p1; r++)
                    lm_cpu_q8_rows[T](job->y, job->x, job->w, job->rows, job->cols, r, t0);
            }
        }
        return;
    }
    if (lm_ggml_is_block(job->dtype)) { /* matmul_ggml.c: whole rows, its own token tiles */
        lm_cpu_ggml_matmul_rows(job->y, job->x, job->w, job->dtype, job->rows, job->cols, job->n,
                                row_begin, row_end, job->panel_rows);
        return;
    }
    const row_fn *kernels = job->dtype == LM_DTYPE_BF16  ? rows_bf16
                            : job->dtype == LM_DTYPE_F16 ? rows_f16
                                                         : rows_f32;
    /* Panels of rows whose weights (one cols block of them) stay in L2 while
     * every token tile passes over them. */
    for (int64_t p0 = row_begin; p0 < row_end; p0 += job->panel_rows) {
        int64_t p1 = p0 + job->panel_rows < row_end ? p0 + job->panel_rows : row_end;
        for (int64_t k0 = 0; k0 < job->cols || k0 == 0; k0 += job->col_block) {
            int64_t k1 = k0 + job->col_block < job->cols ? k0 + job->col_block : job->cols;
            for (int t0 = 0; t0 < job->n; t0 += TILE_MAX_T) {
                int T = job->n - t0 < TILE_MAX_T ? job->n - t0 : TILE_MAX_T;
                for (int64_t r = p0; r < p1; r++) kernels[T](job, r, t0, k0, k1);
            }
            if (job->cols == 0) break;
        }
    }
}

/* The job of one call, rows split into tasks of `per` rows. */
static matmul_job job_of(float *y, const float *x, int n, const lm_host_matrix *w, int64_t per) {
    matmul_job job = {
        .y = y,
        .x = x,
        .w = w->data,
        .rows = w->rows,
        .cols = w->cols,
        .n = n,
        .dtype = w->dtype,
        .col_block = n == 1 || w->cols <= PREFILL_COL_BLOCK || lm_dtype_is_block(w->dtype)
                         ? w->cols
                         : PREFILL_COL_BLOCK,
        .rows_per_task = per,
    };
    int64_t block_bytes = (int64_t)lm_dtype_row_bytes(w->dtype, job.col_block);
    int64_t panel = PANEL_BYTES / (block_bytes > 0 ? block_bytes : 1);
    panel = panel / TASK_ROW_ALIGN * TASK_ROW_ALIGN;
    job.panel_rows = panel > TASK_ROW_ALIGN ? panel : TASK_ROW_ALIGN;
    return job;
}

/* Several tasks per thread, taken dynamically, so a core slowed by a
 * neighbour does not hold the whole call back. */
static int64_t rows_per_task(lm_pool *pool, int64_t rows) {
    int threads = lm_pool_size(pool);
    int64_t tasks_wanted = threads > 1 ? (int64_t)threads * TASKS_PER_THREAD : 1;
    int64_t per = (rows + tasks_wanted - 1) / tasks_wanted;
    return (per + TASK_ROW_ALIGN - 1) / TASK_ROW_ALIGN * TASK_ROW_ALIGN;
}

static bool kernel_dtype(lm_dtype d) {
    return d == LM_DTYPE_BF16 || d == LM_DTYPE_F16 || d == LM_DTYPE_F32 || d == LM_DTYPE_Q8_0 ||
           d == LM_DTYPE_FP8_B128 || lm_ggml_is_block(d);
}

void lm_cpu_matmul(lm_pool *pool, float *y, const float *x, int n, const lm_host_matrix *w) {
    if (n <= 0 || w->rows <= 0) return;
    if (!kernel_dtype(w->dtype)) {
        lm_ref_matmul(y, x, n, w); /* loaders only hand float matrices to kernels */
        return;
    }
    matmul_job job = job_of(y, x, n, w, rows_per_task(pool, w->rows));
    int64_t n_tasks = (w->rows + job.rows_per_task - 1) / job.rows_per_task;
    lm_pool_run(pool, (int)n_tasks, matmul_task, &job);
}

/* ---- several independent matmuls in one pool run ---- */

typedef struct {
    matmul_job jobs[LM_CPU_MATMUL_MANY_MAX];
    int first_task[LM_CPU_MATMUL_MANY_MAX + 1];
    int n_jobs;
} matmul_many_job;

static void matmul_many_task(void *ctx, int task, int n_tasks) {
    const matmul_many_job *m = ctx;
    int lo = 0, hi = m->n_jobs - 1; /* the job whose tasks hold `task` */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (m->first_task[mid] <= task) lo = mid;
        else hi = mid - 1;
    }
    matmul_task((void *)&m->jobs[lo], task - m->first_task[lo], n_tasks);
}

void lm_cpu_matmul_many(lm_pool *pool, const lm_cpu_matmul_call *calls, int n_calls) {
    while (n_calls > 0) {
        int take = n_calls < LM_CPU_MATMUL_MANY_MAX ? n_calls : LM_CPU_MATMUL_MANY_MAX;
        matmul_many_job m;
        m.n_jobs = 0;
        int64_t rows = 0;
        for (int i = 0; i < take; i++) rows += calls[i].n > 0 ? calls[i].w->rows : 0;
        int64_t per = rows_per_task(pool, rows > 0 ? rows : 1);
        int tasks = 0;
        for (int i = 0; i < take; i++) {
            const lm_cpu_matmul_call *c = &calls[i];
            if (c->n <= 0 || c->w->rows <= 0) continue;
            if (!kernel_dtype(c->w->dtype)) {
                lm_ref_matmul(c->y, c->x, c->n, c->w);
                continue;
            }
            m.jobs[m.n_jobs] = job_of(c->y, c->x, c->n, c->w, per);
            m.first_task[m.n_jobs++] = tasks;
            tasks += (int)((c->w->rows + per - 1) / per);
        }
        m.first_task[m.n_jobs] = tasks;
        if (tasks > 0) lm_pool_run(pool, tasks, matmul_many_task, &m);
        calls += take;
        n_calls -= take;
    }
}

static void embed_row(float *out, const lm_host_matrix *table, int64_t row) {
    int64_t cols = table->cols, i = 0;
    switch (table->dtype) {
    case LM_DTYPE_F32:
        memcpy(out, (const float *)table->data + row * cols, sizeof(float) * (size_t)cols);
        return;
    case LM_DTYPE_BF16: {
        const uint16_t *src = (const uint16_t *)table->data + row * cols;
        for (; i + LM_VF_WIDTH <= cols; i += LM_VF_WIDTH)
            lm_vf_store(out + i, lm_vf_load_bf16(src + i));
        for (; i < cols; i++) out[i] = lm_bf16_to_f32(src[i]);
        return;
    }
    case LM_DTYPE_F16: {
        const uint16_t *src = (const uint16_t *)table->data + row * cols;
        for (; i + LM_VF_WIDTH <= cols; i += LM_VF_WIDTH)
            lm_vf_store(out + i, lm_vf_load_f16(src + i));
        for (; i < cols; i++) out[i] = lm_f16_to_f32(src[i]);
        return;
    }
    default:
        if (lm_ggml_is_block(table->dtype)) { /* the row's blocks, dequantized as ggml does */
            lm_ggml_dequantize_row(table->dtype,
                                   (const uint8_t *)table->data + (size_t)row * lm_dtype_row_bytes(table->dtype, cols),
                                   out, cols);
            return;
        }
        for (; i < cols; i++) out[i] = lm_ref_weight_at(table, row, i);
        return;
    }
}

void lm_cpu_embed(float *out, const int32_t *ids, int n, const lm_host_matrix *table) { /* a few rows per step: not worth waking the pool */
    for (int t = 0; t < n; t++) embed_row(out + (int64_t)t * table->cols, table, ids[t]);
}
