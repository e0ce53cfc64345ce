/* Paged-KV attention on the cpu backend.
 *
 * The arithmetic of one (token, query head), whatever else is in the call:
 * its context is walked in blocks of KEY_BLOCK keys at fixed positions (0,
 * 16, 32, ...); per block, scores s_j = (q·k_j)·scale (one accumulator
 * vector per key walked over d in order, then lm_vf_reduce_add's tree),
 * softmax online in float32 (m' = max(m, max_j s_j), corr = e^(m−m'),
 * p_j = e^(s_j−m'), l = l·corr + Σ_j p_j in j order), and
 * acc = acc·corr + Σ_j p_j·v_j, one FMA chain per element in j order.  The
 * output row holds acc, so nothing is allocated.
 *
 * How that work is scheduled is free, because no step of it mixes two
 * queries:
 *  - A task is (a window of consecutive batch rows, a kv head).  Rows of
 *    one sequence in a window form a query tile: its rows x the query heads
 *    of the kv head (GQA) are the tile's queries, and each key block is
 *    read once for all of them while it sits in L1 (a prefill chunk's rows
 *    used to stream the whole context from memory once per row each).
 *  - Blocks that are complete for a query (all 16 keys inside its context)
 *    run four queries x four keys at a time: 16 accumulators, each d step
 *    four loads of q and four of k for 16 FMAs; the 16 dot products are
 *    summed by one transpose network whose per-lane tree is exactly
 *    lm_vf_reduce_add's (lane i + i+8, + i+4, + i+2, + i+1), and values are
 *    accumulated four queries x four vectors of dims per loaded row of v.
 *  - A query's last, partial block runs alone (the loops of the old
 *    one-token kernel).
 * So a token's output has the same bits alone, in any batch, at any thread
 * count, split anywhere: test_backend_ops checks each token alone against
 * its batch. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/simd.h"
#include "ops/cpu/kernels.h"

#define KEY_BLOCK 16
#define TILE_QUERIES 4      /* queries of one score / value tile */
#define MAX_TASK_QUERIES 128 /* query rows x heads one task keeps state for */

void lm_cpu_kv_write(const lm_host_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots) {
    /* a few KB per token: plain copies */
    int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;
    for (int t = 0; t < n; t++) {
        memcpy(kv->k + (int64_t)slots[t] * row, k + (int64_t)t * row, (size_t)row * sizeof(float));
        memcpy(kv->v + (int64_t)slots[t] * row, v + (int64_t)t * row, (size_t)row * sizeof(float));
    }
}

typedef struct {
    float *out;
    const float *q;
    const lm_host_kv_layer *kv;
    const lm_host_attention_batch *b;
} attention_job;

/* ---------------------------------------------------------------- one query */

/* s[j] = (q · k_j) · scale for the keys of one block.  Four keys share each
 * load of q (loads, not FMAs, bound this loop).  Each key has one
 * accumulator walked over d in order, so a score does not depend on how the
 * keys were grouped. */
