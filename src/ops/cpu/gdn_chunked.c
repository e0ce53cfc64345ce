/* Chunked (prefill) form of the gated delta rule, model-spec §A.7.  For
 * each value head and each chunk of n <= LM_GDN_CHUNK tokens, with the
 * incoming state S [dk, dv] and γ_i = Σ_{s<=i} g_s inside the chunk:
 *   A_ij = β_i (k_i·k_j) e^{γ_i−γ_j}  (j < i)        T = (I + A)^-1
 *   U = T·diag(β)·V,   W = T·diag(β e^γ)·K,          V' = U − W·S
 *   o_i = e^{γ_i} (q_i·S) + Σ_{j<=i} (q_i·k_j) e^{γ_i−γ_j} V'_j
 *   S  <- e^{γ_{n−1}} S + Σ_j (e^{γ_{n−1}−γ_j} k_j) ⊗ V'_j
 * All the heavy steps are the small matrix products of gdn_gemm.c; S is
 * read twice and written once per chunk instead of once per token. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/gdn.h"
#include "ops/cpu/gdn_gemm.h"
#include "ops/cpu/gdn_simd.h"

#define C LM_GDN_CHUNK

/* One worker's scratch, carved from a single allocation. */
typedef struct {
    double *gamma;                /* [C] cumulative log decay */
    float *exp_gamma, *exp_tail;  /* [C] e^{γ_i}, e^{γ_{n−1}−γ_i} */
    float *beta, *beta_exp_gamma; /* [C] β_i, β_i e^{γ_i} */
    float *row;                   /* [C] one row of work */
    float *kt;                    /* [dk, C] chunk keys, transposed */
    float *tri_a;                 /* [C, C] k·kᵀ -> A -> T -> T·diag(β) */
    float *tri_q;                 /* [C, C] q·kᵀ -> decay-masked M */
    float *tri_w;                 /* [C, C] T·diag(β e^γ) */
    float *u;                     /* [C, dv] U, then V' */
    float *w;                     /* [C, dk] W */
} chunk_scratch;

static size_t round_up16(size_t n) { return (n + 15) / 16 * 16; }

/* Floats of scratch one worker needs (each region padded to 64 bytes). */
static size_t scratch_floats(int dk, int dv) {
    return round_up16(2 * C) + 5 * round_up16(C) + round_up16((size_t)dk * C) +
           3 * round_up16((size_t)C * C) + round_up16((size_t)C * (size_t)dv) +
           round_up16((size_t)C * (size_t)dk);
}

static chunk_scratch carve_scratch(float *base, int dk, int dv) {
    chunk_scratch s;
    float *at = base;
    s.gamma = (double *)at, at += round_up16(2 * C);
    s.exp_gamma = at, at += round_up16(C);
    s.exp_tail = at, at += round_up16(C);
    s.beta = at, at += round_up16(C);
    s.beta_exp_gamma = at, at += round_up16(C);
    s.row = at, at += round_up16(C);
    s.kt = at, at += round_up16((size_t)dk * C);
    s.tri_a = at, at += round_up16((size_t)C * C);
    s.tri_q = at, at += round_up16((size_t)C * C);
    s.tri_w = at, at += round_up16((size_t)C * C);
    s.u = at, at += round_up16((size_t)C * (size_t)dv);
    s.w = at;
    return s;
}

/* dst[j] = a[j]·b[j]·scale for j < n (dst may be a). */
static void mul_rows(float *dst, const float *a, const float *b, float scale, int n, bool simd) {
#ifdef LM_GDN_AVX512
    if (simd) {
        __m512 sv = _mm512_set1_ps(scale);
        for (int j = 0; j < n; j += 16) {
            __mmask16 m = lm_gdn_mask(n - j);
            __m512 x =
                _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + j), _mm512_maskz_loadu_ps(m, b + j));
            _mm512_mask_storeu_ps(dst + j, m, _mm512_mul_ps(x, sv));
        }
        return;
    }
#else
    (void)simd;
#endif
    for (int j = 0; j < n; j++) dst[j] = a[j] * b[j] * scale;
}

/* kt[i][j] = k[j][i] for j < n, i < dk: 16 tokens at a time, each row of
 * kt gathered from 16 key rows (a scalar transpose cost a tenth of the
 * whole chunked form). */
static void transpose_keys(float *kt, const float *kc, size_t ldk, int n, int dk, bool simd) {
#ifdef LM_GDN_AVX512
    if (simd && ldk <= (size_t)INT32_MAX / C) {
        const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        const __m512i offsets = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)ldk));
        for (int j = 0; j < n; j += 16) {
            __mmask16 m = lm_gdn_mask(n - j);
            const float *base = kc + (size_t)j * ldk;
            for (int i = 0; i < dk; i++)
                _mm512_mask_storeu_ps(
                    kt + (size_t)i * C + (size_t)j, m,
                    _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, offsets, base + i, 4));
        }
        return;
    }
