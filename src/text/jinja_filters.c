/* Jinja2's built-in filters (jinja2/filters.py): the dispatch by filter id,
 * the string, number and conversion filters, and transformers' tojson
 * (json.dumps with ensure_ascii=False by default).  Filters over sequences
 * and mappings are in jinja_filters_seq.c. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/jinja_builtins.h"
#include "text/jinja_eval.h"
#include "text/jinja_lexer.h"

#include "text/jinja_filter.h"

/* Python's str.splitlines line boundaries. */
static size_t line_break_len(const char *s, size_t n) {
    unsigned char c = (unsigned char)s[0];
    if (c == '\r') return n > 1 && s[1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) return 1;
    if (c >= 0x80) {
        uint32_t cp;
        size_t k = jutf8_decode((const unsigned char *)s, n, &cp);
        if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) return k;
    }
    return 0;
}

/* Lines of s without their terminators (Python's splitlines()). */
static bool split_lines(jrt *rt, jv sv, bool keepends, jv *out) {
    jstr *s = jv_str(sv);
    if (!new_list(rt, out)) return false;
    size_t i = 0, start = 0;
    while (i < s->len) {
        size_t k = line_break_len(s->data + i, s->len - i);
        if (!k) {
            i++;
            continue;
        }
        jv line;
        if (!jv_new_str(&rt->c, s->data + start, (keepends ? i + k : i) - start, &line) ||
            !push(rt, *out, line)) {
            jv_release(&rt->c, *out);
            return false;
        }
        i += k;
        start = i;
    }
    if (start < s->len) {
        jv line;
        if (!jv_new_str(&rt->c, s->data + start, s->len - start, &line) || !push(rt, *out, line)) {
            jv_release(&rt->c, *out);
            return false;
        }
    }
    return true;
}

bool jstr_splitlines(jrt *rt, jv s, bool keepends, jv *out) {
    return split_lines(rt, s, keepends, out);
}

static bool f_indent(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"width", "first", "blank", NULL};
    if (!check(f, 3, names)) return false;
    jrt *rt = f->rt;
    jv *w = arg(f, 0, "width");
    jbuf ind = {0}, b = {0};
    bool ok = true;
    if (w && w->kind == JV_STR)
        ok = jbuf_put(&rt->c, &ind, jv_str(*w)->data, jv_str(*w)->len);
    else {
        int64_t width;
        ok = arg_int(f, w, 4, &width);
        for (int64_t i = 0; ok && i < width && i < 10000; i++) ok = jbuf_put(&rt->c, &ind, " ", 1);
    }
    bool first = arg_bool(arg(f, 1, "first"), false), blank = arg_bool(arg(f, 2, "blank"), false);
    jv s = jv_none(), s2 = jv_none(), lines = jv_none(), nl;
    /* Jinja2 does `s += "\n"` on the value itself: anything but a string fails */
    if (ok && in.kind != JV_STR)
        ok = jfail(&rt->c, LM_ERR_INVALID, "indent needs a string, not %s", jv_type_name(in));
    ok = ok && to_str(rt, in, &s) && jv_new_str(&rt->c, "\n", 1, &nl);
    if (ok) { /* Jinja appends a newline first ("this quirk is intentional") */
        ok = jbinop(rt, JOP_ADD, s, nl, &s2);
        jv_release(&rt->c, nl);
    }
    ok = ok && split_lines(rt, s2, false, &lines);
    if (ok) {
        jlist *l = jv_list(lines);
        const char *pad = ind.data ? ind.data : "";
        if (first) ok = jbuf_put(&rt->c, &b, pad, ind.len);
        for (size_t i = 0; ok && i < l->len; i++) {
            jstr *line = jv_str(l->items[i]);
            if (i) ok = jbuf_put(&rt->c, &b, "\n", 1);
            if (ok && i && (blank || line->len)) ok = jbuf_put(&rt->c, &b, pad, ind.len);
            ok = ok && jbuf_put(&rt->c, &b, line->data, line->len);
        }
        ok = ok && jbuf_take_str(&rt->c, &b, out);
    }
    jv_release(&rt->c, s);
    jv_release(&rt->c, s2);
    jv_release(&rt->c, lines);
    jbuf_free(&ind);
    jbuf_free(&b);
    return ok;
}

