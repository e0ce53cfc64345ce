/* FP8_B128 weights on the FP8 tensor cores (matmul_fp8_mma.cu): the
 * bf16-compute batches' product, activations quantized per 1 x 128 block.
 * Private to src/ops/cuda. */
#ifndef LOOM_OPS_CUDA_MATMUL_FP8_MMA_H
#define LOOM_OPS_CUDA_MATMUL_FP8_MMA_H

#include <stddef.h>
#include <stdint.h>

#include "ops/ops.h"

/* Bytes of scratch lm_cuda_fp8_gemm needs for n rows of x of cols. */
size_t lm_cuda_fp8_gemm_scratch(int n, int64_t cols);
/* y[n, rows] = x[n, cols] · wᵀ, w FP8_B128 (cols a multiple of 512, 16-byte
 * aligned), x quantized into scratch first; false (nothing queued) when
 * the shape or alignment does not fit. */
bool lm_cuda_fp8_gemm(lm_backend *be, float *y, const float *x, void *scratch, const uint8_t *w, int n,
                      int64_t rows, int64_t cols);

#endif
