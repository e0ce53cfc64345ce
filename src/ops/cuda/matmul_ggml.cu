// Decode products over ggml block weights (GGUF files: Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; base/dtype.h), float32 activations,
// float32 accumulation: y [n, rows] = x [n, cols] · wᵀ.
//
// Reading the weights: ggml's blocks are 18, 20, 22, 24, 34, 144, 176 or
// 210 bytes, so most of them start on 2-byte boundaries and a lane reading
// its own block straight from memory would make 2-byte loads (the int8
// kernel's, which holds it near 60% of the copy rate).  Here a warp copies
// its rows a chunk at a time (2048 weights: a whole number of blocks and
// of 16-byte pieces for every format, 1152-2176 bytes a row) into shared
// memory with coalesced 16-byte loads, the lanes' consecutive pieces, and
// each lane then decodes whole 32-weight groups from there.  The next
// chunk's pieces are loaded into registers while the current one is
// summed, so every lane keeps 9-17 loads of 16 bytes in flight, and a
// 4096-wide row is two chunks: two memory round trips a row set, not four
// (a 4096 x 4096 Q4_0 matrix is 3 us of the copy rate, about as long as a
// chain of four dependent loads).
// A warp owns GGML_RW rows at once: a group's activations are loaded once
// for its 4 rows (the 8 float4 of x a group reads are 7 times its 4-bit
// weight bytes: one row a lane would be bound by the L1, not by DRAM).
//
// The sums: a group of 32 weights is unpacked into its integer values q
// (exact: nibbles masked, fifth and sixth bits or'ed in, a byte permute
// building 2^23 + q in a float's bits, less 2^23 + offset), Σ q·x in
// column order (fmaf from 0), then scale · Σ added to the lane's
// accumulator with one fmaf (Q6_K: two halves of 16, each with its own
// scale); the affine formats add their offset as m · Σx (Σx of the group
// in column order).  As base/ggml_quant.h says, d·q is exact in float32 for
// every format, so this is Σ w·x within float32 rounding.  Lanes are added
// by a shuffle tree.  The order of every sum depends on the dtype and cols
// only — not on the token tile, the grid or the rows beside — so a token's
// outputs have the same bits at every batch size (test_backend_ops checks
// it).
//
// Fast path only where a matrix's rows are 16-byte aligned (the row's bytes
// a multiple of 16: cols a multiple of 256 for the 32-weight formats, of
// 2048 for Q6_K; the released 9B-class widths are); other matrices take the
// scalar kernel of matmul.cu through lm_weight_in.
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/launch.h" // first: base/dtype.h with C linkage, through ops.h
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/matmul_ggml.h"

#define GGML_WARPS 4 /* a block of 128 threads */
#define GGML_THREADS (GGML_WARPS * 32)
#define GGML_RW 4  /* rows a warp owns at once */
#define GGML_TOKENS 8

// ---- unpacking a group of 32 weights from a chunk in shared memory ----
//
// u[i] holds the values of weights 4i .. 4i + 3 of the group as 4 bytes
// (each q + OFF: unsigned), s0 the scale of the group (s1 of its second 16
// for Q6_K), mn the offset of the affine formats.

__device__ __forceinline__ static uint32_t word_at2(const uint8_t *p) { // p on 2 bytes
    const unsigned short *h = (const unsigned short *)p;
    return (uint32_t)h[0] | (uint32_t)h[1] << 16;
}
__device__ __forceinline__ static uint32_t word_at4(const uint8_t *p) { return *(const uint32_t *)p; }

// Bits 0..3 of t to bit 4 of bytes 0..3 (Q5's fifth bits): t·(1 + 2^7 + 2^14 +
// 2^21) places bit i at bit 8i, the four copies not overlapping.
__device__ __forceinline__ static uint32_t fifth_bits(uint32_t t) { return ((t & 0xFu) * 0x00204081u & 0x01010101u) << 4; }

template <int DT> struct ggml_fmt;

template <> struct ggml_fmt<LM_DTYPE_GGML_Q4_0> {
    static constexpr int elems = 32, bytes = 18, chunk = 2048, off = 8;
    static constexpr bool affine = false, two = false;
    __device__ static void group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0, float &, float &) {
        const uint8_t *b = row + g * bytes;
        s0 = lm_ggml_f16(b);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = word_at2(b + 2 + 4 * k);
            u[k] = w & 0x0F0F0F0Fu, u[4 + k] = (w >> 4) & 0x0F0F0F0Fu;
        }
    }
};

