/* The rules every JSON grammar shares: whitespace, strings, numbers, any value. */
#include "grammar/json_schema_compiler.h"

#include <stdlib.h>

#include "grammar/cost.h"
#include "grammar/regex_compile.h"

/* Whitespace: compact by default (one optional space after ':' and ',',
 * nothing elsewhere: a superset of xgrammar's compact separators ", " and
 * ": " and of llguidance's "," and ":"), any (at most LM_JSON_MAX_WS bytes
 * of [ \t\n\r] in every gap), or the caller's pattern in every gap. */
static lm_status whitespace_rules(json_builder *j) {
    lm_grammar_builder *b = j->b;
    lm_error *err = j->err;
    const lm_json_options *o = j->options;
    lm_gseq one = {0}, s = {0};
    if (o && o->whitespace_pattern) {
        lm_regex_options opt = {0};
        TRY(lm_grammar_utf8_multibyte_rule(b, &opt.utf8_rule, err));
        lm_status st = lm_regex_compile(b, o->whitespace_pattern, o->pattern_len, false, &opt, &s, err);
        if (st != LM_OK) st = lm_fail_context(err, "the whitespace pattern");
        if (st == LM_OK)
            st = lm_regex_check_cost(o->whitespace_pattern, o->pattern_len, false, &opt, "the whitespace pattern",
                                     j->deadline, err);
        if (st == LM_OK) st = lm_grammar_rule_of(b, &s, &j->ws, err);
        lm_gseq_free(&s);
        if (st != LM_OK) return st;
        j->sep = j->ws;
        return LM_OK;
    }
    if (o && o->any_whitespace) {
        lm_byte_class wsc = {{0}};
        lm_byte_class_add(&wsc, ' ');
        lm_byte_class_add(&wsc, '\t');
        lm_byte_class_add(&wsc, '\n');
        lm_byte_class_add(&wsc, '\r');
        TRY(lm_gseq_class(b, &one, &wsc, err));
        TRY(lm_grammar_repeat(b, &s, &one, 0, LM_JSON_MAX_WS, err));
        lm_gseq_free(&one);
        TRY(rule_of(j, &s, &j->ws));
        j->sep = j->ws;
        return LM_OK;
    }
    j->ws = LM_GRAMMAR_NO_RULE;
    TRY(lit(j, &s, " "));
    TRY(rule_of(j, &s, &j->sep));
    return lm_grammar_add_empty_alt(b, j->sep, err);
}

/* \\u escapes of one character each: a surrogate pair together (a
 * validator counts the character it spells once), no lone surrogates. */
static lm_status counted_unicode_escapes(json_builder *j, uint32_t rule, const lm_byte_class *hex) {
    lm_grammar_builder *b = j->b;
    lm_byte_class not_d = *hex, d = {{0}}, low8 = {{0}}, high = {{0}}, low = {{0}};
    not_d.bits['d' >> 6] &= ~(1ull << ('d' & 63));
    not_d.bits['D' >> 6] &= ~(1ull << ('D' & 63));
    lm_byte_class_add(&d, 'd');
    lm_byte_class_add(&d, 'D');
    lm_byte_class_add_range(&low8, '0', '7');
    lm_byte_class_add_range(&high, '8', '9');
    lm_byte_class_add_range(&high, 'a', 'b');
    lm_byte_class_add_range(&high, 'A', 'B');
    lm_byte_class_add_range(&low, 'c', 'f');
    lm_byte_class_add_range(&low, 'C', 'F');
    lm_gseq s = {0};
    for (int form = 0; form < 3; form++) {
        TRY(lit(j, &s, "\\u"));
        if (form == 0) TRY(lm_gseq_class(b, &s, &not_d, j->err));
        else TRY(lm_gseq_class(b, &s, &d, j->err));
        if (form == 0) TRY(lm_gseq_class(b, &s, hex, j->err));
        if (form == 1) TRY(lm_gseq_class(b, &s, &low8, j->err));
        if (form == 2) TRY(lm_gseq_class(b, &s, &high, j->err));
        for (int i = 0; i < 2; i++) TRY(lm_gseq_class(b, &s, hex, j->err));
        if (form == 2) {
            TRY(lit(j, &s, "\\u"));
            TRY(lm_gseq_class(b, &s, &d, j->err));
            TRY(lm_gseq_class(b, &s, &low, j->err));
            for (int i = 0; i < 2; i++) TRY(lm_gseq_class(b, &s, hex, j->err));
        }
        TRY(lm_grammar_add_alt(b, rule, &s, j->err));
        lm_gseq_clear(&s);
    }
    lm_gseq_free(&s);
    return LM_OK;
}

