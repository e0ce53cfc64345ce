/* GBNF into grammar elements (grammar/gbnf.h), by recursive descent: a
 * named rule is one grammar rule, a group a rule of its alternatives, a
 * quantifier lm_grammar_repeat of its unit; a character class becomes the
 * UTF-8 byte sequences of its code point ranges.  The finished grammar is
 * then checked for endless rules and left recursion (grammar/rule_check.h),
 * reported with the GBNF names. */
#include "grammar/gbnf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/code_points.h"
#include "grammar/rule_check.h"

#define CLASS_CACHE 64 /* classes kept to share their rule (`.` used in many places) */

typedef struct {
    const char *name; /* into the text */
    uint32_t len;
    uint32_t rule;
    size_t first_use; /* offset of the first mention */
    size_t defined_at;
    bool defined;
} symbol;

typedef struct {
    lm_cp_set set;
    uint32_t rule;
} cached_class;

typedef struct {
    lm_grammar_builder *b;
    const char *s;
    size_t n, i;
    int depth;
    symbol *syms;
    uint32_t n_syms;
    int32_t *slots; /* hash table of symbols, 2 * LM_GBNF_MAX_NAMES */
    uint32_t *owner; /* per builder rule, the symbol it was made for */
    uint32_t n_owned, cap_owned;
    uint32_t current; /* the symbol being defined */
    cached_class cache[CLASS_CACHE];
    uint32_t n_cache;
    lm_error *err;
} parser;

/* --- messages ---------------------------------------------------------- */

static void line_column(const parser *p, size_t at, unsigned *line, unsigned *column) {
    *line = 1;
    *column = 1;
    for (size_t k = 0; k < at && k < p->n; k++) {
        if (p->s[k] == '\n') {
            (*line)++;
            *column = 1;
        } else if (((unsigned char)p->s[k] & 0xC0) != 0x80) {
            (*column)++; /* columns count characters */
        }
    }
}

__attribute__((format(printf, 4, 5))) static lm_status fail_at(parser *p, lm_status code, size_t at, const char *fmt,
                                                               ...) {
    char what[LM_ERROR_MESSAGE_MAX - 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    unsigned line, column;
    line_column(p, at, &line, &column);
    return lm_fail(p->err, code, "GBNF grammar, line %u column %u: %s", line, column, what);
}

static lm_status syntax(parser *p, const char *what) { return fail_at(p, LM_ERR_INVALID, p->i, "%s", what); }

/* The byte at i shown in a message: "`x`", "the end of the line", ... */
static const char *shown(const parser *p, char *buf, size_t size) {
    if (p->i >= p->n) return "the end of the grammar";
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\n' || c == '\r') return "the end of the line";
    if (c < 0x20 || c == 0x7F) snprintf(buf, size, "the byte 0x%02X", c);
    else if (c == '`') snprintf(buf, size, "'`'");
    else if (c < 0x80) snprintf(buf, size, "`%c`", c);
    else snprintf(buf, size, "a non-ASCII character");
    return buf;
}

/* --- symbols and rules ------------------------------------------------- */

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Records the symbol every rule made since the last call belongs to, and
 * holds the compiled size to its bounds. */
static lm_status own_new_rules(parser *p) {
    if (p->b->n_rules > LM_GBNF_MAX_RULES)
        return fail_at(p, LM_ERR_NOMEM, p->i, "the grammar compiles to more than %u rules (repetitions count)",
                       LM_GBNF_MAX_RULES);
    if (p->b->n_elems > LM_GBNF_MAX_ELEMS)
        return fail_at(p, LM_ERR_NOMEM, p->i, "the grammar compiles to more than %u elements (repetitions count)",
                       LM_GBNF_MAX_ELEMS);
    if (p->b->n_rules > p->cap_owned) {
        uint32_t cap = p->cap_owned ? p->cap_owned : 256;
        while (cap < p->b->n_rules) cap *= 2;
        uint32_t *o = realloc(p->owner, sizeof *o * cap);
        if (!o) return lm_fail(p->err, LM_ERR_NOMEM, "out of memory");
        p->owner = o;
        p->cap_owned = cap;
    }
    while (p->n_owned < p->b->n_rules) p->owner[p->n_owned++] = p->current;
    return LM_OK;
}

static lm_status new_rule(parser *p, uint32_t *rule) {
    lm_status st = lm_grammar_new_rule(p->b, rule, p->err);
    return st == LM_OK ? own_new_rules(p) : st;
}

static uint64_t name_hash(const char *s, uint32_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t k = 0; k < len; k++) h = (h ^ (uint8_t)s[k]) * 0x100000001b3ull;
    return h;
}

