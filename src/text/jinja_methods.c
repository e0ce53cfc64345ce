/* Python methods callable from templates (str, dict, list), the loop
 * object's attributes, and the global functions: range, namespace, dict,
 * and transformers' raise_exception and strftime_now. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "text/jinja_builtins.h"
#include "text/jinja_eval.h"
#include "text/jinja_lexer.h"

static bool need_str(jrt *rt, jv v, const char *what) {
    if (v.kind == JV_STR) return true;
    return jfail(&rt->c, LM_ERR_INVALID, "%s: expected str, got %s", what, jv_type_name(v));
}

static bool opt_int(jrt *rt, jv *v, int64_t dflt, int64_t *out) {
    *out = dflt;
    if (!v || v->kind == JV_NONE) return *out = dflt, true;
    if (v->kind == JV_INT || v->kind == JV_BOOL)
        return *out = v->kind == JV_INT ? v->u.i : v->u.b, true;
    return jfail(&rt->c, LM_ERR_INVALID, "expected an integer, got %s", jv_type_name(*v));
}

/* Code point index of byte offset off in s. */
static int64_t cp_index(jstr *s, size_t off) {
    return (int64_t)(s->ncp == s->len ? off : jutf8_count(s->data, off));
}

/* Byte range [lo, hi) of s for Python's optional start/end code point arguments. */
static bool byte_range(jrt *rt, jstr *s, jv *start, jv *end, size_t *lo, size_t *hi) {
    int64_t a, b, n = (int64_t)s->ncp;
    if (!opt_int(rt, start, 0, &a) || !opt_int(rt, end, n, &b)) return false;
    if (a < 0) a = a + n < 0 ? 0 : a + n;
    if (b < 0) b = b + n < 0 ? 0 : b + n;
    if (a > n) a = n;
    if (b > n) b = n;
    if (b < a) b = a;
    *lo = jutf8_offset(s, (size_t)a);
    *hi = jutf8_offset(s, (size_t)b);
    return true;
}

static bool affix_match(jrt *rt, jstr *s, jv affix, size_t lo, size_t hi, bool suffix,
                        bool *result) {
    if (affix.kind == JV_TUPLE || affix.kind == JV_LIST) {
        *result = false;
        for (size_t i = 0; i < jv_list(affix)->len && !*result; i++)
            if (!affix_match(rt, s, jv_list(affix)->items[i], lo, hi, suffix, result)) return false;
        return true;
    }
    if (!need_str(rt, affix, suffix ? "endswith" : "startswith")) return false;
    jstr *p = jv_str(affix);
    size_t n = hi - lo;
    *result = p->len <= n && memcmp(s->data + (suffix ? hi - p->len : lo), p->data, p->len) == 0;
    return true;
}

static bool str_predicate(jstr *s, int id) {
    if (s->len == 0) return false;
    bool any_cased = false, all = true;
    size_t i = 0;
    while (i < s->len) {
        uint32_t cp;
        i += jutf8_decode((const unsigned char *)s->data + i, s->len - i, &cp);
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        bool alpha = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
        bool decimal = c == UTF8PROC_CATEGORY_ND;
        bool numeric = c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
        switch (id) {
        case JM_ISDIGIT: /* approximation: Nd plus superscript-style No digits */
        case JM_ISDECIMAL: all = all && decimal; break;
        case JM_ISNUMERIC: all = all && numeric; break;
        case JM_ISALPHA: all = all && alpha; break;
        case JM_ISALNUM: all = all && (alpha || numeric); break;
        case JM_ISSPACE: all = all && jcp_isspace(cp); break;
        case JM_ISUPPER:
            if (c == UTF8PROC_CATEGORY_LL) all = false;
            if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) any_cased = true;
            break;
        case JM_ISLOWER:
            if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) all = false;
            if (c == UTF8PROC_CATEGORY_LL) any_cased = true;
            break;
        }
    }
    if (id == JM_ISUPPER || id == JM_ISLOWER) return all && any_cased;
    return all;
}

static bool make_tuple3(jrt *rt, jstr *s, size_t a, size_t b, size_t c, jv *out) {
    if (!jv_new_list(&rt->c, JV_TUPLE, 3, out)) return false;
    size_t cuts[4] = {0, a, b, c};
    for (int i = 0; i < 3; i++) {
        jv piece;
        if (!jv_new_str(&rt->c, s->data + cuts[i], cuts[i + 1] - cuts[i], &piece) ||
            !jlist_push(&rt->c, jv_list(*out), piece))
            return false;
    }
    return true;
}

