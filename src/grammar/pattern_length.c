/* A pattern's strings counted in characters (grammar/pattern_length.h). */
#include "grammar/pattern_length.h"

#include <stdlib.h>
#include <string.h>

#include "grammar/cost.h"
#include "grammar/matcher.h"

typedef struct {
    int target;
    bool counts; /* the bytes start a character */
    lm_byte_class bytes;
} edge;

typedef struct {
    lm_gstate states[LM_PATTERN_MAX_STATES];
    bool complete[LM_PATTERN_MAX_STATES];
    edge *edges[LM_PATTERN_MAX_STATES];
    int n_edges[LM_PATTERN_MAX_STATES];
    int n;
} dfa;

static void dfa_free(dfa *d) {
    for (int i = 0; i < d->n; i++) {
        lm_gstate_free(&d->states[i]);
        free(d->edges[i]);
    }
}

static bool starts_character(int byte) { return byte < 0x80 || byte >= 0xC0; }

static lm_status build_dfa(const lm_grammar *g, uint64_t deadline, dfa *d, lm_error *err) {
    lm_gmatcher m;
    lm_status st = lm_gmatcher_init(&m, g, err);
    if (st != LM_OK) return st;
    lm_gstate next = {0};
    if (!lm_gmatcher_start(&m, &d->states[0])) st = lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema 'pattern': it matches nothing");
    d->n = 1;
    for (int s = 0; s < d->n && st == LM_OK; s++) {
        d->complete[s] = lm_gstate_complete(&d->states[s]);
        d->edges[s] = calloc(256, sizeof(edge));
        if (!d->edges[s]) {
            st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
            break;
        }
        if (deadline && lm_grammar_now_ns() > deadline) {
            st = lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema 'pattern' with minLength/maxLength: its automaton took too long to explore");
            break;
        }
        lm_byte_class allowed;
        lm_gstate_next_bytes(g, &d->states[s], &allowed);
        for (int c = 0; c < 256 && st == LM_OK; c++) {
            if (!lm_byte_class_has(&allowed, (uint8_t)c)) continue;
            if (!lm_gmatcher_advance(&m, &d->states[s], (uint8_t)c, &next)) {
                if (m.failed || m.truncated) st = lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema 'pattern': its automaton is too large");
                continue;
            }
            int t = 0;
            while (t < d->n && !lm_gstate_equal(&d->states[t], &next)) t++;
            if (t == d->n) {
                if (d->n == LM_PATTERN_MAX_STATES) {
                    st = lm_fail(err, LM_ERR_UNSUPPORTED,
                                 "JSON schema 'pattern' with minLength/maxLength: its automaton has more than %d states",
                                 LM_PATTERN_MAX_STATES);
                    break;
                }
                if (!lm_gstate_copy(&d->states[d->n++], &next)) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
            }
            int e = 0;
            while (e < d->n_edges[s] && !(d->edges[s][e].target == t && d->edges[s][e].counts == starts_character(c))) e++;
            if (e == d->n_edges[s]) d->edges[s][d->n_edges[s]++] = (edge){t, starts_character(c), {{0}}};
            lm_byte_class_add(&d->edges[s][e].bytes, (uint8_t)c);
        }
    }
    lm_gstate_free(&next);
    lm_gmatcher_free(&m);
    return st;
}

