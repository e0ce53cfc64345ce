/* The grammar of a forced tool call's output, in the call form the model's
 * chat template writes (tool_parser.h): the prompt ends with the opening
 * of the first call (lm_tool_call_opening of the form and the function, see
 * tool_choice.h), so the grammar starts at its arguments:
 *   JSON  ARGS "}"                  ARGS: the parameters schema's JSON text
 *   XML   PARAM* "</function>"      PARAM: "<parameter=K>\n" V "\n</parameter>\n"
 *   GLM   PARAM* "</tool_call>"     PARAM: "<arg_key>K</arg_key>\n<arg_value>" V "</arg_value>\n"
 * In the XML and GLM forms the properties come in the schema's order, each
 * required one once, each optional one at most once, no others (a schema
 * without properties: any keys, raw string values).  A value V is raw text
 * for a property whose "type" is "string" (as the templates write strings,
 * and as the tool parser reads them back: lm_tool_param_value): free text
 * without the form's closing tag and the call markers (text_avoiding.h),
 * an enum/const's strings, a pattern's or format's language or a length
 * range (then without '<'); any other property's V is the JSON text of
 * its schema (json_grammar.h, compact), the parameters' $defs in reach.
 * Each value's grammar is compiled on its own and embedded
 * (grammar_compose.h).
 *
 * parallel: after the first call, up to LM_TOOL_CALL_GRAMMAR_MAX_CALLS - 1
 * more, each "\n</tool_call>\n" (GLM: "\n") then a whole call of one of
 * the allowed functions (the named one, or any tool), and a last
 * "\n</tool_call>"; the grammar is complete after each call.  Else the
 * grammar ends with the first call, which ends generation.
 *
 * A tool that is not strict and whose schema loom cannot enforce in the
 * form gets the form's generic arguments (any JSON object; any raw
 * parameters); a strict one fails the request (LM_ERR_UNSUPPORTED /
 * LM_ERR_INVALID, naming the tool and parameter). */
#ifndef LOOM_SERVER_TOOL_CALL_GRAMMAR_H
#define LOOM_SERVER_TOOL_CALL_GRAMMAR_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "loom.h"
#include "server/tool_parser.h"

#define LM_TOOL_CALL_GRAMMAR_MAX_CALLS 16

typedef struct {
    const cJSON *tools;  /* the request's tools array */
    lm_tool_form form;
    const char *first;   /* the function whose opening ended the prompt */
    const char *only;    /* further calls call this function only; NULL: any tool */
    bool parallel;       /* further calls may follow the first */
} lm_tool_call_grammar_spec;

lm_status lm_tool_call_grammar(const lm_tool_call_grammar_spec *spec, uint64_t deadline_ns, loom_grammar **out,
                               lm_error *err);

#endif
