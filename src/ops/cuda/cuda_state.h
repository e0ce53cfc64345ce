/* The cuda backend's state and the ops its .cu files implement (C++
 * side; private to src/ops/cuda). */
#ifndef LOOM_OPS_CUDA_CUDA_STATE_H
#define LOOM_OPS_CUDA_CUDA_STATE_H

#include <cuda_runtime.h>
#include <stdbool.h>

#include "ops/cuda/cuda_backend.h"

struct lm_cuda_state {
    int device;
    cudaStream_t stream;
    cudaError_t first_error;      /* the first error since the last synchronize */
    char first_error_what[64];
    void *blas;                   /* cublasLtHandle_t (matmul.cu) */
    struct lm_cublaslt *blas_api; /* the library's entry points, opened at init (cublaslt_loader.h) */
    /* bf16 compute (lm_backend_set_compute): products of more than a few
     * rows through cuBLASLt with the activations rounded to 16 bits (fast,
     * not batch-invariant: its algorithm depends on n) instead of the
     * float32 kernel (exact, the same bits for a row whatever the batch). */
    bool blas_matmul;
    void *blas_workspace;         /* cuBLASLt's scratch */
    size_t blas_workspace_bytes;
    void *attention_partials;     /* the float32 attention's runs (attention.cu), made with the backend */
    size_t attention_partial_bytes;
    void *scratch;                /* bf16 copies of matmul inputs, grown on demand */
    size_t scratch_bytes;
    void *weight_scratch;         /* bf16 rows of int8 weights for cuBLASLt (matmul.cu), grown on demand */
    size_t weight_scratch_bytes;
    int gemv_shape;               /* the bf16 kernel's block shape (matmul.cu; LOOM_CUDA_GEMV) */
    int gemv_wide;                /* its shape for tiles of 3-8 tokens (matmul.cu; LOOM_CUDA_GEMV_WIDE) */
    int gemv_grid_cap;            /* 0, or its most blocks (LOOM_CUDA_GEMV_BLOCKS per SM) */
    bool gdn_recurrent_only;      /* LOOM_CUDA_GDN_CHUNKED=0: prefill walks tokens too (bench/cuda_gdn.c) */
    bool gdn_unprepared;          /* LOOM_CUDA_GDN_PREPARED=0: the chunked form in one kernel (gdn_chunked.cu), to compare */
    bool gdn_cuda_cores;          /* LOOM_CUDA_GDN_MMA=0: the chunked walk's products on the CUDA cores, to compare */
    void *gdn_scratch;            /* the chunks' T and M (gdn_chunked.cu), grown on demand */
    size_t gdn_scratch_bytes;
    size_t gdn_scratch_cap;       /* its most bytes (LOOM_CUDA_GDN_SCRATCH: small ones make the tests run waves) */
    bool attention_simt_only;     /* LOOM_CUDA_ATTENTION_MMA=0: bf16 compute keeps the float32 attention */
    bool attention_one_run;       /* LOOM_CUDA_ATTENTION_SPLIT=0: a block walks a token's whole context, to compare */
    bool kv_f32;                  /* LOOM_CUDA_KV_F32=1: float32 KV pools under bf16 compute too, to compare */
    bool unfused;                 /* LOOM_CUDA_FUSE=0: the fused ops decline (their parts run) */
    bool fp8_mma;                 /* LOOM_CUDA_FP8_MMA=1: FP8 batches on the FP8 tensor cores (not yet measured on a card: off by default) */
    bool norm_fused;              /* LOOM_CUDA_FUSE_NORM=1: the normed products run (matmul.cu says why not by default) */
    size_t norm_tile_bytes;       /* the most shared memory a product's tile of normed or gated x may take (matmul.cu) */
    bool gemv_1byte_blocks;       /* the int8 and FP8 decode products of 4-row blocks (matmul.cu), unless LOOM_CUDA_GEMV_1BYTE=staged */
    struct lm_cuda_queue *queue; /* pending work and its graphs (queue.cu, launch.h) */
    lm_cuda_fusion_window *fusion; /* the fusible ops not yet lowered (fusion_window.c) */
};

/* The most scratch the chunked delta rule's prepared form takes by
 * default: 128 MB is 4096 chunks' T and M, every chunk of a 2048-token step
 * of 32 heads at once; more chunks go in waves (gdn_chunked.cu). */
#define LM_CUDA_GDN_SCRATCH_DEFAULT ((size_t)128 << 20)

static inline lm_cuda_state *lm_cuda_state_of(lm_backend *be) { return (lm_cuda_state *)be->impl; }
/* Makes the calling thread's current GPU the backend's.  Every entry point
 * that calls the CUDA API does it first: with tensor parallelism one
 * thread drives backends of several GPUs (it loads every rank's weights),
 * and each rank's thread runs ops on its own. */
static inline void lm_cuda_use_device(const lm_cuda_state *s) { cudaSetDevice(s->device); }
static inline cudaStream_t lm_cuda_stream(lm_backend *be) { return lm_cuda_state_of(be)->stream; }
/* Makes *buffer (*size bytes) at least `bytes`: when it must grow, the
 * queue is flushed and the stream waited for (queued work may still read
 * the old one), then it is freed and allocated anew.  False (buffer NULL)
 * when the allocation fails; no error is kept. */
bool lm_cuda_grow(lm_backend *be, void **buffer, size_t *size, size_t bytes);

extern "C" {
lm_status lm_cuda_state_init(lm_cuda_state *s, lm_error *err);
void lm_cuda_state_free(lm_cuda_state *s);
/* Keeps the first error (reported by the next synchronize/download). */
void lm_cuda_note_error(lm_backend *be, cudaError_t e, const char *what);
/* The queue of pending work (queue.cu). */
lm_status lm_cuda_queue_init(lm_cuda_state *s, lm_error *err);
void lm_cuda_queue_free(lm_cuda_state *s);
/* ---- cuda-a: the cuBLASLt handle and workspace (matmul.cu) ---- */
lm_status lm_cuda_blas_init(lm_cuda_state *s, lm_error *err);
void lm_cuda_fused_products_init(lm_cuda_state *s);
/* The index of a block shape "ROWSxUNROLL" of the bf16 kernel; -1: none. */
int lm_cuda_gemv_shape_named(const char *name);
int lm_cuda_gemv_wide_named(const char *name); /* the same for tiles of 3-8 tokens */
void lm_cuda_blas_free(lm_cuda_state *s); /* the handle; state_free frees the memory */
/* ---- end cuda-a ---- */
}


/* Grid of blocks of `threads` covering n items (at least one block). */
static inline unsigned lm_cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 0x7fffffff) b = 0x7fffffff;
    return (unsigned)b;
}

#endif
