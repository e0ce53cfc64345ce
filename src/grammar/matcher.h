/* Runs a grammar (grammar/grammar.h) byte by byte.
 *
 * A state is the set of stacks the input so far can be in.  A stack lists
 * positions (element indexes) from the bottom rule to the top; its top
 * always points at a byte class (the next byte it accepts), or the stack is
 * empty: the grammar is complete on that path.  Advancing by one byte keeps
 * the stacks whose top class holds it, moves their top on and expands
 * references (pushing the rule's alternatives) and ends of alternatives
 * (popping) until every top is a class again.  A reference that ends its
 * alternative replaces its frame instead of stacking on it (a tail call),
 * so right-recursive loops keep the stack flat.
 *
 * Bounded: a stack deeper than LM_MATCHER_MAX_DEPTH, a state of more than
 * LM_MATCHER_MAX_STACKS stacks or an expansion of more than
 * LM_MATCHER_MAX_STEPS steps drops the paths past the bound (the input
 * they would have accepted is refused; `truncated` says it happened).
 * A state is one flat array of words: copying one is a memcpy. */
#ifndef LOOM_GRAMMAR_MATCHER_H
#define LOOM_GRAMMAR_MATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "grammar/grammar.h"

#define LM_MATCHER_MAX_DEPTH 1024
#define LM_MATCHER_MAX_STACKS 512
#define LM_MATCHER_MAX_STEPS 65536

/* words: per stack, its length then its positions bottom first */
typedef struct {
    uint32_t *words;
    uint32_t n_words, cap_words;
    uint32_t n_stacks;
} lm_gstate;

typedef struct {
    const lm_grammar *grammar;
    uint32_t *work; /* the expansion's worklist: records of positions then their length */
    uint32_t n_work, cap_work;
    uint32_t *tmp;  /* one stack [LM_MATCHER_MAX_DEPTH + 1] */
    bool failed;    /* out of memory: states made since are not to be trusted */
    bool truncated; /* a bound dropped paths */
} lm_gmatcher;

lm_status lm_gmatcher_init(lm_gmatcher *m, const lm_grammar *g, lm_error *err);
void lm_gmatcher_free(lm_gmatcher *m);

void lm_gstate_free(lm_gstate *s);
void lm_gstate_clear(lm_gstate *s);
bool lm_gstate_copy(lm_gstate *dst, const lm_gstate *src);
bool lm_gstate_equal(const lm_gstate *a, const lm_gstate *b);

/* The state before any input. */
bool lm_gmatcher_start(lm_gmatcher *m, lm_gstate *out);
/* The state of the single stack [position] (a frame on its own, for the
 * token mask's precomputation). */
bool lm_gmatcher_start_at(lm_gmatcher *m, uint32_t position, lm_gstate *out);
/* out = in advanced by byte (out != in).  False when no stack survives or
 * on failure (check m->failed). */
bool lm_gmatcher_advance(lm_gmatcher *m, const lm_gstate *in, uint8_t byte, lm_gstate *out);
/* Advances a one-stack state given as positions. */
bool lm_gmatcher_advance_stack(lm_gmatcher *m, const uint32_t *stack, uint32_t len, uint8_t byte,
                               lm_gstate *out);

/* The state of a stack given as positions, expanded (its top may be a
 * reference or the end of an alternative); len 0 is the complete state. */
bool lm_gmatcher_expand_stack(lm_gmatcher *m, const uint32_t *stack, uint32_t len, lm_gstate *out);

/* Some path is complete (the input so far is a sentence). */
bool lm_gstate_complete(const lm_gstate *s);
/* Complete and nothing may follow. */
bool lm_gstate_finished(const lm_gstate *s);
/* The union of the classes at the stacks' tops: the bytes that may come next. */
void lm_gstate_next_bytes(const lm_grammar *g, const lm_gstate *s, lm_byte_class *out);

/* Iterating stacks: i is a word offset, 0 to start; returns false at the end. */
static inline bool lm_gstate_next_stack(const lm_gstate *s, uint32_t *i, const uint32_t **stack, uint32_t *len) {
    if (*i >= s->n_words) return false;
    *len = s->words[*i];
    *stack = s->words + *i + 1;
    *i += 1 + *len;
    return true;
}

#endif
