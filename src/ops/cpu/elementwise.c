#include "ops/cpu/kernels.h"
#include "ops/cpu/reference.h"

void lm_cpu_rmsnorm(lm_backend *be, float *out, const float *x, const float *w, int rows, int dim,
                    float eps) {
    (void)be;
    lm_ref_rmsnorm(out, x, w, rows, dim, eps);
}
void lm_cpu_gated_rmsnorm(lm_backend *be, float *out, const float *x, const float *z,
                          const float *w, int rows, int dim, float eps) {
    (void)be;
    lm_ref_gated_rmsnorm(out, x, z, w, rows, dim, eps);
}
void lm_cpu_l2norm_scale(lm_backend *be, float *x, int rows, int dim, float eps, float scale) {
    (void)be;
    lm_ref_l2norm_scale(x, rows, dim, eps, scale);
}
void lm_cpu_rope(lm_backend *be, float *x, int n, int n_heads, int head_dim,
                 const int32_t *positions, const lm_rope_params *rope) {
    (void)be;
    lm_ref_rope(x, n, n_heads, head_dim, positions, rope);
}
void lm_cpu_silu_mul(lm_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    (void)be;
    lm_ref_silu_mul(out, gate, up, n);
}
void lm_cpu_sigmoid_mul(lm_backend *be, float *x, const float *gate, int64_t n) {
    (void)be;
    lm_ref_sigmoid_mul(x, gate, n);
}
void lm_cpu_add(lm_backend *be, float *x, const float *y, int64_t n) {
    (void)be;
    lm_ref_add(x, y, n);
}
