/* Operators with Python's semantics: arithmetic (int overflow is an error,
 * / is true division, // and % floor), comparisons, `in`, len() and
 * iteration, as Jinja2 inherits them from Python. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_builtins.h"
#include "text/jinja_eval.h"
#include "text/jinja_lexer.h"

bool jcheck_defined(jrt *rt, jv v) {
    if (v.kind != JV_UNDEFINED) return true;
    char msg[300];
    jv_undefined_message(v, msg, sizeof msg);
    return jfail(&rt->c, LM_ERR_INVALID, "%s", msg);
}

static int64_t as_int(jv v) { return v.kind == JV_INT ? v.u.i : (int64_t)v.u.b; }
static double as_double(jv v) { return v.kind == JV_FLOAT ? v.u.f : (double)as_int(v); }

static const char *op_symbol(int op) {
    switch (op) {
    case JOP_ADD: return "+";
    case JOP_SUB: return "-";
    case JOP_MUL: return "*";
    case JOP_DIV: return "/";
    case JOP_FLOORDIV: return "//";
    case JOP_MOD: return "%";
    case JOP_POW: return "** or pow()";
    case JOP_LT: return "<";
    case JOP_LTEQ: return "<=";
    case JOP_GT: return ">";
    case JOP_GTEQ: return ">=";
    }
    return "?";
}

static bool type_error(jrt *rt, int op, jv a, jv b) {
    return jfail(&rt->c, LM_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'",
                 op_symbol(op), jv_type_name(a), jv_type_name(b));
}

/* Python's float divmod (Objects/floatobject.c). */
static void float_divmod(double vx, double wx, double *floordiv, double *mod_out) {
    double mod = fmod(vx, wx);
    double div = (vx - mod) / wx;
    if (mod != 0.0) {
        if ((wx < 0) != (mod < 0)) {
            mod += wx;
            div -= 1.0;
        }
    } else {
        mod = copysign(0.0, wx);
    }
    double fd;
    if (div != 0.0) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
    } else {
        fd = copysign(0.0, vx / wx);
    }
    *floordiv = fd;
    *mod_out = mod;
}

static bool repeat(jrt *rt, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.kind == JV_STR) {
        jstr *s = jv_str(seq);
        if (s->len && (uint64_t)times > rt->c.max_string / s->len)
            return jfail(&rt->c, LM_ERR_NOMEM, "string repetition exceeds the limit of %zu bytes",
                         rt->c.max_string);
        jstr *r;
        if (!jstr_alloc(&rt->c, s->len * (size_t)times, &r)) return false;
        for (int64_t i = 0; i < times; i++) memcpy(r->data + (size_t)i * s->len, s->data, s->len);
        r->ncp = s->ncp * (size_t)times;
        *out = jv_obj(JV_STR, r);
        return true;
    }
    jlist *l = jv_list(seq);
    if (l->len && (uint64_t)times > rt->c.max_items / l->len)
        return jfail(&rt->c, LM_ERR_NOMEM, "list repetition exceeds the limit of %zu items",
                     rt->c.max_items);
    if (!jv_new_list(&rt->c, (jv_kind)seq.kind, l->len * (size_t)times, out)) return false;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < l->len; k++)
            if (!jlist_push(&rt->c, jv_list(*out), jv_retain(l->items[k]))) {
                jv_release(&rt->c, *out);
                return false;
            }
    return true;
}

static bool concat_seq(jrt *rt, jv a, jv b, jv *out) {
    if (a.kind == JV_STR) {
        jstr *x = jv_str(a), *y = jv_str(b), *r;
        if (x->len > rt->c.max_string || y->len > rt->c.max_string - x->len)
            return jfail(&rt->c, LM_ERR_NOMEM, "string longer than the limit of %zu bytes",
                         rt->c.max_string);
        if (!jstr_alloc(&rt->c, x->len + y->len, &r)) return false;
        memcpy(r->data, x->data, x->len);
        memcpy(r->data + x->len, y->data, y->len);
        r->ncp = x->ncp + y->ncp;
        *out = jv_obj(JV_STR, r);
        return true;
    }
    jlist *x = jv_list(a), *y = jv_list(b);
    if (!jv_new_list(&rt->c, (jv_kind)a.kind, x->len + y->len, out)) return false;
    for (size_t i = 0; i < x->len + y->len; i++) {
        jv item = i < x->len ? x->items[i] : y->items[i - x->len];
        if (!jlist_push(&rt->c, jv_list(*out), jv_retain(item))) {
            jv_release(&rt->c, *out);
            return false;
        }
    }
    return true;
}