static bool pad_to(jrt *rt, jv self, int64_t width, jv *fill, char how, jv *out) {
    jstr *s = jv_str(self);
    const char *f = " ";
    size_t flen = 1;
    if (fill) {
        if (fill->kind != JV_STR || jv_str(*fill)->ncp != 1)
            return jfail(&rt->c, LM_ERR_INVALID,
                         "The fill character must be exactly one character long");
        f = jv_str(*fill)->data;
        flen = jv_str(*fill)->len;
    }
    if (width <= (int64_t)s->ncp) return *out = jv_retain(self), true;
    if (width > (int64_t)rt->c.max_string) return jfail(&rt->c, LM_ERR_NOMEM, "width too large");
    size_t marg = (size_t)width - s->ncp, left;
    if (how == 'l')
        left = 0;
    else if (how == 'r' || how == 'z')
        left = marg;
    else
        left = marg / 2 + (marg & (size_t)width & 1);
    jbuf b = {0};
    bool ok = true;
    size_t sign = 0;
    if (how == 'z' && s->len && (s->data[0] == '-' || s->data[0] == '+')) {
        ok = jbuf_put(&rt->c, &b, s->data, 1);
        sign = 1;
        f = "0";
    } else if (how == 'z') {
        f = "0";
    }
    for (size_t i = 0; ok && i < left; i++) ok = jbuf_put(&rt->c, &b, f, how == 'z' ? 1 : flen);
    ok = ok && jbuf_put(&rt->c, &b, s->data + sign, s->len - sign);
    for (size_t i = left; ok && i < marg; i++) ok = jbuf_put(&rt->c, &b, f, flen);
    ok = ok && jbuf_take_str(&rt->c, &b, out);
    jbuf_free(&b);
    return ok;
}

/* ---- str.format ---- */

typedef struct {
    uint32_t fill;
    char align, sign, type, group;
    bool zero, alt, fill_given;
    int width, precision;
} fmt_spec;

static bool parse_spec(jrt *rt, const char *p, size_t n, fmt_spec *sp) {
    memset(sp, 0, sizeof *sp);
    sp->fill = ' ';
    sp->precision = -1;
    size_t i = 0;
    uint32_t cp0 = 0;
    size_t k0 = n ? jutf8_decode((const unsigned char *)p, n, &cp0) : 0;
    if (n > k0 && strchr("<>=^", p[k0])) {
        sp->fill = cp0;
        sp->fill_given = true;
        sp->align = p[k0];
        i = k0 + 1;
    } else if (n && strchr("<>=^", p[0])) {
        sp->align = p[0];
        i = 1;
    }
    if (i < n && strchr("+- ", p[i])) sp->sign = p[i++];
    if (i < n && p[i] == '#') sp->alt = true, i++;
    if (i < n && p[i] == '0') sp->zero = true, i++;
    while (i < n && p[i] >= '0' && p[i] <= '9' && sp->width < 100000)
        sp->width = sp->width * 10 + (p[i++] - '0');
    if (i < n && (p[i] == ',' || p[i] == '_')) sp->group = p[i++];
    if (i < n && p[i] == '.') {
        i++;
        sp->precision = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9' && sp->precision < 1000)
            sp->precision = sp->precision * 10 + (p[i++] - '0');
    }
    if (i < n) sp->type = p[i++];
    if (i != n) return jfail(&rt->c, LM_ERR_INVALID, "Invalid format specifier");
    return true;
}