/* The symbol of the name at [at, at + len), made (with its rule) on first mention. */
static lm_status find_symbol(parser *p, size_t at, uint32_t len, uint32_t *out) {
    const char *name = p->s + at;
    uint32_t mask = 2 * LM_GBNF_MAX_NAMES - 1;
    for (uint32_t k = (uint32_t)name_hash(name, len) & mask;; k = (k + 1) & mask) {
        int32_t s = p->slots[k];
        if (s < 0) {
            if (p->n_syms >= LM_GBNF_MAX_NAMES)
                return fail_at(p, LM_ERR_NOMEM, at, "more than %d rule names", LM_GBNF_MAX_NAMES);
            symbol *sym = &p->syms[p->n_syms];
            *sym = (symbol){.name = name, .len = len, .first_use = at};
            uint32_t saved = p->current;
            p->current = p->n_syms;
            lm_status st = new_rule(p, &sym->rule);
            p->current = saved;
            if (st != LM_OK) return st;
            p->slots[k] = (int32_t)p->n_syms;
            *out = p->n_syms++;
            return LM_OK;
        }
        if (p->syms[s].len == len && memcmp(p->syms[s].name, name, len) == 0) {
            *out = (uint32_t)s;
            return LM_OK;
        }
    }
}

/* --- lexing ------------------------------------------------------------- */

/* Spaces, tabs and comments; newlines too where the rule goes on past them. */
static void skip_space(parser *p, bool newlines) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r') p->i++;
        } else {
            break;
        }
    }
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One strictly well-formed UTF-8 character at i. */
static lm_status decode_utf8(parser *p, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    uint32_t c = s[0], len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > left) return syntax(p, "invalid UTF-8");
    c = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (uint32_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return syntax(p, "invalid UTF-8");
        c = c << 6 | (s[k] & 0x3F);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < least[len] || c > LM_MAX_CODE_POINT || (c >= 0xD800 && c <= 0xDFFF)) return syntax(p, "invalid UTF-8");
    *cp = c;
    p->i += len;
    return LM_OK;
}

/* One character of a literal or a class: an escape or a UTF-8 character. */
static lm_status parse_char(parser *p, uint32_t *cp) {
    if (p->i >= p->n) return syntax(p, "the grammar ends inside a literal or a class");
    if (p->s[p->i] != '\\') return decode_utf8(p, cp);
    size_t at = p->i++;
    if (p->i >= p->n) return syntax(p, "the grammar ends after a backslash");
    char e = p->s[p->i++];
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = p->i < p->n ? hex_value(p->s[p->i]) : -1;
            if (h < 0) return fail_at(p, LM_ERR_INVALID, at, "\\%c needs %d hex digits", e, digits);
            v = v << 4 | (uint32_t)h;
            p->i++;
        }
        if (v > LM_MAX_CODE_POINT) return fail_at(p, LM_ERR_INVALID, at, "\\%c%.*s is past U+10FFFF", e, digits, p->s + at + 2);
        if (v >= 0xD800 && v <= 0xDFFF)
            return fail_at(p, LM_ERR_INVALID, at, "\\%c%.*s is a surrogate, not a character", e, digits, p->s + at + 2);
        *cp = v;
        return LM_OK;
    }
    switch (e) {
    case 'n': *cp = '\n'; return LM_OK;
    case 'r': *cp = '\r'; return LM_OK;
    case 't': *cp = '\t'; return LM_OK;
    default: break;
    }
    /* \\ \" \[ \] as llama.cpp, and any other escaped ASCII punctuation as itself */
    if ((unsigned char)e < 0x80 && e > 0x20 && !is_name_char(e)) {
        *cp = (unsigned char)e;
        return LM_OK;
    }
    p->i = at;
    if ((unsigned char)e < 0x80 && e > 0x20) return fail_at(p, LM_ERR_INVALID, at, "unknown escape `\\%c`", e);
    return fail_at(p, LM_ERR_INVALID, at, "a backslash before the byte 0x%02X (no escape)", (unsigned char)e);
}

