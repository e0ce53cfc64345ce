/* Shared by the filter files (jinja_filters.c: dispatch, strings and
 * numbers; jinja_filters_seq.c: sequences and mappings): the argument
 * helpers and the sequence filters. */
#ifndef LOOM_TEXT_JINJA_FILTER_H
#define LOOM_TEXT_JINJA_FILTER_H

#include <stdio.h>

#include "text/jinja_eval.h"

typedef struct {
    jrt *rt;
    jargs *a;
    const char *name;
} fctx;

static inline jv *arg(fctx *f, size_t i, const char *name) { return jargs_get(f->a, i, name); }

static inline bool check(fctx *f, size_t max_pos, const char *const *names) {
    char what[64];
    snprintf(what, sizeof what, "filter '%s'", f->name);
    return jargs_check(f->rt, f->a, max_pos, names, what);
}

static inline bool arg_bool(jv *v, bool dflt) { return v ? jv_truthy(*v) : dflt; }

static inline bool arg_int(fctx *f, jv *v, int64_t dflt, int64_t *out) {
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

static inline bool to_str(jrt *rt, jv v, jv *out) { return jv_to_string(&rt->c, v, out); }

static inline bool new_list(jrt *rt, jv *out) { return jv_new_list(&rt->c, JV_LIST, 0, out); }

static inline bool push(jrt *rt, jv list, jv item) {
    return jlist_push(&rt->c, jv_list(list), item);
}

/* Sequence and mapping filters (jinja_filters_seq.c). */
bool jf_items(fctx *f, jv in, jv *out);
bool jf_dictsort(fctx *f, jv in, jv *out);
bool jf_sort(fctx *f, jv in, jv *out);
bool jf_list(fctx *f, jv in, jv *out);
bool jf_join(fctx *f, jv in, jv *out);
/* select / reject (by_attr: selectattr / rejectattr); keep_when: select */
bool jf_select(fctx *f, jv in, jv *out, bool by_attr, bool keep_when);
bool jf_map(fctx *f, jv in, jv *out);
bool jf_minmax(fctx *f, jv in, jv *out, bool want_max);
bool jf_unique(fctx *f, jv in, jv *out);
bool jf_reverse(fctx *f, jv in, jv *out);
bool jf_first_last(fctx *f, jv in, jv *out, bool last);
bool jf_batch(fctx *f, jv in, jv *out);
bool jf_sum(fctx *f, jv in, jv *out);

#endif
