#include "server/throughput_log.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "base/clock.h"

struct lm_throughput_log {
    const lm_log *log;
    loom_engine *engine;
    double interval_s;
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    bool stop;
};

static bool busy(const loom_stats *now, const loom_stats *before) {
    return now->running > 0 || now->waiting > 0 || now->prompt_tokens != before->prompt_tokens ||
           now->generation_tokens != before->generation_tokens;
}

static void write_line(const lm_throughput_log *t, const loom_stats *now, const loom_stats *before, double seconds) {
    double prompt_rate = (double)(now->prompt_tokens - before->prompt_tokens) / seconds;
    double gen_rate = (double)(now->generation_tokens - before->generation_tokens) / seconds;
    int used = now->kv_blocks_total - now->kv_blocks_free;
    double kv = now->kv_blocks_total > 0 ? 100.0 * used / now->kv_blocks_total : 0;
    uint64_t drafted = now->spec_drafted_tokens - before->spec_drafted_tokens;
    uint64_t accepted = now->spec_accepted_tokens - before->spec_accepted_tokens;
    if (drafted > 0)
        lm_log_printf(t->log, LM_LOG_INFO,
                      "throughput: prompt %.1f tokens/s, generation %.1f tokens/s, running %d, waiting %d, KV cache "
                      "%.1f%% used, drafts accepted %.1f%%",
                      prompt_rate, gen_rate, now->running, now->waiting, kv, 100.0 * (double)accepted / (double)drafted);
    else
        lm_log_printf(t->log, LM_LOG_INFO,
                      "throughput: prompt %.1f tokens/s, generation %.1f tokens/s, running %d, waiting %d, KV cache "
                      "%.1f%% used",
                      prompt_rate, gen_rate, now->running, now->waiting, kv);
}

static void *throughput_main(void *arg) {
    lm_throughput_log *t = arg;
    loom_stats before;
    loom_engine_stats(t->engine, &before);
    double last = lm_monotonic_seconds();
    bool was_busy = false;
    pthread_mutex_lock(&t->mutex);
    while (!t->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double whole = floor(t->interval_s);
        until.tv_sec += (time_t)whole;
        until.tv_nsec += (long)((t->interval_s - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        int rc = 0;
        while (!t->stop && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->wake, &t->mutex, &until);
        if (t->stop) break;
        pthread_mutex_unlock(&t->mutex);
        loom_stats now;
        loom_engine_stats(t->engine, &now);
        double at = lm_monotonic_seconds();
        bool is_busy = busy(&now, &before);
        if ((is_busy || was_busy) && at > last) write_line(t, &now, &before, at - last);
        was_busy = is_busy;
        before = now;
        last = at;
        pthread_mutex_lock(&t->mutex);
    }
    pthread_mutex_unlock(&t->mutex);
    return NULL;
}

lm_status lm_throughput_log_start(const lm_log *log, loom_engine *engine, double interval_s,
                                  lm_throughput_log **out, lm_error *err) {
    if (!(interval_s > 0 && interval_s <= 86400))
        return lm_fail(err, LM_ERR_INVALID, "the throughput log interval must be in (0, 86400] seconds");
    lm_throughput_log *t = calloc(1, sizeof *t);
    if (!t) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    t->log = log;
    t->engine = engine;
    t->interval_s = interval_s;
    pthread_mutex_init(&t->mutex, NULL);
    pthread_cond_init(&t->wake, NULL);
    if (pthread_create(&t->thread, NULL, throughput_main, t) != 0) {
        pthread_mutex_destroy(&t->mutex);
        pthread_cond_destroy(&t->wake);
        free(t);
        return lm_fail(err, LM_ERR_INTERNAL, "cannot start the throughput log's thread");
    }
    *out = t;
    return LM_OK;
}

void lm_throughput_log_stop(lm_throughput_log *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mutex);
    t->stop = true;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->mutex);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->mutex);
    pthread_cond_destroy(&t->wake);
    free(t);
}
