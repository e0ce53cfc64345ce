// FP8_B128 weights on Hopper's FP8 tensor cores: y[n, rows] = x[n, cols] ·
// wᵀ for batches of 9+ rows under bf16 compute (the fast mode, where the
// bf16 products also round activations), the technique DeepGEMM uses:
//
//   1. x is quantized per 1 x 128 block (a token's 128 consecutive values):
//      scale = amax / 448, q = E4M3(x / scale) rounded to nearest even with
//      saturation (quantize_rows_kernel);
//   2. a block of 128 tokens x 128 output rows walks K in steps of 128 (one
//      scale of each side per step): the step's 4 x m16n8k32 E4M3 products
//      accumulate in float32 registers from zero, then each accumulator is
//      added to the total times the step's two scales (its token's and its
//      row's) — float32 accumulation, the scales applied once per 128.
//
// Tiles move global -> shared with cp.async (16 bytes a copy; two stages,
// the next step's tiles in flight while this one's products run), rows of
// 128 bytes with their 16-byte chunks XOR-swizzled by row (so ldmatrix's 8
// rows of a chunk hit 8 different bank groups), and reach the mma
// fragments through ldmatrix: 8-bit operands K-major on both sides are the
// b16 layout of the int8 m16n8k32 fragments (four bytes of K a register).
// Eight warps, 2 (tokens) x 4 (rows), each 64 tokens x 32 rows.
//
// Written, compiled, not yet run on a card: matmul.cu takes it only with
// LOOM_CUDA_FP8_MMA=1 until the op test has passed on one.
//
// Rows of w start on 16 bytes (cols a multiple of 512); the caller checks
// (matmul.cu, fp8_vector_ok).  Out-of-range tokens and rows load zeros and
// store nothing.
#include <cuda_fp8.h>
#include <stdint.h>

#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/matmul_fp8_mma.h"

#define TILE 128     // tokens and rows a block
#define STEP 128     // K a step: one scale block
#define THREADS 256  // 8 warps
#define STAGES 2
#define TILE_BYTES (TILE * STEP) // one operand's tile of E4M3

// Activations to E4M3 per 1 x 128 block: one warp a block, 4 values a lane.
__global__ static void __launch_bounds__(THREADS)
    quantize_rows_kernel(uint8_t *q, float *scales, const float *x, int n, int64_t cols) {
    lm_cuda_let_next_then_wait();
    int64_t blocks = cols / STEP, total = (int64_t)n * blocks;
    int lane = threadIdx.x % 32;
    for (int64_t b = (int64_t)blockIdx.x * (THREADS / 32) + threadIdx.x / 32; b < total;
         b += (int64_t)gridDim.x * (THREADS / 32)) {
        int64_t t = b / blocks, kb = b % blocks;
        const float4 v = ((const float4 *)(x + t * cols + kb * STEP))[lane];
        float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
        for (int off = 16; off > 0; off /= 2)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        float scale = amax > 0.0f ? amax / 448.0f : 0.0f, inv = amax > 0.0f ? 448.0f / amax : 0.0f;
        uint32_t word = 0;
        const float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
            word |= (uint32_t)__nv_cvt_float_to_fp8(vals[i] * inv, __NV_SATFINITE, __NV_E4M3) << (8 * i);
        ((uint32_t *)(q + t * cols + kb * STEP))[lane] = word;
        if (lane == 0) scales[t * blocks + kb] = scale;
    }
}

