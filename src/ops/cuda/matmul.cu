// The dense matmul y[n, rows] = x[n, cols] · wᵀ through cuBLASLt.
//
// Row-major in column-major terms: w [rows, cols] row-major is the
// column-major [cols, rows] matrix wᵀ (ld = cols), x [n, cols] row-major is
// column-major xᵀ [cols, n], and y [n, rows] row-major is column-major yᵀ
// [rows, n].  So yᵀ = op(A)·B with A = w's bytes read transposed (TRANSA =
// T), B = x's bytes, m = rows, n = n, k = cols: the "TN" layout, cuBLASLt's
// preferred one.
//
// Weights of 16 bits (bf16, f16): x is first rounded to the weights' type
// into the backend's scratch (cuBLASLt wants A and B of one type), then a
// 16 x 16 -> float32 product with float32 accumulation
// (CUBLAS_COMPUTE_32F).  float32 weights: the float32 product, no TF32
// (CUBLAS_COMPUTE_32F is strict float32), x read in place.  Should
// cuBLASLt offer no algorithm for a shape (or the scratch cannot grow), a
// plain float32 kernel computes the product instead: a kernel never fails
// (ops.h).
//
// Which runs: the float32 kernel by default — float32 activations times the
// stored weights, float32 accumulation in a fixed order per output, so the
// golden tests hold at float32 tolerance and a row's result does not
// depend on the batch (batched == alone, bit for bit; the cpu's float32
// products are deterministic over threads but sum a lone token in another
// order than several, cpu/matmul.c).
// cuBLASLt (LOOM_CUDA_MATMUL=cublaslt when the backend is made) rounds the
// activations to 16 bits and picks its algorithm by shape, so it is faster
// and neither.  A tensor-core kernel that is both is the next step.
//
// Later: the heuristic query runs on every call (some microseconds); a small
// cache by (dtype, m, n, k, alignments) would remove it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/block_reduce.h"
#include "ops/cuda/cublaslt_loader.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/matmul_fp8_mma.h"
#include "ops/cuda/matmul_ggml.h"

#define THREADS 256

// ---- the float32 kernel: one warp per output row, tiles of tokens ----
//
// Warp w of a block owns output row o and a tile of up to TOKENS tokens:
// lane l sums its columns (groups of 8 for 16-byte bf16 loads: l, l + 32,
// l + 64, ...) for every token of the tile, so a weight row is read once
// per tile, not once per token; a shuffle tree then adds the 32 lanes.
// Every product is an explicit fmaf in column order, so an output's bits
// depend on its row and its token alone: batched == alone, whatever n and
// however many tokens share the tile.  Blocks along x walk the token
// tiles of one group of rows (so those rows stay in L2 while every tile
// reads them); y walks the groups of rows.
#define TOKENS 8
#define WARPS (THREADS / 32)

__device__ static float warp_total(float v) {
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__global__ static void __launch_bounds__(THREADS)
    matmul_rows_kernel(float *y, const float *x, const void *w, int dtype, int n, int64_t rows,
                       int64_t cols) {
    lm_cuda_let_next_then_wait();
    int lane = threadIdx.x % 32, t0 = blockIdx.x * TOKENS;
    int nt = n - t0 < TOKENS ? n - t0 : TOKENS;
    for (int64_t o = (int64_t)blockIdx.y * WARPS + threadIdx.x / 32; o < rows;
         o += (int64_t)gridDim.y * WARPS) {
        float acc[TOKENS];
        for (int t = 0; t < TOKENS; t++)
            acc[t] = 0.0f;
        for (int64_t i = lane; i < cols; i += 32) {
            float wi = lm_weight_in(w, dtype, cols, o * cols + i);
            for (int t = 0; t < TOKENS; t++)
                if (t < nt) acc[t] = __fmaf_rn(wi, x[(int64_t)(t0 + t) * cols + i], acc[t]);
        }
        for (int t = 0; t < TOKENS; t++) {
            float total = warp_total(acc[t]);
            if (lane == 0 && t < nt) y[(int64_t)(t0 + t) * rows + o] = total;
        }
    }
}


// bf16 weights, cols a multiple of 8, 16-byte aligned rows (the released
// checkpoints' case): a block owns ROWS rows and a tile of TILE tokens; its
// warps split the columns into WARPS fixed slices (fixed by cols alone),
// each lane sums 8-column groups of its slice (16-byte loads, LOADS
// groups per row in flight, for every row of the block at once); the lanes
// are added by a shuffle tree and the slices in slice order through shared
// memory.  Every sum's order depends on cols only — not on TILE, ROWS or
// LOADS, which only say how much runs at once — so a token's sums are the
// same instructions whatever the tile's width (1, 2, 4 or 8 tokens, a
// template parameter: fewer registers for small batches) and whatever
// shape of block runs them: batched == alone, bit for bit.  Measured on the
// H200 against one warp per row with 16 loads in flight (9B shape,
// decode): 121.5 against 111-113 tokens/s.
// Row r of a block reads row0 + r·groups, or with HALF < ROWS, rows r >=
// HALF read half0 + (r - HALF)·groups: the gate and up rows of one SwiGLU
// output share a block (matmul_swiglu).  A row at or past `valid` of its
// matrix loads zeros.  HALF is a constant, so the lone product's code is
// what it was.
template <int ROWS, int LOADS, int HALF>
__device__ static inline void load_weights(uint4 (&p)[ROWS][LOADS], const uint4 *row0, const uint4 *half0, int64_t g0,
                                           int64_t g_end, int64_t valid, int64_t groups) {
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int u = 0; u < LOADS; u++) {
            int64_t g = g0 + 32 * u;
            int rr = r < HALF ? r : r - HALF;
            const uint4 *base = r < HALF ? row0 : half0;
            p[r][u] = g < g_end && rr < valid ? __ldg(base + rr * groups + g) : make_uint4(0, 0, 0, 0);
        }
}

// ---- the norm inside the products (normed_matmul_group, _swiglu) ----
//
// A decode step norms the residual stream h before a layer's first
// products (x = rmsnorm(h) · w); as its own launch that is a one-block
// kernel of a few microseconds between two products, twice a layer.  Here
// every block of the products makes x for its tile's tokens itself, in
// shared memory, after issuing its first weight loads (which do not wait
// for h), and its sums then read x from there.  A row's sum of squares is
// summed in the order of rmsnorm's block of lm_cuda_row_threads(cols)
// threads (`threads`; lm_cuda_row_sum_squares_as), and each element is
// rmsnorm's expression, so x holds rmsnorm's bits and the products the
// bits of rmsnorm then matmul_group.  The blocks of the first row group
// (blockIdx.y == 0) also write x, for readers after the products (the
// routed experts).  Each block reads h and w once more than a product
// reads x: 16 KB each for a 4096-wide row, from L2.
struct norm_args {
    const float *h, *w;
    float *x;
    float eps;
    int threads;
};

template <int TILE>
__device__ static void norm_tile(float *xs, const norm_args &nm, int n, int64_t cols) {
    __shared__ float inv[TILE];
    int t0 = blockIdx.x * TILE, nt = n - t0 < TILE ? n - t0 : TILE;
    int64_t count = (int64_t)nt * cols; // cols % 8 == 0: float4 rows
    const float4 *h4 = (const float4 *)(nm.h + (int64_t)t0 * cols);
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < count / 4; i += blockDim.x)
        ((float4 *)xs)[i] = h4[i];
    __syncthreads();
    for (int t = 0; t < nt; t++) {
        float ss = lm_cuda_row_sum_squares_as(xs + t * cols, (int)cols, nm.threads);
        if (threadIdx.x == 0) inv[t] = 1.0f / sqrtf(ss / (float)cols + nm.eps);
    }
    __syncthreads();
    float *x_out = blockIdx.y == 0 ? nm.x + (int64_t)t0 * cols : nullptr;
    for (int t = 0; t < nt; t++) {
        float *row = xs + t * cols;
#pragma unroll 4
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = row[c] * inv[t] * nm.w[c];
            row[c] = v;
            if (x_out) x_out[t * cols + c] = v;
        }
    }
    __syncthreads();
}

// Shared memory for a tile's normed (or gated) rows: up to 48 KB a block
// by default, NORM_TILE_WIDE_BYTES where the kernels were allowed more when
// the backend was made (lm_cuda_fused_products_init); the fused ops
// decline wider tiles.  96 KB: 4 tokens of 6144 columns (a verify step of
// 3 rows, a batch of 4 at the 9B shape's 4096).
#define NORM_TILE_MAX_BYTES ((size_t)40 << 10)
#define NORM_TILE_WIDE_BYTES ((size_t)96 << 10)


// matmul_gated_add's staged input (SWIGLU): silu(x) ⊙ x_up for the tile's
// tokens into shared memory, in silu_mul's expression (a shared expert's
// SwiGLU).  (Applied to each element as it was loaded instead, it took 16
// more registers: a block an SM.)
template <int TILE>
__device__ static void swiglu_tile(float *xs, const float *x, const float *x_up, int n, int64_t cols) {
    int t0 = blockIdx.x * TILE, nt = n - t0 < TILE ? n - t0 : TILE;
    const float *xt = x + (int64_t)t0 * cols, *ut = x_up + (int64_t)t0 * cols;
    int64_t count = (int64_t)nt * cols;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) xs[i] = lm_silu(xt[i]) * ut[i];
    __syncthreads();
}

// The sums of a block's ROWS rows for its tile of tokens, left in part
// (one per warp's slice, added by the epilogue in slice order).  With NORM
// the tile's x is first made from nm into xs (norm_tile), with SWIGLU from
// x and x_up (swiglu_tile), and read there.
template <int TILE, int ROWS, int LOADS, int HALF, bool NORM = false, bool SWIGLU = false>
__device__ static void bf16_partials(const float *x, const uint4 *row0, const uint4 *half0, int64_t valid, int n,
                                     int64_t cols, float (*part)[ROWS][TILE], const norm_args *nm = nullptr,
                                     float *xs = nullptr, const float *x_up = nullptr) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, t0 = blockIdx.x * TILE;
    int nt = n - t0 < TILE ? n - t0 : TILE;
    int64_t groups = cols / 8, per_slice = (groups + WARPS - 1) / WARPS;
    int64_t g_begin = warp * per_slice, g_end = g_begin + per_slice < groups ? g_begin + per_slice : groups;
    float acc[ROWS][TILE];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int t = 0; t < TILE; t++)
            acc[r][t] = 0.0f;
    // The weights do not depend on the kernels before this one: the first
    // loads are issued before waiting for them (every kernel is launched
    // early, launch.h), the next ones while the current are summed.  The order of the sums is
    // the same either way.
    uint4 p[ROWS][LOADS];
    load_weights<ROWS, LOADS, HALF>(p, row0, half0, g_begin + lane, g_end, valid, groups);
    lm_cuda_wait_for_prior();
    lm_cuda_let_next_start();
    if (NORM) norm_tile<TILE>(xs, *nm, n, cols); // then the tile's x is read from xs
    if constexpr (SWIGLU) swiglu_tile<TILE>(xs, x, x_up, n, cols);
    for (int64_t g0 = g_begin + lane; g0 < g_end; g0 += 32 * LOADS) {
#pragma unroll
        for (int u = 0; u < LOADS; u++) {
            int64_t g = g0 + 32 * u;
#pragma unroll
            for (int t = 0; t < TILE; t++) {
                if (g < g_end && t < nt) {
                    const float4 *xt =
                        (const float4 *)(NORM || SWIGLU ? xs + (int64_t)t * cols : x + (int64_t)(t0 + t) * cols) +
                        2 * g;
                    float4 a = xt[0], b = xt[1];
#pragma unroll
                    for (int r = 0; r < ROWS; r++)
                        acc[r][t] = lm_dot8_bf16(p[r][u], a, b, acc[r][t]);
                }
            }
        }
        if (g0 + 32 * LOADS < g_end)
            load_weights<ROWS, LOADS, HALF>(p, row0, half0, g0 + 32 * LOADS, g_end, valid, groups);
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int t = 0; t < TILE; t++) {
            float v = warp_total(acc[r][t]);
            if (lane == 0) part[warp][r][t] = v;
        }
    __syncthreads();
}

