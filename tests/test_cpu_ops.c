/* Every tuned CPU kernel (ops/cpu) against its plain reference (reference.c)
 * on random data with fixed seeds, over odd shapes and every weight dtype.
 * Outputs are poisoned with NaN first, so a kernel that skips an element
 * fails.  Error measure: max |out - ref| / max |ref| < 1e-5.  The backend is
 * run with 1 and with 2 threads, and matmul must give bitwise-identical
 * results for both. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/threadpool.h"
#include "harness.h"
#include "ops/cpu/reference.h"
#include "ops/ops.h"

#define TOLERANCE 1e-5

/* xorshift64: fixed seeds, same data on every machine */
typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}
/* uniform in [-1, 1) */
static float rng_float(rng *r) { return (float)(rng_next(r) >> 40) / (float)(1 << 23) - 1.0f; }

static float *random_floats(rng *r, int64_t n, float scale) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (p)
        for (int64_t i = 0; i < n; i++) p[i] = rng_float(r) * scale;
    return p;
}

static float *poisoned(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (p)
        for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* max |a - ref| / max |ref|; +inf if a has a non-finite value (unwritten). */
static double rel_error(const float *a, const float *ref, int64_t n) {
    double max_ref = 0, max_diff = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs((double)a[i] - ref[i]);
        if (d > max_diff) max_diff = d;
        if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    }
    return max_ref > 0 ? max_diff / max_ref : max_diff;
}

/* Two backends, 1 and 2 threads, made once per test. */
typedef struct {
    lm_backend *be[2];
} backends;

static bool backends_open(backends *b) {
    lm_error err = {0};
    b->be[0] = b->be[1] = NULL;
    if (lm_backend_cpu_create(1, &b->be[0], &err) != LM_OK) return false;
    if (lm_backend_cpu_create(2, &b->be[1], &err) != LM_OK) return false;
    return true;
}
static void backends_close(backends *b) {
    lm_backend_destroy(b->be[0]);
    lm_backend_destroy(b->be[1]);
}

/* A weight matrix of `dtype` holding random values; `values` gets them as
 * float (exactly representable in dtype). */
static void *random_weights(rng *r, lm_dtype dtype, int64_t n) {
    size_t elem = dtype == LM_DTYPE_F32 ? 4 : 2;
    void *w = malloc(elem * (size_t)(n > 0 ? n : 1));
    if (!w) return NULL;
    for (int64_t i = 0; i < n; i++) {
        float v = rng_float(r) * 0.5f;
        if (dtype == LM_DTYPE_F32)
            ((float *)w)[i] = v;
        else if (dtype == LM_DTYPE_BF16)
            ((uint16_t *)w)[i] = lm_f32_to_bf16(v);
        else { /* f16 by hand: v in (-0.5, 0.5); keep 10 mantissa bits, normal range */
            float a = fabsf(v);
            uint16_t h = 0;
            if (a >= 1.0f / 16384) {
                int e;
                float m = frexpf(a, &e); /* a = m·2^e, m in [0.5, 1) */
                uint16_t mant = (uint16_t)((m * 2 - 1) * 1024);
                h = (uint16_t)(((e - 1 + 15) << 10) | mant);
            }
            ((uint16_t *)w)[i] = (uint16_t)(h | (v < 0 ? 0x8000 : 0));
        }
    }
    return w;
}

static const lm_dtype weight_dtypes[] = {LM_DTYPE_BF16, LM_DTYPE_F32, LM_DTYPE_F16};

