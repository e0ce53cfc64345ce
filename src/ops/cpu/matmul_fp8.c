/* FP8_B128 weights × float32 activations (matmul_fp8.h).
 *
 * An E4M3 byte becomes its float32 exactly without a table: its sign moves
 * to bit 31 and its 7 exponent-and-mantissa bits to bits 20..26, which
 * reads as the value times 2^-120 (E4M3's exponent bias is 7, float32's
 * 127; E4M3 subnormals land on float32 subnormals the same way), and one
 * multiply by 2^120 — a power of two, so exact — gives the value.  The
 * 128-blocks are summed by the block-row kernel every block-scaled format
 * shares (matmul_block_rows.h: one vector a block, scaled into the token's
 * accumulator in one fused multiply-add, even and odd blocks apart,
 * batch-invariant exactly), each block's float32 scale read from the row's
 * end.  NaN codes never reach here: the loader refuses them. */
#include "ops/cpu/matmul_fp8.h"

#include <stddef.h>
#include <string.h>

#include "base/dtype.h"
#include "base/quant.h"
#include "base/simd.h"

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

static LM_ALWAYS_INLINE lm_vf block_scale(const uint8_t *wrow, int64_t cols, int64_t b) {
    return lm_vf_set1(lm_fp8_row_scale(wrow, cols, b));
}

static LM_ALWAYS_INLINE lm_vf block_weights(const uint8_t *wrow, int64_t cols, int64_t b, int j) {
    (void)cols;
    return load_e4m3(wrow + b * LM_FP8_BLOCK + j * LM_VF_WIDTH);
}

#define BLOCK_ELEMS LM_FP8_BLOCK
#define BLOCK_DTYPE LM_DTYPE_FP8_B128
#include "ops/cpu/matmul_block_rows.h"

const lm_cpu_fp8_row_fn lm_cpu_fp8_rows[9] = BLOCK_ROWS;
