/* Expression evaluation: names, literals, attribute and item access (with
 * the sandbox's rules), slicing, calls, filters, tests and operators. */
#include <stdlib.h>
#include <string.h>

#include "text/jinja_builtins.h"
#include "text/jinja_eval.h"
#include "text/jinja_lexer.h"

/* ---- arguments ---- */

void jargs_free(jrt *rt, jargs *a) {
    for (size_t i = 0; i < a->npos; i++) jv_release(&rt->c, a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) jv_release(&rt->c, a->kw[i]);
    free(a->pos);
    free(a->kw);
    free(a->kwnodes);
    memset(a, 0, sizeof *a);
}

bool jargs_eval(jrt *rt, jscope *s, const jnode *n, jargs *a) {
    memset(a, 0, sizeof *a);
    if (n->nlist) {
        a->pos = malloc(n->nlist * sizeof(jv));
        if (!a->pos) return jfail(&rt->c, LM_ERR_NOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < n->nlist; i++) {
        if (!jeval(rt, s, n->list[i], &a->pos[i])) goto fail;
        a->npos++;
    }
    if (n->nlist2) {
        a->kw = malloc(n->nlist2 * sizeof(jv));
        a->kwnodes = malloc(n->nlist2 * sizeof(jnode *));
        if (!a->kw || !a->kwnodes) {
            jfail(&rt->c, LM_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    for (uint32_t i = 0; i < n->nlist2; i++) {
        a->kwnodes[i] = n->list2[i];
        if (!jeval(rt, s, n->list2[i]->a, &a->kw[i])) goto fail;
        a->nkw++;
    }
    return true;
fail:
    jargs_free(rt, a);
    return false;
}

jv *jargs_get(jargs *a, size_t i, const char *name) {
    if (i < a->npos) return &a->pos[i];
    if (name)
        for (size_t k = 0; k < a->nkw; k++)
            if (strcmp(jv_str(a->kwnodes[k]->value)->data, name) == 0) return &a->kw[k];
    return NULL;
}

bool jargs_check(jrt *rt, jargs *a, size_t max_pos, const char *const *names, const char *what) {
    if (a->npos > max_pos)
        return jfail(&rt->c, LM_ERR_INVALID, "%s takes at most %zu argument(s) (%zu given)", what,
                     max_pos, a->npos);
    for (size_t k = 0; k < a->nkw; k++) {
        const char *kw = jv_str(a->kwnodes[k]->value)->data;
        bool known = false;
        for (size_t i = 0; names && names[i]; i++)
            if (strcmp(names[i], kw) == 0) {
                known = true;
                if (i < a->npos)
                    return jfail(&rt->c, LM_ERR_INVALID, "%s got multiple values for argument '%s'",
                                 what, kw);
            }
        if (!known)
            return jfail(&rt->c, LM_ERR_INVALID, "%s got an unexpected keyword argument '%s'", what,
                         kw);
    }
    return true;
}

/* ---- attribute and item access ---- */

static char receiver_of(jv obj) {
    switch ((jv_kind)obj.kind) {
    case JV_STR: return 's';
    case JV_DICT: return 'd';
    case JV_LIST:
    case JV_TUPLE: return 'l';
    default: return 0;
    }
}

static jv unsafe_undef(jv obj, const char *name) {
    jv v = jv_undef_attr(obj, name);
    v.aux |= JV_UNSAFE_ATTR;
    return v;
}

/* Python getattr(obj, name) as the sandbox allows it; *found is false when
 * the object has no such attribute (then Jinja tries obj[name]). */
static bool python_attr(jrt *rt, jv obj, jstr *name, jv *out, bool *found) {
    *found = true;
    if (name->len >= 2 && name->data[0] == '_' && name->data[1] == '_') {
        *out = unsafe_undef(obj, name->h.refs == JOBJ_IMMORTAL ? name->data : NULL);
        return true;
    }
    char r = receiver_of(obj);
    if (r) {
        int id = jmethod_lookup(r, name->data, name->len);
        if (id == JM_UNSAFE) {
            *out = unsafe_undef(obj, name->h.refs == JOBJ_IMMORTAL ? name->data : NULL);
            return true;
        }
        if (id >= 0) return jv_new_method(&rt->c, obj, id, out);
    }
    if (obj.kind == JV_NAMESPACE) {
        jv *v = jdict_get_str(jv_dict(obj), name->data, name->len);
        if (v) {
            *out = jv_retain(*v);
            return true;
        }
    }
    if (obj.kind == JV_LOOP) {
        bool known;
        if (!jloop_attr(rt, (jloop *)obj.u.o, name->data, out, &known)) return false;
        if (known) return true;
    }
    *found = false;
    return true;
}

bool jgetattr_strict(jrt *rt, jv obj, jstr *name, jv *out) {
    if (!jcheck_defined(rt, obj)) return false;
    bool found;
    if (!python_attr(rt, obj, name, out, &found)) return false;
    if (!found) *out = jv_undef_attr(obj, name->h.refs == JOBJ_IMMORTAL ? name->data : NULL);
    return true;
}

bool jgetattr(jrt *rt, jv obj, jstr *name, jv *out) {
    if (!jcheck_defined(rt, obj)) return false;
    bool found;
    if (!python_attr(rt, obj, name, out, &found)) return false;
    if (found) return true;
    if (obj.kind == JV_DICT) {
        jv *v = jdict_get_str(jv_dict(obj), name->data, name->len);
        if (v) {
            *out = jv_retain(*v);
            return true;
        }
    }
    *out = jv_undef_attr(obj, name->h.refs == JOBJ_IMMORTAL ? name->data : NULL);
    return true;
}

static bool index_of(int64_t i, size_t len, size_t *out) {
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return false;
    *out = (size_t)i;
    return true;
}

bool jgetitem(jrt *rt, jv obj, jv key, jv *out) {
    if (!jcheck_defined(rt, obj)) return false;
    /* indexing a non-ASCII string and hashing a string key both scan it */
    if (obj.kind == JV_STR &&
        !jctx_charge(&rt->c, jv_str(obj)->len / (jv_str(obj)->ncp == jv_str(obj)->len ? 256 : 32)))
        return false;
    if (key.kind == JV_STR && !jctx_charge(&rt->c, jv_str(key)->len / 256)) return false;
    bool int_key = key.kind == JV_INT || key.kind == JV_BOOL;
    int64_t ik = key.kind == JV_INT ? key.u.i : key.kind == JV_BOOL ? key.u.b : 0;
    size_t idx;
    switch ((jv_kind)obj.kind) {
    case JV_LIST:
    case JV_TUPLE:
        if (int_key) {
            if (index_of(ik, jv_list(obj)->len, &idx)) {
                *out = jv_retain(jv_list(obj)->items[idx]);
                return true;
            }
            *out = jv_undef_attr(obj, NULL);
            return true;
        }
        break;
    case JV_STR:
        if (int_key) {
            jstr *s = jv_str(obj);
            if (index_of(ik, s->ncp, &idx)) {
                size_t start = jutf8_offset(s, idx);
                uint32_t cp;
                size_t k =
                    jutf8_decode((const unsigned char *)s->data + start, s->len - start, &cp);
                return jv_new_str(&rt->c, s->data + start, k, out);
            }
            *out = jv_undef_attr(obj, NULL);
            return true;
        }
        break;
    case JV_DICT:
        if (jv_hashable(key)) {
            jv *v = jdict_get(jv_dict(obj), key);
            if (v) {
                *out = jv_retain(*v);
                return true;
            }
        }
        break;
    default: break;
    }
    if (key.kind == JV_STR) {
        bool found;
        if (!python_attr(rt, obj, jv_str(key), out, &found)) return false;
        if (found) return true;
    }
    *out = jv_undef_attr(obj, NULL);
    return true;
}

/* ---- slicing ---- */

static bool slice_index(jrt *rt, jv v, bool *given, int64_t *out) {
    *given = false;
    if (v.kind == JV_NONE || v.kind == JV_UNDEFINED) return true;
    if (v.kind == JV_INT || v.kind == JV_BOOL) {
        *given = true;
        *out = v.kind == JV_INT ? v.u.i : v.u.b;
        return true;
    }
    return jfail(&rt->c, LM_ERR_INVALID, "slice indices must be integers or None");
}

/* Python's PySlice_AdjustIndices. */
static size_t adjust_slice(int64_t len, bool has_start, int64_t start, bool has_stop, int64_t stop,
                           int64_t step, int64_t *out_start) {
    if (!has_start)
        start = step < 0 ? len - 1 : 0;
    else if (start < 0) {
        start += len;
        if (start < 0) start = step < 0 ? -1 : 0;
    } else if (start >= len)
        start = step < 0 ? len - 1 : len;
    if (!has_stop)
        stop = step < 0 ? -1 : len;
    else if (stop < 0) {
        stop += len;
        if (stop < 0) stop = step < 0 ? -1 : 0;
    } else if (stop >= len)
        stop = step < 0 ? len - 1 : len;
    *out_start = start;
    if (step < 0) return stop < start ? (size_t)((start - stop - 1) / (-step) + 1) : 0;
    return start < stop ? (size_t)((stop - start - 1) / step + 1) : 0;
}

static bool eval_slice(jrt *rt, jscope *s, jv obj, const jnode *sl, jv *out) {
    jv parts[3] = {jv_none(), jv_none(), jv_none()};
    const jnode *nodes[3] = {sl->a, sl->b, sl->c};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++)
        if (nodes[i]) ok = jeval(rt, s, nodes[i], &parts[i]);
    bool has[3] = {false, false, false};
    int64_t val[3] = {0, 0, 1};
    for (int i = 0; i < 3 && ok; i++) ok = slice_index(rt, parts[i], &has[i], &val[i]);
    for (int i = 0; i < 3; i++) jv_release(&rt->c, parts[i]);
    if (!ok) return false;
    int64_t step = has[2] ? val[2] : 1;
    if (step == 0) return jfail(&rt->c, LM_ERR_INVALID, "slice step cannot be zero");
    if (!jcheck_defined(rt, obj)) return false;
    if (obj.kind == JV_LIST || obj.kind == JV_TUPLE) {
        jlist *l = jv_list(obj);
        int64_t start;
        size_t count = adjust_slice((int64_t)l->len, has[0], val[0], has[1], val[1], step, &start);
        if (!jv_new_list(&rt->c, (jv_kind)obj.kind, count, out)) return false;
        for (size_t i = 0; i < count; i++)
            if (!jlist_push(&rt->c, jv_list(*out),
                            jv_retain(l->items[start + (int64_t)i * step]))) {
                jv_release(&rt->c, *out);
                return false;
            }
        return true;
    }
    if (obj.kind == JV_STR) {
        jstr *str = jv_str(obj);
        if (!jctx_charge(&rt->c, str->len / (str->ncp == str->len ? 256 : 16))) return false;
        int64_t start;
        size_t count =
            adjust_slice((int64_t)str->ncp, has[0], val[0], has[1], val[1], step, &start);
        if (step == 1) {
            size_t b0 = jutf8_offset(str, (size_t)start), b1 = b0;
            if (str->ncp == str->len)
                b1 = b0 + count;
            else
                for (size_t k = 0; k < count; k++) {
                    uint32_t cp;
                    b1 += jutf8_decode((const unsigned char *)str->data + b1, str->len - b1, &cp);
                }
            return jv_new_str(&rt->c, str->data + b0, b1 - b0, out);
        }
        /* general step: index the code points once */
        size_t *offs = malloc((str->ncp + 1) * sizeof(size_t));
        if (!offs) return jfail(&rt->c, LM_ERR_NOMEM, "out of memory");
        size_t i = 0, k = 0;
        while (i < str->len) {
            offs[k++] = i;
            uint32_t cp;
            i += jutf8_decode((const unsigned char *)str->data + i, str->len - i, &cp);
        }
        offs[k] = str->len;
        jbuf b = {0};
        bool good = true;
        for (size_t n = 0; n < count && good; n++) {
            size_t cpi = (size_t)(start + (int64_t)n * step);
            good = jbuf_put(&rt->c, &b, str->data + offs[cpi], offs[cpi + 1] - offs[cpi]);
        }
        free(offs);
        good = good && jbuf_take_str(&rt->c, &b, out);
        jbuf_free(&b);
        return good;
    }
    if (obj.kind == JV_NONE || jv_is_num(obj)) {
        *out = jv_undef_attr(obj, NULL);
        return true;
    }
    return jfail(&rt->c, LM_ERR_INVALID, "'%s' object is not subscriptable", jv_type_name(obj));
}

/* ---- calls ---- */

static bool call_value(jrt *rt, jv callee, jargs *a, jv *out) {
    switch ((jv_kind)callee.kind) {
    case JV_METHOD: {
        jmethod *m = (jmethod *)callee.u.o;
        return jmethod_call(rt, m->self, m->id, a, out);
    }
    case JV_MACRO: return jcall_macro(rt, (jmacro *)callee.u.o, a, jv_none(), out);
    case JV_BUILTIN: return jbuiltin_call(rt, callee.u.builtin, a, out);
    case JV_LOOP: return jloop_call(rt, (jloop *)callee.u.o, a, out);
    case JV_UNDEFINED: return jcheck_defined(rt, callee);
    default:
        return jfail(&rt->c, LM_ERR_INVALID, "'%s' object is not callable", jv_type_name(callee));
    }
}

static bool eval_call(jrt *rt, jscope *s, const jnode *n, jv *out) {
    const jnode *f = n->a;
    jv callee;
    /* obj.method(...) without materialising a bound method */
    if (f->kind == JN_GETATTR) {
        jv obj;
        if (!jeval(rt, s, f->a, &obj)) return false;
        char r = receiver_of(obj);
        jstr *name = jv_str(f->value);
        int id = r && !(name->data[0] == '_' && name->data[1] == '_')
                     ? jmethod_lookup(r, name->data, name->len)
                     : -1;
        if (id >= 0 && id != JM_UNSAFE) {
            jargs a;
            bool ok = jargs_eval(rt, s, n, &a);
            if (ok) {
                rt->c.line = n->line;
                ok = jmethod_call(rt, obj, id, &a, out);
                jargs_free(rt, &a);
            }
            jv_release(&rt->c, obj);
            return ok;
        }
        rt->c.line = f->line;
        bool ok = jgetattr(rt, obj, name, &callee);
        jv_release(&rt->c, obj);
        if (!ok) return false;
    } else if (!jeval(rt, s, f, &callee)) {
        return false;
    }
    jargs a;
    bool ok = jargs_eval(rt, s, n, &a);
    if (ok) {
        rt->c.line = n->line;
        ok = call_value(rt, callee, &a, out);
        jargs_free(rt, &a);
    }
    jv_release(&rt->c, callee);
    return ok;
}

/* ---- expressions ---- */

static bool eval_collection(jrt *rt, jscope *s, const jnode *n, jv *out) {
    if (n->kind == JN_DICT) {
        if (!jv_new_dict(&rt->c, JV_DICT, out)) return false;
        for (uint32_t i = 0; i < n->nlist; i++) {
            jv k, v;
            if (!jeval(rt, s, n->list[i], &k)) goto fail;
            if (!jeval(rt, s, n->list2[i], &v)) {
                jv_release(&rt->c, k);
                goto fail;
            }
            rt->c.line = n->line;
            if (!jdict_set(&rt->c, jv_dict(*out), k, v)) goto fail;
        }
        return true;
    }
    if (!jv_new_list(&rt->c, n->kind == JN_LIST ? JV_LIST : JV_TUPLE, n->nlist, out)) return false;
    for (uint32_t i = 0; i < n->nlist; i++) {
        jv item;
        if (!jeval(rt, s, n->list[i], &item) || !jlist_push(&rt->c, jv_list(*out), item)) goto fail;
    }
    return true;
fail:
    jv_release(&rt->c, *out);
    return false;
}

static bool eval_compare(jrt *rt, jscope *s, const jnode *n, jv *out) {
    jv left;
    if (!jeval(rt, s, n->a, &left)) return false;
    bool result = true;
    for (uint32_t i = 0; i < n->nlist && result; i++) {
        jv right;
        if (!jeval(rt, s, n->list[i]->a, &right)) {
            jv_release(&rt->c, left);
            return false;
        }
        rt->c.line = n->list[i]->line;
        bool ok = jcompare(rt, n->list[i]->op, left, right, &result);
        jv_release(&rt->c, left);
        left = right;
        if (!ok) {
            jv_release(&rt->c, left);
            return false;
        }
    }
    jv_release(&rt->c, left);
    *out = jv_bool(result);
    return true;
}

static bool eval_concat(jrt *rt, jscope *s, const jnode *n, jv *out) {
    jbuf b = {0};
    for (uint32_t i = 0; i < n->nlist; i++) {
        jv v;
        if (!jeval(rt, s, n->list[i], &v)) goto fail;
        bool ok = jv_print(&rt->c, &b, v);
        jv_release(&rt->c, v);
        if (!ok) goto fail;
    }
    bool ok = jbuf_take_str(&rt->c, &b, out);
    jbuf_free(&b);
    return ok;
fail:
    jbuf_free(&b);
    return false;
}

static bool eval_node(jrt *rt, jscope *s, const jnode *n, jv *out) {
    jv a, b;
    bool ok;
    switch ((jnode_kind)n->kind) {
    case JN_CONST: *out = jv_retain(n->value); return true;
    case JN_NAME: {
        jstr *name = jv_str(n->value);
        jv *v = jscope_lookup(s, name->data, name->len);
        if (v) {
            *out = jv_retain(*v);
            return true;
        }
        int id = jbuiltin_lookup(name->data, name->len);
        *out = id >= 0 ? jv_builtin(id) : jv_undef(name->data);
        return true;
    }
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT: return eval_collection(rt, s, n, out);
    case JN_GETATTR:
        if (!jeval(rt, s, n->a, &a)) return false;
        rt->c.line = n->line;
        ok = jgetattr(rt, a, jv_str(n->value), out);
        jv_release(&rt->c, a);
        return ok;
    case JN_GETITEM:
        if (!jeval(rt, s, n->a, &a)) return false;
        if (n->b->kind == JN_SLICE) {
            ok = eval_slice(rt, s, a, n->b, out);
        } else {
            ok = jeval(rt, s, n->b, &b);
            rt->c.line = n->line;
            if (ok) {
                ok = jgetitem(rt, a, b, out);
                jv_release(&rt->c, b);
            }
        }
        jv_release(&rt->c, a);
        return ok;
    case JN_CALL: return eval_call(rt, s, n, out);
    case JN_FILTER:
        if (!jeval(rt, s, n->a, &a)) return false;
        rt->c.line = n->line;
        ok = jfilter_apply(rt, s, n, a, out);
        jv_release(&rt->c, a);
        return ok;
    case JN_TEST: {
        if (!jeval(rt, s, n->a, &a)) return false;
        rt->c.line = n->line;
        bool r;
        ok = jtest_apply(rt, s, n, a, &r);
        jv_release(&rt->c, a);
        if (ok) *out = jv_bool(r);
        return ok;
    }
    case JN_NOT:
        if (!jeval(rt, s, n->a, &a)) return false;
        *out = jv_bool(!jv_truthy(a));
        jv_release(&rt->c, a);
        return true;
    case JN_NEG:
    case JN_POS:
        if (!jeval(rt, s, n->a, &a)) return false;
        rt->c.line = n->line;
        if (!jcheck_defined(rt, a)) return false;
        if (a.kind == JV_FLOAT)
            *out = jv_float(n->kind == JN_NEG ? -a.u.f : a.u.f);
        else if (a.kind == JV_INT || a.kind == JV_BOOL) {
            int64_t i = a.kind == JV_INT ? a.u.i : a.u.b;
            if (n->kind == JN_NEG && i == INT64_MIN)
                return jfail(&rt->c, LM_ERR_INVALID, "integer overflow in -");
            *out = jv_int(n->kind == JN_NEG ? -i : i);
        } else {
            ok = jfail(&rt->c, LM_ERR_INVALID, "bad operand type for unary %s: '%s'",
                       n->kind == JN_NEG ? "-" : "+", jv_type_name(a));
            jv_release(&rt->c, a);
            return ok;
        }
        return true;
    case JN_BINOP:
        if (!jeval(rt, s, n->a, &a)) return false;
        if (!jeval(rt, s, n->b, &b)) {
            jv_release(&rt->c, a);
            return false;
        }
        rt->c.line = n->line;
        ok = jbinop(rt, n->op, a, b, out);
        jv_release(&rt->c, a);
        jv_release(&rt->c, b);
        return ok;
    case JN_CONCAT: return eval_concat(rt, s, n, out);
    case JN_AND:
    case JN_OR: /* Python returns the deciding operand */
        if (!jeval(rt, s, n->a, &a)) return false;
        if (jv_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return true;
        }
        jv_release(&rt->c, a);
        return jeval(rt, s, n->b, out);
    case JN_COMPARE: return eval_compare(rt, s, n, out);
    case JN_CONDEXPR:
        if (!jeval(rt, s, n->a, &a)) return false;
        ok = jv_truthy(a);
        jv_release(&rt->c, a);
        if (ok) return jeval(rt, s, n->b, out);
        if (n->c) return jeval(rt, s, n->c, out);
        *out = jv_undef(NULL);
        return true;
    default: return jfail(&rt->c, LM_ERR_INTERNAL, "node kind %d is not an expression", n->kind);
    }
}

bool jeval(jrt *rt, jscope *s, const jnode *n, jv *out) {
    if (rt->depth >= JINJA_EVAL_DEPTH_MAX)
        return jfail(&rt->c, LM_ERR_INVALID, "recursion too deep");
    if (!jctx_charge(&rt->c, 1)) return false;
    rt->c.line = n->line;
    rt->depth++;
    bool ok = eval_node(rt, s, n, out);
    rt->depth--;
    return ok;
}
