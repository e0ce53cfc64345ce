/* The template parser: tokens to a syntax tree, a port of the recursive
 * descent in jinja2/parser.py (operator precedence, tuples, filters, tests,
 * statements).  Unknown filters and tests are compile errors except inside
 * an if or a conditional expression, where Jinja2 defers them to the moment
 * they run. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_ast.h"
#include "text/jinja_builtins.h"
#include "text/jinja_lexer.h"

struct jarena_chunk {
    struct jarena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *jarena_alloc(jtemplate *t, size_t size) {
    size = (size + 15) & ~(size_t)15;
    jarena_chunk *c = t->chunks;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        c = malloc(sizeof(jarena_chunk) + cap);
        if (!c) return NULL;
        c->next = t->chunks;
        c->used = 0;
        c->cap = cap;
        t->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

jstr *jarena_str(jtemplate *t, const char *s, size_t len) {
    jstr *str = jarena_alloc(t, sizeof(jstr) + len + 1);
    if (!str) return NULL;
    str->h.refs = JOBJ_IMMORTAL;
    str->h.type = JO_STR;
    str->len = len;
    if (len) memcpy(str->data, s, len);
    str->data[len] = 0;
    str->ncp = jutf8_count(str->data, len);
    return str;
}

void jtemplate_free(jtemplate *t) {
    if (!t) return;
    jarena_chunk *c = t->chunks;
    while (c) {
        jarena_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(t);
}

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

static const jtok *cur(const parser *P) { return &P->tk->toks[P->i]; }
static const jtok *look(const parser *P) {
    return P->i + 1 < P->tk->n ? &P->tk->toks[P->i + 1] : &P->tk->toks[P->tk->n - 1];
}
static void advance(parser *P) {
    if (P->tk->toks[P->i].type != JT_EOF) P->i++;
}

static bool tok_is_name(const jtok *t, const char *name) {
    return t->type == JT_NAME && t->len == strlen(name) && memcmp(t->text, name, t->len) == 0;
}
static bool tok_is_op(const jtok *t, jop op) { return t->type == JT_OP && t->op == op; }

static const char *op_text(int op) {
    static const char *const texts[] = {
        "+", "-",  "/",  "//", "*",  "%", "**", "~", "[", "]", "(", ")", "{",
        "}", "==", "!=", ">",  ">=", "<", "<=", "=", ".", ":", "|", ",", ";"};
    return op >= 0 && op < (int)(sizeof texts / sizeof texts[0]) ? texts[op] : "?";
}

static void describe(const jtok *t, char *buf, size_t size) {
    switch ((jtok_type)t->type) {
    case JT_EOF: snprintf(buf, size, "end of template"); break;
    case JT_DATA: snprintf(buf, size, "template data"); break;
    case JT_BLOCK_BEGIN: snprintf(buf, size, "begin of statement block"); break;
    case JT_BLOCK_END: snprintf(buf, size, "end of statement block"); break;
    case JT_VAR_BEGIN: snprintf(buf, size, "begin of print statement"); break;
    case JT_VAR_END: snprintf(buf, size, "end of print statement"); break;
    case JT_NAME: snprintf(buf, size, "'%.*s'", (int)(t->len > 40 ? 40 : t->len), t->text); break;
    case JT_STRING: snprintf(buf, size, "string"); break;
    case JT_INT: snprintf(buf, size, "integer"); break;
    case JT_FLOAT: snprintf(buf, size, "float"); break;
    case JT_OP: snprintf(buf, size, "'%s'", op_text(t->op)); break;
    }
}

static void *pfail(parser *P, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void *pfail(parser *P, uint32_t line, const char *fmt, ...) {
    if (P->failed) return NULL;
    P->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lm_fail(P->err, LM_ERR_FORMAT, "chat template line %u: %s", (unsigned)line, msg);
    return NULL;
}

static void *unexpected(parser *P) {
    char d[80];
    describe(cur(P), d, sizeof d);
    return pfail(P, cur(P)->line, "unexpected %s", d);
}

static bool expect_op(parser *P, jop op) {
    if (tok_is_op(cur(P), op)) {
        advance(P);
        return true;
    }
    char d[80];
    describe(cur(P), d, sizeof d);
    pfail(P, cur(P)->line, "expected '%s', got %s", op_text(op), d);
    return false;
}

static bool expect_type(parser *P, jtok_type type, const char *what) {
    if (cur(P)->type == type) {
        advance(P);
        return true;
    }
    char d[80];
    describe(cur(P), d, sizeof d);
    pfail(P, cur(P)->line, "expected %s, got %s", what, d);
    return false;
}

static jnode *node(parser *P, jnode_kind kind, uint32_t line) {
    jnode *n = jarena_alloc(P->tpl, sizeof(jnode));
    if (!n) return pfail(P, line, "out of memory");
    n->kind = (uint8_t)kind;
    n->line = line;
    n->op = -1;
    return n;
}

/* Records the subtree height and refuses trees too deep to evaluate. */
static jnode *finish(parser *P, jnode *n) {
    if (!n) return NULL;
    unsigned h = 0;
    const jnode *kids[5] = {n->a, n->b, n->c, n->d, n->e};
    for (int k = 0; k < 5; k++)
        if (kids[k] && kids[k]->depth > h) h = kids[k]->depth;
    for (uint32_t k = 0; k < n->nlist; k++)
        if (n->list[k] && n->list[k]->depth > h) h = n->list[k]->depth;
    for (uint32_t k = 0; k < n->nlist2; k++)
        if (n->list2[k] && n->list2[k]->depth > h) h = n->list2[k]->depth;
    if (h + 1 > JINJA_TREE_DEPTH_MAX) return pfail(P, n->line, "template nested too deeply");
    n->depth = (uint16_t)(h + 1);
    return n;
}

