/* JSON and JSON Schema grammars (grammar/json_grammar.h). */
#include "grammar/json_grammar.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/cost.h"
#include "grammar/regex_compile.h"

typedef struct {
    const cJSON *target;
    uint32_t rule;
} schema_ref;

typedef struct {
    lm_grammar_builder *b;
    lm_error *err;
    uint32_t ws, utf8, string_body, string_char, escape, number, integer, value;
    bool have_value;
    const cJSON *root;
    uint64_t deadline; /* of the cost checks (grammar/cost.h) */
    schema_ref refs[LM_SCHEMA_MAX_REFS];
    int n_refs;
} json_builder;

#define TRY(x)                         \
    do {                               \
        lm_status st_ = (x);           \
        if (st_ != LM_OK) return st_;  \
    } while (0)

static lm_status lit(json_builder *j, lm_gseq *s, const char *text) {
    return lm_gseq_literal(j->b, s, text, strlen(text), j->err);
}

static lm_status range(json_builder *j, lm_gseq *s, uint8_t lo, uint8_t hi) {
    lm_byte_class c = {{0}};
    lm_byte_class_add_range(&c, lo, hi);
    return lm_gseq_class(j->b, s, &c, j->err);
}

/* rule with a single alternative seq (seq is freed) */
static lm_status rule_of(json_builder *j, lm_gseq *seq, uint32_t *rule) {
    lm_status st = lm_grammar_rule_of(j->b, seq, rule, j->err);
    lm_gseq_free(seq);
    return st;
}

