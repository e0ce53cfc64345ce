/* The grammar's storage and its builder (grammar/grammar.h). */
#include "grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

void lm_byte_class_add_range(lm_byte_class *c, uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; b++) lm_byte_class_add(c, (uint8_t)b);
}

void lm_grammar_free(lm_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->classes);
    free(g->alt_start);
    free(g->rule_first);
    memset(g, 0, sizeof *g);
}

void lm_grammar_builder_init(lm_grammar_builder *b) {
    memset(b, 0, sizeof *b);
    for (int i = 0; i < 256; i++) b->byte_class[i] = -1;
}

void lm_grammar_builder_free(lm_grammar_builder *b) {
    free(b->elems);
    free(b->alt_rule);
    free(b->alt_at);
    free(b->classes);
    lm_grammar_builder_init(b);
}

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t size, uint32_t limit) {
    if (need <= *cap) return true;
    if (need > limit) return false;
    uint32_t c = *cap ? *cap : 64;
    while (c < need) c = c > limit / 2 ? limit : c * 2;
    void *q = realloc(*p, size * c);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

lm_status lm_grammar_new_rule(lm_grammar_builder *b, uint32_t *rule, lm_error *err) {
    if (b->n_rules >= LM_GRAMMAR_MAX_RULES)
        return lm_fail(err, LM_ERR_NOMEM, "grammar too large: more than %u rules", LM_GRAMMAR_MAX_RULES);
    *rule = b->n_rules++;
    return LM_OK;
}

lm_status lm_grammar_add_alt(lm_grammar_builder *b, uint32_t rule, const lm_gseq *seq, lm_error *err) {
    if (seq->failed) return lm_fail(err, LM_ERR_NOMEM, "grammar too large (a sequence ran out of memory)");
    uint32_t alt_cap = b->cap_alts;
    if (!grow((void **)&b->alt_rule, &alt_cap, b->n_alts + 1, sizeof(uint32_t), LM_GRAMMAR_MAX_ELEMS) ||
        !grow((void **)&b->alt_at, &b->cap_alts, b->n_alts + 1, sizeof(uint32_t), LM_GRAMMAR_MAX_ELEMS) ||
        !grow((void **)&b->elems, &b->cap_elems, b->n_elems + seq->n + 1, sizeof(lm_gelem), LM_GRAMMAR_MAX_ELEMS))
        return lm_fail(err, LM_ERR_NOMEM, "grammar too large: more than %u elements", LM_GRAMMAR_MAX_ELEMS);
    b->alt_rule[b->n_alts] = rule;
    b->alt_at[b->n_alts++] = b->n_elems;
    if (seq->n) memcpy(b->elems + b->n_elems, seq->elems, sizeof(lm_gelem) * seq->n);
    b->n_elems += seq->n;
    b->elems[b->n_elems++] = LM_GE_MAKE(LM_GE_END, 0);
    return LM_OK;
}

lm_status lm_grammar_add_empty_alt(lm_grammar_builder *b, uint32_t rule, lm_error *err) {
    lm_gseq empty = {0};
    return lm_grammar_add_alt(b, rule, &empty, err);
}

lm_status lm_grammar_class(lm_grammar_builder *b, const lm_byte_class *c, uint32_t *index, lm_error *err) {
    /* Single bytes (most literals) are found without a search. */
    int single = -1, count = 0;
    for (int i = 0; i < 256 && count < 2; i++)
        if (lm_byte_class_has(c, (uint8_t)i)) {
            single = i;
            count++;
        }
    if (count == 1 && b->byte_class[single] >= 0) {
        *index = (uint32_t)b->byte_class[single];
        return LM_OK;
    }
    if (count != 1)
        for (uint32_t i = 0; i < b->n_classes; i++)
            if (memcmp(&b->classes[i], c, sizeof *c) == 0) {
                *index = i;
                return LM_OK;
            }
    if (!grow((void **)&b->classes, &b->cap_classes, b->n_classes + 1, sizeof *c, LM_GRAMMAR_MAX_CLASSES))
        return lm_fail(err, LM_ERR_NOMEM, "grammar too large: more than %u byte classes", LM_GRAMMAR_MAX_CLASSES);
    b->classes[b->n_classes] = *c;
    if (count == 1) b->byte_class[single] = (int32_t)b->n_classes;
    *index = b->n_classes++;
    return LM_OK;
}

static uint64_t hash_bytes(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull; /* FNV-1a */
    return h;
}

uint64_t lm_grammar_content_hash(const lm_grammar *g) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = hash_bytes(h, &g->root, sizeof g->root);
    h = hash_bytes(h, g->elems, sizeof *g->elems * g->n_elems);
    h = hash_bytes(h, g->classes, sizeof *g->classes * g->n_classes);
    h = hash_bytes(h, g->alt_start, sizeof *g->alt_start * g->rule_first[g->n_rules]);
    return hash_bytes(h, g->rule_first, sizeof *g->rule_first * (g->n_rules + 1));
}

