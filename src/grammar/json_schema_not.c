/* "not" where it has a bounded form: a schema N whose instances all fail
 * S (narrower than the complement, never wider), by De Morgan: S is the
 * conjunction of its keywords, so each keyword's own complement (within
 * every JSON value) fails S, and N is the anyOf of those loom can write:
 *   type T: the other types; const / enum: the types of none of the values,
 *     the other boolean where one is listed, the numbers between listed ones;
 *   minimum a: exclusiveMaximum a, and so on for each bound; minLength n:
 *     maxLength n-1 (maxLength n: minLength n+1), the same for items and
 *     properties;
 *   required: objects without those properties; properties {p: X}:
 *     objects with p of not-X;
 *   not X: X; anyOf: the intersection of the branches' complements.
 * Keywords without such a form (pattern, format, multipleOf, items, ...)
 * add nothing; where none has one the keyword is refused by name.  A
 * schema asserting nothing (true, {}) has the complement false. */
#include "grammar/json_schema_compiler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "grammar/json_schema_merge.h"

#define LM_NOT_MAX_PROPERTIES 8 /* properties {p: X} negated one by one, at most */

static lm_status negation_depth(json_builder *j, const cJSON *s, const cJSON **out, bool *found, int depth);

/* a new owned schema {key: value} (value taken) */
static lm_status one_keyword(json_builder *j, const char *key, cJSON *value, cJSON **out) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !value) {
        cJSON_Delete(o);
        cJSON_Delete(value);
        return nomem(j);
    }
    cJSON_AddItemToObject(o, key, value);
    TRY(lm_js_own(j, o));
    *out = o;
    return LM_OK;
}

static const struct {
    const char *key, *flipped;
    int shift; /* counts: the flipped count is n + shift; bounds: 0 */
} flips[] = {{"minimum", "exclusiveMaximum", 0},  {"maximum", "exclusiveMinimum", 0},
             {"exclusiveMinimum", "maximum", 0},  {"exclusiveMaximum", "minimum", 0},
             {"minLength", "maxLength", -1},      {"maxLength", "minLength", 1},
             {"minItems", "maxItems", -1},        {"maxItems", "minItems", 1},
             {"minProperties", "maxProperties", -1}, {"maxProperties", "minProperties", 1}};

#define LM_NOT_MAX_NUMBERS 8 /* numbers of a const / enum excluded by intervals, at most */

static int by_value(const void *a, const void *b) {
    double x = (*(const cJSON *const *)a)->valuedouble, y = (*(const cJSON *const *)b)->valuedouble;
    return x < y ? -1 : x > y;
}

/* a number written as the schema wrote it (a bound's text) */
static cJSON *number_copy(const cJSON *v) {
    cJSON *c = cJSON_CreateNumber(v->valuedouble);
    if (c && v->valuestring) c->valuestring = strdup(v->valuestring);
    return c;
}

/* The numbers other than those a const / enum k lists: the open intervals
 * between them, each a branch of exclusive bounds (which other types pass
 * vacuously) -- exact where they are few. */
static lm_status numbers_between(json_builder *j, const cJSON *k, cJSON *branches) {
    const cJSON *nums[LM_NOT_MAX_NUMBERS];
    int n = 0;
    bool is_const = strcmp(k->string, "const") == 0;
    for (const cJSON *v = is_const ? k : k->child; v; v = is_const ? NULL : v->next) {
        if (!cJSON_IsNumber(v)) continue;
        if (n == LM_NOT_MAX_NUMBERS) return LM_OK; /* many: numbers left out (narrower) */
        nums[n++] = v;
    }
    if (!n) return LM_OK;
    qsort(nums, (size_t)n, sizeof nums[0], by_value);
    for (int i = 0; i <= n; i++) {
        if (i > 0 && i < n && nums[i - 1]->valuedouble == nums[i]->valuedouble) continue;
        cJSON *o = cJSON_CreateObject();
        TRY(lm_js_own(j, o));
        if (i > 0) cJSON_AddItemToObject(o, "exclusiveMinimum", number_copy(nums[i - 1]));
        if (i < n) cJSON_AddItemToObject(o, "exclusiveMaximum", number_copy(nums[i]));
        cJSON_AddItemReferenceToArray(branches, o);
    }
    return LM_OK;
}

