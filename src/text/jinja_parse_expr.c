/* The expression grammar of templates, a port of the recursive descent in
 * jinja2/parser.py: operator precedence, tuples, literals, subscripts and
 * slices, calls, filters and tests.  Unknown filters and tests are compile
 * errors except inside an if or a conditional expression, where Jinja2
 * defers them to the moment they run. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_builtins.h"
#include "text/jinja_parse.h"

static const char *op_text(int op) {
    static const char *const texts[] = {
        "+", "-",  "/",  "//", "*",  "%", "**", "~", "[", "]", "(", ")", "{",
        "}", "==", "!=", ">",  ">=", "<", "<=", "=", ".", ":", "|", ",", ";"};
    return op >= 0 && op < (int)(sizeof texts / sizeof texts[0]) ? texts[op] : "?";
}

void jp_describe(const jtok *t, char *buf, size_t size) {
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

void *jp_fail(parser *P, uint32_t line, const char *fmt, ...) {
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

void *jp_unexpected(parser *P) {
    char d[80];
    jp_describe(cur(P), d, sizeof d);
    return jp_fail(P, cur(P)->line, "unexpected %s", d);
}

bool jp_expect_op(parser *P, jop op) {
    if (tok_is_op(cur(P), op)) {
        advance(P);
        return true;
    }
    char d[80];
    jp_describe(cur(P), d, sizeof d);
    jp_fail(P, cur(P)->line, "expected '%s', got %s", op_text(op), d);
    return false;
}

bool jp_expect_type(parser *P, jtok_type type, const char *what) {
    if (cur(P)->type == type) {
        advance(P);
        return true;
    }
    char d[80];
    jp_describe(cur(P), d, sizeof d);
    jp_fail(P, cur(P)->line, "expected %s, got %s", what, d);
    return false;
}

jnode *jp_node(parser *P, jnode_kind kind, uint32_t line) {
    jnode *n = jarena_alloc(P->tpl, sizeof(jnode));
    if (!n) return jp_fail(P, line, "out of memory");
    n->kind = (uint8_t)kind;
    n->line = line;
    n->op = -1;
    return n;
}

/* Records the subtree height and refuses trees too deep to evaluate. */
jnode *jp_finish(parser *P, jnode *n) {
    if (!n) return NULL;
    unsigned h = 0;
    const jnode *kids[5] = {n->a, n->b, n->c, n->d, n->e};
    for (int k = 0; k < 5; k++)
        if (kids[k] && kids[k]->depth > h) h = kids[k]->depth;
    for (uint32_t k = 0; k < n->nlist; k++)
        if (n->list[k] && n->list[k]->depth > h) h = n->list[k]->depth;
    for (uint32_t k = 0; k < n->nlist2; k++)
        if (n->list2[k] && n->list2[k]->depth > h) h = n->list2[k]->depth;
    if (h + 1 > JINJA_TREE_DEPTH_MAX) return jp_fail(P, n->line, "template nested too deeply");
    n->depth = (uint16_t)(h + 1);
    return n;
}

bool jp_set_name(parser *P, jnode *n, const char *s, size_t len) {
    jstr *str = jarena_str(P->tpl, s, len);
    if (!str) {
        jp_fail(P, n->line, "out of memory");
        return false;
    }
    n->value = jv_obj(JV_STR, str);
    return true;
}

bool jp_vec_push(parser *P, nodevec *v, jnode *n) {
    if (!n) return false;
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 8;
        jnode **items = realloc(v->items, cap * sizeof(jnode *));
        if (!items) {
            jp_fail(P, n->line, "out of memory");
            return false;
        }
        v->items = items;
        v->cap = cap;
    }
    v->items[v->n++] = n;
    return true;
}

