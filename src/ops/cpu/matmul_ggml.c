/* ggml block weights × float32 activations (matmul_ggml.h).
 *
 * The weights stay packed: each group of a block (32 weights sharing a
 * scale; 16 in Q6_K) is unpacked into float32 registers as its integers q
 * (exact: nibbles masked and shifted, 5- and 6-bit values assembled, then
 * widened), multiplied with a token's activations into one vector (a
 * product, then fused multiply-adds, in order), and that vector is added to
 * the token's accumulator with the group's scale in one fused multiply-add
 * (d·Σq·x: d·q is exact in float32 for every format, so this is Σ w·x up to
 * float32 rounding).  The affine formats (Q4_1, Q5_1: w = d·q + m; Q4_K,
 * Q5_K: w = d·sc·q − dmin·m) add their offsets as Σ_g m_g·Σx_g: the sums of
 * x over each group of 32 do not depend on the row, so they are made once
 * per token tile and column chunk, and a row adds one short dot product of
 * its offsets with them instead of an add per weight.
 *
 * Batch invariance: a row is taken in fixed chunks of CHUNK_COLS, each
 * (row, token) has two accumulators (even and odd groups) reduced in
 * lm_vf_reduce_add's order, the offsets' dot product runs in a fixed order
 * and the chunks add into y in order; none of it depends on the token tile,
 * the task or the thread, so a token's bits do not depend on its batchmates
 * (test_backend_ops checks it bit for bit). */
#include "ops/cpu/matmul_ggml.h"

#include <stddef.h>
#include <string.h>

#include "base/bf16.h"
#include "base/ggml_quant.h"
#include "base/simd.h"

/* Columns per chunk (a multiple of every block); the per-group sums of a
 * token tile and a row's offsets for one chunk live on the stack. */
#define CHUNK_COLS 8192
#define CHUNK_GROUPS (CHUNK_COLS / 32)
/* Tokens per pass over a row: two accumulators per token stay in registers
 * (32 zmm on AVX-512, 16 ymm on AVX2), as in matmul_q8.c. */
#define TILE_T (LM_VF_WIDTH == 16 ? 8 : 4)
#define VECS_32 (32 / LM_VF_WIDTH)
_Static_assert(16 % LM_VF_WIDTH == 0, "a group (16 or 32 weights) is whole vectors");

typedef struct {
    float *y;
    const float *x;
    const uint8_t *w;
    int64_t rows, cols;
    size_t row_bytes;
} ggml_job;

/* ---- unpacking ---- */

static LM_ALWAYS_INLINE float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
#if defined(__F16C__)
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
#else
    return lm_f16_to_f32(h);
#endif
}

/* LM_VF_WIDTH weights from the nibbles of LM_VF_WIDTH bytes at p (the low
 * ones, or the high ones when `high`), minus `offset`, as floats. */
static LM_ALWAYS_INLINE lm_vf load_nibbles(const uint8_t *p, bool high, int offset) {
#if defined(LM_SIMD_AVX512)
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    if (high) b = _mm_srli_epi16(b, 4);
    b = _mm_and_si128(b, _mm_set1_epi8(0x0F));
    if (offset) b = _mm_sub_epi8(b, _mm_set1_epi8((char)offset));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
#elif defined(LM_SIMD_AVX2)
    __m128i b = _mm_loadl_epi64((const __m128i *)p);
    if (high) b = _mm_srli_epi16(b, 4);
    b = _mm_and_si128(b, _mm_set1_epi8(0x0F));
    if (offset) b = _mm_sub_epi8(b, _mm_set1_epi8((char)offset));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
#else
    int8_t q[LM_VF_WIDTH];
    for (int i = 0; i < LM_VF_WIDTH; i++) q[i] = (int8_t)(((high ? p[i] >> 4 : p[i]) & 0x0F) - offset);
    return lm_vf_load_i8(q);
#endif
}

