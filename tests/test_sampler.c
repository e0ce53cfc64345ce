/* The token sampler against hand-computed distributions: each option alone
 * and combined on small vocabularies (expected probabilities written as
 * formulas), sampling frequencies over many draws, greedy ties, seeded
 * determinism, raw logprobs, parameter validation, the token history, a
 * full-size vocabulary (248320) against a naive full-sort implementation,
 * and the vector loops of every kernel set this CPU runs against float64. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "engine/sampler_vectors.h"
#include "engine/token_counts.h"
#include "harness.h"
#include "ops/ref/reference.h"

#define PROB_TOL 1e-6
#define MAX_V 16

/* ------------------------------------------------------------ helpers */

/* The sampler's distribution for a copy of logits (the sampler edits them). */
static lm_status distribution(const loom_sampling *p, const float *logits, int V,
                              const lm_sample_context *ctx, float *probs, lm_error *err) {
    lm_sampler_scratch scratch;
    lm_status st = lm_sampler_scratch_init(&scratch, V, err);
    if (st != LM_OK) return st;
    float copy[MAX_V];
    memcpy(copy, logits, sizeof(float) * (size_t)V);
    st = lm_sampler_distribution(p, copy, V, ctx, &scratch, probs, err);
    lm_sampler_scratch_free(&scratch);
    return st;
}

/* softmax(l / T) over the ids with keep[i] (keep NULL: all), zeros elsewhere. */
static void softmax_kept(const double *l, int V, double T, const bool *keep, double *out) {
    double z = 0;
    for (int i = 0; i < V; i++)
        if (!keep || keep[i]) z += exp(l[i] / T);
    for (int i = 0; i < V; i++) out[i] = (!keep || keep[i]) ? exp(l[i] / T) / z : 0;
}

/* Checks probs against expected (to PROB_TOL), naming the first bad id. */
#define CHECK_DIST(probs, expected, V)                                                          \
    do {                                                                                        \
        for (int i_ = 0; i_ < (V); i_++)                                                        \
            CHECK_MSG(fabs((double)(probs)[i_] - (expected)[i_]) <= PROB_TOL,                   \
                      "token %d: got %.9f, expected %.9f", i_, (double)(probs)[i_], (expected)[i_]); \
    } while (0)

static void to_float(const double *l, int V, float *out) {
    for (int i = 0; i < V; i++) out[i] = (float)l[i];
}

/* ------------------------------------------------------------ defaults */

static void test_defaults(void) {
    loom_sampling s;
    memset(&s, 0x5a, sizeof s);
    lm_sampling_defaults(&s);
    CHECK(s.temperature == 1.0f && s.top_k == -1 && s.top_p == 1.0f && s.min_p == 0.0f);
    CHECK(s.repetition_penalty == 1.0f && s.presence_penalty == 0.0f && s.frequency_penalty == 0.0f);
    CHECK(s.n_logit_bias == 0 && s.logit_bias_ids == NULL && s.logit_bias_values == NULL);
    CHECK(!s.has_seed && s.logprobs == -1);
    char msg[128];
    CHECK(lm_sampling_validate(&s, 100, msg, sizeof msg));

    /* Defaults are plain softmax. */
    double l[5] = {1.0, 2.0, 0.5, -1.0, 3.0};
    float lf[5], probs[5];
    double expected[5];
    to_float(l, 5, lf);
    lm_error err;
    CHECK_OK(distribution(&s, lf, 5, NULL, probs, &err), &err);
    softmax_kept(l, 5, 1.0, NULL, expected);
    CHECK_DIST(probs, expected, 5);
}

/* ------------------------------------------------------------ each option alone */

static void test_temperature(void) {
    double l[6] = {1.0, 2.0, 0.5, -1.0, 3.0, 0.0};
    float lf[6], probs[6];
    to_float(l, 6, lf);
    const double temps[] = {0.7, 1.0, 2.0, 0.05, 100.0};
    for (size_t t = 0; t < sizeof temps / sizeof *temps; t++) {
        loom_sampling s;
        lm_sampling_defaults(&s);
        s.temperature = (float)temps[t];
        lm_error err;
        CHECK_OK(distribution(&s, lf, 6, NULL, probs, &err), &err);
        double expected[6], z = 0;
        for (int i = 0; i < 6; i++) z += exp(l[i] / (double)s.temperature);
        for (int i = 0; i < 6; i++) expected[i] = exp(l[i] / (double)s.temperature) / z;
        CHECK_DIST(probs, expected, 6);
    }
}

static void test_top_k(void) {
    double l[6] = {1.0, 2.0, 0.5, -1.0, 3.0, 0.0};
    float lf[6], probs[6];
    to_float(l, 6, lf);
    loom_sampling s;
    lm_sampling_defaults(&s);
    s.temperature = 0.8f;
    s.top_k = 3; /* keeps ids 4 (3.0), 1 (2.0), 0 (1.0) */
    lm_error err;
    CHECK_OK(distribution(&s, lf, 6, NULL, probs, &err), &err);
    double T = 0.8f, z = exp(3.0 / T) + exp(2.0 / T) + exp(1.0 / T);
    double expected[6] = {exp(1.0 / T) / z, exp(2.0 / T) / z, 0, 0, exp(3.0 / T) / z, 0};
    CHECK_DIST(probs, expected, 6);

    s.top_k = 1; /* one-hot at the max */
    CHECK_OK(distribution(&s, lf, 6, NULL, probs, &err), &err);
    double one_hot[6] = {0, 0, 0, 0, 1, 0};
    CHECK_DIST(probs, one_hot, 6);

    s.top_k = 6; /* k = V: off */
    CHECK_OK(distribution(&s, lf, 6, NULL, probs, &err), &err);
    double all[6];
    softmax_kept(l, 6, T, NULL, all);
    CHECK_DIST(probs, all, 6);
    s.top_k = 0; /* 0 and -1: off */
    CHECK_OK(distribution(&s, lf, 6, NULL, probs, &err), &err);
    CHECK_DIST(probs, all, 6);

    /* Ties with the k-th logit are kept, as vLLM does: k = 2 keeps 3 tokens. */
    double tl[5] = {2.0, 1.0, 1.0, 0.0, 3.0};
    float tlf[5], tprobs[5];
    to_float(tl, 5, tlf);
    s.temperature = 1.0f;
    s.top_k = 2;
    CHECK_OK(distribution(&s, tlf, 5, NULL, tprobs, &err), &err);
    double tz = exp(3.0) + exp(2.0);
    double texpected[5] = {exp(2.0) / tz, 0, 0, 0, exp(3.0) / tz};
    CHECK_DIST(tprobs, texpected, 5);
    s.top_k = 3; /* the 3rd value (1.0) is shared by ids 1 and 2: both stay */
    CHECK_OK(distribution(&s, tlf, 5, NULL, tprobs, &err), &err);
    tz = exp(3.0) + exp(2.0) + 2 * exp(1.0);
    double texpected3[5] = {exp(2.0) / tz, exp(1.0) / tz, exp(1.0) / tz, 0, exp(3.0) / tz};
    CHECK_DIST(tprobs, texpected3, 5);
}

