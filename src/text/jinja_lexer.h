/* Tokens of a template, split the way Jinja2's lexer splits them with
 * trim_blocks and lstrip_blocks on (transformers' settings): whitespace
 * control ({%- -%} {{- -}} {#- -#} and the + forms), raw blocks, comments,
 * newline normalisation and the dropped final newline. */
#ifndef LOOM_TEXT_JINJA_LEXER_H
#define LOOM_TEXT_JINJA_LEXER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum {
    JT_EOF,
    JT_DATA,        /* literal template text (value: the text) */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_NAME,
    JT_STRING, /* value: the decoded literal */
    JT_INT,    /* ival */
    JT_FLOAT,  /* fval */
    JT_OP,     /* op */
} jtok_type;

typedef enum {
    JOP_ADD,
    JOP_SUB,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MUL,
    JOP_MOD,
    JOP_POW,
    JOP_TILDE,
    JOP_LBRACKET,
    JOP_RBRACKET,
    JOP_LPAREN,
    JOP_RPAREN,
    JOP_LBRACE,
    JOP_RBRACE,
    JOP_EQ,
    JOP_NE,
    JOP_GT,
    JOP_GTEQ,
    JOP_LT,
    JOP_LTEQ,
    JOP_ASSIGN,
    JOP_DOT,
    JOP_COLON,
    JOP_PIPE,
    JOP_COMMA,
    JOP_SEMICOLON,
} jop;

typedef struct {
    uint8_t type;
    uint8_t op;
    uint32_t line;
    const char *text; /* DATA and NAME: into the normalised source; STRING: owned */
    size_t len;
    int64_t ival;
    double fval;
} jtok;

typedef struct {
    jtok *toks;
    size_t n, cap;
    char *source; /* the normalised source the tokens point into */
} jtokens;

/* Splits src into tokens.  Errors name the line ("chat template line 3: ..."). */
lm_status jlex(const char *src, size_t len, jtokens *out, lm_error *err);
void jtokens_free(jtokens *t);

#endif
