/* Gated DeltaNet kernels (ops/cpu/gdn_*.c, of the kernel set the cpu
 * backend runs: LOOM_CPU_KERNELS or the best for this CPU) against a float64 recurrence
 * written here from model-spec §A.7, plus the properties the engine relies
 * on: the chunked and recurrent forms agree, a sequence split in two gives
 * the same result as one call (prefill then decode), value heads pair with
 * key heads by repeat-interleave, and the conv state is the last K-1
 * pre-conv inputs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/gdn.h"
#include "ops/ref/reference.h"

#define REL_TOL 1e-5

/* ---- deterministic random data ---- */

typedef struct {
    uint64_t s;
} rng;

static double uniform(rng *r) { /* (0, 1) */
    r->s += 0x9E3779B97F4A7C15ull;
    uint64_t z = r->s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(rng *r) {
    double u = uniform(r), v = uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static float *fill_normal(rng *r, size_t n, double sd) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = (float)(normal(r) * sd);
    return x;
}

static float *copy_floats(const float *x, size_t n) {
    float *y = malloc(sizeof(float) * (n ? n : 1));
    memcpy(y, x, sizeof(float) * n);
    return y;
}

static float *nan_filled(size_t n) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* ---- a gated-delta-rule problem with realistic inputs ---- */

typedef struct {
    int T, Hk, Hv, dk, dv;
    float *q, *k, *v, *g, *beta, *state0;
} gdn_case;

static size_t qk_size(const gdn_case *c) { return (size_t)c->T * c->Hk * c->dk; }
static size_t v_size(const gdn_case *c) { return (size_t)c->T * c->Hv * c->dv; }
static size_t gate_size(const gdn_case *c) { return (size_t)c->T * c->Hv; }
static size_t state_size(const gdn_case *c) { return (size_t)c->Hv * c->dk * c->dv; }

static void l2_normalise(float *x, size_t rows, int dim, float scale) {
    for (size_t r = 0; r < rows; r++) {
        float *row = x + r * (size_t)dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)row[i] * row[i];
        double inv = 1.0 / sqrt(ss + 1e-6);
        for (int i = 0; i < dim; i++) row[i] = (float)(row[i] * inv * scale);
    }
}

static gdn_case make_case(int T, int Hk, int Hv, int dk, int dv, uint64_t seed) {
    gdn_case c = {.T = T, .Hk = Hk, .Hv = Hv, .dk = dk, .dv = dv};
    rng r = {seed};
    c.q = fill_normal(&r, qk_size(&c), 1.0);
    c.k = fill_normal(&r, qk_size(&c), 1.0);
    l2_normalise(c.q, (size_t)T * Hk, dk, (float)(1.0 / sqrt(dk)));
    l2_normalise(c.k, (size_t)T * Hk, dk, 1.0f);
    c.v = fill_normal(&r, v_size(&c), 1.0);
    c.g = malloc(sizeof(float) * gate_size(&c));
    c.beta = malloc(sizeof(float) * gate_size(&c));
    for (size_t i = 0; i < gate_size(&c); i++) {
        /* g = -exp(A_log)·softplus(a + dt_bias): mostly mild decay, some strong */
        double a = normal(&r) * 2.0 - 1.0;
        double softplus = a > 20 ? a : log1p(exp(a));
        c.g[i] = (float)(-softplus * exp(normal(&r) * 0.5));
        c.beta[i] = (float)(1.0 / (1.0 + exp(-normal(&r) * 2.0)));
    }
    c.state0 = fill_normal(&r, state_size(&c), 0.5);
    return c;
}

static void free_case(gdn_case *c) {
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->g);
    free(c->beta);
    free(c->state0);
}

/* The §A.7 recurrence in float64, token by token.  tile_heads pairs value
 * head hv with key head hv % Hk (the WRONG mapping) for the grouping test. */
