#include "server/tool_call_grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_compose.h"
#include "grammar/json_format.h"
#include "grammar/json_grammar.h"
#include "grammar/regex_compile.h"
#include "grammar/text_avoiding.h"

#define MAX_KEY_BYTES 256

/* One tool's arguments being built (in a builder of their own, so that a
 * schema given up on half-way leaves nothing behind). */
typedef struct {
    lm_grammar_builder *b;
    lm_tool_form form;
    uint64_t deadline;
    const cJSON *parameters; /* the tool's schema: its $defs serve every property */
    uint32_t utf8;           /* one multi-byte UTF-8 character, made when first needed */
    bool have_utf8;
} args_ctx;

/* What a raw value may not contain: its closing tag, the markers the tool
 * parser splits the output at (tool_parser.c), and in the XML form the
 * tags it ends a value cut short at (so a streamed value never waits). */
static const char *const xml_words[] = {"</parameter>", "<tool_call>", "</tool_call>", "<parameter=", "</function>"};
static const char *const glm_words[] = {"</arg_value>", "<tool_call>", "</tool_call>"};
#define N_WORDS(a) (glm(a) ? 3 : 5)

static bool glm(const args_ctx *a) { return a->form == LM_TOOL_FORM_GLM; }

static lm_status utf8_rule(args_ctx *a, uint32_t *rule, lm_error *err) {
    lm_status st = a->have_utf8 ? LM_OK : lm_grammar_utf8_multibyte_rule(a->b, &a->utf8, err);
    a->have_utf8 = st == LM_OK;
    *rule = a->utf8;
    return st;
}

static lm_status literal(args_ctx *a, lm_gseq *s, const char *text, lm_error *err) {
    return lm_gseq_literal(a->b, s, text, strlen(text), err);
}

/* A finished grammar (a JSON Schema's) as a reference in s. */
static lm_status embed(args_ctx *a, lm_grammar *piece, lm_gseq *s, lm_error *err) {
    uint32_t root = 0;
    lm_status st = lm_grammar_embed(a->b, piece, &root, err);
    lm_grammar_free(piece);
    if (st == LM_OK) lm_gseq_ref(s, root);
    return st;
}

/* The JSON text of schema (NULL: any value) in s. */
static lm_status json_value(args_ctx *a, const cJSON *schema, lm_gseq *s, lm_error *err) {
    lm_grammar piece = {0};
    if (!schema) {
        lm_status st = lm_json_grammar(LM_JSON_ANY_VALUE, NULL, NULL, &piece, err);
        return st == LM_OK ? embed(a, &piece, s, err) : st;
    }
    /* A property's schema refers to the parameters' definitions by
     * pointers from their root ("#/$defs/x"): it gets them beside it. */
    cJSON *copy = cJSON_Duplicate(schema, true);
    if (!copy) return lm_fail(err, LM_ERR_NOMEM, "out of memory copying a schema");
    static const char *const defs[] = {"$defs", "definitions"};
    for (int k = 0; k < 2 && cJSON_IsObject(copy) && schema != a->parameters; k++) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(a->parameters, defs[k]);
        if (d && !cJSON_GetObjectItemCaseSensitive(copy, defs[k]))
            cJSON_AddItemToObject(copy, defs[k], cJSON_Duplicate(d, true));
    }
    char *text = lm_json_text_exact(copy);
    cJSON_Delete(copy);
    if (!text) return lm_fail(err, LM_ERR_NOMEM, "out of memory printing a schema");
    lm_status st = lm_json_schema_grammar(text, strlen(text), NULL, NULL, a->deadline, &piece, err);
    free(text);
    return st == LM_OK ? embed(a, &piece, s, err) : st;
}

static bool holds_marker(const args_ctx *a, const char *text) {
    const char *const *words = glm(a) ? glm_words : xml_words;
    for (int k = 0; k < N_WORDS(a); k++)
        if (strstr(text, words[k])) return true;
    size_t n = strlen(text);
    return glm(a) && n && (text[0] == '\n' || text[n - 1] == '\n');
}

