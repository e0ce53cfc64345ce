/* The cpu backend's op table: host memory (ops/host) and entries that
 * resolve the lm_mem views to host pointers and call the tuned kernels
 * (matmul.c, elementwise.c, rows.c, attention.c, linear_attention.c, moe.c) on
 * the backend's thread pool.  Resolving is pointer arithmetic: nothing is
 * copied on the way in or out.  Compiled into every kernel set
 * (cpu_kernels.h); backend_create.c makes the backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/ggml_quant.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/matmul_bf16.h"
#include "ops/ref/reference.h"

#define F32 lm_host_f32
#define I32 lm_host_i32

/* The bf16 scratch for n rows of `cols`, grown if needed; NULL (and the
 * backend's sticky error set) when it cannot be. */
static uint16_t *bf16_scratch(lm_cpu_backend *cpu, int n, int64_t cols) {
    size_t per_row = lm_cpu_bf16_padded_cols(cols);
    bool fits = per_row == 0 || (size_t)n <= SIZE_MAX / sizeof(uint16_t) / per_row;
    size_t want = fits ? per_row * (size_t)n : 0;
    if (fits && want <= cpu->bf16_scratch_elems) return cpu->bf16_scratch;
    uint16_t *grown = fits ? realloc(cpu->bf16_scratch, want * sizeof(uint16_t)) : NULL;
    if (!grown) {
        if (cpu->error == LM_OK) {
            cpu->error = LM_ERR_NOMEM;
            snprintf(cpu->error_message, sizeof cpu->error_message,
                     "out of memory for the bf16 activations of a %d x %lld matmul", n, (long long)cols);
        }
        return NULL;
    }
    cpu->bf16_scratch = grown;
    cpu->bf16_scratch_elems = want;
    return grown;
}

static void cpu_matmul(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    lm_cpu_backend *cpu = be->impl;
    lm_host_matrix hw = lm_host_matrix_of(w);
    /* bf16 compute covers bf16 weights (f16/f32 weights would lose bits to
     * the rounding); every n goes the same way, so a token's bits do not
     * depend on its batch. */
    if (cpu->compute == LM_DTYPE_BF16 && hw.dtype == LM_DTYPE_BF16 && n > 0 && hw.rows > 0) {
        uint16_t *scratch = bf16_scratch(cpu, n, hw.cols);
        if (scratch) lm_cpu_matmul_bf16(cpu->pool, scratch, F32(y), F32(x), n, &hw);
        else memset(F32(y), 0, sizeof(float) * (size_t)n * (size_t)hw.rows);
        return;
    }
    lm_cpu_matmul(cpu->pool, F32(y), F32(x), n, &hw);
}

static lm_status cpu_set_compute_dtype(lm_backend *be, lm_dtype dtype, lm_error *err) {
    lm_cpu_backend *cpu = be->impl;
    if (dtype == LM_DTYPE_BF16 && !cpu->features.avx512_bf16)
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "this CPU has no AVX-512 BF16 (avx512_bf16): the cpu backend computes in float32 here");
    if (dtype == LM_DTYPE_BF16 && !cpu->kernels->avx512)
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "the cpu backend runs its %s kernels (" LM_KERNEL_SET_ENV "), which have no bf16 compute: "
                       "that needs the avx512 kernels on a CPU with avx512_bf16",
                       lm_kernel_set_name(cpu->kernels->set));
    if (dtype != LM_DTYPE_F32 && dtype != LM_DTYPE_BF16)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "the cpu backend computes in f32 or bf16");
    cpu->compute = dtype;
    return LM_OK;
}
static lm_dtype cpu_compute_dtype(const lm_backend *be) {
    return ((const lm_cpu_backend *)be->impl)->compute;
}

