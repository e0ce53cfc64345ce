#include "ops/cpu/gdn_gemm.h"

#include "ops/cpu/gdn_simd.h"

#define MR 4  /* rows of C per micro-tile */
#define NR 64 /* columns of C per micro-tile (4 AVX-512 vectors) */

static void block_portable(int mr, int nc, int kend, const float *A, size_t lda, const float *B,
                           size_t ldb, float *C, size_t ldc, float alpha, float c_scale,
                           const float *row_scale) {
    float acc[MR][NR];
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nc; c++) acc[r][c] = 0;
    for (int p = 0; p < kend; p++) {
        const float *b = B + (size_t)p * ldb;
        for (int r = 0; r < mr; r++) {
            float a = A[(size_t)r * lda + (size_t)p];
            for (int c = 0; c < nc; c++) acc[r][c] += a * b[c];
        }
    }
    for (int r = 0; r < mr; r++) {
        float s = alpha * (row_scale ? row_scale[r] : 1.0f);
        float *crow = C + (size_t)r * ldc;
        for (int c = 0; c < nc; c++)
            crow[c] = c_scale != 0 ? c_scale * crow[c] + s * acc[r][c] : s * acc[r][c];
    }
}

#ifdef LM_GDN_AVX512
static inline __attribute__((always_inline)) __m512 load_vec(const float *p, __mmask16 m,
                                                             bool masked) {
    return masked ? _mm512_maskz_loadu_ps(m, p) : _mm512_loadu_ps(p);
}

/* A 4 x 16·nv tile of C in 4·nv registers.  nv and masked (nc < 16·nv) are
 * literals at each call: narrow tiles, common in the triangular products,
 * skip the dead vectors, and full ones avoid masked stores (slow on AMD).
 * A block of fewer rows re-reads its last row for the missing ones and
 * stores only its own rows, so one unrolled body serves every mr. */
static inline __attribute__((always_inline)) void
block_avx512_nv(const int nv, const bool masked, int mr, int nc, int kend, const float *A,
                size_t lda, const float *B, size_t ldb, float *C, size_t ldc, float alpha,
                float c_scale, const float *row_scale) {
    const __mmask16 m[4] = {lm_gdn_mask(nc), lm_gdn_mask(nc - 16), lm_gdn_mask(nc - 32),
                            lm_gdn_mask(nc - 48)};
    const float *a[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++) a[r] = A + (size_t)(r < mr ? r : mr - 1) * lda;
    __m512 acc[MR][4];
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    for (int p = 0; p < kend; p++) {
        const float *b = B + (size_t)p * ldb;
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            bv[v] = load_vec(b + 16 * v, m[v], masked);
            /* keep it in a register: folded into each FMA it was loaded MR times */
            __asm__("" : "+v"(bv[v]));
        }
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            __m512 av = _mm512_set1_ps(a[r][p]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++) {
        if (r >= mr) break;
        __m512 s = _mm512_set1_ps(alpha * (row_scale ? row_scale[r] : 1.0f));
        float *crow = C + (size_t)r * ldc;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            __m512 res = _mm512_mul_ps(s, acc[r][v]);
            if (c_scale != 0)
                res = _mm512_fmadd_ps(_mm512_set1_ps(c_scale),
                                      load_vec(crow + 16 * v, m[v], masked), res);
            if (masked)
                _mm512_mask_storeu_ps(crow + 16 * v, m[v], res);
            else
                _mm512_storeu_ps(crow + 16 * v, res);
        }
    }
}

static void block_avx512(int mr, int nc, int kend, const float *A, size_t lda, const float *B,
                         size_t ldb, float *C, size_t ldc, float alpha, float c_scale,
                         const float *row_scale) {
#define BLOCK(nv, masked)                                                                          \
    block_avx512_nv(nv, masked, mr, nc, kend, A, lda, B, ldb, C, ldc, alpha, c_scale, row_scale)
    const bool masked = nc % 16 != 0;
    switch ((nc + 15) / 16) {
    case 1: masked ? BLOCK(1, true) : BLOCK(1, false); break;
    case 2: masked ? BLOCK(2, true) : BLOCK(2, false); break;
    case 3: masked ? BLOCK(3, true) : BLOCK(3, false); break;
    default: masked ? BLOCK(4, true) : BLOCK(4, false); break;
    }
#undef BLOCK
}
#endif

void lm_gdn_gemm(int m, int n, int k, const float *A, size_t lda, const float *B, size_t ldb,
                 float *C, size_t ldc, float alpha, float c_scale, const float *row_scale,
                 lm_gdn_tri tri, bool simd) {
    for (int i0 = 0; i0 < m; i0 += MR) {
        int mr = m - i0 < MR ? m - i0 : MR;
        int row_end = i0 + mr; /* one past the block's last row */
        int n_end = tri == LM_GDN_LOWER_C && row_end < n ? row_end : n;
        int k_end = tri == LM_GDN_LOWER_A && row_end < k ? row_end : k;
        const float *a = A + (size_t)i0 * lda;
        const float *rs = row_scale ? row_scale + i0 : NULL;
        for (int j0 = 0; j0 < n_end; j0 += NR) {
            int nc = n_end - j0 < NR ? n_end - j0 : NR;
            float *c = C + (size_t)i0 * ldc + (size_t)j0;
#ifdef LM_GDN_AVX512
            if (simd) {
                block_avx512(mr, nc, k_end, a, lda, B + j0, ldb, c, ldc, alpha, c_scale, rs);
                continue;
            }
#else
            (void)simd;
#endif
            block_portable(mr, nc, k_end, a, lda, B + j0, ldb, c, ldc, alpha, c_scale, rs);
        }
    }
}