static void block_scores(float *s, const float *q, const float *const *krows, int nkeys, int D,
                         float scale) {
    int j = 0;
    for (; j + 4 <= nkeys; j += 4) {
        const float *k0 = krows[j], *k1 = krows[j + 1], *k2 = krows[j + 2], *k3 = krows[j + 3];
        lm_vf a0 = lm_vf_zero(), a1 = lm_vf_zero(), a2 = lm_vf_zero(), a3 = lm_vf_zero();
        int d = 0;
        for (; d + LM_VF_WIDTH <= D; d += LM_VF_WIDTH) {
            lm_vf qv = lm_vf_load(q + d);
            a0 = lm_vf_fma(qv, lm_vf_load(k0 + d), a0);
            a1 = lm_vf_fma(qv, lm_vf_load(k1 + d), a1);
            a2 = lm_vf_fma(qv, lm_vf_load(k2 + d), a2);
            a3 = lm_vf_fma(qv, lm_vf_load(k3 + d), a3);
        }
        if (d < D) {
            int count = D - d;
            lm_vf qv = lm_vf_load_part(q + d, count);
            a0 = lm_vf_fma(qv, lm_vf_load_part(k0 + d, count), a0);
            a1 = lm_vf_fma(qv, lm_vf_load_part(k1 + d, count), a1);
            a2 = lm_vf_fma(qv, lm_vf_load_part(k2 + d, count), a2);
            a3 = lm_vf_fma(qv, lm_vf_load_part(k3 + d, count), a3);
        }
        s[j] = lm_vf_reduce_add(a0) * scale;
        s[j + 1] = lm_vf_reduce_add(a1) * scale;
        s[j + 2] = lm_vf_reduce_add(a2) * scale;
        s[j + 3] = lm_vf_reduce_add(a3) * scale;
    }
    for (; j < nkeys; j++) {
        const float *k0 = krows[j];
        lm_vf a0 = lm_vf_zero();
        int d = 0;
        for (; d + LM_VF_WIDTH <= D; d += LM_VF_WIDTH)
            a0 = lm_vf_fma(lm_vf_load(q + d), lm_vf_load(k0 + d), a0);
        if (d < D)
            a0 = lm_vf_fma(lm_vf_load_part(q + d, D - d), lm_vf_load_part(k0 + d, D - d), a0);
        s[j] = lm_vf_reduce_add(a0) * scale;
    }
}

/* The online softmax of one query over one block of scores s[0..nkeys):
 * p = e^(s − m'), and the factor `corr` its accumulator must be scaled by.
 * Every block of every query goes through here. */
static float softmax_block(float *m, float *l, const float *s, float *p, int nkeys) {
    float block_max = -INFINITY;
    for (int j = 0; j < nkeys; j++) block_max = s[j] > block_max ? s[j] : block_max;
    float new_m = *m > block_max ? *m : block_max;
    float corr = *m == -INFINITY ? 0.0f : lm_exp_scalar(*m - new_m);
    float sum = 0;
    for (int j0 = 0; j0 < nkeys; j0 += LM_VF_WIDTH) {
        int count = nkeys - j0 < LM_VF_WIDTH ? nkeys - j0 : LM_VF_WIDTH;
        lm_vf e = lm_vf_exp(lm_vf_sub(lm_vf_load_part(s + j0, count), lm_vf_set1(new_m)));
        lm_vf_store_part(p + j0, e, count);
    }
    for (int j = 0; j < nkeys; j++) sum += p[j];
    *l = *l * corr + sum;
    *m = new_m;
    return corr;
}

/* acc = acc·corr + Σ_j p[j]·v_j over one key block.  Dims go VALUE_CHUNK
 * vectors at a time, held in registers across the block's keys, so each
 * broadcast of p[j] feeds VALUE_CHUNK FMAs. */
#define VALUE_CHUNK 8
static void accumulate_values(float *acc, float corr, const float *p, const float *const *vrows,
                              int nkeys, int D) {
    lm_vf vcorr = lm_vf_set1(corr);
    int d = 0;
    for (; d + VALUE_CHUNK * LM_VF_WIDTH <= D; d += VALUE_CHUNK * LM_VF_WIDTH) {
        lm_vf a[VALUE_CHUNK];
        LM_PRAGMA_UNROLL
        for (int c = 0; c < VALUE_CHUNK; c++)
            a[c] = lm_vf_mul(lm_vf_load(acc + d + c * LM_VF_WIDTH), vcorr);
        for (int j = 0; j < nkeys; j++) {
            lm_vf pj = lm_vf_set1(p[j]);
            const float *vj = vrows[j] + d;
            LM_PRAGMA_UNROLL
            for (int c = 0; c < VALUE_CHUNK; c++)
                a[c] = lm_vf_fma(pj, lm_vf_load(vj + c * LM_VF_WIDTH), a[c]);
        }
        LM_PRAGMA_UNROLL
        for (int c = 0; c < VALUE_CHUNK; c++) lm_vf_store(acc + d + c * LM_VF_WIDTH, a[c]);
    }
    for (; d < D; d += LM_VF_WIDTH) { /* the last dims, one vector at a time */
        int count = D - d < LM_VF_WIDTH ? D - d : LM_VF_WIDTH;
        lm_vf a = lm_vf_mul(lm_vf_load_part(acc + d, count), vcorr);
        for (int j = 0; j < nkeys; j++)
            a = lm_vf_fma(lm_vf_set1(p[j]), lm_vf_load_part(vrows[j] + d, count), a);
        lm_vf_store_part(acc + d, a, count);
    }
}