static void reference64(const gdn_case *c, double *out, double *state, bool tile_heads) {
    int group = c->Hv / c->Hk;
    double *mem = malloc(sizeof(double) * (size_t)c->dv);
    for (int t = 0; t < c->T; t++)
        for (int hv = 0; hv < c->Hv; hv++) {
            int hk = tile_heads ? hv % c->Hk : hv / group;
            const float *q = c->q + ((size_t)t * c->Hk + hk) * c->dk;
            const float *k = c->k + ((size_t)t * c->Hk + hk) * c->dk;
            const float *v = c->v + ((size_t)t * c->Hv + hv) * c->dv;
            double *S = state + (size_t)hv * c->dk * c->dv;
            double decay = exp((double)c->g[(size_t)t * c->Hv + hv]);
            double beta = c->beta[(size_t)t * c->Hv + hv];
            for (size_t i = 0; i < (size_t)c->dk * c->dv; i++) S[i] *= decay;
            for (int j = 0; j < c->dv; j++) {
                double m = 0;
                for (int i = 0; i < c->dk; i++) m += S[(size_t)i * c->dv + j] * k[i];
                mem[j] = (v[j] - m) * beta;
            }
            for (int i = 0; i < c->dk; i++)
                for (int j = 0; j < c->dv; j++) S[(size_t)i * c->dv + j] += k[i] * mem[j];
            double *o = out + ((size_t)t * c->Hv + hv) * c->dv;
            for (int j = 0; j < c->dv; j++) {
                double acc = 0;
                for (int i = 0; i < c->dk; i++) acc += S[(size_t)i * c->dv + j] * q[i];
                o[j] = acc;
            }
        }
    free(mem);
}

/* The expected output and final state of a case. */
typedef struct {
    double *out, *state;
} expected;

static expected expect(const gdn_case *c, bool tile_heads) {
    expected e = {malloc(sizeof(double) * v_size(c)), malloc(sizeof(double) * state_size(c))};
    for (size_t i = 0; i < state_size(c); i++) e.state[i] = c->state0[i];
    reference64(c, e.out, e.state, tile_heads);
    return e;
}

static void free_expected(expected *e) {
    free(e->out);
    free(e->state);
}

/* max |got − want| / max |want| */
static double rel_error(const float *got, const double *want, size_t n) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= err)) err = d; /* NaN propagates */
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    }
    return scale > 0 ? err / scale : err;
}

static double rel_error_f(const float *got, const float *want, size_t n) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= err)) err = d;
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    }
    return scale > 0 ? err / scale : err;
}

typedef enum {
    RUN_REFERENCE,       /* lm_ref_gated_delta_rule */
    RUN_BACKEND,         /* lm_cpu_gated_delta_rule (the op) on a 2-thread pool */
    RUN_RECURRENT,       /* lm_gdn_recurrent, SIMD, 2 threads */
    RUN_RECURRENT_PLAIN, /* lm_gdn_recurrent, portable code, no pool */
    RUN_CHUNKED,         /* lm_gdn_chunked, SIMD, 2 threads */
    RUN_CHUNKED_PLAIN,   /* lm_gdn_chunked, portable code, no pool */
} run_kind;

static const char *const run_names[] = {"reference",          "backend", "recurrent",
                                        "recurrent-portable", "chunked", "chunked-portable"};

/* Runs tokens [t0, t0+n) of case c with `state` in place into out (rows of
 * those tokens only). */
