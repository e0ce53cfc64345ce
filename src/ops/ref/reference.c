#include "ops/ref/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/ggml_quant.h"
#include "base/quant.h"

float lm_ref_weight_at(const lm_host_matrix *w, int64_t row, int64_t col) {
    int64_t i = row * w->cols + col;
    switch (w->dtype) {
    case LM_DTYPE_BF16: return lm_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case LM_DTYPE_F16: return lm_f16_to_f32(((const uint16_t *)w->data)[i]);
    case LM_DTYPE_F32: return ((const float *)w->data)[i];
    case LM_DTYPE_Q8_0:
        return lm_q8_weight_at((const uint8_t *)w->data + (size_t)row * lm_dtype_row_bytes(w->dtype, w->cols),
                               col);
    case LM_DTYPE_FP8_B128:
        return lm_fp8_weight_at((const uint8_t *)w->data + (size_t)row * lm_dtype_row_bytes(w->dtype, w->cols),
                                w->cols, col);
    default:
        if (lm_ggml_is_block(w->dtype))
            return lm_ggml_weight_at(w->dtype, (const uint8_t *)w->data + (size_t)row * lm_dtype_row_bytes(w->dtype, w->cols),
                                     col);
        return NAN; /* loaders only hand float matrices to kernels */
    }
}

/* Σ_i w[o, i] · x[i] in float64, in index order; the dtype is looked at
 * once per row (per element it was most of the ref backend's time). */
static double dot_row(const lm_host_matrix *w, int64_t o, const float *x) {
    int64_t cols = w->cols;
    double acc = 0;
    switch (w->dtype) {
    case LM_DTYPE_BF16: {
        const uint16_t *row = (const uint16_t *)w->data + o * cols;
        for (int64_t i = 0; i < cols; i++) acc += (double)lm_bf16_to_f32(row[i]) * x[i];
        return acc;
    }
    case LM_DTYPE_F16: {
        const uint16_t *row = (const uint16_t *)w->data + o * cols;
        for (int64_t i = 0; i < cols; i++) acc += (double)lm_f16_to_f32(row[i]) * x[i];
        return acc;
    }
    case LM_DTYPE_F32: {
        const float *row = (const float *)w->data + o * cols;
        for (int64_t i = 0; i < cols; i++) acc += (double)row[i] * x[i];
        return acc;
    }
    case LM_DTYPE_Q8_0: { /* Σ_blocks s · Σ_i q_i x_i, exact products in float64 */
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * lm_dtype_row_bytes(w->dtype, cols);
        for (int64_t b = 0; b < cols / LM_Q8_BLOCK; b++) {
            const uint8_t *block = row + b * LM_Q8_BLOCK_BYTES;
            double sum = 0;
            for (int i = 0; i < LM_Q8_BLOCK; i++)
                sum += (double)(int8_t)block[2 + i] * x[b * LM_Q8_BLOCK + i];
            acc += (double)lm_q8_block_scale(block) * sum;
        }
        return acc;
    }
    case LM_DTYPE_FP8_B128: { /* Σ_blocks s · Σ_i e4m3_i x_i, exact products in float64 */
        const uint8_t *row = (const uint8_t *)w->data + (size_t)o * lm_dtype_row_bytes(w->dtype, cols);
        for (int64_t b = 0; b < cols / LM_FP8_BLOCK; b++) {
            double sum = 0;
            for (int i = 0; i < LM_FP8_BLOCK; i++)
                sum += (double)lm_e4m3_to_f32(row[b * LM_FP8_BLOCK + i]) * x[b * LM_FP8_BLOCK + i];
            acc += (double)lm_fp8_row_scale(row, cols, b) * sum;
        }
        return acc;
    }
    default:
        if (lm_ggml_is_block(w->dtype)) { /* ggml blocks: each block's float32 weights, then Σ w·x */
            int64_t n = lm_dtype_block_elems(w->dtype);
            size_t block_bytes = lm_dtype_block_bytes(w->dtype);
            const uint8_t *row = (const uint8_t *)w->data + (size_t)o * lm_dtype_row_bytes(w->dtype, cols);
            float block[LM_GGML_MAX_BLOCK];
            for (int64_t b = 0; b < cols / n; b++) {
                lm_ggml_dequantize_row(w->dtype, row + (size_t)b * block_bytes, block, n);
                for (int64_t i = 0; i < n; i++) acc += (double)block[i] * x[b * n + i];
            }
            return acc;
        }
        return NAN; /* loaders only hand float matrices to kernels */
    }
}