// A row's total: its slices' sums in slice order.
template <int ROWS, int TILE>
__device__ static inline float slice_total(float (*part)[ROWS][TILE], int r, int t) {
    float total = 0.0f;
    for (int k = 0; k < WARPS; k++)
        total += part[k][r][t];
    return total;
}

// What a product does with an output's sum: stores it; adds it to y's
// element (matmul_add: add's expression); or scales it by the sigmoid of
// its row's gate and adds it to other's element, that to y's
// (matmul_gated_add: sigmoid_scale_rows', then add's expressions).
enum { EPI_STORE = 0, EPI_ADD = 1, EPI_GATED_ADD = 2 };

// Rows o0 .. o0 + ROWS - 1 of one product for the block's tile, each sum
// finished as EPI says; NORM and SWIGLU as bf16_partials.
template <int TILE, int ROWS, int LOADS, bool NORM = false, int EPI = EPI_STORE, bool SWIGLU = false>
__device__ static void bf16_rows(float *y, const float *x, const uint4 *w, int n, int64_t rows, int64_t cols,
                                 int64_t o0, float (*part)[ROWS][TILE], const norm_args *nm = nullptr,
                                 float *xs = nullptr, const float *gate = nullptr, const float *other = nullptr,
                                 const float *x_up = nullptr) {
    const uint4 *row0 = w + o0 * (cols / 8);
    bf16_partials<TILE, ROWS, LOADS, ROWS, NORM, SWIGLU>(x, row0, row0, rows - o0, n, cols, part, nm, xs, x_up);
    int t0 = blockIdx.x * TILE, nt = n - t0 < TILE ? n - t0 : TILE;
    if (threadIdx.x < ROWS * TILE) {
        int r = threadIdx.x / TILE, t = threadIdx.x % TILE;
        if (t < nt && o0 + r < rows) {
            int64_t at = (int64_t)(t0 + t) * rows + o0 + r;
            float total = slice_total<ROWS, TILE>(part, r, t);
            // y's element is read here, after the sums (loaded across the
            // weight loop it cost 16 registers, a block an SM)
            if (EPI == EPI_STORE) {
                y[at] = total;
            } else if (EPI == EPI_ADD) {
                y[at] = y[at] + total;
            } else {
                // rounded before the add, as sigmoid_scale_rows stores it
                // (other + total * s would contract to one fma)
                float scaled = __fmul_rn(total, 1.0f / (1.0f + expf(-gate[t0 + t])));
                y[at] = y[at] + (other[at] + scaled);
            }
        }
    }
    __syncthreads(); // part is rewritten by the next rows
}

template <int TILE, int ROWS, int LOADS, int EPI = EPI_STORE>
__global__ static void __launch_bounds__(THREADS)
    matmul_bf16_kernel(float *y, const float *x, const uint4 *w, int n, int64_t rows, int64_t cols) {
    __shared__ float part[WARPS][ROWS][TILE];
    for (int64_t o0 = (int64_t)blockIdx.y * ROWS; o0 < rows; o0 += (int64_t)gridDim.y * ROWS)
        bf16_rows<TILE, ROWS, LOADS, false, EPI>(y, x, w, n, rows, cols, o0, part);
}

// matmul_gated_add's product: gate [n], other [n, rows] (bf16_rows).
template <int TILE, int ROWS, int LOADS>
__global__ static void __launch_bounds__(THREADS)
    matmul_gated_add_kernel(float *y, const float *x, const uint4 *w, int n, int64_t rows, int64_t cols,
                            const float *gate, const float *other) {
    __shared__ float part[WARPS][ROWS][TILE];
    for (int64_t o0 = (int64_t)blockIdx.y * ROWS; o0 < rows; o0 += (int64_t)gridDim.y * ROWS)
        bf16_rows<TILE, ROWS, LOADS, false, EPI_GATED_ADD>(y, x, w, n, rows, cols, o0, part, nullptr, nullptr, gate,
                                                           other);
}

// matmul_gated_add with x_up: silu(x) ⊙ x_up made in shared memory by each
// block (one row group a block), then as above.
template <int TILE, int ROWS, int LOADS>
__global__ static void __launch_bounds__(THREADS, TILE == 1 ? 4 : 1)
    swiglu_matmul_gated_add_kernel(float *y, const float *x, const float *x_up, const uint4 *w, int n, int64_t rows,
                                   int64_t cols, const float *gate, const float *other) {
    __shared__ float part[WARPS][ROWS][TILE];
    extern __shared__ __align__(16) float staged_x[]; // [TILE][cols]
    bf16_rows<TILE, ROWS, LOADS, false, EPI_GATED_ADD, true>(y, x, w, n, rows, cols, (int64_t)blockIdx.y * ROWS, part,
                                                             nullptr, staged_x, gate, other, x_up);
}

// ---- Q8_0 weights (--quantize int8, FP8 checkpoints) ----
//
// A row is cols / 32 blocks of 34 bytes: a bf16 scale, then 32 int8
// (base/dtype.h).  As the bf16 kernel: a block owns Q8_ROWS rows and a
// tile of TILE tokens, its warps split a row into WARPS fixed slices
// (fixed by cols alone) of half-blocks (16 weights: a 4096-wide row has
// 256, so every lane of a slice has one), a lane taking half-blocks lane,
// lane + 32, ... of its slice.  A half-block's sum is Σ q_i·x_i over its 16
// columns in order (fmaf from 0), then scale · sum is added to the lane's
// total with one fmaf; lanes by a shuffle tree, slices in slice order.
// The order depends on cols only, so batched == alone bit for bit,
// whatever TILE.  Blocks begin on 2-byte boundaries (34 bytes apart): a
// half-block is read as 8 2-byte loads and the scale as one, every row's
// in flight before the sums.
//
// As bf16_partials, row r of a block reads row0 + r·row_bytes, or with
// HALF < ROWS, rows r >= HALF read half0 + (r - HALF)·row_bytes (the gate
// and up rows of one SwiGLU output); a row at or past `valid` reads its
// matrix's first row, summed and never stored.  The first half-blocks are
// loaded before waiting for the kernels before (weights only), so the
// int8 kernels may start early too.
#define Q8_ROWS 4

template <int ROWS, int HALF>
__device__ static inline void q8_load_rows(uint32_t (&q)[ROWS][LM_Q8_HALF / 2], float (&scale)[ROWS],
                                           const uint8_t *row0, const uint8_t *half0, int64_t valid,
                                           int64_t row_bytes, int64_t h) {
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
        int rr = r < HALF ? r : r - HALF;
        const uint8_t *base = r < HALF ? row0 : half0;
        scale[r] = lm_q8_half_load(base + (rr < valid ? rr : 0) * row_bytes, h, q[r]);
    }
}

template <int TILE, int ROWS, int HALF>
__device__ static void q8_partials(const float *x, const uint8_t *row0, const uint8_t *half0, int64_t valid, int n,
                                   int64_t cols, float (*part)[ROWS][TILE]) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, t0 = blockIdx.x * TILE;
    int nt = n - t0 < TILE ? n - t0 : TILE;
    int64_t halves = cols / LM_Q8_HALF, per_slice = (halves + WARPS - 1) / WARPS;
    int64_t h_begin = warp * per_slice, h_end = h_begin + per_slice < halves ? h_begin + per_slice : halves;
    int64_t row_bytes = cols / LM_Q8_BLOCK * LM_Q8_BLOCK_BYTES;
    float acc[ROWS][TILE];
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int t = 0; t < TILE; t++)
            acc[r][t] = 0.0f;
    uint32_t q[ROWS][LM_Q8_HALF / 2];
    float scale[ROWS];
    int64_t h = h_begin + lane;
    if (h < h_end) q8_load_rows<ROWS, HALF>(q, scale, row0, half0, valid, row_bytes, h);
    lm_cuda_wait_for_prior();
    lm_cuda_let_next_start();
    for (; h < h_end; h += 32) {
#pragma unroll
        for (int r = 0; r < ROWS; r++)
#pragma unroll
            for (int t = 0; t < TILE; t++)
                if (t < nt) {
                    float s = lm_q8_half_dot(q[r], x + (int64_t)(t0 + t) * cols + h * LM_Q8_HALF);
                    acc[r][t] = __fmaf_rn(scale[r], s, acc[r][t]);
                }
        if (h + 32 < h_end) q8_load_rows<ROWS, HALF>(q, scale, row0, half0, valid, row_bytes, h + 32);
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++)
#pragma unroll
        for (int t = 0; t < TILE; t++) {
            float v = warp_total(acc[r][t]);
            if (lane == 0) part[warp][r][t] = v;
        }
    __syncthreads();
}

// Rows o0 .. o0 + Q8_ROWS - 1 of one product for the block's tile.
template <int TILE>
__device__ static void q8_rows(float *y, const float *x, const uint8_t *w, int n, int64_t rows, int64_t cols,
                               int64_t o0, float (*part)[Q8_ROWS][TILE]) {
    const uint8_t *row0 = w + o0 * (cols / LM_Q8_BLOCK * LM_Q8_BLOCK_BYTES);
    q8_partials<TILE, Q8_ROWS, Q8_ROWS>(x, row0, row0, rows - o0, n, cols, part);
    int t0 = blockIdx.x * TILE, nt = n - t0 < TILE ? n - t0 : TILE;
    if (threadIdx.x < Q8_ROWS * TILE) {
        int r = threadIdx.x / TILE, t = threadIdx.x % TILE;
        if (t < nt && o0 + r < rows) y[(int64_t)(t0 + t) * rows + o0 + r] = slice_total<Q8_ROWS, TILE>(part, r, t);
    }
    __syncthreads(); // part is rewritten by the next rows
}