static void test_top_p(void) {
    /* Ten equal logits: every weight is exactly 1, so the boundary is exact
     * in float arithmetic too; ties go to the lower ids. */
    float flat[10], fprobs[10];
    for (int i = 0; i < 10; i++) flat[i] = 0.5f;
    loom_sampling s;
    lm_sampling_defaults(&s);
    lm_error err;
    struct {
        float top_p;
        int kept;
    } exact[] = {{0.3f, 3}, {0.5f, 5}, {0.9f, 9}, {0.1f, 1}, {0.05f, 1}, {0.30001f, 4}, {0.89999f, 9},
                 {0.90001f, 10}, {1.0f, 10}};
    for (size_t c = 0; c < sizeof exact / sizeof *exact; c++) {
        s.top_p = exact[c].top_p;
        CHECK_OK(distribution(&s, flat, 10, NULL, fprobs, &err), &err);
        for (int i = 0; i < 10; i++) {
            double expected = i < exact[c].kept ? 1.0 / exact[c].kept : 0;
            CHECK_MSG(fabs(fprobs[i] - expected) <= PROB_TOL, "top_p %g token %d: got %.9f, expected %.9f",
                      (double)s.top_p, i, (double)fprobs[i], expected);
        }
    }

    /* Probabilities 1/8, 1/16, 1/2, 1/16, 1/4 (logits = their logs): sorted
     * 0.5 (id 2), 0.25 (id 4), 0.125 (id 0), 0.0625 (ids 1 and 3).  Float
     * logits put these masses within ~1e-7 of the powers of two, so each
     * boundary is probed 1e-5 on either side. */
    const double p[5] = {0.125, 0.0625, 0.5, 0.0625, 0.25};
    double l[5];
    float lf[5], probs[5];
    for (int i = 0; i < 5; i++) l[i] = log(p[i]);
    to_float(l, 5, lf);
    struct {
        float top_p;
        bool keep[5];
    } cases[] = {
        {0.74999f, {false, false, true, false, true}}, /* just under the top two: 2 tokens */
        {0.75001f, {true, false, true, false, true}},  /* just above: the third joins */
        {0.49999f, {false, false, true, false, false}}, /* the top one */
        {0.50001f, {false, false, true, false, true}},
        {0.3f, {false, false, true, false, false}},     /* below the top one: still one */
        {0.87499f, {true, false, true, false, true}},   /* three */
        {0.93749f, {true, true, true, false, true}},    /* a tie at the boundary: the lower id */
        {0.93751f, {true, true, true, true, true}},     /* everything */
        {1.0f, {true, true, true, true, true}},         /* off */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        s.top_p = cases[c].top_p;
        CHECK_OK(distribution(&s, lf, 5, NULL, probs, &err), &err);
        double z = 0;
        for (int i = 0; i < 5; i++) z += cases[c].keep[i] ? p[i] : 0;
        for (int i = 0; i < 5; i++) {
            double expected = cases[c].keep[i] ? p[i] / z : 0;
            CHECK_MSG(fabs(probs[i] - expected) <= PROB_TOL, "top_p %g token %d: got %.9f, expected %.9f",
                      (double)s.top_p, i, (double)probs[i], expected);
        }
    }

    /* top_p applies to the distribution after temperature: T = 0.5 squares
     * the probabilities: 1/4, 1/16, 1/64, 1/256 ... renormalised. */
    s.temperature = 0.5f;
    s.top_p = 0.9f;
    CHECK_OK(distribution(&s, lf, 5, NULL, probs, &err), &err);
    double sq_z = 0;
    for (int i = 0; i < 5; i++) sq_z += p[i] * p[i];
    /* 0.25/sq_z = 0.7529, + 0.0625/sq_z = 0.9412 >= 0.9: ids 2 and 4 */
    double expected[5] = {0, 0, 0.25 / (0.25 + 0.0625), 0, 0.0625 / (0.25 + 0.0625)};
    CHECK(0.25 / sq_z < 0.9 && (0.25 + 0.0625) / sq_z > 0.9);
    CHECK_DIST(probs, expected, 5);
}

static void test_min_p(void) {
    double l[6] = {0.0, -1.0, -1.5, -1.7, -3.0, -0.2};
    float lf[6], probs[6];
    to_float(l, 6, lf);
    loom_sampling s;
    lm_sampling_defaults(&s);
    s.min_p = 0.2f; /* keep p_i >= 0.2 * p_max, i.e. l_i - l_max >= log 0.2 = -1.609 */
    lm_error err;
    CHECK_OK(distribution(&s, lf, 6, NULL, probs, &err), &err);
    bool keep[6] = {true, true, true, false, false, true};
    double expected[6];
    softmax_kept(l, 6, 1.0, keep, expected);
    CHECK_DIST(probs, expected, 6);

    /* After temperature 0.5 the ratios are exp(2 (l_i - l_max)): -1 -> 0.135 drops. */
    s.temperature = 0.5f;
    CHECK_OK(distribution(&s, lf, 6, NULL, probs, &err), &err);
    bool keep2[6] = {true, false, false, false, false, true};
    softmax_kept(l, 6, 0.5, keep2, expected);
    CHECK_DIST(probs, expected, 6);

    s.min_p = 1.0f; /* only the max */
    CHECK_OK(distribution(&s, lf, 6, NULL, probs, &err), &err);
    double one_hot[6] = {1, 0, 0, 0, 0, 0};
    CHECK_DIST(probs, one_hot, 6);
}

static void test_repetition_penalty_prompt_only(void) {
    double l[5] = {1.0, 2.0, 0.5, -1.0, 0.3};
    float lf[5], probs[5];
    to_float(l, 5, lf);
    lm_token_counts counts;
    lm_error err;
    CHECK_OK(lm_token_counts_init(&counts, 4, &err), &err);
    const int32_t prompt[] = {1, 3, 1, 3, 3};
    CHECK_OK(lm_token_counts_add_prompt(&counts, prompt, 5, &err), &err);
    lm_sample_context ctx = {.counts = &counts};
    loom_sampling s;
    lm_sampling_defaults(&s);
    s.repetition_penalty = 1.3f;
    lm_status st = distribution(&s, lf, 5, &ctx, probs, &err);
    double rp = 1.3f;
    /* positive logits divided, negative multiplied; counts do not matter */
    double pl[5] = {1.0, 2.0 / rp, 0.5, -1.0 * rp, 0.3};
    double expected[5];
    softmax_kept(pl, 5, 1.0, NULL, expected);
    CHECK_OK(st, &err);
    CHECK_DIST(probs, expected, 5);

    /* Presence and frequency penalties see only the output: no effect here. */
    s.repetition_penalty = 1.0f;
    s.presence_penalty = 0.5f;
    s.frequency_penalty = 0.7f;
    st = distribution(&s, lf, 5, &ctx, probs, &err);
    lm_token_counts_free(&counts);
    CHECK_OK(st, &err);
    softmax_kept(l, 5, 1.0, NULL, expected);
    CHECK_DIST(probs, expected, 5);
}

static void test_presence_frequency(void) {
    double l[5] = {1.0, 2.0, 0.5, -1.0, 0.3};
    float lf[5], probs[5];
    to_float(l, 5, lf);
    lm_token_counts counts;
    lm_error err;
    CHECK_OK(lm_token_counts_init(&counts, 0, &err), &err);
    const int32_t prompt[] = {4};
    CHECK_OK(lm_token_counts_add_prompt(&counts, prompt, 1, &err), &err);
    const int32_t out[] = {2, 0, 2, 2};
    for (int i = 0; i < 4; i++) CHECK_OK(lm_token_counts_add_output(&counts, out[i], &err), &err);
    lm_sample_context ctx = {.counts = &counts};
    loom_sampling s;
    lm_sampling_defaults(&s);
    s.presence_penalty = 0.5f;
    s.frequency_penalty = 0.25f;
    float probs2[5];
    lm_status st = distribution(&s, lf, 5, &ctx, probs, &err);
    /* Negative penalties reward repeats; the repetition penalty then hits
     * the prompt token and the output tokens alike. */
    loom_sampling s2 = s;
    s2.presence_penalty = -0.5f;
    s2.frequency_penalty = -0.1f;
    s2.repetition_penalty = 2.0f;
    if (st == LM_OK) st = distribution(&s2, lf, 5, &ctx, probs2, &err);
    lm_token_counts_free(&counts);
    CHECK_OK(st, &err);
    /* token 2: 3 times, token 0: once; token 4 only in the prompt */
    double pl[5] = {1.0 - 0.25 * 1 - 0.5, 2.0, 0.5 - 0.25 * 3 - 0.5, -1.0, 0.3};
    double expected[5];
    softmax_kept(pl, 5, 1.0, NULL, expected);
    CHECK_DIST(probs, expected, 5);
    double pf = 0.1f, pp = 0.5f; /* the float values, exactly */
    double pl2[5] = {1.0 / 2 + pf * 1 + pp, 2.0, 0.5 / 2 + pf * 3 + pp, -1.0, 0.3 / 2};
    softmax_kept(pl2, 5, 1.0, NULL, expected);
    CHECK_DIST(probs2, expected, 5);
}

