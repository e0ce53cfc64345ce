/* Jinja2's built-in filters (jinja2/filters.py), plus transformers' tojson
 * (json.dumps with ensure_ascii=False by default). */
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

typedef struct {
    jrt *rt;
    jargs *a;
    const char *name;
} fctx;

static jv *arg(fctx *f, size_t i, const char *name) { return jargs_get(f->a, i, name); }

static bool check(fctx *f, size_t max_pos, const char *const *names) {
    char what[64];
    snprintf(what, sizeof what, "filter '%s'", f->name);
    return jargs_check(f->rt, f->a, max_pos, names, what);
}

static bool arg_bool(jv *v, bool dflt) { return v ? jv_truthy(*v) : dflt; }

static bool arg_int(fctx *f, jv *v, int64_t dflt, int64_t *out) {
    *out = dflt;
    if (!v || v->kind == JV_NONE) {
        *out = dflt;
        return true;
    }
    if (v->kind == JV_INT || v->kind == JV_BOOL) {
        *out = v->kind == JV_INT ? v->u.i : v->u.b;
        return true;
    }
    return jfail(&f->rt->c, LM_ERR_INVALID, "filter '%s': expected an integer argument, got %s",
                 f->name, jv_type_name(*v));
}

static bool to_str(jrt *rt, jv v, jv *out) { return jv_to_string(&rt->c, v, out); }

static bool new_list(jrt *rt, jv *out) { return jv_new_list(&rt->c, JV_LIST, 0, out); }

static bool push(jrt *rt, jv list, jv item) { return jlist_push(&rt->c, jv_list(list), item); }

/* Jinja's make_attrgetter: "a.b.0" looks up a, then b, then index 0; with a
 * default, an undefined step is replaced by it.  Looking into an undefined
 * value fails, as in Jinja2. */
static bool attr_path_default(jrt *rt, jv item, jv attribute, const jv *dflt, jv *out) {
    jv cur = jv_retain(item);
    if (attribute.kind != JV_STR) {
        bool ok = jgetitem(rt, cur, attribute, out);
        jv_release(&rt->c, cur);
        if (ok && dflt && dflt->kind != JV_NONE && out->kind == JV_UNDEFINED)
            *out = jv_retain(*dflt);
        return ok;
    }
    jstr *path = jv_str(attribute);
    size_t i = 0;
    for (;;) {
        const char *dot = memchr(path->data + i, '.', path->len - i);
        size_t end = dot ? (size_t)(dot - path->data) : path->len;
        jv key;
        bool digits = end > i;
        for (size_t k = i; k < end; k++)
            if (path->data[k] < '0' || path->data[k] > '9') digits = false;
        if (digits && end - i < 18)
            key = jv_int(strtoll(path->data + i, NULL, 10));
        else if (!jv_new_str(&rt->c, path->data + i, end - i, &key)) {
            jv_release(&rt->c, cur);
            return false;
        }
        jv next;
        bool ok = jgetitem(rt, cur, key, &next);
        jv_release(&rt->c, key);
        jv_release(&rt->c, cur);
        if (!ok) return false;
        if (dflt && dflt->kind != JV_NONE && next.kind == JV_UNDEFINED) next = jv_retain(*dflt);
        cur = next;
        if (!dot) break;
        i = end + 1;
    }
    *out = cur;
    return true;
}

static bool attr_path(jrt *rt, jv item, jv attribute, jv *out) {
    return attr_path_default(rt, item, attribute, NULL, out);
}

/* Lower-cases strings for case-insensitive comparisons (Jinja's ignore_case). */
static bool sort_key(jrt *rt, jv item, jv *attribute, bool case_sensitive, jv *out) {
    jv v;
    if (attribute) {
        if (!attr_path(rt, item, *attribute, &v)) return false;
    } else {
        v = jv_retain(item);
    }
    if (!case_sensitive && v.kind == JV_STR) {
        bool ok = jstr_case(rt, v, JM_LOWER, out);
        jv_release(&rt->c, v);
        return ok;
    }
    *out = v;
    return true;
}

/* Stable merge sort of idx[0..n) by keys. */
static bool merge_sort(jrt *rt, size_t *idx, size_t *tmp, size_t n, const jv *keys, bool reverse) {
    if (n < 2) return true;
    size_t h = n / 2;
    if (!merge_sort(rt, idx, tmp, h, keys, reverse) ||
        !merge_sort(rt, idx + h, tmp, n - h, keys, reverse))
        return false;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c;
        if (!jorder(rt, keys[idx[j]], keys[idx[i]], &c)) return false;
        if (reverse) c = -c;
        /* take from the right only when strictly smaller: keeps equal items in order */
        tmp[k++] = c < 0 ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(size_t));
    return jctx_charge(&rt->c, n);
}

