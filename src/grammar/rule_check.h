/* Rules a matcher cannot run, found in a finished grammar (grammar/grammar.h).
 *
 * The hand-written grammars (GBNF) may hold what the builders never make:
 *   - a rule that matches no finite string (`a ::= "x" a`): output that
 *     enters it can never complete, so generation would run to max_tokens;
 *   - left recursion (`e ::= e "+" t`): the matcher expands the rule again
 *     before reading a byte, its stack grows to LM_MATCHER_MAX_DEPTH and
 *     the paths are dropped, so the language silently shrinks.
 * A cycle of references each of which ends its alternative (`s ::= a? s |`)
 * is no left recursion here: the matcher's tail call keeps one frame and
 * its visit set stops the cycle, as for the regex builder's `(a*)*`.
 * Linear in the grammar's size. */
#ifndef LOOM_GRAMMAR_RULE_CHECK_H
#define LOOM_GRAMMAR_RULE_CHECK_H

#include "grammar/grammar.h"

typedef enum {
    LM_RULE_FINE = 0,
    LM_RULE_ENDLESS,        /* rule matches no finite string */
    LM_RULE_LEFT_RECURSIVE, /* rule may expand to itself before a byte, on a growing stack */
} lm_rule_problem_kind;

typedef struct {
    lm_rule_problem_kind kind;
    uint32_t rule;
    uint32_t via; /* left recursion: the rule it refers to on the cycle (may be rule itself) */
} lm_rule_problem;

/* out->kind LM_RULE_FINE when every rule is fine; the first problem found otherwise. */
lm_status lm_grammar_check_rules(const lm_grammar *g, lm_rule_problem *out, lm_error *err);

#endif