/* A 32-weight block of Q4_0/Q4_1 layout: element j < 16 the low nibble of
 * qs[j], element 16 + j the high one. */
__attribute__((unused)) static LM_ALWAYS_INLINE void nibbles_split(const uint8_t *qs, int offset, lm_vf *q) {
    LM_PRAGMA_UNROLL
    for (int v = 0; v < VECS_32; v++) {
        int e = v * LM_VF_WIDTH;
        q[v] = load_nibbles(qs + (e & 15), e >= 16, offset);
    }
}

/* Q5_0/Q5_1: the low nibbles as in Q4_0 with the fifth bits from qh. */
static LM_ALWAYS_INLINE void q5_bytes(const uint8_t *qh_at, const uint8_t *qs, int offset, int8_t *q) {
    uint32_t qh;
    memcpy(&qh, qh_at, sizeof qh);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - offset);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset);
    }
}

/* Q5_K's 256 values 0..31 in element order. */
static LM_ALWAYS_INLINE void q5k_bytes(const uint8_t *b, int8_t *q) {
    const uint8_t *qh = b + 16, *ql = b + 48;
    for (int g = 0; g < 8; g += 2, ql += 32)
        for (int l = 0; l < 32; l++) {
            q[32 * g + l] = (int8_t)((ql[l] & 0xF) | (((qh[l] >> g) & 1) << 4));
            q[32 * g + 32 + l] = (int8_t)((ql[l] >> 4) | (((qh[l] >> (g + 1)) & 1) << 4));
        }
}

