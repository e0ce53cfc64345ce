/* The cuda backend's decode products for every weight format at the
 * Qwen3.5-9B matrices (bench/configs/qwen3.5-9b-shape.json: hidden 4096,
 * intermediate 12288, 16 query heads of 256 (q | gate 8192 rows), 4 kv
 * heads, the gated delta net's 16 key / 32 value heads of 128 (q | k | v
 * 8192 rows, z 4096), the vocab head 248320 x 4096): for each format and
 * matrix, the median time of one product at batch 1 and 4, the GB/s of
 * weight bytes it reads, and that as a share of the device's copy rate,
 * measured in the same run (a 1 GiB device-to-device copy through the
 * backend, read + written bytes over its time, as bench/cuda_probe counts
 * it).  The roofline of a decode product is that copy rate: it reads each
 * weight byte once.
 *
 * The weights are random bytes with every block's scales set to small
 * finite values (timing does not depend on the values); each matrix has
 * enough copies, cycled through, that a round reads more than 4 times the
 * 50 MB L2.  A round is timed from its queueing to the synchronize, after
 * two untimed ones (the queue captures a graph on the second sighting and
 * replays it, as decoding does).
 *
 * LOOM_CUDA_GEMV_1BYTE=blocks: int8 and FP8 through their earlier kernels
 * (4-row blocks, src/ops/cuda/README.md), to compare.
 *
 * usage: cuda_matvec [rounds (default 20)] [formats, comma separated:
 *        bf16,int8,fp8,q4_0,q4_1,q4_k,q6_k,q8_0,q5_0,q5_1,q5_k (default the
 *        first eight)]
 * Prints "cuda_matvec: no cuda backend (...)" and exits 0 without a GPU. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/ggml_quant.h"
#include "ops/ops.h"

typedef struct {
    const char *name;
    lm_dtype dtype;
} format;

static const format formats[] = {
    {"bf16", LM_DTYPE_BF16},          {"int8", LM_DTYPE_Q8_0},          {"fp8", LM_DTYPE_FP8_B128},
    {"q4_0", LM_DTYPE_GGML_Q4_0},     {"q4_1", LM_DTYPE_GGML_Q4_1},     {"q4_k", LM_DTYPE_GGML_Q4_K},
    {"q6_k", LM_DTYPE_GGML_Q6_K},     {"q8_0", LM_DTYPE_GGML_Q8_0},     {"q5_0", LM_DTYPE_GGML_Q5_0},
    {"q5_1", LM_DTYPE_GGML_Q5_1},     {"q5_k", LM_DTYPE_GGML_Q5_K},
};
#define N_FORMATS ((int)(sizeof formats / sizeof formats[0]))
#define DEFAULT_FORMATS "bf16,int8,fp8,q4_0,q4_1,q4_k,q6_k,q8_0"

typedef struct {
    const char *name;
    int64_t rows, cols;
} matrix_shape;

static const matrix_shape shapes[] = {
    {"gdn qkv 8192x4096", 8192, 4096},   {"gdn z 4096x4096", 4096, 4096},     {"attn q|gate 8192x4096", 8192, 4096},
    {"attn k 1024x4096", 1024, 4096},    {"o/out 4096x4096", 4096, 4096},     {"mlp gate 12288x4096", 12288, 4096},
    {"mlp down 4096x12288", 4096, 12288}, {"lm_head 248320x4096", 248320, 4096},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))
#define MAX_COPIES 8
#define MAX_ROUNDS 200

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void put_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, sizeof v); }

/* Where a block's float16 (or bf16) scales sit, so they can be made small
 * and finite; returns how many (offsets in at[]). */
static int scale_fields(lm_dtype dt, int at[2]) {
    switch (dt) {
    case LM_DTYPE_Q8_0:
    case LM_DTYPE_GGML_Q4_0:
    case LM_DTYPE_GGML_Q5_0:
    case LM_DTYPE_GGML_Q8_0: at[0] = 0; return 1;
    case LM_DTYPE_GGML_Q4_1:
    case LM_DTYPE_GGML_Q5_1:
    case LM_DTYPE_GGML_Q4_K:
    case LM_DTYPE_GGML_Q5_K: at[0] = 0, at[1] = 2; return 2;
    case LM_DTYPE_GGML_Q6_K: at[0] = 208; return 1;
    default: return 0;
    }
}