template <> struct ggml_fmt<LM_DTYPE_GGML_Q4_1> {
    static constexpr int elems = 32, bytes = 20, chunk = 2048, off = 0;
    static constexpr bool affine = true, two = false;
    __device__ static void group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0, float &, float &mn) {
        const uint8_t *b = row + g * bytes; // on 4 bytes
        s0 = lm_ggml_f16(b), mn = lm_ggml_f16(b + 2);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = word_at4(b + 4 + 4 * k);
            u[k] = w & 0x0F0F0F0Fu, u[4 + k] = (w >> 4) & 0x0F0F0F0Fu;
        }
    }
};

template <> struct ggml_fmt<LM_DTYPE_GGML_Q5_0> {
    static constexpr int elems = 32, bytes = 22, chunk = 2048, off = 16;
    static constexpr bool affine = false, two = false;
    __device__ static void group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0, float &, float &) {
        const uint8_t *b = row + g * bytes;
        s0 = lm_ggml_f16(b);
        uint32_t qh = word_at2(b + 2);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = word_at2(b + 6 + 4 * k);
            u[k] = (w & 0x0F0F0F0Fu) | fifth_bits(qh >> (4 * k));
            u[4 + k] = ((w >> 4) & 0x0F0F0F0Fu) | fifth_bits(qh >> (16 + 4 * k));
        }
    }
};

template <> struct ggml_fmt<LM_DTYPE_GGML_Q5_1> {
    static constexpr int elems = 32, bytes = 24, chunk = 2048, off = 0;
    static constexpr bool affine = true, two = false;
    __device__ static void group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0, float &, float &mn) {
        const uint8_t *b = row + g * bytes; // on 8 bytes
        s0 = lm_ggml_f16(b), mn = lm_ggml_f16(b + 2);
        uint32_t qh = word_at4(b + 4);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = word_at4(b + 8 + 4 * k);
            u[k] = (w & 0x0F0F0F0Fu) | fifth_bits(qh >> (4 * k));
            u[4 + k] = ((w >> 4) & 0x0F0F0F0Fu) | fifth_bits(qh >> (16 + 4 * k));
        }
    }
};

template <> struct ggml_fmt<LM_DTYPE_GGML_Q8_0> {
    static constexpr int elems = 32, bytes = 34, chunk = 2048, off = 128;
    static constexpr bool affine = false, two = false;
    __device__ static void group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0, float &, float &) {
        const uint8_t *b = row + g * bytes;
        s0 = lm_ggml_f16(b);
#pragma unroll
        for (int k = 0; k < 8; k++) u[k] = word_at2(b + 2 + 4 * k) ^ 0x80808080u; // int8 + 128
    }
};

// loom's Q8_0 (base/dtype.h: --quantize int8, FP8 checkpoints made int8):
// the same blocks with a bf16 scale.
template <> struct ggml_fmt<LM_DTYPE_Q8_0> {
    static constexpr int elems = 32, bytes = 34, chunk = 2048, off = 128;
    static constexpr bool affine = false, two = false;
    __device__ static void group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0, float &, float &) {
        const uint8_t *b = row + g * bytes;
        s0 = __uint_as_float((uint32_t)*(const unsigned short *)b << 16);
#pragma unroll
        for (int k = 0; k < 8; k++) u[k] = word_at2(b + 2 + 4 * k) ^ 0x80808080u; // int8 + 128
    }
};

// Q4_K and Q5_K: group j of a 256-weight block; its scale d·sc and offset
// −dmin·m (both exact in float32: 11 and 6 significant bits).
template <bool FIVE>
__device__ __forceinline__ static void k_quant_group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0,
                                                     float &mn) {
    const uint8_t *b = row + (g / 8) * (FIVE ? 176 : 144); // on 16 bytes
    int j = g % 8, sc, m;
    lm_ggml_k4_scale_min_dev(b + 4, j, &sc, &m);
    s0 = __fmul_rn(lm_ggml_f16(b), (float)sc);
    mn = -__fmul_rn(lm_ggml_f16(b + 2), (float)m);
    const uint4 *qs = (const uint4 *)(b + (FIVE ? 48 : 16) + 32 * (j / 2));
    uint4 lo = qs[0], hi = qs[1];
    const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    int shift = 4 * (j & 1);
#pragma unroll
    for (int i = 0; i < 8; i++) u[i] = (words[i] >> shift) & 0x0F0F0F0Fu;
    if (FIVE) {
        const uint4 *qh = (const uint4 *)(b + 16);
        uint4 a = qh[0], c = qh[1];
        const uint32_t bits[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
        for (int i = 0; i < 8; i++) u[i] |= ((bits[i] >> j) & 0x01010101u) << 4;
    }
}

template <> struct ggml_fmt<LM_DTYPE_GGML_Q4_K> {
    static constexpr int elems = 256, bytes = 144, chunk = 2048, off = 0;
    static constexpr bool affine = true, two = false;
    __device__ static void group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0, float &, float &mn) {
        k_quant_group<false>(row, g, u, s0, mn);
    }
};