static bool set_name(parser *P, jnode *n, const char *s, size_t len) {
    jstr *str = jarena_str(P->tpl, s, len);
    if (!str) {
        pfail(P, n->line, "out of memory");
        return false;
    }
    n->value = jv_obj(JV_STR, str);
    return true;
}

/* A growable list of child nodes, copied into the arena when done. */
typedef struct {
    jnode **items;
    uint32_t n, cap;
} nodevec;

static bool vec_push(parser *P, nodevec *v, jnode *n) {
    if (!n) return false;
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 8;
        jnode **items = realloc(v->items, cap * sizeof(jnode *));
        if (!items) {
            pfail(P, n->line, "out of memory");
            return false;
        }
        v->items = items;
        v->cap = cap;
    }
    v->items[v->n++] = n;
    return true;
}

static bool vec_store(parser *P, nodevec *v, jnode ***list, uint32_t *count) {
    *count = v->n;
    *list = NULL;
    if (v->n) {
        *list = jarena_alloc(P->tpl, v->n * sizeof(jnode *));
        if (!*list) {
            free(v->items);
            pfail(P, 0, "out of memory");
            return false;
        }
        memcpy(*list, v->items, v->n * sizeof(jnode *));
    }
    free(v->items);
    v->items = NULL;
    v->n = v->cap = 0;
    return true;
}

static jnode *parse_expression(parser *P, bool with_condexpr);
static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end,
                          bool explicit_parens);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);
static jnode *subparse(parser *P, const char *const *end_tags, jnode_kind kind);

/* ---- expressions ---- */

/* (args, name=value, ...) into n->list / n->list2. */
static bool parse_call_args(parser *P, jnode *n) {
    uint32_t line = cur(P)->line;
    if (!expect_op(P, JOP_LPAREN)) return false;
    nodevec args = {0}, kwargs = {0};
    bool require_comma = false;
    while (!tok_is_op(cur(P), JOP_RPAREN)) {
        if (require_comma) {
            if (!expect_op(P, JOP_COMMA)) goto fail;
            if (tok_is_op(cur(P), JOP_RPAREN)) break;
        }
        if (tok_is_op(cur(P), JOP_MUL) || tok_is_op(cur(P), JOP_POW)) {
            pfail(P, line, "*args and **kwargs in calls are not supported");
            goto fail;
        }
        if (cur(P)->type == JT_NAME && tok_is_op(look(P), JOP_ASSIGN)) {
            jnode *kw = node(P, JN_KWARG, cur(P)->line);
            if (!kw || !set_name(P, kw, cur(P)->text, cur(P)->len)) goto fail;
            advance(P);
            advance(P);
            kw->a = parse_expression(P, true);
            if (!kw->a || !vec_push(P, &kwargs, finish(P, kw))) goto fail;
        } else {
            if (kwargs.n) {
                pfail(P, line, "invalid syntax for function call expression");
                goto fail;
            }
            if (!vec_push(P, &args, parse_expression(P, true))) goto fail;
        }
        require_comma = true;
    }
    if (!expect_op(P, JOP_RPAREN)) goto fail;
    return vec_store(P, &args, &n->list, &n->nlist) && vec_store(P, &kwargs, &n->list2, &n->nlist2);
fail:
    free(args.items);
    free(kwargs.items);
    return false;
}

static jnode *parse_call(parser *P, jnode *callee) {
    jnode *n = node(P, JN_CALL, cur(P)->line);
    if (!n) return NULL;
    n->a = callee;
    if (!parse_call_args(P, n)) return NULL;
    return finish(P, n);
}

/* A filter or test name, dotted names included. */
static bool parse_dotted_name(parser *P, jnode *n) {
    if (cur(P)->type != JT_NAME) {
        expect_type(P, JT_NAME, "a name");
        return false;
    }
    char name[128];
    size_t len = 0;
    for (;;) {
        const jtok *t = cur(P);
        if (len + t->len + 1 >= sizeof name) {
            pfail(P, t->line, "name too long");
            return false;
        }
        memcpy(name + len, t->text, t->len);
        len += t->len;
        advance(P);
        if (!tok_is_op(cur(P), JOP_DOT)) break;
        advance(P);
        if (cur(P)->type != JT_NAME) {
            expect_type(P, JT_NAME, "a name");
            return false;
        }
        name[len++] = '.';
    }
    return set_name(P, n, name, len);
}

/* `|name(args)` repeated; in is NULL for filter blocks and set blocks. */
static jnode *parse_filter(parser *P, jnode *in, bool start_inline) {
    while (tok_is_op(cur(P), JOP_PIPE) || start_inline) {
        if (!start_inline) advance(P);
        start_inline = false;
        jnode *n = node(P, JN_FILTER, cur(P)->line);
        if (!n || !parse_dotted_name(P, n)) return NULL;
        n->a = in;
        n->op = (int16_t)jfilter_lookup(jv_str(n->value)->data, jv_str(n->value)->len);
        if (n->op < 0 && !P->soft)
            return pfail(P, n->line, "unknown filter '%s'", jv_str(n->value)->data);
        if (tok_is_op(cur(P), JOP_LPAREN) && !parse_call_args(P, n)) return NULL;
        in = finish(P, n);
        if (!in) return NULL;
    }
    return in;
}

