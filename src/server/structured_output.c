/* Reading the structured-output fields (server/structured_output.h). */
#include "server/structured_output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compiled.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_grammar.h"

/* The JSON whitespace a request asks for (loom_grammar_spec's fields). */
typedef struct {
    loom_json_whitespace mode;
    const char *pattern;
} json_whitespace;

static lm_status fail(char *param, size_t size, const char *name, lm_error *err, const char *fmt, const char *detail) {
    if (param && size) snprintf(param, size, "%s", name);
    return lm_fail(err, LM_ERR_INVALID, fmt, name, detail ? detail : "");
}

/* Compiles spec; a compile error becomes the field's 400. */
static lm_status compile(const loom_grammar_spec *spec, const char *name, lm_grammar_cache *cache, loom_grammar **out,
                         char *param,
                         size_t size, lm_error *err) {
    char message[LM_ERROR_MESSAGE_MAX - 64];
    int rc = cache ? lm_grammar_cache_compile(cache, spec, out, message, sizeof message)
                   : loom_grammar_compile(spec, out, message, sizeof message);
    if (rc == LOOM_OK) return LM_OK;
    return fail(param, size, name, err, "'%s': %s", message);
}

static lm_status schema_grammar(const cJSON *schema, const json_whitespace *ws, const char *name,
                                lm_grammar_cache *cache, loom_grammar **out, char *param, size_t size, lm_error *err) {
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return fail(param, size, name, err, "'%s' must be a JSON schema (an object)%s", NULL);
    /* numbers in their shortest exact text: cJSON's own printing rounds
     * 9007199254740992 to 9.00719925474099e+15 */
    char *text = lm_json_text_exact(schema);
    if (!text) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_SCHEMA, .text = text, .text_len = strlen(text),
                              .whitespace = ws->mode, .whitespace_pattern = ws->pattern};
    lm_status st = compile(&spec, name, cache, out, param, size, err);
    free(text);
    return st;
}

static lm_status choice_grammar(const cJSON *list, const char *name, lm_grammar_cache *cache, loom_grammar **out,
                                char *param, size_t size,
                                lm_error *err) {
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
    if (n <= 0 || n > LM_GRAMMAR_MAX_CHOICES)
        return fail(param, size, name, err, "'%s' must be a non-empty list of strings (at most 4096)%s", NULL);
    const char **choices = calloc((size_t)n, sizeof *choices);
    if (!choices) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        if (!cJSON_IsString(item)) {
            free(choices);
            return fail(param, size, name, err, "'%s' must be a non-empty list of strings%s", NULL);
        }
        choices[i++] = item->valuestring;
    }
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_CHOICE, .choices = choices, .n_choices = n};
    lm_status st = compile(&spec, name, cache, out, param, size, err);
    free(choices);
    return st;
}

static lm_status regex_grammar(const cJSON *pattern, const char *name, lm_grammar_cache *cache, loom_grammar **out,
                               char *param, size_t size,
                               lm_error *err) {
    if (!cJSON_IsString(pattern)) return fail(param, size, name, err, "'%s' must be a string%s", NULL);
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_REGEX, .text = pattern->valuestring,
                              .text_len = strlen(pattern->valuestring)};
    return compile(&spec, name, cache, out, param, size, err);
}

/* The GBNF fields: vLLM's guided_grammar and structured_outputs.grammar,
 * llama-server's grammar.  null or "" is no grammar (llama-server's clients
 * send "grammar": ""); several given must be the same text.  *chosen: the
 * string item, NULL when none; *name: its field. */
static lm_status grammar_fields(const cJSON *body, const cJSON *so_grammar, const cJSON **chosen, const char **name,
                                char *param, size_t size, lm_error *err) {
    const cJSON *given[3] = {cJSON_GetObjectItemCaseSensitive(body, "guided_grammar"), so_grammar,
                             cJSON_GetObjectItemCaseSensitive(body, "grammar")};
    static const char *const names[3] = {"guided_grammar", "structured_outputs.grammar", "grammar"};
    *chosen = NULL;
    *name = NULL;
    for (int k = 0; k < 3; k++) {
        const cJSON *g = given[k];
        if (!g || cJSON_IsNull(g)) continue;
        if (!cJSON_IsString(g))
            return fail(param, size, names[k], err, "'%s' must be a string: a GBNF grammar (`root ::= ...`)%s", NULL);
        if (!g->valuestring[0]) continue;
        if (*chosen && strcmp((*chosen)->valuestring, g->valuestring) != 0)
            return fail(param, size, names[k], err, "'%s' and '%s' give different grammars: give one", *name);
        if (!*chosen) *chosen = g, *name = names[k];
    }
    return LM_OK;
}

