/* Object schemas: properties in order, required, additional and pattern properties, counts, dependencies. */
#include "grammar/json_schema_compiler.h"

#include <stdlib.h>

#include "grammar/json_schema_merge.h"

/* ---- objects */

/* A key (after its opening quote) that is none of the names, in keys
 * without escapes: a trie of the names, each node ending or going on with
 * any other character (never inside a character: a name's multi-byte
 * character is followed byte by byte). */
typedef struct {
    int first_child, next_sibling;
    uint8_t byte;
    bool terminal, boundary;
} key_node;

static lm_status key_trie_rule(json_builder *j, const key_node *nodes, int at, uint32_t *rule) {
    const key_node *x = &nodes[at];
    lm_gseq s = {0};
    lm_status st = lm_grammar_new_rule(j->b, rule, j->err);
    if (st == LM_OK && x->boundary && !x->terminal) {
        st = lit(j, &s, "\"");
        if (st == LM_OK) st = lm_grammar_add_alt(j->b, *rule, &s, j->err);
        lm_gseq_clear(&s);
    }
    lm_byte_class other = {{0}};
    lm_byte_class_add_range(&other, 0x20, 0x7F);
    other.bits['"' >> 6] &= ~(1ull << ('"' & 63));
    other.bits['\\' >> 6] &= ~(1ull << ('\\' & 63));
    bool high_child = false;
    for (int c = x->first_child; c >= 0 && st == LM_OK; c = nodes[c].next_sibling) {
        uint32_t child = 0;
        st = key_trie_rule(j, nodes, c, &child);
        if (st == LM_OK) st = lm_gseq_byte(j->b, &s, nodes[c].byte, j->err);
        lm_gseq_ref(&s, child);
        if (st == LM_OK) st = lm_grammar_add_alt(j->b, *rule, &s, j->err);
        lm_gseq_clear(&s);
        other.bits[nodes[c].byte >> 6] &= ~(1ull << (nodes[c].byte & 63));
        if (nodes[c].byte >= 0x80) high_child = true;
    }
    if (st == LM_OK && x->boundary) {
        st = lm_gseq_class(j->b, &s, &other, j->err);
        lm_gseq_ref(&s, j->key_body);
        if (st == LM_OK) st = lm_grammar_add_alt(j->b, *rule, &s, j->err);
        if (st == LM_OK && !high_child) st = lm_grammar_utf8_alts(j->b, *rule, j->key_body, j->err);
    }
    lm_gseq_free(&s);
    return st;
}

#define LM_KEY_TRIE_MAX_NAME 256 /* the trie's rules recurse per byte */

static lm_status key_not_in(json_builder *j, const cJSON *props, lm_gseq *out) {
    size_t total = 1;
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        if (strlen(p->string) > LM_KEY_TRIE_MAX_NAME)
            return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                           "JSON schema: additionalProperties (a schema) beside a property name longer than %d bytes is not supported",
                           LM_KEY_TRIE_MAX_NAME);
        total += strlen(p->string);
    }
    key_node *nodes = calloc(total, sizeof *nodes);
    if (!nodes) return nomem(j);
    int n = 1;
    nodes[0] = (key_node){-1, -1, 0, false, true};
    cJSON_ArrayForEach(p, props) {
        const uint8_t *name = (const uint8_t *)p->string;
        bool plain = true;
        for (const uint8_t *c = name; *c; c++) plain = plain && *c >= 0x20 && *c != '"' && *c != '\\';
        if (!plain) continue; /* an escape-free key cannot spell it */
        int at = 0, pending = 0;
        for (const uint8_t *c = name; *c; c++) {
            pending = *c >= 0xF0 ? 3 : *c >= 0xE0 ? 2 : *c >= 0xC0 ? 1 : pending > 0 ? pending - 1 : 0;
            int k = nodes[at].first_child;
            while (k >= 0 && nodes[k].byte != *c) k = nodes[k].next_sibling;
            if (k < 0) {
                k = n++;
                nodes[k] = (key_node){-1, nodes[at].first_child, *c, false, pending == 0};
                nodes[at].first_child = k;
            }
            at = k;
        }
        nodes[at].terminal = true;
    }
    uint32_t rule = 0;
    lm_status st = key_trie_rule(j, nodes, 0, &rule);
    free(nodes);
    if (st == LM_OK) st = lit(j, out, "\"");
    ref(out, rule);
    return st;
}