/* ------------------------------------------------- four queries x a block */

#if defined(LM_SIMD_AVX512)
/* The 16 sums of 16 accumulators: lane 4a + b of the result is the sum of
 * v[4b + a].  Each lane's tree is lm_vf_reduce_add's: lane i + lane i+8,
 * then + 4, + 2, + 1 (float addition commutes exactly, so which operand
 * comes first does not matter), hence the same bits as summing each
 * accumulator alone. */
static inline __m512 reduce_16_sums(const __m512 v[16]) {
    __m512 a[8], b[4], c[2];
    LM_PRAGMA_UNROLL
    for (int j = 0; j < 8; j++)
        a[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], 0xEE));
    LM_PRAGMA_UNROLL
    for (int j = 0; j < 4; j++)
        b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xDD));
    LM_PRAGMA_UNROLL
    for (int j = 0; j < 2; j++)
        c[j] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

/* Keeps a loaded vector in a register: without it GCC folds the load into
 * every FMA that uses it, four loads of each key row instead of one. */
#if defined(__GNUC__) && !defined(LM_SIMD_GENERIC)
#define KEEP_IN_REGISTER(x) __asm__("" : "+v"(x))
#else
#define KEEP_IN_REGISTER(x) (void)0
#endif

/* Four accumulators per query, one per key of a group of four, over d in
 * order: per step of d, NQ loads of q and four of k feed 4·NQ FMAs. */
#define SCORE_STEP(load_k, load_q)                                                                 \
    do {                                                                                           \
        lm_vf kv0 = load_k(k0), kv1 = load_k(k1), kv2 = load_k(k2), kv3 = load_k(k3);              \
        KEEP_IN_REGISTER(kv0);                                                                     \
        KEEP_IN_REGISTER(kv1);                                                                     \
        KEEP_IN_REGISTER(kv2);                                                                     \
        KEEP_IN_REGISTER(kv3);                                                                     \
        LM_PRAGMA_UNROLL                                                                           \
        for (int i = 0; i < NQ; i++) {                                                             \
            lm_vf qv = load_q(q[i]);                                                               \
            acc[i][0] = lm_vf_fma(qv, kv0, acc[i][0]);                                             \
            acc[i][1] = lm_vf_fma(qv, kv1, acc[i][1]);                                             \
            acc[i][2] = lm_vf_fma(qv, kv2, acc[i][2]);                                             \
            acc[i][3] = lm_vf_fma(qv, kv3, acc[i][3]);                                             \
        }                                                                                          \
    } while (0)
#define LOAD_AT_D(row) lm_vf_load((row) + d)
#define LOAD_PART_AT_D(row) lm_vf_load_part((row) + d, D - d)

