/* Endless rules and left recursion (grammar/rule_check.h).
 *
 * Both "matches a finite string" and "matches the empty string" are least
 * fixpoints over the alternatives, found with a worklist: an alternative
 * waits for its references (each occurrence counted), and a rule is settled
 * when one of its alternatives stops waiting.  Left recursion is a cycle of
 * the graph "rule A may expand rule B before reading a byte" (B comes after
 * nothing but rules that may be empty) that holds an edge whose reference
 * does not end its alternative: the strongly connected components
 * (Tarjan's, with an explicit stack: grammars have up to 2^20 rules). */
#include "grammar/rule_check.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const lm_grammar *g;
    uint32_t n_alts;
    uint32_t *alt_rule;            /* [n_alts] */
    uint32_t *occ_first, *occ_alt; /* per rule, the alternatives referring to it (each occurrence) */
    uint32_t *waiting;             /* [n_alts] */
    uint32_t *queue;               /* [n_rules] */
} fixpoint;

static const lm_gelem *alt_elems(const lm_grammar *g, uint32_t a) { return g->elems + g->alt_start[a]; }

/* settled[r] for every rule: some alternative whose references are all
 * settled (and, when no_classes, that has no byte class). */
static void settle(fixpoint *f, bool no_classes, bool *settled) {
    const lm_grammar *g = f->g;
    uint32_t head = 0, tail = 0;
    memset(settled, 0, sizeof *settled * g->n_rules);
    for (uint32_t a = 0; a < f->n_alts; a++) {
        uint32_t refs = 0;
        bool has_class = false;
        for (const lm_gelem *e = alt_elems(g, a); LM_GE_KIND(*e) != LM_GE_END; e++) {
            if (LM_GE_KIND(*e) == LM_GE_REF) refs++;
            else has_class = true;
        }
        f->waiting[a] = no_classes && has_class ? UINT32_MAX : refs;
        if (f->waiting[a] == 0 && !settled[f->alt_rule[a]]) {
            settled[f->alt_rule[a]] = true;
            f->queue[tail++] = f->alt_rule[a];
        }
    }
    while (head < tail) {
        uint32_t r = f->queue[head++];
        for (uint32_t o = f->occ_first[r]; o < f->occ_first[r + 1]; o++) {
            uint32_t a = f->occ_alt[o];
            if (f->waiting[a] == UINT32_MAX || --f->waiting[a] != 0 || settled[f->alt_rule[a]]) continue;
            settled[f->alt_rule[a]] = true;
            f->queue[tail++] = f->alt_rule[a];
        }
    }
}

typedef struct {
    uint32_t *first; /* [n_rules + 1] */
    uint32_t *to;    /* target << 1 | (1 when the reference does not end its alternative) */
} edges;

/* The edges "may expand before a byte"; count only (e->to NULL) or fill. */
static uint32_t left_edges(const lm_grammar *g, const bool *nullable, edges *e) {
    uint32_t n = 0;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        if (e->to) e->first[r] = n;
        for (uint32_t a = g->rule_first[r]; a < g->rule_first[r + 1]; a++)
            for (const lm_gelem *x = alt_elems(g, a); LM_GE_KIND(*x) == LM_GE_REF; x++) {
                uint32_t t = LM_GE_ARG(*x);
                if (e->to) e->to[n] = t << 1 | (LM_GE_KIND(x[1]) != LM_GE_END);
                n++;
                if (!nullable[t]) break;
            }
    }
    if (e->to) e->first[g->n_rules] = n;
    return n;
}