template <int TILE>
__global__ static void __launch_bounds__(THREADS)
    matmul_q8_kernel(float *y, const float *x, const uint8_t *w, int n, int64_t rows, int64_t cols) {
    __shared__ float part[WARPS][Q8_ROWS][TILE];
    for (int64_t o0 = (int64_t)blockIdx.y * Q8_ROWS; o0 < rows; o0 += (int64_t)gridDim.y * Q8_ROWS)
        q8_rows<TILE>(y, x, w, n, rows, cols, o0, part);
}

// ---- FP8_B128 weights (FP8 checkpoints, --quantize fp8) ----
//
// A row is its cols E4M3 bytes, then cols / 128 float32 scales
// (base/dtype.h).  As the int8 kernel: a block owns FP8_ROWS rows and a
// tile of TILE tokens; its warps split a row into WARPS fixed slices of
// 16-weight units (one 16-byte load; 8 units share a scale), a lane taking
// units lane, lane + 32, ... of its slice.  A unit's sum is Σ w_i·x_i over
// its 16 columns in order (fmaf from 0; the E4M3 pairs widened exactly by
// the hardware's e4m3x2 -> f16x2 conversion, then to float32), then
// scale · sum is added to the lane's total with one fmaf; lanes by a
// shuffle tree, slices in slice order.  The order depends on cols only, so
// batched == alone bit for bit.  A row at or past `valid` reads the
// block's first row, summed and never stored.
#define FP8_ROWS 4
#define FP8_UNIT 16

__device__ static inline float fp8_unit_dot(uint4 q, const float *xt) {
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    const float4 *x4 = (const float4 *)xt;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(words[k] & 0xFFFFu), __NV_E4M3);
        __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(words[k] >> 16), __NV_E4M3);
        float2 a = __half22float2(*(const __half2 *)&lo), b = __half22float2(*(const __half2 *)&hi);
        float4 xv = x4[k];
        s = __fmaf_rn(a.x, xv.x, s);
        s = __fmaf_rn(a.y, xv.y, s);
        s = __fmaf_rn(b.x, xv.z, s);
        s = __fmaf_rn(b.y, xv.w, s);
    }
    return s;
}

template <int TILE>
__global__ static void __launch_bounds__(THREADS)
    matmul_fp8_kernel(float *y, const float *x, const uint8_t *w, int n, int64_t rows, int64_t cols) {
    __shared__ float part[WARPS][FP8_ROWS][TILE];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, t0 = blockIdx.x * TILE;
    int nt = n - t0 < TILE ? n - t0 : TILE;
    int64_t units = cols / FP8_UNIT, per_slice = (units + WARPS - 1) / WARPS;
    int64_t u_begin = warp * per_slice, u_end = u_begin + per_slice < units ? u_begin + per_slice : units;
    int64_t row_bytes = cols + cols / LM_FP8_BLOCK * 4;
    lm_cuda_let_next_then_wait();
    for (int64_t o0 = (int64_t)blockIdx.y * FP8_ROWS; o0 < rows; o0 += (int64_t)gridDim.y * FP8_ROWS) {
        float acc[FP8_ROWS][TILE];
#pragma unroll
        for (int r = 0; r < FP8_ROWS; r++)
#pragma unroll
            for (int t = 0; t < TILE; t++)
                acc[r][t] = 0.0f;
        for (int64_t u = u_begin + lane; u < u_end; u += 32) {
            uint4 q[FP8_ROWS];
            float scale[FP8_ROWS];
#pragma unroll
            for (int r = 0; r < FP8_ROWS; r++) {
                const uint8_t *row = w + (o0 + r < rows ? o0 + r : o0) * row_bytes;
                q[r] = __ldg((const uint4 *)row + u);
                scale[r] = __ldg((const float *)(row + cols) + u / (LM_FP8_BLOCK / FP8_UNIT));
            }
#pragma unroll
            for (int r = 0; r < FP8_ROWS; r++)
#pragma unroll
                for (int t = 0; t < TILE; t++)
                    if (t < nt)
                        acc[r][t] = __fmaf_rn(scale[r], fp8_unit_dot(q[r], x + (int64_t)(t0 + t) * cols + u * FP8_UNIT),
                                              acc[r][t]);
        }
#pragma unroll
        for (int r = 0; r < FP8_ROWS; r++)
#pragma unroll
            for (int t = 0; t < TILE; t++) {
                float v = warp_total(acc[r][t]);
                if (lane == 0) part[warp][r][t] = v;
            }
        __syncthreads();
        if (threadIdx.x < FP8_ROWS * TILE) {
            int r = threadIdx.x / TILE, t = threadIdx.x % TILE;
            if (t < nt && o0 + r < rows) y[(int64_t)(t0 + t) * rows + o0 + r] = slice_total<FP8_ROWS, TILE>(part, r, t);
        }
        __syncthreads(); // part is rewritten by the next rows
    }
}

// The FP8 decode product by default: a warp owns FP8_WARP_ROWS rows (no
// block-wide sync: the 4-row blocks above spend a 4096-wide row's whole
// work, one 16-byte load a lane, between two __syncthreads and a reduction,
// and reach about 60% of the copy rate), its lanes taking units lane,
// lane + 32, ... of every row, FP8_WARP_LOADS units a row in flight with
// their scales (8 16-byte loads a lane), the tile's x read once for the
// rows.  A unit's sum is fp8_unit_dot's, added with one fmaf with its scale
// in unit order, then the lanes by a shuffle tree: the order depends on
// cols only, so batched == alone bit for bit.
#define FP8_WARP_ROWS 4
#define FP8_WARP_LOADS 2
#define FP8_WARPS 4

