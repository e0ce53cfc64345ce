/* Server metrics in the Prometheus text format: engine gauges (requests
 * running and waiting, KV cache use), token counters and latency histograms
 * (time to first token, inter-token latency, end-to-end latency).
 *
 * Two sets of names: loom's own (loom_*, every count loom keeps) and vLLM's
 * (vllm:*, metrics_vllm.c) for the gauges and histograms that routers,
 * gateways and autoscalers built for vLLM read.  vLLM's histograms keep
 * vLLM's bucket bounds, so a query summing buckets over vLLM and loom
 * replicas adds like with like. */
#ifndef LOOM_SERVER_METRICS_H
#define LOOM_SERVER_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "loom.h"
#include "server/sbuf.h"

#define LM_HISTOGRAM_MAX_BOUNDS 24

typedef struct {
    const double *bounds; /* upper bounds, ascending; +Inf is implied after them */
    int n_bounds;
    uint64_t counts[LM_HISTOGRAM_MAX_BOUNDS + 1]; /* per bucket, not cumulative; the last is +Inf */
    double sum;
    uint64_t count;
} lm_histogram;

/* How a generation request ended, in vLLM's finished_reason terms. */
typedef enum { LM_REQUEST_STOP, LM_REQUEST_LENGTH, LM_REQUEST_ABORT, LM_REQUEST_ERROR, LM_REQUEST_ENDS } lm_request_end;

/* The latency histograms of one naming (loom's or vLLM's buckets). */
typedef struct {
    lm_histogram ttft, itl, e2e;
} lm_latency_histograms;

/* What the server observes itself (the engine's counts come from loom_stats). */
typedef struct {
    lm_latency_histograms loom, vllm;
    uint64_t requests_by_end[LM_REQUEST_ENDS];
} lm_metrics_counts;

typedef struct {
    pthread_mutex_t mutex;
    lm_metrics_counts counts;
} lm_metrics;

/* The KV cache's shape as vLLM's cache_config_info reports it (fixed at
 * engine create). */
typedef struct {
    int block_size;         /* tokens per KV block */
    char cache_dtype[8];    /* "f32", "bf16" */
    bool prefix_caching;
} lm_metrics_cache_config;

void lm_metrics_init(lm_metrics *m);
void lm_metrics_destroy(lm_metrics *m);
void lm_metrics_observe_ttft(lm_metrics *m, double seconds);
void lm_metrics_observe_itl(lm_metrics *m, double seconds);
void lm_metrics_observe_request(lm_metrics *m, double seconds, lm_request_end end);
/* Both namings, loom's first.  `cache` may be NULL (no cache_config_info). */
void lm_metrics_render(lm_metrics *m, const loom_stats *stats, const lm_metrics_cache_config *cache,
                       const char *model_name, lm_sbuf *out);

/* Shared by the two namings (metrics.c, metrics_vllm.c). */

/* A histogram family: HELP, TYPE, cumulative buckets, sum and count; each
 * sample carries `labels` (without braces) and le.  vllm_bounds writes le
 * as Python does ("1.0", not "1"), as vLLM's exporter writes them. */
void lm_histogram_render(lm_sbuf *out, const char *name, const char *help, const lm_histogram *h,
                         const char *labels, bool vllm_bounds);
/* vLLM's families; `counts` is a copy taken under the lock. */
void lm_metrics_render_vllm(const lm_metrics_counts *counts, const loom_stats *stats,
                            const lm_metrics_cache_config *cache, const char *model_name, lm_sbuf *out);
/* The model name as a label value: quotes, backslashes and newlines
 * dropped, at most 200 bytes. */
void lm_metrics_label_value(const char *model_name, char *out, size_t size);

#endif