static lm_status gbnf_grammar(const cJSON *text, const char *name, lm_grammar_cache *cache, loom_grammar **out,
                              char *param, size_t size, lm_error *err) {
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_GBNF, .text = text->valuestring,
                              .text_len = strlen(text->valuestring)};
    return compile(&spec, name, cache, out, param, size, err);
}

static lm_status response_format(const cJSON *rf, const json_whitespace *ws, lm_grammar_cache *cache,
                                 loom_grammar **out, char *param, size_t size, lm_error *err) {
    const char *name = "response_format";
    if (!cJSON_IsObject(rf)) return fail(param, size, name, err, "'%s' must be an object with a 'type'%s", NULL);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
    if (!cJSON_IsString(type))
        return fail(param, size, name, err, "'%s' needs a 'type': \"text\", \"json_object\" or \"json_schema\"%s", NULL);
    if (strcmp(type->valuestring, "text") == 0) return LM_OK;
    if (strcmp(type->valuestring, "json_object") == 0) {
        loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_OBJECT, .whitespace = ws->mode,
                                  .whitespace_pattern = ws->pattern};
        return compile(&spec, name, cache, out, param, size, err);
    }
    if (strcmp(type->valuestring, "json_schema") != 0)
        return fail(param, size, name, err,
                    "'%s' type must be \"text\", \"json_object\" or \"json_schema\"%s", NULL);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return fail(param, size, name, err, "'%s' of type json_schema needs a 'json_schema' object%s", NULL);
    const cJSON *schema_name = cJSON_GetObjectItemCaseSensitive(js, "name");
    if (schema_name && !cJSON_IsString(schema_name))
        return fail(param, size, name, err, "'%s': json_schema.name must be a string%s", NULL);
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
    if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
        return fail(param, size, name, err, "'%s': json_schema.strict must be a boolean%s", NULL);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (!schema) { /* OpenAI: no schema means any JSON object */
        loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_OBJECT, .whitespace = ws->mode,
                                  .whitespace_pattern = ws->pattern};
        return compile(&spec, name, cache, out, param, size, err);
    }
    return schema_grammar(schema, ws, name, cache, out, param, size, err);
}

/* disable_any_whitespace and the whitespace pattern, at the top level or
 * in structured_outputs (vLLM's names and meaning; loom's default, when
 * neither is given, is compact) */
static lm_status whitespace_fields(const cJSON *body, const cJSON *so, json_whitespace *ws, char *param, size_t size,
                                   lm_error *err) {
    ws->mode = LOOM_JSON_WHITESPACE_COMPACT;
    ws->pattern = NULL;
    for (int at = 0; at < 2; at++) {
        const cJSON *where = at ? so : body;
        if (!where) continue;
        const char *pattern_name = at ? "structured_outputs.whitespace_pattern" : "guided_whitespace_pattern";
        const cJSON *flag = cJSON_GetObjectItemCaseSensitive(where, "disable_any_whitespace");
        const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(where, at ? "whitespace_pattern" : "guided_whitespace_pattern");
        if (flag && !cJSON_IsNull(flag)) {
            if (!cJSON_IsBool(flag))
                return fail(param, size, at ? "structured_outputs.disable_any_whitespace" : "disable_any_whitespace", err,
                            "'%s' must be a boolean%s", NULL);
            ws->mode = cJSON_IsTrue(flag) ? LOOM_JSON_WHITESPACE_COMPACT : LOOM_JSON_WHITESPACE_ANY;
        }
        if (pattern && !cJSON_IsNull(pattern)) {
            if (!cJSON_IsString(pattern)) return fail(param, size, pattern_name, err, "'%s' must be a string%s", NULL);
            ws->pattern = pattern->valuestring;
        }
    }
    return LM_OK;
}

