/* A small float-vector layer for host code (the CPU kernels, the sampler), so each loop is written
 * once and compiles to AVX-512 (-march with avx512f/bw/vl), AVX2+FMA, or
 * plain C (8 lanes in an array: anything else).
 *
 *   lm_vf            LM_VF_WIDTH floats
 *   lm_vf_load*      full vector; *_part loads `count` (< width) elements
 *                    and zeroes the rest, never touching memory past them
 *   lm_vf_load_bf16 / _f16   widen 16-bit floats exactly to float32
 *   lm_vf_load_i8    widen signed bytes exactly to float32
 *   lm_vf_fma(a,b,c) a*b + c
 *   lm_vf_reduce_*   horizontal add / max, in a fixed order (deterministic)
 *   lm_vf_exp        e^x within ~2 ulp of expf (Cephes polynomial); exact 0
 *                    below the float range, +inf above it
 *
 * Everything is static inline: no state, no dispatch at run time. */
#ifndef LOOM_BASE_SIMD_H
#define LOOM_BASE_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/bf16.h"

#if defined(__GNUC__)
#define LM_ALWAYS_INLINE inline __attribute__((always_inline))
#define LM_PRAGMA_UNROLL _Pragma("GCC unroll 16")
#else
#define LM_ALWAYS_INLINE inline
#define LM_PRAGMA_UNROLL
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define LM_SIMD_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#define LM_SIMD_AVX2 1
#else
#define LM_SIMD_GENERIC 1
#endif

/* Cephes expf: e^x = 2^n * e^r, |r| <= ln2/2, e^r by a degree-6 polynomial. */
#define LM_EXP_LOG2E 1.44269504088896341f
#define LM_EXP_LN2_HI 0.693359375f
#define LM_EXP_LN2_LO -2.12194440e-4f
#define LM_EXP_P0 1.9875691500e-4f
#define LM_EXP_P1 1.3981999507e-3f
#define LM_EXP_P2 8.3334519073e-3f
#define LM_EXP_P3 4.1665795894e-2f
#define LM_EXP_P4 1.6666665459e-1f
#define LM_EXP_P5 5.0000001201e-1f

#if defined(LM_SIMD_AVX512)
#include <immintrin.h>

#define LM_VF_WIDTH 16
typedef __m512 lm_vf;

