/* Paged-KV attention with bf16 operands (the cpu backend computing in
 * bf16, on CPUs with AVX-512 BF16): q, k, v and the softmax weights p are
 * rounded to bf16 (round to nearest even) and multiplied with vdpbf16ps,
 * two products per float32 lane and instruction, twice the f32 FMA's.
 *
 * The arithmetic of one (token, query head), whatever else is in the call:
 *  - q rounded to bf16, zero-padded to an even length; each key row
 *    likewise.  A score is one float32 accumulator over the pairs of d in
 *    order, acc += q[2i]·k[2i] + q[2i+1]·k[2i+1] (one vdpbf16ps lane), then
 *    ·scale.
 *  - The context in blocks of 16 keys at fixed positions (0, 16, 32, ...),
 *    every block up to the one holding the last key of its context; keys
 *    past the context score −inf.  Online softmax in float32 per block:
 *    m' = max(m, the block's scores), corr = e^(m−m') (0 while m = −inf),
 *    p_j = e^(s_j−m'), l = l·corr + ((p_0 + p_1) + p_2) + ... + p_15.
 *  - acc = acc·corr, then per pair of keys in order, per element,
 *    acc += p_2j·v_2j + p_2j+1·v_2j+1 with p and v rounded to bf16.
 *  - out = acc · (1/l).
 * So its bits do not depend on its batch, the thread count or the tiling:
 * test_backend_ops checks each token alone against its batch.
 *
 * How: a task is (a window of rows, a kv head), as attention_tiles.c deals
 * them out for both kernels.  The
 * rows of one sequence in a window times the query heads of the kv head
 * are a tile of up to 128 queries, in groups of 16: the 16 queries of a
 * group are the 16 float32 lanes, so a score step is one load of 16 query
 * pairs and one vdpbf16ps per key with the key's pair broadcast, the
 * softmax is lane-wise (no horizontal sums), and each key block is
 * converted to bf16 once for the whole tile (a group of fewer than 16
 * fills the rest with empty lanes).  A tile of at most SMALL_TILE queries
 * (decode and verify rows: a token's heads) takes the keys as lanes
 * instead, with each block's key pairs transposed, SUPER blocks at a time
 * so that their chains run side by side; its softmax makes, per query, the
 * same operations as a lane of the groups.
 *
 * Pools: float32 ones are rounded block by block as they are read; bf16
 * ones (what contexts keep under bf16 compute: cpu_kv_dtype) are read as
 * they are, the same bits for half the bytes.
 *
 * Cost (build/bench/attention, docs/PERF.md): prefill attention about 2x
 * the float32 kernel's speed; decode on a bf16 pool 1.1-1.3x its time up
 * to 8k keys (each block's pairs still unpacked for a token's few heads)
 * and faster beyond, where it reads half the bytes. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/bf16.h"
#include "base/simd.h"
#include "ops/cpu/kernels.h"

#define KEY_BLOCK 16
#define GROUP 16              /* queries of one lane group */
#define MAX_TASK_QUERIES 128  /* queries one tile keeps state for */
#define MAX_GROUPS (MAX_TASK_QUERIES / GROUP)
#define MAX_DIM 256           /* head_dim this path takes; larger: float32 */
#define MAX_PAIRS (MAX_DIM / 2)
#define MAX_DVECS (MAX_DIM / 16)
#define SUPER 4                /* key blocks a small tile takes at once */
#define SMALL_TILE 8           /* tiles of at most this many queries: keys as lanes */

#if defined(LM_SIMD_AVX512) && defined(__GNUC__) && defined(__x86_64__)
#define HAVE_BF16_ATTENTION 1
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define BF16_INLINE inline __attribute__((always_inline)) BF16_TARGET
#define BF16_NOINLINE __attribute__((noinline)) BF16_TARGET
#endif

bool lm_cpu_attention_bf16_takes(int head_dim) {
#ifdef HAVE_BF16_ATTENTION
    return head_dim > 0 && head_dim <= MAX_DIM;
#else
    (void)head_dim;
    return false;
#endif
}

#ifdef HAVE_BF16_ATTENTION

typedef struct {
    float *out;
    const float *q;
    const lm_host_kv_layer *kv;
    const lm_host_attention_batch *b;
} bf16_job;

