/* OpenAI / vLLM request bodies -> validated generation parameters.  This is
 * the parser exposed to untrusted bytes (and fuzzed by fuzz/fuzz_request.c):
 * bodies are bounded in size and nesting depth, unknown fields are ignored,
 * a known field of the wrong type is an error naming the field. */
#ifndef LOOM_SERVER_OPENAI_REQUEST_H
#define LOOM_SERVER_OPENAI_REQUEST_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "loom.h"

/* Bounds on a body's JSON, checked on the bytes before anything is built
 * (a parsed value costs ~80 bytes of heap, so a 16 MiB body of "1," would
 * become ~640 MB): nesting depth, and values (numbers, strings, literals,
 * arrays and objects; keys not counted).  524288 values make at most ~40 MiB
 * of parsed tree; they hold a prompt of the longest context as token ids. */
#define LM_REQUEST_MAX_DEPTH 64
#define LM_REQUEST_MAX_VALUES (1 << 19)
#define LM_REQUEST_MAX_STOP 16
#define LM_REQUEST_MAX_LOGIT_BIAS 1024
#define LM_REQUEST_MAX_TOP_LOGPROBS 20
#define LM_REQUEST_MAX_PROMPTS 128  /* completions' list of prompts; prompts x n at most 128 too */
#define LM_REQUEST_MAX_TOOLS 128     /* as OpenAI */
#define LM_REQUEST_MAX_TOOL_NAME 64  /* function names: ^[a-zA-Z0-9_-]{1,64}$, as OpenAI */

/* Images: at most LOOM_MAX_IMAGES per request, each file at most
 * LM_IMAGE_DEFAULT_MAX_BYTES (io/image_decode.h), all of a request's
 * together at most this. */
#define LM_REQUEST_MAX_IMAGE_BYTES ((size_t)64 << 20)

typedef enum { LM_API_CHAT, LM_API_COMPLETION } lm_api_kind;

/* How a chat's image parts are read.  An image part of a user message
 * ({"type": "image_url", "image_url": {"url": URL}}, or "image_url": URL)
 * becomes `marker` in its message's content string, at its place, and its
 * bytes become the next of the request's images. */
typedef struct {
    const char *marker;       /* the model's text for one image (vision start, placeholder,
                                 vision end); NULL: image parts are refused with `refusal` */
    const char *refusal;      /* why (NULL: "this model does not take images") */
    const char *local_dir;    /* realpath of --allowed-local-media-path, or NULL: no local files */
    size_t max_image_bytes;   /* one image's file (0: LM_IMAGE_DEFAULT_MAX_BYTES) */
    size_t max_request_bytes; /* all of a request's (0: LM_REQUEST_MAX_IMAGE_BYTES) */
    /* Not about images, but given to every parse the same way: where the
     * request's grammar is compiled (grammar/grammar_cache.h), or NULL:
     * on its own. */
    struct lm_grammar_cache *grammars;
} lm_image_parts;

typedef enum {
    LM_TOOL_CHOICE_AUTO,
    LM_TOOL_CHOICE_NONE,
    LM_TOOL_CHOICE_REQUIRED,
    LM_TOOL_CHOICE_NAMED,
} lm_tool_choice;

typedef struct {
    const char *text; /* a text prompt (borrowed from doc), or NULL: ids */
    size_t text_len;
    int32_t *ids;     /* malloc'd (may be NULL when n_ids is 0) */
    int n_ids;
} lm_prompt_input;

typedef struct {
    lm_api_kind kind;
    cJSON *doc;            /* the parsed body; the pointers below borrow from it */
    const char *model;     /* NULL when absent */
    bool stream, include_usage;
    bool logprobs;         /* chat: logprobs=true; completions: logprobs=k given */
    int top_logprobs;
    bool echo;             /* completions */
    /* chat */
    cJSON *messages;       /* normalised copy: content is a string, tool-call arguments objects */
    /* chat: the images of image parts, in order (params.images points here) */
    loom_image images[LOOM_MAX_IMAGES];
    uint8_t *image_data[LOOM_MAX_IMAGES]; /* malloc'd: the files' bytes */
    int n_images;
    const cJSON *tools;    /* NULL when absent or tool_choice is none */
    lm_tool_choice tool_choice;
    const char *tool_name; /* for LM_TOOL_CHOICE_NAMED */
    bool parallel_tool_calls; /* parallel_tool_calls (default true): a forced call may be followed by more */
    const cJSON *template_kwargs; /* chat_template_kwargs object, or NULL */
    bool add_generation_prompt, continue_final_message;
    /* completions: one or more prompts (a list of prompts answers one
     * choice group per prompt), each a text or token ids */
    lm_prompt_input *prompts;
    int n_prompts;
    bool max_tokens_given;
    bool too_large;        /* the failure was a size bound (HTTP 413), not a malformed field */
    bool not_found;        /* the failure names something kept that is not there (HTTP 404: a stored response) */
    /* engine parameters; prompt is filled in by the caller */
    loom_request_params params;
    const char *stop[LM_REQUEST_MAX_STOP];
    int32_t *stop_token_ids;
    int32_t *bias_ids;
    float *bias_values;
    loom_grammar *grammar; /* response_format / guided_*: NULL when unconstrained (params.grammar) */
    struct lm_grammar_cache *grammars; /* the parse's lm_image_parts.grammars (forced calls compile there too) */
} lm_openai_request;

/* Parses body[0..len).  On failure returns LM_ERR_INVALID (or NOMEM) with a
 * message, and writes the offending field's name to param (empty if none).
 * images: how image parts are read (NULL: refused). */
lm_status lm_openai_request_parse(lm_api_kind kind, const char *body, size_t len,
                                  const lm_image_parts *images, lm_openai_request *out, char *param,
                                  size_t param_size, lm_error *err);
/* The same from a parsed body (taken over: freed with the request, also on
 * failure); the byte bounds are the caller's to have checked. */
lm_status lm_openai_request_parse_doc(lm_api_kind kind, cJSON *doc, const lm_image_parts *images,
                                      lm_openai_request *out, char *param, size_t param_size, lm_error *err);
void lm_openai_request_free(lm_openai_request *r);
/* OpenAI's rule for function names: ^[a-zA-Z0-9_-]{1,64}$. */
bool lm_valid_function_name(const char *name);

/* Depth of the deepest [ / { nesting in JSON text (strings skipped). */
int lm_json_nesting_depth(const char *text, size_t len);

/* What lm_json_prescan finds in JSON text, in one pass over its bytes. */
typedef struct {
    int depth;            /* deepest nesting seen (the scan stops past max_depth) */
    size_t values;        /* values seen (the scan stops past max_values) */
    bool nul;             /* a \u0000 escape inside a string ... */
    char nul_field[64];   /* ... under this top-level field ("" for a top-level key itself) */
} lm_json_scan;

/* Scans text[0..len) (any bytes: invalid JSON is the parser's to refuse).
 * A NUL is reported only under a top-level field named in fields[0..n)
 * (the ones read; NULL: any), or in a top-level key. */
void lm_json_prescan(const char *text, size_t len, int max_depth, size_t max_values,
                     const char *const *fields, int n_fields, lm_json_scan *out);

#endif