static bool format_with_spec(jrt *rt, jbuf *b, jv v, const fmt_spec *sp) {
    char tmp[512];
    jbuf text = {0};
    bool numeric = jv_is_num(v) && v.kind != JV_BOOL
                       ? true
                       : (v.kind == JV_BOOL && sp->type && sp->type != 's');
    bool ok = true;
    char t = sp->type;
    if (!t && v.kind == JV_FLOAT && sp->precision >= 0) t = 'g';
    if (t == 0 || t == 's') {
        if (t == 's' && v.kind != JV_STR)
            return jfail(&rt->c, LM_ERR_INVALID, "Unknown format code 's' for object of type '%s'",
                         jv_type_name(v));
        ok = jv_print(&rt->c, &text, v);
        if (ok && sp->precision >= 0 && v.kind == JV_STR)
            text.len = jutf8_offset(jv_str(v), (size_t)sp->precision < jv_str(v)->ncp
                                                   ? (size_t)sp->precision
                                                   : jv_str(v)->ncp);
        numeric = jv_is_num(v) && v.kind != JV_BOOL;
    } else if (strchr("dxXob", t)) {
        if (v.kind != JV_INT && v.kind != JV_BOOL)
            return jfail(&rt->c, LM_ERR_INVALID, "Unknown format code '%c' for object of type '%s'",
                         t, jv_type_name(v));
        int64_t i = v.kind == JV_INT ? v.u.i : v.u.b;
        uint64_t mag = i < 0 ? (uint64_t)0 - (uint64_t)i : (uint64_t)i;
        int n;
        if (t == 'b') {
            char bits[80];
            int k = 0;
            do bits[k++] = (char)('0' + (mag & 1));
            while ((mag >>= 1) && k < 70);
            n = 0;
            if (i < 0) tmp[n++] = '-';
            if (sp->alt) tmp[n++] = '0', tmp[n++] = 'b';
            while (k) tmp[n++] = bits[--k];
            tmp[n] = 0;
        } else {
            const char *pre = sp->alt ? (t == 'x'   ? "0x"
                                         : t == 'X' ? "0X"
                                         : t == 'o' ? "0o"
                                                    : "")
                                      : "";
            n = snprintf(tmp, sizeof tmp, "%s%s%s",
                         i < 0 ? "-"
                               : (sp->sign == '+'   ? "+"
                                  : sp->sign == ' ' ? " "
                                                    : ""),
                         pre, "");
            n += snprintf(tmp + n, sizeof tmp - (size_t)n,
                          t == 'x'   ? "%" PRIx64
                          : t == 'X' ? "%" PRIX64
                          : t == 'o' ? "%" PRIo64
                                     : "%" PRIu64,
                          mag);
        }
        ok = jbuf_put(&rt->c, &text, tmp, strlen(tmp));
        numeric = true;
    } else if (strchr("fFeEgG%", t)) {
        if (!jv_is_num(v))
            return jfail(&rt->c, LM_ERR_INVALID, "Unknown format code '%c' for object of type '%s'",
                         t, jv_type_name(v));
        double d = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.u.b;
        int prec = sp->precision >= 0 ? sp->precision : 6;
        char conv = t == '%' ? 'f' : t;
        char spec[16];
        snprintf(spec, sizeof spec, "%%%s.*%c",
                 sp->sign == '+'   ? "+"
                 : sp->sign == ' ' ? " "
                                   : "",
                 conv);
        int n = snprintf(tmp, sizeof tmp, spec, prec, t == '%' ? d * 100 : d);
        if (n < 0 || (size_t)n >= sizeof tmp - 2)
            return jfail(&rt->c, LM_ERR_INVALID, "formatted number too wide");
        if (t == '%') tmp[n++] = '%', tmp[n] = 0;
        ok = jbuf_put(&rt->c, &text, tmp, (size_t)n);
        numeric = true;
    } else {
        return jfail(&rt->c, LM_ERR_INVALID, "Unknown format code '%c'", t);
    }
    if (ok && sp->group && numeric && text.data) { /* thousands separators in the integer digits */
        size_t start = 0, end;
        while (start < text.len && !(text.data[start] >= '0' && text.data[start] <= '9')) start++;
        for (end = start; end < text.len && text.data[end] >= '0' && text.data[end] <= '9';) end++;
        jbuf g = {0};
        ok = jbuf_put(&rt->c, &g, text.data, start);
        for (size_t k = start; ok && k < end; k++) {
            ok = jbuf_put(&rt->c, &g, text.data + k, 1);
            if (ok && k + 1 < end && (end - k - 1) % 3 == 0)
                ok = jbuf_put(&rt->c, &g, &sp->group, 1);
        }
        ok = ok && jbuf_put(&rt->c, &g, text.data + end, text.len - end);
        jbuf_free(&text);
        text = g;
    }
    if (!ok) {
        jbuf_free(&text);
        return false;
    }
    /* padding: a 0 before the width means fill '0' (and sign-aware for numbers) */
    const char *data = text.data ? text.data : "";
    size_t ncp = jutf8_count(data, text.len);
    char align = sp->align ? sp->align : (sp->zero && numeric ? '=' : numeric ? '>' : '<');
    uint32_t fill = sp->fill_given ? sp->fill : sp->zero ? '0' : ' ';
    size_t pad = sp->width > 0 && (size_t)sp->width > ncp ? (size_t)sp->width - ncp : 0;
    size_t left = align == '<' ? 0 : align == '^' ? pad / 2 : pad;
    char enc[4];
    size_t elen = jutf8_encode(fill, enc);
    size_t signlen = align == '=' && text.len && strchr("+- ", data[0]) ? 1 : 0;
    ok = jbuf_put(&rt->c, b, data, signlen);
    for (size_t i = 0; ok && i < left; i++) ok = jbuf_put(&rt->c, b, enc, elen);
    ok = ok && jbuf_put(&rt->c, b, data + signlen, text.len - signlen);
    for (size_t i = left; ok && i < pad; i++) ok = jbuf_put(&rt->c, b, enc, elen);
    jbuf_free(&text);
    return ok;
}