/* One tile's bf16 operands and softmax state, on the worker's stack. */
typedef struct {
    uint32_t q2[MAX_GROUPS][MAX_PAIRS][GROUP]; /* query pairs, lane = query */
    uint32_t k2[KEY_BLOCK][MAX_PAIRS + 16];    /* the block's key pairs, row per key */
    /* small tiles: SUPER blocks at once, keys transposed (lane = key) */
    __m512i kt[SUPER][MAX_PAIRS];
    __m512 sc[SUPER][SMALL_TILE];              /* their scores, lane = key */
    __m512i v2[SUPER][KEY_BLOCK / 2][MAX_DVECS]; /* (v_2j[d], v_2j+1[d]) pairs, 16 dims a vector */
    uint32_t p2[KEY_BLOCK / 2][GROUP];         /* (p_2j, p_2j+1) per lane */
    float corr[GROUP];
    float m[MAX_GROUPS][GROUP], l[MAX_GROUPS][GROUP];
    int32_t ctx[MAX_GROUPS][GROUP];
    float *out[MAX_TASK_QUERIES];
} tile_state;

/* 32 floats (masked past `count`) to 32 bf16 = 16 consecutive pairs. */
static BF16_INLINE __m512i pairs_of(const float *src, int count) {
    __mmask16 lo = (__mmask16)(count >= 16 ? 0xffffu : (1u << (count > 0 ? count : 0)) - 1u);
    __mmask16 hi = (__mmask16)(count >= 32 ? 0xffffu : count > 16 ? (1u << (count - 16)) - 1u : 0u);
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + 16),
                                        _mm512_maskz_loadu_ps(lo, src));
}

/* 16 bf16 a_i in the low half and 16 b_i in the high half as 16 pairs
 * (a_i, b_i). */
static BF16_INLINE __m512i pairs_of_halves(__m512i halves) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, halves);
}

/* a and b (16 floats each) as 16 pairs (a_i, b_i). */
static BF16_INLINE __m512i interleave_pairs(__m512 a, __m512 b) {
    return pairs_of_halves((__m512i)_mm512_cvtne2ps_pbh(b, a));
}

/* The k and v rows of kv head kvh for context positions [j0, j0 + nkeys):
 * float32 rows, or bf16 ones (uint16_t) in a bf16 pool. */
static void key_rows(const bf16_job *job, const int32_t *table, int kvh, int j0, int nkeys,
                     const void **krows, const void **vrows) {
    const lm_host_kv_layer *kv = job->kv;
    int64_t kv_row = (int64_t)kv->n_kv_heads * kv->head_dim, head = (int64_t)kvh * kv->head_dim;
    int block = j0 / kv->block_size, offset = j0 % kv->block_size;
    for (int j = 0; j < nkeys; j++) {
        int64_t at = ((int64_t)table[block] * kv->block_size + offset) * kv_row + head;
        krows[j] = kv->k16 ? (const void *)(kv->k16 + at) : (const void *)(kv->k + at);
        vrows[j] = kv->v16 ? (const void *)(kv->v16 + at) : (const void *)(kv->v + at);
        if (++offset == kv->block_size) block++, offset = 0;
    }
}

/* 32 bf16 (masked past `count`) of a bf16 row = 16 consecutive pairs, as
 * pairs_of makes them from float32. */
static BF16_INLINE __m512i pairs_of_bf16(const uint16_t *src, int count) {
    __mmask32 m = (__mmask32)(count >= 32 ? 0xffffffffu : (1u << (count > 0 ? count : 0)) - 1u);
    return _mm512_maskz_loadu_epi16(m, src);
}

/* 16 bf16 of each of two rows (masked past `count`) as 16 pairs (a_i, b_i),
 * as interleave_pairs makes them from float32. */