static jnode *parse_test(parser *P, jnode *in) {
    uint32_t line = cur(P)->line;
    advance(P); /* is */
    bool negated = false;
    if (tok_is_name(cur(P), "not")) {
        advance(P);
        negated = true;
    }
    jnode *n = node(P, JN_TEST, line);
    if (!n || !parse_dotted_name(P, n)) return NULL;
    n->a = in;
    n->op = (int16_t)jtest_lookup(jv_str(n->value)->data, jv_str(n->value)->len);
    if (n->op < 0 && !P->soft) return pfail(P, line, "unknown test '%s'", jv_str(n->value)->data);
    const jtok *t = cur(P);
    if (tok_is_op(t, JOP_LPAREN)) {
        if (!parse_call_args(P, n)) return NULL;
    } else if ((t->type == JT_NAME || t->type == JT_STRING || t->type == JT_INT ||
                t->type == JT_FLOAT || tok_is_op(t, JOP_LBRACKET) || tok_is_op(t, JOP_LBRACE)) &&
               !tok_is_name(t, "else") && !tok_is_name(t, "or") && !tok_is_name(t, "and")) {
        if (tok_is_name(t, "is"))
            return pfail(P, t->line, "you cannot chain multiple tests with is");
        jnode *arg = parse_postfix(P, parse_primary(P));
        if (!arg) return NULL;
        n->list = jarena_alloc(P->tpl, sizeof(jnode *));
        if (!n->list) return pfail(P, line, "out of memory");
        n->list[0] = arg;
        n->nlist = 1;
    }
    if (!finish(P, n)) return NULL;
    if (!negated) return n;
    jnode *not = node(P, JN_NOT, line);
    if (!not ) return NULL;
    not ->a = n;
    return finish(P, not );
}

static jnode *parse_subscribed(parser *P) {
    uint32_t line = cur(P)->line;
    jnode *start = NULL;
    if (!tok_is_op(cur(P), JOP_COLON)) {
        start = parse_expression(P, true);
        if (!start) return NULL;
        if (!tok_is_op(cur(P), JOP_COLON)) return start;
    }
    advance(P); /* colon */
    jnode *n = node(P, JN_SLICE, line);
    if (!n) return NULL;
    n->a = start;
    if (!tok_is_op(cur(P), JOP_RBRACKET) && !tok_is_op(cur(P), JOP_COMMA) &&
        !tok_is_op(cur(P), JOP_COLON)) {
        if (!(n->b = parse_expression(P, true))) return NULL;
    }
    if (tok_is_op(cur(P), JOP_COLON)) {
        advance(P);
        if (!tok_is_op(cur(P), JOP_RBRACKET) && !tok_is_op(cur(P), JOP_COMMA)) {
            if (!(n->c = parse_expression(P, true))) return NULL;
        }
    }
    return finish(P, n);
}

static jnode *parse_subscript(parser *P, jnode *obj) {
    const jtok *t = cur(P);
    uint32_t line = t->line;
    if (tok_is_op(t, JOP_DOT)) {
        advance(P);
        const jtok *attr = cur(P);
        if (attr->type == JT_NAME) {
            jnode *n = node(P, JN_GETATTR, line);
            if (!n || !set_name(P, n, attr->text, attr->len)) return NULL;
            advance(P);
            n->a = obj;
            return finish(P, n);
        }
        if (attr->type != JT_INT) return pfail(P, attr->line, "expected name or number");
        jnode *idx = node(P, JN_CONST, attr->line);
        if (!idx) return NULL;
        idx->value = jv_int(attr->ival);
        advance(P);
        jnode *n = node(P, JN_GETITEM, line);
        if (!n) return NULL;
        n->a = obj;
        n->b = finish(P, idx);
        return finish(P, n);
    }
    advance(P); /* [ */
    nodevec args = {0};
    while (!tok_is_op(cur(P), JOP_RBRACKET)) {
        if (args.n && !expect_op(P, JOP_COMMA)) goto fail;
        if (!vec_push(P, &args, parse_subscribed(P))) goto fail;
    }
    if (!expect_op(P, JOP_RBRACKET)) goto fail;
    jnode *n = node(P, JN_GETITEM, line);
    if (!n) goto fail;
    n->a = obj;
    if (args.n == 1) {
        n->b = args.items[0];
        free(args.items);
    } else {
        jnode *tuple = node(P, JN_TUPLE, line);
        if (!tuple || !vec_store(P, &args, &tuple->list, &tuple->nlist)) goto fail;
        n->b = finish(P, tuple);
        if (!n->b) return NULL;
    }
    return finish(P, n);
fail:
    free(args.items);
    return NULL;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    while (n) {
        if (tok_is_op(cur(P), JOP_DOT) || tok_is_op(cur(P), JOP_LBRACKET))
            n = parse_subscript(P, n);
        else if (tok_is_op(cur(P), JOP_LPAREN))
            n = parse_call(P, n);
        else
            break;
    }
    return n;
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    while (n) {
        if (tok_is_op(cur(P), JOP_PIPE))
            n = parse_filter(P, n, false);
        else if (tok_is_name(cur(P), "is"))
            n = parse_test(P, n);
        else if (tok_is_op(cur(P), JOP_LPAREN))
            n = parse_call(P, n);
        else
            break;
    }
    return n;
}

