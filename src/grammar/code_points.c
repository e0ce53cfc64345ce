/* Sets of code points as UTF-8 byte sequences (grammar/code_points.h). */
#include "grammar/code_points.h"

#include <stdlib.h>
#include <string.h>

size_t lm_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* --- character sets ---------------------------------------------------- */

bool lm_cp_set_add(lm_cp_set *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 16;
        lm_cp_range *r = realloc(s->r, sizeof *r * cap);
        if (!r) return false;
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (lm_cp_range){lo, hi};
    return true;
}

static int compare_ranges(const void *a, const void *b) {
    const lm_cp_range *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Sorted, overlaps merged, surrogates left out (no UTF-8 encodes them);
 * negated: the complement within the code points. */
bool lm_cp_set_normalize(lm_cp_set *s, bool negated) {
    if (s->n) qsort(s->r, s->n, sizeof *s->r, compare_ranges);
    uint32_t m = 0;
    for (uint32_t k = 0; k < s->n; k++) {
        if (m && s->r[k].lo <= s->r[m - 1].hi + 1) {
            if (s->r[k].hi > s->r[m - 1].hi) s->r[m - 1].hi = s->r[k].hi;
        } else {
            s->r[m++] = s->r[k];
        }
    }
    s->n = m;
    lm_cp_set out = {0};
    bool ok = true;
    if (negated) {
        uint32_t from = 0;
        for (uint32_t k = 0; ok && k < s->n; k++) {
            if (s->r[k].lo > from) ok = lm_cp_set_add(&out, from, s->r[k].lo - 1);
            from = s->r[k].hi + 1;
        }
        if (ok && from <= LM_MAX_CODE_POINT) ok = lm_cp_set_add(&out, from, LM_MAX_CODE_POINT);
    } else {
        for (uint32_t k = 0; ok && k < s->n; k++) ok = lm_cp_set_add(&out, s->r[k].lo, s->r[k].hi);
    }
    /* cut the surrogates out */
    lm_cp_set cut = {0};
    for (uint32_t k = 0; ok && k < out.n; k++) {
        uint32_t lo = out.r[k].lo, hi = out.r[k].hi;
        if (hi < 0xD800 || lo > 0xDFFF) ok = lm_cp_set_add(&cut, lo, hi);
        else {
            if (lo < 0xD800) ok = lm_cp_set_add(&cut, lo, 0xD7FF);
            if (ok && hi > 0xDFFF) ok = lm_cp_set_add(&cut, 0xE000, hi);
        }
    }
    free(out.r);
    free(s->r);
    *s = cut;
    return ok;
}

/* Adds to rule the alternatives "one byte sequence of [lo, hi]" (one UTF-8
 * length, no surrogates), each followed by tail: split until every byte
 * position is a plain range, as UTF-8 range compilers do. */
static lm_status utf8_range_alts(lm_grammar_builder *b, uint32_t rule, uint32_t tail, uint32_t lo, uint32_t hi,
                                 lm_error *err) {
    uint8_t a[4], z[4];
    size_t len = lm_utf8_encode(lo, a);
    for (size_t k = 1; k < len; k++) {
        uint32_t m = (1u << (6 * k)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if (lo & m) {
            lm_status st = utf8_range_alts(b, rule, tail, lo, lo | m, err);
            return st == LM_OK ? utf8_range_alts(b, rule, tail, (lo | m) + 1, hi, err) : st;
        }
        if ((hi & m) != m) {
            lm_status st = utf8_range_alts(b, rule, tail, lo, (hi & ~m) - 1, err);
            return st == LM_OK ? utf8_range_alts(b, rule, tail, hi & ~m, hi, err) : st;
        }
    }
    lm_utf8_encode(hi, z);
    lm_gseq seq = {0};
    lm_status st = LM_OK;
    for (size_t k = 0; st == LM_OK && k < len; k++) {
        lm_byte_class c = {{0}};
        lm_byte_class_add_range(&c, a[k], z[k]);
        st = lm_gseq_class(b, &seq, &c, err);
    }
    if (tail != LM_GRAMMAR_NO_RULE) lm_gseq_ref(&seq, tail);
    if (st == LM_OK) st = lm_grammar_add_alt(b, rule, &seq, err);
    lm_gseq_free(&seq);
    return st;
}

bool lm_cp_set_ascii(const lm_cp_set *s, lm_byte_class *c) {
    memset(c, 0, sizeof *c);
    bool any = false;
    for (uint32_t k = 0; k < s->n && s->r[k].lo < 0x80; k++) {
        lm_byte_class_add_range(c, (uint8_t)s->r[k].lo, (uint8_t)(s->r[k].hi < 0x7F ? s->r[k].hi : 0x7F));
        any = true;
    }
    return any;
}

/* Each encoded length's part of each range, split further above. */
lm_status lm_cp_set_alts(lm_grammar_builder *b, uint32_t rule, uint32_t tail, const lm_cp_set *s, lm_error *err) {
    lm_byte_class c;
    lm_status st = LM_OK;
    if (lm_cp_set_ascii(s, &c)) {
        lm_gseq seq = {0};
        st = lm_gseq_class(b, &seq, &c, err);
        if (tail != LM_GRAMMAR_NO_RULE) lm_gseq_ref(&seq, tail);
        if (st == LM_OK) st = lm_grammar_add_alt(b, rule, &seq, err);
        lm_gseq_free(&seq);
    }
    static const uint32_t bounds[][2] = {{0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, LM_MAX_CODE_POINT}};
    for (uint32_t k = 0; st == LM_OK && k < s->n; k++)
        for (int l = 0; st == LM_OK && l < 3; l++) {
            uint32_t lo = s->r[k].lo > bounds[l][0] ? s->r[k].lo : bounds[l][0];
            uint32_t hi = s->r[k].hi < bounds[l][1] ? s->r[k].hi : bounds[l][1];
            if (lo <= hi) st = utf8_range_alts(b, rule, tail, lo, hi, err);
        }
    return st;
}
