#include "model_util.h"

#include "engine/sequence_runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *test_backend_name(void) {
    const char *name = getenv("LOOM_TEST_BACKEND");
    return name && *name ? name : "cpu";
}

const char *test_compute_name(void) {
    const char *name = getenv("LOOM_TEST_COMPUTE");
    return name && *name ? name : "f32";
}

const char *test_quantize_name(void) {
    const char *name = getenv("LOOM_TEST_QUANTIZE");
    return name && *name ? name : "none";
}

int test_draft_vocab(void) {
    const char *n = getenv("LOOM_TEST_DRAFT_VOCAB");
    return n && *n ? atoi(n) : 0;
}

/* LOOM_TEST_TP=N: the engine tests split their model over N ranks. */
int test_tensor_parallel_size(void) {
    const char *n = getenv("LOOM_TEST_TP");
    return n && *n ? atoi(n) : 0;
}

/* LOOM_TEST_EP=1: ... with the MoE layers' experts dealt out whole. */
bool test_expert_parallel(void) {
    const char *on = getenv("LOOM_TEST_EP");
    return on && *on && strcmp(on, "0") != 0;
}

double test_logit_tolerance(void) {
    return strcmp(test_compute_name(), "bf16") == 0 ? 1e-2 : 1e-4;
}

bool test_model_open_with(test_model *m, const char *dir, int threads,
                          const lm_model_load_options *options) {
    memset(m, 0, sizeof *m);
    lm_error err = {0};
    lm_model_load_options o = options ? *options : (lm_model_load_options){0};
    if (strcmp(test_quantize_name(), "int8") == 0) o.quantize_int8 = true;
    if (lm_backend_create(test_backend_name(), threads, &m->backend, &err) == LM_OK &&
        lm_backend_set_compute(m->backend, test_compute_name(), &err) == LM_OK &&
        lm_model_open(dir, &o, m->backend, &m->model, &err) == LM_OK) {
        /* The Qwen3.5 tests look inside; other families go through the interface. */
        if (strcmp(lm_model_describe(m->model)->family, lm_qwen35_family.name) == 0) {
            m->qwen = (lm_qwen35_model *)m->model;
            m->config = &m->qwen->config;
        }
        return true;
    }
    fprintf(stderr, "cannot load %s: %s\n", dir, err.message);
    test_model_close(m);
    return false;
}

bool test_model_open(test_model *m, const char *dir, int threads) {
    return test_model_open_with(m, dir, threads, NULL);
}

void test_model_close(test_model *m) {
    lm_model_free(m->model);
    lm_backend_destroy(m->backend);
    memset(m, 0, sizeof *m);
}

const int32_t *test_reference_ids(const lm_safetensors *reference, const char *name, int *n) {
    char key[64];
    snprintf(key, sizeof key, "%s.input_ids", name);
    const lm_tensor *t = lm_safetensors_find(reference, key);
    *n = t ? (int)t->n_elements : 0;
    return t ? t->data : NULL;
}

float *test_prefill(lm_model *model, const int32_t *ids, int n, float *hidden, float **layer_hidden,
                    lm_error *err) {
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)lm_model_describe(model)->vocab_size);
    if (!logits) {
        lm_fail(err, LM_ERR_NOMEM, "out of memory for %d rows of logits", n);
        return NULL;
    }
    lm_sequence_runner r;
    lm_status st = lm_sequence_runner_init(&r, model, n, err);
    if (st == LM_OK) {
        st = lm_sequence_runner_feed(&r, ids, n, true, logits, hidden, layer_hidden, err);
        lm_sequence_runner_free(&r);
    }
    if (st != LM_OK) {
        free(logits);
        return NULL;
    }
    return logits;
}

double test_stddev(const float *x, size_t n) {
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    return sqrt(var / (double)n);
}

double test_normalized_error(const float *got, const float *want, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) worst = d; /* NaN sticks */
    }
    return isnan(worst) ? INFINITY : worst / test_stddev(want, n);
}

int test_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

lm_status test_greedy_run(lm_model *model, const int32_t *ids, int n, const int32_t *want, int G,
                          test_greedy_result *out, lm_error *err) {
    *out = (test_greedy_result){.mismatch_at = -1};
    int V = lm_model_describe(model)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)V);
    if (!logits) return lm_fail(err, LM_ERR_NOMEM, "out of memory for a row of logits");
    lm_sequence_runner r;
    lm_status st = lm_sequence_runner_init(&r, model, n + G, err);
    if (st != LM_OK) {
        free(logits);
        return st;
    }
    st = lm_sequence_runner_feed(&r, ids, n, false, logits, NULL, NULL, err);
    for (int g = 0; g < G && st == LM_OK; g++) {
        int32_t next = test_argmax(logits, V);
        if (next != want[g]) {
            out->mismatch_at = g;
            break;
        }
        out->compared++;
        st = lm_sequence_runner_feed(&r, &next, 1, false, logits, NULL, NULL, err);
    }
    lm_sequence_runner_free(&r);
    free(logits);
    return st;
}

static const char *const test_prompt_names[TEST_PROMPTS] = {"p0", "p1", "p2", "p3"};

void test_prompt_logits_free(test_prompt_logits *p) {
    for (int i = 0; i < TEST_PROMPTS; i++) free(p->logits[i]);
    memset(p, 0, sizeof *p);
}

lm_safetensors *test_open_reference(const char *fixture_dir) {
    char path[1400];
    snprintf(path, sizeof path, "%s/reference.safetensors", fixture_dir);
    lm_safetensors *ref = NULL;
    lm_error err = {0};
    if (lm_safetensors_open(path, LM_LOAD_READ, &ref, &err) != LM_OK) fprintf(stderr, "%s\n", err.message);
    return ref;
}

bool test_prefill_prompts(lm_model *model, const char *dir, const lm_safetensors *ref, int n_prompts,
                          test_prompt_logits *out) {
    out->V = lm_model_describe(model)->vocab_size;
    for (int p = 0; p < n_prompts; p++) {
        const int32_t *ids = test_reference_ids(ref, test_prompt_names[p], &out->n[p]);
        lm_error err = {0};
        out->logits[p] = ids ? test_prefill(model, ids, out->n[p], NULL, NULL, &err) : NULL;
        if (!out->logits[p]) {
            fprintf(stderr, "%s %s: %s\n", dir, test_prompt_names[p], ids ? err.message : "no such prompt");
            return false;
        }
    }
    return true;
}

bool test_run_prompts(const char *dir, const lm_model_load_options *options, const lm_safetensors *ref,
                      int n_prompts, test_prompt_logits *out) {
    memset(out, 0, sizeof *out);
    test_model tm;
    if (!test_model_open_with(&tm, dir, 2, options)) return false;
    bool ok = test_prefill_prompts(tm.model, dir, ref, n_prompts, out);
    test_model_close(&tm);
    return ok;
}

double test_worst_prompt_error(const test_prompt_logits *a, const test_prompt_logits *b, const lm_safetensors *ref,
                               int n_prompts) {
    double worst = 0;
    for (int p = 0; p < n_prompts; p++) {
        size_t n = (size_t)a->n[p] * (size_t)a->V;
        const float *want = b ? b->logits[p] : NULL;
        if (!b) {
            char name[64];
            snprintf(name, sizeof name, "%s.logits", test_prompt_names[p]);
            const lm_tensor *t = lm_safetensors_find(ref, name);
            if (!t || (size_t)t->n_elements != n) return INFINITY;
            want = t->data;
        }
        worst = fmax(worst, test_normalized_error(a->logits[p], want, n));
    }
    return worst;
}
