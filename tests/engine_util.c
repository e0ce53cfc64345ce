#include "engine_util.h"

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