__device__ __forceinline__ static void mma_e4m3(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of (row, 16-byte chunk) in a swizzled 128-byte-row tile.
__device__ __forceinline__ static int swizzled(int row, int chunk) { return row * STEP + ((chunk ^ (row & 7)) << 4); }

struct fp8_stage {
    uint8_t a[TILE_BYTES], b[TILE_BYTES];
    float sa[TILE], sb[TILE];
};

// Step kb's tiles of x (tokens t0..) and w (rows o0..) into stage s.
__device__ static void load_step(fp8_stage *s, const uint8_t *xq, const float *xs, const uint8_t *w, int n,
                                 int64_t rows, int64_t cols, int64_t row_bytes, int t0, int64_t o0, int64_t kb) {
    int64_t blocks = cols / STEP;
    for (int i = threadIdx.x; i < TILE * (STEP / 16); i += THREADS) {
        int r = i / (STEP / 16), c = i % (STEP / 16);
        bool tok = t0 + r < n, out = o0 + r < rows;
        const uint8_t *ga = xq + (int64_t)(tok ? t0 + r : 0) * cols + kb * STEP + c * 16;
        const uint8_t *gb = w + (out ? o0 + r : 0) * row_bytes + kb * STEP + c * 16;
        lm_copy_async16(s->a + swizzled(r, c), ga, tok);
        lm_copy_async16(s->b + swizzled(r, c), gb, out);
    }
    if (threadIdx.x < TILE) {
        int r = threadIdx.x;
        bool tok = t0 + r < n, out = o0 + r < rows;
        lm_copy_async4(&s->sa[r], xs + (int64_t)(tok ? t0 + r : 0) * blocks + kb, tok);
        lm_copy_async4(&s->sb[r], (const float *)(w + (out ? o0 + r : 0) * row_bytes + cols) + kb, out);
    }
}

__global__ static void __launch_bounds__(THREADS, 1)
    fp8_gemm_kernel(float *y, const uint8_t *xq, const float *xs, const uint8_t *w, int n, int64_t rows,
                    int64_t cols) {
    extern __shared__ __align__(128) uint8_t smem[];
    fp8_stage *stage = (fp8_stage *)smem;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int wm = warp / 4, wn = warp % 4; // 64 tokens x 32 rows a warp
    int t0 = blockIdx.x * TILE;
    int64_t o0 = (int64_t)blockIdx.y * TILE, row_bytes = cols + cols / STEP * 4, steps = cols / STEP;
    float total[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                total[i][j][e] = 0.0f;
    lm_cuda_let_next_then_wait();
    load_step(&stage[0], xq, xs, w, n, rows, cols, row_bytes, t0, o0, 0);
    lm_copy_async_commit();
    for (int64_t kb = 0; kb < steps; kb++) {
        if (kb + 1 < steps) load_step(&stage[(kb + 1) % STAGES], xq, xs, w, n, rows, cols, row_bytes, t0, o0, kb + 1);
        lm_copy_async_commit();
        lm_copy_async_wait_all_but_one();
        __syncthreads();
        const fp8_stage *s = &stage[kb % STAGES];
        float part[4][4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    part[i][j][e] = 0.0f;
#pragma unroll
        for (int k = 0; k < STEP / 32; k++) {
            uint32_t a[4][4], b[4][2];
            // A: matrices (rows 0-7, k 0-15), (rows 8-15, k 0-15), (rows 0-7, k 16-31), (rows 8-15, k 16-31)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = wm * 64 + i * 16 + (lane % 8) + ((lane / 8) % 2) * 8, c = k * 2 + lane / 16;
                lm_load_matrix_x4(a[i], s->a + swizzled(r, c));
            }
            // B: two n8 tiles a load: (n 0-7, k 0-15), (n 0-7, k 16-31), (n 8-15, k 0-15), (n 8-15, k 16-31)
#pragma unroll
            for (int j = 0; j < 4; j += 2) {
                uint32_t q[4];
                int r = wn * 32 + j * 8 + (lane % 8) + (lane / 16) * 8, c = k * 2 + (lane / 8) % 2;
                lm_load_matrix_x4(q, s->b + swizzled(r, c));
                b[j][0] = q[0], b[j][1] = q[1], b[j + 1][0] = q[2], b[j + 1][1] = q[3];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    mma_e4m3(part[i][j], a[i], b[j][0], b[j][1]);
        }
        // total += part · (token's scale · row's scale): c0,c1 token g, c2,c3 token g + 8; rows 2·tig, +1
        int g = lane / 4, tig = lane % 4;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float sa0 = s->sa[wm * 64 + i * 16 + g], sa1 = s->sa[wm * 64 + i * 16 + g + 8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float sb0 = s->sb[wn * 32 + j * 8 + 2 * tig], sb1 = s->sb[wn * 32 + j * 8 + 2 * tig + 1];
                total[i][j][0] = __fmaf_rn(part[i][j][0], sa0 * sb0, total[i][j][0]);
                total[i][j][1] = __fmaf_rn(part[i][j][1], sa0 * sb1, total[i][j][1]);
                total[i][j][2] = __fmaf_rn(part[i][j][2], sa1 * sb0, total[i][j][2]);
                total[i][j][3] = __fmaf_rn(part[i][j][3], sa1 * sb1, total[i][j][3]);
            }
        }
        __syncthreads(); // the stage is loaded again two steps on
    }
    int g = lane / 4, tig = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int t = t0 + wm * 64 + i * 16 + g + (e / 2) * 8;
                int64_t o = o0 + wn * 32 + j * 8 + 2 * tig + e % 2;
                if (t < n && o < rows) y[(int64_t)t * rows + o] = total[i][j][e];
            }
}

size_t lm_cuda_fp8_gemm_scratch(int n, int64_t cols) {
    return (size_t)n * (size_t)cols + (size_t)n * (size_t)(cols / STEP) * sizeof(float) + 16;
}

bool lm_cuda_fp8_gemm(lm_backend *be, float *y, const float *x, void *scratch, const uint8_t *w, int n,
                      int64_t rows, int64_t cols) {
    if (n <= 0 || rows <= 0 || cols <= 0 || cols % 512 != 0 || ((uintptr_t)x % 16) != 0 ||
        ((uintptr_t)w % 16) != 0 || ((uintptr_t)scratch % 16) != 0)
        return false;
    size_t smem = sizeof(fp8_stage) * STAGES;
    static_assert(sizeof(fp8_stage) * STAGES <= 227 * 1024, "the stages fit in shared memory");
    if (cudaFuncSetAttribute(fp8_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return false;
    uint8_t *xq = (uint8_t *)scratch;
    float *xs = (float *)(xq + ((size_t)n * (size_t)cols + 15) / 16 * 16);
    int64_t blocks = (int64_t)n * (cols / STEP);
    int64_t qblocks = (blocks + THREADS / 32 - 1) / (THREADS / 32);
    lm_cuda_launch(be, "matmul (fp8: x to e4m3)", quantize_rows_kernel, (unsigned)(qblocks < 65535 ? qblocks : 65535),
                   THREADS, 0, xq, xs, x, n, cols);
    dim3 grid((unsigned)((n + TILE - 1) / TILE), (unsigned)((rows + TILE - 1) / TILE));
    lm_cuda_launch(be, "matmul (fp8 tensor cores)", fp8_gemm_kernel, grid, THREADS, smem, y,
                   (const uint8_t *)xq, (const float *)xs, w, n, rows, cols);
    return true;
}