static void run_part(lm_backend *be, run_kind kind, const gdn_case *c, int t0, int n, float *out,
                     float *state) {
    size_t qk = (size_t)t0 * c->Hk * c->dk, vv = (size_t)t0 * c->Hv * c->dv,
           gg = (size_t)t0 * c->Hv;
    lm_gdn_problem p = {.out = out,
                        .q = c->q + qk,
                        .k = c->k + qk,
                        .v = c->v + vv,
                        .g = c->g + gg,
                        .beta = c->beta + gg,
                        .state = state,
                        .T = n,
                        .Hk = c->Hk,
                        .Hv = c->Hv,
                        .dk = c->dk,
                        .dv = c->dv};
    lm_pool *pool = lm_cpu_pool(be);
    const lm_cpu_kernels *kernels = lm_cpu_kernels_of(be); /* the set LOOM_CPU_KERNELS or the CPU chose */
    switch (kind) {
    case RUN_REFERENCE:
        lm_ref_gated_delta_rule(out, p.q, p.k, p.v, p.g, p.beta, state, n, c->Hk, c->Hv, c->dk,
                                c->dv);
        break;
    case RUN_BACKEND: {
        /* a batch of this one sequence: rows from 0, state at slot 0 */
        int32_t first = 0, length = n, slot = 0;
        lm_gdn_batch b = {.out = out,
                          .q = p.q,
                          .k = p.k,
                          .v = p.v,
                          .g = p.g,
                          .beta = p.beta,
                          .states = state,
                          .slot_stride = 0,
                          .seqs = {1, &first, &length, &slot, n},
                          .Hk = c->Hk,
                          .Hv = c->Hv,
                          .dk = c->dk,
                          .dv = c->dv};
        kernels->gated_delta_rule(pool, &b);
        break;
    }
    case RUN_RECURRENT: kernels->gdn_recurrent(pool, &p, true); break;
    case RUN_RECURRENT_PLAIN: kernels->gdn_recurrent(NULL, &p, false); break;
    case RUN_CHUNKED: kernels->gdn_chunked(pool, &p, true); break;
    case RUN_CHUNKED_PLAIN: kernels->gdn_chunked(NULL, &p, false); break;
    }
}

/* Runs the whole case in one call; out NaN-poisoned first. */
static void run_all(lm_backend *be, run_kind kind, const gdn_case *c, float **out, float **state) {
    *out = nan_filled(v_size(c));
    *state = copy_floats(c->state0, state_size(c));
    run_part(be, kind, c, 0, c->T, *out, *state);
}

static lm_backend *make_backend(void) {
    lm_backend *be = NULL;
    lm_error err;
    if (lm_backend_cpu_create(2, &be, &err) != LM_OK) return NULL;
    return be;
}

static const int shapes[][5] = {
    /* T, Hk, Hv, dk, dv */
    {1, 2, 4, 16, 16},
    {7, 1, 1, 4, 3},
    {5, 3, 6, 33, 40},
    {17, 2, 2, 24, 20},
    {63, 2, 4, 16, 16},
    {64, 2, 4, 16, 16},
    {65, 2, 4, 16, 16},
    {130, 2, 4, 16, 16},
    {3, 2, 4, 128, 128},
    {200, 1, 2, 128, 128},
    {150, 2, 4, 64, 96},
    {9, 1, 1, 16, 80}, /* fewer heads than threads: one head's tiles shared out */
};

static void test_all_forms_match_float64(void) {
    lm_backend *be = make_backend();
    CHECK(be);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int *sh = shapes[s];
        gdn_case c = make_case(sh[0], sh[1], sh[2], sh[3], sh[4], 1000 + s);
        expected e = expect(&c, false);
        for (int kind = RUN_REFERENCE; kind <= RUN_CHUNKED_PLAIN; kind++) {
            float *out, *state;
            run_all(be, (run_kind)kind, &c, &out, &state);
            bool written = all_finite(out, v_size(&c));
            double eo = rel_error(out, e.out, v_size(&c));
            double es = rel_error(state, e.state, state_size(&c));
            free(out);
            free(state);
            if (!written || !(eo < REL_TOL) || !(es < REL_TOL)) {
                test_failed(__FILE__, __LINE__,
                            "%s on T=%d Hk=%d Hv=%d dk=%d dv=%d: output %s, rel error out %.3g "
                            "state %.3g",
                            run_names[kind], sh[0], sh[1], sh[2], sh[3], sh[4],
                            written ? "complete" : "NOT fully written", eo, es);
                break;
            }
        }
        free_expected(&e);
        free_case(&c);
        if (test_current_failed()) break;
    }
    lm_backend_destroy(be);
}

/* The two forms straight against each other (their float32 results, not
 * against float64): a change that breaks only one shows up here too. */
