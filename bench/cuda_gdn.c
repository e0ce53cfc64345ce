/* The cuda backend's gated delta rule at the Qwen3.5-9B / 35B-A3B head
 * layout (16 key heads, 32 value heads, dk = dv = 128): one layer's call
 * over a prefill of T tokens, in the chunked form (the default from 16 rows
 * on) and in the recurrent form (LOOM_CUDA_GDN_CHUNKED=0), with the
 * relative difference of their outputs and final states.  Each call starts
 * from the same state; a round is timed from its queueing to the
 * synchronize, after one untimed round.  The chunked column is whatever
 * form the backend takes: LOOM_CUDA_GDN_PREPARED=0 (one kernel) and
 * LOOM_CUDA_GDN_MMA=0 (the walk on the CUDA cores) choose the others.
 *
 * usage: cuda_gdn [rounds (default 10)] [largest T (default 8192)]
 * Prints "cuda_gdn: no cuda backend (...)" and exits 0 without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/ops.h"

enum { HK = 16, HV = 32, DK = 128, DV = 128 };

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static float rng_unit(uint64_t *s) { return (float)(rng_next(s) >> 40) / (float)(1 << 24); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void l2_rows(float *x, size_t rows, int dim, float scale) {
    for (size_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)x[r * dim + i] * x[r * dim + i];
        for (int i = 0; i < dim; i++) x[r * dim + i] = (float)(x[r * dim + i] / sqrt(ss + 1e-6) * scale);
    }
}

static double rel_diff(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct {
    lm_backend *be;
    lm_buffer *q, *k, *v, *g, *beta, *out, *state, *state0, *first, *length, *slot;
} setup;

static lm_status alloc_up(lm_backend *be, const void *host, size_t bytes, lm_buffer **buf, lm_error *err) {
    lm_status st = lm_alloc(be, bytes, "cuda_gdn", buf, err);
    if (st == LM_OK && host) lm_upload(be, lm_mem_of(*buf), host, bytes);
    return st;
}

/* One sequence of T rows; times `rounds` calls, returns the median seconds
 * and leaves out / state of the last call in the host arrays. */
