/* The template lexer: a hand-written port of Jinja2's regular-expression
 * lexer (jinja2/lexer.py, 3.1) for the default delimiters, trim_blocks=True,
 * lstrip_blocks=True and keep_trailing_newline=False.  Whitespace handling is
 * where chat templates are most fragile, so the rules follow that code line
 * by line: see the comments naming its regular expressions. */
#include "text/jinja_lexer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_value.h"

#define LEX_NESTING_MAX 256

typedef struct {
    const char *s;
    size_t n, pos;
    uint32_t line;
    bool line_starting; /* the last match ended with a newline (lstrip at the start of a line) */
    jtokens *out;
    lm_error *err;
    char balance[LEX_NESTING_MAX]; /* expected closing brackets inside a tag */
    size_t depth;
} lexer;

static lm_status lex_fail(lexer *L, const char *fmt, const char *arg) {
    char msg[200];
    snprintf(msg, sizeof msg, fmt, arg);
    return lm_fail(L->err, LM_ERR_FORMAT, "chat template line %u: %s", (unsigned)L->line, msg);
}

static lm_status push(lexer *L, jtok t) {
    if (L->out->n == L->out->cap) {
        size_t cap = L->out->cap ? L->out->cap * 2 : 256;
        jtok *toks = realloc(L->out->toks, cap * sizeof(jtok));
        if (!toks) return lm_fail(L->err, LM_ERR_NOMEM, "out of memory lexing the chat template");
        L->out->toks = toks;
        L->out->cap = cap;
    }
    L->out->toks[L->out->n++] = t;
    return LM_OK;
}

static lm_status push_simple(lexer *L, jtok_type type, uint32_t line) {
    jtok t = {.type = (uint8_t)type, .line = line};
    return push(L, t);
}

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (L->s[i] == '\n') L->line++;
}

/* Python's \s* from pos (Unicode whitespace); returns the new position. */
static size_t skip_space(const lexer *L, size_t pos) {
    size_t k;
    while (pos < L->n && (k = jutf8_space_len(L->s + pos, L->n - pos)) > 0) pos += k;
    return pos;
}

static bool at(const lexer *L, size_t pos, const char *lit) {
    size_t k = strlen(lit);
    return pos <= L->n && L->n - pos >= k && memcmp(L->s + pos, lit, k) == 0;
}

/* End of text after Python's str.rstrip(). */
static size_t rstrip_end(const char *s, size_t start, size_t end) {
    size_t keep = start, i = start;
    while (i < end) {
        uint32_t cp;
        size_t k = jutf8_decode((const unsigned char *)s + i, end - i, &cp);
        i += k;
        if (!jcp_isspace(cp)) keep = i;
    }
    return keep;
}

/* The text in front of a tag, after the tag's whitespace control: "-" strips
 * all whitespace, otherwise lstrip_blocks removes the spaces between the
 * start of the line and a block or comment tag (not a {{ variable }}). */
static size_t strip_text(lexer *L, size_t start, size_t end, char sign, bool is_variable) {
    if (sign == '-') return rstrip_end(L->s, start, end);
    if (sign == '+' || is_variable) return end;
    size_t l_pos = start;
    for (size_t i = end; i > start; i--)
        if (L->s[i - 1] == '\n') {
            l_pos = i;
            break;
        }
    if (l_pos > start || L->line_starting) {
        if (l_pos < end && skip_space(L, l_pos) >= end) return l_pos;
    }
    return end;
}

static lm_status emit_data(lexer *L, size_t start, size_t end, uint32_t line) {
    if (end <= start) return LM_OK;
    jtok t = {.type = JT_DATA, .line = line, .text = L->s + start, .len = end - start};
    return push(L, t);
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

/* (\d+_)*\d+ from pos: end position, or 0 when there is no digit. */
static size_t scan_digits(const lexer *L, size_t pos) {
    if (pos >= L->n || !is_digit(L->s[pos])) return 0;
    for (;;) {
        while (pos < L->n && is_digit(L->s[pos])) pos++;
        if (pos + 1 < L->n && L->s[pos] == '_' && is_digit(L->s[pos + 1])) {
            pos++;
            continue;
        }
        return pos;
    }
}

/* float_re: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+) */
static size_t scan_float(const lexer *L, size_t pos) {
    if (pos > 0 && L->s[pos - 1] == '.') return 0;
    size_t q = scan_digits(L, pos);
    if (!q) return 0;
    size_t r = q;
    if (r + 1 < L->n && L->s[r] == '.' && is_digit(L->s[r + 1])) r = scan_digits(L, r + 1);
    if (r < L->n && (L->s[r] == 'e' || L->s[r] == 'E')) {
        size_t e = r + 1;
        if (e < L->n && (L->s[e] == '+' || L->s[e] == '-')) e++;
        size_t end = scan_digits(L, e);
        if (end) return end;
    }
    if (q + 1 < L->n && L->s[q] == '.' && is_digit(L->s[q + 1])) return scan_digits(L, q + 1);
    return 0;
}

static int digit_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return 99;
}