/* Q6_K's 256 values -32..31 in element order (ggml_quant.c says the layout). */
static LM_ALWAYS_INLINE void q6k_bytes(const uint8_t *b, int8_t *q) {
    const uint8_t *ql = b, *qh = b + 128;
    for (int h = 0; h < 2; h++, q += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; l++) {
            q[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            q[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
}

/* ---- one group into the accumulators ---- */

/* acc[t] += scale · Σ q·x over the group's `vecs` vectors at x column k. */
static LM_ALWAYS_INLINE void group_into(lm_vf *acc, const lm_vf *q, int vecs, float scale,
                                        const float *const *xt, int64_t k, int T) {
    lm_vf s = lm_vf_set1(scale);
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        lm_vf sum = lm_vf_mul(q[0], lm_vf_load(xt[t] + k));
        LM_PRAGMA_UNROLL
        for (int v = 1; v < vecs; v++) sum = lm_vf_fma(q[v], lm_vf_load(xt[t] + k + v * LM_VF_WIDTH), sum);
        acc[t] = lm_vf_fma(s, sum, acc[t]);
    }
}

#if defined(LM_SIMD_AVX512)
/* AVX-512: the 4-bit formats by table.  A group's 16 possible weights are
 * made once as floats, lane i = what ggml computes for q = i (Q4_0
 * d·(i−8), Q4_1 d·i + m, Q4_K d·sc·i − dmin·m: one rounding after an exact
 * product, so a fused multiply-add or a multiply gives ggml's bits), and
 * vpermps picks each weight by its nibble (it reads the low 4 bits of each
 * index, so a byte widened to 32 bits indexes by its low nibble and the
 * byte shifted right by 4 by its high one).  The products are then Σ w·x
 * with the exact dequantized weights, one fused multiply-add per 16
 * weights and token, and no offsets to add afterwards. */
#define NIBBLE_TABLES 1

static LM_ALWAYS_INLINE __m512 iota16(void) {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* acc[t] += w[0]·x[k..] + w[1]·x[k+16..] for every token. */
static LM_ALWAYS_INLINE void weights_into(lm_vf *acc, const lm_vf *w, const float *const *xt, int64_t k,
                                          int T) {
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        acc[t] = lm_vf_fma(w[0], lm_vf_load(xt[t] + k), acc[t]);
        acc[t] = lm_vf_fma(w[1], lm_vf_load(xt[t] + k + 16), acc[t]);
    }
}

/* A Q4_0/Q4_1 block's 32 weights from its 16 bytes of nibbles and its table. */
static LM_ALWAYS_INLINE void table_split(const uint8_t *qs, __m512 table, lm_vf *w) {
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    w[0] = _mm512_permutexvar_ps(v, table);
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
}
#else
#define NIBBLE_TABLES 0
#endif

/* Elements and bytes of a block of dt, constants once dt is (every
 * caller is inlined with a constant dtype). */
static LM_ALWAYS_INLINE int64_t block_elems(lm_dtype dt) {
    return dt == LM_DTYPE_GGML_Q4_K || dt == LM_DTYPE_GGML_Q5_K || dt == LM_DTYPE_GGML_Q6_K ? 256 : 32;
}
static LM_ALWAYS_INLINE size_t block_bytes(lm_dtype dt) {
    switch (dt) {
    case LM_DTYPE_GGML_Q4_0: return 18;
    case LM_DTYPE_GGML_Q4_1: return 20;
    case LM_DTYPE_GGML_Q5_0: return 22;
    case LM_DTYPE_GGML_Q5_1: return 24;
    case LM_DTYPE_GGML_Q8_0: return 34;
    case LM_DTYPE_GGML_Q4_K: return 144;
    case LM_DTYPE_GGML_Q5_K: return 176;
    default: return 210; /* Q6_K */
    }
}

/* One block of dt at column k: a 32-weight block into acc; a K-quant's
 * groups alternately into acc and odd (fixed by the group's index, so
 * both stay in registers).  The affine formats' per-32 offsets go to
 * bias[0 .. block/32). */
static LM_ALWAYS_INLINE void block_into(lm_vf *acc, lm_vf *odd, lm_dtype dt, const uint8_t *b,
                                        const float *const *xt, int64_t k, int T, float *bias) {
    lm_vf q[VECS_32];
    switch (dt) {
    case LM_DTYPE_GGML_Q4_0:
#if NIBBLE_TABLES
        table_split(b + 2, _mm512_mul_ps(_mm512_set1_ps(f16_at(b)), _mm512_sub_ps(iota16(), _mm512_set1_ps(8))), q);
        weights_into(acc, q, xt, k, T);
#else
        nibbles_split(b + 2, 8, q);
        group_into(acc, q, VECS_32, f16_at(b), xt, k, T);
#endif
        return;
    case LM_DTYPE_GGML_Q4_1:
#if NIBBLE_TABLES
        table_split(b + 4, _mm512_fmadd_ps(_mm512_set1_ps(f16_at(b)), iota16(), _mm512_set1_ps(f16_at(b + 2))), q);
        weights_into(acc, q, xt, k, T);
#else
        nibbles_split(b + 4, 0, q);
        bias[0] = f16_at(b + 2);
        group_into(acc, q, VECS_32, f16_at(b), xt, k, T);
#endif
        return;
    case LM_DTYPE_GGML_Q5_0:
    case LM_DTYPE_GGML_Q5_1: {
        bool affine = dt == LM_DTYPE_GGML_Q5_1;
        int8_t bytes[32];
        q5_bytes(b + (affine ? 4 : 2), b + (affine ? 8 : 6), affine ? 0 : 16, bytes);
        LM_PRAGMA_UNROLL
        for (int v = 0; v < VECS_32; v++) q[v] = lm_vf_load_i8(bytes + v * LM_VF_WIDTH);
        if (affine) bias[0] = f16_at(b + 2);
        group_into(acc, q, VECS_32, f16_at(b), xt, k, T);
        return;
    }
    case LM_DTYPE_GGML_Q8_0:
        LM_PRAGMA_UNROLL
        for (int v = 0; v < VECS_32; v++) q[v] = lm_vf_load_i8((const int8_t *)b + 2 + v * LM_VF_WIDTH);
        group_into(acc, q, VECS_32, f16_at(b), xt, k, T);
        return;
#if NIBBLE_TABLES
    case LM_DTYPE_GGML_Q4_K: {
        /* the 8 groups' d·sc and dmin·m, then each pair of groups (32 bytes:
         * the first's low nibbles, the second's high ones) by its tables */
        float d = f16_at(b), dmin = f16_at(b + 2);
        float scale[8], offset[8];
        LM_PRAGMA_UNROLL
        for (int g = 0; g < 8; g++) {
            uint8_t sc, m;
            lm_ggml_k4_scale_min(b + 4, g, &sc, &m);
            scale[g] = d * (float)sc;
            offset[g] = -(dmin * (float)m);
        }
        LM_PRAGMA_UNROLL
        for (int g = 0; g < 8; g += 2) {
            const uint8_t *qs = b + 16 + 16 * g;
            __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
            __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 16)));
            __m512 lo = _mm512_fmadd_ps(_mm512_set1_ps(scale[g]), iota16(), _mm512_set1_ps(offset[g]));
            __m512 hi = _mm512_fmadd_ps(_mm512_set1_ps(scale[g + 1]), iota16(), _mm512_set1_ps(offset[g + 1]));
            q[0] = _mm512_permutexvar_ps(v0, lo);
            q[1] = _mm512_permutexvar_ps(v1, lo);
            weights_into(acc, q, xt, k + 32 * g, T);
            q[0] = _mm512_permutexvar_ps(_mm512_srli_epi32(v0, 4), hi);
            q[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v1, 4), hi);
            weights_into(odd, q, xt, k + 32 * g + 32, T);
        }
        return;
    }