static bool str_format(jrt *rt, jstr *fmt, jargs *a, jv *out) {
    jbuf b = {0};
    bool ok = true;
    size_t i = 0, auto_index = 0;
    while (ok && i < fmt->len) {
        char c = fmt->data[i];
        if (c == '}') {
            if (i + 1 < fmt->len && fmt->data[i + 1] == '}')
                ok = jbuf_put(&rt->c, &b, "}", 1), i += 2;
            else
                ok = jfail(&rt->c, LM_ERR_INVALID, "Single '}' encountered in format string");
            continue;
        }
        if (c != '{') {
            size_t j = i;
            while (j < fmt->len && fmt->data[j] != '{' && fmt->data[j] != '}') j++;
            ok = jbuf_put(&rt->c, &b, fmt->data + i, j - i);
            i = j;
            continue;
        }
        if (i + 1 < fmt->len && fmt->data[i + 1] == '{') {
            ok = jbuf_put(&rt->c, &b, "{", 1);
            i += 2;
            continue;
        }
        const char *close = memchr(fmt->data + i, '}', fmt->len - i);
        if (!close) {
            ok = jfail(&rt->c, LM_ERR_INVALID, "Single '{' encountered in format string");
            break;
        }
        const char *f = fmt->data + i + 1, *end = close;
        const char *colon = memchr(f, ':', (size_t)(end - f)),
                   *bang = memchr(f, '!', (size_t)(end - f));
        if (bang && colon && bang > colon) bang = NULL;
        const char *field_end = bang ? bang : colon ? colon : end;
        jv *value = NULL;
        size_t flen = (size_t)(field_end - f);
        if (flen == 0) {
            value = auto_index < a->npos ? &a->pos[auto_index] : NULL;
            auto_index++;
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t idx = (size_t)strtoul(f, NULL, 10);
            value = idx < a->npos ? &a->pos[idx] : NULL;
        } else {
            for (size_t k = 0; k < a->nkw && !value; k++) {
                jstr *nm = jv_str(a->kwnodes[k]->value);
                if (nm->len == flen && memcmp(nm->data, f, flen) == 0) value = &a->kw[k];
            }
        }
        if (!value) {
            ok = jfail(&rt->c, LM_ERR_INVALID, "format field '%.*s' has no value", (int)flen, f);
            break;
        }
        jv v = *value, conv = jv_none();
        if (bang && bang + 1 < end && (bang[1] == 'r' || bang[1] == 's')) {
            jbuf t = {0};
            ok = (bang[1] == 'r' ? jv_repr(&rt->c, &t, v) : jv_print(&rt->c, &t, v)) &&
                 jbuf_take_str(&rt->c, &t, &conv);
            jbuf_free(&t);
            v = conv;
        }
        fmt_spec sp;
        if (ok) {
            const char *sp_start = colon ? colon + 1 : end;
            ok = parse_spec(rt, sp_start, (size_t)(end - sp_start), &sp) &&
                 format_with_spec(rt, &b, v, &sp);
        }
        jv_release(&rt->c, conv);
        i = (size_t)(close - fmt->data) + 1;
    }
    ok = ok && jbuf_take_str(&rt->c, &b, out);
    jbuf_free(&b);
    return ok;
}

/* ---- methods ---- */

