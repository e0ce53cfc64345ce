/* allOf, if / then / else and $ref beside siblings merged into one schema. */
#include "grammar/json_schema_compiler.h"

#include <stdlib.h>

#include "grammar/json_schema_merge.h"

/* ---- normalizing: $ref beside siblings and allOf become one schema */

lm_status lm_js_merged(json_builder *j, const cJSON *a, const cJSON *b, const cJSON **out) {
    if (cJSON_IsFalse(a) || cJSON_IsFalse(b)) return unsupported(j, "false (a schema nothing matches)");
    if (cJSON_IsTrue(a) || cJSON_IsTrue(b)) {
        *out = cJSON_IsTrue(a) ? b : a;
        return LM_OK;
    }
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: a schema must be an object");
    cJSON *m = NULL;
    TRY(lm_schema_merge(a, b, &m, j->err));
    TRY(lm_js_own(j, m));
    *out = m;
    return LM_OK;
}

lm_status lm_js_without(json_builder *j, const cJSON *schema, const char *key, const cJSON **out) {
    cJSON *w = lm_schema_without(schema, key);
    TRY(lm_js_own(j, w));
    *out = w;
    return LM_OK;
}

static const char *const ref_word[] = {"$ref", NULL};

/* schema with its allOf and any $ref beside sibling keywords merged in;
 * a $ref alone is left for the caller (its rule is shared, recursion
 * included). */
lm_status lm_js_normalize(json_builder *j, const cJSON *schema, const cJSON **out) {
    const cJSON *cur = schema;
    for (int step = 0;; step++) {
        if (step > LM_SCHEMA_MAX_DEPTH)
            return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: $ref / allOf merged more than %d times (a recursive $ref beside other keywords?)",
                           LM_SCHEMA_MAX_DEPTH);
        if (!cJSON_IsObject(cur)) break;
        const cJSON *refp = get(cur, "$ref"), *all = get(cur, "allOf");
        if (refp && lm_js_has_assertions(cur, ref_word)) {
            const cJSON *target, *rest;
            TRY(lm_js_resolve_ref(j, refp, &target));
            TRY(lm_js_without(j, cur, "$ref", &rest));
            TRY(lm_js_merged(j, target, rest, &cur));
            continue;
        }
        if (get(cur, "if") || get(cur, "then") || get(cur, "else")) {
            /* if / then / else, bounded: instances of "if" and "then"
             * (narrower: those of "else" alone are never generated) */
            const cJSON *base, *cond = get(cur, "if"), *then = get(cur, "then");
            TRY(lm_js_without(j, cur, "if", &base));
            TRY(lm_js_without(j, base, "then", &base));
            TRY(lm_js_without(j, base, "else", &base));
            if (cond) TRY(lm_js_merged(j, base, cond, &base));
            if (cond && then) TRY(lm_js_merged(j, base, then, &base));
            cur = base;
            continue;
        }
        if (all) {
            if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) == 0)
                return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'allOf' must be a non-empty array");
            const cJSON *base, *item;
            TRY(lm_js_without(j, cur, "allOf", &base));
            cJSON_ArrayForEach(item, all) TRY(lm_js_merged(j, base, item, &base));
            cur = base;
            continue;
        }
        break;
    }
    *out = cur;
    return LM_OK;
}

/* For analysis (oneOf): a schema normalized, a $ref alone followed. */
lm_status lm_js_normalize_through(json_builder *j, const cJSON *schema, const cJSON **out) {
    for (int step = 0; step <= LM_SCHEMA_MAX_DEPTH; step++) {
        TRY(lm_js_normalize(j, schema, &schema));
        const cJSON *refp = cJSON_IsObject(schema) ? get(schema, "$ref") : NULL;
        if (!refp) {
            *out = schema;
            return LM_OK;
        }
        TRY(lm_js_resolve_ref(j, refp, &schema));
    }
    return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: a $ref chain longer than %d", LM_SCHEMA_MAX_DEPTH);
}