#endif
#if !NIBBLE_TABLES
    case LM_DTYPE_GGML_Q4_K:
#endif
    case LM_DTYPE_GGML_Q5_K: {
        float d = f16_at(b), dmin = f16_at(b + 2);
        int8_t bytes[256]; /* Q5_K's values; Q4_K reads its nibbles in place */
        if (dt == LM_DTYPE_GGML_Q5_K) q5k_bytes(b, bytes);
        LM_PRAGMA_UNROLL
        for (int g = 0; g < 8; g++) {
            uint8_t sc, m;
            lm_ggml_k4_scale_min(b + 4, g, &sc, &m);
            bias[g] = -(dmin * (float)m);
            if (dt == LM_DTYPE_GGML_Q4_K) {
                const uint8_t *qs = b + 16 + 32 * (g / 2);
                LM_PRAGMA_UNROLL
                for (int v = 0; v < VECS_32; v++) q[v] = load_nibbles(qs + v * LM_VF_WIDTH, g & 1, 0);
            } else {
                LM_PRAGMA_UNROLL
                for (int v = 0; v < VECS_32; v++) q[v] = lm_vf_load_i8(bytes + 32 * g + v * LM_VF_WIDTH);
            }
            group_into(g & 1 ? odd : acc, q, VECS_32, d * (float)sc, xt, k + 32 * g, T);
        }
        return;
    }
    case LM_DTYPE_GGML_Q6_K: {
        enum { VECS_16 = 16 / LM_VF_WIDTH };
        float d = f16_at(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        int8_t bytes[256];
        float scale[16]; /* made in one loop (vectorised), broadcast from memory */
        q6k_bytes(b, bytes);
        for (int g = 0; g < 16; g++) scale[g] = d * (float)sc[g];
        LM_PRAGMA_UNROLL
        for (int g = 0; g < 16; g++) {
            LM_PRAGMA_UNROLL
            for (int v = 0; v < VECS_16; v++) q[v] = lm_vf_load_i8(bytes + 16 * g + v * LM_VF_WIDTH);
            group_into(g & 1 ? odd : acc, q, VECS_16, scale[g], xt, k + 16 * g, T);
        }
        return;
    }
    default: return;
    }
}

/* Whether dt's offsets are added as Σ_g m_g·Σx_g (the tables fold them
 * into the weights instead). */
