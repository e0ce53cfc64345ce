/* Intersecting JSON schemas (grammar/json_schema_merge.h). */
#include "grammar/json_schema_merge.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned mask;
} type_names[] = {{"null", LM_JT_NULL},     {"boolean", LM_JT_BOOLEAN}, {"object", LM_JT_OBJECT},
                  {"array", LM_JT_ARRAY},   {"string", LM_JT_STRING},   {"integer", LM_JT_INTEGER},
                  {"number", LM_JT_INTEGER | LM_JT_FRACTION}};

static bool one_type(const char *name, unsigned *mask) {
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
        if (strcmp(name, type_names[i].name) == 0) {
            *mask |= type_names[i].mask;
            return true;
        }
    return false;
}

bool lm_schema_type_mask(const cJSON *type, unsigned *mask) {
    *mask = 0;
    if (!type) {
        *mask = LM_JT_ALL;
        return true;
    }
    if (cJSON_IsString(type)) return one_type(type->valuestring, mask);
    if (!cJSON_IsArray(type)) return false;
    const cJSON *t;
    cJSON_ArrayForEach(t, type) if (!cJSON_IsString(t) || !one_type(t->valuestring, mask)) return false;
    return true;
}

cJSON *lm_schema_type_of_mask(unsigned mask) {
    if (mask == LM_JT_ALL) return NULL;
    cJSON *list = cJSON_CreateArray();
    if (!list) return NULL;
    for (size_t i = 0; i < 5; i++)
        if (mask & type_names[i].mask) cJSON_AddItemToArray(list, cJSON_CreateString(type_names[i].name));
    if ((mask & (LM_JT_INTEGER | LM_JT_FRACTION)) == (LM_JT_INTEGER | LM_JT_FRACTION))
        cJSON_AddItemToArray(list, cJSON_CreateString("number"));
    else if (mask & LM_JT_INTEGER)
        cJSON_AddItemToArray(list, cJSON_CreateString("integer"));
    /* fractions alone have no type name: the caller refuses them */
    return list;
}

unsigned lm_json_value_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return LM_JT_NULL;
    if (cJSON_IsBool(v)) return LM_JT_BOOLEAN;
    if (cJSON_IsObject(v)) return LM_JT_OBJECT;
    if (cJSON_IsArray(v)) return LM_JT_ARRAY;
    if (cJSON_IsString(v)) return LM_JT_STRING;
    return v->valuedouble == floor(v->valuedouble) ? LM_JT_INTEGER : LM_JT_FRACTION;
}

cJSON *lm_schema_without(const cJSON *schema, const char *key) {
    cJSON *out = cJSON_CreateObject();
    if (!out) return NULL;
    for (const cJSON *k = schema->child; k; k = k->next)
        if (strcmp(k->string, key) != 0) cJSON_AddItemReferenceToObject(out, k->string, (cJSON *)k);
    return out;
}

static bool is_in(const char *key, const char *const *names) {
    for (; *names; names++)
        if (strcmp(key, *names) == 0) return true;
    return false;
}

