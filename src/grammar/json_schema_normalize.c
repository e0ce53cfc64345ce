/* allOf, if / then / else and $ref beside siblings merged into one schema. */
#include "grammar/json_schema_compiler.h"

#include <stdio.h>
#include <stdlib.h>

#include "grammar/json_schema_merge.h"

/* ---- normalizing: $ref beside siblings and allOf become one schema */

/* The unevaluated* keywords see what their own schema and its in-place
 * subschemas evaluate.  Merged into another schema as one of its
 * subschemas (or beside an equal), a schema's unevaluatedProperties /
 * unevaluatedItems would see the other's keywords too, so it is first
 * "closed": with its own allOf / $ref / if merged in, what it leaves
 * unevaluated is what its properties / patternProperties (items /
 * prefixItems) do not name, which is additionalProperties (items after the
 * tuple) exactly.  A schema whose anyOf / oneOf / dependentSchemas /
 * contains would evaluate more is refused. */
static bool unevaluated_asserts(const cJSON *s, const char *key) {
    const cJSON *u = get(s, key);
    return u && !cJSON_IsTrue(u);
}

bool lm_js_unevaluated_asserts(const cJSON *s) {
    return cJSON_IsObject(s) && (unevaluated_asserts(s, "unevaluatedProperties") || unevaluated_asserts(s, "unevaluatedItems"));
}

static cJSON nothing = {.type = cJSON_False}; /* what a merge with false is */

bool lm_js_is_empty_merge(const cJSON *s) { return s == &nothing; }

static lm_status closed(json_builder *j, const cJSON *s, const cJSON **out) {
    *out = s;
    if (!cJSON_IsObject(s) || (!get(s, "unevaluatedProperties") && !get(s, "unevaluatedItems"))) return LM_OK;
    TRY(lm_js_normalize(j, s, &s));
    if (!cJSON_IsObject(s)) {
        *out = s;
        return LM_OK;
    }
    bool props = unevaluated_asserts(s, "unevaluatedProperties"), items = unevaluated_asserts(s, "unevaluatedItems");
    if ((props || items) && (get(s, "anyOf") || get(s, "oneOf") || get(s, "$ref") || (props && get(s, "dependentSchemas")) ||
                             (items && get(s, "contains")) || get(s, "not")))
        return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                       "JSON schema: 'unevaluatedProperties'/'unevaluatedItems' beside anyOf/oneOf/$ref/not/contains in a schema "
                       "merged with another (allOf, $ref beside keywords, anyOf branches) is not supported");
    const cJSON *c;
    TRY(lm_js_without(j, s, "unevaluatedProperties", &c));
    TRY(lm_js_without(j, c, "unevaluatedItems", &c));
    if (props && !get(s, "additionalProperties"))
        cJSON_AddItemReferenceToObject((cJSON *)c, "additionalProperties", (cJSON *)get(s, "unevaluatedProperties"));
    const cJSON *tuple_items = cJSON_IsArray(get(s, "items")) ? get(s, "additionalItems") : get(s, "items");
    if (items && !tuple_items)
        cJSON_AddItemReferenceToObject((cJSON *)c, cJSON_IsArray(get(s, "items")) ? "additionalItems" : "items",
                                       (cJSON *)get(s, "unevaluatedItems"));
    *out = c;
    return LM_OK;
}

lm_status lm_js_merged_scoped(json_builder *j, const cJSON *a, const cJSON *b, int owner, const cJSON **out) {
    if (cJSON_IsFalse(a) || cJSON_IsFalse(b)) { /* compile_schema refuses it where it must be generated */
        if (!lm_js_is_empty_merge(a) && !lm_js_is_empty_merge(b)) j->empty_reason[0] = 0; /* a schema's own false */
        *out = &nothing;
        return LM_OK;
    }
    if (cJSON_IsTrue(a) || cJSON_IsTrue(b)) {
        *out = cJSON_IsTrue(a) ? b : a;
        if (!(owner & (cJSON_IsTrue(a) ? LM_JS_OWNER_B : LM_JS_OWNER_A))) return closed(j, *out, out);
        return LM_OK;
    }
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: a schema must be an object");
    if (!(owner & LM_JS_OWNER_A)) TRY(closed(j, a, &a));
    if (!(owner & LM_JS_OWNER_B)) TRY(closed(j, b, &b));
    if (cJSON_IsBool(a) || cJSON_IsBool(b)) return lm_js_merged_scoped(j, a, b, LM_JS_OWNER_A | LM_JS_OWNER_B, out);
    cJSON *m = NULL;
    lm_status st = lm_schema_merge(a, b, &m, j->err);
    if (st == LM_ERR_UNSUPPORTED && j->err && strstr(j->err->message, "so nothing matches")) {
        /* no types / values in common, a required property excluded: the
         * intersection is empty, which an anyOf branch may well be */
        snprintf(j->empty_reason, sizeof j->empty_reason, "%s", j->err->message);
        *out = &nothing;
        return LM_OK;
    }
    TRY(st);
    TRY(lm_js_own(j, m));
    *out = m;
    return LM_OK;
}

