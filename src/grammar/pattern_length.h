/* A JSON Schema string of a pattern and a length together (pattern beside
 * minLength / maxLength): the pattern's automaton made deterministic (its
 * matcher states, byte by byte, grammar/matcher.h) times a count of the
 * characters so far, as grammar rules: state s with c characters written
 * goes on with the bytes s allows, counting those that start a character,
 * and may close the string where s is complete and c is within the bounds.
 * Exact; refused (LM_ERR_UNSUPPORTED) where the automaton has more than
 * LM_PATTERN_MAX_STATES states or the product more than
 * LM_PATTERN_MAX_PRODUCT rules. */
#ifndef LOOM_GRAMMAR_PATTERN_LENGTH_H
#define LOOM_GRAMMAR_PATTERN_LENGTH_H

#include "grammar/regex_compile.h"

#define LM_PATTERN_MAX_STATES 256
#define LM_PATTERN_MAX_PRODUCT 65536

/* Appends to out the pattern's strings (search semantics, the options'
 * forbidden bytes never generated) of min to max characters (max -1:
 * unbounded), then a closing '"'. */
lm_status lm_pattern_with_length(lm_grammar_builder *b, const char *pattern, const lm_regex_options *options, int min,
                                 int max, uint64_t deadline_ns, lm_gseq *out, lm_error *err);

#endif