static LM_ALWAYS_INLINE void group_dots(lm_vf acc[TILE_QUERIES][4], const float *const q[TILE_QUERIES],
                                        const float *const *krows, int D, const int NQ) {
    LM_PRAGMA_UNROLL
    for (int i = 0; i < NQ; i++)
        LM_PRAGMA_UNROLL
        for (int j = 0; j < 4; j++) acc[i][j] = lm_vf_zero();
    const float *k0 = krows[0], *k1 = krows[1], *k2 = krows[2], *k3 = krows[3];
    int d = 0;
    for (; d + LM_VF_WIDTH <= D; d += LM_VF_WIDTH) SCORE_STEP(LOAD_AT_D, LOAD_AT_D);
    if (d < D) SCORE_STEP(LOAD_PART_AT_D, LOAD_PART_AT_D);
}

/* acc_i = acc_i·corr_i + Σ_j p_i[j]·v_j for NQ queries over a complete
 * block, p_i[j] at p[i·ps_query + j·ps_key]: each loaded vector of v feeds
 * NQ FMAs, and each element keeps the one FMA chain in j order of
 * accumulate_values.  NQ and the strides are literals at every call (always
 * inline), so the accumulators are registers. */
#define TILE_VALUE_VECS (LM_VF_WIDTH == 16 ? 4 : 2)
static LM_ALWAYS_INLINE void tile_values(float *const acc[TILE_QUERIES], const float *corr,
                                         const float *p, const int ps_query, const int ps_key,
                                         const float *const *vrows, int D, const int NQ) {
    int d = 0;
    for (; d + TILE_VALUE_VECS * LM_VF_WIDTH <= D; d += TILE_VALUE_VECS * LM_VF_WIDTH) {
        lm_vf a[TILE_QUERIES][TILE_VALUE_VECS];
        LM_PRAGMA_UNROLL
        for (int i = 0; i < NQ; i++) {
            lm_vf vcorr = lm_vf_set1(corr[i]);
            LM_PRAGMA_UNROLL
            for (int c = 0; c < TILE_VALUE_VECS; c++)
                a[i][c] = lm_vf_mul(lm_vf_load(acc[i] + d + c * LM_VF_WIDTH), vcorr);
        }
        for (int j = 0; j < KEY_BLOCK; j++) {
            lm_vf vj[TILE_VALUE_VECS];
            LM_PRAGMA_UNROLL
            for (int c = 0; c < TILE_VALUE_VECS; c++)
                vj[c] = lm_vf_load(vrows[j] + d + c * LM_VF_WIDTH);
            LM_PRAGMA_UNROLL
            for (int i = 0; i < NQ; i++) {
                lm_vf pij = lm_vf_set1(p[i * ps_query + j * ps_key]);
                LM_PRAGMA_UNROLL
                for (int c = 0; c < TILE_VALUE_VECS; c++) a[i][c] = lm_vf_fma(pij, vj[c], a[i][c]);
            }
        }
        LM_PRAGMA_UNROLL
        for (int i = 0; i < NQ; i++)
            LM_PRAGMA_UNROLL
            for (int c = 0; c < TILE_VALUE_VECS; c++)
                lm_vf_store(acc[i] + d + c * LM_VF_WIDTH, a[i][c]);
    }
    for (; d < D; d += LM_VF_WIDTH) { /* the last dims, one vector at a time */
        int count = D - d < LM_VF_WIDTH ? D - d : LM_VF_WIDTH;
        for (int i = 0; i < NQ; i++) {
            lm_vf a = lm_vf_mul(lm_vf_load_part(acc[i] + d, count), lm_vf_set1(corr[i]));
            for (int j = 0; j < KEY_BLOCK; j++)
                a = lm_vf_fma(lm_vf_set1(p[i * ps_query + j * ps_key]),
                              lm_vf_load_part(vrows[j] + d, count), a);
            lm_vf_store_part(acc[i] + d, a, count);
        }
    }
}

/* The state of one query of a tile. */
typedef struct {
    const float *q;
    float *out; /* the accumulator, then the result */
    int ctx;    /* keys it attends to */
    float m, l;
} tile_query;