/* Tarjan's strongly connected components, iteratively: comp[r] for every rule. */
static void components(uint32_t n_rules, const edges *e, uint32_t *comp, uint32_t *index, uint32_t *low,
                       uint32_t *stack, uint32_t *calls, uint32_t *call_edge, bool *on_stack) {
    const uint32_t none = UINT32_MAX;
    for (uint32_t r = 0; r < n_rules; r++) index[r] = none;
    uint32_t next = 0, sp = 0, n_comp = 0;
    for (uint32_t root = 0; root < n_rules; root++) {
        if (index[root] != none) continue;
        uint32_t depth = 0;
        calls[depth] = root;
        call_edge[depth++] = e->first[root];
        index[root] = low[root] = next++;
        stack[sp++] = root;
        on_stack[root] = true;
        while (depth) {
            uint32_t v = calls[depth - 1];
            if (call_edge[depth - 1] < e->first[v + 1]) {
                uint32_t w = e->to[call_edge[depth - 1]++] >> 1;
                if (index[w] == none) {
                    index[w] = low[w] = next++;
                    stack[sp++] = w;
                    on_stack[w] = true;
                    calls[depth] = w;
                    call_edge[depth++] = e->first[w];
                } else if (on_stack[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            depth--;
            if (depth && low[v] < low[calls[depth - 1]]) low[calls[depth - 1]] = low[v];
            if (low[v] != index[v]) continue;
            uint32_t w;
            do {
                w = stack[--sp];
                on_stack[w] = false;
                comp[w] = n_comp;
            } while (w != v);
            n_comp++;
        }
    }
}

lm_status lm_grammar_check_rules(const lm_grammar *g, lm_rule_problem *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    uint32_t R = g->n_rules, A = g->rule_first[R], n_refs = 0;
    for (uint32_t i = 0; i < g->n_elems; i++) n_refs += LM_GE_KIND(g->elems[i]) == LM_GE_REF;
    fixpoint f = {.g = g, .n_alts = A};
    f.alt_rule = malloc(sizeof(uint32_t) * (A ? A : 1));
    f.occ_first = calloc((size_t)R + 1, sizeof(uint32_t));
    f.occ_alt = malloc(sizeof(uint32_t) * (n_refs ? n_refs : 1));
    f.waiting = malloc(sizeof(uint32_t) * (A ? A : 1));
    f.queue = malloc(sizeof(uint32_t) * ((size_t)R * 7 + 1)); /* queue, then the SCC arrays */
    bool *productive = calloc((size_t)R * 3 + 1, sizeof(bool));
    edges e = {.first = malloc(sizeof(uint32_t) * ((size_t)R + 1))};
    lm_status st = LM_OK;
    if (!f.alt_rule || !f.occ_first || !f.occ_alt || !f.waiting || !f.queue || !productive || !e.first) {
        st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (uint32_t r = 0; r < R; r++)
        for (uint32_t a = g->rule_first[r]; a < g->rule_first[r + 1]; a++) f.alt_rule[a] = r;
    /* occurrences by referenced rule: a counting sort */
    for (uint32_t a = 0; a < A; a++)
        for (const lm_gelem *x = alt_elems(g, a); LM_GE_KIND(*x) != LM_GE_END; x++)
            if (LM_GE_KIND(*x) == LM_GE_REF) f.occ_first[LM_GE_ARG(*x) + 1]++;
    for (uint32_t r = 0; r < R; r++) f.occ_first[r + 1] += f.occ_first[r];
    uint32_t *fill = f.queue; /* the fill cursors, before the queue needs it */
    memcpy(fill, f.occ_first, sizeof(uint32_t) * R);
    for (uint32_t a = 0; a < A; a++)
        for (const lm_gelem *x = alt_elems(g, a); LM_GE_KIND(*x) != LM_GE_END; x++)
            if (LM_GE_KIND(*x) == LM_GE_REF) f.occ_alt[fill[LM_GE_ARG(*x)]++] = a;

    bool *nullable = productive + R, *on_stack = productive + 2 * (size_t)R;
    settle(&f, false, productive);
    for (uint32_t r = 0; r < R; r++)
        if (!productive[r]) {
            *out = (lm_rule_problem){LM_RULE_ENDLESS, r, r};
            goto done;
        }
    settle(&f, true, nullable);
    uint32_t n_edges = left_edges(g, nullable, &e);
    e.to = malloc(sizeof(uint32_t) * (n_edges ? n_edges : 1));
    if (!e.to) {
        st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
        goto done;
    }
    left_edges(g, nullable, &e);
    uint32_t *comp = f.queue + R, *index = comp + R, *low = index + R, *stack = low + R, *calls = stack + R,
             *call_edge = calls + R;
    components(R, &e, comp, index, low, stack, calls, call_edge, on_stack);
    for (uint32_t r = 0; r < R; r++)
        for (uint32_t i = e.first[r]; i < e.first[r + 1]; i++) {
            uint32_t t = e.to[i] >> 1;
            if ((e.to[i] & 1) && comp[t] == comp[r]) {
                *out = (lm_rule_problem){LM_RULE_LEFT_RECURSIVE, r, t};
                goto done;
            }
        }
done:
    free(f.alt_rule);
    free(f.occ_first);
    free(f.occ_alt);
    free(f.waiting);
    free(f.queue);
    free(productive);
    free(e.first);
    free(e.to);
    return st;
}
