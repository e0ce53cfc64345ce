/* The template parser: the statement grammar (if, for, set, macro, call,
 * filter, with, break/continue, generation), the template body, the arena
 * that owns the tree, and jtemplate_compile.  Expressions are parsed by
 * jinja_parse_expr.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_ast.h"
#include "text/jinja_builtins.h"
#include "text/jinja_lexer.h"
#include "text/jinja_parse.h"

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

/* ---- statements ---- */

static jnode *subparse(parser *P, const char *const *end_tags, jnode_kind kind);

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
        jnode *ns = jp_node(P, JN_NAME, t->line);
        if (!ns || !jp_set_name(P, ns, t->text, t->len)) return NULL;
        advance(P);
        advance(P);
        if (cur(P)->type != JT_NAME) return jp_expect_type(P, JT_NAME, "a name"), NULL;
        target = jp_node(P, JN_NSREF, t->line);
        if (!target || !jp_set_name(P, target, cur(P)->text, cur(P)->len)) return NULL;
        advance(P);
        target->a = jp_finish(P, ns);
        return jp_finish(P, target);
    }
    if (name_only) {
        if (t->type != JT_NAME) return jp_expect_type(P, JT_NAME, "a name"), NULL;
        target = jp_node(P, JN_NAME, t->line);
        if (!target || !jp_set_name(P, target, t->text, t->len)) return NULL;
        advance(P);
        return jp_finish(P, target);
    }
    target = jp_parse_tuple(P, true, true, extra_end, false);
    if (!target) return NULL;
    if (!can_assign(target)) return jp_fail(P, target->line, "can't assign to this expression");
    return target;
}

static bool end_of_tag(parser *P) {
    return jp_expect_type(P, JT_BLOCK_END, "end of statement block");
}

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
    if (!jp_expect_op(P, JOP_LPAREN)) return false;
    while (!tok_is_op(cur(P), JOP_RPAREN)) {
        if (params.n && !jp_expect_op(P, JOP_COMMA)) goto fail;
        if (!jp_vec_push(P, &params, parse_assign_target(P, false, true, NULL))) goto fail;
        if (tok_is_op(cur(P), JOP_ASSIGN)) {
            advance(P);
            if (!jp_vec_push(P, &defaults, jp_parse_expression(P, true))) goto fail;
        } else if (defaults.n) {
            jp_fail(P, cur(P)->line, "non-default argument follows default argument");
            goto fail;
        }
    }
    if (!jp_expect_op(P, JOP_RPAREN)) goto fail;
    return jp_vec_store(P, &params, &n->list, &n->nlist) &&
           jp_vec_store(P, &defaults, &n->list2, &n->nlist2);
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
    jnode *n = jp_node(P, JN_IF, line);
    if (!n) return NULL;
    nodevec conds = {0}, bodies = {0};
    P->soft++;
    for (;;) {
        jnode *cond = jp_parse_tuple(P, false, false, NULL, false);
        if (!jp_vec_push(P, &conds, cond)) goto fail;
        jnode *body = parse_body(P, END_IF);
        if (!jp_vec_push(P, &bodies, body)) goto fail;
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
    if (!jp_vec_store(P, &conds, &n->list, &n->nlist) ||
        !jp_vec_store(P, &bodies, &n->list2, &n->nlist2))
        return NULL;
    advance(P); /* endif */
    return jp_finish(P, n);
fail:
    P->soft--;
    free(conds.items);
    free(bodies.items);
    return NULL;
}

