// Elementwise ops: one thread per element (grid-stride), float32.
#include <math.h>

#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define THREADS 256

__global__ static void silu_mul_kernel(float *out, const float *gate, const float *up, int64_t n) {
    lm_cuda_let_next_then_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        out[i] = lm_silu(gate[i]) * up[i];
    }
}
void lm_cuda_silu_mul(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n) {
    if (n <= 0) return;
    lm_cuda_launch(be, "silu_mul", silu_mul_kernel, lm_cuda_blocks(n, THREADS), THREADS, 0, lm_cuda_f32(out),
                   lm_cuda_f32(gate), lm_cuda_f32(up), n);
}

__global__ static void sigmoid_mul_kernel(float *x, const float *gate, int64_t n) {
    lm_cuda_let_next_then_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= 1.0f / (1.0f + expf(-gate[i]));
}
void lm_cuda_sigmoid_mul(lm_backend *be, lm_mem x, lm_mem gate, int64_t n) {
    if (n <= 0) return;
    lm_cuda_launch(be, "sigmoid_mul", sigmoid_mul_kernel, lm_cuda_blocks(n, THREADS), THREADS, 0,
                   lm_cuda_f32(x), lm_cuda_f32(gate), n);
}

__global__ static void add_kernel(float *x, const float *y, int64_t n) {
    lm_cuda_let_next_then_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}
void lm_cuda_add(lm_backend *be, lm_mem x, lm_mem y, int64_t n) {
    if (n <= 0) return;
    lm_cuda_launch(be, "add", add_kernel, lm_cuda_blocks(n, THREADS), THREADS, 0, lm_cuda_f32(x),
                   lm_cuda_f32(y), n);
}

__global__ static void add_rows_kernel(float *x, const float *bias, int64_t n, int width) {
    lm_cuda_let_next_then_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] += bias[i % width];
}
void lm_cuda_add_rows(lm_backend *be, lm_mem x, lm_mem bias, int rows, int width) {
    int64_t n = (int64_t)rows * width;
    if (n <= 0) return;
    lm_cuda_launch(be, "add_rows", add_rows_kernel, lm_cuda_blocks(n, THREADS), THREADS, 0, lm_cuda_f32(x),
                   lm_cuda_f32(bias), n, width);
}

__global__ static void sigmoid_scale_rows_kernel(float *x, const float *gate, int64_t n, int width) {
    lm_cuda_let_next_then_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= 1.0f / (1.0f + expf(-gate[i / width]));
}
void lm_cuda_sigmoid_scale_rows(lm_backend *be, lm_mem x, lm_mem gate, int rows, int width) {
    int64_t n = (int64_t)rows * width;
    if (n <= 0) return;
    lm_cuda_launch(be, "sigmoid_scale_rows", sigmoid_scale_rows_kernel, lm_cuda_blocks(n, THREADS), THREADS,
                   0, lm_cuda_f32(x), lm_cuda_f32(gate), n, width);
}

// GELU as the reference kernels write it (no cancellation for negative x):
// erf form 0.5·x·erfc(-x/√2); tanh form x·sigmoid(2u), u = √(2/π)(x + 0.044715x³).
__global__ static void gelu_kernel(float *x, int64_t n, int tanh_form) {
    lm_cuda_let_next_then_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i];
        if (tanh_form) {
            float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
            x[i] = v / (1.0f + expf(-2.0f * u));
        } else {
            x[i] = 0.5f * v * erfcf(-v * 0.7071067811865476f);
        }
    }
}
void lm_cuda_gelu(lm_backend *be, lm_mem x, int64_t n, lm_gelu_kind kind) {
    if (n <= 0) return;
    lm_cuda_launch(be, "gelu", gelu_kernel, lm_cuda_blocks(n, THREADS), THREADS, 0, lm_cuda_f32(x), n,
                   kind == LM_GELU_TANH);
}