/* rows x cols weights of dt as host bytes (*bytes of them). */
static uint8_t *host_weights(lm_dtype dt, int64_t rows, int64_t cols, uint64_t *seed, size_t *bytes) {
    size_t row_bytes = lm_dtype_row_bytes(dt, cols), total = row_bytes * (size_t)rows;
    uint8_t *w = malloc(total);
    if (!w) return NULL;
    /* random bytes for the first MB, tiled (cheap for the lm_head) */
    size_t block = total < ((size_t)1 << 20) ? total : ((size_t)1 << 20) + 7;
    for (size_t i = 0; i < block; i++) w[i] = (uint8_t)(rng_next(seed) >> 56);
    for (size_t i = block; i < total; i++) w[i] = w[i - block];
    if (dt == LM_DTYPE_BF16) {
        for (size_t i = 0; i + 1 < total; i += 2) w[i + 1] = (uint8_t)((w[i + 1] & 0x80) | 0x3c); /* |v| < 2^-3 */
    } else if (dt == LM_DTYPE_FP8_B128) {
        for (int64_t r = 0; r < rows; r++) {
            uint8_t *row = w + (size_t)r * row_bytes;
            for (int64_t c = 0; c < cols; c++) row[c] &= 0xf7; /* never the NaN codes 0x7f, 0xff */
            float s = 1.0f / 448;
            for (int64_t b = 0; b < cols / LM_FP8_BLOCK; b++) memcpy(row + cols + 4 * b, &s, sizeof s);
        }
    } else {
        int at[2], fields = scale_fields(dt, at);
        size_t bb = lm_dtype_block_bytes(dt), blocks = total / bb;
        uint16_t small = dt == LM_DTYPE_Q8_0 ? 0x3a80 /* bf16 0.001 */ : lm_ggml_f32_to_f16(0.001f);
        for (size_t b = 0; b < blocks; b++)
            for (int f = 0; f < fields; f++) put_u16(w + b * bb + at[f], small);
    }
    *bytes = total;
    return w;
}

typedef struct {
    lm_buffer *buf[MAX_COPIES];
    lm_matrix m[MAX_COPIES];
    int copies;
    double bytes; /* of one product */
} weights;

static lm_status make_weights(lm_backend *be, lm_dtype dt, const matrix_shape *s, weights *wt, uint64_t *seed,
                              lm_error *err) {
    memset(wt, 0, sizeof *wt);
    size_t bytes = 0;
    uint8_t *host = host_weights(dt, s->rows, s->cols, seed, &bytes);
    if (!host) return lm_fail(err, LM_ERR_NOMEM, "out of host memory");
    wt->bytes = (double)bytes;
    wt->copies = (int)(256e6 / (double)bytes) + 1;
    if (wt->copies > MAX_COPIES) wt->copies = MAX_COPIES;
    lm_status st = LM_OK;
    for (int c = 0; c < wt->copies && st == LM_OK; c++) {
        st = lm_alloc(be, bytes, "weights", &wt->buf[c], err);
        if (st != LM_OK) break;
        lm_upload(be, lm_mem_of(wt->buf[c]), host, bytes);
        wt->m[c] = (lm_matrix){lm_mem_of(wt->buf[c]), dt, s->rows, s->cols};
    }
    free(host);
    return st == LM_OK ? lm_synchronize(be, err) : st;
}

static void free_weights(lm_backend *be, weights *wt) {
    for (int c = 0; c < MAX_COPIES; c++) lm_buffer_free(be, wt->buf[c]);
}

/* The device's copy rate (GB/s, read + written): a 1 GiB buffer copied to
 * another, median of 10. */
