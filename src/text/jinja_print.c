/* str(), repr() and json.dumps() of template values, byte-compatible with
 * CPython: templates print lists, dicts, booleans and floats and the prompt
 * must match what transformers renders. */
#include "text/jinja_print.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define PRINT_DEPTH_MAX 128

bool jbuf_put(jctx *c, jbuf *b, const char *s, size_t n) {
    if (n == 0) return true;
    if (n >= 256 && !jctx_charge(c, n / 256)) return false; /* copying is work too */
    if (n > c->max_string || b->len > c->max_string - n)
        return jfail(c, LM_ERR_NOMEM, "text longer than the limit of %zu bytes", c->max_string);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *data = realloc(b->data, cap);
        if (!data) return jfail(c, LM_ERR_NOMEM, "out of memory");
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

bool jbuf_puts(jctx *c, jbuf *b, const char *s) { return jbuf_put(c, b, s, strlen(s)); }

bool jbuf_printf(jctx *c, jbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return jfail(c, LM_ERR_INTERNAL, "formatting failed");
    if ((size_t)n >= sizeof tmp) n = (int)sizeof tmp - 1;
    return jbuf_put(c, b, tmp, (size_t)n);
}

void jbuf_free(jbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

bool jbuf_take_str(jctx *c, jbuf *b, jv *out) {
    bool ok = jv_new_str(c, b->data ? b->data : "", b->len, out);
    b->len = 0;
    if (b->data) b->data[0] = 0;
    return ok;
}

/* ---- floats ---- */

void jfloat_repr(double x, char *buf, size_t size) {
    if (isnan(x)) {
        snprintf(buf, size, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, size, x < 0 ? "-inf" : "inf");
        return;
    }
    /* The shortest digit string that reads back as x (what Python's repr
     * computes), then Python's layout: exponent form when the decimal point
     * would sit more than 16 digits right or 4 zeros left. */
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    if (prec > 17) snprintf(tmp, sizeof tmp, "%.16e", x);
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') neg = true, p++;
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < sizeof digits - 1) digits[nd++] = *p;
    digits[nd] = 0;
    int exp10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;
    int decpt = exp10 + 1;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (x == 0) { /* keeps -0.0 */
        snprintf(out + o, sizeof out - o, "0.0");
    } else if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -decpt; i++) out[o++] = '0';
            memcpy(out + o, digits, nd);
            o += nd;
        } else if ((size_t)decpt >= nd) {
            memcpy(out + o, digits, nd);
            o += nd;
            for (size_t i = nd; i < (size_t)decpt; i++) out[o++] = '0';
            out[o++] = '.';
            out[o++] = '0';
        } else {
            memcpy(out + o, digits, (size_t)decpt);
            o += (size_t)decpt;
            out[o++] = '.';
            memcpy(out + o, digits + decpt, nd - (size_t)decpt);
            o += nd - (size_t)decpt;
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    }
    snprintf(buf, size, "%s", out);
}

/* ---- str / repr ---- */

static bool repr_depth(jctx *c, jbuf *b, jv v, int depth);

static bool cp_printable(uint32_t cp) {
    if (cp == ' ') return true;
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return false;
    default: return true;
    }
}

static bool repr_str(jctx *c, jbuf *b, const char *s, size_t n) {
    bool has_single = memchr(s, '\'', n) != NULL, has_double = memchr(s, '"', n) != NULL;
    char quote = has_single && !has_double ? '"' : '\'';
    if (!jbuf_put(c, b, &quote, 1)) return false;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        /* copy runs of plain bytes at once */
        while (i < n && (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f && s[i] != '\\' &&
               s[i] != quote)
            i++;
        if (!jbuf_put(c, b, s + start, i - start)) return false;
        if (i >= n) break;
        uint32_t cp;
        size_t k = jutf8_decode((const unsigned char *)s + i, n - i, &cp);
        bool ok;
        if (cp == '\\' || cp == (uint32_t)quote) {
            char esc[2] = {'\\', (char)cp};
            ok = jbuf_put(c, b, esc, 2);
        } else if (cp == '\n')
            ok = jbuf_puts(c, b, "\\n");
        else if (cp == '\r')
            ok = jbuf_puts(c, b, "\\r");
        else if (cp == '\t')
            ok = jbuf_puts(c, b, "\\t");
        else if (cp_printable(cp))
            ok = jbuf_put(c, b, s + i, k);
        else if (cp < 0x100)
            ok = jbuf_printf(c, b, "\\x%02x", cp);
        else if (cp < 0x10000)
            ok = jbuf_printf(c, b, "\\u%04x", cp);
        else
            ok = jbuf_printf(c, b, "\\U%08x", cp);
        if (!ok) return false;
        i += k;
    }
    return jbuf_put(c, b, &quote, 1);
}

