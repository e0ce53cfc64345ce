#include "ops/cpu/kernels.h"
#include "ops/cpu/reference.h"

void lm_cpu_causal_conv1d_silu(lm_backend *be, float *out, const float *in, int T, int C,
                               float *state, const float *weight, int K) {
    (void)be;
    lm_ref_causal_conv1d_silu(out, in, T, C, state, weight, K);
}
void lm_cpu_gated_delta_rule(lm_backend *be, float *out, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, float *state,
                             int T, int Hk, int Hv, int dk, int dv) {
    (void)be;
    lm_ref_gated_delta_rule(out, q, k, v, g, beta, state, T, Hk, Hv, dk, dv);
}
