/* Recurrent (token-by-token) form of the gated delta rule, model-spec §A.7:
 *   S = e^g·S;  d = β·(v − Sᵀk);  S += k ⊗ d;  o = Sᵀq.
 *
 * Every column j of S evolves on its own (column j of Sᵀk only reads column
 * j of S), so a value head is cut into tiles of TILE columns and each tile
 * runs all T tokens while it sits in L1: S is streamed from memory once per
 * call.  Per token a tile takes one fused pass over its rows:
 *   S_new = e^g·S + k ⊗ d   (store)   and, with S_new in registers,
 *   Sᵀk' and Sᵀq' for the NEXT token.
 * The output needs Sᵀq after the update, which we get without another pass:
 *   o = S_newᵀq = e^g·(Sᵀq) + (k·q)·d.
 * So T tokens cost T+1 passes over an L1-resident tile (the first only reads). */
#include <math.h>
#include <stddef.h>

#include "ops/cpu/gdn.h"
#include "ops/cpu/gdn_simd.h"

#define TILE 32 /* columns per tile: 128 rows × 32 floats = 16 KiB, half an L1 */

typedef struct {
    const lm_gdn_problem *p;
    int n_tiles;
    bool simd;
} recurrent_job;

/* Pointers to token t's rows for value head hv / key head hk. */
typedef struct {
    const float *k, *q, *v;
    float *out;
    float decay, beta, kq;
} token_view;

static token_view token_at(const lm_gdn_problem *p, int t, int hv, int hk, int j0) {
    token_view tv;
    size_t kq_off = ((size_t)t * (size_t)p->Hk + (size_t)hk) * (size_t)p->dk;
    size_t v_off = ((size_t)t * (size_t)p->Hv + (size_t)hv) * (size_t)p->dv + (size_t)j0;
    size_t gate = (size_t)t * (size_t)p->Hv + (size_t)hv;
    tv.k = p->k + kq_off;
    tv.q = p->q + kq_off;
    tv.v = p->v + v_off;
    tv.out = p->out + v_off;
    tv.decay = expf(p->g[gate]);
    tv.beta = p->beta[gate];
    float kq = 0;
    for (int i = 0; i < p->dk; i++) kq += tv.k[i] * tv.q[i];
    tv.kq = kq;
    return tv;
}

static void tile_portable(const lm_gdn_problem *p, int hv, int hk, int j0, int tw) {
    const int dk = p->dk, dv = p->dv;
    float *S = p->state + (size_t)hv * (size_t)dk * (size_t)dv + (size_t)j0;
    float mk[TILE], mq[TILE], d[TILE];
    token_view cur = token_at(p, 0, hv, hk, j0);
    for (int c = 0; c < tw; c++) mk[c] = mq[c] = 0;
    for (int i = 0; i < dk; i++) {
        const float *row = S + (size_t)i * (size_t)dv;
        for (int c = 0; c < tw; c++) {
            mk[c] += row[c] * cur.k[i];
            mq[c] += row[c] * cur.q[i];
        }
    }
    for (int t = 0; t < p->T; t++) {
        for (int c = 0; c < tw; c++) {
            d[c] = (cur.v[c] - cur.decay * mk[c]) * cur.beta;
            cur.out[c] = cur.decay * mq[c] + cur.kq * d[c];
        }
        if (t + 1 < p->T) {
            token_view next = token_at(p, t + 1, hv, hk, j0);
            for (int c = 0; c < tw; c++) mk[c] = mq[c] = 0;
            for (int i = 0; i < dk; i++) {
                float *row = S + (size_t)i * (size_t)dv;
                for (int c = 0; c < tw; c++) {
                    float s = cur.decay * row[c] + cur.k[i] * d[c];
                    row[c] = s;
                    mk[c] += s * next.k[i];
                    mq[c] += s * next.q[i];
                }
            }
            cur = next;
        } else {
            for (int i = 0; i < dk; i++) {
                float *row = S + (size_t)i * (size_t)dv;
                for (int c = 0; c < tw; c++) row[c] = cur.decay * row[c] + cur.k[i] * d[c];
            }
        }
    }
}