/* The pieces every JSON grammar shares, made once. */
static lm_status add_basics(json_builder *j) {
    lm_grammar_builder *b = j->b;
    lm_error *err = j->err;
    /* whitespace: at most LM_JSON_MAX_WS bytes of [ \t\n\r] */
    lm_gseq one = {0}, s = {0};
    lm_byte_class wsc = {{0}};
    lm_byte_class_add(&wsc, ' ');
    lm_byte_class_add(&wsc, '\t');
    lm_byte_class_add(&wsc, '\n');
    lm_byte_class_add(&wsc, '\r');
    TRY(lm_gseq_class(b, &one, &wsc, err));
    TRY(lm_grammar_repeat(b, &s, &one, 0, LM_JSON_MAX_WS, err));
    lm_gseq_free(&one);
    TRY(rule_of(j, &s, &j->ws));

    TRY(lm_grammar_utf8_multibyte_rule(b, &j->utf8, err));
    /* escape (after the backslash) */
    TRY(lm_grammar_new_rule(b, &j->escape, err));
    lm_byte_class simple = {{0}};
    for (const char *c = "\"\\/bfnrt"; *c; c++) lm_byte_class_add(&simple, (uint8_t)*c);
    TRY(lm_gseq_class(b, &s, &simple, err));
    TRY(lm_grammar_add_alt(b, j->escape, &s, err));
    lm_gseq_clear(&s);
    lm_byte_class hex = {{0}};
    lm_byte_class_add_range(&hex, '0', '9');
    lm_byte_class_add_range(&hex, 'a', 'f');
    lm_byte_class_add_range(&hex, 'A', 'F');
    TRY(lit(j, &s, "u"));
    for (int i = 0; i < 4; i++) TRY(lm_gseq_class(b, &s, &hex, err));
    TRY(lm_grammar_add_alt(b, j->escape, &s, err));
    lm_gseq_clear(&s);

    /* one character of a string: plain ASCII, an escape or a multi-byte character */
    lm_byte_class plain = {{0}};
    lm_byte_class_add_range(&plain, 0x20, 0x7F);
    plain.bits['"' >> 6] &= ~(1ull << ('"' & 63));
    plain.bits['\\' >> 6] &= ~(1ull << ('\\' & 63));
    TRY(lm_grammar_new_rule(b, &j->string_char, err));
    TRY(lm_gseq_class(b, &s, &plain, err));
    TRY(lm_grammar_add_alt(b, j->string_char, &s, err));
    lm_gseq_clear(&s);
    TRY(lit(j, &s, "\\"));
    lm_gseq_ref(&s, j->escape);
    TRY(lm_grammar_add_alt(b, j->string_char, &s, err));
    lm_gseq_clear(&s);
    lm_gseq_ref(&s, j->utf8);
    TRY(lm_grammar_add_alt(b, j->string_char, &s, err));
    lm_gseq_clear(&s);

    /* the rest of a string after its opening quote: one right-recursive
     * rule with every kind of character inline (plain bytes, escapes,
     * multi-byte forms), so whatever is below it on the stack, the token
     * mask sees a whole string as frames of this rule alone: only tokens
     * that close the string and go on depend on what follows it */
    TRY(lm_grammar_new_rule(b, &j->string_body, err));
    TRY(lm_gseq_class(b, &s, &plain, err));
    lm_gseq_ref(&s, j->string_body);
    TRY(lm_grammar_add_alt(b, j->string_body, &s, err));
    lm_gseq_clear(&s);
    TRY(lit(j, &s, "\\"));
    TRY(lm_gseq_class(b, &s, &simple, err));
    lm_gseq_ref(&s, j->string_body);
    TRY(lm_grammar_add_alt(b, j->string_body, &s, err));
    lm_gseq_clear(&s);
    TRY(lit(j, &s, "\\u"));
    for (int i = 0; i < 4; i++) TRY(lm_gseq_class(b, &s, &hex, err));
    lm_gseq_ref(&s, j->string_body);
    TRY(lm_grammar_add_alt(b, j->string_body, &s, err));
    lm_gseq_clear(&s);
    TRY(lm_grammar_utf8_alts(b, j->string_body, j->string_body, err));
    TRY(lit(j, &s, "\""));
    TRY(lm_grammar_add_alt(b, j->string_body, &s, err));
    lm_gseq_clear(&s);

    /* integers: -? (0 | [1-9][0-9]{0,14}); numbers add a fraction and an exponent */
    lm_gseq digit = {0}, intpart = {0};
    TRY(range(j, &digit, '0', '9'));
    uint32_t natural = 0;
    TRY(lm_grammar_new_rule(b, &natural, err));
    TRY(lit(j, &s, "0"));
    TRY(lm_grammar_add_alt(b, natural, &s, err));
    lm_gseq_clear(&s);
    TRY(range(j, &s, '1', '9'));
    TRY(lm_grammar_repeat(b, &s, &digit, 0, 14, err));
    TRY(lm_grammar_add_alt(b, natural, &s, err));
    lm_gseq_clear(&s);
    uint32_t sign = 0;
    TRY(lit(j, &s, "-"));
    TRY(lm_grammar_rule_of(b, &s, &sign, err));
    TRY(lm_grammar_add_empty_alt(b, sign, err));
    lm_gseq_clear(&s);
    lm_gseq_ref(&intpart, sign);
    lm_gseq_ref(&intpart, natural);
    lm_gseq_append(&s, &intpart);
    TRY(lm_grammar_rule_of(b, &s, &j->integer, err));
    lm_gseq_clear(&s);
    uint32_t frac = 0, expo = 0, expsign = 0;
    TRY(lit(j, &s, "."));
    TRY(lm_grammar_repeat(b, &s, &digit, 1, 15, err));
    TRY(lm_grammar_rule_of(b, &s, &frac, err));
    TRY(lm_grammar_add_empty_alt(b, frac, err));
    lm_gseq_clear(&s);
    TRY(range(j, &s, '+', '+'));
    TRY(lm_grammar_rule_of(b, &s, &expsign, err));
    lm_gseq_clear(&s);
    TRY(lit(j, &s, "-"));
    TRY(lm_grammar_add_alt(b, expsign, &s, err));
    TRY(lm_grammar_add_empty_alt(b, expsign, err));
    lm_gseq_clear(&s);
    lm_byte_class e = {{0}};
    lm_byte_class_add(&e, 'e');
    lm_byte_class_add(&e, 'E');
    TRY(lm_gseq_class(b, &s, &e, err));
    lm_gseq_ref(&s, expsign);
    TRY(lm_grammar_repeat(b, &s, &digit, 1, 3, err));
    TRY(lm_grammar_rule_of(b, &s, &expo, err));
    TRY(lm_grammar_add_empty_alt(b, expo, err));
    lm_gseq_clear(&s);
    lm_gseq_append(&s, &intpart);
    lm_gseq_ref(&s, frac);
    lm_gseq_ref(&s, expo);
    TRY(lm_grammar_rule_of(b, &s, &j->number, err));
    lm_gseq_free(&s);
    lm_gseq_free(&digit);
    lm_gseq_free(&intpart);
    return LM_OK;
}

