/* Finds tool calls in model output (after reasoning was split off), as
 * <tool_call> ... </tool_call> blocks in any of three forms:
 *   Qwen3 JSON:      <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   Qwen3.5 XML:     <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
 *   GLM-4.6V:        <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
 * Incremental like the reasoning parser: pieces cut anywhere give the same
 * result as the whole text.  Parameter values of the XML and GLM forms are
 * typed by the tools' JSON schemas (a non-string property is parsed as JSON
 * when it can be); a block that cannot be parsed is passed on as content.
 *
 * tool_choice "required" or a named function is enforced by ending the prompt
 * with the opening of a call (lm_tool_call_opening); the parser then starts
 * inside that call (lm_tool_parser_start_forced). */
#ifndef LOOM_SERVER_TOOL_PARSER_H
#define LOOM_SERVER_TOOL_PARSER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "server/sbuf.h"
#include "server/tool_call_stream.h"

typedef struct {
    char id[40];     /* "call_" + 24 hex digits */
    char *name;      /* malloc'd */
    char *arguments; /* malloc'd JSON text of an object */
} lm_tool_call;

typedef struct {
    lm_tool_call *items;
    int n, cap;
} lm_tool_call_list;

void lm_tool_call_list_free(lm_tool_call_list *list);

/* The three forms; which one a model writes is read from its chat template. */
typedef enum { LM_TOOL_FORM_JSON, LM_TOOL_FORM_XML, LM_TOOL_FORM_GLM } lm_tool_form;

/* Qwen3.5's XML form when the template writes "<function=", GLM-4.6V's when
 * it writes "<arg_key>", else Qwen3's JSON form (also when the template shows
 * no tool calls at all: it is the most widely trained one).  NULL: JSON. */
lm_tool_form lm_tool_form_of_template(const char *template_source);

/* Appends the opening of a call in that form.  With a name, up to where the
 * arguments start (as C strings):
 *   JSON  "<tool_call>\n{\"name\": \"NAME\", \"arguments\": "
 *   XML   "<tool_call>\n<function=NAME>\n"
 *   GLM   "<tool_call>NAME\n"
 * with NULL, up to where the name starts: "<tool_call>\n{\"name\": \"",
 * "<tool_call>\n<function=", "<tool_call>".  In the JSON form the name is
 * escaped as in a JSON string.  False when out of memory. */
bool lm_tool_call_opening(lm_tool_form form, const char *name, lm_sbuf *out);

/* The marker texts the output parsers consume, which the detokenizer must
 * keep even when the tokenizer marks them special and the client asked to
 * skip special tokens: out[0..1] <think> </think> when split_reasoning,
 * out[2..3] <tool_call> </tool_call> when tools, out[4..7] <arg_key>
 * </arg_key> <arg_value> </arg_value> when tools in the GLM form; NULL
 * where not needed. */
#define LM_OUTPUT_MARKERS 8
void lm_output_markers(bool split_reasoning, bool tools, lm_tool_form form, const char *out[LM_OUTPUT_MARKERS]);

typedef struct {
    bool in_call;
    lm_sbuf pending;      /* content that may start a <tool_call> */
    lm_sbuf block;        /* the body of the open <tool_call> */
    const cJSON *tools;   /* the request's tools (borrowed; may be NULL) */
    uint64_t id_state;    /* for call ids */
    char *forced_name;    /* the forced call's function (malloc'd) until that call ends */
    size_t forced_skip;   /* bytes at the start of block that came from the forced opening */
    bool after_call;      /* a call just ended: the whitespace that follows is no content (a template's
                           * "\n" between calls would otherwise be a text part of its own) */
    bool drop_stray;      /* a </tool_call> outside a call, or a <tool_call> inside one, is dropped
                           * (set after init: the markers are special tokens the client asked to skip) */
    /* Streamed responses (set after init): the open call is announced as
     * soon as its name is known (lm_tool_parser_open_call) and its
     * arguments grow as the model writes them.  The finished call keeps that
     * id and name, and its arguments continue what was shown: the parser's
     * result when what was shown is a prefix of it, else what was shown
     * completed into valid JSON (the model's text stopped parsing after the
     * call was announced; a block that would have been content, unclosed or
     * malformed, stays that call).  Unset, nothing changes. */
    bool stream_calls;
    lm_call_stream stream;
    char stream_id[40];   /* the announced call's id */
} lm_tool_parser;

/* The call being written, once announced: its id, name and the arguments'
 * text so far (each a prefix of the next and of the finished call's). */
typedef struct {
    const char *id, *name, *arguments;
    size_t arguments_len;
} lm_tool_call_view;
bool lm_tool_parser_open_call(const lm_tool_parser *p, lm_tool_call_view *out);

/* A tool parameter's JSON-schema type (NULL when unknown); whether its
 * value is JSON text: a listed property whose "type" is not "string" (a
 * number, an object, an enum or anyOf without a type: as the constrained
 * call writes it, tool_call_grammar.h); a "type": "string" property's and
 * an unlisted one's value is raw text.  lm_tool_param_value: the value so
 * typed, JSON text parsed when it is JSON, else a string (NULL when out of
 * memory). */
const char *lm_tool_param_type(const cJSON *tools, const char *function, const char *param);
bool lm_tool_param_is_json(const cJSON *tools, const char *function, const char *param);
cJSON *lm_tool_param_value(const cJSON *tools, const char *function, const char *key, const char *value);

/* tools: the request's "tools" array (may be NULL); id_seed makes call ids. */
void lm_tool_parser_init(lm_tool_parser *p, const cJSON *tools, uint64_t id_seed);
/* After init: starts inside a call whose opening (lm_tool_call_opening of
 * form and name) ended the prompt, so the model writes only its arguments
 * and the close.  That first call is always returned as a call, never as
 * content, also when the output ends before the call is closed (max_tokens,
 * a stop string, eos).  Its arguments: the block parsed as usual when that
 * works (an XML or GLM parameter cut short keeps what was written, a GLM
 * key cut short is left out), else the first
 * JSON object the model wrote, else the arguments a streamed call showed,
 * completed into valid JSON (a value cut short), else the model's raw text after the opening
 * (then not JSON, as the model did not write JSON), "{}" when it wrote
 * nothing.  Fails with LM_ERR_NOMEM, or LM_ERR_INVALID when the opening does
 * not leave the parser inside one call (a name holding a </tool_call>). */
lm_status lm_tool_parser_start_forced(lm_tool_parser *p, lm_tool_form form, const char *name, lm_error *err);
/* Appends plain content to *content and finished calls to *calls.  False
 * when out of memory (or a size bound was hit). */
bool lm_tool_parser_feed(lm_tool_parser *p, const char *text, size_t len, lm_sbuf *content,
                         lm_tool_call_list *calls);
/* At the end of the output: an unterminated block is parsed if it can be,
 * else passed on as content. */
bool lm_tool_parser_finish(lm_tool_parser *p, lm_sbuf *content, lm_tool_call_list *calls);
void lm_tool_parser_free(lm_tool_parser *p);

#endif
