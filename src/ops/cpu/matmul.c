/* y[n, rows] = x[n, cols] · Wᵀ with W bf16, f16 or f32; x, y float32.
 *
 * One kernel family, vectorised along cols (the dot-product direction, which
 * is contiguous in both x and W): a tile of R weight rows × T tokens keeps
 * R·T accumulators in registers, so every weight vector loaded (and widened
 * to float32 in registers, never rounding the activations) feeds T FMAs and
 * every x vector R FMAs.
 *   - decode (n = 1) is memory-bound: 8 rows per tile give 8 independent
 *     weight streams per core; the rows are split among the pool's threads.
 *   - prefill (n > 1) reuses each weight block for up to 6 tokens; cols is cut
 *     into blocks so the x block of a token tile stays in L1 while the weight
 *     rows of one task stream through L2 (weights are read from memory once
 *     per call, not once per token).
 *
 * Determinism: the arithmetic of one output (row, token) is the same whatever
 * tile or thread computes it (one accumulator per pair, cols walked in the
 * same order, the same cols blocks), so results are bitwise identical for any
 * thread count. */
#include <stdint.h>
#include <string.h>

#include "base/bf16.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/reference.h"
#include "ops/cpu/simd.h"

#define TILE_MAX_T 6 /* tokens per tile */
#define PREFILL_COL_BLOCK 512
/* Rows handed to one task at a time: a multiple of every tile height, small
 * enough for the pool to balance two busy cores, big enough that a task
 * streams a few hundred KB. */
#define TASK_ROW_ALIGN 24

typedef struct {
    float *y;
    const float *x;
    const void *w;
    int64_t rows, cols;
    int n;
    lm_dtype dtype;
    int64_t col_block; /* cols per block (cols itself at decode) */
    int64_t rows_per_task;
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

/* y[t0+t, row0+r] (+)= Σ_{k in [k0,k1)} x[t0+t, k] · W[row0+r, k] for r < R, t < T.
 * R and T are compile-time constants at every call site (always_inline), so
 * the accumulator array lives in registers. */
static LM_ALWAYS_INLINE void dot_tile(const matmul_job *job, lm_dtype dt, int R, int T,
                                      int64_t row0, int t0, int64_t k0, int64_t k1) {
    const int64_t cols = job->cols;
    const float *xt[TILE_MAX_T];
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) xt[t] = job->x + (int64_t)(t0 + t) * cols;
    lm_vf acc[8 * TILE_MAX_T];
    LM_PRAGMA_UNROLL
    for (int i = 0; i < R * T; i++) acc[i] = lm_vf_zero();

    int64_t k = k0;
    for (; k + LM_VF_WIDTH <= k1; k += LM_VF_WIDTH) {
        lm_vf wv[8];
        LM_PRAGMA_UNROLL
        for (int r = 0; r < R; r++) wv[r] = load_weights(job->w, dt, (row0 + r) * cols + k);
        LM_PRAGMA_UNROLL
        for (int t = 0; t < T; t++) {
            lm_vf xv = lm_vf_load(xt[t] + k);
            LM_PRAGMA_UNROLL
            for (int r = 0; r < R; r++) acc[r * T + t] = lm_vf_fma(wv[r], xv, acc[r * T + t]);
        }
    }
    if (k < k1) {
        int count = (int)(k1 - k);
        lm_vf wv[8];
        LM_PRAGMA_UNROLL
        for (int r = 0; r < R; r++) wv[r] = load_weights_part(job->w, dt, (row0 + r) * cols + k, count);
        LM_PRAGMA_UNROLL
        for (int t = 0; t < T; t++) {
            lm_vf xv = lm_vf_load_part(xt[t] + k, count);
            LM_PRAGMA_UNROLL
            for (int r = 0; r < R; r++) acc[r * T + t] = lm_vf_fma(wv[r], xv, acc[r * T + t]);
        }
    }
    bool first = k0 == 0;
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        float *yt = job->y + (int64_t)(t0 + t) * job->rows + row0;
        LM_PRAGMA_UNROLL
        for (int r = 0; r < R; r++) {
            float s = lm_vf_reduce_add(acc[r * T + t]);
            yt[r] = first ? s : yt[r] + s;
        }
    }
}

