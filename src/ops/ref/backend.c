/* The "ref" backend: host memory and the plain reference kernels
 * (reference.c), one thread.  It exists to check the other backends
 * against, op by op, through the same table. */
#include <stdlib.h>

#include "base/ggml_quant.h"
#include "ops/backend_kinds.h"
#include "ops/host/host_memory.h"
#include "ops/ref/reference.h"

#define F32 lm_host_f32
#define I32 lm_host_i32

static void ref_matmul(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    (void)be;
    lm_host_matrix hw = lm_host_matrix_of(w);
    lm_ref_matmul(F32(y), F32(x), n, &hw);
}
static void ref_embed(lm_backend *be, lm_mem out, lm_mem ids, int n, const lm_matrix *table) {
    (void)be;
    lm_host_matrix ht = lm_host_matrix_of(table);
    lm_ref_embed(F32(out), I32(ids), n, &ht);
}
static void ref_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, int rows, int dim,
                        float eps) {
    (void)be;
    lm_ref_rmsnorm(F32(out), F32(x), F32(weight), rows, dim, eps);
}
static void ref_gated_rmsnorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem z, lm_mem weight,
                              int rows, int dim, float eps) {
    (void)be;
    lm_ref_gated_rmsnorm(F32(out), F32(x), F32(z), F32(weight), rows, dim, eps);
}
static void ref_l2norm_scale(lm_backend *be, lm_mem x, int rows, int dim, float eps, float scale) {
    (void)be;
    lm_ref_l2norm_scale(F32(x), rows, dim, eps, scale);
}
static void ref_rope(lm_backend *be, lm_mem x, int n, int n_heads, int head_dim, lm_mem positions,
                     const lm_rope_params *rope) {
    (void)be;
    lm_ref_rope(F32(x), n, n_heads, head_dim, I32(positions), rope);
}
static void ref_silu_mul(lm_backend *be, lm_mem out, lm_mem gate, lm_mem up, int64_t n) {
    (void)be;
    lm_ref_silu_mul(F32(out), F32(gate), F32(up), n);
}
static void ref_layernorm(lm_backend *be, lm_mem out, lm_mem x, lm_mem weight, lm_mem bias,
                          int rows, int dim, float eps) {
    (void)be;
    lm_ref_layernorm(F32(out), F32(x), F32(weight), F32(bias), rows, dim, eps);
}
static void ref_gelu(lm_backend *be, lm_mem x, int64_t n, lm_gelu_kind kind) {
    (void)be;
    lm_ref_gelu(F32(x), n, kind);
}
static void ref_add_weighted_rows(lm_backend *be, lm_mem x, const lm_matrix *table, lm_mem ids,
                                  lm_mem weights, int n, int taps) {
    (void)be;
    lm_host_matrix ht = lm_host_matrix_of(table);
    lm_ref_add_weighted_rows(F32(x), &ht, I32(ids), F32(weights), n, taps);
}
static void ref_sigmoid_mul(lm_backend *be, lm_mem x, lm_mem gate, int64_t n) {
    (void)be;
    lm_ref_sigmoid_mul(F32(x), F32(gate), n);
}
static void ref_add(lm_backend *be, lm_mem x, lm_mem y, int64_t n) {
    (void)be;
    lm_ref_add(F32(x), F32(y), n);
}
static void ref_copy_rows(lm_backend *be, lm_mem dst, int64_t dst_stride, lm_mem src,
                          int64_t src_stride, int rows, int width) {
    (void)be;
    lm_ref_copy_rows(F32(dst), dst_stride, F32(src), src_stride, rows, width);
}
static void ref_gather_rows(lm_backend *be, lm_mem dst, lm_mem src, lm_mem row_ids, int n,
                            int width) {
    (void)be;
    lm_ref_gather_rows(F32(dst), F32(src), I32(row_ids), n, width);
}
static void ref_sample_rows(lm_backend *be, lm_mem ids, lm_mem drew, lm_mem logits, int rows, int vocab,
                            lm_mem params, lm_mem entries) {
    (void)be;
    lm_ref_sample_rows(I32(ids), I32(drew), F32(logits), rows, vocab, (const lm_sample_row *)lm_host_ptr(params),
                       (const lm_sample_entry *)lm_host_ptr(entries));
}
static void ref_argmax_rows(lm_backend *be, lm_mem ids, lm_mem x, int rows, int n) {
    (void)be;
    lm_ref_argmax_rows(I32(ids), F32(x), rows, n);
}
static void ref_kv_write(lm_backend *be, const lm_kv_layer *kv, lm_mem k, lm_mem v, int n,
                         lm_mem slots) {
    (void)be;
    lm_host_kv_layer hkv = lm_host_kv_layer_of(kv);
    lm_ref_kv_write(&hkv, F32(k), F32(v), n, I32(slots));
}
static void ref_attention(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                          const lm_attention_batch *batch) {
    (void)be;
    lm_host_kv_layer hkv = lm_host_kv_layer_of(kv);
    lm_host_attention_batch hb = lm_host_attention_batch_of(batch);
    lm_ref_attention(F32(out), F32(q), &hkv, &hb);
}
static void ref_gdn_gates(lm_backend *be, lm_mem beta, lm_mem g, lm_mem neg_exp_A, lm_mem dt_bias,
                          int n, int H) {
    (void)be;
    lm_ref_gdn_gates(F32(beta), F32(g), F32(neg_exp_A), F32(dt_bias), n, H);
}
static void ref_causal_conv1d_silu(lm_backend *be, lm_mem out, lm_mem in, int C, lm_mem weight,
                                   int K, lm_mem states, int64_t slot_stride,
                                   const lm_seq_batch *seqs) {
    (void)be;
    lm_host_seq_batch hs = lm_host_seq_batch_of(seqs);
    lm_ref_causal_conv1d_silu_batch(F32(out), F32(in), C, F32(weight), K, F32(states), slot_stride,
                                    &hs);
}
static void ref_gated_delta_rule(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v,
                                 lm_mem g, lm_mem beta, lm_mem states, int64_t slot_stride,
                                 const lm_seq_batch *seqs, int Hk, int Hv, int dk, int dv) {
    (void)be;
    lm_host_seq_batch hs = lm_host_seq_batch_of(seqs);
    lm_ref_gated_delta_rule_batch(F32(out), F32(q), F32(k), F32(v), F32(g), F32(beta), F32(states),
                                  slot_stride, &hs, Hk, Hv, dk, dv);
}