static void ref(lm_gseq *s, uint32_t rule) { lm_gseq_ref(s, rule); }

static lm_status string_value(json_builder *j, lm_gseq *out) {
    TRY(lit(j, out, "\""));
    ref(out, j->string_body);
    return LM_OK;
}

/* seq: '{' ws (member (ws ',' ws member)*)? ws '}' with member given */
static lm_status repeated_container(json_builder *j, lm_gseq *out, const char *open, const char *close,
                                    const lm_gseq *item, int min, int max) {
    TRY(lit(j, out, open));
    ref(out, j->ws);
    if (max != 0) {
        lm_gseq body = {0}, more = {0};
        lm_gseq_append(&body, item);
        ref(&more, j->ws);
        TRY(lit(j, &more, ","));
        ref(&more, j->ws);
        lm_gseq_append(&more, item);
        TRY(lm_grammar_repeat(j->b, &body, &more, min > 1 ? min - 1 : 0, max < 0 ? -1 : max - 1, j->err));
        ref(&body, j->ws);
        lm_gseq_free(&more);
        if (min == 0) {
            uint32_t opt = 0;
            TRY(rule_of(j, &body, &opt));
            TRY(lm_grammar_add_empty_alt(j->b, opt, j->err));
            ref(out, opt);
        } else {
            lm_gseq_append(out, &body);
            lm_gseq_free(&body);
        }
    }
    return lit(j, out, close);
}

static lm_status any_value_rule(json_builder *j) {
    if (j->have_value) return LM_OK;
    lm_grammar_builder *b = j->b;
    TRY(lm_grammar_new_rule(b, &j->value, j->err));
    j->have_value = true;
    lm_gseq s = {0}, member = {0}, item = {0};
    TRY(string_value(j, &member));
    ref(&member, j->ws);
    TRY(lit(j, &member, ":"));
    ref(&member, j->ws);
    ref(&member, j->value);
    TRY(repeated_container(j, &s, "{", "}", &member, 0, -1));
    TRY(lm_grammar_add_alt(b, j->value, &s, j->err));
    lm_gseq_clear(&s);
    ref(&item, j->value);
    TRY(repeated_container(j, &s, "[", "]", &item, 0, -1));
    TRY(lm_grammar_add_alt(b, j->value, &s, j->err));
    lm_gseq_clear(&s);
    TRY(string_value(j, &s));
    TRY(lm_grammar_add_alt(b, j->value, &s, j->err));
    lm_gseq_clear(&s);
    ref(&s, j->number);
    TRY(lm_grammar_add_alt(b, j->value, &s, j->err));
    for (const char *const *w = (const char *const[]){"true", "false", "null", NULL}; *w; w++) {
        lm_gseq_clear(&s);
        TRY(lit(j, &s, *w));
        TRY(lm_grammar_add_alt(b, j->value, &s, j->err));
    }
    lm_gseq_free(&s);
    lm_gseq_free(&member);
    lm_gseq_free(&item);
    return LM_OK;
}

/* ------------------------------------------------------------- schemas */

static lm_status compile_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth);

static lm_status unsupported(json_builder *j, const char *keyword) {
    return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '%s' is not supported", keyword);
}

static lm_status json_literal(json_builder *j, const cJSON *value, lm_gseq *out) {
    char *text = cJSON_PrintUnformatted(value);
    if (!text) return lm_fail(j->err, LM_ERR_NOMEM, "out of memory");
    lm_status st = lm_gseq_literal(j->b, out, text, strlen(text), j->err);
    free(text);
    return st;
}

/* An enum's values as one trie of their JSON texts (grammar.h's
 * lm_grammar_literals): hundreds of values stay one matcher stack. */
