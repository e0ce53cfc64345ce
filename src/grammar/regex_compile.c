/* The regular-expression subset (grammar/regex_compile.h), by recursive
 * descent straight into grammar elements: a concatenation is a sequence,
 * an alternation a rule with one alternative per branch, a quantifier
 * lm_grammar_repeat of its unit. */
#include "grammar/regex_compile.h"

#include <stdio.h>
#include <string.h>

#include "grammar/cost.h"

typedef struct {
    lm_grammar_builder *b;
    const char *s;
    size_t n, i;
    lm_regex_options *opt;
    int depth;
    lm_error *err;
} regex_parser;

static lm_status parse_alternation(regex_parser *p, lm_gseq *out);

static lm_status unsupported(regex_parser *p, const char *what) {
    return lm_fail(p->err, LM_ERR_UNSUPPORTED, "regular expression: %s (at offset %zu) is not supported", what,
                   p->i);
}

static void class_minus_forbidden(regex_parser *p, lm_byte_class *c) {
    for (int w = 0; w < 4; w++) c->bits[w] &= ~p->opt->forbidden.bits[w];
}

/* One character matching c or any multi-byte character (with_utf8). */
static lm_status emit_class(regex_parser *p, lm_gseq *out, lm_byte_class c, bool with_utf8) {
    class_minus_forbidden(p, &c);
    /* only ASCII bytes stand for themselves in a class */
    for (int b = 128; b < 256; b++) c.bits[b >> 6] &= ~(1ull << (b & 63));
    if (!with_utf8) return lm_gseq_class(p->b, out, &c, p->err);
    uint32_t rule = 0;
    lm_status st = lm_grammar_new_rule(p->b, &rule, p->err);
    lm_gseq one = {0};
    bool any = false;
    for (int w = 0; w < 4; w++) any |= c.bits[w] != 0;
    if (st == LM_OK && any) st = lm_gseq_class(p->b, &one, &c, p->err);
    if (st == LM_OK && any) st = lm_grammar_add_alt(p->b, rule, &one, p->err);
    lm_gseq_clear(&one);
    lm_gseq_ref(&one, p->opt->utf8_rule);
    if (st == LM_OK) st = lm_grammar_add_alt(p->b, rule, &one, p->err);
    lm_gseq_free(&one);
    if (st == LM_OK) lm_gseq_ref(out, rule);
    return st;
}

