/* 8-bit weight formats: loom's Q8_0 blocks (base/dtype.h, LM_DTYPE_Q8_0)
 * and the FP8 E4M3 values of block-scaled checkpoints.  Pure functions on
 * host memory, shared by the loaders, the host backends and the tests. */
#ifndef LOOM_BASE_QUANT_H
#define LOOM_BASE_QUANT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/bf16.h"
#include "base/dtype.h"

/* FP8 E4M3 (the OCP "fn" variant checkpoints use): 1 sign bit, 4 exponent
 * bits of bias 7, 3 mantissa bits; exponent 0 is subnormal (m/8 * 2^-6);
 * no infinities; S.1111.111 (0x7F, 0xFF) is NaN.  Exact: every E4M3 value
 * is a float32. */
static inline bool lm_e4m3_is_nan(uint8_t b) { return (b & 0x7Fu) == 0x7Fu; }
float lm_e4m3_to_f32(uint8_t b);

/* The scale of 128-block b of an FP8_B128 row of `cols` weights, and
 * weight `col` of that row (float32: an E4M3 value times a float32 scale,
 * rounded once). */
static inline float lm_fp8_row_scale(const uint8_t *row, int64_t cols, int64_t b) {
    float s;
    memcpy(&s, row + cols + 4 * b, sizeof s);
    return s;
}
static inline float lm_fp8_weight_at(const uint8_t *row, int64_t cols, int64_t col) {
    return lm_e4m3_to_f32(row[col]) * lm_fp8_row_scale(row, cols, col / LM_FP8_BLOCK);
}
/* The E4M3 value nearest x (ties to even), saturated to ±448; x finite. */
uint8_t lm_f32_to_e4m3(float x);
/* One row of `cols` floats (a multiple of LM_FP8_BLOCK) into an FP8_B128
 * row at out: per block of 128 the scale is amax / 448 (so no value
 * saturates), the values x / scale rounded to nearest even E4M3.  False
 * when a value is not finite. */
bool lm_fp8_quantize_row(const float *x, int64_t cols, uint8_t *out);

/* The scale of a Q8_0 block (its first two bytes, bf16 little-endian). */
static inline float lm_q8_block_scale(const uint8_t *block) {
    uint16_t bits;
    memcpy(&bits, block, sizeof bits);
    return lm_bf16_to_f32(bits);
}
/* Weight `col` of a Q8_0 row, s * q rounded to float32. */
static inline float lm_q8_weight_at(const uint8_t *row, int64_t col) {
    const uint8_t *block = row + (col / LM_Q8_BLOCK) * LM_Q8_BLOCK_BYTES;
    return lm_q8_block_scale(block) * (float)(int8_t)block[2 + col % LM_Q8_BLOCK];
}

/* One row of `cols` floats (a multiple of LM_Q8_BLOCK) into Q8_0 blocks at
 * out (lm_dtype_row_bytes(LM_DTYPE_Q8_0, cols) bytes).  Per block: the
 * scale is amax / 127 rounded *up* to bf16 (so no |q| passes 127 and the
 * scale is exact as stored), q = round-to-nearest-even(x / scale).  False
 * (nothing sensible written) when a value is not finite. */
bool lm_q8_quantize_row(const float *x, int64_t cols, uint8_t *out);

#endif