static lm_status enum_literals(json_builder *j, const cJSON *list, lm_gseq *out) {
    int n = cJSON_GetArraySize(list);
    char **texts = calloc((size_t)n, sizeof *texts);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    lm_status st = texts && lens ? LM_OK : lm_fail(j->err, LM_ERR_NOMEM, "out of memory");
    int i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        if (st != LM_OK) break;
        texts[i] = cJSON_PrintUnformatted(item);
        if (!texts[i]) st = lm_fail(j->err, LM_ERR_NOMEM, "out of memory");
        else lens[i] = strlen(texts[i]);
        i++;
    }
    uint32_t rule = 0;
    if (st == LM_OK) st = lm_grammar_literals(j->b, (const char *const *)texts, lens, (uint32_t)n, &rule, j->err);
    if (st == LM_OK) ref(out, rule);
    for (int k = 0; texts && k < n; k++) free(texts[k]);
    free(texts);
    free(lens);
    return st;
}

static bool is_annotation(const char *key) {
    static const char *const names[] = {"title", "description", "default", "examples", "$schema", "$id",
                                        "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                        "definitions", NULL};
    for (const char *const *n = names; *n; n++)
        if (strcmp(key, *n) == 0) return true;
    return false;
}

static bool is_keyword_of(const char *key, const char *const *names) {
    for (const char *const *n = names; *n; n++)
        if (strcmp(key, *n) == 0) return true;
    return false;
}

static const char *const object_words[] = {"properties", "required", "additionalProperties", NULL};
static const char *const array_words[] = {"items", "minItems", "maxItems", NULL};
static const char *const string_words[] = {"minLength", "maxLength", "pattern", NULL};
static const char *const number_words[] = {"minimum", "maximum", NULL};

static lm_status bounded_count(json_builder *j, const cJSON *schema, const char *key, int fallback, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(schema, key);
    *out = fallback;
    if (!v) return LM_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must be a non-negative integer", key);
    if (v->valuedouble > LM_SCHEMA_MAX_REPEAT)
        return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '%s' above %d is not supported", key,
                       LM_SCHEMA_MAX_REPEAT);
    *out = (int)v->valuedouble;
    return LM_OK;
}

static lm_status object_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    const cJSON *required = cJSON_GetObjectItemCaseSensitive(schema, "required");
    const cJSON *additional = cJSON_GetObjectItemCaseSensitive(schema, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'properties' must be an object");
    if (required && !cJSON_IsArray(required)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'required' must be an array");
    if (additional && !cJSON_IsBool(additional) && !cJSON_IsObject(additional))
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'additionalProperties' must be a boolean or a schema");
    const cJSON *r;
    cJSON_ArrayForEach(r, required) {
        if (!cJSON_IsString(r)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'required' must list strings");
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                           "JSON schema: the required property '%s' has no schema in 'properties'", r->valuestring);
    }
    int n = cJSON_GetArraySize(props);
    if (cJSON_IsObject(additional)) {
        if (n > 0) return unsupported(j, "additionalProperties (a schema) together with properties");
        /* a map: any keys, values of the schema */
        lm_gseq member = {0};
        TRY(string_value(j, &member));
        ref(&member, j->ws);
        TRY(lit(j, &member, ":"));
        ref(&member, j->ws);
        TRY(compile_schema(j, additional, &member, depth + 1));
        lm_status st = repeated_container(j, out, "{", "}", &member, 0, -1);
        lm_gseq_free(&member);
        return st;
    }
    if (n == 0) {
        TRY(lit(j, out, "{"));
        ref(out, j->ws);
        return lit(j, out, "}");
    }
    /* after[k][c]: properties k.. still to come; c: a comma must come first */
    uint32_t *after = malloc(sizeof(uint32_t) * 2 * (size_t)(n + 1));
    if (!after) return lm_fail(j->err, LM_ERR_NOMEM, "out of memory");
    lm_status st = LM_OK;
    for (int k = 0; k <= n && st == LM_OK; k++)
        for (int c = 0; c < 2 && st == LM_OK; c++) st = lm_grammar_new_rule(j->b, &after[2 * k + c], j->err);
    if (st == LM_OK) st = lm_grammar_add_empty_alt(j->b, after[2 * n], j->err);
    if (st == LM_OK) st = lm_grammar_add_empty_alt(j->b, after[2 * n + 1], j->err);
    const cJSON *p = props->child;
    for (int k = 0; k < n && st == LM_OK; k++, p = p->next) {
        bool is_required = false;
        cJSON_ArrayForEach(r, required) if (strcmp(r->valuestring, p->string) == 0) is_required = true;
        lm_gseq member = {0};
        cJSON *key = cJSON_CreateString(p->string);
        st = key ? json_literal(j, key, &member) : lm_fail(j->err, LM_ERR_NOMEM, "out of memory");
        cJSON_Delete(key);
        ref(&member, j->ws);
        if (st == LM_OK) st = lit(j, &member, ":");
        ref(&member, j->ws);
        if (st == LM_OK) st = compile_schema(j, p, &member, depth + 1);
        for (int c = 0; c < 2 && st == LM_OK; c++) {
            lm_gseq s = {0};
            if (c) {
                ref(&s, j->ws);
                st = lit(j, &s, ",");
                ref(&s, j->ws);
            }
            lm_gseq_append(&s, &member);
            ref(&s, after[2 * (k + 1) + 1]);
            if (st == LM_OK) st = lm_grammar_add_alt(j->b, after[2 * k + c], &s, j->err);
            lm_gseq_free(&s);
            if (st == LM_OK && !is_required) {
                lm_gseq skip = {0};
                ref(&skip, after[2 * (k + 1) + c]);
                st = lm_grammar_add_alt(j->b, after[2 * k + c], &skip, j->err);
                lm_gseq_free(&skip);
            }
        }
        lm_gseq_free(&member);
    }
    if (st == LM_OK) st = lit(j, out, "{");
    ref(out, j->ws);
    ref(out, after[0]);
    ref(out, j->ws);
    if (st == LM_OK) st = lit(j, out, "}");
    free(after);
    return st;
}

static lm_status array_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(schema, "items");
    int min, max;
    TRY(bounded_count(j, schema, "minItems", 0, &min));
    TRY(bounded_count(j, schema, "maxItems", -1, &max));
    if (max >= 0 && max < min) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: maxItems is below minItems");
    lm_gseq item = {0};
    if (items) {
        TRY(compile_schema(j, items, &item, depth + 1));
    } else {
        TRY(any_value_rule(j));
        ref(&item, j->value);
    }
    lm_status st = repeated_container(j, out, "[", "]", &item, min, max);
    lm_gseq_free(&item);
    return st;
}