bool jp_vec_store(parser *P, nodevec *v, jnode ***list, uint32_t *count) {
    *count = v->n;
    *list = NULL;
    if (v->n) {
        *list = jarena_alloc(P->tpl, v->n * sizeof(jnode *));
        if (!*list) {
            free(v->items);
            jp_fail(P, 0, "out of memory");
            return false;
        }
        memcpy(*list, v->items, v->n * sizeof(jnode *));
    }
    free(v->items);
    v->items = NULL;
    v->n = v->cap = 0;
    return true;
}

static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);

/* ---- expressions ---- */

/* (args, name=value, ...) into n->list / n->list2. */
static bool parse_call_args(parser *P, jnode *n) {
    uint32_t line = cur(P)->line;
    if (!jp_expect_op(P, JOP_LPAREN)) return false;
    nodevec args = {0}, kwargs = {0};
    bool require_comma = false;
    while (!tok_is_op(cur(P), JOP_RPAREN)) {
        if (require_comma) {
            if (!jp_expect_op(P, JOP_COMMA)) goto fail;
            if (tok_is_op(cur(P), JOP_RPAREN)) break;
        }
        if (tok_is_op(cur(P), JOP_MUL) || tok_is_op(cur(P), JOP_POW)) {
            jp_fail(P, line, "*args and **kwargs in calls are not supported");
            goto fail;
        }
        if (cur(P)->type == JT_NAME && tok_is_op(look(P), JOP_ASSIGN)) {
            jnode *kw = jp_node(P, JN_KWARG, cur(P)->line);
            if (!kw || !jp_set_name(P, kw, cur(P)->text, cur(P)->len)) goto fail;
            advance(P);
            advance(P);
            kw->a = jp_parse_expression(P, true);
            if (!kw->a || !jp_vec_push(P, &kwargs, jp_finish(P, kw))) goto fail;
        } else {
            if (kwargs.n) {
                jp_fail(P, line, "invalid syntax for function call expression");
                goto fail;
            }
            if (!jp_vec_push(P, &args, jp_parse_expression(P, true))) goto fail;
        }
        require_comma = true;
    }
    if (!jp_expect_op(P, JOP_RPAREN)) goto fail;
    return jp_vec_store(P, &args, &n->list, &n->nlist) &&
           jp_vec_store(P, &kwargs, &n->list2, &n->nlist2);
fail:
    free(args.items);
    free(kwargs.items);
    return false;
}

static jnode *parse_call(parser *P, jnode *callee) {
    jnode *n = jp_node(P, JN_CALL, cur(P)->line);
    if (!n) return NULL;
    n->a = callee;
    if (!parse_call_args(P, n)) return NULL;
    return jp_finish(P, n);
}

/* A filter or test name, dotted names included. */
static bool parse_dotted_name(parser *P, jnode *n) {
    if (cur(P)->type != JT_NAME) {
        jp_expect_type(P, JT_NAME, "a name");
        return false;
    }
    char name[128];
    size_t len = 0;
    for (;;) {
        const jtok *t = cur(P);
        if (len + t->len + 1 >= sizeof name) {
            jp_fail(P, t->line, "name too long");
            return false;
        }
        memcpy(name + len, t->text, t->len);
        len += t->len;
        advance(P);
        if (!tok_is_op(cur(P), JOP_DOT)) break;
        advance(P);
        if (cur(P)->type != JT_NAME) {
            jp_expect_type(P, JT_NAME, "a name");
            return false;
        }
        name[len++] = '.';
    }
    return jp_set_name(P, n, name, len);
}