static void test_logit_bias(void) {
    double l[5] = {1.0, 2.0, 0.5, -1.0, 0.3};
    float lf[5], probs[5];
    to_float(l, 5, lf);
    const int32_t ids[] = {3, 0, 99, -4}; /* 99 and -4: outside, skipped */
    const float values[] = {2.5f, -100.0f, 50.0f, 50.0f};
    loom_sampling s;
    lm_sampling_defaults(&s);
    s.logit_bias_ids = ids;
    s.logit_bias_values = values;
    s.n_logit_bias = 4;
    lm_error err;
    CHECK_OK(distribution(&s, lf, 5, NULL, probs, &err), &err);
    double bl[5] = {1.0 - 100.0, 2.0, 0.5, -1.0 + 2.5, 0.3};
    double expected[5];
    softmax_kept(bl, 5, 1.0, NULL, expected);
    CHECK_DIST(probs, expected, 5);
}

static void test_min_tokens_masking(void) {
    double l[5] = {1.0, 2.0, 0.5, -1.0, 3.0};
    float lf[5], probs[5];
    to_float(l, 5, lf);
    const int32_t stops[] = {4, 2, 77};
    lm_sample_context ctx = {.n_generated = 1, .min_tokens = 3, .stop_ids = stops, .n_stop_ids = 3};
    loom_sampling s;
    lm_sampling_defaults(&s);
    lm_error err;
    CHECK_OK(distribution(&s, lf, 5, &ctx, probs, &err), &err);
    bool keep[5] = {true, true, false, true, false};
    double expected[5];
    softmax_kept(l, 5, 1.0, keep, expected);
    CHECK_DIST(probs, expected, 5);

    /* Greedy skips the masked argmax (id 4) too. */
    s.temperature = 0;
    CHECK_OK(distribution(&s, lf, 5, &ctx, probs, &err), &err);
    double one_hot[5] = {0, 1, 0, 0, 0};
    CHECK_DIST(probs, one_hot, 5);

    /* Once min_tokens are out, nothing is masked. */
    ctx.n_generated = 3;
    s.temperature = 1;
    CHECK_OK(distribution(&s, lf, 5, &ctx, probs, &err), &err);
    softmax_kept(l, 5, 1.0, NULL, expected);
    CHECK_DIST(probs, expected, 5);
}

/* lm_sample_is_raw_argmax: true for plain greedy, where the draw is the
 * raw argmax; false for each option that could move the draw off it (each
 * case below does move it) or that needs the row (logprobs, sampling). */
static void test_raw_argmax_predicate(void) {
    enum { V = 6 };
    const float logits[V] = {1.0f, 2.0f, 0.5f, 2.2f, -1.0f, 2.1f}; /* raw argmax: 3 */
    lm_token_counts counts;
    lm_error err;
    CHECK_OK(lm_token_counts_init(&counts, 4, &err), &err);
    CHECK_OK(lm_token_counts_add_output(&counts, 3, &err), &err);
    const int32_t stops[] = {3};
    const int32_t bias_ids[] = {3};
    const float bias_values[] = {-1.0f};
    lm_sampler_scratch scratch;
    CHECK_OK(lm_sampler_scratch_init(&scratch, V, &err), &err);
    enum { PLAIN, SAMPLED, LOGPROBS, BIAS, MIN_TOKENS, REPETITION, PRESENCE, FREQUENCY, N_CASES };
    for (int c = 0; c < N_CASES; c++) {
        loom_sampling s;
        lm_sampling_defaults(&s);
        s.temperature = 0;
        lm_sample_context ctx = {.counts = &counts, .n_generated = 1, .min_tokens = 0, .stop_ids = stops, .n_stop_ids = 1};
        if (c == SAMPLED) s.temperature = 0.7f;
        if (c == LOGPROBS) s.logprobs = 0;
        if (c == BIAS) s.logit_bias_ids = bias_ids, s.logit_bias_values = bias_values, s.n_logit_bias = 1;
        if (c == MIN_TOKENS) ctx.min_tokens = 2;
        if (c == REPETITION) s.repetition_penalty = 2.0f;
        if (c == PRESENCE) s.presence_penalty = 0.5f;
        if (c == FREQUENCY) s.frequency_penalty = 0.5f;
        bool raw = lm_sample_is_raw_argmax(&s, &ctx);
        CHECK_MSG(raw == (c == PLAIN), "case %d: predicate says %d", c, raw);
        if (c == SAMPLED || c == LOGPROBS) continue;
        float copy[V];
        memcpy(copy, logits, sizeof copy);
        lm_sample_result r;
        CHECK_OK(lm_sample(&s, copy, V, &ctx, NULL, &scratch, &r, &err), &err);
        CHECK_MSG((r.token == 3) == (c == PLAIN), "case %d: drew %d", c, r.token);
    }
    /* with min_tokens reached, or no history to penalise, greedy is raw again */
    loom_sampling s;
    lm_sampling_defaults(&s);
    s.temperature = 0;
    s.repetition_penalty = 2.0f;
    lm_sample_context no_history = {.n_generated = 2, .min_tokens = 2, .stop_ids = stops, .n_stop_ids = 1};
    CHECK(lm_sample_is_raw_argmax(&s, &no_history));
    lm_sampler_scratch_free(&scratch);
    lm_token_counts_free(&counts);
}

/* ------------------------------------------------------------ everything at once */

static void test_combined(void) {
    double l[7] = {2.0, 1.5, -0.5, 3.0, 0.8, 2.6, 1.9};
    float lf[7], probs[7];
    to_float(l, 7, lf);
    lm_token_counts counts;
    lm_error err;
    CHECK_OK(lm_token_counts_init(&counts, 8, &err), &err);
    const int32_t prompt[] = {0, 2};
    CHECK_OK(lm_token_counts_add_prompt(&counts, prompt, 2, &err), &err);
    const int32_t out[] = {5, 5, 6};
    for (int i = 0; i < 3; i++) CHECK_OK(lm_token_counts_add_output(&counts, out[i], &err), &err);
    const int32_t stops[] = {3};
    lm_sample_context ctx = {.counts = &counts, .n_generated = 3, .min_tokens = 5, .stop_ids = stops,
                             .n_stop_ids = 1};
    const int32_t bias_ids[] = {4, 1};
    const float bias_values[] = {1.5f, -0.5f};
    loom_sampling s;
    lm_sampling_defaults(&s);
    s.logit_bias_ids = bias_ids;
    s.logit_bias_values = bias_values;
    s.n_logit_bias = 2;
    s.repetition_penalty = 1.25f;
    s.presence_penalty = 0.2f;
    s.frequency_penalty = 0.1f;
    s.temperature = 0.9f;
    s.min_p = 0.05f;
    s.top_k = 4;
    s.top_p = 0.8f;
    lm_status st = distribution(&s, lf, 7, &ctx, probs, &err);
    lm_token_counts_free(&counts);
    CHECK_OK(st, &err);
    /* processed logits (bias, stop mask, repetition, frequency, presence): */
    double rp = 1.25f, pp = 0.2f, fp = 0.1f;
    double pl[7] = {
        2.0 / rp,                        /* prompt */
        1.5 - 0.5,                       /* bias */
        -0.5 * rp,                       /* prompt, negative */
        -INFINITY,                       /* stop token before min_tokens */
        0.8 + 1.5,                       /* bias */
        2.6 / rp - fp * 2 - pp,          /* output twice */
        1.9 / rp - fp * 1 - pp,          /* output once */
    };
    /* = {1.6, 1.0, -0.625, -inf, 2.3, 1.58, 1.22}; T = 0.9: min_p 0.05 keeps
     * l >= 2.3 + 0.9 log 0.05 = -0.396: drops id 2; top_k 4: ids 4, 0, 5, 6;
     * top_p 0.8 over those: */
    double T = 0.9f;
    bool keep_k[7] = {true, false, false, false, true, true, true};
    double pk[7];
    softmax_kept(pl, 7, T, keep_k, pk);
    CHECK(pk[4] + pk[0] < 0.8 && pk[4] + pk[0] + pk[5] > 0.8); /* the nucleus is 3 tokens */
    bool keep_p[7] = {true, false, false, false, true, true, false};
    double expected[7];
    softmax_kept(pl, 7, T, keep_p, expected);
    CHECK_DIST(probs, expected, 7);
}

/* ------------------------------------------------------------ drawing */

