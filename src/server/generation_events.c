/* A submitted generation request's events: read as the engine pushes
 * them (the connection suspended in between, wakeup.h), streamed through
 * the API's writers or answered whole once every choice finished; a gone
 * client or a shutdown cancels it; it is counted in /metrics and logged
 * once, however it ends. */
#include <string.h>

#include "server/generation.h"
#include "server/request_log.h"

#define EVENT_POLL_MS 50
#define MULTI_POLL_MS 2 /* a list of prompts: the wait on one request while the others may have events */

/* How the request ended: 0 finished, 1 an error, 2 aborted (a choice cancelled). */
static int outcome_of(const gen_ctx *g) {
    int outcome = 0;
    for (int i = 0; i < g->n; i++) {
        if (g->choices[i].reason == LOOM_FINISH_CANCELLED) outcome = 2;
        if (g->choices[i].has_error && outcome == 0) outcome = 1;
    }
    return outcome;
}

/* The next event of any prompt's request: 1 (*prompt says whose), 0 when
 * none came within the poll interval, -1 when all were read. */
static int next_event(gen_ctx *g, loom_event *ev, int *prompt, int wait_ms) {
    if (g->n_prompts == 1) {
        *prompt = 0;
        if (g->prompts[0].done) return -1;
        int got = loom_next_event(g->prompts[0].handle, ev, wait_ms);
        if (got < 0) g->prompts[0].done = true;
        return got;
    }
    /* Several: a look at each (round robin), then a short wait on one. */
    int first_open = -1;
    for (int k = 0; k < g->n_prompts; k++) {
        int p = (g->next_poll + k) % g->n_prompts;
        if (g->prompts[p].done) continue;
        int got = loom_next_event(g->prompts[p].handle, ev, 0);
        if (got > 0) {
            *prompt = p;
            g->next_poll = p + 1;
            return 1;
        }
        if (got < 0) g->prompts[p].done = true;
        else if (first_open < 0) first_open = p;
    }
    if (first_open < 0) return -1;
    int got = loom_next_event(g->prompts[first_open].handle, ev,
                              wait_ms < MULTI_POLL_MS ? wait_ms : MULTI_POLL_MS);
    if (got < 0) g->prompts[first_open].done = true;
    *prompt = first_open;
    return got > 0 ? 1 : 0;
}

static void cancel_all(gen_ctx *g) {
    for (int p = 0; p < g->n_prompts; p++) loom_cancel(g->prompts[p].handle);
}

/* The request's log line (finish: the first choice's reason, or what
 * went wrong). */
void lm_generation_log(const gen_ctx *g, unsigned status, const char *finish) {
    const lm_server_options *o = &g->server->options;
    if (!o->log_requests) return;
    lm_request_record rec = {.id = g->id[0] ? g->id : "-",
                             .route = g->api->route,
                             .status = status,
                             .seconds = lm_monotonic_seconds() - g->arrival,
                             .ttft = g->got_first_token ? g->first_token_time - g->arrival : -1,
                             .finish = finish,
                             .cancelled_by_client = g->client_gone};
    for (int p = 0; p < g->n_prompts && g->prompts; p++) {
        rec.prompt_tokens += g->prompts[p].prompt_tokens;
        rec.cached_tokens += g->prompts[p].cached_tokens;
    }
    for (int i = 0; i < g->n && g->choices; i++) rec.output_tokens += g->choices[i].completion_tokens;
    lm_request_log(o->log, &rec);
}

/* How the request ended, as /metrics counts it (vLLM's finished_reason:
 * the first choice's, as the log line says). */
static lm_request_end request_end(const gen_ctx *g, int outcome) {
    if (outcome == 2) return LM_REQUEST_ABORT;
    if (outcome == 1) return LM_REQUEST_ERROR;
    return g->n > 0 && g->choices[0].reason == LOOM_FINISH_LENGTH ? LM_REQUEST_LENGTH : LM_REQUEST_STOP;
}

/* Counts the request in /metrics once, however it ends, and logs it.
 * outcome: 0 finished, 1 error, 2 aborted (cancelled or client gone). */