static bool print_depth(jctx *c, jbuf *b, jv v, int depth, bool repr) {
    if (depth > PRINT_DEPTH_MAX) return jfail(c, LM_ERR_FORMAT, "value nested too deeply to print");
    char tmp[64];
    switch ((jv_kind)v.kind) {
    case JV_UNDEFINED: return repr ? jbuf_puts(c, b, "Undefined") : true;
    case JV_NONE: return jbuf_puts(c, b, "None");
    case JV_BOOL: return jbuf_puts(c, b, v.u.b ? "True" : "False");
    case JV_INT: return jbuf_printf(c, b, "%" PRId64, v.u.i);
    case JV_FLOAT: jfloat_repr(v.u.f, tmp, sizeof tmp); return jbuf_puts(c, b, tmp);
    case JV_STR:
        if (!repr) return jbuf_put(c, b, jv_str(v)->data, jv_str(v)->len);
        if (jv_is_markup(v))
            return jbuf_puts(c, b, "Markup(") && repr_str(c, b, jv_str(v)->data, jv_str(v)->len) &&
                   jbuf_puts(c, b, ")");
        return repr_str(c, b, jv_str(v)->data, jv_str(v)->len);
    case JV_LIST:
    case JV_TUPLE: {
        jlist *l = jv_list(v);
        if (!jbuf_puts(c, b, v.kind == JV_LIST ? "[" : "(")) return false;
        for (size_t i = 0; i < l->len; i++) {
            if (i && !jbuf_puts(c, b, ", ")) return false;
            if (!repr_depth(c, b, l->items[i], depth + 1)) return false;
        }
        if (v.kind == JV_TUPLE && l->len == 1 && !jbuf_puts(c, b, ",")) return false;
        return jbuf_puts(c, b, v.kind == JV_LIST ? "]" : ")");
    }
    case JV_DICT:
    case JV_NAMESPACE: {
        jdict *d = jv_dict(v);
        if (v.kind == JV_NAMESPACE && !jbuf_puts(c, b, "<Namespace ")) return false;
        if (!jbuf_puts(c, b, "{")) return false;
        for (size_t i = 0; i < d->len; i++) {
            if (i && !jbuf_puts(c, b, ", ")) return false;
            if (!repr_depth(c, b, d->keys[i], depth + 1) || !jbuf_puts(c, b, ": ") ||
                !repr_depth(c, b, d->vals[i], depth + 1))
                return false;
        }
        return jbuf_puts(c, b, v.kind == JV_NAMESPACE ? "}>" : "}");
    }
    case JV_MACRO: return jbuf_printf(c, b, "<Macro '%s'>", ((jmacro *)v.u.o)->name);
    case JV_METHOD: return jbuf_puts(c, b, "<built-in method>");
    case JV_BUILTIN: return jbuf_puts(c, b, "<built-in function>");
    case JV_LOOP: {
        jloop *l = (jloop *)v.u.o;
        return jbuf_printf(c, b, "<LoopContext %zu/%zu>", l->index0 + 1, jv_list(l->items)->len);
    }
    }
    return true;
}

static bool repr_depth(jctx *c, jbuf *b, jv v, int depth) {
    return print_depth(c, b, v, depth, true);
}

