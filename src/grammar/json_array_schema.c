/* Array schemas: items, prefixItems, counts, uniqueItems, contains. */
#include "grammar/json_schema_compiler.h"

#include <stdlib.h>

#include "grammar/json_schema_merge.h"

/* ---- arrays */

/* The values an item schema allows, when it lists them (enum, const,
 * boolean, null): unique items are then a subsequence of that list. */
static int listed_values(const cJSON *items, const cJSON **values, int cap) {
    if (!cJSON_IsObject(items)) return 0;
    static cJSON t = {.type = cJSON_True}, f = {.type = cJSON_False}, nul = {.type = cJSON_NULL};
    const cJSON *e = get(items, "enum"), *c = get(items, "const"), *type = get(items, "type");
    if (lm_js_has_assertions(items, (const char *const[]){"enum", "const", "type", NULL})) return 0;
    int n = 0;
    if (c) values[n++] = c;
    else if (e) {
        const cJSON *v;
        cJSON_ArrayForEach(v, e) {
            if (n == cap) return 0;
            values[n++] = v;
        }
    } else if (cJSON_IsString(type) && strcmp(type->valuestring, "boolean") == 0) {
        values[n++] = &t;
        values[n++] = &f;
    } else if (cJSON_IsString(type) && strcmp(type->valuestring, "null") == 0) {
        values[n++] = &nul;
    }
    /* with a type beside, each value must have it */
    unsigned mask;
    if (!lm_schema_type_mask(type, &mask)) return 0;
    for (int i = 0; i < n; i++)
        if (!(lm_json_value_type(values[i]) & mask)) return 0;
    return n;
}

#define LM_UNIQUE_MAX_VALUES 32

/* unique items of listed values: in the list's order, each at most once */
static lm_status unique_listed(json_builder *j, const cJSON **values, int n, int min, int max, lm_gseq *out) {
    if (max < 0 || max > n) max = n;
    if (min > max) return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: minItems above the distinct values uniqueItems allows");
    /* U[i][c]: values i.. may come, c came so far; rule + 1 */
    uint32_t *u = calloc((size_t)(n + 1) * (size_t)(max + 1), sizeof *u);
    if (!u) return nomem(j);
    lm_status st = LM_OK;
    for (int i = n; i >= 0 && st == LM_OK; i--)
        for (int c = max; c >= 0 && st == LM_OK; c--) {
            uint32_t rule = 0;
            st = lm_grammar_new_rule(j->b, &rule, j->err);
            bool any = false;
            if (st == LM_OK && c >= min) {
                lm_gseq s = {0};
                gap(j, &s);
                st = lit(j, &s, "]");
                if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
                lm_gseq_free(&s);
                any = true;
            }
            for (int k = i; k < n && c < max && st == LM_OK; k++) {
                uint32_t next = u[(size_t)(k + 1) * (size_t)(max + 1) + (size_t)(c + 1)];
                if (!next) continue;
                lm_gseq s = {0};
                if (c) {
                    gap(j, &s);
                    st = lit(j, &s, ",");
                    sep(j, &s);
                }
                if (st == LM_OK) st = lm_js_json_literal(j, values[k], &s);
                ref(&s, next - 1);
                if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
                lm_gseq_free(&s);
                any = true;
            }
            if (st == LM_OK && !any) { /* unreachable states still need an alternative: one nothing reaches */
                lm_gseq s = {0};
                st = lit(j, &s, "]");
                if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
                lm_gseq_free(&s);
                continue;
            }
            u[(size_t)i * (size_t)(max + 1) + (size_t)c] = rule + 1;
        }
    if (st == LM_OK) st = lit(j, out, "[");
    gap(j, out);
    if (st == LM_OK) ref(out, u[0] - 1);
    free(u);
    return st;
}

