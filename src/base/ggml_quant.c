/* ggml's block formats (ggml_quant.h).  The byte layouts are ggml-common.h's
 * (base/dtype.c lists them); the arithmetic follows ggml-quants.c's
 * reference functions operation by operation, since the point is the same
 * float32 bits.  loom is compiled -std=c17, so the compiler fuses no
 * multiply and add here (as neither ggml's C nor numpy does). */
#include "base/ggml_quant.h"

#include <math.h>
#include <string.h>

#include "base/bf16.h"

bool lm_ggml_is_block(lm_dtype dtype) {
    return dtype >= LM_DTYPE_GGML_Q4_0 && dtype <= LM_DTYPE_GGML_Q6_K;
}

uint16_t lm_ggml_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u;   /* NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00u;  /* 65520 and up round to infinity */
    if (ax < 0x38800000u) {                        /* below 2^-14: a subnormal half (or 0) */
        float a;
        memcpy(&a, &ax, sizeof a);
        return sign | (uint16_t)nearbyintf(a * 16777216.0f); /* units of 2^-24, exact scaling */
    }
    uint32_t r = ax - 0x38000000u; /* exponent rebiased from 127 to 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | (uint16_t)(r >> 13);
}

static float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return lm_f16_to_f32(h);
}

static void put_f16(uint8_t *p, float f) {
    uint16_t h = lm_ggml_f32_to_f16(f);
    memcpy(p, &h, sizeof h);
}

/* ---- dequantizing one block into y ---- */

static void dequantize_q4_0(const uint8_t *b, float *y) {
    float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0x0F) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void dequantize_q4_1(const uint8_t *b, float *y) {
    float d = f16_at(b), m = f16_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0x0F) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

static void dequantize_q5_0(const uint8_t *b, float *y) {
    float d = f16_at(b);
    uint32_t qh;
    memcpy(&qh, b + 2, sizeof qh);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0x0F) | (int)(((qh >> j) << 4) & 0x10);
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)(lo - 16) * d;
        y[j + 16] = (float)(hi - 16) * d;
    }
}

static void dequantize_q5_1(const uint8_t *b, float *y) {
    float d = f16_at(b), m = f16_at(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, sizeof qh);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0x0F) | (int)(((qh >> j) << 4) & 0x10);
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)lo * d + m;
        y[j + 16] = (float)hi * d + m;
    }
}