static void check_matmul_shape(backends *b, rng *r, lm_dtype dtype, int n, int64_t rows,
                               int64_t cols) {
    void *w = random_weights(r, dtype, rows * cols);
    float *x = random_floats(r, n * cols, 2.0f);
    float *ref = poisoned(n * rows);
    float *out1 = poisoned(n * rows), *out2 = poisoned(n * rows);
    CHECK(w && x && ref && out1 && out2);
    lm_matrix m = {w, dtype, rows, cols};
    lm_ref_matmul(ref, x, n, &m);
    lm_matmul(b->be[0], out1, x, n, &m);
    lm_matmul(b->be[1], out2, x, n, &m);
    double e1 = rel_error(out1, ref, n * rows), e2 = rel_error(out2, ref, n * rows);
    bool same = memcmp(out1, out2, sizeof(float) * (size_t)(n * rows)) == 0;
    free(w);
    free(x);
    free(ref);
    free(out1);
    free(out2);
    CHECK_MSG(e1 < TOLERANCE, "%s n=%d rows=%lld cols=%lld: 1 thread error %g",
              lm_dtype_name(dtype), n, (long long)rows, (long long)cols, e1);
    CHECK_MSG(e2 < TOLERANCE, "%s n=%d rows=%lld cols=%lld: 2 threads error %g",
              lm_dtype_name(dtype), n, (long long)rows, (long long)cols, e2);
    CHECK_MSG(same, "%s n=%d rows=%lld cols=%lld: 1 and 2 threads differ", lm_dtype_name(dtype), n,
              (long long)rows, (long long)cols);
}

static void test_matmul_matches_reference(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {0x1234567ull};
    static const int ns[] = {1, 3, 9, 64};
    static const int64_t colss[] = {1, 17, 1000};
    static const int64_t rowss[] = {1, 13, 70};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < 4; i++)
            for (size_t j = 0; j < 3; j++)
                for (size_t k = 0; k < 3; k++) {
                    check_matmul_shape(&b, &r, weight_dtypes[d], ns[i], rowss[k], colss[j]);
                    if (test_current_failed()) goto done;
                }
done:
    backends_close(&b);
}

/* Shapes that cross the kernel's internal blocks: more rows than one task,
 * cols past one prefill column block, every token-tile remainder. */
static void test_matmul_larger_shapes(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {0xabcdefull};
    check_matmul_shape(&b, &r, LM_DTYPE_BF16, 1, 1000, 1024);
    if (!test_current_failed()) check_matmul_shape(&b, &r, LM_DTYPE_BF16, 1, 257, 2047);
    for (int n = 2; n <= 13 && !test_current_failed(); n++)
        check_matmul_shape(&b, &r, LM_DTYPE_BF16, n, 53, 1100);
    if (!test_current_failed()) check_matmul_shape(&b, &r, LM_DTYPE_F32, 17, 300, 1537);
    if (!test_current_failed()) check_matmul_shape(&b, &r, LM_DTYPE_F16, 7, 100, 600);
    backends_close(&b);
}

/* cols = 0 is a degenerate sum: every output is 0. */
static void test_matmul_zero_cols(void) {
    backends b;
    CHECK(backends_open(&b));
    uint16_t dummy = 0;
    lm_matrix m = {&dummy, LM_DTYPE_BF16, 5, 0};
    float x = 1, *y = poisoned(2 * 5);
    CHECK(y);
    lm_matmul(b.be[1], y, &x, 2, &m);
    bool zero = true;
    for (int i = 0; i < 10; i++) zero = zero && y[i] == 0;
    free(y);
    backends_close(&b);
    CHECK(zero);
}

static void test_embed_matches_reference(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {99};
    static const int64_t dims[] = {1, 17, 1000};
    for (size_t d = 0; d < 3; d++)
        for (size_t k = 0; k < 3; k++) {
            int64_t vocab = 37, dim = dims[k];
            void *table = random_weights(&r, weight_dtypes[d], vocab * dim);
            int32_t ids[5] = {0, 36, 5, 5, 20};
            float *ref = poisoned(5 * dim), *out = poisoned(5 * dim);
            CHECK(table && ref && out);
            lm_matrix m = {table, weight_dtypes[d], vocab, dim};
            lm_ref_embed(ref, ids, 5, &m);
            lm_embed(b.be[1], out, ids, 5, &m);
            bool same = memcmp(out, ref, sizeof(float) * (size_t)(5 * dim)) == 0;
            free(table);
            free(ref);
            free(out);
            CHECK_MSG(same, "embed %s dim=%lld differs", lm_dtype_name(weight_dtypes[d]),
                      (long long)dim);
        }
    backends_close(&b);
}

