/* Statement execution: output, if, for (loop.*, else, filters, break and
 * continue), set (names, tuples, namespace attributes, blocks), macros and
 * call blocks, filter blocks, with.  Scoping follows Jinja2: every loop
 * iteration and macro call gets a fresh scope, `if` does not make one. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja_builtins.h"
#include "text/jinja_eval.h"

void jrender_limits_default(jrender_limits *l) {
    memset(l, 0, sizeof *l);
    l->max_loop_iterations = 1000000;
    l->max_macro_depth = 64;
    l->max_output = (size_t)16 << 20;
    l->max_memory = (size_t)512 << 20;
    l->max_steps = 50000000;
    l->max_time_ms = 10000;
}

static bool exec_stmt(jrt *rt, jscope *s, const jnode *n);

bool jexec_block(jrt *rt, jscope *s, const jnode *block) {
    for (uint32_t i = 0; i < block->nlist; i++) {
        if (!exec_stmt(rt, s, block->list[i])) return false;
        if (rt->loop_ctl) return true;
    }
    return true;
}

/* Runs a block into a string of its own instead of the output. */
static bool capture(jrt *rt, jscope *s, const jnode *block, jv *out) {
    jbuf buf = {0}, *saved = rt->out;
    rt->out = &buf;
    bool ok = jexec_block(rt, s, block);
    rt->out = saved;
    ok = ok && jbuf_take_str(&rt->c, &buf, out);
    jbuf_free(&buf);
    return ok;
}

static bool emit(jrt *rt, jv v) { return jv_print(&rt->c, rt->out, v); }

/* Binds target (a name, a tuple of targets or ns.attr) to value (owned). */
static bool assign(jrt *rt, jscope *s, const jnode *target, jv value) {
    rt->c.line = target->line;
    if (target->kind == JN_NAME) return jscope_set(&rt->c, s, jv_str(target->value), value);
    if (target->kind == JN_NSREF) {
        jstr *ns_name = jv_str(target->a->value);
        jv *ns = jscope_lookup(s, ns_name->data, ns_name->len);
        if (!ns || ns->kind != JV_NAMESPACE) {
            jv_release(&rt->c, value);
            return jfail(&rt->c, LM_ERR_INVALID,
                         "cannot assign attribute on non-namespace object '%s'", ns_name->data);
        }
        return jdict_set(&rt->c, jv_dict(*ns), target->value, value);
    }
    /* tuple unpacking */
    jv items;
    bool ok = value.kind == JV_STR || jv_is_seq(value) || value.kind == JV_DICT
                  ? jiterate(rt, value, &items)
                  : jfail(&rt->c, LM_ERR_INVALID, "cannot unpack non-iterable %s object",
                          jv_type_name(value));
    jv_release(&rt->c, value);
    if (!ok) return false;
    jlist *l = jv_list(items);
    if (l->len != target->nlist) {
        ok = l->len > target->nlist
                 ? jfail(&rt->c, LM_ERR_INVALID, "too many values to unpack (expected %u)",
                         (unsigned)target->nlist)
                 : jfail(&rt->c, LM_ERR_INVALID,
                         "not enough values to unpack (expected %u, got %zu)",
                         (unsigned)target->nlist, l->len);
    }
    for (uint32_t i = 0; ok && i < target->nlist; i++)
        ok = assign(rt, s, target->list[i], jv_retain(l->items[i]));
    jv_release(&rt->c, items);
    return ok;
}

/* Runs a for loop's body over an iterable (the loop's own iterable, or the
 * argument of loop(...) in a recursive loop, at depth + 1). */
