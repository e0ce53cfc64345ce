/* MLX affine-quantized weights (mlx.core.quantize, mode "affine", as
 * mlx-community checkpoints store them; issue 51).  A quantized Linear X
 * is X.weight uint32 [out, in·bits/32] — each row a little-endian bit
 * stream whose element j takes bits [j·bits, (j+1)·bits), so for 3, 5 and
 * 6 bits a code may straddle two words — and X.scales, X.biases [out,
 * in/group] in the model's dtype: w[r][j] = scales[r][j/group] · code +
 * biases[r][j/group].  loom decodes them at load (models/weights.c); a
 * kernel that reads the codes is a later step. */
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

#endif