lm_status lm_pattern_with_length(lm_grammar_builder *b, const char *pattern, const lm_regex_options *options, int min,
                                 int max, uint64_t deadline, lm_gseq *out, lm_error *err) {
    /* the pattern alone, as a grammar of its own */
    lm_grammar_builder pb;
    lm_grammar_builder_init(&pb);
    lm_regex_options opt = *options;
    lm_gseq s = {0};
    uint32_t root = 0;
    lm_grammar g = {0};
    lm_status st = lm_grammar_utf8_multibyte_rule(&pb, &opt.utf8_rule, err);
    if (st == LM_OK) st = lm_regex_compile(&pb, pattern, strlen(pattern), true, &opt, &s, err);
    if (st == LM_OK) st = lm_grammar_rule_of(&pb, &s, &root, err);
    if (st == LM_OK) st = lm_grammar_finish(&pb, root, &g, err);
    lm_gseq_free(&s);
    lm_grammar_builder_free(&pb);
    dfa *d = st == LM_OK ? calloc(1, sizeof *d) : NULL;
    if (st == LM_OK && !d) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) st = build_dfa(&g, deadline, d, err);
    lm_grammar_free(&g);
    int levels = (max >= 0 ? max : min) + 1; /* unbounded: counts saturate at min */
    if (st == LM_OK && (size_t)d->n * (size_t)levels > LM_PATTERN_MAX_PRODUCT)
        st = lm_fail(err, LM_ERR_UNSUPPORTED,
                     "JSON schema 'pattern' with minLength/maxLength: %d automaton states times %d lengths is too many",
                     d ? d->n : 0, levels);
    bool *live = NULL;
    uint32_t *rules = NULL;
    if (st == LM_OK) {
        live = calloc((size_t)d->n * (size_t)levels, sizeof *live);
        rules = calloc((size_t)d->n * (size_t)levels, sizeof *rules);
        if (!live || !rules) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
#define AT(state, count) ((size_t)(count) * (size_t)d->n + (size_t)(state))
#define NEXT_COUNT(e, c) ((e)->counts ? ((c) + 1 < levels ? (c) + 1 : (max >= 0 ? -1 : (c))) : (c))
    /* which (state, count) can still reach a complete state within the bounds */
    for (int c = levels - 1; c >= 0 && st == LM_OK; c--) {
        for (bool changed = true; changed;) {
            changed = false;
            for (int q = 0; q < d->n; q++) {
                if (live[AT(q, c)]) continue;
                bool ok = d->complete[q] && c >= min;
                for (int e = 0; e < d->n_edges[q] && !ok; e++) {
                    int nc = NEXT_COUNT(&d->edges[q][e], c);
                    ok = nc >= 0 && live[AT(d->edges[q][e].target, nc)];
                }
                if (ok) live[AT(q, c)] = changed = true;
            }
        }
    }
    if (st == LM_OK && !live[AT(0, 0)])
        st = lm_fail(err, LM_ERR_UNSUPPORTED, "JSON schema: no string of the pattern has the length minLength/maxLength allow");
    for (size_t i = 0; st == LM_OK && i < (size_t)d->n * (size_t)levels; i++)
        if (live[i]) st = lm_grammar_new_rule(b, &rules[i], err);
    for (int c = 0; c < levels && st == LM_OK; c++)
        for (int q = 0; q < d->n && st == LM_OK; q++) {
            if (!live[AT(q, c)]) continue;
            uint32_t rule = rules[AT(q, c)];
            if (d->complete[q] && c >= min) {
                st = lm_gseq_byte(b, &s, '"', err);
                if (st == LM_OK) st = lm_grammar_add_alt(b, rule, &s, err);
                lm_gseq_clear(&s);
            }
            for (int e = 0; e < d->n_edges[q] && st == LM_OK; e++) {
                const edge *x = &d->edges[q][e];
                int nc = NEXT_COUNT(x, c);
                if (nc < 0 || !live[AT(x->target, nc)]) continue;
                st = lm_gseq_class(b, &s, &x->bytes, err);
                lm_gseq_ref(&s, rules[AT(x->target, nc)]);
                if (st == LM_OK) st = lm_grammar_add_alt(b, rule, &s, err);
                lm_gseq_clear(&s);
            }
        }
    if (st == LM_OK) lm_gseq_ref(out, rules[AT(0, 0)]);
#undef AT
#undef NEXT_COUNT
    lm_gseq_free(&s);
    free(live);
    free(rules);
    if (d) dfa_free(d);
    free(d);
    return st;
}
