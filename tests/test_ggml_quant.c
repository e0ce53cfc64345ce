/* ggml's block formats (base/ggml_quant.h) against llama.cpp's own gguf-py:
 * tests/data/ggml-blocks/ (tools/fixtures/make_ggml_vectors.py) holds rows
 * quantized and dequantized by gguf-py's quants.py; loom's dequantize must
 * give the same floats bit for bit and its quantize the same bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/ggml_quant.h"
#include "harness.h"

enum { ROWS = 4, COLS = 512 }; /* make_ggml_vectors.py's shape */

static const struct {
    lm_dtype dtype;
    const char *name;
    bool quantized_by_gguf_py; /* input.f32 exists */
} types[] = {
    {LM_DTYPE_GGML_Q4_0, "q4_0", true}, {LM_DTYPE_GGML_Q4_1, "q4_1", true},
    {LM_DTYPE_GGML_Q5_0, "q5_0", true}, {LM_DTYPE_GGML_Q5_1, "q5_1", true},
    {LM_DTYPE_GGML_Q8_0, "q8_0", true}, {LM_DTYPE_GGML_Q4_K, "q4_k", false},
    {LM_DTYPE_GGML_Q5_K, "q5_k", false}, {LM_DTYPE_GGML_Q6_K, "q6_k", false},
};

/* The whole file `name` of the vectors folder, which must be `bytes` long. */
static void *read_vector(const char *name, size_t bytes) {
    const char *data = getenv("LOOM_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/ggml-blocks/%s", data && *data ? data : "tests/data", name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return NULL;
    }
    void *p = malloc(bytes + 1);
    size_t got = p ? fread(p, 1, bytes + 1, f) : 0;
    fclose(f);
    if (got != bytes) {
        fprintf(stderr, "%s: %zu bytes, want %zu\n", path, got, bytes);
        free(p);
        return NULL;
    }
    return p;
}

static void test_dequantize_matches_gguf_py(void) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char name[64];
        size_t row_bytes = lm_dtype_row_bytes(types[i].dtype, COLS);
        snprintf(name, sizeof name, "%s.blocks", types[i].name);
        uint8_t *blocks = read_vector(name, row_bytes * ROWS);
        snprintf(name, sizeof name, "%s.dequant.f32", types[i].name);
        float *want = read_vector(name, sizeof(float) * ROWS * COLS);
        float *got = malloc(sizeof(float) * ROWS * COLS);
        bool ok = blocks && want && got;
        for (int r = 0; ok && r < ROWS; r++)
            lm_ggml_dequantize_row(types[i].dtype, blocks + r * row_bytes, got + r * COLS, COLS);
        int bad = -1;
        for (int k = 0; ok && k < ROWS * COLS && bad < 0; k++)
            if (memcmp(&got[k], &want[k], sizeof(float)) != 0) bad = k;
        int bad_at = -1; /* weight_at reads the same values */
        for (int k = 0; ok && k < ROWS * COLS && bad_at < 0; k++) {
            float w = lm_ggml_weight_at(types[i].dtype, blocks + (k / COLS) * row_bytes, k % COLS);
            if (memcmp(&w, &want[k], sizeof(float)) != 0) bad_at = k;
        }
        float g = ok && bad >= 0 ? got[bad] : 0, w = ok && bad >= 0 ? want[bad] : 0;
        free(blocks);
        free(want);
        free(got);
        CHECK_MSG(ok, "%s: the vectors (tests/data/ggml-blocks) could not be read", types[i].name);
        CHECK_MSG(bad < 0, "%s: weight %d dequantizes to %.9g, gguf-py %.9g", types[i].name, bad, g, w);
        CHECK_MSG(bad_at < 0, "%s: lm_ggml_weight_at(%d) differs from gguf-py", types[i].name, bad_at);
    }
}