static BF16_INLINE __m512i interleave_pairs_bf16(const uint16_t *a, const uint16_t *b, int count) {
    __mmask16 m = (__mmask16)(count >= 16 ? 0xffffu : (1u << count) - 1u);
    __m256i lo = a ? _mm256_maskz_loadu_epi16(m, a) : _mm256_setzero_si256();
    __m256i hi = b ? _mm256_maskz_loadu_epi16(m, b) : _mm256_setzero_si256();
    return pairs_of_halves(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
}

/* out[c] = column c of the 16 x 16 dwords a[0..15]: unpacks within 128-bit
 * lanes (rows 4R..4R+3 of column 4L+c in lane L), then two rounds of lane
 * shuffles. */
static BF16_INLINE void transpose_16x16(__m512i out[16], const __m512i a[16]) {
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        t[2 * r] = _mm512_unpacklo_epi32(a[2 * r], a[2 * r + 1]);
        t[2 * r + 1] = _mm512_unpackhi_epi32(a[2 * r], a[2 * r + 1]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        u[4 * r + 0] = _mm512_unpacklo_epi64(t[4 * r], t[4 * r + 2]);
        u[4 * r + 1] = _mm512_unpackhi_epi64(t[4 * r], t[4 * r + 2]);
        u[4 * r + 2] = _mm512_unpacklo_epi64(t[4 * r + 1], t[4 * r + 3]);
        u[4 * r + 3] = _mm512_unpackhi_epi64(t[4 * r + 1], t[4 * r + 3]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512i p0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
        __m512i p1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
        __m512i q0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
        __m512i q1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
        out[0 + c] = _mm512_shuffle_i32x4(p0, q0, 0x88);
        out[4 + c] = _mm512_shuffle_i32x4(p0, q0, 0xDD);
        out[8 + c] = _mm512_shuffle_i32x4(p1, q1, 0x88);
        out[12 + c] = _mm512_shuffle_i32x4(p1, q1, 0xDD);
    }
}

/* The block's keys and values to bf16 pairs; keys past nkeys are zeros.
 * Keys go to k2 (a row per key) or, `transposed`, to kt (a vector per pair
 * of dims, lane = key). */
static BF16_NOINLINE void convert_block(tile_state *ts, int slot, const void *const *krows,
                                        const void *const *vrows, int nkeys, int D,
                                        bool transposed, bool bf16_pool) {
    int pairs = (D + 1) / 2, dvecs = (D + 15) / 16;
    /* each key row read whole, in order (as the float32 kernel reads it) */
    for (int j = 0; j < KEY_BLOCK; j++)
        for (int i = 0; i < pairs; i += 16)
            _mm512_storeu_si512(
                (void *)(ts->k2[j] + i),
                j >= nkeys  ? _mm512_setzero_si512()
                : bf16_pool ? pairs_of_bf16((const uint16_t *)krows[j] + 2 * i, D - 2 * i)
                            : pairs_of((const float *)krows[j] + 2 * i, D - 2 * i));
    if (transposed)
        for (int i = 0; i < pairs; i += 16) {
            __m512i rows[KEY_BLOCK], cols[16];
            for (int j = 0; j < KEY_BLOCK; j++) rows[j] = _mm512_loadu_si512((const void *)(ts->k2[j] + i));
            transpose_16x16(cols, rows);
            int n = pairs - i < 16 ? pairs - i : 16;
            for (int c = 0; c < n; c++) ts->kt[slot][i + c] = cols[c];
        }
    for (int jp = 0; jp < KEY_BLOCK / 2; jp++) {
        int j = 2 * jp;
        for (int c = 0; c < dvecs; c++) {
            int count = D - 16 * c < 16 ? D - 16 * c : 16;
            if (bf16_pool) {
                const uint16_t *a = j < nkeys ? (const uint16_t *)vrows[j] + 16 * c : NULL;
                const uint16_t *b = j + 1 < nkeys ? (const uint16_t *)vrows[j + 1] + 16 * c : NULL;
                ts->v2[slot][jp][c] = interleave_pairs_bf16(a, b, count);
                continue;
            }
            __mmask16 m = (__mmask16)(count == 16 ? 0xffffu : (1u << count) - 1u);
            __m512 a = j < nkeys ? _mm512_maskz_loadu_ps(m, (const float *)vrows[j] + 16 * c)
                                 : _mm512_setzero_ps();
            __m512 b = j + 1 < nkeys ? _mm512_maskz_loadu_ps(m, (const float *)vrows[j + 1] + 16 * c)
                                     : _mm512_setzero_ps();
            ts->v2[slot][jp][c] = interleave_pairs(a, b);
        }
    }
}

/* Scores and softmax of lane group g over the block at j0: leaves the
 * group's (p_2j, p_2j+1) pairs in p2 and its factors in corr; updates m, l.
 * Lanes whose context ends at or before j0 get corr 1 and p 0. */
static BF16_NOINLINE void group_softmax(tile_state *ts, int g, int j0, int pairs, float scale) {
    __m512 acc[KEY_BLOCK];
#pragma GCC unroll 16
    for (int j = 0; j < KEY_BLOCK; j++) acc[j] = _mm512_setzero_ps();
    for (int i = 0; i < pairs; i++) {
        __m512bh qv = (__m512bh)_mm512_loadu_si512((const void *)ts->q2[g][i]);
#pragma GCC unroll 16
        for (int j = 0; j < KEY_BLOCK; j++)
            acc[j] = _mm512_dpbf16_ps(acc[j], qv, (__m512bh)_mm512_set1_epi32((int)ts->k2[j][i]));
    }
    const __m512i ctx = _mm512_loadu_si512((const void *)ts->ctx[g]);
    const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    __mmask16 valid[KEY_BLOCK];
    __m512 mx = ninf;
#pragma GCC unroll 16
    for (int j = 0; j < KEY_BLOCK; j++) {
        valid[j] = _mm512_cmpgt_epi32_mask(ctx, _mm512_set1_epi32(j0 + j));
        acc[j] = _mm512_mask_mul_ps(ninf, valid[j], acc[j], vscale);
        mx = _mm512_max_ps(mx, acc[j]);
    }
    const __mmask16 active = valid[0];
    const __m512 m_old = _mm512_loadu_ps(ts->m[g]);
    const __m512 m_new = _mm512_mask_max_ps(m_old, active, m_old, mx);
    /* e^(m − m') where m was finite; 0 where it was −inf; 1 where inactive */
    __mmask16 had = _mm512_mask_cmp_ps_mask(active, m_old, ninf, _CMP_NEQ_OQ);
    __m512 corr = _mm512_mask_blend_ps(active, _mm512_set1_ps(1.0f), _mm512_setzero_ps());
    corr = _mm512_mask_mov_ps(corr, had, lm_vf_exp(_mm512_sub_ps(m_old, m_new)));
    __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int j = 0; j < KEY_BLOCK; j++) {
        acc[j] = _mm512_maskz_mov_ps(valid[j], lm_vf_exp(_mm512_sub_ps(acc[j], m_new)));
        sum = j == 0 ? acc[0] : _mm512_add_ps(sum, acc[j]);
    }
    const __m512 l_old = _mm512_loadu_ps(ts->l[g]);
    _mm512_storeu_ps(ts->l[g], _mm512_mask_add_ps(l_old, active, _mm512_mul_ps(l_old, corr), sum));
    _mm512_storeu_ps(ts->m[g], m_new);
    _mm512_storeu_ps(ts->corr, corr);
#pragma GCC unroll 8
    for (int jp = 0; jp < KEY_BLOCK / 2; jp++)
        _mm512_storeu_si512((void *)ts->p2[jp], interleave_pairs(acc[2 * jp], acc[2 * jp + 1]));
}

/* The scores of a tile of at most SMALL_TILE queries over nb blocks, with
 * the keys as lanes: one chain of pairs per (block, query), the chain of a
 * lane of group_softmax (the two bf16 products of a pair are exact in
 * float32, so which operand is broadcast does not matter). */
static BF16_NOINLINE void small_scores(tile_state *ts, int nq, int nb, int pairs) {
    /* chains (block, query), 8 at a time: independent chains hide the
     * latency of each one's pairs in order */
    for (int c0 = 0; c0 < nb * nq; c0 += 8) {
        int n = nb * nq - c0 < 8 ? nb * nq - c0 : 8;
        const __m512i *kt[8];
        const uint32_t *qp[8];
        __m512 acc[8];
        for (int c = 0; c < 8; c++) {
            int chain = c0 + (c < n ? c : n - 1); /* spare chains redo the last */
            kt[c] = ts->kt[chain / nq];
            qp[c] = &ts->q2[0][0][chain % nq];
            acc[c] = _mm512_setzero_ps();
        }
        for (int i = 0; i < pairs; i++)
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                acc[c] = _mm512_dpbf16_ps(acc[c], (__m512bh)_mm512_load_si512((const void *)&kt[c][i]),
                                          (__m512bh)_mm512_set1_epi32((int)qp[c][i * GROUP]));
        for (int c = 0; c < n; c++) ts->sc[(c0 + c) / nq][(c0 + c) % nq] = acc[c];
    }
}

/* The softmax of block `slot` (at j0) of a small tile from its scores:
 * per query, group_softmax's operations for its lane, on vectors whose
 * lanes all hold that query's values (the same instructions, so the same
 * bits); the block max is exact in any order. */
static BF16_NOINLINE void small_softmax(tile_state *ts, int slot, int nq, int j0, float scale) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    for (int q = 0; q < nq; q++) {
        int ctx = ts->ctx[0][q];
        if (ctx <= j0) { /* nothing of this block: group_values skips it */
            ts->corr[q] = 1.0f;
            continue;
        }
        __mmask16 valid = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(ctx - j0), lane);
        __m512 sc = _mm512_mask_mul_ps(ninf, valid, ts->sc[slot][q], vscale);
        const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(sc));
        const __m512 m_old = _mm512_set1_ps(ts->m[0][q]);
        const __m512 m_new = _mm512_max_ps(m_old, mx);
        __m512 corr = ts->m[0][q] == -INFINITY ? _mm512_setzero_ps()
                                                : lm_vf_exp(_mm512_sub_ps(m_old, m_new));
        __m512 p = _mm512_maskz_mov_ps(valid, lm_vf_exp(_mm512_sub_ps(sc, m_new)));
        float pj[KEY_BLOCK];
        _mm512_storeu_ps(pj, p);
        __m512 sum = _mm512_set1_ps(pj[0]);
        for (int j = 1; j < KEY_BLOCK; j++) sum = _mm512_add_ps(sum, _mm512_set1_ps(pj[j]));
        const __m512 l_old = _mm512_set1_ps(ts->l[0][q]);
        ts->l[0][q] = _mm512_cvtss_f32(_mm512_add_ps(_mm512_mul_ps(l_old, corr), sum));
        ts->m[0][q] = _mm512_cvtss_f32(m_new);
        ts->corr[q] = _mm512_cvtss_f32(corr);
        uint32_t p2[16];
        _mm512_storeu_si512((void *)p2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_setzero_ps(), p));
        for (int jp = 0; jp < KEY_BLOCK / 2; jp++) ts->p2[jp][q] = p2[jp];
    }
}