/* The pieces every JSON grammar shares, made once. */
lm_status lm_js_add_basics(json_builder *j) {
    lm_grammar_builder *b = j->b;
    lm_error *err = j->err;
    lm_gseq s = {0};
    TRY(whitespace_rules(j));
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
    TRY(lm_gseq_class(b, &s, &simple, err));
    TRY(lm_grammar_add_alt(b, j->string_char, &s, err));
    lm_gseq_clear(&s);
    TRY(counted_unicode_escapes(j, j->string_char, &hex));
    lm_gseq_ref(&s, j->utf8);
    TRY(lm_grammar_add_alt(b, j->string_char, &s, err));
    lm_gseq_clear(&s);
    /* a key of an additional property: no escapes, so that its text is
     * its name (and cannot spell a listed property's name another way) */
    TRY(lm_grammar_new_rule(b, &j->key_body, err));
    TRY(lm_gseq_class(b, &s, &plain, err));
    lm_gseq_ref(&s, j->key_body);
    TRY(lm_grammar_add_alt(b, j->key_body, &s, err));
    lm_gseq_clear(&s);
    TRY(lm_grammar_utf8_alts(b, j->key_body, j->key_body, err));
    TRY(lit(j, &s, "\""));
    TRY(lm_grammar_add_alt(b, j->key_body, &s, err));
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
    /* two exponent digits: 15 digits times 10^99 stays a finite double
     * (1.2e854 reads as Infinity in JavaScript, which no schema allows) */
    TRY(lm_grammar_repeat(b, &s, &digit, 1, 2, err));
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


lm_status lm_js_string_value(json_builder *j, lm_gseq *out) {
    TRY(lit(j, out, "\""));
    ref(out, j->string_body);
    return LM_OK;
}

/* seq: '{' ws (member (ws ',' ws member)*)? ws '}' with member given */
lm_status lm_js_repeated_container(json_builder *j, lm_gseq *out, const char *open, const char *close,
                                    const lm_gseq *item, int min, int max) {
    TRY(lit(j, out, open));
    gap(j, out);
    if (max != 0) {
        lm_gseq body = {0}, more = {0};
        lm_gseq_append(&body, item);
        gap(j, &more);
        TRY(lit(j, &more, ","));
        sep(j, &more);
        lm_gseq_append(&more, item);
        TRY(lm_grammar_repeat(j->b, &body, &more, min > 1 ? min - 1 : 0, max < 0 ? -1 : max - 1, j->err));
        gap(j, &body);
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

lm_status lm_js_any_value_rule(json_builder *j) {
    if (j->have_value) return LM_OK;
    lm_grammar_builder *b = j->b;
    TRY(lm_grammar_new_rule(b, &j->value, j->err));
    j->have_value = true;
    lm_gseq s = {0}, member = {0}, item = {0};
    TRY(lm_js_string_value(j, &member));
    gap(j, &member);
    TRY(lit(j, &member, ":"));
    sep(j, &member);
    ref(&member, j->value);
    TRY(lm_js_repeated_container(j, &s, "{", "}", &member, 0, -1));
    TRY(lm_grammar_add_alt(b, j->value, &s, j->err));
    lm_gseq_clear(&s);
    ref(&item, j->value);
    TRY(lm_js_repeated_container(j, &s, "[", "]", &item, 0, -1));
    TRY(lm_grammar_add_alt(b, j->value, &s, j->err));
    lm_gseq_clear(&s);
    TRY(lm_js_string_value(j, &s));
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

/* Keeps a schema made while compiling until the end (refs point into it). */
lm_status lm_js_own(json_builder *j, cJSON *made) {
    if (!made) return nomem(j);
    if (j->n_owned == j->cap_owned) {
        int cap = j->cap_owned ? 2 * j->cap_owned : 16;
        cJSON **o = realloc(j->owned, sizeof *o * (size_t)cap);
        if (!o) {
            cJSON_Delete(made);
            return nomem(j);
        }
        j->owned = o;
        j->cap_owned = cap;
    }
    j->owned[j->n_owned++] = made;
    return LM_OK;
}
