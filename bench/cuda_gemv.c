/* The cuda backend's bf16 products at the Qwen3.5-9B decode shapes: for
 * each block shape of the kernel (LOOM_CUDA_GEMV=ROWSxLOADS, optionally
 * LOOM_CUDA_GEMV_BLOCKS blocks per SM that loop over the rows) and each
 * batch of 1, 2, 4 and 8 tokens, the time of a call and the weights' GB/s,
 * for single matrices and for the groups a layer runs (its products of one
 * input, one launch in the backend's fusion window).
 * Every shape's output is compared bit for bit with the first shape's: the
 * block shape may change the speed, never the result.
 *
 * Each matrix has enough copies (cycled through) that 4 rounds overflow the
 * 60 MB L2; a round is timed from its queueing to the synchronize, after
 * two untimed ones (the queue captures a graph on the second sighting and
 * replays it from then on, as in decoding).
 *
 * CUDA_GEMV_INT8=1: the same products with Q8_0 (int8) weights quantized
 * from those values, through the int8 kernel (one shape: the list is
 * "int8").
 *
 * usage: cuda_gemv [shapes, comma separated (default all)] [rounds (default 20)]
 * Prints "cuda_gemv: no cuda backend (...)" and exits 0 without a GPU. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bf16.h"
#include "base/quant.h"
#include "ops/ops.h"

#define MAX_GROUP 4 /* a layer's products of one input (the window groups up to 4) */
#define COPIES 6

typedef struct {
    const char *name;
    int count;
    int64_t rows[MAX_GROUP];
    int64_t cols;
    bool swiglu; /* silu(x·w0ᵀ) * (x·w1ᵀ) (matmul_swiglu): one output, w1's is scratch */
} product;

/* The 9B shape (hidden 4096, intermediate 12288, 16 key / 32 value heads of 128). */
static const product products[] = {
    {"gdn in (qkv|z|b|a)", 4, {8192, 4096, 32, 32}, 4096, false},
    {"gdn qkv alone", 1, {8192}, 4096, false},
    {"gdn b alone", 1, {32}, 4096, false},
    {"out_proj 4096", 1, {4096}, 4096, false},
    {"mlp gate|up", 2, {12288, 12288}, 4096, false},
    {"mlp swiglu", 2, {12288, 12288}, 4096, true},
    {"mlp gate alone", 1, {12288}, 4096, false},
    {"mlp down", 1, {4096}, 12288, false},
    {"lm_head", 1, {248320}, 4096, false},
};
#define N_PRODUCTS ((int)(sizeof products / sizeof products[0]))
/* CUDA_GEMV_SWEEP=1: one matrix of 4096 columns at growing row counts
 * instead (33 MB to the lm_head's 2 GB), to see how a product's GB/s
 * grows with its size: what a launch's ramp and tail cost. */
static const product sweep[] = {
    {"4096 rows", 1, {4096}, 4096, false},     {"12288 rows", 1, {12288}, 4096, false},
    {"24576 rows", 1, {24576}, 4096, false},   {"49152 rows", 1, {49152}, 4096, false},
    {"98304 rows", 1, {98304}, 4096, false},   {"248320 rows", 1, {248320}, 4096, false},
    {"2 x 12288 (group)", 2, {12288, 12288}, 4096, false},
    {"4 x 12288 (group)", 4, {12288, 12288, 12288, 12288}, 4096, false},
};
#define N_SWEEP ((int)(sizeof sweep / sizeof sweep[0]))
#define N_MOST (N_PRODUCTS > N_SWEEP ? N_PRODUCTS : N_SWEEP)

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
static float rng_float(uint64_t *s) { return (float)(rng_next(s) >> 40) / (float)(1 << 24) - 0.5f; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    lm_buffer *w[MAX_GROUP][COPIES];
    lm_matrix m[MAX_GROUP][COPIES];
    int copies;
    double bytes; /* weights read by one call of the group */
} product_weights;

/* The bytes of rows x cols weights: bf16, or Q8_0 quantized from the same
 * values (int8). */
