/* FP8_B128 weights × float32 activations (matmul_fp8.h).
 *
 * An E4M3 byte becomes its float32 exactly without a table: its sign moves
 * to bit 31 and its 7 exponent-and-mantissa bits to bits 20..26, which
 * reads as the value times 2^-120 (E4M3's exponent bias is 7, float32's
 * 127; E4M3 subnormals land on float32 subnormals the same way), and one
 * multiply by 2^120 — a power of two, so exact — gives the value.  Each
 * 128-block's weights are multiplied with the token's activations into one
 * vector, which is added to the token's accumulator with the block's scale
 * in one fused multiply-add; even and odd blocks go to two accumulators,
 * reduced at the end in lm_vf_reduce_add's fixed order.  The arithmetic of
 * one (row, token) is the same whatever T, the task or the thread (batch
 * invariance, exactly).  NaN codes never reach here: the loader refuses
 * them. */
#include "ops/cpu/matmul_fp8.h"

#include <stddef.h>
#include <string.h>

#include "base/dtype.h"
#include "base/quant.h"
#include "base/simd.h"

#define VECS_PER_BLOCK (LM_FP8_BLOCK / LM_VF_WIDTH)
_Static_assert(LM_FP8_BLOCK % LM_VF_WIDTH == 0, "an FP8 block is whole vectors");

/* LM_VF_WIDTH E4M3 values at q as float32. */
static LM_ALWAYS_INLINE lm_vf load_e4m3(const uint8_t *q) {
#if defined(LM_SIMD_AVX512)
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512i bits = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24),
                                   _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x7F)), 20));
    return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
#elif defined(LM_SIMD_AVX2)
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
    __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24),
                                   _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F)), 20));
    return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
#else
    lm_vf r;
    for (int i = 0; i < LM_VF_WIDTH; i++) r.v[i] = lm_e4m3_to_f32(q[i]);
    return r;
#endif
}

static LM_ALWAYS_INLINE void block_into(lm_vf *acc, const uint8_t *q, float scale_value, const float *const *xt,
                                        int64_t k, int T) {
    lm_vf scale = lm_vf_set1(scale_value);
    lm_vf w[VECS_PER_BLOCK];
    LM_PRAGMA_UNROLL
    for (int j = 0; j < VECS_PER_BLOCK; j++) w[j] = load_e4m3(q + j * LM_VF_WIDTH);
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        lm_vf sum = lm_vf_mul(w[0], lm_vf_load(xt[t] + k));
        LM_PRAGMA_UNROLL
        for (int j = 1; j < VECS_PER_BLOCK; j++)
            sum = lm_vf_fma(w[j], lm_vf_load(xt[t] + k + j * LM_VF_WIDTH), sum);
        acc[t] = lm_vf_fma(scale, sum, acc[t]);
    }
}

static LM_ALWAYS_INLINE void dot_row(float *y, const float *x, const uint8_t *w, int64_t rows,
                                     int64_t cols, int64_t row, int t0, int T) {
    const uint8_t *wrow = w + (size_t)row * lm_dtype_row_bytes(LM_DTYPE_FP8_B128, cols);
    const float *xt[8];
    lm_vf even[8], odd[8];
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        xt[t] = x + (int64_t)(t0 + t) * cols;
        even[t] = lm_vf_zero();
        odd[t] = lm_vf_zero();
    }
    int64_t nb = cols / LM_FP8_BLOCK, b = 0;
    for (; b + 2 <= nb; b += 2) {
        block_into(even, wrow + b * LM_FP8_BLOCK, lm_fp8_row_scale(wrow, cols, b), xt, b * LM_FP8_BLOCK, T);
        block_into(odd, wrow + (b + 1) * LM_FP8_BLOCK, lm_fp8_row_scale(wrow, cols, b + 1), xt,
                   (b + 1) * LM_FP8_BLOCK, T);
    }
    if (b < nb) block_into(even, wrow + b * LM_FP8_BLOCK, lm_fp8_row_scale(wrow, cols, b), xt, b * LM_FP8_BLOCK, T);
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++)
        y[(int64_t)(t0 + t) * rows + row] = lm_vf_reduce_add(lm_vf_add(even[t], odd[t]));
}

#define DEFINE_FP8_ROW(T)                                                                          \
    static void fp8_row_##T(float *y, const float *x, const uint8_t *w, int64_t rows, int64_t cols, \
                            int64_t row, int t0) {                                                 \
        dot_row(y, x, w, rows, cols, row, t0, T);                                                  \
    }
DEFINE_FP8_ROW(1)
DEFINE_FP8_ROW(2)
DEFINE_FP8_ROW(3)
DEFINE_FP8_ROW(4)
DEFINE_FP8_ROW(5)
DEFINE_FP8_ROW(6)
DEFINE_FP8_ROW(7)
DEFINE_FP8_ROW(8)

const lm_cpu_fp8_row_fn lm_cpu_fp8_rows[9] = {NULL,        fp8_row_1, fp8_row_2, fp8_row_3, fp8_row_4,
                                              fp8_row_5,   fp8_row_6, fp8_row_7, fp8_row_8};