/* Appends one character of the set to out: a byte class when the set is
 * ASCII, else a reference to a rule of its byte sequences (shared by equal
 * sets). */
static lm_status emit_set(parser *p, lm_gseq *out, const lm_cp_set *s) {
    lm_byte_class c;
    if (s->r[s->n - 1].hi < 0x80) {
        lm_cp_set_ascii(s, &c);
        return lm_gseq_class(p->b, out, &c, p->err);
    }
    for (uint32_t k = 0; k < p->n_cache; k++) {
        const lm_cp_set *x = &p->cache[k].set;
        if (x->n == s->n && memcmp(x->r, s->r, sizeof *s->r * s->n) == 0) {
            lm_gseq_ref(out, p->cache[k].rule);
            return LM_OK;
        }
    }
    uint32_t rule = 0;
    lm_status st = new_rule(p, &rule);
    if (st == LM_OK) st = lm_cp_set_alts(p->b, rule, LM_GRAMMAR_NO_RULE, s, p->err);
    if (st != LM_OK) return st;
    lm_gseq_ref(out, rule);
    if (p->n_cache < CLASS_CACHE) {
        lm_cp_range *copy = malloc(sizeof *copy * s->n);
        if (copy) {
            memcpy(copy, s->r, sizeof *copy * s->n);
            p->cache[p->n_cache++] = (cached_class){{copy, s->n, s->n}, rule};
        }
    }
    return own_new_rules(p);
}

/* --- the grammar -------------------------------------------------------- */

static lm_status parse_alternates(parser *p, uint32_t rule, bool nested);

static lm_status parse_literal(parser *p, lm_gseq *out) {
    size_t at = p->i++;
    while (p->i < p->n && p->s[p->i] != '"') {
        uint32_t cp = 0;
        lm_status st = parse_char(p, &cp);
        if (st != LM_OK) return st;
        uint8_t bytes[4];
        size_t len = lm_utf8_encode(cp, bytes);
        st = lm_gseq_literal(p->b, out, (const char *)bytes, len, p->err);
        if (st != LM_OK) return st;
    }
    if (p->i >= p->n) return fail_at(p, LM_ERR_INVALID, at, "a string literal that is never closed");
    p->i++;
    return LM_OK;
}

/* A class [...] into *set (normalized). */
static lm_status parse_class(parser *p, lm_cp_set *set) {
    size_t at = p->i++;
    bool negated = p->i < p->n && p->s[p->i] == '^';
    if (negated) p->i++;
    while (p->i < p->n && p->s[p->i] != ']') {
        uint32_t lo = 0, hi;
        size_t item = p->i;
        lm_status st = parse_char(p, &lo);
        if (st != LM_OK) return st;
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            st = parse_char(p, &hi);
            if (st != LM_OK) return st;
            if (hi < lo) return fail_at(p, LM_ERR_INVALID, item, "a class range whose end comes before its start");
        }
        if (!lm_cp_set_add(set, lo, hi)) return lm_fail(p->err, LM_ERR_NOMEM, "out of memory");
    }
    if (p->i >= p->n) return fail_at(p, LM_ERR_INVALID, at, "a character class that is never closed");
    p->i++;
    if (!lm_cp_set_normalize(set, negated)) return lm_fail(p->err, LM_ERR_NOMEM, "out of memory");
    if (set->n == 0) return fail_at(p, LM_ERR_INVALID, at, "a character class that matches no character");
    return LM_OK;
}