#ifdef LM_GDN_AVX512
static void tile_avx512(const lm_gdn_problem *p, int hv, int hk, int j0, int tw) {
    const int dk = p->dk;
    const size_t dv = (size_t)p->dv;
    float *S = p->state + (size_t)hv * (size_t)dk * dv + (size_t)j0;
    const __mmask16 m0 = lm_gdn_mask(tw), m1 = lm_gdn_mask(tw - 16);
    token_view cur = token_at(p, 0, hv, hk, j0);
    __m512 mk0 = _mm512_setzero_ps(), mk1 = mk0, mq0 = mk0, mq1 = mk0;
    for (int i = 0; i < dk; i++) {
        const float *row = S + (size_t)i * dv;
        __m512 s0 = _mm512_maskz_loadu_ps(m0, row), s1 = _mm512_maskz_loadu_ps(m1, row + 16);
        __m512 kb = _mm512_set1_ps(cur.k[i]), qb = _mm512_set1_ps(cur.q[i]);
        mk0 = _mm512_fmadd_ps(s0, kb, mk0);
        mk1 = _mm512_fmadd_ps(s1, kb, mk1);
        mq0 = _mm512_fmadd_ps(s0, qb, mq0);
        mq1 = _mm512_fmadd_ps(s1, qb, mq1);
    }
    for (int t = 0; t < p->T; t++) {
        const __m512 decay = _mm512_set1_ps(cur.decay), beta = _mm512_set1_ps(cur.beta);
        const __m512 kq = _mm512_set1_ps(cur.kq);
        __m512 d0 = _mm512_mul_ps(
            _mm512_fnmadd_ps(decay, mk0, _mm512_maskz_loadu_ps(m0, cur.v)), beta);
        __m512 d1 = _mm512_mul_ps(
            _mm512_fnmadd_ps(decay, mk1, _mm512_maskz_loadu_ps(m1, cur.v + 16)), beta);
        _mm512_mask_storeu_ps(cur.out, m0, _mm512_fmadd_ps(kq, d0, _mm512_mul_ps(decay, mq0)));
        _mm512_mask_storeu_ps(cur.out + 16, m1, _mm512_fmadd_ps(kq, d1, _mm512_mul_ps(decay, mq1)));
        if (t + 1 < p->T) {
            token_view next = token_at(p, t + 1, hv, hk, j0);
            mk0 = mk1 = mq0 = mq1 = _mm512_setzero_ps();
            for (int i = 0; i < dk; i++) {
                float *row = S + (size_t)i * dv;
                __m512 kb = _mm512_set1_ps(cur.k[i]);
                __m512 s0 = _mm512_fmadd_ps(kb, d0, _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m0, row)));
                __m512 s1 = _mm512_fmadd_ps(kb, d1,
                                            _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m1, row + 16)));
                _mm512_mask_storeu_ps(row, m0, s0);
                _mm512_mask_storeu_ps(row + 16, m1, s1);
                __m512 nk = _mm512_set1_ps(next.k[i]), nq = _mm512_set1_ps(next.q[i]);
                mk0 = _mm512_fmadd_ps(s0, nk, mk0);
                mk1 = _mm512_fmadd_ps(s1, nk, mk1);
                mq0 = _mm512_fmadd_ps(s0, nq, mq0);
                mq1 = _mm512_fmadd_ps(s1, nq, mq1);
            }
            cur = next;
        } else {
            for (int i = 0; i < dk; i++) {
                float *row = S + (size_t)i * dv;
                __m512 kb = _mm512_set1_ps(cur.k[i]);
                __m512 s0 = _mm512_fmadd_ps(kb, d0, _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m0, row)));
                __m512 s1 = _mm512_fmadd_ps(kb, d1,
                                            _mm512_mul_ps(decay, _mm512_maskz_loadu_ps(m1, row + 16)));
                _mm512_mask_storeu_ps(row, m0, s0);
                _mm512_mask_storeu_ps(row + 16, m1, s1);
            }
        }
    }
}
#endif

static void recurrent_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const recurrent_job *job = ctx;
    const lm_gdn_problem *p = job->p;
    int hv = task / job->n_tiles;
    int j0 = (task % job->n_tiles) * TILE;
    int tw = p->dv - j0 < TILE ? p->dv - j0 : TILE;
    int hk = hv / (p->Hv / p->Hk); /* repeat-interleave, model-spec §H.4 */
#ifdef LM_GDN_AVX512
    if (job->simd) {
        tile_avx512(p, hv, hk, j0, tw);
        return;
    }
#endif
    tile_portable(p, hv, hk, j0, tw);
}

void lm_gdn_recurrent(lm_pool *pool, const lm_gdn_problem *p, bool simd) {
    if (p->T <= 0 || p->Hv <= 0 || p->dv <= 0) return;
    recurrent_job job = {.p = p, .n_tiles = (p->dv + TILE - 1) / TILE, .simd = simd};
    lm_gdn_run(pool, p->Hv * job.n_tiles, recurrent_task, &job);
}