void lm_ref_matmul(float *y, const float *x, int n, const lm_host_matrix *w) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (int64_t)t * w->cols;
        for (int64_t o = 0; o < w->rows; o++) y[(int64_t)t * w->rows + o] = (float)dot_row(w, o, xt);
    }
}

void lm_ref_embed(float *out, const int32_t *ids, int n, const lm_host_matrix *table) {
    if (lm_ggml_is_block(table->dtype)) { /* whole rows of blocks */
        for (int t = 0; t < n; t++)
            lm_ggml_dequantize_row(table->dtype,
                                   (const uint8_t *)table->data + (size_t)ids[t] * lm_dtype_row_bytes(table->dtype, table->cols),
                                   out + (int64_t)t * table->cols, table->cols);
        return;
    }
    for (int t = 0; t < n; t++)
        for (int64_t i = 0; i < table->cols; i++)
            out[(int64_t)t * table->cols + i] = lm_ref_weight_at(table, ids[t], i);
}

void lm_ref_rmsnorm(float *out, const float *x, const float *weight, int rows, int dim, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * dim;
        float *yr = out + (int64_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / dim + eps));
        for (int i = 0; i < dim; i++) yr[i] = xr[i] * inv * weight[i];
    }
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

void lm_ref_gated_rmsnorm(float *out, const float *x, const float *z, const float *weight, int rows,
                          int dim, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * dim, *zr = z + (int64_t)r * dim;
        float *yr = out + (int64_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / dim + eps));
        for (int i = 0; i < dim; i++) yr[i] = xr[i] * inv * weight[i] * silu(zr[i]);
    }
}

void lm_ref_l2norm_scale(float *x, int rows, int dim, float eps, float scale) {
    for (int r = 0; r < rows; r++) {
        float *xr = x + (int64_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float f = (float)(1.0 / sqrt(ss + eps)) * scale;
        for (int i = 0; i < dim; i++) xr[i] *= f;
    }
}

int lm_rope_section_of(const lm_rope_params *rope, int i) {
    const int *s = rope->sections;
    if (rope->two_d) return i < rope->rot_dim / 4 ? 1 : 2;
    if (rope->interleaved_sections) {
        if (i % 3 == 1 && i < 3 * s[1]) return 1;
        if (i % 3 == 2 && i < 3 * s[2]) return 2;
        return 0;
    }
    if (i < s[0]) return 0;
    if (i < s[0] + s[1]) return 1;
    return 2;
}

float lm_rope_inv_freq(const lm_rope_params *rope, int i) {
    if (rope->two_d) {
        /* transformers' VisionRotaryEmbedding(dim = rot_dim / 2):
         * 1 / theta^(arange(0, dim, 2) / dim), in float32 */
        int quarter = rope->rot_dim / 4;
        int f = i < quarter ? i : i - quarter;
        return 1.0f / powf(rope->theta, (float)(2 * f) / (float)(rope->rot_dim / 2));
    }
    return 1.0f / powf(rope->theta, (float)(2 * i) / (float)rope->rot_dim);
}

void lm_ref_rope(float *x, int n, int n_heads, int head_dim, const int32_t *positions,
                 const lm_rope_params *rope) {
    int half = rope->rot_dim / 2;
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < half; i++) {
            float inv_freq = lm_rope_inv_freq(rope, i);
            float angle = (float)positions[t * 3 + lm_rope_section_of(rope, i)] * inv_freq;
            float c = cosf(angle), s = sinf(angle);
            for (int h = 0; h < n_heads; h++) {
                float *xh = x + ((int64_t)t * n_heads + h) * head_dim;
                int a = rope->pair_interleaved ? 2 * i : i;
                int b = rope->pair_interleaved ? 2 * i + 1 : i + half;
                float xa = xh[a], xb = xh[b];
                xh[a] = xa * c - xb * s;
                xh[b] = xb * c + xa * s;
            }
        }
    }
}

