/* JSON and JSON Schema grammars (grammar/json_grammar.h). */
#include "grammar/json_grammar.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/cost.h"
#include "grammar/json_format.h"
#include "grammar/json_number.h"
#include "grammar/json_schema_merge.h"
#include "grammar/matcher.h"
#include "grammar/pattern_length.h"
#include "grammar/regex_compile.h"

typedef struct {
    const cJSON *target;
    uint32_t rule;
} schema_ref;

typedef struct {
    lm_grammar_builder *b;
    lm_error *err;
    /* ws: the gaps around brackets and before ':' and ','; sep: after ':'
     * and ','; NO_RULE where nothing may come */
    uint32_t ws, sep, utf8, string_body, string_char, key_body, escape, number, integer, value;
    bool have_value;
    const lm_json_options *options;
    const cJSON *root;
    bool draft4; /* the root's $schema is draft 3 or 4: boolean exclusiveMinimum/Maximum */
    uint64_t deadline; /* of the cost checks (grammar/cost.h) */
    schema_ref refs[LM_SCHEMA_MAX_REFS];
    int n_refs;
    cJSON **owned; /* the merged schemas made while compiling, deleted at the end */
    int n_owned, cap_owned;
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
static lm_status add_basics(json_builder *j) {
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

static void ref(lm_gseq *s, uint32_t rule) { lm_gseq_ref(s, rule); }
/* the whitespace that may come around brackets / after ':' and ',' */
static void gap(json_builder *j, lm_gseq *s) {
    if (j->ws != LM_GRAMMAR_NO_RULE) ref(s, j->ws);
}
static void sep(json_builder *j, lm_gseq *s) { ref(s, j->sep); }

static lm_status string_value(json_builder *j, lm_gseq *out) {
    TRY(lit(j, out, "\""));
    ref(out, j->string_body);
    return LM_OK;
}

/* seq: '{' ws (member (ws ',' ws member)*)? ws '}' with member given */
static lm_status repeated_container(json_builder *j, lm_gseq *out, const char *open, const char *close,
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

static lm_status any_value_rule(json_builder *j) {
    if (j->have_value) return LM_OK;
    lm_grammar_builder *b = j->b;
    TRY(lm_grammar_new_rule(b, &j->value, j->err));
    j->have_value = true;
    lm_gseq s = {0}, member = {0}, item = {0};
    TRY(string_value(j, &member));
    gap(j, &member);
    TRY(lit(j, &member, ":"));
    sep(j, &member);
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

static lm_status nomem(json_builder *j) { return lm_fail(j->err, LM_ERR_NOMEM, "out of memory"); }

/* Keeps a schema made while compiling until the end (refs point into it). */
static lm_status own(json_builder *j, cJSON *made) {
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

/* ---- numbers as the schema writes them */

/* cJSON keeps a number as a double; the schema's own text of each number
 * goes into its node's valuestring (which cJSON_Delete frees and
 * cJSON_Print ignores), read in document order: a const 9007199254740993
 * or a bound 0.1 is written back / compared as written. */
static const char *scan_number(const char **p, const char *end, size_t *len) {
    for (;;) {
        while (*p < end && **p != '"' && **p != '-' && !(**p >= '0' && **p <= '9')) (*p)++;
        if (*p >= end) return NULL;
        if (**p == '"') {
            for ((*p)++; *p < end && **p != '"'; (*p)++)
                if (**p == '\\') (*p)++;
            (*p)++;
            continue;
        }
        const char *start = *p;
        while (*p < end && strchr("0123456789+-.eE", **p)) (*p)++;
        *len = (size_t)(*p - start);
        return start;
    }
}

static bool stash_numbers(cJSON *node, const char **p, const char *end) {
    for (; node; node = node->next) {
        if (cJSON_IsNumber(node)) {
            size_t len = 0;
            const char *text = scan_number(p, end, &len);
            if (!text || node->valuestring) return false;
            node->valuestring = malloc(len + 1);
            if (!node->valuestring) return false;
            memcpy(node->valuestring, text, len);
            node->valuestring[len] = 0;
        }
        if (node->child && !stash_numbers(node->child, p, end)) return false;
    }
    return true;
}

static void number_text(const cJSON *v, char *buf, size_t size) {
    if (v->valuestring) snprintf(buf, size, "%s", v->valuestring);
    else lm_json_number_text(v->valuedouble, buf, size);
}

typedef struct {
    char *p;
    size_t n, cap;
    bool failed;
} text_buf;

static void put_text(text_buf *t, const char *s, size_t len) {
    if (t->failed) return;
    if (t->n + len + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->n + len + 1) cap *= 2;
        char *q = realloc(t->p, cap);
        if (!q) {
            t->failed = true;
            return;
        }
        t->p = q;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, len);
    t->n += len;
    t->p[t->n] = 0;
}

static void put_string(text_buf *t, const char *s) {
    cJSON tmp = {.type = cJSON_String, .valuestring = (char *)s};
    char *q = cJSON_PrintUnformatted(&tmp);
    if (!q) t->failed = true;
    else put_text(t, q, strlen(q));
    cJSON_free(q);
}

/* A value's compact JSON text with its numbers exact. */
static void print_exact(text_buf *t, const cJSON *v) {
    char num[LM_NUMBER_MAX_TEXT];
    if (cJSON_IsNumber(v)) {
        number_text(v, num, sizeof num);
        put_text(t, num, strlen(num));
    } else if (cJSON_IsString(v)) {
        put_string(t, v->valuestring);
    } else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        put_text(t, obj ? "{" : "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) put_text(t, ",", 1);
            if (obj) {
                put_string(t, c->string);
                put_text(t, ":", 1);
            }
            print_exact(t, c);
        }
        put_text(t, obj ? "}" : "]", 1);
    } else {
        const char *w = cJSON_IsTrue(v) ? "true" : cJSON_IsFalse(v) ? "false" : "null";
        put_text(t, w, strlen(w));
    }
}

static char *exact_text(const cJSON *v) {
    text_buf t = {0};
    print_exact(&t, v);
    if (t.failed) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

char *lm_json_text_exact(const cJSON *value) { return exact_text(value); }

/* ---- literals */

/* A value as its JSON text; in any-whitespace mode an object or array
 * value may still come as written compactly (the model copies it). */
static lm_status json_literal(json_builder *j, const cJSON *value, lm_gseq *out) {
    char *text = exact_text(value);
    if (!text) return nomem(j);
    lm_status st = lm_gseq_literal(j->b, out, text, strlen(text), j->err);
    free(text);
    return st;
}

/* Values as one trie of their JSON texts (grammar.h's lm_grammar_literals):
 * hundreds of values stay one matcher stack. */
static lm_status literals(json_builder *j, const cJSON *const *values, int n, lm_gseq *out) {
    char **texts = calloc((size_t)n, sizeof *texts);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    lm_status st = texts && lens ? LM_OK : nomem(j);
    for (int i = 0; i < n && st == LM_OK; i++) {
        texts[i] = exact_text(values[i]);
        if (!texts[i]) st = nomem(j);
        else lens[i] = strlen(texts[i]);
    }
    uint32_t rule = 0;
    if (st == LM_OK) st = lm_grammar_literals(j->b, (const char *const *)texts, lens, (uint32_t)n, &rule, j->err);
    if (st == LM_OK) ref(out, rule);
    for (int k = 0; texts && k < n; k++) free(texts[k]);
    free(texts);
    free(lens);
    return st;
}

/* ---- keywords */

/* The assertion keywords (JSON Schema 2020-12 and drafts 4-7) loom
 * honours; every other member is an annotation or unknown, which JSON
 * Schema says to ignore ($id, title, examples, x-*, readOnly, typos...). */
static const char *const honoured[] = {
    "type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not",
    "properties", "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties",
    "dependentRequired", "dependencies", "dependentSchemas",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "if", "then", "else", "contains", "minContains", "unevaluatedProperties", "unevaluatedItems", NULL};
/* assertions loom cannot honour: refused by name */
static const char *const refused[] = {"maxContains", "propertyNames", "$dynamicRef", "$recursiveRef", NULL};

static bool is_keyword_of(const char *key, const char *const *names) {
    for (const char *const *n = names; *n; n++)
        if (strcmp(key, *n) == 0) return true;
    return false;
}

static const char *const object_words[] = {"properties", "required", "additionalProperties", "patternProperties",
                                           "minProperties", "maxProperties", "dependentRequired", "dependencies",
                                           "dependentSchemas", "unevaluatedProperties", NULL};
static const char *const array_words[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                          "uniqueItems", "contains", "minContains", "unevaluatedItems", NULL};
static const char *const string_words[] = {"minLength", "maxLength", "pattern", "format", NULL};
static const char *const number_words[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                           "multipleOf", NULL};

/* Whether the schema asserts anything beyond "type" (and the forms given). */
static bool has_assertions(const cJSON *schema, const char *const *besides) {
    for (const cJSON *k = schema->child; k; k = k->next)
        if ((is_keyword_of(k->string, honoured) || is_keyword_of(k->string, refused)) &&
            !is_keyword_of(k->string, besides))
            return true;
    return false;
}

static const cJSON *get(const cJSON *schema, const char *key) { return cJSON_GetObjectItemCaseSensitive(schema, key); }

/* A count keyword: fallback when absent; above cap, cap where narrowing
 * is allowed (a maximum), refused where not (a minimum). */
static lm_status bounded_count(json_builder *j, const cJSON *schema, const char *key, int fallback, int cap,
                               bool is_max, int *out) {
    const cJSON *v = get(schema, key);
    *out = fallback;
    if (!v) return LM_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must be a non-negative integer", key);
    if (v->valuedouble > cap) {
        if (is_max) { /* fewer is still valid: the grammar stops at the cap */
            *out = cap;
            return LM_OK;
        }
        return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '%s' above %d is not supported", key, cap);
    }
    *out = (int)v->valuedouble;
    return LM_OK;
}

/* ---- normalizing: $ref beside siblings and allOf become one schema */

static lm_status resolve_ref(json_builder *j, const cJSON *refp, const cJSON **target) {
    if (!cJSON_IsString(refp)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '$ref' must be a string");
    const char *path = refp->valuestring;
    if (strcmp(path, "#") == 0) {
        *target = j->root;
        return LM_OK;
    }
    if (strncmp(path, "#/", 2) != 0)
        return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                       "JSON schema: '$ref' to '%.200s' is not supported (only references within the schema, \"#...\")", path);
    /* a JSON pointer: segments (empty ones too) with ~1 for '/' and ~0 for '~' */
    const cJSON *at = j->root;
    const char *p = path + 1;
    char name[256];
    while (at && *p == '/') {
        p++;
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && p[1] == '1') c = '/', p++;
            else if (c == '~' && p[1] == '0') c = '~', p++;
            else if (c == '%' && isxdigit((unsigned char)p[1]) && isxdigit((unsigned char)p[2])) { /* a URI's escape */
                char hex[3] = {p[1], p[2], 0};
                c = (char)strtol(hex, NULL, 16);
                p += 2;
            }
            if (n + 1 >= sizeof name)
                return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: '$ref' to '%.200s': a name too long", path);
            name[n++] = c;
        }
        name[n] = 0;
        if (cJSON_IsArray(at)) {
            char *end = NULL;
            long i = strtol(name, &end, 10);
            at = end && !*end ? cJSON_GetArrayItem(at, (int)i) : NULL;
        } else {
            at = cJSON_GetObjectItemCaseSensitive(at, name);
        }
    }
    if (!at) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '$ref' names '%.200s', which is not defined", path);
    *target = at;
    return LM_OK;
}

static lm_status merged(json_builder *j, const cJSON *a, const cJSON *b, const cJSON **out) {
    if (cJSON_IsFalse(a) || cJSON_IsFalse(b)) return unsupported(j, "false (a schema nothing matches)");
    if (cJSON_IsTrue(a) || cJSON_IsTrue(b)) {
        *out = cJSON_IsTrue(a) ? b : a;
        return LM_OK;
    }
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: a schema must be an object");
    cJSON *m = NULL;
    TRY(lm_schema_merge(a, b, &m, j->err));
    TRY(own(j, m));
    *out = m;
    return LM_OK;
}

static lm_status without(json_builder *j, const cJSON *schema, const char *key, const cJSON **out) {
    cJSON *w = lm_schema_without(schema, key);
    TRY(own(j, w));
    *out = w;
    return LM_OK;
}

static const char *const ref_word[] = {"$ref", NULL};

/* schema with its allOf and any $ref beside sibling keywords merged in;
 * a $ref alone is left for the caller (its rule is shared, recursion
 * included). */
static lm_status normalize(json_builder *j, const cJSON *schema, const cJSON **out) {
    const cJSON *cur = schema;
    for (int step = 0;; step++) {
        if (step > LM_SCHEMA_MAX_DEPTH)
            return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: $ref / allOf merged more than %d times (a recursive $ref beside other keywords?)",
                           LM_SCHEMA_MAX_DEPTH);
        if (!cJSON_IsObject(cur)) break;
        const cJSON *refp = get(cur, "$ref"), *all = get(cur, "allOf");
        if (refp && has_assertions(cur, ref_word)) {
            const cJSON *target, *rest;
            TRY(resolve_ref(j, refp, &target));
            TRY(without(j, cur, "$ref", &rest));
            TRY(merged(j, target, rest, &cur));
            continue;
        }
        if (get(cur, "if") || get(cur, "then") || get(cur, "else")) {
            /* if / then / else, bounded: instances of "if" and "then"
             * (narrower: those of "else" alone are never generated) */
            const cJSON *base, *cond = get(cur, "if"), *then = get(cur, "then");
            TRY(without(j, cur, "if", &base));
            TRY(without(j, base, "then", &base));
            TRY(without(j, base, "else", &base));
            if (cond) TRY(merged(j, base, cond, &base));
            if (cond && then) TRY(merged(j, base, then, &base));
            cur = base;
            continue;
        }
        if (all) {
            if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) == 0)
                return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'allOf' must be a non-empty array");
            const cJSON *base, *item;
            TRY(without(j, cur, "allOf", &base));
            cJSON_ArrayForEach(item, all) TRY(merged(j, base, item, &base));
            cur = base;
            continue;
        }
        break;
    }
    *out = cur;
    return LM_OK;
}