static bool parse_count(parser *p, int *value) {
    int v = 0, digits = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        if (v <= LM_GBNF_MAX_REPEAT * 10) v = v * 10 + (p->s[p->i] - '0');
        p->i++;
        digits++;
    }
    *value = v;
    return digits > 0;
}

/* {m}, {m,}, {m,n} at i into min, max (-1: unbounded). */
static lm_status parse_braces(parser *p, int *min, int *max) {
    size_t at = p->i++;
    skip_space(p, true);
    if (!parse_count(p, min)) return syntax(p, "a repetition {m,n} needs a count");
    skip_space(p, true);
    *max = *min;
    if (p->i < p->n && p->s[p->i] == ',') {
        p->i++;
        skip_space(p, true);
        *max = -1;
        if (p->i < p->n && p->s[p->i] != '}') {
            if (!parse_count(p, max)) return syntax(p, "a repetition {m,n} whose n is no number");
            skip_space(p, true);
        }
    }
    if (p->i >= p->n || p->s[p->i] != '}') return syntax(p, "a repetition {m,n} that is not closed by `}`");
    p->i++;
    if (*min > LM_GBNF_MAX_REPEAT || *max > LM_GBNF_MAX_REPEAT)
        return fail_at(p, LM_ERR_NOMEM, at, "a repetition count above %d", LM_GBNF_MAX_REPEAT);
    if (*max >= 0 && *max < *min) return fail_at(p, LM_ERR_INVALID, at, "{%d,%d} has n < m", *min, *max);
    return LM_OK;
}