static lm_status string_schema(json_builder *j, const cJSON *schema, lm_gseq *out) {
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(schema, "pattern");
    bool has_min = cJSON_GetObjectItemCaseSensitive(schema, "minLength") != NULL;
    bool has_max = cJSON_GetObjectItemCaseSensitive(schema, "maxLength") != NULL;
    if (pattern) {
        if (has_min || has_max) return unsupported(j, "pattern together with minLength/maxLength");
        if (!cJSON_IsString(pattern)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'pattern' must be a string");
        lm_regex_options opt = {.utf8_rule = j->utf8};
        lm_byte_class_add_range(&opt.forbidden, 0, 0x1F);
        lm_byte_class_add(&opt.forbidden, '"');
        lm_byte_class_add(&opt.forbidden, '\\');
        TRY(lit(j, out, "\""));
        lm_status st = lm_regex_compile(j->b, pattern->valuestring, strlen(pattern->valuestring), true, &opt, out,
                                        j->err);
        if (st != LM_OK) return lm_fail_context(j->err, "JSON schema 'pattern'");
        TRY(lm_regex_check_cost(pattern->valuestring, strlen(pattern->valuestring), true, &opt, "JSON schema 'pattern'",
                                j->deadline, j->err));
        return lit(j, out, "\"");
    }
    if (!has_min && !has_max) return string_value(j, out);
    int min, max;
    TRY(bounded_count(j, schema, "minLength", 0, &min));
    TRY(bounded_count(j, schema, "maxLength", -1, &max));
    if (max >= 0 && max < min) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: maxLength is below minLength");
    lm_gseq one = {0};
    ref(&one, j->string_char);
    TRY(lit(j, out, "\""));
    lm_status st = lm_grammar_repeat(j->b, out, &one, min, max, j->err);
    lm_gseq_free(&one);
    if (st == LM_OK) st = lit(j, out, "\"");
    return st;
}

/* Number bounds are accepted only where they say no more than the grammar
 * does already: minimum 0 (no sign), or bounds past its 15 digits. */
static lm_status number_schema(json_builder *j, const cJSON *schema, bool integer, lm_gseq *out) {
    const cJSON *min = cJSON_GetObjectItemCaseSensitive(schema, "minimum");
    const cJSON *max = cJSON_GetObjectItemCaseSensitive(schema, "maximum");
    const double wide = 1e15;
    if (min && (!cJSON_IsNumber(min) || (min->valuedouble != 0 && min->valuedouble > -wide)))
        return unsupported(j, "minimum (other than 0 or beyond 15 digits)");
    if (max && (!cJSON_IsNumber(max) || max->valuedouble < wide))
        return unsupported(j, "maximum (other than one beyond 15 digits)");
    if (min && min->valuedouble == 0) {
        /* non-negative: the rule without its sign: integer -> sign natural */
        lm_gseq_ref(out, integer ? j->integer : j->number);
        /* the first element of these rules is the sign; a separate rule
         * without it is simpler to build here */
        out->n--;
        lm_gseq s = {0};
        const lm_grammar_builder *b = j->b;
        /* the alternative of the integer / number rule: [REF sign, REF natural, ...] */
        uint32_t rule = integer ? j->integer : j->number;
        uint32_t at = UINT32_MAX;
        for (uint32_t a = 0; a < b->n_alts; a++)
            if (b->alt_rule[a] == rule) at = b->alt_at[a];
        if (at == UINT32_MAX) return lm_fail(j->err, LM_ERR_INTERNAL, "number rule has no alternative");
        for (uint32_t e = at + 1; LM_GE_KIND(b->elems[e]) != LM_GE_END; e++) lm_gseq_push(&s, b->elems[e]);
        lm_gseq_append(out, &s);
        lm_gseq_free(&s);
        return LM_OK;
    }
    lm_gseq_ref(out, integer ? j->integer : j->number);
    return LM_OK;
}

static lm_status typed_schema(json_builder *j, const cJSON *schema, const char *type, lm_gseq *out, int depth) {
    if (strcmp(type, "object") == 0) return object_schema(j, schema, out, depth);
    if (strcmp(type, "array") == 0) return array_schema(j, schema, out, depth);
    if (strcmp(type, "string") == 0) return string_schema(j, schema, out);
    if (strcmp(type, "number") == 0) return number_schema(j, schema, false, out);
    if (strcmp(type, "integer") == 0) return number_schema(j, schema, true, out);
    if (strcmp(type, "boolean") == 0) {
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
    if (strcmp(type, "null") == 0) return lit(j, out, "null");
    return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: unknown type '%s'", type);
}

static lm_status resolve_ref(json_builder *j, const char *path, const cJSON **target) {
    if (strcmp(path, "#") == 0) {
        *target = j->root;
        return LM_OK;
    }
    const char *name = NULL, *group = NULL;
    if (strncmp(path, "#/$defs/", 8) == 0) {
        group = "$defs";
        name = path + 8;
    } else if (strncmp(path, "#/definitions/", 14) == 0) {
        group = "definitions";
        name = path + 14;
    } else {
        return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                       "JSON schema: '$ref' to '%s' is not supported (only \"#\", \"#/$defs/...\", \"#/definitions/...\")",
                       path);
    }
    if (strchr(name, '/') || strchr(name, '~'))
        return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '$ref' to '%s' is not supported (a nested path)", path);
    const cJSON *defs = cJSON_GetObjectItemCaseSensitive(j->root, group);
    *target = cJSON_GetObjectItemCaseSensitive(defs, name);
    if (!*target) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '$ref' names '%s', which is not defined", path);
    return LM_OK;
}

/* Whether the JSON value v is of the schema type named `name`. */
static bool value_is(const cJSON *v, const char *name) {
    if (strcmp(name, "string") == 0) return cJSON_IsString(v);
    if (strcmp(name, "number") == 0) return cJSON_IsNumber(v);
    if (strcmp(name, "integer") == 0) return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    if (strcmp(name, "boolean") == 0) return cJSON_IsBool(v);
    if (strcmp(name, "null") == 0) return cJSON_IsNull(v);
    if (strcmp(name, "object") == 0) return cJSON_IsObject(v);
    if (strcmp(name, "array") == 0) return cJSON_IsArray(v);
    return false;
}

/* With "type" beside "enum" or "const", every value must be of one of its
 * types: {"type": "integer", "enum": ["x"]} matches nothing, and
 * generating "x" for it would break the schema the client validates. */
static lm_status check_values_typed(json_builder *j, const cJSON *type, const cJSON *values, bool is_enum) {
    if (!type) return LM_OK;
    const cJSON *v = is_enum ? values->child : values;
    for (; v; v = is_enum ? v->next : NULL) {
        bool ok = false;
        if (cJSON_IsString(type)) ok = value_is(v, type->valuestring);
        else if (cJSON_IsArray(type)) {
            const cJSON *t;
            cJSON_ArrayForEach(t, type) ok = ok || (cJSON_IsString(t) && value_is(v, t->valuestring));
        } else {
            return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'type' must be a string or a list of strings");
        }
        if (!ok) {
            char *shown = cJSON_PrintUnformatted(v);
            char *type_text = cJSON_PrintUnformatted(type);
            lm_fail(j->err, LM_ERR_INVALID, "JSON schema: the %s value %.60s is not of type %.80s, so nothing matches",
                    is_enum ? "enum" : "const", shown ? shown : "?", type_text ? type_text : "?");
            cJSON_free(shown);
            cJSON_free(type_text);
            return LM_ERR_INVALID;
        }
    }
    return LM_OK;
}

static lm_status compile_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
    if (depth > LM_SCHEMA_MAX_DEPTH)
        return lm_fail(j->err, LM_ERR_NOMEM, "JSON schema nested deeper than %d", LM_SCHEMA_MAX_DEPTH);
    if (cJSON_IsBool(schema)) {
        if (cJSON_IsFalse(schema)) return unsupported(j, "false (a schema nothing matches)");
        TRY(any_value_rule(j));
        ref(out, j->value);
        return LM_OK;
    }
    if (!cJSON_IsObject(schema)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: a schema must be an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    const cJSON *refp = cJSON_GetObjectItemCaseSensitive(schema, "$ref");
    const cJSON *any_of = cJSON_GetObjectItemCaseSensitive(schema, "anyOf");
    const cJSON *enumv = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    const cJSON *constv = cJSON_GetObjectItemCaseSensitive(schema, "const");
    /* every keyword must be one this compiler honours */
    const cJSON *k;
    bool typed_words = false;
    for (k = schema->child; k; k = k->next) {
        if (is_annotation(k->string)) continue;
        if (strcmp(k->string, "type") == 0 || strcmp(k->string, "$ref") == 0 || strcmp(k->string, "anyOf") == 0 ||
            strcmp(k->string, "enum") == 0 || strcmp(k->string, "const") == 0)
            continue;
        if (is_keyword_of(k->string, object_words) || is_keyword_of(k->string, array_words) ||
            is_keyword_of(k->string, string_words) || is_keyword_of(k->string, number_words)) {
            typed_words = true;
            continue;
        }
        return unsupported(j, k->string);
    }
    int forms = (refp != NULL) + (any_of != NULL) + (enumv != NULL) + (constv != NULL);
    if (forms > 1 || (forms == 1 && (type || typed_words))) {
        /* a const or enum with a matching type is common: the type adds nothing */
        if (!(forms == 1 && (enumv || constv) && !typed_words))
            return unsupported(j, "$ref / anyOf / enum / const combined with other constraints");
    }
    if (refp) {
        if (!cJSON_IsString(refp)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '$ref' must be a string");
        const cJSON *target;
        TRY(resolve_ref(j, refp->valuestring, &target));
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
        lm_status st = compile_schema(j, target, &body, depth + 1);
        if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &body, j->err);
        lm_gseq_free(&body);
        ref(out, rule);
        return st;
    }
    if (enumv) {
        if (!cJSON_IsArray(enumv) || cJSON_GetArraySize(enumv) == 0)
            return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'enum' must be a non-empty array");
        TRY(check_values_typed(j, type, enumv, true));
        return enum_literals(j, enumv, out);
    }
    if (any_of) {
        const cJSON *list = any_of;
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
            return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'anyOf' must be a non-empty array");
        uint32_t rule = 0;
        TRY(lm_grammar_new_rule(j->b, &rule, j->err));
        const cJSON *item;
        cJSON_ArrayForEach(item, list) {
            lm_gseq s = {0};
            lm_status st = compile_schema(j, item, &s, depth + 1);
            if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
            lm_gseq_free(&s);
            if (st != LM_OK) return st;
        }
        ref(out, rule);
        return LM_OK;
    }
    if (constv) {
        TRY(check_values_typed(j, type, constv, false));
        return json_literal(j, constv, out);
    }
    if (!type) {
        if (!typed_words) {
            TRY(any_value_rule(j));
            ref(out, j->value);
            return LM_OK;
        }
        /* the type the keywords imply */
        for (k = schema->child; k; k = k->next) {
            if (is_keyword_of(k->string, object_words)) return object_schema(j, schema, out, depth);
            if (is_keyword_of(k->string, array_words)) return array_schema(j, schema, out, depth);
            if (is_keyword_of(k->string, string_words)) return string_schema(j, schema, out);
        }
        return unsupported(j, "minimum/maximum without a type");
    }
    if (cJSON_IsString(type)) return typed_schema(j, schema, type->valuestring, out, depth);
    if (!cJSON_IsArray(type) || cJSON_GetArraySize(type) == 0)
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'type' must be a string or a non-empty array");
    uint32_t rule = 0;
    TRY(lm_grammar_new_rule(j->b, &rule, j->err));
    const cJSON *t;
    cJSON_ArrayForEach(t, type) {
        if (!cJSON_IsString(t)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'type' must list strings");
        lm_gseq s = {0};
        lm_status st = typed_schema(j, schema, t->valuestring, &s, depth);
        if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
        lm_gseq_free(&s);
        if (st != LM_OK) return st;
    }
    ref(out, rule);
    return LM_OK;
}

static lm_status finish(json_builder *j, lm_gseq *top, const char *suffix, lm_grammar *out) {
    uint32_t root = 0;
    lm_status st = LM_OK;
    if (suffix) st = lm_gseq_literal(j->b, top, suffix, strlen(suffix), j->err);
    if (st == LM_OK) st = lm_grammar_rule_of(j->b, top, &root, j->err);
    if (st == LM_OK) st = lm_grammar_finish(j->b, root, out, j->err);
    return st;
}

lm_status lm_json_grammar(lm_json_kind kind, const char *suffix, lm_grammar *out, lm_error *err) {
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    json_builder *j = calloc(1, sizeof *j);
    if (!j) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    j->b = &b;
    j->err = err;
    lm_gseq top = {0};
    lm_status st = add_basics(j);
    if (st == LM_OK) st = any_value_rule(j);
    if (st == LM_OK && kind == LM_JSON_OBJECT) {
        /* the value rule's first alternative is the object */
        lm_gseq member = {0};
        st = string_value(j, &member);
        ref(&member, j->ws);
        if (st == LM_OK) st = lit(j, &member, ":");
        ref(&member, j->ws);
        ref(&member, j->value);
        if (st == LM_OK) st = repeated_container(j, &top, "{", "}", &member, 0, -1);
        lm_gseq_free(&member);
    } else {
        ref(&top, j->value);
    }
    if (st == LM_OK) st = finish(j, &top, suffix, out);
    lm_gseq_free(&top);
    lm_grammar_builder_free(&b);
    free(j);
    return st;
}

lm_status lm_json_schema_grammar(const char *schema, size_t len, const char *suffix, uint64_t deadline_ns,
                                 lm_grammar *out, lm_error *err) {
    if (len > LM_SCHEMA_MAX_BYTES)
        return lm_fail(err, LM_ERR_NOMEM, "JSON schema larger than %d bytes", LM_SCHEMA_MAX_BYTES);
    cJSON *doc = cJSON_ParseWithLength(schema, len);
    if (!doc) return lm_fail(err, LM_ERR_INVALID, "JSON schema: not valid JSON");
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    json_builder *j = calloc(1, sizeof *j);
    if (!j) {
        cJSON_Delete(doc);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    j->b = &b;
    j->err = err;
    j->root = doc;
    j->deadline = deadline_ns;
    lm_gseq top = {0};
    lm_status st = add_basics(j);
    if (st == LM_OK) st = compile_schema(j, doc, &top, 0);
    if (st == LM_OK) st = finish(j, &top, suffix, out);
    if (st == LM_OK) st = lm_grammar_check_cost(out, "JSON schema", deadline_ns, err);
    lm_gseq_free(&top);
    lm_grammar_builder_free(&b);
    free(j);
    cJSON_Delete(doc);
    return st;
}
