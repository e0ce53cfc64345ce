/* The byte-level grammar matcher (grammar/matcher.h). */
#include "grammar/matcher.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_gmatcher_init(lm_gmatcher *m, const lm_grammar *g, lm_error *err) {
    memset(m, 0, sizeof *m);
    m->grammar = g;
    m->tmp = malloc(sizeof(uint32_t) * (LM_MATCHER_MAX_DEPTH + 1));
    m->stack_slots = calloc(2 * LM_MATCHER_MAX_STACKS, sizeof *m->stack_slots);
    if (!m->tmp || !m->stack_slots) {
        lm_gmatcher_free(m);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    return LM_OK;
}

void lm_gmatcher_budget(lm_gmatcher *m, uint64_t units) {
    m->spent_limit = units ? m->spent + units : 0;
    m->budget = units;
    if (m->over_budget) {
        m->over_budget = false;
        m->failed = m->out_of_memory;
    }
}

void lm_gmatcher_free(lm_gmatcher *m) {
    free(m->visits);
    free(m->visit_words);
    free(m->stack_slots);
    free(m->work);
    free(m->tmp);
    memset(m, 0, sizeof *m);
}

void lm_gstate_free(lm_gstate *s) {
    free(s->words);
    memset(s, 0, sizeof *s);
}

void lm_gstate_clear(lm_gstate *s) {
    s->n_words = 0;
    s->n_stacks = 0;
}

