#include "models/mlx_quant.h"

#include <string.h>

#include "base/bf16.h"
#include "base/ggml_quant.h"

bool lm_mlx_bits_supported(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8; }

bool lm_mlx_group_supported(int group) { return group == 32 || group == 64 || group == 128; }

int64_t lm_mlx_packed_words(int64_t cols, int bits) { return cols * bits / 32; }

lm_status lm_mlx_check_row(const char *what, int64_t cols, int bits, int group, lm_error *err) {
    if (!lm_mlx_bits_supported(bits))
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: quantization bits %d (MLX affine has 2, 3, 4, 5, 6 or 8)", what,
                       bits);
    if (!lm_mlx_group_supported(group))
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: quantization group_size %d (MLX affine has 32, 64 or 128)",
                       what, group);
    if (cols <= 0 || cols % group != 0 || (cols * bits) % 32 != 0)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: rows of %lld weights cannot be quantized in groups of %d (group_size must divide the "
                       "width)",
                       what, (long long)cols, group);
    return LM_OK;
}

void lm_mlx_unpack_codes(const uint32_t *words, int bits, int64_t first, int64_t n, uint8_t *codes) {
    const uint32_t mask = (1u << bits) - 1u;
    for (int64_t j = 0; j < n; j++) {
        uint64_t bit = (uint64_t)(first + j) * (uint64_t)bits;
        uint64_t word = bit / 32, shift = bit % 32;
        uint64_t pair = words[word];
        if (shift + (uint64_t)bits > 32) pair |= (uint64_t)words[word + 1] << 32; /* straddles two words */
        codes[j] = (uint8_t)((pair >> shift) & mask);
    }
}

void lm_mlx_dequantize_row(const uint32_t *words, const float *scales, const float *biases, int bits, int group,
                           int64_t cols, float *out) {
    uint8_t codes[128];
    for (int64_t g0 = 0; g0 < cols; g0 += group) {
        lm_mlx_unpack_codes(words, bits, g0, group, codes);
        float scale = scales[g0 / group], bias = biases[g0 / group];
        for (int k = 0; k < group; k++) {
            float scaled = scale * (float)codes[k]; /* rounded, then added: no fused multiply-add */
            out[g0 + k] = scaled + bias;
        }
    }
}

static bool is_f16(float x) { return lm_f16_to_f32(lm_ggml_f32_to_f16(x)) == x; }

bool lm_mlx_group_fits_q4_1(float scale, float bias, const uint8_t *codes, int n) {
    if (!is_f16(bias)) return false;
    if (is_f16(scale)) return true;
    if (!codes) return false;
    for (int i = 0; i < n; i++)
        if (codes[i] != 0) return false;
    return true;
}

void lm_mlx_row_to_q4_1(const uint32_t *words, const float *scales, const float *biases, int group, int64_t c0,
                        int64_t n_cols, uint8_t *dst) {
    uint8_t codes[32];
    for (int64_t b = 0; b < n_cols / 32; b++, dst += 20) {
        int64_t first = c0 + 32 * b;
        lm_mlx_unpack_codes(words, 4, first, 32, codes);
        float scale = scales[first / group];
        /* a scale f16 cannot hold only scales codes that are all 0 */
        uint16_t d = is_f16(scale) ? lm_ggml_f32_to_f16(scale) : 0, m = lm_ggml_f32_to_f16(biases[first / group]);
        memcpy(dst, &d, sizeof d);
        memcpy(dst + 2, &m, sizeof m);
        for (int j = 0; j < 16; j++) dst[4 + j] = (uint8_t)(codes[j] | codes[j + 16] << 4);
    }
}