/* acc_i = acc_i·corr_i + Σ_pairs p·v for NQ lanes (queries) of the group,
 * 64 dims at a time (16 accumulators), each element one chain in key
 * order.  NQ is a literal at each call. */
static BF16_INLINE void values_n(tile_state *ts, int slot, const int *lanes, float *const *outs,
                                 int D, const int NQ) {
    int dvecs = (D + 15) / 16;
    for (int c0 = 0; c0 < dvecs; c0 += 4) {
        int nc = dvecs - c0 < 4 ? dvecs - c0 : 4;
        __m512 a[4][4];
        __mmask16 m[4];
        for (int c = 0; c < 4; c++) {
            int count = D - 16 * (c0 + c);
            m[c] = c < nc ? (__mmask16)(count >= 16 ? 0xffffu : (1u << count) - 1u) : 0;
        }
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) {
            __m512 vc = _mm512_set1_ps(ts->corr[lanes[i]]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                a[i][c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[c], outs[i] + 16 * (c0 + c)), vc);
        }
        if (nc == 4) {
            for (int jp = 0; jp < KEY_BLOCK / 2; jp++) {
                __m512i v[4];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    v[c] = _mm512_load_si512((const void *)&ts->v2[slot][jp][c0 + c]);
                    __asm__("" : "+v"(v[c])); /* one load each, not one per FMA */
                }
#pragma GCC unroll 4
                for (int i = 0; i < NQ; i++) {
                    __m512bh pb = (__m512bh)_mm512_set1_epi32((int)ts->p2[jp][lanes[i]]);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; c++) a[i][c] = _mm512_dpbf16_ps(a[i][c], (__m512bh)v[c], pb);
                }
            }
        } else {
            for (int jp = 0; jp < KEY_BLOCK / 2; jp++)
                for (int i = 0; i < NQ; i++) {
                    __m512bh pb = (__m512bh)_mm512_set1_epi32((int)ts->p2[jp][lanes[i]]);
                    for (int c = 0; c < nc; c++)
                        a[i][c] = _mm512_dpbf16_ps(a[i][c], (__m512bh)ts->v2[slot][jp][c0 + c], pb);
                }
        }
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++)
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(outs[i] + 16 * (c0 + c), m[c], a[i][c]);
    }
}

