// Moving rows, argmax and the embedding lookup.
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define THREADS 256

__global__ static void copy_rows_kernel(float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                                        int width) {
    lm_cuda_let_next_then_wait();
    int64_t r = blockIdx.x;
    for (int c = threadIdx.x; c < width; c += blockDim.x) dst[r * dst_stride + c] = src[r * src_stride + c];
}
void lm_cuda_copy_rows(lm_backend *be, lm_mem dst, int64_t dst_stride, lm_mem src, int64_t src_stride,
                       int rows, int width) {
    if (rows <= 0 || width <= 0) return;
    lm_cuda_launch(be, "copy_rows", copy_rows_kernel, rows, THREADS, 0, lm_cuda_f32(dst), dst_stride,
                   lm_cuda_f32(src), src_stride, width);
}

__global__ static void gather_rows_kernel(float *dst, const float *src, const int32_t *ids, int width) {
    lm_cuda_let_next_then_wait();
    int64_t r = blockIdx.x, from = ids[r];
    for (int c = threadIdx.x; c < width; c += blockDim.x) dst[r * width + c] = src[from * width + c];
}
void lm_cuda_gather_rows(lm_backend *be, lm_mem dst, lm_mem src, lm_mem row_ids, int n, int width) {
    if (n <= 0 || width <= 0) return;
    lm_cuda_launch(be, "gather_rows", gather_rows_kernel, n, THREADS, 0, lm_cuda_f32(dst), lm_cuda_f32(src),
                   lm_cuda_i32(row_ids), width);
}

// One block of 1024 threads per row, each thread keeping its best (value,
// lowest index), NaN never winning over a number, reading the row with
// lm_for_each_in_row (a row of Qwen's vocabulary is 1 MB: with 256 threads
// and 4-byte loads one block took about 400 us of it, with one 16-byte
// load a thread in flight about 30), then a warp-shuffle tree and the
// warps' bests by the first warp.  The winner does not depend on the order
// of comparisons.
#define ARGMAX_THREADS 1024
__global__ static void __launch_bounds__(ARGMAX_THREADS) argmax_kernel(int32_t *ids, const float *x, int n) {
    lm_cuda_let_next_then_wait();
    __shared__ float sv[ARGMAX_THREADS / 32];
    __shared__ int si[ARGMAX_THREADS / 32];
    const float *row = x + (int64_t)blockIdx.x * n;
    float bv = NAN; /* nothing yet: every number beats it */
    int bi = 0x7fffffff;
    lm_for_each_in_row<ARGMAX_THREADS>(row, n, [&](float v, int i) {
        if (lm_argmax_better(v, i, bv, bi)) bv = v, bi = i;
    });
    for (int off = 16; off > 0; off /= 2) {
        float ov = __shfl_down_sync(0xffffffffu, bv, off);
        int oi = __shfl_down_sync(0xffffffffu, bi, off);
        if (lm_argmax_better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        bv = sv[lane];
        bi = si[lane];
        for (int off = 16; off > 0; off /= 2) {
            float ov = __shfl_down_sync(0xffffffffu, bv, off);
            int oi = __shfl_down_sync(0xffffffffu, bi, off);
            if (lm_argmax_better(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        if (lane == 0) ids[blockIdx.x] = isnan(bv) ? 0 : bi;
    }
}
void lm_cuda_argmax_rows(lm_backend *be, lm_mem ids, lm_mem x, int rows, int n) {
    if (rows <= 0) return;
    lm_cuda_launch(be, "argmax_rows", argmax_kernel, rows, ARGMAX_THREADS, 0, lm_cuda_i32(ids), lm_cuda_f32(x), n);
}

__global__ static void embed_kernel(float *out, const int32_t *ids, const void *table, int dtype, int64_t dim) {
    lm_cuda_let_next_then_wait();
    int64_t r = blockIdx.x, id = ids[r];
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
        out[r * dim + c] = lm_weight_in(table, dtype, dim, id * dim + c);
}
// 1024 threads a row, so a 4096-wide row is 4 loads a thread (256
// threads: 16 in a row, 22 us a call in the H200 profile of a 9B decode
// step, at the head of every step).
#define EMBED_THREADS 1024
void lm_cuda_embed(lm_backend *be, lm_mem out, lm_mem ids, int n, const lm_matrix *table) {
    if (n <= 0) return;
    lm_cuda_launch(be, "embed", embed_kernel, n, EMBED_THREADS, 0, lm_cuda_f32(out), lm_cuda_i32(ids),
                   lm_cuda_ptr(table->data), (int)table->dtype, table->cols);
}
