/* /metrics under vLLM's names (vLLM v1's PrometheusStatLogger): what the
 * Gateway API Inference Extension's endpoint picker, llm-d, AIBrix and the
 * production-stack router scrape to pick a replica, and what autoscalers
 * and dashboards built for vLLM query.  Names, types, the model_name and
 * engine labels and the histograms' buckets are vLLM's; the values are
 * loom's own counts (loom_stats and the server's observations). */
#include <stdio.h>
#include <string.h>

#include "server/metrics.h"

static void family(lm_sbuf *out, const char *name, const char *type, const char *help) {
    lm_sbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge_int(lm_sbuf *out, const char *name, const char *help, const char *labels, long long v) {
    family(out, name, "gauge", help);
    lm_sbuf_printf(out, "%s{%s} %lld\n", name, labels, v);
}

static void gauge_fraction(lm_sbuf *out, const char *name, const char *help, const char *labels, double v) {
    family(out, name, "gauge", help);
    lm_sbuf_printf(out, "%s{%s} %.6f\n", name, labels, v);
}

static void counter(lm_sbuf *out, const char *name, const char *help, const char *labels, uint64_t v) {
    family(out, name, "counter", help);
    lm_sbuf_printf(out, "%s{%s} %llu\n", name, labels, (unsigned long long)v);
}

/* vLLM's finished_reason label values (vllm/v1/engine FinishReason). */
static const char *const finished_reasons[LM_REQUEST_ENDS] = {
    [LM_REQUEST_STOP] = "stop", [LM_REQUEST_LENGTH] = "length", [LM_REQUEST_ABORT] = "abort",
    [LM_REQUEST_ERROR] = "error"};

static void render_scheduler(const loom_stats *s, const char *lbl, lm_sbuf *out) {
    int used = s->kv_blocks_total - s->kv_blocks_free;
    double usage = s->kv_blocks_total > 0 ? (double)used / s->kv_blocks_total : 0.0;
    gauge_int(out, "vllm:num_requests_running", "Requests in the engine's running batch (prefilling or decoding).",
              lbl, s->running);
    gauge_int(out, "vllm:num_requests_waiting", "Requests queued for the engine, not yet running.", lbl,
              s->waiting);
    gauge_fraction(out, "vllm:kv_cache_usage_perc", "KV-cache usage: the fraction of KV blocks in use (1 = full).",
                   lbl, usage);
    /* vLLM renamed it to kv_cache_usage_perc and later dropped it; older
     * endpoint pickers and routers still read this name. */
    gauge_fraction(out, "vllm:gpu_cache_usage_perc",
                   "KV-cache usage (1 = full), whatever the device. DEPRECATED: use vllm:kv_cache_usage_perc.",
                   lbl, usage);
}

/* vLLM's info-style gauge (always 1) whose labels describe the KV cache;
 * the inference extension's prefix-cache scorer reads block_size and
 * num_gpu_blocks from it.  Like vLLM's, it has no model_name label. */
static void render_cache_config(const loom_stats *s, const lm_metrics_cache_config *cache, lm_sbuf *out) {
    if (!cache) return;
    family(out, "vllm:cache_config_info", "gauge", "The KV cache's configuration, in the labels.");
    lm_sbuf_printf(out,
                   "vllm:cache_config_info{block_size=\"%d\",cache_dtype=\"%s\",enable_prefix_caching=\"%s\","
                   "engine=\"0\",num_gpu_blocks=\"%d\"} 1\n",
                   cache->block_size, cache->cache_dtype, cache->prefix_caching ? "True" : "False",
                   s->kv_blocks_total);
}

static void render_counters(const lm_metrics_counts *c, const loom_stats *s, const char *lbl, lm_sbuf *out) {
    counter(out, "vllm:prompt_tokens_total", "Prompt (prefill) tokens processed.", lbl, s->prompt_tokens);
    counter(out, "vllm:generation_tokens_total", "Tokens generated.", lbl, s->generation_tokens);
    counter(out, "vllm:num_preemptions_total", "Sequences preempted for KV space.", lbl, s->preemptions);
    family(out, "vllm:request_success_total", "counter", "Requests finished, by finished_reason.");
    for (int e = 0; e < LM_REQUEST_ENDS; e++)
        lm_sbuf_printf(out, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n", lbl, finished_reasons[e],
                       (unsigned long long)c->requests_by_end[e]);
    counter(out, "vllm:prefix_cache_queries_total", "Prefix cache queries, in prompt tokens looked up.", lbl,
            s->prefix_cache_queries);
    counter(out, "vllm:prefix_cache_hits_total", "Prefix cache hits, in prompt tokens found cached.", lbl,
            s->prefix_cache_hits);
    /* vLLM's older names for the two above (production-stack's router reads them). */
    counter(out, "vllm:gpu_prefix_cache_queries_total",
            "Prefix cache queries, in tokens. DEPRECATED: use vllm:prefix_cache_queries_total.", lbl,
            s->prefix_cache_queries);
    counter(out, "vllm:gpu_prefix_cache_hits_total",
            "Prefix cache hits, in tokens. DEPRECATED: use vllm:prefix_cache_hits_total.", lbl, s->prefix_cache_hits);
    /* As vLLM, only with speculative decoding on (loom: the MTP head). */
    if (s->speculative_tokens > 0) {
        counter(out, "vllm:spec_decode_num_drafts_total", "Draft runs verified (one per sequence and step).", lbl,
                s->spec_verify_steps);
        counter(out, "vllm:spec_decode_num_draft_tokens_total", "Draft tokens verified.", lbl,
                s->spec_drafted_tokens);
        counter(out, "vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", lbl,
                s->spec_accepted_tokens);
    }
}

void lm_metrics_render_vllm(const lm_metrics_counts *counts, const loom_stats *stats,
                            const lm_metrics_cache_config *cache, const char *model_name, lm_sbuf *out) {
    char value[256];
    lm_metrics_label_value(model_name, value, sizeof value);
    char lbl[320];
    snprintf(lbl, sizeof lbl, "model_name=\"%s\",engine=\"0\"", value);
    render_scheduler(stats, lbl, out);
    render_cache_config(stats, cache, out);
    render_counters(counts, stats, lbl, out);
    lm_histogram_render(out, "vllm:time_to_first_token_seconds", "Time from arrival to the first generated token.",
                        &counts->vllm.ttft, lbl, true);
    lm_histogram_render(out, "vllm:inter_token_latency_seconds",
                        "Time between consecutive tokens of a request's choice.", &counts->vllm.itl, lbl, true);
    lm_histogram_render(out, "vllm:e2e_request_latency_seconds", "Time from arrival to the request's end.",
                        &counts->vllm.e2e, lbl, true);
}
