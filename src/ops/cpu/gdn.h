/* Gated DeltaNet kernels of the cpu backend (model-spec §A.7), behind
 * lm_cpu_gated_delta_rule and lm_cpu_causal_conv1d_silu (linear_attention.c).
 *
 * Two forms of the same recurrence, both parallel over value heads:
 *   recurrent (gdn_recurrent.c): token by token.  The state of a head is
 *     walked in column tiles that stay in L1 across all T tokens, so S is
 *     read and written once per call, whatever T is.
 *   chunked (gdn_chunked.c): chunks of LM_GDN_CHUNK tokens as small
 *     matrix-matrix products (the UT form of model-spec §A.7).
 * lm_cpu_gated_delta_rule picks one by LM_GDN_CHUNKED_MIN_T.  Exposed here
 * so tests can run either form directly. */
#ifndef LOOM_OPS_CPU_GDN_H
#define LOOM_OPS_CPU_GDN_H

#include <stdbool.h>

#include "base/threadpool.h"

/* One gated-delta-rule call, with the shapes of lm_backend_ops.gated_delta_rule:
 * q, k [T, Hk, dk]; v, out [T, Hv, dv]; g, beta [T, Hv]; state [Hv, dk, dv]. */
typedef struct {
    float *out;
    const float *q, *k, *v, *g, *beta;
    float *state;
    int T, Hk, Hv, dk, dv;
} lm_gdn_problem;

enum {
    LM_GDN_CHUNK = 64, /* tokens per chunk of the chunked form (as HF) */
    /* lm_cpu_gated_delta_rule takes the chunked form from this many tokens
     * on; 0 = never.  It is 0 because the recurrent form measured as fast
     * or faster at every T (linear_attention.c has the numbers). */
    LM_GDN_CHUNKED_MIN_T = 0,
};

/* `simd` false forces the portable C code even where AVX-512 was compiled
 * in (tests compare the two).  pool may be NULL: the caller's thread does
 * all the work. */
void lm_gdn_recurrent(lm_pool *pool, const lm_gdn_problem *p, bool simd);

/* Returns false, leaving out and state untouched, only when its scratch
 * memory (about C·(2·dk + dv) + 3·C² floats per worker) cannot be allocated;
 * the caller then falls back to the recurrent form. */
bool lm_gdn_chunked(lm_pool *pool, const lm_gdn_problem *p, bool simd);

/* Causal depthwise conv + SiLU with the contract of
 * lm_backend_ops.causal_conv1d_silu. */
void lm_gdn_conv1d_silu(lm_pool *pool, float *out, const float *in, int T, int C, float *state,
                        const float *weight, int K, bool simd);

/* Runs fn over n_tasks on the pool, or inline when there is no pool. */
static inline void lm_gdn_run(lm_pool *pool, int n_tasks, lm_pool_fn fn, void *ctx) {
    if (pool)
        lm_pool_run(pool, n_tasks, fn, ctx);
    else
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, n_tasks);
}

#endif