static inline __mmask16 lm_vf_mask(int count) { return (__mmask16)((1u << count) - 1u); }
static inline lm_vf lm_vf_zero(void) { return _mm512_setzero_ps(); }
static inline lm_vf lm_vf_set1(float v) { return _mm512_set1_ps(v); }
static inline lm_vf lm_vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline lm_vf lm_vf_load_part(const float *p, int count) {
    return _mm512_maskz_loadu_ps(lm_vf_mask(count), p);
}
static inline void lm_vf_store(float *p, lm_vf v) { _mm512_storeu_ps(p, v); }
static inline void lm_vf_store_part(float *p, lm_vf v, int count) {
    _mm512_mask_storeu_ps(p, lm_vf_mask(count), v);
}
static inline lm_vf lm_vf_from_bf16_bits(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline lm_vf lm_vf_load_bf16(const uint16_t *p) {
    return lm_vf_from_bf16_bits(_mm256_loadu_si256((const __m256i *)p));
}
static inline lm_vf lm_vf_load_bf16_part(const uint16_t *p, int count) {
    return lm_vf_from_bf16_bits(_mm256_maskz_loadu_epi16(lm_vf_mask(count), p));
}
static inline lm_vf lm_vf_load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline lm_vf lm_vf_load_f16_part(const uint16_t *p, int count) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lm_vf_mask(count), p));
}
/* LM_VF_WIDTH signed bytes, exactly, as floats. */
static inline lm_vf lm_vf_load_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
static inline lm_vf lm_vf_add(lm_vf a, lm_vf b) { return _mm512_add_ps(a, b); }
static inline lm_vf lm_vf_sub(lm_vf a, lm_vf b) { return _mm512_sub_ps(a, b); }
static inline lm_vf lm_vf_mul(lm_vf a, lm_vf b) { return _mm512_mul_ps(a, b); }
static inline lm_vf lm_vf_div(lm_vf a, lm_vf b) { return _mm512_div_ps(a, b); }
static inline lm_vf lm_vf_max(lm_vf a, lm_vf b) { return _mm512_max_ps(a, b); }
static inline lm_vf lm_vf_fma(lm_vf a, lm_vf b, lm_vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline float lm_vf_reduce_add(lm_vf v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}
static inline float lm_vf_reduce_max(lm_vf v) { return _mm512_reduce_max_ps(v); }
static inline lm_vf lm_vf_exp(lm_vf x) {
    /* Clamp so that n stays finite; scalef then gives exact 0 / +inf at the ends. */
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LM_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LM_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LM_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(LM_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LM_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LM_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LM_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LM_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(LM_EXP_P5));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

#elif defined(LM_SIMD_AVX2)
#include <immintrin.h>

#define LM_VF_WIDTH 8
typedef __m256 lm_vf;

static inline lm_vf lm_vf_zero(void) { return _mm256_setzero_ps(); }
static inline lm_vf lm_vf_set1(float v) { return _mm256_set1_ps(v); }
static inline lm_vf lm_vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline lm_vf lm_vf_load_part(const float *p, int count) {
    float tmp[8] = {0};
    memcpy(tmp, p, sizeof(float) * (size_t)count);
    return _mm256_loadu_ps(tmp);
}
static inline void lm_vf_store(float *p, lm_vf v) { _mm256_storeu_ps(p, v); }
static inline void lm_vf_store_part(float *p, lm_vf v, int count) {
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    memcpy(p, tmp, sizeof(float) * (size_t)count);
}
static inline lm_vf lm_vf_load_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline lm_vf lm_vf_load_bf16_part(const uint16_t *p, int count) {
    uint16_t tmp[8] = {0};
    memcpy(tmp, p, sizeof(uint16_t) * (size_t)count);
    return lm_vf_load_bf16(tmp);
}
static inline lm_vf lm_vf_load_f16(const uint16_t *p) {
#if defined(__F16C__)
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
    float tmp[8];
    for (int i = 0; i < 8; i++) tmp[i] = lm_f16_to_f32(p[i]);
    return _mm256_loadu_ps(tmp);
#endif
}
static inline lm_vf lm_vf_load_f16_part(const uint16_t *p, int count) {
    uint16_t tmp[8] = {0};
    memcpy(tmp, p, sizeof(uint16_t) * (size_t)count);
    return lm_vf_load_f16(tmp);
}
static inline lm_vf lm_vf_load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline lm_vf lm_vf_add(lm_vf a, lm_vf b) { return _mm256_add_ps(a, b); }
static inline lm_vf lm_vf_sub(lm_vf a, lm_vf b) { return _mm256_sub_ps(a, b); }
static inline lm_vf lm_vf_mul(lm_vf a, lm_vf b) { return _mm256_mul_ps(a, b); }
static inline lm_vf lm_vf_div(lm_vf a, lm_vf b) { return _mm256_div_ps(a, b); }
static inline lm_vf lm_vf_max(lm_vf a, lm_vf b) { return _mm256_max_ps(a, b); }
static inline lm_vf lm_vf_fma(lm_vf a, lm_vf b, lm_vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline float lm_vf_reduce_add(lm_vf v) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
    return _mm_cvtss_f32(s1);
}
static inline float lm_vf_reduce_max(lm_vf v) {
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    __m128 m1 = _mm_max_ss(m2, _mm_movehdup_ps(m2));
    return _mm_cvtss_f32(m1);
}
static inline lm_vf lm_vf_exp(lm_vf x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.72283f);
    __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 overflow = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(LM_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LM_EXP_LN2_HI), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LM_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(LM_EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LM_EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LM_EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LM_EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LM_EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LM_EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n split in two factors so n = 128 (x near the top) does not overflow the exponent. */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i half = _mm256_srai_epi32(ni, 1);
    __m256 s1 =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
    p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    p = _mm256_andnot_ps(underflow, p);
    return _mm256_blendv_ps(p, _mm256_set1_ps(INFINITY), overflow);
}

#else /* generic C: 8 lanes in an array; compilers vectorise most of it */

#define LM_VF_WIDTH 8
typedef struct {
    float v[8];
} lm_vf;

static inline lm_vf lm_vf_zero(void) {
    lm_vf r = {{0}};
    return r;
}
static inline lm_vf lm_vf_set1(float x) {
    lm_vf r;
    for (int i = 0; i < 8; i++) r.v[i] = x;
    return r;
}
static inline lm_vf lm_vf_load(const float *p) {
    lm_vf r;
    memcpy(r.v, p, sizeof r.v);
    return r;
}
static inline lm_vf lm_vf_load_part(const float *p, int count) {
    lm_vf r = {{0}};
    memcpy(r.v, p, sizeof(float) * (size_t)count);
    return r;
}
static inline void lm_vf_store(float *p, lm_vf v) { memcpy(p, v.v, sizeof v.v); }
static inline void lm_vf_store_part(float *p, lm_vf v, int count) {
    memcpy(p, v.v, sizeof(float) * (size_t)count);
}
static inline lm_vf lm_vf_load_bf16_part(const uint16_t *p, int count) {
    lm_vf r = {{0}};
    for (int i = 0; i < count; i++) r.v[i] = lm_bf16_to_f32(p[i]);
    return r;
}
static inline lm_vf lm_vf_load_bf16(const uint16_t *p) { return lm_vf_load_bf16_part(p, 8); }
static inline lm_vf lm_vf_load_f16_part(const uint16_t *p, int count) {
    lm_vf r = {{0}};
    for (int i = 0; i < count; i++) r.v[i] = lm_f16_to_f32(p[i]);
    return r;
}
static inline lm_vf lm_vf_load_f16(const uint16_t *p) { return lm_vf_load_f16_part(p, 8); }
static inline lm_vf lm_vf_load_i8(const int8_t *p) {
    lm_vf r;
    for (int i = 0; i < 8; i++) r.v[i] = (float)p[i];
    return r;
}
#define LM_VF_GENERIC_BINARY(name, expr)                                                           \
    static inline lm_vf name(lm_vf a, lm_vf b) {                                                   \
        lm_vf r;                                                                                   \
        for (int i = 0; i < 8; i++) r.v[i] = (expr);                                               \
        return r;                                                                                  \
    }
LM_VF_GENERIC_BINARY(lm_vf_add, a.v[i] + b.v[i])
LM_VF_GENERIC_BINARY(lm_vf_sub, a.v[i] - b.v[i])
LM_VF_GENERIC_BINARY(lm_vf_mul, a.v[i] * b.v[i])
LM_VF_GENERIC_BINARY(lm_vf_div, a.v[i] / b.v[i])
LM_VF_GENERIC_BINARY(lm_vf_max, a.v[i] > b.v[i] ? a.v[i] : b.v[i])
#undef LM_VF_GENERIC_BINARY
static inline lm_vf lm_vf_fma(lm_vf a, lm_vf b, lm_vf c) {
    lm_vf r;
    for (int i = 0; i < 8; i++) r.v[i] = a.v[i] * b.v[i] + c.v[i];
    return r;
}
static inline float lm_vf_reduce_add(lm_vf v) {
    float s4[4], s2[2];
    for (int i = 0; i < 4; i++) s4[i] = v.v[i] + v.v[i + 4];
    for (int i = 0; i < 2; i++) s2[i] = s4[i] + s4[i + 2];
    return s2[0] + s2[1];
}
static inline float lm_vf_reduce_max(lm_vf v) {
    float m = v.v[0];
    for (int i = 1; i < 8; i++) m = v.v[i] > m ? v.v[i] : m;
    return m;
}
static inline lm_vf lm_vf_exp(lm_vf x) {
    lm_vf r;
    for (int i = 0; i < 8; i++) r.v[i] = expf(x.v[i]);
    return r;
}
#endif

/* Scalar e^x with the same polynomial, for tails that must match the vector
 * lanes bit for bit (e.g. so a row's result does not depend on where it sits). */
static inline float lm_exp_scalar(float x) {
    float tmp[LM_VF_WIDTH] = {0};
    tmp[0] = x;
    float out[LM_VF_WIDTH];
    lm_vf_store(out, lm_vf_exp(lm_vf_load(tmp)));
    return out[0];
}

#endif