bool lm_grammar_equal(const lm_grammar *a, const lm_grammar *b) {
    return a->hash == b->hash && a->root == b->root && a->n_elems == b->n_elems && a->n_classes == b->n_classes &&
           a->n_rules == b->n_rules && memcmp(a->elems, b->elems, sizeof *a->elems * a->n_elems) == 0 &&
           memcmp(a->classes, b->classes, sizeof *a->classes * a->n_classes) == 0 &&
           memcmp(a->rule_first, b->rule_first, sizeof *a->rule_first * (a->n_rules + 1)) == 0 &&
           memcmp(a->alt_start, b->alt_start, sizeof *a->alt_start * a->rule_first[a->n_rules]) == 0;
}

lm_status lm_grammar_finish(lm_grammar_builder *b, uint32_t root, lm_grammar *g, lm_error *err) {
    memset(g, 0, sizeof *g);
    if (root >= b->n_rules) return lm_fail(err, LM_ERR_INTERNAL, "grammar root %u is no rule", root);
    uint32_t *first = calloc((size_t)b->n_rules + 1, sizeof *first);
    uint32_t *starts = malloc(sizeof *starts * (b->n_alts ? b->n_alts : 1));
    if (!first || !starts) {
        free(first);
        free(starts);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    /* counting sort of the alternatives by rule, keeping their order */
    for (uint32_t a = 0; a < b->n_alts; a++) first[b->alt_rule[a] + 1]++;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        if (first[r + 1] == 0) {
            free(first);
            free(starts);
            return lm_fail(err, LM_ERR_INTERNAL, "grammar rule %u has no alternative", r);
        }
        first[r + 1] += first[r];
    }
    uint32_t *fill = malloc(sizeof *fill * (size_t)b->n_rules);
    if (!fill) {
        free(first);
        free(starts);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    memcpy(fill, first, sizeof *fill * (size_t)b->n_rules);
    for (uint32_t a = 0; a < b->n_alts; a++) starts[fill[b->alt_rule[a]]++] = b->alt_at[a];
    free(fill);
    g->elems = b->elems;
    g->n_elems = b->n_elems;
    g->classes = b->classes;
    g->n_classes = b->n_classes;
    g->alt_start = starts;
    g->rule_first = first;
    g->n_rules = b->n_rules;
    g->root = root;
    g->hash = lm_grammar_content_hash(g);
    b->elems = NULL;
    b->classes = NULL;
    lm_grammar_builder_free(b);
    return LM_OK;
}

void lm_gseq_free(lm_gseq *s) {
    free(s->elems);
    memset(s, 0, sizeof *s);
}

void lm_gseq_clear(lm_gseq *s) {
    s->n = 0;
    s->failed = false;
}

void lm_gseq_push(lm_gseq *s, lm_gelem e) {
    if (s->failed) return;
    if (!grow((void **)&s->elems, &s->cap, s->n + 1, sizeof(lm_gelem), LM_GRAMMAR_MAX_ELEMS)) {
        s->failed = true;
        return;
    }
    s->elems[s->n++] = e;
}

void lm_gseq_append(lm_gseq *s, const lm_gseq *tail) {
    if (tail->failed) s->failed = true;
    for (uint32_t i = 0; i < tail->n && !s->failed; i++) lm_gseq_push(s, tail->elems[i]);
}

void lm_gseq_ref(lm_gseq *s, uint32_t rule) { lm_gseq_push(s, LM_GE_MAKE(LM_GE_REF, rule)); }

lm_status lm_gseq_class(lm_grammar_builder *b, lm_gseq *s, const lm_byte_class *c, lm_error *err) {
    uint32_t index;
    lm_status st = lm_grammar_class(b, c, &index, err);
    if (st != LM_OK) return st;
    lm_gseq_push(s, LM_GE_MAKE(LM_GE_CLASS, index));
    return LM_OK;
}

lm_status lm_gseq_byte(lm_grammar_builder *b, lm_gseq *s, uint8_t c, lm_error *err) {
    lm_byte_class cls = {{0}};
    lm_byte_class_add(&cls, c);
    return lm_gseq_class(b, s, &cls, err);
}

lm_status lm_gseq_literal(lm_grammar_builder *b, lm_gseq *s, const char *text, size_t len, lm_error *err) {
    for (size_t i = 0; i < len; i++) {
        lm_status st = lm_gseq_byte(b, s, (uint8_t)text[i], err);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

lm_status lm_grammar_star(lm_grammar_builder *b, const lm_gseq *seq, uint32_t *rule, lm_error *err) {
    lm_status st = lm_grammar_new_rule(b, rule, err);
    if (st != LM_OK) return st;
    lm_gseq loop = {0};
    lm_gseq_append(&loop, seq);
    lm_gseq_ref(&loop, *rule);
    st = lm_grammar_add_alt(b, *rule, &loop, err);
    lm_gseq_free(&loop);
    if (st == LM_OK) st = lm_grammar_add_empty_alt(b, *rule, err);
    return st;
}

lm_status lm_grammar_rule_of(lm_grammar_builder *b, const lm_gseq *seq, uint32_t *rule, lm_error *err) {
    lm_status st = lm_grammar_new_rule(b, rule, err);
    if (st == LM_OK) st = lm_grammar_add_alt(b, *rule, seq, err);
    return st;
}

lm_status lm_grammar_repeat(lm_grammar_builder *b, lm_gseq *out, const lm_gseq *seq, int min, int max,
                            lm_error *err) {
    for (int i = 0; i < min; i++) lm_gseq_append(out, seq);
    if (out->failed) return lm_fail(err, LM_ERR_NOMEM, "grammar too large (a repetition)");
    if (max < 0) {
        uint32_t star = 0;
        lm_status st = lm_grammar_star(b, seq, &star, err);
        if (st != LM_OK) return st;
        lm_gseq_ref(out, star);
        return LM_OK;
    }
    /* opt_k -> seq opt_{k-1} | (empty), built from the innermost out */
    uint32_t inner = UINT32_MAX;
    for (int k = 0; k < max - min; k++) {
        uint32_t rule = 0;
        lm_status st = lm_grammar_new_rule(b, &rule, err);
        if (st != LM_OK) return st;
        lm_gseq body = {0};
        lm_gseq_append(&body, seq);
        if (inner != UINT32_MAX) lm_gseq_ref(&body, inner);
        st = lm_grammar_add_alt(b, rule, &body, err);
        lm_gseq_free(&body);
        if (st == LM_OK) st = lm_grammar_add_empty_alt(b, rule, err);
        if (st != LM_OK) return st;
        inner = rule;
    }
    if (inner != UINT32_MAX) lm_gseq_ref(out, inner);
    return LM_OK;
}

typedef struct {
    const char *text;
    size_t len;
} literal_ref;

static int compare_literals(const void *a, const void *b) {
    const literal_ref *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->text, y->text, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The rule of the sorted strings l[lo .. hi), which share their first depth bytes. */
static lm_status literal_node(lm_grammar_builder *b, const literal_ref *l, uint32_t lo, uint32_t hi, size_t depth,
                              uint32_t *rule, lm_error *err) {
    lm_status st = lm_grammar_new_rule(b, rule, err);
    uint32_t i = lo;
    if (st == LM_OK && l[i].len == depth) {
        st = lm_grammar_add_empty_alt(b, *rule, err);
        while (i < hi && l[i].len == depth) i++;
    }
    lm_gseq seq = {0};
    while (st == LM_OK && i < hi) {
        uint8_t c = (uint8_t)l[i].text[depth];
        uint32_t j = i + 1;
        while (j < hi && (uint8_t)l[j].text[depth] == c) j++;
        /* sorted: the group's common prefix is its first and last strings' */
        size_t end = depth + 1, most = l[i].len < l[j - 1].len ? l[i].len : l[j - 1].len;
        while (end < most && l[i].text[end] == l[j - 1].text[end]) end++;
        lm_gseq_clear(&seq);
        st = lm_gseq_literal(b, &seq, l[i].text + depth, end - depth, err);
        if (st == LM_OK && !(l[i].len == end && l[j - 1].len == end)) { /* more than one string, or duplicates */
            uint32_t child = 0;
            st = literal_node(b, l, i, j, end, &child, err);
            lm_gseq_ref(&seq, child);
        }
        if (st == LM_OK) st = lm_grammar_add_alt(b, *rule, &seq, err);
        i = j;
    }
    lm_gseq_free(&seq);
    return st;
}

lm_status lm_grammar_literals(lm_grammar_builder *b, const char *const *texts, const size_t *lens, uint32_t n,
                              uint32_t *rule, lm_error *err) {
    if (n == 0) return lm_fail(err, LM_ERR_INVALID, "a list of strings needs at least one");
    literal_ref *l = malloc(sizeof *l * n);
    if (!l) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++) l[i] = (literal_ref){texts[i], lens[i]};
    qsort(l, n, sizeof *l, compare_literals);
    lm_status st = literal_node(b, l, 0, n, 0, rule, err);
    free(l);
    return st;
}

lm_status lm_grammar_utf8_alts(lm_grammar_builder *b, uint32_t rule, uint32_t tail, lm_error *err) {
    /* The well-formed multi-byte sequences of RFC 3629 (no surrogates, no
     * overlongs, nothing past U+10FFFF). */
    static const struct {
        int n;
        uint8_t lo[4], hi[4];
    } forms[] = {
        {2, {0xC2, 0x80}, {0xDF, 0xBF}},
        {3, {0xE0, 0xA0, 0x80}, {0xE0, 0xBF, 0xBF}},
        {3, {0xE1, 0x80, 0x80}, {0xEC, 0xBF, 0xBF}},
        {3, {0xED, 0x80, 0x80}, {0xED, 0x9F, 0xBF}},
        {3, {0xEE, 0x80, 0x80}, {0xEF, 0xBF, 0xBF}},
        {4, {0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}},
        {4, {0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}},
        {4, {0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}},
    };
    lm_status st = LM_OK;
    for (size_t f = 0; st == LM_OK && f < sizeof forms / sizeof forms[0]; f++) {
        lm_gseq s = {0};
        for (int i = 0; st == LM_OK && i < forms[f].n; i++) {
            lm_byte_class c = {{0}};
            lm_byte_class_add_range(&c, forms[f].lo[i], forms[f].hi[i]);
            st = lm_gseq_class(b, &s, &c, err);
        }
        if (tail != LM_GRAMMAR_NO_RULE) lm_gseq_ref(&s, tail);
        if (st == LM_OK) st = lm_grammar_add_alt(b, rule, &s, err);
        lm_gseq_free(&s);
    }
    return st;
}

lm_status lm_grammar_utf8_multibyte_rule(lm_grammar_builder *b, uint32_t *rule, lm_error *err) {
    lm_status st = lm_grammar_new_rule(b, rule, err);
    if (st != LM_OK) return st;
    return lm_grammar_utf8_alts(b, *rule, LM_GRAMMAR_NO_RULE, err);
}