static jnode *parse_list_or_dict(parser *P, bool dict) {
    uint32_t line = cur(P)->line;
    jop close = dict ? JOP_RBRACE : JOP_RBRACKET;
    advance(P);
    nodevec keys = {0}, vals = {0};
    while (!tok_is_op(cur(P), close)) {
        if (keys.n && !expect_op(P, JOP_COMMA)) goto fail;
        if (tok_is_op(cur(P), close)) break;
        if (!vec_push(P, &keys, parse_expression(P, true))) goto fail;
        if (dict) {
            if (!expect_op(P, JOP_COLON)) goto fail;
            if (!vec_push(P, &vals, parse_expression(P, true))) goto fail;
        }
    }
    if (!expect_op(P, close)) goto fail;
    jnode *n = node(P, dict ? JN_DICT : JN_LIST, line);
    if (!n || !vec_store(P, &keys, &n->list, &n->nlist) ||
        !vec_store(P, &vals, &n->list2, &n->nlist2))
        goto fail;
    return finish(P, n);
fail:
    free(keys.items);
    free(vals.items);
    return NULL;
}

static jnode *parse_primary(parser *P) {
    const jtok *t = cur(P);
    jnode *n;
    switch ((jtok_type)t->type) {
    case JT_NAME:
        if (!(n = node(P, JN_CONST, t->line))) return NULL;
        if (tok_is_name(t, "true") || tok_is_name(t, "True"))
            n->value = jv_bool(true);
        else if (tok_is_name(t, "false") || tok_is_name(t, "False"))
            n->value = jv_bool(false);
        else if (tok_is_name(t, "none") || tok_is_name(t, "None"))
            n->value = jv_none();
        else {
            n->kind = JN_NAME;
            if (!set_name(P, n, t->text, t->len)) return NULL;
        }
        advance(P);
        return finish(P, n);
    case JT_STRING: { /* adjacent literals concatenate */
        if (!(n = node(P, JN_CONST, t->line))) return NULL;
        size_t total = 0, k = P->i;
        while (P->tk->toks[k].type == JT_STRING) total += P->tk->toks[k++].len;
        jstr *s;
        if (total) {
            char *tmp = malloc(total);
            if (!tmp) return pfail(P, t->line, "out of memory");
            size_t off = 0;
            while (cur(P)->type == JT_STRING) {
                memcpy(tmp + off, cur(P)->text, cur(P)->len);
                off += cur(P)->len;
                advance(P);
            }
            s = jarena_str(P->tpl, tmp, total);
            free(tmp);
        } else {
            while (cur(P)->type == JT_STRING) advance(P);
            s = jarena_str(P->tpl, "", 0);
        }
        if (!s) return pfail(P, t->line, "out of memory");
        n->value = jv_obj(JV_STR, s);
        return finish(P, n);
    }
    case JT_INT:
    case JT_FLOAT:
        if (!(n = node(P, JN_CONST, t->line))) return NULL;
        n->value = t->type == JT_INT ? jv_int(t->ival) : jv_float(t->fval);
        advance(P);
        return finish(P, n);
    case JT_OP:
        if (t->op == JOP_LPAREN) {
            advance(P);
            n = parse_tuple(P, false, true, NULL, true);
            if (!n || !expect_op(P, JOP_RPAREN)) return NULL;
            return n;
        }
        if (t->op == JOP_LBRACKET) return parse_list_or_dict(P, false);
        if (t->op == JOP_LBRACE) return parse_list_or_dict(P, true);
        return unexpected(P);
    default: return unexpected(P);
    }
}

static jnode *parse_unary_inner(parser *P, bool with_filter);

/* Every nested expression passes through here: the guard keeps the parser's
 * own recursion bounded before any tree height can be measured. */
static jnode *parse_unary(parser *P, bool with_filter) {
    if (P->nesting >= JINJA_TREE_DEPTH_MAX)
        return pfail(P, cur(P)->line, "expression nested too deeply");
    P->nesting++;
    jnode *n = parse_unary_inner(P, with_filter);
    P->nesting--;
    return n;
}