/* Sorts items (a list) into a new list, by keys computed per item. */
static bool sorted_list(jrt *rt, jv items, jv *attribute, bool case_sensitive, bool reverse,
                        jv *out) {
    jlist *l = jv_list(items);
    size_t n = l->len;
    jv *keys = calloc(n ? n : 1, sizeof(jv));
    size_t *idx = malloc((n ? n : 1) * sizeof(size_t)), *tmp = malloc((n ? n : 1) * sizeof(size_t));
    bool ok = keys && idx && tmp;
    if (!ok) jfail(&rt->c, LM_ERR_NOMEM, "out of memory");
    size_t made = 0;
    for (; ok && made < n; made++) {
        ok = sort_key(rt, l->items[made], attribute, case_sensitive, &keys[made]);
        if (!ok) break;
        idx[made] = made;
    }
    ok = ok && merge_sort(rt, idx, tmp, n, keys, reverse) && jv_new_list(&rt->c, JV_LIST, n, out);
    for (size_t i = 0; ok && i < n; i++) ok = push(rt, *out, jv_retain(l->items[idx[i]]));
    for (size_t i = 0; i < made; i++) jv_release(&rt->c, keys[i]);
    free(keys);
    free(idx);
    free(tmp);
    return ok;
}

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

static bool f_join(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"d", "attribute", NULL};
    if (!check(f, 2, names)) return false;
    jrt *rt = f->rt;
    jv items, sep = jv_none();
    if (!jiterate(rt, in, &items)) return false;
    jv *d = arg(f, 0, "d"), *attribute = arg(f, 1, "attribute");
    bool ok = d ? to_str(rt, *d, &sep) : jv_new_str(&rt->c, "", 0, &sep);
    jbuf b = {0};
    jlist *l = jv_list(items);
    for (size_t i = 0; ok && i < l->len; i++) {
        if (i) ok = jbuf_put(&rt->c, &b, jv_str(sep)->data, jv_str(sep)->len);
        jv item = l->items[i], looked;
        if (ok && attribute && attribute->kind != JV_NONE) {
            ok = attr_path(rt, item, *attribute, &looked);
            if (ok) {
                ok = jv_print(&rt->c, &b, looked);
                jv_release(&rt->c, looked);
            }
        } else if (ok) {
            ok = jv_print(&rt->c, &b, item);
        }
    }
    ok = ok && jctx_charge(&rt->c, l->len) && jbuf_take_str(&rt->c, &b, out);
    jbuf_free(&b);
    jv_release(&rt->c, sep);
    jv_release(&rt->c, items);
    return ok;
}

/* select / reject / selectattr / rejectattr. */
static bool f_select(fctx *f, jv in, jv *out, bool by_attr, bool keep_when) {
    jrt *rt = f->rt;
    jargs *a = f->a;
    if (a->nkw)
        return jfail(&rt->c, LM_ERR_INVALID, "filter '%s' takes no keyword arguments", f->name);
    size_t first_test = by_attr ? 1 : 0;
    if (by_attr && a->npos < 1)
        return jfail(&rt->c, LM_ERR_INVALID, "filter '%s' needs an attribute name", f->name);
    const char *test = NULL;
    if (a->npos > first_test) {
        if (a->pos[first_test].kind != JV_STR)
            return jfail(&rt->c, LM_ERR_INVALID, "filter '%s': test name must be a string",
                         f->name);
        test = jv_str(a->pos[first_test])->data;
    }
    jv items;
    *out = jv_none();
    if (!jiterate(rt, in, &items)) return false;
    bool ok = new_list(rt, out);
    jlist *l = jv_list(items);
    for (size_t i = 0; ok && i < l->len; i++) {
        jv subject;
        if (by_attr)
            ok = attr_path(rt, l->items[i], a->pos[0], &subject);
        else
            subject = jv_retain(l->items[i]);
        if (!ok) break;
        bool r;
        if (test)
            ok = jtest_by_name(rt, test, subject, a->pos + first_test + 1, a->npos - first_test - 1,
                               &r);
        else
            r = jv_truthy(subject);
        jv_release(&rt->c, subject);
        if (ok && r == keep_when) ok = push(rt, *out, jv_retain(l->items[i]));
    }
    size_t count = l->len;
    if (!ok && out->kind == JV_LIST) jv_release(&rt->c, *out);
    jv_release(&rt->c, items);
    return ok && jctx_charge(&rt->c, count);
}

