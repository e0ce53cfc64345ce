// The card's two ceilings, measured (docs/PERF.md): device-to-device copy
// bandwidth (bytes read + written) and the bf16 and FP8 matrix rates through
// cuBLASLt (float32 accumulate), on random data, median of repeats timed
// with events after a warm-up.  Build: make cuda-probe; run: build/cuda_probe.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                    \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define CHECK_LT(call)                                                                     \
    do {                                                                                   \
        cublasStatus_t s_ = (call);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            fprintf(stderr, "%s: %s\n", #call, cublasLtGetStatusString(s_));               \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

__global__ static void fill_random(__nv_bfloat16 *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 13;
        x *= 0x5bd1e995u;
        x ^= x >> 15;
        p[i] = __float2bfloat16(((float)(x & 0xffff) / 32768.0f - 1.0f) * 0.05f);
    }
}

// Small E4M3 values of both signs (codes below 0x38: |v| < 1, no NaN).
__global__ static void fill_e4m3(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 13;
        x *= 0x5bd1e995u;
        x ^= x >> 15;
        p[i] = (unsigned char)((x & 0x80u) | ((x >> 8) % 0x38u));
    }
}
static int compare(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(void) {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
           (double)prop.totalGlobalMem / (1 << 30));
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    enum { REPEATS = 20 };
    float ms[REPEATS];

    // copy: 4 GiB source, two destinations alternated (so no L2 reuse)
    size_t bytes = (size_t)4 << 30;
    __nv_bfloat16 *src, *dst;
    CHECK(cudaMalloc(&src, bytes));
    CHECK(cudaMalloc(&dst, bytes));
    fill_random<<<4096, 256>>>(src, bytes / 2, 1);
    CHECK(cudaGetLastError());
    for (int w = 0; w < 3; w++) CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    for (int r = 0; r < REPEATS; r++) {
        CHECK(cudaEventRecord(t0));
        CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
        CHECK(cudaEventRecord(t1));
        CHECK(cudaEventSynchronize(t1));
        CHECK(cudaEventElapsedTime(&ms[r], t0, t1));
    }
    qsort(ms, REPEATS, sizeof ms[0], compare);
    printf("copy: %.2f GiB in %.3f ms (median of %d) = %.0f GB/s read + written\n", (double)bytes / (1 << 30),
           ms[REPEATS / 2], REPEATS, 2.0 * (double)bytes / (ms[REPEATS / 2] * 1e-3) / 1e9);
    CHECK(cudaFree(dst));
    CHECK(cudaFree(src));

    // bf16 matmul 8192^3 (float32 output), then FP8 E4M3 (bf16 output: the
    // FP8 tensor cores' rate, issue 50), both float32 accumulate
    const int M = 8192, N = 8192, K = 8192;
    void *A, *B, *C, *workspace;
    size_t ws_bytes = (size_t)64 << 20;
    CHECK(cudaMalloc(&A, (size_t)M * K * 2));
    CHECK(cudaMalloc(&B, (size_t)K * N * 2));
    CHECK(cudaMalloc(&C, (size_t)M * N * 4));
    CHECK(cudaMalloc(&workspace, ws_bytes));
    cublasLtHandle_t lt;
    CHECK_LT(cublasLtCreate(&lt));
    const struct {
        const char *name;
        cudaDataType_t in, out;
    } kinds[2] = {{"bf16 matmul", CUDA_R_16BF, CUDA_R_32F}, {"fp8 e4m3 matmul", CUDA_R_8F_E4M3, CUDA_R_16BF}};
    for (int k = 0; k < 2; k++) {
        if (kinds[k].in == CUDA_R_16BF) {
            fill_random<<<4096, 256>>>((__nv_bfloat16 *)A, (size_t)M * K, 2);
            fill_random<<<4096, 256>>>((__nv_bfloat16 *)B, (size_t)K * N, 3);
        } else {
            fill_e4m3<<<4096, 256>>>((unsigned char *)A, (size_t)M * K, 2);
            fill_e4m3<<<4096, 256>>>((unsigned char *)B, (size_t)K * N, 3);
        }
        CHECK(cudaGetLastError());
        cublasLtMatmulDesc_t desc;
        CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t trans = CUBLAS_OP_T, none = CUBLAS_OP_N;
        CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans));
        CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none));
        cublasLtMatrixLayout_t la, lb, lc;
        CHECK_LT(cublasLtMatrixLayoutCreate(&la, kinds[k].in, K, M, K));
        CHECK_LT(cublasLtMatrixLayoutCreate(&lb, kinds[k].in, K, N, K));
        CHECK_LT(cublasLtMatrixLayoutCreate(&lc, kinds[k].out, M, N, M));
        cublasLtMatmulPreference_t pref;
        CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
        CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof ws_bytes));
        cublasLtMatmulHeuristicResult_t heur;
        int found = 0;
        CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heur, &found));
        if (!found) {
            fprintf(stderr, "%s: no cuBLASLt algorithm\n", kinds[k].name);
            continue;
        }
        float alpha = 1, beta = 0;
        for (int w = 0; w < 3; w++)
            CHECK_LT(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &heur.algo, workspace,
                                    ws_bytes, 0));
        for (int r = 0; r < REPEATS; r++) {
            CHECK(cudaEventRecord(t0));
            CHECK_LT(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &heur.algo, workspace,
                                    ws_bytes, 0));
            CHECK(cudaEventRecord(t1));
            CHECK(cudaEventSynchronize(t1));
            CHECK(cudaEventElapsedTime(&ms[r], t0, t1));
        }
        qsort(ms, REPEATS, sizeof ms[0], compare);
        printf("%s %dx%dx%d (%s out): %.3f ms (median of %d) = %.0f TFLOP/s\n", kinds[k].name, M, N, K,
               kinds[k].out == CUDA_R_32F ? "float32" : "bf16", ms[REPEATS / 2], REPEATS,
               2.0 * M * N * (double)K / (ms[REPEATS / 2] * 1e-3) / 1e12);
    }
    return 0;
}