/* `|name(args)` repeated; in is NULL for filter blocks and set blocks. */
jnode *jp_parse_filter(parser *P, jnode *in, bool start_inline) {
    while (tok_is_op(cur(P), JOP_PIPE) || start_inline) {
        if (!start_inline) advance(P);
        start_inline = false;
        jnode *n = jp_node(P, JN_FILTER, cur(P)->line);
        if (!n || !parse_dotted_name(P, n)) return NULL;
        n->a = in;
        n->op = (int16_t)jfilter_lookup(jv_str(n->value)->data, jv_str(n->value)->len);
        if (n->op < 0 && !P->soft)
            return jp_fail(P, n->line, "unknown filter '%s'", jv_str(n->value)->data);
        if (tok_is_op(cur(P), JOP_LPAREN) && !parse_call_args(P, n)) return NULL;
        in = jp_finish(P, n);
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
    jnode *n = jp_node(P, JN_TEST, line);
    if (!n || !parse_dotted_name(P, n)) return NULL;
    n->a = in;
    n->op = (int16_t)jtest_lookup(jv_str(n->value)->data, jv_str(n->value)->len);
    if (n->op < 0 && !P->soft) return jp_fail(P, line, "unknown test '%s'", jv_str(n->value)->data);
    const jtok *t = cur(P);
    if (tok_is_op(t, JOP_LPAREN)) {
        if (!parse_call_args(P, n)) return NULL;
    } else if ((t->type == JT_NAME || t->type == JT_STRING || t->type == JT_INT ||
                t->type == JT_FLOAT || tok_is_op(t, JOP_LBRACKET) || tok_is_op(t, JOP_LBRACE)) &&
               !tok_is_name(t, "else") && !tok_is_name(t, "or") && !tok_is_name(t, "and")) {
        if (tok_is_name(t, "is"))
            return jp_fail(P, t->line, "you cannot chain multiple tests with is");
        jnode *arg = parse_postfix(P, parse_primary(P));
        if (!arg) return NULL;
        n->list = jarena_alloc(P->tpl, sizeof(jnode *));
        if (!n->list) return jp_fail(P, line, "out of memory");
        n->list[0] = arg;
        n->nlist = 1;
    }
    if (!jp_finish(P, n)) return NULL;
    if (!negated) return n;
    jnode *not = jp_node(P, JN_NOT, line);
    if (!not ) return NULL;
    not ->a = n;
    return jp_finish(P, not );
}

static jnode *parse_subscribed(parser *P) {
    uint32_t line = cur(P)->line;
    jnode *start = NULL;
    if (!tok_is_op(cur(P), JOP_COLON)) {
        start = jp_parse_expression(P, true);
        if (!start) return NULL;
        if (!tok_is_op(cur(P), JOP_COLON)) return start;
    }
    advance(P); /* colon */
    jnode *n = jp_node(P, JN_SLICE, line);
    if (!n) return NULL;
    n->a = start;
    if (!tok_is_op(cur(P), JOP_RBRACKET) && !tok_is_op(cur(P), JOP_COMMA) &&
        !tok_is_op(cur(P), JOP_COLON)) {
        if (!(n->b = jp_parse_expression(P, true))) return NULL;
    }
    if (tok_is_op(cur(P), JOP_COLON)) {
        advance(P);
        if (!tok_is_op(cur(P), JOP_RBRACKET) && !tok_is_op(cur(P), JOP_COMMA)) {
            if (!(n->c = jp_parse_expression(P, true))) return NULL;
        }
    }
    return jp_finish(P, n);
}

static jnode *parse_subscript(parser *P, jnode *obj) {
    const jtok *t = cur(P);
    uint32_t line = t->line;
    if (tok_is_op(t, JOP_DOT)) {
        advance(P);
        const jtok *attr = cur(P);
        if (attr->type == JT_NAME) {
            jnode *n = jp_node(P, JN_GETATTR, line);
            if (!n || !jp_set_name(P, n, attr->text, attr->len)) return NULL;
            advance(P);
            n->a = obj;
            return jp_finish(P, n);
        }
        if (attr->type != JT_INT) return jp_fail(P, attr->line, "expected name or number");
        jnode *idx = jp_node(P, JN_CONST, attr->line);
        if (!idx) return NULL;
        idx->value = jv_int(attr->ival);
        advance(P);
        jnode *n = jp_node(P, JN_GETITEM, line);
        if (!n) return NULL;
        n->a = obj;
        n->b = jp_finish(P, idx);
        return jp_finish(P, n);
    }
    advance(P); /* [ */
    nodevec args = {0};
    while (!tok_is_op(cur(P), JOP_RBRACKET)) {
        if (args.n && !jp_expect_op(P, JOP_COMMA)) goto fail;
        if (!jp_vec_push(P, &args, parse_subscribed(P))) goto fail;
    }
    if (!jp_expect_op(P, JOP_RBRACKET)) goto fail;
    jnode *n = jp_node(P, JN_GETITEM, line);
    if (!n) goto fail;
    n->a = obj;
    if (args.n == 1) {
        n->b = args.items[0];
        free(args.items);
    } else {
        jnode *tuple = jp_node(P, JN_TUPLE, line);
        if (!tuple || !jp_vec_store(P, &args, &tuple->list, &tuple->nlist)) goto fail;
        n->b = jp_finish(P, tuple);
        if (!n->b) return NULL;
    }
    return jp_finish(P, n);
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
            n = jp_parse_filter(P, n, false);
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
        if (keys.n && !jp_expect_op(P, JOP_COMMA)) goto fail;
        if (tok_is_op(cur(P), close)) break;
        if (!jp_vec_push(P, &keys, jp_parse_expression(P, true))) goto fail;
        if (dict) {
            if (!jp_expect_op(P, JOP_COLON)) goto fail;
            if (!jp_vec_push(P, &vals, jp_parse_expression(P, true))) goto fail;
        }
    }
    if (!jp_expect_op(P, close)) goto fail;
    jnode *n = jp_node(P, dict ? JN_DICT : JN_LIST, line);
    if (!n || !jp_vec_store(P, &keys, &n->list, &n->nlist) ||
        !jp_vec_store(P, &vals, &n->list2, &n->nlist2))
        goto fail;
    return jp_finish(P, n);
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
        if (!(n = jp_node(P, JN_CONST, t->line))) return NULL;
        if (tok_is_name(t, "true") || tok_is_name(t, "True"))
            n->value = jv_bool(true);
        else if (tok_is_name(t, "false") || tok_is_name(t, "False"))
            n->value = jv_bool(false);
        else if (tok_is_name(t, "none") || tok_is_name(t, "None"))
            n->value = jv_none();
        else {
            n->kind = JN_NAME;
            if (!jp_set_name(P, n, t->text, t->len)) return NULL;
        }
        advance(P);
        return jp_finish(P, n);
    case JT_STRING: { /* adjacent literals concatenate */
        if (!(n = jp_node(P, JN_CONST, t->line))) return NULL;
        size_t total = 0, k = P->i;
        while (P->tk->toks[k].type == JT_STRING) total += P->tk->toks[k++].len;
        jstr *s;
        if (total) {
            char *tmp = malloc(total);
            if (!tmp) return jp_fail(P, t->line, "out of memory");
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
        if (!s) return jp_fail(P, t->line, "out of memory");
        n->value = jv_obj(JV_STR, s);
        return jp_finish(P, n);
    }
    case JT_INT:
    case JT_FLOAT:
        if (!(n = jp_node(P, JN_CONST, t->line))) return NULL;
        n->value = t->type == JT_INT ? jv_int(t->ival) : jv_float(t->fval);
        advance(P);
        return jp_finish(P, n);
    case JT_OP:
        if (t->op == JOP_LPAREN) {
            advance(P);
            n = jp_parse_tuple(P, false, true, NULL, true);
            if (!n || !jp_expect_op(P, JOP_RPAREN)) return NULL;
            return n;
        }
        if (t->op == JOP_LBRACKET) return parse_list_or_dict(P, false);
        if (t->op == JOP_LBRACE) return parse_list_or_dict(P, true);
        return jp_unexpected(P);
    default: return jp_unexpected(P);
    }
}