/* Draws n tokens with a fresh copy of the logits each time; fills freq. */
static lm_status draw_frequencies(const loom_sampling *s, const float *logits, int V, int n,
                                  uint64_t seed, double *freq, lm_error *err) {
    lm_sampler_scratch scratch;
    lm_status st = lm_sampler_scratch_init(&scratch, V, err);
    if (st != LM_OK) return st;
    lm_rng rng;
    lm_rng_seed(&rng, seed);
    for (int i = 0; i < V; i++) freq[i] = 0;
    float copy[MAX_V];
    for (int d = 0; d < n && st == LM_OK; d++) {
        memcpy(copy, logits, sizeof(float) * (size_t)V);
        lm_sample_result r;
        st = lm_sample(s, copy, V, NULL, &rng, &scratch, &r, err);
        if (st == LM_OK && r.token >= 0 && r.token < V) freq[r.token] += 1.0 / n;
    }
    lm_sampler_scratch_free(&scratch);
    return st;
}

static void test_sampling_frequencies(void) {
    double l[8] = {1.0, 2.0, 0.5, -1.0, 3.0, 0.0, 2.2, 1.7};
    float lf[8], probs[8];
    to_float(l, 8, lf);
    loom_sampling configs[3];
    for (int c = 0; c < 3; c++) lm_sampling_defaults(&configs[c]);
    configs[0].temperature = 1.3f;                          /* every token */
    configs[1].temperature = 0.8f, configs[1].top_k = 5;    /* candidates */
    configs[2].top_p = 0.7f, configs[2].min_p = 0.1f;       /* nucleus */
    for (int c = 0; c < 3; c++) {
        lm_error err;
        CHECK_OK(distribution(&configs[c], lf, 8, NULL, probs, &err), &err);
        double freq[8];
        CHECK_OK(draw_frequencies(&configs[c], lf, 8, 200000, 1234 + (uint64_t)c, freq, &err), &err);
        for (int i = 0; i < 8; i++)
            CHECK_MSG(fabs(freq[i] - probs[i]) < 0.005, "config %d token %d: frequency %.4f, probability %.4f",
                      c, i, freq[i], (double)probs[i]);
        for (int i = 0; i < 8; i++) CHECK(probs[i] > 0 || freq[i] == 0); /* dropped: never drawn */
    }
}

/* A vocabulary of several blocks (the draw finds a block by its mass first):
 * frequencies of tokens spread over the blocks, the rest as one group. */
/* The host sampler against the backends' definition of a draw (the ref
 * backend's sample_rows, ops/ref/sample.c) on a vocabulary of 60 blocks,
 * where top_k up to 60 takes the path that weighs only the tokens at or
 * above the k-th largest block maximum: for the same uniform, the same
 * token (or, where float sums put u·total on a token's edge, the ref's
 * token for u +- 1e-6), for every setting and 300 draws each (40 under
 * ASan: each draw runs the ref's 60-odd passes over the vocabulary, and
 * every draw of a setting takes the same paths but the last walk's). */
static void test_draws_match_the_ops_definition(void) {
    enum { V = 60 * LM_SAMPLER_BLOCK };
    const int draws = test_rounds(300, 40);
    float *logits = malloc(sizeof(float) * V), *copy = malloc(sizeof(float) * V);
    lm_sampler_scratch scratch;
    lm_error err;
    bool ready = logits && copy && lm_sampler_scratch_init(&scratch, V, &err) == LM_OK;
    if (!ready) {
        free(logits), free(copy);
        CHECK_MSG(false, "allocation failed");
    }
    lm_rng data;
    lm_rng_seed(&data, 5);
    for (int i = 0; i < V; i++) /* a low bulk, a few high tokens, ties among them */
        logits[i] = (float)(lm_rng_uniform(&data) * 8.0 - 8.0) + (i % 613 == 0 ? 10.0f : 0.0f);
    for (int i = 0; i < V; i += 613) logits[i] = roundf(logits[i] * 4.0f) / 4.0f;
    static const struct {
        float temperature, top_p, min_p;
        int top_k;
    } cases[] = {{0.8f, 1, 0, 5}, {1.0f, 0.8f, 0, 20}, {0.7f, 1, 0.05f, 40}, {1.3f, 1, 0, 60},
                 {0.5f, 1, 0, 1},  {0.7f, 0.8f, 0, 20}, {1.0f, 0.95f, 0, -1}, {1.0f, 1, 0, 61}};
    int mismatches = 0, edges = 0;
    lm_rng rng;
    lm_rng_seed(&rng, 11);
    for (size_t c = 0; c < sizeof cases / sizeof *cases && mismatches == 0; c++) {
        loom_sampling sp;
        lm_sampling_defaults(&sp);
        sp.temperature = cases[c].temperature, sp.top_p = cases[c].top_p, sp.min_p = cases[c].min_p;
        sp.top_k = cases[c].top_k;
        for (int d = 0; d < draws && mismatches == 0; d++) {
            lm_rng before = rng;
            double u = lm_rng_uniform(&before);
            memcpy(copy, logits, sizeof(float) * V);
            lm_sample_result r;
            if (lm_sample(&sp, copy, V, NULL, &rng, &scratch, &r, &err) != LM_OK) {
                mismatches++;
                break;
            }
            lm_sample_row row = {.mode = LM_SAMPLE_ROW_DRAW, .top_k = sp.top_k, .temperature = sp.temperature,
                                 .top_p = sp.top_p, .min_p = sp.min_p, .repetition_penalty = 1, .uniform = u};
            int32_t want = -1, drew = -1;
            memcpy(copy, logits, sizeof(float) * V);
            lm_ref_sample_rows(&want, &drew, copy, 1, V, &row, NULL);
            if (want == r.token) continue;
            bool edge = false;
            for (int side = -1; side <= 1 && !edge; side += 2) {
                lm_sample_row moved = row;
                moved.uniform = u + side * 1e-6;
                memcpy(copy, logits, sizeof(float) * V);
                lm_ref_sample_rows(&want, &drew, copy, 1, V, &moved, NULL);
                edge = want == r.token;
            }
            if (edge && ++edges <= 3) continue;
            mismatches++;
            CHECK_MSG(false, "case %zu draw %d (u %.9f): host %d, the ops' definition %d", c, d, u, r.token, want);
        }
    }
    lm_sampler_scratch_free(&scratch);
    free(logits), free(copy);
    CHECK(mismatches == 0);
}

static void test_sampling_frequencies_across_blocks(void) {
    enum { V = 3 * LM_SAMPLER_BLOCK + 100, HOT = 6, DRAWS = 20000 };
    const int32_t hot[HOT] = {0, 1023, 1024, 2047, 2500, V - 1};
    const float hot_logits[HOT] = {2.0f, 1.0f, 2.5f, 0.5f, 1.5f, 2.2f};
    float *logits = malloc(sizeof(float) * V), *copy = malloc(sizeof(float) * V), *probs = malloc(sizeof(float) * V);
    lm_sampler_scratch scratch;
    lm_error err;
    bool ready = logits && copy && probs && lm_sampler_scratch_init(&scratch, V, &err) == LM_OK;
    if (!ready) {
        free(logits), free(copy), free(probs);
        CHECK_MSG(false, "allocation failed");
    }
    for (int i = 0; i < V; i++) logits[i] = -3.0f;
    for (int h = 0; h < HOT; h++) logits[hot[h]] = hot_logits[h];
    loom_sampling s;
    lm_sampling_defaults(&s);
    s.temperature = 0.9f;
    memcpy(copy, logits, sizeof(float) * V);
    lm_status st = lm_sampler_distribution(&s, copy, V, NULL, &scratch, probs, &err);
    double freq[HOT + 1] = {0};
    lm_rng rng;
    lm_rng_seed(&rng, 77);
    for (int d = 0; d < DRAWS && st == LM_OK; d++) {
        memcpy(copy, logits, sizeof(float) * V);
        lm_sample_result r;
        st = lm_sample(&s, copy, V, NULL, &rng, &scratch, &r, &err);
        int group = HOT;
        for (int h = 0; h < HOT; h++)
            if (r.token == hot[h]) group = h;
        freq[group] += 1.0 / DRAWS;
    }
    double expected[HOT + 1], rest = 1;
    for (int h = 0; h < HOT; h++) {
        expected[h] = probs[hot[h]];
        rest -= expected[h];
    }
    expected[HOT] = rest;
    lm_sampler_scratch_free(&scratch);
    free(logits), free(copy), free(probs);
    CHECK_OK(st, &err);
    CHECK(rest > 0.05); /* the cold tokens matter too */
    for (int g = 0; g <= HOT; g++)
        CHECK_MSG(fabs(freq[g] - expected[g]) < 0.012, "group %d: frequency %.4f, probability %.4f", g, freq[g],
                  expected[g]);
}