static void *host_weights(const product *p, int i, bool int8, uint64_t *seed, size_t *bytes) {
    size_t elems = (size_t)(p->rows[i] * p->cols);
    uint16_t *host = malloc(elems * 2);
    if (!host) return NULL;
    /* a random block of 1 M values, tiled: cheap for the 2 GB lm_head, and
     * still a different value at every place a kernel could mix up */
    size_t block = elems < ((size_t)1 << 20) ? elems : ((size_t)1 << 20) + 7;
    for (size_t e = 0; e < block; e++) host[e] = lm_f32_to_bf16(rng_float(seed) * 0.05f);
    for (size_t e = block; e < elems; e++) host[e] = host[e - block];
    *bytes = elems * 2;
    if (!int8) return host;
    size_t row_bytes = lm_dtype_row_bytes(LM_DTYPE_Q8_0, p->cols);
    uint8_t *q = malloc(row_bytes * (size_t)p->rows[i]);
    float *row = malloc(sizeof(float) * (size_t)p->cols);
    bool ok = q && row;
    for (int64_t r = 0; ok && r < p->rows[i]; r++) {
        for (int64_t c = 0; c < p->cols; c++) row[c] = lm_bf16_to_f32(host[r * p->cols + c]);
        ok = lm_q8_quantize_row(row, p->cols, q + (size_t)r * row_bytes);
    }
    free(row);
    free(host);
    if (!ok) {
        free(q);
        return NULL;
    }
    *bytes = row_bytes * (size_t)p->rows[i];
    return q;
}

static lm_status make_weights(lm_backend *be, const product *p, product_weights *pw, bool int8, uint64_t *seed,
                              lm_error *err) {
    memset(pw, 0, sizeof *pw);
    double per_weight = int8 ? (double)LM_Q8_BLOCK_BYTES / LM_Q8_BLOCK : 2.0;
    for (int i = 0; i < p->count; i++) pw->bytes += per_weight * (double)p->rows[i] * (double)p->cols;
    pw->copies = pw->bytes * 4 > 240e6 ? 1 : COPIES;
    for (int i = 0; i < p->count; i++) {
        size_t bytes = 0;
        void *host = host_weights(p, i, int8, seed, &bytes);
        if (!host) return lm_fail(err, LM_ERR_NOMEM, "out of host memory");
        for (int c = 0; c < pw->copies; c++) {
            lm_status st = lm_alloc(be, bytes, "weights", &pw->w[i][c], err);
            if (st != LM_OK) {
                free(host);
                return st;
            }
            lm_upload(be, lm_mem_of(pw->w[i][c]), host, bytes);
            pw->m[i][c] = (lm_matrix){lm_mem_of(pw->w[i][c]), int8 ? LM_DTYPE_Q8_0 : LM_DTYPE_BF16, p->rows[i],
                                      p->cols};
        }
        free(host);
    }
    return lm_synchronize(be, err);
}

static void free_weights(lm_backend *be, product_weights *pw) {
    for (int i = 0; i < MAX_GROUP; i++)
        for (int c = 0; c < COPIES; c++) lm_buffer_free(be, pw->w[i][c]);
}

/* One round: every copy once (4 times over when there are copies). */
static void queue_round(lm_backend *be, const product *p, product_weights *pw, lm_mem x, lm_mem *y, int n) {
    int calls = pw->copies > 1 ? 4 * pw->copies : 1;
    for (int k = 0; k < calls; k++) {
        int c = k % pw->copies;
        /* plain ops, as the models write them: the backend's fusion window
         * makes a group's products one launch, a SwiGLU's matmul_swiglu */
        for (int i = 0; i < p->count; i++) lm_matmul(be, y[i], x, n, &pw->m[i][c]);
        if (p->swiglu) {
            lm_silu_mul(be, y[0], y[0], y[1], (int64_t)n * pw->m[0][c].rows);
            lm_discard(be, y[1], sizeof(float) * (size_t)n * (size_t)pw->m[1][c].rows);
        }
    }
}

