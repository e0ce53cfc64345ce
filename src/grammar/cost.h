/* What a grammar may cost, checked when it is compiled (issue 48).
 *
 * The matcher (grammar/matcher.h) runs a grammar as a set of stacks.
 * Nested repetitions of something that may be empty (`(a*){1000}`,
 * `(a?b?){500}`) or hundreds of alternatives that begin alike give sets of
 * hundreds of stacks, and every byte the token mask tries then costs an
 * expansion per stack, each deduplicated against the others: `(a*){1000}`
 * cost 0.3-20 s of the engine thread per token.  So before a grammar is
 * handed out, lm_grammar_check_cost explores its matcher, without a
 * vocabulary:
 *   - the start state and the states a breadth-first walk reaches from it,
 *     one byte of each group of bytes the state treats alike, up to
 *     LM_GRAMMAR_CHECK_STATES states;
 *   - the closure of every rule reference on its own (what may come at that
 *     point with nothing below: the states the token mask's frames start
 *     from), so that a construct deep in a large grammar is met too;
 * and refuses the grammar (LM_ERR_UNSUPPORTED, naming the construct the
 * caller gives and the size found) when one of those states
 *   - hits a bound of the matcher (LM_MATCHER_MAX_STACKS stacks at once,
 *     ...): input would be refused silently;
 *   - costs more than LM_GRAMMAR_STATE_WORK work units to advance by one
 *     byte of each of its groups and to expand what lies below each of its
 *     stack tops (what a token mask pays for it at least);
 * or when the check runs past its deadline (LM_GRAMMAR_COMPILE_MS after the
 * compile began).  The exploration itself stops after LM_GRAMMAR_CHECK_WORK
 * units, and the grammar is accepted: a large grammar of small states is
 * not refused for its size (the builders bound that).  A grammar that
 * passes can still meet a costly state deeper in its output: the engine's
 * per-token budget (engine/sequence_grammar.h) ends such a request. */
#ifndef LOOM_GRAMMAR_COST_H
#define LOOM_GRAMMAR_COST_H

#include <stdint.h>

#include "grammar/grammar.h"

/* Ordinary grammars stay far below LM_GRAMMAR_STATE_WORK (the costliest
 * state each explores, in units): bench/grammar_mask's JSON schema 640,
 * an enum of 300 strings 400, an anyOf of 20 objects 220, an object of 40
 * optional properties 1,300 (a stack per property that may come next), of
 * 200 22,500.  `(a*){24}` costs 1,300, `(a*){100}` 20,300, `(a*){150}`
 * 45,600 (accepted: a mask 0.4-0.9 ms on a 151,669-token vocabulary on the
 * development VM); `(a*){180}` is refused.  The exploration in all stops
 * at LM_GRAMMAR_CHECK_WORK (~5 ms there). */
#define LM_GRAMMAR_STATE_WORK (64u << 10)
#define LM_GRAMMAR_CHECK_STATES 256
#define LM_GRAMMAR_CHECK_WORK (512u << 10)
#define LM_GRAMMAR_COMPILE_MS 250

/* Refuses g when it costs more than the budgets above.  what names the
 * construct in the message ("regular expression `(a*){1000}`");
 * deadline_ns is CLOCK_MONOTONIC nanoseconds (0: none). */
lm_status lm_grammar_check_cost(const lm_grammar *g, const char *what, uint64_t deadline_ns, lm_error *err);

/* CLOCK_MONOTONIC in nanoseconds, and the deadline of a compile starting now. */
uint64_t lm_grammar_now_ns(void);
uint64_t lm_grammar_compile_deadline(void);

/* "`text`" cut to at most max bytes of text (then "..."), for messages. */
void lm_grammar_quote(char *out, size_t size, const char *text, size_t len, size_t max);

#endif
