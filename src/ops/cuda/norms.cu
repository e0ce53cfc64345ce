// Row norms (rmsnorm, gated_rmsnorm, l2norm_scale, layernorm) and
// add_weighted_rows.  One block per row; the row's sums are float32 per
// thread, then a warp-shuffle and shared-memory tree (the reference sums in
// float64 in index order: the results agree to float32 rounding, not bit
// for bit).
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/block_reduce.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define THREADS 256

// rmsnorm, and with z the gated one: out = x · inv · w (· silu(z)).  out
// may alias x: each element is read (for the sum) before any is written,
// and the writing pass reads only its own element.
__global__ static void rmsnorm_kernel(float *out, const float *x, const float *z, const float *w, int dim,
                                      float eps) {
    const held_weight hw = hold_weight(w, dim);
    lm_cuda_let_next_then_wait();
    int64_t r = blockIdx.x;
    const float *xr = x + r * dim;
    float *yr = out + r * dim;
    float inv = 1.0f / sqrtf(lm_cuda_row_sum_squares(xr, dim) / (float)dim + eps);
    if (z) {
        const float *zr = z + r * dim;
#pragma unroll NORM_W_HELD
        for (int i = threadIdx.x, k = 0; i < dim; i += blockDim.x, k++)
            yr[i] = xr[i] * inv * weight_at(hw, w, k, i) * lm_silu(zr[i]);
    } else {
#pragma unroll NORM_W_HELD
        for (int i = threadIdx.x, k = 0; i < dim; i += blockDim.x, k++) yr[i] = xr[i] * inv * weight_at(hw, w, k, i);
    }
}

// add_rmsnorm: h += delta, then out = rmsnorm(h) · w.  Each thread adds
// the elements it later sums, in sum_squares's order, so h and out are the
// bits add then rmsnorm give; out may alias delta (each element is read
// and written by one thread, read first).
__global__ static void add_rmsnorm_kernel(float *out, float *h, const float *delta, const float *w, int dim,
                                          float eps) {
    const held_weight hw = hold_weight(w, dim);
    lm_cuda_let_next_then_wait();
    int64_t r = blockIdx.x;
    float *hr = h + r * dim;
    const float *dr = delta + r * dim;
    float *yr = out + r * dim;
    float ss = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = hr[i] + dr[i];
        hr[i] = v;
        ss = __fmaf_rn(v, v, ss); /* as lm_cuda_row_sum_squares */
    }
    float inv = 1.0f / sqrtf(lm_cuda_block_sum(ss) / (float)dim + eps);
#pragma unroll NORM_W_HELD
    for (int i = threadIdx.x, k = 0; i < dim; i += blockDim.x, k++) yr[i] = hr[i] * inv * weight_at(hw, w, k, i);
}

extern "C" void lm_cuda_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, int rows, int dim,
                                float eps) {
    if (rows <= 0 || dim <= 0) return;
    lm_cuda_launch(be, "rmsnorm", rmsnorm_kernel, rows, lm_cuda_row_threads(dim), 0, lm_cuda_f32(out), lm_cuda_f32(x),
                   nullptr, lm_cuda_f32(weight), dim, eps);
}

extern "C" void lm_cuda_add_rmsnorm(lm_backend *be, lm_mem out, lm_mem h, lm_mem delta, lm_mem weight, int rows,
                                    int dim, float eps) {
    if (rows <= 0 || dim <= 0) return;
    lm_cuda_launch(be, "add_rmsnorm", add_rmsnorm_kernel, rows, lm_cuda_row_threads(dim), 0, lm_cuda_f32(out),
                   lm_cuda_f32(h), lm_cuda_f32(delta), lm_cuda_f32(weight), dim, eps);
}

extern "C" void lm_cuda_gated_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem z, lm_mem weight, int rows,
                                      int dim, float eps) {
    if (rows <= 0 || dim <= 0) return;
    lm_cuda_launch(be, "gated_rmsnorm", rmsnorm_kernel, rows, lm_cuda_row_threads(dim), 0, lm_cuda_f32(out),
                   lm_cuda_f32(x), lm_cuda_f32(z), lm_cuda_f32(weight), dim, eps);
}

__global__ static void l2norm_scale_kernel(float *x, int dim, float eps, float scale) {
    lm_cuda_let_next_then_wait();
    float *xr = x + (int64_t)blockIdx.x * dim;
    float f = 1.0f / sqrtf(lm_cuda_row_sum_squares(xr, dim) + eps) * scale;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) xr[i] *= f;
}

extern "C" void lm_cuda_l2norm_scale(lm_backend *be, lm_mem x, int rows, int dim, float eps, float scale) {
    if (rows <= 0 || dim <= 0) return;
    lm_cuda_launch(be, "l2norm_scale", l2norm_scale_kernel, rows, lm_cuda_row_threads(dim), 0, lm_cuda_f32(x), dim,
                   eps, scale);
}

// Two passes over the row (the mean, then the squares about it): no
// cancellation when the mean is far from 0.  Biased variance.
__global__ static void layernorm_kernel(float *out, const float *x, const float *w, const float *b, int dim,
                                        float eps) {
    lm_cuda_let_next_then_wait();
    int64_t r = blockIdx.x;
    const float *xr = x + r * dim;
    float *yr = out + r * dim;
    float s = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
    float mean = lm_cuda_block_sum(s) / (float)dim;
    float ss = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float d = xr[i] - mean;
        ss += d * d;
    }
    float inv = 1.0f / sqrtf(lm_cuda_block_sum(ss) / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

extern "C" void lm_cuda_layernorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, lm_mem bias, int rows,
                                  int dim, float eps) {
    if (rows <= 0 || dim <= 0) return;
    lm_cuda_launch(be, "layernorm", layernorm_kernel, rows, lm_cuda_row_threads(dim), 0, lm_cuda_f32(out),
                   lm_cuda_f32(x), lm_cuda_f32(weight), lm_cuda_f32(bias), dim, eps);
}

// ---- add_weighted_rows: x row i += Σ_k weights[i, k] · table row ids[i, k] ----

// One block per row of x; the sum over taps in k order, float32.
__global__ static void add_weighted_rows_kernel(float *x, const void *table, int dtype, int64_t width,
                                                const int32_t *ids, const float *weights, int taps) {
    lm_cuda_let_next_then_wait();
    int64_t i = blockIdx.x;
    const int32_t *id = ids + i * taps;
    const float *wt = weights + i * taps;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
        float acc = 0;
        for (int k = 0; k < taps; k++) acc += wt[k] * lm_weight_in(table, dtype, width, (int64_t)id[k] * width + c);
        x[i * width + c] += acc;
    }
}

extern "C" void lm_cuda_add_weighted_rows(lm_backend *be, lm_mem x, const lm_matrix *table, lm_mem ids,
                                          lm_mem weights, int n, int taps) {
    if (n <= 0 || taps <= 0 || table->cols <= 0) return; // no taps: nothing added
    lm_cuda_launch(be, "add_weighted_rows", add_weighted_rows_kernel, n, THREADS, 0, lm_cuda_f32(x),
                   lm_cuda_ptr(table->data), (int)table->dtype, table->cols, lm_cuda_i32(ids),
                   lm_cuda_f32(weights), taps);
}
