/* Walking a grammar's matcher byte by byte, for the tests and benches that
 * check what a grammar accepts and generates (tests/test_grammar*.c,
 * bench/json_schema_check.c): one copy of the loop that feeds a string to
 * lm_gmatcher and of the random walk that samples complete sentences. */
#ifndef LOOM_TESTS_GRAMMAR_WALK_H
#define LOOM_TESTS_GRAMMAR_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"

/* Whether the whole string is a sentence of the grammar. */
bool test_grammar_accepts(const lm_grammar *g, const char *s);

/* xorshift64: the walks' random numbers (s must not be 0). */
uint64_t test_grammar_random(uint64_t *s);

/* A byte's weight in a walk's choice among the bytes allowed next. */
typedef unsigned (*test_grammar_weight)(uint8_t byte);

/* One random walk into out (at most cap - 1 bytes, NUL-terminated): at each
 * step, where the state is complete it ends (always where nothing may
 * follow, else one time in stop_one_in), otherwise one allowed byte is
 * taken, each with its weight (NULL: all alike).  False when no complete
 * sentence came within cap - 1 bytes. */
bool test_grammar_walk(const lm_grammar *g, uint64_t *rng, test_grammar_weight weight, unsigned stop_one_in, char *out,
                       size_t cap);

#endif
