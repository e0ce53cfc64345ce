/* The row kernel of block-scaled weights × float32 activations, shared by
 * Q8_0 (matmul_q8.c) and FP8_B128 (matmul_fp8.c): a template, included
 * once by each after it defines the format's three parts:
 *
 *   BLOCK_ELEMS                      weights a block shares one scale over
 *   BLOCK_DTYPE                      the lm_dtype (its row bytes)
 *   static lm_vf block_weights(const uint8_t *wrow, int64_t cols, int64_t b, int j)
 *                                    the j-th LM_VF_WIDTH weights of block b
 *                                    of a row, as float32 (exactly)
 *   static lm_vf block_scale(const uint8_t *wrow, int64_t cols, int64_t b)
 *                                    block b's scale in every lane
 *
 * (the two functions LM_ALWAYS_INLINE, so each format's kernel is compiled
 * whole, with no call through a pointer in the inner loop).  It defines
 * block_row_1 .. block_row_8 (T tokens a call) and BLOCK_ROWS, their table
 * indexed by T.
 *
 * The arithmetic: each block's weights are multiplied with a token's
 * activations into one vector (a product, then fused multiply-adds, in the
 * block's order), and that vector is added to the token's accumulator with
 * the block's scale in one fused multiply-add.  Even and odd blocks go to
 * two accumulators (hiding the FMA latency), added and reduced at the end
 * in lm_vf_reduce_add's fixed order.  One (row, token)'s operations are
 * the same whatever T, the tile, the task or the thread: a token's bits do
 * not depend on its batchmates (batch invariance, exactly). */
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/simd.h"

#define VECS_PER_BLOCK (BLOCK_ELEMS / LM_VF_WIDTH)
_Static_assert(BLOCK_ELEMS % LM_VF_WIDTH == 0, "a block is whole vectors");

static LM_ALWAYS_INLINE void block_into(lm_vf *acc, const uint8_t *wrow, int64_t cols, int64_t b,
                                        const float *const *xt, int T) {
    const int64_t k = b * BLOCK_ELEMS;
    lm_vf scale = block_scale(wrow, cols, b);
    lm_vf w[VECS_PER_BLOCK];
    LM_PRAGMA_UNROLL
    for (int j = 0; j < VECS_PER_BLOCK; j++) w[j] = block_weights(wrow, cols, b, j);
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        lm_vf sum = lm_vf_mul(w[0], lm_vf_load(xt[t] + k));
        LM_PRAGMA_UNROLL
        for (int j = 1; j < VECS_PER_BLOCK; j++)
            sum = lm_vf_fma(w[j], lm_vf_load(xt[t] + k + j * LM_VF_WIDTH), sum);
        acc[t] = lm_vf_fma(scale, sum, acc[t]);
    }
}

static LM_ALWAYS_INLINE void block_dot_row(float *y, const float *x, const uint8_t *w, int64_t rows,
                                           int64_t cols, int64_t row, int t0, int T) {
    const uint8_t *wrow = w + (size_t)row * lm_dtype_row_bytes(BLOCK_DTYPE, cols);
    const float *xt[8];
    lm_vf even[8], odd[8];
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        xt[t] = x + (int64_t)(t0 + t) * cols;
        even[t] = lm_vf_zero();
        odd[t] = lm_vf_zero();
    }
    int64_t nb = cols / BLOCK_ELEMS, b = 0;
    for (; b + 2 <= nb; b += 2) {
        block_into(even, wrow, cols, b, xt, T);
        block_into(odd, wrow, cols, b + 1, xt, T);
    }
    if (b < nb) block_into(even, wrow, cols, b, xt, T);
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++)
        y[(int64_t)(t0 + t) * rows + row] = lm_vf_reduce_add(lm_vf_add(even[t], odd[t]));
}

#define DEFINE_BLOCK_ROW(T)                                                                          \
    static void block_row_##T(float *y, const float *x, const uint8_t *w, int64_t rows, int64_t cols, \
                              int64_t row, int t0) {                                                 \
        block_dot_row(y, x, w, rows, cols, row, t0, T);                                              \
    }
DEFINE_BLOCK_ROW(1)
DEFINE_BLOCK_ROW(2)
DEFINE_BLOCK_ROW(3)
DEFINE_BLOCK_ROW(4)
DEFINE_BLOCK_ROW(5)
DEFINE_BLOCK_ROW(6)
DEFINE_BLOCK_ROW(7)
DEFINE_BLOCK_ROW(8)
#undef DEFINE_BLOCK_ROW

/* The table a kernel file exports (lm_cpu_q8_rows, lm_cpu_fp8_rows): T -> its kernel. */
#define BLOCK_ROWS                                                                                   \
    {                                                                                                \
        NULL, block_row_1, block_row_2, block_row_3, block_row_4, block_row_5, block_row_6, block_row_7, \
            block_row_8                                                                              \
    }