static bool reserve(uint32_t **p, uint32_t *cap, uint32_t need) {
    if (need <= *cap) return true;
    uint32_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    uint32_t *q = realloc(*p, sizeof(uint32_t) * c);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

bool lm_gstate_copy(lm_gstate *dst, const lm_gstate *src) {
    if (!reserve(&dst->words, &dst->cap_words, src->n_words)) return false;
    if (src->n_words) memcpy(dst->words, src->words, sizeof(uint32_t) * src->n_words);
    dst->n_words = src->n_words;
    dst->n_stacks = src->n_stacks;
    return true;
}

bool lm_gstate_equal(const lm_gstate *a, const lm_gstate *b) {
    return a->n_words == b->n_words && a->n_stacks == b->n_stacks &&
           (a->n_words == 0 || memcmp(a->words, b->words, sizeof(uint32_t) * a->n_words) == 0);
}

/* A new call: forget its predecessor's expansions. */
static void begin_call(lm_gmatcher *m) {
    m->n_visits = 0;
    m->n_visit_words = 0;
    if (++m->generation == 0) { /* wrapped: every slot stale for real */
        for (uint32_t i = 0; i < m->cap_visits; i++) m->visits[i].generation = 0;
        for (uint32_t i = 0; i < 2 * LM_MATCHER_MAX_STACKS; i++) m->stack_slots[i][0] = 0;
        m->generation = 1;
    }
}

static uint64_t visit_hash(uint32_t rule, const uint32_t *below, uint32_t len) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)rule << 32 | len);
    for (uint32_t i = 0; i < len; i++) h = (h ^ below[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static bool visit_grow(lm_gmatcher *m) {
    uint32_t cap = m->cap_visits ? m->cap_visits * 2 : 64;
    if (cap > LM_MATCHER_MAX_VISITS) return false;
    lm_gvisit *v = calloc(cap, sizeof *v);
    if (!v) return false;
    for (uint32_t i = 0; i < m->cap_visits; i++) {
        if (m->visits[i].generation != m->generation) continue;
        uint32_t h = (uint32_t)m->visits[i].hash & (cap - 1);
        while (v[h].generation == m->generation) h = (h + 1) & (cap - 1);
        v[h] = m->visits[i];
    }
    free(m->visits);
    m->visits = v;
    m->cap_visits = cap;
    return true;
}

/* Whether rule was expanded on the stack below[0 .. len) in this call;
 * remembers it if not (when there is room: past the bounds expansions are
 * just not remembered, which costs time, not correctness). */
static bool visited(lm_gmatcher *m, uint32_t rule, const uint32_t *below, uint32_t len) {
    if (m->n_visits * 2 >= m->cap_visits) visit_grow(m); /* failing, nothing more is remembered */
    if (!m->cap_visits) return false;
    uint64_t h = visit_hash(rule, below, len);
    uint32_t mask = m->cap_visits - 1, at = (uint32_t)h & mask;
    for (; m->visits[at].generation == m->generation; at = (at + 1) & mask) {
        const lm_gvisit *v = &m->visits[at];
        if (v->hash == h && v->rule == rule && v->below_len == len &&
            (len == 0 || memcmp(m->visit_words + v->below_at, below, sizeof(uint32_t) * len) == 0))
            return true;
    }
    if (m->n_visits * 2 >= m->cap_visits || m->n_visit_words + len > LM_MATCHER_MAX_VISIT_WORDS) return false;
    if (m->n_visit_words + len > m->cap_visit_words) {
        uint32_t c = m->cap_visit_words ? m->cap_visit_words : 256;
        while (c < m->n_visit_words + len) c *= 2;
        uint32_t *q = realloc(m->visit_words, sizeof(uint32_t) * c);
        if (!q) return false;
        m->visit_words = q;
        m->cap_visit_words = c;
    }
    if (len) memcpy(m->visit_words + m->n_visit_words, below, sizeof(uint32_t) * len);
    m->visits[at] = (lm_gvisit){h, m->generation, rule, len, m->n_visit_words};
    m->n_visit_words += len;
    m->n_visits++;
    return false;
}

/* Adds a finished stack to out unless an equal one is there (found by
 * hash among the call's stacks: out holds only what this call added). */
static void add_stack(lm_gmatcher *m, lm_gstate *out, const uint32_t *stack, uint32_t len) {
    uint32_t h = 2166136261u ^ len;
    for (uint32_t i = 0; i < len; i++) h = (h ^ stack[i]) * 16777619u;
    uint32_t mask = 2 * LM_MATCHER_MAX_STACKS - 1, at = (h ^ (h >> 15)) & mask;
    for (;; at = (at + 1) & mask) {
        if (!lm_gmatcher_charge(m, 1)) return;
        if (m->stack_slots[at][0] != m->generation) break;
        const uint32_t *other = out->words + m->stack_slots[at][1];
        if (other[0] == len && (len == 0 || memcmp(other + 1, stack, sizeof(uint32_t) * len) == 0)) return;
    }
    if (out->n_stacks >= LM_MATCHER_MAX_STACKS) {
        m->truncated = true;
        m->bounds_hit |= LM_MATCHER_HIT_STACKS;
        return;
    }
    if (!reserve(&out->words, &out->cap_words, out->n_words + len + 1)) {
        m->failed = m->out_of_memory = true;
        return;
    }
    m->stack_slots[at][0] = m->generation;
    m->stack_slots[at][1] = out->n_words;
    out->words[out->n_words] = len;
    if (len) memcpy(out->words + out->n_words + 1, stack, sizeof(uint32_t) * len);
    out->n_words += len + 1;
    out->n_stacks++;
    if (out->n_stacks > m->max_stacks) m->max_stacks = out->n_stacks;
}

static bool work_push(lm_gmatcher *m, const uint32_t *stack, uint32_t len, uint32_t extra) {
    uint32_t n = len + (extra != UINT32_MAX);
    if (n > LM_MATCHER_MAX_DEPTH) {
        m->truncated = true;
        m->bounds_hit |= LM_MATCHER_HIT_DEPTH;
        return true;
    }
    if (!reserve(&m->work, &m->cap_work, m->n_work + n + 1)) {
        m->failed = m->out_of_memory = true;
        return false;
    }
    memcpy(m->work + m->n_work, stack, sizeof(uint32_t) * len);
    if (extra != UINT32_MAX) m->work[m->n_work + len] = extra;
    m->work[m->n_work + n] = n;
    m->n_work += n + 1;
    return true;
}

/* Expands the stack into finished stacks (tops at classes, or empty) in out. */
static void expand(lm_gmatcher *m, lm_gstate *out, const uint32_t *stack, uint32_t len) {
    const lm_grammar *g = m->grammar;
    m->n_work = 0;
    if (!work_push(m, stack, len, UINT32_MAX)) return;
    uint32_t steps = 0;
    while (m->n_work > 0) {
        if (++steps > LM_MATCHER_MAX_STEPS) {
            m->truncated = true;
            m->bounds_hit |= LM_MATCHER_HIT_STEPS;
            m->n_work = 0;
            return;
        }
        if (!lm_gmatcher_charge(m, 1) || m->failed) {
            m->n_work = 0;
            return;
        }
        uint32_t n = m->work[m->n_work - 1];
        uint32_t *s = m->work + m->n_work - 1 - n;
        if (n == 0) {
            add_stack(m, out, s, 0);
            m->n_work -= 1;
            continue;
        }
        lm_gelem e = g->elems[s[n - 1]];
        switch (LM_GE_KIND(e)) {
        case LM_GE_CLASS:
            add_stack(m, out, s, n);
            m->n_work -= n + 1;
            break;
        case LM_GE_END: /* the alternative is done: back to the frame below */
            s[n - 1] = n - 1; /* the top's word becomes the shorter record's length */
            m->n_work -= 1;
            break;
        default: { /* LM_GE_REF: continue after it, then push each alternative */
            uint32_t rule = LM_GE_ARG(e), cont = s[n - 1] + 1;
            memcpy(m->tmp, s, sizeof(uint32_t) * n);
            uint32_t keep = n;
            if (LM_GE_KIND(g->elems[cont]) == LM_GE_END) keep = n - 1; /* tail call */
            else m->tmp[n - 1] = cont;
            m->n_work -= n + 1;
            if (visited(m, rule, m->tmp, keep)) break; /* its stacks are in out already, or on their way */
            for (uint32_t a = g->rule_first[rule]; a < g->rule_first[rule + 1]; a++)
                if (!work_push(m, m->tmp, keep, g->alt_start[a])) return;
            break;
        }
        }
    }
}

bool lm_gmatcher_start(lm_gmatcher *m, lm_gstate *out) {
    lm_gstate_clear(out);
    begin_call(m);
    const lm_grammar *g = m->grammar;
    for (uint32_t a = g->rule_first[g->root]; a < g->rule_first[g->root + 1]; a++) {
        uint32_t pos = g->alt_start[a];
        expand(m, out, &pos, 1);
    }
    return out->n_stacks > 0 && !m->failed;
}

bool lm_gmatcher_start_at(lm_gmatcher *m, uint32_t position, lm_gstate *out) {
    lm_gstate_clear(out);
    begin_call(m);
    expand(m, out, &position, 1);
    return out->n_stacks > 0 && !m->failed;
}

/* expand copies its input into the worklist before it uses m->tmp, so a
 * stack may be handed over in m->tmp. */
static void advance_one(lm_gmatcher *m, const uint32_t *stack, uint32_t len, uint8_t byte, lm_gstate *out) {
    const lm_grammar *g = m->grammar;
    if (len == 0) return;
    lm_gelem e = g->elems[stack[len - 1]];
    if (!lm_byte_class_has(&g->classes[LM_GE_ARG(e)], byte)) return;
    memcpy(m->tmp, stack, sizeof(uint32_t) * len);
    m->tmp[len - 1]++;
    expand(m, out, m->tmp, len);
}

bool lm_gmatcher_advance_stack(lm_gmatcher *m, const uint32_t *stack, uint32_t len, uint8_t byte,
                               lm_gstate *out) {
    lm_gstate_clear(out);
    begin_call(m);
    advance_one(m, stack, len, byte, out);
    return out->n_stacks > 0 && !m->failed;
}

bool lm_gmatcher_advance(lm_gmatcher *m, const lm_gstate *in, uint8_t byte, lm_gstate *out) {
    lm_gstate_clear(out);
    begin_call(m);
    uint32_t i = 0, len;
    const uint32_t *stack;
    while (!m->failed && lm_gstate_next_stack(in, &i, &stack, &len))
        if (lm_gmatcher_charge(m, 1)) advance_one(m, stack, len, byte, out);
    return out->n_stacks > 0 && !m->failed;
}

bool lm_gmatcher_expand_stack(lm_gmatcher *m, const uint32_t *stack, uint32_t len, lm_gstate *out) {
    lm_gstate_clear(out);
    begin_call(m);
    memcpy(m->tmp, stack, sizeof(uint32_t) * len);
    expand(m, out, m->tmp, len);
    return out->n_stacks > 0 && !m->failed;
}

bool lm_gstate_complete(const lm_gstate *s) {
    uint32_t i = 0, len;
    const uint32_t *stack;
    while (lm_gstate_next_stack(s, &i, &stack, &len))
        if (len == 0) return true;
    return false;
}

bool lm_gstate_finished(const lm_gstate *s) { return s->n_stacks == 1 && s->n_words == 1 && s->words[0] == 0; }

void lm_gstate_next_bytes(const lm_grammar *g, const lm_gstate *s, lm_byte_class *out) {
    memset(out, 0, sizeof *out);
    uint32_t i = 0, len;
    const uint32_t *stack;
    while (lm_gstate_next_stack(s, &i, &stack, &len)) {
        if (len == 0) continue;
        const lm_byte_class *c = &g->classes[LM_GE_ARG(g->elems[stack[len - 1]])];
        for (int w = 0; w < 4; w++) out->bits[w] |= c->bits[w];
    }
}