/* (rows, dim) pairs for the row-wise norms. */
static const int norm_shapes[][2] = {{1, 1}, {3, 17}, {2, 1000}, {5, 256}, {64, 1024}, {1, 4096}};

static void test_rmsnorm_matches_reference(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {7};
    for (size_t s = 0; s < sizeof norm_shapes / sizeof *norm_shapes; s++) {
        int rows = norm_shapes[s][0], dim = norm_shapes[s][1];
        int64_t n = (int64_t)rows * dim;
        float *x = random_floats(&r, n, 3.0f), *w = random_floats(&r, dim, 1.5f);
        float *ref = poisoned(n);
        CHECK(x && w && ref);
        lm_ref_rmsnorm(ref, x, w, rows, dim, 1e-6f);
        for (int t = 0; t < 2; t++) {
            float *out = poisoned(n), *inplace = malloc(sizeof(float) * (size_t)n);
            CHECK(out && inplace);
            memcpy(inplace, x, sizeof(float) * (size_t)n);
            lm_rmsnorm(b.be[t], out, x, w, rows, dim, 1e-6f);
            lm_rmsnorm(b.be[t], inplace, inplace, w, rows, dim, 1e-6f); /* out may alias x */
            double e = rel_error(out, ref, n), ei = rel_error(inplace, ref, n);
            free(out);
            free(inplace);
            CHECK_MSG(e < TOLERANCE && ei < TOLERANCE, "rmsnorm %dx%d: error %g, in place %g", rows,
                      dim, e, ei);
        }
        free(x);
        free(w);
        free(ref);
    }
    backends_close(&b);
}

static void test_gated_rmsnorm_matches_reference(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {8};
    for (size_t s = 0; s < sizeof norm_shapes / sizeof *norm_shapes; s++) {
        int rows = norm_shapes[s][0], dim = norm_shapes[s][1];
        int64_t n = (int64_t)rows * dim;
        float *x = random_floats(&r, n, 3.0f), *z = random_floats(&r, n, 8.0f);
        float *w = random_floats(&r, dim, 1.5f), *ref = poisoned(n);
        CHECK(x && z && w && ref);
        lm_ref_gated_rmsnorm(ref, x, z, w, rows, dim, 1e-6f);
        for (int t = 0; t < 2; t++) {
            float *out = poisoned(n);
            CHECK(out);
            lm_gated_rmsnorm(b.be[t], out, x, z, w, rows, dim, 1e-6f);
            double e = rel_error(out, ref, n);
            free(out);
            CHECK_MSG(e < TOLERANCE, "gated_rmsnorm %dx%d: error %g", rows, dim, e);
        }
        free(x);
        free(z);
        free(w);
        free(ref);
    }
    backends_close(&b);
}

static void test_l2norm_scale_matches_reference(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {9};
    for (size_t s = 0; s < sizeof norm_shapes / sizeof *norm_shapes; s++) {
        int rows = norm_shapes[s][0], dim = norm_shapes[s][1];
        int64_t n = (int64_t)rows * dim;
        float *x = random_floats(&r, n, 2.0f), *ref = malloc(sizeof(float) * (size_t)n);
        CHECK(x && ref);
        memcpy(ref, x, sizeof(float) * (size_t)n);
        lm_ref_l2norm_scale(ref, rows, dim, 1e-6f, 0.0625f);
        for (int t = 0; t < 2; t++) {
            float *out = malloc(sizeof(float) * (size_t)n);
            CHECK(out);
            memcpy(out, x, sizeof(float) * (size_t)n);
            lm_l2norm_scale(b.be[t], out, rows, dim, 1e-6f, 0.0625f);
            double e = rel_error(out, ref, n);
            free(out);
            CHECK_MSG(e < TOLERANCE, "l2norm_scale %dx%d: error %g", rows, dim, e);
        }
        free(x);
        free(ref);
    }
    backends_close(&b);
}

