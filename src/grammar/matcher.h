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
 * they would have accepted is refused; `truncated` says it happened and
 * `bounds_hit` which bound it was).
 *
 * Those bounds keep one expansion finite, not cheap: a state near the
 * stack bound costs a quadratic dedup per expansion, and the token mask
 * runs expansions per stack (`(a*){1000}` cost seconds a token).  So the
 * matcher also counts its work (expansion steps and stacks compared, one
 * unit each, a few nanoseconds), and a caller may give it a budget
 * (lm_gmatcher_budget): past it the matcher fails, with `over_budget` set,
 * until a new budget is given.  What the budgets are lives with the
 * callers (grammar/cost.h: at compile time; engine/sequence_grammar.h:
 * per token).
 *
 * A repetition of something that may be empty (`(a*)*`) is a cycle of
 * expansions that consume nothing: each call (advance, start, expand)
 * remembers the rule expansions it made, a rule and the stack below it,
 * and one met again is skipped (it would add the same stacks to the same
 * state), which also shares the work of stacks whose continuations meet.
 *
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

/* lm_gmatcher.bounds_hit */
#define LM_MATCHER_HIT_DEPTH 1u
#define LM_MATCHER_HIT_STACKS 2u
#define LM_MATCHER_HIT_STEPS 4u

/* A rule expanded on a stack below it, in the current call. */
typedef struct {
    uint64_t hash;
    uint32_t generation; /* the call's, or older: an empty slot */
    uint32_t rule, below_len, below_at; /* below: visit_words[below_at ..] */
} lm_gvisit;

#define LM_MATCHER_MAX_VISITS (1u << 16)      /* slots; half of them filled at most */
#define LM_MATCHER_MAX_VISIT_WORDS (1u << 18) /* the stacks below them */

typedef struct {
    const lm_grammar *grammar;
    lm_gvisit *visits;     /* open addressing by hash, [cap_visits] (a power of 2) */
    uint32_t cap_visits, n_visits, generation;
    uint32_t *visit_words;
    uint32_t n_visit_words, cap_visit_words;
    /* the stacks of the call's state by hash, for its dedup:
     * [2 * LM_MATCHER_MAX_STACKS] of (generation, word offset) */
    uint32_t (*stack_slots)[2];
    uint32_t *work; /* the expansion's worklist: records of positions then their length */
    uint32_t n_work, cap_work;
    uint32_t *tmp;  /* one stack [LM_MATCHER_MAX_DEPTH + 1] */
    bool failed;    /* out of memory or over budget: states made since are not to be trusted */
    bool truncated; /* a bound dropped paths */
    uint32_t bounds_hit;  /* LM_MATCHER_HIT_*: the bounds that did */
    uint32_t max_stacks;  /* the most stacks of a state made so far */
    uint64_t spent;       /* work units so far (never reset) */
    uint64_t spent_limit; /* past it: failed and over_budget; 0 = no budget */
    uint64_t budget;      /* the units last given to lm_gmatcher_budget */
    bool over_budget;
    bool out_of_memory;
} lm_gmatcher;

lm_status lm_gmatcher_init(lm_gmatcher *m, const lm_grammar *g, lm_error *err);
void lm_gmatcher_free(lm_gmatcher *m);

/* The next calls may spend `units` more work units in all (0: no budget).
 * Clears an earlier over_budget failure, not an out-of-memory one. */
void lm_gmatcher_budget(lm_gmatcher *m, uint64_t units);

/* Charges work done by a caller on the matcher's behalf (the token mask's
 * trie walks): false, with the matcher failed, past the budget. */
static inline bool lm_gmatcher_charge(lm_gmatcher *m, uint64_t units) {
    m->spent += units;
    if (!m->spent_limit || m->spent <= m->spent_limit) return true;
    m->over_budget = m->failed = true;
    return false;
}

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
