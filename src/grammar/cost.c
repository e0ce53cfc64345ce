/* The compile-time cost check of a grammar (grammar/cost.h). */
#include "grammar/cost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/matcher.h"

uint64_t lm_grammar_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t lm_grammar_compile_deadline(void) {
    return lm_grammar_now_ns() + (uint64_t)LM_GRAMMAR_COMPILE_MS * 1000000ull;
}

void lm_grammar_quote(char *out, size_t size, const char *text, size_t len, size_t max) {
    if (!size) return;
    size_t n = len < max ? len : max;
    /* not inside a UTF-8 character */
    while (n < len && n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
    snprintf(out, size, "`%.*s%s`", (int)n, text, n < len ? "..." : "");
}

/* Interned states: the breadth-first walk's queue and the closures met. */
#define INTERN_STATES 4096
#define INTERN_WORDS (1u << 20)

typedef struct {
    const lm_grammar *g;
    const char *what;
    uint64_t deadline;
    lm_error *err;
    lm_gmatcher m;
    lm_gstate cur, next, below;
    uint32_t *words;                   /* [INTERN_WORDS] */
    uint32_t n_words;
    uint32_t offset[INTERN_STATES], n_state_words[INTERN_STATES], n_stacks[INTERN_STATES];
    uint32_t n_states, n_costed;
    bool costed[INTERN_STATES];
    uint32_t slots[2 * INTERN_STATES]; /* state + 1, 0 empty */
    uint64_t *class_seen;              /* bitmap over the grammar's classes */
    uint32_t *tops;                    /* [LM_MATCHER_MAX_STACKS] distinct top classes of a state */
    uint64_t spent_before;             /* matcher work before the exploration */
} checker;

static uint32_t hash_state(const lm_gstate *s) {
    uint32_t h = 2166136261u ^ s->n_stacks;
    for (uint32_t i = 0; i < s->n_words; i++) h = (h ^ s->words[i]) * 16777619u;
    return h;
}

/* The state's index if interned before (*is_new false), else interned now
 * (*is_new true); UINT32_MAX when the table is full and it is new. */
static uint32_t intern(checker *c, const lm_gstate *s, bool *is_new) {
    uint32_t mask = 2 * INTERN_STATES - 1, h = hash_state(s) & mask;
    *is_new = true;
    for (;; h = (h + 1) & mask) {
        uint32_t slot = c->slots[h];
        if (!slot) break;
        uint32_t id = slot - 1;
        if (c->n_stacks[id] == s->n_stacks && c->n_state_words[id] == s->n_words &&
            (s->n_words == 0 || memcmp(c->words + c->offset[id], s->words, sizeof(uint32_t) * s->n_words) == 0)) {
            *is_new = false;
            return id;
        }
    }
    if (c->n_states >= INTERN_STATES || c->n_words + s->n_words > INTERN_WORDS) return UINT32_MAX;
    uint32_t id = c->n_states++;
    c->offset[id] = c->n_words;
    c->n_state_words[id] = s->n_words;
    c->n_stacks[id] = s->n_stacks;
    if (s->n_words) memcpy(c->words + c->n_words, s->words, sizeof(uint32_t) * s->n_words);
    c->n_words += s->n_words;
    c->slots[h] = id + 1;
    return id;
}

static lm_status refuse_bound(checker *c) {
    const lm_gmatcher *m = &c->m;
    if (m->bounds_hit & LM_MATCHER_HIT_STACKS)
        return lm_fail(c->err, LM_ERR_UNSUPPORTED,
                       "%s: its automaton reaches a state of more than %d stacks at once (nested repetitions of "
                       "something that may be empty, such as (a*){n}, or many alternatives that begin alike)",
                       c->what, LM_MATCHER_MAX_STACKS);
    if (m->bounds_hit & LM_MATCHER_HIT_DEPTH)
        return lm_fail(c->err, LM_ERR_UNSUPPORTED, "%s: its automaton nests rules deeper than %d", c->what,
                       LM_MATCHER_MAX_DEPTH);
    return lm_fail(c->err, LM_ERR_UNSUPPORTED,
                   "%s: expanding a state of its automaton takes more than %d steps (a repetition of something "
                   "that may be empty, such as (a*)*?)",
                   c->what, LM_MATCHER_MAX_STEPS);
}

/* After a matcher call: a bound hit, the budget spent or memory out. */
static lm_status matcher_outcome(checker *c, uint32_t stacks) {
    if (c->m.out_of_memory) return lm_fail(c->err, LM_ERR_NOMEM, "%s: out of memory checking its cost", c->what);
    if (c->m.truncated) return refuse_bound(c);
    if (c->m.over_budget)
        return lm_fail(c->err, LM_ERR_UNSUPPORTED,
                       "%s: a state of its automaton (%u stacks at once) costs more than %u work units to step "
                       "through, over the budget (nested repetitions of something that may be empty, such as (a*){n}, or "
                       "many alternatives that begin alike)",
                       c->what, stacks > c->m.max_stacks ? stacks : c->m.max_stacks, (unsigned)LM_GRAMMAR_STATE_WORK);
    return LM_OK;
}

/* The distinct classes at the state's stack tops, into c->tops. */
static uint32_t top_classes(checker *c, const lm_gstate *s) {
    uint32_t n = 0, i = 0, len;
    const uint32_t *stack;
    while (lm_gstate_next_stack(s, &i, &stack, &len)) {
        if (len == 0) continue;
        uint32_t k = LM_GE_ARG(c->g->elems[stack[len - 1]]);
        if ((c->class_seen[k >> 6] >> (k & 63)) & 1) continue;
        c->class_seen[k >> 6] |= 1ull << (k & 63);
        c->tops[n++] = k;
    }
    for (uint32_t t = 0; t < n; t++) c->class_seen[c->tops[t] >> 6] &= ~(1ull << (c->tops[t] & 63));
    return n;
}

/* Costs state s (a copy in c->cur): advanced by a byte of each group, and
 * what lies below each top expanded, under LM_GRAMMAR_STATE_WORK.  With
 * explore, the states reached are interned (and so queued). */
static lm_status cost_state(checker *c, bool explore) {
    const lm_gstate *s = &c->cur;
    lm_gmatcher_budget(&c->m, LM_GRAMMAR_STATE_WORK);
    /* bytes in the same classes of the tops lead to the same state */
    uint32_t n_tops = top_classes(c, s);
    uint64_t signature[256];
    uint8_t group_byte[256];
    uint64_t group_sig[256];
    uint32_t n_groups = 0;
    for (int b = 0; b < 256; b++) {
        uint64_t h = 0xcbf29ce484222325ull;
        bool any = false;
        for (uint32_t t = 0; t < n_tops; t++)
            if (lm_byte_class_has(&c->g->classes[c->tops[t]], (uint8_t)b)) {
                h = (h ^ t) * 0x100000001b3ull;
                any = true;
            }
        signature[b] = any ? h : 0;
    }
    for (int b = 0; b < 256; b++) {
        if (!signature[b]) continue;
        uint32_t k = 0;
        while (k < n_groups && group_sig[k] != signature[b]) k++;
        if (k < n_groups) continue;
        group_sig[n_groups] = signature[b];
        group_byte[n_groups++] = (uint8_t)b;
    }
    if (!lm_gmatcher_charge(&c->m, (uint64_t)n_tops * 256 / 64)) return matcher_outcome(c, s->n_stacks);
    for (uint32_t k = 0; k < n_groups; k++) {
        bool alive = lm_gmatcher_advance(&c->m, s, group_byte[k], &c->next);
        lm_status st = matcher_outcome(c, s->n_stacks);
        if (st != LM_OK) return st;
        if (explore && alive) {
            bool is_new;
            intern(c, &c->next, &is_new);
        }
    }
    /* the token mask expands the stack below a frame that may complete */
    uint32_t i = 0, len;
    const uint32_t *stack;
    while (lm_gstate_next_stack(s, &i, &stack, &len)) {
        if (len < 2) continue;
        lm_gmatcher_expand_stack(&c->m, stack, len - 1, &c->below);
        lm_status st = matcher_outcome(c, s->n_stacks);
        if (st != LM_OK) return st;
    }
    if (c->deadline && lm_grammar_now_ns() > c->deadline)
        return lm_fail(c->err, LM_ERR_UNSUPPORTED, "%s: checking what its automaton costs took more than %d ms",
                       c->what, LM_GRAMMAR_COMPILE_MS);
    return LM_OK;
}

static bool exhausted(const checker *c) { return c->m.spent - c->spent_before > LM_GRAMMAR_CHECK_WORK; }

static lm_status explore(checker *c) {
    lm_gmatcher_budget(&c->m, LM_GRAMMAR_STATE_WORK);
    lm_gmatcher_start(&c->m, &c->cur);
    lm_status st = matcher_outcome(c, c->cur.n_stacks);
    if (st != LM_OK) return st;
    bool is_new;
    if (intern(c, &c->cur, &is_new) == UINT32_MAX) return LM_OK;
    /* the start state first: every request meets it */
    c->costed[0] = true;
    c->n_costed = 1;
    if ((st = cost_state(c, true)) != LM_OK) return st;
    /* every rule reference on its own, in the grammar's order (the
     * closures frames start from): a construct anywhere is met early */
    for (uint32_t p = 0; p < c->g->n_elems && !exhausted(c); p++) {
        if (LM_GE_KIND(c->g->elems[p]) != LM_GE_REF) continue;
        lm_gmatcher_budget(&c->m, LM_GRAMMAR_STATE_WORK);
        lm_gmatcher_start_at(&c->m, p, &c->cur);
        if ((st = matcher_outcome(c, c->cur.n_stacks)) != LM_OK) return st;
        uint32_t id = intern(c, &c->cur, &is_new);
        if (!is_new) continue;
        if (id != UINT32_MAX) c->costed[id] = true;
        if ((st = cost_state(c, c->n_costed++ < LM_GRAMMAR_CHECK_STATES)) != LM_OK) return st;
    }
    /* the start state and a breadth-first walk from it and the closures
     * (each state's successors were interned when it was costed) */
    for (uint32_t q = 0; q < c->n_states && c->n_costed < LM_GRAMMAR_CHECK_STATES && !exhausted(c); q++) {
        if (c->costed[q]) continue;
        c->costed[q] = true;
        c->n_costed++;
        lm_gstate view = {.words = c->words + c->offset[q], .n_words = c->n_state_words[q], .n_stacks = c->n_stacks[q]};
        if (!lm_gstate_copy(&c->cur, &view)) return lm_fail(c->err, LM_ERR_NOMEM, "out of memory");
        if ((st = cost_state(c, true)) != LM_OK) return st;
    }
    return LM_OK;
}

lm_status lm_grammar_check_cost(const lm_grammar *g, const char *what, uint64_t deadline_ns, lm_error *err) {
    checker *c = calloc(1, sizeof *c);
    if (!c) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    c->g = g;
    c->what = what;
    c->deadline = deadline_ns;
    c->err = err;
    c->words = malloc(sizeof(uint32_t) * INTERN_WORDS);
    c->class_seen = calloc(((size_t)g->n_classes + 63) / 64 + 1, sizeof(uint64_t));
    c->tops = malloc(sizeof(uint32_t) * (LM_MATCHER_MAX_STACKS + 1));
    lm_status st = c->words && c->class_seen && c->tops ? lm_gmatcher_init(&c->m, g, err)
                                                        : lm_fail(err, LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) st = explore(c);
    lm_gmatcher_free(&c->m);
    lm_gstate_free(&c->cur);
    lm_gstate_free(&c->next);
    lm_gstate_free(&c->below);
    free(c->words);
    free(c->class_seen);
    free(c->tops);
    free(c);
    return st;
}
