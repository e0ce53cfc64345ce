/* lm_matmul speed on the Qwen3.5 0.8B shapes with bf16 weights:
 *   decode  (n = 1): GB/s of weights streamed, next to a plain read pass
 *                    (a max over the same bytes, same threads) timed just
 *                    before it, so the ratio holds up on a noisy machine;
 *   prefill (n = 64 by default): GFLOP/s (2·n·rows·cols per call).
 * Best and median of several timed calls after a warm-up, on the cpu
 * backend's pool (the read pass borrows it through the backend's private
 * header).  Weights are imported as checkpoints are (used in place).
 * Each matrix gets its own buffer, and decode cycles through copies so the
 * weights are not served from cache (the 32 MB L3 would hold a small one).
 *
 * usage: matvec [threads (default 2)] [prefill tokens (default 64)] [runs (default 9)]
 *               [compute: f32 (default) or bf16 (lm_backend_set_compute)]
 *               [weights: bf16 (default), q8 (Q8_0 blocks, --quantize int8) or a ggml
 *                block format as GGUF files hold it: q4_0, q4_k, q6_k, ggml_q8_0]
 *               [shapes: 0.8b (default) or 2b (hidden 2048, intermediate 6144)]
 * The ggml formats' decode GB/s count the bytes the blocks take (4.5 bits a
 * weight for Q4_0 and Q4_K), so they compare with the read pass directly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bf16.h"
#include "base/big_alloc.h"
#include "base/ggml_quant.h"
#include "base/quant.h"
#include "base/threadpool.h"
#include "base/simd.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/ops.h"

typedef struct {
    const char *name;
    int64_t rows, cols;
} shape;

static const shape shapes_08b[] = {
    {"qkv/z proj 1024->6144", 6144, 1024},   {"attn out 2048->1024", 1024, 2048},
    {"gate|up 1024->3584 (x2)", 7168, 1024}, {"down 3584->1024", 1024, 3584},
    {"lm_head 1024->248320", 248320, 1024},
};
static const shape shapes_2b[] = {
    {"qkv proj 2048->6144", 6144, 2048},      {"attn out 2048->2048", 2048, 2048},
    {"gate|up 2048->6144 (x2)", 12288, 2048}, {"down 6144->2048", 2048, 6144},
    {"lm_head 2048->248320", 248320, 2048},
};

static const struct {
    const char *name;
    lm_dtype dtype;
} weight_kinds[] = {{"bf16", LM_DTYPE_BF16},          {"q8", LM_DTYPE_Q8_0},
                    {"q4_0", LM_DTYPE_GGML_Q4_0},     {"q4_k", LM_DTYPE_GGML_Q4_K},
                    {"q6_k", LM_DTYPE_GGML_Q6_K},     {"ggml_q8_0", LM_DTYPE_GGML_Q8_0}};


static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The read pass: every thread takes a share of the bytes and folds them
 * with max (no arithmetic that denormals could slow down). */
typedef struct {
    const float *data;
    long n; /* floats */
    float result[64];
} read_job;