#else
    (void)simd;
#endif
    for (int j = 0; j < n; j++)
        for (int i = 0; i < dk; i++)
            kt[(size_t)i * C + (size_t)j] = kc[(size_t)j * ldk + (size_t)i];
}

static void exp_row(float *x, int n, bool simd) {
#ifdef LM_GDN_AVX512
    if (simd) {
        for (int j = 0; j < n; j += 16) {
            __mmask16 m = lm_gdn_mask(n - j);
            _mm512_mask_storeu_ps(x + j, m, lm_gdn_exp512(_mm512_maskz_loadu_ps(m, x + j)));
        }
        return;
    }
#else
    (void)simd;
#endif
    for (int j = 0; j < n; j++) x[j] = expf(x[j]);
}

/* Turns tri_a (strictly lower part = A) into T = (I + A)^-1 in place, row by
 * row: T_i = e_i − Σ_{l<i} A_il T_l.  Rows are stored full width C with
 * zeros above the diagonal, which the products with LM_GDN_LOWER_A rely on. */
static void invert_unit_lower(float *tri, int n, float *row, bool simd) {
    for (int i = 0; i < n; i++) {
        float *ti = tri + (size_t)i * C;
#ifdef LM_GDN_AVX512
        if (simd) {
            __m512 acc[C / 16];
#pragma GCC unroll 4
            for (int v = 0; v < C / 16; v++) acc[v] = _mm512_setzero_ps();
            for (int l = 0; l < i; l++) {
                __m512 a = _mm512_set1_ps(ti[l]);
                const float *tl = tri + (size_t)l * C;
#pragma GCC unroll 4
                for (int v = 0; v < C / 16; v++)
                    acc[v] = _mm512_fnmadd_ps(a, _mm512_loadu_ps(tl + 16 * v), acc[v]);
            }
#pragma GCC unroll 4
            for (int v = 0; v < C / 16; v++) _mm512_storeu_ps(ti + 16 * v, acc[v]);
            ti[i] = 1.0f;
            continue;
        }
#else
        (void)simd;
#endif
        for (int j = 0; j < C; j++) row[j] = 0;
        for (int l = 0; l < i; l++) {
            float a = ti[l];
            const float *tl = tri + (size_t)l * C;
            for (int j = 0; j <= l; j++) row[j] -= a * tl[j];
        }
        memcpy(ti, row, sizeof(float) * C);
        ti[i] = 1.0f;
    }
}

