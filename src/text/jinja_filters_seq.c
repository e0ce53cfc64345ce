/* Jinja2's filters over sequences and mappings: items, dictsort, sort,
 * list, join, select/reject(attr), map, min/max, unique, reverse,
 * first/last, batch, sum; attribute paths ("a.b.0") as make_attrgetter
 * resolves them, and a stable merge sort with Python's ordering. */
#include <stdlib.h>
#include <string.h>

#include "text/jinja_builtins.h"
#include "text/jinja_filter.h"
#include "text/jinja_lexer.h"

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

bool jf_items(fctx *f, jv in, jv *out) {
    jrt *rt = f->rt;
    static const char *const none[] = {NULL};
    (void)none;
    bool ok = true;
    (void)ok;
    if (!check(f, 0, none)) return false;
    if (in.kind == JV_UNDEFINED) return new_list(rt, out);
    if (in.kind != JV_DICT)
        return jfail(&rt->c, LM_ERR_INVALID, "Can only get item pairs from a mapping.");
    jdict *d = jv_dict(in);
    if (!jv_new_list(&rt->c, JV_LIST, d->len, out)) return false;
    for (size_t i = 0; i < d->len; i++) {
        jv pair;
        if (!jv_new_list(&rt->c, JV_TUPLE, 2, &pair) || !push(rt, pair, jv_retain(d->keys[i])) ||
            !push(rt, pair, jv_retain(d->vals[i])) || !push(rt, *out, pair)) {
            jv_release(&rt->c, *out);
            return false;
        }
    }
    return true;
}

bool jf_dictsort(fctx *f, jv in, jv *out) {
    jrt *rt = f->rt;
    static const char *const none[] = {NULL};
    (void)none;
    bool ok = true;
    (void)ok;
    static const char *const names[] = {"case_sensitive", "by", "reverse", NULL};
    if (!check(f, 3, names)) return false;
    if (in.kind != JV_DICT) return jfail(&rt->c, LM_ERR_INVALID, "dictsort needs a mapping");
    jv *by = arg(f, 1, "by");
    bool by_value = by && by->kind == JV_STR && !strcmp(jv_str(*by)->data, "value");
    if (by && !(by->kind == JV_STR && (by_value || !strcmp(jv_str(*by)->data, "key"))))
        return jfail(&rt->c, LM_ERR_INVALID, "You can only sort by either \"key\" or \"value\"");
    jargs none_args = {0};
    fctx items_f = {.rt = rt, .a = &none_args, .name = "items"};
    jv pairs;
    if (!jf_items(&items_f, in, &pairs)) return false;
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
        bool cs = arg_bool(arg(f, 0, "case_sensitive"), false);
        for (; ok && made < cnt; made++) {
            ok = sort_key(rt, jv_list(keyed)->items[made], NULL, cs, &keys[made]);
            if (!ok) break;
            idx[made] = made;
        }
        ok = ok && merge_sort(rt, idx, tmp, cnt, keys, arg_bool(arg(f, 2, "reverse"), false));
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

bool jf_sort(fctx *f, jv in, jv *out) {
    jrt *rt = f->rt;
    static const char *const none[] = {NULL};
    (void)none;
    bool ok = true;
    (void)ok;
    static const char *const names[] = {"reverse", "case_sensitive", "attribute", NULL};
    if (!check(f, 3, names)) return false;
    jv items;
    if (!jiterate(rt, in, &items)) return false;
    ok =
        sorted_list(rt, items, arg(f, 2, "attribute"), arg_bool(arg(f, 1, "case_sensitive"), false),
                    arg_bool(arg(f, 0, "reverse"), false), out);
    jv_release(&rt->c, items);
    return ok;
}

bool jf_list(fctx *f, jv in, jv *out) {
    jrt *rt = f->rt;
    static const char *const none[] = {NULL};
    (void)none;
    bool ok = true;
    (void)ok;
    if (!check(f, 0, none)) return false;
    jv items;
    if (!jiterate(rt, in, &items)) return false;
    jlist *l = jv_list(items);
    ok = jv_new_list(&rt->c, JV_LIST, l->len, out);
    for (size_t i = 0; ok && i < l->len; i++) ok = push(rt, *out, jv_retain(l->items[i]));
    jv_release(&rt->c, items);
    return ok;
}

bool jf_join(fctx *f, jv in, jv *out) {
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
bool jf_select(fctx *f, jv in, jv *out, bool by_attr, bool keep_when) {
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

bool jf_map(fctx *f, jv in, jv *out) {
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

bool jf_minmax(fctx *f, jv in, jv *out, bool want_max) {
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

bool jf_unique(fctx *f, jv in, jv *out) {
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

static bool reverse_value(jrt *rt, jv in, jv *out) {
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

static bool first_last(jrt *rt, jv in, jv *out, bool last) {
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

bool jf_batch(fctx *f, jv in, jv *out) {
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

bool jf_sum(fctx *f, jv in, jv *out) {
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

bool jf_reverse(fctx *f, jv in, jv *out) {
    static const char *const none[] = {NULL};
    return check(f, 0, none) && reverse_value(f->rt, in, out);
}

bool jf_first_last(fctx *f, jv in, jv *out, bool last) {
    static const char *const none[] = {NULL};
    return check(f, 0, none) && first_last(f->rt, in, out, last);
}