typedef struct {
    int n, n_heads, head_dim;
    lm_rope_params p;
} rope_case;

static void test_rope_matches_reference(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {10};
    static const float glm_inv_freq[32] = {/* a table passed in: need not follow theta */
                                           1.0f,  0.9f,  0.8f,  0.7f,  0.6f,  0.5f,  0.4f,  0.3f,
                                           0.2f,  0.1f,  0.05f, 0.04f, 0.03f, 0.02f, 0.01f, 5e-3f,
                                           4e-3f, 3e-3f, 2e-3f, 1e-3f, 5e-4f, 4e-4f, 3e-4f, 2e-4f,
                                           1e-4f, 5e-5f, 4e-5f, 3e-5f, 2e-5f, 1e-5f, 5e-6f, 1e-6f};
#define ROPE(R, TH, S0, S1, S2, INTERLEAVED_SECTIONS, PAIRS, TABLE)                                \
    {                                                                                              \
        .rot_dim = (R), .theta = (TH), .inv_freq = (TABLE), .sections = {(S0), (S1), (S2)},        \
        .interleaved_sections = (INTERLEAVED_SECTIONS), .pair_interleaved = (PAIRS)                \
    }
    const rope_case cases[] = {
        /* Qwen3.5: partial rotary 64 of 256, interleaved M-RoPE sections, rotate-half */
        {5, 8, 256, ROPE(64, 1e7f, 11, 11, 10, true, false, NULL)},
        {1, 2, 256, ROPE(64, 1e7f, 11, 11, 10, true, false, NULL)},
        /* GLM: contiguous sections, interleaved pairs, half of 128 rotated */
        {7, 3, 128, ROPE(64, 10000.0f, 8, 12, 12, false, true, NULL)},
        {7, 3, 128, ROPE(64, 10000.0f, 8, 12, 12, false, true, glm_inv_freq)},
        /* full rotary, odd head count, plain 1-D */
        {3, 5, 72, ROPE(72, 10000.0f, 36, 0, 0, false, false, NULL)},
        {2, 1, 6, ROPE(2, 10000.0f, 1, 0, 0, true, true, NULL)},
        {64, 4, 128, ROPE(32, 1e6f, 6, 5, 5, true, false, NULL)},
    };
#undef ROPE
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const rope_case *rc = &cases[c];
        int64_t len = (int64_t)rc->n * rc->n_heads * rc->head_dim;
        float *x = random_floats(&r, len, 2.0f), *ref = malloc(sizeof(float) * (size_t)len);
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)rc->n * 3);
        CHECK(x && ref && pos);
        for (int t = 0; t < rc->n; t++) { /* distinct t/h/w, large enough to test the angles */
            pos[t * 3] = 100 + 37 * t;
            pos[t * 3 + 1] = (int32_t)(rng_next(&r) % 50);
            pos[t * 3 + 2] = (int32_t)(rng_next(&r) % 4000);
        }
        memcpy(ref, x, sizeof(float) * (size_t)len);
        lm_ref_rope(ref, rc->n, rc->n_heads, rc->head_dim, pos, &rc->p);
        for (int t = 0; t < 2; t++) {
            float *out = malloc(sizeof(float) * (size_t)len);
            CHECK(out);
            memcpy(out, x, sizeof(float) * (size_t)len);
            lm_rope(b.be[t], out, rc->n, rc->n_heads, rc->head_dim, pos, &rc->p);
            double e = rel_error(out, ref, len);
            free(out);
            CHECK_MSG(e < TOLERANCE, "rope case %zu: error %g", c, e);
        }
        free(x);
        free(ref);
        free(pos);
    }
    backends_close(&b);
}

