/* JSON and JSON Schema grammars (grammar/json_grammar.h): the driver. */
#include "grammar/json_grammar.h"

#include <stdlib.h>

#include "grammar/cost.h"
#include "grammar/json_schema_compiler.h"
#include "grammar/json_schema_merge.h"

/* ---- the schema */

static lm_status typed_schema(json_builder *j, const cJSON *schema, unsigned type, lm_gseq *out, int depth) {
    switch (type) {
    case LM_JT_OBJECT: return lm_js_object_schema(j, schema, out, depth);
    case LM_JT_ARRAY: return lm_js_array_schema(j, schema, out, depth);
    case LM_JT_STRING: return lm_js_string_schema(j, schema, out);
    case LM_JT_INTEGER | LM_JT_FRACTION: return lm_js_number_schema(j, schema, false, out);
    case LM_JT_INTEGER: return lm_js_number_schema(j, schema, true, out);
    case LM_JT_BOOLEAN: {
        uint32_t rule = 0;
        lm_gseq s = {0};
        TRY(lit(j, &s, "true"));
        TRY(lm_grammar_rule_of(j->b, &s, &rule, j->err));
        lm_gseq_clear(&s);
        TRY(lit(j, &s, "false"));
        lm_status st = lm_grammar_add_alt(j->b, rule, &s, j->err);
        lm_gseq_free(&s);
        ref(out, rule);
        return st;
    }
    case LM_JT_NULL: return lit(j, out, "null");
    }
    return lm_fail(j->err, LM_ERR_INTERNAL, "JSON schema: type bits %u", type);
}

lm_status lm_js_compile_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
    if (depth > LM_SCHEMA_MAX_DEPTH)
        return lm_fail(j->err, LM_ERR_NOMEM, "JSON schema nested deeper than %d", LM_SCHEMA_MAX_DEPTH);
    if (cJSON_IsBool(schema)) {
        if (lm_js_is_empty_merge(schema) && j->empty_reason[0]) /* an intersection's: say why */
            return lm_fail(j->err, LM_ERR_UNSUPPORTED, "%s", j->empty_reason);
        if (cJSON_IsFalse(schema)) return unsupported(j, "false (a schema nothing matches)");
        TRY(lm_js_any_value_rule(j));
        ref(out, j->value);
        return LM_OK;
    }
    if (!cJSON_IsObject(schema)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: a schema must be an object");
    if (lm_js_refused_keyword(schema)) return unsupported(j, lm_js_refused_keyword(schema));
    TRY(lm_js_normalize(j, schema, &schema));
    if (!cJSON_IsObject(schema)) return lm_js_compile_schema(j, schema, out, depth + 1);
    if (lm_js_refused_keyword(schema)) return unsupported(j, lm_js_refused_keyword(schema));
    const cJSON *refp = get(schema, "$ref");
    if (refp) { /* alone: one rule per target, recursion included */
        const cJSON *target;
        TRY(lm_js_resolve_ref(j, refp, &target));
        for (int i = 0; i < j->n_refs; i++)
            if (j->refs[i].target == target) {
                ref(out, j->refs[i].rule);
                return LM_OK;
            }
        if (j->n_refs >= LM_SCHEMA_MAX_REFS)
            return lm_fail(j->err, LM_ERR_NOMEM, "JSON schema: more than %d $ref targets", LM_SCHEMA_MAX_REFS);
        uint32_t rule = 0;
        TRY(lm_grammar_new_rule(j->b, &rule, j->err));
        j->refs[j->n_refs++] = (schema_ref){target, rule};
        lm_gseq body = {0};
        lm_status st = lm_js_compile_schema(j, target, &body, depth + 1);
        if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &body, j->err);
        lm_gseq_free(&body);
        ref(out, rule);
        return st;
    }
    if (get(schema, "anyOf") && get(schema, "oneOf")) return unsupported(j, "anyOf beside oneOf");
    if (get(schema, "anyOf")) return lm_js_branches_schema(j, schema, "anyOf", out, depth);
    if (get(schema, "oneOf")) return lm_js_branches_schema(j, schema, "oneOf", out, depth);
    if (get(schema, "enum") || get(schema, "const")) return lm_js_values_schema(j, schema, out, depth);
    unsigned mask;
    if (!lm_schema_type_mask(get(schema, "type"), &mask)) {
        const cJSON *type = get(schema, "type");
        if (cJSON_IsString(type)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: unknown type '%.64s'", type->valuestring);
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'type' must be a string or a non-empty list of strings");
    }
    /* without a type, the types the keywords speak of (the others would
     * pass them vacuously: generating only these is narrower) */
    mask = lm_js_implied_types(schema);
    if ((mask & (LM_JT_INTEGER | LM_JT_FRACTION)) == LM_JT_FRACTION) mask &= ~LM_JT_FRACTION; /* not integers: refused below */
    if (!mask) return unsupported(j, "a schema whose types leave nothing (not / type)");
    if (mask == LM_JT_ALL && !lm_js_has_assertions(schema, (const char *const[]){NULL})) {
        TRY(lm_js_any_value_rule(j));
        ref(out, j->value);
        return LM_OK;
    }
    static const unsigned order[] = {LM_JT_OBJECT, LM_JT_ARRAY, LM_JT_STRING, LM_JT_INTEGER | LM_JT_FRACTION,
                                     LM_JT_INTEGER, LM_JT_BOOLEAN, LM_JT_NULL};
    uint32_t rule = 0;
    int alts = 0;
    lm_gseq single = {0};
    lm_status st = LM_OK;
    for (size_t t = 0; t < sizeof order / sizeof order[0] && st == LM_OK; t++) {
        if ((mask & order[t]) != order[t]) continue;
        if (order[t] == LM_JT_INTEGER && (mask & LM_JT_FRACTION)) continue; /* within number */
        lm_gseq s = {0};
        st = typed_schema(j, schema, order[t], &s, depth);
        if (st == LM_OK && alts == 0) {
            lm_gseq_append(&single, &s);
        } else if (st == LM_OK) {
            if (alts == 1) {
                st = lm_grammar_new_rule(j->b, &rule, j->err);
                if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &single, j->err);
            }
            if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
        }
        alts++;
        lm_gseq_free(&s);
    }
    if (st == LM_OK) {
        if (alts == 1) lm_gseq_append(out, &single);
        else ref(out, rule);
    }
    lm_gseq_free(&single);
    return st;
}

