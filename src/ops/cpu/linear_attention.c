/* The cpu backend's Gated DeltaNet ops: the gates, the conv (gdn_conv1d.c)
 * and the delta rule in its recurrent or chunked form (gdn_recurrent.c,
 * gdn_chunked.c), all on the backend's thread pool, over every sequence of
 * a step at once. */
#include <stdint.h>

#include "ops/cpu/gdn.h"
#include "ops/cpu/kernels.h"
#include "ops/ref/reference.h"

/* A few floats per token and head: scalar, on the calling thread, with
 * the reference's formulas, so every host backend (and the model code
 * this replaced) gets the same bits. */
void lm_cpu_gdn_gates(float *beta, float *g, const float *neg_exp_A, const float *dt_bias, int n,
                      int H) {
    lm_ref_gdn_gates(beta, g, neg_exp_A, dt_bias, n, H);
}

void lm_cpu_causal_conv1d_silu(lm_pool *pool, float *out, const float *in, int C,
                               const float *weight, int K, float *states, int64_t slot_stride,
                               const lm_host_seq_batch *seqs) {
    lm_gdn_conv1d_silu_batch(pool, out, in, C, weight, K, states, slot_stride, seqs, true);
}

/* Recurrent or chunked, measured with bench/gdn.c at the Qwen3.5 shape
 * (Hk = Hv = 16, dk = dv = 128), microseconds per token, T = 2..512:
 *   2-core AMD EPYC (Zen 5) VM of this project, busy neighbours, 1 thread:
 *     recurrent/chunked T = 2: 44/70, 5: 23/29, 16: 14/16, 64: 12/16,
 *     512: 13/18 (chunked never more than 4% faster, at T = 4);
 *   idle Intel Xeon host, 1 thread: T = 16: 21/23, 128: 19/24, 512: 23/25;
 *     2 threads: T = 4: 20/17, 16: 11.0/10.7, 128: 9.5/12.1, 512: 10.4/12.8
 *     (the chunked form won only at 2 threads and T = 3..16, by up to 24%).
 * Why no big win for the chunked form, as on GPUs: with dk = dv = 128 and
 * C = 64 it does as many multiply-adds per token as the recurrence
 * (3·dk·dv for W·S, Q·S and Kᵀ·V' plus ~C·(dk+dv) for the triangular
 * products, against 4·dk·dv), and the recurrence here already reads S from
 * memory once per call, not once per token (column tiles stay in L1 for all
 * T tokens).  So LM_GDN_CHUNKED_MIN_T is 0: the recurrent form runs for
 * every T, decode, verify and prefill alike.  The chunked form stays,
 * tested against the same float64 reference, for hardware where it wins. */
void lm_cpu_gated_delta_rule(lm_pool *pool, const lm_gdn_batch *b) {
    /* Which form a sequence takes depends on its own length only, so a
     * sequence gets the same arithmetic batched or alone. */
    int chunked_from = LM_GDN_CHUNKED_MIN_T > 0 ? LM_GDN_CHUNKED_MIN_T : INT32_MAX;
    for (int s = 0; s < b->seqs.n_seqs && chunked_from < INT32_MAX; s++) {
        if (b->seqs.length[s] < chunked_from) continue;
        lm_gdn_problem p = lm_gdn_problem_of(b, s);
        if (!lm_gdn_chunked(pool, &p, true)) lm_gdn_recurrent(pool, &p, true);
    }
    lm_gdn_recurrent_batch(pool, b, chunked_from, true);
}
