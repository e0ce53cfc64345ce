/* Intersecting JSON schemas (allOf, and $ref / anyOf / oneOf beside sibling
 * keywords) into one schema the JSON schema grammar (grammar/json_grammar.h)
 * compiles: the merge of a and b is a schema whose instances are instances
 * of both, or narrower (never wider):
 *   type: the intersection ("integer" within "number");
 *   properties: their union, a property in both as {"allOf": [a's, b's]},
 *     one only in a as b's additionalProperties schema also requires (or
 *     left out where b's additionalProperties is false); required: union;
 *   minimum, minLength, minItems, minProperties, exclusiveMinimum: the
 *     larger; the maximums the smaller; uniqueItems: either;
 *   enum / const: the values in both; multipleOf: equal, or one a multiple
 *     of the other;
 *   items, additionalProperties (schemas), not, propertyNames, contains:
 *     {"allOf": [a's, b's]}; prefixItems: item by item (the other side's
 *     items beyond its tuple), the longer tuple long; anyOf in both: the
 *     branches' products (at most LM_SCHEMA_MAX_BRANCHES); $ref in both:
 *     the second kept in allOf; unevaluated*: on one side only (the
 *     caller closes the other's: json_schema_normalize.c);
 *   pattern, format, patternProperties, oneOf, dependencies, $dynamicRef,
 *     min/maxContains in both and different: refused by name.
 * The result's members are references to a's and b's (cJSON_Delete of it
 * leaves them alone), so it must not outlive them. */
#ifndef LOOM_GRAMMAR_JSON_SCHEMA_MERGE_H
#define LOOM_GRAMMAR_JSON_SCHEMA_MERGE_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "base/error.h"

#define LM_SCHEMA_MAX_BRANCHES 64

/* JSON types as bits; "number" includes "integer" */
#define LM_JT_NULL 1u
#define LM_JT_BOOLEAN 2u
#define LM_JT_OBJECT 4u
#define LM_JT_ARRAY 8u
#define LM_JT_STRING 16u
#define LM_JT_INTEGER 32u
#define LM_JT_FRACTION 64u /* numbers that are not integers */
#define LM_JT_ALL 127u

/* The types a schema's "type" allows (LM_JT_ALL when absent); false for
 * a malformed type. */
bool lm_schema_type_mask(const cJSON *type, unsigned *mask);
/* The type member for a mask (NULL: every type). */
cJSON *lm_schema_type_of_mask(unsigned mask);
/* The types of a JSON value. */
unsigned lm_json_value_type(const cJSON *v);

lm_status lm_schema_merge(const cJSON *a, const cJSON *b, cJSON **out, lm_error *err);
/* A copy of schema without member `key` (references to the rest). */
cJSON *lm_schema_without(const cJSON *schema, const char *key);

#endif
