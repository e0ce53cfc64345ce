/* OpenAI Responses API output: the response object and the stream's events
 * (response.created, response.in_progress, per output item
 * output_item.added / content_part.added / *.delta / *.done /
 * output_item.done, then response.completed or response.incomplete; an
 * error event and response.failed when generation fails), each with its
 * sequence_number, from what the generation path collected: reasoning
 * (a `reasoning` item of reasoning_text content), text (a `message` item of
 * output_text) and tool calls (`function_call` items). */
#ifndef LOOM_SERVER_RESPONSES_RESPONSE_H
#define LOOM_SERVER_RESPONSES_RESPONSE_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "server/sbuf.h"
#include "server/tool_call_delta.h"
#include "server/tool_parser.h"

typedef struct {
    const char *id, *model; /* id: "resp_" + hex; item ids are made from it */
    long long created_at;
    const cJSON *echo;      /* the request's fields the object repeats (responses_request.h) */
    const char *reasoning, *text;     /* "" when none */
    const lm_tool_call_list *calls;   /* may be NULL */
    bool incomplete;        /* cut by max_output_tokens */
    int prompt_tokens, cached_tokens, output_tokens, reasoning_tokens;
} lm_responses_output;

/* The whole response object, status completed or incomplete (NULL when out
 * of memory). */
cJSON *lm_responses_object(const lm_responses_output *o);

typedef enum { LM_RESPONSES_ITEM_NONE, LM_RESPONSES_ITEM_REASONING, LM_RESPONSES_ITEM_MESSAGE,
               LM_RESPONSES_ITEM_CALL } lm_responses_item;

/* A stream's state: the next sequence number and output index, the open
 * item and its text so far, the items done (the final response lists
 * them). */
typedef struct {
    int sequence, next_output;
    char base[64];   /* the response id's hex, for item ids */
    lm_responses_item open;
    char item_id[96];
    lm_sbuf text;
    cJSON *call;   /* the open function_call item */
    cJSON *done;   /* the finished items */
    bool had_answer; /* a message or call item was written */
    cJSON *final;    /* after lm_responses_stream_end: the completed response object (a copy) */
} lm_responses_stream;

/* response.created and response.in_progress (status in_progress, no output). */
void lm_responses_stream_start(lm_responses_stream *st, lm_sbuf *out, const lm_responses_output *o);
/* Reasoning and text one event added. */
void lm_responses_stream_delta(lm_responses_stream *st, lm_sbuf *out, const char *reasoning, const char *text);
/* A tool call's delta: its first opens a function_call item, its fragments
 * are function_call_arguments.delta events, its last closes it. */
void lm_responses_stream_tool(lm_responses_stream *st, lm_sbuf *out, const lm_tool_delta *d);
/* Closes the open item (an empty message when nothing answered), then
 * response.completed or response.incomplete with o's usage (its response
 * object kept in st->final). */
void lm_responses_stream_end(lm_responses_stream *st, lm_sbuf *out, const lm_responses_output *o);
/* An error event, then response.failed (the stream ends after them). */
void lm_responses_stream_error(lm_responses_stream *st, lm_sbuf *out, const lm_responses_output *o, unsigned status,
                               const char *message);
void lm_responses_stream_free(lm_responses_stream *st);

#endif