/* For analysis (oneOf): a schema normalized, a $ref alone followed. */
static lm_status normalize_through(json_builder *j, const cJSON *schema, const cJSON **out) {
    for (int step = 0; step <= LM_SCHEMA_MAX_DEPTH; step++) {
        TRY(normalize(j, schema, &schema));
        const cJSON *refp = cJSON_IsObject(schema) ? get(schema, "$ref") : NULL;
        if (!refp) {
            *out = schema;
            return LM_OK;
        }
        TRY(resolve_ref(j, refp, &schema));
    }
    return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: a $ref chain longer than %d", LM_SCHEMA_MAX_DEPTH);
}

/* ---- oneOf: exact where its branches cannot both match */

static unsigned values_types(const cJSON *schema, bool *has_values) {
    const cJSON *e = get(schema, "enum"), *c = get(schema, "const");
    *has_values = e || c;
    if (c) return lm_json_value_type(c);
    unsigned m = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, e) m |= lm_json_value_type(v);
    return e ? m : LM_JT_ALL;
}

static unsigned possible_types(const cJSON *s) {
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? LM_JT_ALL : 0;
    unsigned m = LM_JT_ALL;
    if (!lm_schema_type_mask(get(s, "type"), &m)) m = LM_JT_ALL;
    bool has;
    return m & values_types(s, &has);
}