static void test_greedy(void) {
    double l[6] = {1.0, 3.0, 0.5, 3.0, -2.0, 2.9};
    float lf[6], copy[6];
    to_float(l, 6, lf);
    lm_sampler_scratch scratch;
    lm_error err;
    CHECK_OK(lm_sampler_scratch_init(&scratch, 6, &err), &err);
    loom_sampling s;
    lm_sampling_defaults(&s);
    const float temps[] = {0.0f, 1e-6f, 9.9e-6f};
    bool ok = true;
    for (int t = 0; t < 3 && ok; t++) {
        s.temperature = temps[t];
        s.top_k = 3, s.top_p = 0.2f, s.min_p = 0.5f; /* ignored by greedy */
        lm_rng rng, before;
        lm_rng_seed(&rng, 7);
        before = rng;
        memcpy(copy, lf, sizeof copy);
        lm_sample_result r;
        ok = lm_sample(&s, copy, 6, NULL, &rng, &scratch, &r, &err) == LM_OK;
        ok = ok && r.token == 1;                               /* tie 1 vs 3: lowest id */
        ok = ok && memcmp(&rng, &before, sizeof rng) == 0;     /* no random number used */
        /* greedy needs no rng at all */
        memcpy(copy, lf, sizeof copy);
        ok = ok && lm_sample(&s, copy, 6, NULL, NULL, &scratch, &r, &err) == LM_OK && r.token == 1;
    }
    /* Greedy equals argmax on random logits (no ties). */
    lm_rng data;
    lm_rng_seed(&data, 99);
    s.temperature = 0;
    for (int trial = 0; trial < 200 && ok; trial++) {
        int best = 0;
        for (int i = 0; i < 6; i++) {
            copy[i] = (float)(lm_rng_uniform(&data) * 10 - 5);
            if (copy[i] > copy[best]) best = i;
        }
        lm_sample_result r;
        ok = lm_sample(&s, copy, 6, NULL, NULL, &scratch, &r, &err) == LM_OK && r.token == best;
    }
    lm_sampler_scratch_free(&scratch);
    CHECK(ok);

    /* Ties far apart (the argmax works in blocks): still the lowest id. */
    enum { V = 3000 };
    float wide[V];
    CHECK_OK(lm_sampler_scratch_init(&scratch, V, &err), &err);
    for (int i = 0; i < V; i++) wide[i] = (float)(i % 97) * 0.01f;
    wide[700] = wide[1900] = wide[2999] = 5.0f;
    lm_sample_result r;
    lm_status st = lm_sample(&s, wide, V, NULL, NULL, &scratch, &r, &err);
    lm_sampler_scratch_free(&scratch);
    CHECK_OK(st, &err);
    CHECK(r.token == 700);
}

/* ------------------------------------------------------------ seeds */

static void test_rng(void) {
    lm_rng a, b;
    lm_rng_seed(&a, 42);
    lm_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) CHECK(lm_rng_next(&a) == lm_rng_next(&b));
    lm_rng_seed(&b, 43);
    int same = 0;
    for (int i = 0; i < 100; i++) same += lm_rng_next(&a) == lm_rng_next(&b);
    CHECK(same == 0);
    /* seed 0 gives a working generator */
    lm_rng_seed(&a, 0);
    CHECK(a.s[0] | a.s[1] | a.s[2] | a.s[3]);
    double sum = 0, lo = 1, hi = 0;
    for (int i = 0; i < 100000; i++) {
        double u = lm_rng_uniform(&a);
        CHECK(u >= 0 && u < 1);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    CHECK_NEAR(sum / 100000, 0.5, 0.005);
    CHECK(lo < 1e-3 && hi > 1 - 1e-3);

    /* derived streams: deterministic, distinct across choices and seeds */
    CHECK(lm_rng_derive(42, 0) == lm_rng_derive(42, 0));
    uint64_t seen[64];
    int n = 0;
    for (uint64_t seed = 0; seed < 8; seed++)
        for (uint64_t stream = 0; stream < 8; stream++) seen[n++] = lm_rng_derive(seed, stream);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) CHECK(seen[i] != seen[j]);
}

/* n tokens from V = 50 logits with one rng; other_rng (if not NULL) samples
 * an unrelated sequence between draws with the same scratch. */
static lm_status token_run(uint64_t seed, int n, lm_rng *other_rng, int32_t *tokens, lm_error *err) {
    enum { V = 50 };
    float logits[V], copy[V];
    lm_rng data;
    lm_rng_seed(&data, 5);
    for (int i = 0; i < V; i++) logits[i] = (float)(lm_rng_uniform(&data) * 4);
    lm_sampler_scratch scratch;
    lm_status st = lm_sampler_scratch_init(&scratch, V, err);
    if (st != LM_OK) return st;
    loom_sampling s, other;
    lm_sampling_defaults(&s);
    s.top_p = 0.9f;
    lm_sampling_defaults(&other);
    other.top_k = 7;
    other.temperature = 0.5f;
    lm_rng rng;
    lm_rng_seed(&rng, seed);
    for (int i = 0; i < n && st == LM_OK; i++) {
        lm_sample_result r;
        if (other_rng) {
            for (int j = 0; j < V; j++) copy[j] = (float)(lm_rng_uniform(&data) * 9);
            st = lm_sample(&other, copy, V, NULL, other_rng, &scratch, &r, err);
        }
        memcpy(copy, logits, sizeof copy);
        if (st == LM_OK) st = lm_sample(&s, copy, V, NULL, &rng, &scratch, &r, err);
        tokens[i] = r.token;
    }
    lm_sampler_scratch_free(&scratch);
    return st;
}

static void test_seeded_determinism(void) {
    enum { N = 200 };
    int32_t alone[N], again[N], batched[N], choice1[N];
    lm_error err;
    uint64_t seed0 = lm_rng_derive(1234, 0), seed1 = lm_rng_derive(1234, 1);
    CHECK_OK(token_run(seed0, N, NULL, alone, &err), &err);
    CHECK_OK(token_run(seed0, N, NULL, again, &err), &err);
    lm_rng other;
    lm_rng_seed(&other, 777);
    CHECK_OK(token_run(seed0, N, &other, batched, &err), &err);
    CHECK_OK(token_run(seed1, N, NULL, choice1, &err), &err);
    CHECK(memcmp(alone, again, sizeof alone) == 0);
    CHECK(memcmp(alone, batched, sizeof alone) == 0); /* the batch does not matter */
    int differ = 0;
    for (int i = 0; i < N; i++) differ += alone[i] != choice1[i];
    CHECK_MSG(differ > N / 2, "choices 0 and 1 agree on %d of %d tokens", N - differ, N);
}

/* ------------------------------------------------------------ logprobs */

