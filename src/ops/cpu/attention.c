#include "ops/cpu/kernels.h"
#include "ops/cpu/reference.h"

void lm_cpu_kv_write(lm_backend *be, const lm_kv_layer *kv, const float *k, const float *v, int n,
                     const int32_t *slots) {
    (void)be;
    lm_ref_kv_write(kv, k, v, n, slots);
}
void lm_cpu_attention(lm_backend *be, float *out, const float *q, const lm_kv_layer *kv,
                      const lm_attention_batch *batch) {
    (void)be;
    lm_ref_attention(out, q, kv, batch);
}
