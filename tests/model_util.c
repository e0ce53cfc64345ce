#include "model_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *test_backend_name(void) {
    const char *name = getenv("LOOM_TEST_BACKEND");
    return name && *name ? name : "cpu";
}

bool test_model_open_with(test_model *m, const char *dir, int threads,
                          const lm_model_load_options *options) {
    memset(m, 0, sizeof *m);
    lm_error err = {0};
    if (lm_backend_create(test_backend_name(), threads, &m->backend, &err) == LM_OK &&
        lm_model_open(dir, options, m->backend, &m->model, &err) == LM_OK) {
        m->qwen = (lm_qwen35_model *)m->model;
        m->config = &m->qwen->config;
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
