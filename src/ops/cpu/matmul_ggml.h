/* The cpu backend's products with ggml block weights (base/dtype.h,
 * LM_DTYPE_GGML_*: GGUF's Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)
 * times float32 activations, the weights read as stored (4 bits a weight
 * for Q4_0 and Q4_K), called by matmul.c's task loop. */
#ifndef LOOM_OPS_CPU_MATMUL_GGML_H
#define LOOM_OPS_CPU_MATMUL_GGML_H

#include <stdint.h>

#include "base/dtype.h"

/* y[t * rows + r] = Σ_k x[t * cols + k] · W[r, k] for t < n and r in
 * [row_begin, row_end), W's row r at w + r * lm_dtype_row_bytes(dtype, cols);
 * rows taken in panels of panel_rows (whose weights stay in cache while
 * every token tile passes).  dtype one of the LM_DTYPE_GGML_* formats. */
void lm_cpu_ggml_matmul_rows(float *y, const float *x, const uint8_t *w, lm_dtype dtype,
                             int64_t rows, int64_t cols, int n, int64_t row_begin, int64_t row_end,
                             int64_t panel_rows);

#endif