static void class_of_escape(char e, lm_byte_class *c, bool *negated) {
    memset(c, 0, sizeof *c);
    *negated = false;
    switch (e) {
    case 'D': *negated = true; /* fall through */
    case 'd': lm_byte_class_add_range(c, '0', '9'); break;
    case 'W': *negated = true; /* fall through */
    case 'w':
        lm_byte_class_add_range(c, 'a', 'z');
        lm_byte_class_add_range(c, 'A', 'Z');
        lm_byte_class_add_range(c, '0', '9');
        lm_byte_class_add(c, '_');
        break;
    case 'S': *negated = true; /* fall through */
    case 's':
        lm_byte_class_add(c, ' ');
        lm_byte_class_add_range(c, '\t', '\r');
        break;
    }
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A single-byte escape (after the backslash, at p->i): its byte, or -1 if
 * the escape is a class or unsupported (err set when unsupported). */
static lm_status escape_byte(regex_parser *p, int *byte) {
    char e = p->s[p->i];
    static const char simple[] = "nrtfv0";
    static const char value[] = "\n\r\t\f\v";
    const char *at = strchr(simple, e);
    if (e && at) {
        *byte = e == '0' ? 0 : value[at - simple];
        p->i++;
        return LM_OK;
    }
    if (e == 'x') {
        if (p->i + 2 >= p->n + 0 && p->i + 2 > p->n) return unsupported(p, "a truncated \\x escape");
        int hi = p->i + 1 < p->n ? hex_digit(p->s[p->i + 1]) : -1;
        int lo = p->i + 2 < p->n ? hex_digit(p->s[p->i + 2]) : -1;
        if (hi < 0 || lo < 0) return unsupported(p, "a malformed \\x escape");
        if (hi * 16 + lo >= 128) return unsupported(p, "a \\x escape above 0x7F");
        *byte = hi * 16 + lo;
        p->i += 3;
        return LM_OK;
    }
    if ((unsigned char)e < 128 && e && strchr("\\.^$|?*+()[]{}/-\"' #&,:;<=>@_`~!%", e)) {
        *byte = (unsigned char)e;
        p->i++;
        return LM_OK;
    }
    if (e && strchr("bBAzZG", e)) return unsupported(p, "an assertion escape such as \\b");
    if (e >= '1' && e <= '9') return unsupported(p, "a backreference");
    if (e == 'p' || e == 'P') return unsupported(p, "a Unicode property class \\p");
    if (e == 'u') return unsupported(p, "a \\u escape");
    return unsupported(p, "this escape");
}

static lm_status literal_byte(regex_parser *p, lm_gseq *out, int byte) {
    if (lm_byte_class_has(&p->opt->forbidden, (uint8_t)byte))
        return lm_fail(p->err, LM_ERR_UNSUPPORTED,
                       "regular expression: the character 0x%02X (at offset %zu) cannot appear unescaped here",
                       byte, p->i);
    return lm_gseq_byte(p->b, out, (uint8_t)byte, p->err);
}

static lm_status parse_class(regex_parser *p, lm_gseq *out) {
    p->i++; /* '[' */
    bool negated = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        negated = true;
        p->i++;
    }
    lm_byte_class c = {{0}};
    bool first = true;
    while (p->i < p->n && (p->s[p->i] != ']' || first)) {
        first = false;
        int lo;
        unsigned char ch = (unsigned char)p->s[p->i];
        if (ch >= 128) return unsupported(p, "a non-ASCII character in a class");
        if (ch == '[') return unsupported(p, "a nested class or POSIX class");
        if (ch == '\\') {
            p->i++;
            if (p->i >= p->n) return unsupported(p, "a trailing backslash");
            char e = p->s[p->i];
            if (e && strchr("dDwWsS", e)) {
                lm_byte_class sub;
                bool neg;
                class_of_escape(e, &sub, &neg);
                if (neg) return unsupported(p, "a negated escape inside a class");
                for (int w = 0; w < 4; w++) c.bits[w] |= sub.bits[w];
                p->i++;
                continue;
            }
            lm_status st = escape_byte(p, &lo);
            if (st != LM_OK) return st;
        } else {
            lo = ch;
            p->i++;
        }
        int hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            unsigned char h = (unsigned char)p->s[p->i];
            if (h >= 128) return unsupported(p, "a non-ASCII character in a class");
            if (h == '\\') {
                p->i++;
                lm_status st = escape_byte(p, &hi);
                if (st != LM_OK) return st;
            } else {
                hi = h;
                p->i++;
            }
            if (hi < lo) return lm_fail(p->err, LM_ERR_INVALID, "regular expression: a reversed range in a class");
        }
        lm_byte_class_add_range(&c, (uint8_t)lo, (uint8_t)hi);
    }
    if (p->i >= p->n) return lm_fail(p->err, LM_ERR_INVALID, "regular expression: an unclosed [");
    p->i++; /* ']' */
    if (negated) {
        for (int w = 0; w < 4; w++) c.bits[w] = ~c.bits[w];
        return emit_class(p, out, c, true);
    }
    return emit_class(p, out, c, false);
}

