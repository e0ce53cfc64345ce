/* The sampler's vector loops over a row of logits (base/simd.h), compiled
 * once per kernel set of the build (base/kernel_set.h) like the cpu
 * backend's kernels: sampler_vectors.c becomes lm_sampler_vectors_<set>,
 * and a sampler scratch holds the set chosen when it was made. */
#ifndef LOOM_ENGINE_SAMPLER_VECTORS_H
#define LOOM_ENGINE_SAMPLER_VECTORS_H

#include "base/kernel_set.h"

typedef struct lm_sampler_vectors {
    lm_kernel_set set;
    /* The largest element, ignoring NaN (-inf when there is none). */
    float (*max)(const float *x, int n);
    /* out[i] = exp((x[i] - shift) * scale); out may be x. */
    void (*exp_scaled)(const float *x, int n, float shift, float scale, float *out);
    /* sum of exp(x[i] - shift), float within short blocks, double across them. */
    double (*exp_sum)(const float *x, int n, float shift);
} lm_sampler_vectors;

/* The loops of one set; NULL when the build lacks it. */
const lm_sampler_vectors *lm_sampler_vectors_of(lm_kernel_set set);
/* The loops of $LOOM_CPU_KERNELS's set, else of the best set this CPU runs
 * (lm_kernel_set_for_process); refused as that is. */
lm_status lm_sampler_vectors_for_process(const lm_sampler_vectors **out, lm_error *err);

#endif