/* The sticky error of a failed scratch growth, once. */
static lm_status take_error(lm_cpu_backend *cpu, lm_error *err) {
    if (cpu->error == LM_OK) return LM_OK;
    lm_status st = lm_fail(err, cpu->error, "%s", cpu->error_message);
    cpu->error = LM_OK;
    return st;
}
static lm_status cpu_synchronize(lm_backend *be, lm_error *err) {
    lm_status st = take_error(be->impl, err);
    return st != LM_OK ? st : lm_host_synchronize(be, err);
}
static lm_status cpu_download(lm_backend *be, void *dst, lm_mem src, size_t bytes, lm_error *err) {
    lm_status st = lm_host_download(be, dst, src, bytes, err);
    return st != LM_OK ? st : take_error(be->impl, err);
}
static void cpu_embed(lm_backend *be, lm_mem out, lm_mem ids, int n, const lm_matrix *table) {
    (void)be;
    lm_host_matrix ht = lm_host_matrix_of(table);
    lm_cpu_embed(F32(out), I32(ids), n, &ht);
}
static void cpu_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, int rows, int dim,
                        float eps) {
    lm_cpu_rmsnorm(lm_cpu_pool(be), F32(out), F32(x), F32(weight), rows, dim, eps);
}
static void cpu_gated_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem z, lm_mem weight,
                              int rows, int dim, float eps) {
    lm_cpu_gated_rmsnorm(lm_cpu_pool(be), F32(out), F32(x), F32(z), F32(weight), rows, dim, eps);
}
static void cpu_l2norm_scale(lm_backend *be, lm_mem x, int rows, int dim, float eps, float scale) {
    lm_cpu_l2norm_scale(lm_cpu_pool(be), F32(x), rows, dim, eps, scale);
}
static void cpu_rope(lm_backend *be, lm_mem x, int n, int n_heads, int head_dim, lm_mem positions,
                     const lm_rope_params *rope) {
    lm_cpu_rope(lm_cpu_pool(be), F32(x), n, n_heads, head_dim, I32(positions), rope);
}
static void cpu_silu_mul(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n) {
    lm_cpu_silu_mul(lm_cpu_pool(be), F32(out), F32(gate), F32(up), n);
}
static void cpu_layernorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, lm_mem bias,
                          int rows, int dim, float eps) {
    lm_cpu_layernorm(lm_cpu_pool(be), F32(out), F32(x), F32(weight), F32(bias), rows, dim, eps);
}
static void cpu_gelu(lm_backend *be, lm_mem x, int64_t n, lm_gelu_kind kind) {
    lm_cpu_gelu(lm_cpu_pool(be), F32(x), n, kind);
}
static void cpu_add_weighted_rows(lm_backend *be, lm_mem x, const lm_matrix *table, lm_mem ids,
                                  lm_mem weights, int n, int taps) {
    lm_host_matrix ht = lm_host_matrix_of(table);
    lm_cpu_add_weighted_rows(lm_cpu_pool(be), F32(x), &ht, I32(ids), F32(weights), n, taps);
}
static void cpu_sigmoid_mul(lm_backend *be, lm_mem x, lm_mem gate, int64_t n) {
    lm_cpu_sigmoid_mul(lm_cpu_pool(be), F32(x), F32(gate), n);
}
static void cpu_add(lm_backend *be, lm_mem x, lm_mem y, int64_t n) {
    lm_cpu_add(lm_cpu_pool(be), F32(x), F32(y), n);
}
static void cpu_copy_rows(lm_backend *be, lm_mem dst, int64_t dst_stride, lm_mem src,
                          int64_t src_stride, int rows, int width) {
    (void)be;
    lm_cpu_copy_rows(F32(dst), dst_stride, F32(src), src_stride, rows, width);
}
static void cpu_gather_rows(lm_backend *be, lm_mem dst, lm_mem src, lm_mem row_ids, int n,
                            int width) {
    (void)be;
    lm_cpu_gather_rows(F32(dst), F32(src), I32(row_ids), n, width);
}
static void cpu_argmax_rows(lm_backend *be, lm_mem ids, lm_mem x, int rows, int n) {
    lm_cpu_argmax_rows(lm_cpu_pool(be), I32(ids), F32(x), rows, n);
}
static void cpu_kv_write(lm_backend *be, const lm_kv_layer *kv, lm_mem k, lm_mem v, int n,
                         lm_mem slots) {
    (void)be;
    lm_host_kv_layer hkv = lm_host_kv_layer_of(kv);
    if (hkv.k16)
        lm_cpu_kv_write_bf16(&hkv, F32(k), F32(v), n, I32(slots));
    else
        lm_cpu_kv_write(&hkv, F32(k), F32(v), n, I32(slots));
}
static void cpu_attention(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                          const lm_attention_batch *batch) {
    lm_host_kv_layer hkv = lm_host_kv_layer_of(kv);
    lm_host_attention_batch hb = lm_host_attention_batch_of(batch);
    /* bf16 compute rounds attention's operands too, for every batch (a
     * token's bits do not depend on it); a bf16 pool (cpu_kv_dtype) exists
     * only under bf16 compute, whose set_compute_dtype checked the CPU */
    const lm_cpu_backend *cpu = be->impl;
    if (hkv.k16 || (cpu->compute == LM_DTYPE_BF16 && lm_cpu_attention_bf16_takes(hb.head_dim)))
        lm_cpu_attention_bf16(lm_cpu_pool(be), F32(out), F32(q), &hkv, &hb);
    else
        lm_cpu_attention(lm_cpu_pool(be), F32(out), F32(q), &hkv, &hb);
}
/* Under bf16 compute attention rounds k and v to bf16 whatever the pool
 * holds, so the pool holds them rounded: half the bytes, and no key block
 * converted again for each decode token. */
