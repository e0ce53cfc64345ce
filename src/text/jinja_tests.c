/* Jinja2's tests (`x is defined`, `x is string`, `x is divisibleby 3`...). */
#include <math.h>
#include <string.h>
#include <utf8proc.h>

#include "text/jinja_builtins.h"
#include "text/jinja_eval.h"
#include "text/jinja_lexer.h"

/* Python's str.islower() / isupper(): some cased character, none of the other case. */
static bool case_test(jrt *rt, jv v, bool want_lower, bool *result) {
    jv s;
    if (!jv_to_string(&rt->c, v, &s)) return false;
    jstr *str = jv_str(s);
    bool any = false, ok = true;
    size_t i = 0;
    while (i < str->len) {
        uint32_t cp;
        i += jutf8_decode((const unsigned char *)str->data + i, str->len - i, &cp);
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        if (c == UTF8PROC_CATEGORY_LL) {
            any = true;
            if (!want_lower) ok = false;
        } else if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) {
            any = true;
            if (want_lower) ok = false;
        }
    }
    jv_release(&rt->c, s);
    *result = any && ok;
    return true;
}

static bool need_arg(jrt *rt, size_t nargs, const char *name) {
    if (nargs >= 1) return true;
    return jfail(&rt->c, LM_ERR_INVALID, "test '%s' needs an argument", name);
}

static int test_arity(int id) {
    switch ((jtest_id)id) {
    case JTS_DIVISIBLEBY:
    case JTS_EQ:
    case JTS_NE:
    case JTS_LT:
    case JTS_LE:
    case JTS_GT:
    case JTS_GE:
    case JTS_IN:
    case JTS_SAMEAS: return 1;
    default: return 0;
    }
}

static bool run_test(jrt *rt, int id, const char *name, jv v, jv *args, size_t nargs, bool *r) {
    if (nargs > (size_t)test_arity(id))
        return jfail(&rt->c, LM_ERR_INVALID, "test '%s' takes %d argument(s), %zu given", name,
                     test_arity(id), nargs);
    switch ((jtest_id)id) {
    case JTS_DEFINED: *r = v.kind != JV_UNDEFINED; return true;
    case JTS_UNDEFINED: *r = v.kind == JV_UNDEFINED; return true;
    case JTS_NONE: *r = v.kind == JV_NONE; return true;
    case JTS_BOOLEAN: *r = v.kind == JV_BOOL; return true;
    case JTS_FALSE: *r = v.kind == JV_BOOL && !v.u.b; return true;
    case JTS_TRUE: *r = v.kind == JV_BOOL && v.u.b; return true;
    case JTS_INTEGER: *r = v.kind == JV_INT; return true;
    case JTS_FLOAT: *r = v.kind == JV_FLOAT; return true;
    case JTS_NUMBER: *r = jv_is_num(v); return true;
    case JTS_STRING: *r = v.kind == JV_STR; return true;
    case JTS_MAPPING: *r = v.kind == JV_DICT; return true;
    case JTS_ITERABLE:
        *r = v.kind == JV_STR || jv_is_seq(v) || v.kind == JV_DICT || v.kind == JV_UNDEFINED ||
             v.kind == JV_LOOP;
        return true;
    case JTS_SEQUENCE:
        *r = v.kind == JV_STR || jv_is_seq(v) || v.kind == JV_DICT || v.kind == JV_UNDEFINED;
        return true;
    case JTS_CALLABLE:
        *r = v.kind == JV_MACRO || v.kind == JV_METHOD || v.kind == JV_BUILTIN ||
             v.kind == JV_UNDEFINED;
        return true;
    case JTS_ESCAPED: *r = false; return true;
    case JTS_LOWER: return case_test(rt, v, true, r);
    case JTS_UPPER: return case_test(rt, v, false, r);
    case JTS_EVEN:
    case JTS_ODD:
    case JTS_DIVISIBLEBY: {
        jv divisor = id == JTS_DIVISIBLEBY ? (need_arg(rt, nargs, name) ? args[0] : jv_undef(NULL))
                                           : jv_int(2);
        if (rt->c.failed) return false;
        jv rem;
        if (!jbinop(rt, JOP_MOD, v, divisor, &rem)) return false;
        bool zero = rem.kind == JV_FLOAT ? rem.u.f == 0.0
                    : rem.kind == JV_INT ? rem.u.i == 0
                                         : false;
        bool one = rem.kind == JV_FLOAT ? rem.u.f == 1.0
                   : rem.kind == JV_INT ? rem.u.i == 1
                                        : false;
        jv_release(&rt->c, rem);
        *r = id == JTS_ODD ? one : zero;
        return true;
    }
    case JTS_EQ: return need_arg(rt, nargs, name) && jcompare(rt, JOP_EQ, v, args[0], r);
    case JTS_NE: return need_arg(rt, nargs, name) && jcompare(rt, JOP_NE, v, args[0], r);
    case JTS_LT: return need_arg(rt, nargs, name) && jcompare(rt, JOP_LT, v, args[0], r);
    case JTS_LE: return need_arg(rt, nargs, name) && jcompare(rt, JOP_LTEQ, v, args[0], r);
    case JTS_GT: return need_arg(rt, nargs, name) && jcompare(rt, JOP_GT, v, args[0], r);
    case JTS_GE: return need_arg(rt, nargs, name) && jcompare(rt, JOP_GTEQ, v, args[0], r);
    case JTS_IN: return need_arg(rt, nargs, name) && jcompare(rt, JCMP_IN, v, args[0], r);
    case JTS_SAMEAS: {
        if (!need_arg(rt, nargs, name)) return false;
        jv o = args[0];
        if (v.kind != o.kind)
            *r = false;
        else if (jv_is_obj(v))
            *r = v.u.o == o.u.o;
        else
            *r = jv_equal(v, o);
        return true;
    }
    case JTS_FILTER:
        *r = v.kind == JV_STR && jfilter_lookup(jv_str(v)->data, jv_str(v)->len) >= 0;
        return true;
    case JTS_TEST:
        *r = v.kind == JV_STR && jtest_lookup(jv_str(v)->data, jv_str(v)->len) >= 0;
        return true;
    }
    return jfail(&rt->c, LM_ERR_INVALID, "unknown test '%s'", name);
}

bool jtest_apply(jrt *rt, jscope *s, const jnode *t, jv input, bool *result) {
    const char *name = jv_str(t->value)->data;
    if (t->op < 0) return jfail(&rt->c, LM_ERR_INVALID, "unknown test '%s'", name);
    jargs a;
    if (!jargs_eval(rt, s, t, &a)) return false;
    rt->c.line = t->line;
    bool ok = true;
    if (a.nkw) ok = jfail(&rt->c, LM_ERR_INVALID, "test '%s' takes no keyword arguments", name);
    ok = ok && run_test(rt, t->op, name, input, a.pos, a.npos, result);
    jargs_free(rt, &a);
    return ok;
}

bool jtest_by_name(jrt *rt, const char *name, jv input, jv *extra, size_t nextra, bool *result) {
    int id = jtest_lookup(name, strlen(name));
    if (id < 0) return jfail(&rt->c, LM_ERR_INVALID, "unknown test '%s'", name);
    return run_test(rt, id, name, input, extra, nextra, result);
}