/* enum / const of a string parameter: its strings, written raw. */
static lm_status raw_choices(args_ctx *a, const cJSON *en, const cJSON *cst, lm_gseq *s, lm_error *err) {
    int n = en ? cJSON_GetArraySize(en) : 1;
    const char **texts = calloc((size_t)n + 1, sizeof *texts);
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    lm_status st = texts && lens ? LM_OK : lm_fail(err, LM_ERR_NOMEM, "out of memory listing an enum");
    uint32_t count = 0;
    const cJSON *v = en ? en->child : cst;
    for (; st == LM_OK && v; v = en ? v->next : NULL) {
        if (!cJSON_IsString(v)) continue; /* a string parameter takes none of the others */
        if (holds_marker(a, v->valuestring))
            st = lm_fail(err, LM_ERR_UNSUPPORTED, "the value '%.64s' holds tool-call markup this call form cannot write",
                         v->valuestring);
        texts[count] = v->valuestring;
        lens[count++] = strlen(v->valuestring);
    }
    if (st == LM_OK && count == 0)
        st = lm_fail(err, LM_ERR_UNSUPPORTED, "a string parameter whose enum or const holds no string");
    uint32_t rule = 0;
    if (st == LM_OK) st = lm_grammar_literals(a->b, texts, lens, count, &rule, err);
    if (st == LM_OK) lm_gseq_ref(s, rule);
    free(texts);
    free(lens);
    return st;
}

/* The bytes a constrained raw string leaves out: '<' (no marker can
 * begin), NUL, and in GLM's form '\n' (its parser trims one at the edges). */
static void raw_forbidden(const args_ctx *a, lm_byte_class *c) {
    memset(c, 0, sizeof *c);
    lm_byte_class_add(c, 0);
    lm_byte_class_add(c, '<');
    if (glm(a)) lm_byte_class_add(c, '\n');
}

static lm_status raw_pattern(args_ctx *a, const char *pattern, bool search, lm_gseq *s, lm_error *err) {
    lm_regex_options opt = {0};
    raw_forbidden(a, &opt.forbidden);
    lm_status st = utf8_rule(a, &opt.utf8_rule, err);
    return st == LM_OK ? lm_regex_compile(a->b, pattern, strlen(pattern), search, &opt, s, err) : st;
}

static lm_status raw_length(args_ctx *a, int min, int max, lm_gseq *s, lm_error *err) {
    lm_byte_class ascii = {{0}}, no;
    raw_forbidden(a, &no);
    for (int c = 1; c < 128; c++)
        if (!lm_byte_class_has(&no, (uint8_t)c)) lm_byte_class_add(&ascii, (uint8_t)c);
    uint32_t one = 0, multi = 0;
    lm_gseq seq = {0};
    lm_status st = lm_grammar_new_rule(a->b, &one, err);
    if (st == LM_OK) st = lm_gseq_class(a->b, &seq, &ascii, err);
    if (st == LM_OK) st = lm_grammar_add_alt(a->b, one, &seq, err);
    if (st == LM_OK) st = utf8_rule(a, &multi, err);
    lm_gseq_clear(&seq);
    lm_gseq_ref(&seq, multi);
    if (st == LM_OK) st = lm_grammar_add_alt(a->b, one, &seq, err);
    lm_gseq_clear(&seq);
    lm_gseq_ref(&seq, one);
    if (st == LM_OK) st = lm_grammar_repeat(a->b, s, &seq, min, max, err);
    lm_gseq_free(&seq);
    return st;
}

static lm_status length_bound(const cJSON *schema, const char *key, int *out, lm_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(schema, key);
    if (!v) return LM_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != (double)(long long)v->valuedouble)
        return lm_fail(err, LM_ERR_INVALID, "'%s' must be a non-negative integer", key);
    *out = v->valuedouble > LM_SCHEMA_MAX_LENGTH ? LM_SCHEMA_MAX_LENGTH : (int)v->valuedouble;
    return LM_OK;
}

