#include "grammar/text_avoiding.h"

#include <string.h>

#define MAX_STATES (1 + LM_TEXT_AVOID_MAX_WORDS * LM_TEXT_AVOID_MAX_WORD)
#define DEAD (-1)

/* Where the text stands towards its edges: nothing written yet, the last
 * byte not '\n', the last byte '\n'. */
enum { AT_START, AFTER_OTHER, AFTER_NEWLINE, N_EDGES };

typedef struct {
    const char *const *words;
    int n_words;
    char prefix[MAX_STATES][LM_TEXT_AVOID_MAX_WORD]; /* each state's marker prefix */
    int len[MAX_STATES];
    int n;
} automaton;

static int find_state(const automaton *a, const char *s, int n) {
    for (int i = 0; i < a->n; i++)
        if (a->len[i] == n && memcmp(a->prefix[i], s, (size_t)n) == 0) return i;
    return DEAD;
}

/* The states: every proper prefix of a word, the empty one first. */
static void add_states(automaton *a) {
    a->n = 1;
    a->len[0] = 0;
    for (int w = 0; w < a->n_words; w++) {
        int wl = (int)strlen(a->words[w]);
        for (int k = 1; k < wl; k++)
            if (find_state(a, a->words[w], k) == DEAD) {
                memcpy(a->prefix[a->n], a->words[w], (size_t)k);
                a->len[a->n++] = k;
            }
    }
}

/* State q followed by byte c: DEAD when that completes a word, else the
 * longest suffix of the text that is a state (the text before held no
 * word, so a word can only end here). */
static int next_state(const automaton *a, int q, char c) {
    char t[LM_TEXT_AVOID_MAX_WORD + 1];
    int n = a->len[q];
    memcpy(t, a->prefix[q], (size_t)n);
    t[n++] = c;
    for (int w = 0; w < a->n_words; w++) {
        int wl = (int)strlen(a->words[w]);
        if (wl <= n && memcmp(t + n - wl, a->words[w], (size_t)wl) == 0) return DEAD;
    }
    for (int start = 0; start <= n; start++) {
        int s = find_state(a, t + start, n - start);
        if (s != DEAD) return s;
    }
    return 0;
}

lm_status lm_grammar_text_avoiding(lm_grammar_builder *b, const char *const *words, int n_words,
                                   bool no_edge_newline, uint32_t *rule, lm_error *err) {
    if (n_words < 0 || n_words > LM_TEXT_AVOID_MAX_WORDS)
        return lm_fail(err, LM_ERR_INVALID, "text avoiding %d words (at most %d)", n_words, LM_TEXT_AVOID_MAX_WORDS);
    for (int w = 0; w < n_words; w++) {
        size_t wl = strlen(words[w]);
        if (wl == 0 || wl > LM_TEXT_AVOID_MAX_WORD)
            return lm_fail(err, LM_ERR_INVALID, "a word to avoid must have 1 to %d bytes", LM_TEXT_AVOID_MAX_WORD);
        for (size_t i = 0; i < wl; i++)
            if ((unsigned char)words[w][i] >= 0x80 || words[w][i] == 0)
                return lm_fail(err, LM_ERR_INVALID, "a word to avoid must be ASCII");
    }
    automaton a = {.words = words, .n_words = n_words};
    add_states(&a);
    /* Rules: state q at edge e is rules[q * N_EDGES + e]; without the edge
     * condition only AFTER_OTHER is used (the start needs no care). */
    uint32_t rules[MAX_STATES * N_EDGES];
    lm_status st = LM_OK;
    int first_edge = no_edge_newline ? AT_START : AFTER_OTHER;
    int last_edge = no_edge_newline ? AFTER_NEWLINE : AFTER_OTHER;
    for (int q = 0; st == LM_OK && q < a.n; q++)
        for (int e = first_edge; st == LM_OK && e <= last_edge; e++) st = lm_grammar_new_rule(b, &rules[q * N_EDGES + e], err);
    for (int q = 0; st == LM_OK && q < a.n; q++)
        for (int e = first_edge; st == LM_OK && e <= last_edge; e++) {
            uint32_t self = rules[q * N_EDGES + e];
            /* ASCII bytes grouped by the state they lead to: one class each */
            int target[128];
            for (int c = 0; c < 128; c++) {
                int nq = c == 0 || (no_edge_newline && e == AT_START && c == '\n') ? DEAD : next_state(&a, q, (char)c);
                int ne = !no_edge_newline ? AFTER_OTHER : c == '\n' ? AFTER_NEWLINE : AFTER_OTHER;
                target[c] = nq == DEAD ? DEAD : nq * N_EDGES + ne;
            }
            bool done[128] = {false};
            for (int c = 1; st == LM_OK && c < 128; c++) {
                if (done[c] || target[c] == DEAD) continue;
                lm_byte_class cls = {{0}};
                for (int d = c; d < 128; d++)
                    if (target[d] == target[c]) lm_byte_class_add(&cls, (uint8_t)d), done[d] = true;
                lm_gseq seq = {0};
                st = lm_gseq_class(b, &seq, &cls, err);
                lm_gseq_ref(&seq, rules[target[c]]);
                if (st == LM_OK) st = lm_grammar_add_alt(b, self, &seq, err);
                lm_gseq_free(&seq);
            }
            /* a multi-byte character is part of no word */
            if (st == LM_OK) st = lm_grammar_utf8_alts(b, self, rules[0 * N_EDGES + AFTER_OTHER], err);
            if (st == LM_OK && e != AFTER_NEWLINE) st = lm_grammar_add_empty_alt(b, self, err);
        }
    if (st == LM_OK) *rule = rules[0 * N_EDGES + first_edge];
    return st;
}