static bool values_disjoint(const cJSON *x, const cJSON *y) {
    bool hx, hy;
    values_types(x, &hx);
    values_types(y, &hy);
    if (!hx || !hy) return false;
    const cJSON *vx = get(x, "enum") ? get(x, "enum") : get(x, "const");
    const cJSON *vy = get(y, "enum") ? get(y, "enum") : get(y, "const");
    bool lx = get(x, "enum") != NULL, ly = get(y, "enum") != NULL;
    const cJSON *a = lx ? vx->child : vx;
    for (; a; a = lx ? a->next : NULL) {
        const cJSON *b = ly ? vy->child : vy;
        for (; b; b = ly ? b->next : NULL)
            if (cJSON_Compare(a, b, true)) return false;
    }
    return true;
}

static bool requires(const cJSON *s, const char *name) {
    const cJSON *r;
    cJSON_ArrayForEach(r, get(s, "required")) if (cJSON_IsString(r) && strcmp(r->valuestring, name) == 0) return true;
    return false;
}

/* x's objects need a property that y's cannot have */
static bool excludes(const cJSON *x, const cJSON *y) {
    if (!cJSON_IsFalse(get(y, "additionalProperties")) || get(y, "patternProperties")) return false;
    const cJSON *r;
    cJSON_ArrayForEach(r, get(x, "required")) if (cJSON_IsString(r) && !get(get(y, "properties"), r->valuestring)) return true;
    return false;
}

/* The types x's grammar generates: without "type", those its keywords
 * speak of (compile_schema's choice). */
static unsigned implied_types(const cJSON *schema);

static lm_status pattern_matches(json_builder *j, const char *pattern, const char *name, bool *out);

/* x's listed string values all fail y's pattern (y a string schema of a pattern) */
static lm_status values_fail_pattern(json_builder *j, const cJSON *x, const cJSON *y, bool *out) {
    const cJSON *pattern = get(y, "pattern"), *e = get(x, "enum"), *c = get(x, "const");
    *out = false;
    if (!cJSON_IsString(pattern) || (!e && !c)) return LM_OK;
    const cJSON *v = c ? c : e->child;
    for (; v; v = c ? NULL : v->next) {
        if (!cJSON_IsString(v)) continue; /* other types: y's accepted types decide */
        bool hit = false;
        TRY(pattern_matches(j, pattern->valuestring, v->valuestring, &hit));
        if (hit) return LM_OK;
    }
    *out = true;
    return LM_OK;
}

