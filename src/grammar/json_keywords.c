/* Which keywords a JSON schema asserts with, counts, and the types a schema implies. */
#include "grammar/json_schema_compiler.h"

#include <math.h>

#include "grammar/json_schema_merge.h"

/* ---- keywords */

/* The assertion keywords (JSON Schema 2020-12 and drafts 4-7) loom
 * honours; every other member is an annotation or unknown, which JSON
 * Schema says to ignore ($id, title, examples, x-*, readOnly, typos...). */
static const char *const honoured[] = {
    "type", "enum", "const", "$ref", "$dynamicRef", "anyOf", "oneOf", "allOf", "not",
    "properties", "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties",
    "dependentRequired", "dependencies", "dependentSchemas",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "propertyNames", "if", "then", "else", "contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems", NULL};
/* assertions loom cannot honour: refused by name */
static const char *const refused[] = {"$recursiveRef", NULL};

bool lm_js_is_keyword_of(const char *key, const char *const *names) {
    for (const char *const *n = names; *n; n++)
        if (strcmp(key, *n) == 0) return true;
    return false;
}

const char *lm_js_refused_keyword(const cJSON *schema) {
    for (const cJSON *k = schema->child; k; k = k->next)
        if (lm_js_is_keyword_of(k->string, refused)) return k->string;
    return NULL;
}

static const char *const object_words[] = {"properties", "required", "additionalProperties", "patternProperties",
                                           "minProperties", "maxProperties", "dependentRequired", "dependencies",
                                           "dependentSchemas", "unevaluatedProperties", "propertyNames", NULL};
static const char *const array_words[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                          "uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems", NULL};
static const char *const string_words[] = {"minLength", "maxLength", "pattern", "format", NULL};
static const char *const number_words[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                           "multipleOf", NULL};

/* Whether the schema asserts anything beyond "type" (and the forms given). */
bool lm_js_has_assertions(const cJSON *schema, const char *const *besides) {
    for (const cJSON *k = schema->child; k; k = k->next)
        if ((lm_js_is_keyword_of(k->string, honoured) || lm_js_is_keyword_of(k->string, refused)) &&
            !lm_js_is_keyword_of(k->string, besides))
            return true;
    return false;
}


/* A count keyword: fallback when absent; above cap, cap where narrowing
 * is allowed (a maximum), refused where not (a minimum). */
lm_status lm_js_bounded_count(json_builder *j, const cJSON *schema, const char *key, int fallback, int cap,
                               bool is_max, int *out) {
    const cJSON *v = get(schema, key);
    *out = fallback;
    if (!v) return LM_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must be a non-negative integer", key);
    if (v->valuedouble > cap) {
        if (is_max) { /* fewer is still valid: the grammar stops at the cap */
            *out = cap;
            return LM_OK;
        }
        return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '%s' above %d is not supported", key, cap);
    }
    *out = (int)v->valuedouble;
    return LM_OK;
}

unsigned lm_js_implied_types(const cJSON *schema) {
    unsigned mask;
    if (get(schema, "type")) return lm_schema_type_mask(get(schema, "type"), &mask) ? mask : LM_JT_ALL;
    unsigned implied = 0;
    for (const cJSON *k = schema->child; k; k = k->next) {
        if (lm_js_is_keyword_of(k->string, object_words)) implied |= LM_JT_OBJECT;
        if (lm_js_is_keyword_of(k->string, array_words)) implied |= LM_JT_ARRAY;
        if (lm_js_is_keyword_of(k->string, string_words)) implied |= LM_JT_STRING;
        if (lm_js_is_keyword_of(k->string, number_words)) implied |= LM_JT_INTEGER | LM_JT_FRACTION;
    }
    if (get(schema, "enum") || get(schema, "const") || get(schema, "anyOf") || get(schema, "oneOf") || get(schema, "$ref") ||
        get(schema, "$dynamicRef"))
        return LM_JT_ALL; /* the values / branches decide */
    return implied ? implied : LM_JT_ALL;
}