static bool int_pow(jrt *rt, int64_t base, int64_t exp, jv *out) {
    int64_t result = 1;
    while (exp > 0) {
        if (exp & 1) {
            if (__builtin_mul_overflow(result, base, &result)) goto overflow;
        }
        exp >>= 1;
        if (exp && __builtin_mul_overflow(base, base, &base)) goto overflow;
    }
    *out = jv_int(result);
    return true;
overflow:
    return jfail(&rt->c, LM_ERR_INVALID, "integer overflow in **");
}

bool jbinop(jrt *rt, int op, jv a, jv b, jv *out) {
    if (op == JOP_MOD && a.kind == JV_STR)
        return jstr_percent(rt, a, b, out); /* str.__mod__ takes Undefined too */
    if (!jcheck_defined(rt, a) || !jcheck_defined(rt, b)) return false;
    bool nums = jv_is_num(a) && jv_is_num(b);
    bool any_float = a.kind == JV_FLOAT || b.kind == JV_FLOAT;
    switch (op) {
    case JOP_ADD:
        if (nums) {
            if (any_float) {
                *out = jv_float(as_double(a) + as_double(b));
                return true;
            }
            int64_t r;
            if (__builtin_add_overflow(as_int(a), as_int(b), &r))
                return jfail(&rt->c, LM_ERR_INVALID, "integer overflow in +");
            *out = jv_int(r);
            return true;
        }
        if (a.kind == JV_STR && b.kind == JV_STR && (jv_is_markup(a) || jv_is_markup(b))) {
            /* Markup + str (either side) escapes the plain string */
            jv ea, eb;
            if (!jmarkup_escape(rt, a, &ea)) return false;
            if (!jmarkup_escape(rt, b, &eb)) {
                jv_release(&rt->c, ea);
                return false;
            }
            bool ok = concat_seq(rt, ea, eb, out);
            jv_release(&rt->c, ea);
            jv_release(&rt->c, eb);
            if (ok) *out = jv_as_markup(*out);
            return ok;
        }
        if (a.kind == b.kind && (a.kind == JV_STR || a.kind == JV_LIST || a.kind == JV_TUPLE))
            return concat_seq(rt, a, b, out);
        if (a.kind == JV_STR || a.kind == JV_LIST || a.kind == JV_TUPLE)
            return jfail(&rt->c, LM_ERR_INVALID, "can only concatenate %s (not \"%s\") to %s",
                         jv_type_name(a), jv_type_name(b), jv_type_name(a));
        return type_error(rt, op, a, b);
    case JOP_SUB:
        if (!nums) return type_error(rt, op, a, b);
        if (any_float) {
            *out = jv_float(as_double(a) - as_double(b));
            return true;
        } else {
            int64_t r;
            if (__builtin_sub_overflow(as_int(a), as_int(b), &r))
                return jfail(&rt->c, LM_ERR_INVALID, "integer overflow in -");
            *out = jv_int(r);
            return true;
        }
    case JOP_MUL:
        if (nums) {
            if (any_float) {
                *out = jv_float(as_double(a) * as_double(b));
                return true;
            }
            int64_t r;
            if (__builtin_mul_overflow(as_int(a), as_int(b), &r))
                return jfail(&rt->c, LM_ERR_INVALID, "integer overflow in *");
            *out = jv_int(r);
            return true;
        }
        if ((a.kind == JV_STR || jv_is_seq(a)) && (b.kind == JV_INT || b.kind == JV_BOOL)) {
            if (!repeat(rt, a, as_int(b), out)) return false;
            if (jv_is_markup(a)) *out = jv_as_markup(*out);
            return true;
        }
        if ((b.kind == JV_STR || jv_is_seq(b)) && (a.kind == JV_INT || a.kind == JV_BOOL)) {
            if (!repeat(rt, b, as_int(a), out)) return false;
            if (jv_is_markup(b)) *out = jv_as_markup(*out);
            return true;
        }
        return type_error(rt, op, a, b);
    case JOP_DIV:
        if (!nums) return type_error(rt, op, a, b);
        if (as_double(b) == 0.0) return jfail(&rt->c, LM_ERR_INVALID, "division by zero");
        *out = jv_float(as_double(a) / as_double(b));
        return true;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (!nums) return type_error(rt, op, a, b);
        if (any_float) {
            double y = as_double(b);
            if (y == 0.0)
                return jfail(&rt->c, LM_ERR_INVALID,
                             op == JOP_MOD ? "float modulo" : "float floor division by zero");
            double fd, md;
            float_divmod(as_double(a), y, &fd, &md);
            *out = jv_float(op == JOP_MOD ? md : fd);
            return true;
        } else {
            int64_t x = as_int(a), y = as_int(b);
            if (y == 0) return jfail(&rt->c, LM_ERR_INVALID, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == JOP_MOD) return *out = jv_int(0), true;
                return jfail(&rt->c, LM_ERR_INVALID, "integer overflow in //");
            }
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) {
                q--;
                r += y;
            }
            *out = jv_int(op == JOP_MOD ? r : q);
            return true;
        }
    case JOP_POW:
        if (!nums) return type_error(rt, op, a, b);
        if (!any_float && as_int(b) >= 0) return int_pow(rt, as_int(a), as_int(b), out);
        if (as_double(a) == 0.0 && as_double(b) < 0)
            return jfail(&rt->c, LM_ERR_INVALID, "0.0 cannot be raised to a negative power");
        if (as_double(a) < 0 && as_double(b) != floor(as_double(b)))
            return jfail(&rt->c, LM_ERR_INVALID,
                         "a negative number to a fractional power is complex: not supported");
        *out = jv_float(pow(as_double(a), as_double(b)));
        return true;
    }
    return jfail(&rt->c, LM_ERR_INTERNAL, "unknown operator");
}