static void test_quantize_matches_gguf_py(void) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        CHECK(lm_ggml_can_quantize(types[i].dtype) == types[i].quantized_by_gguf_py);
        if (!types[i].quantized_by_gguf_py) continue;
        char name[64];
        size_t row_bytes = lm_dtype_row_bytes(types[i].dtype, COLS);
        snprintf(name, sizeof name, "%s.input.f32", types[i].name);
        float *x = read_vector(name, sizeof(float) * ROWS * COLS);
        snprintf(name, sizeof name, "%s.blocks", types[i].name);
        uint8_t *want = read_vector(name, row_bytes * ROWS);
        uint8_t *got = malloc(row_bytes * ROWS);
        bool ok = x && want && got, made = true;
        for (int r = 0; ok && r < ROWS; r++)
            made &= lm_ggml_quantize_row(types[i].dtype, x + r * COLS, COLS, got + r * row_bytes);
        long bad = -1;
        for (size_t k = 0; ok && k < row_bytes * ROWS && bad < 0; k++)
            if (got[k] != want[k]) bad = (long)k;
        free(x);
        free(want);
        free(got);
        CHECK_MSG(ok, "%s: the vectors (tests/data/ggml-blocks) could not be read", types[i].name);
        CHECK_MSG(made, "%s: quantize refused finite rows", types[i].name);
        CHECK_MSG(bad < 0, "%s: byte %ld (block %ld) differs from gguf-py's quantize", types[i].name,
                  bad, bad / (long)lm_dtype_block_bytes(types[i].dtype));
    }
}

/* Rows it cannot make are refused, not written with garbage. */
static void test_quantize_refuses(void) {
    float x[64] = {0};
    uint8_t out[64 * 2];
    CHECK(lm_ggml_quantize_row(LM_DTYPE_GGML_Q4_0, x, 64, out));
    x[40] = NAN;
    CHECK(!lm_ggml_quantize_row(LM_DTYPE_GGML_Q4_0, x, 64, out));
    x[40] = INFINITY;
    CHECK(!lm_ggml_quantize_row(LM_DTYPE_GGML_Q8_0, x, 64, out));
    x[40] = 0;
    CHECK(!lm_ggml_quantize_row(LM_DTYPE_GGML_Q4_K, x, 64, out)); /* no K-quant quantizer */
    CHECK(!lm_ggml_quantize_row(LM_DTYPE_Q8_0, x, 64, out));      /* loom's own: base/quant.h */
    CHECK(!lm_ggml_quantize_row(LM_DTYPE_GGML_Q4_0, x, 48, out)); /* not whole blocks */
    CHECK(!lm_ggml_is_block(LM_DTYPE_Q8_0) && !lm_ggml_is_block(LM_DTYPE_F16));
    CHECK(lm_ggml_is_block(LM_DTYPE_GGML_Q4_0) && lm_ggml_is_block(LM_DTYPE_GGML_Q6_K));
}

/* float32 -> float16, the rounding of every scale: each half comes back
 * from its float, every midpoint between neighbours goes to the even one,
 * and past the largest half (65504) the midpoint 65520 rounds to infinity. */
static void test_f16_rounding(void) {
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue; /* NaN */
        float f = lm_f16_to_f32((uint16_t)h);
        CHECK_MSG(lm_ggml_f32_to_f16(f) == h, "half %#x does not come back from %.9g", h, f);
        if ((h & 0x7fffu) >= 0x7bffu) continue; /* no finite upper neighbour */
        float up = lm_f16_to_f32((uint16_t)(h + 1));
        double mid = ((double)f + (double)up) / 2; /* exact in float32: 12 significant bits */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        CHECK_MSG(lm_ggml_f32_to_f16((float)mid) == even, "midpoint above half %#x rounds to %#x", h,
                  lm_ggml_f32_to_f16((float)mid));
    }
    CHECK(lm_ggml_f32_to_f16(65519.0f) == 0x7bffu && lm_ggml_f32_to_f16(65520.0f) == 0x7c00u);
    CHECK(lm_ggml_f32_to_f16(-1e9f) == 0xfc00u && (lm_ggml_f32_to_f16(NAN) & 0x7fffu) > 0x7c00u);
    CHECK(lm_ggml_f32_to_f16(1e-10f) == 0 && lm_ggml_f32_to_f16(-0.0f) == 0x8000u);
}

int main(void) {
    RUN_TEST(test_dequantize_matches_gguf_py);
    RUN_TEST(test_quantize_matches_gguf_py);
    RUN_TEST(test_quantize_refuses);
    RUN_TEST(test_f16_rounding);
    return test_summary("test_ggml_quant");
}