static LM_ALWAYS_INLINE bool is_affine(lm_dtype dt) {
    if (NIBBLE_TABLES && (dt == LM_DTYPE_GGML_Q4_1 || dt == LM_DTYPE_GGML_Q4_K)) return false;
    return dt == LM_DTYPE_GGML_Q4_1 || dt == LM_DTYPE_GGML_Q5_1 || dt == LM_DTYPE_GGML_Q4_K ||
           dt == LM_DTYPE_GGML_Q5_K;
}

/* Σ_g a[g]·b[g] over n values, in a fixed order. */
static LM_ALWAYS_INLINE float dot(const float *a, const float *b, int n) {
    lm_vf acc = lm_vf_zero();
    int i = 0;
    for (; i + LM_VF_WIDTH <= n; i += LM_VF_WIDTH) acc = lm_vf_fma(lm_vf_load(a + i), lm_vf_load(b + i), acc);
    if (i < n) acc = lm_vf_fma(lm_vf_load_part(a + i, n - i), lm_vf_load_part(b + i, n - i), acc);
    return lm_vf_reduce_add(acc);
}

/* Row `row` × tokens [t0, t0 + T) over columns [k0, k1) (one chunk): into
 * y, or added to it past the first chunk.  sums: the tile's per-32 sums of
 * x over the chunk, CHUNK_GROUPS a token (affine formats).  Even and odd
 * 32-weight blocks (a K-quant's groups) go to two accumulators. */
static LM_ALWAYS_INLINE void dot_row(const ggml_job *j, lm_dtype dt, int T, int64_t row, int t0,
                                     int64_t k0, int64_t k1, const float *sums) {
    const int64_t elems = block_elems(dt);
    const size_t bytes = block_bytes(dt);
    const uint8_t *b = j->w + (size_t)row * j->row_bytes + (size_t)(k0 / elems) * bytes;
    const float *xt[8];
    lm_vf even[8], odd[8];
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        xt[t] = j->x + (int64_t)(t0 + t) * j->cols;
        even[t] = lm_vf_zero();
        odd[t] = lm_vf_zero();
    }
    float bias[CHUNK_GROUPS];
    float *bias_at = bias;
    int64_t k = k0;
    if (elems == 32) {
        for (; k + 64 <= k1; k += 64, b += 2 * bytes, bias_at += 2) {
            block_into(even, odd, dt, b, xt, k, T, bias_at);
            block_into(odd, even, dt, b + bytes, xt, k + 32, T, bias_at + 1);
        }
        if (k < k1) block_into(even, odd, dt, b, xt, k, T, bias_at);
    } else {
        for (; k < k1; k += elems, b += bytes, bias_at += elems / 32)
            block_into(even, odd, dt, b, xt, k, T, bias_at);
    }
    int groups = (int)((k1 - k0) / 32);
    LM_PRAGMA_UNROLL
    for (int t = 0; t < T; t++) {
        float s = lm_vf_reduce_add(lm_vf_add(even[t], odd[t]));
        if (is_affine(dt)) s += dot(bias, sums + t * CHUNK_GROUPS, groups);
        float *yt = j->y + (int64_t)(t0 + t) * j->rows + row;
        *yt = k0 == 0 ? s : *yt + s;
    }
}

typedef void (*row_fn)(const ggml_job *j, int64_t row, int t0, int64_t k0, int64_t k1, const float *sums);

#define DEFINE_ROW(SUFFIX, DT, T)                                                                  \
    static void row_##SUFFIX##_##T(const ggml_job *j, int64_t r, int t0, int64_t k0, int64_t k1,   \
                                   const float *sums) {                                            \
        dot_row(j, DT, T, r, t0, k0, k1, sums);                                                    \
    }