static int run(lm_backend *be, int T, int rounds, const float *q, const float *k, const float *v, const float *g,
               const float *beta, const float *state0, float *out, float *state, double *median, lm_error *err) {
    size_t qk = (size_t)T * HK * DK, vn = (size_t)T * HV * DV, gn = (size_t)T * HV, sn = (size_t)HV * DK * DV;
    int32_t first = 0, length = T, slot = 0;
    setup s = {.be = be};
    if (alloc_up(be, q, qk * 4, &s.q, err) || alloc_up(be, k, qk * 4, &s.k, err) ||
        alloc_up(be, v, vn * 4, &s.v, err) || alloc_up(be, g, gn * 4, &s.g, err) ||
        alloc_up(be, beta, gn * 4, &s.beta, err) || alloc_up(be, NULL, vn * 4, &s.out, err) ||
        alloc_up(be, NULL, sn * 4, &s.state, err) || alloc_up(be, state0, sn * 4, &s.state0, err) ||
        alloc_up(be, &first, 4, &s.first, err) || alloc_up(be, &length, 4, &s.length, err) ||
        alloc_up(be, &slot, 4, &s.slot, err))
        return 1;
    lm_seq_batch seqs = {1, lm_mem_of(s.first), lm_mem_of(s.length), lm_mem_of(s.slot), T};
    double t[64];
    for (int r = -1; r < rounds; r++) {
        lm_copy(be, lm_mem_of(s.state), lm_mem_of(s.state0), sn * 4);
        if (lm_synchronize(be, err) != LM_OK) return 1;
        double t0 = now_seconds();
        lm_gated_delta_rule(be, lm_mem_of(s.out), lm_mem_of(s.q), lm_mem_of(s.k), lm_mem_of(s.v), lm_mem_of(s.g),
                            lm_mem_of(s.beta), lm_mem_of(s.state), (int64_t)sn, &seqs, HK, HV, DK, DV);
        if (lm_synchronize(be, err) != LM_OK) return 1;
        if (r >= 0) t[r] = now_seconds() - t0;
    }
    qsort(t, (size_t)rounds, sizeof *t, cmp_double);
    *median = t[rounds / 2];
    int bad = lm_download(be, out, lm_mem_of(s.out), vn * 4, err) != LM_OK ||
              lm_download(be, state, lm_mem_of(s.state), sn * 4, err) != LM_OK;
    lm_buffer *all[] = {s.q, s.k, s.v, s.g, s.beta, s.out, s.state, s.state0, s.first, s.length, s.slot};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lm_buffer_free(be, all[i]);
    return bad;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 10, max_T = argc > 2 ? atoi(argv[2]) : 8192;
    if (rounds < 1 || rounds > 64 || max_T < 16 || max_T > 65536) {
        fprintf(stderr, "usage: cuda_gdn [rounds 1..64] [largest T 16..65536]\n");
        return 2;
    }
    lm_error err = {0};
    lm_backend *chunked = NULL, *recurrent = NULL;
    if (lm_backend_create("cuda", 0, &chunked, &err) != LM_OK) {
        printf("cuda_gdn: no cuda backend (%s)\n", err.message);
        return 0;
    }
    setenv("LOOM_CUDA_GDN_CHUNKED", "0", 1);
    if (lm_backend_create("cuda", 0, &recurrent, &err) != LM_OK) {
        printf("cuda_gdn: %s\n", err.message);
        return 1;
    }
    size_t qk = (size_t)max_T * HK * DK, vn = (size_t)max_T * HV * DV, gn = (size_t)max_T * HV;
    size_t sn = (size_t)HV * DK * DV;
    float *q = malloc(qk * 4), *k = malloc(qk * 4), *v = malloc(vn * 4), *g = malloc(gn * 4);
    float *beta = malloc(gn * 4), *state0 = malloc(sn * 4);
    float *out_c = malloc(vn * 4), *out_r = malloc(vn * 4), *st_c = malloc(sn * 4), *st_r = malloc(sn * 4);
    if (!q || !k || !v || !g || !beta || !state0 || !out_c || !out_r || !st_c || !st_r) return 1;
    uint64_t seed = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < qk; i++) q[i] = rng_unit(&seed) - 0.5f, k[i] = rng_unit(&seed) - 0.5f;
    for (size_t i = 0; i < vn; i++) v[i] = rng_unit(&seed) - 0.5f;
    for (size_t i = 0; i < gn; i++) g[i] = -0.01f - 0.5f * rng_unit(&seed), beta[i] = rng_unit(&seed);
    for (size_t i = 0; i < sn; i++) state0[i] = 0.1f * (rng_unit(&seed) - 0.5f);
    l2_rows(q, (size_t)max_T * HK, DK, 1.0f / sqrtf((float)DK));
    l2_rows(k, (size_t)max_T * HK, DK, 1.0f);
    printf("cuda_gdn: Hk %d, Hv %d, dk %d, dv %d, one sequence, %d rounds, medians\n", HK, HV, DK, DV, rounds);
    printf("%8s %14s %14s %9s %12s %12s\n", "T", "chunked ms", "recurrent ms", "speedup", "out rel diff",
           "state rel diff");
    for (int T = 64; T <= max_T; T *= 2) {
        double tc = 0, tr = 0;
        if (run(chunked, T, rounds, q, k, v, g, beta, state0, out_c, st_c, &tc, &err) ||
            run(recurrent, T, T >= 4096 ? 3 : rounds, q, k, v, g, beta, state0, out_r, st_r, &tr, &err)) {
            fprintf(stderr, "cuda_gdn: %s\n", err.message);
            return 1;
        }
        size_t vT = (size_t)T * HV * DV;
        printf("%8d %14.3f %14.3f %8.1fx %12.2e %12.2e\n", T, tc * 1e3, tr * 1e3, tr / tc,
               rel_diff(out_c, out_r, vT), rel_diff(st_c, st_r, sn));
        fflush(stdout);
    }
    lm_backend_destroy(chunked);
    lm_backend_destroy(recurrent);
    free(q), free(k), free(v), free(g), free(beta), free(state0);
    free(out_c), free(out_r), free(st_c), free(st_r);
    return 0;
}
