#include "server/metrics.h"

#include <stdio.h>
#include <string.h>

/* loom's bucket bounds in seconds, shared by its three histograms (finer
 * than vLLM's below 10 ms, where a fast decode step lands). */
static const double loom_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                     0.25,  0.5,   1.0,  2.5,  5.0,  10.0, 30.0, 60.0};
/* vLLM's (vllm/v1/metrics/loggers.py): time to first token, inter-token
 * latency, end-to-end request latency. */
static const double vllm_ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double vllm_itl_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double vllm_e2e_bounds[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define N_BOUNDS(a) ((int)(sizeof(a) / sizeof(a)[0]))
_Static_assert(N_BOUNDS(vllm_ttft_bounds) <= LM_HISTOGRAM_MAX_BOUNDS, "LM_HISTOGRAM_MAX_BOUNDS too small");

static void histogram_init(lm_histogram *h, const double *bounds, int n_bounds) {
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = n_bounds;
}

void lm_metrics_init(lm_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mutex, NULL);
    lm_metrics_counts *c = &m->counts;
    histogram_init(&c->loom.ttft, loom_bounds, N_BOUNDS(loom_bounds));
    histogram_init(&c->loom.itl, loom_bounds, N_BOUNDS(loom_bounds));
    histogram_init(&c->loom.e2e, loom_bounds, N_BOUNDS(loom_bounds));
    histogram_init(&c->vllm.ttft, vllm_ttft_bounds, N_BOUNDS(vllm_ttft_bounds));
    histogram_init(&c->vllm.itl, vllm_itl_bounds, N_BOUNDS(vllm_itl_bounds));
    histogram_init(&c->vllm.e2e, vllm_e2e_bounds, N_BOUNDS(vllm_e2e_bounds));
}

void lm_metrics_destroy(lm_metrics *m) { pthread_mutex_destroy(&m->mutex); }

/* Prometheus buckets are "le": a value equal to a bound counts in it. */
static void histogram_observe(lm_histogram *h, double v) {
    int b = 0;
    while (b < h->n_bounds && v > h->bounds[b]) b++;
    h->counts[b]++;
    h->sum += v;
    h->count++;
}

void lm_metrics_observe_ttft(lm_metrics *m, double s) {
    pthread_mutex_lock(&m->mutex);
    histogram_observe(&m->counts.loom.ttft, s);
    histogram_observe(&m->counts.vllm.ttft, s);
    pthread_mutex_unlock(&m->mutex);
}

void lm_metrics_observe_itl(lm_metrics *m, double s) {
    pthread_mutex_lock(&m->mutex);
    histogram_observe(&m->counts.loom.itl, s);
    histogram_observe(&m->counts.vllm.itl, s);
    pthread_mutex_unlock(&m->mutex);
}

void lm_metrics_observe_request(lm_metrics *m, double s, lm_request_end end) {
    pthread_mutex_lock(&m->mutex);
    histogram_observe(&m->counts.loom.e2e, s);
    histogram_observe(&m->counts.vllm.e2e, s);
    if (end >= 0 && end < LM_REQUEST_ENDS) m->counts.requests_by_end[end]++;
    pthread_mutex_unlock(&m->mutex);
}

/* A bound as Python's repr writes a float: "0.25", "1.0", "2560.0". */
static void python_float(double v, char *out, size_t size) {
    snprintf(out, size, "%g", v);
    if (!strpbrk(out, ".en")) snprintf(out + strlen(out), size - strlen(out), ".0");
}

void lm_histogram_render(lm_sbuf *out, const char *name, const char *help, const lm_histogram *h,
                         const char *labels, bool vllm_bounds) {
    lm_sbuf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (int b = 0; b <= h->n_bounds; b++) {
        cumulative += h->counts[b];
        char le[32] = "+Inf";
        if (b < h->n_bounds) {
            if (vllm_bounds) python_float(h->bounds[b], le, sizeof le);
            else snprintf(le, sizeof le, "%g", h->bounds[b]);
        }
        lm_sbuf_printf(out, "%s_bucket{%s,le=\"%s\"} %llu\n", name, labels, le, (unsigned long long)cumulative);
    }
    lm_sbuf_printf(out, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, labels, h->sum, name, labels,
                   (unsigned long long)h->count);
}

void lm_metrics_label_value(const char *model_name, char *out, size_t size) {
    size_t k = 0;
    for (const char *p = model_name; *p && k < 200 && k + 1 < size; p++)
        if (*p != '"' && *p != '\\' && *p != '\n') out[k++] = *p;
    if (size) out[k] = 0;
}

