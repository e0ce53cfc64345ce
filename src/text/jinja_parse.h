/* The parser's internals, shared by the expression grammar
 * (jinja_parse_expr.c) and the statement grammar (jinja_parser.c). */
#ifndef LOOM_TEXT_JINJA_PARSE_H
#define LOOM_TEXT_JINJA_PARSE_H

#include <stdbool.h>
#include <string.h>

#include "text/jinja_ast.h"
#include "text/jinja_lexer.h"

typedef struct {
    const jtokens *tk;
    size_t i;
    jtemplate *tpl;
    lm_error *err;
    bool failed;
    int soft;       /* inside an if or conditional expression: unknown filters wait for runtime */
    int loops;      /* enclosing for loops (for break/continue) */
    int statements; /* open block statements (bounds recursion while parsing) */
    int nesting;    /* open sub-expressions (bounds recursion while parsing) */
} parser;

static inline const jtok *cur(const parser *P) { return &P->tk->toks[P->i]; }
static inline const jtok *look(const parser *P) {
    return P->i + 1 < P->tk->n ? &P->tk->toks[P->i + 1] : &P->tk->toks[P->tk->n - 1];
}
static inline void advance(parser *P) {
    if (P->tk->toks[P->i].type != JT_EOF) P->i++;
}
static inline bool tok_is_name(const jtok *t, const char *name) {
    return t->type == JT_NAME && t->len == strlen(name) && memcmp(t->text, name, t->len) == 0;
}
static inline bool tok_is_op(const jtok *t, jop op) { return t->type == JT_OP && t->op == op; }

/* A growable list of child nodes, copied into the arena when done. */
typedef struct {
    jnode **items;
    uint32_t n, cap;
} nodevec;

/* Fails with "chat template line N: ..." (once) and returns NULL. */
void *jp_fail(parser *P, uint32_t line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void *jp_unexpected(parser *P);
void jp_describe(const jtok *t, char *buf, size_t size);
bool jp_expect_op(parser *P, jop op);
bool jp_expect_type(parser *P, jtok_type type, const char *what);
/* A zeroed node from the template's arena. */
jnode *jp_node(parser *P, jnode_kind kind, uint32_t line);
/* Records the subtree height and refuses trees too deep to evaluate. */
jnode *jp_finish(parser *P, jnode *n);
bool jp_set_name(parser *P, jnode *n, const char *s, size_t len);
bool jp_vec_push(parser *P, nodevec *v, jnode *n);
/* Moves the collected nodes into the arena (and frees the vector). */
bool jp_vec_store(parser *P, nodevec *v, jnode ***list, uint32_t *count);

jnode *jp_parse_expression(parser *P, bool with_condexpr);
/* Expressions separated by commas (a tuple when there is a comma). */
jnode *jp_parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end,
                      bool explicit_parens);
/* `|name(args)` repeated; in is NULL for filter blocks and set blocks. */
jnode *jp_parse_filter(parser *P, jnode *in, bool start_inline);

#endif
