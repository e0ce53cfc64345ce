/* Gated DeltaNet kernels of the cpu backend (model-spec §A.7), behind
 * lm_cpu_gated_delta_rule and lm_cpu_causal_conv1d_silu (linear_attention.c).
 * Both ops take every sequence of a step at once (lm_seq_batch); the
 * arithmetic of one sequence never depends on what else is in the batch,
 * so results are bitwise the same batched or alone.
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
#include "ops/host/host_memory.h"

/* One gated-delta-rule call, with the shapes of lm_backend_ops.gated_delta_rule:
 * q, k [T, Hk, dk]; v, out [T, Hv, dv]; g, beta [T, Hv]; state [Hv, dk, dv]. */
typedef struct {
    float *out;
    const float *q, *k, *v, *g, *beta;
    float *state;
    int T, Hk, Hv, dk, dv;
} lm_gdn_problem;

/* A batched gated-delta-rule call, with the shapes of
 * lm_backend_ops.gated_delta_rule: sequence s has rows [first[s],
 * first[s] + length[s]) of q, k, v, out, g, beta and its state at
 * states + slot[s] * slot_stride. */
typedef struct {
    float *out;
    const float *q, *k, *v, *g, *beta;
    float *states;
    int64_t slot_stride;
    lm_host_seq_batch seqs;
    int Hk, Hv, dk, dv;
} lm_gdn_batch;

/* Sequence s of a batch as a one-sequence problem. */
static inline lm_gdn_problem lm_gdn_problem_of(const lm_gdn_batch *b, int s) {
    size_t f = (size_t)b->seqs.first[s];
    size_t qk_row = (size_t)b->Hk * (size_t)b->dk, v_row = (size_t)b->Hv * (size_t)b->dv;
    return (lm_gdn_problem){.out = b->out + f * v_row,
                            .q = b->q + f * qk_row,
                            .k = b->k + f * qk_row,
                            .v = b->v + f * v_row,
                            .g = b->g + f * (size_t)b->Hv,
                            .beta = b->beta + f * (size_t)b->Hv,
                            .state = b->states + (size_t)b->seqs.slot[s] * (size_t)b->slot_stride,
                            .T = b->seqs.length[s],
                            .Hk = b->Hk,
                            .Hv = b->Hv,
                            .dk = b->dk,
                            .dv = b->dv};
}

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
/* The recurrent form of every sequence of a batch whose length is below
 * `max_T` (INT32_MAX: all of them), as one pool run over (sequence, value
 * head) tasks: decode of many sequences wakes the pool once per layer, not
 * once per sequence. */
void lm_gdn_recurrent_batch(lm_pool *pool, const lm_gdn_batch *b, int max_T, bool simd);

/* Returns false, leaving out and state untouched, only when its scratch
 * memory (about C·(2·dk + dv) + 3·C² floats per worker) cannot be allocated;
 * the caller then falls back to the recurrent form. */
bool lm_gdn_chunked(lm_pool *pool, const lm_gdn_problem *p, bool simd);

/* Causal depthwise conv + SiLU with the contract of
 * lm_backend_ops.causal_conv1d_silu. */
void lm_gdn_conv1d_silu(lm_pool *pool, float *out, const float *in, int T, int C, float *state,
                        const float *weight, int K, bool simd);
/* The same over every sequence of a batch (in, out rows of C floats; each
 * window at states + slot * slot_stride).  Short sequences (decode) share
 * pool runs as (sequence, channel range) tasks; long ones get a run each. */
void lm_gdn_conv1d_silu_batch(lm_pool *pool, float *out, const float *in, int C,
                              const float *weight, int K, float *states, int64_t slot_stride,
                              const lm_host_seq_batch *seqs, bool simd);

/* Runs fn over n_tasks on the pool, or inline when there is no pool. */
static inline void lm_gdn_run(lm_pool *pool, int n_tasks, lm_pool_fn fn, void *ctx) {
    if (pool)
        lm_pool_run(pool, n_tasks, fn, ctx);
    else
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, n_tasks);
}

#endif
