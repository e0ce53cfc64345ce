/* Error bodies of every API, from one table of HTTP statuses: the OpenAI
 * shape {"error": {"message", "type", "param", "code"}} (code: the HTTP
 * status, as vLLM) and Anthropic's {"type": "error", "error": {"type",
 * "message"}, "request_id"}.  The SDKs pick their exception class from the
 * status; the types are what each API itself sends for that status, so a
 * client that reads error.type sees the name it knows. */
#ifndef LOOM_SERVER_ERROR_BODY_H
#define LOOM_SERVER_ERROR_BODY_H

/* OpenAI's error.type for a status: invalid_request_error (400, 405, 408,
 * 413, 414, 431, 505), authentication_error, permission_error,
 * not_found_error, rate_limit_error, server_error (5xx but 505). */
const char *lm_openai_error_type(unsigned status);
/* Anthropic's: invalid_request_error, authentication_error,
 * permission_error, not_found_error, timeout_error (408),
 * request_too_large (413), rate_limit_error, overloaded_error (503, 529),
 * api_error (other 5xx). */
const char *lm_anthropic_error_type(unsigned status);

/* The bodies as text (cJSON_free them), NULL when out of memory.  param:
 * the field at fault or NULL; request_id: the response's request-id or
 * NULL (then the key is left out). */
char *lm_error_json_body(unsigned status, const char *message, const char *param);
char *lm_anthropic_error_body(unsigned status, const char *message, const char *request_id);

#endif
