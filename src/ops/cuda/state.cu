// The backend's stream and handles.
#include "ops/cuda/cuda_state.h"

extern "C" lm_status lm_cuda_state_init(lm_cuda_state *s, lm_error *err) {
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return lm_fail(err, LM_ERR_INTERNAL, "cuda: cannot create a stream: %s", cudaGetErrorString(e));
    lm_status st = lm_cuda_queue_init(s, err);
    if (st != LM_OK) return st;
    return lm_cuda_blas_init(s, err); /* cuBLASLt handle and workspace (matmul.cu) */
}

extern "C" void lm_cuda_state_free(lm_cuda_state *s) {
    lm_cuda_queue_free(s);
    lm_cuda_blas_free(s);
    if (s->stream) cudaStreamDestroy(s->stream);
    cudaFree(s->blas_workspace);
    cudaFree(s->scratch);
}
