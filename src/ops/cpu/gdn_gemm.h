/* The small matrix products of the chunked gated delta rule (gdn_chunked.c):
 * a register-blocked kernel for shapes of a few dozen rows, no packing. */
#ifndef LOOM_OPS_CPU_GDN_GEMM_H
#define LOOM_OPS_CPU_GDN_GEMM_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    LM_GDN_FULL,
    /* Only C[i][j] with j <= i is wanted: columns past a row block's last
     * row are skipped (entries above the diagonal are unspecified). */
    LM_GDN_LOWER_C,
    /* A is lower triangular (A[i][p] == 0 for p > i, stored as zeros): the
     * sum over p stops at the row block's last row. */
    LM_GDN_LOWER_A,
} lm_gdn_tri;

/* C[i][0:n] = c_scale·C[i][0:n] + alpha·row_scale[i]·Σ_p A[i][p]·B[p][0:n]
 * for i < m, p < k.  Row-major with leading dimensions lda, ldb, ldc.
 * c_scale == 0 means C is only written, never read; row_scale may be NULL
 * (all ones).  C may not alias A or B. */
void lm_gdn_gemm(int m, int n, int k, const float *A, size_t lda, const float *B, size_t ldb,
                 float *C, size_t ldc, float alpha, float c_scale, const float *row_scale,
                 lm_gdn_tri tri, bool simd);

#endif