static bool str_method(jrt *rt, jv self, int id, jargs *a, jv *out) {
    jstr *s = jv_str(self);
    if (!jctx_charge(&rt->c, 1 + s->len / 16)) return false; /* every method may scan the string */
    jv *a0 = jargs_get(a, 0, NULL), *a1 = jargs_get(a, 1, NULL), *a2 = jargs_get(a, 2, NULL);
    int64_t n;
    size_t lo, hi;
    bool r;
    switch (id) {
    case JM_STARTSWITH:
    case JM_ENDSWITH:
        if (!a0)
            return jfail(&rt->c, LM_ERR_INVALID, "%s takes at least 1 argument",
                         id == JM_STARTSWITH ? "startswith" : "endswith");
        if (!byte_range(rt, s, a1, a2, &lo, &hi) ||
            !affix_match(rt, s, *a0, lo, hi, id == JM_ENDSWITH, &r))
            return false;
        *out = jv_bool(r);
        return true;
    case JM_SPLIT:
    case JM_RSPLIT: {
        jv *sep = jargs_get(a, 0, "sep"), *max = jargs_get(a, 1, "maxsplit");
        if (!opt_int(rt, max, -1, &n)) return false;
        return jstr_split(rt, self, sep ? *sep : jv_none(), n, id == JM_RSPLIT, out);
    }
    case JM_STRIP: return jstr_strip(rt, self, a0 ? *a0 : jv_none(), true, true, out);
    case JM_LSTRIP: return jstr_strip(rt, self, a0 ? *a0 : jv_none(), true, false, out);
    case JM_RSTRIP: return jstr_strip(rt, self, a0 ? *a0 : jv_none(), false, true, out);
    case JM_REPLACE:
        if (!a0 || !a1)
            return jfail(&rt->c, LM_ERR_INVALID, "replace expected at least 2 arguments");
        if (!opt_int(rt, jargs_get(a, 2, "count"), -1, &n)) return false;
        return jstr_replace(rt, self, *a0, *a1, n, out);
    case JM_UPPER:
    case JM_LOWER:
    case JM_TITLE:
    case JM_CAPITALIZE:
    case JM_SWAPCASE:
    case JM_CASEFOLD: return jstr_case(rt, self, id, out);
    case JM_FIND:
    case JM_RFIND:
    case JM_INDEX:
    case JM_RINDEX:
    case JM_COUNT: {
        if (!a0 || !need_str(rt, *a0, "find"))
            return a0 ? false : jfail(&rt->c, LM_ERR_INVALID, "missing argument");
        if (!byte_range(rt, s, a1, a2, &lo, &hi)) return false;
        jstr *sub = jv_str(*a0);
        if (id == JM_COUNT) {
            int64_t count = 0;
            if (sub->len == 0)
                count = cp_index(s, hi) - cp_index(s, lo) + 1;
            else
                for (size_t i = lo; i + sub->len <= hi;) {
                    const char *hit = memmem(s->data + i, hi - i, sub->data, sub->len);
                    if (!hit) break;
                    count++;
                    i = (size_t)(hit - s->data) + sub->len;
                }
            return *out = jv_int(count), true;
        }
        int64_t found = -1;
        if (id == JM_FIND || id == JM_INDEX) {
            const char *hit =
                sub->len <= hi - lo ? memmem(s->data + lo, hi - lo, sub->data, sub->len) : NULL;
            if (hit) found = cp_index(s, (size_t)(hit - s->data));
        } else if (sub->len <= hi - lo) {
            for (size_t p = hi - sub->len + 1; p-- > lo;)
                if (memcmp(s->data + p, sub->data, sub->len) == 0) {
                    found = cp_index(s, p);
                    break;
                }
        }
        if (found < 0 && (id == JM_INDEX || id == JM_RINDEX))
            return jfail(&rt->c, LM_ERR_INVALID, "substring not found");
        return *out = jv_int(found), true;
    }
    case JM_JOIN: {
        if (!a0) return jfail(&rt->c, LM_ERR_INVALID, "join() takes exactly one argument");
        jv items;
        if (!jiterate(rt, *a0, &items)) return false;
        jlist *l = jv_list(items);
        jbuf b = {0};
        bool ok = true;
        for (size_t i = 0; ok && i < l->len; i++) {
            if (l->items[i].kind != JV_STR) {
                ok = jfail(&rt->c, LM_ERR_INVALID,
                           "sequence item %zu: expected str instance, %s found", i,
                           jv_type_name(l->items[i]));
                break;
            }
            if (i) ok = jbuf_put(&rt->c, &b, s->data, s->len);
            ok = ok && jbuf_put(&rt->c, &b, jv_str(l->items[i])->data, jv_str(l->items[i])->len);
        }
        ok = ok && jctx_charge(&rt->c, l->len) && jbuf_take_str(&rt->c, &b, out);
        jbuf_free(&b);
        jv_release(&rt->c, items);
        return ok;
    }
    case JM_FORMAT: return str_format(rt, s, a, out);
    case JM_ISDIGIT:
    case JM_ISALPHA:
    case JM_ISALNUM:
    case JM_ISSPACE:
    case JM_ISUPPER:
    case JM_ISLOWER:
    case JM_ISNUMERIC:
    case JM_ISDECIMAL: *out = jv_bool(str_predicate(s, id)); return true;
    case JM_SPLITLINES: return jstr_splitlines(rt, self, jv_truthy(a0 ? *a0 : jv_bool(false)), out);
    case JM_ZFILL:
    case JM_CENTER:
    case JM_LJUST:
    case JM_RJUST:
        if (!a0 || !opt_int(rt, a0, 0, &n))
            return a0 ? false : jfail(&rt->c, LM_ERR_INVALID, "missing width");
        return pad_to(rt, self, n, id == JM_ZFILL ? NULL : a1,
                      id == JM_ZFILL    ? 'z'
                      : id == JM_CENTER ? 'c'
                      : id == JM_LJUST  ? 'l'
                                        : 'r',
                      out);
    case JM_PARTITION:
    case JM_RPARTITION: {
        if (!a0 || !need_str(rt, *a0, "partition"))
            return a0 ? false : jfail(&rt->c, LM_ERR_INVALID, "missing separator");
        jstr *sep = jv_str(*a0);
        if (!sep->len) return jfail(&rt->c, LM_ERR_INVALID, "empty separator");
        size_t at = SIZE_MAX;
        if (id == JM_PARTITION) {
            const char *hit = memmem(s->data, s->len, sep->data, sep->len);
            if (hit) at = (size_t)(hit - s->data);
        } else if (sep->len <= s->len) {
            for (size_t p = s->len - sep->len + 1; p-- > 0;)
                if (memcmp(s->data + p, sep->data, sep->len) == 0) {
                    at = p;
                    break;
                }
        }
        if (at == SIZE_MAX)
            return id == JM_PARTITION ? make_tuple3(rt, s, s->len, s->len, s->len, out)
                                      : make_tuple3(rt, s, 0, 0, s->len, out);
        return make_tuple3(rt, s, at, at + sep->len, s->len, out);
    }
    case JM_REMOVEPREFIX:
    case JM_REMOVESUFFIX: {
        if (!a0 || !need_str(rt, *a0, "removeprefix"))
            return a0 ? false : jfail(&rt->c, LM_ERR_INVALID, "missing argument");
        jstr *p = jv_str(*a0);
        if (p->len > s->len) return *out = jv_retain(self), true;
        if (id == JM_REMOVEPREFIX && memcmp(s->data, p->data, p->len) == 0)
            return jstr_slice(rt, self, p->len, s->len, out);
        if (id == JM_REMOVESUFFIX && p->len &&
            memcmp(s->data + s->len - p->len, p->data, p->len) == 0)
            return jstr_slice(rt, self, 0, s->len - p->len, out);
        return *out = jv_retain(self), true;
    }
    }
    return jfail(&rt->c, LM_ERR_INVALID, "unsupported str method");
}