typedef void (*tile_fn)(const matmul_job *job, int64_t row0, int t0, int64_t k0, int64_t k1);

/* Tile heights per token count: R·T accumulators + R weight vectors + 1 x
 * vector must fit the 32 (AVX-512) registers. */
#define TILE_R_FOR_T(T) ((T) == 1 ? 8 : (T) <= 3 ? 6 : 4)

#define DEFINE_TILES(SUFFIX, DT)                                                                \
    static void tile_##SUFFIX##_1(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, TILE_R_FOR_T(1), 1, r0, t0, a, b);                                     \
    }                                                                                          \
    static void tile_##SUFFIX##_2(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, TILE_R_FOR_T(2), 2, r0, t0, a, b);                                     \
    }                                                                                          \
    static void tile_##SUFFIX##_3(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, TILE_R_FOR_T(3), 3, r0, t0, a, b);                                     \
    }                                                                                          \
    static void tile_##SUFFIX##_4(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, TILE_R_FOR_T(4), 4, r0, t0, a, b);                                     \
    }                                                                                          \
    static void tile_##SUFFIX##_5(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, TILE_R_FOR_T(5), 5, r0, t0, a, b);                                     \
    }                                                                                          \
    static void tile_##SUFFIX##_6(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, TILE_R_FOR_T(6), 6, r0, t0, a, b);                                     \
    }                                                                                          \
    /* one row at a time, for the rows left below a full tile */                               \
    static void row_##SUFFIX##_1(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, 1, 1, r0, t0, a, b);                                                   \
    }                                                                                          \
    static void row_##SUFFIX##_2(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, 1, 2, r0, t0, a, b);                                                   \
    }                                                                                          \
    static void row_##SUFFIX##_3(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, 1, 3, r0, t0, a, b);                                                   \
    }                                                                                          \
    static void row_##SUFFIX##_4(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, 1, 4, r0, t0, a, b);                                                   \
    }                                                                                          \
    static void row_##SUFFIX##_5(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, 1, 5, r0, t0, a, b);                                                   \
    }                                                                                          \
    static void row_##SUFFIX##_6(const matmul_job *j, int64_t r0, int t0, int64_t a, int64_t b) { \
        dot_tile(j, DT, 1, 6, r0, t0, a, b);                                                   \
    }                                                                                          \
    static const tile_fn tiles_##SUFFIX[TILE_MAX_T + 1] = {                                    \
        NULL, tile_##SUFFIX##_1, tile_##SUFFIX##_2, tile_##SUFFIX##_3,                          \
        tile_##SUFFIX##_4, tile_##SUFFIX##_5, tile_##SUFFIX##_6};                              \
    static const tile_fn rows_##SUFFIX[TILE_MAX_T + 1] = {                                     \
        NULL, row_##SUFFIX##_1, row_##SUFFIX##_2, row_##SUFFIX##_3,                             \
        row_##SUFFIX##_4, row_##SUFFIX##_5, row_##SUFFIX##_6};

DEFINE_TILES(bf16, LM_DTYPE_BF16)
DEFINE_TILES(f16, LM_DTYPE_F16)
DEFINE_TILES(f32, LM_DTYPE_F32)