lm_status lm_structured_output_parse(const cJSON *body, lm_grammar_cache *cache, loom_grammar **grammar, char *param,
                                     size_t size, lm_error *err) {
    *grammar = NULL;
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, "response_format");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(body, "structured_outputs");
    const cJSON *gj = cJSON_GetObjectItemCaseSensitive(body, "guided_json");
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(body, "guided_regex");
    const cJSON *gc = cJSON_GetObjectItemCaseSensitive(body, "guided_choice");
    if (rf && cJSON_IsNull(rf)) rf = NULL;
    if (so && cJSON_IsNull(so)) so = NULL;
    if (gj && cJSON_IsNull(gj)) gj = NULL;
    if (gr && cJSON_IsNull(gr)) gr = NULL;
    if (gc && cJSON_IsNull(gc)) gc = NULL;
    const cJSON *so_grammar = NULL, *gg = NULL;
    const char *gg_name = NULL;
    /* the vLLM object's members count as its aliases */
    if (so) {
        if (!cJSON_IsObject(so)) return fail(param, size, "structured_outputs", err, "'%s' must be an object%s", NULL);
        int given = 0;
        for (const cJSON *k = so->child; k; k = k->next) {
            if (cJSON_IsNull(k)) continue;
            if (strcmp(k->string, "disable_any_whitespace") == 0 || strcmp(k->string, "whitespace_pattern") == 0) continue;
            if (strcmp(k->string, "json") == 0) gj = k, given++;
            else if (strcmp(k->string, "regex") == 0) gr = k, given++;
            else if (strcmp(k->string, "choice") == 0) gc = k, given++;
            else if (strcmp(k->string, "grammar") == 0) so_grammar = k, given++;
            else {
                char detail[200];
                snprintf(detail, sizeof detail,
                         " (%.64s is not supported; json, regex, choice, grammar, disable_any_whitespace and whitespace_pattern are)",
                         k->string);
                return fail(param, size, "structured_outputs", err, "'%s' holds an unsupported member%s", detail);
            }
        }
        if (given > 1)
            return fail(param, size, "structured_outputs", err, "'%s' may name one of json, regex, choice, grammar%s",
                        NULL);
    }
    lm_status gst = grammar_fields(body, so_grammar, &gg, &gg_name, param, size, err);
    if (gst != LM_OK) return gst;
    bool rf_constrains = rf != NULL;
    if (rf && cJSON_IsObject(rf)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
        rf_constrains = !(cJSON_IsString(type) && strcmp(type->valuestring, "text") == 0);
    }
    int n = rf_constrains + (gj != NULL) + (gr != NULL) + (gc != NULL) + (gg != NULL);
    if (n > 1)
        return fail(param, size, "response_format", err,
                    "'%s', structured_outputs, the guided_* fields and grammar are alternatives: give one%s", NULL);
    json_whitespace ws;
    lm_status wst = whitespace_fields(body, so, &ws, param, size, err);
    if (wst != LM_OK) return wst;
    if (rf) return response_format(rf, &ws, cache, grammar, param, size, err);
    if (gj) {
        if (cJSON_IsString(gj)) { /* vLLM accepts the schema as a JSON string */
            cJSON *parsed = cJSON_Parse(gj->valuestring);
            if (!parsed) return fail(param, size, "guided_json", err, "'%s' is a string that is no JSON schema%s", NULL);
            lm_status st = schema_grammar(parsed, &ws, "guided_json", cache, grammar, param, size, err);
            cJSON_Delete(parsed);
            return st;
        }
        return schema_grammar(gj, &ws, "guided_json", cache, grammar, param, size, err);
    }
    if (gr) return regex_grammar(gr, "guided_regex", cache, grammar, param, size, err);
    if (gc) return choice_grammar(gc, "guided_choice", cache, grammar, param, size, err);
    if (gg) return gbnf_grammar(gg, gg_name, cache, grammar, param, size, err);
    return LM_OK;
}