static const char *const larger_wins[] = {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", NULL};
static const char *const smaller_wins[] = {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", NULL};
static const char *const wrapped[] = {"items", "not", "propertyNames", "contains", "additionalItems", NULL};
static const char *const equal_only[] = {"pattern", "format", "patternProperties", "prefixItems", "oneOf",
                                         "dependencies", "dependentRequired", "dependentSchemas", "if", "then",
                                         "else", "minContains", "maxContains", "$dynamicRef", NULL};

static cJSON *all_of(const cJSON *x, const cJSON *y) {
    cJSON *o = cJSON_CreateObject(), *list = cJSON_CreateArray();
    if (!o || !list) {
        cJSON_Delete(o);
        cJSON_Delete(list);
        return NULL;
    }
    cJSON_AddItemReferenceToArray(list, (cJSON *)x);
    cJSON_AddItemReferenceToArray(list, (cJSON *)y);
    cJSON_AddItemToObject(o, "allOf", list);
    return o;
}

static cJSON *values_of(const cJSON *s) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (e) return (cJSON *)e;
    return (cJSON *)cJSON_GetObjectItemCaseSensitive(s, "const");
}

static bool contains_value(const cJSON *values, bool is_list, const cJSON *v) {
    if (!is_list) return cJSON_Compare(values, v, true);
    const cJSON *x;
    cJSON_ArrayForEach(x, values) if (cJSON_Compare(x, v, true)) return true;
    return false;
}

/* a's and b's properties, with additionalProperties as the merge says */
static lm_status merge_properties(const cJSON *a, const cJSON *b, cJSON *out, lm_error *err) {
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties");
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
    if (!pa && !pb) return LM_OK;
    if ((pa && cJSON_GetObjectItemCaseSensitive(b, "patternProperties")) ||
        (pb && cJSON_GetObjectItemCaseSensitive(a, "patternProperties")))
        return lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: 'patternProperties' in an allOf beside 'properties' is not supported");
    const cJSON *xa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
    const cJSON *xb = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    const cJSON *req_a = cJSON_GetObjectItemCaseSensitive(a, "required");
    const cJSON *req_b = cJSON_GetObjectItemCaseSensitive(b, "required");
    cJSON *props = cJSON_CreateObject();
    if (!props) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    cJSON_AddItemToObject(out, "properties", props);
    for (int side = 0; side < 2; side++) {
        const cJSON *mine = side ? pb : pa, *theirs = side ? pa : pb, *their_extra = side ? xa : xb;
        const cJSON *p;
        cJSON_ArrayForEach(p, mine) {
            if (side && cJSON_GetObjectItemCaseSensitive(theirs, p->string)) continue; /* done on side 0 */
            const cJSON *other = cJSON_GetObjectItemCaseSensitive(theirs, p->string);
            if (!other && cJSON_IsFalse(their_extra)) {
                const cJSON *r;
                bool needed = false;
                cJSON_ArrayForEach(r, req_a) needed = needed || (cJSON_IsString(r) && strcmp(r->valuestring, p->string) == 0);
                cJSON_ArrayForEach(r, req_b) needed = needed || (cJSON_IsString(r) && strcmp(r->valuestring, p->string) == 0);
                if (needed)
                    return lm_fail(err, LM_ERR_UNSUPPORTED,
                                   "JSON schema: the required property '%.64s' is excluded by an allOf branch's additionalProperties: false, so nothing matches",
                                   p->string);
                continue;
            }
            if (!other && cJSON_IsObject(their_extra)) other = their_extra;
            if (other) {
                cJSON *both = all_of(p, other);
                if (!both) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
                cJSON_AddItemToObject(props, p->string, both);
            } else {
                cJSON_AddItemReferenceToObject(props, p->string, (cJSON *)p);
            }
        }
    }
    return LM_OK;
}

static lm_status merge_extra(const cJSON *xa, const cJSON *xb, cJSON *out, lm_error *err) {
    if (!xa && !xb) return LM_OK;
    if (cJSON_IsFalse(xa) || cJSON_IsFalse(xb) || !xb || !xa || cJSON_IsTrue(xa) || cJSON_IsTrue(xb)) {
        const cJSON *keep = cJSON_IsFalse(xa) ? xa : cJSON_IsFalse(xb) ? xb : (!xa || cJSON_IsTrue(xa)) ? xb : xa;
        if (keep) cJSON_AddItemReferenceToObject(out, "additionalProperties", (cJSON *)keep);
        return LM_OK;
    }
    cJSON *both = all_of(xa, xb);
    if (!both) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    cJSON_AddItemToObject(out, "additionalProperties", both);
    return LM_OK;
}

static lm_status merge_any_of(const cJSON *la, const cJSON *lb, cJSON *out, lm_error *err) {
    int na = cJSON_GetArraySize(la), nb = cJSON_GetArraySize(lb);
    if (!cJSON_IsArray(la) || !cJSON_IsArray(lb) || na * nb > LM_SCHEMA_MAX_BRANCHES)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: two 'anyOf' of more than %d branches together in an allOf are not supported",
                       LM_SCHEMA_MAX_BRANCHES);
    cJSON *list = cJSON_CreateArray();
    if (!list) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    cJSON_AddItemToObject(out, "anyOf", list);
    const cJSON *x, *y;
    cJSON_ArrayForEach(x, la) cJSON_ArrayForEach(y, lb) {
        cJSON *both = all_of(x, y);
        if (!both) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
        cJSON_AddItemToArray(list, both);
    }
    return LM_OK;
}

/* the drafts' tuple form, items as an array: left to the key-by-key merge
 * (equal only) */
static bool old_tuple(const cJSON *s) { return cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(s, "items")); }

static bool has_prefix(const cJSON *s) { return cJSON_GetObjectItemCaseSensitive(s, "prefixItems") != NULL; }

/* item i's schema on one side: its prefixItems[i], else its items (NULL: any) */
static const cJSON *item_schema(const cJSON *s, int i) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    if (i < cJSON_GetArraySize(p)) return cJSON_GetArrayItem(p, i);
    return cJSON_GetObjectItemCaseSensitive(s, "items");
}

/* prefixItems beside prefixItems or items: item by item, the longer tuple
 * long, each item {"allOf": [a's, b's]}; items after it both sides' items */
