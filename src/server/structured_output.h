/* The request fields that constrain the output to a grammar: OpenAI's
 * response_format ({"type": "text"}, {"type": "json_object"},
 * {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}) and
 * vLLM's structured_outputs ({"json": schema, "regex": ..., "choice": [...]})
 * with its older aliases guided_json, guided_regex, guided_choice; a GBNF
 * grammar (grammar/gbnf.h) in vLLM's structured_outputs.grammar and
 * guided_grammar or llama-server's grammar (the same text in several is one
 * constraint).  At most one constraint per request.  JSON output is compact unless the request
 * says otherwise, with vLLM's names: disable_any_whitespace false (top
 * level or in structured_outputs) allows any whitespace between tokens,
 * guided_whitespace_pattern / structured_outputs.whitespace_pattern is a
 * regular expression every gap matches.  Bad values and schema features loom does not
 * implement are errors (HTTP 400) naming the field and the feature. */
#ifndef LOOM_SERVER_STRUCTURED_OUTPUT_H
#define LOOM_SERVER_STRUCTURED_OUTPUT_H

#include <cjson/cJSON.h>

#include "base/error.h"
#include "loom.h"

#define LM_STRUCTURED_FIELDS "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice", \
                             "guided_whitespace_pattern", "disable_any_whitespace", "guided_grammar", "grammar"

typedef struct lm_grammar_cache lm_grammar_cache;

/* *grammar: NULL when the body asks for no constraint.  param gets the
 * offending field's name on failure.  cache: where the grammar is compiled
 * (grammar/grammar_cache.h: kept by its text, a few compiles at once), or
 * NULL: compiled on its own. */
lm_status lm_structured_output_parse(const cJSON *body, lm_grammar_cache *cache, loom_grammar **grammar, char *param,
                                     size_t param_size, lm_error *err);

#endif