static void test_chunked_and_recurrent_agree(void) {
    lm_backend *be = make_backend();
    CHECK(be);
    gdn_case c = make_case(150, 2, 4, 32, 48, 77);
    float *out_r, *state_r, *out_c, *state_c;
    run_all(be, RUN_RECURRENT, &c, &out_r, &state_r);
    run_all(be, RUN_CHUNKED, &c, &out_c, &state_c);
    double eo = rel_error_f(out_c, out_r, v_size(&c));
    double es = rel_error_f(state_c, state_r, state_size(&c));
    free(out_r);
    free(state_r);
    free(out_c);
    free(state_c);
    free_case(&c);
    lm_backend_destroy(be);
    CHECK_MSG(eo < REL_TOL && es < REL_TOL, "chunked vs recurrent: out %.3g state %.3g", eo, es);
}

/* T tokens in one call == T1 tokens then T2 tokens with the state carried:
 * what prefill-then-decode and chunked prefill rely on.  Through the
 * backend, through the chunked form alone, and chunked prefill followed by
 * recurrent steps, all against one call of the backend. */
static void test_split_sequence_equals_whole(void) {
    lm_backend *be = make_backend();
    CHECK(be);
    gdn_case c = make_case(140, 2, 4, 32, 32, 99);
    float *out_whole, *state_whole;
    run_all(be, RUN_BACKEND, &c, &out_whole, &state_whole);
    /* chunk boundaries inside and across the parts */
    static const int splits[][4] = {
        {70, 70, 0, 0}, {1, 139, 0, 0}, {139, 1, 0, 0}, {64, 3, 73, 0}, {10, 66, 1, 63}};
    static const char *const modes[] = {"backend", "chunked", "chunked then recurrent"};
    for (size_t s = 0; s < sizeof splits / sizeof splits[0] && !test_current_failed(); s++)
        for (int mode = 0; mode < 3; mode++) {
            float *out = nan_filled(v_size(&c));
            float *state = copy_floats(c.state0, state_size(&c));
            int t0 = 0;
            for (int part = 0; part < 4 && splits[s][part] > 0; part++) {
                int n = splits[s][part];
                run_kind kind = mode == 0                ? RUN_BACKEND
                                : mode == 1 || part == 0 ? RUN_CHUNKED
                                                         : RUN_RECURRENT;
                run_part(be, kind, &c, t0, n, out + (size_t)t0 * c.Hv * c.dv, state);
                t0 += n;
            }
            double eo = rel_error_f(out, out_whole, v_size(&c));
            double es = rel_error_f(state, state_whole, state_size(&c));
            free(out);
            free(state);
            if (t0 != c.T || !(eo < REL_TOL) || !(es < REL_TOL)) {
                test_failed(__FILE__, __LINE__, "%s, split %d+%d+%d+%d: out %.3g state %.3g",
                            modes[mode], splits[s][0], splits[s][1], splits[s][2], splits[s][3], eo,
                            es);
                break;
            }
        }
    free(out_whole);
    free(state_whole);
    free_case(&c);
    lm_backend_destroy(be);
}

/* Value head hv pairs with key head hv / (Hv/Hk); with Hk = 2, Hv = 4 the
 * tiled mapping (hv % Hk) differs for heads 1 and 2.  Check the data tells
 * them apart, then that every form follows the interleaved one. */
static void test_value_heads_repeat_interleave_key_heads(void) {
    lm_backend *be = make_backend();
    CHECK(be);
    gdn_case c = make_case(80, 2, 4, 16, 16, 5);
    expected right = expect(&c, false), wrong = expect(&c, true);
    float *out_ref = malloc(sizeof(float) * v_size(&c));
    for (size_t i = 0; i < v_size(&c); i++) out_ref[i] = (float)right.out[i];
    double separation = rel_error(out_ref, wrong.out, v_size(&c));
    free(out_ref);
    if (!(separation > 0.1))
        test_failed(__FILE__, __LINE__, "test data cannot tell the mappings apart (%.3g)",
                    separation);
    static const run_kind kinds[] = {RUN_REFERENCE, RUN_RECURRENT, RUN_CHUNKED};
    for (size_t i = 0; i < 3 && !test_current_failed(); i++) {
        float *out, *state;
        run_all(be, kinds[i], &c, &out, &state);
        double eo = rel_error(out, right.out, v_size(&c));
        free(out);
        free(state);
        if (!(eo < REL_TOL))
            test_failed(__FILE__, __LINE__, "%s does not pair heads by repeat-interleave (%.3g)",
                        run_names[kinds[i]], eo);
    }
    free_expected(&right);
    free_expected(&wrong);
    free_case(&c);
    lm_backend_destroy(be);
}

