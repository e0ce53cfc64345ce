/* A byte-level context-free grammar, the form every constraint compiles to
 * (JSON, a JSON Schema, a regular expression, a list of choices).
 *
 * A grammar is a set of rules; a rule is a list of alternatives; an
 * alternative is a sequence of elements, each a byte class (a set of bytes
 * matched by one input byte) or a reference to a rule.  The matcher
 * (grammar/matcher.h) runs it as a set of stacks of positions, so
 * recursion ($ref, nested JSON) needs nothing special.  Rules must not be
 * left-recursive (the builders never make one; the matcher's stack bound
 * stops one anyway).
 *
 * Built with lm_grammar_builder: sequences are assembled in an lm_gseq
 * and added to a rule as one alternative; lm_grammar_finish freezes the
 * result into an immutable lm_grammar that several threads may read. */
#ifndef LOOM_GRAMMAR_GRAMMAR_H
#define LOOM_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define LM_GRAMMAR_MAX_ELEMS (1u << 22)   /* elements of all alternatives */
#define LM_GRAMMAR_MAX_RULES (1u << 20)
#define LM_GRAMMAR_MAX_CLASSES (1u << 16)

typedef enum { LM_GE_CLASS = 0, LM_GE_REF = 1, LM_GE_END = 2 } lm_gelem_kind;

/* kind in the low 2 bits, the class or rule index above them */
typedef uint32_t lm_gelem;
#define LM_GE_KIND(e) ((lm_gelem_kind)((e)&3u))
#define LM_GE_ARG(e) ((e) >> 2)
#define LM_GE_MAKE(kind, arg) (((uint32_t)(arg) << 2) | (uint32_t)(kind))

typedef struct {
    uint64_t bits[4];
} lm_byte_class;

static inline bool lm_byte_class_has(const lm_byte_class *c, uint8_t b) {
    return (c->bits[b >> 6] >> (b & 63)) & 1u;
}
static inline void lm_byte_class_add(lm_byte_class *c, uint8_t b) { c->bits[b >> 6] |= 1ull << (b & 63); }
void lm_byte_class_add_range(lm_byte_class *c, uint8_t lo, uint8_t hi);

typedef struct {
    lm_gelem *elems;       /* every alternative, each ending with LM_GE_END */
    uint32_t n_elems;
    lm_byte_class *classes;
    uint32_t n_classes;
    uint32_t *alt_start;   /* element index where each alternative starts, grouped by rule */
    uint32_t *rule_first;  /* [n_rules + 1]: the rule's alternatives are alt_start[rule_first[r] ..] */
    uint32_t n_rules;
    uint32_t root;
    uint64_t hash;         /* of all the above (lm_grammar_content_hash) */
} lm_grammar;

void lm_grammar_free(lm_grammar *g);
/* Equal grammars (same rules, classes and root) compile the same token
 * masks: what lets requests with one schema share their precomputation. */
uint64_t lm_grammar_content_hash(const lm_grammar *g);
bool lm_grammar_equal(const lm_grammar *a, const lm_grammar *b);

/* --- building ----------------------------------------------------------- */

typedef struct {
    lm_gelem *elems;
    uint32_t n, cap;
    bool failed; /* out of memory or over a bound: reported by lm_grammar_add_alt */
} lm_gseq;

typedef struct {
    lm_gelem *elems;
    uint32_t n_elems, cap_elems;
    uint32_t *alt_rule, *alt_at; /* per alternative: its rule and first element */
    uint32_t n_alts, cap_alts;
    lm_byte_class *classes;
    uint32_t n_classes, cap_classes;
    int32_t byte_class[256];     /* the class of each single byte, -1 until made */
    uint32_t n_rules;
} lm_grammar_builder;

void lm_grammar_builder_init(lm_grammar_builder *b);
void lm_grammar_builder_free(lm_grammar_builder *b);
lm_status lm_grammar_new_rule(lm_grammar_builder *b, uint32_t *rule, lm_error *err);
/* Appends seq (without its END) as one alternative of rule. */
lm_status lm_grammar_add_alt(lm_grammar_builder *b, uint32_t rule, const lm_gseq *seq, lm_error *err);
/* An alternative of a single element / of nothing. */
lm_status lm_grammar_add_empty_alt(lm_grammar_builder *b, uint32_t rule, lm_error *err);
/* The class's index (equal classes share one). */
lm_status lm_grammar_class(lm_grammar_builder *b, const lm_byte_class *c, uint32_t *index, lm_error *err);
/* Moves the result into *g (the builder is left empty); every rule must
 * have an alternative. */
lm_status lm_grammar_finish(lm_grammar_builder *b, uint32_t root, lm_grammar *g, lm_error *err);

void lm_gseq_free(lm_gseq *s);
void lm_gseq_clear(lm_gseq *s);
void lm_gseq_push(lm_gseq *s, lm_gelem e);
void lm_gseq_append(lm_gseq *s, const lm_gseq *tail);
void lm_gseq_ref(lm_gseq *s, uint32_t rule);
/* One element matching exactly byte c / the bytes of text. */
lm_status lm_gseq_byte(lm_grammar_builder *b, lm_gseq *s, uint8_t c, lm_error *err);
lm_status lm_gseq_literal(lm_grammar_builder *b, lm_gseq *s, const char *text, size_t len, lm_error *err);
lm_status lm_gseq_class(lm_grammar_builder *b, lm_gseq *s, const lm_byte_class *c, lm_error *err);

/* Rules of common shapes.  Loops are right-recursive with the recursive
 * reference last (the matcher's tail call keeps its stack flat). */
/* rule -> seq rule | (empty)   : seq repeated zero or more times */
lm_status lm_grammar_star(lm_grammar_builder *b, const lm_gseq *seq, uint32_t *rule, lm_error *err);
/* rule -> alternatives given as a single sequence each */
lm_status lm_grammar_rule_of(lm_grammar_builder *b, const lm_gseq *seq, uint32_t *rule, lm_error *err);
/* seq repeated between min and max times (max < 0: unbounded) appended to out;
 * the bounded part costs one rule per optional copy (limited by the caller). */
lm_status lm_grammar_repeat(lm_grammar_builder *b, lm_gseq *out, const lm_gseq *seq, int min, int max,
                            lm_error *err);
/* A rule matching exactly one of n byte strings (duplicates allowed), as a
 * trie: strings that begin alike share the rule of their prefix, so a
 * matcher state holds one stack (and one more where a string may end)
 * however many strings there are; flat alternatives held one per string
 * the input so far begins, and past LM_MATCHER_MAX_STACKS silently lost
 * the rest.  texts[i] need not be NUL-terminated. */
lm_status lm_grammar_literals(lm_grammar_builder *b, const char *const *texts, const size_t *lens, uint32_t n,
                              uint32_t *rule, lm_error *err);
/* Valid UTF-8 characters (any code point from 0x80 up, well-formed): appended
 * as a reference to a rule matching one multi-byte character. */
lm_status lm_grammar_utf8_multibyte_rule(lm_grammar_builder *b, uint32_t *rule, lm_error *err);
/* Adds to rule one alternative per well-formed multi-byte form, each
 * followed by a reference to tail (LM_GRAMMAR_NO_RULE: nothing): a loop
 * over characters with the forms inline stays one token-mask frame. */
#define LM_GRAMMAR_NO_RULE UINT32_MAX
lm_status lm_grammar_utf8_alts(lm_grammar_builder *b, uint32_t rule, uint32_t tail, lm_error *err);

#endif
