/* The cpu backend's products with FP8_B128 weights (base/dtype.h): one
 * weight row times T tokens of float32 activations, called by matmul.c's
 * task loop as the Q8_0 rows are. */
#ifndef LOOM_OPS_CPU_MATMUL_FP8_H
#define LOOM_OPS_CPU_MATMUL_FP8_H

#include <stdint.h>

/* y[(t0 + t) * rows + row] = Σ_k x[(t0 + t) * cols + k] · W[row, k] for
 * t < T, W's row `row` at w + row * lm_dtype_row_bytes(FP8_B128, cols). */
typedef void (*lm_cpu_fp8_row_fn)(float *y, const float *x, const uint8_t *w, int64_t rows,
                                  int64_t cols, int64_t row, int t0);
/* Indexed by T, 1..8. */
extern const lm_cpu_fp8_row_fn lm_cpu_fp8_rows[9];

#endif