static const int64_t elementwise_sizes[] = {1, 7, 16, 17, 1000, 3584, 100003, 300000};

static void test_silu_mul_matches_reference(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {11};
    for (size_t s = 0; s < sizeof elementwise_sizes / sizeof *elementwise_sizes; s++) {
        int64_t n = elementwise_sizes[s];
        float *g = random_floats(&r, n, 12.0f), *u = random_floats(&r, n, 3.0f);
        float *ref = poisoned(n);
        CHECK(g && u && ref);
        if (n > 2) g[1] = -100.0f, g[2] = 100.0f; /* exp under/overflow */
        lm_ref_silu_mul(ref, g, u, n);
        for (int t = 0; t < 2; t++) {
            float *out = poisoned(n), *alias = malloc(sizeof(float) * (size_t)n);
            CHECK(out && alias);
            memcpy(alias, g, sizeof(float) * (size_t)n);
            lm_silu_mul(b.be[t], out, g, u, n);
            lm_silu_mul(b.be[t], alias, alias, u, n); /* out may alias gate */
            double e = rel_error(out, ref, n), ea = rel_error(alias, ref, n);
            free(out);
            free(alias);
            CHECK_MSG(e < TOLERANCE && ea < TOLERANCE, "silu_mul n=%lld: error %g, aliased %g",
                      (long long)n, e, ea);
        }
        free(g);
        free(u);
        free(ref);
    }
    backends_close(&b);
}

static void test_sigmoid_mul_and_add_match_reference(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {12};
    for (size_t s = 0; s < sizeof elementwise_sizes / sizeof *elementwise_sizes; s++) {
        int64_t n = elementwise_sizes[s];
        float *x = random_floats(&r, n, 3.0f), *g = random_floats(&r, n, 12.0f);
        float *ref_sig = malloc(sizeof(float) * (size_t)n),
              *ref_add = malloc(sizeof(float) * (size_t)n);
        CHECK(x && g && ref_sig && ref_add);
        if (n > 2) g[1] = -100.0f, g[2] = 100.0f;
        memcpy(ref_sig, x, sizeof(float) * (size_t)n);
        memcpy(ref_add, x, sizeof(float) * (size_t)n);
        lm_ref_sigmoid_mul(ref_sig, g, n);
        lm_ref_add(ref_add, g, n);
        for (int t = 0; t < 2; t++) {
            float *sig = malloc(sizeof(float) * (size_t)n),
                  *sum = malloc(sizeof(float) * (size_t)n);
            CHECK(sig && sum);
            memcpy(sig, x, sizeof(float) * (size_t)n);
            memcpy(sum, x, sizeof(float) * (size_t)n);
            lm_sigmoid_mul(b.be[t], sig, g, n);
            lm_add(b.be[t], sum, g, n);
            double es = rel_error(sig, ref_sig, n), ea = rel_error(sum, ref_add, n);
            free(sig);
            free(sum);
            CHECK_MSG(es < TOLERANCE, "sigmoid_mul n=%lld: error %g", (long long)n, es);
            CHECK_MSG(ea < TOLERANCE, "add n=%lld: error %g", (long long)n, ea);
        }
        free(x);
        free(g);
        free(ref_sig);
        free(ref_add);
    }
    backends_close(&b);
}

/* A paged cache with shuffled block tables; sequences of different lengths
 * mixing a prefill chunk and decode tokens. */
typedef struct {
    int n_heads, n_kv_heads, head_dim, block_size;
    int n_seqs;
    int cached[3];   /* entries already in the cache per sequence */
    int new_toks[3]; /* tokens of this step per sequence */
} attention_case;

