#include "base/quant.h"

#include <math.h>

float lm_e4m3_to_f32(uint8_t b) {
    if (lm_e4m3_is_nan(b)) return NAN;
    int exponent = (b >> 3) & 0xF, mantissa = b & 0x7;
    float magnitude = exponent == 0 ? ldexpf((float)mantissa, -9) /* m/8 * 2^-6 */
                                    : ldexpf((float)(8 + mantissa), exponent - 10); /* (1+m/8) 2^(e-7) */
    return (b & 0x80) ? -magnitude : magnitude;
}

/* The smallest bf16 at or above a positive finite float. */
static uint16_t bf16_round_up(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if (bits & 0xFFFFu) bits += 0x10000u;
    return (uint16_t)(bits >> 16);
}

bool lm_q8_quantize_row(const float *x, int64_t cols, uint8_t *out) {
    for (int64_t b = 0; b < cols / LM_Q8_BLOCK; b++) {
        const float *v = x + b * LM_Q8_BLOCK;
        uint8_t *block = out + b * LM_Q8_BLOCK_BYTES;
        float amax = 0;
        bool finite = true;
        for (int i = 0; i < LM_Q8_BLOCK; i++) { /* plain compares: fmaxf is a libm call */
            float a = fabsf(v[i]);
            finite &= a <= 3.402823466e38f; /* false for inf and NaN */
            amax = a > amax ? a : amax;
        }
        if (!finite) return false;
        uint16_t scale_bits = amax > 0 ? bf16_round_up(amax / 127.0f) : 0;
        memcpy(block, &scale_bits, sizeof scale_bits);
        float scale = lm_bf16_to_f32(scale_bits);
        for (int i = 0; i < LM_Q8_BLOCK; i++) {
            float q = scale > 0 ? nearbyintf(v[i] / scale) : 0.0f;
            q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
            block[2 + i] = (uint8_t)(int8_t)q;
        }
    }
    return true;
}

uint8_t lm_f32_to_e4m3(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a >= 448.0f) return sign | 0x7E; /* the largest finite value */
    if (a < 0x1p-6f) /* subnormal: steps of 2^-9; 8 steps is the smallest normal, code 8 */
        return sign | (uint8_t)nearbyintf(a * 0x1p9f);
    int e;
    float m = frexpf(a, &e) * 2.0f; /* a = m 2^(e-1), m in [1, 2) */
    e -= 1;
    int mant = (int)nearbyintf((m - 1.0f) * 8.0f); /* exact: (m-1)*8 has few bits; ties to even */
    if (mant == 8) {
        mant = 0;
        e++;
    }
    /* a < 448 = 1.75 * 2^8 keeps e <= 8 and, at e = 8, mant <= 6: never the NaN code */
    return sign | (uint8_t)(((e + 7) << 3) | mant);
}

bool lm_fp8_quantize_row(const float *x, int64_t cols, uint8_t *out) {
    for (int64_t b = 0; b < cols / LM_FP8_BLOCK; b++) {
        const float *v = x + b * LM_FP8_BLOCK;
        float amax = 0;
        for (int i = 0; i < LM_FP8_BLOCK; i++) {
            float a = fabsf(v[i]);
            if (!(a <= 3.402823466e38f)) return false;
            amax = a > amax ? a : amax;
        }
        float scale = amax > 0 ? amax / 448.0f : 0.0f;
        memcpy(out + cols + 4 * b, &scale, sizeof scale);
        for (int i = 0; i < LM_FP8_BLOCK; i++)
            out[b * LM_FP8_BLOCK + i] = scale > 0 ? lm_f32_to_e4m3(v[i] / scale) : 0;
    }
    return true;
}