void lm_ref_silu_mul(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = silu(gate[i]) * up[i];
}

void lm_ref_layernorm(float *out, const float *x, const float *weight, const float *bias, int rows,
                      int dim, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * dim;
        float *yr = out + (int64_t)r * dim;
        double sum = 0, ss = 0;
        for (int i = 0; i < dim; i++) sum += xr[i];
        double mean = sum / dim;
        for (int i = 0; i < dim; i++) ss += (xr[i] - mean) * (xr[i] - mean);
        double inv = 1.0 / sqrt(ss / dim + eps); /* biased variance */
        for (int i = 0; i < dim; i++) yr[i] = (float)((xr[i] - mean) * inv * weight[i] + bias[i]);
    }
}

/* Written without the cancellation of 1 + erf / 1 + tanh for negative x:
 * 0.5·x·(1 + erf(x/√2)) = 0.5·x·erfc(-x/√2), and 0.5·x·(1 + tanh(u)) =
 * x·sigmoid(2u) with u = sqrt(2/pi)·(x + 0.044715·x³). */
float lm_ref_gelu_scalar(float x, lm_gelu_kind kind) {
    if (kind == LM_GELU_ERF) return 0.5f * x * erfcf(-x * 0.70710678118654752f);
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

void lm_ref_gelu(float *x, int64_t n, lm_gelu_kind kind) {
    for (int64_t i = 0; i < n; i++) x[i] = lm_ref_gelu_scalar(x[i], kind);
}

void lm_ref_add_weighted_rows(float *x, const lm_host_matrix *table, const int32_t *ids,
                              const float *weights, int n, int taps) {
    int64_t width = table->cols;
    for (int i = 0; i < n; i++)
        for (int64_t c = 0; c < width; c++) {
            double acc = 0;
            for (int k = 0; k < taps; k++) {
                int64_t p = (int64_t)i * taps + k;
                acc += (double)weights[p] * lm_ref_weight_at(table, ids[p], c);
            }
            x[(int64_t)i * width + c] += (float)acc;
        }
}

void lm_ref_sigmoid_mul(float *x, const float *gate, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= lm_ref_sigmoid(gate[i]);
}

void lm_ref_add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

void lm_ref_copy_rows(float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                      int rows, int width) {
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < width; i++) dst[r * dst_stride + i] = src[r * src_stride + i];
}

void lm_ref_gather_rows(float *dst, const float *src, const int32_t *row_ids, int n, int width) {
    for (int r = 0; r < n; r++)
        for (int i = 0; i < width; i++)
            dst[(int64_t)r * width + i] = src[(int64_t)row_ids[r] * width + i];
}

void lm_ref_argmax_rows(int32_t *ids, const float *x, int rows, int n) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * n;
        int best = -1; /* NaN never wins; a row of only NaN (or n = 0) gives 0 */
        for (int i = 0; i < n; i++)
            if (!isnan(xr[i]) && (best < 0 || xr[i] > xr[best])) best = i;
        ids[r] = best < 0 ? 0 : best;
    }
}

void lm_ref_gdn_gates(float *beta, float *g, const float *neg_exp_A, const float *dt_bias, int n,
                      int H) {
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            int64_t i = (int64_t)t * H + h;
            beta[i] = lm_ref_sigmoid(beta[i]);
            g[i] = neg_exp_A[h] * lm_ref_softplus(g[i] + dt_bias[h]);
        }
}

