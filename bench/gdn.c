/* Times the Gated DeltaNet kernels (ops/cpu/gdn_*.c) at Qwen3.5-0.8B shapes
 * (Hk = Hv = 16, dk = dv = 128): the recurrent form at decode, and the
 * recurrent and chunked forms over a range of T (the crossover behind
 * LM_GDN_CHUNKED_MIN_T) up to a 512-token prefill.
 *   build/bench/gdn [threads (default 2)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threadpool.h"
#include "ops/cpu/gdn.h"
#include "ops/cpu/reference.h"

enum { HK = 16, HV = 16, DK = 128, DV = 128, MAX_T = 512, COLD_STATES = 48 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *random_floats(size_t n, unsigned *seed, float lo, float hi) {
    float *x = malloc(sizeof(float) * n);
    if (!x) return NULL;
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(*seed >> 8) / 16777216.0f;
    }
    return x;
}

static void l2_rows(float *x, size_t rows, int dim, float scale) {
    for (size_t r = 0; r < rows; r++) {
        float ss = 0, *row = x + r * (size_t)dim;
        for (int i = 0; i < dim; i++) ss += row[i] * row[i];
        float inv = scale / sqrtf(ss + 1e-6f);
        for (int i = 0; i < dim; i++) row[i] *= inv;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef enum { FORM_RECURRENT, FORM_CHUNKED, FORM_REFERENCE } form;

/* Median seconds per call over `reps` calls; `cold` rotates over
 * COLD_STATES states so each call finds its state out of cache, as a
 * decode step over many layers does. */
static double time_form(lm_pool *pool, form f, lm_gdn_problem p, float *states, bool cold,
                        int reps) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    size_t state_floats = (size_t)HV * DK * DV;
    for (int r = -2; r < reps; r++) { /* two warm-up calls */
        p.state = states + (cold ? (size_t)((r + 2) % COLD_STATES) * state_floats : 0);
        double t0 = now_s();
        if (f == FORM_RECURRENT)
            lm_gdn_recurrent(pool, &p, true);
        else if (f == FORM_CHUNKED)
            lm_gdn_chunked(pool, &p, true);
        else
            lm_ref_gated_delta_rule(p.out, p.q, p.k, p.v, p.g, p.beta, p.state, p.T, p.Hk, p.Hv,
                                    p.dk, p.dv);
        if (r >= 0) t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    double median = t[reps / 2];
    free(t);
    return median;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    lm_pool *pool;
    lm_error err;
    if (lm_pool_create(threads, &pool, &err) != LM_OK) {
        fprintf(stderr, "gdn bench: %s\n", err.message);
        return 1;
    }
    unsigned seed = 1;
    size_t qk_n = (size_t)MAX_T * HK * DK, v_n = (size_t)MAX_T * HV * DV;
    float *q = random_floats(qk_n, &seed, -1, 1), *k = random_floats(qk_n, &seed, -1, 1);
    float *v = random_floats(v_n, &seed, -1, 1), *out = random_floats(v_n, &seed, 0, 1);
    float *g = random_floats((size_t)MAX_T * HV, &seed, -2, -0.01f);
    float *beta = random_floats((size_t)MAX_T * HV, &seed, 0.05f, 0.95f);
    float *states = random_floats((size_t)COLD_STATES * HV * DK * DV, &seed, -0.1f, 0.1f);
    if (!q || !k || !v || !out || !g || !beta || !states) {
        fprintf(stderr, "gdn bench: out of memory\n");
        return 1;
    }
    l2_rows(q, (size_t)MAX_T * HK, DK, 1.0f / sqrtf(DK));
    l2_rows(k, (size_t)MAX_T * HK, DK, 1.0f);
    lm_gdn_problem p = {.out = out,
                        .q = q,
                        .k = k,
                        .v = v,
                        .g = g,
                        .beta = beta,
                        .state = states,
                        .T = 1,
                        .Hk = HK,
                        .Hv = HV,
                        .dk = DK,
                        .dv = DV};

    printf("gated delta rule, Hk=%d Hv=%d dk=%d dv=%d, %d threads (median of repeats)\n", HK, HV,
           DK, DV, threads);
    printf("decode T=1: recurrent %.1f us/token (state in cache), %.1f us/token (state cold), "
           "reference %.1f us/token\n",
           1e6 * time_form(pool, FORM_RECURRENT, p, states, false, 400),
           1e6 * time_form(pool, FORM_RECURRENT, p, states, true, 400),
           1e6 * time_form(pool, FORM_REFERENCE, p, states, false, 20));

    static const int Ts[] = {2, 3, 4, 5, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512};
    printf("%5s %16s %16s %10s\n", "T", "recurrent us/tok", "chunked us/tok", "rec/chunk");
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
        p.T = Ts[i];
        int reps = p.T >= 256 ? 7 : p.T >= 32 ? 21 : 101;
        double tr = time_form(pool, FORM_RECURRENT, p, states, true, reps);
        double tc = time_form(pool, FORM_CHUNKED, p, states, true, reps);
        printf("%5d %16.2f %16.2f %10.2f\n", p.T, 1e6 * tr / p.T, 1e6 * tc / p.T, tr / tc);
    }

    /* causal conv1d + SiLU over conv_dim = 2·Hk·dk + Hv·dv channels, K = 4 */
    enum { CONV_C = 2 * HK * DK + HV * DV, CONV_K = 4 };
    float *conv_w = random_floats((size_t)CONV_C * CONV_K, &seed, -0.5f, 0.5f);
    float *conv_state = random_floats((size_t)CONV_C * (CONV_K - 1), &seed, -1, 1);
    float *conv_in = random_floats((size_t)MAX_T * CONV_C, &seed, -1, 1);
    float *conv_out = malloc(sizeof(float) * (size_t)MAX_T * CONV_C);
    if (conv_w && conv_state && conv_in && conv_out) {
        static const int conv_T[] = {1, 512};
        for (int i = 0; i < 2; i++) {
            double best[2] = {1e9, 1e9};
            for (int r = 0; r < 21; r++)
                for (int ref = 0; ref < 2; ref++) {
                    double t0 = now_s();
                    if (ref)
                        lm_ref_causal_conv1d_silu(conv_out, conv_in, conv_T[i], CONV_C, conv_state,
                                                  conv_w, CONV_K);
                    else
                        lm_gdn_conv1d_silu(pool, conv_out, conv_in, conv_T[i], CONV_C, conv_state,
                                           conv_w, CONV_K, true);
                    double dt = now_s() - t0;
                    if (dt < best[ref]) best[ref] = dt;
                }
            printf("conv1d+silu C=%d K=%d T=%d: %.2f us (reference %.2f us), best of 21\n", CONV_C,
                   CONV_K, conv_T[i], 1e6 * best[0], 1e6 * best[1]);
        }
    }
    free(conv_w);
    free(conv_state);
    free(conv_in);
    free(conv_out);
    free(q);
    free(k);
    free(v);
    free(out);
    free(g);
    free(beta);
    free(states);
    lm_pool_destroy(pool);
    return 0;
}