static jnode *parse_unary_inner(parser *P, bool with_filter) {
    const jtok *t = cur(P);
    jnode *n;
    if (tok_is_op(t, JOP_SUB) || tok_is_op(t, JOP_ADD)) {
        advance(P);
        n = node(P, t->op == JOP_SUB ? JN_NEG : JN_POS, t->line);
        if (!n || !(n->a = parse_unary(P, false))) return NULL;
        n = finish(P, n);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    return n;
}

static jnode *binop(parser *P, jnode_kind kind, int op, jnode *a, jnode *b, uint32_t line) {
    if (!a || !b) return NULL;
    jnode *n = node(P, kind, line);
    if (!n) return NULL;
    n->op = (int16_t)op;
    n->a = a;
    n->b = b;
    return finish(P, n);
}

static jnode *parse_pow(parser *P) {
    jnode *left = parse_unary(P, true);
    while (left && tok_is_op(cur(P), JOP_POW)) {
        uint32_t line = cur(P)->line;
        advance(P);
        left = binop(P, JN_BINOP, JOP_POW, left, parse_unary(P, true), line);
    }
    return left;
}

static jnode *parse_math2(parser *P) {
    jnode *left = parse_pow(P);
    while (left && (tok_is_op(cur(P), JOP_MUL) || tok_is_op(cur(P), JOP_DIV) ||
                    tok_is_op(cur(P), JOP_FLOORDIV) || tok_is_op(cur(P), JOP_MOD))) {
        int op = cur(P)->op;
        uint32_t line = cur(P)->line;
        advance(P);
        left = binop(P, JN_BINOP, op, left, parse_pow(P), line);
    }
    return left;
}

static jnode *parse_concat(parser *P) {
    uint32_t line = cur(P)->line;
    jnode *first = parse_math2(P);
    if (!first || !tok_is_op(cur(P), JOP_TILDE)) return first;
    nodevec args = {0};
    if (!vec_push(P, &args, first)) return NULL;
    while (tok_is_op(cur(P), JOP_TILDE)) {
        advance(P);
        if (!vec_push(P, &args, parse_math2(P))) {
            free(args.items);
            return NULL;
        }
    }
    jnode *n = node(P, JN_CONCAT, line);
    if (!n || !vec_store(P, &args, &n->list, &n->nlist)) {
        free(args.items);
        return NULL;
    }
    return finish(P, n);
}

static jnode *parse_math1(parser *P) {
    jnode *left = parse_concat(P);
    while (left && (tok_is_op(cur(P), JOP_ADD) || tok_is_op(cur(P), JOP_SUB))) {
        int op = cur(P)->op;
        uint32_t line = cur(P)->line;
        advance(P);
        left = binop(P, JN_BINOP, op, left, parse_concat(P), line);
    }
    return left;
}

static jnode *parse_compare(parser *P) {
    uint32_t line = cur(P)->line;
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    nodevec ops = {0};
    for (;;) {
        const jtok *t = cur(P);
        int op;
        if (t->type == JT_OP && (t->op == JOP_EQ || t->op == JOP_NE || t->op == JOP_LT ||
                                 t->op == JOP_LTEQ || t->op == JOP_GT || t->op == JOP_GTEQ)) {
            op = t->op;
            advance(P);
        } else if (tok_is_name(t, "in")) {
            op = JCMP_IN;
            advance(P);
        } else if (tok_is_name(t, "not") && tok_is_name(look(P), "in")) {
            op = JCMP_NOTIN;
            advance(P);
            advance(P);
        } else {
            break;
        }
        jnode *operand = node(P, JN_OPERAND, t->line);
        if (!operand || !(operand->a = parse_math1(P)) || !vec_push(P, &ops, finish(P, operand))) {
            free(ops.items);
            return NULL;
        }
        operand->op = (int16_t)op;
        line = cur(P)->line;
    }
    if (!ops.n) return first;
    jnode *n = node(P, JN_COMPARE, line);
    if (!n || !vec_store(P, &ops, &n->list, &n->nlist)) {
        free(ops.items);
        return NULL;
    }
    n->a = first;
    return finish(P, n);
}

static jnode *parse_not(parser *P) {
    if (tok_is_name(cur(P), "not")) {
        uint32_t line = cur(P)->line;
        if (P->nesting >= JINJA_TREE_DEPTH_MAX)
            return pfail(P, line, "expression nested too deeply");
        advance(P);
        jnode *n = node(P, JN_NOT, line);
        P->nesting++;
        if (n) n->a = parse_not(P);
        P->nesting--;
        if (!n || !n->a) return NULL;
        return finish(P, n);
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *left = parse_not(P);
    while (left && tok_is_name(cur(P), "and")) {
        uint32_t line = cur(P)->line;
        advance(P);
        left = binop(P, JN_AND, 0, left, parse_not(P), line);
    }
    return left;
}

static jnode *parse_or(parser *P) {
    jnode *left = parse_and(P);
    while (left && tok_is_name(cur(P), "or")) {
        uint32_t line = cur(P)->line;
        advance(P);
        left = binop(P, JN_OR, 0, left, parse_and(P), line);
    }
    return left;
}

static jnode *parse_condexpr(parser *P) {
    uint32_t line = cur(P)->line;
    jnode *expr1 = parse_or(P);
    while (expr1 && tok_is_name(cur(P), "if")) {
        advance(P);
        P->soft++;
        jnode *n = node(P, JN_CONDEXPR, line);
        if (n) {
            n->b = expr1;
            n->a = parse_or(P);
            if (n->a && tok_is_name(cur(P), "else")) {
                advance(P);
                n->c = parse_condexpr(P);
                if (!n->c) n = NULL;
            }
            if (n && !n->a) n = NULL;
        }
        P->soft--;
        expr1 = finish(P, n);
        line = cur(P)->line;
    }
    return expr1;
}

static jnode *parse_expression(parser *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static bool is_tuple_end(parser *P, const char *extra_end) {
    const jtok *t = cur(P);
    if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || tok_is_op(t, JOP_RPAREN)) return true;
    return extra_end && tok_is_name(t, extra_end);
}

static jnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end,
                          bool explicit_parens) {
    uint32_t line = cur(P)->line;
    nodevec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && !expect_op(P, JOP_COMMA)) goto fail;
        if (is_tuple_end(P, extra_end)) break;
        jnode *item = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
        if (!vec_push(P, &args, item)) goto fail;
        if (tok_is_op(cur(P), JOP_COMMA))
            is_tuple = true;
        else
            break;
        line = cur(P)->line;
    }
    if (!is_tuple) {
        if (args.n) {
            jnode *only = args.items[0];
            free(args.items);
            return only;
        }
        if (!explicit_parens) {
            char d[80];
            describe(cur(P), d, sizeof d);
            return pfail(P, cur(P)->line, "expected an expression, got %s", d);
        }
    }
    jnode *n = node(P, JN_TUPLE, line);
    if (!n || !vec_store(P, &args, &n->list, &n->nlist)) goto fail;
    return finish(P, n);