static bool f_map(fctx *f, jv in, jv *out) {
    jrt *rt = f->rt;
    jargs *a = f->a;
    jv *attribute = jargs_get(a, SIZE_MAX, "attribute");
    if (!attribute && (a->npos == 0 || a->pos[0].kind != JV_STR))
        return jfail(&rt->c, LM_ERR_INVALID, "map requires a filter name or attribute=");
    jv items;
    *out = jv_none();
    if (!jiterate(rt, in, &items)) return false;
    bool ok = new_list(rt, out);
    jlist *l = jv_list(items);
    for (size_t i = 0; ok && i < l->len; i++) {
        jv v;
        if (attribute) {
            ok = attr_path_default(rt, l->items[i], *attribute, jargs_get(a, SIZE_MAX, "default"),
                                   &v);
        } else {
            ok = jfilter_by_name(rt, jv_str(a->pos[0])->data, l->items[i], a->pos + 1, a->npos - 1,
                                 &v);
        }
        if (ok) ok = push(rt, *out, v);
    }
    if (!ok && out->kind == JV_LIST) jv_release(&rt->c, *out);
    jv_release(&rt->c, items);
    return ok;
}

static bool f_minmax(fctx *f, jv in, jv *out, bool want_max) {
    static const char *const names[] = {"case_sensitive", "attribute", NULL};
    if (!check(f, 2, names)) return false;
    jrt *rt = f->rt;
    bool cs = arg_bool(arg(f, 0, "case_sensitive"), false);
    jv *attribute = arg(f, 1, "attribute");
    jv items;
    if (!jiterate(rt, in, &items)) return false;
    jlist *l = jv_list(items);
    bool ok = true;
    size_t best = 0;
    jv best_key = jv_none();
    for (size_t i = 0; ok && i < l->len; i++) {
        jv key;
        ok = sort_key(rt, l->items[i], attribute, cs, &key);
        if (!ok) break;
        int c = 0;
        if (i) ok = jorder(rt, key, best_key, &c);
        if (ok && (i == 0 || (want_max ? c > 0 : c < 0))) {
            jv_release(&rt->c, best_key);
            best_key = key;
            best = i;
        } else {
            jv_release(&rt->c, key);
        }
    }
    jv_release(&rt->c, best_key);
    if (ok) *out = l->len ? jv_retain(l->items[best]) : jv_undef(NULL);
    jv_release(&rt->c, items);
    return ok;
}

static bool f_unique(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"case_sensitive", "attribute", NULL};
    if (!check(f, 2, names)) return false;
    jrt *rt = f->rt;
    bool cs = arg_bool(arg(f, 0, "case_sensitive"), false);
    jv *attribute = arg(f, 1, "attribute");
    jv items, seen;
    if (!jiterate(rt, in, &items)) return false;
    bool ok = new_list(rt, out) && jv_new_dict(&rt->c, JV_DICT, &seen);
    jlist *l = jv_list(items);
    for (size_t i = 0; ok && i < l->len; i++) {
        jv key;
        if (!(ok = sort_key(rt, l->items[i], attribute, cs, &key))) break;
        if (!jv_hashable(key)) {
            jv_release(&rt->c, key);
            ok = jfail(&rt->c, LM_ERR_INVALID, "unhashable type in unique");
            break;
        }
        if (jdict_get(jv_dict(seen), key)) {
            jv_release(&rt->c, key);
            continue;
        }
        ok = jdict_set(&rt->c, jv_dict(seen), key, jv_none()) &&
             push(rt, *out, jv_retain(l->items[i]));
    }
    if (ok) jv_release(&rt->c, seen);
    jv_release(&rt->c, items);
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

static bool f_reverse(jrt *rt, jv in, jv *out) {
    if (in.kind == JV_STR) {
        jstr *s = jv_str(in), *r;
        if (!jstr_alloc(&rt->c, s->len, &r)) return false;
        size_t i = 0;
        while (i < s->len) {
            uint32_t cp;
            size_t k = jutf8_decode((const unsigned char *)s->data + i, s->len - i, &cp);
            memcpy(r->data + s->len - i - k, s->data + i, k);
            i += k;
        }
        r->ncp = s->ncp;
        *out = jv_obj(JV_STR, r);
        return true;
    }
    jv items;
    if (!jiterate(rt, in, &items)) return false;
    jlist *l = jv_list(items);
    bool ok = jv_new_list(&rt->c, JV_LIST, l->len, out);
    for (size_t i = l->len; ok && i-- > 0;) ok = push(rt, *out, jv_retain(l->items[i]));
    jv_release(&rt->c, items);
    return ok;
}

