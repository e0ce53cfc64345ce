/* MLX affine-quantized weights (mlx.core.quantize, mode "affine", as
 * mlx-community checkpoints store them; issue 51).  A quantized Linear X
 * is X.weight uint32 [out, in·bits/32] — each row a little-endian bit
 * stream whose element j takes bits [j·bits, (j+1)·bits), so for 3, 5 and
 * 6 bits a code may straddle two words — and X.scales, X.biases [out,
 * in/group] in the model's dtype: w[r][j] = scales[r][j/group] · code +
 * biases[r][j/group].  4-bit matrices are repacked at load into ggml's
 * Q4_1 blocks (32 weights, f16 d and m: w = d·q + m) when every scale and
 * bias is a float16 (bf16 and f16 scales of real checkpoints are: bf16's 8
 * significant bits fit f16's 11 inside its exponent range), so they run at
 * 5 bits a weight with the weights' exact values; the other widths, and
 * scales f16 cannot hold, are decoded (models/weights.c). */
#ifndef LOOM_MODELS_MLX_QUANT_H
#define LOOM_MODELS_MLX_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

/* The widths mlx.core.quantize makes: 2, 3, 4, 5, 6 and 8 bits. */
bool lm_mlx_bits_supported(int bits);
/* Its group sizes: 32, 64 and 128. */
bool lm_mlx_group_supported(int group);

/* uint32 words of one packed row of `cols` codes (cols · bits a multiple
 * of 32: lm_mlx_check_row says so). */
int64_t lm_mlx_packed_words(int64_t cols, int bits);

/* Whether a row of `cols` weights can be stored at bits/group: cols a
 * multiple of group and of 32/gcd(bits, 32) codes; else an error that
 * starts with `what` (the file and tensor) and names the width. */
lm_status lm_mlx_check_row(const char *what, int64_t cols, int bits, int group, lm_error *err);

/* Codes [first, first + n) of the packed row `words` (bits wide each). */
void lm_mlx_unpack_codes(const uint32_t *words, int bits, int64_t first, int64_t n, uint8_t *codes);

/* The row's `cols` weights in float32: scales[j / group] · code +
 * biases[j / group] (one multiply and one add in float32, the order
 * mlx's dequantize uses). */
void lm_mlx_dequantize_row(const uint32_t *words, const float *scales, const float *biases, int bits, int group,
                           int64_t cols, float *out);

/* Whether a group with this scale and bias is exactly a Q4_1 block's d
 * and m: both are float16 values, or the group's codes are all 0 (the
 * weights are then the bias alone, whatever the scale: mlx gives a
 * constant group the scale 1e-7) and the bias is a float16.  codes NULL:
 * not known yet (false unless both are float16). */
bool lm_mlx_group_fits_q4_1(float scale, float bias, const uint8_t *codes, int n);

/* Columns [c0, c0 + n_cols) (both multiples of 32, inside whole groups) of
 * a 4-bit packed row as n_cols / 32 Q4_1 blocks at dst (20 bytes each:
 * f16 d = the group's scale, f16 m = its bias, then 16 bytes whose low
 * nibble is weight j and high nibble weight j + 16).  The caller has
 * checked lm_mlx_group_fits_q4_1 for every group. */
void lm_mlx_row_to_q4_1(const uint32_t *words, const float *scales, const float *biases, int group, int64_t c0,
                        int64_t n_cols, uint8_t *dst);

#endif