static double copy_rate(lm_backend *be, lm_error *err) {
    size_t bytes = (size_t)1 << 30;
    lm_buffer *a = NULL, *b = NULL;
    double rate = 0;
    if (lm_alloc(be, bytes, "copy src", &a, err) == LM_OK && lm_alloc(be, bytes, "copy dst", &b, err) == LM_OK) {
        lm_fill(be, lm_mem_of(a), 1, bytes);
        double t[10];
        bool ok = true;
        for (int r = -2; r < 10 && ok; r++) {
            double t0 = now_seconds();
            lm_copy(be, lm_mem_of(b), lm_mem_of(a), bytes);
            ok = lm_synchronize(be, err) == LM_OK;
            if (r >= 0) t[r] = now_seconds() - t0;
        }
        if (ok) {
            qsort(t, 10, sizeof *t, cmp_double);
            rate = 2.0 * (double)bytes / t[5] / 1e9;
        }
    }
    lm_buffer_free(be, a);
    lm_buffer_free(be, b);
    return rate;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    const char *list = argc > 2 ? argv[2] : DEFAULT_FORMATS;
    if (rounds < 1 || rounds > MAX_ROUNDS || strlen(list) > 200) {
        fprintf(stderr, "usage: cuda_matvec [rounds 1..%d] [formats, comma separated]\n", MAX_ROUNDS);
        return 2;
    }
    char copy_of[256];
    snprintf(copy_of, sizeof copy_of, "%s", list);
    int chosen[N_FORMATS], n_chosen = 0;
    for (char *tok = strtok(copy_of, ","); tok; tok = strtok(NULL, ",")) {
        int f = 0;
        while (f < N_FORMATS && strcmp(formats[f].name, tok) != 0) f++;
        if (f == N_FORMATS || n_chosen == N_FORMATS) {
            fprintf(stderr, "cuda_matvec: unknown format '%s' (bf16, int8, fp8, q4_0, q4_1, q4_k, q6_k, q8_0, "
                            "q5_0, q5_1, q5_k)\n", tok);
            return 2;
        }
        chosen[n_chosen++] = f;
    }
    lm_error err = {0};
    lm_backend *be = NULL;
    if (lm_backend_create("cuda", 0, &be, &err) != LM_OK) {
        printf("cuda_matvec: no cuda backend (%s)\n", err.message);
        return 0;
    }
    double copy = copy_rate(be, &err);
    if (copy <= 0) {
        fprintf(stderr, "cuda_matvec: copy: %s\n", err.message);
        return 1;
    }
    printf("cuda_matvec: %d rounds; copy rate %.0f GB/s (1 GiB device to device, read + written)\n", rounds, copy);
    printf("per product: median us, GB/s of weight bytes, %% of the copy rate, at batch 1 and 4\n");
    int64_t max_cols = 12288;
    /* two inputs, alternated: products of one input in a row would be
     * grouped into one launch by the backend's fusion window (bf16) */
    size_t x_floats = 2 * 4 * (size_t)max_cols;
    lm_buffer *x_buf = NULL, *y_buf = NULL;
    if (lm_alloc(be, sizeof(float) * x_floats, "x", &x_buf, &err) != LM_OK ||
        lm_alloc(be, sizeof(float) * 4 * 248320, "y", &y_buf, &err) != LM_OK) {
        fprintf(stderr, "cuda_matvec: %s\n", err.message);
        return 1;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    float *xh = malloc(sizeof(float) * x_floats);
    if (!xh) return 1;
    for (size_t i = 0; i < x_floats; i++) xh[i] = (float)(rng_next(&seed) >> 40) / (float)(1 << 24) - 0.5f;
    lm_upload(be, lm_mem_of(x_buf), xh, sizeof(float) * x_floats);
    free(xh);
    static const int batches[] = {1, 4};
    for (int fi = 0; fi < n_chosen; fi++) {
        const format *f = &formats[chosen[fi]];
        printf("%s (%s)\n", f->name, lm_dtype_name(f->dtype));
        for (int si = 0; si < N_SHAPES; si++) {
            const matrix_shape *s = &shapes[si];
            weights wt;
            if (make_weights(be, f->dtype, s, &wt, &seed, &err) != LM_OK) {
                fprintf(stderr, "cuda_matvec: %s\n", err.message);
                return 1;
            }
            printf("  %-22s %8.1f MB", s->name, wt.bytes / 1e6);
            int calls = wt.copies > 1 ? 4 * wt.copies : 1;
            for (int bi = 0; bi < 2; bi++) {
                int n = batches[bi];
                double t[MAX_ROUNDS];
                for (int r = -2; r < rounds; r++) {
                    double t0 = now_seconds();
                    for (int k = 0; k < calls; k++)
                        lm_matmul(be, lm_mem_of(y_buf), lm_mem_f32(lm_mem_of(x_buf), (size_t)(k % 2) * 4 * max_cols), n,
                                  &wt.m[k % wt.copies]);
                    if (lm_synchronize(be, &err) != LM_OK) {
                        fprintf(stderr, "cuda_matvec: %s\n", err.message);
                        return 1;
                    }
                    if (r >= 0) t[r] = (now_seconds() - t0) / calls;
                }
                qsort(t, (size_t)rounds, sizeof *t, cmp_double);
                double med = t[rounds / 2], gbs = wt.bytes / med / 1e9;
                printf("   n=%d %8.1f us %6.0f GB/s %5.1f%%", n, med * 1e6, gbs, 100.0 * gbs / copy);
            }
            printf("\n");
            fflush(stdout);
            free_weights(be, &wt);
        }
    }
    lm_buffer_free(be, x_buf);
    lm_buffer_free(be, y_buf);
    lm_backend_destroy(be);
    return 0;
}