static jnode *parse_unary_inner(parser *P, bool with_filter);

/* Every nested expression passes through here: the guard keeps the parser's
 * own recursion bounded before any tree height can be measured. */
static jnode *parse_unary(parser *P, bool with_filter) {
    if (P->nesting >= JINJA_TREE_DEPTH_MAX)
        return jp_fail(P, cur(P)->line, "expression nested too deeply");
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
        n = jp_node(P, t->op == JOP_SUB ? JN_NEG : JN_POS, t->line);
        if (!n || !(n->a = parse_unary(P, false))) return NULL;
        n = jp_finish(P, n);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    return n;
}

static jnode *binop(parser *P, jnode_kind kind, int op, jnode *a, jnode *b, uint32_t line) {
    if (!a || !b) return NULL;
    jnode *n = jp_node(P, kind, line);
    if (!n) return NULL;
    n->op = (int16_t)op;
    n->a = a;
    n->b = b;
    return jp_finish(P, n);
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
    if (!jp_vec_push(P, &args, first)) return NULL;
    while (tok_is_op(cur(P), JOP_TILDE)) {
        advance(P);
        if (!jp_vec_push(P, &args, parse_math2(P))) {
            free(args.items);
            return NULL;
        }
    }
    jnode *n = jp_node(P, JN_CONCAT, line);
    if (!n || !jp_vec_store(P, &args, &n->list, &n->nlist)) {
        free(args.items);
        return NULL;
    }
    return jp_finish(P, n);
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
        jnode *operand = jp_node(P, JN_OPERAND, t->line);
        if (!operand || !(operand->a = parse_math1(P)) ||
            !jp_vec_push(P, &ops, jp_finish(P, operand))) {
            free(ops.items);
            return NULL;
        }
        operand->op = (int16_t)op;
        line = cur(P)->line;
    }
    if (!ops.n) return first;
    jnode *n = jp_node(P, JN_COMPARE, line);
    if (!n || !jp_vec_store(P, &ops, &n->list, &n->nlist)) {
        free(ops.items);
        return NULL;
    }
    n->a = first;
    return jp_finish(P, n);
}