lm_status lm_js_array_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
    const cJSON *items = get(schema, "items"), *prefix = get(schema, "prefixItems");
    const cJSON *rest = items;
    if (cJSON_IsArray(items)) { /* drafts 4-2019: items as a tuple, additionalItems after it */
        prefix = items;
        rest = get(schema, "additionalItems");
    }
    const cJSON *uneval = get(schema, "unevaluatedItems"); /* as unevaluatedProperties above */
    if (uneval && !cJSON_IsTrue(uneval)) {
        if (!rest || cJSON_IsTrue(rest) || cJSON_IsFalse(uneval)) rest = uneval;
        else if (cJSON_IsObject(rest)) TRY(lm_js_merged(j, rest, uneval, &rest));
    }
    if (prefix && !cJSON_IsArray(prefix)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'prefixItems' must be an array");
    const cJSON *contains = get(schema, "contains");
    int most = -1; /* maxContains */
    if (contains) {
        /* at least minContains (default 1) items of it: after the tuple
         * the first ones, of contains and items together (narrower: others
         * may come later); with maxContains every item is of contains and
         * items both, as many as it allows (narrower) */
        int need = 1;
        TRY(lm_js_bounded_count(j, schema, "minContains", 1, LM_SCHEMA_MAX_REPEAT, false, &need));
        TRY(lm_js_bounded_count(j, schema, "maxContains", -1, LM_SCHEMA_MAX_REPEAT, true, &most));
        if (most >= 0 && most < need)
            return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: maxContains below minContains, so nothing matches");
        const cJSON *first = contains;
        if (rest) TRY(lm_js_merged(j, rest, contains, &first));
        if (most >= 0) {
            if (prefix) return unsupported(j, "maxContains beside prefixItems");
            static cJSON none = {.type = cJSON_False}; /* maxContains 0: no item of contains, so none (narrower) */
            rest = most > 0 ? first : &none;
        } else if (need > 0) {
            cJSON *tuple = cJSON_CreateArray();
            TRY(lm_js_own(j, tuple));
            const cJSON *p;
            cJSON_ArrayForEach(p, prefix) cJSON_AddItemReferenceToArray(tuple, (cJSON *)p);
            if (cJSON_GetArraySize(tuple) + need > LM_SCHEMA_MAX_REPEAT)
                return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: prefixItems and minContains above %d items", LM_SCHEMA_MAX_REPEAT);
            for (int i = 0; i < need; i++) cJSON_AddItemReferenceToArray(tuple, (cJSON *)first);
            prefix = tuple;
            if (!rest) rest = cJSON_IsTrue(contains) ? contains : NULL;
        }
        if (most >= 0 && need > 0) { /* at least need items, each of contains */
            cJSON *tuple = cJSON_CreateArray();
            TRY(lm_js_own(j, tuple));
            for (int i = 0; i < need; i++) cJSON_AddItemReferenceToArray(tuple, (cJSON *)first);
            prefix = tuple;
        }
    }
    int min, max;
    TRY(lm_js_bounded_count(j, schema, "minItems", 0, LM_SCHEMA_MAX_REPEAT, false, &min));
    TRY(lm_js_bounded_count(j, schema, "maxItems", -1, LM_SCHEMA_MAX_REPEAT, true, &max));
    if (max >= 0 && max < min) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: maxItems is below minItems");
    if (most >= 0 && (max < 0 || max > most)) max = most;
    if (rest) TRY(lm_js_normalize(j, rest, &rest)); /* merged with a false: false */
    int k = cJSON_GetArraySize(prefix);
    if (contains && k > min) min = k;
    for (int i = 0; i < k; i++) { /* a false item i: arrays end before it */
        const cJSON *item = cJSON_GetArrayItem(prefix, i);
        TRY(lm_js_normalize(j, item, &item));
        if (!cJSON_IsFalse(item)) continue;
        if (i < min) return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: minItems reaches a prefixItems item false, so nothing matches");
        k = i;
        if (max < 0 || max > i) max = i;
        break;
    }
    if (cJSON_IsFalse(rest) && (max < 0 || max > k)) max = k;
    if (max >= 0 && max < min) return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: minItems above the items the schema allows");
    const cJSON *unique = get(schema, "uniqueItems");
    if (cJSON_IsTrue(unique) && (max < 0 || max > 1)) {
        const cJSON *values[LM_UNIQUE_MAX_VALUES];
        int n = k ? 0 : listed_values(rest, values, LM_UNIQUE_MAX_VALUES);
        if (n > 0) return unique_listed(j, values, n, min, max, out);
        /* any items: at most one is unique (narrower, never wider) */
        if (min > 1) return unsupported(j, "uniqueItems with minItems above 1 (items other than listed values)");
        max = 1;
    }
    /* item i's schema: prefix[i], then rest (absent or true: any value) */
    lm_gseq rest_item = {0};
    lm_status st = LM_OK;
    bool rest_any = !rest || cJSON_IsTrue(rest);
    if (!cJSON_IsFalse(rest) && (max < 0 || max > k)) {
        if (rest_any) {
            st = lm_js_any_value_rule(j);
            ref(&rest_item, j->value);
        } else {
            st = lm_js_compile_schema(j, rest, &rest_item, depth + 1);
        }
    }
    if (st == LM_OK && k == 0) {
        st = lm_js_repeated_container(j, out, "[", "]", &rest_item, min, max);
        lm_gseq_free(&rest_item);
        return st;
    }
    /* a chain: state i (items so far) closes if i >= min, or goes on */
    int last = max >= 0 ? max : (min > k ? min : k);
    uint32_t next = LM_GRAMMAR_NO_RULE;
    for (int i = last; i >= 0 && st == LM_OK; i--) {
        uint32_t rule = 0;
        st = lm_grammar_new_rule(j->b, &rule, j->err);
        if (st == LM_OK && i >= min) {
            lm_gseq s = {0};
            gap(j, &s);
            st = lit(j, &s, "]");
            if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
            lm_gseq_free(&s);
        }
        lm_gseq s = {0};
        if (i) {
            gap(j, &s);
            if (st == LM_OK) st = lit(j, &s, ",");
            sep(j, &s);
        }
        if (i < last && st == LM_OK) {
            if (i < k) st = lm_js_compile_schema(j, cJSON_GetArrayItem(prefix, i), &s, depth + 1);
            else lm_gseq_append(&s, &rest_item);
            ref(&s, next);
            if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
        } else if (i == last && max < 0 && st == LM_OK) {
            /* past the tuple and minItems: any number more */
            lm_gseq more = {0};
            gap(j, &more);
            st = lit(j, &more, ",");
            sep(j, &more);
            lm_gseq_append(&more, &rest_item);
            uint32_t star = 0;
            if (st == LM_OK) st = lm_grammar_star(j->b, &more, &star, j->err);
            lm_gseq_free(&more);
            lm_gseq_clear(&s);
            lm_gseq_append(&s, &rest_item);
            ref(&s, star);
            gap(j, &s);
            if (st == LM_OK) st = lit(j, &s, "]");
            if (i) {
                /* after item i-1: a comma, the item, more, the end */
                lm_gseq t = {0};
                gap(j, &t);
                if (st == LM_OK) st = lit(j, &t, ",");
                sep(j, &t);
                lm_gseq_append(&t, &s);
                lm_gseq_free(&s);
                s = t;
            }
            if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
        }
        lm_gseq_free(&s);
        next = rule;
    }
    lm_gseq_free(&rest_item);
    if (st == LM_OK) st = lit(j, out, "[");
    gap(j, out);
    if (st == LM_OK) ref(out, next);
    return st;
}
