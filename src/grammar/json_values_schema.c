/* enum / const: written exactly, filtered by the keywords beside them. */
#include "grammar/json_schema_compiler.h"

#include <stdlib.h>

#include "grammar/json_schema_merge.h"
#include "grammar/matcher.h"

/* ---- a value against a schema: the schema's own grammar, standalone */


bool lm_js_grammar_accepts(const lm_grammar *g, const char *s, lm_error *err) {
    lm_gmatcher m;
    if (lm_gmatcher_init(&m, g, err) != LM_OK) return false;
    lm_gstate a = {0}, b = {0};
    bool ok = lm_gmatcher_start(&m, &a);
    for (size_t i = 0; ok && s[i]; i++) {
        ok = lm_gmatcher_advance(&m, &a, (uint8_t)s[i], &b);
        lm_gstate t = a;
        a = b;
        b = t;
    }
    ok = ok && lm_gstate_complete(&a) && !m.failed;
    lm_gstate_free(&a);
    lm_gstate_free(&b);
    lm_gmatcher_free(&m);
    return ok;
}

/* Keeps of values (n of them) those the schema's grammar accepts: what
 * an enum / const beside other keywords may generate (the grammar only
 * narrows, so a value it accepts is valid). */
lm_status lm_js_filter_values(json_builder *j, const cJSON *schema, const cJSON **values, int *n, int depth) {
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    json_builder *sub = calloc(1, sizeof *sub);
    if (!sub) return nomem(j);
    sub->b = &b;
    sub->err = j->err;
    sub->root = j->root;
    sub->resources = j->resources;
    sub->n_resources = j->n_resources;
    sub->ref_bases = j->ref_bases;
    sub->n_ref_bases = j->n_ref_bases;
    sub->draft4 = j->draft4;
    sub->deadline = j->deadline;
    lm_gseq top = {0};
    lm_grammar g = {0};
    lm_status st = lm_js_add_basics(sub);
    if (st == LM_OK) st = lm_js_compile_schema(sub, schema, &top, depth + 1);
    if (st == LM_OK) st = lm_js_finish(sub, &top, NULL, &g);
    int kept = 0;
    for (int i = 0; i < *n && st == LM_OK; i++) {
        char *text = lm_js_exact_text(values[i]);
        if (!text) st = nomem(j);
        else if (lm_js_grammar_accepts(&g, text, j->err)) values[kept++] = values[i];
        free(text);
    }
    *n = kept;
    lm_gseq_free(&top);
    lm_grammar_free(&g);
    lm_grammar_builder_free(&b);
    for (int i = 0; i < sub->n_owned; i++) cJSON_Delete(sub->owned[i]);
    free(sub->owned);
    free(sub);
    return st;
}


/* With "type" (and nothing else) beside "enum" or "const", every value
 * must be of one of its types: {"type": "integer", "enum": ["x"]} matches
 * nothing, and generating "x" for it would break the schema. */
static lm_status check_values_typed(json_builder *j, const cJSON *type, const cJSON *const *values, int n,
                                    bool is_enum) {
    unsigned mask;
    if (!lm_schema_type_mask(type, &mask))
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'type' must be a string or a list of strings");
    for (int i = 0; i < n; i++) {
        if (lm_json_value_type(values[i]) & mask) continue;
        char *shown = lm_js_exact_text(values[i]);
        char *type_text = cJSON_PrintUnformatted(type);
        lm_fail(j->err, LM_ERR_INVALID, "JSON schema: the %s value %.60s is not of type %.80s, so nothing matches",
                is_enum ? "enum" : "const", shown ? shown : "?", type_text ? type_text : "?");
        free(shown);
        cJSON_free(type_text);
        return LM_ERR_INVALID;
    }
    return LM_OK;
}

lm_status lm_js_values_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
    const cJSON *enumv = get(schema, "enum"), *constv = get(schema, "const");
    if (enumv && (!cJSON_IsArray(enumv) || cJSON_GetArraySize(enumv) == 0))
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'enum' must be a non-empty array");
    int n = constv ? 1 : cJSON_GetArraySize(enumv);
    const cJSON **values = malloc(sizeof *values * (size_t)n);
    if (!values) return nomem(j);
    if (constv) values[0] = constv;
    else {
        int i = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, enumv) values[i++] = v;
    }
    lm_status st = LM_OK;
    if (enumv && constv) { /* both: the const, if the enum has it */
        bool in = false;
        const cJSON *v;
        cJSON_ArrayForEach(v, enumv) in = in || cJSON_Compare(v, constv, true);
        if (!in) n = 0;
    }
    if (lm_js_has_assertions(schema, (const char *const[]){"enum", "const", "type", NULL})) {
        /* other keywords beside: the values their grammar accepts */
        const cJSON *rest = NULL;
        st = lm_js_without(j, schema, "enum", &rest);
        if (st == LM_OK) st = lm_js_without(j, rest, "const", &rest);
        if (st == LM_OK) st = lm_js_filter_values(j, rest, values, &n, depth);
    } else if (get(schema, "type")) {
        st = check_values_typed(j, get(schema, "type"), values, n, enumv != NULL);
    }
    if (st == LM_OK && n == 0)
        st = lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: no enum/const value satisfies the keywords beside it");
    if (st == LM_OK) st = n == 1 ? lm_js_json_literal(j, values[0], out) : lm_js_literals(j, values, n, out);
    free(values);
    return st;
}
