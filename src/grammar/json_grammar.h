/* Grammars for JSON text: any JSON value, a JSON object, or the instances
 * of a JSON Schema (the subset OpenAI's structured outputs accept).
 *
 * Supported schema keywords: type (one or a list), properties, required,
 * additionalProperties (false, true or absent: only the listed properties
 * are generated; a schema without properties: a map of that schema),
 * items, minItems, maxItems, enum, const, anyOf, $ref to "#", "#/$defs/..."
 * or "#/definitions/..." (recursion included), minLength, maxLength,
 * pattern (grammar/regex_compile.h's subset, on the unescaped characters),
 * minimum 0 and bounds no tighter than the grammar's own digit limits on
 * numbers, and the annotations (title, description, default, examples,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly, $defs,
 * definitions).  Anything else fails with LM_ERR_UNSUPPORTED naming the
 * keyword: a constraint is never silently dropped.
 *
 * What the grammar generates is always valid JSON: numbers have at most 15
 * integer digits, 15 fraction digits and 3 exponent digits, whitespace runs
 * at most LM_JSON_MAX_WS bytes, properties come in the schema's order.
 * These narrow the output, never widen it. */
#ifndef LOOM_GRAMMAR_JSON_GRAMMAR_H
#define LOOM_GRAMMAR_JSON_GRAMMAR_H

#include "grammar/grammar.h"

#define LM_JSON_MAX_WS 16
#define LM_SCHEMA_MAX_DEPTH 64
#define LM_SCHEMA_MAX_BYTES (1 << 20)
#define LM_SCHEMA_MAX_REFS 1024
#define LM_SCHEMA_MAX_REPEAT 1000 /* minItems, maxItems, minLength, maxLength */

typedef enum { LM_JSON_ANY_VALUE, LM_JSON_OBJECT } lm_json_kind;

/* The JSON grammar of kind; suffix (may be NULL) must follow the value. */
lm_status lm_json_grammar(lm_json_kind kind, const char *suffix, lm_grammar *out, lm_error *err);
/* The grammar of the schema's instances (schema: JSON text of len bytes),
 * then suffix.  Its cost is checked (grammar/cost.h): each pattern on its
 * own, so that the message names it, then the whole; deadline_ns as there. */
lm_status lm_json_schema_grammar(const char *schema, size_t len, const char *suffix, uint64_t deadline_ns,
                                 lm_grammar *out, lm_error *err);

#endif