/* Python float(str): surrounding whitespace, inf/nan, underscores between digits. */
static bool parse_float_text(jstr *s, double *out) {
    char tmp[128];
    size_t i = 0, n = 0;
    while (i < s->len && jutf8_space_len(s->data + i, s->len - i))
        i += jutf8_space_len(s->data + i, s->len - i);
    size_t end = s->len;
    while (end > i) {
        size_t k = 1;
        while (k <= end - i && k <= 4 && !jutf8_space_len(s->data + end - k, k)) k++;
        if (k <= end - i && k <= 4 && jutf8_space_len(s->data + end - k, k) == k)
            end -= k;
        else
            break;
    }
    for (; i < end; i++) {
        char c = s->data[i];
        if (c == '_') {
            if (!n || i + 1 >= end || !(s->data[i + 1] >= '0' && s->data[i + 1] <= '9') ||
                !(tmp[n - 1] >= '0' && tmp[n - 1] <= '9'))
                return false;
            continue;
        }
        if (c == 'x' || c == 'X' || c == 'p' || c == 'P' || n >= sizeof tmp - 1) return false;
        tmp[n++] = c;
    }
    if (!n) return false;
    tmp[n] = 0;
    char *stop;
    errno = 0;
    double d = strtod(tmp, &stop);
    if (*stop) return false;
    *out = d;
    return true;
}

/* Python int(str, base) for bases 2..36 (base 0 = literal prefixes). */
static bool parse_int_text(jstr *s, int base, int64_t *out) {
    char tmp[128];
    size_t i = 0, n = 0, end = s->len;
    while (i < end && (s->data[i] == ' ' || (s->data[i] >= '\t' && s->data[i] <= '\r'))) i++;
    while (end > i &&
           (s->data[end - 1] == ' ' || (s->data[end - 1] >= '\t' && s->data[end - 1] <= '\r')))
        end--;
    for (; i < end; i++) {
        if (s->data[i] == '_') continue;
        if (n >= sizeof tmp - 1) return false;
        tmp[n++] = s->data[i];
    }
    tmp[n] = 0;
    if (!n || tmp[n - 1] == '-' || tmp[n - 1] == '+') return false;
    char *stop;
    errno = 0;
    long long v = strtoll(tmp, &stop, base);
    if (*stop || errno || stop == tmp) return false;
    *out = v;
    return true;
}

static bool f_int(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"default", "base", NULL};
    if (!check(f, 2, names)) return false;
    int64_t base;
    if (!arg_int(f, arg(f, 1, "base"), 10, &base)) return false;
    jv *dflt = arg(f, 0, "default");
    int64_t i;
    double d;
    if (!jcheck_defined(f->rt, in)) return false; /* int(Undefined) raises */
    switch ((jv_kind)in.kind) {
    case JV_INT: *out = in; return true;
    case JV_BOOL: *out = jv_int(in.u.b); return true;
    case JV_FLOAT:
        if (isfinite(in.u.f) && fabs(in.u.f) < 9.2e18) return *out = jv_int((int64_t)in.u.f), true;
        if (isfinite(in.u.f))
            return jfail(&f->rt->c, LM_ERR_INVALID, "int: %g does not fit in 64 bits", in.u.f);
        break;
    case JV_STR:
        if (base >= 2 && base <= 36 && parse_int_text(jv_str(in), (int)base, &i))
            return *out = jv_int(i), true;
        if (parse_float_text(jv_str(in), &d) && isfinite(d)) {
            if (fabs(d) < 9.2e18) return *out = jv_int((int64_t)d), true;
            return jfail(&f->rt->c, LM_ERR_INVALID, "int: %g does not fit in 64 bits", d);
        }
        break;
    default: break;
    }
    *out = dflt ? jv_retain(*dflt) : jv_int(0);
    return true;
}

static bool f_float(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"default", NULL};
    if (!check(f, 1, names)) return false;
    jv *dflt = arg(f, 0, "default");
    double d;
    if (!jcheck_defined(f->rt, in)) return false; /* float(Undefined) raises */
    if (in.kind == JV_FLOAT) return *out = in, true;
    if (in.kind == JV_INT || in.kind == JV_BOOL)
        return *out = jv_float(in.kind == JV_INT ? (double)in.u.i : in.u.b), true;
    if (in.kind == JV_STR && parse_float_text(jv_str(in), &d)) return *out = jv_float(d), true;
    *out = dflt ? jv_retain(*dflt) : jv_float(0.0);
    return true;
}

