/* Sets of Unicode code points (a class of a hand-written grammar) and the
 * alternatives of UTF-8 byte sequences that match one character of a set:
 * its ASCII part one byte class, each range beyond split until every byte
 * position is a plain range of bytes (so the sequences are exactly the
 * well-formed encodings of the set's characters, surrogates never). */
#ifndef LOOM_GRAMMAR_CODE_POINTS_H
#define LOOM_GRAMMAR_CODE_POINTS_H

#include "grammar/grammar.h"

#define LM_MAX_CODE_POINT 0x10FFFFu

typedef struct {
    uint32_t lo, hi;
} lm_cp_range;

typedef struct {
    lm_cp_range *r;
    uint32_t n, cap;
} lm_cp_set;

/* false: out of memory */
bool lm_cp_set_add(lm_cp_set *s, uint32_t lo, uint32_t hi);
/* Sorted, overlaps merged, surrogates cut out; negated: the complement
 * within U+0000..U+10FFFF.  false: out of memory. */
bool lm_cp_set_normalize(lm_cp_set *s, bool negated);
/* The set's ASCII part as one byte class; false when it has none. */
bool lm_cp_set_ascii(const lm_cp_set *s, lm_byte_class *c);
/* Adds to rule one alternative per byte sequence of the (normalized) set,
 * each followed by a reference to tail (LM_GRAMMAR_NO_RULE: nothing). */
lm_status lm_cp_set_alts(lm_grammar_builder *b, uint32_t rule, uint32_t tail, const lm_cp_set *s, lm_error *err);

/* The UTF-8 bytes of a code point (not a surrogate, at most U+10FFFF): 1 to 4. */
size_t lm_utf8_encode(uint32_t cp, uint8_t out[4]);

#endif