static lm_status merge_tuples(const cJSON *a, const cJSON *b, cJSON *out, lm_error *err) {
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(a, "prefixItems"));
    int nb = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(b, "prefixItems"));
    if (nb > n) n = nb;
    cJSON *list = cJSON_CreateArray();
    if (!list) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    cJSON_AddItemToObject(out, "prefixItems", list);
    for (int side = 0; side <= 1; side++)
        for (int i = side ? n : 0; i < (side ? n + 1 : n); i++) {
            const cJSON *x = item_schema(a, i), *y = item_schema(b, i);
            if (side && !x && !y) continue; /* no items on either side: any */
            const cJSON *one = x ? x : y; /* where only one side speaks of item i */
            cJSON *item = x && y    ? all_of(x, y)
                          : !one    ? cJSON_CreateTrue()
                          : cJSON_IsObject(one) ? cJSON_CreateObjectReference(one->child) /* its members */
                                              : cJSON_Duplicate(one, false);         /* a boolean schema */
            if (!item) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
            if (side) cJSON_AddItemToObject(out, "items", item);
            else cJSON_AddItemToArray(list, item);
        }
    return LM_OK;
}

/* unevaluatedProperties / unevaluatedItems see what their own schema and
 * its subschemas evaluate: merged with another schema, they would see its
 * keywords too */
static bool has_unevaluated(const cJSON *s) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties");
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedItems");
    return (p && !cJSON_IsTrue(p)) || (i && !cJSON_IsTrue(i));
}

static lm_status merge_members(const cJSON *a, const cJSON *b, cJSON *out, lm_error *err) {
    if (has_unevaluated(a) && has_unevaluated(b)) /* the caller closes all but the owner's (json_schema_normalize.c) */
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "JSON schema: 'unevaluatedProperties'/'unevaluatedItems' in two schemas merged together is not supported");
    if ((has_prefix(a) || has_prefix(b)) && (old_tuple(a) || old_tuple(b)))
        return lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: 'prefixItems' in an allOf beside 'items' as a tuple is not supported");
    if (has_prefix(a) || has_prefix(b)) {
        lm_status tuples = merge_tuples(a, b, out, err);
        if (tuples != LM_OK) return tuples;
    }
    /* the object keywords, merged together */
    lm_status st = merge_properties(a, b, out, err);
    if (st == LM_OK)
        st = merge_extra(cJSON_GetObjectItemCaseSensitive(a, "additionalProperties"),
                         cJSON_GetObjectItemCaseSensitive(b, "additionalProperties"), out, err);
    if (st != LM_OK) return st;
    /* the values allowed: enum / const */
    const cJSON *va = values_of(a), *vb = values_of(b);
    if (va && vb) {
        cJSON *list = cJSON_CreateArray();
        if (!list) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
        cJSON_AddItemToObject(out, "enum", list);
        bool la = cJSON_GetObjectItemCaseSensitive(a, "enum") != NULL, lb = cJSON_GetObjectItemCaseSensitive(b, "enum") != NULL;
        if (la) {
            const cJSON *v;
            cJSON_ArrayForEach(v, va) if (contains_value(vb, lb, v)) cJSON_AddItemReferenceToArray(list, (cJSON *)v);
        } else if (contains_value(vb, lb, va)) {
            cJSON_AddItemReferenceToArray(list, (cJSON *)va);
        }
        if (cJSON_GetArraySize(list) == 0)
            return lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: the enum/const values of an allOf have none in common, so nothing matches");
    } else if (va || vb) {
        const cJSON *v = va ? va : vb;
        cJSON_AddItemReferenceToObject(out, (va ? cJSON_GetObjectItemCaseSensitive(a, "enum") : cJSON_GetObjectItemCaseSensitive(b, "enum")) ? "enum" : "const", (cJSON *)v);
    }
    /* type */
    const cJSON *ta = cJSON_GetObjectItemCaseSensitive(a, "type"), *tb = cJSON_GetObjectItemCaseSensitive(b, "type");
    if (ta || tb) {
        unsigned ma, mb;
        if (!lm_schema_type_mask(ta, &ma) || !lm_schema_type_mask(tb, &mb))
            return lm_fail(err, LM_ERR_INVALID, "JSON schema: 'type' must be a type name or a list of them");
        unsigned m = ma & mb;
        if (m == LM_JT_FRACTION) m = 0;
        if (!m) return lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: the types of an allOf have none in common, so nothing matches");
        cJSON *t = lm_schema_type_of_mask(m);
        if (t) cJSON_AddItemToObject(out, "type", t);
    }
    /* anyOf */
    const cJSON *aa = cJSON_GetObjectItemCaseSensitive(a, "anyOf"), *ab = cJSON_GetObjectItemCaseSensitive(b, "anyOf");
    if (aa && ab) {
        st = merge_any_of(aa, ab, out, err);
        if (st != LM_OK) return st;
    } else if (aa || ab) {
        cJSON_AddItemReferenceToObject(out, "anyOf", (cJSON *)(aa ? aa : ab));
    }
    /* required: the union */
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required"), *rb = cJSON_GetObjectItemCaseSensitive(b, "required");
    if (ra || rb) {
        cJSON *list = cJSON_CreateArray();
        if (!list) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
        cJSON_AddItemToObject(out, "required", list);
        const cJSON *r;
        cJSON_ArrayForEach(r, ra) cJSON_AddItemReferenceToArray(list, (cJSON *)r);
        cJSON_ArrayForEach(r, rb) if (!contains_value(ra, true, r)) cJSON_AddItemReferenceToArray(list, (cJSON *)r);
    }
    return LM_OK;
}