fail:
    free(args.items);
    return NULL;
}

/* ---- statements ---- */

static bool can_assign(const jnode *n) {
    if (n->kind == JN_NAME || n->kind == JN_NSREF) return true;
    if (n->kind != JN_TUPLE) return false;
    for (uint32_t i = 0; i < n->nlist; i++)
        if (!can_assign(n->list[i])) return false;
    return true;
}

static jnode *parse_assign_target(parser *P, bool with_namespace, bool name_only,
                                  const char *extra_end) {
    const jtok *t = cur(P);
    jnode *target;
    if (with_namespace && t->type == JT_NAME && tok_is_op(look(P), JOP_DOT)) {
        jnode *ns = node(P, JN_NAME, t->line);
        if (!ns || !set_name(P, ns, t->text, t->len)) return NULL;
        advance(P);
        advance(P);
        if (cur(P)->type != JT_NAME) return expect_type(P, JT_NAME, "a name"), NULL;
        target = node(P, JN_NSREF, t->line);
        if (!target || !set_name(P, target, cur(P)->text, cur(P)->len)) return NULL;
        advance(P);
        target->a = finish(P, ns);
        return finish(P, target);
    }
    if (name_only) {
        if (t->type != JT_NAME) return expect_type(P, JT_NAME, "a name"), NULL;
        target = node(P, JN_NAME, t->line);
        if (!target || !set_name(P, target, t->text, t->len)) return NULL;
        advance(P);
        return finish(P, target);
    }
    target = parse_tuple(P, true, true, extra_end, false);
    if (!target) return NULL;
    if (!can_assign(target)) return pfail(P, target->line, "can't assign to this expression");
    return target;
}

static bool end_of_tag(parser *P) { return expect_type(P, JT_BLOCK_END, "end of statement block"); }

/* Parses the body of a block statement up to one of end_tags; the end tag's
 * name is left current. */
static jnode *parse_body(parser *P, const char *const *end_tags) {
    if (tok_is_op(cur(P), JOP_COLON)) advance(P);
    if (!end_of_tag(P)) return NULL;
    return subparse(P, end_tags, JN_BLOCK);
}

/* Consumes `endname %}`. */
static bool close_tag(parser *P) {
    advance(P);
    return end_of_tag(P);
}

static bool parse_signature(parser *P, jnode *n) {
    nodevec params = {0}, defaults = {0};
    if (!expect_op(P, JOP_LPAREN)) return false;
    while (!tok_is_op(cur(P), JOP_RPAREN)) {
        if (params.n && !expect_op(P, JOP_COMMA)) goto fail;
        if (!vec_push(P, &params, parse_assign_target(P, false, true, NULL))) goto fail;
        if (tok_is_op(cur(P), JOP_ASSIGN)) {
            advance(P);
            if (!vec_push(P, &defaults, parse_expression(P, true))) goto fail;
        } else if (defaults.n) {
            pfail(P, cur(P)->line, "non-default argument follows default argument");
            goto fail;
        }
    }
    if (!expect_op(P, JOP_RPAREN)) goto fail;
    return vec_store(P, &params, &n->list, &n->nlist) &&
           vec_store(P, &defaults, &n->list2, &n->nlist2);
fail:
    free(params.items);
    free(defaults.items);
    return false;
}

static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_ENDIF[] = {"endif", NULL};
static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_ENDFOR[] = {"endfor", NULL};

static jnode *parse_if(parser *P, uint32_t line) {
    jnode *n = node(P, JN_IF, line);
    if (!n) return NULL;
    nodevec conds = {0}, bodies = {0};
    P->soft++;
    for (;;) {
        jnode *cond = parse_tuple(P, false, false, NULL, false);
        if (!vec_push(P, &conds, cond)) goto fail;
        jnode *body = parse_body(P, END_IF);
        if (!vec_push(P, &bodies, body)) goto fail;
        if (tok_is_name(cur(P), "elif")) {
            advance(P);
            continue;
        }
        if (tok_is_name(cur(P), "else")) {
            if (!close_tag(P)) goto fail;
            n->c = subparse(P, END_ENDIF, JN_BLOCK);
            if (!n->c) goto fail;
        }
        break;
    }
    P->soft--;
    if (!vec_store(P, &conds, &n->list, &n->nlist) || !vec_store(P, &bodies, &n->list2, &n->nlist2))
        return NULL;
    advance(P); /* endif */
    return finish(P, n);
fail:
    P->soft--;
    free(conds.items);
    free(bodies.items);
    return NULL;
}