void lm_ref_kv_write(const lm_host_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots) {
    int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;
    for (int t = 0; t < n; t++) {
        int64_t at = (int64_t)slots[t] * row;
        for (int64_t i = 0; i < row; i++) {
            float kf = k[(int64_t)t * row + i], vf = v[(int64_t)t * row + i];
            if (kv->k16) {
                kv->k16[at + i] = lm_f32_to_bf16(kf);
                kv->v16[at + i] = lm_f32_to_bf16(vf);
            } else {
                kv->k[at + i] = kf;
                kv->v[at + i] = vf;
            }
        }
    }
}

/* Element i of a k or v pool, float32 or bf16. */
static double pool_at(const float *f32, const uint16_t *b16, int64_t i) {
    return b16 ? (double)lm_bf16_to_f32(b16[i]) : (double)f32[i];
}

void lm_ref_attention(float *out, const float *q, const lm_host_kv_layer *kv,
                      const lm_host_attention_batch *b) {
    int D = b->head_dim, group = b->n_heads / b->n_kv_heads;
    int64_t kv_row = (int64_t)b->n_kv_heads * D;
    for (int t = 0; t < b->n_tokens; t++) {
        const int32_t *table = b->block_tables + (int64_t)b->token_seq[t] * b->table_stride;
        int len = b->ctx_len[t];
        double *scores = malloc(sizeof(double) * (size_t)(len > 0 ? len : 1));
        if (!scores) { /* a checking backend: wrong loudly rather than quietly */
            for (int64_t i = 0; i < (int64_t)b->n_heads * D; i++)
                out[(int64_t)t * b->n_heads * D + i] = NAN;
            continue;
        }
        for (int h = 0; h < b->n_heads; h++) {
            const float *qh = q + ((int64_t)t * b->n_heads + h) * D;
            int kvh = h / group;
            double max = -INFINITY;
            for (int j = 0; j < len; j++) {
                int64_t slot = (int64_t)table[j / kv->block_size] * kv->block_size + j % kv->block_size;
                int64_t kj = slot * kv_row + (int64_t)kvh * D;
                double dot = 0;
                for (int d = 0; d < D; d++) dot += (double)qh[d] * pool_at(kv->k, kv->k16, kj + d);
                scores[j] = dot * b->scale;
                if (scores[j] > max) max = scores[j];
            }
            double sum = 0;
            for (int j = 0; j < len; j++) sum += scores[j] = exp(scores[j] - max);
            float *oh = out + ((int64_t)t * b->n_heads + h) * D;
            for (int d = 0; d < D; d++) {
                double acc = 0;
                for (int j = 0; j < len; j++) {
                    int64_t slot = (int64_t)table[j / kv->block_size] * kv->block_size + j % kv->block_size;
                    acc += scores[j] * pool_at(kv->v, kv->v16, slot * kv_row + (int64_t)kvh * D + d);
                }
                oh[d] = (float)(acc / sum);
            }
        }
        free(scores);
    }
}

void lm_ref_causal_conv1d_silu(float *out, const float *in, int T, int C, float *state,
                               const float *weight, int K) {
    int hist = K - 1;
    for (int c = 0; c < C; c++) {
        const float *w = weight + (int64_t)c * K;
        float *st = state + (int64_t)c * hist;
        for (int t = 0; t < T; t++) {
            /* window = [x_{t-K+1} .. x_t]; indices < 0 come from the state */
            double acc = 0;
            for (int j = 0; j < K; j++) {
                int src = t - hist + j;
                float xv = src >= 0 ? in[(int64_t)src * C + c] : st[hist + src];
                acc += (double)w[j] * xv;
            }
            out[(int64_t)t * C + c] = silu((float)acc);
        }
        /* new state: the last K-1 inputs of [state ; in]; entry j comes from
         * index T + j >= j of the concatenation, so walking j upwards reads
         * every old entry before overwriting it */
        for (int j = 0; j < hist; j++) {
            int src = T + j;
            st[j] = src < hist ? st[src] : in[(int64_t)(src - hist) * C + c];
        }
    }
}