/* loom's families. */
static void render_loom(const lm_metrics_counts *counts, const loom_stats *s, const char *model_name,
                        lm_sbuf *out) {
    char label[256];
    /* Model names are ours (a flag or a folder name); quotes and backslashes are dropped. */
    lm_metrics_label_value(model_name, label, sizeof label);
    char lbl[320];
    snprintf(lbl, sizeof lbl, "model_name=\"%s\"", label);
    int used = s->kv_blocks_total - s->kv_blocks_free;
    double usage = s->kv_blocks_total > 0 ? (double)used / s->kv_blocks_total : 0.0;
    lm_sbuf_printf(out,
                   "# HELP loom_num_requests_running Requests decoding or prefilling now.\n"
                   "# TYPE loom_num_requests_running gauge\nloom_num_requests_running{%s} %d\n"
                   "# HELP loom_num_requests_waiting Requests queued for the engine.\n"
                   "# TYPE loom_num_requests_waiting gauge\nloom_num_requests_waiting{%s} %d\n"
                   "# HELP loom_kv_cache_usage_perc Fraction of KV-cache blocks in use (1 = full).\n"
                   "# TYPE loom_kv_cache_usage_perc gauge\nloom_kv_cache_usage_perc{%s} %.6f\n"
                   "# HELP loom_kv_cache_blocks_used KV-cache blocks in use.\n"
                   "# TYPE loom_kv_cache_blocks_used gauge\nloom_kv_cache_blocks_used{%s} %d\n"
                   "# HELP loom_kv_cache_blocks_total KV-cache blocks in the pool.\n"
                   "# TYPE loom_kv_cache_blocks_total gauge\nloom_kv_cache_blocks_total{%s} %d\n"
                   "# HELP loom_prompt_tokens_total Prompt tokens processed.\n"
                   "# TYPE loom_prompt_tokens_total counter\nloom_prompt_tokens_total{%s} %llu\n"
                   "# HELP loom_generation_tokens_total Tokens generated.\n"
                   "# TYPE loom_generation_tokens_total counter\nloom_generation_tokens_total{%s} %llu\n"
                   "# HELP loom_num_preemptions_total Sequences preempted for KV space.\n"
                   "# TYPE loom_num_preemptions_total counter\nloom_num_preemptions_total{%s} %llu\n",
                   lbl, s->running, lbl, s->waiting, lbl, usage, lbl, used, lbl, s->kv_blocks_total, lbl,
                   (unsigned long long)s->prompt_tokens, lbl, (unsigned long long)s->generation_tokens, lbl,
                   (unsigned long long)s->preemptions);
    double mean_accepted = s->spec_verify_steps
                               ? 1.0 + (double)s->spec_accepted_tokens / (double)s->spec_verify_steps
                               : 0.0;
    lm_sbuf_printf(out,
                   "# HELP loom_spec_decode_num_draft_tokens_total MTP draft tokens verified.\n"
                   "# TYPE loom_spec_decode_num_draft_tokens_total counter\n"
                   "loom_spec_decode_num_draft_tokens_total{%s} %llu\n"
                   "# HELP loom_spec_decode_num_accepted_tokens_total MTP draft tokens accepted.\n"
                   "# TYPE loom_spec_decode_num_accepted_tokens_total counter\n"
                   "loom_spec_decode_num_accepted_tokens_total{%s} %llu\n"
                   "# HELP loom_spec_decode_mean_accepted_length Tokens emitted per verify step.\n"
                   "# TYPE loom_spec_decode_mean_accepted_length gauge\n"
                   "loom_spec_decode_mean_accepted_length{%s} %.4f\n",
                   lbl, (unsigned long long)s->spec_drafted_tokens, lbl,
                   (unsigned long long)s->spec_accepted_tokens, lbl, mean_accepted);
    lm_sbuf_printf(out,
                   "# HELP loom_grammar_masks_total Token masks computed for constrained decoding.\n"
                   "# TYPE loom_grammar_masks_total counter\nloom_grammar_masks_total{%s} %llu\n"
                   "# HELP loom_grammar_seconds_total Engine-thread time in grammars (masks, advancing, "
                   "checking drafts).\n"
                   "# TYPE loom_grammar_seconds_total counter\nloom_grammar_seconds_total{%s} %.6f\n",
                   lbl, (unsigned long long)s->grammar_masks, lbl, (double)s->grammar_ns * 1e-9);
    lm_sbuf_printf(out,
                   "# HELP loom_images_encoded_total Images run through the vision tower.\n"
                   "# TYPE loom_images_encoded_total counter\nloom_images_encoded_total{%s} %llu\n"
                   "# HELP loom_image_cache_hits_total Images whose vision-tower rows came from the cache.\n"
                   "# TYPE loom_image_cache_hits_total counter\nloom_image_cache_hits_total{%s} %llu\n"
                   "# HELP loom_image_cache_bytes Bytes of vision-tower rows held by the image cache.\n"
                   "# TYPE loom_image_cache_bytes gauge\nloom_image_cache_bytes{%s} %llu\n",
                   lbl, (unsigned long long)s->images_encoded, lbl, (unsigned long long)s->image_cache_hits, lbl,
                   (unsigned long long)s->image_cache_bytes);
    lm_sbuf_printf(out,
                   "# HELP loom_prefix_cache_queries_total Prompt tokens looked up in the prefix cache.\n"
                   "# TYPE loom_prefix_cache_queries_total counter\nloom_prefix_cache_queries_total{%s} %llu\n"
                   "# HELP loom_prefix_cache_hits_total Prompt tokens found in the prefix cache.\n"
                   "# TYPE loom_prefix_cache_hits_total counter\nloom_prefix_cache_hits_total{%s} %llu\n"
                   "# HELP loom_kv_cache_blocks_cached Free KV-cache blocks still holding cached prefixes.\n"
                   "# TYPE loom_kv_cache_blocks_cached gauge\nloom_kv_cache_blocks_cached{%s} %d\n"
                   "# HELP loom_prefix_snapshots_used Recurrent-state snapshots held by the prefix cache.\n"
                   "# TYPE loom_prefix_snapshots_used gauge\nloom_prefix_snapshots_used{%s} %d\n"
                   "# HELP loom_prefix_snapshots_total Recurrent-state snapshots the pool holds at most.\n"
                   "# TYPE loom_prefix_snapshots_total gauge\nloom_prefix_snapshots_total{%s} %d\n"
                   "# HELP loom_prefix_snapshot_bytes_used Bytes of recurrent-state snapshots held.\n"
                   "# TYPE loom_prefix_snapshot_bytes_used gauge\nloom_prefix_snapshot_bytes_used{%s} %llu\n"
                   "# HELP loom_prefix_snapshot_bytes_total Bytes of the recurrent-state snapshot pool.\n"
                   "# TYPE loom_prefix_snapshot_bytes_total gauge\nloom_prefix_snapshot_bytes_total{%s} %llu\n",
                   lbl, (unsigned long long)s->prefix_cache_queries, lbl, (unsigned long long)s->prefix_cache_hits,
                   lbl, s->kv_blocks_cached, lbl, s->snapshots_used, lbl, s->snapshots_total, lbl,
                   (unsigned long long)s->snapshot_bytes_used, lbl, (unsigned long long)s->snapshot_bytes_total);
    uint64_t finished = counts->requests_by_end[LM_REQUEST_STOP] + counts->requests_by_end[LM_REQUEST_LENGTH];
    lm_sbuf_printf(out,
                   "# HELP loom_request_success_total Requests by how they ended.\n"
                   "# TYPE loom_request_success_total counter\n"
                   "loom_request_success_total{%s,finished_reason=\"finished\"} %llu\n"
                   "loom_request_success_total{%s,finished_reason=\"error\"} %llu\n"
                   "loom_request_success_total{%s,finished_reason=\"abort\"} %llu\n",
                   lbl, (unsigned long long)finished, lbl,
                   (unsigned long long)counts->requests_by_end[LM_REQUEST_ERROR], lbl,
                   (unsigned long long)counts->requests_by_end[LM_REQUEST_ABORT]);
    lm_histogram_render(out, "loom_time_to_first_token_seconds", "Time to the first generated token.",
                        &counts->loom.ttft, lbl, false);
    lm_histogram_render(out, "loom_inter_token_latency_seconds", "Time between consecutive tokens of a request.",
                        &counts->loom.itl, lbl, false);
    lm_histogram_render(out, "loom_e2e_request_latency_seconds", "Time from arrival to the last event.",
                        &counts->loom.e2e, lbl, false);
}

void lm_metrics_render(lm_metrics *m, const loom_stats *stats, const lm_metrics_cache_config *cache,
                       const char *model_name, lm_sbuf *out) {
    pthread_mutex_lock(&m->mutex);
    lm_metrics_counts counts = m->counts;
    pthread_mutex_unlock(&m->mutex);
    render_loom(&counts, stats, model_name, out);
    lm_metrics_render_vllm(&counts, stats, cache, model_name, out);
}