/* A fully decayed step (g = -inf, e^g = 0) forgets the old state; a very
 * strong finite decay next to it must not upset the chunk's cumulative sums. */
static void test_full_decay_forgets_state(void) {
    gdn_case c = make_case(70, 1, 2, 16, 16, 11);
    for (int h = 0; h < c.Hv; h++) {
        c.g[(size_t)40 * c.Hv + h] = -INFINITY;
        c.g[(size_t)45 * c.Hv + h] = -300.0f;
    }
    expected e = expect(&c, false);
    lm_backend *be = make_backend();
    CHECK(be != NULL);
    for (int form = 0; form < 4 && be; form++) {
        bool chunked = form >= 2, simd = form % 2 == 0;
        float *out = nan_filled(v_size(&c)), *state = copy_floats(c.state0, state_size(&c));
        lm_gdn_problem p = {.out = out,
                            .q = c.q,
                            .k = c.k,
                            .v = c.v,
                            .g = c.g,
                            .beta = c.beta,
                            .state = state,
                            .T = c.T,
                            .Hk = c.Hk,
                            .Hv = c.Hv,
                            .dk = c.dk,
                            .dv = c.dv};
        if (chunked)
            lm_cpu_kernels_of(be)->gdn_chunked(NULL, &p, simd);
        else
            lm_cpu_kernels_of(be)->gdn_recurrent(NULL, &p, simd);
        double eo = rel_error(out, e.out, v_size(&c));
        double es = rel_error(state, e.state, state_size(&c));
        free(out);
        free(state);
        if (!(eo < REL_TOL && es < REL_TOL)) {
            test_failed(__FILE__, __LINE__, "%s%s with a -inf log decay: out %.3g state %.3g",
                        chunked ? "chunked" : "recurrent", simd ? "" : " (portable)", eo, es);
            break;
        }
    }
    free_expected(&e);
    free_case(&c);
    lm_backend_destroy(be);
}

/* ---- causal conv1d + SiLU ---- */

typedef struct {
    int T, C, K;
    float *in, *weight, *state0;
} conv_case;

static conv_case make_conv(int T, int C, int K, uint64_t seed) {
    rng r = {seed};
    conv_case c = {.T = T, .C = C, .K = K};
    c.in = fill_normal(&r, (size_t)T * C, 1.0);
    c.weight = fill_normal(&r, (size_t)C * K, 0.5);
    c.state0 = fill_normal(&r, (size_t)C * (K - 1), 1.0);
    return c;
}

static void free_conv(conv_case *c) {
    free(c->in);
    free(c->weight);
    free(c->state0);
}

typedef enum { CONV_BACKEND, CONV_SIMD_SERIAL, CONV_PORTABLE } conv_kind;

/* Runs tokens [t0, t0+n) of case c; out holds those rows only. */
static void conv_part(lm_backend *be, conv_kind kind, const conv_case *c, int t0, int n, float *out,
                      float *state) {
    const float *in = c->in + (size_t)t0 * c->C;
    switch (kind) {
    case CONV_BACKEND: {
        int32_t first = 0, length = n, slot = 0;
        lm_host_seq_batch seqs = {1, &first, &length, &slot, n};
        lm_cpu_kernels_of(be)->causal_conv1d_silu(lm_cpu_pool(be), out, in, c->C, c->weight, c->K, state, 0, &seqs);
        break;
    }
    case CONV_SIMD_SERIAL:
        lm_cpu_kernels_of(be)->gdn_conv1d_silu(NULL, out, in, n, c->C, state, c->weight, c->K, true);
        break;
    case CONV_PORTABLE:
        lm_cpu_kernels_of(be)->gdn_conv1d_silu(NULL, out, in, n, c->C, state, c->weight, c->K, false);
        break;
    }
}

