/* Free text that must not contain some marker strings: a tool call's raw
 * string parameter, which ends at its closing tag ("</parameter>") and may
 * not hold the markers the tool-call parser splits the output at.  Compiled
 * as the automaton of the words (each state the longest marker prefix the
 * text ends with, a marker completed being no state), a rule per state. */
#ifndef LOOM_GRAMMAR_TEXT_AVOIDING_H
#define LOOM_GRAMMAR_TEXT_AVOIDING_H

#include <stdbool.h>

#include "grammar/grammar.h"

#define LM_TEXT_AVOID_MAX_WORDS 8
#define LM_TEXT_AVOID_MAX_WORD 32 /* bytes */

/* *rule matches any well-formed UTF-8 text without NUL bytes (the empty
 * text included) in which none of words[0..n_words) occurs; the words are
 * non-empty ASCII.  With no_edge_newline the text neither begins nor ends
 * with '\n' (a form whose parser trims one there). */
lm_status lm_grammar_text_avoiding(lm_grammar_builder *b, const char *const *words, int n_words,
                                   bool no_edge_newline, uint32_t *rule, lm_error *err);

#endif