static void observe_end(gen_ctx *g, int outcome) {
    if (g->observed) return;
    g->observed = true;
    lm_metrics_observe_request(&g->server->metrics, lm_monotonic_seconds() - g->arrival, request_end(g, outcome));
    bool blocking = !g->req.stream;
    lm_generation_log(g, outcome == 2 && atomic_load(&g->server->cancel_all) && blocking ? 503
                   : outcome == 1 && blocking                                     ? 500
                                                                                  : 200,
                outcome == 2 ? "abort" : outcome == 1 ? "error" : g->n > 0 ? lm_finish_reason_name(&g->choices[0]) : "stop");
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_ctx *g = cls;
    (void)pos;
    while (g->out_pos >= g->out.len) {
        lm_sbuf_clear(&g->out);
        g->out_pos = 0;
        if (g->final_sent) return MHD_CONTENT_READER_END_OF_STREAM;
        if (g->out.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
        loom_event ev;
        if (atomic_load(&g->server->cancel_all)) cancel_all(g);
        int prompt;
        int got = next_event(g, &ev, &prompt, 0);
        if (got == 0) {
            if (lm_client_gone(g->connection)) {
                g->client_gone = true;
                cancel_all(g); /* blocks are freed at the engine's next step */
                observe_end(g, 2);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            /* Nothing yet: free the I/O thread until the engine resumes us
             * (or, told meanwhile, look again; at the very end, poll). */
            if (!lm_server_may_suspend(g->server) || lm_wakeup_suspend(&g->wakeup)) return 0;
            continue;
        }
        if (got < 0) {
            observe_end(g, outcome_of(g));
            g->api->stream_end(g);
            continue;
        }
        cJSON *logprob = NULL;
        int i = lm_generation_apply_event(g, prompt, &ev, &logprob);
        if (i >= 0) g->api->stream_update(g, i, logprob);
        else cJSON_Delete(logprob);
    }
    size_t n = g->out.len - g->out_pos;
    if (n > max) n = max;
    memcpy(buf, g->out.data + g->out_pos, n);
    g->out_pos += n;
    return (ssize_t)n;
}

/* MHD is done with the stream: normally after its end, but also when the
 * client went away while a chunk was being sent (then no reader call saw it):
 * such a stream counts as aborted, one that could not be written as an error. */
static void stream_free(void *cls) {
    gen_ctx *g = cls;
    if (g->submitted && !g->observed && !g->out.failed && !atomic_load(&g->server->cancel_all)) g->client_gone = true;
    if (g->submitted) observe_end(g, g->out.failed ? 1 : 2);
    lm_generation_free(g);
}

/* 5. A stream's response goes out now, its events as the engine has them
 * (stream_reader); a blocking request waits, suspended, for its end. */
enum MHD_Result lm_generation_start_answer(gen_ctx *g, struct MHD_Connection *c, lm_generation **pending) {
    if (g->req.stream) {
        g->api->stream_start(g);
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, g, stream_free);
        if (!resp) return lm_generation_fail(g, c, 500, "cannot create the streaming response", NULL);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        return lm_queue_response(c, 200, resp); /* frees g through stream_free when the connection is done */
    }
    g->next_look = lm_monotonic_seconds() + EVENT_POLL_MS * 1e-3;
    *pending = g; /* answered by lm_generation_resume once it finished */
    return MHD_YES;
}

/* The blocking request's answer, once every event was read. */
static enum MHD_Result answer(gen_ctx *g, struct MHD_Connection *c) {
    lm_server *s = g->server;
    observe_end(g, outcome_of(g));
    enum MHD_Result ret;
    if (atomic_load(&s->cancel_all) && outcome_of(g) == 2) {
        ret = lm_reply_error_as(c, g->wire, 503, "the server is shutting down: the request was cancelled", NULL);
    } else if (g->error_message[0]) {
        ret = lm_reply_error_as(c, g->wire, 500, g->error_message, NULL);
    } else {
        cJSON *resp = g->api->whole(g);
        ret = lm_reply_json(c, 200, resp);
        cJSON_Delete(resp);
    }
    lm_generation_free(g);
    return ret;
}

enum MHD_Result lm_generation_resume(lm_generation **pending, struct MHD_Connection *c) {
    gen_ctx *g = *pending;
    lm_server *s = g->server;
    for (;;) {
        /* At the very end (no suspending) a short wait here instead. */
        bool may_suspend = lm_server_may_suspend(s);
        loom_event ev;
        int prompt;
        int got = next_event(g, &ev, &prompt, may_suspend ? 0 : 10);
        if (got < 0) break;
        if (atomic_load(&s->cancel_all)) cancel_all(g);
        /* The client's socket is looked at every EVENT_POLL_MS, events or
         * not: a steady stream of tokens must not hide that it went away
         * (while suspended, the server's sweep looks). */
        if (!g->client_gone && (got == 0 || lm_monotonic_seconds() >= g->next_look)) {
            g->next_look = lm_monotonic_seconds() + EVENT_POLL_MS * 1e-3;
            if (lm_client_gone(c)) {
                g->client_gone = true;
                cancel_all(g);
            }
        }
        if (got > 0) lm_generation_apply_event(g, prompt, &ev, NULL);
        else if (may_suspend && lm_wakeup_suspend(&g->wakeup)) return MHD_YES;
    }
    *pending = NULL;
    return answer(g, c);
}

void lm_generation_abandon(lm_generation *g) {
    if (!g) return;
    if (g->submitted) observe_end(g, 2);
    lm_generation_free(g);
}