static void ref_add_rows(lm_backend *be, lm_mem x, lm_mem bias, int rows, int width) {
    (void)be;
    lm_ref_add_rows(F32(x), F32(bias), rows, width);
}
static void ref_sigmoid_scale_rows(lm_backend *be, lm_mem x, lm_mem gate, int rows, int width) {
    (void)be;
    lm_ref_sigmoid_scale_rows(F32(x), F32(gate), rows, width);
}
static void ref_moe_route(lm_backend *be, lm_mem ids, lm_mem weights, lm_mem logits, int n,
                          const lm_moe_routing *routing) {
    (void)be;
    const float *bias = routing->correction_bias.buffer ? F32(routing->correction_bias) : NULL;
    lm_ref_moe_route(I32(ids), F32(weights), F32(logits), n, routing, bias);
}
static void ref_moe_experts(lm_backend *be, lm_mem out, lm_mem x, int n, lm_mem ids, lm_mem weights,
                            int top_k, const lm_moe_experts *experts, lm_mem scratch) {
    (void)be;
    lm_ref_moe_experts(F32(out), F32(x), n, I32(ids), F32(weights), top_k, experts, lm_host_ptr(scratch));
}

static bool ref_weight_dtype_supported(const lm_backend *be, lm_dtype dtype) {
    (void)be;
    return dtype == LM_DTYPE_BF16 || dtype == LM_DTYPE_F16 || dtype == LM_DTYPE_F32 ||
           dtype == LM_DTYPE_Q8_0 || dtype == LM_DTYPE_FP8_B128 || lm_ggml_is_block(dtype);
}

const lm_backend_ops lm_ref_backend_ops = {
    .name = "ref",
    LM_HOST_MEMORY_OPS,
    .weight_dtype_supported = ref_weight_dtype_supported,
    .matmul = ref_matmul,
    .embed = ref_embed,
    .rmsnorm = ref_rmsnorm,
    .gated_rmsnorm = ref_gated_rmsnorm,
    .l2norm_scale = ref_l2norm_scale,
    .rope = ref_rope,
    .silu_mul = ref_silu_mul,
    .layernorm = ref_layernorm,
    .gelu = ref_gelu,
    .sigmoid_mul = ref_sigmoid_mul,
    .add = ref_add,
    .copy_rows = ref_copy_rows,
    .gather_rows = ref_gather_rows,
    .add_weighted_rows = ref_add_weighted_rows,
    .argmax_rows = ref_argmax_rows,
    .sample_rows = ref_sample_rows,
    .kv_write = ref_kv_write,
    .attention = ref_attention,
    .gdn_gates = ref_gdn_gates,
    .causal_conv1d_silu = ref_causal_conv1d_silu,
    .gated_delta_rule = ref_gated_delta_rule,
    .add_rows = ref_add_rows,
    .sigmoid_scale_rows = ref_sigmoid_scale_rows,
    .moe_route = ref_moe_route,
    .moe_experts = ref_moe_experts,
};

lm_status lm_backend_ref_create(lm_backend **out, lm_error *err) {
    *out = NULL;
    lm_backend *be = calloc(1, sizeof *be);
    if (!be) return lm_fail(err, LM_ERR_NOMEM, "out of memory creating the ref backend");
    be->ops = &lm_ref_backend_ops;
    *out = be;
    return LM_OK;
}

void lm_ref_backend_destroy(lm_backend *be) { free(be); }