/* One symbol with its quantifiers, appended to out. */
static lm_status parse_unit(parser *p, lm_gseq *out, bool nested) {
    lm_gseq unit = {0};
    lm_cp_set set = {0};
    bool plain_set = false;
    lm_status st = LM_OK;
    size_t at = p->i;
    char c = p->s[p->i];
    if (c == '"') {
        st = parse_literal(p, &unit);
    } else if (c == '[') {
        st = parse_class(p, &set);
        if (st == LM_OK) st = emit_set(p, &unit, &set);
        plain_set = true;
    } else if (c == '.') {
        p->i++;
        if (!lm_cp_set_add(&set, 0, LM_MAX_CODE_POINT) || !lm_cp_set_normalize(&set, false)) st = lm_fail(p->err, LM_ERR_NOMEM, "out of memory");
        if (st == LM_OK) st = emit_set(p, &unit, &set);
        plain_set = true;
    } else if (c == '(') {
        if (++p->depth > LM_GBNF_MAX_NESTING) {
            st = fail_at(p, LM_ERR_NOMEM, at, "groups nested deeper than %d", LM_GBNF_MAX_NESTING);
        } else {
            p->i++;
            skip_space(p, true);
            uint32_t group = 0;
            st = new_rule(p, &group);
            if (st == LM_OK) st = parse_alternates(p, group, true);
            if (st == LM_OK && (p->i >= p->n || p->s[p->i] != ')')) {
                char buf[32];
                unsigned line, column;
                line_column(p, at, &line, &column);
                st = fail_at(p, LM_ERR_INVALID, p->i, "expected `)` to close the group of line %u column %u, found %s",
                             line, column, shown(p, buf, sizeof buf));
            }
            if (st == LM_OK) {
                p->i++;
                lm_gseq_ref(&unit, group);
            }
        }
        p->depth--;
    } else if (is_name_char(c)) {
        while (p->i < p->n && is_name_char(p->s[p->i])) p->i++;
        uint32_t sym = 0;
        st = find_symbol(p, at, (uint32_t)(p->i - at), &sym);
        if (st == LM_OK) lm_gseq_ref(&unit, p->syms[sym].rule);
    } else if (c == '<' || c == '!') {
        st = fail_at(p, LM_ERR_UNSUPPORTED, at,
                     "token references (`<think>`, `<[id]>`, `!<...>`) are not supported: loom's grammars match text");
    } else {
        st = lm_fail(p->err, LM_ERR_INTERNAL, "GBNF grammar: no symbol at offset %zu", at); /* the caller checks */
    }
    if (st == LM_OK) skip_space(p, nested);
    while (st == LM_OK && p->i < p->n && strchr("*+?{", p->s[p->i])) {
        size_t q_at = p->i;
        int min = 0, max = -1;
        char q = p->s[p->i];
        if (q == '{') {
            st = parse_braces(p, &min, &max);
        } else {
            p->i++;
            min = q == '+';
            max = q == '?' ? 1 : -1;
        }
        if (st != LM_OK) break;
        uint64_t copies = max < 0 ? (uint64_t)min + 1 : (uint64_t)max;
        if ((uint64_t)unit.n * copies + out->n + p->b->n_elems > LM_GBNF_MAX_ELEMS) {
            st = fail_at(p, LM_ERR_NOMEM, q_at, "this repetition makes the grammar larger than %u elements",
                         LM_GBNF_MAX_ELEMS);
            break;
        }
        lm_gseq repeated = {0};
        if (plain_set && max < 0) {
            /* a loop of characters with their byte forms inline: one rule,
             * which the token mask walks as one frame */
            uint32_t loop = 0;
            st = new_rule(p, &loop);
            if (st == LM_OK) st = lm_cp_set_alts(p->b, loop, loop, &set, p->err);
            if (st == LM_OK) st = lm_grammar_add_empty_alt(p->b, loop, p->err);
            for (int k = 0; k < min; k++) lm_gseq_append(&repeated, &unit);
            lm_gseq_ref(&repeated, loop);
        } else {
            st = lm_grammar_repeat(p->b, &repeated, &unit, min, max, p->err);
        }
        lm_gseq_free(&unit);
        unit = repeated;
        plain_set = false;
        if (st == LM_OK) st = own_new_rules(p);
        if (st == LM_OK) skip_space(p, nested);
    }
    free(set.r);
    if (st == LM_OK) lm_gseq_append(out, &unit);
    lm_gseq_free(&unit);
    if (st == LM_OK && (out->failed || out->n + p->b->n_elems > LM_GBNF_MAX_ELEMS))
        st = fail_at(p, LM_ERR_NOMEM, at, "the grammar compiles to more than %u elements", LM_GBNF_MAX_ELEMS);
    return st;
}

/* Symbols up to a `|`, `)`, the end of the rule or something else the caller judges. */
static lm_status parse_sequence(parser *p, lm_gseq *out, bool nested) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (!(c == '"' || c == '[' || c == '.' || c == '(' || c == '<' || c == '!' || is_name_char(c))) break;
        lm_status st = parse_unit(p, out, nested);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

/* The byte a class holds when it holds exactly one, else -1. */
static int single_byte(const lm_byte_class *c) {
    int byte = -1;
    for (int w = 0; w < 4; w++) {
        if (!c->bits[w]) continue;
        if (byte >= 0 || (c->bits[w] & (c->bits[w] - 1))) return -1;
        byte = w * 64 + __builtin_ctzll(c->bits[w]);
    }
    return byte;
}

/* The alternatives' strings while every one is a plain literal. */
typedef struct {
    char *bytes;
    size_t n_bytes, cap_bytes;
    size_t *ends;
    uint32_t n, cap;
    bool plain;
} literal_alts;