/* NQ queries x a complete block, each query's softmax by softmax_block. */
static LM_ALWAYS_INLINE void block_n(tile_query *const tq[TILE_QUERIES], const float *const *krows,
                                     const float *const *vrows, int D, float scale, const int NQ) {
    const float *q[TILE_QUERIES];
    float *acc[TILE_QUERIES];
    for (int i = 0; i < NQ; i++) q[i] = tq[i]->q, acc[i] = tq[i]->out;
    float s[TILE_QUERIES][KEY_BLOCK], p[TILE_QUERIES][KEY_BLOCK], corr[TILE_QUERIES];
    for (int kb = 0; kb < KEY_BLOCK; kb += 4) {
        lm_vf dots[TILE_QUERIES][4];
        group_dots(dots, q, krows + kb, D, NQ);
        for (int i = 0; i < NQ; i++)
            for (int j = 0; j < 4; j++) s[i][kb + j] = lm_vf_reduce_add(dots[i][j]) * scale;
    }
    for (int i = 0; i < NQ; i++) corr[i] = softmax_block(&tq[i]->m, &tq[i]->l, s[i], p[i], KEY_BLOCK);
    tile_values(acc, corr, &p[0][0], KEY_BLOCK, 1, vrows, D, NQ);
}

#if defined(LM_SIMD_AVX512)
/* tile_values of four queries, p key-major, as a function of its own: its
 * 16 accumulators and 4 rows of v then get the registers to themselves. */
static __attribute__((noinline)) void values_4(float *const acc[TILE_QUERIES], const float *corr,
                                               const float *p, const float *const *vrows, int D) {
    tile_values(acc, corr, p, 1, TILE_QUERIES, vrows, D, 4);
}

/* Four queries x a complete block with the scores, the softmax and the
 * probabilities in registers.  Step for step the arithmetic of block_n
 * (lm_vf_reduce_add's tree, then the steps of softmax_block per lane):
 * sums vector kb holds s[i][4kb + j] at lane 4i + j, so a 128-bit lane is
 * one query; the block max is exact in any order; l = l·corr + Σ_j p_j is
 * summed in j order, four queries side by side (p transposed key-major). */
static void block_4(tile_query *const tq[TILE_QUERIES], const float *const *krows,
                    const float *const *vrows, int D, float scale) {
    const float *q[TILE_QUERIES] = {tq[0]->q, tq[1]->q, tq[2]->q, tq[3]->q};
    float *acc[TILE_QUERIES] = {tq[0]->out, tq[1]->out, tq[2]->out, tq[3]->out};
    const __m512 vscale = _mm512_set1_ps(scale);
    __m512 sums[4];
    for (int kb = 0; kb < 4; kb++) {
        lm_vf dots[TILE_QUERIES][4];
        group_dots(dots, q, krows + 4 * kb, D, 4);
        __m512 v[16]; /* accumulator 4·key + query: lane 4·query + key holds its sum */
        LM_PRAGMA_UNROLL
        for (int i = 0; i < 4; i++)
            LM_PRAGMA_UNROLL
            for (int j = 0; j < 4; j++) v[4 * j + i] = dots[i][j];
        sums[kb] = _mm512_mul_ps(reduce_16_sums(v), vscale);
    }
    /* the block max of each query, in every lane of its 128-bit lane */
    __m512 mx = _mm512_max_ps(_mm512_max_ps(sums[0], sums[1]), _mm512_max_ps(sums[2], sums[3]));
    mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, _MM_SHUFFLE(2, 3, 0, 1)));
    mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 m_old = _mm512_permutexvar_ps(
        spread, _mm512_castps128_ps512(_mm_setr_ps(tq[0]->m, tq[1]->m, tq[2]->m, tq[3]->m)));
    __m512 m_new = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_old, mx, _CMP_GT_OQ), mx, m_old);
    __m512 corr = _mm512_maskz_mov_ps(
        (__mmask16)~_mm512_cmp_ps_mask(m_old, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ),
        lm_vf_exp(_mm512_sub_ps(m_old, m_new)));
    /* p, key-major (lane 4·key + query), and Σ_j p_j in j order */
    const __m512i transpose =
        _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    float p[KEY_BLOCK * TILE_QUERIES];
    __m128 sum = _mm_setzero_ps();
    for (int kb = 0; kb < 4; kb++) {
        __m512 pt = _mm512_permutexvar_ps(transpose, lm_vf_exp(_mm512_sub_ps(sums[kb], m_new)));
        _mm512_storeu_ps(p + 16 * kb, pt);
        sum = _mm_add_ps(sum, _mm512_castps512_ps128(pt));
        sum = _mm_add_ps(sum, _mm512_extractf32x4_ps(pt, 1));
        sum = _mm_add_ps(sum, _mm512_extractf32x4_ps(pt, 2));
        sum = _mm_add_ps(sum, _mm512_extractf32x4_ps(pt, 3));
    }
    const __m512i firsts = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    __m128 corr4 = _mm512_castps512_ps128(_mm512_permutexvar_ps(firsts, corr));
    __m128 m4 = _mm512_castps512_ps128(_mm512_permutexvar_ps(firsts, m_new));
    __m128 l4 = _mm_add_ps(_mm_mul_ps(_mm_setr_ps(tq[0]->l, tq[1]->l, tq[2]->l, tq[3]->l), corr4), sum);
    float corr_s[4], m_s[4], l_s[4];
    _mm_storeu_ps(corr_s, corr4);
    _mm_storeu_ps(m_s, m4);
    _mm_storeu_ps(l_s, l4);
    for (int i = 0; i < 4; i++) tq[i]->m = m_s[i], tq[i]->l = l_s[i];
    values_4(acc, corr_s, p, vrows, D);
}
#endif

