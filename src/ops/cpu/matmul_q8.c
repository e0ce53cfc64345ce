/* Q8_0 weights × float32 activations (matmul_q8.h).
 *
 * Each block of LM_Q8_BLOCK int8 weights is widened to float32 in
 * registers (exact), multiplied with the token's activations into one
 * vector (a product, then fused multiply-adds, in block order), and that
 * vector is added to the token's accumulator with the block's scale in one
 * fused multiply-add.  Two accumulators per token (even and odd blocks)
 * hide the FMA latency; at the end they are added and reduced in the fixed
 * order of lm_vf_reduce_add.  The arithmetic of one (row, token) is the
 * same whatever T, the tile, the task or the thread: a token's bits do not
 * depend on its batchmates (batch invariance, exactly). */
#include "ops/cpu/matmul_q8.h"

#include <stddef.h>
#include <string.h>

#include "base/dtype.h"
#include "base/quant.h"
#include "base/simd.h"

#define VECS_PER_BLOCK (LM_Q8_BLOCK / LM_VF_WIDTH)
_Static_assert(LM_Q8_BLOCK % LM_VF_WIDTH == 0, "a Q8_0 block is whole vectors");

/* The block's bf16 scale in every lane: on AVX-512 a 16-bit broadcast from
 * memory and a shift (two instructions, against four through a scalar). */
static LM_ALWAYS_INLINE lm_vf block_scale(const uint8_t *block) {
#if defined(LM_SIMD_AVX512)
    uint16_t bits;
    memcpy(&bits, block, sizeof bits);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_set1_epi16((short)bits), 16));
#else
    return lm_vf_set1(lm_q8_block_scale(block));
#endif
}

static LM_ALWAYS_INLINE void block_into(lm_vf *acc, const uint8_t *block, const float *const *xt,
                                        int64_t k, int T) {
    lm_vf scale = block_scale(block);
    const int8_t *q = (const int8_t *)(block + 2);
    lm_vf w[VECS_PER_BLOCK];
    LM_PRAGMA_UNROLL
    for (int j = 0; j < VECS_PER_BLOCK; j++) w[j] = lm_vf_load_i8(q + j * LM_VF_WIDTH);
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
    const uint8_t *wrow = w + (size_t)row * lm_dtype_row_bytes(LM_DTYPE_Q8_0, cols);
    const float *xt[8];
    lm_vf even[8], odd[8];
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        xt[t] = x + (int64_t)(t0 + t) * cols;
        even[t] = lm_vf_zero();
        odd[t] = lm_vf_zero();
    }
    int64_t nb = cols / LM_Q8_BLOCK, b = 0;
    for (; b + 2 <= nb; b += 2) {
        block_into(even, wrow + b * LM_Q8_BLOCK_BYTES, xt, b * LM_Q8_BLOCK, T);
        block_into(odd, wrow + (b + 1) * LM_Q8_BLOCK_BYTES, xt, (b + 1) * LM_Q8_BLOCK, T);
    }
    if (b < nb) block_into(even, wrow + b * LM_Q8_BLOCK_BYTES, xt, b * LM_Q8_BLOCK, T);
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++)
        y[(int64_t)(t0 + t) * rows + row] = lm_vf_reduce_add(lm_vf_add(even[t], odd[t]));
}

#define DEFINE_Q8_ROW(T)                                                                           \
    static void q8_row_##T(float *y, const float *x, const uint8_t *w, int64_t rows, int64_t cols, \
                           int64_t row, int t0) {                                                  \
        dot_row(y, x, w, rows, cols, row, t0, T);                                                  \
    }
DEFINE_Q8_ROW(1)
DEFINE_Q8_ROW(2)
DEFINE_Q8_ROW(3)
DEFINE_Q8_ROW(4)
DEFINE_Q8_ROW(5)
DEFINE_Q8_ROW(6)
DEFINE_Q8_ROW(7)
DEFINE_Q8_ROW(8)

const lm_cpu_q8_row_fn lm_cpu_q8_rows[9] = {NULL,       q8_row_1, q8_row_2, q8_row_3, q8_row_4,
                                            q8_row_5,   q8_row_6, q8_row_7, q8_row_8};