static const char *const merged_apart[] = {"properties", "additionalProperties", "enum", "const", "type", "anyOf",
                                           "required", "allOf", NULL};

lm_status lm_schema_merge(const cJSON *a, const cJSON *b, cJSON **out, lm_error *err) {
    *out = cJSON_CreateObject();
    if (!*out) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    lm_status st = merge_members(a, b, *out, err);
    cJSON *later = NULL; /* a second $ref, kept for the caller's next step */
    cJSON *rest = cJSON_CreateArray(); /* a's and b's allOf, and that $ref: the caller's next steps */
    if (!rest) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
    for (int side = 0; side < 2 && st == LM_OK; side++) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(side ? b : a, "allOf"), *x;
        cJSON_ArrayForEach(x, list) cJSON_AddItemReferenceToArray(rest, (cJSON *)x);
    }
    for (int side = 0; side < 2 && st == LM_OK; side++) {
        const cJSON *mine = side ? b : a, *theirs = side ? a : b;
        for (const cJSON *k = mine->child; k && st == LM_OK; k = k->next) {
            if (is_in(k->string, merged_apart)) continue;
            if ((has_prefix(a) || has_prefix(b)) && (strcmp(k->string, "prefixItems") == 0 || strcmp(k->string, "items") == 0))
                continue; /* merge_tuples */
            const cJSON *other = cJSON_GetObjectItemCaseSensitive(theirs, k->string);
            if (side && other) continue; /* merged on side 0 */
            if (!other) {
                cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)k);
            } else if (is_in(k->string, larger_wins) || is_in(k->string, smaller_wins)) {
                if (!cJSON_IsNumber(k) || !cJSON_IsNumber(other)) {
                    /* draft 4's boolean exclusiveMinimum/Maximum */
                    if (cJSON_Compare(k, other, true)) cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)k);
                    else st = lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: '%s' differing in an allOf is not supported", k->string);
                    continue;
                }
                bool larger = k->valuedouble >= other->valuedouble;
                const cJSON *pick = is_in(k->string, larger_wins) == larger ? k : other;
                cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)pick);
            } else if (is_in(k->string, wrapped)) {
                cJSON *both = all_of(k, other);
                if (!both) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
                else cJSON_AddItemToObject(*out, k->string, both);
            } else if (strcmp(k->string, "unevaluatedProperties") == 0 || strcmp(k->string, "unevaluatedItems") == 0) {
                if (cJSON_IsFalse(k) || cJSON_IsFalse(other)) {
                    cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)(cJSON_IsFalse(k) ? k : other));
                } else {
                    cJSON *both = all_of(k, other);
                    if (!both) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
                    else cJSON_AddItemToObject(*out, k->string, both);
                }
            } else if (strcmp(k->string, "uniqueItems") == 0) {
                cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)(cJSON_IsTrue(k) ? k : other));
            } else if (strcmp(k->string, "multipleOf") == 0) {
                double x = k->valuedouble, y = other->valuedouble;
                if (x == y || (y != 0 && fmod(x, y) == 0 && x == floor(x))) cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)k);
                else if (x != 0 && fmod(y, x) == 0 && y == floor(y)) cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)other);
                else st = lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: two 'multipleOf' in an allOf neither a multiple of the other are not supported");
            } else if (strcmp(k->string, "$ref") == 0) {
                cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)k);
                later = cJSON_CreateObject();
                if (!later) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
                else cJSON_AddItemReferenceToObject(later, "$ref", (cJSON *)other);
            } else if (is_in(k->string, equal_only)) {
                if (cJSON_Compare(k, other, true)) cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)k);
                else st = lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: two different '%s' in an allOf are not supported", k->string);
            } else {
                cJSON_AddItemReferenceToObject(*out, k->string, (cJSON *)k); /* an annotation: a's */
            }
        }
    }
    if (st == LM_OK && later) {
        cJSON_AddItemToArray(rest, later);
        later = NULL;
    }
    if (st == LM_OK && cJSON_GetArraySize(rest) > 0) {
        cJSON_AddItemToObject(*out, "allOf", rest);
        rest = NULL;
    }
    cJSON_Delete(rest);
    cJSON_Delete(later);
    if (st != LM_OK) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return st;
}
