/* Grammars for JSON text: any JSON value, a JSON object, or the instances
 * of a JSON Schema, as users write them.
 *
 * Every assertion keyword of JSON Schema 2020-12 (and drafts 4-7) is
 * honoured, exactly or narrower, except those refused by name
 * ($recursiveRef, a $ref to another document, fractional multipleOf): annotations
 * and unknown keywords ($id, title, examples, x-*, readOnly, typos) are
 * ignored, as JSON Schema says.  How each is compiled (the files are
 * json_schema_compiler.h's list):
 *   - allOf, if / then / else and $ref / anyOf / oneOf beside other
 *     keywords: intersected (grammar/json_schema_merge.h); $ref resolved
 *     as 2020-12 does within the document ($id base URIs, $anchor, JSON
 *     pointers), recursion included; $dynamicRef where one $dynamicAnchor
 *     answers it whatever the path; unevaluatedProperties / Items see
 *     what the in-place subschemas evaluate;
 *   - not, and if's else: a bounded complement (json_schema_not.c), else
 *     refused;
 *   - oneOf: each branch where no other branch can match it (apart by
 *     type, const/enum values, a required discriminator property, a
 *     property the other's additionalProperties: false excludes, or
 *     narrowed by the others' complements), else refused;
 *   - enum / const beside other keywords: the values those keywords accept;
 *     written back as the schema writes them (its own number text);
 *   - numbers: minimum / maximum / exclusive* of any value, multipleOf an
 *     integer up to 1000 (grammar/json_number.h);
 *   - strings: minLength / maxLength in characters (a surrogate pair
 *     counts once), maxLength above LM_SCHEMA_MAX_LENGTH generated up to
 *     it; pattern (grammar/regex_compile.h's subset, on the unescaped
 *     characters, with minLength/maxLength too); format as
 *     grammar/json_format.h says;
 *   - objects: properties in the schema's order, required, additional
 *     properties after them (additionalProperties a schema: keys no listed
 *     name spells; patternProperties: keys of its first pattern, values
 *     valid for all its schemas), min/maxProperties, dependentRequired /
 *     dependencies (a property whose dependents are not required is left
 *     out), propertyNames (listed names it refuses left out; other keys of
 *     its grammar where none is listed); without additionalProperties only
 *     the listed properties come;
 *   - arrays: items, prefixItems (items / additionalItems as tuples in
 *     drafts 4-2019; a false item ends the array), min/maxItems,
 *     uniqueItems (items of listed values: a subsequence of the list;
 *     other items: at most one), contains / minContains (the first items
 *     after the tuple), maxContains (every item of contains);
 *   - false: nothing, so a property or item left out, an anyOf branch
 *     never taken, refused where it must be generated.
 *
 * What the grammar generates is always valid JSON: unbounded numbers have
 * at most 15 integer digits, 15 fraction digits and 2 exponent digits
 * (a finite double),
 * whitespace as the options say.  These narrow the output, never widen it. */
#ifndef LOOM_GRAMMAR_JSON_GRAMMAR_H
#define LOOM_GRAMMAR_JSON_GRAMMAR_H

#include <cjson/cJSON.h>

#include "grammar/grammar.h"

#define LM_JSON_MAX_WS 16
#define LM_SCHEMA_MAX_DEPTH 64
#define LM_SCHEMA_MAX_BYTES (1 << 20)
#define LM_SCHEMA_MAX_REFS 1024
#define LM_SCHEMA_MAX_REPEAT 1000   /* minItems, maxItems, min/maxProperties */
#define LM_SCHEMA_MAX_LENGTH 4096   /* minLength, maxLength */
#define LM_SCHEMA_MAX_ONEOF 64      /* oneOf branches (compared pairwise) */

typedef enum { LM_JSON_ANY_VALUE, LM_JSON_OBJECT } lm_json_kind;

/* The whitespace between tokens.  Default (zeroed): compact, one optional
 * space after ':' and ',' and nothing elsewhere (xgrammar's compact
 * separators ", " / ": " and llguidance's "," / ":" both fit); any: up to
 * LM_JSON_MAX_WS bytes of [ \t\n\r] in every gap; a pattern: a regular
 * expression every gap matches (vLLM's guided_whitespace_pattern). */
typedef struct {
    bool any_whitespace;
    const char *whitespace_pattern; /* NULL: none */
    size_t pattern_len;
} lm_json_options;

/* The JSON grammar of kind; suffix (may be NULL) must follow the value;
 * options may be NULL (compact). */
lm_status lm_json_grammar(lm_json_kind kind, const char *suffix, const lm_json_options *options, lm_grammar *out,
                          lm_error *err);
/* The grammar of the schema's instances (schema: JSON text of len bytes),
 * then suffix.  Its cost is checked (grammar/cost.h): each pattern on its
 * own, so that the message names it, then the whole; deadline_ns as there. */
lm_status lm_json_schema_grammar(const char *schema, size_t len, const char *suffix, const lm_json_options *options,
                                 uint64_t deadline_ns, lm_grammar *out, lm_error *err);

/* A JSON value's compact text with every number in its exact text: the
 * schema's own (kept while lm_json_schema_grammar reads it) or the
 * shortest that reads back as the double (malloc'd; NULL: out of memory). */
char *lm_json_text_exact(const cJSON *value);

#endif
