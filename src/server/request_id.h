/* The id of one HTTP request, sent back in a header so a client can quote
 * it (the SDKs show it as _request_id): Anthropic's clients read
 * `request-id` (Anthropic's form, "req_" + 24 letters and digits), the
 * OpenAI ones `x-request-id` ("req_" + 32 hex digits, or the client's own
 * X-Request-Id echoed, as vLLM does).  Anthropic's error bodies carry it
 * too (error_body.h). */
#ifndef LOOM_SERVER_REQUEST_ID_H
#define LOOM_SERVER_REQUEST_ID_H

#include <stdbool.h>
#include <stdint.h>

#define LM_REQUEST_ID_SIZE 72 /* an echoed id is at most 64 bytes */

/* A new id: 128 random bits from the kernel (should that fail, the clock
 * and `counter`, mixed).  given: the client's X-Request-Id or NULL, used
 * (not anthropic) when it is 1 to 64 visible ASCII characters. */
void lm_request_id_make(bool anthropic, const char *given, uint64_t counter, char out[LM_REQUEST_ID_SIZE]);

#endif