static bool name_listed(const cJSON *list, const char *name) {
    const cJSON *r;
    cJSON_ArrayForEach(r, list) if (cJSON_IsString(r) && strcmp(r->valuestring, name) == 0) return true;
    return false;
}

typedef struct {
    int n, min, max, cap; /* max -1: none; counts saturate at cap */
    lm_gseq *members;     /* [n] */
    bool *required, *skip;
    bool extras;
    lm_gseq extra_member;
    uint32_t *memo; /* [(n + 1) * 2 * (cap + 1)]: rule + 1, or UINT32_MAX: none */
} object_plan;

#define OBJ_NONE UINT32_MAX

static lm_status extras_tail(json_builder *j, object_plan *o, int c, uint32_t *rule) {
    /* c: (',' member)*;  no comma yet: (member (',' member)*)? */
    lm_gseq more = {0}, s = {0};
    gap(j, &more);
    TRY(lit(j, &more, ","));
    sep(j, &more);
    lm_gseq_append(&more, &o->extra_member);
    uint32_t star = 0;
    lm_status st = lm_grammar_star(j->b, &more, &star, j->err);
    lm_gseq_free(&more);
    if (st != LM_OK || c) {
        *rule = star;
        return st;
    }
    lm_gseq_append(&s, &o->extra_member);
    ref(&s, star);
    st = lm_grammar_rule_of(j->b, &s, rule, j->err);
    if (st == LM_OK) st = lm_grammar_add_empty_alt(j->b, *rule, j->err);
    lm_gseq_free(&s);
    return st;
}

/* The members from property k on; c: one came before (a comma first);
 * cnt: how many came. */
static lm_status object_state(json_builder *j, object_plan *o, int k, int c, int cnt, uint32_t *rule) {
    size_t at = ((size_t)k * 2 + (size_t)c) * (size_t)(o->cap + 1) + (size_t)cnt;
    if (o->memo[at]) {
        *rule = o->memo[at] == OBJ_NONE ? OBJ_NONE : o->memo[at] - 1;
        return LM_OK;
    }
    lm_gseq alts[2] = {{0}, {0}};
    int n_alts = 0;
    lm_status st = LM_OK;
    if (k == o->n) {
        if (cnt >= o->min || (o->extras && cnt + 1 >= o->min && o->min <= 1)) {
            uint32_t tail = 0;
            if (o->extras) {
                st = extras_tail(j, o, c, &tail);
                if (st == LM_OK && cnt < o->min) { /* one extra member is needed */
                    if (c) {
                        gap(j, &alts[0]);
                        st = lit(j, &alts[0], ",");
                        sep(j, &alts[0]);
                    }
                    lm_gseq_append(&alts[0], &o->extra_member);
                    uint32_t rest = 0;
                    if (st == LM_OK) st = extras_tail(j, o, 1, &rest);
                    ref(&alts[0], rest);
                } else {
                    ref(&alts[0], tail);
                }
            }
            n_alts = 1;
        }
    } else {
        if (!o->skip[k] && (o->max < 0 || cnt + 1 <= o->max)) {
            uint32_t next = 0;
            st = object_state(j, o, k + 1, 1, cnt + 1 > o->cap ? o->cap : cnt + 1, &next);
            if (st == LM_OK && next != OBJ_NONE) {
                lm_gseq *s = &alts[n_alts++];
                if (c) {
                    gap(j, s);
                    st = lit(j, s, ",");
                    sep(j, s);
                }
                lm_gseq_append(s, &o->members[k]);
                ref(s, next);
            }
        }
        if (st == LM_OK && !o->required[k]) {
            uint32_t next = 0;
            st = object_state(j, o, k + 1, c, cnt, &next);
            if (st == LM_OK && next != OBJ_NONE) ref(&alts[n_alts++], next);
        }
    }
    *rule = OBJ_NONE;
    if (st == LM_OK && n_alts) {
        st = lm_grammar_new_rule(j->b, rule, j->err);
        for (int i = 0; i < n_alts && st == LM_OK; i++) st = lm_grammar_add_alt(j->b, *rule, &alts[i], j->err);
    }
    lm_gseq_free(&alts[0]);
    lm_gseq_free(&alts[1]);
    if (st == LM_OK) o->memo[at] = *rule == OBJ_NONE ? OBJ_NONE : *rule + 1;
    return st;
}