static bool dict_view(jrt *rt, jdict *d, int id, jv *out) {
    if (!jv_new_list(&rt->c, JV_LIST, d->len, out)) return false;
    for (size_t i = 0; i < d->len; i++) {
        jv item;
        if (id == JM_KEYS)
            item = jv_retain(d->keys[i]);
        else if (id == JM_VALUES)
            item = jv_retain(d->vals[i]);
        else if (!jv_new_list(&rt->c, JV_TUPLE, 2, &item) ||
                 !jlist_push(&rt->c, jv_list(item), jv_retain(d->keys[i])) ||
                 !jlist_push(&rt->c, jv_list(item), jv_retain(d->vals[i])))
            return false;
        if (!jlist_push(&rt->c, jv_list(*out), item)) return false;
    }
    return true;
}

bool jmethod_call(jrt *rt, jv self, int id, jargs *a, jv *out) {
    if (self.kind == JV_STR && id < JM_STR_LAST_) return str_method(rt, self, id, a, out);
    if (self.kind == JV_DICT) {
        jdict *d = jv_dict(self);
        switch (id) {
        case JM_GET: {
            jv *key = jargs_get(a, 0, NULL), *dflt = jargs_get(a, 1, NULL);
            if (!key)
                return jfail(&rt->c, LM_ERR_INVALID, "get expected at least 1 argument, got 0");
            jv *v = jv_hashable(*key) ? jdict_get(d, *key) : NULL;
            *out = v ? jv_retain(*v) : dflt ? jv_retain(*dflt) : jv_none();
            return true;
        }
        case JM_ITEMS:
        case JM_KEYS:
        case JM_VALUES: return dict_view(rt, d, id, out);
        case JM_COPY: {
            if (!jv_new_dict(&rt->c, JV_DICT, out)) return false;
            for (size_t i = 0; i < d->len; i++)
                if (!jdict_set(&rt->c, jv_dict(*out), jv_retain(d->keys[i]), jv_retain(d->vals[i])))
                    return false;
            return true;
        }
        }
    }
    if (jv_is_seq(self)) {
        jlist *l = jv_list(self);
        jv *x = jargs_get(a, 0, NULL);
        switch (id) {
        case JM_INDEX:
        case JM_COUNT: {
            if (!x) return jfail(&rt->c, LM_ERR_INVALID, "missing argument");
            int64_t count = 0;
            for (size_t i = 0; i < l->len; i++)
                if (jv_equal(l->items[i], *x)) {
                    if (id == JM_INDEX) return *out = jv_int((int64_t)i), true;
                    count++;
                }
            if (id == JM_INDEX) return jfail(&rt->c, LM_ERR_INVALID, "value is not in list");
            return *out = jv_int(count), true;
        }
        case JM_COPY: {
            if (!jv_new_list(&rt->c, (jv_kind)self.kind, l->len, out)) return false;
            for (size_t i = 0; i < l->len; i++)
                if (!jlist_push(&rt->c, jv_list(*out), jv_retain(l->items[i]))) return false;
            return true;
        }
        }
    }
    if (self.kind == JV_LOOP &&
        id == JM_LOOP_CHANGED) { /* true when the arguments differ from the last call */
        jloop *l = (jloop *)self.u.o;
        jv now;
        if (!jv_new_list(&rt->c, JV_TUPLE, a->npos, &now)) return false;
        for (size_t i = 0; i < a->npos; i++)
            if (!jlist_push(&rt->c, jv_list(now), jv_retain(a->pos[i]))) return false;
        bool changed = !jv_equal(now, l->last_changed);
        jv_release(&rt->c, l->last_changed);
        l->last_changed = now;
        *out = jv_bool(changed);
        return true;
    }
    if (self.kind == JV_LOOP && id == JM_LOOP_CYCLE) {
        if (!a->npos) return jfail(&rt->c, LM_ERR_INVALID, "no items for cycling given");
        *out = jv_retain(a->pos[((jloop *)self.u.o)->index0 % a->npos]);
        return true;
    }
    return jfail(&rt->c, LM_ERR_INVALID, "unsupported method on %s", jv_type_name(self));
}