static void matmul_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const matmul_job *job = ctx;
    int64_t row_begin = (int64_t)task * job->rows_per_task;
    int64_t row_end = row_begin + job->rows_per_task;
    if (row_end > job->rows) row_end = job->rows;
    const tile_fn *tiles = job->dtype == LM_DTYPE_BF16  ? tiles_bf16
                           : job->dtype == LM_DTYPE_F16 ? tiles_f16
                                                        : tiles_f32;
    const tile_fn *singles = job->dtype == LM_DTYPE_BF16  ? rows_bf16
                             : job->dtype == LM_DTYPE_F16 ? rows_f16
                                                          : rows_f32;
    for (int64_t k0 = 0; k0 < job->cols || k0 == 0; k0 += job->col_block) {
        int64_t k1 = k0 + job->col_block < job->cols ? k0 + job->col_block : job->cols;
        for (int t0 = 0; t0 < job->n; t0 += TILE_MAX_T) {
            int T = job->n - t0 < TILE_MAX_T ? job->n - t0 : TILE_MAX_T;
            int R = TILE_R_FOR_T(T);
            int64_t r = row_begin;
            for (; r + R <= row_end; r += R) tiles[T](job, r, t0, k0, k1);
            for (; r < row_end; r++) singles[T](job, r, t0, k0, k1);
        }
        if (job->cols == 0) break;
    }
}

void lm_cpu_matmul(lm_backend *be, float *y, const float *x, int n, const lm_matrix *w) {
    if (n <= 0 || w->rows <= 0) return;
    if (w->dtype != LM_DTYPE_BF16 && w->dtype != LM_DTYPE_F16 && w->dtype != LM_DTYPE_F32) {
        lm_ref_matmul(y, x, n, w); /* loaders only hand float matrices to kernels */
        return;
    }
    lm_pool *pool = lm_cpu_pool(be);
    int threads = lm_pool_size(pool);
    matmul_job job = {
        .y = y, .x = x, .w = w->data, .rows = w->rows, .cols = w->cols, .n = n,
        .dtype = w->dtype,
        .col_block = n == 1 || w->cols <= PREFILL_COL_BLOCK ? w->cols : PREFILL_COL_BLOCK,
    };
    /* Several tasks per thread so a core slowed by a neighbour does not hold
     * the whole call back; never less than one tile per task. */
    int64_t tasks_wanted = threads > 1 ? (int64_t)threads * 4 : 1;
    int64_t per = (w->rows + tasks_wanted - 1) / tasks_wanted;
    per = (per + TASK_ROW_ALIGN - 1) / TASK_ROW_ALIGN * TASK_ROW_ALIGN;
    job.rows_per_task = per;
    int64_t n_tasks = (w->rows + per - 1) / per;
    lm_pool_run(pool, (int)n_tasks, matmul_task, &job);
}

static void embed_row(float *out, const lm_matrix *table, int64_t row) {
    int64_t cols = table->cols, i = 0;
    switch (table->dtype) {
    case LM_DTYPE_F32: memcpy(out, (const float *)table->data + row * cols, sizeof(float) * (size_t)cols); return;
    case LM_DTYPE_BF16: {
        const uint16_t *src = (const uint16_t *)table->data + row * cols;
        for (; i + LM_VF_WIDTH <= cols; i += LM_VF_WIDTH) lm_vf_store(out + i, lm_vf_load_bf16(src + i));
        for (; i < cols; i++) out[i] = lm_bf16_to_f32(src[i]);
        return;
    }
    case LM_DTYPE_F16: {
        const uint16_t *src = (const uint16_t *)table->data + row * cols;
        for (; i + LM_VF_WIDTH <= cols; i += LM_VF_WIDTH) lm_vf_store(out + i, lm_vf_load_f16(src + i));
        for (; i < cols; i++) out[i] = lm_f16_to_f32(src[i]);
        return;
    }
    default:
        for (; i < cols; i++) out[i] = lm_ref_weight_at(table, row, i);
        return;
    }
}

void lm_cpu_embed(lm_backend *be, float *out, const int32_t *ids, int n, const lm_matrix *table) {
    (void)be; /* a few rows per step: not worth waking the pool */
    for (int t = 0; t < n; t++) embed_row(out + (int64_t)t * table->cols, table, ids[t]);
}