static lm_status member_of(json_builder *j, const char *name, const cJSON *schema, lm_gseq *member, int depth) {
    cJSON key = {.type = cJSON_String, .valuestring = (char *)name};
    TRY(lm_js_json_literal(j, &key, member));
    gap(j, member);
    TRY(lit(j, member, ":"));
    sep(j, member);
    return lm_js_compile_schema(j, schema, member, depth + 1);
}

/* dependentRequired / dependencies, bounded: a property whose dependents
 * are not all required is never generated (then nothing is needed); a
 * required one makes its dependents required.  A schema dependency keeps
 * its property out; on a required property it is refused. */
static lm_status apply_dependencies(json_builder *j, const cJSON *schema, const cJSON *props, object_plan *o) {
    const char *const words[] = {"dependentRequired", "dependencies", "dependentSchemas"};
    for (int round = 0; round <= o->n; round++) {
        bool changed = false;
        for (int w = 0; w < 3; w++) {
            const cJSON *d;
            cJSON_ArrayForEach(d, get(schema, words[w])) {
                int k = 0;
                const cJSON *p = props ? props->child : NULL;
                for (; p && strcmp(p->string, d->string) != 0; p = p->next) k++;
                if (!p) continue; /* never generated */
                if (!cJSON_IsArray(d)) {
                    if (o->required[k])
                        return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                                       "JSON schema: a schema dependency of the required property '%.64s' is not supported", d->string);
                    o->skip[k] = true;
                    continue;
                }
                const cJSON *need;
                cJSON_ArrayForEach(need, d) {
                    if (!cJSON_IsString(need)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must list names", words[w]);
                    int q = 0;
                    const cJSON *pq = props->child;
                    for (; pq && strcmp(pq->string, need->valuestring) != 0; pq = pq->next) q++;
                    bool have = pq && o->required[q];
                    if (have) continue;
                    if (o->required[k]) {
                        if (!pq)
                            return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                                           "JSON schema: the property '%.64s' that '%.64s' depends on has no schema in 'properties'",
                                           need->valuestring, d->string);
                        o->required[q] = true;
                        changed = true;
                    } else if (!o->skip[k]) {
                        o->skip[k] = true;
                    }
                }
            }
        }
        if (!changed) break;
    }
    return LM_OK;
}

