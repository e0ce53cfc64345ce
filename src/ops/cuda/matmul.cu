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
// depend on the batch (batched == alone, bit for bit, as on the cpu).
// cuBLASLt (LOOM_CUDA_MATMUL=cublaslt when the backend is made) rounds the
// activations to 16 bits and picks its algorithm by shape, so it is faster
// and neither.  A tensor-core kernel that is both is the next step.
//
// Later: the heuristic query runs on every call (some microseconds); a small
// cache by (dtype, m, n, k, alignments) would remove it.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_state.h"

#define THREADS 256

// ---- the fallback: one warp per output element, float32 accumulation ----

__device__ static float weight_at(const void *w, int dtype, int64_t i) {
    if (dtype == LM_DTYPE_BF16) return __uint_as_float((uint32_t)((const uint16_t *)w)[i] << 16);
    if (dtype == LM_DTYPE_F16) return __half2float(((const __half *)w)[i]);
    return ((const float *)w)[i];
}

__global__ static void matmul_simple_kernel(float *y, const float *x, const void *w, int dtype, int n,
                                            int64_t rows, int64_t cols) {
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= (int64_t)n * rows) return;
    int64_t t = warp / rows, o = warp % rows;
    const float *xt = x + t * cols;
    float acc = 0;
    for (int64_t i = lane; i < cols; i += 32) acc += weight_at(w, dtype, o * cols + i) * xt[i];
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) y[t * rows + o] = acc;
}

// bf16 weights with cols a multiple of 8 and 16-byte aligned rows: each lane
// reads 8 weights (one 16-byte load) and 8 activations per step, lanes
// strided by 8 columns; the same order for an output whatever n is.
__global__ static void matmul_bf16x8_kernel(float *y, const float *x, const uint4 *w, int n, int64_t rows,
                                            int64_t cols) {
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= (int64_t)n * rows) return;
    int64_t t = warp / rows, o = warp % rows, groups = cols / 8;
    const float4 *xt = (const float4 *)(x + t * cols);
    const uint4 *wo = w + o * groups;
    float acc = 0;
    for (int64_t g = lane; g < groups; g += 32) {
        uint4 p = wo[g];
        float4 a = xt[2 * g], b = xt[2 * g + 1];
        acc += __uint_as_float(p.x << 16) * a.x + __uint_as_float(p.x & 0xffff0000u) * a.y +
               __uint_as_float(p.y << 16) * a.z + __uint_as_float(p.y & 0xffff0000u) * a.w +
               __uint_as_float(p.z << 16) * b.x + __uint_as_float(p.z & 0xffff0000u) * b.y +
               __uint_as_float(p.w << 16) * b.z + __uint_as_float(p.w & 0xffff0000u) * b.w;
    }
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) y[t * rows + o] = acc;
}

static void matmul_simple(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    int64_t warps = (int64_t)n * w->rows;
    const void *wp = lm_cuda_ptr(w->data);
    const void *xp = lm_cuda_ptr(x);
    bool vector = w->dtype == LM_DTYPE_BF16 && w->cols % 8 == 0 && ((uintptr_t)wp % 16) == 0 &&
                  ((uintptr_t)xp % 16) == 0;
    if (vector)
        matmul_bf16x8_kernel<<<lm_cuda_blocks(warps * 32, THREADS), THREADS, 0, lm_cuda_stream(be)>>>(
            lm_cuda_f32(y), lm_cuda_f32(x), (const uint4 *)wp, n, w->rows, w->cols);
    else
        matmul_simple_kernel<<<lm_cuda_blocks(warps * 32, THREADS), THREADS, 0, lm_cuda_stream(be)>>>(
            lm_cuda_f32(y), lm_cuda_f32(x), wp, (int)w->dtype, n, w->rows, w->cols);
    LM_CUDA_LAUNCHED(be, "matmul");
}

// ---- x rounded to 16 bits ----

__global__ static void to_bf16_kernel(__nv_bfloat16 *out, const float *x, int64_t count) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(x[i]);
}
__global__ static void to_f16_kernel(__half *out, const float *x, int64_t count) {
    // f16 saturates at 65504: activations beyond it become inf (rare in
    // practice; bf16 weights, the usual case, have float32's range).
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2half_rn(x[i]);
}

// The scratch for x in 16 bits, at least `bytes`.  Grown when a larger size
// is first seen: waits for the stream (queued matmuls may still read the old
// one), frees and cudaMallocs, so the first call of each new largest size
// pays a synchronization and an allocation.  Better later: size it when the
// context is made (the engine knows its largest batch and width).
static bool scratch_at_least(lm_backend *be, size_t bytes) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    if (s->scratch_bytes >= bytes) return true;
    lm_cuda_note_error(be, cudaStreamSynchronize(s->stream), "matmul scratch");
    cudaFree(s->scratch);
    s->scratch = NULL;
    s->scratch_bytes = 0;
    if (cudaMalloc(&s->scratch, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); // not sticky: the fallback kernel runs instead
        s->scratch = NULL;
        return false;
    }
    s->scratch_bytes = bytes;
    return true;
}

// The largest power of two (up to 256) dividing a device address: what
// cuBLASLt may assume of a pointer (its default is 256).
static uint32_t alignment_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && a % align) align /= 2;
    return align;
}

