/* Composing grammars out of compiled pieces: a finished grammar (a JSON
 * Schema's, a regular expression's) copied into a builder as one rule of a
 * larger grammar, and a built grammar handed out as a loom_grammar after
 * the same cost check every compiled grammar passes.  What lets a forced
 * tool call's grammar (server/tool_call_grammar.c) constrain each
 * parameter by its own schema without a second JSON compiler. */
#ifndef LOOM_GRAMMAR_GRAMMAR_COMPOSE_H
#define LOOM_GRAMMAR_GRAMMAR_COMPOSE_H

#include "grammar/grammar.h"
#include "loom.h"

/* Copies every rule of piece into b (its classes shared with b's equal
 * ones); *root: the rule that matches what piece's root matches. */
lm_status lm_grammar_embed(lm_grammar_builder *b, const lm_grammar *piece, uint32_t *root, lm_error *err);

/* Checks g's cost (grammar/cost.h, naming it by what) and moves it into a
 * new loom_grammar (one reference, the caller's); g is left empty either
 * way. */
lm_status lm_grammar_publish(lm_grammar *g, const char *what, uint64_t deadline_ns, loom_grammar **out,
                             lm_error *err);

#endif
