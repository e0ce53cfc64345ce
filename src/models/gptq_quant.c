#include "models/gptq_quant.h"

#include <math.h>
#include <string.h>

#include "base/bf16.h"
#include "base/ggml_quant.h"

/* AutoAWQ's order_map inverted (its AWQ_REVERSE_ORDER): the nibble of a
 * word that holds output o % 8. */
static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int64_t lm_int4_group_cols(int group_size, int64_t in) { return group_size > 0 ? group_size : in; }

int64_t lm_int4_groups(const lm_int4_quant *q, int64_t in) {
    int64_t g = lm_int4_group_cols(q->group_size, in);
    return g > 0 ? (in + g - 1) / g : 0;
}

int lm_int4_code(const lm_int4_matrix *m, int64_t o, int64_t i) {
    if (m->method == LM_INT4_AWQ) return (int)((m->qweight[i * (m->out / 8) + o / 8] >> (4 * awq_nibble[o % 8])) & 15u);
    return (int)((m->qweight[(i / 8) * m->out + o] >> (4 * (i % 8))) & 15u);
}

int lm_int4_zero(const lm_int4_matrix *m, int64_t g, int64_t o) {
    uint32_t word = m->qzeros[g * (m->out / 8) + o / 8];
    int nibble = m->method == LM_INT4_AWQ ? awq_nibble[o % 8] : (int)(o % 8);
    return (int)((word >> (4 * nibble)) & 15u) + m->zero_offset;
}

float lm_int4_scale(const lm_int4_matrix *m, int64_t g, int64_t o) {
    int64_t k = g * m->out + o;
    switch (m->scales_dtype) {
    case LM_DTYPE_F16: return lm_f16_to_f32(((const uint16_t *)m->scales)[k]);
    case LM_DTYPE_BF16: return lm_bf16_to_f32(((const uint16_t *)m->scales)[k]);
    default: return ((const float *)m->scales)[k];
    }
}

int64_t lm_int4_group_of(const lm_int4_matrix *m, int64_t i) { return m->g_idx ? m->g_idx[i] : i / m->group; }

bool lm_int4_gidx_in_order(const lm_int4_matrix *m, int64_t *bad_column) {
    *bad_column = -1;
    bool in_order = true;
    for (int64_t i = 0; m->g_idx && i < m->in; i++) {
        if (m->g_idx[i] < 0 || m->g_idx[i] >= m->groups) {
            *bad_column = i;
            return false;
        }
        if (m->g_idx[i] != i / m->group) in_order = false;
    }
    return in_order;
}

bool lm_int4_scales_are_f16(const lm_int4_matrix *m) {
    for (int64_t g = 0; g < m->groups; g++)
        for (int64_t o = 0; o < m->out; o++) {
            float s = lm_int4_scale(m, g, o);
            if (!isfinite(s) || lm_f16_to_f32(lm_ggml_f32_to_f16(s)) != s) return false;
        }
    return true;
}

bool lm_int4_zeros_all_8(const lm_int4_matrix *m) {
    for (int64_t g = 0; g < m->groups; g++)
        for (int64_t o = 0; o < m->out; o++)
            if (lm_int4_zero(m, g, o) != 8) return false;
    return true;
}

void lm_int4_dequantize_row(const lm_int4_matrix *m, int64_t o, float *out) {
    for (int64_t i = 0; i < m->in; i++) {
        int64_t g = lm_int4_group_of(m, i);
        out[i] = lm_int4_scale(m, g, o) * (float)(lm_int4_code(m, o, i) - lm_int4_zero(m, g, o));
    }
}

void lm_int4_row_to_blocks(const lm_int4_matrix *m, int64_t o, int64_t c0, int64_t n_cols, lm_dtype dtype,
                           uint8_t *dst) {
    size_t block_bytes = lm_dtype_block_bytes(dtype);
    for (int64_t b = 0; b < n_cols / 32; b++, dst += block_bytes) {
        int64_t first = c0 + 32 * b, g = first / m->group;
        uint16_t d = lm_ggml_f32_to_f16(lm_int4_scale(m, g, o));
        int z = lm_int4_zero(m, g, o);
        memcpy(dst, &d, sizeof d);
        if (dtype == LM_DTYPE_GGML_Q4_0) { /* d·(q − 8): z is 8 */
            for (int j = 0; j < 16; j++)
                dst[2 + j] = (uint8_t)(lm_int4_code(m, o, first + j) | lm_int4_code(m, o, first + j + 16) << 4);
            continue;
        }
        /* Q5_0: d·(q5 − 16), q5 = q − z + 16; bit j of qh the fifth bit of q5[j] */
        uint32_t qh = 0;
        uint8_t *qs = dst + 6;
        for (int j = 0; j < 16; j++) {
            int lo = lm_int4_code(m, o, first + j) - z + 16, hi = lm_int4_code(m, o, first + j + 16) - z + 16;
            qs[j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            qh |= (uint32_t)(lo >> 4 & 1) << j | (uint32_t)(hi >> 4 & 1) << (j + 16);
        }
        memcpy(dst + 2, &qh, sizeof qh);
    }
}
