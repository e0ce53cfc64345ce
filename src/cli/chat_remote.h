/* `loom chat --url http://HOST:PORT`: the conversation is sent to a running
 * `loom serve` (or any OpenAI-compatible server) as a streaming
 * /v1/chat/completions request; the answer's text deltas come back as they
 * are generated.  A small HTTP/1.1 client: one connection per request,
 * chunked or close-delimited bodies, Server-Sent Events. */
#ifndef LOOM_CLI_CHAT_REMOTE_H
#define LOOM_CLI_CHAT_REMOTE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "loom.h"

typedef struct {
    char host[256];
    char port[8];
    char path_prefix[256]; /* "" or "/proxy" (the URL's path, without a trailing /v1) */
    const char *api_key;   /* NULL: none */
    char model[256];       /* the served model's id (from /v1/models) */
} lm_chat_remote;

/* Parses url and asks the server for its model (GET /v1/models). */
lm_status lm_chat_remote_open(const char *url, const char *api_key, lm_chat_remote *out, lm_error *err);

typedef struct {
    char finish_reason[32]; /* "stop", "length", ... ("" if none came) */
    int completion_tokens;
    bool stopped;           /* cut short by a SIGINT on signal_fd */
} lm_chat_remote_result;

/* Streams the answer to messages: on_text(ctx, text, len) for each content
 * delta (and reasoning delta, inside <think> ... </think>). */
lm_status lm_chat_remote_answer(const lm_chat_remote *r, const cJSON *messages, const cJSON *template_kwargs,
                                const loom_request_params *params, int signal_fd,
                                void (*on_text)(void *ctx, const char *text, size_t len), void *ctx,
                                lm_chat_remote_result *out, lm_error *err);

#endif