int main(int argc, char **argv) {
    bool int8 = getenv("CUDA_GEMV_INT8") && atoi(getenv("CUDA_GEMV_INT8")) == 1;
    const char *shape_list = argc > 1 ? argv[1] : int8 ? "int8" : "8x1,4x4,4x2,2x4,2x2,8x2,1x4,1x8";
    int rounds = argc > 2 ? atoi(argv[2]) : 20;
    if (rounds < 1 || rounds > 200 || strlen(shape_list) > 200) {
        fprintf(stderr, "usage: cuda_gemv [ROWSxLOADS,...] [rounds 1..200]\n");
        return 2;
    }
    static const int batches[] = {1, 2, 4, 8};
    char shapes_copy[256];
    snprintf(shapes_copy, sizeof shapes_copy, "%s", shape_list);
    char *names[16];
    int n_shapes = 0;
    for (char *tok = strtok(shapes_copy, ","); tok && n_shapes < 16; tok = strtok(NULL, ","))
        names[n_shapes++] = tok;

    lm_error err = {0};
    /* first outputs per (product, batch), to compare every shape with */
    float *first[N_MOST][4] = {{0}};
    bool sweeping = getenv("CUDA_GEMV_SWEEP") && atoi(getenv("CUDA_GEMV_SWEEP")) == 1;
    const product *list = sweeping ? sweep : products;
    int n_list = sweeping ? N_SWEEP : N_PRODUCTS;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    printf("cuda_gemv: %d rounds; us per call (median) and GB/s of weights; bits vs the first shape\n",
           rounds);
    for (int s = 0; s < n_shapes; s++) {
        if (int8 && strcmp(names[s], "int8") != 0) {
            fprintf(stderr, "cuda_gemv: with CUDA_GEMV_INT8=1 the one kernel is int8\n");
            return 2;
        }
        if (!int8) setenv("LOOM_CUDA_GEMV", names[s], 1);
        lm_backend *be = NULL;
        if (lm_backend_create("cuda", 0, &be, &err) != LM_OK) {
            printf("cuda_gemv: no cuda backend (%s)\n", err.message);
            return 0;
        }
        const char *cap = getenv("LOOM_CUDA_GEMV_BLOCKS");
        printf("shape %s%s%s\n", names[s], cap ? ", blocks per SM " : "", cap ? cap : "");
        seed = 0x9e3779b97f4a7c15ull; /* the same weights and inputs for every shape */
        for (int pi = 0; pi < n_list; pi++) {
            const product *p = &list[pi];
            product_weights pw;
            lm_buffer *x_buf = NULL, *y_buf[MAX_GROUP] = {0};
            if (make_weights(be, p, &pw, int8, &seed, &err) != LM_OK ||
                lm_alloc(be, sizeof(float) * 8 * (size_t)p->cols, "x", &x_buf, &err) != LM_OK) {
                fprintf(stderr, "cuda_gemv: %s\n", err.message);
                return 1;
            }
            float *xh = malloc(sizeof(float) * 8 * (size_t)p->cols);
            if (!xh) return 1;
            for (int64_t e = 0; e < 8 * p->cols; e++) xh[e] = rng_float(&seed);
            lm_upload(be, lm_mem_of(x_buf), xh, sizeof(float) * 8 * (size_t)p->cols);
            free(xh);
            lm_mem y[MAX_GROUP];
            size_t out_floats = 0;
            for (int i = 0; i < p->count; i++) {
                if (lm_alloc(be, sizeof(float) * 8 * (size_t)p->rows[i], "y", &y_buf[i], &err) != LM_OK) {
                    fprintf(stderr, "cuda_gemv: %s\n", err.message);
                    return 1;
                }
                y[i] = lm_mem_of(y_buf[i]);
                out_floats += 8 * (size_t)p->rows[i];
            }
            printf("  %-20s", p->name);
            for (int bi = 0; bi < 4; bi++) {
                int n = batches[bi];
                double t[200];
                for (int r = -2; r < rounds; r++) {
                    double t0 = now_seconds();
                    queue_round(be, p, &pw, lm_mem_of(x_buf), y, n);
                    if (lm_synchronize(be, &err) != LM_OK) {
                        fprintf(stderr, "cuda_gemv: %s\n", err.message);
                        return 1;
                    }
                    if (r >= 0) t[r] = (now_seconds() - t0) / (pw.copies > 1 ? 4 * pw.copies : 1);
                }
                qsort(t, (size_t)rounds, sizeof *t, cmp_double);
                double med = t[rounds / 2];
                /* the outputs, for the bit comparison */
                float *out = malloc(sizeof(float) * out_floats);
                if (!out) return 1;
                size_t at = 0;
                for (int i = 0; i < (p->swiglu ? 1 : p->count); i++) {
                    size_t floats = (size_t)n * (size_t)p->rows[i];
                    if (lm_download(be, out + at, y[i], sizeof(float) * floats, &err) != LM_OK) return 1;
                    at += floats;
                }
                const char *bits = "first";
                if (!first[pi][bi])
                    first[pi][bi] = out;
                else {
                    bits = memcmp(first[pi][bi], out, sizeof(float) * at) == 0 ? "same" : "DIFFER";
                    free(out);
                }
                printf("  n=%d %7.1f us %6.0f GB/s %s", n, med * 1e6, pw.bytes / med / 1e9, bits);
            }
            printf("\n");
            fflush(stdout);
            free_weights(be, &pw);
            lm_buffer_free(be, x_buf);
            for (int i = 0; i < p->count; i++) lm_buffer_free(be, y_buf[i]);
        }
        lm_backend_destroy(be);
    }
    for (int pi = 0; pi < N_MOST; pi++)
        for (int bi = 0; bi < 4; bi++) free(first[pi][bi]);
    return 0;
}
