#include "engine_util.h"

#include "engine/engine_internal.h"
#include "model_util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void collect_all(loom_request *r, collected *choices, int n_choices) {
    memset(choices, 0, sizeof *choices * (size_t)n_choices);
    loom_event ev;
    while (loom_next_event(r, &ev, -1) == 1) {
        if (ev.choice < 0 || ev.choice >= n_choices) continue;
        collected *c = &choices[ev.choice];
        if (ev.text && c->text_len + ev.text_len < sizeof c->text) {
            memcpy(c->text + c->text_len, ev.text, ev.text_len);
            c->text_len += ev.text_len;
        }
        if (ev.type == LOOM_EVENT_TOKEN && c->n_tokens < MAX_COLLECT) {
            c->logprobs[c->n_tokens] = ev.logprob;
            for (int k = 0; k < ev.n_top && k < 5; k++) c->top[c->n_tokens][k] = ev.top[k];
            c->tokens[c->n_tokens++] = ev.token;
        } else if (ev.type == LOOM_EVENT_FINISH) {
            c->reason = ev.finish_reason;
            c->stop_string = ev.stop_string;
            c->stop_token = ev.stop_token;
            c->completion_tokens = ev.completion_tokens;
            c->cached_tokens = ev.cached_tokens;
        } else if (ev.type == LOOM_EVENT_ERROR) {
            c->error = true;
            c->reason = ev.finish_reason;
            snprintf(c->error_message, sizeof c->error_message, "%s", ev.error ? ev.error : "?");
        }
    }
}