static void note_literal(const lm_grammar_builder *b, literal_alts *l, const lm_gseq *seq) {
    if (!l->plain) return;
    if (l->n == l->cap || l->n_bytes + seq->n > l->cap_bytes) {
        uint32_t cap = l->cap ? l->cap * 2 : 16;
        size_t cap_bytes = (l->cap_bytes + seq->n) * 2 + 64;
        size_t *ends = realloc(l->ends, sizeof *ends * cap);
        if (ends) l->ends = ends, l->cap = cap;
        char *bytes = realloc(l->bytes, cap_bytes);
        if (bytes) l->bytes = bytes, l->cap_bytes = cap_bytes;
        if (!ends || !bytes) {
            l->plain = false; /* out of memory: the alternatives stay as they are */
            return;
        }
    }
    for (uint32_t k = 0; k < seq->n; k++) {
        int byte = LM_GE_KIND(seq->elems[k]) == LM_GE_CLASS ? single_byte(&b->classes[LM_GE_ARG(seq->elems[k])]) : -1;
        if (byte < 0) {
            l->plain = false;
            return;
        }
        l->bytes[l->n_bytes + k] = (char)byte;
    }
    l->n_bytes += seq->n;
    l->ends[l->n++] = l->n_bytes;
}

/* Alternatives that are all literals become a trie of them
 * (lm_grammar_literals): `"x1" | "x2" | ...` would otherwise hold a stack
 * per alternative its input so far begins, and hundreds of them are over
 * the cost budget.  They were the builder's last alternatives and
 * elements: those are dropped and the trie's one reference put instead. */
static lm_status literals_as_trie(parser *p, uint32_t rule, const literal_alts *l, uint32_t alts_before,
                                  uint32_t elems_before) {
    const char **texts = malloc(sizeof *texts * l->n);
    size_t *lens = malloc(sizeof *lens * l->n);
    lm_status st = texts && lens ? LM_OK : lm_fail(p->err, LM_ERR_NOMEM, "out of memory");
    for (uint32_t k = 0; st == LM_OK && k < l->n; k++) {
        size_t start = k ? l->ends[k - 1] : 0;
        texts[k] = l->bytes + start;
        lens[k] = l->ends[k] - start;
    }
    uint32_t trie = 0;
    if (st == LM_OK) {
        p->b->n_alts = alts_before;
        p->b->n_elems = elems_before;
        st = lm_grammar_literals(p->b, texts, lens, l->n, &trie, p->err);
    }
    lm_gseq seq = {0};
    lm_gseq_ref(&seq, trie);
    if (st == LM_OK) st = lm_grammar_add_alt(p->b, rule, &seq, p->err);
    if (st == LM_OK) st = own_new_rules(p);
    lm_gseq_free(&seq);
    free(texts);
    free(lens);
    return st;
}

static lm_status parse_alternates(parser *p, uint32_t rule, bool nested) {
    lm_gseq seq = {0};
    lm_status st = LM_OK;
    literal_alts literals = {.plain = true};
    uint32_t rules_before = p->b->n_rules, alts_before = p->b->n_alts, elems_before = p->b->n_elems;
    for (;;) {
        lm_gseq_clear(&seq);
        st = parse_sequence(p, &seq, nested);
        if (st == LM_OK) note_literal(p->b, &literals, &seq);
        if (st == LM_OK) st = lm_grammar_add_alt(p->b, rule, &seq, p->err);
        if (st == LM_OK) st = own_new_rules(p);
        if (st != LM_OK || p->i >= p->n || p->s[p->i] != '|') break;
        p->i++;
        skip_space(p, true);
    }
    /* plain literals make no rules nor alternatives of their own: the
     * rule's are the builder's last */
    if (st == LM_OK && literals.plain && literals.n >= 2 && p->b->n_rules == rules_before &&
        p->b->n_alts == alts_before + literals.n)
        st = literals_as_trie(p, rule, &literals, alts_before, elems_before);
    free(literals.bytes);
    free(literals.ends);
    lm_gseq_free(&seq);
    return st;
}