static void test_logprobs(void) {
    double l[6] = {1.0, 2.0, 0.5, 2.0, -1.0, 3.0};
    float lf[6], copy[6];
    to_float(l, 6, lf);
    double lse = 0;
    for (int i = 0; i < 6; i++) lse += exp(l[i]);
    lse = log(lse);
    lm_sampler_scratch scratch;
    lm_error err;
    CHECK_OK(lm_sampler_scratch_init(&scratch, 6, &err), &err);
    /* A bias makes id 4 the greedy choice; logprobs stay raw. */
    const int32_t bias_ids[] = {4};
    const float bias_values[] = {10.0f};
    loom_sampling s;
    lm_sampling_defaults(&s);
    s.temperature = 0;
    s.logit_bias_ids = bias_ids;
    s.logit_bias_values = bias_values;
    s.n_logit_bias = 1;
    s.logprobs = 4;
    memcpy(copy, lf, sizeof copy);
    lm_sample_result r;
    lm_status st = lm_sample(&s, copy, 6, NULL, NULL, &scratch, &r, &err);
    bool ok = st == LM_OK && r.token == 4 && fabs(r.logprob - (l[4] - lse)) < 1e-5 && r.n_top == 4;
    /* best first; the tie 2.0 (ids 1 and 3): lower id first */
    const int32_t order[4] = {5, 1, 3, 0};
    for (int i = 0; ok && i < 4; i++)
        ok = r.top[i].token == order[i] && fabs(r.top[i].logprob - (l[order[i]] - lse)) < 1e-5;

    /* logprobs 0: the chosen token only; more than V: all V; -1: nothing */
    s.logprobs = 0;
    memcpy(copy, lf, sizeof copy);
    ok = ok && lm_sample(&s, copy, 6, NULL, NULL, &scratch, &r, &err) == LM_OK && r.n_top == 0 &&
         fabs(r.logprob - (l[4] - lse)) < 1e-5;
    s.logprobs = 20;
    memcpy(copy, lf, sizeof copy);
    ok = ok && lm_sample(&s, copy, 6, NULL, NULL, &scratch, &r, &err) == LM_OK && r.n_top == 6 &&
         r.top[5].token == 4 && fabs(r.top[5].logprob - (l[4] - lse)) < 1e-5;
    s.logprobs = -1;
    memcpy(copy, lf, sizeof copy);
    ok = ok && lm_sample(&s, copy, 6, NULL, NULL, &scratch, &r, &err) == LM_OK && r.n_top == 0 &&
         r.logprob == 0;

    /* Equal logits: the top list is ordered by id, also once it is full. */
    float flat[6] = {1, 1, 1, 1, 1, 1};
    s.logprobs = 3;
    s.n_logit_bias = 0;
    ok = ok && lm_sample(&s, flat, 6, NULL, NULL, &scratch, &r, &err) == LM_OK && r.n_top == 3 &&
         r.top[0].token == 0 && r.top[1].token == 1 && r.top[2].token == 2 && r.token == 0 &&
         fabs(r.top[2].logprob - log(1.0 / 6)) < 1e-6;

    /* Sampling path: the drawn token's raw logprob. */
    s.temperature = 1;
    s.n_logit_bias = 0;
    s.logprobs = 2;
    lm_rng rng;
    lm_rng_seed(&rng, 3);
    for (int i = 0; ok && i < 50; i++) {
        memcpy(copy, lf, sizeof copy);
        ok = lm_sample(&s, copy, 6, NULL, &rng, &scratch, &r, &err) == LM_OK &&
             fabs(r.logprob - (l[r.token] - lse)) < 1e-5 && r.n_top == 2 && r.top[0].token == 5 &&
             r.top[1].token == 1;
    }
    lm_sampler_scratch_free(&scratch);
    CHECK(ok);
}

/* ------------------------------------------------------------ validation */

