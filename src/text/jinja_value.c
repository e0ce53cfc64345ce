/* Heap objects, reference counting and the containers of the template engine. */
#include "text/jinja_value.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void jctx_init(jctx *c, lm_error *err) {
    memset(c, 0, sizeof *c);
    c->live.prev = c->live.next = &c->live;
    c->live.refs = JOBJ_IMMORTAL;
    c->max_bytes = (size_t)512 << 20;
    c->max_string = (size_t)16 << 20;
    c->max_items = (size_t)1 << 20;
    c->max_steps = 50000000;
    c->err = err;
}

bool jfail(jctx *c, lm_status code, const char *fmt, ...) {
    if (c->failed) return false; /* keep the first (innermost) message */
    c->failed = true;
    char msg[LM_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lm_fail(c->err, code, "chat template line %u: %s", (unsigned)c->line, msg);
    return false;
}

bool jfail_plain(jctx *c, lm_status code, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    char msg[LM_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lm_fail(c->err, code, "%s", msg);
    return false;
}

static int64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void jctx_set_time_limit(jctx *c, uint64_t ms) {
    c->deadline_ns = ms ? monotonic_ns() + (int64_t)(ms > 86400000 ? 86400000 : ms) * 1000000 : 0;
    c->next_clock_check = c->steps + 65536;
}

bool jctx_charge(jctx *c, uint64_t n) {
    c->steps += n;
    if (c->steps > c->max_steps)
        return jfail(c, LM_ERR_INVALID, "the template did too much work (more than %llu steps)",
                     (unsigned long long)c->max_steps);
    if (c->deadline_ns && c->steps >= c->next_clock_check) {
        c->next_clock_check = c->steps + 65536;
        if (monotonic_ns() > c->deadline_ns)
            return jfail(c, LM_ERR_INVALID, "the template ran past its time limit");
    }
    return true;
}

static const char *python_type(int kind) {
    jv v = {.kind = (uint8_t)kind};
    return jv_type_name(v);
}

void jv_undefined_message(jv v, char *buf, size_t size) {
    const char *name = v.u.name ? v.u.name : "value";
    if (v.aux == 0) {
        snprintf(buf, size, "'%s' is undefined", name);
    } else if (v.aux & JV_UNSAFE_ATTR) {
        snprintf(buf, size, "access to attribute '%s' of '%s' object is unsafe", name,
                 python_type((v.aux & ~JV_UNSAFE_ATTR) - 1));
    } else if (v.aux - 1 == JV_NONE) {
        snprintf(buf, size, "'None' has no attribute '%s'", name);
    } else if (v.u.name) {
        snprintf(buf, size, "'%s object' has no attribute '%s'", python_type(v.aux - 1), name);
    } else {
        snprintf(buf, size, "'%s object' has no such element", python_type(v.aux - 1));
    }
}

static void *jobj_alloc(jctx *c, size_t size, jobj_type type) {
    if (!jctx_charge(c, 1 + size / 256)) return NULL;
    if (c->bytes + size > c->max_bytes || size > c->max_bytes) {
        jfail(c, LM_ERR_NOMEM, "memory limit of %zu bytes exceeded", c->max_bytes);
        return NULL;
    }
    jobj *o = calloc(1, size);
    if (!o) {
        jfail(c, LM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    o->refs = 1;
    o->type = (uint8_t)type;
    o->size = size;
    o->next = c->live.next;
    o->prev = &c->live;
    c->live.next->prev = o;
    c->live.next = o;
    c->bytes += size;
    return o;
}

/* Charges (or refunds, with a negative delta) memory held by an object's
 * arrays, so that the budget covers them too. */
static bool jobj_charge(jctx *c, jobj *o, size_t old_size, size_t new_size) {
    if (new_size > old_size) {
        size_t d = new_size - old_size;
        if (c->bytes + d > c->max_bytes || d > c->max_bytes)
            return jfail(c, LM_ERR_NOMEM, "memory limit of %zu bytes exceeded", c->max_bytes);
        c->bytes += d;
        if (o->refs != JOBJ_IMMORTAL) o->size += d;
    } else {
        size_t d = old_size - new_size;
        c->bytes -= d;
        if (o->refs != JOBJ_IMMORTAL) o->size -= d;
    }
    return true;
}

static void jobj_unlink(jctx *c, jobj *o) {
    o->prev->next = o->next;
    o->next->prev = o->prev;
    o->prev = o->next = NULL;
    c->bytes -= o->size;
}

/* Frees an object's own memory without touching the objects it refers to. */
static void jobj_free_shallow(jobj *o) {
    switch ((jobj_type)o->type) {
    case JO_LIST: free(((jlist *)o)->items); break;
    case JO_DICT: {
        jdict *d = (jdict *)o;
        free(d->keys);
        free(d->vals);
        free(d->slots);
        break;
    }
    case JO_SCOPE: {
        jscope *s = (jscope *)o;
        free(s->names);
        free(s->vals);
        break;
    }
    default: break;
    }
    free(o);
}

/* Drops one reference held by an object being freed; queues the child when
 * it dies too.  Freeing is iterative so that deeply nested values cannot
 * overflow the stack. */
static void drop_child(jctx *c, jobj *child, jobj **pending) {
    if (!child || child->refs == JOBJ_IMMORTAL) return;
    if (--child->refs) return;
    jobj_unlink(c, child);
    child->next = *pending;
    *pending = child;
}

static void drop_value(jctx *c, jv v, jobj **pending) {
    if (jv_is_obj(v)) drop_child(c, v.u.o, pending);
}

void jobj_release(jctx *c, jobj *o) {
    if (!o || o->refs == JOBJ_IMMORTAL) return;
    if (--o->refs) return;
    jobj_unlink(c, o);
    o->next = NULL;
    jobj *pending = o;
    while (pending) {
        jobj *cur = pending;
        pending = cur->next;
        switch ((jobj_type)cur->type) {
        case JO_STR: break;
        case JO_LIST: {
            jlist *l = (jlist *)cur;
            for (size_t i = 0; i < l->len; i++) drop_value(c, l->items[i], &pending);
            break;
        }
        case JO_DICT: {
            jdict *d = (jdict *)cur;
            for (size_t i = 0; i < d->len; i++) {
                drop_value(c, d->keys[i], &pending);
                drop_value(c, d->vals[i], &pending);
            }
            break;
        }
        case JO_MACRO: {
            jmacro *m = (jmacro *)cur;
            drop_child(c, (jobj *)m->closure, &pending);
            drop_value(c, m->caller, &pending);
            break;
        }
        case JO_METHOD: drop_value(c, ((jmethod *)cur)->self, &pending); break;
        case JO_LOOP: {
            jloop *l = (jloop *)cur;
            drop_value(c, l->items, &pending);
            drop_value(c, l->last_changed, &pending);
            drop_child(c, (jobj *)l->scope, &pending);
            break;
        }
        case JO_SCOPE: {
            jscope *s = (jscope *)cur;
            drop_child(c, (jobj *)s->parent, &pending);
            for (size_t i = 0; i < s->len; i++) {
                drop_child(c, (jobj *)s->names[i], &pending);
                drop_value(c, s->vals[i], &pending);
            }
            break;
        }
        }
        jobj_free_shallow(cur);
    }
}

void jv_release(jctx *c, jv v) {
    if (jv_is_obj(v)) jobj_release(c, v.u.o);
}

void jctx_sweep(jctx *c) {
    jobj *o = c->live.next;
    while (o != &c->live) {
        jobj *next = o->next;
        jobj_free_shallow(o);
        o = next;
    }
    c->live.prev = c->live.next = &c->live;
    c->bytes = 0;
}

/* ---- strings ---- */

bool jstr_alloc(jctx *c, size_t len, jstr **out) {
    *out = NULL;
    if (len > c->max_string) {
        jfail(c, LM_ERR_NOMEM, "string of %zu bytes exceeds the limit of %zu", len, c->max_string);
        return false;
    }
    jstr *s = jobj_alloc(c, sizeof(jstr) + len + 1, JO_STR);
    if (!s) return false;
    s->len = len;
    s->data[len] = 0;
    *out = s;
    return true;
}

void jstr_finish(jstr *s) { s->ncp = jutf8_count(s->data, s->len); }

bool jv_new_str(jctx *c, const char *src, size_t len, jv *out) {
    jstr *s;
    if (!jstr_alloc(c, len, &s)) return false;
    if (len) memcpy(s->data, src, len);
    jstr_finish(s);
    *out = jv_obj(JV_STR, s);
    return true;
}

/* ---- lists ---- */

bool jv_new_list(jctx *c, jv_kind kind, size_t cap, jv *out) {
    jlist *l = jobj_alloc(c, sizeof(jlist), JO_LIST);
    if (!l) return false;
    *out = jv_obj(kind, l);
    if (cap) {
        if (cap > c->max_items) cap = c->max_items;
        if (!jobj_charge(c, &l->h, 0, cap * sizeof(jv))) goto fail;
        l->items = malloc(cap * sizeof(jv));
        if (!l->items) {
            jfail(c, LM_ERR_NOMEM, "out of memory");
            goto fail;
        }
        l->cap = cap;
    }
    return true;
fail:
    jv_release(c, *out);
    return false;
}

bool jlist_push(jctx *c, jlist *l, jv item) {
    if (l->len == l->cap) {
        if (l->len >= c->max_items) {
            jv_release(c, item);
            return jfail(c, LM_ERR_NOMEM, "list longer than %zu items", c->max_items);
        }
        size_t cap = l->cap ? l->cap * 2 : 4;
        if (cap > c->max_items) cap = c->max_items;
        if (!jobj_charge(c, &l->h, l->cap * sizeof(jv), cap * sizeof(jv))) {
            jv_release(c, item);
            return false;
        }
        jv *items = realloc(l->items, cap * sizeof(jv));
        if (!items) {
            jobj_charge(c, &l->h, cap * sizeof(jv), l->cap * sizeof(jv));
            jv_release(c, item);
            return jfail(c, LM_ERR_NOMEM, "out of memory");
        }
        l->items = items;
        l->cap = cap;
    }
    l->items[l->len++] = item;
    return true;
}

/* ---- dicts ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_int(int64_t i) {
    uint64_t x = (uint64_t)i;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* Equal keys must hash equally: 1, 1.0 and True are one key in Python. */
static uint64_t jv_hash(jv v) {
    switch ((jv_kind)v.kind) {
    case JV_STR: return hash_bytes(jv_str(v)->data, jv_str(v)->len);
    case JV_INT: return hash_int(v.u.i);
    case JV_BOOL: return hash_int(v.u.b);
    case JV_FLOAT:
        if (v.u.f >= -9.2e18 && v.u.f <= 9.2e18 && v.u.f == (double)(int64_t)v.u.f)
            return hash_int((int64_t)v.u.f);
        {
            uint64_t bits;
            memcpy(&bits, &v.u.f, sizeof bits);
            return hash_int((int64_t)bits);
        }
    case JV_TUPLE: {
        uint64_t h = 7;
        for (size_t i = 0; i < jv_list(v)->len; i++) h = h * 31 + jv_hash(jv_list(v)->items[i]);
        return h;
    }
    default: return 0x9e3779b97f4a7c15ull;
    }
}

bool jv_hashable(jv v) {
    switch ((jv_kind)v.kind) {
    case JV_LIST:
    case JV_DICT: return false;
    case JV_TUPLE:
        for (size_t i = 0; i < jv_list(v)->len; i++)
            if (!jv_hashable(jv_list(v)->items[i])) return false;
        return true;
    default: return true;
    }
}

bool jv_new_dict(jctx *c, jv_kind kind, jv *out) {
    jdict *d = jobj_alloc(c, sizeof(jdict), JO_DICT);
    if (!d) return false;
    *out = jv_obj(kind, d);
    return true;
}

#define DICT_INDEX_MIN 8

static void dict_index_insert(jdict *d, size_t entry) {
    size_t mask = d->nslots - 1;
    size_t i = (size_t)jv_hash(d->keys[entry]) & mask;
    while (d->slots[i]) i = (i + 1) & mask;
    d->slots[i] = (uint32_t)(entry + 1);
}

static bool dict_reindex(jctx *c, jdict *d, size_t nslots) {
    if (!jobj_charge(c, &d->h, d->nslots * sizeof(uint32_t), nslots * sizeof(uint32_t)))
        return false;
    uint32_t *slots = calloc(nslots, sizeof(uint32_t));
    if (!slots) {
        jobj_charge(c, &d->h, nslots * sizeof(uint32_t), d->nslots * sizeof(uint32_t));
        return jfail(c, LM_ERR_NOMEM, "out of memory");
    }
    free(d->slots);
    d->slots = slots;
    d->nslots = nslots;
    for (size_t e = 0; e < d->len; e++) dict_index_insert(d, e);
    return true;
}

jv *jdict_get(const jdict *d, jv key) {
    if (d->slots) {
        size_t mask = d->nslots - 1;
        for (size_t i = (size_t)jv_hash(key) & mask; d->slots[i]; i = (i + 1) & mask) {
            size_t e = d->slots[i] - 1;
            if (jv_equal(d->keys[e], key)) return &d->vals[e];
        }
        return NULL;
    }
    for (size_t e = 0; e < d->len; e++)
        if (jv_equal(d->keys[e], key)) return &d->vals[e];
    return NULL;
}

jv *jdict_get_str(const jdict *d, const char *key, size_t len) {
    if (d->slots) {
        size_t mask = d->nslots - 1;
        for (size_t i = (size_t)hash_bytes(key, len) & mask; d->slots[i]; i = (i + 1) & mask) {
            size_t e = d->slots[i] - 1;
            jv k = d->keys[e];
            if (k.kind == JV_STR && jv_str(k)->len == len && memcmp(jv_str(k)->data, key, len) == 0)
                return &d->vals[e];
        }
        return NULL;
    }
    for (size_t e = 0; e < d->len; e++) {
        jv k = d->keys[e];
        if (k.kind == JV_STR && jv_str(k)->len == len && memcmp(jv_str(k)->data, key, len) == 0)
            return &d->vals[e];
    }
    return NULL;
}

bool jdict_set(jctx *c, jdict *d, jv key, jv val) {
    if (!jv_hashable(key)) {
        jv_release(c, key);
        jv_release(c, val);
        return jfail(c, LM_ERR_FORMAT, "unhashable type: '%s'", jv_type_name(key));
    }
    jv *slot = jdict_get(d, key);
    if (slot) { /* Python keeps the first key object and replaces the value */
        jv old = *slot;
        *slot = val;
        jv_release(c, old);
        jv_release(c, key);
        return true;
    }
    if (d->len == d->cap) {
        if (d->len >= c->max_items) {
            jv_release(c, key);
            jv_release(c, val);
            return jfail(c, LM_ERR_NOMEM, "dict larger than %zu items", c->max_items);
        }
        size_t cap = d->cap ? d->cap * 2 : 4;
        if (cap > c->max_items) cap = c->max_items;
        bool ok = jobj_charge(c, &d->h, 2 * d->cap * sizeof(jv), 2 * cap * sizeof(jv));
        jv *keys = ok ? realloc(d->keys, cap * sizeof(jv)) : NULL;
        if (keys) d->keys = keys;
        jv *vals = keys ? realloc(d->vals, cap * sizeof(jv)) : NULL;
        if (vals) d->vals = vals;
        if (!vals) {
            if (ok) jobj_charge(c, &d->h, 2 * cap * sizeof(jv), 2 * d->cap * sizeof(jv));
            jv_release(c, key);
            jv_release(c, val);
            return ok ? jfail(c, LM_ERR_NOMEM, "out of memory") : false;
        }
        d->cap = cap;
    }
    d->keys[d->len] = key;
    d->vals[d->len] = val;
    d->len++;
    if (d->len > DICT_INDEX_MIN) {
        if (d->len * 2 > d->nslots) {
            size_t nslots = 32;
            while (nslots < d->len * 4) nslots *= 2;
            if (!dict_reindex(c, d, nslots))
                return false; /* entry stays, unindexed dict is still valid */
        } else {
            dict_index_insert(d, d->len - 1);
        }
    }
    return true;
}

/* ---- methods ---- */

bool jv_new_method(jctx *c, jv self, int id, jv *out) {
    jmethod *m = jobj_alloc(c, sizeof(jmethod), JO_METHOD);
    if (!m) return false;
    m->self = jv_retain(self);
    m->id = id;
    *out = jv_obj(JV_METHOD, m);
    return true;
}

bool jv_new_macro(jctx *c, const struct jnode *node, const char *name, jscope *closure, jv caller,
                  jv *out) {
    jmacro *m = jobj_alloc(c, sizeof(jmacro), JO_MACRO);
    if (!m) return false;
    m->node = node;
    m->name = name;
    m->closure = closure;
    if (closure && closure->h.refs != JOBJ_IMMORTAL) closure->h.refs++;
    m->caller = jv_retain(caller);
    *out = jv_obj(JV_MACRO, m);
    return true;
}

bool jv_new_loop(jctx *c, jv items, const struct jnode *node, jscope *scope, int depth, jv *out) {
    jloop *l = jobj_alloc(c, sizeof(jloop), JO_LOOP);
    if (!l) return false;
    l->items = jv_retain(items);
    l->depth = depth;
    l->node = node;
    l->scope = scope;
    if (scope && scope->h.refs != JOBJ_IMMORTAL) scope->h.refs++;
    l->last_changed = jv_undef(NULL);
    *out = jv_obj(JV_LOOP, l);
    return true;
}

/* ---- scopes ---- */

bool jscope_new(jctx *c, jscope *parent, jscope **out) {
    jscope *s = jobj_alloc(c, sizeof(jscope), JO_SCOPE);
    if (!s) return false;
    if (parent) {
        s->parent = parent;
        if (parent->h.refs != JOBJ_IMMORTAL) parent->h.refs++;
    }
    *out = s;
    return true;
}

jv *jscope_lookup(jscope *s, const char *name, size_t len) {
    for (; s; s = s->parent)
        for (size_t i = s->len; i-- > 0;)
            if (s->names[i]->len == len && memcmp(s->names[i]->data, name, len) == 0)
                return &s->vals[i];
    return NULL;
}

bool jscope_set(jctx *c, jscope *s, jstr *name, jv val) {
    for (size_t i = 0; i < s->len; i++)
        if (s->names[i]->len == name->len &&
            memcmp(s->names[i]->data, name->data, name->len) == 0) {
            jv old = s->vals[i];
            s->vals[i] = val;
            jv_release(c, old);
            return true;
        }
    if (s->len == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        if (s->len >= c->max_items) {
            jv_release(c, val);
            return jfail(c, LM_ERR_NOMEM, "too many variables");
        }
        if (!jobj_charge(c, &s->h, s->cap * (sizeof(jv) + sizeof(jstr *)),
                         cap * (sizeof(jv) + sizeof(jstr *)))) {
            jv_release(c, val);
            return false;
        }
        jstr **names = realloc(s->names, cap * sizeof(jstr *));
        if (names) s->names = names;
        jv *vals = names ? realloc(s->vals, cap * sizeof(jv)) : NULL;
        if (vals) s->vals = vals;
        if (!vals) {
            jv_release(c, val);
            return jfail(c, LM_ERR_NOMEM, "out of memory");
        }
        s->cap = cap;
    }
    if (name->h.refs != JOBJ_IMMORTAL) name->h.refs++;
    s->names[s->len] = name;
    s->vals[s->len] = val;
    s->len++;
    return true;
}

/* ---- Python semantics ---- */

bool jv_truthy(jv v) {
    switch ((jv_kind)v.kind) {
    case JV_UNDEFINED:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return jv_str(v)->len != 0;
    case JV_LIST:
    case JV_TUPLE: return jv_list(v)->len != 0;
    case JV_DICT: return jv_dict(v)->len != 0;
    default: return true;
    }
}

static double num_as_double(jv v) {
    return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b;
}

static bool equal_depth(jv a, jv b, int depth) {
    if (depth > 200) return false;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = a.kind == JV_INT ? a.u.i : a.u.b, y = b.kind == JV_INT ? b.u.i : b.u.b;
            return x == y;
        }
        if (a.kind == JV_INT && b.kind == JV_FLOAT && (double)a.u.i == b.u.f)
            return b.u.f >= -9.2e18 && b.u.f <= 9.2e18 && (int64_t)b.u.f == a.u.i;
        if (b.kind == JV_INT && a.kind == JV_FLOAT && (double)b.u.i == a.u.f)
            return a.u.f >= -9.2e18 && a.u.f <= 9.2e18 && (int64_t)a.u.f == b.u.i;
        return num_as_double(a) == num_as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch ((jv_kind)a.kind) {
    case JV_UNDEFINED:
    case JV_NONE: return true;
    case JV_STR:
        return jv_str(a)->len == jv_str(b)->len &&
               memcmp(jv_str(a)->data, jv_str(b)->data, jv_str(a)->len) == 0;
    case JV_LIST:
    case JV_TUPLE: {
        jlist *x = jv_list(a), *y = jv_list(b);
        if (x->len != y->len) return false;
        for (size_t i = 0; i < x->len; i++)
            if (!equal_depth(x->items[i], y->items[i], depth + 1)) return false;
        return true;
    }
    case JV_DICT: {
        jdict *x = jv_dict(a), *y = jv_dict(b);
        if (x->len != y->len) return false;
        for (size_t i = 0; i < x->len; i++) {
            jv *other = jdict_get(y, x->keys[i]);
            if (!other || !equal_depth(x->vals[i], *other, depth + 1)) return false;
        }
        return true;
    }
    case JV_BUILTIN: return a.u.builtin == b.u.builtin;
    default: return a.u.o == b.u.o;
    }
}

bool jv_equal(jv a, jv b) { return equal_depth(a, b, 0); }

const char *jv_type_name(jv v) {
    switch ((jv_kind)v.kind) {
    case JV_UNDEFINED: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return "list";
    case JV_TUPLE: return "tuple";
    case JV_DICT: return "dict";
    case JV_NAMESPACE: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_METHOD: return "method";
    case JV_BUILTIN: return "function";
    case JV_LOOP: return "LoopContext";
    }
    return "?";
}

/* ---- UTF-8 ---- */

size_t jutf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c0 = s[0];
    if (c0 < 0x80) {
        *cp = c0;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if ((c0 & 0xE0) == 0xC0)
        len = 2, v = c0 & 0x1F, min = 0x80;
    else if ((c0 & 0xF0) == 0xE0)
        len = 3, v = c0 & 0x0F, min = 0x800;
    else if ((c0 & 0xF8) == 0xF0)
        len = 4, v = c0 & 0x07, min = 0x10000;
    else
        goto invalid;
    if (len > n) goto invalid;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) goto invalid;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF) goto invalid;
    *cp = v;
    return len;
invalid: /* a stray byte counts as one code point of its own */
    *cp = 0xFFFD;
    return 1;
}

size_t jutf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x10000) return jutf8_encode(cp, out);
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t jutf8_count(const char *s, size_t n) {
    /* every byte but a continuation byte starts a code point (exact for
     * valid UTF-8, which is all the engine lets in) */
    size_t count = 0;
    for (size_t i = 0; i < n; i++) count += ((unsigned char)s[i] & 0xC0) != 0x80;
    return count;
}

size_t jutf8_offset(const jstr *s, size_t index) {
    if (s->ncp == s->len) return index;
    if (index >= s->ncp) return s->len;
    if (index > s->ncp / 2) { /* nearer the end: walk back over code point starts */
        size_t back = s->ncp - index, i = s->len;
        while (back > 0 && i > 0) {
            i--;
            if (((unsigned char)s->data[i] & 0xC0) != 0x80) back--;
        }
        return i;
    }
    size_t i = 0;
    while (index > 0 && i < s->len) {
        i++;
        while (i < s->len && ((unsigned char)s->data[i] & 0xC0) == 0x80) i++;
        index--;
    }
    return i;
}

bool jutf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = jutf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp == 0xFFFD && !(k == 3 && (unsigned char)s[i] == 0xEF)) return false;
        i += k;
    }
    return true;
}

bool jcp_isspace(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t jutf8_space_len(const char *s, size_t n) {
    if (n == 0) return 0;
    uint32_t cp;
    size_t k = jutf8_decode((const unsigned char *)s, n, &cp);
    return jcp_isspace(cp) ? k : 0;
}