static jnode *parse_not(parser *P) {
    if (tok_is_name(cur(P), "not")) {
        uint32_t line = cur(P)->line;
        if (P->nesting >= JINJA_TREE_DEPTH_MAX)
            return jp_fail(P, line, "expression nested too deeply");
        advance(P);
        jnode *n = jp_node(P, JN_NOT, line);
        P->nesting++;
        if (n) n->a = parse_not(P);
        P->nesting--;
        if (!n || !n->a) return NULL;
        return jp_finish(P, n);
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
        jnode *n = jp_node(P, JN_CONDEXPR, line);
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
        expr1 = jp_finish(P, n);
        line = cur(P)->line;
    }
    return expr1;
}

jnode *jp_parse_expression(parser *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static bool is_tuple_end(parser *P, const char *extra_end) {
    const jtok *t = cur(P);
    if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || tok_is_op(t, JOP_RPAREN)) return true;
    return extra_end && tok_is_name(t, extra_end);
}

jnode *jp_parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end,
                      bool explicit_parens) {
    uint32_t line = cur(P)->line;
    nodevec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && !jp_expect_op(P, JOP_COMMA)) goto fail;
        if (is_tuple_end(P, extra_end)) break;
        jnode *item = simplified ? parse_primary(P) : jp_parse_expression(P, with_condexpr);
        if (!jp_vec_push(P, &args, item)) goto fail;
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
            jp_describe(cur(P), d, sizeof d);
            return jp_fail(P, cur(P)->line, "expected an expression, got %s", d);
        }
    }
    jnode *n = jp_node(P, JN_TUPLE, line);
    if (!n || !jp_vec_store(P, &args, &n->list, &n->nlist)) goto fail;
    return jp_finish(P, n);
fail:
    free(args.items);
    return NULL;
}
