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

void lm_cpu_gated_delta_rule(lm_backend *be, float *out, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, float *state,
                             int T, int Hk, int Hv, int dk, int dv) {
    lm_gdn_problem p = {.out = out, .q = q, .k = k, .v = v, .g = g, .beta = beta,
                        .state = state, .T = T, .Hk = Hk, .Hv = Hv, .dk = dk, .dv = dv};
    lm_pool *pool = lm_cpu_pool(be);
    if (T >= LM_GDN_CHUNKED_MIN_T && lm_gdn_chunked(pool, &p, true)) return;
    lm_gdn_recurrent(pool, &p, true);
}
