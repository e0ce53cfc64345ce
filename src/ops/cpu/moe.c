/* The cpu backend's routed experts: the step's (token, slot) pairs are
 * sorted by expert (a counting sort); the touched experts are taken in
 * waves of up to lm_moe_wave_rows pairs, and each wave runs its experts'
 * gate and up matmuls in one pool run, one SwiGLU over all its rows and its
 * down matmuls in a second run (a decode step's 8 experts cost two hand-offs
 * instead of 32).  Every token then sums its experts' rows in slot order
 * with its weights, so the result does not depend on the order of the
 * groups or the waves.  Pairs routed to an expert outside the given range
 * (expert parallelism: another rank's) are left out of the sort and of the
 * sums. */
#include <string.h>

#include "ops/cpu/kernels.h"

/* Whether expert id is one of the E given, [first, first + E). */
static bool is_local(int32_t id, int first, int E) { return id >= first && id - first < E; }

typedef struct {
    int first, count; /* the expert's pairs: order[first .. first + count) */
    int row;          /* its rows in the wave's arrays */
} wave_expert;

/* Runs one wave: experts[0..n) with their rows gathered at rows/gate/up. */
static void run_wave(lm_pool *pool, const lm_moe_experts *ex, const int32_t *expert_ids,
                     const wave_expert *w, int n, int wave_rows, float *rows, float *gate, float *up,
                     lm_host_matrix *mats, lm_cpu_matmul_call *calls) {
    int H = ex->hidden, I = ex->inter;
    for (int i = 0; i < n; i++) {
        int e = expert_ids[i];
        mats[3 * i] = lm_host_matrix_of(&ex->gate[e]);
        mats[3 * i + 1] = lm_host_matrix_of(&ex->up[e]);
        mats[3 * i + 2] = lm_host_matrix_of(&ex->down[e]);
        const float *x = rows + (size_t)w[i].row * H;
        calls[2 * i] = (lm_cpu_matmul_call){gate + (size_t)w[i].row * I, x, w[i].count, &mats[3 * i]};
        calls[2 * i + 1] = (lm_cpu_matmul_call){up + (size_t)w[i].row * I, x, w[i].count, &mats[3 * i + 1]};
    }
    lm_cpu_matmul_many(pool, calls, 2 * n);
    lm_cpu_silu_mul(pool, gate, gate, up, (int64_t)wave_rows * I);
    for (int i = 0; i < n; i++) /* rows are free again: the outputs */
        calls[i] = (lm_cpu_matmul_call){rows + (size_t)w[i].row * H, gate + (size_t)w[i].row * I,
                                        w[i].count, &mats[3 * i + 2]};
    lm_cpu_matmul_many(pool, calls, n);
}

void lm_cpu_moe_experts(lm_pool *pool, float *out, const float *x, int n, const int32_t *ids,
                        const float *weights, int k, const lm_moe_experts *ex, void *scratch) {
    int E = ex->n_experts, H = ex->hidden, I = ex->inter, first = ex->first_expert;
    size_t pairs = (size_t)n * (size_t)k, cap = lm_moe_wave_rows(n, k);
    /* scratch (ops.h): rows [cap, H] | gate [cap, I] | up [cap, I] | per-pair
     * outputs [pairs, H] | pair order [pairs] | expert starts [E + 1] */
    float *rows = scratch, *gate = rows + cap * H, *up = gate + cap * I;
    float *pair_out = up + cap * I;
    int32_t *order = (int32_t *)(pair_out + pairs * H), *start = order + pairs;
    memset(start, 0, sizeof(int32_t) * ((size_t)E + 1));
    for (size_t p = 0; p < pairs; p++)
        if (is_local(ids[p], first, E)) start[ids[p] - first + 1]++;
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    {
        int32_t *next = start; /* filled in place, then shifted back */
        for (size_t p = 0; p < pairs; p++)
            if (is_local(ids[p], first, E)) order[next[ids[p] - first]++] = (int32_t)p;
        for (int e = E; e > 0; e--) start[e] = start[e - 1];
        start[0] = 0;
    }
    /* Waves of at most LM_CPU_MATMUL_MANY_MAX / 2 experts and cap rows. */
    enum { WAVE_EXPERTS = LM_CPU_MATMUL_MANY_MAX / 2 };
    wave_expert wave[WAVE_EXPERTS];
    int32_t wave_ids[WAVE_EXPERTS];
    lm_host_matrix mats[3 * WAVE_EXPERTS];
    lm_cpu_matmul_call calls[2 * WAVE_EXPERTS];
    int in_wave = 0, wave_rows = 0;
    for (int e = 0; e <= E; e++) {
        int count = e < E ? start[e + 1] - start[e] : 0;
        bool full = in_wave == WAVE_EXPERTS || (size_t)(wave_rows + count) > cap;
        if (in_wave > 0 && (e == E || (count > 0 && full))) {
            run_wave(pool, ex, wave_ids, wave, in_wave, wave_rows, rows, gate, up, mats, calls);
            for (int i = 0; i < in_wave; i++)
                for (int j = 0; j < wave[i].count; j++) {
                    int32_t p = order[wave[i].first + j];
                    memcpy(pair_out + (size_t)p * H, rows + (size_t)(wave[i].row + j) * H,
                           sizeof(float) * H);
                }
            in_wave = wave_rows = 0;
        }
        if (count == 0) continue;
        wave[in_wave] = (wave_expert){.first = start[e], .count = count, .row = wave_rows};
        wave_ids[in_wave++] = e;
        for (int j = 0; j < count; j++) /* a token routes to an expert at most once */
            memcpy(rows + (size_t)(wave_rows + j) * H, x + (size_t)(order[start[e] + j] / k) * H,
                   sizeof(float) * H);
        wave_rows += count;
    }
    for (int t = 0; t < n; t++) {
        float *o = out + (size_t)t * H;
        memset(o, 0, sizeof(float) * H);
        for (int j = 0; j < k; j++) {
            size_t p = (size_t)t * k + j;
            if (!is_local(ids[p], first, E)) continue; /* its pair_out row was never written */
            const float *y = pair_out + p * H;
            for (int i = 0; i < H; i++) o[i] += weights[p] * y[i];
        }
    }
}
