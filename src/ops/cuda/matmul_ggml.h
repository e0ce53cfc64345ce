/* The decode products over ggml block weights (matmul_ggml.cu).  Private
 * to src/ops/cuda. */
#ifndef LOOM_OPS_CUDA_MATMUL_GGML_H
#define LOOM_OPS_CUDA_MATMUL_GGML_H

#include "ops/ops.h"

/* y [n, rows] = x [n, cols] · wᵀ for w in a ggml block format whose rows
 * are 16-byte aligned (lm_dtype_row_bytes a multiple of 16, w and x on 16
 * bytes), queued; false (nothing queued) otherwise: the caller's scalar
 * kernel runs it. */
bool lm_cuda_matmul_ggml(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w);
/* The same for loom's int8 (Q8_0: ggml's Q8_0 with a bf16 scale), through
 * the same kernel. */
bool lm_cuda_matmul_q8_staged(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w);

#endif