// Creates the descriptors, asks the heuristic for one algorithm, runs it.
// False (and nothing queued) when cuBLASLt declines.
static bool matmul_lt(lm_backend *be, float *y, const void *a, const void *b, cudaDataType_t type,
                      int64_t m, int64_t n, int64_t k) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    cublasLtHandle_t handle = (cublasLtHandle_t)s->blas;
    if (!handle) return false;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ly = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    bool ran = false;
    cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    uint64_t workspace = s->blas_workspace_bytes;
    uint32_t align_a = alignment_of(a), align_b = alignment_of(b), align_y = alignment_of(y);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    const float alpha = 1.0f, beta = 0.0f;
    if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) goto done;
    if (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof transa) ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof transb))
        goto done;
    // A as stored: k x m column-major (w's rows of k), read transposed.
    if (cublasLtMatrixLayoutCreate(&la, type, (uint64_t)k, (uint64_t)m, k) ||
        cublasLtMatrixLayoutCreate(&lb, type, (uint64_t)k, (uint64_t)n, k) ||
        cublasLtMatrixLayoutCreate(&ly, CUDA_R_32F, (uint64_t)m, (uint64_t)n, m))
        goto done;
    if (cublasLtMatmulPreferenceCreate(&pref) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                             sizeof workspace) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                             sizeof align_a) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                             sizeof align_b) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_y,
                                             sizeof align_y) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_y,
                                             sizeof align_y))
        goto done;
    if (cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, ly, ly, pref, 1, &result, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found < 1)
        goto done;
    // C = y with beta 0: never read.
    if (cublasLtMatmul(handle, op, &alpha, a, la, b, lb, &beta, y, ly, y, ly, &result.algo,
                       s->blas_workspace, s->blas_workspace_bytes, s->stream) != CUBLAS_STATUS_SUCCESS)
        goto done;
    ran = true;
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ly) cublasLtMatrixLayoutDestroy(ly);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return ran;
}

extern "C" void lm_cuda_matmul(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    int64_t rows = w->rows, cols = w->cols;
    if (n <= 0 || rows <= 0) return;
    if (cols <= 0) { // an empty sum
        lm_cuda_note_error(be, cudaMemsetAsync(lm_cuda_ptr(y), 0, (size_t)n * (size_t)rows * sizeof(float),
                                               lm_cuda_stream(be)), "matmul");
        return;
    }
    if (!lm_cuda_state_of(be)->blas_matmul) {
        matmul_simple(be, y, x, n, w);
        return;
    }
    if (w->dtype == LM_DTYPE_F32) {
        if (!matmul_lt(be, lm_cuda_f32(y), lm_cuda_ptr(w->data), lm_cuda_ptr(x), CUDA_R_32F, rows, n, cols))
            matmul_simple(be, y, x, n, w);
        return;
    }
    int64_t count = (int64_t)n * cols;
    if (!scratch_at_least(be, (size_t)count * 2)) {
        matmul_simple(be, y, x, n, w);
        return;
    }
    void *x16 = lm_cuda_state_of(be)->scratch;
    bool bf16 = w->dtype == LM_DTYPE_BF16;
    if (bf16)
        to_bf16_kernel<<<lm_cuda_blocks(count, THREADS), THREADS, 0, lm_cuda_stream(be)>>>(
            (__nv_bfloat16 *)x16, lm_cuda_f32(x), count);
    else
        to_f16_kernel<<<lm_cuda_blocks(count, THREADS), THREADS, 0, lm_cuda_stream(be)>>>(
            (__half *)x16, lm_cuda_f32(x), count);
    LM_CUDA_LAUNCHED(be, "matmul (activations to 16 bits)");
    if (!matmul_lt(be, lm_cuda_f32(y), lm_cuda_ptr(w->data), x16, bf16 ? CUDA_R_16BF : CUDA_R_16F, rows, n,
                   cols))
        matmul_simple(be, y, x, n, w);
}

// ---- the handle and its workspace (lm_cuda_state_init / _free, state.cu) ----

#define WORKSPACE_BYTES ((size_t)32 << 20)

extern "C" lm_status lm_cuda_blas_init(lm_cuda_state *s, lm_error *err) {
    cublasLtHandle_t handle = NULL;
    cublasStatus_t st = cublasLtCreate(&handle);
    if (st != CUBLAS_STATUS_SUCCESS)
        return lm_fail(err, LM_ERR_INTERNAL, "cuda: cannot create a cuBLASLt handle: %s", cublasLtGetStatusString(st));
    s->blas = handle;
    cudaError_t e = cudaMalloc(&s->blas_workspace, WORKSPACE_BYTES);
    if (e != cudaSuccess) {
        s->blas_workspace = NULL;
        return lm_fail(err, LM_ERR_NOMEM, "cuda: cannot allocate cuBLASLt's %zu-byte workspace: %s",
                       WORKSPACE_BYTES, cudaGetErrorString(e));
    }
    s->blas_workspace_bytes = WORKSPACE_BYTES;
    const char *mode = getenv("LOOM_CUDA_MATMUL");
    s->blas_matmul = mode && strcmp(mode, "cublaslt") == 0;
    return LM_OK;
}

extern "C" void lm_cuda_blas_free(lm_cuda_state *s) {
    if (s->blas) cublasLtDestroy((cublasLtHandle_t)s->blas);
    s->blas = NULL;
}
