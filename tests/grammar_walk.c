/* Walking a grammar's matcher (tests/grammar_walk.h). */
#include "grammar_walk.h"

#include "grammar/matcher.h"

bool test_grammar_accepts(const lm_grammar *g, const char *s) {
    lm_gmatcher m;
    lm_error err;
    if (lm_gmatcher_init(&m, g, &err) != LM_OK) return false;
    lm_gstate a = {0}, b = {0};
    bool ok = lm_gmatcher_start(&m, &a);
    for (size_t i = 0; ok && s[i]; i++) {
        ok = lm_gmatcher_advance(&m, &a, (uint8_t)s[i], &b);
        lm_gstate t = a;
        a = b;
        b = t;
    }
    ok = ok && lm_gstate_complete(&a);
    lm_gstate_free(&a);
    lm_gstate_free(&b);
    lm_gmatcher_free(&m);
    return ok;
}

uint64_t test_grammar_random(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static unsigned byte_weight(test_grammar_weight weight, uint8_t c) { return weight ? weight(c) : 1; }

bool test_grammar_walk(const lm_grammar *g, uint64_t *rng, test_grammar_weight weight, unsigned stop_one_in, char *out,
                       size_t cap) {
    lm_gmatcher m;
    lm_error err;
    if (cap == 0 || lm_gmatcher_init(&m, g, &err) != LM_OK) return false;
    lm_gstate a = {0}, b = {0};
    bool ok = lm_gmatcher_start(&m, &a), done = false;
    size_t n = 0;
    while (ok && n + 1 < cap) {
        if (lm_gstate_complete(&a) && (lm_gstate_finished(&a) || test_grammar_random(rng) % stop_one_in == 0)) {
            done = true;
            break;
        }
        lm_byte_class next;
        lm_gstate_next_bytes(g, &a, &next);
        uint64_t total = 0;
        for (int c = 0; c < 256; c++)
            if (lm_byte_class_has(&next, (uint8_t)c)) total += byte_weight(weight, (uint8_t)c);
        if (!total) break;
        uint64_t pick = test_grammar_random(rng) % total;
        int c = 0;
        for (; c < 256; c++) {
            if (!lm_byte_class_has(&next, (uint8_t)c)) continue;
            if (pick < byte_weight(weight, (uint8_t)c)) break;
            pick -= byte_weight(weight, (uint8_t)c);
        }
        ok = lm_gmatcher_advance(&m, &a, (uint8_t)c, &b);
        lm_gstate t = a;
        a = b;
        b = t;
        out[n++] = (char)c;
    }
    out[n] = 0;
    lm_gstate_free(&a);
    lm_gstate_free(&b);
    lm_gmatcher_free(&m);
    return done;
}
