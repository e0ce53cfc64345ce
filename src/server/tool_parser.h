/* Finds tool calls in model output (after reasoning was split off), as
 * <tool_call> ... </tool_call> blocks in any of three forms:
 *   Qwen3 JSON:      <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   Qwen3.5 XML:     <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
 *   GLM-4.6V:        <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
 * Incremental like the reasoning parser: pieces cut anywhere give the same
 * result as the whole text.  Parameter values of the XML and GLM forms are
 * typed by the tools' JSON schemas (a non-string property is parsed as JSON
 * when it can be); a block that cannot be parsed is passed on as content. */
#ifndef LOOM_SERVER_TOOL_PARSER_H
#define LOOM_SERVER_TOOL_PARSER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/sbuf.h"

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

typedef struct {
    bool in_call;
    lm_sbuf pending;      /* content that may start a <tool_call> */
    lm_sbuf block;        /* the body of the open <tool_call> */
    const cJSON *tools;   /* the request's tools (borrowed; may be NULL) */
    uint64_t id_state;    /* for call ids */
} lm_tool_parser;

/* tools: the request's "tools" array (may be NULL); id_seed makes call ids. */
void lm_tool_parser_init(lm_tool_parser *p, const cJSON *tools, uint64_t id_seed);
/* Appends plain content to *content and finished calls to *calls.  False
 * when out of memory (or a size bound was hit). */
bool lm_tool_parser_feed(lm_tool_parser *p, const char *text, size_t len, lm_sbuf *content,
                         lm_tool_call_list *calls);
/* At the end of the output: an unterminated block is parsed if it can be,
 * else passed on as content. */
bool lm_tool_parser_finish(lm_tool_parser *p, lm_sbuf *content, lm_tool_call_list *calls);
void lm_tool_parser_free(lm_tool_parser *p);

#endif
