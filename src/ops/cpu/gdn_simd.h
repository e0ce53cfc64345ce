/* AVX-512 helpers private to the Gated DeltaNet kernels (gdn_*.c). */
#ifndef LOOM_OPS_CPU_GDN_SIMD_H
#define LOOM_OPS_CPU_GDN_SIMD_H

#if defined(__AVX512F__)
#define LM_GDN_AVX512 1
#include <immintrin.h>

/* Lanes [0, n) set, n clamped to [0, 16]. */
static inline __mmask16 lm_gdn_mask(int n) {
    if (n >= 16) return (__mmask16)0xFFFF;
    if (n <= 0) return 0;
    return (__mmask16)((1u << n) - 1u);
}

/* e^x, about 1 ulp (Cephes expf polynomial, 2^n applied with scalef so
 * large negative x underflows gracefully to 0).  NaN stays NaN. */
static inline __m512 lm_gdn_exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.7f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* x · sigmoid(x) */
static inline __m512 lm_gdn_silu512(__m512 x) {
    __m512 e = lm_gdn_exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
#endif

#endif