static lm_status lark_syntax(parser *p, size_t at, const char *what) {
    return fail_at(p, LM_ERR_UNSUPPORTED, at,
                   "%s is Lark grammar syntax, which loom does not take: write the grammar in GBNF "
                   "(`root ::= ...`, as llama.cpp)",
                   what);
}

static lm_status parse_rule(parser *p) {
    size_t at = p->i;
    char c = p->s[p->i];
    if (c == '?' || c == '!') return lark_syntax(p, at, "a rule name beginning with `?` or `!`");
    if (c == '%') return lark_syntax(p, at, "a `%` directive");
    if (c == '|')
        return syntax(p, "a line that begins with `|`: end the line before with the `|`, or put the alternatives "
                         "in parentheses");
    if (!is_name_char(c)) {
        char buf[32];
        return fail_at(p, LM_ERR_INVALID, at, "expected a rule name, found %s", shown(p, buf, sizeof buf));
    }
    while (p->i < p->n && is_name_char(p->s[p->i])) p->i++;
    uint32_t len = (uint32_t)(p->i - at);
    skip_space(p, false);
    if (!(p->n - p->i >= 3 && memcmp(p->s + p->i, "::=", 3) == 0)) {
        if (p->i < p->n && p->s[p->i] == ':') return lark_syntax(p, at, "a rule `name: ...`");
        char buf[32];
        return fail_at(p, LM_ERR_INVALID, p->i, "expected `::=` after the rule name `%.*s`, found %s", (int)len,
                       p->s + at, shown(p, buf, sizeof buf));
    }
    uint32_t sym = 0;
    lm_status st = find_symbol(p, at, len, &sym);
    if (st != LM_OK) return st;
    if (p->syms[sym].defined) {
        unsigned line, column;
        line_column(p, p->syms[sym].defined_at, &line, &column);
        return fail_at(p, LM_ERR_INVALID, at, "rule `%.*s` is defined twice (first at line %u)", (int)len, p->s + at,
                       line);
    }
    p->syms[sym].defined = true;
    p->syms[sym].defined_at = at;
    p->current = sym;
    p->i += 3;
    skip_space(p, true);
    st = parse_alternates(p, p->syms[sym].rule, false);
    if (st != LM_OK) return st;
    if (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r') {
        char buf[32];
        const char *what = p->s[p->i] == ')' ? "a `)` that closes no group" : shown(p, buf, sizeof buf);
        return fail_at(p, LM_ERR_INVALID, p->i, "expected the end of rule `%.*s`, found %s", (int)len, p->s + at,
                       what);
    }
    skip_space(p, true);
    return LM_OK;
}

/* The rule's name for a message: the named rule it belongs to. */
static const symbol *owner_of(const parser *p, uint32_t rule) {
    return rule < p->n_owned ? &p->syms[p->owner[rule]] : NULL;
}

static lm_status check_rules(parser *p, const lm_grammar *g) {
    lm_rule_problem problem;
    lm_status st = lm_grammar_check_rules(g, &problem, p->err);
    if (st != LM_OK || problem.kind == LM_RULE_FINE) return st;
    const symbol *s = owner_of(p, problem.rule), *via = owner_of(p, problem.via);
    if (!s || !via) return lm_fail(p->err, LM_ERR_INTERNAL, "GBNF grammar: a rule of no name");
    bool own = problem.rule == s->rule;
    if (problem.kind == LM_RULE_ENDLESS)
        return fail_at(p, LM_ERR_INVALID, s->defined_at,
                       "%srule `%.*s` matches no finite string: each of its alternatives refers to a rule that never "
                       "ends (itself, say), so output entering it could never be complete",
                       own ? "" : "a group or repetition in ", (int)s->len, s->name);
    if (s == via)
        return fail_at(p, LM_ERR_INVALID, s->defined_at,
                       "rule `%.*s` is left-recursive (it may begin with itself before any character): write the "
                       "repetition with `*` or `+`, e.g. `expr ::= term (\"+\" term)*`",
                       (int)s->len, s->name);
    return fail_at(p, LM_ERR_INVALID, s->defined_at,
                   "rule `%.*s` is left-recursive through `%.*s` (it may begin with itself before any character): "
                   "write the repetition with `*` or `+`, e.g. `expr ::= term (\"+\" term)*`",
                   (int)s->len, s->name, (int)via->len, via->name);
}