static bool f_round(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"precision", "method", NULL};
    if (!check(f, 2, names)) return false;
    int64_t prec;
    if (!arg_int(f, arg(f, 0, "precision"), 0, &prec)) return false;
    jv *method = arg(f, 1, "method");
    const char *m = method && method->kind == JV_STR ? jv_str(*method)->data : "common";
    if (strcmp(m, "common") && strcmp(m, "ceil") && strcmp(m, "floor"))
        return jfail(&f->rt->c, LM_ERR_INVALID, "method must be common, ceil or floor");
    if (!jv_is_num(in))
        return jfail(&f->rt->c, LM_ERR_INVALID, "type %s doesn't define __round__ method",
                     jv_type_name(in));
    if (prec > 300) prec = 300;
    if (prec < -300) prec = -300;
    if (!strcmp(m, "common")) {
        if (in.kind != JV_FLOAT) { /* round(int, n) stays an int */
            int64_t i = in.kind == JV_INT ? in.u.i : in.u.b;
            if (prec >= 0) return *out = jv_int(i), true;
            double scale = pow(10.0, (double)-prec);
            double r = nearbyint((double)i / scale) * scale; /* ties to even, as Python */
            return *out = jv_int((int64_t)r), true;
        }
        double x = in.u.f, r;
        if (!isfinite(x))
            r = x;
        else if (prec >=
                 0) { /* printf rounds the exact binary value, ties to even: Python's round() */
            char tmp[400];
            snprintf(tmp, sizeof tmp, "%.*f", (int)prec, x);
            r = strtod(tmp, NULL);
        } else {
            double scale = pow(10.0, (double)-prec);
            r = nearbyint(x / scale) * scale;
        }
        return *out = jv_float(r), true;
    }
    double x = in.kind == JV_FLOAT ? in.u.f : in.kind == JV_INT ? (double)in.u.i : in.u.b;
    double scale = pow(10.0, (double)prec);
    double r = (m[0] == 'c' ? ceil(x * scale) : floor(x * scale)) / scale;
    *out = jv_float(r);
    return true;
}

static bool f_tojson(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (!check(f, 4, names)) return false;
    jrt *rt = f->rt;
    jjson_opts o;
    jjson_opts_default(&o);
    o.ensure_ascii = arg_bool(arg(f, 0, "ensure_ascii"), false);
    o.sort_keys = arg_bool(arg(f, 3, "sort_keys"), false);
    jv *indent = arg(f, 1, "indent");
    char spaces[256];
    if (indent && indent->kind != JV_NONE) {
        o.indent_set = true;
        o.item_sep = ",";
        if (indent->kind == JV_STR) {
            o.indent = jv_str(*indent)->data;
            o.indent_len = jv_str(*indent)->len;
        } else {
            int64_t n;
            if (!arg_int(f, indent, 0, &n)) return false;
            if (n < 0) n = 0;
            if (n > (int64_t)sizeof spaces)
                return jfail(&rt->c, LM_ERR_INVALID, "tojson indent too large");
            memset(spaces, ' ', (size_t)n);
            o.indent = spaces;
            o.indent_len = (size_t)n;
        }
    }
    jv *seps = arg(f, 2, "separators");
    if (seps && seps->kind != JV_NONE) {
        if (!jv_is_seq(*seps) || jv_list(*seps)->len != 2 ||
            jv_list(*seps)->items[0].kind != JV_STR || jv_list(*seps)->items[1].kind != JV_STR)
            return jfail(&rt->c, LM_ERR_INVALID, "tojson separators must be a pair of strings");
        o.item_sep = jv_str(jv_list(*seps)->items[0])->data;
        o.key_sep = jv_str(jv_list(*seps)->items[1])->data;
    }
    jbuf b = {0};
    bool ok = jv_to_json(&rt->c, &b, in, &o) && jbuf_take_str(&rt->c, &b, out);
    jbuf_free(&b);
    return ok;
}