loom_stats wait_idle(loom_engine *engine) {
    loom_stats stats;
    for (int i = 0; i < 1000; i++) {
        loom_engine_stats(engine, &stats);
        if (stats.running == 0 && stats.waiting == 0 && stats.kv_blocks_free == stats.kv_blocks_total)
            break;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return stats;
}

loom_engine *test_engine_open(const char *model_dir, int max_batch_tokens, int64_t kv_tokens,
                              int max_model_len, int max_running, int speculative_tokens) {
    return test_engine_open_cached(model_dir, max_batch_tokens, kv_tokens, max_model_len, max_running,
                                   speculative_tokens, 0, 0);
}

static loom_engine *open_engine(const char *model_dir, int max_batch_tokens, int64_t kv_tokens, int max_model_len,
                                int max_running, int speculative_tokens, int prefix_caching, int64_t snapshot_bytes,
                                int draft_vocab) {
    loom_engine_options o;
    loom_engine_options_default(&o);
    o.model_dir = model_dir;
    o.threads = 2;
    o.backend = test_backend_name();
    if (strcmp(test_quantize_name(), "int8") == 0) o.quantize = "int8";
    o.max_batch_tokens = max_batch_tokens;
    o.kv_block_size = 16;
    o.kv_cache_tokens = kv_tokens;
    o.max_model_len = max_model_len;
    o.max_running = max_running;
    o.speculative_tokens = speculative_tokens;
    o.draft_vocab = draft_vocab;
    o.enable_prefix_caching = prefix_caching;
    o.prefix_snapshot_bytes = snapshot_bytes;
    o.tensor_parallel_size = test_tensor_parallel_size();
    o.expert_parallel = test_expert_parallel();
    loom_engine *e = NULL;
    char error[256];
    if (loom_engine_create(&o, &e, error, sizeof error) != LOOM_OK) {
        fprintf(stderr, "engine: %s\n", error);
        return NULL;
    }
    /* Adaptive speculation chooses the drafts from measured step times;
     * tests see made-up costs instead, where drafting pays (a step's time
     * is its fixed overhead), so what they draft does not depend on the
     * machine. */
    if (speculative_tokens > 0) test_engine_simulate_costs(e, 1e-3, 1e-7, 1e-7, 1e-8);
    return e;
}

bool test_engine_preemption_keeps_outputs(const char *model_dir, const int32_t *ids, int n, char *why,
                                   size_t why_size) {
    enum { N = 3, PROMPT = 24, GEN = 40 };
    if (n < PROMPT + 2 * (N - 1)) {
        snprintf(why, why_size, "no prompt of %d tokens", PROMPT + 2 * (N - 1));
        return false;
    }
    static collected alone[N], batched[N]; /* large */
    memset(alone, 0, sizeof alone);
    memset(batched, 0, sizeof batched);
    char error[256];
    for (int pass = 0; pass < 2; pass++) {
        /* alone: a roomy pool, one at a time; then 6 blocks of 16 for all three
         * (one sequence of the 96-token limit fits, three of 64 do not) */
        loom_engine *e = test_engine_open(model_dir, 64, pass ? 96 : 1024, 96, pass ? N : 1, 0);
        if (!e) {
            snprintf(why, why_size, "the engine did not open");
            return false;
        }
        loom_request *reqs[N] = {0};
        bool submitted = true;
        /* together: all three start in the same step, however the threads run */
        if (pass) lm_engine_hold(e, true);
        for (int i = 0; i < N && submitted; i++) {
            loom_request_params p;
            loom_request_params_default(&p);
            p.prompt = ids + 2 * i;
            p.n_prompt = PROMPT;
            p.max_tokens = GEN;
            p.ignore_eos = true;
            p.sampling.temperature = 0;
            submitted = loom_submit(e, &p, &reqs[i], error, sizeof error) == LOOM_OK;
            if (submitted && !pass) collect_all(reqs[i], &alone[i], 1);
        }
        if (pass) lm_engine_hold(e, false);
        for (int i = 0; pass && submitted && i < N; i++) collect_all(reqs[i], &batched[i], 1);
        for (int i = 0; i < N; i++) loom_request_free(reqs[i]);
        loom_stats stats = wait_idle(e);
        loom_engine_destroy(e);
        if (!submitted) {
            snprintf(why, why_size, "submit: %s", error);
            return false;
        }
        if (pass && stats.preemptions == 0) {
            snprintf(why, why_size, "the small pool caused no preemption");
            return false;
        }
        if (stats.kv_blocks_free != stats.kv_blocks_total) {
            snprintf(why, why_size, "blocks leaked: %d of %d free", stats.kv_blocks_free,
                     stats.kv_blocks_total);
            return false;
        }
    }
    for (int i = 0; i < N; i++) {
        if (alone[i].error || batched[i].error || alone[i].n_tokens != GEN || batched[i].n_tokens != GEN) {
            snprintf(why, why_size, "request %d: %d and %d tokens %s%s", i, alone[i].n_tokens,
                     batched[i].n_tokens, alone[i].error_message, batched[i].error_message);
            return false;
        }
        if (memcmp(batched[i].tokens, alone[i].tokens, sizeof(int32_t) * GEN) != 0) {
            snprintf(why, why_size, "request %d changed under preemption", i);
            return false;
        }
    }
    return true;
}

loom_engine *test_engine_open_cached(const char *model_dir, int max_batch_tokens, int64_t kv_tokens,
                                     int max_model_len, int max_running, int speculative_tokens,
                                     int prefix_caching, int64_t snapshot_bytes) {
    return open_engine(model_dir, max_batch_tokens, kv_tokens, max_model_len, max_running, speculative_tokens,
                       prefix_caching, snapshot_bytes, test_draft_vocab());
}

loom_engine *test_engine_open_draft_vocab(const char *model_dir, int max_batch_tokens, int max_model_len,
                                          int max_running, int speculative_tokens, int draft_vocab) {
    return open_engine(model_dir, max_batch_tokens, 0, max_model_len, max_running, speculative_tokens, 0, 0,
                       draft_vocab);
}

void test_engine_simulate_costs(loom_engine *e, double fixed, double per_row, double head_round, double head_row) {
    lm_spec_sim_clock costs = {.fixed = fixed, .per_row = per_row, .head_round = head_round, .head_row = head_row};
    lm_engine_simulate_costs(e, &costs);
}