/* A "type": "string" parameter's value as the form writes it: raw. */
static lm_status raw_value(args_ctx *a, const cJSON *schema, lm_gseq *s, lm_error *err) {
    static const char *const refused[] = {"anyOf", "oneOf", "allOf", "not", "$ref", "if"};
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++)
        if (cJSON_GetObjectItemCaseSensitive(schema, refused[k]))
            return lm_fail(err, LM_ERR_UNSUPPORTED, "'%s' beside \"type\": \"string\" (a raw string in this call form)",
                           refused[k]);
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(schema, "const");
    if (en && !cJSON_IsArray(en)) return lm_fail(err, LM_ERR_INVALID, "'enum' must be an array");
    if (en || cst) return raw_choices(a, en, cst, s, err);
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(schema, "pattern");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(schema, "format");
    int min = 0, max = -1;
    lm_status st = length_bound(schema, "minLength", &min, err);
    if (st == LM_OK) st = length_bound(schema, "maxLength", &max, err);
    if (st != LM_OK) return st;
    bool lengths = min > 0 || max >= 0;
    const char *format_regex = NULL;
    if (cJSON_IsString(format)) {
        bool refuse = false;
        int fmin = 0, fmax = -1;
        format_regex = lm_json_format_regex(format->valuestring, &refuse, &fmin, &fmax);
        if (refuse) return lm_fail(err, LM_ERR_UNSUPPORTED, "format '%.64s'", format->valuestring);
    }
    if (pattern && !cJSON_IsString(pattern)) return lm_fail(err, LM_ERR_INVALID, "'pattern' must be a string");
    if ((pattern || format_regex) && lengths)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s beside minLength / maxLength in a raw string",
                       pattern ? "pattern" : "format");
    if (pattern && format_regex) return lm_fail(err, LM_ERR_UNSUPPORTED, "pattern beside format in a raw string");
    if (pattern) return raw_pattern(a, pattern->valuestring, true, s, err);
    if (format_regex) return raw_pattern(a, format_regex, false, s, err);
    if (lengths) {
        if (max >= 0 && max < min) return lm_fail(err, LM_ERR_INVALID, "maxLength below minLength");
        return raw_length(a, min, max, s, err);
    }
    uint32_t text = 0;
    st = lm_grammar_text_avoiding(a->b, glm(a) ? glm_words : xml_words, N_WORDS(a), glm(a), &text, err);
    if (st == LM_OK) lm_gseq_ref(s, text);
    return st;
}

static bool is_string_typed(const cJSON *schema) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    return cJSON_IsString(type) && strcmp(type->valuestring, "string") == 0;
}

/* One parameter: its key (given, or NULL: any key) and value. */
static lm_status parameter(args_ctx *a, const char *key, const cJSON *schema, lm_gseq *s, lm_error *err) {
    lm_status st = literal(a, s, glm(a) ? "<arg_key>" : "<parameter=", err);
    if (st == LM_OK && key) {
        if (strlen(key) > MAX_KEY_BYTES || strpbrk(key, "<>\n") || !key[0])
            return lm_fail(err, LM_ERR_UNSUPPORTED, "the property name '%.64s' (this call form writes names without "
                           "'<', '>' or newlines)", key);
        st = literal(a, s, key, err);
    } else if (st == LM_OK) { /* any key: a name of [A-Za-z0-9_.-] */
        lm_byte_class name = {{0}};
        lm_byte_class_add_range(&name, 'a', 'z');
        lm_byte_class_add_range(&name, 'A', 'Z');
        lm_byte_class_add_range(&name, '0', '9');
        lm_byte_class_add(&name, '_');
        lm_byte_class_add(&name, '-');
        lm_byte_class_add(&name, '.');
        lm_gseq one = {0};
        st = lm_gseq_class(a->b, &one, &name, err);
        if (st == LM_OK) st = lm_grammar_repeat(a->b, s, &one, 1, 64, err);
        lm_gseq_free(&one);
    }
    if (st == LM_OK) st = literal(a, s, glm(a) ? "</arg_key>\n<arg_value>" : ">\n", err);
    if (st == LM_OK) st = !schema || is_string_typed(schema) ? raw_value(a, schema, s, err) : json_value(a, schema, s, err);
    if (st == LM_OK) st = literal(a, s, glm(a) ? "</arg_value>\n" : "\n</parameter>\n", err);
    return st;
}

static bool in_required(const cJSON *required, const char *key) {
    const cJSON *r;
    cJSON_ArrayForEach(r, required) if (cJSON_IsString(r) && strcmp(r->valuestring, key) == 0) return true;
    return false;
}

