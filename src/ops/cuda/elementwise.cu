// Elementwise ops: one thread per element (grid-stride), float32; silu_mul
// and add four elements a thread where their rows start on 16 bytes.
#include <math.h>
#include <stdint.h>

#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define THREADS 256

// silu_mul and add take 4 elements a thread with 16-byte loads where every
// pointer starts on 16 bytes (a 9B-shape prefill's silu_mul moves 300 MB a
// step); each element is the same expression either way, so the same bits.
static bool in_quads(const void *a, const void *b, const void *c) {
    return (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 && (uintptr_t)c % 16 == 0;
}
static unsigned quad_blocks(int64_t n, bool quads) { return lm_cuda_blocks(quads ? (n + 3) / 4 : n, THREADS); }

__global__ static void silu_mul_kernel(float *out, const float *gate, const float *up, int64_t n, bool quads) {
    lm_cuda_let_next_then_wait();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t i = first;
    if (quads) {
        for (; i < n / 4; i += stride) {
            float4 g = ((const float4 *)gate)[i], u = ((const float4 *)up)[i];
            ((float4 *)out)[i] =
                make_float4(lm_silu(g.x) * u.x, lm_silu(g.y) * u.y, lm_silu(g.z) * u.z, lm_silu(g.w) * u.w);
        }
        i = n / 4 * 4 + first;
    }
    for (; i < n; i += stride) out[i] = lm_silu(gate[i]) * up[i];
}
void lm_cuda_silu_mul(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n) {
    if (n <= 0) return;
    bool quads = in_quads(lm_cuda_f32(out), lm_cuda_f32(gate), lm_cuda_f32(up));
    lm_cuda_launch(be, "silu_mul", silu_mul_kernel, quad_blocks(n, quads), THREADS, 0, lm_cuda_f32(out),
                   lm_cuda_f32(gate), lm_cuda_f32(up), n, quads);
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

__global__ static void add_kernel(float *x, const float *y, int64_t n, bool quads) {
    lm_cuda_let_next_then_wait();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t i = first;
    if (quads) {
        for (; i < n / 4; i += stride) {
            float4 a = ((const float4 *)x)[i], b = ((const float4 *)y)[i];
            ((float4 *)x)[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
        }
        i = n / 4 * 4 + first;
    }
    for (; i < n; i += stride) x[i] += y[i];
}
void lm_cuda_add(lm_backend *be, lm_mem x, lm_mem y, int64_t n) {
    if (n <= 0) return;
    bool quads = in_quads(lm_cuda_f32(x), lm_cuda_f32(y), lm_cuda_f32(x));
    lm_cuda_launch(be, "add", add_kernel, quad_blocks(n, quads), THREADS, 0, lm_cuda_f32(x), lm_cuda_f32(y), n,
                   quads);
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