template <int TILE>
__global__ static void __launch_bounds__(FP8_WARPS * 32)
    matmul_fp8_warp_kernel(float *y, const float *x, const uint8_t *w, int n, int64_t rows, int64_t cols) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, t0 = blockIdx.x * TILE;
    const int nt = n - t0 < TILE ? n - t0 : TILE;
    const int64_t units = cols / FP8_UNIT, row_bytes = cols + cols / LM_FP8_BLOCK * 4;
    const int64_t stride = (int64_t)gridDim.y * FP8_WARPS * FP8_WARP_ROWS;
    bool waited = false;
    for (int64_t o0 = ((int64_t)blockIdx.y * FP8_WARPS + warp) * FP8_WARP_ROWS; o0 < rows; o0 += stride) {
        const uint8_t *row[FP8_WARP_ROWS];
#pragma unroll
        for (int r = 0; r < FP8_WARP_ROWS; r++) row[r] = w + (o0 + r < rows ? o0 + r : rows - 1) * row_bytes;
        float acc[FP8_WARP_ROWS][TILE];
#pragma unroll
        for (int r = 0; r < FP8_WARP_ROWS; r++)
#pragma unroll
            for (int t = 0; t < TILE; t++) acc[r][t] = 0.0f;
        for (int64_t u0 = lane; u0 < units; u0 += 32 * FP8_WARP_LOADS) {
            uint4 q[FP8_WARP_ROWS][FP8_WARP_LOADS];
            float scale[FP8_WARP_ROWS][FP8_WARP_LOADS];
#pragma unroll
            for (int k = 0; k < FP8_WARP_LOADS; k++) {
                int64_t u = u0 + 32 * k;
#pragma unroll
                for (int r = 0; r < FP8_WARP_ROWS; r++) {
                    q[r][k] = u < units ? __ldg((const uint4 *)row[r] + u) : make_uint4(0, 0, 0, 0);
                    scale[r][k] = u < units ? __ldg((const float *)(row[r] + cols) + u / (LM_FP8_BLOCK / FP8_UNIT)) : 0.0f;
                }
            }
            if (!waited) { // the weights first: nothing earlier writes them
                lm_cuda_wait_for_prior();
                lm_cuda_let_next_start();
                waited = true;
            }
#pragma unroll
            for (int k = 0; k < FP8_WARP_LOADS; k++) {
                int64_t u = u0 + 32 * k;
                if (u >= units) continue;
#pragma unroll
                for (int t = 0; t < TILE; t++) {
                    if (t >= nt) continue;
                    const float *xt = x + (int64_t)(t0 + t) * cols + u * FP8_UNIT;
#pragma unroll
                    for (int r = 0; r < FP8_WARP_ROWS; r++)
                        acc[r][t] = __fmaf_rn(scale[r][k], fp8_unit_dot(q[r][k], xt), acc[r][t]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < FP8_WARP_ROWS; r++)
#pragma unroll
            for (int t = 0; t < TILE; t++) {
                float v = warp_total(acc[r][t]);
                if (lane == 0 && t < nt && o0 + r < rows) y[(int64_t)(t0 + t) * rows + o0 + r] = v;
            }
    }
    if (!waited) {
        lm_cuda_wait_for_prior();
        lm_cuda_let_next_start();
    }
}

// Rows start on 16 bytes (cols a multiple of 512 with an aligned matrix:
// a row is 33·cols/32 bytes), x too.
static bool fp8_vector_ok(const lm_matrix *w, const void *wp, const void *xp) {
    return w->dtype == LM_DTYPE_FP8_B128 && w->cols % LM_FP8_BLOCK == 0 &&
           lm_dtype_row_bytes(LM_DTYPE_FP8_B128, w->cols) % 16 == 0 && ((uintptr_t)wp % 16) == 0 &&
           ((uintptr_t)xp % 16) == 0;
}

static bool q8_vector_ok(const lm_matrix *w, const void *wp, const void *xp) {
    return w->dtype == LM_DTYPE_Q8_0 && w->cols % LM_Q8_BLOCK == 0 && ((uintptr_t)wp % 2) == 0 &&
           ((uintptr_t)xp % 16) == 0;
}

// matmul_group's products in one launch: blocks along y walk the row
// groups of every matrix in turn (block_end[i]: the end of matrix i's), so
// each output is computed by exactly the code of a lone matmul.
struct group_args {
    float *y[LM_MATMUL_GROUP_MAX];
    const void *w[LM_MATMUL_GROUP_MAX]; // bf16 (uint4 loads) or Q8_0 rows
    int64_t rows[LM_MATMUL_GROUP_MAX];
    int block_end[LM_MATMUL_GROUP_MAX];
    int count;
};

// The product of this block (blockIdx.y) and its block within it, picked
// with constant indices only: a dynamic index into the argument struct
// would copy it to local memory in every thread (measured: the group ran
// slower than its parts).
struct group_product {
    float *y;
    const void *w;
    int64_t rows;
    int block;
};
__device__ __forceinline__ static group_product group_product_of(const group_args &a) {
    int b = (int)blockIdx.y, first = 0;
    group_product p = {a.y[0], a.w[0], a.rows[0], 0};
#pragma unroll
    for (int k = 1; k < LM_MATMUL_GROUP_MAX; k++)
        if (k < a.count && b >= a.block_end[k - 1]) {
            first = a.block_end[k - 1];
            p.y = a.y[k], p.w = a.w[k], p.rows = a.rows[k];
        }
    p.block = b - first;
    return p;
}

template <int TILE, int ROWS, int LOADS, bool NORM = false>
__global__ static void __launch_bounds__(THREADS)
    matmul_group_kernel(group_args a, const float *x, int n, int64_t cols, norm_args nm) {
    __shared__ float part[WARPS][ROWS][TILE];
    extern __shared__ __align__(16) float normed_x[]; // NORM: [TILE][cols]
    group_product p = group_product_of(a);
    bf16_rows<TILE, ROWS, LOADS, NORM>(p.y, x, (const uint4 *)p.w, n, p.rows, cols, (int64_t)p.block * ROWS, part,
                                       &nm, normed_x);
}

// The same for int8 (Q8_0) weights: each output summed by q8_rows, as a
// lone int8 product sums it.
template <int TILE>
__global__ static void __launch_bounds__(THREADS) matmul_q8_group_kernel(group_args a, const float *x, int n,
                                                                         int64_t cols) {
    __shared__ float part[WARPS][Q8_ROWS][TILE];
    group_product p = group_product_of(a);
    q8_rows<TILE>(p.y, x, (const uint8_t *)p.w, n, p.rows, cols, (int64_t)p.block * Q8_ROWS, part);
}

// A SwiGLU block's outputs o0 .. o0 + ROWS / 2 - 1 from its slices' sums
// (gate rows first, then up rows), with silu_mul's expression.
template <int TILE, int ROWS>
__device__ static inline void swiglu_store(float *y, float (*part)[ROWS][TILE], int n, int64_t rows, int64_t o0) {
    constexpr int HALF = ROWS / 2;
    int t0 = blockIdx.x * TILE, nt = n - t0 < TILE ? n - t0 : TILE;
    if (threadIdx.x < HALF * TILE) {
        int r = threadIdx.x / TILE, t = threadIdx.x % TILE;
        if (t < nt && o0 + r < rows) {
            float g = slice_total<ROWS, TILE>(part, r, t), u = slice_total<ROWS, TILE>(part, r + HALF, t);
            y[(int64_t)(t0 + t) * rows + o0 + r] = lm_silu(g) * u;
        }
    }
}

// matmul_swiglu: y[t, o] = silu(x·gate_oᵀ) · (x·up_oᵀ).  A block owns
// HALF = ROWS / 2 outputs: its first HALF rows are gate's, the others up's,
// each summed exactly as a lone product sums it (the order depends on cols
// only), then combined with silu_mul's expression: the bits of matmul_group
// then silu_mul, without the two [n, rows] round trips and a launch.
template <int TILE, int ROWS, int LOADS, bool NORM = false>
__global__ static void __launch_bounds__(THREADS)
    matmul_swiglu_kernel(float *y, const float *x, const uint4 *gate, const uint4 *up, int n, int64_t rows,
                         int64_t cols, norm_args nm) {
    constexpr int HALF = ROWS / 2;
    __shared__ float part[WARPS][ROWS][TILE];
    extern __shared__ __align__(16) float normed_x[]; // NORM: [TILE][cols]
    int64_t o0 = (int64_t)blockIdx.y * HALF, groups = cols / 8;
    bf16_partials<TILE, ROWS, LOADS, HALF, NORM>(x, gate + o0 * groups, up + o0 * groups, rows - o0, n, cols, part,
                                                 &nm, normed_x);
    swiglu_store<TILE, ROWS>(y, part, n, rows, o0);
}

// matmul_swiglu over int8 (Q8_0) gate and up: a block owns Q8_ROWS / 2
// outputs, its gate rows then its up rows summed by q8_partials.
template <int TILE>
__global__ static void __launch_bounds__(THREADS)
    matmul_q8_swiglu_kernel(float *y, const float *x, const uint8_t *gate, const uint8_t *up, int n, int64_t rows,
                            int64_t cols) {
    constexpr int HALF = Q8_ROWS / 2;
    __shared__ float part[WARPS][Q8_ROWS][TILE];
    int64_t o0 = (int64_t)blockIdx.y * HALF, row_bytes = cols / LM_Q8_BLOCK * LM_Q8_BLOCK_BYTES;
    q8_partials<TILE, Q8_ROWS, HALF>(x, gate + o0 * row_bytes, up + o0 * row_bytes, rows - o0, n, cols, part);
    swiglu_store<TILE, Q8_ROWS>(y, part, n, rows, o0);
}

// The shapes of block that run a product (lm_cuda_state.gemv_shape; the
// bits are the same for all of them, only the speed differs): rows per
// block and loads per row in flight, for tiles of 1 and 2 tokens (wider
// tiles use 4 x 4).  LOOM_CUDA_GEMV=ROWSxLOADS picks one when the backend
// is made, for measuring them (bench/cuda_gemv.c).
typedef void (*bf16_kernel_fn)(float *, const float *, const uint4 *, int, int64_t, int64_t);
typedef void (*group_kernel_fn)(group_args, const float *, int, int64_t, norm_args);
typedef void (*swiglu_kernel_fn)(float *, const float *, const uint4 *, const uint4 *, int, int64_t, int64_t,
                                 norm_args);
typedef void (*swiglu_q8_fn)(float *, const float *, const uint8_t *, const uint8_t *, int, int64_t, int64_t);
typedef struct {
    int rows, unroll;
    bf16_kernel_fn single[2];
    group_kernel_fn group[2];
    swiglu_kernel_fn swiglu[2]; // NULL for one row a block: no pair to share it
} gemv_shape;

#define SHAPE_OF(R, U, ...)                                                                             \
    {R, U, {matmul_bf16_kernel<1, R, U>, matmul_bf16_kernel<2, R, U>},                                  \
     {matmul_group_kernel<1, R, U>, matmul_group_kernel<2, R, U>}, __VA_ARGS__}
#define SHAPE(R, U) SHAPE_OF(R, U, {matmul_swiglu_kernel<1, R, U>, matmul_swiglu_kernel<2, R, U>})
#define SHAPE1(R, U) SHAPE_OF(R, U, {nullptr, nullptr})
// The first is the default: 8 rows a block, one load per row in flight
// (74 registers, three blocks an SM) measured fastest on the H200 (9B
// decode 142.3 tokens/s against 139.6 for 4x2 and 130.2 for 4x4; single
// 12288 x 4096 products 31.7 us against 37.9, bench/cuda_gemv).
static const gemv_shape gemv_shapes[] = {SHAPE(8, 1), SHAPE(4, 4), SHAPE(4, 2), SHAPE(2, 4),
                                         SHAPE(2, 2), SHAPE(8, 2), SHAPE1(1, 4), SHAPE1(1, 8)};
#undef SHAPE
#undef SHAPE1
#undef SHAPE_OF
#define N_GEMV_SHAPES ((int)(sizeof gemv_shapes / sizeof gemv_shapes[0]))

// The shapes for tiles of 3-4 and 5-8 tokens (lm_cuda_state.gemv_wide;
// LOOM_CUDA_GEMV_WIDE=ROWSxLOADS picks one when the backend is made).  A
// tile's activations are read once per block for its ROWS rows, so wider
// tiles want more rows a block.  The first is the default: 8 rows, one load
// in flight (bench/cuda_gemv on the H200, 12288 x 4096: 49.3 us at 4
// tokens and 72.1 at 8 against 54.8 and 124.7 for 4 x 4; 9B speculation
// at planted acceptance 1.47x against 1.22x: a verify step's 3 rows).
typedef struct {
    int rows, unroll;
    bf16_kernel_fn single[2]; // tiles of 4, of TOKENS
    group_kernel_fn group[2];
    swiglu_kernel_fn swiglu[2];
} wide_shape;
#define WIDE(R, U)                                                                                      \
    {R, U, {matmul_bf16_kernel<4, R, U>, matmul_bf16_kernel<TOKENS, R, U>},                             \
     {matmul_group_kernel<4, R, U>, matmul_group_kernel<TOKENS, R, U>},                                 \
     {matmul_swiglu_kernel<4, R, U>, matmul_swiglu_kernel<TOKENS, R, U>}}
static const wide_shape wide_shapes[] = {WIDE(8, 1), WIDE(4, 4), WIDE(8, 2), WIDE(16, 1)};
#undef WIDE
#define N_WIDE_SHAPES ((int)(sizeof wide_shapes / sizeof wide_shapes[0]))

extern "C" int lm_cuda_gemv_wide_named(const char *name) {
    int r = 0, u = 0;
    if (!name || sscanf(name, "%dx%d", &r, &u) != 2) return -1;
    for (int i = 0; i < N_WIDE_SHAPES; i++)
        if (wide_shapes[i].rows == r && wide_shapes[i].unroll == u) return i;
    return -1;
}

static const wide_shape *wide_of(lm_backend *be) {
    int i = lm_cuda_state_of(be)->gemv_wide;
    return &wide_shapes[i >= 0 && i < N_WIDE_SHAPES ? i : 0];
}

extern "C" int lm_cuda_gemv_shape_named(const char *name) {
    int r = 0, u = 0;
    if (!name || sscanf(name, "%dx%d", &r, &u) != 2) return -1;
    for (int i = 0; i < N_GEMV_SHAPES; i++)
        if (gemv_shapes[i].rows == r && gemv_shapes[i].unroll == u) return i;
    return -1;
}

static const gemv_shape *shape_of(lm_backend *be) {
    int i = lm_cuda_state_of(be)->gemv_shape;
    return &gemv_shapes[i >= 0 && i < N_GEMV_SHAPES ? i : 0];
}

// The fused variants (the norm before the sums, the add after them) are
// built for the default shapes only, 8 rows a block and one load in flight
// (gemv_shapes[0] and wide_shapes[0]): with LOOM_CUDA_GEMV or
// LOOM_CUDA_GEMV_WIDE naming another shape the fused ops decline and their
// parts run.  The norm's tile is made in shared memory: tiles of 1, 2
// and 4 tokens (decode, verify steps, small batches), not of 8.
#define FUSED_ROWS 8
#define FUSED_LOADS 1
static const bf16_kernel_fn add_kernels[4] = {
    matmul_bf16_kernel<1, FUSED_ROWS, FUSED_LOADS, EPI_ADD>, matmul_bf16_kernel<2, FUSED_ROWS, FUSED_LOADS, EPI_ADD>,
    matmul_bf16_kernel<4, FUSED_ROWS, FUSED_LOADS, EPI_ADD>,
    matmul_bf16_kernel<TOKENS, FUSED_ROWS, FUSED_LOADS, EPI_ADD>};
typedef void (*gated_add_kernel_fn)(float *, const float *, const uint4 *, int, int64_t, int64_t, const float *,
                                    const float *);

typedef void (*swiglu_gated_add_kernel_fn)(float *, const float *, const float *, const uint4 *, int, int64_t,
                                           int64_t, const float *, const float *);
static const swiglu_gated_add_kernel_fn swiglu_gated_add_kernels[3] = {
    swiglu_matmul_gated_add_kernel<1, FUSED_ROWS, FUSED_LOADS>, swiglu_matmul_gated_add_kernel<2, FUSED_ROWS, FUSED_LOADS>,
    swiglu_matmul_gated_add_kernel<4, FUSED_ROWS, FUSED_LOADS>};

static const gated_add_kernel_fn gated_add_kernels[4] = {
    matmul_gated_add_kernel<1, FUSED_ROWS, FUSED_LOADS>, matmul_gated_add_kernel<2, FUSED_ROWS, FUSED_LOADS>,
    matmul_gated_add_kernel<4, FUSED_ROWS, FUSED_LOADS>, matmul_gated_add_kernel<TOKENS, FUSED_ROWS, FUSED_LOADS>};
static const group_kernel_fn normed_group_kernels[3] = {matmul_group_kernel<1, FUSED_ROWS, FUSED_LOADS, true>,
                                                        matmul_group_kernel<2, FUSED_ROWS, FUSED_LOADS, true>,
                                                        matmul_group_kernel<4, FUSED_ROWS, FUSED_LOADS, true>};
static const swiglu_kernel_fn normed_swiglu_kernels[3] = {matmul_swiglu_kernel<1, FUSED_ROWS, FUSED_LOADS, true>,
                                                          matmul_swiglu_kernel<2, FUSED_ROWS, FUSED_LOADS, true>,
                                                          matmul_swiglu_kernel<4, FUSED_ROWS, FUSED_LOADS, true>};

static bool default_shapes(lm_backend *be) {
    const gemv_shape *sh = shape_of(be);
    const wide_shape *wide = wide_of(be);
    return sh == &gemv_shapes[0] && sh->rows == FUSED_ROWS && sh->unroll == FUSED_LOADS && wide == &wide_shapes[0] &&
           wide->rows == FUSED_ROWS && wide->unroll == FUSED_LOADS;
}

// The tile for n tokens (1, 2, or 4 for 3-4): the index of its kernels
// in the tables above, -1 for wider.
static int norm_tile_index(int n) { return n == 1 ? 0 : n == 2 ? 1 : n <= 4 ? 2 : -1; }

// Lets the normed and gated kernels take NORM_TILE_WIDE_BYTES of dynamic
// shared memory (above the default 48 KB one must ask); if the device
// refuses, their tiles stay within NORM_TILE_MAX_BYTES.
extern "C" void lm_cuda_fused_products_init(lm_cuda_state *s) {
    bool ok = true;
    for (int i = 0; i < 3; i++) {
        ok = ok && cudaFuncSetAttribute(normed_group_kernels[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)NORM_TILE_WIDE_BYTES) == cudaSuccess;
        ok = ok && cudaFuncSetAttribute(normed_swiglu_kernels[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)NORM_TILE_WIDE_BYTES) == cudaSuccess;
        ok = ok && cudaFuncSetAttribute(swiglu_gated_add_kernels[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)NORM_TILE_WIDE_BYTES) == cudaSuccess;
    }
    if (!ok) (void)cudaGetLastError(); // not sticky: the narrower tiles still run
    s->norm_tile_bytes = ok ? NORM_TILE_WIDE_BYTES : NORM_TILE_MAX_BYTES;
    const char *one_byte = getenv("LOOM_CUDA_GEMV_1BYTE");
    // The staged kernels have not run on a card yet (session 28): the 4-row
    // blocks measured in docs/PERF.md stay the default until they have.
    s->gemv_1byte_blocks = !(one_byte && strcmp(one_byte, "staged") == 0);
}

// Rows per block for a tile of n tokens.
static int rows_per_block(lm_backend *be, int n) { return n <= 2 ? shape_of(be)->rows : wide_of(be)->rows; }

static bool bf16_vector_ok(const lm_matrix *w, const void *wp, const void *xp) {
    return w->dtype == LM_DTYPE_BF16 && w->cols % 8 == 0 && ((uintptr_t)wp % 16) == 0 && ((uintptr_t)xp % 16) == 0;
}

static void matmul_rows(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    const void *wp = lm_cuda_ptr(w->data);
    const void *xp = lm_cuda_ptr(x);
    bool blocks_of_4 = lm_cuda_state_of(be)->gemv_1byte_blocks;
    if (!blocks_of_4 && fp8_vector_ok(w, wp, xp)) {
        int64_t per_block = FP8_WARPS * FP8_WARP_ROWS, blocks = (w->rows + per_block - 1) / per_block;
        dim3 grid(lm_cuda_blocks(n, TOKENS), (unsigned)(blocks < 65535 ? blocks : 65535));
        void (*kernel)(float *, const float *, const uint8_t *, int, int64_t, int64_t) =
            n == 1   ? matmul_fp8_warp_kernel<1>
            : n == 2 ? matmul_fp8_warp_kernel<2>
            : n <= 4 ? matmul_fp8_warp_kernel<4>
                     : matmul_fp8_warp_kernel<TOKENS>;
        lm_cuda_launch(be, "matmul (fp8)", kernel, grid, FP8_WARPS * 32, 0, lm_cuda_f32(y), lm_cuda_f32(x),
                       (const uint8_t *)wp, n, w->rows, w->cols);
        return;
    }
    // int8 rows of 16-byte multiples: the staged kernel of the ggml blocks
    if (!blocks_of_4 && lm_cuda_matmul_q8_staged(be, y, x, n, w)) return;
    if (fp8_vector_ok(w, wp, xp)) {
        int64_t blocks = (w->rows + FP8_ROWS - 1) / FP8_ROWS;
        dim3 grid(lm_cuda_blocks(n, TOKENS), (unsigned)(blocks < 65535 ? blocks : 65535));
        void (*kernel)(float *, const float *, const uint8_t *, int, int64_t, int64_t) =
            n == 1 ? matmul_fp8_kernel<1> : n == 2 ? matmul_fp8_kernel<2> : n <= 4 ? matmul_fp8_kernel<4>
                                                                                   : matmul_fp8_kernel<TOKENS>;
        lm_cuda_launch(be, "matmul (fp8)", kernel, grid, THREADS, 0, lm_cuda_f32(y), lm_cuda_f32(x),
                       (const uint8_t *)wp, n, w->rows, w->cols);
        return;
    }
    if (q8_vector_ok(w, wp, xp)) {
        int64_t blocks = (w->rows + Q8_ROWS - 1) / Q8_ROWS;
        dim3 grid(lm_cuda_blocks(n, TOKENS), (unsigned)(blocks < 65535 ? blocks : 65535));
        void (*kernel)(float *, const float *, const uint8_t *, int, int64_t, int64_t) =
            n == 1 ? matmul_q8_kernel<1> : n == 2 ? matmul_q8_kernel<2> : n <= 4 ? matmul_q8_kernel<4>
                                                                                 : matmul_q8_kernel<TOKENS>;
        lm_cuda_launch(be, "matmul (int8)", kernel, grid, THREADS, 0, lm_cuda_f32(y), lm_cuda_f32(x),
                             (const uint8_t *)wp, n, w->rows, w->cols);
        return;
    }
    if (lm_cuda_matmul_ggml(be, y, x, n, w)) return; // ggml blocks of 16-byte rows (matmul_ggml.cu)
    bool vector = bf16_vector_ok(w, wp, xp);
    int64_t per_block = vector ? rows_per_block(be, n) : WARPS, blocks = (w->rows + per_block - 1) / per_block;
    int cap = lm_cuda_state_of(be)->gemv_grid_cap;
    if (vector && cap > 0 && blocks > cap) blocks = cap;
    dim3 grid(lm_cuda_blocks(n, TOKENS), (unsigned)(blocks < 65535 ? blocks : 65535));
    if (vector) {
        const gemv_shape *sh = shape_of(be);
        bf16_kernel_fn kernel = n == 1   ? sh->single[0]
                                : n == 2 ? sh->single[1]
                                         : wide_of(be)->single[n <= 4 ? 0 : 1];
        lm_cuda_launch(be, "matmul", kernel, grid, THREADS, 0, lm_cuda_f32(y), lm_cuda_f32(x),
                       (const uint4 *)wp, n, w->rows, w->cols);
    } else
        lm_cuda_launch(be, "matmul", matmul_rows_kernel, grid, THREADS, 0, lm_cuda_f32(y), lm_cuda_f32(x), wp,
                       (int)w->dtype, n, w->rows, w->cols);
}

// ---- x rounded to 16 bits ----
//
// A thread rounds 8 floats (two 16-byte loads, one 16-byte store) where
// x and out start on 16 bytes: a 4-byte load and a 2-byte store an element
// held the copy to about 1.2 TB/s (63 us a call on a 9B-shape prefill step,
// 8% of its kernels; PERF.md session 22).  Each element rounds alone, so
// the same bits either way; the tail past the last 8 goes element by element.
#define ROUND_GROUP 8

template <typename half_t> __device__ __forceinline__ static half_t round_16(float v);
template <> __device__ __forceinline__ __nv_bfloat16 round_16<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// f16 saturates at 65504: activations beyond it become inf (rare in
// practice; bf16 weights, the usual case, have float32's range).
template <> __device__ __forceinline__ __half round_16<__half>(float v) { return __float2half_rn(v); }

template <typename half_t>
__global__ static void to_16_kernel(half_t *out, const float *x, int64_t count, bool in_groups) {
    lm_cuda_let_next_then_wait();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (in_groups) {
        for (int64_t groups = count / ROUND_GROUP; i < groups; i += stride) {
            float4 a = ((const float4 *)x)[2 * i], b = ((const float4 *)x)[2 * i + 1];
            union {
                half_t h[ROUND_GROUP];
                uint4 bits;
            } r;
            r.h[0] = round_16<half_t>(a.x), r.h[1] = round_16<half_t>(a.y);
            r.h[2] = round_16<half_t>(a.z), r.h[3] = round_16<half_t>(a.w);
            r.h[4] = round_16<half_t>(b.x), r.h[5] = round_16<half_t>(b.y);
            r.h[6] = round_16<half_t>(b.z), r.h[7] = round_16<half_t>(b.w);
            ((uint4 *)out)[i] = r.bits;
        }
        i = count / ROUND_GROUP * ROUND_GROUP + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    }
    for (; i < count; i += stride) out[i] = round_16<half_t>(x[i]);
}

template <typename half_t>
static void round_to_16(lm_backend *be, const char *what, half_t *out, const float *x, int64_t count) {
    bool in_groups = (uintptr_t)out % 16 == 0 && (uintptr_t)x % 16 == 0;
    int64_t threads_wanted = in_groups ? (count + ROUND_GROUP - 1) / ROUND_GROUP : count;
    lm_cuda_launch(be, what, to_16_kernel<half_t>, lm_cuda_blocks(threads_wanted, THREADS), THREADS, 0, out, x, count,
                   in_groups);
}

void lm_cuda_round_to_bf16(lm_backend *be, const char *what, void *out, const float *x, int64_t count) {
    round_to_16(be, what, (__nv_bfloat16 *)out, x, count);
}

// The first call of each new largest size pays a synchronization and an
// allocation.  Better later: size the scratches when the context is made
// (the engine knows its largest batch and width).
bool lm_cuda_grow(lm_backend *be, void **buffer, size_t *size, size_t bytes) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    if (*size >= bytes) return true;
    lm_cuda_flush(be);
    lm_cuda_note_error(be, cudaStreamSynchronize(s->stream), "scratch");
    cudaFree(*buffer);
    *buffer = NULL;
    *size = 0;
    if (cudaMalloc(buffer, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); // not sticky: the fallback kernel runs instead
        *buffer = NULL;
        return false;
    }
    *size = bytes;
    return true;
}
static bool scratch_at_least(lm_backend *be, size_t bytes) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    return lm_cuda_grow(be, &s->scratch, &s->scratch_bytes, bytes);
}

