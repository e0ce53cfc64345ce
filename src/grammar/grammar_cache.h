/* Compiled grammars kept by their spec's text, for the threads that compile
 * them (a server's request threads; issue 48).
 *
 * Requests with one schema compile equal grammars, each compile checking
 * what its automaton costs (grammar/cost.h: up to a few milliseconds, and
 * LM_GRAMMAR_COMPILE_MS at most).  The cache keeps the last
 * LM_GRAMMAR_CACHE_ENTRIES results, refusals included (a pathological
 * pattern sent again is refused without compiling it again), and:
 *   - compiles a spec once while others wait for it (a burst of one schema
 *     is one compile);
 *   - lets at most `slots` compiles run at once (the others wait their
 *     turn), so that a burst of costly specs takes a few cores' worth of
 *     time from the engine thread at most, not every core.
 * Thread safe; bounded: LM_GRAMMAR_CACHE_ENTRIES entries and
 * LM_GRAMMAR_CACHE_BYTES of keys and grammars (a spec larger than
 * LM_GRAMMAR_CACHE_MAX_KEY is compiled, under the slots, but not kept). */
#ifndef LOOM_GRAMMAR_GRAMMAR_CACHE_H
#define LOOM_GRAMMAR_GRAMMAR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "loom.h"

#define LM_GRAMMAR_CACHE_ENTRIES 64
#define LM_GRAMMAR_CACHE_BYTES ((size_t)64 << 20)
#define LM_GRAMMAR_CACHE_MAX_KEY ((size_t)256 << 10)
#define LM_GRAMMAR_CACHE_MAX_SLOTS 64

typedef struct lm_grammar_cache lm_grammar_cache;

typedef struct {
    uint64_t hits;     /* answered from an entry (or by waiting for its compile) */
    uint64_t compiles; /* loom_grammar_compile calls made */
    int max_active;    /* the most compiles seen running at once */
    int entries;
    size_t bytes;
} lm_grammar_cache_stats;

/* slots: compiles at once, 1 .. LM_GRAMMAR_CACHE_MAX_SLOTS. */
lm_status lm_grammar_cache_create(int slots, lm_grammar_cache **out, lm_error *err);
void lm_grammar_cache_free(lm_grammar_cache *cache);

/* loom_grammar_compile through the cache: the same codes and messages;
 * *out is a new reference (loom_grammar_free it). */
int lm_grammar_cache_compile(lm_grammar_cache *cache, const loom_grammar_spec *spec, loom_grammar **out, char *error,
                             size_t error_size);

void lm_grammar_cache_get_stats(lm_grammar_cache *cache, lm_grammar_cache_stats *stats);

#endif