/* Three-way comparison for <, <=, >, >=, sort, min and max. */
static bool order_depth(jrt *rt, jv a, jv b, int *r, int depth, int op) {
    if (!jcheck_defined(rt, a) || !jcheck_defined(rt, b)) return false;
    if (depth > 100) return jfail(&rt->c, LM_ERR_INVALID, "values nested too deeply to compare");
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = as_int(a), y = as_int(b);
            *r = x < y ? -1 : x > y;
        } else {
            double x = as_double(a), y = as_double(b);
            *r = x < y   ? -1
                 : x > y ? 1
                         : 0; /* NaN compares as equal here; Python's answers are all False */
        }
        return true;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        jstr *x = jv_str(a), *y = jv_str(b);
        size_t n = x->len < y->len ? x->len : y->len;
        int c = memcmp(x->data, y->data, n);
        *r = c ? (c < 0 ? -1 : 1) : (x->len < y->len ? -1 : x->len > y->len);
        return true;
    }
    if (a.kind == b.kind && jv_is_seq(a)) {
        jlist *x = jv_list(a), *y = jv_list(b);
        for (size_t i = 0; i < x->len && i < y->len; i++) {
            if (jv_equal(x->items[i], y->items[i])) continue;
            return order_depth(rt, x->items[i], y->items[i], r, depth + 1, op);
        }
        *r = x->len < y->len ? -1 : x->len > y->len;
        return true;
    }
    return jfail(&rt->c, LM_ERR_INVALID, "'%s' not supported between instances of '%s' and '%s'",
                 op_symbol(op), jv_type_name(a), jv_type_name(b));
}

bool jorder(jrt *rt, jv a, jv b, int *result) { return order_depth(rt, a, b, result, 0, JOP_LT); }