static jnode *parse_for(parser *P, uint32_t line) {
    jnode *n = node(P, JN_FOR, line);
    if (!n) return NULL;
    int soft = P->soft;
    P->soft = 0;
    if (!(n->a = parse_assign_target(P, false, false, "in"))) return NULL;
    if (!tok_is_name(cur(P), "in")) return expect_type(P, JT_NAME, "'in'"), NULL;
    advance(P);
    if (!(n->b = parse_tuple(P, false, false, "recursive", false))) return NULL;
    if (tok_is_name(cur(P), "if")) {
        advance(P);
        if (!(n->c = parse_expression(P, true))) return NULL;
    }
    if (tok_is_name(cur(P), "recursive")) {
        advance(P);
        n->flag = 1;
    }
    P->loops++;
    n->d = parse_body(P, END_FOR);
    P->loops--;
    if (!n->d) return NULL;
    if (tok_is_name(cur(P), "else")) {
        if (!close_tag(P)) return NULL;
        if (!(n->e = subparse(P, END_ENDFOR, JN_BLOCK))) return NULL;
    }
    advance(P); /* endfor */
    P->soft = soft;
    return finish(P, n);
}

static jnode *parse_statement(parser *P);

static jnode *parse_set(parser *P, uint32_t line) {
    jnode *target = parse_assign_target(P, true, false, NULL);
    if (!target) return NULL;
    if (tok_is_op(cur(P), JOP_ASSIGN)) {
        advance(P);
        jnode *n = node(P, JN_SET, line);
        if (!n) return NULL;
        n->a = target;
        if (!(n->b = parse_tuple(P, false, true, NULL, false))) return NULL;
        return finish(P, n);
    }
    jnode *n = node(P, JN_SETBLOCK, line);
    if (!n) return NULL;
    n->a = target;
    int soft = P->soft;
    P->soft = 0;
    if (tok_is_op(cur(P), JOP_PIPE)) {
        advance(P);
        if (!(n->c = parse_filter(P, NULL, true))) return NULL;
    }
    static const char *const end[] = {"endset", NULL};
    if (!(n->d = parse_body(P, end))) return NULL;
    advance(P); /* endset */
    P->soft = soft;
    return finish(P, n);
}

static jnode *parse_macro(parser *P, uint32_t line, bool call_block) {
    jnode *n = node(P, call_block ? JN_CALLBLOCK : JN_MACRO, line);
    if (!n) return NULL;
    int soft = P->soft, loops = P->loops;
    P->soft = 0;
    P->loops = 0;
    if (call_block) {
        if (tok_is_op(cur(P), JOP_LPAREN) && !parse_signature(P, n)) return NULL;
        if (!(n->a = parse_expression(P, true))) return NULL;
        if (n->a->kind != JN_CALL) return pfail(P, line, "expected call");
        if (!set_name(P, n, "caller", 6)) return NULL;
    } else {
        const jtok *t = cur(P);
        if (t->type != JT_NAME) return expect_type(P, JT_NAME, "a macro name"), NULL;
        if (!set_name(P, n, t->text, t->len)) return NULL;
        advance(P);
        if (!parse_signature(P, n)) return NULL;
    }
    static const char *const end_macro[] = {"endmacro", NULL};
    static const char *const end_call[] = {"endcall", NULL};
    if (!(n->d = parse_body(P, call_block ? end_call : end_macro))) return NULL;
    advance(P);
    P->soft = soft;
    P->loops = loops;
    return finish(P, n);
}

static jnode *parse_filter_block(parser *P, uint32_t line) {
    jnode *n = node(P, JN_FILTERBLOCK, line);
    if (!n) return NULL;
    int soft = P->soft;
    P->soft = 0;
    if (!(n->c = parse_filter(P, NULL, true))) return NULL;
    static const char *const end[] = {"endfilter", NULL};
    if (!(n->d = parse_body(P, end))) return NULL;
    advance(P);
    P->soft = soft;
    return finish(P, n);
}

static jnode *parse_with(parser *P, uint32_t line) {
    jnode *n = node(P, JN_WITH, line);
    if (!n) return NULL;
    nodevec targets = {0}, values = {0};
    int soft = P->soft;
    P->soft = 0;
    while (cur(P)->type != JT_BLOCK_END) {
        if (targets.n && !expect_op(P, JOP_COMMA)) goto fail;
        if (!vec_push(P, &targets, parse_assign_target(P, false, false, NULL))) goto fail;
        if (!expect_op(P, JOP_ASSIGN)) goto fail;
        if (!vec_push(P, &values, parse_expression(P, true))) goto fail;
    }
    if (!vec_store(P, &targets, &n->list, &n->nlist) ||
        !vec_store(P, &values, &n->list2, &n->nlist2))
        return NULL;
    static const char *const end[] = {"endwith", NULL};
    if (!(n->d = parse_body(P, end))) return NULL;
    advance(P);
    P->soft = soft;
    return finish(P, n);
fail:
    free(targets.items);
    free(values.items);
    return NULL;
}