static bool run_loop(jrt *rt, jscope *s, const jnode *n, jv iterable, int depth) {
    jv items;
    rt->c.line = n->line;
    if (!jiterate(rt, iterable, &items)) return false;
    bool ok = true;
    if (n->c) { /* `for x in xs if cond`: filter first, so loop.length counts what remains */
        jv kept;
        if (!jv_new_list(&rt->c, JV_LIST, 0, &kept)) goto fail_items;
        jlist *l = jv_list(items);
        for (size_t i = 0; i < l->len; i++) {
            jscope *tmp;
            jv cond;
            if (!jscope_new(&rt->c, s, &tmp)) goto fail_kept;
            ok = assign(rt, tmp, n->a, jv_retain(l->items[i])) && jeval(rt, tmp, n->c, &cond);
            jobj_release(&rt->c, &tmp->h);
            if (!ok) goto fail_kept;
            bool keep = jv_truthy(cond);
            jv_release(&rt->c, cond);
            if (keep && !jlist_push(&rt->c, jv_list(kept), jv_retain(l->items[i]))) goto fail_kept;
            continue;
        fail_kept:
            jv_release(&rt->c, kept);
            goto fail_items;
        }
        jv_release(&rt->c, items);
        items = kept;
    }
    jv loop;
    if (!jv_new_loop(&rt->c, items, n, s, depth, &loop)) goto fail_items;
    jlist *l = jv_list(items);
    for (size_t i = 0; i < l->len; i++) {
        if (++rt->iterations > rt->limits.max_loop_iterations) {
            rt->c.line = n->line;
            ok = jfail(&rt->c, LM_ERR_INVALID, "more than %llu loop iterations",
                       (unsigned long long)rt->limits.max_loop_iterations);
            break;
        }
        ((jloop *)loop.u.o)->index0 = i;
        jscope *it;
        if (!jscope_new(&rt->c, s, &it)) {
            ok = false;
            break;
        }
        ok = assign(rt, it, n->a, jv_retain(l->items[i])) &&
             jscope_set(&rt->c, it, rt->name_loop, jv_retain(loop)) && jexec_block(rt, it, n->d);
        jobj_release(&rt->c, &it->h);
        if (!ok) break;
        if (rt->loop_ctl == JCTL_BREAK) {
            rt->loop_ctl = JCTL_NONE;
            break;
        }
        rt->loop_ctl = JCTL_NONE;
    }
    bool empty = l->len == 0;
    jv_release(&rt->c, loop);
    jv_release(&rt->c, items);
    if (ok && empty && n->e) ok = jexec_block(rt, s, n->e);
    return ok;
fail_items:
    jv_release(&rt->c, items);
    return false;
}

static bool exec_for(jrt *rt, jscope *s, const jnode *n) {
    jv iterable;
    if (!jeval(rt, s, n->b, &iterable)) return false;
    bool ok = run_loop(rt, s, n, iterable, 1);
    jv_release(&rt->c, iterable);
    return ok;
}

bool jloop_call(jrt *rt, jloop *l, jargs *a, jv *out) {
    if (!l->node || !l->node->flag)
        return jfail(&rt->c, LM_ERR_INVALID, "the loop is not recursive: it cannot be called");
    if (a->npos != 1 || a->nkw)
        return jfail(&rt->c, LM_ERR_INVALID, "loop() takes exactly one iterable");
    if (rt->macro_depth >= rt->limits.max_macro_depth)
        return jfail(&rt->c, LM_ERR_INVALID, "recursive loop nested deeper than %d",
                     rt->limits.max_macro_depth);
    jbuf buf = {0}, *saved = rt->out;
    rt->out = &buf;
    rt->macro_depth++;
    bool ok = run_loop(rt, l->scope, l->node, a->pos[0], l->depth + 1);
    rt->macro_depth--;
    rt->out = saved;
    ok = ok && jbuf_take_str(&rt->c, &buf, out);
    jbuf_free(&buf);
    return ok;
}

bool jcall_macro(jrt *rt, jmacro *m, jargs *a, jv caller, jv *out) {
    const jnode *def = m->node;
    if (rt->macro_depth >= rt->limits.max_macro_depth)
        return jfail(&rt->c, LM_ERR_INVALID, "macro calls nested deeper than %d",
                     rt->limits.max_macro_depth);
    jscope *s;
    if (!jscope_new(&rt->c, m->closure, &s)) return false;
    bool ok = true;
    size_t nparams = def->nlist, ndefaults = def->nlist2;
    bool *kw_used = a->nkw ? calloc(a->nkw, sizeof(bool)) : NULL;
    if (a->nkw && !kw_used) ok = jfail(&rt->c, LM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; ok && i < nparams; i++) {
        jstr *pname = jv_str(def->list[i]->value);
        jv value;
        if (i < a->npos) {
            value = jv_retain(a->pos[i]);
        } else {
            size_t k = 0;
            while (k < a->nkw && strcmp(jv_str(a->kwnodes[k]->value)->data, pname->data) != 0) k++;
            if (k < a->nkw) {
                value = jv_retain(a->kw[k]);
                kw_used[k] = true;
            } else if (i >= nparams - ndefaults) {
                /* defaults are evaluated at call time, seeing earlier parameters */
                ok = jeval(rt, s, def->list2[i - (nparams - ndefaults)], &value);
                if (!ok) break;
            } else {
                value = jv_undef(pname->data);
            }
        }
        ok = jscope_set(&rt->c, s, pname, value);
    }
    jv extra;
    if (ok && (ok = jv_new_list(&rt->c, JV_TUPLE, 0, &extra))) {
        for (size_t i = nparams; ok && i < a->npos; i++)
            ok = jlist_push(&rt->c, jv_list(extra), jv_retain(a->pos[i]));
        ok = ok ? jscope_set(&rt->c, s, rt->name_varargs, extra)
                : (jv_release(&rt->c, extra), false);
    }
    if (ok && (ok = jv_new_dict(&rt->c, JV_DICT, &extra))) {
        for (size_t k = 0; ok && k < a->nkw; k++)
            if (!kw_used[k])
                ok = jdict_set(&rt->c, jv_dict(extra), a->kwnodes[k]->value, jv_retain(a->kw[k]));
        ok =
            ok ? jscope_set(&rt->c, s, rt->name_kwargs, extra) : (jv_release(&rt->c, extra), false);
    }
    free(kw_used);
    if (ok && caller.kind == JV_MACRO)
        ok = jscope_set(&rt->c, s, rt->name_caller, jv_retain(caller));
    if (ok) {
        rt->macro_depth++;
        ok = capture(rt, s, def->d, out);
        rt->macro_depth--;
        rt->loop_ctl = JCTL_NONE;
    }
    jobj_release(&rt->c, &s->h);
    return ok;
}