static bool f_first_last(jrt *rt, jv in, jv *out, bool last) {
    if (in.kind == JV_STR) {
        jstr *s = jv_str(in);
        if (!s->ncp) return *out = jv_undef(NULL), true;
        size_t start = last ? jutf8_offset(s, s->ncp - 1) : 0;
        uint32_t cp;
        size_t k = jutf8_decode((const unsigned char *)s->data + start, s->len - start, &cp);
        return jv_new_str(&rt->c, s->data + start, k, out);
    }
    if (in.kind == JV_DICT) {
        jdict *d = jv_dict(in);
        *out = d->len ? jv_retain(d->keys[last ? d->len - 1 : 0]) : jv_undef(NULL);
        return true;
    }
    jv items;
    if (!jiterate(rt, in, &items)) return false;
    jlist *l = jv_list(items);
    *out = l->len ? jv_retain(l->items[last ? l->len - 1 : 0]) : jv_undef(NULL);
    jv_release(&rt->c, items);
    return true;
}

static bool f_batch(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"linecount", "fill_with", NULL};
    if (!check(f, 2, names)) return false;
    jrt *rt = f->rt;
    int64_t count;
    if (!arg_int(f, arg(f, 0, "linecount"), 0, &count)) return false;
    if (count <= 0) return jfail(&rt->c, LM_ERR_INVALID, "batch size must be positive");
    jv *fill = arg(f, 1, "fill_with");
    jv items, row = jv_none();
    if (!jiterate(rt, in, &items)) return false;
    jlist *l = jv_list(items);
    bool ok = new_list(rt, out);
    for (size_t i = 0; ok && i < l->len; i++) {
        if (row.kind == JV_NONE) ok = new_list(rt, &row);
        ok = ok && push(rt, row, jv_retain(l->items[i]));
        if (ok && (int64_t)jv_list(row)->len == count) {
            ok = push(rt, *out, row);
            row = jv_none();
        }
    }
    if (ok && row.kind == JV_LIST) {
        while (ok && fill && fill->kind != JV_NONE && (int64_t)jv_list(row)->len < count)
            ok = push(rt, row, jv_retain(*fill));
        ok = ok && push(rt, *out, row);
    }
    jv_release(&rt->c, items);
    return ok;
}

