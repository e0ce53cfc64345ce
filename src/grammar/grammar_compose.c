#include "grammar/grammar_compose.h"

#include <stdlib.h>
#include <string.h>

#include "grammar/compiled.h"
#include "grammar/cost.h"

lm_status lm_grammar_embed(lm_grammar_builder *b, const lm_grammar *piece, uint32_t *root, lm_error *err) {
    uint32_t *class_of = piece->n_classes ? malloc(sizeof *class_of * piece->n_classes) : NULL;
    if (piece->n_classes && !class_of) return lm_fail(err, LM_ERR_NOMEM, "out of memory composing a grammar");
    lm_status st = LM_OK;
    for (uint32_t i = 0; st == LM_OK && i < piece->n_classes; i++)
        st = lm_grammar_class(b, &piece->classes[i], &class_of[i], err);
    /* The piece's rules become consecutive new rules: rule r is first + r. */
    uint32_t first = b->n_rules;
    for (uint32_t r = 0; st == LM_OK && r < piece->n_rules; r++) {
        uint32_t made;
        st = lm_grammar_new_rule(b, &made, err);
        if (st == LM_OK && made != first + r) st = lm_fail(err, LM_ERR_INTERNAL, "grammar rules are not numbered in order");
    }
    lm_gseq seq = {0};
    for (uint32_t r = 0; st == LM_OK && r < piece->n_rules; r++)
        for (uint32_t a = piece->rule_first[r]; st == LM_OK && a < piece->rule_first[r + 1]; a++) {
            lm_gseq_clear(&seq);
            for (const lm_gelem *e = piece->elems + piece->alt_start[a]; LM_GE_KIND(*e) != LM_GE_END; e++)
                lm_gseq_push(&seq, LM_GE_KIND(*e) == LM_GE_CLASS ? LM_GE_MAKE(LM_GE_CLASS, class_of[LM_GE_ARG(*e)])
                                                                 : LM_GE_MAKE(LM_GE_REF, first + LM_GE_ARG(*e)));
            st = lm_grammar_add_alt(b, first + r, &seq, err);
        }
    lm_gseq_free(&seq);
    free(class_of);
    if (st == LM_OK) *root = first + piece->root;
    return st;
}

lm_status lm_grammar_publish(lm_grammar *g, const char *what, uint64_t deadline_ns, loom_grammar **out,
                             lm_error *err) {
    *out = NULL;
    lm_status st = lm_grammar_check_cost(g, what, deadline_ns, err);
    loom_grammar *made = st == LM_OK ? calloc(1, sizeof *made) : NULL;
    if (st == LM_OK && !made) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
    if (st != LM_OK) {
        lm_grammar_free(g);
        return st;
    }
    atomic_init(&made->refs, 1);
    made->grammar = *g;
    memset(g, 0, sizeof *g);
    *out = made;
    return LM_OK;
}