static BF16_NOINLINE void group_values(tile_state *ts, int slot, int g, int nq_group, int j0,
                                       int D) {
    int lanes[GROUP], n = 0;
    for (int i = 0; i < nq_group; i++)
        if (ts->ctx[g][i] > j0) lanes[n++] = i;
    for (int i0 = 0; i0 < n; i0 += 4) {
        float *outs[4];
        int k = n - i0 < 4 ? n - i0 : 4;
        for (int i = 0; i < k; i++) outs[i] = ts->out[g * GROUP + lanes[i0 + i]];
        switch (k) {
        case 4: values_n(ts, slot, lanes + i0, outs, D, 4); break;
        case 3: values_n(ts, slot, lanes + i0, outs, D, 3); break;
        case 2: values_n(ts, slot, lanes + i0, outs, D, 2); break;
        default: values_n(ts, slot, lanes + i0, outs, D, 1); break;
        }
    }
}

/* Rows [first, first + n_rows) of one sequence x query heads [h0, h0 + n_heads)
 * of kv head kvh; n_rows * n_heads <= MAX_TASK_QUERIES. */
static BF16_TARGET void attend_tile(const bf16_job *job, tile_state *ts, int first, int n_rows,
                                    int kvh, int h0, int n_heads) {
    const lm_host_attention_batch *b = job->b;
    const int D = b->head_dim, pairs = (D + 1) / 2;
    const int32_t *table = b->block_tables + (int64_t)b->token_seq[first] * b->table_stride;
    int nq = n_rows * n_heads, n_groups = (nq + GROUP - 1) / GROUP, max_ctx = 0;
    for (int g = 0; g < n_groups; g++)
        for (int i = 0; i < GROUP; i++) {
            ts->m[g][i] = -INFINITY;
            ts->l[g][i] = 0;
            ts->ctx[g][i] = 0;
        }
    for (int g = 0; g < n_groups; g++) memset(ts->q2[g], 0, sizeof(uint32_t) * GROUP * (size_t)pairs);
    for (int r = 0, qi = 0; r < n_rows; r++)
        for (int h = 0; h < n_heads; h++, qi++) {
            int64_t at = ((int64_t)(first + r) * b->n_heads + h0 + h) * D;
            int g = qi / GROUP, lane = qi % GROUP;
            ts->ctx[g][lane] = b->ctx_len[first + r];
            ts->out[qi] = job->out + at;
            memset(ts->out[qi], 0, sizeof(float) * (size_t)D);
            if (b->ctx_len[first + r] > max_ctx) max_ctx = b->ctx_len[first + r];
            uint32_t qrow[MAX_PAIRS + 16];
            for (int i = 0; i < pairs; i += 16)
                _mm512_storeu_si512((void *)(qrow + i), pairs_of(job->q + at + 2 * i, D - 2 * i));
            for (int i = 0; i < pairs; i++) ts->q2[g][i][lane] = qrow[i];
        }

    const void *krows[KEY_BLOCK], *vrows[KEY_BLOCK];
    const bool bf16_pool = job->kv->k16 != NULL;
    const int elem = bf16_pool ? 2 : 4; /* bytes */
    const int small = nq <= SMALL_TILE, step = small ? SUPER : 1;
    for (int j0 = 0; j0 < max_ctx; j0 += step * KEY_BLOCK) {
        int nb = 0;
        for (; nb < step && j0 + nb * KEY_BLOCK < max_ctx; nb++) {
            int jb = j0 + nb * KEY_BLOCK;
            int ahead = jb + step * KEY_BLOCK; /* on its way while these are worked */
            if (ahead < max_ctx) {
                int next = max_ctx - ahead < KEY_BLOCK ? max_ctx - ahead : KEY_BLOCK;
                key_rows(job, table, kvh, ahead, next, krows, vrows);
                for (int j = 0; j < next; j++)
                    for (int d = 0; d < D * elem; d += 64) {
                        __builtin_prefetch((const char *)krows[j] + d);
                        __builtin_prefetch((const char *)vrows[j] + d);
                    }
            }
            int nkeys = max_ctx - jb < KEY_BLOCK ? max_ctx - jb : KEY_BLOCK;
            key_rows(job, table, kvh, jb, nkeys, krows, vrows);
            convert_block(ts, nb, krows, vrows, nkeys, D, small, bf16_pool);
        }
        if (small) {
            small_scores(ts, nq, nb, pairs);
            for (int sb = 0; sb < nb; sb++) {
                small_softmax(ts, sb, nq, j0 + sb * KEY_BLOCK, b->scale);
                group_values(ts, sb, 0, nq, j0 + sb * KEY_BLOCK, D);
            }
            continue;
        }
        for (int g = 0; g < n_groups; g++) {
            int in_group = nq - g * GROUP < GROUP ? nq - g * GROUP : GROUP;
            group_softmax(ts, g, j0, pairs, b->scale);
            group_values(ts, 0, g, in_group, j0, D);
        }
    }
    for (int qi = 0; qi < nq; qi++) {
        float l = ts->l[qi / GROUP][qi % GROUP];
        float inv = l > 0 ? 1.0f / l : 0.0f; /* empty context: zeros */
        for (int d = 0; d < D; d++) ts->out[qi][d] *= inv;
    }
}