static void run_attention_case(backends *b, rng *r, const attention_case *ac) {
    int D = ac->head_dim, max_blocks_per_seq = 0, total_new = 0;
    for (int s = 0; s < ac->n_seqs; s++) {
        int blocks = (ac->cached[s] + ac->new_toks[s] + ac->block_size - 1) / ac->block_size;
        if (blocks > max_blocks_per_seq) max_blocks_per_seq = blocks;
        total_new += ac->new_toks[s];
    }
    int n_blocks = max_blocks_per_seq * ac->n_seqs + 3;
    int64_t kv_row = (int64_t)ac->n_kv_heads * D;
    int64_t pool_len = (int64_t)n_blocks * ac->block_size * kv_row;
    float *kpool = random_floats(r, pool_len, 1.0f), *vpool = random_floats(r, pool_len, 1.0f);
    float *kpool_ref = malloc(sizeof(float) * (size_t)pool_len);
    float *vpool_ref = malloc(sizeof(float) * (size_t)pool_len);
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)(max_blocks_per_seq * ac->n_seqs));
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)n_blocks);
    int32_t *token_seq = malloc(sizeof(int32_t) * (size_t)total_new);
    int32_t *ctx_len = malloc(sizeof(int32_t) * (size_t)total_new);
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)total_new);
    float *q = random_floats(r, (int64_t)total_new * ac->n_heads * D, 2.0f);
    float *k = random_floats(r, (int64_t)total_new * kv_row, 1.0f);
    float *v = random_floats(r, (int64_t)total_new * kv_row, 1.0f);
    int64_t out_len = (int64_t)total_new * ac->n_heads * D;
    float *ref = poisoned(out_len);
    CHECK(kpool && vpool && kpool_ref && vpool_ref && tables && perm && token_seq && ctx_len &&
          slots && q && k && v && ref);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) { /* shuffle: blocks land anywhere in the pool */
        int j = (int)(rng_next(r) % (uint64_t)(i + 1));
        int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    const int32_t *table_ptrs[3];
    for (int s = 0; s < ac->n_seqs; s++) {
        for (int j = 0; j < max_blocks_per_seq; j++)
            tables[s * max_blocks_per_seq + j] = perm[s * max_blocks_per_seq + j];
        table_ptrs[s] = tables + s * max_blocks_per_seq;
    }
    int i = 0;
    for (int s = 0; s < ac->n_seqs; s++)
        for (int j = 0; j < ac->new_toks[s]; j++, i++) {
            int p = ac->cached[s] + j;
            token_seq[i] = s;
            ctx_len[i] = p + 1;
            slots[i] = table_ptrs[s][p / ac->block_size] * ac->block_size + p % ac->block_size;
        }
    memcpy(kpool_ref, kpool, sizeof(float) * (size_t)pool_len);
    memcpy(vpool_ref, vpool, sizeof(float) * (size_t)pool_len);
    lm_kv_layer kv_ref = {kpool_ref, vpool_ref, n_blocks, ac->block_size, ac->n_kv_heads, D};
    lm_attention_batch batch = {total_new,   token_seq,      ctx_len, table_ptrs,
                                ac->n_heads, ac->n_kv_heads, D,       1.0f / sqrtf((float)D)};
    lm_ref_kv_write(&kv_ref, k, v, total_new, slots);
    lm_ref_attention(ref, q, &kv_ref, &batch);
    for (int t = 0; t < 2 && !test_current_failed(); t++) {
        float *kp = malloc(sizeof(float) * (size_t)pool_len),
              *vp = malloc(sizeof(float) * (size_t)pool_len);
        float *out = poisoned(out_len);
        CHECK(kp && vp && out);
        memcpy(kp, kpool, sizeof(float) * (size_t)pool_len);
        memcpy(vp, vpool, sizeof(float) * (size_t)pool_len);
        lm_kv_layer kv = {kp, vp, n_blocks, ac->block_size, ac->n_kv_heads, D};
        lm_kv_write(b->be[t], &kv, k, v, total_new, slots);
        bool pools_same = memcmp(kp, kpool_ref, sizeof(float) * (size_t)pool_len) == 0 &&
                          memcmp(vp, vpool_ref, sizeof(float) * (size_t)pool_len) == 0;
        lm_attention(b->be[t], out, q, &kv, &batch);
        double e = rel_error(out, ref, out_len);
        free(kp);
        free(vp);
        free(out);
        CHECK_MSG(pools_same, "kv_write (%d threads) differs from the reference", t + 1);
        CHECK_MSG(e < TOLERANCE, "attention H=%d KV=%d D=%d bs=%d (%d threads): error %g",
                  ac->n_heads, ac->n_kv_heads, D, ac->block_size, t + 1, e);
    }
    free(kpool);
    free(vpool);
    free(kpool_ref);
    free(vpool_ref);
    free(tables);
    free(perm);
    free(token_seq);
    free(ctx_len);
    free(slots);
    free(q);
    free(k);
    free(v);
    free(ref);
}

