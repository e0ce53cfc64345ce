/* The arguments of a tool call while the model writes it, for streamed
 * responses.  Fed the growing body of the open <tool_call> block, it finds
 * the function's name as soon as it is complete and then writes the
 * arguments as the JSON text the finished call will have (cJSON's
 * unformatted printing of the parsed object), growing only at its end:
 *   JSON form  the "arguments" object, re-printed token by token (white
 *              space dropped, strings re-escaped, numbers and literals once
 *              complete);
 *   XML / GLM  "{", then per parameter "key": and the value: a string
 *              value's characters as they arrive (the trailing newline the
 *              parser trims held back), a typed value once it is closed.
 * What it writes is always a prefix of valid JSON (lm_call_stream_closed
 * completes it), so a call announced to a client can be finished even when
 * the model's text stops making sense.  Anything it cannot follow freezes
 * it: the rest arrives with the finished call. */
#ifndef LOOM_SERVER_TOOL_CALL_STREAM_H
#define LOOM_SERVER_TOOL_CALL_STREAM_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/sbuf.h"

#define LM_CALL_STREAM_MAX_DEPTH 64

typedef enum {
    LM_CALL_STREAM_DETECT, /* before the form is known */
    LM_CALL_STREAM_JSON,
    LM_CALL_STREAM_XML,
    LM_CALL_STREAM_GLM,
} lm_call_stream_form;

typedef struct {
    lm_call_stream_form form;
    bool frozen;   /* nothing more is written for this call */
    char *name;    /* malloc'd once known (the call may be announced) */
    lm_sbuf args;  /* the arguments' text so far */
    size_t pos;    /* bytes of the block read */
    int step;      /* the form's own state */
    /* JSON form: the container stack (the block's object at level 1) */
    char stack[LM_CALL_STREAM_MAX_DEPTH];
    unsigned char expect[LM_CALL_STREAM_MAX_DEPTH];
    int count[LM_CALL_STREAM_MAX_DEPTH];
    int depth;
    int emit_depth;   /* 0, or the level of the arguments object while it is written */
    bool args_done;   /* the arguments object was written whole */
    bool in_string;   /* scanning a string (starting at tok) */
    bool in_atom;     /* scanning a number or literal (starting at tok) */
    bool tok_is_key, tok_emit;
    size_t tok, tok_sent; /* token start (past the quote) and bytes of it written */
    int key_role;     /* at level 1: what the key names (0 other, 1 name, 2 arguments) */
    lm_sbuf key;      /* a key waiting for its value ("k": when writing) */
    /* XML / GLM: the open value */
    size_t vstart, vsent;
    bool typed, in_value, first_param;
    const char *value_close;
    char *param;      /* the open parameter's key (malloc'd) */
} lm_call_stream;

void lm_call_stream_init(lm_call_stream *s);
void lm_call_stream_free(lm_call_stream *s);
/* Reads block[pos..len) (block only grows while the call is open).  tools:
 * the request's tools, which type XML / GLM values.  False when out of
 * memory (the stream is then frozen). */
bool lm_call_stream_update(lm_call_stream *s, const char *block, size_t len, const cJSON *tools);
/* The arguments so far completed into valid JSON ("{}" when none). */
bool lm_call_stream_closed(const lm_call_stream *s, lm_sbuf *out);

#endif
