/* The cpu backend's routed experts: the step's (token, slot) pairs are
 * sorted by expert (a counting sort), each touched expert runs its three
 * matmuls once over the rows of its tokens, gathered, with the tuned
 * kernels, and every token then sums its experts' rows in slot order with
 * its weights, so the result does not depend on the order of the groups. */
#include <string.h>

#include "ops/cpu/kernels.h"

void lm_cpu_moe_experts(lm_pool *pool, float *out, const float *x, int n, const int32_t *ids,
                        const float *weights, int k, const lm_moe_experts *ex, void *scratch) {
    int E = ex->n_experts, H = ex->hidden, I = ex->inter;
    size_t pairs = (size_t)n * (size_t)k;
    /* scratch: rows [n, H] | gate [n, I] | up [n, I] | per-pair outputs
     * [pairs, H] | pair order [pairs] | expert starts [E + 1] */
    float *rows = scratch, *gate = rows + (size_t)n * H, *up = gate + (size_t)n * I;
    float *pair_out = up + (size_t)n * I;
    int32_t *order = (int32_t *)(pair_out + pairs * H), *start = order + pairs;

    memset(start, 0, sizeof(int32_t) * ((size_t)E + 1));
    for (size_t p = 0; p < pairs; p++) start[ids[p] + 1]++;
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    {
        int32_t *next = start; /* filled in place, then shifted back */
        for (size_t p = 0; p < pairs; p++) order[next[ids[p]]++] = (int32_t)p;
        for (int e = E; e > 0; e--) start[e] = start[e - 1];
        start[0] = 0;
    }
    for (int e = 0; e < E; e++) {
        int count = start[e + 1] - start[e];
        if (count == 0) continue;
        const int32_t *group = order + start[e];
        for (int i = 0; i < count; i++) /* a token routes to an expert at most once */
            memcpy(rows + (size_t)i * H, x + (size_t)(group[i] / k) * H, sizeof(float) * H);
        lm_host_matrix g = lm_host_matrix_of(&ex->gate[e]), u = lm_host_matrix_of(&ex->up[e]);
        lm_host_matrix d = lm_host_matrix_of(&ex->down[e]);
        lm_cpu_matmul(pool, gate, rows, count, &g);
        lm_cpu_matmul(pool, up, rows, count, &u);
        lm_cpu_silu_mul(pool, gate, gate, up, (int64_t)count * I);
        lm_cpu_matmul(pool, rows, gate, count, &d); /* rows is free again: the outputs */
        for (int i = 0; i < count; i++)
            memcpy(pair_out + (size_t)group[i] * H, rows + (size_t)i * H, sizeof(float) * H);
    }
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * H;
        memset(o, 0, sizeof(float) * H);
        for (int j = 0; j < k; j++) {
            size_t p = (size_t)t * k + j;
            const float *y = pair_out + p * H;
            for (int i = 0; i < H; i++) o[i] += weights[p] * y[i];
        }
    }
}
