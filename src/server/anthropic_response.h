/* Anthropic Messages API output: the message object, the stream's events
 * (message_start, content_block_start / _delta / _stop, message_delta,
 * message_stop) and error bodies, from what the generation path collected
 * (reasoning, content, parsed tool calls, the finish). */
#ifndef LOOM_SERVER_ANTHROPIC_RESPONSE_H
#define LOOM_SERVER_ANTHROPIC_RESPONSE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "loom.h"
#include "server/sbuf.h"
#include "server/tool_call_delta.h"
#include "server/tool_parser.h"

typedef struct {
    const char *id, *model;
    const char *thinking, *text;      /* "" when none */
    const lm_tool_call_list *calls;   /* may be NULL */
    const char *stop_reason;          /* lm_anthropic_stop_reason's */
    const char *stop_sequence;        /* the stop string matched, or NULL */
    int prompt_tokens, cached_tokens; /* input_tokens is the part the prefix cache did not hold */
    int output_tokens;
    bool one_tool_use;                /* disable_parallel_tool_use: only the first call is answered */
} lm_anthropic_output;

/* A tool_use block's id for a parsed call's ("call_" + hex): Anthropic's
 * form, "toolu_" + 24 letters and digits, a function of call_id. */
#define LM_ANTHROPIC_TOOL_USE_ID_SIZE 31
void lm_anthropic_tool_use_id(const char *call_id, char out[LM_ANTHROPIC_TOOL_USE_ID_SIZE]);

/* end_turn, max_tokens, stop_sequence, tool_use (or NULL: not finished). */
const char *lm_anthropic_stop_reason(loom_finish_reason reason, bool stop_sequence, bool tool_use);

/* The message object (NULL when out of memory). */
cJSON *lm_anthropic_message(const lm_anthropic_output *o);

/* A stream's block state: the next block's index and the open block. */
typedef enum { LM_ANTHROPIC_BLOCK_NONE, LM_ANTHROPIC_BLOCK_THINKING, LM_ANTHROPIC_BLOCK_TEXT,
               LM_ANTHROPIC_BLOCK_TOOL } lm_anthropic_block;
typedef struct {
    int next_index;
    lm_anthropic_block open;
    size_t tool_json_sent; /* the open tool_use block's partial_json bytes */
    bool one_tool_use;     /* disable_parallel_tool_use: the calls after the first are not sent */
} lm_anthropic_stream;

/* message_start (o's usage: the prompt's tokens; content empty). */
void lm_anthropic_stream_start(lm_sbuf *out, const lm_anthropic_output *o);
/* What one event added: thinking and text deltas. */
void lm_anthropic_stream_delta(lm_anthropic_stream *st, lm_sbuf *out, const char *thinking, const char *text);
/* A tool call's delta: its first opens a tool_use block, fragments are
 * input_json_delta events, its last closes the block (a finished call whose
 * arguments are no JSON object and of which nothing was sent sends "{}"). */
void lm_anthropic_stream_tool(lm_anthropic_stream *st, lm_sbuf *out, const lm_tool_delta *d);
/* Closes the open block, then message_delta and message_stop. */
void lm_anthropic_stream_end(lm_anthropic_stream *st, lm_sbuf *out, const lm_anthropic_output *o);
/* An error event (the stream ends after it; the type from error_body.h). */
void lm_anthropic_stream_error(lm_sbuf *out, unsigned status, const char *message);

#endif
