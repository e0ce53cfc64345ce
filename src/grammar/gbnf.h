/* A GBNF grammar (llama.cpp's notation, which vLLM's guided_grammar also
 * takes) compiled into a byte-level grammar (grammar/grammar.h).
 *
 * The notation: rules `name ::= alternatives`, one per line (a line may go
 * on after a `|` or inside parentheses), `root` the start; names of
 * letters, digits, '-' and '_'; string literals "..." and character classes
 * [a-z], [^...], with the escapes \n \r \t \\ \" \[ \] \xHH \uHHHH
 * \UHHHHHHHH (code points, written as UTF-8); `.` any character; groups
 * ( ), alternation |, and * + ? {m} {m,} {m,n} (m, n <= LM_GBNF_MAX_REPEAT);
 * `#` comments to the end of the line.  Terminals are Unicode code points:
 * a class or `.` matches one well-formed UTF-8 character.
 *
 * GBNF is context-free and so is the grammar it compiles to: rules may
 * refer to each other recursively; the matcher's stack bound
 * (LM_MATCHER_MAX_DEPTH) limits how deep the output may nest.  Refused,
 * with the line and column: malformed syntax, a rule used but never
 * defined or defined twice, no `root`, a class that matches nothing, a
 * rule that matches no finite string (`a ::= "x" a`), left recursion the
 * matcher would follow forever without reading a byte (`e ::= e "+" t`),
 * llama.cpp's token references (`<think>`, `<[id]>`) and Lark's notation
 * (`start: ...`, `%import`), and anything past the bounds below.  The cost
 * of the result is checked by the caller (grammar/cost.h). */
#ifndef LOOM_GRAMMAR_GBNF_H
#define LOOM_GRAMMAR_GBNF_H

#include <stddef.h>

#include "grammar/grammar.h"

#define LM_GBNF_MAX_LENGTH (64u << 10) /* bytes of grammar text */
#define LM_GBNF_MAX_REPEAT 1000        /* the m and n of {m,n} */
#define LM_GBNF_MAX_NESTING 64         /* parentheses inside each other */
#define LM_GBNF_MAX_NAMES 4096         /* named rules */
#define LM_GBNF_MAX_RULES (1u << 16)   /* compiled rules, groups and repetitions included */
#define LM_GBNF_MAX_ELEMS (1u << 18)   /* compiled elements */

/* Compiles the grammar text (len bytes) into *out; suffix (NULL: none)
 * must follow what root matches. */
lm_status lm_gbnf_compile(const char *text, size_t len, const char *suffix, lm_grammar *out, lm_error *err);

#endif