static jnode *parse_for(parser *P, uint32_t line) {
    jnode *n = jp_node(P, JN_FOR, line);
    if (!n) return NULL;
    int soft = P->soft;
    P->soft = 0;
    if (!(n->a = parse_assign_target(P, false, false, "in"))) return NULL;
    if (!tok_is_name(cur(P), "in")) return jp_expect_type(P, JT_NAME, "'in'"), NULL;
    advance(P);
    if (!(n->b = jp_parse_tuple(P, false, false, "recursive", false))) return NULL;
    if (tok_is_name(cur(P), "if")) {
        advance(P);
        if (!(n->c = jp_parse_expression(P, true))) return NULL;
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
    return jp_finish(P, n);
}

static jnode *parse_statement(parser *P);

static jnode *parse_set(parser *P, uint32_t line) {
    jnode *target = parse_assign_target(P, true, false, NULL);
    if (!target) return NULL;
    if (tok_is_op(cur(P), JOP_ASSIGN)) {
        advance(P);
        jnode *n = jp_node(P, JN_SET, line);
        if (!n) return NULL;
        n->a = target;
        if (!(n->b = jp_parse_tuple(P, false, true, NULL, false))) return NULL;
        return jp_finish(P, n);
    }
    jnode *n = jp_node(P, JN_SETBLOCK, line);
    if (!n) return NULL;
    n->a = target;
    int soft = P->soft;
    P->soft = 0;
    if (tok_is_op(cur(P), JOP_PIPE)) {
        advance(P);
        if (!(n->c = jp_parse_filter(P, NULL, true))) return NULL;
    }
    static const char *const end[] = {"endset", NULL};
    if (!(n->d = parse_body(P, end))) return NULL;
    advance(P); /* endset */
    P->soft = soft;
    return jp_finish(P, n);
}

static jnode *parse_macro(parser *P, uint32_t line, bool call_block) {
    jnode *n = jp_node(P, call_block ? JN_CALLBLOCK : JN_MACRO, line);
    if (!n) return NULL;
    int soft = P->soft, loops = P->loops;
    P->soft = 0;
    P->loops = 0;
    if (call_block) {
        if (tok_is_op(cur(P), JOP_LPAREN) && !parse_signature(P, n)) return NULL;
        if (!(n->a = jp_parse_expression(P, true))) return NULL;
        if (n->a->kind != JN_CALL) return jp_fail(P, line, "expected call");
        if (!jp_set_name(P, n, "caller", 6)) return NULL;
    } else {
        const jtok *t = cur(P);
        if (t->type != JT_NAME) return jp_expect_type(P, JT_NAME, "a macro name"), NULL;
        if (!jp_set_name(P, n, t->text, t->len)) return NULL;
        advance(P);
        if (!parse_signature(P, n)) return NULL;
    }
    static const char *const end_macro[] = {"endmacro", NULL};
    static const char *const end_call[] = {"endcall", NULL};
    if (!(n->d = parse_body(P, call_block ? end_call : end_macro))) return NULL;
    advance(P);
    P->soft = soft;
    P->loops = loops;
    return jp_finish(P, n);
}

static jnode *parse_filter_block(parser *P, uint32_t line) {
    jnode *n = jp_node(P, JN_FILTERBLOCK, line);
    if (!n) return NULL;
    int soft = P->soft;
    P->soft = 0;
    if (!(n->c = jp_parse_filter(P, NULL, true))) return NULL;
    static const char *const end[] = {"endfilter", NULL};
    if (!(n->d = parse_body(P, end))) return NULL;
    advance(P);
    P->soft = soft;
    return jp_finish(P, n);
}

static jnode *parse_with(parser *P, uint32_t line) {
    jnode *n = jp_node(P, JN_WITH, line);
    if (!n) return NULL;
    nodevec targets = {0}, values = {0};
    int soft = P->soft;
    P->soft = 0;
    while (cur(P)->type != JT_BLOCK_END) {
        if (targets.n && !jp_expect_op(P, JOP_COMMA)) goto fail;
        if (!jp_vec_push(P, &targets, parse_assign_target(P, false, false, NULL))) goto fail;
        if (!jp_expect_op(P, JOP_ASSIGN)) goto fail;
        if (!jp_vec_push(P, &values, jp_parse_expression(P, true))) goto fail;
    }
    if (!jp_vec_store(P, &targets, &n->list, &n->nlist) ||
        !jp_vec_store(P, &values, &n->list2, &n->nlist2))
        return NULL;
    static const char *const end[] = {"endwith", NULL};
    if (!(n->d = parse_body(P, end))) return NULL;
    advance(P);
    P->soft = soft;
    return jp_finish(P, n);
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
        jp_describe(t, d, sizeof d);
        return jp_fail(P, line, "tag name expected, got %s", d);
    }
    if (P->statements >= JINJA_TREE_DEPTH_MAX)
        return jp_fail(P, line, "template nested too deeply");
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
            if (items.n && !jp_expect_op(P, JOP_COMMA)) break;
            jnode *pr = jp_node(P, JN_PRINT, cur(P)->line);
            if (!pr || !(pr->a = jp_parse_expression(P, true)) ||
                !jp_vec_push(P, &items, jp_finish(P, pr)))
                break;
        }
        if (!P->failed) {
            n = jp_node(P, JN_BLOCK, line);
            if (n && jp_vec_store(P, &items, &n->list, &n->nlist))
                n = jp_finish(P, n);
            else
                n = NULL;
        }
        free(items.items);
    } else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!P->loops)
            n = jp_fail(P, line, "'%s' outside of a loop", name);
        else
            n = jp_finish(P, jp_node(P, name[0] == 'b' ? JN_BREAK : JN_CONTINUE, line));
    } else if (!strcmp(name, "generation")) { /* transformers' AssistantTracker: renders its body */
        static const char *const end[] = {"endgeneration", NULL};
        n = parse_body(P, end);
        if (n) advance(P);
    } else if (!strcmp(name, "include") || !strcmp(name, "import") || !strcmp(name, "from") ||
               !strcmp(name, "extends") || !strcmp(name, "block")) {
        n = jp_fail(P, line, "'%s' is not supported: a chat template cannot load other templates",
                    name);
    } else {
        n = jp_fail(P, line, "unknown tag '%s'", name);
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
                jp_fail(P, t->line, "unexpected end of template: missing {%% %s %%}", end_tags[0]);
                goto fail;
            }
            break;
        }
        if (t->type == JT_DATA) {
            jnode *n = jp_node(P, JN_TEXT, t->line);
            jstr *s = n ? jarena_str(P->tpl, t->text, t->len) : NULL;
            if (!s) {
                jp_fail(P, t->line, "out of memory");
                goto fail;
            }
            n->value = jv_obj(JV_STR, s);
            advance(P);
            if (!jp_vec_push(P, &body, jp_finish(P, n))) goto fail;
        } else if (t->type == JT_VAR_BEGIN) {
            advance(P);
            jnode *n = jp_node(P, JN_PRINT, t->line);
            if (!n || !(n->a = jp_parse_tuple(P, false, true, NULL, false))) goto fail;
            if (!jp_expect_type(P, JT_VAR_END, "end of print statement")) goto fail;
            if (!jp_vec_push(P, &body, jp_finish(P, n))) goto fail;
        } else if (t->type == JT_BLOCK_BEGIN) {
            advance(P);
            if (end_tags && in_tags(cur(P), end_tags)) break;
            if (!jp_vec_push(P, &body, parse_statement(P))) goto fail;
        } else {
            jp_unexpected(P);
            goto fail;
        }
    }
    jnode *n = jp_node(P, kind, line);
    if (!n || !jp_vec_store(P, &body, &n->list, &n->nlist)) goto fail;
    return jp_finish(P, n);
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
