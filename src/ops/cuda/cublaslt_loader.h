// cuBLASLt, opened when a cuda backend is made instead of linked: the
// library is half a gigabyte, and linking it made every loom process pay
// about 0.4 s at start (an empty program linked with -lcublasLt: 0.42 s
// against 0.00), with or without a GPU: a thousand `loom render` calls in
// the test suite, every CLI command, every server start.
#ifndef LOOM_OPS_CUDA_CUBLASLT_LOADER_H
#define LOOM_OPS_CUDA_CUBLASLT_LOADER_H

#include <cublasLt.h>

#include "ops/cuda/cuda_backend.h" /* ops.h with C linkage */

struct lm_cublaslt {
    void *lib; /* dlopen handle */
    decltype(&cublasLtCreate) Create;
    decltype(&cublasLtDestroy) Destroy;
    decltype(&cublasLtGetStatusString) GetStatusString;
    decltype(&cublasLtMatmul) Matmul;
    decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
    decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
    decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
    decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
    decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
    decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
    decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
    decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
};

/* Opens the library (libcublasLt.so.<major of the headers built against>,
 * found as the loader finds libraries, then in the CUDA folder the build
 * used) and resolves every entry point; on failure nothing stays open. */
lm_status lm_cublaslt_load(lm_cublaslt *lt, lm_error *err);
void lm_cublaslt_unload(lm_cublaslt *lt);

#endif
