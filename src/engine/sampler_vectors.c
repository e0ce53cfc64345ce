/* lm_sampler_vectors_<LM_KERNEL_SET>: the sampler's loops, compiled once per
 * kernel set (the Makefile's KERNEL_SRC_sampler, with -DLM_KERNEL_SET=<set>
 * and the set's -m flags). */
#include "engine/sampler_vectors.h"

#include <math.h>

#include "base/simd.h"

#ifndef LM_KERNEL_SET
#error "LM_KERNEL_SET is not defined: the Makefile compiles this file once per kernel set"
#endif

/* Vectors summed in float before the sum moves to double (bounds rounding). */
#define EXP_SUM_BLOCK 16

static float max_of(const float *x, int n) {
    lm_vf acc = lm_vf_set1(-INFINITY);
    int i = 0;
    /* lm_vf_max returns its second operand when either is NaN: acc survives. */
    for (; i + LM_VF_WIDTH <= n; i += LM_VF_WIDTH) acc = lm_vf_max(lm_vf_load(x + i), acc);
    float m = lm_vf_reduce_max(acc);
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static void exp_scaled(const float *x, int n, float shift, float scale, float *out) {
    lm_vf vs = lm_vf_set1(shift), vk = lm_vf_set1(scale);
    int i = 0;
    for (; i + LM_VF_WIDTH <= n; i += LM_VF_WIDTH)
        lm_vf_store(out + i, lm_vf_exp(lm_vf_mul(lm_vf_sub(lm_vf_load(x + i), vs), vk)));
    if (i < n) {
        int rest = n - i;
        lm_vf_store_part(out + i, lm_vf_exp(lm_vf_mul(lm_vf_sub(lm_vf_load_part(x + i, rest), vs), vk)),
                         rest);
    }
}

static double exp_sum(const float *x, int n, float shift) {
    lm_vf vs = lm_vf_set1(shift);
    double total = 0;
    int i = 0;
    while (i + LM_VF_WIDTH <= n) {
        lm_vf acc = lm_vf_zero();
        for (int j = 0; j < EXP_SUM_BLOCK && i + LM_VF_WIDTH <= n; j++, i += LM_VF_WIDTH)
            acc = lm_vf_add(acc, lm_vf_exp(lm_vf_sub(lm_vf_load(x + i), vs)));
        total += lm_vf_reduce_add(acc);
    }
    for (; i < n; i++) total += lm_exp_scalar(x[i] - shift);
    return total;
}

#define DESCRIPTOR_(s) lm_sampler_vectors_##s
#define DESCRIPTOR(s) DESCRIPTOR_(s)

const lm_sampler_vectors DESCRIPTOR(LM_KERNEL_SET) = {
    .set = LM_KERNEL_SET_ID(LM_KERNEL_SET),
    .max = max_of,
    .exp_scaled = exp_scaled,
    .exp_sum = exp_sum,
};