lm_status lm_js_merged(json_builder *j, const cJSON *a, const cJSON *b, const cJSON **out) {
    return lm_js_merged_scoped(j, a, b, 0, out);
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
        if (get(cur, "$dynamicRef")) { /* a $ref whose resolution json_schema_refs.c knows by its text */
            if (get(cur, "$ref")) return unsupported(j, "$dynamicRef beside $ref");
            const cJSON *as_ref;
            TRY(lm_js_without(j, cur, "$dynamicRef", &as_ref));
            cJSON_AddItemReferenceToObject((cJSON *)as_ref, "$ref", (cJSON *)get(cur, "$dynamicRef"));
            cur = as_ref;
            continue;
        }
        const cJSON *refp = get(cur, "$ref"), *all = get(cur, "allOf");
        if (refp && lm_js_has_assertions(cur, ref_word)) {
            const cJSON *target, *rest;
            TRY(lm_js_resolve_ref(j, refp, &target));
            TRY(lm_js_without(j, cur, "$ref", &rest));
            TRY(lm_js_merged_scoped(j, target, rest, LM_JS_OWNER_B, &cur));
            continue;
        }
        if (get(cur, "if") || get(cur, "then") || get(cur, "else")) {
            /* (if and then) or (not-if and else), the second where "if"
             * has a bounded complement (json_schema_not.c) and no
             * unevaluated* beside would count its properties evaluated;
             * then / else without if assert nothing */
            const cJSON *base, *cond = get(cur, "if"), *then = get(cur, "then"), *other = get(cur, "else");
            TRY(lm_js_without(j, cur, "if", &base));
            TRY(lm_js_without(j, base, "then", &base));
            TRY(lm_js_without(j, base, "else", &base));
            if (!cond) {
                cur = base;
                continue;
            }
            const cJSON *when = cond, *unless = NULL;
            bool found = false;
            if (then) TRY(lm_js_merged(j, cond, then, &when));
            if (!lm_js_unevaluated_asserts(base)) TRY(lm_js_negation(j, cond, &unless, &found));
            if (found && other) TRY(lm_js_merged(j, unless, other, &unless));
            if (found && !cJSON_IsFalse(unless) && !cJSON_IsFalse(when)) {
                cJSON *either = cJSON_CreateObject(), *list = cJSON_CreateArray();
                if (!either || !list) {
                    cJSON_Delete(either);
                    cJSON_Delete(list);
                    return nomem(j);
                }
                cJSON_AddItemToObject(either, "anyOf", list);
                cJSON_AddItemReferenceToArray(list, (cJSON *)when);
                cJSON_AddItemReferenceToArray(list, (cJSON *)unless);
                TRY(lm_js_own(j, either));
                lm_status st = lm_js_merged_scoped(j, base, either, LM_JS_OWNER_A, &cur);
                if (st == LM_OK) continue;
                /* past the branch products' bound (many ifs in an allOf):
                 * the "if and then" instances alone, narrower */
                if (st != LM_ERR_UNSUPPORTED || !strstr(j->err->message, "more than")) return st;
            } else if (found && cJSON_IsFalse(when)) {
                when = unless;
            }
            TRY(lm_js_merged_scoped(j, base, when, LM_JS_OWNER_A, &cur));
            continue;
        }
        if (get(cur, "not")) {
            if (lm_js_unevaluated_asserts(cur)) /* its complement's properties would count as evaluated */
                return unsupported(j, "not beside unevaluatedProperties/unevaluatedItems");
            const cJSON *base, *neg = NULL;
            bool found = false;
            TRY(lm_js_negation(j, get(cur, "not"), &neg, &found));
            if (!found) return unsupported(j, "not (of keywords without a bounded complement: only type, const, enum, bounds, counts, required, properties, not, anyOf)");
            TRY(lm_js_without(j, cur, "not", &base));
            TRY(lm_js_merged_scoped(j, base, neg, LM_JS_OWNER_A, &cur));
            continue;
        }
        if (all) {
            if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) == 0)
                return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'allOf' must be a non-empty array");
            const cJSON *base, *item;
            TRY(lm_js_without(j, cur, "allOf", &base));
            cJSON_ArrayForEach(item, all) TRY(lm_js_merged_scoped(j, base, item, LM_JS_OWNER_A, &base));
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
