/* Golden tests of the Qwen3.5 dense text model against transformers'
 * reference outputs in fixtures/models/qwen35-dense (see fixtures/README.md):
 * logits of every prompt, greedy continuations (margin rule), per-layer
 * hidden states, and decode-after-prefill equal to full prefill. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sequence_runner.h"
#include "harness.h"
#include "model_util.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/qwen35/qwen35.h"

#define LOGIT_TOLERANCE test_logit_tolerance() /* max |Δ| / std(reference), fixtures/README.md */
#define MARGIN_RULE 1e-3

typedef struct {
    test_model tm;
    lm_safetensors *reference;
} fixture;

static fixture fx; /* loaded once for the whole binary */

static bool load_fixture(void) {
    char dir[1024], path[1200];
    test_fixture_path(dir, sizeof dir, "models/qwen35-dense");
    lm_error err = {0};
    if (!test_model_open(&fx.tm, dir, 2)) return false;
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    if (lm_safetensors_open(path, LM_LOAD_READ, &fx.reference, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return false;
    }
    return true;
}

static const lm_tensor *ref(const char *prompt, const char *what) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", prompt, what);
    return lm_safetensors_find(fx.reference, name);
}

/* max |a - b| / std(b) */
static double normalized_error(const float *got, const float *want, size_t n, double scale) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) worst = d; /* NaN propagates as a failure */
    }
    return worst / scale;
}

static const char *text_prompts[] = {"p0", "p1", "p2", "p3"};
#define N_PROMPTS (sizeof text_prompts / sizeof text_prompts[0])

static void prompt_ids(const char *p, const int32_t **ids, int *n) {
    const lm_tensor *t = ref(p, "input_ids");
    *ids = t ? t->data : NULL;
    *n = t ? (int)t->n_elements : 0;
}

/* Full-prefill logits of every text prompt against an oracle. */
static void check_prefill_logits(lm_model *model,
                                 const lm_tensor *(*oracle)(const char *prompt)) {
    int V = fx.tm.config->vocab_size;
    for (size_t p = 0; p < N_PROMPTS; p++) {
        const int32_t *ids;
        int n;
        prompt_ids(text_prompts[p], &ids, &n);
        const lm_tensor *want = oracle(text_prompts[p]);
        CHECK_MSG(ids && want, "reference for %s missing", text_prompts[p]);
        CHECK(want->n_elements == (int64_t)n * V);
        float *logits = malloc(sizeof(float) * (size_t)n * V);
        lm_sequence_runner r;
        lm_error err = {0};
        CHECK_OK(lm_sequence_runner_init(&r, model, n, &err), &err);
        lm_status st = lm_sequence_runner_feed(&r, ids, n, true, logits, NULL, NULL, &err);
        lm_sequence_runner_free(&r);
        double scale = test_stddev(want->data, (size_t)want->n_elements);
        double e = normalized_error(logits, want->data, (size_t)n * V, scale);
        free(logits);
        CHECK_OK(st, &err);
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s (%d tokens): normalized logit error %.3g", text_prompts[p],
                  n, e);
    }
}

static const lm_tensor *fixture_logits(const char *prompt) { return ref(prompt, "logits"); }

static void test_prefill_logits_match_reference(void) { check_prefill_logits(fx.tm.model, fixture_logits); }

static void test_greedy_continuations_match_reference(void) {
    for (size_t p = 0; p < N_PROMPTS; p++) {
        const int32_t *ids;
        int n;
        prompt_ids(text_prompts[p], &ids, &n);
        const lm_tensor *greedy = ref(text_prompts[p], "greedy");
        const lm_tensor *margin = ref(text_prompts[p], "greedy_margin");
        CHECK(ids && greedy && margin);
        int G = (int)greedy->n_elements;
        const int32_t *want = greedy->data;
        const float *margins = margin->data;
        test_greedy_result res;
        lm_error err = {0};
        CHECK_OK(test_greedy_run(fx.tm.model, ids, n, want, G, &res, &err), &err);
        int compared = res.compared, mismatch_at = res.mismatch_at;
        if (mismatch_at >= 0)
            CHECK_MSG(margins[mismatch_at] < MARGIN_RULE,
                      "%s: greedy token %d differs with reference margin %.3g", text_prompts[p],
                      mismatch_at, margins[mismatch_at]);
        CHECK(compared > 0 || margins[0] < MARGIN_RULE);
    }
}

/* lm_sequence_runner_feed_greedy (the argmax taken where the logits are,
 * only the id brought back: `loom bench`'s decode) gives, step by step,
 * the host argmax of the same forward's downloaded logits; bad calls fail. */
