/* Helpers for engine tests: run requests through include/loom.h and collect
 * what comes back. */
#ifndef LOOM_TESTS_ENGINE_UTIL_H
#define LOOM_TESTS_ENGINE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#define MAX_COLLECT 512

typedef struct {
    int32_t tokens[MAX_COLLECT];
    float logprobs[MAX_COLLECT];
    loom_token_logprob top[MAX_COLLECT][5];
    int n_tokens;
    char text[8192];
    size_t text_len;
    loom_finish_reason reason;
    int stop_string;
    int32_t stop_token;
    int completion_tokens;
    int cached_tokens; /* of the prompt, from the prefix cache */
    bool error;
    char error_message[256];
} collected;

/* An engine on a model folder for tests: the backend under test (test_backend_name), 2 threads, 16-token KV blocks,
 * the given budget, pool, context limit, running limit and drafts per step
 * (0 = no speculation).  Prints the error and returns NULL on failure. */
loom_engine *test_engine_open(const char *model_dir, int max_batch_tokens, int64_t kv_tokens,
                              int max_model_len, int max_running, int speculative_tokens);
/* The same with prefix caching chosen (loom_engine_options.enable_prefix_caching:
 * 1 on, -1 off, 0 the default) and its snapshot pool (0: the default). */
loom_engine *test_engine_open_cached(const char *model_dir, int max_batch_tokens, int64_t kv_tokens,
                                     int max_model_len, int max_running, int speculative_tokens,
                                     int prefix_caching, int64_t snapshot_bytes);
/* test_engine_open with the draft head's vocabulary chosen
 * (loom_engine_options.draft_vocab; else LOOM_TEST_DRAFT_VOCAB's). */
loom_engine *test_engine_open_draft_vocab(const char *model_dir, int max_batch_tokens, int max_model_len,
                                          int max_running, int speculative_tokens, int draft_vocab);
/* The adaptive speculation's simulated costs (seconds): a step of R rows
 * fixed + per_row * R, an MTP head call head_round * rounds + head_row *
 * rows.  test_engine_open sets costs where drafting pays. */
void test_engine_simulate_costs(loom_engine *e, double fixed, double per_row, double head_round, double head_row);

/* Waits (bounded) until the engine has nothing running or waiting, and
 * returns its stats then. */
loom_stats wait_idle(loom_engine *engine);

/* Reads every event of a request; choices[c] gets choice c. */
void collect_all(loom_request *r, collected *choices, int n_choices);

/* Three greedy requests of 24-token prompts (ids at offsets 0, 2, 4) and 40
 * new tokens, first alone, then together on a 6-block pool that makes the
 * engine preempt: true when every request's tokens are the same (why says
 * what differed otherwise).  ids needs at least 28 tokens. */
bool test_engine_preemption_keeps_outputs(const char *model_dir, const int32_t *ids, int n, char *why,
                                   size_t why_size);

#endif