void lm_ref_gated_delta_rule(float *out, const float *q, const float *k, const float *v,
                             const float *g, const float *beta, float *state, int T, int Hk,
                             int Hv, int dk, int dv) {
    int group = Hv / Hk;
    for (int t = 0; t < T; t++) {
        for (int hv = 0; hv < Hv; hv++) {
            int hk = hv / group;
            const float *qt = q + ((int64_t)t * Hk + hk) * dk;
            const float *kt = k + ((int64_t)t * Hk + hk) * dk;
            const float *vt = v + ((int64_t)t * Hv + hv) * dv;
            float *S = state + (int64_t)hv * dk * dv;
            float *ot = out + ((int64_t)t * Hv + hv) * dv;
            float decay = expf(g[(int64_t)t * Hv + hv]);
            float b = beta[(int64_t)t * Hv + hv];
            /* Column j of S evolves on its own (Sᵀk and Sᵀq read column j
             * only), so each column runs the whole token step in turn. */
            for (int j = 0; j < dv; j++) {
                double m = 0;
                for (int i = 0; i < dk; i++) {
                    S[(int64_t)i * dv + j] *= decay;
                    m += (double)S[(int64_t)i * dv + j] * kt[i];
                }
                double mem = ((double)vt[j] - m) * b;
                double o = 0;
                for (int i = 0; i < dk; i++) {
                    S[(int64_t)i * dv + j] += (float)(kt[i] * mem);
                    o += (double)S[(int64_t)i * dv + j] * qt[i];
                }
                ot[j] = (float)o;
            }
        }
    }
}

void lm_ref_causal_conv1d_silu_batch(float *out, const float *in, int C, const float *weight, int K,
                                     float *states, int64_t slot_stride,
                                     const lm_host_seq_batch *seqs) {
    for (int s = 0; s < seqs->n_seqs; s++) {
        int64_t first = seqs->first[s];
        lm_ref_causal_conv1d_silu(out + first * C, in + first * C, seqs->length[s], C,
                                  states + (int64_t)seqs->slot[s] * slot_stride, weight, K);
    }
}

void lm_ref_gated_delta_rule_batch(float *out, const float *q, const float *k, const float *v,
                                   const float *g, const float *beta, float *states,
                                   int64_t slot_stride, const lm_host_seq_batch *seqs, int Hk,
                                   int Hv, int dk, int dv) {
    int64_t qk_row = (int64_t)Hk * dk, v_row = (int64_t)Hv * dv;
    for (int s = 0; s < seqs->n_seqs; s++) {
        int64_t f = seqs->first[s];
        lm_ref_gated_delta_rule(out + f * v_row, q + f * qk_row, k + f * qk_row, v + f * v_row,
                                g + f * Hv, beta + f * Hv,
                                states + (int64_t)seqs->slot[s] * slot_stride, seqs->length[s], Hk,
                                Hv, dk, dv);
    }
}

void lm_ref_add_rows(float *x, const float *bias, int rows, int width) {
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < width; i++) x[(int64_t)r * width + i] += bias[i];
}

/* ------------------------------------------------------ mixture of experts */

void lm_ref_sigmoid_scale_rows(float *x, const float *gate, int rows, int width) {
    for (int r = 0; r < rows; r++) {
        float s = lm_ref_sigmoid(gate[r]);
        for (int i = 0; i < width; i++) x[(int64_t)r * width + i] *= s;
    }
}

/* The index of the largest c[i] not yet taken (lower index on ties; -inf
 * counts, NaN never wins), or -1 when every candidate is taken or NaN. */
static int best_untaken(const float *c, const bool *taken, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && !isnan(c[i]) && (best < 0 || c[i] > c[best])) best = i;
    return best;
}

