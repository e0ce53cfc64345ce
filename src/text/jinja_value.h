/* Values of the chat-template engine (a Jinja2 subset).
 *
 * A value (jv) is a small tagged union: scalars inline, everything else a
 * reference-counted heap object.  Every heap object made during one render is
 * also linked into that render's live list (jctx.live), so that reference
 * cycles (a macro stored in the scope it closes over, a namespace holding
 * itself) are still freed when the render ends: jctx_sweep frees whatever is
 * left.  Objects owned by a compiled template (string constants) are
 * "immortal": their count is never touched, so several threads can render one
 * compiled template at once.
 *
 * Semantics follow Python, as Jinja2 does: ints are 64-bit (overflow is an
 * error rather than a bignum), floats print like Python's repr, dicts keep
 * insertion order, strings are UTF-8 and indexed by code point. */
#ifndef LOOM_TEXT_JINJA_VALUE_H
#define LOOM_TEXT_JINJA_VALUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum {
    JV_UNDEFINED,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_TUPLE, /* a jlist that prints as (a, b) */
    JV_DICT,
    JV_NAMESPACE, /* a jdict of attributes made by namespace() */
    JV_MACRO,
    JV_METHOD,  /* a bound method: "abc".upper, d.items, loop.cycle */
    JV_BUILTIN, /* a global function: range, namespace, raise_exception... */
    JV_LOOP,    /* the `loop` variable of a for loop */
} jv_kind;

typedef enum { JO_STR, JO_LIST, JO_DICT, JO_MACRO, JO_METHOD, JO_LOOP, JO_SCOPE } jobj_type;

#define JOBJ_IMMORTAL UINT32_MAX
#define JV_UNSAFE_ATTR 128
#define JV_MARKUP 1

typedef struct jobj {
    uint32_t refs;
    uint8_t type;
    struct jobj *prev, *next; /* the render's live list; unused when immortal */
    size_t size;              /* bytes charged to the render's memory budget */
} jobj;

typedef struct {
    uint8_t kind;
    /* JV_UNDEFINED: 0 when a name is undefined, else 1 + the jv_kind of the
     * object that lacks the attribute (+ JV_UNSAFE_ATTR when the sandbox
     * refused it), for error messages.  JV_STR: JV_MARKUP for a string made
     * by |safe or |escape (Jinja2's Markup: `+` escapes the other operand). */
    uint8_t aux;
    union {
        bool b;
        int64_t i;
        double f;
        jobj *o;
        int builtin;
        const char *name; /* JV_UNDEFINED: the missing name (immortal) or NULL */
    } u;
} jv;

typedef struct jstr {
    jobj h;
    size_t len;  /* bytes */
    size_t ncp;  /* code points */
    char data[]; /* NUL-terminated */
} jstr;

typedef struct jlist {
    jobj h;
    size_t len, cap;
    jv *items;
} jlist;

typedef struct jdict {
    jobj h;
    size_t len, cap;
    jv *keys, *vals;
    uint32_t *slots; /* open-addressing index (entry + 1, 0 = empty) once len > 8 */
    size_t nslots;
} jdict;

struct jnode;
struct jscope;

typedef struct jmacro {
    jobj h;
    const struct jnode *node; /* JN_MACRO or JN_CALLBLOCK */
    const char *name;         /* immortal: "caller" for call blocks */
    struct jscope *closure;   /* the scope it was defined in (retained) */
    jv caller;                /* for a macro invoked by {% call %}: none otherwise */
} jmacro;

typedef struct jmethod {
    jobj h;
    jv self;
    int id;
} jmethod;

typedef struct jloop {
    jobj h;
    jv items; /* the list being iterated */
    size_t index0;
    int depth;
    const struct jnode *node; /* the JN_FOR, for loop(...) in a recursive loop */
    struct jscope *scope;     /* the scope the loop runs in (retained) */
    jv last_changed;          /* loop.changed()'s previous arguments; undefined at first */
} jloop;

typedef struct jscope {
    jobj h;
    struct jscope *parent; /* retained */
    size_t len, cap;
    jstr **names;
    jv *vals;
} jscope;

/* Limits and error state shared by everything that runs during one render. */
typedef struct jctx {
    jobj live;         /* sentinel of the live-object list */
    size_t bytes;      /* bytes held by live objects */
    size_t max_bytes;  /* memory budget for values */
    size_t max_string; /* bound on any one string (the output bound) */
    size_t max_items;  /* bound on one list or dict */
    uint32_t line;     /* template line being evaluated, for messages */
    uint64_t steps;    /* work done: evaluation steps plus bytes allocated or copied / 256 */
    uint64_t max_steps;
    uint64_t next_clock_check; /* steps at which the wall clock is read next */
    int64_t
        deadline_ns; /* CLOCK_MONOTONIC deadline, 0 = none: a safety net for work the steps miss */
    lm_error *err;
    bool failed;
} jctx;