static bool exec_call_block(jrt *rt, jscope *s, const jnode *n) {
    const jnode *call = n->a;
    jv callee, caller, result;
    if (!jeval(rt, s, call->a, &callee)) return false;
    rt->c.line = n->line;
    if (callee.kind != JV_MACRO) {
        bool ok = callee.kind == JV_UNDEFINED
                      ? jcheck_defined(rt, callee)
                      : jfail(&rt->c, LM_ERR_INVALID, "{%% call %%} needs a macro, not %s",
                              jv_type_name(callee));
        jv_release(&rt->c, callee);
        return ok;
    }
    if (!jv_new_macro(&rt->c, n, "caller", s, jv_none(), &caller)) {
        jv_release(&rt->c, callee);
        return false;
    }
    jargs a;
    bool ok = jargs_eval(rt, s, call, &a);
    if (ok) {
        ok = jcall_macro(rt, (jmacro *)callee.u.o, &a, caller, &result);
        jargs_free(rt, &a);
    }
    jv_release(&rt->c, caller);
    jv_release(&rt->c, callee);
    if (!ok) return false;
    ok = emit(rt, result);
    jv_release(&rt->c, result);
    return ok;
}

bool jfilter_chain(jrt *rt, jscope *s, const jnode *f, jv input, jv *out) {
    if (!f->a) return jfilter_apply(rt, s, f, input, out);
    jv mid;
    if (!jfilter_chain(rt, s, f->a, input, &mid)) return false;
    bool ok = jfilter_apply(rt, s, f, mid, out);
    jv_release(&rt->c, mid);
    return ok;
}

static bool exec_node(jrt *rt, jscope *s, const jnode *n) {
    jv v, w;
    bool ok;
    switch ((jnode_kind)n->kind) {
    case JN_TEXT: return jbuf_put(&rt->c, rt->out, jv_str(n->value)->data, jv_str(n->value)->len);
    case JN_PRINT:
        if (!jeval(rt, s, n->a, &v)) return false;
        rt->c.line = n->line;
        ok = emit(rt, v);
        jv_release(&rt->c, v);
        return ok;
    case JN_BLOCK: return jexec_block(rt, s, n);
    case JN_IF:
        for (uint32_t i = 0; i < n->nlist; i++) {
            if (!jeval(rt, s, n->list[i], &v)) return false;
            bool yes = jv_truthy(v);
            jv_release(&rt->c, v);
            if (yes) return jexec_block(rt, s, n->list2[i]);
        }
        return n->c ? jexec_block(rt, s, n->c) : true;
    case JN_FOR: return exec_for(rt, s, n);
    case JN_SET:
        if (!jeval(rt, s, n->b, &v)) return false;
        return assign(rt, s, n->a, v);
    case JN_SETBLOCK:
        if (!capture(rt, s, n->d, &v)) return false;
        if (n->c) {
            ok = jfilter_chain(rt, s, n->c, v, &w);
            jv_release(&rt->c, v);
            if (!ok) return false;
            v = w;
        }
        return assign(rt, s, n->a, v);
    case JN_MACRO:
        if (!jv_new_macro(&rt->c, n, jv_str(n->value)->data, s, jv_none(), &v)) return false;
        return jscope_set(&rt->c, s, jv_str(n->value), v);
    case JN_CALLBLOCK: return exec_call_block(rt, s, n);
    case JN_FILTERBLOCK:
        if (!capture(rt, s, n->d, &v)) return false;
        ok = jfilter_chain(rt, s, n->c, v, &w);
        jv_release(&rt->c, v);
        if (!ok) return false;
        ok = emit(rt, w);
        jv_release(&rt->c, w);
        return ok;
    case JN_WITH: {
        jscope *inner;
        if (!jscope_new(&rt->c, s, &inner)) return false;
        ok = true;
        jv *vals = n->nlist2 ? calloc(n->nlist2, sizeof(jv)) : NULL;
        if (n->nlist2 && !vals) ok = jfail(&rt->c, LM_ERR_NOMEM, "out of memory");
        uint32_t done = 0;
        for (; ok && done < n->nlist2; done++) /* all values first, in the outer scope */
            if (!jeval(rt, s, n->list2[done], &vals[done])) ok = false;
        if (!ok && done) done--;
        for (uint32_t i = 0; i < done; i++) {
            if (ok)
                ok = assign(rt, inner, n->list[i], vals[i]);
            else
                jv_release(&rt->c, vals[i]);
        }
        free(vals);
        if (ok) ok = jexec_block(rt, inner, n->d);
        jobj_release(&rt->c, &inner->h);
        return ok;
    }
    case JN_BREAK: rt->loop_ctl = JCTL_BREAK; return true;
    case JN_CONTINUE: rt->loop_ctl = JCTL_CONTINUE; return true;
    default: return jfail(&rt->c, LM_ERR_INTERNAL, "node kind %d is not a statement", n->kind);
    }
}

