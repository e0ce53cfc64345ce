/* The byte-level grammar matcher (grammar/matcher.h). */
#include "grammar/matcher.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_gmatcher_init(lm_gmatcher *m, const lm_grammar *g, lm_error *err) {
    memset(m, 0, sizeof *m);
    m->grammar = g;
    m->tmp = malloc(sizeof(uint32_t) * (LM_MATCHER_MAX_DEPTH + 1));
    if (!m->tmp) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    return LM_OK;
}

void lm_gmatcher_free(lm_gmatcher *m) {
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

/* Adds a finished stack to out unless an equal one is there. */
static void add_stack(lm_gmatcher *m, lm_gstate *out, const uint32_t *stack, uint32_t len) {
    uint32_t i = 0, n;
    const uint32_t *other;
    while (lm_gstate_next_stack(out, &i, &other, &n))
        if (n == len && memcmp(other, stack, sizeof(uint32_t) * len) == 0) return;
    if (out->n_stacks >= LM_MATCHER_MAX_STACKS) {
        m->truncated = true;
        return;
    }
    if (!reserve(&out->words, &out->cap_words, out->n_words + len + 1)) {
        m->failed = true;
        return;
    }
    out->words[out->n_words] = len;
    memcpy(out->words + out->n_words + 1, stack, sizeof(uint32_t) * len);
    out->n_words += len + 1;
    out->n_stacks++;
}

static bool work_push(lm_gmatcher *m, const uint32_t *stack, uint32_t len, uint32_t extra) {
    uint32_t n = len + (extra != UINT32_MAX);
    if (n > LM_MATCHER_MAX_DEPTH) {
        m->truncated = true;
        return true;
    }
    if (!reserve(&m->work, &m->cap_work, m->n_work + n + 1)) {
        m->failed = true;
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
            for (uint32_t a = g->rule_first[rule]; a < g->rule_first[rule + 1]; a++)
                if (!work_push(m, m->tmp, keep, g->alt_start[a])) return;
            break;
        }
        }
    }
}

bool lm_gmatcher_start(lm_gmatcher *m, lm_gstate *out) {
    lm_gstate_clear(out);
    const lm_grammar *g = m->grammar;
    for (uint32_t a = g->rule_first[g->root]; a < g->rule_first[g->root + 1]; a++) {
        uint32_t pos = g->alt_start[a];
        expand(m, out, &pos, 1);
    }
    return out->n_stacks > 0 && !m->failed;
}

bool lm_gmatcher_start_at(lm_gmatcher *m, uint32_t position, lm_gstate *out) {
    lm_gstate_clear(out);
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
    advance_one(m, stack, len, byte, out);
    return out->n_stacks > 0 && !m->failed;
}

bool lm_gmatcher_advance(lm_gmatcher *m, const lm_gstate *in, uint8_t byte, lm_gstate *out) {
    lm_gstate_clear(out);
    uint32_t i = 0, len;
    const uint32_t *stack;
    while (lm_gstate_next_stack(in, &i, &stack, &len)) advance_one(m, stack, len, byte, out);
    return out->n_stacks > 0 && !m->failed;
}

bool lm_gmatcher_expand_stack(lm_gmatcher *m, const uint32_t *stack, uint32_t len, lm_gstate *out) {
    lm_gstate_clear(out);
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