/* After {%: one statement, through its closing %}. */
static jnode *parse_statement(parser *P) {
    const jtok *t = cur(P);
    uint32_t line = t->line;
    if (t->type != JT_NAME) {
        char d[80];
        describe(t, d, sizeof d);
        return pfail(P, line, "tag name expected, got %s", d);
    }
    if (P->statements >= JINJA_TREE_DEPTH_MAX) return pfail(P, line, "template nested too deeply");
    P->statements++;
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(t->len < 31 ? t->len : 31), t->text);
    advance(P);
    jnode *n = NULL;
    if (!strcmp(name, "if"))
        n = parse_if(P, line);
    else if (!strcmp(name, "for"))
        n = parse_for(P, line);
    else if (!strcmp(name, "set"))
        n = parse_set(P, line);
    else if (!strcmp(name, "macro"))
        n = parse_macro(P, line, false);
    else if (!strcmp(name, "call"))
        n = parse_macro(P, line, true);
    else if (!strcmp(name, "filter"))
        n = parse_filter_block(P, line);
    else if (!strcmp(name, "with"))
        n = parse_with(P, line);
    else if (!strcmp(name, "print")) {
        nodevec items = {0};
        while (cur(P)->type != JT_BLOCK_END) {
            if (items.n && !expect_op(P, JOP_COMMA)) break;
            jnode *pr = node(P, JN_PRINT, cur(P)->line);
            if (!pr || !(pr->a = parse_expression(P, true)) || !vec_push(P, &items, finish(P, pr)))
                break;
        }
        if (!P->failed) {
            n = node(P, JN_BLOCK, line);
            if (n && vec_store(P, &items, &n->list, &n->nlist))
                n = finish(P, n);
            else
                n = NULL;
        }
        free(items.items);
    } else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!P->loops)
            n = pfail(P, line, "'%s' outside of a loop", name);
        else
            n = finish(P, node(P, name[0] == 'b' ? JN_BREAK : JN_CONTINUE, line));
    } else if (!strcmp(name, "generation")) { /* transformers' AssistantTracker: renders its body */
        static const char *const end[] = {"endgeneration", NULL};
        n = parse_body(P, end);
        if (n) advance(P);
    } else if (!strcmp(name, "include") || !strcmp(name, "import") || !strcmp(name, "from") ||
               !strcmp(name, "extends") || !strcmp(name, "block")) {
        n = pfail(P, line, "'%s' is not supported: a chat template cannot load other templates",
                  name);
    } else {
        n = pfail(P, line, "unknown tag '%s'", name);
    }
    P->statements--;
    if (!n) return NULL;
    if (!end_of_tag(P)) return NULL;
    return n;
}

static bool in_tags(const jtok *t, const char *const *tags) {
    for (; tags && *tags; tags++)
        if (tok_is_name(t, *tags)) return true;
    return false;
}

static jnode *subparse(parser *P, const char *const *end_tags, jnode_kind kind) {
    uint32_t line = cur(P)->line;
    nodevec body = {0};
    for (;;) {
        const jtok *t = cur(P);
        if (t->type == JT_EOF) {
            if (end_tags) {
                pfail(P, t->line, "unexpected end of template: missing {%% %s %%}", end_tags[0]);
                goto fail;
            }
            break;
        }
        if (t->type == JT_DATA) {
            jnode *n = node(P, JN_TEXT, t->line);
            jstr *s = n ? jarena_str(P->tpl, t->text, t->len) : NULL;
            if (!s) {
                pfail(P, t->line, "out of memory");
                goto fail;
            }
            n->value = jv_obj(JV_STR, s);
            advance(P);
            if (!vec_push(P, &body, finish(P, n))) goto fail;
        } else if (t->type == JT_VAR_BEGIN) {
            advance(P);
            jnode *n = node(P, JN_PRINT, t->line);
            if (!n || !(n->a = parse_tuple(P, false, true, NULL, false))) goto fail;
            if (!expect_type(P, JT_VAR_END, "end of print statement")) goto fail;
            if (!vec_push(P, &body, finish(P, n))) goto fail;
        } else if (t->type == JT_BLOCK_BEGIN) {
            advance(P);
            if (end_tags && in_tags(cur(P), end_tags)) break;
            if (!vec_push(P, &body, parse_statement(P))) goto fail;
        } else {
            unexpected(P);
            goto fail;
        }
    }
    jnode *n = node(P, kind, line);
    if (!n || !vec_store(P, &body, &n->list, &n->nlist)) goto fail;
    return finish(P, n);
fail:
    free(body.items);
    return NULL;
}

lm_status jtemplate_compile(const char *src, size_t len, jtemplate **out, lm_error *err) {
    *out = NULL;
    if (len > JINJA_TEMPLATE_MAX_BYTES)
        return lm_fail(err, LM_ERR_FORMAT, "chat template of %zu bytes exceeds the limit of %zu",
                       len, JINJA_TEMPLATE_MAX_BYTES);
    jtokens tokens;
    lm_status st = jlex(src, len, &tokens, err);
    if (st) return st;
    jtemplate *t = calloc(1, sizeof *t);
    if (!t) {
        jtokens_free(&tokens);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory compiling the chat template");
    }
    parser P = {.tk = &tokens, .tpl = t, .err = err};
    t->root = subparse(&P, NULL, JN_BLOCK);
    jtokens_free(&tokens);
    if (!t->root) {
        jtemplate_free(t);
        if (!P.failed)
            return lm_fail(err, LM_ERR_INTERNAL, "chat template: parser failed without a message");
        return err ? err->code : LM_ERR_FORMAT;
    }
    *out = t;
    return LM_OK;
}