static lm_status parse_grammar(parser *p, const char *suffix, lm_grammar *out) {
    skip_space(p, true);
    if (p->i >= p->n) return lm_fail(p->err, LM_ERR_INVALID, "GBNF grammar: the grammar is empty (it needs a `root ::= ...` rule)");
    while (p->i < p->n) {
        lm_status st = parse_rule(p);
        if (st != LM_OK) return st;
    }
    for (uint32_t k = 0; k < p->n_syms; k++)
        if (!p->syms[k].defined)
            return fail_at(p, LM_ERR_INVALID, p->syms[k].first_use, "rule `%.*s` is used but never defined",
                           (int)p->syms[k].len, p->syms[k].name);
    const symbol *root = NULL;
    for (uint32_t k = 0; k < p->n_syms && !root; k++)
        if (p->syms[k].len == 4 && memcmp(p->syms[k].name, "root", 4) == 0) root = &p->syms[k];
    if (!root) return lm_fail(p->err, LM_ERR_INVALID, "GBNF grammar: no `root` rule (the grammar starts at `root ::= ...`)");
    uint32_t start = root->rule;
    lm_status st = LM_OK;
    if (suffix && suffix[0]) {
        lm_gseq seq = {0};
        p->current = (uint32_t)(root - p->syms);
        lm_gseq_ref(&seq, root->rule);
        st = lm_gseq_literal(p->b, &seq, suffix, strlen(suffix), p->err);
        if (st == LM_OK) st = new_rule(p, &start);
        if (st == LM_OK) st = lm_grammar_add_alt(p->b, start, &seq, p->err);
        lm_gseq_free(&seq);
    }
    if (st == LM_OK) st = lm_grammar_finish(p->b, start, out, p->err);
    if (st == LM_OK) st = check_rules(p, out);
    return st;
}

lm_status lm_gbnf_compile(const char *text, size_t len, const char *suffix, lm_grammar *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    if (!text) return lm_fail(err, LM_ERR_INVALID, "a GBNF grammar needs its text");
    if (len > LM_GBNF_MAX_LENGTH)
        return lm_fail(err, LM_ERR_NOMEM, "GBNF grammar longer than %u bytes", LM_GBNF_MAX_LENGTH);
    if (memchr(text, 0, len)) return lm_fail(err, LM_ERR_INVALID, "GBNF grammar: the text holds a NUL byte");
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    parser p = {.b = &b, .s = text, .n = len, .err = err};
    p.syms = malloc(sizeof *p.syms * LM_GBNF_MAX_NAMES);
    p.slots = malloc(sizeof *p.slots * 2 * LM_GBNF_MAX_NAMES);
    lm_status st = p.syms && p.slots ? LM_OK : lm_fail(err, LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) {
        memset(p.slots, 0xff, sizeof *p.slots * 2 * LM_GBNF_MAX_NAMES);
        st = parse_grammar(&p, suffix, out);
    }
    if (st != LM_OK) lm_grammar_free(out);
    lm_grammar_builder_free(&b);
    for (uint32_t k = 0; k < p.n_cache; k++) free(p.cache[k].set.r);
    free(p.syms);
    free(p.slots);
    free(p.owner);
    return st;
}
