/* server/metrics: the Prometheus text both namings write from given counts
 * (tests/server_metrics.py checks the live server): bucket edges (a value
 * equal to a bound counts in it), vLLM's le spelling, finished_reason
 * counts, the model name made a safe label value, the gauges from
 * loom_stats. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "server/metrics.h"

static bool has_line(const lm_sbuf *out, const char *line) {
    const char *text = lm_sbuf_str(out);
    size_t n = strlen(line);
    for (const char *p = strstr(text, line); p; p = strstr(p + 1, line))
        if ((p == text || p[-1] == '\n') && p[n] == '\n') return true;
    return false;
}

#define CHECK_LINE(out, line) CHECK_MSG(has_line(out, line), "missing line: %s", line)

static size_t count_of(const lm_sbuf *out, const char *needle) {
    size_t n = 0;
    for (const char *p = strstr(lm_sbuf_str(out), needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static loom_stats busy_stats(void) {
    return (loom_stats){.running = 3, .waiting = 2, .kv_blocks_total = 8, .kv_blocks_free = 6,
                        .prompt_tokens = 40, .generation_tokens = 12, .preemptions = 1,
                        .prefix_cache_queries = 40, .prefix_cache_hits = 16};
}

static void test_vllm_histogram_edges(void) {
    lm_metrics m;
    lm_metrics_init(&m);
    lm_metrics_observe_ttft(&m, 0.25);   /* on a bound: in le="0.25" */
    lm_metrics_observe_ttft(&m, 0.0005); /* below the first */
    lm_metrics_observe_ttft(&m, 5000);   /* past the last: +Inf only */
    loom_stats s = busy_stats();
    lm_sbuf out = {0};
    lm_metrics_render(&m, &s, NULL, "m", &out);
    CHECK(!out.failed);
    CHECK_LINE(&out, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"0.001\"} 1");
    CHECK_LINE(&out, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"0.1\"} 1");
    CHECK_LINE(&out, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"0.25\"} 2");
    CHECK_LINE(&out, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"1.0\"} 2");
    CHECK_LINE(&out, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"2560.0\"} 2");
    CHECK_LINE(&out, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"+Inf\"} 3");
    CHECK_LINE(&out, "vllm:time_to_first_token_seconds_count{model_name=\"m\",engine=\"0\"} 3");
    CHECK_LINE(&out, "vllm:time_to_first_token_seconds_sum{model_name=\"m\",engine=\"0\"} 5000.250500");
    /* loom's own histogram keeps its bounds and spelling */
    CHECK_LINE(&out, "loom_time_to_first_token_seconds_bucket{model_name=\"m\",le=\"1\"} 2");
    CHECK_LINE(&out, "loom_time_to_first_token_seconds_bucket{model_name=\"m\",le=\"60\"} 2");
    /* 22 + 1 TTFT buckets, 19 + 1 ITL, 21 + 1 e2e, as vLLM's */
    CHECK(count_of(&out, "vllm:time_to_first_token_seconds_bucket{") == 23);
    CHECK(count_of(&out, "vllm:inter_token_latency_seconds_bucket{") == 20);
    CHECK(count_of(&out, "vllm:e2e_request_latency_seconds_bucket{") == 22);
    lm_sbuf_free(&out);
    lm_metrics_destroy(&m);
}

static void test_finished_reasons(void) {
    lm_metrics m;
    lm_metrics_init(&m);
    lm_metrics_observe_request(&m, 0.4, LM_REQUEST_STOP);
    lm_metrics_observe_request(&m, 0.5, LM_REQUEST_LENGTH);
    lm_metrics_observe_request(&m, 0.6, LM_REQUEST_LENGTH);
    lm_metrics_observe_request(&m, 0.7, LM_REQUEST_ABORT);
    loom_stats s = busy_stats();
    lm_sbuf out = {0};
    lm_metrics_render(&m, &s, NULL, "m", &out);
    CHECK_LINE(&out, "vllm:request_success_total{model_name=\"m\",engine=\"0\",finished_reason=\"stop\"} 1");
    CHECK_LINE(&out, "vllm:request_success_total{model_name=\"m\",engine=\"0\",finished_reason=\"length\"} 2");
    CHECK_LINE(&out, "vllm:request_success_total{model_name=\"m\",engine=\"0\",finished_reason=\"abort\"} 1");
    CHECK_LINE(&out, "vllm:request_success_total{model_name=\"m\",engine=\"0\",finished_reason=\"error\"} 0");
    /* loom's counter folds stop and length into "finished", as before */
    CHECK_LINE(&out, "loom_request_success_total{model_name=\"m\",finished_reason=\"finished\"} 3");
    CHECK_LINE(&out, "vllm:e2e_request_latency_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"0.5\"} 2");
    CHECK_LINE(&out, "vllm:e2e_request_latency_seconds_count{model_name=\"m\",engine=\"0\"} 4");
    lm_sbuf_free(&out);
    lm_metrics_destroy(&m);
}

