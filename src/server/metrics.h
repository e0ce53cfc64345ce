/* Server metrics in the Prometheus text format: engine gauges (requests
 * running and waiting, KV cache use), token counters and latency histograms
 * (time to first token, inter-token latency, end-to-end latency). */
#ifndef LOOM_SERVER_METRICS_H
#define LOOM_SERVER_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "loom.h"
#include "server/sbuf.h"

#define LM_HISTOGRAM_BUCKETS 16

typedef struct {
    uint64_t counts[LM_HISTOGRAM_BUCKETS + 1]; /* the last is +Inf */
    double sum;
    uint64_t count;
} lm_histogram;

typedef struct {
    pthread_mutex_t mutex;
    lm_histogram ttft, itl, e2e;
    uint64_t requests_ok, requests_error, requests_aborted;
} lm_metrics;

void lm_metrics_init(lm_metrics *m);
void lm_metrics_destroy(lm_metrics *m);
void lm_metrics_observe_ttft(lm_metrics *m, double seconds);
void lm_metrics_observe_itl(lm_metrics *m, double seconds);
/* outcome: 0 finished, 1 error, 2 aborted (cancelled or client gone). */
void lm_metrics_observe_request(lm_metrics *m, double seconds, int outcome);
void lm_metrics_render(lm_metrics *m, const loom_stats *stats, const char *model_name, lm_sbuf *out);

#endif
