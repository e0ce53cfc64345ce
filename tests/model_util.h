/* Helpers shared by the model and engine tests: a checkpoint folder loaded
 * in one call on the backend under test, reference prompt ids, and small
 * array statistics. */
#ifndef LOOM_TESTS_MODEL_UTIL_H
#define LOOM_TESTS_MODEL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/qwen35/qwen35.h"
#include "ops/ops.h"

typedef struct {
    lm_backend *backend;
    lm_model *model;        /* through the model interface */
    lm_qwen35_model *qwen;  /* the same model, for tests that look inside (Qwen3.5 only, else NULL) */
    const lm_qwen35_config *config; /* Qwen3.5 only, else NULL */
} test_model;

/* The backend the tests run on: $LOOM_TEST_BACKEND, default "cpu"
 * (tests/run.sh runs the model and engine tests on "ref" too). */
const char *test_backend_name(void);
/* The precision the backend under test computes in: $LOOM_TEST_COMPUTE,
 * "f32" (default) or "bf16" (lm_backend_set_compute), and the logit
 * tolerance the fixtures' README gives for it: max |Δ| / std(reference)
 * within 1e-4 for float32 arithmetic, 1e-2 for bf16. */
const char *test_compute_name(void);
/* $LOOM_TEST_QUANTIZE: "int8" loads every test model with int8 Linear
 * layers (--quantize int8; tests/run.sh reruns the batch-invariance tests
 * so), default "none". */
const char *test_quantize_name(void);
/* LOOM_TEST_DRAFT_VOCAB=N: the engine tests' MTP drafts choose among the
 * first N token ids (loom_engine_options.draft_vocab; 0: the default). */
int test_draft_vocab(void);
double test_logit_tolerance(void);
/* LOOM_TEST_TP: the ranks the engine tests split their model over (0: one). */
int test_tensor_parallel_size(void);
/* LOOM_TEST_EP=1: with LOOM_TEST_TP, expert parallelism too (the MoE
 * models' routed experts dealt out whole over the ranks). */
bool test_expert_parallel(void);

/* Loads dir's checkpoint (options NULL: the defaults) on a new backend
 * (test_backend_name(), `threads` threads); on failure prints why,
 * releases what was made and returns false. */
bool test_model_open(test_model *m, const char *dir, int threads);
bool test_model_open_with(test_model *m, const char *dir, int threads,
                          const lm_model_load_options *options);
void test_model_close(test_model *m);

/* The ids of reference prompt `name` ("p0", ...) in a fixture's reference
 * file; NULL (and *n = 0) if absent. */
const int32_t *test_reference_ids(const lm_safetensors *reference, const char *name, int *n);

/* Full-prefill logits [n, V] of ids through the model (the post-final-norm
 * rows [n, H] into hidden and the states entering each layer into
 * layer_hidden when given); NULL with err set on failure. */
float *test_prefill(lm_model *model, const int32_t *ids, int n, float *hidden, float **layer_hidden,
                    lm_error *err);

double test_stddev(const float *x, size_t n);
/* max |got - want| / std(want) over n values (fixtures/README.md); NaN gives infinity. */
double test_normalized_error(const float *got, const float *want, size_t n);
int test_argmax(const float *x, int n); /* lowest index on ties */

/* Greedy decoding after the prompt ids, compared with a reference
 * continuation want[0..G): compared counts the steps that agreed before the
 * first that differs (mismatch_at, -1 if none).  The caller applies the
 * fixtures' margin rule to mismatch_at. */
typedef struct {
    int compared, mismatch_at;
} test_greedy_result;
lm_status test_greedy_run(lm_model *model, const int32_t *ids, int n, const int32_t *want, int G,
                          test_greedy_result *out, lm_error *err);

/* Full-prefill logits of a fixture's reference prompts (p0..p3), for
 * checkpoints compared with a twin or the reference (test_quantized,
 * test_mlx_quant). */
#define TEST_PROMPTS 4
typedef struct {
    float *logits[TEST_PROMPTS];
    int n[TEST_PROMPTS];
    int V;
} test_prompt_logits;
void test_prompt_logits_free(test_prompt_logits *p);
/* fixture_dir/reference.safetensors (NULL, said on stderr, if it cannot be read). */
lm_safetensors *test_open_reference(const char *fixture_dir);
/* The first n_prompts reference prompts through model. */
bool test_prefill_prompts(lm_model *model, const char *dir, const lm_safetensors *ref, int n_prompts,
                          test_prompt_logits *out);
/* The same through dir's model (options may be NULL) on the backend under test. */
bool test_run_prompts(const char *dir, const lm_model_load_options *options, const lm_safetensors *ref,
                      int n_prompts, test_prompt_logits *out);
/* The worst normalized error of a's prompts against b's (NULL: the reference's). */
double test_worst_prompt_error(const test_prompt_logits *a, const test_prompt_logits *b, const lm_safetensors *ref,
                               int n_prompts);

#endif
