/* OpenAI Responses API request bodies (POST /v1/responses) -> the chat
 * request the OpenAI path serves, as anthropic_request.c does for Messages.
 * The body is bounded on its bytes (depth, values, NUL escapes) as the chat
 * parser bounds its own, then translated into a chat body: `instructions`
 * and the `input` items (messages with input_text / output_text /
 * input_image parts, function_call and function_call_output items of a tool
 * round trip, reasoning items given to the next assistant turn as its
 * reasoning_content), function tools, tool_choice, text.format (passed on
 * as response_format), max_output_tokens, temperature, top_p, stream,
 * reasoning.effort (the template's enable_thinking).  loom stores no
 * responses: previous_response_id, conversation, item_reference items and
 * store: true are 400s saying so; background: true, prompt templates and
 * hosted tools are 400s too.  A field of the wrong shape is an error naming
 * it in the Responses API's terms ("input[2].call_id"). */
#ifndef LOOM_SERVER_RESPONSES_REQUEST_H
#define LOOM_SERVER_RESPONSES_REQUEST_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "server/openai_request.h"

#define LM_RESPONSES_MAX_ITEMS 4096
#define LM_RESPONSES_MAX_METADATA 16 /* as OpenAI: 16 pairs, keys of 64 bytes, values of 512 */

/* On success *echo is an object of the request's fields the response
 * object repeats (instructions, tools, tool_choice, text, reasoning,
 * metadata, temperature, top_p, max_output_tokens, parallel_tool_calls,
 * store, truncation, ...; cJSON_Delete it).  On failure returns
 * LM_ERR_INVALID (or NOMEM) with a message and the offending field in param
 * ("" if none); out->too_large tells a size bound (413) from a bad field. */
lm_status lm_responses_request_parse(const char *body, size_t len, const lm_image_parts *images,
                                     lm_openai_request *out, cJSON **echo, char *param, size_t param_size,
                                     lm_error *err);

#endif
