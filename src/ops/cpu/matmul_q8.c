/* Q8_0 weights × float32 activations (matmul_q8.h).
 *
 * Each block of LM_Q8_BLOCK int8 weights is widened to float32 in
 * registers (exact) and summed against the token's activations by the
 * block-row kernel every block-scaled format shares (matmul_block_rows.h:
 * one vector a block, scaled into the token's accumulator in one fused
 * multiply-add, even and odd blocks apart, batch-invariant exactly).  A
 * block is its bf16 scale then its 32 int8 values. */
#include "ops/cpu/matmul_q8.h"

#include <stddef.h>
#include <string.h>

#include "base/dtype.h"
#include "base/quant.h"
#include "base/simd.h"

/* The block's bf16 scale in every lane: on AVX-512 a 16-bit broadcast from
 * memory and a shift (two instructions, against four through a scalar). */
static LM_ALWAYS_INLINE lm_vf block_scale(const uint8_t *wrow, int64_t cols, int64_t b) {
    (void)cols;
    const uint8_t *block = wrow + b * LM_Q8_BLOCK_BYTES;
#if defined(LM_SIMD_AVX512)
    uint16_t bits;
    memcpy(&bits, block, sizeof bits);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_set1_epi16((short)bits), 16));
#else
    return lm_vf_set1(lm_q8_block_scale(block));
#endif
}

static LM_ALWAYS_INLINE lm_vf block_weights(const uint8_t *wrow, int64_t cols, int64_t b, int j) {
    (void)cols;
    return lm_vf_load_i8((const int8_t *)(wrow + b * LM_Q8_BLOCK_BYTES + 2) + j * LM_VF_WIDTH);
}

#define BLOCK_ELEMS LM_Q8_BLOCK
#define BLOCK_DTYPE LM_DTYPE_Q8_0
#include "ops/cpu/matmul_block_rows.h"

const lm_cpu_q8_row_fn lm_cpu_q8_rows[9] = BLOCK_ROWS;