/* the complement of one keyword k of s, appended to branches (nothing where it has no form) */
static lm_status keyword_negation(json_builder *j, const cJSON *s, const cJSON *k, cJSON *branches, int depth) {
    cJSON *made = NULL;
    for (size_t f = 0; f < sizeof flips / sizeof flips[0]; f++) {
        if (strcmp(k->string, flips[f].key) != 0) continue;
        if (!cJSON_IsNumber(k)) return LM_OK; /* draft 4's boolean exclusive* */
        if (flips[f].shift && k->valuedouble + flips[f].shift < 0) return LM_OK; /* minLength 0: nothing fails it */
        cJSON *v = cJSON_CreateNumber(k->valuedouble + flips[f].shift);
        if (v && !flips[f].shift && k->valuestring) v->valuestring = strdup(k->valuestring); /* the bound as written */
        TRY(one_keyword(j, flips[f].flipped, v, &made));
        cJSON_AddItemReferenceToArray(branches, made);
        return LM_OK;
    }
    if (strcmp(k->string, "type") == 0 || strcmp(k->string, "enum") == 0 || strcmp(k->string, "const") == 0) {
        unsigned m = LM_JT_ALL;
        if (strcmp(k->string, "type") == 0) {
            if (!lm_schema_type_mask(k, &m)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'type' must be a type name or a list of them");
        } else {
            m = 0;
            bool is_true = false, is_false = false;
            const cJSON *v = strcmp(k->string, "const") == 0 ? k : k->child;
            for (; v; v = strcmp(k->string, "const") == 0 ? NULL : v->next) {
                unsigned t = lm_json_value_type(v);
                m |= t == LM_JT_INTEGER || t == LM_JT_FRACTION ? LM_JT_INTEGER | LM_JT_FRACTION : t;
                is_true = is_true || cJSON_IsTrue(v);
                is_false = is_false || cJSON_IsFalse(v);
            }
            TRY(numbers_between(j, k, branches));
            if (is_true != is_false) { /* the other boolean */
                cJSON *list = cJSON_CreateArray();
                if (list) cJSON_AddItemToArray(list, cJSON_CreateBool(is_false));
                TRY(one_keyword(j, "enum", list, &made));
                cJSON_AddItemReferenceToArray(branches, made);
            }
        }
        unsigned rest = LM_JT_ALL & ~m;
        if (m & LM_JT_FRACTION) rest &= ~LM_JT_INTEGER; /* "number": integers too */
        if (!(rest & ~LM_JT_FRACTION)) return LM_OK;
        /* fractions without integers have no type name: left out (narrower) */
        TRY(one_keyword(j, "type", lm_schema_type_of_mask(rest & LM_JT_INTEGER ? rest : rest & ~LM_JT_FRACTION), &made));
        cJSON_AddItemReferenceToArray(branches, made);
        return LM_OK;
    }
    if (strcmp(k->string, "required") == 0 && cJSON_IsArray(k) && k->child) {
        /* objects without them (one missing would do: all missing is narrower) */
        cJSON *o = cJSON_CreateObject(), *props = cJSON_CreateObject();
        if (!o || !props || !cJSON_AddStringToObject(o, "type", "object")) {
            cJSON_Delete(o);
            cJSON_Delete(props);
            return nomem(j);
        }
        cJSON_AddItemToObject(o, "properties", props);
        const cJSON *r;
        cJSON_ArrayForEach(r, k) if (cJSON_IsString(r) && !get(props, r->valuestring)) cJSON_AddItemToObject(props, r->valuestring, cJSON_CreateFalse());
        TRY(lm_js_own(j, o));
        cJSON_AddItemReferenceToArray(branches, o);
        return LM_OK;
    }
    if (strcmp(k->string, "properties") == 0 && cJSON_IsObject(k) && cJSON_GetArraySize(k) <= LM_NOT_MAX_PROPERTIES) {
        const cJSON *p;
        cJSON_ArrayForEach(p, k) { /* objects with p, its value failing p's schema */
            const cJSON *neg = NULL;
            bool found = false;
            TRY(negation_depth(j, p, &neg, &found, depth + 1));
            if (!found || cJSON_IsFalse(neg)) continue;
            cJSON *o = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
            if (!o || !props || !req) {
                cJSON_Delete(o);
                cJSON_Delete(props);
                cJSON_Delete(req);
                return nomem(j);
            }
            cJSON_AddStringToObject(o, "type", "object");
            cJSON_AddItemToObject(o, "properties", props);
            cJSON_AddItemReferenceToObject(props, p->string, (cJSON *)neg);
            cJSON_AddItemToObject(o, "required", req);
            cJSON_AddItemToArray(req, cJSON_CreateString(p->string));
            TRY(lm_js_own(j, o));
            cJSON_AddItemReferenceToArray(branches, o);
        }
        return LM_OK;
    }
    if (strcmp(k->string, "not") == 0) {
        cJSON_AddItemReferenceToArray(branches, (cJSON *)k);
        return LM_OK;
    }
    if (strcmp(k->string, "anyOf") == 0 && cJSON_IsArray(k)) {
        const cJSON *all = NULL, *b;
        cJSON_ArrayForEach(b, k) {
            const cJSON *neg = NULL;
            bool found = false;
            TRY(negation_depth(j, b, &neg, &found, depth + 1));
            if (!found) return LM_OK;
            if (!all) all = neg;
            else TRY(lm_js_merged(j, all, neg, &all));
        }
        if (all) cJSON_AddItemReferenceToArray(branches, (cJSON *)all);
    }
    return LM_OK;
}

static lm_status negation_depth(json_builder *j, const cJSON *s, const cJSON **out, bool *found, int depth) {
    static cJSON yes = {.type = cJSON_True}, no = {.type = cJSON_False};
    *found = true;
    if (depth > LM_SCHEMA_MAX_DEPTH)
        return lm_fail(j->err, LM_ERR_NOMEM, "JSON schema: 'not' nested deeper than %d", LM_SCHEMA_MAX_DEPTH);
    TRY(lm_js_normalize_through(j, s, &s));
    if (cJSON_IsBool(s)) {
        *out = cJSON_IsTrue(s) ? &no : &yes;
        return LM_OK;
    }
    if (!cJSON_IsObject(s)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: a schema must be an object");
    if (!lm_js_has_assertions(s, (const char *const[]){NULL})) {
        *out = &no;
        return LM_OK;
    }
    cJSON *branches = cJSON_CreateArray();
    TRY(lm_js_own(j, branches));
    for (const cJSON *k = s->child; k; k = k->next) TRY(keyword_negation(j, s, k, branches, depth));
    int n = cJSON_GetArraySize(branches);
    if (n == 0) {
        *found = false;
        return LM_OK;
    }
    if (n == 1) {
        *out = branches->child;
        return LM_OK;
    }
    cJSON *any = NULL;
    TRY(one_keyword(j, "anyOf", cJSON_CreateArrayReference(branches->child), &any));
    *out = any;
    return LM_OK;
}

lm_status lm_js_negation(json_builder *j, const cJSON *s, const cJSON **out, bool *found) {
    return negation_depth(j, s, out, found, 0);
}
