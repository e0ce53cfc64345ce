// The backend's stream and handles.
#include "ops/cuda/cuda_state.h"

extern "C" lm_status lm_cuda_state_init(lm_cuda_state *s, lm_error *err) {
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return lm_fail(err, LM_ERR_INTERNAL, "cuda: cannot create a stream: %s", cudaGetErrorString(e));
    return LM_OK;
}

extern "C" void lm_cuda_state_free(lm_cuda_state *s) {
    if (s->stream) cudaStreamDestroy(s->stream);
    cudaFree(s->blas_workspace);
    cudaFree(s->scratch);
}