static void test_validation(void) {
    const int32_t good_ids[] = {0, 99};
    const float good_values[] = {-100.0f, 100.0f};
    const int32_t bad_id[] = {100};
    const int32_t negative_id[] = {-1};
    const float bad_value[] = {100.5f, 0};
    const float nan_value[] = {NAN, 0};
    struct {
        const char *field;
        float f;
        int i;
        const int32_t *ids;
        const float *values;
        int n_bias;
        int vocab;
        const char *message; /* NULL: valid */
    } cases[] = {
        {"temperature", -0.1f, 0, NULL, NULL, 0, 100, "temperature must be a finite number >= 0, got -0.1"},
        {"temperature", INFINITY, 0, NULL, NULL, 0, 100, "temperature must be a finite number >= 0, got inf"},
        {"temperature", NAN, 0, NULL, NULL, 0, 100, "temperature must be a finite number >= 0, got nan"},
        {"temperature", 0.0f, 0, NULL, NULL, 0, 100, NULL},
        {"top_p", 0.0f, 0, NULL, NULL, 0, 100, "top_p must be in (0, 1], got 0"},
        {"top_p", 1.5f, 0, NULL, NULL, 0, 100, "top_p must be in (0, 1], got 1.5"},
        {"top_p", 1.0f, 0, NULL, NULL, 0, 100, NULL},
        {"min_p", -0.01f, 0, NULL, NULL, 0, 100, "min_p must be in [0, 1], got -0.01"},
        {"min_p", 1.01f, 0, NULL, NULL, 0, 100, "min_p must be in [0, 1], got 1.01"},
        {"min_p", 1.0f, 0, NULL, NULL, 0, 100, NULL},
        {"top_k", 0, -2, NULL, NULL, 0, 100, "top_k must be -1 or 0 (off) or at least 1, got -2"},
        {"top_k", 0, 0, NULL, NULL, 0, 100, NULL},
        {"top_k", 0, 1000000, NULL, NULL, 0, 100, NULL},
        {"repetition_penalty", 0.0f, 0, NULL, NULL, 0, 100, "repetition_penalty must be a finite number > 0, got 0"},
        {"repetition_penalty", NAN, 0, NULL, NULL, 0, 100, "repetition_penalty must be a finite number > 0, got nan"},
        {"presence_penalty", 2.5f, 0, NULL, NULL, 0, 100, "presence_penalty must be in [-2, 2], got 2.5"},
        {"presence_penalty", -2.0f, 0, NULL, NULL, 0, 100, NULL},
        {"frequency_penalty", -2.5f, 0, NULL, NULL, 0, 100, "frequency_penalty must be in [-2, 2], got -2.5"},
        {"frequency_penalty", NAN, 0, NULL, NULL, 0, 100, "frequency_penalty must be in [-2, 2], got nan"},
        {"logit_bias", 0, 0, good_ids, good_values, 2, 100, NULL},
        {"logit_bias", 0, 0, bad_id, good_values, 1, 100, "logit_bias token id 100 is outside the vocabulary [0, 100)"},
        {"logit_bias", 0, 0, negative_id, good_values, 1, 100, "logit_bias token id -1 is outside the vocabulary [0, 100)"},
        {"logit_bias", 0, 0, bad_id, good_values, 1, 0, NULL}, /* vocabulary unknown */
        {"logit_bias", 0, 0, negative_id, good_values, 1, 0, "logit_bias token id -1 is negative"},
        {"logit_bias", 0, 0, good_ids, bad_value, 1, 100, "logit_bias value for token 0 must be in [-100, 100], got 100.5"},
        {"logit_bias", 0, 0, good_ids, nan_value, 1, 100, "logit_bias value for token 0 must be in [-100, 100], got nan"},
        {"logit_bias", 0, 0, NULL, NULL, 3, 100, "logit_bias has 3 entries but no ids or values"},
        {"logit_bias", 0, 0, NULL, NULL, -1, 100, "logit_bias has a negative size -1"},
        {"logprobs", 0, 21, NULL, NULL, 0, 100, "logprobs must be at most 20, got 21"},
        {"logprobs", 0, -2, NULL, NULL, 0, 100, "logprobs must be -1 (none) or in [0, 20], got -2"},
        {"logprobs", 0, 20, NULL, NULL, 0, 100, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        loom_sampling s;
        lm_sampling_defaults(&s);
        const char *f = cases[c].field;
        if (!strcmp(f, "temperature")) s.temperature = cases[c].f;
        if (!strcmp(f, "top_p")) s.top_p = cases[c].f;
        if (!strcmp(f, "min_p")) s.min_p = cases[c].f;
        if (!strcmp(f, "top_k")) s.top_k = cases[c].i;
        if (!strcmp(f, "repetition_penalty")) s.repetition_penalty = cases[c].f;
        if (!strcmp(f, "presence_penalty")) s.presence_penalty = cases[c].f;
        if (!strcmp(f, "frequency_penalty")) s.frequency_penalty = cases[c].f;
        if (!strcmp(f, "logprobs")) s.logprobs = cases[c].i;
        s.logit_bias_ids = cases[c].ids;
        s.logit_bias_values = cases[c].values;
        s.n_logit_bias = cases[c].n_bias;
        char msg[160] = "";
        bool ok = lm_sampling_validate(&s, cases[c].vocab, msg, sizeof msg);
        if (!cases[c].message) {
            CHECK_MSG(ok, "case %zu (%s) rejected: %s", c, f, msg);
        } else {
            CHECK_MSG(!ok && strcmp(msg, cases[c].message) == 0, "case %zu (%s): got \"%s\", expected \"%s\"", c, f,
                      msg, cases[c].message);
            CHECK(!lm_sampling_validate(&s, cases[c].vocab, NULL, 0)); /* no buffer: still false */
        }
    }
}

/* ------------------------------------------------------------ token history */

static void test_token_counts(void) {
    lm_token_counts a, b;
    lm_error err;
    CHECK_OK(lm_token_counts_init(&a, 2, &err), &err);
    bool ok = true;
    /* 5000 distinct ids (growth well past the initial size), some twice */
    for (int32_t id = 0; id < 5000 && ok; id++) ok = lm_token_counts_add_output(&a, id * 37, &err) == LM_OK;
    for (int32_t id = 0; id < 5000 && ok; id += 2) ok = lm_token_counts_add_output(&a, id * 37, &err) == LM_OK;
    const int32_t prompt[] = {37, 1, 1, 248319};
    ok = ok && lm_token_counts_add_prompt(&a, prompt, 4, &err) == LM_OK;
    ok = ok && a.n_distinct == 5002;
    int32_t count;
    bool in_prompt;
    for (int32_t id = 0; id < 5000 && ok; id++)
        ok = lm_token_counts_get(&a, id * 37, &count, &in_prompt) && count == (id % 2 ? 1 : 2) &&
             in_prompt == (id == 1);
    ok = ok && lm_token_counts_get(&a, 1, &count, &in_prompt) && count == 0 && in_prompt;
    ok = ok && !lm_token_counts_get(&a, 2, &count, &in_prompt) && count == 0 && !in_prompt;
    ok = ok && !lm_token_counts_get(&a, -5, &count, &in_prompt);
    /* a copy is independent */
    ok = ok && lm_token_counts_copy(&b, &a, &err) == LM_OK;
    if (ok) {
        lm_token_counts_remove_output(&b, 0);
        lm_token_counts_remove_output(&b, 0);
        lm_token_counts_remove_output(&b, 0); /* below zero: stays 0 */
        lm_token_counts_remove_output(&b, 2); /* unknown: nothing */
        ok = lm_token_counts_get(&b, 0, &count, &in_prompt) && count == 0;
        ok = ok && lm_token_counts_get(&a, 0, &count, &in_prompt) && count == 2;
        lm_token_counts_clear(&b);
        ok = ok && b.n_distinct == 0 && !lm_token_counts_get(&b, 37, &count, &in_prompt);
        ok = ok && lm_token_counts_add_output(&b, 37, &err) == LM_OK &&
             lm_token_counts_get(&b, 37, &count, &in_prompt) && count == 1 && !in_prompt;
        lm_token_counts_free(&b);
    }
    /* negative ids are refused with a message */
    const int32_t bad[] = {3, -7};
    lm_status st = lm_token_counts_add_prompt(&a, bad, 2, &err);
    lm_token_counts_free(&a);
    CHECK(ok);
    CHECK(st == LM_ERR_INVALID && strstr(err.message, "negative token id -7"));
}

/* ------------------------------------------------------------ odd inputs */

static void test_degenerate_inputs(void) {
    lm_sampler_scratch scratch;
    lm_error err;
    CHECK_OK(lm_sampler_scratch_init(&scratch, 4, &err), &err);
    loom_sampling s;
    lm_sampling_defaults(&s);
    lm_rng rng;
    lm_rng_seed(&rng, 1);
    lm_sample_result r;
    bool ok = true;
    /* NaN logits are never drawn; greedy skips them */
    float nan_logits[4] = {NAN, 1.0f, NAN, 2.0f}, copy[4], probs[4];
    memcpy(copy, nan_logits, sizeof copy);
    ok = ok && lm_sampler_distribution(&s, copy, 4, NULL, &scratch, probs, &err) == LM_OK;
    double z = exp(1.0) + exp(2.0);
    ok = ok && probs[0] == 0 && probs[2] == 0 && fabs(probs[1] - exp(1.0) / z) < 1e-6;
    s.temperature = 0;
    memcpy(copy, nan_logits, sizeof copy);
    ok = ok && lm_sample(&s, copy, 4, NULL, &rng, &scratch, &r, &err) == LM_OK && r.token == 3;
    /* everything masked: token 0, sampled or greedy */
    const int32_t stops[] = {0, 1, 2, 3};
    lm_sample_context ctx = {.min_tokens = 1, .stop_ids = stops, .n_stop_ids = 4};
    for (int t = 0; t < 2 && ok; t++) {
        s.temperature = t ? 1.0f : 0.0f;
        float l[4] = {1, 2, 3, 4};
        ok = lm_sample(&s, l, 4, &ctx, &rng, &scratch, &r, &err) == LM_OK && r.token == 0;
    }
    /* an infinite temperature is uniform */
    s.temperature = INFINITY;
    float l[4] = {1, 2, 3, 40};
    ok = ok && lm_sampler_distribution(&s, l, 4, NULL, &scratch, probs, &err) == LM_OK;
    for (int i = 0; ok && i < 4; i++) ok = fabs(probs[i] - 0.25) < 1e-6;
    /* misuse: a vocabulary larger than the scratch, random sampling without rng */
    s.temperature = 1;
    float big[8] = {0};
    lm_status st1 = lm_sample(&s, big, 8, NULL, &rng, &scratch, &r, &err);
    bool msg1 = strstr(err.message, "vocabulary size 8") != NULL;
    lm_status st2 = lm_sample(&s, l, 4, NULL, NULL, &scratch, &r, &err);
    bool msg2 = strstr(err.message, "needs an rng") != NULL;
    lm_sampler_scratch_free(&scratch);
    CHECK(ok);
    CHECK(st1 == LM_ERR_INVALID && msg1);
    CHECK(st2 == LM_ERR_INVALID && msg2);
    CHECK(lm_sampler_scratch_init(&scratch, 0, &err) == LM_ERR_INVALID);
}

/* ------------------------------------------------------------ full-size vocabulary */

#define BIG_V 248320

typedef struct {
    float logit;
    int32_t id;
} ranked_token;

static int by_logit_then_id(const void *a, const void *b) {
    const ranked_token *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* order[] = the ids sorted by logit (descending), ties by id. */
static bool sort_vocabulary(const float *logits, int V, int32_t *order) {
    ranked_token *r = malloc(sizeof *r * (size_t)V);
    if (!r) return false;
    for (int i = 0; i < V; i++) r[i] = (ranked_token){logits[i], i};
    qsort(r, (size_t)V, sizeof *r, by_logit_then_id);
    for (int i = 0; i < V; i++) order[i] = r[i].id;
    free(r);
    return true;
}

/* The obvious implementation: sort the whole vocabulary, then min_p, top_k
 * (ties with the k-th kept), top_p (with the sampler's documented
 * tolerance), all in double. */
static void naive_distribution(const float *logits, const int32_t *order, int V, double T, int top_k,
                               double top_p, double min_p, double *out) {
    double max = logits[order[0]];
    double *w = calloc((size_t)V, sizeof *w);
    int n = 0;
    for (; n < V; n++) {
        double wi = exp(((double)logits[order[n]] - max) / T);
        if (wi < min_p) break;
        w[n] = wi;
    }
    if (top_k > 0 && top_k < n) {
        int keep = top_k;
        while (keep < n && logits[order[keep]] == logits[order[keep - 1]]) keep++;
        n = keep;
    }
    double z = 0;
    for (int i = 0; i < n; i++) z += w[i];
    if (top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += w[i] / z;
            if (cum >= top_p - LM_SAMPLER_TOP_P_TOLERANCE) {
                n = i + 1;
                break;
            }
        }
        z = 0;
        for (int i = 0; i < n; i++) z += w[i];
    }
    for (int i = 0; i < V; i++) out[i] = 0;
    for (int i = 0; i < n; i++) out[order[i]] = w[i] / z;
    free(w);
}

static void test_large_vocab_against_full_sort(void) {
    float *logits = malloc(sizeof(float) * BIG_V), *copy = malloc(sizeof(float) * BIG_V);
    float *probs = malloc(sizeof(float) * BIG_V);
    double *expected = malloc(sizeof(double) * BIG_V);
    int32_t *order = malloc(sizeof(int32_t) * BIG_V);
    lm_sampler_scratch scratch;
    lm_error err;
    bool ready = logits && copy && probs && expected && order &&
                 lm_sampler_scratch_init(&scratch, BIG_V, &err) == LM_OK;
    if (!ready) {
        free(logits), free(copy), free(probs), free(expected), free(order);
        CHECK_MSG(false, "allocation failed");
    }
    /* Logits shaped like a model's: a Gaussian bulk, a few strong tokens, and
     * coarse rounding so that ties occur. */
    lm_rng data;
    lm_rng_seed(&data, 2024);
    for (int i = 0; i < BIG_V; i++) {
        double u1 = lm_rng_uniform(&data) + 1e-12, u2 = lm_rng_uniform(&data);
        double g = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
        logits[i] = (float)(round(g * 2.5 * 64) / 64);
    }
    for (int i = 0; i < 40; i++) logits[(i * 7919 + 13) % BIG_V] = 9.0f + (float)(i % 10) * 0.25f;
    bool ok = sort_vocabulary(logits, BIG_V, order);

    struct {
        float T;
        int top_k;
        float top_p, min_p;
    } cases[] = {
        {1.0f, 50, 1.0f, 0},      {0.8f, -1, 0.9f, 0},     {1.0f, 50, 0.9f, 0},
        {1.5f, -1, 0.95f, 0},     {1.0f, 1000, 0.5f, 0},   {1.2f, -1, 0.9f, 0.02f},
        {3.0f, 20000, 0.99f, 0},  {0.7f, 1, 1.0f, 0},      {1.0f, 45, 1.0f, 0},
    };
    char what[160] = "sorting failed";
    for (size_t c = 0; c < sizeof cases / sizeof *cases && ok; c++) {
        loom_sampling s;
        lm_sampling_defaults(&s);
        s.temperature = cases[c].T;
        s.top_k = cases[c].top_k;
        s.top_p = cases[c].top_p;
        s.min_p = cases[c].min_p;
        memcpy(copy, logits, sizeof(float) * BIG_V);
        ok = lm_sampler_distribution(&s, copy, BIG_V, NULL, &scratch, probs, &err) == LM_OK;
        naive_distribution(logits, order, BIG_V, s.temperature, s.top_k, s.top_p, s.min_p, expected);
        int kept = 0, kept_expected = 0;
        for (int i = 0; ok && i < BIG_V; i++) {
            kept += probs[i] > 0;
            kept_expected += expected[i] > 0;
            if ((probs[i] > 0) != (expected[i] > 0) || fabs(probs[i] - expected[i]) > PROB_TOL) {
                snprintf(what, sizeof what, "case %zu token %d: %.9g, naive %.9g", c, i, (double)probs[i],
                         expected[i]);
                ok = false;
            }
        }
        if (ok && kept != kept_expected) {
            snprintf(what, sizeof what, "case %zu: %d kept, naive %d", c, kept, kept_expected);
            ok = false;
        }
        /* a draw lands in the kept set */
        lm_rng rng;
        lm_rng_seed(&rng, c);
        lm_sample_result r;
        memcpy(copy, logits, sizeof(float) * BIG_V);
        if (ok && (lm_sample(&s, copy, BIG_V, NULL, &rng, &scratch, &r, &err) != LM_OK || !(expected[r.token] > 0))) {
            snprintf(what, sizeof what, "case %zu: drew token %d outside the kept set", c, (int)r.token);
            ok = false;
        }
    }
    /* Greedy with logprobs on the big vocabulary. */
    if (ok) {
        loom_sampling s;
        lm_sampling_defaults(&s);
        s.temperature = 0;
        s.logprobs = 20;
        memcpy(copy, logits, sizeof(float) * BIG_V);
        lm_sample_result r;
        double lse = 0;
        for (int i = 0; i < BIG_V; i++) lse += exp((double)logits[i] - logits[order[0]]);
        lse = logits[order[0]] + log(lse);
        ok = lm_sample(&s, copy, BIG_V, NULL, NULL, &scratch, &r, &err) == LM_OK && r.token == order[0] &&
             r.n_top == 20 && fabs(r.logprob - (logits[order[0]] - lse)) < 1e-4;
        for (int i = 0; ok && i < 20; i++)
            ok = r.top[i].token == order[i] && fabs(r.top[i].logprob - (logits[order[i]] - lse)) < 1e-4;
        if (!ok) snprintf(what, sizeof what, "greedy logprobs differ from the full sort");
    }
    lm_sampler_scratch_free(&scratch);
    free(logits), free(copy), free(probs), free(expected), free(order);
    CHECK_MSG(ok, "%s", what);
}

/* The sampler's vector loops (engine/sampler_vectors.c) of every kernel set
 * of the build that this CPU runs, against float64 on rows whose lengths
 * leave every tail size, with -inf (masked ids) and NaN among the values:
 * max exactly, exp within 4e-7 of each value (the polynomial's ~2 ulp),
 * the sum of exps within 1e-6. */
static void test_vectors_of_every_kernel_set(void) {
    lm_cpu_features cpu = lm_cpu_features_detect();
    int checked = 0;
    enum { N = 300 };
    float x[N], out[N];
    for (int i = 0; i < N; i++) x[i] = (float)sin(i * 0.37) * 20.0f - (float)(i % 7);
    for (int s = 0; s < LM_KERNEL_SET_COUNT; s++) {
        const lm_sampler_vectors *v = lm_sampler_vectors_of((lm_kernel_set)s);
        CHECK((v != NULL) == lm_kernel_set_is_built((lm_kernel_set)s));
        if (!v || !lm_kernel_set_runs_on((lm_kernel_set)s, &cpu)) continue;
        CHECK(v->set == (lm_kernel_set)s);
        checked++;
        const char *name = lm_kernel_set_name((lm_kernel_set)s);
        for (int n = 1; n <= 70 && !test_current_failed(); n++) {
            float row[N];
            memcpy(row, x, sizeof row);
            if (n > 1) row[n / 2] = -INFINITY; /* a masked id (not the only one: the max stays finite) */
            if (n > 3) row[n - 2] = NAN;
            double want_max = -INFINITY, want_sum = 0;
            for (int i = 0; i < n; i++)
                if (row[i] > want_max) want_max = row[i];
            float got_max = v->max(row, n);
            CHECK_MSG(got_max == (float)want_max, "%s: max of %d: %g, want %g", name, n, got_max, want_max);
            float shift = (float)want_max, scale = 0.7f;
            v->exp_scaled(row, n, shift, scale, out);
            for (int i = 0; i < n; i++) {
                if (row[i] != row[i]) continue; /* NaN in, NaN out: not checked */
                float arg = (row[i] - shift) * scale; /* in float, as the loops do */
                double want = exp((double)arg);
                CHECK_MSG(fabs(out[i] - want) <= 4e-7 * want + 1e-37, "%s: exp_scaled[%d] of %d: %.9g, want %.9g",
                          name, i, n, out[i], want);
                if (test_current_failed()) break;
            }
            row[n - 2 > 0 ? n - 2 : 0] = 0.0f; /* the sum takes no NaN */
            for (int i = 0; i < n; i++) want_sum += exp((double)(row[i] - shift));
            double got_sum = v->exp_sum(row, n, shift);
            CHECK_MSG(fabs(got_sum - want_sum) <= 1e-6 * want_sum, "%s: exp_sum of %d: %.12g, want %.12g", name, n,
                      got_sum, want_sum);
        }
    }
    CHECK(checked >= 1);
    /* the scratch takes the set LOOM_CPU_KERNELS names, else the best one */
    lm_sampler_scratch scratch;
    lm_error err = {0};
    lm_kernel_set want;
    CHECK_OK(lm_kernel_set_for_process(&want, NULL, &err), &err);
    CHECK_OK(lm_sampler_scratch_init(&scratch, 16, &err), &err);
    CHECK(scratch.vectors && scratch.vectors->set == want);
    lm_sampler_scratch_free(&scratch);
}

int main(void) {
    RUN_TEST(test_defaults);
    RUN_TEST(test_temperature);
    RUN_TEST(test_top_k);
    RUN_TEST(test_top_p);
    RUN_TEST(test_min_p);
    RUN_TEST(test_repetition_penalty_prompt_only);
    RUN_TEST(test_presence_frequency);
    RUN_TEST(test_logit_bias);
    RUN_TEST(test_min_tokens_masking);
    RUN_TEST(test_raw_argmax_predicate);
    RUN_TEST(test_combined);
    RUN_TEST(test_sampling_frequencies);
    RUN_TEST(test_sampling_frequencies_across_blocks);
    RUN_TEST(test_draws_match_the_ops_definition);
    RUN_TEST(test_greedy);
    RUN_TEST(test_rng);
    RUN_TEST(test_seeded_determinism);
    RUN_TEST(test_logprobs);
    RUN_TEST(test_validation);
    RUN_TEST(test_token_counts);
    RUN_TEST(test_degenerate_inputs);
    RUN_TEST(test_large_vocab_against_full_sort);
    RUN_TEST(test_vectors_of_every_kernel_set);
    return test_summary("test_sampler");
}