bool jv_print(jctx *c, jbuf *b, jv v) { return print_depth(c, b, v, 0, false); }
bool jv_repr(jctx *c, jbuf *b, jv v) { return print_depth(c, b, v, 0, true); }

bool jv_to_string(jctx *c, jv v, jv *out) {
    if (v.kind == JV_STR) {
        *out = jv_retain(v);
        return true;
    }
    jbuf b = {0};
    bool ok = jv_print(c, &b, v) && jbuf_take_str(c, &b, out);
    jbuf_free(&b);
    return ok;
}

/* ---- JSON ---- */

void jjson_opts_default(jjson_opts *o) {
    memset(o, 0, sizeof *o);
    o->item_sep = ", ";
    o->key_sep = ": ";
}

bool jjson_string(jctx *c, jbuf *b, const char *s, size_t n, bool ensure_ascii) {
    if (!jbuf_put(c, b, "\"", 1)) return false;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n && (unsigned char)s[i] >= 0x20 && s[i] != '"' && s[i] != '\\' &&
               (!ensure_ascii || (unsigned char)s[i] < 0x80))
            i++;
        if (!jbuf_put(c, b, s + start, i - start)) return false;
        if (i >= n) break;
        unsigned char ch = (unsigned char)s[i];
        bool ok;
        switch (ch) {
        case '"':
            ok = jbuf_puts(c, b, "\\\"");
            i++;
            break;
        case '\\':
            ok = jbuf_puts(c, b, "\\\\");
            i++;
            break;
        case '\n':
            ok = jbuf_puts(c, b, "\\n");
            i++;
            break;
        case '\r':
            ok = jbuf_puts(c, b, "\\r");
            i++;
            break;
        case '\t':
            ok = jbuf_puts(c, b, "\\t");
            i++;
            break;
        case '\b':
            ok = jbuf_puts(c, b, "\\b");
            i++;
            break;
        case '\f':
            ok = jbuf_puts(c, b, "\\f");
            i++;
            break;
        default:
            if (ch < 0x20) {
                ok = jbuf_printf(c, b, "\\u%04x", ch);
                i++;
            } else { /* non-ASCII with ensure_ascii: \uXXXX, surrogate pairs above the BMP */
                uint32_t cp;
                i += jutf8_decode((const unsigned char *)s + i, n - i, &cp);
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    ok = jbuf_printf(c, b, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                                     0xDC00 + (v & 0x3FF));
                } else {
                    ok = jbuf_printf(c, b, "\\u%04x", cp);
                }
            }
        }
        if (!ok) return false;
    }
    return jbuf_put(c, b, "\"", 1);
}

static bool json_float(jctx *c, jbuf *b, double f) {
    if (isnan(f)) return jbuf_puts(c, b, "NaN");
    if (isinf(f)) return jbuf_puts(c, b, f < 0 ? "-Infinity" : "Infinity");
    char tmp[64];
    jfloat_repr(f, tmp, sizeof tmp);
    return jbuf_puts(c, b, tmp);
}

static bool json_newline(jctx *c, jbuf *b, const jjson_opts *o, int level) {
    if (!o->indent_set) return true;
    if (!jbuf_put(c, b, "\n", 1)) return false;
    for (int i = 0; i < level; i++)
        if (!jbuf_put(c, b, o->indent, o->indent_len)) return false;
    return true;
}

static bool json_key(jctx *c, jbuf *b, jv k, const jjson_opts *o) {
    switch ((jv_kind)k.kind) {
    case JV_STR: return jjson_string(c, b, jv_str(k)->data, jv_str(k)->len, o->ensure_ascii);
    case JV_BOOL: return jbuf_puts(c, b, k.u.b ? "\"true\"" : "\"false\"");
    case JV_NONE: return jbuf_puts(c, b, "\"null\"");
    case JV_INT: return jbuf_printf(c, b, "\"%" PRId64 "\"", k.u.i);
    case JV_FLOAT: return jbuf_puts(c, b, "\"") && json_float(c, b, k.u.f) && jbuf_puts(c, b, "\"");
    default:
        return jfail(c, LM_ERR_FORMAT, "keys must be str, int, float, bool or None, not %s",
                     jv_type_name(k));
    }
}