template <> struct ggml_fmt<LM_DTYPE_GGML_Q5_K> {
    static constexpr int elems = 256, bytes = 176, chunk = 2048, off = 0;
    static constexpr bool affine = true, two = false;
    __device__ static void group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0, float &, float &mn) {
        k_quant_group<true>(row, g, u, s0, mn);
    }
};

// Q6_K: group j of a block is (half j / 4, k = j % 4): weights l = 0..31 are
// ql[64·half + 32(k & 1) + l]'s nibble k / 2 with bits 2k, 2k + 1 of
// qh[32·half + l] (base/ggml_quant.c), less 32; the first 16 take scale
// sc[8·half + 2k], the others sc[8·half + 2k + 1].
template <> struct ggml_fmt<LM_DTYPE_GGML_Q6_K> {
    static constexpr int elems = 256, bytes = 210, chunk = 2048, off = 32;
    static constexpr bool affine = false, two = true;
    __device__ static void group(const uint8_t *row, int g, uint32_t (&u)[8], float &s0, float &s1, float &) {
        const uint8_t *b = row + (g / 8) * bytes; // on 2 bytes
        int j = g % 8, half = j / 4, k = j % 4;
        const uint8_t *ql = b + 64 * half + 32 * (k & 1), *qh = b + 128 + 32 * half;
        int lo_shift = 4 * (k / 2), hi_shift = 2 * k;
#pragma unroll
        for (int i = 0; i < 8; i++)
            u[i] = ((word_at2(ql + 4 * i) >> lo_shift) & 0x0F0F0F0Fu) |
                   (((word_at2(qh + 4 * i) >> hi_shift) & 0x03030303u) << 4);
        float d = lm_ggml_f16(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * half + 2 * k);
        s0 = __fmul_rn(d, (float)sc[0]), s1 = __fmul_rn(d, (float)sc[1]);
    }
};

// Byte k of u (a value q + OFF) as the float q, exactly: 2^23 + byte made
// in the bits, less 2^23 + OFF.
template <int OFF> __device__ __forceinline__ static float value_of(uint32_t u, int k) {
    return __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650 + k)) - (8388608.0f + (float)OFF);
}

__device__ __forceinline__ static float ggml_warp_total(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

template <int DT> struct ggml_chunking {
    using F = ggml_fmt<DT>;
    static constexpr int chunk_bytes = F::chunk / F::elems * F::bytes;
    static constexpr int pieces = chunk_bytes / 16;                 // of a row's chunk
    static constexpr int per_lane = (GGML_RW * pieces + 31) / 32;   // loads in flight a lane
    static constexpr int groups_per_lane = F::chunk / 32 / 32;
    static_assert(chunk_bytes % 16 == 0, "a chunk is whole 16-byte pieces");
};

// The lane's pieces of chunk c of rows o0 .. o0 + GGML_RW - 1 (rows past the
// matrix read its last row: summed, never stored).
template <int DT>
__device__ __forceinline__ static void load_chunk(uint4 (&pf)[ggml_chunking<DT>::per_lane], const uint8_t *w,
                                                  int64_t rows, int64_t cols, int64_t row_bytes, int64_t o0, int c) {
    using C = ggml_chunking<DT>;
    using F = ggml_fmt<DT>;
    int64_t chunk_cols = cols - (int64_t)c * F::chunk < F::chunk ? cols - (int64_t)c * F::chunk : F::chunk;
    int pieces_c = (int)(chunk_cols / F::elems * F::bytes / 16);
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < C::per_lane; k++) {
        int p = lane + 32 * k, r = p / C::pieces, pc = p - r * C::pieces;
        if (p < GGML_RW * C::pieces && pc < pieces_c) {
            int64_t row = o0 + r < rows ? o0 + r : rows - 1;
            pf[k] = __ldg((const uint4 *)(w + row * row_bytes + (int64_t)c * C::chunk_bytes) + pc);
        }
    }
}