static lm_status parse_atom(regex_parser *p, lm_gseq *out) {
    unsigned char ch = (unsigned char)p->s[p->i];
    if (ch == '(') {
        p->i++;
        if (p->i < p->n && p->s[p->i] == '?') {
            if (p->i + 1 < p->n && p->s[p->i + 1] == ':') p->i += 2;
            else return unsupported(p, "a group construct (?...) other than (?:");
        }
        if (++p->depth > LM_REGEX_MAX_NESTING)
            return lm_fail(p->err, LM_ERR_NOMEM, "regular expression: groups nested deeper than %d",
                           LM_REGEX_MAX_NESTING);
        lm_status st = parse_alternation(p, out);
        p->depth--;
        if (st != LM_OK) return st;
        if (p->i >= p->n || p->s[p->i] != ')') return lm_fail(p->err, LM_ERR_INVALID, "regular expression: an unclosed (");
        p->i++;
        return LM_OK;
    }
    if (ch == '[') return parse_class(p, out);
    if (ch == '.') {
        p->i++;
        lm_byte_class c;
        memset(&c, 0xff, sizeof c);
        c.bits['\n' >> 6] &= ~(1ull << '\n');
        return emit_class(p, out, c, true);
    }
    if (ch == '\\') {
        p->i++;
        if (p->i >= p->n) return unsupported(p, "a trailing backslash");
        char e = p->s[p->i];
        if (e && strchr("dDwWsS", e)) {
            lm_byte_class c;
            bool neg;
            class_of_escape(e, &c, &neg);
            p->i++;
            if (neg) {
                for (int w = 0; w < 4; w++) c.bits[w] = ~c.bits[w];
                return emit_class(p, out, c, true);
            }
            return emit_class(p, out, c, false);
        }
        int byte;
        lm_status st = escape_byte(p, &byte);
        if (st != LM_OK) return st;
        return literal_byte(p, out, byte);
    }
    if (ch == '^' || ch == '$') return unsupported(p, "an anchor inside the pattern");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
        return lm_fail(p->err, LM_ERR_INVALID, "regular expression: a quantifier with nothing before it (offset %zu)",
                       p->i);
    /* a literal character: all its UTF-8 bytes */
    size_t len = ch < 0x80 ? 1 : ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : 2;
    if (p->i + len > p->n) return lm_fail(p->err, LM_ERR_INVALID, "regular expression: invalid UTF-8");
    for (size_t k = 0; k < len; k++) {
        lm_status st = literal_byte(p, out, (unsigned char)p->s[p->i + k]);
        if (st != LM_OK) return st;
    }
    p->i += len;
    return LM_OK;
}

static bool parse_count(regex_parser *p, int *value) {
    int v = 0, digits = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        if (v > LM_REGEX_MAX_REPEAT * 10) return false;
        v = v * 10 + (p->s[p->i++] - '0');
        digits++;
    }
    *value = v;
    return digits > 0;
}

static lm_status parse_quantified(regex_parser *p, lm_gseq *out) {
    lm_gseq unit = {0};
    lm_status st = parse_atom(p, &unit);
    while (st == LM_OK && p->i < p->n && strchr("*+?{", p->s[p->i])) {
        int min, max;
        char q = p->s[p->i];
        if (q == '{') {
            size_t at = p->i++;
            if (!parse_count(p, &min)) {
                st = unsupported(p, "a '{' that is no {m,n} quantifier (escape it)");
                break;
            }
            max = min;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                max = -1;
                if (p->i < p->n && p->s[p->i] != '}' && !parse_count(p, &max)) {
                    st = lm_fail(p->err, LM_ERR_INVALID, "regular expression: a malformed {m,n} at offset %zu", at);
                    break;
                }
            }
            if (p->i >= p->n || p->s[p->i] != '}') {
                st = lm_fail(p->err, LM_ERR_INVALID, "regular expression: a malformed {m,n} at offset %zu", at);
                break;
            }
            p->i++;
            if (min > LM_REGEX_MAX_REPEAT || max > LM_REGEX_MAX_REPEAT) {
                st = lm_fail(p->err, LM_ERR_UNSUPPORTED, "regular expression: a repetition count above %d",
                             LM_REGEX_MAX_REPEAT);
                break;
            }
            if (max >= 0 && max < min) {
                st = lm_fail(p->err, LM_ERR_INVALID, "regular expression: {%d,%d} has max < min", min, max);
                break;
            }
        } else {
            p->i++;
            min = q == '+' ? 1 : 0;
            max = q == '?' ? 1 : -1;
        }
        if (p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy: the same language */
        else if (p->i < p->n && p->s[p->i] == '+') {
            st = unsupported(p, "a possessive quantifier");
            break;
        }
        lm_gseq repeated = {0};
        st = lm_grammar_repeat(p->b, &repeated, &unit, min, max, p->err);
        lm_gseq_free(&unit);
        unit = repeated;
    }
    if (st == LM_OK) lm_gseq_append(out, &unit);
    lm_gseq_free(&unit);
    return st;
}