static void test_gauges_and_families(void) {
    lm_metrics m;
    lm_metrics_init(&m);
    loom_stats s = busy_stats();
    lm_metrics_cache_config cache = {.block_size = 16, .cache_dtype = "bf16", .prefix_caching = true};
    lm_sbuf out = {0};
    lm_metrics_render(&m, &s, &cache, "a\"b\\c\nd", &out);
    /* the quote, backslash and newline are dropped from the label value */
    CHECK_LINE(&out, "vllm:num_requests_running{model_name=\"abcd\",engine=\"0\"} 3");
    CHECK_LINE(&out, "vllm:num_requests_waiting{model_name=\"abcd\",engine=\"0\"} 2");
    CHECK_LINE(&out, "vllm:kv_cache_usage_perc{model_name=\"abcd\",engine=\"0\"} 0.250000");
    CHECK_LINE(&out, "vllm:gpu_cache_usage_perc{model_name=\"abcd\",engine=\"0\"} 0.250000");
    CHECK_LINE(&out, "vllm:prompt_tokens_total{model_name=\"abcd\",engine=\"0\"} 40");
    CHECK_LINE(&out, "vllm:generation_tokens_total{model_name=\"abcd\",engine=\"0\"} 12");
    CHECK_LINE(&out, "vllm:num_preemptions_total{model_name=\"abcd\",engine=\"0\"} 1");
    CHECK_LINE(&out, "vllm:prefix_cache_hits_total{model_name=\"abcd\",engine=\"0\"} 16");
    CHECK_LINE(&out, "vllm:gpu_prefix_cache_queries_total{model_name=\"abcd\",engine=\"0\"} 40");
    CHECK_LINE(&out, "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"bf16\",enable_prefix_caching=\"True\","
                     "engine=\"0\",num_gpu_blocks=\"8\"} 1");
    CHECK_LINE(&out, "# TYPE vllm:num_requests_waiting gauge");
    CHECK_LINE(&out, "# TYPE vllm:request_success_total counter");
    CHECK_LINE(&out, "# TYPE vllm:inter_token_latency_seconds histogram");
    /* each family's HELP and TYPE once */
    size_t families = 0;
    for (const char *p = strstr(lm_sbuf_str(&out), "# TYPE "); p; p = strstr(p + 1, "# TYPE ")) {
        char type_of[128], help_of[128];
        int n = (int)strcspn(p + 7, " ");
        snprintf(type_of, sizeof type_of, "# TYPE %.*s ", n, p + 7);
        snprintf(help_of, sizeof help_of, "# HELP %.*s ", n, p + 7);
        CHECK_MSG(count_of(&out, type_of) == 1 && count_of(&out, help_of) == 1, "%s: not once", type_of);
        families++;
    }
    CHECK(families > 40);
    /* speculation off: no spec_decode families, as vLLM without a draft model */
    CHECK(count_of(&out, "vllm:spec_decode") == 0);
    lm_sbuf_free(&out);

    s.speculative_tokens = 2;
    s.spec_verify_steps = 5;
    s.spec_drafted_tokens = 10;
    s.spec_accepted_tokens = 7;
    lm_metrics_render(&m, &s, &cache, "m", &out);
    CHECK_LINE(&out, "vllm:spec_decode_num_drafts_total{model_name=\"m\",engine=\"0\"} 5");
    CHECK_LINE(&out, "vllm:spec_decode_num_draft_tokens_total{model_name=\"m\",engine=\"0\"} 10");
    CHECK_LINE(&out, "vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\",engine=\"0\"} 7");
    lm_sbuf_free(&out);
    lm_metrics_destroy(&m);
}

int main(void) {
    RUN_TEST(test_vllm_histogram_edges);
    RUN_TEST(test_finished_reasons);
    RUN_TEST(test_gauges_and_families);
    return test_summary("test_metrics");
}