static void test_greedy_feed_matches_host_argmax(void) {
    int V = fx.tm.config->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)V);
    CHECK(logits != NULL);
    for (size_t p = 0; p < N_PROMPTS; p++) {
        const int32_t *ids;
        int n;
        prompt_ids(text_prompts[p], &ids, &n);
        const lm_tensor *greedy = ref(text_prompts[p], "greedy");
        CHECK(ids && greedy);
        int G = (int)greedy->n_elements;
        lm_sequence_runner host, device;
        lm_error err = {0};
        CHECK_OK(lm_sequence_runner_init(&host, fx.tm.model, n + G, &err), &err);
        CHECK_OK(lm_sequence_runner_init(&device, fx.tm.model, n + G, &err), &err);
        int32_t next = -1, want;
        lm_status st = lm_sequence_runner_feed(&host, ids, n, false, logits, NULL, NULL, &err);
        if (st == LM_OK) st = lm_sequence_runner_feed_greedy(&device, ids, n, &next, &err);
        for (int g = 0; g < G && st == LM_OK; g++) {
            want = test_argmax(logits, V);
            CHECK_MSG(next == want, "%s step %d: greedy feed gave %d, the logits' argmax is %d", text_prompts[p], g,
                      next, want);
            st = lm_sequence_runner_feed(&host, &want, 1, false, logits, NULL, NULL, &err);
            if (st == LM_OK) st = lm_sequence_runner_feed_greedy(&device, &want, 1, &next, &err);
        }
        lm_sequence_runner_free(&host);
        lm_sequence_runner_free(&device);
        CHECK_OK(st, &err);
    }
    int32_t unused;
    lm_sequence_runner r;
    lm_error err = {0};
    CHECK_OK(lm_sequence_runner_init(&r, fx.tm.model, 4, &err), &err);
    CHECK(lm_sequence_runner_feed_greedy(&r, &unused, 0, &unused, &err) == LM_ERR_INVALID);
    CHECK(lm_sequence_runner_feed_greedy(&r, &unused, 1, NULL, &err) == LM_ERR_INVALID);
    lm_sequence_runner_free(&r);
    free(logits);
}

static void test_hidden_states_match_reference(void) {
    const int32_t *ids;
    int n;
    prompt_ids("p0", &ids, &n);
    int L = fx.tm.config->num_hidden_layers, H = fx.tm.config->hidden_size;
    float **hidden = calloc((size_t)L + 1, sizeof *hidden);
    for (int l = 0; l <= L; l++) hidden[l] = malloc(sizeof(float) * (size_t)n * H);
    float *logits = malloc(sizeof(float) * (size_t)n * fx.tm.config->vocab_size);
    lm_sequence_runner r;
    lm_error err = {0};
    lm_status st = lm_sequence_runner_init(&r, fx.tm.model, n, &err);
    if (st == LM_OK) st = lm_sequence_runner_feed(&r, ids, n, true, logits, NULL, hidden, &err);
    lm_sequence_runner_free(&r);
    double worst = 0;
    int worst_layer = -1;
    for (int l = 0; l <= L && st == LM_OK; l++) {
        char what[32];
        snprintf(what, sizeof what, "hidden.%d", l);
        const lm_tensor *want = ref("p0", what);
        if (!want || want->n_elements != (int64_t)n * H) {
            worst = INFINITY;
            worst_layer = l;
            break;
        }
        double e = normalized_error(hidden[l], want->data, (size_t)n * H,
                                    test_stddev(want->data, (size_t)n * H));
        if (!(e <= worst)) {
            worst = e;
            worst_layer = l;
        }
    }
    for (int l = 0; l <= L; l++) free(hidden[l]);
    free(hidden);
    free(logits);
    CHECK_OK(st, &err);
    CHECK_MSG(worst < LOGIT_TOLERANCE, "hidden state entering layer %d: normalized error %.3g",
              worst_layer, worst);
}

/* Prefill the first `split` tokens, then feed the rest in pieces of `step`
 * tokens; every position's logits must equal the full-prefill reference. */
static double incremental_error(const char *prompt, int split, int step, lm_error *err,
                                lm_status *st) {
    const int32_t *ids;
    int n;
    prompt_ids(prompt, &ids, &n);
    const lm_tensor *want = ref(prompt, "logits");
    int V = fx.tm.config->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)n * V);
    lm_sequence_runner r;
    *st = lm_sequence_runner_init(&r, fx.tm.model, n, err);
    if (*st == LM_OK) *st = lm_sequence_runner_feed(&r, ids, split, true, logits, NULL, NULL, err);
    for (int pos = split; pos < n && *st == LM_OK; pos += step) {
        int k = n - pos < step ? n - pos : step;
        *st = lm_sequence_runner_feed(&r, ids + pos, k, true, logits + (size_t)pos * V, NULL, NULL, err);
    }
    lm_sequence_runner_free(&r);
    double e = *st == LM_OK ? normalized_error(logits, want->data, (size_t)n * V,
                                               test_stddev(want->data, (size_t)n * V))
                            : INFINITY;
    free(logits);
    return e;
}

static void test_decode_after_prefill_matches_full_prefill(void) {
    /* Splits on both sides of the 64-token delta-rule chunk boundary. */
    static const struct { const char *prompt; int split, step; } cases[] = {
        {"p0", 1, 1}, {"p0", 5, 1}, {"p2", 1, 1}, {"p2", 64, 1}, {"p2", 65, 1},
        {"p3", 3, 1}, {"p3", 100, 1}, {"p3", 64, 7}, {"p3", 10, 33},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lm_error err = {0};
        lm_status st;
        double e = incremental_error(cases[i].prompt, cases[i].split, cases[i].step, &err, &st);
        CHECK_OK(st, &err);
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s split %d step %d: normalized error %.3g", cases[i].prompt,
                  cases[i].split, cases[i].step, e);
    }
}

int main(void) {
    if (!load_fixture()) {
        printf("test_qwen35_golden: 0 passed, 1 failed\n");
        return 1;
    }
    RUN_TEST(test_prefill_logits_match_reference);
    RUN_TEST(test_greedy_continuations_match_reference);
    RUN_TEST(test_greedy_feed_matches_host_argmax);
    RUN_TEST(test_hidden_states_match_reference);
    RUN_TEST(test_decode_after_prefill_matches_full_prefill);
    lm_safetensors_close(fx.reference);
    test_model_close(&fx.tm);
    return test_summary("test_qwen35_golden");
}
