#include "ops/cpu/reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"

float lm_ref_weight_at(const lm_matrix *w, int64_t row, int64_t col) {
    int64_t i = row * w->cols + col;
    switch (w->dtype) {
    case LM_DTYPE_BF16: return lm_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case LM_DTYPE_F16: return lm_f16_to_f32(((const uint16_t *)w->data)[i]);
    case LM_DTYPE_F32: return ((const float *)w->data)[i];
    default: return NAN; /* loaders only hand float matrices to kernels */
    }
}

void lm_ref_matmul(float *y, const float *x, int n, const lm_matrix *w) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (int64_t)t * w->cols;
        for (int64_t o = 0; o < w->rows; o++) {
            double acc = 0;
            for (int64_t i = 0; i < w->cols; i++) acc += (double)lm_ref_weight_at(w, o, i) * xt[i];
            y[(int64_t)t * w->rows + o] = (float)acc;
        }
    }
}

void lm_ref_embed(float *out, const int32_t *ids, int n, const lm_matrix *table) {
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
static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

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
    if (rope->interleaved_sections) {
        if (i % 3 == 1 && i < 3 * s[1]) return 1;
        if (i % 3 == 2 && i < 3 * s[2]) return 2;
        return 0;
    }
    if (i < s[0]) return 0;
    if (i < s[0] + s[1]) return 1;
    return 2;
}

void lm_ref_rope(float *x, int n, int n_heads, int head_dim, const int32_t *positions,
                 const lm_rope_params *rope) {
    int half = rope->rot_dim / 2;
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < half; i++) {
            float inv_freq = rope->inv_freq ? rope->inv_freq[i]
                                            : powf(rope->theta, -2.0f * (float)i / (float)rope->rot_dim);
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

void lm_ref_sigmoid_mul(float *x, const float *gate, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= sigmoid(gate[i]);
}

void lm_ref_add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

void lm_ref_kv_write(const lm_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots) {
    int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;
    for (int t = 0; t < n; t++) {
        memcpy(kv->k + (int64_t)slots[t] * row, k + (int64_t)t * row, (size_t)row * sizeof(float));
        memcpy(kv->v + (int64_t)slots[t] * row, v + (int64_t)t * row, (size_t)row * sizeof(float));
    }
}

void lm_ref_attention(float *out, const float *q, const lm_kv_layer *kv,
                      const lm_attention_batch *b) {
    int D = b->head_dim, group = b->n_heads / b->n_kv_heads;
    int64_t kv_row = (int64_t)b->n_kv_heads * D;
    for (int t = 0; t < b->n_tokens; t++) {
        const int32_t *table = b->block_tables[b->token_seq[t]];
        int len = b->ctx_len[t];
        double *scores = malloc(sizeof(double) * (size_t)(len > 0 ? len : 1));
        if (!scores) return;
        for (int h = 0; h < b->n_heads; h++) {
            const float *qh = q + ((int64_t)t * b->n_heads + h) * D;
            int kvh = h / group;
            double max = -INFINITY;
            for (int j = 0; j < len; j++) {
                int64_t slot = (int64_t)table[j / kv->block_size] * kv->block_size + j % kv->block_size;
                const float *kj = kv->k + slot * kv_row + (int64_t)kvh * D;
                double dot = 0;
                for (int d = 0; d < D; d++) dot += (double)qh[d] * kj[d];
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
                    acc += scores[j] * kv->v[slot * kv_row + (int64_t)kvh * D + d];
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
        /* new state: the last K-1 inputs of [state ; in] */
        float tmp[64];
        int total = hist + T;
        for (int j = 0; j < hist && j < 64; j++) {
            int src = total - hist + j; /* index into the concatenation */
            tmp[j] = src < hist ? st[src] : in[(int64_t)(src - hist) * C + c];
        }
        memcpy(st, tmp, sizeof(float) * (size_t)hist);
    }
}

void lm_ref_gated_delta_rule(float *out, const float *q, const float *k, const float *v,
                             const float *g, const float *beta, float *state, int T, int Hk,
                             int Hv, int dk, int dv) {
    int group = Hv / Hk;
    double *mem = malloc(sizeof(double) * (size_t)dv);
    if (!mem) return;
    for (int t = 0; t < T; t++) {
        for (int hv = 0; hv < Hv; hv++) {
            int hk = hv / group;
            const float *qt = q + ((int64_t)t * Hk + hk) * dk;
            const float *kt = k + ((int64_t)t * Hk + hk) * dk;
            const float *vt = v + ((int64_t)t * Hv + hv) * dv;
            float *S = state + (int64_t)hv * dk * dv;
            float decay = expf(g[(int64_t)t * Hv + hv]);
            float b = beta[(int64_t)t * Hv + hv];
            for (int64_t i = 0; i < (int64_t)dk * dv; i++) S[i] *= decay;
            for (int j = 0; j < dv; j++) {
                double m = 0;
                for (int i = 0; i < dk; i++) m += (double)S[(int64_t)i * dv + j] * kt[i];
                mem[j] = ((double)vt[j] - m) * b;
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) S[(int64_t)i * dv + j] += (float)(kt[i] * mem[j]);
            float *ot = out + ((int64_t)t * Hv + hv) * dv;
            for (int j = 0; j < dv; j++) {
                double o = 0;
                for (int i = 0; i < dk; i++) o += (double)S[(int64_t)i * dv + j] * qt[i];
                ot[j] = (float)o;
            }
        }
    }
    free(mem);
}
