/* Helpers shared by the model and engine tests: a checkpoint folder loaded
 * in one call, reference prompt ids, and small array statistics. */
#ifndef LOOM_TESTS_MODEL_UTIL_H
#define LOOM_TESTS_MODEL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/qwen35.h"
#include "ops/ops.h"

typedef struct {
    lm_qwen35_config config;
    lm_checkpoint *checkpoint;
    lm_qwen35_model model;
    lm_backend *backend;
    bool model_loaded;
} test_model;

/* Loads dir's config, checkpoint and model and a cpu backend; on failure
 * prints why, releases what was made and returns false. */
bool test_model_open(test_model *m, const char *dir, int threads);
void test_model_close(test_model *m);

/* The ids of reference prompt `name` ("p0", ...) in a fixture's reference
 * file; NULL (and *n = 0) if absent. */
const int32_t *test_reference_ids(const lm_safetensors *reference, const char *name, int *n);

double test_stddev(const float *x, size_t n);
/* max |got - want| / std(want) over n values (fixtures/README.md); NaN gives infinity. */
double test_normalized_error(const float *got, const float *want, size_t n);
int test_argmax(const float *x, int n); /* lowest index on ties */

#endif