/* integer_re: 0b(_?[01])+ | 0o(_?[0-7])+ | 0x(_?[\da-f])+ | [1-9](_?\d)* | 0(_?0)* */
static size_t scan_int(const lexer *L, size_t pos, int *base) {
    const char *s = L->s;
    if (pos >= L->n || !is_digit(s[pos])) return 0;
    if (s[pos] == '0' && pos + 1 < L->n) {
        char p = s[pos + 1];
        int b = (p == 'b' || p == 'B')   ? 2
                : (p == 'o' || p == 'O') ? 8
                : (p == 'x' || p == 'X') ? 16
                                         : 0;
        if (b) {
            size_t q = pos + 2, end = 0;
            for (;;) {
                size_t r = q;
                if (r < L->n && s[r] == '_') r++;
                if (r < L->n && digit_value(s[r]) < b) {
                    q = end = r + 1;
                } else {
                    break;
                }
            }
            if (end) {
                *base = b;
                return end;
            }
        }
    }
    *base = 10;
    size_t q = pos + 1;
    bool zero = s[pos] == '0';
    for (;;) {
        size_t r = q;
        if (r < L->n && s[r] == '_') r++;
        if (r < L->n && (zero ? s[r] == '0' : is_digit(s[r])))
            q = r + 1;
        else
            break;
    }
    return q;
}

static lm_status lex_number(lexer *L, bool *matched) {
    size_t start = L->pos, end = scan_float(L, start);
    char tmp[128];
    *matched = false;
    if (end) {
        size_t k = 0;
        for (size_t i = start; i < end && k < sizeof tmp - 1; i++)
            if (L->s[i] != '_') tmp[k++] = L->s[i];
        tmp[k] = 0;
        jtok t = {.type = JT_FLOAT, .line = L->line, .fval = strtod(tmp, NULL)};
        L->pos = end;
        *matched = true;
        return push(L, t);
    }
    int base;
    end = scan_int(L, start, &base);
    if (!end) return LM_OK;
    size_t from = base == 10 ? start : start + 2, k = 0;
    for (size_t i = from; i < end; i++) {
        if (L->s[i] == '_') continue;
        if (k >= sizeof tmp - 1) return lex_fail(L, "%s", "integer literal too large");
        tmp[k++] = L->s[i];
    }
    tmp[k] = 0;
    errno = 0;
    long long v = strtoll(tmp, NULL, base);
    if (errno) return lex_fail(L, "%s", "integer literal too large");
    jtok t = {.type = JT_INT, .line = L->line, .ival = v};
    L->pos = end;
    *matched = true;
    return push(L, t);
}

typedef struct {
    char *data;
    size_t len, cap;
} sbuf;

static bool sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 32;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return false;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

static bool sb_cp(sbuf *b, uint32_t cp) {
    char enc[4];
    return sb_put(b, enc, jutf8_encode(cp, enc));
}

/* Reads exactly `count` hex digits at *i. */
static bool read_hex(const char *s, size_t end, size_t *i, int count, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < count; k++) {
        if (*i >= end || digit_value(s[*i]) > 15) return false;
        v = v * 16 + (uint32_t)digit_value(s[*i]);
        (*i)++;
    }
    *out = v;
    return true;
}

/* A string literal's value: Python's
 * value.encode("ascii", "backslashreplace").decode("unicode-escape"). */
