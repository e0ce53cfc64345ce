/* Times the cpu backend's paged attention alone, as prefill and decode call
 * it: a chunk of `rows` consecutive tokens of one sequence that already has
 * `cached` tokens in the cache (causal: row i attends to cached + i + 1
 * keys), and one decode token at the same depth.
 *   build/bench/attention [threads (2)] [shape: tiny | 0.8b (tiny)] [rows (512)]
 *                         [f32 | bf16 | bf16-f32-pool (f32)]
 * tiny: 4 query heads over 2 kv heads of 128 (models/loom-tiny);
 * 0.8b: 8 over 2 of 256 (bench/configs/qwen3.5-0.8b-shape.json);
 * bf16: the kernel --compute-dtype bf16 runs (bf16 operands, AVX-512 BF16)
 * on the bf16 pool that mode keeps; bf16-f32-pool: the same kernel on a
 * float32 pool, rounding each key block as it reads it.
 * Prints milliseconds per call (median) and GFLOP/s (2 FLOPs per
 * multiply-add of q·k and of p·v). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bf16.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/host/host_memory.h"
#include "ops/ops.h"

enum { BLOCK = 16, MAX_CACHED = 16384, REPS = 5 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void fill_random(float *x, size_t n, unsigned *seed) {
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = (float)(*seed >> 8) / 8388608.0f - 1.0f;
    }
}

typedef struct {
    int heads, kv_heads, dim;
} shape;

/* Median seconds of `reps` calls over rows [0, n) of the batch arrays. */
static double time_calls(lm_backend *be, float *out, const float *q, const lm_host_kv_layer *kv,
                         lm_host_attention_batch *batch, int reps, bool bf16) {
    lm_pool *pool = lm_cpu_pool(be);
    const lm_cpu_kernels *kernels = lm_cpu_kernels_of(be);
    double t[REPS];
    for (int r = -1; r < reps; r++) { /* one warm-up call */
        double t0 = now_s();
        if (bf16)
            kernels->attention_bf16(pool, out, q, kv, batch);
        else
            kernels->attention(pool, out, q, kv, batch);
        if (r >= 0) t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    const char *which = argc > 2 ? argv[2] : "tiny";
    int rows = argc > 3 ? atoi(argv[3]) : 512;
    const char *compute = argc > 4 ? argv[4] : "f32";
    bool f32_pool = strcmp(compute, "bf16-f32-pool") == 0;
    bool bf16 = f32_pool || strcmp(compute, "bf16") == 0;
    if (!bf16 && strcmp(compute, "f32") != 0) {
        fprintf(stderr, "usage: attention [threads] [tiny|0.8b] [rows] [f32|bf16|bf16-f32-pool]\n");
        return 2;
    }
    shape sh;
    if (strcmp(which, "tiny") == 0)
        sh = (shape){4, 2, 128};
    else if (strcmp(which, "0.8b") == 0)
        sh = (shape){8, 2, 256};
    else {
        fprintf(stderr, "usage: attention [threads] [tiny|0.8b] [rows] [f32|bf16|bf16-f32-pool]\n");
        return 2;
    }
    if (rows < 1 || rows > 4096) {
        fprintf(stderr, "attention bench: rows must be 1..4096\n");
        return 2;
    }
    lm_error err = {0};
    lm_backend *be;
    if (lm_backend_cpu_create(threads, &be, &err) != LM_OK) {
        fprintf(stderr, "attention bench: %s\n", err.message);
        return 1;
    }
    int total = MAX_CACHED + rows, n_blocks = (total + BLOCK - 1) / BLOCK;
    size_t kv_row = (size_t)sh.kv_heads * sh.dim, q_row = (size_t)sh.heads * sh.dim;
    size_t pool_n = (size_t)n_blocks * BLOCK * kv_row;
    float *k = malloc(sizeof(float) * pool_n), *v = malloc(sizeof(float) * pool_n);
    float *q = malloc(sizeof(float) * (size_t)rows * q_row);
    float *out = malloc(sizeof(float) * (size_t)rows * q_row);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)n_blocks);
    int32_t *seq = calloc((size_t)rows, sizeof(int32_t)), *ctx = malloc(sizeof(int32_t) * (size_t)rows);
    if (!k || !v || !q || !out || !table || !seq || !ctx) {
        fprintf(stderr, "attention bench: out of memory\n");
        return 1;
    }
    unsigned seed = 7;
    fill_random(k, pool_n, &seed);
    fill_random(v, pool_n, &seed);
    fill_random(q, (size_t)rows * q_row, &seed);
    for (int b = 0; b < n_blocks; b++) table[b] = n_blocks - 1 - b; /* not in pool order */
    lm_host_kv_layer kv = {.k = k, .v = v, .n_blocks = n_blocks, .block_size = BLOCK,
                           .n_kv_heads = sh.kv_heads, .head_dim = sh.dim};
    uint16_t *k16 = NULL, *v16 = NULL;
    if (bf16 && !f32_pool) { /* the pool --compute-dtype bf16 keeps */
        k16 = malloc(sizeof(uint16_t) * pool_n);
        v16 = malloc(sizeof(uint16_t) * pool_n);
        if (!k16 || !v16) {
            fprintf(stderr, "attention bench: out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < pool_n; i++) {
            k16[i] = lm_f32_to_bf16(k[i]);
            v16[i] = lm_f32_to_bf16(v[i]);
        }
        kv.k = kv.v = NULL;
        kv.k16 = k16;
        kv.v16 = v16;
    }
    if (bf16 && (lm_backend_set_compute(be, "bf16", &err) != LM_OK ||
                 !lm_cpu_kernels_of(be)->attention_bf16_takes(sh.dim))) {
        fprintf(stderr, "attention bench: no bf16 attention here: %s\n", err.message);
        return 1;
    }
    printf("attention (%s), %d query heads over %d kv heads of %d, %d threads, median of %d\n",
           compute, sh.heads, sh.kv_heads, sh.dim, lm_backend_threads(be), REPS);
    printf("%8s %14s %10s %14s %10s\n", "cached", "chunk ms", "GFLOP/s", "decode us", "GFLOP/s");
    static const int depths[] = {0, 1024, 4096, 8192, 16384};
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
        int cached = depths[i];
        double flops = 0;
        for (int r = 0; r < rows; r++) {
            ctx[r] = cached + r + 1;
            flops += 4.0 * ctx[r] * sh.heads * sh.dim;
        }
        lm_host_attention_batch batch = {.n_tokens = rows, .token_seq = seq, .ctx_len = ctx,
                                         .block_tables = table, .table_stride = n_blocks,
                                         .max_ctx_len = cached + rows, .n_heads = sh.heads,
                                         .n_kv_heads = sh.kv_heads, .head_dim = sh.dim,
                                         .scale = 1.0f / sqrtf((float)sh.dim)};
        double chunk = time_calls(be, out, q, &kv, &batch, REPS, bf16);
        batch.n_tokens = 1;
        ctx[0] = cached + 1;
        double decode = time_calls(be, out, q, &kv, &batch, REPS, bf16);
        double decode_flops = 4.0 * (cached + 1) * sh.heads * sh.dim;
        printf("%8d %14.3f %10.1f %14.1f %10.1f\n", cached, chunk * 1e3, flops / chunk * 1e-9,
               decode * 1e6, decode_flops / decode * 1e-9);
    }
    free(k);
    free(v);
    free(k16);
    free(v16);
    free(q);
    free(out);
    free(table);
    free(seq);
    free(ctx);
    lm_backend_destroy(be);
    return 0;
}