/* Orders dict entries for sort_keys (strings bytewise = code point order). */
static int cmp_keys(jv a, jv b, bool *bad) {
    if (a.kind == JV_STR && b.kind == JV_STR) {
        size_t n = jv_str(a)->len < jv_str(b)->len ? jv_str(a)->len : jv_str(b)->len;
        int r = memcmp(jv_str(a)->data, jv_str(b)->data, n);
        if (r) return r;
        return jv_str(a)->len < jv_str(b)->len ? -1 : jv_str(a)->len > jv_str(b)->len;
    }
    if (jv_is_num(a) && jv_is_num(b)) {
        double x = a.kind == JV_FLOAT ? a.u.f : a.kind == JV_INT ? (double)a.u.i : a.u.b;
        double y = b.kind == JV_FLOAT ? b.u.f : b.kind == JV_INT ? (double)b.u.i : b.u.b;
        return x < y ? -1 : x > y;
    }
    *bad = true;
    return 0;
}

static bool json_value(jctx *c, jbuf *b, jv v, const jjson_opts *o, int level) {
    if (level > PRINT_DEPTH_MAX)
        return jfail(c, LM_ERR_FORMAT, "value nested too deeply for tojson");
    switch ((jv_kind)v.kind) {
    case JV_NONE: return jbuf_puts(c, b, "null");
    case JV_BOOL: return jbuf_puts(c, b, v.u.b ? "true" : "false");
    case JV_INT: return jbuf_printf(c, b, "%" PRId64, v.u.i);
    case JV_FLOAT: return json_float(c, b, v.u.f);
    case JV_STR: return jjson_string(c, b, jv_str(v)->data, jv_str(v)->len, o->ensure_ascii);
    case JV_LIST:
    case JV_TUPLE: {
        jlist *l = jv_list(v);
        if (l->len == 0) return jbuf_puts(c, b, "[]");
        if (!jbuf_puts(c, b, "[")) return false;
        for (size_t i = 0; i < l->len; i++) {
            if (i && !jbuf_puts(c, b, o->item_sep)) return false;
            if (!json_newline(c, b, o, level + 1) || !json_value(c, b, l->items[i], o, level + 1))
                return false;
        }
        return json_newline(c, b, o, level) && jbuf_puts(c, b, "]");
    }
    case JV_DICT: {
        jdict *d = jv_dict(v);
        if (d->len == 0) return jbuf_puts(c, b, "{}");
        size_t *order = malloc(d->len * sizeof(size_t));
        if (!order) return jfail(c, LM_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < d->len; i++) order[i] = i;
        if (o->sort_keys) { /* insertion sort: stable, dicts are small */
            bool bad = false;
            for (size_t i = 1; i < d->len; i++) {
                size_t cur = order[i], j = i;
                while (j > 0 && cmp_keys(d->keys[order[j - 1]], d->keys[cur], &bad) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = cur;
            }
            if (bad) {
                free(order);
                return jfail(c, LM_ERR_FORMAT,
                             "tojson(sort_keys=true): keys of different types cannot be ordered");
            }
        }
        bool ok = jbuf_puts(c, b, "{");
        for (size_t n = 0; ok && n < d->len; n++) {
            size_t i = order[n];
            if (n) ok = jbuf_puts(c, b, o->item_sep);
            ok = ok && json_newline(c, b, o, level + 1) && json_key(c, b, d->keys[i], o) &&
                 jbuf_puts(c, b, o->key_sep) && json_value(c, b, d->vals[i], o, level + 1);
        }
        free(order);
        return ok && json_newline(c, b, o, level) && jbuf_puts(c, b, "}");
    }
    default:
        return jfail(c, LM_ERR_FORMAT, "Object of type %s is not JSON serializable",
                     jv_type_name(v));
    }
}

bool jv_to_json(jctx *c, jbuf *b, jv v, const jjson_opts *o) { return json_value(c, b, v, o, 0); }
