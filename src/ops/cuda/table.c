/* The cuda backend's table of ops (C, for designated initializers in any
 * order).  Built only with the cuda backend. */
#ifdef LOOM_HAVE_CUDA
#include "base/ggml_quant.h"
#include "ops/cuda/cuda_backend.h"

/* Q8_0 weights: matmul's int8 kernel (matmul.cu), the scalar readers of
 * embed, moe_experts and add_weighted_rows (lm_weight_at).  FP8_B128:
 * matmul's FP8 kernel, the same scalar readers (lm_weight_in).  ggml's block
 * formats (GGUF files): matmul_ggml.cu's kernel where rows are 16-byte
 * aligned, else the scalar kernel, and the scalar readers (ggml_blocks.h);
 * in bf16 compute, 9+ rows made bf16 a chunk at a time for cuBLASLt. */
static bool cuda_weight_dtype_supported(const lm_backend *be, lm_dtype dtype) {
    (void)be;
    return dtype == LM_DTYPE_BF16 || dtype == LM_DTYPE_F16 || dtype == LM_DTYPE_F32 || dtype == LM_DTYPE_Q8_0 ||
           dtype == LM_DTYPE_FP8_B128 || lm_ggml_is_block(dtype);
}

const lm_backend_ops lm_cuda_backend_ops = {
    .name = "cuda",
    .alloc = lm_cuda_alloc,
    .import_host = lm_cuda_import,
    .free = lm_cuda_free,
    .buffer_size = lm_cuda_buffer_size,
    .upload = lm_cuda_upload,
    .download = lm_cuda_download,
    .copy = lm_cuda_copy,
    .fill = lm_cuda_fill,
    .synchronize = lm_cuda_synchronize,
    .memory_info = lm_cuda_memory_info,
    .set_compute_dtype = lm_cuda_set_compute_dtype,
    .compute_dtype = lm_cuda_compute_dtype,
    .weight_dtype_supported = cuda_weight_dtype_supported,
    /* elementwise.cu */
    .silu_mul = lm_cuda_fuse_silu_mul, /* the fusion window (fusion_window.c) */
    .sigmoid_mul = lm_cuda_fuse_sigmoid_mul,
    .add = lm_cuda_fuse_add,
    .add_rows = lm_cuda_add_rows,
    .sigmoid_scale_rows = lm_cuda_fuse_sigmoid_scale_rows,
    .discard = lm_cuda_fuse_discard,
    .gelu = lm_cuda_gelu,
    /* rows.cu */
    .copy_rows = lm_cuda_fuse_copy_rows,
    .gather_rows = lm_cuda_gather_rows,
    .argmax_rows = lm_cuda_argmax_rows,
    .sample_rows = lm_cuda_sample_rows,
    .embed = lm_cuda_embed,
    /* attention.cu */
    .kv_dtype = lm_cuda_kv_dtype,
    .kv_write = lm_cuda_fuse_kv_write,
    .attention = lm_cuda_fuse_attention,
    /* gdn.cu */
    .gdn_gates = lm_cuda_fuse_gdn_gates,
    .causal_conv1d_silu = lm_cuda_fuse_causal_conv1d_silu,
    .gated_delta_rule = lm_cuda_fuse_gated_delta_rule,
    /* moe.cu */
    .moe_route = lm_cuda_moe_route,
    .moe_experts = lm_cuda_moe_experts,
    /* ---- cuda-a: matmul.cu, norms.cu, rope.cu ---- */
    .matmul = lm_cuda_fuse_matmul,
    .rmsnorm = lm_cuda_fuse_rmsnorm,
    .gated_rmsnorm = lm_cuda_fuse_gated_rmsnorm,
    .l2norm_scale = lm_cuda_fuse_l2norm_scale,
    .layernorm = lm_cuda_layernorm,
    .add_weighted_rows = lm_cuda_add_weighted_rows,
    .rope = lm_cuda_fuse_rope,
    /* ---- end cuda-a ---- */
};
#else
typedef int lm_cuda_table_unused; /* ISO C wants a declaration */
#endif
