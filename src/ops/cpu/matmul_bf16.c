/* bf16 compute on the cpu: y[n, rows] = bf16(x)[n, cols] · Wᵀ for bf16 W,
 * with AVX-512 BF16 (vdpbf16ps: 32 bf16 products summed pairwise into 16
 * float32 lanes per instruction), selected at run time (cpu_features.h).
 *
 *   1. Each row of x is rounded to bf16 (round to nearest even) into the
 *      backend's scratch, zero-padded to a multiple of 32 columns: the
 *      rounding of a row depends on that row alone.
 *   2. Tiles of R weight rows x T tokens (R·T <= 16 accumulators, one zmm per
 *      output) run over the whole of K, 32 columns per step: T x loads and R
 *      weight loads feed R·T dot products.  Rows come in panels of about
 *      PANEL_BYTES of weights that stay in L2 while every token tile passes
 *      over them, so the weights leave memory once per call.
 *   3. The 16 accumulators of a tile are reduced together by one transpose
 *      network (16 vectors in, one vector of 16 sums out).
 *
 * Batch invariance, exactly: an output's arithmetic is one accumulator
 * running over k = 0, 32, 64, ... in order (the last step masked), then the
 * fixed tree of the reduction network (lane i + lane i+8, then +4, +2, +1:
 * the same pairing for every slot of the network).  Tiles past the last row
 * or token re-read the last one and store nothing for it, so neither the
 * tile shape (which depends on n), the panel, the task nor the thread
 * changes a bit of any output: a token gets the same bits alone or in a
 * batch of any size. */
#include <stdint.h>
#include <string.h>

#include "ops/cpu/matmul_bf16.h"

#define PANEL_BYTES (256 * 1024)
#define TASKS_PER_THREAD 4
#define TASK_ROW_ALIGN 16 /* task and panel rows are multiples of this */
#define TOKENS_PER_TILE 4 /* the widest tile: 4 rows x 4 tokens */

size_t lm_cpu_bf16_padded_cols(int64_t cols) { return (size_t)((cols + 31) / 32 * 32); }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define BF16_INLINE inline __attribute__((always_inline)) BF16_TARGET
#define UNROLL _Pragma("GCC unroll 16")

typedef struct {
    float *y;
    const uint16_t *xb; /* [n][kpad] bf16 */
    const uint16_t *w;  /* [rows][cols] bf16 */
    int64_t rows, cols, kpad;
    int n;
    int64_t rows_per_task, panel_rows;
} bf16_job;

/* ---- step 1: activations to bf16, one row at a time ---- */

typedef struct {
    uint16_t *xb;
    const float *x;
    int64_t cols, kpad;
    int n, rows_per_task;
} convert_job;

static BF16_TARGET void convert_row(uint16_t *dst, const float *src, int64_t cols, int64_t kpad) {
    int64_t k = 0;
    for (; k + 32 <= cols; k += 32) {
        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + k + 16), _mm512_loadu_ps(src + k));
        _mm512_storeu_si512((void *)(dst + k), (__m512i)h);
    }
    if (k < cols) { /* the tail, zero beyond cols up to kpad */
        int rest = (int)(cols - k);
        __mmask16 lo = (__mmask16)(rest >= 16 ? 0xffffu : (1u << rest) - 1u);
        __mmask16 hi = (__mmask16)(rest > 16 ? (1u << (rest - 16)) - 1u : 0u);
        __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + k + 16),
                                         _mm512_maskz_loadu_ps(lo, src + k));
        _mm512_storeu_si512((void *)(dst + k), (__m512i)h);
        k += 32;
    }
    for (; k < kpad; k++) dst[k] = 0;
}

static BF16_TARGET void convert_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const convert_job *c = ctx;
    int t1 = (task + 1) * c->rows_per_task < c->n ? (task + 1) * c->rows_per_task : c->n;
    for (int t = task * c->rows_per_task; t < t1; t++)
        convert_row(c->xb + (int64_t)t * c->kpad, c->x + (int64_t)t * c->cols, c->cols, c->kpad);
}

/* ---- step 3: 16 accumulators to 16 sums ---- */

/* Lane i of the result holds the sum of accumulator (i % 4) * 4 + i / 4;
 * slot_lane() is the inverse. */
static BF16_INLINE __m512 reduce16(const __m512 v[16]) {
    __m512 a[8], b[4], c[2];
    UNROLL
    for (int j = 0; j < 8; j++) /* lane i + lane i+8: two outputs x 8 partials */
        a[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE));
    UNROLL
    for (int j = 0; j < 4; j++) /* + 4: four outputs x 4 partials */
        b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xDD));
    UNROLL
    for (int j = 0; j < 2; j++) /* + 2: eight outputs x 2 partials */
        c[j] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* + 1: sixteen sums */
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