static lm_dtype cpu_kv_dtype(const lm_backend *be, int head_dim) {
    const lm_cpu_backend *cpu = be->impl;
    return cpu->compute == LM_DTYPE_BF16 && lm_cpu_attention_bf16_takes(head_dim) ? LM_DTYPE_BF16
                                                                                  : LM_DTYPE_F32;
}
static void cpu_gdn_gates(lm_backend *be, lm_mem beta, lm_mem g, lm_mem neg_exp_A, lm_mem dt_bias,
                          int n, int H) {
    (void)be;
    lm_cpu_gdn_gates(F32(beta), F32(g), F32(neg_exp_A), F32(dt_bias), n, H);
}
static void cpu_causal_conv1d_silu(lm_backend *be, lm_mem out, lm_mem in, int C, lm_mem weight,
                                   int K, lm_mem states, int64_t slot_stride,
                                   const lm_seq_batch *seqs) {
    lm_host_seq_batch hs = lm_host_seq_batch_of(seqs);
    lm_cpu_causal_conv1d_silu(lm_cpu_pool(be), F32(out), F32(in), C, F32(weight), K, F32(states),
                              slot_stride, &hs);
}
static void cpu_gated_delta_rule(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v,
                                 lm_mem g, lm_mem beta, lm_mem states, int64_t slot_stride,
                                 const lm_seq_batch *seqs, int Hk, int Hv, int dk, int dv) {
    lm_gdn_batch b = {.out = F32(out),
                      .q = F32(q),
                      .k = F32(k),
                      .v = F32(v),
                      .g = F32(g),
                      .beta = F32(beta),
                      .states = F32(states),
                      .slot_stride = slot_stride,
                      .seqs = lm_host_seq_batch_of(seqs),
                      .Hk = Hk,
                      .Hv = Hv,
                      .dk = dk,
                      .dv = dv};
    lm_cpu_gated_delta_rule(lm_cpu_pool(be), &b);
}

static void cpu_add_rows(lm_backend *be, lm_mem x, lm_mem bias, int rows, int width) {
    (void)be;
    lm_ref_add_rows(F32(x), F32(bias), rows, width);
}
static void cpu_sigmoid_scale_rows(lm_backend *be, lm_mem x, lm_mem gate, int rows, int width) {
    (void)be;
    lm_ref_sigmoid_scale_rows(F32(x), F32(gate), rows, width);
}
static void cpu_moe_route(lm_backend *be, lm_mem ids, lm_mem weights, lm_mem logits, int n,
                          const lm_moe_routing *routing) {
    (void)be;
    const float *bias = routing->correction_bias.buffer ? F32(routing->correction_bias) : NULL;
    lm_ref_moe_route(I32(ids), F32(weights), F32(logits), n, routing, bias);
}
static void cpu_moe_experts(lm_backend *be, lm_mem out, lm_mem x, int n, lm_mem ids, lm_mem weights,
                            int top_k, const lm_moe_experts *experts, lm_mem scratch) {
    lm_cpu_moe_experts(lm_cpu_pool(be), F32(out), F32(x), n, I32(ids), F32(weights), top_k, experts,
                       lm_host_ptr(scratch));
}

static bool cpu_weight_dtype_supported(const lm_backend *be, lm_dtype dtype) {
    (void)be;
    return dtype == LM_DTYPE_BF16 || dtype == LM_DTYPE_F16 || dtype == LM_DTYPE_F32 ||
           dtype == LM_DTYPE_Q8_0 || dtype == LM_DTYPE_FP8_B128 || lm_ggml_is_block(dtype);
}

const lm_backend_ops lm_cpu_backend_ops = {
    .name = "cpu",
    /* LM_HOST_MEMORY_OPS, with download and synchronize reporting the
     * sticky error of the bf16 scratch */
    .alloc = lm_host_alloc,
    .import_host = lm_host_import,
    .free = lm_host_free,
    .buffer_size = lm_host_buffer_size,
    .upload = lm_host_upload,
    .download = cpu_download,
    .copy = lm_host_copy,
    .fill = lm_host_fill,
    .synchronize = cpu_synchronize,
    .set_compute_dtype = cpu_set_compute_dtype,
    .compute_dtype = cpu_compute_dtype,
    .weight_dtype_supported = cpu_weight_dtype_supported,
    .matmul = cpu_matmul,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .gated_rmsnorm = cpu_gated_rmsnorm,
    .l2norm_scale = cpu_l2norm_scale,
    .rope = cpu_rope,
    .silu_mul = cpu_silu_mul,
    .layernorm = cpu_layernorm,
    .gelu = cpu_gelu,
    .sigmoid_mul = cpu_sigmoid_mul,
    .add = cpu_add,
    .copy_rows = cpu_copy_rows,
    .gather_rows = cpu_gather_rows,
    .add_weighted_rows = cpu_add_weighted_rows,
    .argmax_rows = cpu_argmax_rows,
    .kv_dtype = cpu_kv_dtype,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .gdn_gates = cpu_gdn_gates,
    .causal_conv1d_silu = cpu_causal_conv1d_silu,
    .gated_delta_rule = cpu_gated_delta_rule,
    .add_rows = cpu_add_rows,
    .sigmoid_scale_rows = cpu_sigmoid_scale_rows,
    .moe_route = cpu_moe_route,
    .moe_experts = cpu_moe_experts,
};