/* Whether no instance x's grammar generates can match y. */
static lm_status disjoint(json_builder *j, const cJSON *x, const cJSON *y, bool *out) {
    TRY(normalize_through(j, x, &x));
    TRY(normalize_through(j, y, &y));
    *out = true;
    unsigned gen = cJSON_IsObject(x) ? implied_types(x) & possible_types(x) : possible_types(x);
    if (!(gen & possible_types(y))) return LM_OK;
    if (cJSON_IsObject(x) && cJSON_IsObject(y) && !(gen & possible_types(y) & ~LM_JT_STRING)) {
        bool apart = false;
        TRY(values_fail_pattern(j, x, y, &apart));
        if (apart) return LM_OK;
    }
    if (!cJSON_IsObject(x) || !cJSON_IsObject(y)) {
        *out = false;
        return LM_OK;
    }
    if (values_disjoint(x, y)) return LM_OK;
    if ((possible_types(x) & possible_types(y)) == LM_JT_OBJECT) {
        if (excludes(x, y) || excludes(y, x)) return LM_OK;
        /* a discriminator: a property both require, of values apart */
        const cJSON *p;
        cJSON_ArrayForEach(p, get(x, "properties")) {
            const cJSON *q = get(get(y, "properties"), p->string);
            if (!q || !requires(x, p->string) || !requires(y, p->string)) continue;
            const cJSON *px, *qy;
            TRY(normalize_through(j, p, &px));
            TRY(normalize_through(j, q, &qy));
            if (cJSON_IsObject(px) && cJSON_IsObject(qy) &&
                (values_disjoint(px, qy) || !(possible_types(px) & possible_types(qy))))
                return LM_OK;
        }
    }
    *out = false;
    return LM_OK;
}

/* ---- a value against a schema: the schema's own grammar, standalone */

static lm_status add_basics(json_builder *j);
static lm_status finish(json_builder *j, lm_gseq *top, const char *suffix, lm_grammar *out);