static inline int slot_lane(int slot) { return (slot % 4) * 4 + slot / 4; }

/* ---- step 2: one tile of R rows x T tokens ---- */

/* Rows [r0, r0+R) ∩ [.., r_end) and tokens [t0, t0+T) ∩ [.., n).  R, T and
 * prefetch are literals at every call (always_inline), so the accumulators
 * are registers.  With prefetch (the first token tile over a panel, whose
 * weights come from memory) each step also prefetches the same columns of
 * the next R rows: the hardware prefetcher alone kept the R row streams of
 * a tile too short to cover the memory latency. */
static BF16_INLINE void tile(const bf16_job *j, const int R, const int T, int64_t r0, int64_t r_end,
                             int t0, const bool prefetch, int64_t pf0) {
    const uint16_t *wr[16];
    const uint16_t *xr[TOKENS_PER_TILE];
    UNROLL
    for (int i = 0; i < R; i++) wr[i] = j->w + (r0 + i < r_end ? r0 + i : r_end - 1) * j->cols;
    const uint16_t *pr[16]; /* the rows to prefetch: the next R, within the matrix */
    UNROLL
    for (int i = 0; i < R; i++)
        pr[i] = prefetch ? j->w + (pf0 + i < j->rows ? pf0 + i : j->rows - 1) * j->cols : NULL;
    UNROLL
    for (int t = 0; t < T; t++) xr[t] = j->xb + (int64_t)(t0 + t < j->n ? t0 + t : j->n - 1) * j->kpad;
    __m512 acc[16];
    UNROLL
    for (int s = 0; s < 16; s++) acc[s] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= j->cols; k += 32) {
        if (prefetch) {
            UNROLL
            for (int i = 0; i < R; i++)
                _mm_prefetch((const char *)(pr[i] + k), _MM_HINT_T0);
        }
        __m512bh xv[TOKENS_PER_TILE];
        UNROLL
        for (int t = 0; t < T; t++) xv[t] = (__m512bh)_mm512_loadu_si512((const void *)(xr[t] + k));
        UNROLL
        for (int i = 0; i < R; i++) {
            __m512bh wv = (__m512bh)_mm512_loadu_si512((const void *)(wr[i] + k));
            UNROLL
            for (int t = 0; t < T; t++) acc[i * T + t] = _mm512_dpbf16_ps(acc[i * T + t], xv[t], wv);
        }
    }
    if (k < j->cols) { /* the masked last step: x is zero-padded, W must not be read past cols */
        __mmask32 m = (__mmask32)((1u << (j->cols - k)) - 1u);
        __m512bh xv[TOKENS_PER_TILE];
        UNROLL
        for (int t = 0; t < T; t++) xv[t] = (__m512bh)_mm512_loadu_si512((const void *)(xr[t] + k));
        UNROLL
        for (int i = 0; i < R; i++) {
            __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, wr[i] + k);
            UNROLL
            for (int t = 0; t < T; t++) acc[i * T + t] = _mm512_dpbf16_ps(acc[i * T + t], xv[t], wv);
        }
    }
    float sums[16];
    _mm512_storeu_ps(sums, reduce16(acc));
    for (int t = 0; t < T && t0 + t < j->n; t++) {
        float *yt = j->y + (int64_t)(t0 + t) * j->rows;
        for (int i = 0; i < R && r0 + i < r_end; i++) yt[r0 + i] = sums[slot_lane(i * T + t)];
    }
}

/* Rows per tile by tokens per tile: about 16 accumulators, and at least 8
 * independent ones (vdpbf16ps latency) for a single token. */
#ifndef TILE_ROWS_1
#define TILE_ROWS_1 8
#endif
#define TILE_ROWS_2 8
#define TILE_ROWS_3 5
#define TILE_ROWS_4 4

/* The tiles of rows [p0, p1) for tokens [t0, t0+T), pass `pass` of n_pass
 * over the panel.  Tiles of 3 or 4 tokens prefetch (1 and 2 measured no
 * better: at decode the 8-row tiles are latency-bound): in the first pass,
 * whose weights come from memory, every tile the next R rows; in the later
 * passes, which run from L2 while the memory would be idle, every
 * (n_pass-1)-th tile the rows of the next panel at its place, so the next
 * panel is on its way by the time its first pass starts. */
