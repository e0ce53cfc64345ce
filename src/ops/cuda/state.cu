// The backend's stream and handles.
#include <stdlib.h>

#include "ops/cuda/cuda_state.h"

extern "C" lm_status lm_cuda_state_init(lm_cuda_state *s, lm_error *err) {
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return lm_fail(err, LM_ERR_INTERNAL, "cuda: cannot create a stream: %s", cudaGetErrorString(e));
    lm_status st = lm_cuda_queue_init(s, err);
    if (st != LM_OK) return st;
    st = lm_cuda_fusion_init(&s->fusion, err);
    if (st != LM_OK) return st;
    const char *shape = getenv("LOOM_CUDA_GEMV"); // for measuring the kernel's shapes (bench/cuda_gemv.c)
    s->gemv_shape = shape ? lm_cuda_gemv_shape_named(shape) : 0;
    if (s->gemv_shape < 0)
        return lm_fail(err, LM_ERR_INVALID, "LOOM_CUDA_GEMV=%s is not a block shape of the bf16 kernel "
                       "(ROWSxLOADS: 8x1, 4x4, 4x2, 2x4, 2x2, 8x2, 1x4, 1x8)", shape);
    const char *wide = getenv("LOOM_CUDA_GEMV_WIDE"); // the same for tiles of 3-8 tokens
    s->gemv_wide = wide ? lm_cuda_gemv_wide_named(wide) : 0;
    if (s->gemv_wide < 0)
        return lm_fail(err, LM_ERR_INVALID, "LOOM_CUDA_GEMV_WIDE=%s is not a wide block shape of the bf16 kernel "
                       "(ROWSxLOADS: 8x1, 4x4, 8x2, 16x1)", wide);
    const char *chunked = getenv("LOOM_CUDA_GDN_CHUNKED"); // 0: the recurrent form only, to compare
    s->gdn_recurrent_only = chunked && chunked[0] == '0';
    const char *prepared = getenv("LOOM_CUDA_GDN_PREPARED"); // 0: the chunked form in one kernel, to compare
    s->gdn_unprepared = prepared && prepared[0] == '0';
    const char *gdn_mma = getenv("LOOM_CUDA_GDN_MMA"); // 0: the chunked walk on the CUDA cores, to compare
    s->gdn_cuda_cores = gdn_mma && gdn_mma[0] == '0';
    const char *gdn_cap = getenv("LOOM_CUDA_GDN_SCRATCH"); // bytes: small ones make the tests run waves
    s->gdn_scratch_cap = gdn_cap && atoll(gdn_cap) > 0 ? (size_t)atoll(gdn_cap) : LM_CUDA_GDN_SCRATCH_DEFAULT;
    const char *mma = getenv("LOOM_CUDA_ATTENTION_MMA"); // 0: the float32 kernel in bf16 compute too, to compare
    s->attention_simt_only = mma && mma[0] == '0';
    const char *split = getenv("LOOM_CUDA_ATTENTION_SPLIT"); // 0: one run of keys a token, to compare
    s->attention_one_run = split && split[0] == '0';
    const char *kv_f32 = getenv("LOOM_CUDA_KV_F32"); // 1: float32 KV pools in bf16 compute, to compare
    s->kv_f32 = kv_f32 && kv_f32[0] == '1';
    const char *fuse = getenv("LOOM_CUDA_FUSE"); // 0: the fused ops decline (their parts run), to compare
    s->unfused = fuse && fuse[0] == '0';
    const char *fp8_mma = getenv("LOOM_CUDA_FP8_MMA");
    s->fp8_mma = fp8_mma && fp8_mma[0] == '1';
    const char *fuse_norm = getenv("LOOM_CUDA_FUSE_NORM"); // 1: the normed products run, to measure (slower)
    s->norm_fused = fuse_norm && fuse_norm[0] == '1' && !s->unfused;
    const char *per_sm = getenv("LOOM_CUDA_GEMV_BLOCKS"); // blocks per SM that loop over the rows
    int sms = 0;
    if (per_sm && atoi(per_sm) > 0 && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, s->device) == cudaSuccess)
        s->gemv_grid_cap = atoi(per_sm) * sms;
    // The float32 attention's partial results: 64 MB holds a decode step of
    // 60 sequences x 16 query heads of 256 at any context (64 runs each);
    // larger calls run in waves (attention.cu).
    const char *partials = getenv("LOOM_CUDA_ATTENTION_PARTIALS"); // bytes: small ones make the tests run waves
    s->attention_partial_bytes = partials && atoll(partials) > 0 ? (size_t)atoll(partials) : (size_t)64 << 20;
    e = cudaMalloc(&s->attention_partials, s->attention_partial_bytes);
    if (e != cudaSuccess)
        return lm_fail(err, LM_ERR_NOMEM, "cuda: cannot allocate the attention's %zu bytes of partials: %s",
                       s->attention_partial_bytes, cudaGetErrorString(e));
    lm_cuda_fused_products_init(s); /* the products' tiles of normed x (matmul.cu) */
    return lm_cuda_blas_init(s, err); /* cuBLASLt handle and workspace (matmul.cu) */
}

extern "C" lm_cuda_fusion_window *lm_cuda_fusion_of(lm_backend *be) { return lm_cuda_state_of(be)->fusion; }

extern "C" void lm_cuda_state_free(lm_cuda_state *s) {
    lm_cuda_fusion_free(s->fusion); /* ops still in it were never waited for: dropped */
    s->fusion = NULL;
    lm_cuda_queue_free(s);
    lm_cuda_blas_free(s);
    if (s->stream) cudaStreamDestroy(s->stream);
    cudaFree(s->blas_workspace);
    cudaFree(s->scratch);
    cudaFree(s->weight_scratch);
    cudaFree(s->gdn_scratch);
    cudaFree(s->attention_partials);
}