static bool grammar_accepts(const lm_grammar *g, const char *s, lm_error *err) {
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
static lm_status filter_values(json_builder *j, const cJSON *schema, const cJSON **values, int *n, int depth) {
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    json_builder *sub = calloc(1, sizeof *sub);
    if (!sub) return nomem(j);
    sub->b = &b;
    sub->err = j->err;
    sub->root = j->root;
    sub->draft4 = j->draft4;
    sub->deadline = j->deadline;
    lm_gseq top = {0};
    lm_grammar g = {0};
    lm_status st = add_basics(sub);
    if (st == LM_OK) st = compile_schema(sub, schema, &top, depth + 1);
    if (st == LM_OK) st = finish(sub, &top, NULL, &g);
    int kept = 0;
    for (int i = 0; i < *n && st == LM_OK; i++) {
        char *text = exact_text(values[i]);
        if (!text) st = nomem(j);
        else if (grammar_accepts(&g, text, j->err)) values[kept++] = values[i];
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

/* ---- strings */

static lm_status pattern_language(json_builder *j, const char *pattern, lm_gseq *out, const char *what) {
    lm_regex_options opt = {.utf8_rule = j->utf8};
    lm_byte_class_add_range(&opt.forbidden, 0, 0x1F);
    lm_byte_class_add(&opt.forbidden, '"');
    lm_byte_class_add(&opt.forbidden, '\\');
    lm_status st = lm_regex_compile(j->b, pattern, strlen(pattern), true, &opt, out, j->err);
    if (st != LM_OK) return lm_fail_context(j->err, "JSON schema '%s'", what);
    return lm_regex_check_cost(pattern, strlen(pattern), true, &opt, what, j->deadline, j->err);
}

static lm_status string_schema(json_builder *j, const cJSON *schema, lm_gseq *out) {
    const cJSON *pattern = get(schema, "pattern");
    const cJSON *format = get(schema, "format");
    bool has_min = get(schema, "minLength") != NULL, has_max = get(schema, "maxLength") != NULL;
    int min, max;
    TRY(bounded_count(j, schema, "minLength", 0, LM_SCHEMA_MAX_LENGTH, false, &min));
    TRY(bounded_count(j, schema, "maxLength", -1, LM_SCHEMA_MAX_LENGTH, true, &max));
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
        TRY(pattern_language(j, regex, out, what));
        return lit(j, out, "\"");
    }
    if (!has_min && !has_max) return string_value(j, out);
    lm_gseq one = {0};
    ref(&one, j->string_char);
    TRY(lit(j, out, "\""));
    lm_status st = lm_grammar_repeat(j->b, out, &one, min, max, j->err);
    lm_gseq_free(&one);
    if (st == LM_OK) st = lit(j, out, "\"");
    return st;
}

/* ---- numbers */

static lm_status number_schema(json_builder *j, const cJSON *schema, bool integer, lm_gseq *out) {
    const cJSON *min = get(schema, "minimum"), *max = get(schema, "maximum");
    const cJSON *xmin = get(schema, "exclusiveMinimum"), *xmax = get(schema, "exclusiveMaximum");
    const cJSON *mult = get(schema, "multipleOf");
    if (!min && !max && !xmin && !xmax && !mult) {
        ref(out, integer ? j->integer : j->number);
        return LM_OK;
    }
    char lo[LM_NUMBER_MAX_TEXT], hi[LM_NUMBER_MAX_TEXT];
    lm_number_bounds nb = {.integer = integer};
    for (int side = 0; side < 2; side++) {
        const cJSON *bound = side ? max : min, *ex = side ? xmax : xmin;
        const char *name = side ? "maximum" : "minimum";
        bool exclusive = false;
        if (bound && !cJSON_IsNumber(bound)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must be a number", name);
        if (ex && cJSON_IsBool(ex)) { /* draft 4: a flag on the bound */
            if (!j->draft4)
                return lm_fail(j->err, LM_ERR_UNSUPPORTED,
                               "JSON schema: a boolean '%s' (draft 4) without \"$schema\" naming draft 4 is not supported",
                               side ? "exclusiveMaximum" : "exclusiveMinimum");
            exclusive = cJSON_IsTrue(ex);
            ex = NULL;
        } else if (ex && !cJSON_IsNumber(ex)) {
            return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must be a number", side ? "exclusiveMaximum" : "exclusiveMinimum");
        }
        /* the tighter of the bound and the exclusive bound */
        if (ex && (!bound || (side ? ex->valuedouble <= bound->valuedouble : ex->valuedouble >= bound->valuedouble))) {
            bound = ex;
            exclusive = true;
        }
        if (!bound) continue;
        number_text(bound, side ? hi : lo, LM_NUMBER_MAX_TEXT);
        if (side) nb.max = hi, nb.max_exclusive = exclusive;
        else nb.min = lo, nb.min_exclusive = exclusive;
    }
    if (mult) {
        double m = cJSON_IsNumber(mult) ? mult->valuedouble : 0;
        if (!(m > 0)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'multipleOf' must be a number above 0");
        if (m != floor(m)) return unsupported(j, "multipleOf (a fraction)");
        if (m > LM_NUMBER_MAX_MULTIPLE)
            return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: 'multipleOf' above %d is not supported", LM_NUMBER_MAX_MULTIPLE);
        nb.multiple = (unsigned)m;
    }
    return lm_json_number(j->b, &nb, out, j->err);
}

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

/* Whether the pattern (search semantics) matches the name. */
static lm_status pattern_matches(json_builder *j, const char *pattern, const char *name, bool *out) {
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
    *out = st == LM_OK && grammar_accepts(&g, name, j->err);
    lm_gseq_free(&s);
    lm_grammar_free(&g);
    lm_grammar_builder_free(&b);
    if (st != LM_OK) return lm_fail_context(j->err, "JSON schema 'patternProperties'");
    return LM_OK;
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
    TRY(json_literal(j, &key, member));
    gap(j, member);
    TRY(lit(j, member, ":"));
    sep(j, member);
    return compile_schema(j, schema, member, depth + 1);
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

static lm_status object_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
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
        else if (cJSON_IsObject(additional)) TRY(merged(j, additional, uneval, &additional));
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
        TRY(without(j, schema, "properties", &copy));
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
        return object_schema(j, copy, out, depth);
    }
    object_plan o = {.n = cJSON_GetArraySize(props)};
    TRY(bounded_count(j, schema, "minProperties", 0, LM_SCHEMA_MAX_REPEAT, false, &o.min));
    TRY(bounded_count(j, schema, "maxProperties", -1, LM_SCHEMA_MAX_REPEAT, true, &o.max));
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
    /* a listed property a pattern matches must satisfy both schemas */
    bool pattern_names_listed = false;
    p = props ? props->child : NULL;
    for (int k = 0; k < o.n && st == LM_OK; k++, p = p->next) {
        const cJSON *value = p, *pp;
        cJSON_ArrayForEach(pp, patterns) {
            bool hit = false;
            if (st == LM_OK) st = pattern_matches(j, pp->string, p->string, &hit);
            if (st == LM_OK && hit) {
                pattern_names_listed = true;
                st = merged(j, value, pp, &value);
            }
        }
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
                for (pp = patterns->child->next; pp && st == LM_OK; pp = pp->next) st = merged(j, value, pp, &value);
                if (st == LM_OK && cJSON_IsObject(uneval)) st = merged(j, value, uneval, &value);
                if (st == LM_OK) st = lit(j, &o.extra_member, "\"");
                if (st == LM_OK) st = pattern_language(j, patterns->child->string, &o.extra_member, "JSON schema 'patternProperties'");
                if (st == LM_OK) st = lit(j, &o.extra_member, "\"");
                gap(j, &o.extra_member);
                if (st == LM_OK) st = lit(j, &o.extra_member, ":");
                sep(j, &o.extra_member);
                if (st == LM_OK) st = compile_schema(j, value, &o.extra_member, depth + 1);
                o.extras = st == LM_OK;
            }
        } else if (cJSON_IsObject(additional) || (o.n == 0 && o.min > 0 && !cJSON_IsFalse(additional))) {
            if (o.n) st = key_not_in(j, props, &o.extra_member);
            else st = string_value(j, &o.extra_member);
            gap(j, &o.extra_member);
            if (st == LM_OK) st = lit(j, &o.extra_member, ":");
            sep(j, &o.extra_member);
            if (st == LM_OK) {
                if (cJSON_IsObject(additional)) {
                    st = compile_schema(j, additional, &o.extra_member, depth + 1);
                } else {
                    st = any_value_rule(j);
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

/* ---- arrays */

/* The values an item schema allows, when it lists them (enum, const,
 * boolean, null): unique items are then a subsequence of that list. */
static int listed_values(const cJSON *items, const cJSON **values, int cap) {
    if (!cJSON_IsObject(items)) return 0;
    static cJSON t = {.type = cJSON_True}, f = {.type = cJSON_False}, nul = {.type = cJSON_NULL};
    const cJSON *e = get(items, "enum"), *c = get(items, "const"), *type = get(items, "type");
    if (has_assertions(items, (const char *const[]){"enum", "const", "type", NULL})) return 0;
    int n = 0;
    if (c) values[n++] = c;
    else if (e) {
        const cJSON *v;
        cJSON_ArrayForEach(v, e) {
            if (n == cap) return 0;
            values[n++] = v;
        }
    } else if (cJSON_IsString(type) && strcmp(type->valuestring, "boolean") == 0) {
        values[n++] = &t;
        values[n++] = &f;
    } else if (cJSON_IsString(type) && strcmp(type->valuestring, "null") == 0) {
        values[n++] = &nul;
    }
    /* with a type beside, each value must have it */
    unsigned mask;
    if (!lm_schema_type_mask(type, &mask)) return 0;
    for (int i = 0; i < n; i++)
        if (!(lm_json_value_type(values[i]) & mask)) return 0;
    return n;
}

#define LM_UNIQUE_MAX_VALUES 32

/* unique items of listed values: in the list's order, each at most once */
static lm_status unique_listed(json_builder *j, const cJSON **values, int n, int min, int max, lm_gseq *out) {
    if (max < 0 || max > n) max = n;
    if (min > max) return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: minItems above the distinct values uniqueItems allows");
    /* U[i][c]: values i.. may come, c came so far; rule + 1 */
    uint32_t *u = calloc((size_t)(n + 1) * (size_t)(max + 1), sizeof *u);
    if (!u) return nomem(j);
    lm_status st = LM_OK;
    for (int i = n; i >= 0 && st == LM_OK; i--)
        for (int c = max; c >= 0 && st == LM_OK; c--) {
            uint32_t rule = 0;
            st = lm_grammar_new_rule(j->b, &rule, j->err);
            bool any = false;
            if (st == LM_OK && c >= min) {
                lm_gseq s = {0};
                gap(j, &s);
                st = lit(j, &s, "]");
                if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
                lm_gseq_free(&s);
                any = true;
            }
            for (int k = i; k < n && c < max && st == LM_OK; k++) {
                uint32_t next = u[(size_t)(k + 1) * (size_t)(max + 1) + (size_t)(c + 1)];
                if (!next) continue;
                lm_gseq s = {0};
                if (c) {
                    gap(j, &s);
                    st = lit(j, &s, ",");
                    sep(j, &s);
                }
                if (st == LM_OK) st = json_literal(j, values[k], &s);
                ref(&s, next - 1);
                if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
                lm_gseq_free(&s);
                any = true;
            }
            if (st == LM_OK && !any) { /* unreachable states still need an alternative: one nothing reaches */
                lm_gseq s = {0};
                st = lit(j, &s, "]");
                if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
                lm_gseq_free(&s);
                continue;
            }
            u[(size_t)i * (size_t)(max + 1) + (size_t)c] = rule + 1;
        }
    if (st == LM_OK) st = lit(j, out, "[");
    gap(j, out);
    if (st == LM_OK) ref(out, u[0] - 1);
    free(u);
    return st;
}

static lm_status array_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
    const cJSON *items = get(schema, "items"), *prefix = get(schema, "prefixItems");
    const cJSON *rest = items;
    if (cJSON_IsArray(items)) { /* drafts 4-2019: items as a tuple, additionalItems after it */
        prefix = items;
        rest = get(schema, "additionalItems");
    }
    const cJSON *uneval = get(schema, "unevaluatedItems"); /* as unevaluatedProperties above */
    if (uneval && !cJSON_IsTrue(uneval)) {
        if (!rest || cJSON_IsTrue(rest) || cJSON_IsFalse(uneval)) rest = uneval;
        else if (cJSON_IsObject(rest)) TRY(merged(j, rest, uneval, &rest));
    }
    if (prefix && !cJSON_IsArray(prefix)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'prefixItems' must be an array");
    const cJSON *contains = get(schema, "contains");
    if (contains) {
        /* at least minContains (default 1) items of it: the first ones, of
         * contains and items together (narrower: others may come later);
         * prefixItems beside it refused */
        if (prefix) return unsupported(j, "contains beside prefixItems");
        int need = 1;
        TRY(bounded_count(j, schema, "minContains", 1, LM_SCHEMA_MAX_REPEAT, false, &need));
        if (need > 0) {
            const cJSON *first = contains;
            if (rest) TRY(merged(j, rest, contains, &first));
            cJSON *tuple = cJSON_CreateArray();
            TRY(own(j, tuple));
            for (int i = 0; i < need; i++) cJSON_AddItemReferenceToArray(tuple, (cJSON *)first);
            prefix = tuple;
            if (!rest) rest = cJSON_IsTrue(contains) ? contains : NULL;
        }
    }
    int min, max;
    TRY(bounded_count(j, schema, "minItems", 0, LM_SCHEMA_MAX_REPEAT, false, &min));
    TRY(bounded_count(j, schema, "maxItems", -1, LM_SCHEMA_MAX_REPEAT, true, &max));
    if (max >= 0 && max < min) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: maxItems is below minItems");
    int k = cJSON_GetArraySize(prefix);
    if (contains && k > min) min = k;
    if (cJSON_IsFalse(rest) && (max < 0 || max > k)) max = k;
    if (max >= 0 && max < min) return lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: minItems above the items the schema allows");
    const cJSON *unique = get(schema, "uniqueItems");
    if (cJSON_IsTrue(unique) && (max < 0 || max > 1)) {
        const cJSON *values[LM_UNIQUE_MAX_VALUES];
        int n = k ? 0 : listed_values(rest, values, LM_UNIQUE_MAX_VALUES);
        if (n > 0) return unique_listed(j, values, n, min, max, out);
        /* any items: at most one is unique (narrower, never wider) */
        if (min > 1) return unsupported(j, "uniqueItems with minItems above 1 (items other than listed values)");
        max = 1;
    }
    /* item i's schema: prefix[i], then rest (absent or true: any value) */
    lm_gseq rest_item = {0};
    lm_status st = LM_OK;
    bool rest_any = !rest || cJSON_IsTrue(rest);
    if (!cJSON_IsFalse(rest) && (max < 0 || max > k)) {
        if (rest_any) {
            st = any_value_rule(j);
            ref(&rest_item, j->value);
        } else {
            st = compile_schema(j, rest, &rest_item, depth + 1);
        }
    }
    if (st == LM_OK && k == 0) {
        st = repeated_container(j, out, "[", "]", &rest_item, min, max);
        lm_gseq_free(&rest_item);
        return st;
    }
    /* a chain: state i (items so far) closes if i >= min, or goes on */
    int last = max >= 0 ? max : (min > k ? min : k);
    uint32_t next = LM_GRAMMAR_NO_RULE;
    for (int i = last; i >= 0 && st == LM_OK; i--) {
        uint32_t rule = 0;
        st = lm_grammar_new_rule(j->b, &rule, j->err);
        if (st == LM_OK && i >= min) {
            lm_gseq s = {0};
            gap(j, &s);
            st = lit(j, &s, "]");
            if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
            lm_gseq_free(&s);
        }
        lm_gseq s = {0};
        if (i) {
            gap(j, &s);
            if (st == LM_OK) st = lit(j, &s, ",");
            sep(j, &s);
        }
        if (i < last && st == LM_OK) {
            if (i < k) st = compile_schema(j, cJSON_GetArrayItem(prefix, i), &s, depth + 1);
            else lm_gseq_append(&s, &rest_item);
            ref(&s, next);
            if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
        } else if (i == last && max < 0 && st == LM_OK) {
            /* past the tuple and minItems: any number more */
            lm_gseq more = {0};
            gap(j, &more);
            st = lit(j, &more, ",");
            sep(j, &more);
            lm_gseq_append(&more, &rest_item);
            uint32_t star = 0;
            if (st == LM_OK) st = lm_grammar_star(j->b, &more, &star, j->err);
            lm_gseq_free(&more);
            lm_gseq_clear(&s);
            lm_gseq_append(&s, &rest_item);
            ref(&s, star);
            gap(j, &s);
            if (st == LM_OK) st = lit(j, &s, "]");
            if (i) {
                /* after item i-1: a comma, the item, more, the end */
                lm_gseq t = {0};
                gap(j, &t);
                if (st == LM_OK) st = lit(j, &t, ",");
                sep(j, &t);
                lm_gseq_append(&t, &s);
                lm_gseq_free(&s);
                s = t;
            }
            if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
        }
        lm_gseq_free(&s);
        next = rule;
    }
    lm_gseq_free(&rest_item);
    if (st == LM_OK) st = lit(j, out, "[");
    gap(j, out);
    if (st == LM_OK) ref(out, next);
    return st;
}

/* ---- the schema */

static lm_status typed_schema(json_builder *j, const cJSON *schema, unsigned type, lm_gseq *out, int depth) {
    switch (type) {
    case LM_JT_OBJECT: return object_schema(j, schema, out, depth);
    case LM_JT_ARRAY: return array_schema(j, schema, out, depth);
    case LM_JT_STRING: return string_schema(j, schema, out);
    case LM_JT_INTEGER | LM_JT_FRACTION: return number_schema(j, schema, false, out);
    case LM_JT_INTEGER: return number_schema(j, schema, true, out);
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
        char *shown = exact_text(values[i]);
        char *type_text = cJSON_PrintUnformatted(type);
        lm_fail(j->err, LM_ERR_INVALID, "JSON schema: the %s value %.60s is not of type %.80s, so nothing matches",
                is_enum ? "enum" : "const", shown ? shown : "?", type_text ? type_text : "?");
        free(shown);
        cJSON_free(type_text);
        return LM_ERR_INVALID;
    }
    return LM_OK;
}

static lm_status values_schema(json_builder *j, const cJSON *schema, lm_gseq *out, int depth) {
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
    if (has_assertions(schema, (const char *const[]){"enum", "const", "type", NULL})) {
        /* other keywords beside: the values their grammar accepts */
        const cJSON *rest = NULL;
        st = without(j, schema, "enum", &rest);
        if (st == LM_OK) st = without(j, rest, "const", &rest);
        if (st == LM_OK) st = filter_values(j, rest, values, &n, depth);
    } else if (get(schema, "type")) {
        st = check_values_typed(j, get(schema, "type"), values, n, enumv != NULL);
    }
    if (st == LM_OK && n == 0)
        st = lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: no enum/const value satisfies the keywords beside it");
    if (st == LM_OK) st = n == 1 ? json_literal(j, values[0], out) : literals(j, values, n, out);
    free(values);
    return st;
}

/* "not" where it has a bounded form: a schema of types alone (the types
 * left), or values (dropped from an enum beside it is not done: refused). */
static lm_status not_types(json_builder *j, const cJSON *not, unsigned *mask) {
    if (!not || cJSON_IsFalse(not)) return LM_OK;
    if (cJSON_IsObject(not) && get(not, "type") && !has_assertions(not, (const char *const[]){"type", NULL})) {
        unsigned m;
        if (!lm_schema_type_mask(get(not, "type"), &m))
            return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'type' must be a string or a list of strings");
        *mask &= ~m;
        return LM_OK;
    }
    return unsupported(j, "not (other than of types)");
}

static lm_status branches_schema(json_builder *j, const cJSON *schema, const char *word, lm_gseq *out, int depth) {
    const cJSON *list = get(schema, word);
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: '%s' must be a non-empty array", word);
    if (cJSON_GetArraySize(list) > LM_SCHEMA_MAX_REFS)
        return lm_fail(j->err, LM_ERR_NOMEM, "JSON schema: '%s' of more than %d branches", word, LM_SCHEMA_MAX_REFS);
    const cJSON *siblings = NULL;
    TRY(without(j, schema, word, &siblings));
    bool beside = has_assertions(siblings, (const char *const[]){NULL});
    int n = cJSON_GetArraySize(list);
    const cJSON **branch = calloc((size_t)n, sizeof *branch);
    if (!branch) return nomem(j);
    lm_status st = LM_OK;
    int m = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        if (st != LM_OK) break;
        if (cJSON_IsFalse(item)) continue; /* matches nothing: never taken */
        const cJSON *b = item;
        if (beside) st = merged(j, siblings, item, &b);
        branch[m++] = b;
    }
    /* oneOf: exactly one branch must match.  A branch is generated only
     * where what it generates can match no other branch (of them all,
     * generated or not): exact where the branches are apart, narrower
     * where some overlap, refused where every branch overlaps another. */
    if (st == LM_OK && strcmp(word, "oneOf") == 0 && m > LM_SCHEMA_MAX_ONEOF)
        st = lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: 'oneOf' of more than %d branches is not supported",
                     LM_SCHEMA_MAX_ONEOF);
    if (st == LM_OK && strcmp(word, "oneOf") == 0) {
        int kept = 0, first_x = -1, first_y = -1;
        const cJSON *all[LM_SCHEMA_MAX_REFS];
        for (int x = 0; x < m; x++) all[x] = branch[x];
        for (int x = 0; x < m && st == LM_OK; x++) {
            bool alone = true;
            if (j->deadline && lm_grammar_now_ns() > j->deadline)
                st = lm_fail(j->err, LM_ERR_UNSUPPORTED, "JSON schema: comparing the branches of a 'oneOf' took more than %d ms",
                             LM_GRAMMAR_COMPILE_MS);
            for (int y = 0; y < m && st == LM_OK && alone; y++) {
                if (y == x) continue;
                bool apart = false;
                st = disjoint(j, all[x], all[y], &apart);
                if (st == LM_OK && !apart) {
                    alone = false;
                    if (first_x < 0) first_x = x, first_y = y;
                }
            }
            if (st == LM_OK && alone) branch[kept++] = all[x];
        }
        if (st == LM_OK && kept == 0 && m > 0)
            st = lm_fail(j->err, LM_ERR_UNSUPPORTED,
                         "JSON schema: 'oneOf' whose branches all may match another (%d and %d) is not supported "
                         "(branches apart by type, const/enum values or a required discriminator property are)",
                         first_x < first_y ? first_x : first_y, first_x < first_y ? first_y : first_x);
        m = kept;
    }
    uint32_t rule = 0;
    if (st == LM_OK && m == 0) st = unsupported(j, "anyOf/oneOf of false branches only (nothing matches)");
    if (st == LM_OK) st = lm_grammar_new_rule(j->b, &rule, j->err);
    for (int i = 0; i < m && st == LM_OK; i++) {
        lm_gseq s = {0};
        st = compile_schema(j, branch[i], &s, depth + 1);
        if (st == LM_OK) st = lm_grammar_add_alt(j->b, rule, &s, j->err);
        lm_gseq_free(&s);
    }
    free(branch);
    if (st == LM_OK) ref(out, rule);
    return st;
}

static unsigned implied_types(const cJSON *schema) {
    unsigned mask;
    if (get(schema, "type")) return lm_schema_type_mask(get(schema, "type"), &mask) ? mask : LM_JT_ALL;
    unsigned implied = 0;
    for (const cJSON *k = schema->child; k; k = k->next) {
        if (is_keyword_of(k->string, object_words)) implied |= LM_JT_OBJECT;
        if (is_keyword_of(k->string, array_words)) implied |= LM_JT_ARRAY;
        if (is_keyword_of(k->string, string_words)) implied |= LM_JT_STRING;
        if (is_keyword_of(k->string, number_words)) implied |= LM_JT_INTEGER | LM_JT_FRACTION;
    }
    if (get(schema, "enum") || get(schema, "const") || get(schema, "anyOf") || get(schema, "oneOf") || get(schema, "$ref"))
        return LM_JT_ALL; /* the values / branches decide */
    return implied ? implied : LM_JT_ALL;
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
    for (const cJSON *k = schema->child; k; k = k->next)
        if (is_keyword_of(k->string, refused)) return unsupported(j, k->string);
    TRY(normalize(j, schema, &schema));
    if (!cJSON_IsObject(schema)) return compile_schema(j, schema, out, depth + 1);
    for (const cJSON *k = schema->child; k; k = k->next)
        if (is_keyword_of(k->string, refused)) return unsupported(j, k->string);
    const cJSON *refp = get(schema, "$ref");
    if (refp) { /* alone: one rule per target, recursion included */
        const cJSON *target;
        TRY(resolve_ref(j, refp, &target));
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
    if (get(schema, "anyOf") && get(schema, "oneOf")) return unsupported(j, "anyOf beside oneOf");
    if (get(schema, "anyOf")) return branches_schema(j, schema, "anyOf", out, depth);
    if (get(schema, "oneOf")) return branches_schema(j, schema, "oneOf", out, depth);
    if (get(schema, "enum") || get(schema, "const")) return values_schema(j, schema, out, depth);
    unsigned mask;
    if (!lm_schema_type_mask(get(schema, "type"), &mask)) {
        const cJSON *type = get(schema, "type");
        if (cJSON_IsString(type)) return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: unknown type '%.64s'", type->valuestring);
        return lm_fail(j->err, LM_ERR_INVALID, "JSON schema: 'type' must be a string or a non-empty list of strings");
    }
    /* without a type, the types the keywords speak of (the others would
     * pass them vacuously: generating only these is narrower) */
    mask = implied_types(schema);
    TRY(not_types(j, get(schema, "not"), &mask));
    if ((mask & (LM_JT_INTEGER | LM_JT_FRACTION)) == LM_JT_FRACTION) mask &= ~LM_JT_FRACTION; /* not integers: refused below */
    if (!mask) return unsupported(j, "a schema whose types leave nothing (not / type)");
    if (mask == LM_JT_ALL && !has_assertions(schema, (const char *const[]){"not", NULL})) {
        TRY(any_value_rule(j));
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

static lm_status finish(json_builder *j, lm_gseq *top, const char *suffix, lm_grammar *out) {
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
    lm_status st = add_basics(j);
    if (st == LM_OK) st = any_value_rule(j);
    if (st == LM_OK && kind == LM_JSON_OBJECT) {
        lm_gseq member = {0};
        st = string_value(j, &member);
        gap(j, &member);
        if (st == LM_OK) st = lit(j, &member, ":");
        sep(j, &member);
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
    if (!stash_numbers(doc, &scan, schema + len)) {
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
    lm_status st = add_basics(j);
    if (st == LM_OK) st = compile_schema(j, doc, &top, 0);
    if (st == LM_OK) st = finish(j, &top, suffix, out);
    if (st == LM_OK) st = lm_grammar_check_cost(out, "JSON schema", deadline_ns, err);
    lm_gseq_free(&top);
    lm_grammar_builder_free(&b);
    for (int i = 0; i < j->n_owned; i++) cJSON_Delete(j->owned[i]);
    free(j->owned);
    free(j);
    cJSON_Delete(doc);
    return st;
}