static void dequantize_q8_0(const uint8_t *b, float *y) {
    float d = f16_at(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

/* Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, then 128 bytes whose
 * low nibbles are sub-block 2i and high nibbles sub-block 2i + 1 of each 32
 * bytes i. */
static void dequantize_q4_k(const uint8_t *b, float *y) {
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int j = 0; j < 8; j += 2, q += 32) {
        uint8_t sc, m;
        lm_ggml_k4_scale_min(scales, j, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        lm_ggml_k4_scale_min(scales, j + 1, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
    }
}

/* Q5_K: Q4_K's header, then 32 bytes qh (bit j of qh[l]: the fifth bit of
 * element l of sub-block j), then Q4_K's nibbles. */
static void dequantize_q5_k(const uint8_t *b, float *y) {
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    for (int j = 0; j < 8; j += 2, ql += 32) {
        uint8_t sc, m;
        lm_ggml_k4_scale_min(scales, j, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        lm_ggml_k4_scale_min(scales, j + 1, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((ql[l] & 0xF) + ((qh[l] >> j) & 1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] >> (j + 1)) & 1 ? 16 : 0)) - m2;
    }
}

/* Q6_K: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8
 * scales (one per 16 elements), d last.  Each half of 128 elements takes 64
 * bytes of ql and 32 of qh: element 32k + l (l < 32) is ql[l + 32(k&1)]'s
 * nibble k/2 with bits 2k, 2k+1 of qh[l]. */
static void dequantize_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = f16_at(b + 208);
    for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
}

static void dequantize_block(lm_dtype dtype, const uint8_t *b, float *y) {
    switch (dtype) {
    case LM_DTYPE_GGML_Q4_0: dequantize_q4_0(b, y); return;
    case LM_DTYPE_GGML_Q4_1: dequantize_q4_1(b, y); return;
    case LM_DTYPE_GGML_Q5_0: dequantize_q5_0(b, y); return;
    case LM_DTYPE_GGML_Q5_1: dequantize_q5_1(b, y); return;
    case LM_DTYPE_GGML_Q8_0: dequantize_q8_0(b, y); return;
    case LM_DTYPE_GGML_Q4_K: dequantize_q4_k(b, y); return;
    case LM_DTYPE_GGML_Q5_K: dequantize_q5_k(b, y); return;
    case LM_DTYPE_GGML_Q6_K: dequantize_q6_k(b, y); return;
    default: /* not a ggml block: no values */
        for (int64_t i = 0; i < lm_dtype_block_elems(dtype); i++) y[i] = NAN;
        return;
    }
}

void lm_ggml_dequantize_row(lm_dtype dtype, const uint8_t *src, float *dst, int64_t cols) {
    int64_t n = lm_dtype_block_elems(dtype);
    size_t bytes = lm_dtype_block_bytes(dtype);
    if (!lm_ggml_is_block(dtype)) {
        for (int64_t i = 0; i < cols; i++) dst[i] = NAN;
        return;
    }
    for (int64_t b = 0; b < cols / n; b++) dequantize_block(dtype, src + (size_t)b * bytes, dst + b * n);
}

float lm_ggml_weight_at(lm_dtype dtype, const uint8_t *row, int64_t col) {
    if (!lm_ggml_is_block(dtype)) return NAN;
    float block[LM_GGML_MAX_BLOCK];
    int64_t n = lm_dtype_block_elems(dtype);
    dequantize_block(dtype, row + (size_t)(col / n) * lm_dtype_block_bytes(dtype), block);
    return block[col % n];
}

/* ---- quantizing (ggml's *_ref functions) ---- */

/* The value of largest magnitude, the first of equals (ggml's strict
 * compare, numpy's argmax). */
static float signed_absmax(const float *x) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

static void min_max(const float *x, float *min, float *max) {
    *min = INFINITY;
    *max = -INFINITY;
    for (int j = 0; j < 32; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

/* trunc(v) clamped to [0, top], as (uint8)(int8)v then MIN(top, .); v >= 0. */
static uint8_t trunc_clamp(float v, int top) {
    int q = (int)v;
    return (uint8_t)(q < 0 ? 0 : q > top ? top : q);
}

static void quantize_q4_0(const float *x, uint8_t *b) {
    float d = signed_absmax(x) / -8, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        float x0 = x[j] * id, x1 = x[j + 16] * id;
        b[2 + j] = (uint8_t)(trunc_clamp(x0 + 8.5f, 15) | trunc_clamp(x1 + 8.5f, 15) << 4);
    }
}

static void quantize_q4_1(const float *x, uint8_t *b) {
    float min, max;
    min_max(x, &min, &max);
    float d = (max - min) / 15, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    for (int j = 0; j < 16; j++) {
        float x0 = (x[j] - min) * id, x1 = (x[j + 16] - min) * id;
        b[4 + j] = (uint8_t)(trunc_clamp(x0 + 0.5f, 15) | trunc_clamp(x1 + 0.5f, 15) << 4);
    }
}

/* The 5-bit values q[32] into qh (bit j: q[j]'s fifth bit) and qs. */
static void pack_q5(const uint8_t *q, uint8_t *qh_at, uint8_t *qs) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
        qh |= (uint32_t)(q[j] >> 4) << j;
        qh |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    memcpy(qh_at, &qh, sizeof qh);
}

static void quantize_q5_0(const float *x, uint8_t *b) {
    float d = signed_absmax(x) / -16, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(b, d);
    uint8_t q[32];
    for (int j = 0; j < 32; j++) q[j] = trunc_clamp(x[j] * id + 16.5f, 31);
    pack_q5(q, b + 2, b + 6);
}

static void quantize_q5_1(const float *x, uint8_t *b) {
    float min, max;
    min_max(x, &min, &max);
    float d = (max - min) / 31, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    uint8_t q[32];
    for (int j = 0; j < 32; j++) q[j] = trunc_clamp((x[j] - min) * id + 0.5f, 31);
    pack_q5(q, b + 4, b + 8);
}

static void quantize_q8_0(const float *x, uint8_t *b) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    float d = amax / 127, id = d != 0 ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id); /* halves away from 0 */
}

bool lm_ggml_can_quantize(lm_dtype dtype) {
    return dtype == LM_DTYPE_GGML_Q4_0 || dtype == LM_DTYPE_GGML_Q4_1 || dtype == LM_DTYPE_GGML_Q5_0 ||
           dtype == LM_DTYPE_GGML_Q5_1 || dtype == LM_DTYPE_GGML_Q8_0;
}

bool lm_ggml_quantize_row(lm_dtype dtype, const float *x, int64_t cols, uint8_t *out) {
    if (!lm_ggml_can_quantize(dtype) || cols % 32 != 0) return false;
    for (int64_t i = 0; i < cols; i++)
        if (!isfinite(x[i])) return false;
    size_t bytes = lm_dtype_block_bytes(dtype);
    for (int64_t k = 0; k < cols / 32; k++) {
        const float *v = x + k * 32;
        uint8_t *b = out + (size_t)k * bytes;
        switch (dtype) {
        case LM_DTYPE_GGML_Q4_0: quantize_q4_0(v, b); break;
        case LM_DTYPE_GGML_Q4_1: quantize_q4_1(v, b); break;
        case LM_DTYPE_GGML_Q5_0: quantize_q5_0(v, b); break;
        case LM_DTYPE_GGML_Q5_1: quantize_q5_1(v, b); break;
        default: quantize_q8_0(v, b); break;
        }
    }
    return true;
}