#define DEFINE_ROWS(SUFFIX, DT)                                                                    \
    DEFINE_ROW(SUFFIX, DT, 1)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 2)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 3)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 4)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 5)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 6)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 7)                                                                      \
    DEFINE_ROW(SUFFIX, DT, 8)                                                                      \
    static const row_fn rows_##SUFFIX[9] = {NULL,           row_##SUFFIX##_1, row_##SUFFIX##_2,     \
                                            row_##SUFFIX##_3, row_##SUFFIX##_4, row_##SUFFIX##_5,   \
                                            row_##SUFFIX##_6, row_##SUFFIX##_7, row_##SUFFIX##_8};

DEFINE_ROWS(q4_0, LM_DTYPE_GGML_Q4_0)
DEFINE_ROWS(q4_1, LM_DTYPE_GGML_Q4_1)
DEFINE_ROWS(q5_0, LM_DTYPE_GGML_Q5_0)
DEFINE_ROWS(q5_1, LM_DTYPE_GGML_Q5_1)
DEFINE_ROWS(q8_0, LM_DTYPE_GGML_Q8_0)
DEFINE_ROWS(q4_k, LM_DTYPE_GGML_Q4_K)
DEFINE_ROWS(q5_k, LM_DTYPE_GGML_Q5_K)
DEFINE_ROWS(q6_k, LM_DTYPE_GGML_Q6_K)

static const row_fn *kernels_of(lm_dtype dt) {
    switch (dt) {
    case LM_DTYPE_GGML_Q4_0: return rows_q4_0;
    case LM_DTYPE_GGML_Q4_1: return rows_q4_1;
    case LM_DTYPE_GGML_Q5_0: return rows_q5_0;
    case LM_DTYPE_GGML_Q5_1: return rows_q5_1;
    case LM_DTYPE_GGML_Q8_0: return rows_q8_0;
    case LM_DTYPE_GGML_Q4_K: return rows_q4_k;
    case LM_DTYPE_GGML_Q5_K: return rows_q5_k;
    case LM_DTYPE_GGML_Q6_K: return rows_q6_k;
    default: return NULL;
    }
}

/* Σx over each group of 32 of tokens [t0, t0 + T), columns [k0, k1), into
 * sums[t * CHUNK_GROUPS + g]: one fixed order per group. */
static void group_sums(float *sums, const float *x, int64_t cols, int t0, int T, int64_t k0, int64_t k1) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (int64_t)(t0 + t) * cols;
        for (int64_t k = k0; k < k1; k += 32) {
            lm_vf s = lm_vf_load(xt + k);
            LM_PRAGMA_UNROLL
            for (int v = 1; v < VECS_32; v++) s = lm_vf_add(s, lm_vf_load(xt + k + v * LM_VF_WIDTH));
            sums[t * CHUNK_GROUPS + (k - k0) / 32] = lm_vf_reduce_add(s);
        }
    }
}

void lm_cpu_ggml_matmul_rows(float *y, const float *x, const uint8_t *w, lm_dtype dtype,
                             int64_t rows, int64_t cols, int n, int64_t row_begin, int64_t row_end,
                             int64_t panel_rows) {
    const row_fn *kernels = kernels_of(dtype);
    if (!kernels || cols <= 0) return;
    ggml_job j = {y, x, w, rows, cols, lm_dtype_row_bytes(dtype, cols)};
    bool affine = is_affine(dtype);
    float sums[TILE_T * CHUNK_GROUPS];
    for (int64_t p0 = row_begin; p0 < row_end; p0 += panel_rows) {
        int64_t p1 = p0 + panel_rows < row_end ? p0 + panel_rows : row_end;
        for (int t0 = 0; t0 < n; t0 += TILE_T) {
            int T = n - t0 < TILE_T ? n - t0 : TILE_T;
            for (int64_t k0 = 0; k0 < cols; k0 += CHUNK_COLS) {
                int64_t k1 = k0 + CHUNK_COLS < cols ? k0 + CHUNK_COLS : cols;
                if (affine) group_sums(sums, x, cols, t0, T, k0, k1);
                for (int64_t r = p0; r < p1; r++) kernels[T](&j, r, t0, k0, k1, sums);
            }
        }
    }
}