static void check_conv_case(lm_backend *be, int T, int C, int K, uint64_t seed) {
    conv_case c = make_conv(T, C, K, seed);
    size_t n_out = (size_t)T * C, n_state = (size_t)C * (K - 1);
    float *out_ref = nan_filled(n_out), *state_ref = copy_floats(c.state0, n_state);
    lm_ref_causal_conv1d_silu(out_ref, c.in, T, C, state_ref, c.weight, K);
    /* the state is exactly the last K-1 inputs of [state0 ; in], oldest first */
    for (int ch = 0; ch < C && !test_current_failed(); ch++)
        for (int j = 0; j < K - 1; j++) {
            int src = T + j;
            float want = src < K - 1 ? c.state0[(size_t)ch * (K - 1) + src]
                                     : c.in[(size_t)(src - (K - 1)) * C + ch];
            if (state_ref[(size_t)ch * (K - 1) + j] != want) {
                test_failed(__FILE__, __LINE__, "reference conv state wrong (T=%d K=%d)", T, K);
                break;
            }
        }
    static const char *const names[] = {"backend", "simd", "portable"};
    for (int kind = CONV_BACKEND; kind <= CONV_PORTABLE && !test_current_failed(); kind++) {
        float *out = nan_filled(n_out), *state = copy_floats(c.state0, n_state);
        conv_part(be, (conv_kind)kind, &c, 0, T, out, state);
        bool written = all_finite(out, n_out);
        double eo = rel_error_f(out, out_ref, n_out);
        bool state_ok = memcmp(state, state_ref, sizeof(float) * n_state) == 0;
        /* and the same sequence fed in pieces of 1, 2, 3, ... tokens */
        float *out_split = nan_filled(n_out), *state_split = copy_floats(c.state0, n_state);
        for (int t0 = 0, n = 1; t0 < T; t0 += n, n++) {
            if (n > T - t0) n = T - t0;
            conv_part(be, (conv_kind)kind, &c, t0, n, out_split + (size_t)t0 * C, state_split);
        }
        bool split_ok = memcmp(out_split, out, sizeof(float) * n_out) == 0 &&
                        memcmp(state_split, state, sizeof(float) * n_state) == 0;
        free(out);
        free(state);
        free(out_split);
        free(state_split);
        if (!written || !(eo < REL_TOL) || !state_ok || !split_ok)
            test_failed(__FILE__, __LINE__,
                        "conv %s T=%d C=%d K=%d: %s, rel error %.3g, state %s, split %s",
                        names[kind], T, C, K, written ? "written" : "NOT fully written", eo,
                        state_ok ? "ok" : "WRONG", split_ok ? "ok" : "DIFFERS");
    }
    free(out_ref);
    free(state_ref);
    free_conv(&c);
}

static void test_conv1d_matches_reference(void) {
    lm_backend *be = make_backend();
    CHECK(be);
    static const int cases[][3] = {
        /* T, C, K: T < K-1, T == K-1, T > K-1 (T >= 8 takes the long-call
         * layout); a channel tail; the threaded path (T·C >= 32768), with a
         * tail; K = 1, 2; a kernel wider than the vector path */
        {1, 70, 4},    {2, 70, 4}, {3, 70, 4}, {10, 70, 4}, {10, 200, 4}, {10, 4000, 4},
        {10, 3300, 4}, {5, 17, 1}, {5, 33, 2}, {9, 33, 2},  {3, 20, 10},  {12, 20, 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !test_current_failed(); i++)
        check_conv_case(be, cases[i][0], cases[i][1], cases[i][2], 300 + i);
    lm_backend_destroy(be);
}

int main(void) {
    RUN_TEST(test_all_forms_match_float64);
    RUN_TEST(test_chunked_and_recurrent_agree);
    RUN_TEST(test_split_sequence_equals_whole);
    RUN_TEST(test_value_heads_repeat_interleave_key_heads);
    RUN_TEST(test_full_decay_forgets_state);
    RUN_TEST(test_conv1d_matches_reference);
    return test_summary("test_gated_delta");
}
