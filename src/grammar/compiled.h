/* loom_grammar (include/loom.h): a compiled grammar shared by requests,
 * reference counted atomically (the caller and every request holding it). */
#ifndef LOOM_GRAMMAR_COMPILED_H
#define LOOM_GRAMMAR_COMPILED_H

#include <stdatomic.h>

#include "grammar/grammar.h"
#include "loom.h"

#define LM_GRAMMAR_MAX_CHOICES 4096
#define LM_GRAMMAR_MAX_CHOICE_BYTES (1 << 20) /* all choices together */

struct loom_grammar {
    atomic_int refs;
    lm_grammar grammar;
};

/* Compiles a spec (the body of loom_grammar_compile). */
lm_status lm_grammar_compile_spec(const loom_grammar_spec *spec, lm_grammar *out, lm_error *err);

const loom_grammar *lm_grammar_ref(const loom_grammar *g);
void lm_grammar_unref(const loom_grammar *g);

#endif