lm_status lm_js_finish(json_builder *j, lm_gseq *top, const char *suffix, lm_grammar *out) {
    uint32_t root = 0;
    lm_status st = LM_OK;
    if (suffix) st = lm_gseq_literal(j->b, top, suffix, strlen(suffix), j->err);
    if (st == LM_OK) st = lm_grammar_rule_of(j->b, top, &root, j->err);
    if (st == LM_OK) st = lm_grammar_finish(j->b, root, out, j->err);
    return st;
}

lm_status lm_json_grammar(lm_json_kind kind, const char *suffix, const lm_json_options *options, lm_grammar *out,
                          lm_error *err) {
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    json_builder *j = calloc(1, sizeof *j);
    if (!j) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    j->b = &b;
    j->err = err;
    j->options = options;
    j->deadline = lm_grammar_compile_deadline();
    lm_gseq top = {0};
    lm_status st = lm_js_add_basics(j);
    if (st == LM_OK) st = lm_js_any_value_rule(j);
    if (st == LM_OK && kind == LM_JSON_OBJECT) {
        lm_gseq member = {0};
        st = lm_js_string_value(j, &member);
        gap(j, &member);
        if (st == LM_OK) st = lit(j, &member, ":");
        sep(j, &member);
        ref(&member, j->value);
        if (st == LM_OK) st = lm_js_repeated_container(j, &top, "{", "}", &member, 0, -1);
        lm_gseq_free(&member);
    } else {
        ref(&top, j->value);
    }
    if (st == LM_OK) st = lm_js_finish(j, &top, suffix, out);
    lm_gseq_free(&top);
    lm_grammar_builder_free(&b);
    free(j);
    return st;
}

lm_status lm_json_schema_grammar(const char *schema, size_t len, const char *suffix, const lm_json_options *options,
                                 uint64_t deadline_ns, lm_grammar *out, lm_error *err) {
    if (len > LM_SCHEMA_MAX_BYTES)
        return lm_fail(err, LM_ERR_NOMEM, "JSON schema larger than %d bytes", LM_SCHEMA_MAX_BYTES);
    /* cJSON cuts a string at U+0000: a const "a\u0000" would come out as "a" */
    for (size_t i = 0; i + 6 <= len; i++)
        if (schema[i] == '\\' && (schema[i + 1] == 'u' || schema[i + 1] == 'U') && memcmp(schema + i + 2, "0000", 4) == 0)
            return lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: a string holding U+0000 (\\u0000) is not supported");
    cJSON *doc = cJSON_ParseWithLength(schema, len);
    if (!doc) return lm_fail(err, LM_ERR_INVALID, "JSON schema: not valid JSON");
    const char *scan = schema;
    if (!lm_js_stash_numbers(doc, &scan, schema + len)) {
        cJSON_Delete(doc);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    json_builder *j = calloc(1, sizeof *j);
    if (!j) {
        cJSON_Delete(doc);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    j->b = &b;
    j->err = err;
    j->options = options;
    j->root = doc;
    const cJSON *version = cJSON_IsObject(doc) ? get(doc, "$schema") : NULL;
    j->draft4 = cJSON_IsString(version) && (strstr(version->valuestring, "draft-04") || strstr(version->valuestring, "draft-03"));
    j->deadline = deadline_ns;
    lm_gseq top = {0};
    lm_status st = lm_js_register_resources(j);
    if (st == LM_OK) st = lm_js_add_basics(j);
    if (st == LM_OK) st = lm_js_compile_schema(j, doc, &top, 0);
    if (st == LM_OK) st = lm_js_finish(j, &top, suffix, out);
    if (st == LM_OK) st = lm_grammar_check_cost(out, "JSON schema", deadline_ns, err);
    lm_gseq_free(&top);
    lm_grammar_builder_free(&b);
    for (int i = 0; i < j->n_owned; i++) cJSON_Delete(j->owned[i]);
    free(j->owned);
    lm_js_free_resources(j);
    free(j);
    cJSON_Delete(doc);
    return st;
}