static bool f_truncate(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"length", "killwords", "end", "leeway", NULL};
    if (!check(f, 4, names)) return false;
    jrt *rt = f->rt;
    int64_t length, leeway;
    if (!arg_int(f, arg(f, 0, "length"), 255, &length) ||
        !arg_int(f, arg(f, 3, "leeway"), 5, &leeway))
        return false;
    bool killwords = arg_bool(arg(f, 1, "killwords"), false);
    jv *endp = arg(f, 2, "end");
    jv s, end;
    if (!to_str(rt, in, &s)) return false;
    if (!(endp ? to_str(rt, *endp, &end) : jv_new_str(&rt->c, "...", 3, &end))) {
        jv_release(&rt->c, s);
        return false;
    }
    jstr *str = jv_str(s);
    bool ok = true;
    if (length < (int64_t)jv_str(end)->ncp)
        ok = jfail(&rt->c, LM_ERR_INVALID, "expected length >= %zu, got %" PRId64, jv_str(end)->ncp,
                   length);
    else if (leeway < 0)
        ok = jfail(&rt->c, LM_ERR_INVALID, "expected leeway >= 0, got %" PRId64, leeway);
    else if ((int64_t)str->ncp <= length + leeway) {
        *out = s;
        jv_release(&rt->c, end);
        return true;
    } else {
        size_t keep = jutf8_offset(str, (size_t)(length - (int64_t)jv_str(end)->ncp));
        if (!killwords) { /* s[:n].rsplit(" ", 1)[0] */
            for (size_t i = keep; i > 0; i--)
                if (str->data[i - 1] == ' ') {
                    keep = i - 1;
                    break;
                }
        }
        jbuf b = {0};
        ok = jbuf_put(&rt->c, &b, str->data, keep) &&
             jbuf_put(&rt->c, &b, jv_str(end)->data, jv_str(end)->len) &&
             jbuf_take_str(&rt->c, &b, out);
        jbuf_free(&b);
    }
    jv_release(&rt->c, s);
    jv_release(&rt->c, end);
    return ok;
}

static bool f_center(jrt *rt, jv in, int64_t width, jv *out) {
    jv s;
    if (!to_str(rt, in, &s)) return false;
    jstr *str = jv_str(s);
    if (width <= (int64_t)str->ncp) {
        *out = s;
        return true;
    }
    if (width > (int64_t)rt->c.max_string) {
        jv_release(&rt->c, s);
        return jfail(&rt->c, LM_ERR_NOMEM, "center width too large");
    }
    size_t marg = (size_t)width - str->ncp;
    size_t left = marg / 2 + (marg & (size_t)width & 1); /* CPython's pad split */
    jbuf b = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < left; i++) ok = jbuf_put(&rt->c, &b, " ", 1);
    ok = ok && jbuf_put(&rt->c, &b, str->data, str->len);
    for (size_t i = left; ok && i < marg; i++) ok = jbuf_put(&rt->c, &b, " ", 1);
    ok = ok && jbuf_take_str(&rt->c, &b, out);
    jbuf_free(&b);
    jv_release(&rt->c, s);
    return ok;
}

bool jmarkup_escape(jrt *rt, jv in, jv *out) {
    if (jv_is_markup(in)) {
        *out = jv_retain(in);
        return true;
    }
    jv s;
    if (!to_str(rt, in, &s)) return false;
    jstr *str = jv_str(s);
    jbuf b = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < str->len; i++) {
        const char *rep = NULL;
        switch (str->data[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        }
        ok = rep ? jbuf_puts(&rt->c, &b, rep) : jbuf_put(&rt->c, &b, str->data + i, 1);
    }
    ok = ok && jbuf_take_str(&rt->c, &b, out);
    if (ok) *out = jv_as_markup(*out);
    jbuf_free(&b);
    jv_release(&rt->c, s);
    return ok;
}

