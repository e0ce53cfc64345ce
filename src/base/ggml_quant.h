/* The block formats of ggml (base/dtype.h, LM_DTYPE_GGML_*): their values
 * as float32 and the simple ones made from float32.  Pure functions on host
 * memory, shared by the loaders, the host backends and the tests.
 *
 * Dequantizing computes every weight in float32 with the operations, in the
 * order, of ggml's dequantize_row_* (ggml/src/ggml-quants.c), so a weight is
 * the float ggml and gguf-py get, bit for bit (tests/test_ggml_quant.c checks
 * it against gguf-py's output): Q4_0 d·(q−8), Q4_1 d·q + m, Q5_0 d·(q−16),
 * Q5_1 d·q + m, Q8_0 d·q, Q4_K and Q5_K (d·sc)·q − dmin·m per 32, Q6_K
 * (d·sc)·q per 16, d, m and dmin float16.  Every product but Q6_K's last is
 * exact in float32 (at most 22 significant bits), so a kernel may regroup
 * them (scale · Σ q·x) and stay within float32 rounding of Σ w·x. */
#ifndef LOOM_BASE_GGML_QUANT_H
#define LOOM_BASE_GGML_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"

/* The largest block of any ggml format (the K-quants': 256 elements). */
#define LM_GGML_MAX_BLOCK 256

/* Whether dtype is one of ggml's block formats (LM_DTYPE_GGML_Q4_0..Q6_K). */
bool lm_ggml_is_block(lm_dtype dtype);

/* `cols` weights (a multiple of lm_dtype_block_elems) of a row of ggml
 * blocks at src into dst. */
void lm_ggml_dequantize_row(lm_dtype dtype, const uint8_t *src, float *dst, int64_t cols);
/* Weight `col` of a row of ggml blocks (its block dequantized). */
float lm_ggml_weight_at(lm_dtype dtype, const uint8_t *row, int64_t col);

/* Whether lm_ggml_quantize_row makes dtype: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0. */
bool lm_ggml_can_quantize(lm_dtype dtype);
/* One row of `cols` floats (a multiple of 32) into blocks of dtype at out
 * (lm_dtype_row_bytes bytes), with the rounding of ggml's
 * quantize_row_*_ref, byte for byte.  False (nothing sensible written) for a
 * dtype it does not make or a value that is not finite. */
bool lm_ggml_quantize_row(lm_dtype dtype, const float *x, int64_t cols, uint8_t *out);

/* float32 to IEEE half, round to nearest even (as ggml's FP32_TO_FP16 and
 * numpy's astype(float16)): overflow to infinity, subnormals kept. */
uint16_t lm_ggml_f32_to_f16(float f);

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12
 * scale bytes (ggml's get_scale_min_k4). */
static inline void lm_ggml_k4_scale_min(const uint8_t *scales, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

#endif
