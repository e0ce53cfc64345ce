/* The cpu backend's Gated DeltaNet ops: picks the recurrent or the chunked
 * form of the delta rule (gdn_recurrent.c, gdn_chunked.c) and runs the conv
 * (gdn_conv1d.c), all on the backend's thread pool. */
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gdn.h"
#include "ops/cpu/kernels.h"

void lm_cpu_causal_conv1d_silu(lm_backend *be, float *out, const float *in, int T, int C,
                               float *state, const float *weight, int K) {
    lm_gdn_conv1d_silu(lm_cpu_pool(be), out, in, T, C, state, weight, K, true);
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
void lm_cpu_gated_delta_rule(lm_backend *be, float *out, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, float *state, int T,
                             int Hk, int Hv, int dk, int dv) {
    lm_gdn_problem p = {.out = out,
                        .q = q,
                        .k = k,
                        .v = v,
                        .g = g,
                        .beta = beta,
                        .state = state,
                        .T = T,
                        .Hk = Hk,
                        .Hv = Hv,
                        .dk = dk,
                        .dv = dv};
    lm_pool *pool = lm_cpu_pool(be);
    if (LM_GDN_CHUNKED_MIN_T > 0 && T >= LM_GDN_CHUNKED_MIN_T && lm_gdn_chunked(pool, &p, true))
        return;
    lm_gdn_recurrent(pool, &p, true);
}