/* Up to four queries x a complete block. */
static void tile_block(tile_query *const tq[TILE_QUERIES], int nq, const float *const *krows,
                       const float *const *vrows, int D, float scale) {
    switch (nq) {
#if defined(LM_SIMD_AVX512)
    case 4: block_4(tq, krows, vrows, D, scale); break;
#else
    case 4: block_n(tq, krows, vrows, D, scale, 4); break;
#endif
    case 3: block_n(tq, krows, vrows, D, scale, 3); break;
    case 2: block_n(tq, krows, vrows, D, scale, 2); break;
    default: block_n(tq, krows, vrows, D, scale, 1); break;
    }
}

/* ---------------------------------------------------------------- a tile */

/* The k and v rows of kv head kvh for context positions [j0, j0 + nkeys):
 * one division for the first, then a walk along the block table. */
static void key_rows(const attention_job *job, const int32_t *table, int kvh, int j0, int nkeys,
                     const float **krows, const float **vrows) {
    const lm_host_kv_layer *kv = job->kv;
    int64_t kv_row = (int64_t)kv->n_kv_heads * kv->head_dim, head = (int64_t)kvh * kv->head_dim;
    int block = j0 / kv->block_size, offset = j0 % kv->block_size;
    for (int j = 0; j < nkeys; j++) {
        int64_t slot = (int64_t)table[block] * kv->block_size + offset;
        krows[j] = kv->k + slot * kv_row + head;
        vrows[j] = kv->v + slot * kv_row + head;
        if (++offset == kv->block_size) block++, offset = 0;
    }
}

/* Starts fetching rows from memory (the next key block while this one is
 * worked on). */
static void prefetch_rows(const float *const *rows, int n, int D) {
#if defined(__GNUC__)
    for (int j = 0; j < n; j++)
        for (int d = 0; d < D; d += 64 / (int)sizeof(float)) __builtin_prefetch(rows[j] + d);
#else
    (void)rows;
    (void)n;
    (void)D;
#endif
}

/* Rows [first, first + n_rows) of one sequence x query heads [h0, h0 + n_heads)
 * of kv head kvh; n_rows * n_heads <= MAX_TASK_QUERIES. */