// The largest power of two (up to 256) dividing a device address: what
// cuBLASLt may assume of a pointer (its default is 256).
static uint32_t alignment_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && a % align) align /= 2;
    return align;
}

// The descriptors of one product (TN, float32 out and accumulation).
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ly;
} blas_descriptors;

static void blas_destroy(const lm_cublaslt *lt, blas_descriptors *d) {
    if (d->ly) lt->MatrixLayoutDestroy(d->ly);
    if (d->lb) lt->MatrixLayoutDestroy(d->lb);
    if (d->la) lt->MatrixLayoutDestroy(d->la);
    if (d->op) lt->MatmulDescDestroy(d->op);
}

static bool blas_describe(const lm_cublaslt *lt, const lm_cuda_blas_call *c, blas_descriptors *d) {
    memset(d, 0, sizeof *d);
    cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    cudaDataType_t type = (cudaDataType_t)c->type;
    bool ok = lt->MatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
              !lt->MatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa) &&
              !lt->MatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb) &&
              // A as stored: k x m column-major (w's rows of k), read transposed.
              !lt->MatrixLayoutCreate(&d->la, type, (uint64_t)c->k, (uint64_t)c->m, c->k) &&
              !lt->MatrixLayoutCreate(&d->lb, type, (uint64_t)c->k, (uint64_t)c->n, c->k) &&
              !lt->MatrixLayoutCreate(&d->ly, CUDA_R_32F, (uint64_t)c->m, (uint64_t)c->n, c->ldy ? c->ldy : c->m);
    if (!ok) blas_destroy(lt, d);
    return ok;
}