void lm_ref_moe_route(int32_t *ids, float *weights, const float *logits, int n,
                      const lm_moe_routing *r, const float *correction_bias) {
    int E = r->n_experts, k = r->top_k;
    int groups = r->n_group > 1 ? r->n_group : 1, per_group = E / groups;
    for (int t = 0; t < n; t++) {
        const float *l = logits + (int64_t)t * E;
        float s[LM_MOE_MAX_EXPERTS], c[LM_MOE_MAX_EXPERTS];
        bool taken[LM_MOE_MAX_EXPERTS] = {false};
        if (r->scoring == LM_MOE_SOFTMAX) {
            float top = -INFINITY;
            for (int e = 0; e < E; e++) top = l[e] > top ? l[e] : top;
            double sum = 0;
            for (int e = 0; e < E; e++) sum += (s[e] = expf(l[e] - top));
            for (int e = 0; e < E; e++) s[e] = (float)(s[e] / sum);
        } else {
            for (int e = 0; e < E; e++) s[e] = lm_ref_sigmoid(l[e]);
        }
        for (int e = 0; e < E; e++) c[e] = s[e] + (correction_bias ? correction_bias[e] : 0.0f);
        if (groups > 1) {
            /* Score each group by its two largest choices; keep the best
             * topk_group groups, mask the rest out of the selection. */
            float group_score[LM_MOE_MAX_EXPERTS];
            bool group_taken[LM_MOE_MAX_EXPERTS] = {false}, keep[LM_MOE_MAX_EXPERTS] = {false};
            for (int g = 0; g < groups; g++) {
                bool in_group[LM_MOE_MAX_EXPERTS] = {false};
                const float *cg = c + g * per_group;
                int a = best_untaken(cg, in_group, per_group);
                if (a >= 0) in_group[a] = true;
                int b = best_untaken(cg, in_group, per_group);
                group_score[g] = (a >= 0 ? cg[a] : -INFINITY) + (b >= 0 ? cg[b] : 0.0f);
            }
            for (int kept = 0; kept < r->topk_group && kept < groups; kept++) {
                int g = best_untaken(group_score, group_taken, groups);
                if (g < 0) break;
                group_taken[g] = keep[g] = true;
            }
            for (int e = 0; e < E; e++)
                if (!keep[e / per_group]) c[e] = -INFINITY;
        }
        double sum = 0;
        for (int j = 0; j < k; j++) {
            int e = best_untaken(c, taken, E);
            if (e < 0) e = 0; /* only NaN left: any valid id */
            taken[e] = true;
            ids[(int64_t)t * k + j] = e;
            weights[(int64_t)t * k + j] = s[e];
            sum += s[e];
        }
        for (int j = 0; j < k; j++) {
            float *w = &weights[(int64_t)t * k + j];
            if (r->renormalize) *w = (float)(*w / (sum + 1e-20));
            *w *= r->scale;
        }
    }
}

/* One expert on one row: y [H] = (silu(x·gateᵀ) ⊙ x·upᵀ)·downᵀ, with the
 * two [I] intermediates in tmp. */
static void expert_row(float *y, const float *x, const lm_moe_experts *ex, int e, float *tmp) {
    lm_host_matrix gate = lm_host_matrix_of(&ex->gate[e]), up = lm_host_matrix_of(&ex->up[e]);
    lm_host_matrix down = lm_host_matrix_of(&ex->down[e]);
    float *g = tmp, *u = tmp + ex->inter;
    lm_ref_matmul(g, x, 1, &gate);
    lm_ref_matmul(u, x, 1, &up);
    lm_ref_silu_mul(g, g, u, ex->inter);
    lm_ref_matmul(y, g, 1, &down);
}

void lm_ref_moe_experts(float *out, const float *x, int n, const int32_t *ids,
                        const float *weights, int k, const lm_moe_experts *ex, void *scratch) {
    int H = ex->hidden;
    float *tmp = scratch, *y = tmp + 2 * (size_t)ex->inter;
    for (int t = 0; t < n; t++) {
        float *o = out + (int64_t)t * H;
        for (int i = 0; i < H; i++) o[i] = 0.0f;
        for (int j = 0; j < k; j++) {
            int64_t p = (int64_t)t * k + j;
            int e = ids[p] - ex->first_expert; /* among the given experts */
            if (e < 0 || e >= ex->n_experts) continue; /* another rank's (expert parallelism) */
            expert_row(y, x + (int64_t)t * H, ex, e, tmp);
            for (int i = 0; i < H; i++) o[i] += weights[p] * y[i];
        }
    }
}