static BF16_TARGET void bf16_tile(void *ctx, int first, int n_rows, int kvh, int h0, int n_heads) {
    tile_state ts; /* on the worker's stack, not initialized: attend_tile sets what it reads */
    attend_tile(ctx, &ts, first, n_rows, kvh, h0, n_heads);
}

void lm_cpu_attention_bf16(lm_pool *pool, float *out, const float *q, const lm_host_kv_layer *kv,
                           const lm_host_attention_batch *batch) {
    bf16_job job = {.out = out, .q = q, .kv = kv, .b = batch};
    lm_cpu_attention_tiles(pool, batch, MAX_TASK_QUERIES, bf16_tile, &job);
}

/* k and v rows to the bf16 pool, rounded by the instruction that rounds a
 * float32 pool's keys as attention reads them (so both pools give the same
 * bits). */
void BF16_TARGET lm_cpu_kv_write_bf16(const lm_host_kv_layer *kv, const float *k, const float *v,
                                      int n, const int32_t *slots) {
    int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;
    for (int t = 0; t < n; t++) {
        int64_t at = (int64_t)slots[t] * row;
        for (int64_t i = 0; i < row; i += 32) {
            int count = row - i < 32 ? (int)(row - i) : 32;
            __mmask32 m = (__mmask32)(count == 32 ? 0xffffffffu : (1u << count) - 1u);
            _mm512_mask_storeu_epi16(kv->k16 + at + i, m, pairs_of(k + (int64_t)t * row + i, count));
            _mm512_mask_storeu_epi16(kv->v16 + at + i, m, pairs_of(v + (int64_t)t * row + i, count));
        }
    }
}

#else

void lm_cpu_kv_write_bf16(const lm_host_kv_layer *kv, const float *k, const float *v, int n,
                          const int32_t *slots) {
    int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;
    for (int t = 0; t < n; t++)
        for (int64_t i = 0; i < row; i++) {
            kv->k16[(int64_t)slots[t] * row + i] = lm_f32_to_bf16(k[(int64_t)t * row + i]);
            kv->v16[(int64_t)slots[t] * row + i] = lm_f32_to_bf16(v[(int64_t)t * row + i]);
        }
}

void lm_cpu_attention_bf16(lm_pool *pool, float *out, const float *q, const lm_host_kv_layer *kv,
                           const lm_host_attention_batch *batch) {
    lm_cpu_attention(pool, out, q, kv, batch);
}

#endif