// Asks the heuristic for an algorithm for the call (host only: nothing is
// queued); false when cuBLASLt declines the shape.
static bool blas_plan(lm_backend *be, lm_cuda_blas_call *c) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    cublasLtHandle_t handle = (cublasLtHandle_t)s->blas;
    const lm_cublaslt *lt = s->blas_api;
    if (!handle || !lt) return false;
    blas_descriptors d;
    if (!blas_describe(lt, c, &d)) return false;
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t workspace = s->blas_workspace_bytes;
    uint32_t align_a = alignment_of(c->a), align_b = alignment_of(c->b), align_y = alignment_of(c->y);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    bool ok = !lt->MatmulPreferenceCreate(&pref) &&
              !lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof workspace) &&
              !lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                    sizeof align_a) &&
              !lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                    sizeof align_b) &&
              !lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_y,
                                                    sizeof align_y) &&
              !lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_y,
                                                    sizeof align_y) &&
              lt->MatmulAlgoGetHeuristic(handle, d.op, d.la, d.lb, d.ly, d.ly, pref, 1, &result, &found) ==
                  CUBLAS_STATUS_SUCCESS &&
              found >= 1;
    if (ok) {
        static_assert(sizeof c->algo == sizeof result.algo, "cublasLtMatmulAlgo_t");
        memcpy(c->algo, &result.algo, sizeof result.algo);
    }
    if (pref) lt->MatmulPreferenceDestroy(pref);
    blas_destroy(lt, &d);
    return ok;
}

// Queues a planned call on the stream (queue.cu, when the record runs:
// plainly or into a graph's capture; cuBLASLt's kernels are captured like
// ours).  C = y, with beta 0 (never read) or, accumulating, 1: D = acc + y,
// the float32 sum the add after a plain product would make.
cudaError_t lm_cuda_blas_run(lm_backend *be, const lm_cuda_blas_call *c) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    const lm_cublaslt *lt = s->blas_api;
    blas_descriptors d;
    if (!lt || !blas_describe(lt, c, &d)) return cudaErrorUnknown;
    const float alpha = 1.0f, beta = c->accumulate ? 1.0f : 0.0f;
    cublasLtMatmulAlgo_t algo;
    memcpy(&algo, c->algo, sizeof algo);
    cublasStatus_t st = lt->Matmul((cublasLtHandle_t)s->blas, d.op, &alpha, c->a, d.la, c->b, d.lb, &beta,
                                       c->y, d.ly, c->y, d.ly, &algo, s->blas_workspace, s->blas_workspace_bytes,
                                       s->stream);
    blas_destroy(lt, &d);
    return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

// Plans y = x·aᵀ (accumulate: y += x·aᵀ) through cuBLASLt and queues it;
// false (nothing queued) when cuBLASLt declines.
static bool matmul_lt(lm_backend *be, float *y, const void *a, const void *b, cudaDataType_t type, int64_t m,
                      int64_t n, int64_t k, bool accumulate = false) {
    lm_cuda_blas_call c;
    memset(&c, 0, sizeof c); // every byte is compared by the queue (launch.h)
    c.a = a, c.b = b, c.y = y, c.m = m, c.n = n, c.k = k, c.type = (int32_t)type;
    c.accumulate = accumulate ? 1 : 0;
    if (!blas_plan(be, &c)) return false;
    lm_cuda_enqueue_blas(be, "matmul (cuBLASLt)", &c);
    return true;
}

// Rows up to this many use the float32 kernel also in bf16 mode: a product
// of few rows is bandwidth-bound (the kernel reads the weights once, as
// cuBLASLt does) and keeps float32 activations.
#define BLAS_MIN_ROWS 9

// x [n, cols] rounded to 16 bits (bf16, else f16) into the backend's
// scratch, for cuBLASLt; NULL (nothing queued) when the scratch cannot grow.
static void *x_in_16_bits(lm_backend *be, lm_mem x, int n, int64_t cols, bool bf16) {
    int64_t count = (int64_t)n * cols;
    if (!scratch_at_least(be, (size_t)count * 2)) return NULL;
    void *x16 = lm_cuda_state_of(be)->scratch;
    if (bf16)
        lm_cuda_round_to_bf16(be, "matmul (activations to 16 bits)", x16, lm_cuda_f32(x), count);
    else
        round_to_16(be, "matmul (activations to 16 bits)", (__half *)x16, lm_cuda_f32(x), count);
    return x16;
}

// y = x·wᵀ through cuBLASLt from x16 (x rounded to w's 16-bit type), or
// the float32 kernel from x when cuBLASLt declines.
static void matmul_16(lm_backend *be, lm_mem y, lm_mem x, const void *x16, int n, const lm_matrix *w) {
    bool bf16 = w->dtype == LM_DTYPE_BF16;
    if (!matmul_lt(be, lm_cuda_f32(y), lm_cuda_ptr(w->data), x16, bf16 ? CUDA_R_16BF : CUDA_R_16F, w->rows, n,
                   w->cols))
        matmul_rows(be, y, x, n, w);
}

// Whether lm_cuda_matmul takes cuBLASLt with 16-bit activations for w at n.
static bool takes_blas_16(lm_backend *be, int n, const lm_matrix *w) {
    return lm_cuda_state_of(be)->blas_matmul && n >= BLAS_MIN_ROWS && w->cols > 0 && w->rows > 0 &&
           (w->dtype == LM_DTYPE_BF16 || w->dtype == LM_DTYPE_F16);
}

// ---- int8 weights on the tensor cores (bf16 compute, 9+ rows) ----
//
// cuBLASLt has no int8-weight, float-activation product, so the weights
// are made bf16 a chunk of rows at a time into a scratch of at most
// Q8_CHUNK_WEIGHTS, each chunk's product written into its columns of y
// (ldy = rows).  Extra traffic per step: the chunk written and read as
// bf16 (about 3 bytes a weight against the product's 2·n flops per weight:
// a few percent at prefill's hundreds of rows).  s·q rounded to bf16 moves
// a weight by at most 2^-9 of itself: bf16 compute's precision, not the
// exact int8 weights the float32 kernels use.
#define Q8_CHUNK_WEIGHTS ((int64_t)32 << 20) /* 64 MB of bf16 */

__global__ static void blocks_to_bf16_kernel(__nv_bfloat16 *out, const uint8_t *w, int dtype, int64_t cols,
                                             int64_t count) {
    lm_cuda_let_next_then_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(lm_weight_in(w, dtype, cols, i));
}

