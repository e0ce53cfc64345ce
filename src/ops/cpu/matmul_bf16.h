/* The cpu backend's bf16-compute matmul (matmul_bf16.c): AVX-512 BF16 tiles,
 * the activations rounded to bf16 row by row, the same bits for a token
 * whatever its batch.  Call only when lm_cpu_features.avx512_bf16 is set and
 * the weights are bf16. */
#ifndef LOOM_OPS_CPU_MATMUL_BF16_H
#define LOOM_OPS_CPU_MATMUL_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "ops/host/host_memory.h"

/* Columns of one activation row in the scratch: cols rounded up to 32. */
size_t lm_cpu_bf16_padded_cols(int64_t cols);

/* y[n, w.rows] = bf16(x)[n, w.cols] · wᵀ; scratch holds n ·
 * lm_cpu_bf16_padded_cols(w.cols) bf16 values. */
void lm_cpu_matmul_bf16(lm_pool *pool, uint16_t *scratch, float *y, const float *x, int n,
                        const lm_host_matrix *w);

#endif