bool jloop_attr(jrt *rt, jloop *l, const char *name, jv *out, bool *found) {
    size_t len = jv_list(l->items)->len, i = l->index0;
    jv *items = jv_list(l->items)->items;
    *found = true;
    if (!strcmp(name, "index"))
        *out = jv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0"))
        *out = jv_int((int64_t)i);
    else if (!strcmp(name, "revindex"))
        *out = jv_int((int64_t)(len - i));
    else if (!strcmp(name, "revindex0"))
        *out = jv_int((int64_t)(len - i - 1));
    else if (!strcmp(name, "first"))
        *out = jv_bool(i == 0);
    else if (!strcmp(name, "last"))
        *out = jv_bool(i + 1 == len);
    else if (!strcmp(name, "length"))
        *out = jv_int((int64_t)len);
    else if (!strcmp(name, "depth"))
        *out = jv_int(l->depth);
    else if (!strcmp(name, "depth0"))
        *out = jv_int(l->depth - 1);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? jv_retain(items[i - 1]) : jv_undef("previtem");
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < len ? jv_retain(items[i + 1]) : jv_undef("nextitem");
    else if (!strcmp(name, "cycle") || !strcmp(name, "changed")) {
        jv self = jv_obj(JV_LOOP, l);
        return jv_new_method(&rt->c, self, name[1] == 'y' ? JM_LOOP_CYCLE : JM_LOOP_CHANGED, out);
    } else
        *found = false;
    return true;
}

/* ---- global functions ---- */