// false (nothing queued) when a scratch cannot grow or cuBLASLt declines
// a chunk's shape: the caller runs the float32 kernel instead.
static bool matmul_blocks_blas(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    // chunks of a multiple of 64 rows: every chunk's place in y is as
    // aligned as y (256 bytes at most matter), so one plan serves them all
    int64_t rows = w->rows, cols = w->cols, chunk = Q8_CHUNK_WEIGHTS / cols / 64 * 64;
    if (chunk < 64) chunk = 64;
    if (chunk > rows) chunk = rows;
    if (!lm_cuda_grow(be, &s->weight_scratch, &s->weight_scratch_bytes, (size_t)(chunk * cols) * 2)) return false;
    // plan every chunk's call before queuing anything (two shapes at most)
    lm_cuda_blas_call calls[2];
    int64_t sizes[2] = {chunk, rows % chunk};
    for (int i = 0; i < 2; i++) {
        memset(&calls[i], 0, sizeof calls[i]); // every byte is compared by the queue (launch.h)
        if (sizes[i] == 0) continue;
        calls[i].a = s->weight_scratch, calls[i].y = lm_cuda_f32(y), calls[i].m = sizes[i], calls[i].n = n;
        calls[i].k = cols, calls[i].ldy = rows, calls[i].type = (int32_t)CUDA_R_16BF;
        if (!scratch_at_least(be, (size_t)n * (size_t)cols * 2)) return false;
        calls[i].b = s->scratch; // where x_in_16_bits puts the rounded x (grown already: it stays)
        if (!blas_plan(be, &calls[i])) return false;
    }
    const void *x16 = x_in_16_bits(be, x, n, cols, true);
    if (!x16) return false;
    size_t row_bytes = lm_dtype_row_bytes(w->dtype, cols);
    const uint8_t *wp = (const uint8_t *)lm_cuda_ptr(w->data);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t m = rows - r0 < chunk ? rows - r0 : chunk;
        int64_t count = m * cols;
        lm_cuda_launch(be, "matmul (block rows to bf16)", blocks_to_bf16_kernel, lm_cuda_blocks(count, THREADS),
                       THREADS, 0, (__nv_bfloat16 *)s->weight_scratch, wp + (size_t)r0 * row_bytes, (int)w->dtype,
                       cols, count);
        lm_cuda_blas_call c = calls[m == chunk ? 0 : 1];
        c.b = x16;
        c.y = lm_cuda_f32(y) + r0; // column r0 of y [n, rows]: m outputs a token, rows apart
        lm_cuda_enqueue_blas(be,
                             w->dtype == LM_DTYPE_FP8_B128 ? "matmul (cuBLASLt, fp8 rows)"
                             : w->dtype == LM_DTYPE_Q8_0   ? "matmul (cuBLASLt, int8 rows)"
                                                           : "matmul (cuBLASLt, ggml rows)",
                             &c);
    }
    return true;
}

extern "C" void lm_cuda_matmul(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    int64_t rows = w->rows, cols = w->cols;
    if (n <= 0 || rows <= 0) return;
    if (cols <= 0) { // an empty sum
        lm_cuda_enqueue_fill(be, "matmul", lm_cuda_ptr(y), 0, (size_t)n * (size_t)rows * sizeof(float));
        return;
    }
    if (!lm_cuda_state_of(be)->blas_matmul || n < BLAS_MIN_ROWS) {
        matmul_rows(be, y, x, n, w);
        return;
    }
    if (w->dtype == LM_DTYPE_FP8_B128 && lm_cuda_state_of(be)->fp8_mma &&
        fp8_vector_ok(w, lm_cuda_ptr(w->data), lm_cuda_ptr(x)) &&
        scratch_at_least(be, lm_cuda_fp8_gemm_scratch(n, cols)) && // FP8 tensor cores, x made E4M3 per 128
        lm_cuda_fp8_gemm(be, lm_cuda_f32(y), lm_cuda_f32(x), lm_cuda_state_of(be)->scratch,
                         (const uint8_t *)lm_cuda_ptr(w->data), n, rows, cols))
        return;
    if (w->dtype == LM_DTYPE_Q8_0 || w->dtype == LM_DTYPE_FP8_B128 ||
        (w->dtype >= LM_DTYPE_GGML_Q4_0 && w->dtype <= LM_DTYPE_GGML_Q6_K)) { // made bf16 a chunk at a time for cuBLASLt
        if (!matmul_blocks_blas(be, y, x, n, w)) matmul_rows(be, y, x, n, w);
        return;
    }
    if (w->dtype == LM_DTYPE_F32) {
        if (!matmul_lt(be, lm_cuda_f32(y), lm_cuda_ptr(w->data), lm_cuda_ptr(x), CUDA_R_32F, rows, n, cols))
            matmul_rows(be, y, x, n, w);
        return;
    }
    const void *x16 = x_in_16_bits(be, x, n, cols, w->dtype == LM_DTYPE_BF16);
    if (x16) matmul_16(be, y, x, x16, n, w);
    else matmul_rows(be, y, x, n, w);
}

// One launch for the group when every product takes the bf16 kernel at
// this n (float32 compute, or bf16 compute with few rows); otherwise each
// product as lm_cuda_matmul runs it.
extern "C" void lm_cuda_matmul_group(lm_backend *be, lm_mem x, int n, const lm_matmul_out *outs, int count) {
    const void *xp = lm_cuda_ptr(x);
    bool fused = n > 0 && count > 1 && count <= LM_MATMUL_GROUP_MAX &&
                 !(lm_cuda_state_of(be)->blas_matmul && n >= BLAS_MIN_ROWS);
    group_args a;
    memset(&a, 0, sizeof a); // every byte is compared by the queue (launch.h)
    // one kind of vector kernel for all: bf16 rows, or int8 rows
    // (int8 in one launch only with LOOM_CUDA_GEMV_1BYTE=blocks, whose lone
    // products are q8_rows' too; the staged kernel has no group form yet)
    bool q8 = count > 0 && outs[0].w->dtype == LM_DTYPE_Q8_0;
    if (q8 && !lm_cuda_state_of(be)->gemv_1byte_blocks) fused = false;
    int per_block = q8 ? Q8_ROWS : rows_per_block(be, n), blocks = 0;
    for (int i = 0; fused && i < count; i++) {
        const lm_matrix *w = outs[i].w;
        const void *wp = lm_cuda_ptr(w->data);
        fused = (q8 ? q8_vector_ok(w, wp, xp) : bf16_vector_ok(w, wp, xp)) && w->cols == outs[0].w->cols &&
                w->rows > 0 && w->rows <= 65535 * (int64_t)per_block;
        if (!fused) break;
        blocks += (int)((w->rows + per_block - 1) / per_block);
        a.y[i] = lm_cuda_f32(outs[i].y), a.w[i] = wp, a.rows[i] = w->rows;
        a.block_end[i] = blocks;
        fused = blocks <= 65535;
    }
    if (!fused) {
        // cuBLASLt for all (bf16 compute, 9+ rows) with weights of one
        // 16-bit type: x is rounded once for the group, not once a product
        // (a layer's 3-4 projections read the same x); the same bits.
        bool one_rounding = count > 1;
        for (int i = 0; one_rounding && i < count; i++)
            one_rounding = takes_blas_16(be, n, outs[i].w) && outs[i].w->dtype == outs[0].w->dtype &&
                           outs[i].w->cols == outs[0].w->cols;
        const void *x16 =
            one_rounding ? x_in_16_bits(be, x, n, outs[0].w->cols, outs[0].w->dtype == LM_DTYPE_BF16) : NULL;
        for (int i = 0; i < count; i++)
            if (x16) matmul_16(be, outs[i].y, x, x16, n, outs[i].w);
            else lm_cuda_matmul(be, outs[i].y, x, n, outs[i].w);
        return;
    }
    a.count = count;
    dim3 grid(lm_cuda_blocks(n, TOKENS), (unsigned)blocks);
    if (q8) {
        void (*kernel)(group_args, const float *, int, int64_t) = n == 1 ? matmul_q8_group_kernel<1>
                                 : n == 2 ? matmul_q8_group_kernel<2>
                                 : n <= 4 ? matmul_q8_group_kernel<4>
                                          : matmul_q8_group_kernel<TOKENS>;
        lm_cuda_launch(be, "matmul (int8 group)", kernel, grid, THREADS, 0, a, lm_cuda_f32(x), n,
                             outs[0].w->cols);
        return;
    }
    const gemv_shape *sh = shape_of(be);
    group_kernel_fn kernel = n == 1   ? sh->group[0]
                             : n == 2 ? sh->group[1]
                                      : wide_of(be)->group[n <= 4 ? 0 : 1];
    norm_args none;
    memset(&none, 0, sizeof none);
    lm_cuda_launch(be, "matmul (group)", kernel, grid, THREADS, 0, a, lm_cuda_f32(x), n, outs[0].w->cols, none);
}

// matmul_swiglu where matmul_group would take the bf16 kernel in one
// launch; false (the caller runs the group and silu_mul) otherwise.
extern "C" bool lm_cuda_matmul_swiglu(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *gate,
                                      const lm_matrix *up) {
    const void *xp = lm_cuda_ptr(x), *gp = lm_cuda_ptr(gate->data), *up_p = lm_cuda_ptr(up->data);
    if (n <= 0 || lm_cuda_state_of(be)->unfused || (lm_cuda_state_of(be)->blas_matmul && n >= BLAS_MIN_ROWS))
        return false;
    if (gate->rows != up->rows || gate->cols != up->cols || gate->rows <= 0) return false;
    if (q8_vector_ok(gate, gp, xp) && q8_vector_ok(up, up_p, xp)) {
        if (!lm_cuda_state_of(be)->gemv_1byte_blocks) return false; // its lone products: the staged kernel
        constexpr int half = Q8_ROWS / 2;
        int64_t blocks = (gate->rows + half - 1) / half;
        if (blocks > 65535) return false;
        swiglu_q8_fn kernel = n == 1   ? matmul_q8_swiglu_kernel<1>
                              : n == 2 ? matmul_q8_swiglu_kernel<2>
                              : n <= 4 ? matmul_q8_swiglu_kernel<4>
                                       : matmul_q8_swiglu_kernel<TOKENS>;
        dim3 grid(lm_cuda_blocks(n, TOKENS), (unsigned)blocks);
        lm_cuda_launch(be, "matmul (int8 swiglu)", kernel, grid, THREADS, 0, lm_cuda_f32(y), lm_cuda_f32(x),
                             (const uint8_t *)gp, (const uint8_t *)up_p, n, gate->rows, gate->cols);
        return true;
    }
    if (!bf16_vector_ok(gate, gp, xp) || !bf16_vector_ok(up, up_p, xp)) return false;
    const gemv_shape *sh = shape_of(be);
    swiglu_kernel_fn kernel = n == 1   ? sh->swiglu[0]
                              : n == 2 ? sh->swiglu[1]
                                       : wide_of(be)->swiglu[n <= 4 ? 0 : 1];
    int half = rows_per_block(be, n) / 2;
    int64_t blocks = half > 0 ? (gate->rows + half - 1) / half : 0;
    if (!kernel || blocks > 65535) return false;
    dim3 grid(lm_cuda_blocks(n, TOKENS), (unsigned)blocks);
    norm_args none;
    memset(&none, 0, sizeof none);
    lm_cuda_launch(be, "matmul (swiglu)", kernel, grid, THREADS, 0, lm_cuda_f32(y), lm_cuda_f32(x),
                   (const uint4 *)gp, (const uint4 *)up_p, n, gate->rows, gate->cols, none);
    return true;
}

// ---- the fused norm and add (normed_matmul_group, _swiglu, matmul_add) ----

// Whether the decode kernels may run a fused op at n rows: the default
// shapes, float32 activations for these rows, fusing not switched off.
static bool fusable(lm_backend *be, int n) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    return n > 0 && !s->unfused && !(s->blas_matmul && n >= BLAS_MIN_ROWS) && default_shapes(be);
}