/* The XML and GLM forms' parameters of an object schema. */
static lm_status parameters(args_ctx *a, lm_gseq *s, lm_error *err) {
    const cJSON *schema = a->parameters;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    if (schema && !cJSON_IsObject(schema))
        return lm_fail(err, LM_ERR_INVALID, "the parameters must be an object schema");
    static const char *const refused[] = {"anyOf", "oneOf", "allOf", "not", "$ref", "if", "patternProperties",
                                          "dependentRequired", "dependencies", "minProperties", "maxProperties"};
    for (size_t k = 0; schema && k < sizeof refused / sizeof refused[0]; k++)
        if (cJSON_GetObjectItemCaseSensitive(schema, refused[k]))
            return lm_fail(err, LM_ERR_UNSUPPORTED, "'%s' at the top of the parameters (this call form writes "
                           "each property on its own)", refused[k]);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "object") == 0))
        return lm_fail(err, LM_ERR_UNSUPPORTED, "parameters whose type is not \"object\"");
    if (!cJSON_IsObject(props)) { /* any parameters: each a raw string */
        lm_gseq one = {0};
        lm_status st = parameter(a, NULL, NULL, &one, err);
        uint32_t star = 0;
        if (st == LM_OK) st = lm_grammar_star(a->b, &one, &star, err);
        lm_gseq_free(&one);
        if (st == LM_OK) lm_gseq_ref(s, star);
        return st;
    }
    const cJSON *required = cJSON_GetObjectItemCaseSensitive(schema, "required");
    const cJSON *r;
    cJSON_ArrayForEach(r, required) if (!cJSON_IsString(r) || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
        return lm_fail(err, LM_ERR_UNSUPPORTED, "a required parameter that is not among the properties");
    const cJSON *p;
    lm_status st = LM_OK;
    cJSON_ArrayForEach(p, props) {
        if (st != LM_OK) break;
        if (cJSON_IsFalse(p)) continue; /* a property that may not come */
        lm_gseq one = {0};
        st = parameter(a, p->string, cJSON_IsTrue(p) ? NULL : p, &one, err);
        if (st != LM_OK) {
            char what[LM_ERROR_MESSAGE_MAX];
            snprintf(what, sizeof what, "%s", err->message);
            st = lm_fail(err, st, "parameter '%.64s': %s", p->string, what);
        } else if (in_required(required, p->string)) {
            lm_gseq_append(s, &one);
        } else { /* optional: the parameter or nothing */
            uint32_t opt = 0;
            st = lm_grammar_new_rule(a->b, &opt, err);
            if (st == LM_OK) st = lm_grammar_add_alt(a->b, opt, &one, err);
            if (st == LM_OK) st = lm_grammar_add_empty_alt(a->b, opt, err);
            if (st == LM_OK) lm_gseq_ref(s, opt);
        }
        lm_gseq_free(&one);
    }
    return st;
}

/* What closes a call's arguments (the first call's output ends there). */
static const char *call_end(lm_tool_form form) {
    return form == LM_TOOL_FORM_JSON ? "}" : form == LM_TOOL_FORM_XML ? "</function>" : "</tool_call>";
}

/* One tool's arguments and the end of its call, in a grammar of its own;
 * generic: the form's arguments whatever the schema. */
static lm_status tool_arguments(lm_tool_form form, const cJSON *schema, bool generic, uint64_t deadline,
                                lm_grammar *out, lm_error *err) {
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    args_ctx a = {.b = &b, .form = form, .deadline = deadline, .parameters = generic ? NULL : schema};
    lm_gseq s = {0};
    lm_status st = LM_OK;
    if (form == LM_TOOL_FORM_JSON) {
        lm_grammar piece = {0};
        if (a.parameters && !cJSON_IsNull(a.parameters)) {
            char *text = lm_json_text_exact(a.parameters);
            st = text ? lm_json_schema_grammar(text, strlen(text), NULL, NULL, deadline, &piece, err)
                      : lm_fail(err, LM_ERR_NOMEM, "out of memory printing a schema");
            free(text);
        } else {
            st = lm_json_grammar(LM_JSON_OBJECT, NULL, NULL, &piece, err);
        }
        if (st == LM_OK) st = embed(&a, &piece, &s, err);
    } else {
        st = parameters(&a, &s, err);
    }
    if (st == LM_OK) st = literal(&a, &s, call_end(form), err);
    uint32_t root = 0;
    if (st == LM_OK) st = lm_grammar_rule_of(&b, &s, &root, err);
    if (st == LM_OK) st = lm_grammar_finish(&b, root, out, err);
    lm_gseq_free(&s);
    lm_grammar_builder_free(&b);
    return st;
}

static const cJSON *function_named(const cJSON *tools, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) return fn;
    }
    return NULL;
}

/* fn's arguments embedded in b: its schema's, or (not strict) generic ones
 * when loom cannot enforce the schema in this form. */