#define TILES(R, T)                                                                                \
    do {                                                                                           \
        if (T < 3) {                                                                               \
            for (int64_t r = p0; r < p1; r += R) tile(j, R, T, r, p1, t0, false, 0);               \
        } else if (pass == 0) {                                                                    \
            for (int64_t r = p0; r < p1; r += R) tile(j, R, T, r, p1, t0, true, r + R);            \
        } else {                                                                                   \
            int64_t ti = 0;                                                                        \
            for (int64_t r = p0; r < p1; r += R, ti++) {                                           \
                int64_t next = r + (p1 - p0);                                                      \
                if (next < q1 && ti % (n_pass - 1) == pass - 1)                                    \
                    tile(j, R, T, r, p1, t0, true, next);                                          \
                else                                                                               \
                    tile(j, R, T, r, p1, t0, false, 0);                                            \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static BF16_TARGET void rows_of_tiles(const bf16_job *j, int T, int64_t p0, int64_t p1, int t0,
                                      int pass, int n_pass, int64_t q1) {
    switch (T) {
    case 1:
        TILES(TILE_ROWS_1, 1);
        break;
    case 2:
        TILES(TILE_ROWS_2, 2);
        break;
    case 3:
        TILES(TILE_ROWS_3, 3);
        break;
    default:
        TILES(TILE_ROWS_4, 4);
        break;
    }
}

static BF16_TARGET void matmul_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const bf16_job *j = ctx;
    int64_t row_begin = (int64_t)task * j->rows_per_task;
    int64_t row_end = row_begin + j->rows_per_task < j->rows ? row_begin + j->rows_per_task : j->rows;
    for (int64_t p0 = row_begin; p0 < row_end; p0 += j->panel_rows) {
        int64_t p1 = p0 + j->panel_rows < row_end ? p0 + j->panel_rows : row_end;
        /* the next panel: [p1, q1) */
        int64_t q1 = p1 + j->panel_rows < row_end ? p1 + j->panel_rows : row_end;
        int n_pass = (j->n + TOKENS_PER_TILE - 1) / TOKENS_PER_TILE;
        for (int t0 = 0, pass = 0; t0 < j->n; t0 += TOKENS_PER_TILE, pass++) {
            int T = j->n - t0 < TOKENS_PER_TILE ? j->n - t0 : TOKENS_PER_TILE;
            rows_of_tiles(j, T, p0, p1, t0, pass, n_pass, q1);
        }
    }
}

void lm_cpu_matmul_bf16(lm_pool *pool, uint16_t *scratch, float *y, const float *x, int n,
                        const lm_host_matrix *w) {
    if (n <= 0 || w->rows <= 0) return;
    int threads = lm_pool_size(pool);
    int64_t kpad = (int64_t)lm_cpu_bf16_padded_cols(w->cols);
    convert_job c = {.xb = scratch, .x = x, .cols = w->cols, .kpad = kpad, .n = n};
    c.rows_per_task = (n + threads - 1) / threads;
    if (n * w->cols < 16384) c.rows_per_task = n; /* not worth waking the pool */
    lm_pool_run(pool, (n + c.rows_per_task - 1) / c.rows_per_task, convert_task, &c);
    if (w->cols == 0) { /* an empty sum */
        memset(y, 0, sizeof(float) * (size_t)n * (size_t)w->rows);
        return;
    }

    bf16_job j = {.y = y, .xb = scratch, .w = w->data, .rows = w->rows, .cols = w->cols,
                  .kpad = kpad, .n = n};
    int64_t tasks_wanted = threads > 1 ? (int64_t)threads * TASKS_PER_THREAD : 1;
    int64_t per = (w->rows + tasks_wanted - 1) / tasks_wanted;
    j.rows_per_task = (per + TASK_ROW_ALIGN - 1) / TASK_ROW_ALIGN * TASK_ROW_ALIGN;
    int64_t panel = PANEL_BYTES / (2 * w->cols) / TASK_ROW_ALIGN * TASK_ROW_ALIGN;
    j.panel_rows = panel > TASK_ROW_ALIGN ? panel : TASK_ROW_ALIGN;
    int64_t n_tasks = (w->rows + j.rows_per_task - 1) / j.rows_per_task;
    lm_pool_run(pool, (int)n_tasks, matmul_task, &j);
}

#else /* not x86-64: lm_cpu_features_detect never reports avx512_bf16 */

void lm_cpu_matmul_bf16(lm_pool *pool, uint16_t *scratch, float *y, const float *x, int n,
                        const lm_host_matrix *w) {
    (void)pool, (void)scratch, (void)x;
    if (n > 0 && w->rows > 0) memset(y, 0, sizeof(float) * (size_t)n * (size_t)w->rows);
}

#endif