static lm_status decode_string(lexer *L, size_t start, size_t end, jtok *t) {
    const char *s = L->s;
    sbuf b = {0};
    size_t i = start;
    bool ok = sb_put(&b, "", 0);
    while (ok && i < end) {
        size_t run = i;
        while (i < end && s[i] != '\\') i++;
        ok = sb_put(&b, s + run, i - run);
        if (!ok || i >= end) break;
        i++; /* backslash */
        char e = s[i];
        uint32_t cp;
        switch (e) {
        case '\\': ok = sb_put(&b, "\\", 1), i++; break;
        case '\'': ok = sb_put(&b, "'", 1), i++; break;
        case '"': ok = sb_put(&b, "\"", 1), i++; break;
        case 'a': ok = sb_put(&b, "\a", 1), i++; break;
        case 'b': ok = sb_put(&b, "\b", 1), i++; break;
        case 'f': ok = sb_put(&b, "\f", 1), i++; break;
        case 'n': ok = sb_put(&b, "\n", 1), i++; break;
        case 'r': ok = sb_put(&b, "\r", 1), i++; break;
        case 't': ok = sb_put(&b, "\t", 1), i++; break;
        case 'v': ok = sb_put(&b, "\v", 1), i++; break;
        case '\n': i++; break; /* line continuation */
        case 'x':
        case 'u':
        case 'U': {
            i++;
            int count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (!read_hex(s, end, &i, count, &cp)) {
                free(b.data);
                return lex_fail(L, "%s",
                                e == 'x'   ? "truncated \\xXX escape"
                                : e == 'u' ? "truncated \\uXXXX escape"
                                           : "truncated \\UXXXXXXXX escape");
            }
            if (cp > 0x10FFFF) {
                free(b.data);
                return lex_fail(L, "%s", "illegal Unicode character");
            }
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
            ok = sb_cp(&b, cp);
            break;
        }
        case 'N': free(b.data); return lex_fail(L, "%s", "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = 0;
                for (int k = 0; k < 3 && i < end && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                ok = sb_cp(&b, cp);
            } else if ((unsigned char)e >= 0x80) {
                /* backslashreplace turned the character into an escape that
                 * the backslash in front of it now quotes */
                size_t k = jutf8_decode((const unsigned char *)s + i, end - i, &cp);
                char esc[16];
                int n = cp < 0x100     ? snprintf(esc, sizeof esc, "\\x%02x", cp)
                        : cp < 0x10000 ? snprintf(esc, sizeof esc, "\\u%04x", cp)
                                       : snprintf(esc, sizeof esc, "\\U%08x", cp);
                ok = sb_put(&b, esc, (size_t)n);
                i += k;
            } else { /* unknown escapes keep their backslash */
                ok = sb_put(&b, s + i - 1, 2);
                i++;
            }
        }
    }
    if (!ok) {
        free(b.data);
        return lm_fail(L->err, LM_ERR_NOMEM, "out of memory lexing the chat template");
    }
    t->text = b.data;
    t->len = b.len;
    return LM_OK;
}

static lm_status lex_string(lexer *L) {
    char q = L->s[L->pos];
    size_t i = L->pos + 1;
    while (i < L->n && L->s[i] != q) i += L->s[i] == '\\' ? 2 : 1;
    if (i >= L->n) return lex_fail(L, "%s", "unterminated string literal");
    jtok t = {.type = JT_STRING, .line = L->line};
    lm_status st = decode_string(L, L->pos + 1, i, &t);
    if (st) return st;
    st = push(L, t);
    if (st) {
        free((char *)t.text);
        return st;
    }
    count_lines(L, L->pos, i + 1);
    L->pos = i + 1;
    return LM_OK;
}

static const struct {
    const char *text;
    jop op;
} operators[] = {
    {"//", JOP_FLOORDIV}, {"**", JOP_POW},      {"==", JOP_EQ},    {"!=", JOP_NE},
    {">=", JOP_GTEQ},     {"<=", JOP_LTEQ},     {"+", JOP_ADD},    {"-", JOP_SUB},
    {"/", JOP_DIV},       {"*", JOP_MUL},       {"%", JOP_MOD},    {"~", JOP_TILDE},
    {"[", JOP_LBRACKET},  {"]", JOP_RBRACKET},  {"(", JOP_LPAREN}, {")", JOP_RPAREN},
    {"{", JOP_LBRACE},    {"}", JOP_RBRACE},    {">", JOP_GT},     {"<", JOP_LT},
    {"=", JOP_ASSIGN},    {".", JOP_DOT},       {":", JOP_COLON},  {"|", JOP_PIPE},
    {",", JOP_COMMA},     {";", JOP_SEMICOLON},
};

static lm_status lex_operator(lexer *L, bool *matched) {
    *matched = false;
    for (size_t k = 0; k < sizeof operators / sizeof operators[0]; k++) {
        if (!at(L, L->pos, operators[k].text)) continue;
        char c = operators[k].text[0];
        if (c == '(' || c == '[' || c == '{') {
            if (L->depth >= LEX_NESTING_MAX) return lex_fail(L, "%s", "brackets nested too deeply");
            L->balance[L->depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (c == ')' || c == ']' || c == '}') {
            char got[2] = {c, 0};
            if (!L->depth) return lex_fail(L, "unexpected '%s'", got);
            char want = L->balance[--L->depth];
            if (want != c) {
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", c, want);
                return lex_fail(L, "%s", msg);
            }
        }
        jtok t = {.type = JT_OP, .op = (uint8_t)operators[k].op, .line = L->line};
        L->pos += strlen(operators[k].text);
        *matched = true;
        return push(L, t);
    }
    return LM_OK;
}

/* Inside {% ... %} or {{ ... }}: tokens up to the closing delimiter. */
static lm_status lex_tag(lexer *L, bool block) {
    L->depth = 0;
    for (;;) {
        if (L->pos >= L->n) return LM_OK; /* the parser reports the missing end */
        if (L->depth == 0) {
            size_t start = L->pos, end = 0;
            bool eat_newline = false, eat_space = false;
            const char *close = block ? "%}" : "}}";
            if (block && L->s[start] == '+' && at(L, start + 1, close))
                end = start + 3;
            else if (L->s[start] == '-' && at(L, start + 1, close))
                end = start + 3, eat_space = true;
            else if (at(L, start, close))
                end = start + 2, eat_newline = block; /* trim_blocks */
            if (end) {
                uint32_t line = L->line;
                if (eat_space) end = skip_space(L, end);
                if (eat_newline && end < L->n && L->s[end] == '\n') end++;
                count_lines(L, start, end);
                L->line_starting = L->s[end - 1] == '\n';
                L->pos = end;
                return push_simple(L, block ? JT_BLOCK_END : JT_VAR_END, line);
            }
        }
        size_t sp = skip_space(L, L->pos);
        if (sp > L->pos) {
            count_lines(L, L->pos, sp);
            L->pos = sp;
            continue;
        }
        char c = L->s[L->pos];
        bool matched = false;
        lm_status st;
        if (is_digit(c)) {
            if ((st = lex_number(L, &matched))) return st;
            if (matched) continue;
        }
        if (is_name_start(c)) {
            size_t end = L->pos;
            while (end < L->n && is_name_char(L->s[end])) end++;
            jtok t = {.type = JT_NAME, .line = L->line, .text = L->s + L->pos, .len = end - L->pos};
            L->pos = end;
            if ((st = push(L, t))) return st;
            continue;
        }
        if (c == '\'' || c == '"') {
            if ((st = lex_string(L))) return st;
            continue;
        }
        if ((st = lex_operator(L, &matched))) return st;
        if (matched) continue;
        char shown[8];
        if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
            snprintf(shown, sizeof shown, "\\x%02x", (unsigned char)c);
        else
            snprintf(shown, sizeof shown, "%c", c);
        return lex_fail(L, "unexpected char '%s'", shown);
    }
}

/* {% raw %}...{% endraw %}: the body is data. */
static lm_status lex_raw(lexer *L) {
    size_t body = L->pos;
    for (size_t p = body; p + 1 < L->n; p++) {
        if (L->s[p] != '{' || L->s[p + 1] != '%') continue;
        size_t q = p + 2;
        char sign = 0;
        if (q < L->n && (L->s[q] == '-' || L->s[q] == '+')) sign = L->s[q++];
        q = skip_space(L, q);
        if (!at(L, q, "endraw")) continue;
        q = skip_space(L, q + 6);
        size_t end;
        if (at(L, q, "+%}"))
            end = q + 3;
        else if (at(L, q, "-%}"))
            end = skip_space(L, q + 3);
        else if (at(L, q, "%}"))
            end = q + 2 + (q + 2 < L->n && L->s[q + 2] == '\n');
        else
            continue;
        uint32_t line = L->line;
        lm_status st = emit_data(L, body, strip_text(L, body, p, sign, false), line);
        if (st) return st;
        count_lines(L, body, end);
        L->line_starting = L->s[end - 1] == '\n';
        L->pos = end;
        return LM_OK;
    }
    return lex_fail(L, "%s", "missing end of raw directive");
}

/* {% raw %} (with optional whitespace control), or 0 when the tag at p is not one. */
static size_t match_raw_begin(const lexer *L, size_t p, char *sign) {
    size_t q = p + 2;
    *sign = 0;
    if (q < L->n && (L->s[q] == '-' || L->s[q] == '+')) *sign = L->s[q++];
    q = skip_space(L, q);
    if (!at(L, q, "raw")) return 0;
    q = skip_space(L, q + 3);
    if (at(L, q, "-%}")) return skip_space(L, q + 3);
    if (at(L, q, "%}")) return q + 2;
    return 0;
}

static lm_status lex_root(lexer *L) {
    while (L->pos < L->n) {
        size_t p = L->pos;
        bool found = false;
        for (; p + 1 < L->n; p++)
            if (L->s[p] == '{' &&
                (L->s[p + 1] == '%' || L->s[p + 1] == '{' || L->s[p + 1] == '#')) {
                found = true;
                break;
            }
        if (!found) return emit_data(L, L->pos, L->n, L->line);
        char kind = L->s[p + 1], sign = 0;
        size_t raw_end = kind == '%' ? match_raw_begin(L, p, &sign) : 0;
        size_t after = p + 2;
        if (!raw_end) {
            if (after < L->n && (L->s[after] == '-' || L->s[after] == '+')) sign = L->s[after++];
        }
        lm_status st = emit_data(L, L->pos, strip_text(L, L->pos, p, sign, kind == '{'), L->line);
        if (st) return st;
        count_lines(L, L->pos, p);
        uint32_t tag_line = L->line;
        if (raw_end) {
            count_lines(L, p, raw_end);
            L->line_starting = L->s[raw_end - 1] == '\n';
            L->pos = raw_end;
            if ((st = lex_raw(L))) return st;
            continue;
        }
        L->line_starting = false;
        L->pos = after;
        if (kind == '#') { /* (.*?)((?:\+#}|\-#}\s*|#}\n?)) */
            size_t q = after, end = 0;
            for (; q + 1 < L->n; q++) {
                if ((L->s[q] == '+' || L->s[q] == '-') && at(L, q + 1, "#}")) {
                    end = L->s[q] == '-' ? skip_space(L, q + 3) : q + 3;
                    break;
                }
                if (L->s[q] == '#' && L->s[q + 1] == '}') {
                    end = q + 2 + (q + 2 < L->n && L->s[q + 2] == '\n');
                    break;
                }
            }
            if (!end) return lex_fail(L, "%s", "missing end of comment tag");
            count_lines(L, after, end);
            L->line_starting = L->s[end - 1] == '\n';
            L->pos = end;
            continue;
        }
        bool block = kind == '%';
        if ((st = push_simple(L, block ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, tag_line))) return st;
        if ((st = lex_tag(L, block))) return st;
    }
    return LM_OK;
}

void jtokens_free(jtokens *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++)
        if (t->toks[i].type == JT_STRING) free((char *)t->toks[i].text);
    free(t->toks);
    free(t->source);
    memset(t, 0, sizeof *t);
}

lm_status jlex(const char *src, size_t len, jtokens *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    if (!jutf8_valid(src, len))
        return lm_fail(err, LM_ERR_FORMAT, "chat template is not valid UTF-8");
    /* \r\n and \r become \n; one final newline is dropped (keep_trailing_newline=False). */
    char *s = malloc(len + 1);
    if (!s) return lm_fail(err, LM_ERR_NOMEM, "out of memory lexing the chat template");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    out->source = s;
    lexer L = {.s = s, .n = n, .line = 1, .line_starting = true, .out = out, .err = err};
    lm_status st = lex_root(&L);
    if (!st) st = push_simple(&L, JT_EOF, L.line);
    if (st) jtokens_free(out);
    return st;
}
