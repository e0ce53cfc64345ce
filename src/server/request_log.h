/* One log line per generation request, as vLLM's request logger and
 * uvicorn's access log together: id, route, status, prompt / cached /
 * output tokens, time to first token, decode speed, finish reason.
 * Written when the request ends (off with --disable-log-requests).  A
 * client that goes away mid-generation is no error of loom's: its request
 * is logged at INFO as "cancelled by the client", with the tokens so far. */
#ifndef LOOM_SERVER_REQUEST_LOG_H
#define LOOM_SERVER_REQUEST_LOG_H

#include <stdbool.h>

#include "base/log.h"

typedef struct {
    const char *id;     /* "chatcmpl-..." ("-" before one was made) */
    const char *route;  /* "/v1/chat/completions" */
    unsigned status;    /* the HTTP status sent */
    int prompt_tokens, cached_tokens, output_tokens;
    double seconds;     /* arrival to the end */
    double ttft;        /* arrival to the first token; < 0: none came */
    const char *finish; /* "stop", "length", "abort", "error", or the error message for a refusal */
    bool cancelled_by_client; /* the client closed its connection first: "cancelled by the client", no status */
} lm_request_record;

void lm_request_log(const lm_log *log, const lm_request_record *r);

#endif