static lm_status parse_concat(regex_parser *p, lm_gseq *out) {
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        /* a '$' closing the whole pattern is an anchor */
        if (p->s[p->i] == '$' && p->i + 1 == p->n && p->depth == 0) break;
        lm_status st = parse_quantified(p, out);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

static lm_status parse_alternation(regex_parser *p, lm_gseq *out) {
    lm_gseq branch = {0};
    lm_status st = parse_concat(p, &branch);
    if (st != LM_OK || p->i >= p->n || p->s[p->i] != '|') {
        if (st == LM_OK) lm_gseq_append(out, &branch);
        lm_gseq_free(&branch);
        return st;
    }
    uint32_t rule = 0;
    st = lm_grammar_new_rule(p->b, &rule, p->err);
    if (st == LM_OK) st = lm_grammar_add_alt(p->b, rule, &branch, p->err);
    while (st == LM_OK && p->i < p->n && p->s[p->i] == '|') {
        p->i++;
        lm_gseq_clear(&branch);
        st = parse_concat(p, &branch);
        if (st == LM_OK) st = lm_grammar_add_alt(p->b, rule, &branch, p->err);
    }
    lm_gseq_free(&branch);
    if (st == LM_OK) lm_gseq_ref(out, rule);
    return st;
}

static lm_status any_chars(regex_parser *p, lm_gseq *out) {
    lm_byte_class c;
    memset(&c, 0xff, sizeof c);
    lm_gseq one = {0};
    lm_status st = emit_class(p, &one, c, true);
    uint32_t star = 0;
    if (st == LM_OK) st = lm_grammar_star(p->b, &one, &star, p->err);
    lm_gseq_free(&one);
    if (st == LM_OK) lm_gseq_ref(out, star);
    return st;
}

lm_status lm_regex_compile(lm_grammar_builder *b, const char *pattern, size_t len, bool search,
                           lm_regex_options *options, lm_gseq *out, lm_error *err) {
    if (len > LM_REGEX_MAX_LENGTH)
        return lm_fail(err, LM_ERR_NOMEM, "regular expression longer than %d bytes", LM_REGEX_MAX_LENGTH);
    regex_parser p = {.b = b, .s = pattern, .n = len, .opt = options, .err = err};
    bool start_anchor = len > 0 && pattern[0] == '^';
    bool end_anchor = len > 0 && pattern[len - 1] == '$' && !(len >= 2 && pattern[len - 2] == '\\');
    if (start_anchor) p.i = 1;
    options->has_anchors = start_anchor && end_anchor;
    lm_status st = LM_OK;
    if (search && !start_anchor) st = any_chars(&p, out);
    if (st == LM_OK) st = parse_alternation(&p, out);
    if (st == LM_OK && end_anchor && p.i == len - 1) p.i = len;
    if (st == LM_OK && p.i < len)
        st = p.s[p.i] == ')' ? lm_fail(err, LM_ERR_INVALID, "regular expression: an unmatched ) at offset %zu", p.i)
                             : unsupported(&p, "this construct");
    if (st == LM_OK && search && !end_anchor) st = any_chars(&p, out);
    if (st == LM_OK && out->failed) st = lm_fail(err, LM_ERR_NOMEM, "regular expression: grammar too large");
    return st;
}

lm_status lm_regex_check_cost(const char *pattern, size_t len, bool search, const lm_regex_options *options,
                              const char *what, uint64_t deadline_ns, lm_error *err) {
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    lm_regex_options opt = {.forbidden = options->forbidden};
    lm_gseq s = {0};
    uint32_t root = 0;
    lm_grammar g = {0};
    lm_status st = lm_grammar_utf8_multibyte_rule(&b, &opt.utf8_rule, err);
    if (st == LM_OK) st = lm_regex_compile(&b, pattern, len, search, &opt, &s, err);
    if (st == LM_OK) st = lm_grammar_rule_of(&b, &s, &root, err);
    if (st == LM_OK) st = lm_grammar_finish(&b, root, &g, err);
    lm_gseq_free(&s);
    lm_grammar_builder_free(&b);
    if (st == LM_OK) {
        char quoted[96], name[160];
        lm_grammar_quote(quoted, sizeof quoted, pattern, len, 64);
        snprintf(name, sizeof name, "%s %s", what, quoted);
        st = lm_grammar_check_cost(&g, name, deadline_ns, err);
    }
    lm_grammar_free(&g);
    return st;
}