static void read_task(void *ctx, int task, int n_tasks) {
    read_job *j = ctx;
    long begin, end;
    lm_split_range(j->n / (4 * LM_VF_WIDTH), n_tasks, task, &begin, &end);
    lm_vf m0 = lm_vf_zero(), m1 = m0, m2 = m0, m3 = m0;
    for (long i = begin * 4 * LM_VF_WIDTH; i < end * 4 * LM_VF_WIDTH; i += 4 * LM_VF_WIDTH) {
        m0 = lm_vf_max(m0, lm_vf_load(j->data + i));
        m1 = lm_vf_max(m1, lm_vf_load(j->data + i + LM_VF_WIDTH));
        m2 = lm_vf_max(m2, lm_vf_load(j->data + i + 2 * LM_VF_WIDTH));
        m3 = lm_vf_max(m3, lm_vf_load(j->data + i + 3 * LM_VF_WIDTH));
    }
    j->result[task % 64] = lm_vf_reduce_max(lm_vf_max(lm_vf_max(m0, m1), lm_vf_max(m2, m3)));
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rng_float(uint64_t *s) { return (float)(rng_next(s) >> 40) / (float)(1 << 24) - 0.5f; }

/* One row of random weights in dtype at out: ggml formats ggml can make
 * from floats are quantized; the K-quants (no quantizer in loom) get
 * random bytes with small float16 scales, which cost the same to read. */
static void make_row(lm_dtype dtype, const float *row, int64_t cols, uint8_t *out, uint64_t *seed) {
    if (dtype == LM_DTYPE_Q8_0) {
        lm_q8_quantize_row(row, cols, out);
    } else if (dtype == LM_DTYPE_BF16) {
        for (int64_t i = 0; i < cols; i++) ((uint16_t *)out)[i] = lm_f32_to_bf16(row[i]);
    } else if (lm_ggml_can_quantize(dtype)) {
        lm_ggml_quantize_row(dtype, row, cols, out);
    } else {
        size_t bytes = lm_dtype_row_bytes(dtype, cols), block = lm_dtype_block_bytes(dtype);
        for (size_t i = 0; i < bytes; i++) out[i] = (uint8_t)(rng_next(seed) >> 56);
        uint16_t d = lm_ggml_f32_to_f16(0.001f);
        for (size_t b = 0; b < bytes / block; b++)
            memcpy(out + b * block + (dtype == LM_DTYPE_GGML_Q6_K ? 208 : 0), &d, 2);
    }
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int n_prefill = argc > 2 ? atoi(argv[2]) : 64;
    int runs = argc > 3 ? atoi(argv[3]) : 9;
    const char *compute = argc > 4 ? argv[4] : "f32";
    const char *weights = argc > 5 ? argv[5] : "bf16", *set = argc > 6 ? argv[6] : "0.8b";
    lm_dtype dtype = LM_DTYPE_COUNT;
    for (size_t i = 0; i < sizeof weight_kinds / sizeof *weight_kinds; i++)
        if (strcmp(weights, weight_kinds[i].name) == 0) dtype = weight_kinds[i].dtype;
    bool two_b = strcmp(set, "2b") == 0;
    const shape *shapes = two_b ? shapes_2b : shapes_08b;
    size_t n_shapes = two_b ? sizeof shapes_2b / sizeof *shapes_2b : sizeof shapes_08b / sizeof *shapes_08b;
    if (n_prefill < 1 || n_prefill > 4096 || runs < 1 || runs > 99 || dtype == LM_DTYPE_COUNT ||
        (!two_b && strcmp(set, "0.8b") != 0)) {
        fprintf(stderr, "usage: matvec [threads] [prefill tokens 1..4096] [runs 1..99] [f32|bf16] "
                        "[bf16|q8|q4_0|q4_k|q6_k|ggml_q8_0] [0.8b|2b]\n");
        return 2;
    }
    lm_error err = {0};
    lm_backend *be = NULL;
    if (lm_backend_cpu_create(threads, &be, &err) != LM_OK ||
        lm_backend_set_compute(be, compute, &err) != LM_OK) {
        fprintf(stderr, "matvec: %s\n", err.message);
        return 1;
    }
    printf("matvec: %d threads, %s weights, %s shapes, %s compute, decode n=1 and prefill n=%d, %d runs\n",
           lm_backend_threads(be), lm_dtype_name(dtype), set, lm_backend_compute(be), n_prefill, runs);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int64_t max_cols = 0, max_rows = 0;
    for (size_t s = 0; s < n_shapes; s++) {
        if (shapes[s].cols > max_cols) max_cols = shapes[s].cols;
        if (shapes[s].rows > max_rows) max_rows = shapes[s].rows;
    }
    float *x_host = malloc(sizeof(float) * (size_t)(max_cols * n_prefill));
    lm_buffer *x_buf = NULL, *y_buf = NULL;
    if (!x_host ||
        lm_alloc(be, sizeof(float) * (size_t)(max_cols * n_prefill), "x", &x_buf, &err) != LM_OK ||
        lm_alloc(be, sizeof(float) * (size_t)(max_rows * n_prefill), "y", &y_buf, &err) != LM_OK)
        return 1;
    for (int64_t i = 0; i < max_cols * n_prefill; i++) x_host[i] = rng_float(&seed);
    lm_mem x = lm_mem_of(x_buf), y = lm_mem_of(y_buf);
    lm_upload(be, x, x_host, sizeof(float) * (size_t)(max_cols * n_prefill));

    lm_pool *pool = lm_cpu_pool(be);
    int read_tasks = lm_pool_size(pool) < 64 ? lm_pool_size(pool) : 64;
    double total_bytes = 0, total_seconds = 0, total_read_seconds = 0, sink = 0;
    for (size_t s = 0; s < n_shapes; s++) {
        const shape *sh = &shapes[s];
        int64_t elems = sh->rows * sh->cols;
        size_t matrix_bytes = lm_dtype_row_bytes(dtype, sh->cols) * (size_t)sh->rows;
        double bytes = (double)matrix_bytes;
        /* enough copies that cycling through them overflows the L3 */
        int copies = (int)(128e6 / bytes) + 1;
        if (copies > 32) copies = 32;
        /* placed as loom's loader places a checkpoint's weights (read
         * mode: 64-byte aligned, in huge pages where the kernel offers
         * them); plain malloc left them 16 bytes off, and split rows ran
         * the bf16 products up to 1.3x slower (docs/PERF.md, session 11) */
        uint8_t *w = lm_big_alloc(matrix_bytes * (size_t)copies);
        float *row = malloc(sizeof(float) * (size_t)sh->cols);
        if (!w || !row) return 1;
        for (int64_t r = 0; r < sh->rows; r++) {
            for (int64_t i = 0; i < sh->cols; i++) row[i] = rng_float(&seed) * 0.1f;
            make_row(dtype, row, sh->cols, w + (size_t)r * lm_dtype_row_bytes(dtype, sh->cols), &seed);
        }
        free(row);
        for (int c = 1; c < copies; c++) memcpy(w + (size_t)c * matrix_bytes, w, matrix_bytes);
        lm_buffer *w_buf = NULL;
        if (lm_import_host(be, w, matrix_bytes * (size_t)copies, "weights", &w_buf, &err) != LM_OK)
            return 1;
        lm_mem w_mem = lm_mem_of(w_buf);

        double dec[99], pre[99], rd[99];
        for (int r = -1; r < runs; r++) {
            /* the read pass over the same copies, then decode over them */
            double tr = now_seconds();
            for (int c = 0; c < copies; c++) {
                read_job rj = {.data = (const float *)(w + (size_t)c * matrix_bytes),
                               .n = (long)(matrix_bytes / 4)};
                lm_pool_run(pool, read_tasks, read_task, &rj);
                sink += rj.result[0];
            }
            double rt = (now_seconds() - tr) / copies;
            double t0 = now_seconds();
            for (int c = 0; c < copies; c++) {
                lm_matrix m = {lm_mem_bytes(w_mem, (size_t)c * matrix_bytes), dtype, sh->rows, sh->cols};
                lm_matmul(be, y, x, 1, &m);
            }
            double dt = (now_seconds() - t0) / copies;
            lm_matrix m = {w_mem, dtype, sh->rows, sh->cols};
            double t1 = now_seconds();
            lm_matmul(be, y, x, n_prefill, &m);
            double pt = now_seconds() - t1;
            if (r >= 0) {
                dec[r] = bytes / dt / 1e9;
                rd[r] = bytes / rt / 1e9;
                pre[r] = 2.0 * n_prefill * (double)elems / pt / 1e9;
            }
        }
        qsort(dec, (size_t)runs, sizeof(double), cmp_double);
        qsort(pre, (size_t)runs, sizeof(double), cmp_double);
        qsort(rd, (size_t)runs, sizeof(double), cmp_double);
        printf("%-24s decode %6.2f GB/s best %6.2f median %6.2f worst (%.3f ms), read pass "
               "%6.2f median (decode %3.0f%%) | prefill %6.1f GFLOP/s best %6.1f median\n",
               sh->name, dec[runs - 1], dec[runs / 2], dec[0], bytes / dec[runs / 2] / 1e6,
               rd[runs / 2], 100 * dec[runs / 2] / rd[runs / 2], pre[runs - 1], pre[runs / 2]);
        total_bytes += bytes;
        total_seconds += bytes / (dec[runs / 2] * 1e9);
        total_read_seconds += bytes / (rd[runs / 2] * 1e9);
        lm_buffer_free(be, w_buf);
        free(w);
    }
    printf("all shapes: %.1f MB decoded in %.3f ms at median speeds = %.2f GB/s; read pass "
           "%.2f GB/s; decode at %.0f%% of the read pass (%g)\n",
           total_bytes / 1e6, total_seconds * 1e3, total_bytes / total_seconds / 1e9,
           total_bytes / total_read_seconds / 1e9, 100 * total_read_seconds / total_seconds,
           sink > 0 ? 1.0 : 0.0);
    free(x_host);
    lm_buffer_free(be, x_buf);
    lm_buffer_free(be, y_buf);
    lm_backend_destroy(be);
    return 0;
}