/* One chunk of n tokens starting at t0 for value head hv; updates S. */
static void run_chunk(const lm_gdn_problem *p, const chunk_scratch *s, int hv, int t0, int n,
                      bool simd) {
    const int dk = p->dk, dv = p->dv;
    const int hk = hv / (p->Hv / p->Hk); /* repeat-interleave, model-spec §H.4 */
    const size_t ldk = (size_t)p->Hk * (size_t)dk, ldv = (size_t)p->Hv * (size_t)dv;
    const float *kc = p->k + (size_t)t0 * ldk + (size_t)hk * (size_t)dk;
    const float *qc = p->q + (size_t)t0 * ldk + (size_t)hk * (size_t)dk;
    const float *vc = p->v + (size_t)t0 * ldv + (size_t)hv * (size_t)dv;
    float *oc = p->out + (size_t)t0 * ldv + (size_t)hv * (size_t)dv;
    float *S = p->state + (size_t)hv * (size_t)dk * (size_t)dv;

    /* Gates: cumulative decay in double, so e^{γ_i−γ_j} stays exact-ish even
     * when both sums are large. */
    double acc = 0;
    for (int i = 0; i < n; i++) {
        size_t gi = (size_t)(t0 + i) * (size_t)p->Hv + (size_t)hv;
        /* e^-1000 is 0 in float as e^-inf is, but keeps γ_i − γ_j finite */
        double g = p->g[gi] < -1000.0f ? -1000.0 : p->g[gi];
        acc += g;
        s->gamma[i] = acc;
        s->beta[i] = p->beta[gi];
    }
    for (int i = 0; i < n; i++) {
        s->exp_gamma[i] = (float)s->gamma[i];
        s->exp_tail[i] = (float)(s->gamma[n - 1] - s->gamma[i]);
    }
    exp_row(s->exp_gamma, n, simd);
    exp_row(s->exp_tail, n, simd);
    for (int i = 0; i < n; i++) s->beta_exp_gamma[i] = s->beta[i] * s->exp_gamma[i];

    transpose_keys(s->kt, kc, ldk, n, dk, simd);

    /* k·kᵀ and q·kᵀ, lower triangles */
    lm_gdn_gemm(n, n, dk, kc, ldk, s->kt, C, s->tri_a, C, 1.0f, 0.0f, NULL, LM_GDN_LOWER_C, simd);
    lm_gdn_gemm(n, n, dk, qc, ldk, s->kt, C, s->tri_q, C, 1.0f, 0.0f, NULL, LM_GDN_LOWER_C, simd);

    /* A (strictly lower) and M (lower with diagonal), zeros above */
    for (int i = 0; i < n; i++) {
        float *a = s->tri_a + (size_t)i * C, *m = s->tri_q + (size_t)i * C;
        for (int j = 0; j <= i; j++) s->row[j] = (float)(s->gamma[i] - s->gamma[j]);
        exp_row(s->row, i + 1, simd);
        mul_rows(a, a, s->row, s->beta[i], i, simd);
        mul_rows(m, m, s->row, 1.0f, i + 1, simd);
        memset(a + i, 0, sizeof(float) * (size_t)(C - i));
        memset(m + i + 1, 0, sizeof(float) * (size_t)(C - i - 1));
    }
    invert_unit_lower(s->tri_a, n, s->row, simd);
    for (int i = 0; i < n; i++) {
        float *t = s->tri_a + (size_t)i * C, *tw = s->tri_w + (size_t)i * C;
        mul_rows(tw, t, s->beta_exp_gamma, 1.0f, n, simd);
        mul_rows(t, t, s->beta, 1.0f, n, simd);
        memset(tw + n, 0, sizeof(float) * (size_t)(C - n));
        memset(t + n, 0, sizeof(float) * (size_t)(C - n));
    }

    /* U = T·diag(β)·V,  W = T·diag(β e^γ)·K,  V' = U − W·S */
    lm_gdn_gemm(n, dv, n, s->tri_a, C, vc, ldv, s->u, (size_t)dv, 1.0f, 0.0f, NULL, LM_GDN_LOWER_A,
                simd);
    lm_gdn_gemm(n, dk, n, s->tri_w, C, kc, ldk, s->w, (size_t)dk, 1.0f, 0.0f, NULL, LM_GDN_LOWER_A,
                simd);
    lm_gdn_gemm(n, dv, dk, s->w, (size_t)dk, S, (size_t)dv, s->u, (size_t)dv, -1.0f, 1.0f, NULL,
                LM_GDN_FULL, simd);

    /* o = diag(e^γ)·Q·S + M·V' */
    lm_gdn_gemm(n, dv, dk, qc, ldk, S, (size_t)dv, oc, ldv, 1.0f, 0.0f, s->exp_gamma, LM_GDN_FULL,
                simd);
    lm_gdn_gemm(n, dv, n, s->tri_q, C, s->u, (size_t)dv, oc, ldv, 1.0f, 1.0f, NULL, LM_GDN_LOWER_A,
                simd);

    /* S = e^{γ_{n−1}}·S + (K·diag(e^{γ_{n−1}−γ}))ᵀ·V' */
    for (int i = 0; i < dk; i++) {
        float *r = s->kt + (size_t)i * C;
        mul_rows(r, r, s->exp_tail, 1.0f, n, simd);
    }
    lm_gdn_gemm(dk, dv, n, s->kt, C, s->u, (size_t)dv, S, (size_t)dv, 1.0f, s->exp_gamma[n - 1],
                NULL, LM_GDN_FULL, simd);
}

typedef struct {
    const lm_gdn_problem *p;
    float *scratch;
    size_t scratch_stride; /* floats per worker */
    bool simd;
} chunked_job;

static void chunked_task(void *ctx, int task, int n_tasks) {
    const chunked_job *job = ctx;
    const lm_gdn_problem *p = job->p;
    chunk_scratch s =
        carve_scratch(job->scratch + (size_t)task * job->scratch_stride, p->dk, p->dv);
    long h_begin, h_end;
    lm_split_range(p->Hv, n_tasks, task, &h_begin, &h_end);
    for (long hv = h_begin; hv < h_end; hv++)
        for (int t0 = 0; t0 < p->T; t0 += C) {
            int n = p->T - t0 < C ? p->T - t0 : C;
            run_chunk(p, &s, (int)hv, t0, n, job->simd);
        }
}

bool lm_gdn_chunked(lm_pool *pool, const lm_gdn_problem *p, bool simd) {
    if (p->T <= 0 || p->Hv <= 0 || p->dv <= 0) return true;
    int workers = pool ? lm_pool_size(pool) : 1;
    if (workers > p->Hv) workers = p->Hv;
    size_t stride = scratch_floats(p->dk, p->dv);
    if (stride > SIZE_MAX / sizeof(float) / (size_t)workers) return false;
    size_t bytes = stride * sizeof(float) * (size_t)workers; /* a multiple of 64 */
    float *scratch = aligned_alloc(64, bytes);
    if (!scratch) return false;
    chunked_job job = {.p = p, .scratch = scratch, .scratch_stride = stride, .simd = simd};
    lm_gdn_run(pool, workers, chunked_task, &job);
    free(scratch);
    return true;
}