template <int DT>
__device__ __forceinline__ static void store_chunk(const uint4 (&pf)[ggml_chunking<DT>::per_lane], uint8_t *stage,
                                                   int64_t cols, int c) {
    using C = ggml_chunking<DT>;
    using F = ggml_fmt<DT>;
    int64_t chunk_cols = cols - (int64_t)c * F::chunk < F::chunk ? cols - (int64_t)c * F::chunk : F::chunk;
    int pieces_c = (int)(chunk_cols / F::elems * F::bytes / 16);
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < C::per_lane; k++) {
        int p = lane + 32 * k, r = p / C::pieces, pc = p - r * C::pieces;
        if (p < GGML_RW * C::pieces && pc < pieces_c) *(uint4 *)(stage + r * C::chunk_bytes + pc * 16) = pf[k];
    }
}

template <int DT, int TILE>
__global__ static void __launch_bounds__(GGML_THREADS)
    matmul_ggml_kernel(float *y, const float *x, const uint8_t *w, int n, int64_t rows, int64_t cols) {
    using F = ggml_fmt<DT>;
    using C = ggml_chunking<DT>;
    __shared__ __align__(16) uint8_t stage_all[GGML_WARPS][GGML_RW][C::chunk_bytes];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, t0 = blockIdx.x * TILE;
    const int nt = n - t0 < TILE ? n - t0 : TILE;
    uint8_t *stage = &stage_all[warp][0][0];
    const int64_t row_bytes = cols / F::elems * F::bytes;
    const int chunks = (int)((cols + F::chunk - 1) / F::chunk);
    const int64_t stride = (int64_t)gridDim.y * GGML_WARPS * GGML_RW;
    int64_t o0 = ((int64_t)blockIdx.y * GGML_WARPS + warp) * GGML_RW;
    uint4 pf[C::per_lane];
    // the weights do not depend on the kernels before: loaded first
    if (o0 < rows) load_chunk<DT>(pf, w, rows, cols, row_bytes, o0, 0);
    lm_cuda_wait_for_prior();
    lm_cuda_let_next_start();
    for (; o0 < rows; o0 += stride) {
        float acc[GGML_RW][TILE];
#pragma unroll
        for (int r = 0; r < GGML_RW; r++)
#pragma unroll
            for (int t = 0; t < TILE; t++) acc[r][t] = 0.0f;
        for (int c = 0; c < chunks; c++) {
            __syncwarp(); // every lane is done reading the chunk before
            store_chunk<DT>(pf, stage, cols, c);
            __syncwarp();
            if (c + 1 < chunks) load_chunk<DT>(pf, w, rows, cols, row_bytes, o0, c + 1);
            else if (o0 + stride < rows) load_chunk<DT>(pf, w, rows, cols, row_bytes, o0 + stride, 0);
            int64_t col0 = (int64_t)c * F::chunk;
            int groups_c = (int)((cols - col0 < F::chunk ? cols - col0 : F::chunk) / 32);
#pragma unroll
            for (int gi = 0; gi < C::groups_per_lane; gi++) {
                int g = lane + 32 * gi;
                if (g >= groups_c) continue;
                uint32_t u[GGML_RW][8];
                float s0[GGML_RW], s1[GGML_RW], mn[GGML_RW];
#pragma unroll
                for (int r = 0; r < GGML_RW; r++) {
                    s1[r] = 0.0f, mn[r] = 0.0f;
                    F::group(stage + r * C::chunk_bytes, g, u[r], s0[r], s1[r], mn[r]);
                }
                // each weight made a float once for the tile's tokens; every
                // (row, token) sum runs in column order as alone
                float sa[GGML_RW][TILE], sb[GGML_RW][TILE], xs[TILE];
#pragma unroll
                for (int t = 0; t < TILE; t++) {
                    xs[t] = 0.0f;
#pragma unroll
                    for (int r = 0; r < GGML_RW; r++) sa[r][t] = 0.0f, sb[r][t] = 0.0f;
                }
                const float *xg = x + (int64_t)t0 * cols + col0 + 32 * g;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    float q[GGML_RW][4];
#pragma unroll
                    for (int r = 0; r < GGML_RW; r++)
#pragma unroll
                        for (int k = 0; k < 4; k++) q[r][k] = value_of<F::off>(u[r][i], k);
#pragma unroll
                    for (int t = 0; t < TILE; t++) {
                        if (t >= nt) continue;
                        float4 xv = ((const float4 *)(xg + (int64_t)t * cols))[i];
                        if (F::affine) xs[t] = (((xs[t] + xv.x) + xv.y) + xv.z) + xv.w;
#pragma unroll
                        for (int r = 0; r < GGML_RW; r++) {
                            float &s = F::two && i >= 4 ? sb[r][t] : sa[r][t];
                            s = __fmaf_rn(q[r][0], xv.x, s);
                            s = __fmaf_rn(q[r][1], xv.y, s);
                            s = __fmaf_rn(q[r][2], xv.z, s);
                            s = __fmaf_rn(q[r][3], xv.w, s);
                        }
                    }
                }
#pragma unroll
                for (int t = 0; t < TILE; t++) {
                    if (t >= nt) continue;
#pragma unroll
                    for (int r = 0; r < GGML_RW; r++) {
                        float a = __fmaf_rn(s0[r], sa[r][t], acc[r][t]);
                        if (F::two) a = __fmaf_rn(s1[r], sb[r][t], a);
                        if (F::affine) a = __fmaf_rn(mn[r], xs[t], a);
                        acc[r][t] = a;
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < GGML_RW; r++)
#pragma unroll
            for (int t = 0; t < TILE; t++) {
                float v = ggml_warp_total(acc[r][t]);
                if (lane == 0 && t < nt && o0 + r < rows) y[(int64_t)(t0 + t) * rows + o0 + r] = v;
            }
    }
}

typedef void (*ggml_kernel_fn)(float *, const float *, const uint8_t *, int, int64_t, int64_t);
#define GGML_TILES(DT)                                                                                      \
    {matmul_ggml_kernel<DT, 1>, matmul_ggml_kernel<DT, 2>, matmul_ggml_kernel<DT, 4>,                    \
     matmul_ggml_kernel<DT, GGML_TOKENS>}
// In dtype order, LM_DTYPE_GGML_Q4_0 .. LM_DTYPE_GGML_Q6_K.
static const ggml_kernel_fn ggml_kernels[8][4] = {
    GGML_TILES(LM_DTYPE_GGML_Q4_0), GGML_TILES(LM_DTYPE_GGML_Q4_1), GGML_TILES(LM_DTYPE_GGML_Q5_0),
    GGML_TILES(LM_DTYPE_GGML_Q5_1), GGML_TILES(LM_DTYPE_GGML_Q8_0), GGML_TILES(LM_DTYPE_GGML_Q4_K),
    GGML_TILES(LM_DTYPE_GGML_Q5_K), GGML_TILES(LM_DTYPE_GGML_Q6_K)};
// loom's int8, beside them
static const ggml_kernel_fn q8_kernels[4] = GGML_TILES(LM_DTYPE_Q8_0);
#undef GGML_TILES
static_assert(LM_DTYPE_GGML_Q6_K - LM_DTYPE_GGML_Q4_0 == 7, "the table follows base/dtype.h's order");


// Whether the staged kernel takes w at x: rows of 16-byte multiples.
static bool staged_ok(const lm_matrix *w, lm_mem x, int n) {
    const void *wp = lm_cuda_ptr(w->data), *xp = lm_cuda_ptr(x);
    return n > 0 && w->rows > 0 && w->cols > 0 && w->cols % lm_dtype_block_elems(w->dtype) == 0 &&
           lm_dtype_row_bytes(w->dtype, w->cols) % 16 == 0 && (uintptr_t)wp % 16 == 0 && (uintptr_t)xp % 16 == 0;
}

static void launch_staged(lm_backend *be, const char *what, const ggml_kernel_fn (&tiles)[4], lm_mem y, lm_mem x,
                          int n, const lm_matrix *w) {
    int64_t per_block = GGML_WARPS * GGML_RW, blocks = (w->rows + per_block - 1) / per_block;
    dim3 grid(lm_cuda_blocks(n, GGML_TOKENS), (unsigned)(blocks < 65535 ? blocks : 65535));
    int tile = n == 1 ? 0 : n == 2 ? 1 : n <= 4 ? 2 : 3;
    lm_cuda_launch(be, what, tiles[tile], grid, GGML_THREADS, 0, lm_cuda_f32(y), lm_cuda_f32(x),
                   (const uint8_t *)lm_cuda_ptr(w->data), n, w->rows, w->cols);
}

bool lm_cuda_matmul_ggml(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    if (w->dtype < LM_DTYPE_GGML_Q4_0 || w->dtype > LM_DTYPE_GGML_Q6_K || !staged_ok(w, x, n)) return false;
    launch_staged(be, "matmul (ggml blocks)", ggml_kernels[w->dtype - LM_DTYPE_GGML_Q4_0], y, x, n, w);
    return true;
}

bool lm_cuda_matmul_q8_staged(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    if (w->dtype != LM_DTYPE_Q8_0 || !staged_ok(w, x, n)) return false;
    launch_staged(be, "matmul (int8)", q8_kernels, y, x, n, w);
    return true;
}