static bool contains(jrt *rt, jv item, jv container, bool *result) {
    switch ((jv_kind)container.kind) {
    case JV_UNDEFINED: *result = false; return true;
    case JV_STR: {
        if (item.kind != JV_STR)
            return jfail(&rt->c, LM_ERR_INVALID,
                         "'in <string>' requires string as left operand, not %s",
                         jv_type_name(item));
        jstr *h = jv_str(container), *n = jv_str(item);
        if (!jctx_charge(&rt->c, 1 + h->len / 256)) return false;
        *result =
            n->len == 0 || (n->len <= h->len && memmem(h->data, h->len, n->data, n->len) != NULL);
        return true;
    }
    case JV_LIST:
    case JV_TUPLE: {
        jlist *l = jv_list(container);
        if (!jctx_charge(&rt->c, l->len)) return false;
        *result = false;
        for (size_t i = 0; i < l->len && !*result; i++) *result = jv_equal(l->items[i], item);
        return true;
    }
    case JV_DICT:
        if (!jv_hashable(item))
            return jfail(&rt->c, LM_ERR_INVALID, "unhashable type: '%s'", jv_type_name(item));
        *result = jdict_get(jv_dict(container), item) != NULL;
        return true;
    default:
        return jfail(&rt->c, LM_ERR_INVALID, "argument of type '%s' is not iterable",
                     jv_type_name(container));
    }
}

bool jcompare(jrt *rt, int op, jv a, jv b, bool *result) {
    int r;
    if (a.kind == JV_STR && b.kind == JV_STR && !jctx_charge(&rt->c, jv_str(a)->len / 256))
        return false;
    switch (op) {
    case JOP_EQ: *result = jv_equal(a, b); return true;
    case JOP_NE: *result = !jv_equal(a, b); return true;
    case JCMP_IN: return contains(rt, a, b, result);
    case JCMP_NOTIN:
        if (!contains(rt, a, b, result)) return false;
        *result = !*result;
        return true;
    }
    if (!order_depth(rt, a, b, &r, 0, op)) return false;
    if ((a.kind == JV_FLOAT && isnan(a.u.f)) || (b.kind == JV_FLOAT && isnan(b.u.f))) {
        *result = false;
        return true;
    }
    switch (op) {
    case JOP_LT: *result = r < 0; break;
    case JOP_LTEQ: *result = r <= 0; break;
    case JOP_GT: *result = r > 0; break;
    case JOP_GTEQ: *result = r >= 0; break;
    default: return jfail(&rt->c, LM_ERR_INTERNAL, "unknown comparison");
    }
    return true;
}

bool jlength(jrt *rt, jv v, int64_t *out) {
    switch ((jv_kind)v.kind) {
    case JV_UNDEFINED: *out = 0; return true;
    case JV_STR: *out = (int64_t)jv_str(v)->ncp; return true;
    case JV_LIST:
    case JV_TUPLE: *out = (int64_t)jv_list(v)->len; return true;
    case JV_DICT: *out = (int64_t)jv_dict(v)->len; return true;
    case JV_LOOP: *out = (int64_t)jv_list(((jloop *)v.u.o)->items)->len; return true;
    default:
        return jfail(&rt->c, LM_ERR_INVALID, "object of type '%s' has no len()", jv_type_name(v));
    }
}

bool jiterate(jrt *rt, jv v, jv *out) {
    switch ((jv_kind)v.kind) {
    case JV_UNDEFINED: return jv_new_list(&rt->c, JV_LIST, 0, out);
    case JV_LIST:
    case JV_TUPLE: *out = jv_retain(v); return true;
    case JV_DICT: {
        jdict *d = jv_dict(v);
        if (!jv_new_list(&rt->c, JV_LIST, d->len, out)) return false;
        for (size_t i = 0; i < d->len; i++)
            if (!jlist_push(&rt->c, jv_list(*out), jv_retain(d->keys[i]))) {
                jv_release(&rt->c, *out);
                return false;
            }
        return true;
    }
    case JV_STR: {
        jstr *s = jv_str(v);
        if (!jv_new_list(&rt->c, JV_LIST, s->ncp, out)) return false;
        size_t i = 0;
        while (i < s->len) {
            uint32_t cp;
            size_t k = jutf8_decode((const unsigned char *)s->data + i, s->len - i, &cp);
            jv ch;
            if (!jv_new_str(&rt->c, s->data + i, k, &ch) ||
                !jlist_push(&rt->c, jv_list(*out), ch)) {
                jv_release(&rt->c, *out);
                return false;
            }
            i += k;
        }
        return true;
    }
    case JV_LOOP: *out = jv_retain(((jloop *)v.u.o)->items); return true;
    default: return jfail(&rt->c, LM_ERR_INVALID, "'%s' object is not iterable", jv_type_name(v));
    }
}
