/* Anthropic Messages API request bodies (/v1/messages and
 * /v1/messages/count_tokens) -> the chat request the OpenAI path serves.
 * The body is checked on its bytes (depth, values, NUL escapes) as the
 * OpenAI parser checks its own, translated into an OpenAI chat body (system
 * prompt, text / image / tool_use / tool_result / thinking blocks, tools,
 * tool_choice, stop_sequences, thinking, output_config.format as
 * response_format, strict tools) and handed to
 * lm_openai_request_parse_doc.  A field of the wrong shape is an error
 * naming it in Anthropic's terms ("messages[1].content[0].tool_use_id"). */
#ifndef LOOM_SERVER_ANTHROPIC_REQUEST_H
#define LOOM_SERVER_ANTHROPIC_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

#include "server/openai_request.h"

/* count_tokens: the body of /v1/messages/count_tokens (max_tokens not
 * required, output_config not read).  *one_tool_use: tool_choice's
 * disable_parallel_tool_use (the answer keeps the first call).  On failure returns LM_ERR_INVALID (or NOMEM) with a message,
 * and the offending field's name in param ("" if none); out->too_large
 * tells a size bound (HTTP 413) from a malformed field. */
lm_status lm_anthropic_request_parse(const char *body, size_t len, bool count_tokens,
                                     const lm_image_parts *images, lm_openai_request *out, bool *one_tool_use,
                                     char *param, size_t param_size, lm_error *err);

#endif
