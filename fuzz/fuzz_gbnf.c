/* libFuzzer target for the GBNF compiler (src/grammar/gbnf.c) and what it
 * hands out.  The input is a grammar's text.  It must compile or fail with a
 * message naming the GBNF grammar (never crash, leak, hang or read out of
 * bounds); a compiled grammar must be one the rule check finds fine (no
 * endless rule, no left recursion), under the compiler's bounds, and the
 * matcher must run it: over the input's own bytes, and along the first
 * byte each state allows, where every state is either complete or allows
 * some byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "grammar/rule_check.h"

static void walk(const lm_grammar *g, const uint8_t *data, size_t size) {
    lm_gmatcher m;
    lm_error err;
    if (lm_gmatcher_init(&m, g, &err) != LM_OK) abort();
    lm_gmatcher_budget(&m, 1u << 20);
    lm_gstate a = {0}, b = {0};
    bool ok = lm_gmatcher_start(&m, &a);
    for (size_t i = 0; ok && i < size && i < 256; i++) {
        ok = lm_gmatcher_advance(&m, &a, data[i], &b);
        lm_gstate t = a;
        a = b;
        b = t;
    }
    ok = lm_gmatcher_start(&m, &a);
    for (int step = 0; ok && step < 64 && !m.failed; step++) {
        lm_byte_class next;
        lm_gstate_next_bytes(g, &a, &next);
        int first = -1;
        for (int c = 0; c < 256 && first < 0; c++)
            if (lm_byte_class_has(&next, (uint8_t)c)) first = c;
        if (first < 0) {
            if (!lm_gstate_complete(&a)) abort(); /* a dead end */
            break;
        }
        ok = lm_gmatcher_advance(&m, &a, (uint8_t)first, &b);
        if (!ok && !m.failed && !m.truncated) abort(); /* an allowed byte refused */
        lm_gstate t = a;
        a = b;
        b = t;
    }
    lm_gstate_free(&a);
    lm_gstate_free(&b);
    lm_gmatcher_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lm_grammar g;
    lm_error err = {0};
    const char *suffix = size & 1 ? "</end>" : NULL; /* a forced call's closing, say */
    lm_status st = lm_gbnf_compile((const char *)data, size, suffix, &g, &err);
    if (st != LM_OK) {
        if (!err.message[0]) abort(); /* every failure explains itself */
        if (st != LM_ERR_NOMEM && strncmp(err.message, "GBNF grammar", 12) != 0) abort();
        return 0;
    }
    if (g.root >= g.n_rules || g.n_rules > LM_GBNF_MAX_RULES + 1 || g.n_elems > LM_GBNF_MAX_ELEMS + 4096) abort();
    lm_rule_problem problem;
    if (lm_grammar_check_rules(&g, &problem, &err) != LM_OK || problem.kind != LM_RULE_FINE) abort();
    walk(&g, data, size);
    lm_grammar_free(&g);
    return 0;
}
