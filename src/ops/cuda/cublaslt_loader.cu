#include "ops/cuda/cublaslt_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

static void *open_library(char *why, size_t why_size) {
    char name[64];
    snprintf(name, sizeof name, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
    snprintf(why, why_size, "%s", dlerror());
#ifdef LM_CUDA_LIB_DIR
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", LM_CUDA_LIB_DIR, name);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
#endif
    return lib;
}

lm_status lm_cublaslt_load(lm_cublaslt *lt, lm_error *err) {
    memset(lt, 0, sizeof *lt);
    char why[512] = "";
    lt->lib = open_library(why, sizeof why);
    if (!lt->lib)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "cuda: cannot load cuBLASLt (libcublasLt.so.%d): %s",
                       CUBLAS_VER_MAJOR, why);
    const char *missing = NULL;
#define RESOLVE(field, symbol)                                                                 \
    do {                                                                                       \
        lt->field = (decltype(lt->field))dlsym(lt->lib, #symbol);                              \
        if (!lt->field && !missing) missing = #symbol;                                         \
    } while (0)
    RESOLVE(Create, cublasLtCreate);
    RESOLVE(Destroy, cublasLtDestroy);
    RESOLVE(GetStatusString, cublasLtGetStatusString);
    RESOLVE(Matmul, cublasLtMatmul);
    RESOLVE(MatmulAlgoGetHeuristic, cublasLtMatmulAlgoGetHeuristic);
    RESOLVE(MatmulDescCreate, cublasLtMatmulDescCreate);
    RESOLVE(MatmulDescDestroy, cublasLtMatmulDescDestroy);
    RESOLVE(MatmulDescSetAttribute, cublasLtMatmulDescSetAttribute);
    RESOLVE(MatmulPreferenceCreate, cublasLtMatmulPreferenceCreate);
    RESOLVE(MatmulPreferenceDestroy, cublasLtMatmulPreferenceDestroy);
    RESOLVE(MatmulPreferenceSetAttribute, cublasLtMatmulPreferenceSetAttribute);
    RESOLVE(MatrixLayoutCreate, cublasLtMatrixLayoutCreate);
    RESOLVE(MatrixLayoutDestroy, cublasLtMatrixLayoutDestroy);
#undef RESOLVE
    if (missing) {
        lm_cublaslt_unload(lt);
        return lm_fail(err, LM_ERR_UNSUPPORTED, "cuda: libcublasLt.so.%d has no %s", CUBLAS_VER_MAJOR, missing);
    }
    return LM_OK;
}

void lm_cublaslt_unload(lm_cublaslt *lt) {
    if (lt->lib) dlclose(lt->lib);
    memset(lt, 0, sizeof *lt);
}