static bool f_sum(fctx *f, jv in, jv *out) {
    static const char *const names[] = {"attribute", "start", NULL};
    if (!check(f, 2, names)) return false;
    jrt *rt = f->rt;
    jv *attribute = arg(f, 0, "attribute"), *start = arg(f, 1, "start");
    jv items;
    if (!jiterate(rt, in, &items)) return false;
    jv total = start ? jv_retain(*start) : jv_int(0);
    jlist *l = jv_list(items);
    bool ok = true;
    for (size_t i = 0; ok && i < l->len; i++) {
        jv v, next;
        if (attribute && attribute->kind != JV_NONE)
            ok = attr_path(rt, l->items[i], *attribute, &v);
        else
            v = jv_retain(l->items[i]);
        ok = ok && jbinop(rt, JOP_ADD, total, v, &next);
        if (ok) jv_release(&rt->c, v);
        jv_release(&rt->c, total);
        total = ok ? next : jv_none();
    }
    jv_release(&rt->c, items);
    if (ok) *out = total;
    return ok;
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
    case JF_ITEMS: {
        if (!check(&f, 0, none)) return false;
        if (in.kind == JV_UNDEFINED) return new_list(rt, out);
        if (in.kind != JV_DICT)
            return jfail(&rt->c, LM_ERR_INVALID, "Can only get item pairs from a mapping.");
        jdict *d = jv_dict(in);
        if (!jv_new_list(&rt->c, JV_LIST, d->len, out)) return false;
        for (size_t i = 0; i < d->len; i++) {
            jv pair;
            if (!jv_new_list(&rt->c, JV_TUPLE, 2, &pair) ||
                !push(rt, pair, jv_retain(d->keys[i])) || !push(rt, pair, jv_retain(d->vals[i])) ||
                !push(rt, *out, pair)) {
                jv_release(&rt->c, *out);
                return false;
            }
        }
        return true;
    }
    case JF_DICTSORT: {
        static const char *const names[] = {"case_sensitive", "by", "reverse", NULL};
        if (!check(&f, 3, names)) return false;
        if (in.kind != JV_DICT) return jfail(&rt->c, LM_ERR_INVALID, "dictsort needs a mapping");
        jv *by = arg(&f, 1, "by");
        bool by_value = by && by->kind == JV_STR && !strcmp(jv_str(*by)->data, "value");
        if (by && !(by->kind == JV_STR && (by_value || !strcmp(jv_str(*by)->data, "key"))))
            return jfail(&rt->c, LM_ERR_INVALID,
                         "You can only sort by either \"key\" or \"value\"");
        jargs none_args = {0};
        jv pairs;
        if (!run_filter(rt, JF_ITEMS, "items", in, &none_args, &pairs)) return false;
        /* sort key: the pair's key or value */
        jlist *l = jv_list(pairs);
        jv keyed;
        ok = jv_new_list(&rt->c, JV_LIST, l->len, &keyed);
        for (size_t i = 0; ok && i < l->len; i++)
            ok = push(rt, keyed, jv_retain(jv_list(l->items[i])->items[by_value ? 1 : 0]));
        if (ok) {
            /* sort indices by the chosen element, then gather the pairs */
            size_t cnt = l->len;
            jv *keys = calloc(cnt ? cnt : 1, sizeof(jv));
            size_t *idx = malloc((cnt ? cnt : 1) * sizeof(size_t)),
                   *tmp = malloc((cnt ? cnt : 1) * sizeof(size_t));
            ok = keys && idx && tmp;
            size_t made = 0;
            bool cs = arg_bool(arg(&f, 0, "case_sensitive"), false);
            for (; ok && made < cnt; made++) {
                ok = sort_key(rt, jv_list(keyed)->items[made], NULL, cs, &keys[made]);
                if (!ok) break;
                idx[made] = made;
            }
            ok = ok && merge_sort(rt, idx, tmp, cnt, keys, arg_bool(arg(&f, 2, "reverse"), false));
            ok = ok && jv_new_list(&rt->c, JV_LIST, cnt, out);
            for (size_t i = 0; ok && i < cnt; i++) ok = push(rt, *out, jv_retain(l->items[idx[i]]));
            for (size_t i = 0; i < made; i++) jv_release(&rt->c, keys[i]);
            free(keys);
            free(idx);
            free(tmp);
        }
        jv_release(&rt->c, keyed);
        jv_release(&rt->c, pairs);
        return ok;
    }
    case JF_SORT: {
        static const char *const names[] = {"reverse", "case_sensitive", "attribute", NULL};
        if (!check(&f, 3, names)) return false;
        jv items;
        if (!jiterate(rt, in, &items)) return false;
        ok = sorted_list(rt, items, arg(&f, 2, "attribute"),
                         arg_bool(arg(&f, 1, "case_sensitive"), false),
                         arg_bool(arg(&f, 0, "reverse"), false), out);
        jv_release(&rt->c, items);
        return ok;
    }
    case JF_LIST: {
        if (!check(&f, 0, none)) return false;
        jv items;
        if (!jiterate(rt, in, &items)) return false;
        jlist *l = jv_list(items);
        ok = jv_new_list(&rt->c, JV_LIST, l->len, out);
        for (size_t i = 0; ok && i < l->len; i++) ok = push(rt, *out, jv_retain(l->items[i]));
        jv_release(&rt->c, items);
        return ok;
    }
    case JF_FIRST: return check(&f, 0, none) && f_first_last(rt, in, out, false);
    case JF_LAST: return check(&f, 0, none) && f_first_last(rt, in, out, true);
    case JF_REVERSE: return check(&f, 0, none) && f_reverse(rt, in, out);
    case JF_JOIN: return f_join(&f, in, out);
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
    case JF_MAP: return f_map(&f, in, out);
    case JF_SELECT: return f_select(&f, in, out, false, true);
    case JF_REJECT: return f_select(&f, in, out, false, false);
    case JF_SELECTATTR: return f_select(&f, in, out, true, true);
    case JF_REJECTATTR: return f_select(&f, in, out, true, false);
    case JF_MAX: return f_minmax(&f, in, out, true);
    case JF_MIN: return f_minmax(&f, in, out, false);
    case JF_UNIQUE: return f_unique(&f, in, out);
    case JF_INDENT: return f_indent(&f, in, out);
    case JF_TRUNCATE: return f_truncate(&f, in, out);
    case JF_BATCH: return f_batch(&f, in, out);
    case JF_SUM: return f_sum(&f, in, out);
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