static bool exec_stmt(jrt *rt, jscope *s, const jnode *n) {
    if (rt->depth >= JINJA_EVAL_DEPTH_MAX)
        return jfail(&rt->c, LM_ERR_INVALID, "recursion too deep");
    if (!jctx_charge(&rt->c, 1)) return false;
    rt->c.line = n->line;
    rt->depth++;
    bool ok = exec_node(rt, s, n);
    rt->depth--;
    return ok;
}

/* ---- one render ---- */

static jstr *immortal_name(char **cursor, const char *name) {
    jstr *s = (jstr *)*cursor;
    size_t len = strlen(name);
    s->h.refs = JOBJ_IMMORTAL;
    s->h.type = JO_STR;
    s->len = s->ncp = len;
    memcpy(s->data, name, len + 1);
    *cursor += (sizeof(jstr) + len + 1 + 15) & ~(size_t)15;
    return s;
}

bool jrt_init(jrt *rt, const jrender_limits *limits, lm_error *err) {
    memset(rt, 0, sizeof *rt);
    jctx_init(&rt->c, err);
    if (limits)
        rt->limits = *limits;
    else
        jrender_limits_default(&rt->limits);
    rt->c.max_string = rt->limits.max_output;
    rt->c.max_bytes = rt->limits.max_memory;
    rt->c.max_steps = rt->limits.max_steps;
    jctx_set_time_limit(&rt->c, rt->limits.max_time_ms);
    char *block = calloc(4, (sizeof(jstr) + 16 + 15) & ~(size_t)15);
    if (!block) return jfail_plain(&rt->c, LM_ERR_NOMEM, "out of memory");
    rt->names = (jstr *)block;
    char *cursor = block;
    rt->name_loop = immortal_name(&cursor, "loop");
    rt->name_caller = immortal_name(&cursor, "caller");
    rt->name_varargs = immortal_name(&cursor, "varargs");
    rt->name_kwargs = immortal_name(&cursor, "kwargs");
    return true;
}

bool jrt_render(jrt *rt, const jtemplate *t, jv context, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    jscope *root;
    if (!jscope_new(&rt->c, NULL, &root)) return false;
    bool ok = true;
    if (context.kind == JV_DICT) {
        jdict *d = jv_dict(context);
        for (size_t i = 0; ok && i < d->len; i++)
            if (d->keys[i].kind == JV_STR)
                ok = jscope_set(&rt->c, root, jv_str(d->keys[i]), jv_retain(d->vals[i]));
    }
    jbuf buf = {0};
    rt->out = &buf;
    ok = ok && jexec_block(rt, root, t->root);
    rt->out = NULL;
    jobj_release(&rt->c, &root->h);
    if (!ok) {
        jbuf_free(&buf);
        return false;
    }
    if (!buf.data) {
        buf.data = malloc(1);
        if (!buf.data) return jfail_plain(&rt->c, LM_ERR_NOMEM, "out of memory");
        buf.data[0] = 0;
    }
    *out = buf.data;
    *out_len = buf.len;
    return true;
}

void jrt_destroy(jrt *rt) {
    jctx_sweep(&rt->c);
    free(rt->names);
    rt->names = NULL;
}
