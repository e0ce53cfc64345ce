/* The syntax tree of a compiled template.  A compiled template is read-only
 * after jtemplate_compile: renders only read it, so one template can be
 * rendered by several threads at once. */
#ifndef LOOM_TEXT_JINJA_AST_H
#define LOOM_TEXT_JINJA_AST_H

#include "text/jinja_value.h"

typedef enum {
    /* expressions */
    JN_CONST,   /* value */
    JN_NAME,    /* value: the name */
    JN_LIST,    /* list: items */
    JN_TUPLE,   /* list: items */
    JN_DICT,    /* list: keys, list2: values */
    JN_GETATTR, /* a.value */
    JN_GETITEM, /* a[b] */
    JN_SLICE,   /* a:b:c, each may be NULL (only as a JN_GETITEM index) */
    JN_CALL,    /* a(list..., list2...) */
    JN_KWARG,   /* value=a */
    JN_FILTER,  /* a|value(list..., list2...), op: filter id; a is NULL in filter blocks */
    JN_TEST,    /* a is value(list...), op: test id */
    JN_NOT,     /* not a */
    JN_NEG,     /* -a */
    JN_POS,     /* +a */
    JN_BINOP,   /* a op b, op: JOP_ADD, SUB, MUL, DIV, FLOORDIV, MOD, POW */
    JN_CONCAT,  /* list[0] ~ list[1] ~ ... */
    JN_AND,     /* a and b */
    JN_OR,      /* a or b */
    JN_COMPARE, /* a, then list: JN_OPERAND (op: JOP_EQ... or JCMP_IN/NOTIN, a: operand) */
    JN_OPERAND,
    JN_CONDEXPR, /* b if a else c (c may be NULL) */
    /* statements */
    JN_BLOCK,    /* list: statements */
    JN_TEXT,     /* value: template text */
    JN_PRINT,    /* {{ a }} */
    JN_IF,       /* list: conditions, list2: bodies (JN_BLOCK), c: else body or NULL */
    JN_FOR,      /* for a in b [if c]: d [else e]; flag: recursive */
    JN_SET,      /* set a = b; a: JN_NAME, JN_TUPLE of names, or JN_NSREF */
    JN_SETBLOCK, /* set a [| c]: d endset */
    JN_NSREF,    /* a (JN_NAME).value */
    JN_MACRO, /* value: name, list: params (JN_NAME), list2: defaults of the last params, d: body */
    JN_CALLBLOCK,   /* call(list = params, list2 = defaults) a: d */
    JN_FILTERBLOCK, /* filter c: d */
    JN_WITH,        /* with list = targets, list2 = values: d */
    JN_BREAK,
    JN_CONTINUE,
} jnode_kind;

enum { JCMP_IN = 100, JCMP_NOTIN = 101 };

typedef struct jnode {
    uint8_t kind;
    uint8_t flag;
    int16_t op;
    uint16_t depth; /* height of the subtree, bounded at compile time */
    uint32_t line;
    struct jnode *a, *b, *c, *d, *e;
    struct jnode **list, **list2;
    uint32_t nlist, nlist2;
    jv value; /* constants and names: immortal, owned by the template */
} jnode;

typedef struct jarena_chunk jarena_chunk;

typedef struct jtemplate {
    jarena_chunk *chunks;
    jnode *root; /* JN_BLOCK */
} jtemplate;

/* The height of the syntax tree is bounded so that evaluating it cannot
 * exhaust the stack. */
#define JINJA_TREE_DEPTH_MAX 200
#define JINJA_TEMPLATE_MAX_BYTES ((size_t)1 << 20)

lm_status jtemplate_compile(const char *src, size_t len, jtemplate **out, lm_error *err);
void jtemplate_free(jtemplate *t);

/* Arena allocation for the tree (zeroed); NULL when out of memory. */
void *jarena_alloc(jtemplate *t, size_t size);
/* An immortal string owned by the template. */
jstr *jarena_str(jtemplate *t, const char *s, size_t len);

#endif