static lm_status embed_tool(lm_grammar_builder *b, lm_tool_form form, const cJSON *fn, uint64_t deadline,
                            uint32_t *rule, lm_error *err) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    bool strict = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fn, "strict"));
    lm_grammar g = {0};
    lm_status st = tool_arguments(form, schema, false, deadline, &g, err);
    if (st == LM_ERR_UNSUPPORTED || st == LM_ERR_INVALID) {
        if (strict) {
            char what[LM_ERROR_MESSAGE_MAX];
            snprintf(what, sizeof what, "%s", err->message);
            return lm_fail(err, st, "the parameters of tool '%.64s' cannot be enforced: %s",
                           cJSON_IsString(name) ? name->valuestring : "?", what);
        }
        st = tool_arguments(form, schema, true, deadline, &g, err);
    }
    if (st == LM_OK) st = lm_grammar_embed(b, &g, rule, err);
    lm_grammar_free(&g);
    return st;
}

/* The calls after the first: "\n</tool_call>\n" (GLM "\n") then a call to
 * one of the allowed functions, as a rule. */
static lm_status next_call(lm_grammar_builder *b, const lm_tool_call_grammar_spec *spec, uint64_t deadline,
                           uint32_t *rule, lm_error *err) {
    lm_status st = lm_grammar_new_rule(b, rule, err);
    const cJSON *t;
    cJSON_ArrayForEach(t, spec->tools) {
        if (st != LM_OK) break;
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(name) || (spec->only && strcmp(name->valuestring, spec->only) != 0)) continue;
        lm_sbuf opening = {0};
        bool ok = lm_sbuf_puts(&opening, spec->form == LM_TOOL_FORM_GLM ? "\n" : "\n</tool_call>\n") &&
                  lm_tool_call_opening(spec->form, name->valuestring, &opening);
        uint32_t args = 0;
        lm_gseq s = {0};
        st = ok ? lm_gseq_literal(b, &s, lm_sbuf_str(&opening), opening.len, err)
                : lm_fail(err, LM_ERR_NOMEM, "out of memory writing a call's opening");
        if (st == LM_OK) st = embed_tool(b, spec->form, fn, deadline, &args, err);
        lm_gseq_ref(&s, args);
        if (st == LM_OK) st = lm_grammar_add_alt(b, *rule, &s, err);
        lm_gseq_free(&s);
        lm_sbuf_free(&opening);
    }
    return st;
}

lm_status lm_tool_call_grammar(const lm_tool_call_grammar_spec *spec, uint64_t deadline_ns, loom_grammar **out,
                               lm_error *err) {
    *out = NULL;
    const cJSON *first = function_named(spec->tools, spec->first);
    if (!first) return lm_fail(err, LM_ERR_INVALID, "no tool is named '%.64s'", spec->first);
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    lm_gseq s = {0};
    uint32_t args = 0, root = 0;
    lm_status st = embed_tool(&b, spec->form, first, deadline_ns, &args, err);
    lm_gseq_ref(&s, args);
    if (st == LM_OK && spec->parallel) {
        uint32_t next = 0, close = 0;
        st = next_call(&b, spec, deadline_ns, &next, err);
        lm_gseq one = {0};
        lm_gseq_ref(&one, next);
        if (st == LM_OK) st = lm_grammar_repeat(&b, &s, &one, 0, LM_TOOL_CALL_GRAMMAR_MAX_CALLS - 1, err);
        lm_gseq_clear(&one);
        /* the JSON and XML forms' last call may be closed too */
        if (st == LM_OK && spec->form != LM_TOOL_FORM_GLM) {
            st = lm_gseq_literal(&b, &one, "\n</tool_call>", strlen("\n</tool_call>"), err);
            if (st == LM_OK) st = lm_grammar_new_rule(&b, &close, err);
            if (st == LM_OK) st = lm_grammar_add_alt(&b, close, &one, err);
            if (st == LM_OK) st = lm_grammar_add_empty_alt(&b, close, err);
            lm_gseq_ref(&s, close);
        }
        lm_gseq_free(&one);
    }
    if (st == LM_OK) st = lm_grammar_rule_of(&b, &s, &root, err);
    lm_grammar g = {0};
    if (st == LM_OK) st = lm_grammar_finish(&b, root, &g, err);
    lm_gseq_free(&s);
    lm_grammar_builder_free(&b);
    if (st != LM_OK) return st;
    char what[128];
    snprintf(what, sizeof what, "the call grammar of tool '%.64s'", spec->first);
    return lm_grammar_publish(&g, what, deadline_ns, out, err);
}