void jctx_init(jctx *c, lm_error *err);
/* Frees every object still alive (cycles included). */
void jctx_sweep(jctx *c);
/* Fails with "chat template line N: ..." and returns false. */
bool jfail(jctx *c, lm_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Fails with the message as given (no line: errors in the context data). */
bool jfail_plain(jctx *c, lm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline jv jv_undef(const char *name) {
    jv v = {.kind = JV_UNDEFINED};
    v.u.name = name;
    return v;
}
/* The undefined result of obj.name when obj has no such attribute. */
static inline jv jv_undef_attr(jv obj, const char *name) {
    jv v = jv_undef(name);
    v.aux = (uint8_t)(1 + obj.kind);
    return v;
}
static inline jv jv_none(void) {
    jv v = {.kind = JV_NONE};
    v.u.i = 0;
    return v;
}
static inline jv jv_bool(bool b) {
    jv v = {.kind = JV_BOOL};
    v.u.i = 0;
    v.u.b = b;
    return v;
}
static inline jv jv_int(int64_t i) {
    jv v = {.kind = JV_INT};
    v.u.i = i;
    return v;
}
static inline jv jv_float(double f) {
    jv v = {.kind = JV_FLOAT};
    v.u.f = f;
    return v;
}
static inline jv jv_obj(jv_kind k, void *o) {
    jv v = {.kind = (uint8_t)k};
    v.u.o = (jobj *)o;
    return v;
}
static inline jv jv_builtin(int id) {
    jv v = {.kind = JV_BUILTIN};
    v.u.i = 0;
    v.u.builtin = id;
    return v;
}

static inline bool jv_is_markup(jv v) { return v.kind == JV_STR && (v.aux & JV_MARKUP); }
static inline jv jv_as_markup(jv v) {
    if (v.kind == JV_STR) v.aux |= JV_MARKUP;
    return v;
}
static inline bool jv_is_obj(jv v) { return v.kind >= JV_STR && v.kind != JV_BUILTIN; }
static inline jstr *jv_str(jv v) { return (jstr *)v.u.o; }
static inline jlist *jv_list(jv v) { return (jlist *)v.u.o; }
static inline jdict *jv_dict(jv v) { return (jdict *)v.u.o; }
static inline bool jv_is_seq(jv v) { return v.kind == JV_LIST || v.kind == JV_TUPLE; }
static inline bool jv_is_num(jv v) {
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

static inline jv jv_retain(jv v) {
    if (jv_is_obj(v) && v.u.o->refs != JOBJ_IMMORTAL) v.u.o->refs++;
    return v;
}
void jv_release(jctx *c, jv v);
void jobj_release(jctx *c, jobj *o);

/* Constructors: each returns false (with the error set) when a bound is hit. */
bool jv_new_str(jctx *c, const char *s, size_t len, jv *out);
bool jv_new_list(jctx *c, jv_kind kind, size_t cap, jv *out);
bool jv_new_dict(jctx *c, jv_kind kind, jv *out);
bool jv_new_method(jctx *c, jv self, int id, jv *out);
bool jv_new_macro(jctx *c, const struct jnode *node, const char *name, jscope *closure, jv caller,
                  jv *out);
/* A loop object over items (a list, retained) of the for loop node running
 * in scope (retained) at depth (1 for the outermost call). */
bool jv_new_loop(jctx *c, jv items, const struct jnode *node, jscope *scope, int depth, jv *out);
/* Appends, taking ownership of item (released on failure). */
bool jlist_push(jctx *c, jlist *l, jv item);
/* Sets key to val, taking ownership of both (released on failure). */
bool jdict_set(jctx *c, jdict *d, jv key, jv val);
/* Borrowed pointer to the value of key, NULL when absent. */
jv *jdict_get(const jdict *d, jv key);
jv *jdict_get_str(const jdict *d, const char *key, size_t len);

/* Scopes (variables). */
bool jscope_new(jctx *c, jscope *parent, jscope **out);
/* Looks a name up through the parents; NULL when absent. */
jv *jscope_lookup(jscope *s, const char *name, size_t len);
/* Binds name in s itself, taking ownership of val; name is retained. */
bool jscope_set(jctx *c, jscope *s, jstr *name, jv val);

/* Allocates a string object with room for len bytes (data[len] = 0) that the
 * caller fills; call jstr_finish afterwards to count code points. */
bool jstr_alloc(jctx *c, size_t len, jstr **out);
void jstr_finish(jstr *s);

/* Arms a wall-clock limit (0 = none), checked every 65536 steps. */
void jctx_set_time_limit(jctx *c, uint64_t ms);
/* Charges n steps of work; fails once the budget or the time is spent. */
bool jctx_charge(jctx *c, uint64_t n);
/* The message Jinja2 gives when an undefined value is used:
 * "'x' is undefined", "'dict object' has no attribute 'x'". */
void jv_undefined_message(jv v, char *buf, size_t size);

/* Python semantics. */
bool jv_truthy(jv v);
/* a == b (deep); the depth guard turns self-containing values into false. */
bool jv_equal(jv a, jv b);
/* Python's type names, for messages: 'str', 'int', 'list', 'dict'... */
const char *jv_type_name(jv v);
bool jv_hashable(jv v);

/* UTF-8 helpers. */
size_t jutf8_decode(const unsigned char *s, size_t n, uint32_t *cp); /* bytes used (>= 1) */
size_t jutf8_encode(uint32_t cp, char out[4]);
size_t jutf8_count(const char *s, size_t n);
/* Byte offset of code point index i (i <= ncp). */
size_t jutf8_offset(const jstr *s, size_t i);
bool jutf8_valid(const char *s, size_t n);
/* Python str.isspace for one code point. */
bool jcp_isspace(uint32_t cp);
/* Length in bytes of the whitespace code point at s, 0 when not whitespace. */
size_t jutf8_space_len(const char *s, size_t n);

#endif