static void test_attention_matches_reference(void) {
    backends b;
    CHECK(backends_open(&b));
    rng r = {13};
    static const attention_case cases[] = {
        /* Qwen3.5 0.8B shape: a decode token and a prefill chunk */
        {8, 2, 256, 16, 2, {40, 0, 0}, {1, 21, 0}},
        /* GLM-like: 12 heads over 4 kv heads, D 128, block 32, three sequences */
        {12, 4, 128, 32, 3, {70, 3, 0}, {2, 5, 9}},
        /* odd sizes: D 17, no GQA, block 1 and 3 */
        {3, 3, 17, 1, 1, {5, 0, 0}, {4, 0, 0}},
        {4, 1, 33, 3, 2, {0, 100, 0}, {7, 1, 0}},
        /* a long decode context */
        {2, 1, 64, 16, 1, {1500, 0, 0}, {1, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases && !test_current_failed(); c++)
        run_attention_case(&b, &r, &cases[c]);
    backends_close(&b);
}

/* The kernels' thread pool: every task of every job runs exactly once and its
 * writes are visible when lm_pool_run returns, also with more threads than
 * cores (workers get descheduled mid-job and join late or not at all). */
typedef struct {
    int *hits;
    int job;
} pool_job;

static void pool_task(void *ctx, int task, int n_tasks) {
    pool_job *j = ctx;
    (void)n_tasks;
    volatile int spin = 0; /* long enough that workers join in */
    for (int i = 0; i < 200; i++) spin = spin + i;
    j->hits[task] += j->job; /* one writer per task slot */
}

static void test_pool_runs_each_task_once(void) {
    for (int threads = 2; threads <= 5; threads += 3) {
        lm_error err = {0};
        lm_pool *pool = NULL;
        CHECK_OK(lm_pool_create(threads, &pool, &err), &err);
        int hits[16];
        bool ok = true;
        for (int job = 1; job <= 20000 && ok; job++) {
            int n_tasks = 1 + job % 16;
            memset(hits, 0, sizeof hits);
            pool_job j = {hits, job};
            lm_pool_run(pool, n_tasks, pool_task, &j);
            for (int t = 0; t < 16; t++) ok = ok && hits[t] == (t < n_tasks ? job : 0);
        }
        lm_pool_destroy(pool);
        CHECK_MSG(ok, "%d threads: a task ran twice, never, or its write was not visible", threads);
    }
}

int main(void) {
    RUN_TEST(test_matmul_matches_reference);
    RUN_TEST(test_matmul_larger_shapes);
    RUN_TEST(test_matmul_zero_cols);
    RUN_TEST(test_embed_matches_reference);
    RUN_TEST(test_rmsnorm_matches_reference);
    RUN_TEST(test_gated_rmsnorm_matches_reference);
    RUN_TEST(test_l2norm_scale_matches_reference);
    RUN_TEST(test_rope_matches_reference);
    RUN_TEST(test_silu_mul_matches_reference);
    RUN_TEST(test_sigmoid_mul_and_add_match_reference);
    RUN_TEST(test_attention_matches_reference);
    RUN_TEST(test_pool_runs_each_task_once);
    return test_summary("test_cpu_ops");
}
