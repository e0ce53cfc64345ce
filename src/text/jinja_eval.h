/* The evaluator's internal interface: one jrt per render, shared by the
 * expression evaluator, the statement executor, filters, tests and methods. */
#ifndef LOOM_TEXT_JINJA_EVAL_H
#define LOOM_TEXT_JINJA_EVAL_H

#include "text/jinja_ast.h"
#include "text/jinja_print.h"

typedef struct {
    uint64_t max_loop_iterations; /* total over the render */
    int max_macro_depth;          /* nested macro calls */
    size_t max_output;            /* bytes of output (and of any one string) */
    size_t max_memory;            /* bytes held by values at one time */
    uint64_t max_steps;           /* evaluation work */
    uint64_t max_time_ms;         /* wall clock, 0 = unlimited */
    bool has_now;                 /* strftime_now uses `now` (UTC) instead of the clock */
    int64_t now;                  /* unix seconds */
} jrender_limits;

void jrender_limits_default(jrender_limits *l);

typedef struct jrt {
    jctx c;
    jbuf *out; /* where statements write */
    uint64_t iterations;
    int depth; /* evaluator recursion */
    int macro_depth;
    int loop_ctl; /* JCTL_BREAK / JCTL_CONTINUE pending */
    jrender_limits limits;
    jstr *names; /* "loop", "caller", "varargs", "kwargs" (immortal, one allocation) */
    jstr *name_loop, *name_caller, *name_varargs, *name_kwargs;
} jrt;

/* One render: init, build the context with rt->c, render, destroy (which
 * frees every value made on the way, the context included). */
bool jrt_init(jrt *rt, const jrender_limits *limits, lm_error *err);
/* Renders t with the variables of context (a dict, borrowed); *out is
 * malloc'd and NUL-terminated. */
bool jrt_render(jrt *rt, const jtemplate *t, jv context, char **out, size_t *out_len);
void jrt_destroy(jrt *rt);

enum { JCTL_NONE, JCTL_BREAK, JCTL_CONTINUE };

/* Evaluator recursion bound (expressions, statements and macro bodies). */
#define JINJA_EVAL_DEPTH_MAX 1500

/* Evaluated call arguments: positional values, then keyword (name, value). */
typedef struct {
    jv *pos;
    size_t npos;
    const jnode **kwnodes; /* JN_KWARG nodes (their value is the name) */
    jv *kw;
    size_t nkw;
} jargs;

/* Evaluates node to an owned value. */
bool jeval(jrt *rt, jscope *s, const jnode *n, jv *out);
/* Evaluates args/kwargs held in n->list and n->list2. */
bool jargs_eval(jrt *rt, jscope *s, const jnode *n, jargs *a);
void jargs_free(jrt *rt, jargs *a);
/* Positional argument i, else keyword `name`, else NULL (borrowed). */
jv *jargs_get(jargs *a, size_t i, const char *name);
/* Fails when more positionals than max or an unknown keyword was passed. */
bool jargs_check(jrt *rt, jargs *a, size_t max_pos, const char *const *names, const char *what);

/* Runs a block's statements, writing to rt->out. */
bool jexec_block(jrt *rt, jscope *s, const jnode *block);
/* Calls a macro value with evaluated arguments; the result is a string. */
bool jcall_macro(jrt *rt, jmacro *m, jargs *a, jv caller, jv *out);

/* Attribute and item access with Jinja2's sandboxed getattr/getitem rules. */
bool jgetattr(jrt *rt, jv obj, jstr *name, jv *out);
bool jgetitem(jrt *rt, jv obj, jv key, jv *out);
/* Python's getattr alone (the attr filter): dict keys are not attributes. */
bool jgetattr_strict(jrt *rt, jv obj, jstr *name, jv *out);
/* Fails with the undefined value's message when v is undefined. */
bool jcheck_defined(jrt *rt, jv v);

/* Operators (Python semantics). */
bool jbinop(jrt *rt, int op, jv a, jv b, jv *out);
bool jcompare(jrt *rt, int op, jv a, jv b, bool *result);
/* Three-way Python ordering for sorting; fails on unorderable types. */
bool jorder(jrt *rt, jv a, jv b, int *result);
/* Items of an iterable as an owned list (str: characters, dict: keys,
 * undefined: empty). */
bool jiterate(jrt *rt, jv v, jv *out_list);
/* len(v). */
bool jlength(jrt *rt, jv v, int64_t *out);

/* Filters, tests, methods and global functions. */
bool jfilter_apply(jrt *rt, jscope *s, const jnode *f, jv input, jv *out);
/* Applies a filter chain whose innermost input is NULL (filter and set blocks). */
bool jfilter_chain(jrt *rt, jscope *s, const jnode *f, jv input, jv *out);
bool jfilter_by_name(jrt *rt, const char *name, jv input, jv *extra, size_t nextra, jv *out);
bool jtest_apply(jrt *rt, jscope *s, const jnode *t, jv input, bool *result);
bool jtest_by_name(jrt *rt, const char *name, jv input, jv *extra, size_t nextra, bool *result);
bool jmethod_call(jrt *rt, jv self, int id, jargs *a, jv *out);
bool jbuiltin_call(jrt *rt, int id, jargs *a, jv *out);
/* loop(items) in a recursive for loop: the body rendered for items, one level deeper. */
bool jloop_call(jrt *rt, jloop *l, jargs *a, jv *out);
/* The attribute of a loop object (index, first...); false when unknown. */
bool jloop_attr(jrt *rt, jloop *l, const char *name, jv *out, bool *found);

/* String helpers shared by filters and methods. */
bool jstr_case(jrt *rt, jv s, int mode,
               jv *out); /* mode: JM_UPPER, JM_LOWER, JM_TITLE, JM_CAPITALIZE, JM_SWAPCASE */
/* Python's str.splitlines(keepends). */
bool jstr_splitlines(jrt *rt, jv s, bool keepends, jv *out);
/* Jinja's title filter (differs from Python's str.title). */
bool jstr_jinja_title(jrt *rt, jv s, jv *out);
bool jstr_strip(jrt *rt, jv s, jv chars, bool left, bool right, jv *out);
bool jstr_replace(jrt *rt, jv s, jv old, jv rep, int64_t count, jv *out);
bool jstr_split(jrt *rt, jv s, jv sep, int64_t maxsplit, bool from_right, jv *out);
bool jstr_slice(jrt *rt, jv s, size_t byte_start, size_t byte_end, jv *out);
/* Markup stays as it is; any other value becomes its HTML-escaped str(), as Markup. */
bool jmarkup_escape(jrt *rt, jv v, jv *out);
/* Python's printf-style `fmt % args`. */
bool jstr_percent(jrt *rt, jv fmt, jv args, jv *out);

#endif