// Whether a tile of n tokens' x of cols columns fits the shared memory the
// normed and gated kernels may take; its bytes in *shared.
static bool norm_tile_fits(lm_backend *be, int n, int64_t cols, size_t *shared) {
    *shared = sizeof(float) * (size_t)n * (size_t)cols; // the tile's rows past n are never touched
    return norm_tile_index(n) >= 0 && cols > 0 && cols <= 65536 && *shared <= lm_cuda_state_of(be)->norm_tile_bytes;
}

// The norm's arguments for rows of cols; false when the tile does not fit,
// and unless LOOM_CUDA_FUSE_NORM=1.  The normed products lose on the
// decode step as they stand: each of a product's blocks owns one row
// group and norms the whole row again (a 4096-float row and its weight,
// 32 KB through L2 and two block-wide syncs per 64 KB of weight rows), so
// on an H100 the 9B shape's normed SwiGLU took 84.7 us a call against 75.3
// for rmsnorm's separate launch plus the plain one, its normed group 49.1
// against 38.9, and batch-1 decode fell from 164.1 to 146.7 tokens/s
// (docs/PERF.md, session 18).  Nor did they pay where a product is one
// wave of blocks: normed only for products of up to 2 blocks an SM (a
// MoE layer's router and shared expert, 161 blocks on the 35B-A3B shape),
// that decode took 264.5 / 265.4 tokens/s against 266.3 / 267.2 with
// rmsnorm first (session 19).  Blocks that loop over many row groups and
// norm once might amortise it; until that is measured, rmsnorm runs first.
static bool normed_args(lm_backend *be, const lm_normed_input *in, int n, int64_t cols, norm_args *nm,
                        size_t *shared) {
    memset(nm, 0, sizeof *nm); // every byte is compared by the queue (launch.h)
    if (!lm_cuda_state_of(be)->norm_fused || !norm_tile_fits(be, n, cols, shared) || cols % 8 != 0) return false;
    if ((uintptr_t)lm_cuda_ptr(in->h) % 16 != 0) return false;
    nm->h = lm_cuda_f32(in->h), nm->w = lm_cuda_f32(in->weight), nm->x = lm_cuda_f32(in->x);
    nm->eps = in->eps;
    nm->threads = lm_cuda_row_threads((int)cols); // rmsnorm's block (norms.cu)
    return true;
}

extern "C" bool lm_cuda_normed_matmul_group(lm_backend *be, const lm_normed_input *in, int n,
                                            const lm_matmul_out *outs, int count) {
    if (!fusable(be, n) || count <= 0 || count > LM_MATMUL_GROUP_MAX) return false;
    int64_t cols = outs[0].w->cols;
    norm_args nm;
    size_t shared;
    if (!normed_args(be, in, n, cols, &nm, &shared)) return false;
    group_args a;
    memset(&a, 0, sizeof a); // every byte is compared by the queue (launch.h)
    const void *xp = lm_cuda_ptr(in->x);
    int blocks = 0;
    for (int i = 0; i < count; i++) {
        const lm_matrix *w = outs[i].w;
        const void *wp = lm_cuda_ptr(w->data);
        if (!bf16_vector_ok(w, wp, xp) || w->cols != cols || w->rows <= 0 || w->rows > 65535 * (int64_t)FUSED_ROWS)
            return false;
        blocks += (int)((w->rows + FUSED_ROWS - 1) / FUSED_ROWS);
        if (blocks > 65535) return false;
        a.y[i] = lm_cuda_f32(outs[i].y), a.w[i] = wp, a.rows[i] = w->rows;
        a.block_end[i] = blocks;
    }
    a.count = count;
    lm_cuda_launch(be, "matmul (normed group)", normed_group_kernels[norm_tile_index(n)], dim3(1, (unsigned)blocks), THREADS,
                   shared, a, lm_cuda_f32(in->x), n, cols, nm);
    return true;
}

extern "C" bool lm_cuda_normed_matmul_swiglu(lm_backend *be, lm_mem y, const lm_normed_input *in, int n,
                                             const lm_matrix *gate, const lm_matrix *up) {
    if (!fusable(be, n) || gate->rows != up->rows || gate->cols != up->cols || gate->rows <= 0) return false;
    norm_args nm;
    size_t shared;
    if (!normed_args(be, in, n, gate->cols, &nm, &shared)) return false;
    const void *xp = lm_cuda_ptr(in->x), *gp = lm_cuda_ptr(gate->data), *up_p = lm_cuda_ptr(up->data);
    if (!bf16_vector_ok(gate, gp, xp) || !bf16_vector_ok(up, up_p, xp)) return false;
    constexpr int half = FUSED_ROWS / 2;
    int64_t blocks = (gate->rows + half - 1) / half;
    if (blocks > 65535) return false;
    lm_cuda_launch(be, "matmul (normed swiglu)", normed_swiglu_kernels[norm_tile_index(n)], dim3(1, (unsigned)blocks), THREADS,
                   shared, lm_cuda_f32(y), lm_cuda_f32(in->x), (const uint4 *)gp, (const uint4 *)up_p, n, gate->rows,
                   gate->cols, nm);
    return true;
}

// matmul_add and matmul_gated_add where matmul would take the bf16 vector
// kernel (any n in float32 compute, few rows in bf16), on matmul's grid
// and tile; false otherwise.
static bool epilogue_fusable(lm_backend *be, int n, const lm_matrix *w, lm_mem x, dim3 *grid, int *tile) {
    if (!fusable(be, n) || w->rows <= 0 || w->cols <= 0 || !bf16_vector_ok(w, lm_cuda_ptr(w->data), lm_cuda_ptr(x)))
        return false;
    int64_t blocks = (w->rows + FUSED_ROWS - 1) / FUSED_ROWS;
    int cap = lm_cuda_state_of(be)->gemv_grid_cap;
    if (cap > 0 && blocks > cap) blocks = cap;
    *grid = dim3(lm_cuda_blocks(n, TOKENS), (unsigned)(blocks < 65535 ? blocks : 65535));
    *tile = n == 1 ? 0 : n == 2 ? 1 : n <= 4 ? 2 : 3; // matmul_rows' choice: tiles of 1, 2, 4, TOKENS
    return true;
}

extern "C" bool lm_cuda_matmul_add(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    // bf16 compute, 9+ rows: cuBLASLt adds into y itself (beta 1), with no
    // product in a scratch and no add launch after it (2.8% of a 9B-shape
    // 4k prefill's kernels were those adds: PERF.md session 21).
    if (takes_blas_16(be, n, w)) {
        const void *x16 = x_in_16_bits(be, x, n, w->cols, w->dtype == LM_DTYPE_BF16);
        return x16 && matmul_lt(be, lm_cuda_f32(y), lm_cuda_ptr(w->data), x16,
                                w->dtype == LM_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F, w->rows, n, w->cols, true);
    }
    dim3 grid;
    int tile;
    if (!epilogue_fusable(be, n, w, x, &grid, &tile)) return false;
    lm_cuda_launch(be, "matmul (add)", add_kernels[tile], grid, THREADS, 0, lm_cuda_f32(y), lm_cuda_f32(x),
                   (const uint4 *)lm_cuda_ptr(w->data), n, w->rows, w->cols);
    return true;
}

extern "C" bool lm_cuda_matmul_gated_add(lm_backend *be, lm_mem y, lm_mem x, lm_mem x_up, int n, const lm_matrix *w,
                                         lm_mem gate, lm_mem other) {
    dim3 grid;
    int tile;
    if (!epilogue_fusable(be, n, w, x, &grid, &tile)) return false;
    if (x_up.buffer) { // the SwiGLU staged by each block: one row group a block, none capped
        size_t shared;
        int64_t blocks = (w->rows + FUSED_ROWS - 1) / FUSED_ROWS;
        if (!norm_tile_fits(be, n, w->cols, &shared) || blocks > 65535) return false;
        lm_cuda_launch(be, "matmul (swiglu x, gated add)", swiglu_gated_add_kernels[norm_tile_index(n)],
                       dim3(1, (unsigned)blocks), THREADS, shared, lm_cuda_f32(y), lm_cuda_f32(x), lm_cuda_f32(x_up),
                       (const uint4 *)lm_cuda_ptr(w->data), n, w->rows, w->cols, lm_cuda_f32(gate),
                       lm_cuda_f32(other));
        return true;
    }
    lm_cuda_launch(be, "matmul (gated add)", gated_add_kernels[tile], grid, THREADS, 0, lm_cuda_f32(y),
                   lm_cuda_f32(x), (const uint4 *)lm_cuda_ptr(w->data), n, w->rows, w->cols, lm_cuda_f32(gate),
                   lm_cuda_f32(other));
    return true;
}

// ---- the handle and its workspace (lm_cuda_state_init / _free, state.cu) ----

#define WORKSPACE_BYTES ((size_t)32 << 20)

extern "C" lm_status lm_cuda_blas_init(lm_cuda_state *s, lm_error *err) {
    s->blas_api = (lm_cublaslt *)calloc(1, sizeof *s->blas_api);
    if (!s->blas_api) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    lm_status ls = lm_cublaslt_load(s->blas_api, err);
    if (ls != LM_OK) {
        free(s->blas_api);
        s->blas_api = NULL;
        return ls;
    }
    cublasLtHandle_t handle = NULL;
    cublasStatus_t st = s->blas_api->Create(&handle);
    if (st != CUBLAS_STATUS_SUCCESS)
        return lm_fail(err, LM_ERR_INTERNAL, "cuda: cannot create a cuBLASLt handle: %s",
                       s->blas_api->GetStatusString(st));
    s->blas = handle;
    cudaError_t e = cudaMalloc(&s->blas_workspace, WORKSPACE_BYTES);
    if (e != cudaSuccess) {
        s->blas_workspace = NULL;
        return lm_fail(err, LM_ERR_NOMEM, "cuda: cannot allocate cuBLASLt's %zu-byte workspace: %s",
                       WORKSPACE_BYTES, cudaGetErrorString(e));
    }
    s->blas_workspace_bytes = WORKSPACE_BYTES;
    return LM_OK;
}

extern "C" lm_status lm_cuda_set_compute_dtype(lm_backend *be, lm_dtype dtype, lm_error *err) {
    if (dtype != LM_DTYPE_F32 && dtype != LM_DTYPE_BF16)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "cuda computes in f32 or bf16");
    lm_cuda_state_of(be)->blas_matmul = dtype == LM_DTYPE_BF16;
    return LM_OK;
}

extern "C" lm_dtype lm_cuda_compute_dtype(const lm_backend *be) {
    return ((const lm_cuda_state *)be->impl)->blas_matmul ? LM_DTYPE_BF16 : LM_DTYPE_F32;
}

extern "C" void lm_cuda_blas_free(lm_cuda_state *s) {
    if (s->blas) s->blas_api->Destroy((cublasLtHandle_t)s->blas);
    s->blas = NULL;
    if (s->blas_api) lm_cublaslt_unload(s->blas_api);
    free(s->blas_api);
    s->blas_api = NULL;
}
