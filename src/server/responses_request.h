/* OpenAI Responses API request bodies (POST /v1/responses) -> the chat
 * request the OpenAI path serves, as anthropic_request.c does for Messages.
 * The body is bounded on its bytes (depth, values, NUL escapes) as the chat
 * parser bounds its own, then translated into a chat body: `instructions`
 * and the `input` items (messages with input_text / output_text /
 * input_image parts, function_call and function_call_output items of a tool
 * round trip, reasoning items given to the next assistant turn as its
 * reasoning_content), function tools, tool_choice, text.format (passed on
 * as response_format), max_output_tokens, temperature, top_p, stream,
 * reasoning.effort (the template's enable_thinking).  previous_response_id
 * and item_reference inputs are looked up in the responses store
 * (responses_context.h: the whole input, stored context first); a response
 * or item not kept is a 404 (out->not_found).  conversation, background:
 * true, prompt templates, hosted tools and encrypted reasoning are 400s.  A
 * field of the wrong shape is an error naming it in the Responses API's
 * terms ("input[2].call_id"). */
#ifndef LOOM_SERVER_RESPONSES_REQUEST_H
#define LOOM_SERVER_RESPONSES_REQUEST_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "server/openai_request.h"
#include "server/responses_store.h"

#define LM_RESPONSES_MAX_ITEMS 4096
#define LM_RESPONSES_MAX_METADATA 16 /* as OpenAI: 16 pairs, keys of 64 bytes, values of 512 */

/* What a parse gives beside the chat request. */
typedef struct {
    cJSON *echo;  /* the request's fields the response object repeats (instructions, tools, tool_choice, text,
                     reasoning, metadata, temperature, top_p, max_output_tokens, parallel_tool_calls, store,
                     previous_response_id, truncation, ...) */
    cJSON *input; /* the whole input as Responses items (responses_context.h), what a stored response keeps */
    bool store;   /* keep the finished response (store, default true, and a store there) */
} lm_responses_parsed;

/* store: where previous_response_id and item_reference are looked up and
 * finished responses kept (NULL: none; both are 400s then); now: its
 * clock (seconds).  On success *parsed is filled (lm_responses_parsed_free
 * it).  On failure returns LM_ERR_INVALID (or NOMEM) with a message and the
 * offending field in param ("" if none); out->too_large tells a size bound
 * (413) and out->not_found a stored response or item not kept (404) from a
 * bad field. */
lm_status lm_responses_request_parse(const char *body, size_t len, const lm_image_parts *images,
                                     lm_responses_store *store, long long now, lm_openai_request *out,
                                     lm_responses_parsed *parsed, char *param, size_t param_size, lm_error *err);
void lm_responses_parsed_free(lm_responses_parsed *p);

#endif
