/* String schemas: minLength / maxLength in characters, pattern, format. */
#include "grammar/json_schema_compiler.h"

#include "grammar/cost.h"
#include "grammar/json_format.h"
#include "grammar/pattern_length.h"
#include "grammar/regex_compile.h"

/* ---- strings */

lm_status lm_js_pattern_language(json_builder *j, const char *pattern, lm_gseq *out, const char *what) {
    lm_regex_options opt = {.utf8_rule = j->utf8};
    lm_byte_class_add_range(&opt.forbidden, 0, 0x1F);
    lm_byte_class_add(&opt.forbidden, '"');
    lm_byte_class_add(&opt.forbidden, '\\');
    lm_status st = lm_regex_compile(j->b, pattern, strlen(pattern), true, &opt, out, j->err);
    if (st != LM_OK) return lm_fail_context(j->err, "JSON schema '%s'", what);
    return lm_regex_check_cost(pattern, strlen(pattern), true, &opt, what, j->deadline, j->err);
}

lm_status lm_js_string_schema(json_builder *j, const cJSON *schema, lm_gseq *out) {
    const cJSON *pattern = get(schema, "pattern");
    const cJSON *format = get(schema, "format");
    bool has_min = get(schema, "minLength") != NULL, has_max = get(schema, "maxLength") != NULL;
    int min, max;
    TRY(lm_js_bounded_count(j, schema, "minLength", 0, LM_SCHEMA_MAX_LENGTH, false, &min));
    TRY(lm_js_bounded_count(j, schema, "maxLength", -1, LM_SCHEMA_MAX_LENGTH, true, &max));
    if (max >= 0 && max < min) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: maxLength is below minLength");
    const char *regex = NULL, *what = "JSON schema 'pattern'";
    if (format && !cJSON_IsString(format)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'format' must be a string");
    if (format) {
        bool refused_format = false;
        int fmin = 0, fmax = -1;
        regex = lm_json_format_regex(format->valuestring, &refused_format, &fmin, &fmax);
        if (refused_format)
            return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: 'format' \"%.64s\" is not supported", format->valuestring);
        if (regex && pattern) return unsupported(j, "format together with pattern");
        if (regex && (has_min || has_max) && fmin >= min && fmax >= 0 && (max < 0 || fmax <= max))
            has_min = has_max = false; /* the format's lengths are within them */
        what = "JSON schema 'format'";
    }
    if (pattern && !cJSON_IsString(pattern)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'pattern' must be a string");
    if (pattern || regex) {
        if (pattern) regex = pattern->valuestring;
        if (has_min || has_max) { /* the pattern's automaton times a count */
            lm_regex_options opt = {.utf8_rule = j->utf8};
            lm_byte_class_add_range(&opt.forbidden, 0, 0x1F);
            lm_byte_class_add(&opt.forbidden, '"');
            lm_byte_class_add(&opt.forbidden, '\\');
            TRY(lm_regex_check_cost(regex, strlen(regex), true, &opt, what, j->deadline, j->err));
            TRY(lit(j, out, "\""));
            return lm_pattern_with_length(j->b, regex, &opt, min, max, j->deadline, out, j->err);
        }
    }
    if (regex) {
        TRY(lit(j, out, "\""));
        TRY(lm_js_pattern_language(j, regex, out, what));
        return lit(j, out, "\"");
    }
    if (!has_min && !has_max) return lm_js_string_value(j, out);
    lm_gseq one = {0};
    ref(&one, j->string_char);
    TRY(lit(j, out, "\""));
    lm_status st = lm_grammar_repeat(j->b, out, &one, min, max, j->err);
    lm_gseq_free(&one);
    if (st == LM_OK) st = lit(j, out, "\"");
    return st;
}


/* Whether the pattern (search semantics) matches the name. */
lm_status lm_js_pattern_matches(json_builder *j, const char *pattern, const char *name, bool *out) {
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    lm_regex_options opt = {0};
    lm_gseq s = {0};
    uint32_t root = 0;
    lm_grammar g = {0};
    lm_status st = lm_grammar_utf8_multibyte_rule(&b, &opt.utf8_rule, j->err);
    if (st == LM_OK) st = lm_regex_compile(&b, pattern, strlen(pattern), true, &opt, &s, j->err);
    if (st == LM_OK) st = lm_grammar_rule_of(&b, &s, &root, j->err);
    if (st == LM_OK) st = lm_grammar_finish(&b, root, &g, j->err);
    if (st == LM_OK) st = lm_grammar_check_cost(&g, "JSON schema 'patternProperties'", j->deadline, j->err);
    *out = st == LM_OK && lm_js_grammar_accepts(&g, name, j->err);
    lm_gseq_free(&s);
    lm_grammar_free(&g);
    lm_grammar_builder_free(&b);
    if (st != LM_OK) return lm_fail_context(j->err, "JSON schema 'patternProperties'");
    return LM_OK;
}