lm_status lm_js_object_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
    const cJSON *props = get(schema, "properties"), *required = get(schema, "required");
    const cJSON *additional = get(schema, "additionalProperties"), *patterns = get(schema, "patternProperties");
    /* allOf, $ref and if are merged into this schema (never one with
     * unevaluatedProperties: json_schema_merge.h) and anyOf / oneOf
     * branches compiled each with it: its listed properties are evaluated,
     * so unevaluatedProperties speaks of the rest; additional properties
     * must satisfy it as well (some validators count them unevaluated) */
    const cJSON *uneval = get(schema, "unevaluatedProperties");
    bool no_extras = false;
    if (uneval && !cJSON_IsTrue(uneval)) {
        if (cJSON_IsFalse(uneval)) no_extras = true;
        else if (!additional || cJSON_IsTrue(additional)) additional = uneval;
        else if (cJSON_IsObject(additional)) TRY(lm_js_merged(j, additional, uneval, &additional));
    }
    if (props && !cJSON_IsObject(props)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'properties' must be an object");
    if (required && !cJSON_IsArray(required)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'required' must be an array");
    if (patterns && !cJSON_IsObject(patterns)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'patternProperties' must be an object");
    if (additional && !cJSON_IsBool(additional) && !cJSON_IsObject(additional))
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'additionalProperties' must be a boolean or a schema");
    const cJSON *r;
    bool unlisted = false;
    cJSON_ArrayForEach(r, required) {
        if (!cJSON_IsString(r)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'required' must list strings");
        if (get(props, r->valuestring)) continue;
        if (cJSON_IsFalse(additional) && !patterns)
            return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                           "JSON schema: the required property '%.64s' is not in 'properties' and additionalProperties is false, so nothing matches",
                           r->valuestring);
        unlisted = true;
    }
    if (unlisted) {
        /* a required property without a schema of its own: listed after
         * the others, of the additionalProperties schema (or any value;
         * a pattern's schema joins it below) */
        const cJSON *copy = NULL;
        TRY(lm_js_without(j, schema, "properties", &copy));
        cJSON *listed = cJSON_CreateObject();
        if (!listed) return nomem(j);
        cJSON_AddItemToObject((cJSON *)copy, "properties", listed);
        const cJSON *p;
        cJSON_ArrayForEach(p, props) cJSON_AddItemReferenceToObject(listed, p->string, (cJSON *)p);
        cJSON_ArrayForEach(r, required) {
            if (get(listed, r->valuestring)) continue;
            if (cJSON_IsObject(additional)) cJSON_AddItemReferenceToObject(listed, r->valuestring, (cJSON *)additional);
            else cJSON_AddItemToObject(listed, r->valuestring, cJSON_CreateTrue());
        }
        return lm_js_object_schema(j, copy, out, depth);
    }
    object_plan o = {.n = cJSON_GetArraySize(props)};
    TRY(lm_js_bounded_count(j, schema, "minProperties", 0, LM_SCHEMA_MAX_REPEAT, false, &o.min));
    TRY(lm_js_bounded_count(j, schema, "maxProperties", -1, LM_SCHEMA_MAX_REPEAT, true, &o.max));
    if (o.max >= 0 && o.max < o.min) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: maxProperties is below minProperties");
    o.cap = o.max >= 0 ? o.max : o.min;
    if (o.cap > o.n + 1) o.cap = o.n + 1;
    if ((size_t)(o.n + 1) * 2 * (size_t)(o.cap + 1) > 400000)
        return unsupported(j, "minProperties/maxProperties over this many properties");
    o.members = calloc((size_t)o.n + 1, sizeof *o.members);
    o.required = calloc((size_t)o.n + 1, sizeof *o.required);
    o.skip = calloc((size_t)o.n + 1, sizeof *o.skip);
    o.memo = calloc((size_t)(o.n + 1) * 2 * (size_t)(o.cap + 1), sizeof *o.memo);
    lm_status st = o.members && o.required && o.skip && o.memo ? LM_OK : nomem(j);
    const cJSON *p = props ? props->child : NULL;
    for (int k = 0; k < o.n && st == LM_OK; k++, p = p->next) o.required[k] = name_listed(required, p->string);
    if (st == LM_OK) st = apply_dependencies(j, schema, props, &o);
    /* propertyNames: a listed name it refuses is left out; additional
     * keys are of its string grammar where nothing is listed (else none:
     * such a key could spell a listed name); false: no key at all */
    const cJSON *names = get(schema, "propertyNames"), *name_schema = NULL;
    if (st == LM_OK && names && !cJSON_IsTrue(names)) {
        cJSON *string_type = cJSON_CreateObject();
        if (string_type) cJSON_AddStringToObject(string_type, "type", "string");
        st = lm_js_own(j, string_type);
        if (st == LM_OK) st = lm_js_merged(j, names, string_type, &name_schema);
        if (st == LM_OK) st = lm_js_normalize(j, name_schema, &name_schema);
        if (st == LM_OK && (cJSON_IsFalse(name_schema) || o.n > 0 || (patterns && patterns->child))) no_extras = true;
    }
    p = props ? props->child : NULL;
    for (int k = 0; k < o.n && st == LM_OK && name_schema; k++, p = p->next) {
        cJSON *name = cJSON_CreateString(p->string);
        st = lm_js_own(j, name);
        const cJSON *values[1] = {name};
        int kept = 1;
        if (cJSON_IsFalse(name_schema)) kept = 0;
        else if (st == LM_OK) st = lm_js_filter_values(j, name_schema, values, &kept, depth);
        if (st == LM_OK && !kept) {
            if (o.required[k])
                st = lm_fail(j->err, LM_ERR_UNSUPPORTED,
                             "JSON schema: the required property '%.64s' fails propertyNames, so nothing matches", p->string);
            o.skip[k] = true;
        }
    }
    /* a listed property a pattern matches must satisfy both schemas */
    bool pattern_names_listed = false;
    p = props ? props->child : NULL;
    for (int k = 0; k < o.n && st == LM_OK; k++, p = p->next) {
        const cJSON *value = p, *pp;
        cJSON_ArrayForEach(pp, patterns) {
            bool hit = false;
            if (st == LM_OK) st = lm_js_pattern_matches(j, pp->string, p->string, &hit);
            if (st == LM_OK && hit) {
                pattern_names_listed = true;
                st = lm_js_merged(j, value, pp, &value);
            }
        }
        if (st == LM_OK) st = lm_js_normalize(j, value, &value); /* merged with a false: false */
        if (cJSON_IsFalse(value)) { /* may not be there */
            if (o.required[k])
                st = lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: the required property '%.64s' has the schema false, so nothing matches", p->string);
            o.skip[k] = true;
        }
        if (st == LM_OK && !o.skip[k]) st = member_of(j, p->string, value, &o.members[k], depth);
    }
    /* additional members, after the listed ones: keys of a pattern (none
     * of which is a listed name), else keys no listed name spells; with
     * maxProperties, none */
    if (st == LM_OK && o.max < 0 && !no_extras) {
        if (patterns && patterns->child) {
            if (!pattern_names_listed) {
                /* a key of the first pattern, a value valid for every pattern's schema (narrower, never wider) */
                const cJSON *value = patterns->child, *pp;
                for (pp = patterns->child->next; pp && st == LM_OK; pp = pp->next) st = lm_js_merged(j, value, pp, &value);
                if (st == LM_OK && cJSON_IsObject(uneval)) st = lm_js_merged(j, value, uneval, &value);
                if (st == LM_OK) st = lit(j, &o.extra_member, "\"");
                if (st == LM_OK) st = lm_js_pattern_language(j, patterns->child->string, &o.extra_member, "JSON schema 'patternProperties'");
                if (st == LM_OK) st = lit(j, &o.extra_member, "\"");
                gap(j, &o.extra_member);
                if (st == LM_OK) st = lit(j, &o.extra_member, ":");
                sep(j, &o.extra_member);
                if (st == LM_OK) st = lm_js_compile_schema(j, value, &o.extra_member, depth + 1);
                o.extras = st == LM_OK;
            }
        } else if (cJSON_IsObject(additional) || (o.n == 0 && o.min > 0 && !cJSON_IsFalse(additional))) {
            if (o.n) st = key_not_in(j, props, &o.extra_member);
            else if (name_schema) st = lm_js_compile_schema(j, name_schema, &o.extra_member, depth + 1);
            else st = lm_js_string_value(j, &o.extra_member);
            gap(j, &o.extra_member);
            if (st == LM_OK) st = lit(j, &o.extra_member, ":");
            sep(j, &o.extra_member);
            if (st == LM_OK) {
                if (cJSON_IsObject(additional)) {
                    st = lm_js_compile_schema(j, additional, &o.extra_member, depth + 1);
                } else {
                    st = lm_js_any_value_rule(j);
                    ref(&o.extra_member, j->value);
                }
            }
            o.extras = st == LM_OK;
        }
    }
    uint32_t first = OBJ_NONE;
    if (st == LM_OK) st = object_state(j, &o, 0, 0, 0, &first);
    if (st == LM_OK && first == OBJ_NONE)
        st = lm_fail(j->err, LM_ERR_UNSUPPORTED,
                     "JSON schema: no object of its listed properties satisfies minProperties/maxProperties");
    if (st == LM_OK) st = lit(j, out, "{");
    gap(j, out);
    if (st == LM_OK) ref(out, first);
    gap(j, out);
    if (st == LM_OK) st = lit(j, out, "}");
    for (int k = 0; o.members && k < o.n; k++) lm_gseq_free(&o.members[k]);
    lm_gseq_free(&o.extra_member);
    free(o.members);
    free(o.required);
    free(o.skip);
    free(o.memo);
    return st;
}