static void attend_tile(const attention_job *job, int first, int n_rows, int kvh, int h0,
                        int n_heads) {
    const lm_host_attention_batch *b = job->b;
    const int D = b->head_dim;
    const int32_t *table = b->block_tables + (int64_t)b->token_seq[first] * b->table_stride;
    tile_query qs[MAX_TASK_QUERIES];
    int nq = 0, max_ctx = 0;
    for (int r = 0; r < n_rows; r++)
        for (int g = 0; g < n_heads; g++, nq++) {
            int64_t at = ((int64_t)(first + r) * b->n_heads + h0 + g) * D;
            qs[nq] = (tile_query){job->q + at, job->out + at, b->ctx_len[first + r], -INFINITY, 0};
            memset(qs[nq].out, 0, sizeof(float) * (size_t)D);
            if (qs[nq].ctx > max_ctx) max_ctx = qs[nq].ctx;
        }

    const float *krows[KEY_BLOCK], *vrows[KEY_BLOCK];
    const float *knext[KEY_BLOCK], *vnext[KEY_BLOCK];
    for (int j0 = 0; j0 < max_ctx; j0 += KEY_BLOCK) {
        int nkeys = max_ctx - j0 < KEY_BLOCK ? max_ctx - j0 : KEY_BLOCK;
        key_rows(job, table, kvh, j0, nkeys, krows, vrows);
        if (j0 + KEY_BLOCK < max_ctx) {
            int next = max_ctx - j0 - KEY_BLOCK < KEY_BLOCK ? max_ctx - j0 - KEY_BLOCK : KEY_BLOCK;
            key_rows(job, table, kvh, j0 + KEY_BLOCK, next, knext, vnext);
            prefetch_rows(knext, next, D);
            prefetch_rows(vnext, next, D);
        }
        /* queries whose context holds the whole block, four at a time */
        int full[MAX_TASK_QUERIES], n_full = 0;
        for (int i = 0; i < nq; i++)
            if (qs[i].ctx >= j0 + KEY_BLOCK) full[n_full++] = i;
        for (int f0 = 0; f0 < n_full; f0 += TILE_QUERIES) {
            int n = n_full - f0 < TILE_QUERIES ? n_full - f0 : TILE_QUERIES;
            tile_query *tq[TILE_QUERIES];
            for (int i = 0; i < n; i++) tq[i] = &qs[full[f0 + i]];
            tile_block(tq, n, krows, vrows, D, b->scale);
        }
        /* queries whose context ends inside the block, one at a time */
        for (int i = 0; i < nq; i++) {
            tile_query *tq = &qs[i];
            if (tq->ctx <= j0 || tq->ctx >= j0 + KEY_BLOCK) continue;
            int n = tq->ctx - j0;
            float s[KEY_BLOCK] = {0}, p[KEY_BLOCK];
            block_scores(s, tq->q, krows, n, D, b->scale);
            float corr = softmax_block(&tq->m, &tq->l, s, p, n);
            accumulate_values(tq->out, corr, p, vrows, n, D);
        }
    }
    for (int i = 0; i < nq; i++) {
        float inv = qs[i].l > 0 ? 1.0f / qs[i].l : 0.0f; /* empty context: zeros */
        for (int d = 0; d < D; d++) qs[i].out[d] *= inv;
    }
}

static void attention_tile(void *ctx, int first, int n_rows, int kvh, int h0, int n_heads) {
    attend_tile(ctx, first, n_rows, kvh, h0, n_heads);
}

void lm_cpu_attention(lm_pool *pool, float *out, const float *q, const lm_host_kv_layer *kv,
                      const lm_host_attention_batch *batch) {
    attention_job job = {.out = out, .q = q, .kv = kv, .b = batch};
    lm_cpu_attention_tiles(pool, batch, MAX_TASK_QUERIES, attention_tile, &job);
}