static bool builtin_range(jrt *rt, jargs *a, jv *out) {
    if (a->nkw) return jfail(&rt->c, LM_ERR_INVALID, "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3)
        return jfail(&rt->c, LM_ERR_INVALID, "range expected 1 to 3 arguments, got %zu", a->npos);
    int64_t v[3] = {0, 0, 0};
    for (size_t i = 0; i < a->npos; i++)
        if (!opt_int(rt, &a->pos[i], 0, &v[i])) return false;
    int64_t start = a->npos == 1 ? 0 : v[0], stop = a->npos == 1 ? v[0] : v[1],
            step = a->npos == 3 ? v[2] : 1;
    if (step == 0) return jfail(&rt->c, LM_ERR_INVALID, "range() arg 3 must not be zero");
    uint64_t count = 0;
    if (step > 0 && start < stop)
        count = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
    if (step < 0 && start > stop)
        count = ((uint64_t)start - (uint64_t)stop - 1) / ((uint64_t)0 - (uint64_t)step) + 1;
    if (count > rt->c.max_items)
        return jfail(&rt->c, LM_ERR_INVALID, "range of %" PRIu64 " items is too long", count);
    if (!jv_new_list(&rt->c, JV_LIST, (size_t)count, out)) return false;
    for (uint64_t i = 0; i < count; i++)
        if (!jlist_push(&rt->c, jv_list(*out), jv_int(start + (int64_t)i * step))) return false;
    return jctx_charge(&rt->c, count);
}

static bool builtin_strftime(jrt *rt, jargs *a, jv *out) {
    jv *fmt = jargs_get(a, 0, "format");
    if (!fmt || fmt->kind != JV_STR)
        return jfail(&rt->c, LM_ERR_INVALID, "strftime_now needs a format string");
    if (jv_str(*fmt)->len > 256)
        return jfail(&rt->c, LM_ERR_INVALID, "strftime_now format too long");
    struct tm tm;
    if (rt->limits.has_now) { /* a fixed date makes prompts reproducible */
        time_t t = (time_t)rt->limits.now;
        gmtime_r(&t, &tm);
    } else {
        time_t t = time(NULL);
        localtime_r(&t, &tm);
    }
    char buf[4096];
    size_t n = jv_str(*fmt)->len ? strftime(buf, sizeof buf, jv_str(*fmt)->data, &tm) : 0;
    return jv_new_str(&rt->c, buf, n, out);
}

bool jbuiltin_call(jrt *rt, int id, jargs *a, jv *out) {
    switch ((jbuiltin_id)id) {
    case JB_RANGE: return builtin_range(rt, a, out);
    case JB_NAMESPACE:
    case JB_DICT: {
        if (!jv_new_dict(&rt->c, id == JB_NAMESPACE ? JV_NAMESPACE : JV_DICT, out)) return false;
        if (a->npos > 1)
            return jfail(&rt->c, LM_ERR_INVALID, "%s expected at most 1 positional argument",
                         jbuiltin_name(id));
        if (a->npos == 1) {
            jv init = a->pos[0];
            if (init.kind == JV_DICT || init.kind == JV_NAMESPACE) {
                jdict *d = jv_dict(init);
                for (size_t i = 0; i < d->len; i++)
                    if (!jdict_set(&rt->c, jv_dict(*out), jv_retain(d->keys[i]),
                                   jv_retain(d->vals[i])))
                        return false;
            } else if (jv_is_seq(init)) { /* pairs */
                jlist *l = jv_list(init);
                for (size_t i = 0; i < l->len; i++) {
                    jv p = l->items[i];
                    if (!jv_is_seq(p) || jv_list(p)->len != 2)
                        return jfail(&rt->c, LM_ERR_INVALID, "%s: sequence elements must be pairs",
                                     jbuiltin_name(id));
                    if (!jdict_set(&rt->c, jv_dict(*out), jv_retain(jv_list(p)->items[0]),
                                   jv_retain(jv_list(p)->items[1])))
                        return false;
                }
            } else if (init.kind != JV_UNDEFINED && init.kind != JV_NONE) {
                return jfail(&rt->c, LM_ERR_INVALID, "%s: cannot convert %s to a mapping",
                             jbuiltin_name(id), jv_type_name(init));
            }
        }
        for (size_t i = 0; i < a->nkw; i++)
            if (!jdict_set(&rt->c, jv_dict(*out), a->kwnodes[i]->value, jv_retain(a->kw[i])))
                return false;
        return true;
    }
    case JB_RAISE_EXCEPTION: {
        jv *msg = jargs_get(a, 0, "message");
        jbuf b = {0};
        if (msg) jv_print(&rt->c, &b, *msg);
        jfail(&rt->c, LM_ERR_INVALID, "%s", b.data ? b.data : "raise_exception called");
        jbuf_free(&b);
        return false;
    }
    case JB_STRFTIME_NOW: return builtin_strftime(rt, a, out);
    }
    return jfail(&rt->c, LM_ERR_INVALID, "unknown function");
}