static bool f_wordcount(jrt *rt, jv in, jv *out) {
    jv s;
    if (!to_str(rt, in, &s)) return false;
    jstr *str = jv_str(s);
    int64_t words = 0;
    bool in_word = false;
    size_t i = 0;
    while (i < str->len) {
        uint32_t cp;
        i += jutf8_decode((const unsigned char *)str->data + i, str->len - i, &cp);
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        bool w = cp == '_' || (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
                 (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
        if (w && !in_word) words++;
        in_word = w;
    }
    jv_release(&rt->c, s);
    *out = jv_int(words);
    return true;
}

static bool run_filter(jrt *rt, int id, const char *name, jv in, jargs *a, jv *out) {
    fctx f = {.rt = rt, .a = a, .name = name};
    if (in.kind == JV_STR && !jctx_charge(&rt->c, jv_str(in)->len / 16))
        return false; /* string filters scan */
    static const char *const none[] = {NULL};
    int64_t n;
    jv s;
    bool ok;
    switch ((jfilter_id)id) {
    case JF_SAFE:
        if (!check(&f, 0, none) || !to_str(rt, in, out)) return false;
        *out = jv_as_markup(*out);
        return true;
    case JF_STRING:
        return check(&f, 0, none) && to_str(rt, in, out); /* keeps Markup, as soft_str does */
    case JF_LENGTH:
    case JF_COUNT:
        if (!check(&f, 0, none) || !jlength(rt, in, &n)) return false;
        *out = jv_int(n);
        return true;
    case JF_UPPER:
    case JF_LOWER:
    case JF_CAPITALIZE:
    case JF_TITLE:
        if (!check(&f, 0, none) || !to_str(rt, in, &s)) return false;
        ok = id == JF_TITLE ? jstr_jinja_title(rt, s, out)
                            : jstr_case(rt, s,
                                        id == JF_UPPER   ? JM_UPPER
                                        : id == JF_LOWER ? JM_LOWER
                                                         : JM_CAPITALIZE,
                                        out);
        if (ok && jv_is_markup(in)) *out = jv_as_markup(*out);
        jv_release(&rt->c, s);
        return ok;
    case JF_TRIM: {
        static const char *const names[] = {"chars", NULL};
        if (!check(&f, 1, names) || !to_str(rt, in, &s)) return false;
        jv *chars = arg(&f, 0, "chars");
        ok = jstr_strip(rt, s, chars ? *chars : jv_none(), true, true, out);
        if (ok && jv_is_markup(in)) *out = jv_as_markup(*out);
        jv_release(&rt->c, s);
        return ok;
    }
    case JF_REPLACE: {
        static const char *const names[] = {"old", "new", "count", NULL};
        if (!check(&f, 3, names)) return false;
        jv *old = arg(&f, 0, "old"), *rep = arg(&f, 1, "new");
        if (!old || !rep) return jfail(&rt->c, LM_ERR_INVALID, "replace needs old and new strings");
        if (!arg_int(&f, arg(&f, 2, "count"), -1, &n) || !to_str(rt, in, &s)) return false;
        jv o2, r2;
        ok = to_str(rt, *old, &o2);
        if (ok && !to_str(rt, *rep, &r2)) {
            jv_release(&rt->c, o2);
            ok = false;
        }
        if (ok) {
            ok = jstr_replace(rt, s, o2, r2, n, out);
            jv_release(&rt->c, o2);
            jv_release(&rt->c, r2);
        }
        jv_release(&rt->c, s);
        return ok;
    }
    case JF_DEFAULT: {
        static const char *const names[] = {"default_value", "boolean", NULL};
        if (!check(&f, 2, names)) return false;
        jv *d = arg(&f, 0, "default_value");
        bool boolean = arg_bool(arg(&f, 1, "boolean"), false);
        if (in.kind == JV_UNDEFINED || (boolean && !jv_truthy(in)))
            return d ? (*out = jv_retain(*d), true) : jv_new_str(&rt->c, "", 0, out);
        *out = jv_retain(in);
        return true;
    }
    case JF_ITEMS: return jf_items(&f, in, out);
    case JF_DICTSORT: return jf_dictsort(&f, in, out);
    case JF_SORT: return jf_sort(&f, in, out);
    case JF_LIST: return jf_list(&f, in, out);
    case JF_FIRST: return jf_first_last(&f, in, out, false);
    case JF_LAST: return jf_first_last(&f, in, out, true);
    case JF_REVERSE: return jf_reverse(&f, in, out);
    case JF_JOIN: return jf_join(&f, in, out);
    case JF_TOJSON: return f_tojson(&f, in, out);
    case JF_INT: return f_int(&f, in, out);
    case JF_FLOAT: return f_float(&f, in, out);
    case JF_ROUND: return f_round(&f, in, out);
    case JF_ABS:
        if (!check(&f, 0, none)) return false;
        if (in.kind == JV_FLOAT) return *out = jv_float(fabs(in.u.f)), true;
        if (in.kind == JV_INT || in.kind == JV_BOOL) {
            int64_t i = in.kind == JV_INT ? in.u.i : in.u.b;
            if (i == INT64_MIN) return jfail(&rt->c, LM_ERR_INVALID, "integer overflow in abs");
            return *out = jv_int(i < 0 ? -i : i), true;
        }
        return jfail(&rt->c, LM_ERR_INVALID, "bad operand type for abs(): '%s'", jv_type_name(in));
    case JF_ATTR: {
        static const char *const names[] = {"name", NULL};
        jv *nm = arg(&f, 0, "name");
        if (!check(&f, 1, names)) return false;
        if (!nm || nm->kind != JV_STR)
            return jfail(&rt->c, LM_ERR_INVALID, "attr needs an attribute name");
        return jgetattr_strict(rt, in, jv_str(*nm), out);
    }
    case JF_MAP: return jf_map(&f, in, out);
    case JF_SELECT: return jf_select(&f, in, out, false, true);
    case JF_REJECT: return jf_select(&f, in, out, false, false);
    case JF_SELECTATTR: return jf_select(&f, in, out, true, true);
    case JF_REJECTATTR: return jf_select(&f, in, out, true, false);
    case JF_MAX: return jf_minmax(&f, in, out, true);
    case JF_MIN: return jf_minmax(&f, in, out, false);
    case JF_UNIQUE: return jf_unique(&f, in, out);
    case JF_INDENT: return f_indent(&f, in, out);
    case JF_TRUNCATE: return f_truncate(&f, in, out);
    case JF_BATCH: return jf_batch(&f, in, out);
    case JF_SUM: return jf_sum(&f, in, out);
    case JF_CENTER: {
        static const char *const names[] = {"width", NULL};
        return check(&f, 1, names) && arg_int(&f, arg(&f, 0, "width"), 80, &n) &&
               f_center(rt, in, n, out);
    }
    case JF_ESCAPE: return check(&f, 0, none) && jmarkup_escape(rt, in, out);
    case JF_WORDCOUNT: return check(&f, 0, none) && f_wordcount(rt, in, out);
    case JF_PPRINT: {
        if (!check(&f, 0, none)) return false;
        jbuf b = {0};
        ok = jv_repr(&rt->c, &b, in) && jbuf_take_str(&rt->c, &b, out);
        jbuf_free(&b);
        return ok;
    }
    case JF_FORMAT: {
        if (!to_str(rt, in, &s)) return false;
        jv args;
        if (a->nkw) { /* format(**kwargs): a mapping */
            ok = jv_new_dict(&rt->c, JV_DICT, &args);
            for (size_t i = 0; ok && i < a->nkw; i++)
                ok = jdict_set(&rt->c, jv_dict(args), a->kwnodes[i]->value, jv_retain(a->kw[i]));
        } else {
            ok = jv_new_list(&rt->c, JV_TUPLE, a->npos, &args);
            for (size_t i = 0; ok && i < a->npos; i++) ok = push(rt, args, jv_retain(a->pos[i]));
        }
        ok = ok && jstr_percent(rt, s, args, out);
        if (ok) jv_release(&rt->c, args);
        jv_release(&rt->c, s);
        return ok;
    }
    }
    return jfail(&rt->c, LM_ERR_INVALID, "unknown filter '%s'", name);
}

bool jfilter_apply(jrt *rt, jscope *s, const jnode *fnode, jv input, jv *out) {
    const char *name = jv_str(fnode->value)->data;
    if (fnode->op < 0) return jfail(&rt->c, LM_ERR_INVALID, "unknown filter '%s'", name);
    jargs a;
    if (!jargs_eval(rt, s, fnode, &a)) return false;
    rt->c.line = fnode->line;
    bool ok = run_filter(rt, fnode->op, name, input, &a, out);
    jargs_free(rt, &a);
    return ok;
}

bool jfilter_by_name(jrt *rt, const char *name, jv input, jv *extra, size_t nextra, jv *out) {
    int id = jfilter_lookup(name, strlen(name));
    if (id < 0) return jfail(&rt->c, LM_ERR_INVALID, "unknown filter '%s'", name);
    jargs a = {.pos = extra, .npos = nextra};
    return run_filter(rt, id, name, input, &a, out);
}
