/* The row reduction the norms share (norms.cu, and gdn_prepare in gdn.cu,
 * which must sum a row exactly as l2norm_scale does): how many threads a
 * row's block has, and the block-wide sum.  Private to src/ops/cuda. */
#ifndef LOOM_OPS_CUDA_BLOCK_REDUCE_H
#define LOOM_OPS_CUDA_BLOCK_REDUCE_H

/* Threads per row block: enough for wide rows, no idle warps for narrow
 * ones.  The order of a row's sums depends on it: kernels that must agree
 * bit for bit use the same count. */
static inline int lm_cuda_row_threads(int dim) {
    if (dim >= 4096) return 1024;
    if (dim >= 1024) return 512;
    if (dim >= 256) return 256;
    return dim > 64 ? 128 : 64; /* at least two warps: lm_cuda_block_sum wants a multiple of 32 */
}

#ifdef __CUDACC__
/* The warp-shuffle tree of the block sums: lane 0 ends with the warp's sum. */
__device__ static inline float lm_cuda_warp_tree(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

/* The block sums' second stage, called by every thread once partial[w]
 * holds warp w's sum for w < warps: the first warp adds them with the same
 * tree, and the total is returned to every thread. */
__device__ static inline float lm_cuda_warp_partials_sum(const float *partial, int warps) {
    __shared__ float total;
    __syncthreads();
    if (threadIdx.x / 32 == 0) {
        int lane = threadIdx.x % 32;
        float v = lm_cuda_warp_tree(lane < warps ? partial[lane] : 0.0f);
        if (lane == 0) total = v;
    }
    __syncthreads();
    float t = total;
    __syncthreads(); /* partial and total may be reused by the next call */
    return t;
}

/* The sum of v over the block's first `warps` warps, returned to every
 * thread (all of the block's threads call it; the others' v is not read):
 * a warp-shuffle tree, then the warps' sums by the first warp.  Exactly the
 * sums lm_cuda_block_sum makes in a block of that many warps, so a kernel
 * whose first warps hold a row can give the bits of a row kernel with fewer
 * threads. */
__device__ static inline float lm_cuda_first_warps_sum(float v, int warps) {
    __shared__ float partial[32];
    v = lm_cuda_warp_tree(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    return lm_cuda_warp_partials_sum(partial, warps);
}

/* The sum of every thread's v, returned to all threads of the block
 * (blockDim.x a multiple of 32, at most 1024). */
__device__ static inline float lm_cuda_block_sum(float v) { return lm_cuda_first_warps_sum(v, blockDim.x / 32); }

/* Σ x_i² over a row of dim floats, summed by the block as rmsnorm sums it
 * (a kernel that must give rmsnorm's bits calls this with as many
 * threads, lm_cuda_row_threads(dim)). */
__device__ static inline float lm_cuda_row_sum_squares(const float *x, int dim) {
    float ss = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss = __fmaf_rn(x[i], x[i], ss);
    return lm_cuda_block_sum(ss);
}

/* lm_cuda_row_sum_squares as a block of `threads` threads sums it (a
 * multiple of 32, at most 1024), by a block of any multiple of 32 threads:
 * warp w plays the warps w, w + warps, ... of that block in turn, each
 * lane summing that warp's lane's elements and the warp's shuffle tree
 * adding them, and the warps' sums are added as lm_cuda_block_sum adds
 * them: the same operations in the same order, so the same bits.  For a
 * kernel whose blocks have another size that must give rmsnorm's norm
 * (the products that norm their input, matmul.cu).  Returned to all
 * threads. */
__device__ static inline float lm_cuda_row_sum_squares_as(const float *x, int dim, int threads) {
    __shared__ float partial[32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32, played = threads / 32;
    for (int pw = warp; pw < played; pw += warps) {
        float ss = 0;
        for (int i = pw * 32 + lane; i < dim; i += threads) ss = __fmaf_rn(x[i], x[i], ss);
        ss = lm_cuda_warp_tree(ss);
        if (lane == 0) partial[pw] = ss;
    }
    return lm_cuda_warp_partials_sum(partial, played);
}
#endif

#endif
