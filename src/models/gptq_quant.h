/* GPTQ and AWQ int4 checkpoints (issue 51): the packing of their Linear
 * layers as AutoGPTQ and AutoAWQ write it, read back exactly.
 *
 * A quantized Linear X of `out` rows and `in` columns is X.qweight,
 * X.qzeros, X.scales (and for GPTQ X.g_idx), no X.weight; its weight is
 *     w[o][i] = scales[g][o] · (q[o][i] − z[g][o]),   g = g_idx[i]
 * (computed here in float32, where it is exact: an f16 scale times an
 * integer of 5 bits).  The two formats differ in where a code sits:
 *
 * - GPTQ (AutoGPTQ's nn_modules/qlinear/qlinear_cuda.py `pack`): qweight
 *   int32 [in/8, out], code (o, i) in word [i/8][o] at bits 4·(i%8); qzeros
 *   int32 [groups, out/8], zero (g, o) in word [g][o/8] at bits 4·(o%8),
 *   stored as z − 1 (the historical offset of checkpoint_format "gptq";
 *   "gptq_v2" stores z); scales [groups, out]; g_idx int32 [in], the group
 *   of column i (i / group_size, or the order desc_act made); groups =
 *   ceil(in / group_size), group_size −1 meaning one group (per channel).
 * - AWQ (AutoAWQ's awq/modules/linear/gemm.py `WQLinear_GEMM.from_linear`,
 *   version "gemm"): qweight int32 [in, out/8], code (o, i) in word
 *   [i][o/8] at bits 4·k where order [0, 2, 4, 6, 1, 3, 5, 7][k] = o % 8;
 *   qzeros int32 [in/group, out/8] in the same interleaved order, z as is;
 *   scales [in/group, out]; group i / group_size.
 *
 * loom runs them as ggml blocks holding the same weights exactly: Q4_0
 * (d·(q − 8)) when every zero is 8 (GPTQ sym=true), else Q5_0 (d·(q5 −
 * 16), q5 = q − z + 16 in [0, 31] for any z in [0, 16]), d the group's
 * scale (f16 as stored).  Matrices whose groups do not run in 32-column
 * blocks (desc_act's permuted g_idx) or whose scales f16 cannot hold are
 * decoded to float32 (models/weights.c says so at startup). */
#ifndef LOOM_MODELS_GPTQ_QUANT_H
#define LOOM_MODELS_GPTQ_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"

typedef enum { LM_INT4_NONE, LM_INT4_GPTQ, LM_INT4_AWQ } lm_int4_method;

/* config.json's quantization_config for GPTQ/AWQ (models/weights.c reads it). */
typedef struct {
    lm_int4_method method;
    int group_size;  /* > 0, or -1: one group per row (per channel) */
    int zero_offset; /* added to a stored zero: 1 for GPTQ's "gptq" format, else 0 */
} lm_int4_quant;

/* One quantized matrix's tensors, checked by the loader. */
typedef struct {
    lm_int4_method method;
    const uint32_t *qweight, *qzeros;
    const void *scales;
    lm_dtype scales_dtype; /* F16, BF16 or F32 */
    const int32_t *g_idx;  /* NULL: column i is in group i / group */
    int64_t out, in, group, groups;
    int zero_offset;
} lm_int4_matrix;

/* The effective columns a group (group_size −1: in) and the groups of a
 * matrix of `in` columns (GPTQ: ceil(in / group); AWQ needs it to divide). */
int64_t lm_int4_group_cols(int group_size, int64_t in);
int64_t lm_int4_groups(const lm_int4_quant *q, int64_t in);

int lm_int4_code(const lm_int4_matrix *m, int64_t o, int64_t i);
int lm_int4_zero(const lm_int4_matrix *m, int64_t g, int64_t o);
float lm_int4_scale(const lm_int4_matrix *m, int64_t g, int64_t o);
int64_t lm_int4_group_of(const lm_int4_matrix *m, int64_t i);

/* Whether g_idx (when present) is i / group for every column, each value
 * in [0, groups): the groups then run in whole blocks.  *bad_column is the
 * first column whose group is outside [0, groups) (-1: none). */
bool lm_int4_gidx_in_order(const lm_int4_matrix *m, int64_t *bad_column);
/* Whether every scale is a float16 value and finite. */
bool lm_int4_scales_are_f16(const lm_int4_matrix *m);
/* Whether every zero point is 8 (symmetric: Q4_0 holds it). */
bool lm_int4_zeros_all_8(const lm_int4_matrix *m);

/* Row o's `in` weights in float32, exactly. */
void lm_int4_dequantize_row(const lm_int4_matrix *m, int64_t o, float *out);
/* Columns [c0, c0 + n_cols) (multiples of 32, groups in order, scales
 * f16) of row o as Q4_0 or Q5_0 blocks at dst. */
void lm_int4_row_to_blocks(const lm_int4_matrix *m, int64_t o, int64_t c0, int64_t n_cols, lm_dtype dtype,
                           uint8_t *dst);

#endif
