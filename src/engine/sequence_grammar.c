/* A sequence's grammar on the engine thread (engine/sequence_grammar.h). */
#include "engine/sequence_grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compiled.h"

lm_status lm_grammar_vocab_trie(const lm_tokenizer *tok, int vocab, lm_token_trie **out, lm_error *err) {
    const char **bytes = calloc((size_t)vocab, sizeof *bytes);
    size_t *lens = calloc((size_t)vocab, sizeof *lens);
    if (!bytes || !lens) {
        free(bytes);
        free(lens);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    for (int id = 0; id < vocab; id++)
        if (!lm_tokenizer_is_added(tok, id)) bytes[id] = lm_tokenizer_token_bytes(tok, id, &lens[id]);
    lm_status st = lm_token_trie_build(vocab, bytes, lens, out, err);
    free(bytes);
    free(lens);
    return st;
}

void lm_grammar_frame_cache_free(lm_grammar_frame_cache *cache) {
    for (int i = 0; i < LM_GRAMMAR_FRAME_CACHE; i++) {
        lm_mask_frames_unref(cache->entries[i].frames);
        if (cache->entries[i].grammar) lm_grammar_unref(cache->entries[i].grammar);
    }
    memset(cache, 0, sizeof *cache);
}

/* The cached table of grammar's equal, or a new one in the least recently
 * used entry (borrowed: the cache holds it). */
static lm_status cached_frames(lm_grammar_frame_cache *cache, const loom_grammar *grammar,
                               const lm_token_trie *trie, lm_mask_frames **out, lm_error *err) {
    int oldest = 0;
    cache->clock++;
    for (int i = 0; i < LM_GRAMMAR_FRAME_CACHE; i++) {
        const loom_grammar *g = cache->entries[i].grammar;
        if (g && cache->entries[i].frames->trie == trie &&
            (g == grammar || lm_grammar_equal(&g->grammar, &grammar->grammar))) {
            cache->entries[i].last_used = cache->clock;
            *out = cache->entries[i].frames;
            return LM_OK;
        }
        if (cache->entries[i].last_used < cache->entries[oldest].last_used) oldest = i;
    }
    lm_mask_frames *frames;
    lm_status st = lm_mask_frames_create(trie, &frames, err);
    if (st != LM_OK) return st;
    lm_mask_frames_unref(cache->entries[oldest].frames);
    if (cache->entries[oldest].grammar) lm_grammar_unref(cache->entries[oldest].grammar);
    cache->entries[oldest].grammar = lm_grammar_ref(grammar);
    cache->entries[oldest].frames = frames;
    cache->entries[oldest].last_used = cache->clock;
    *out = frames;
    return LM_OK;
}

lm_status lm_sequence_grammar_create(const loom_grammar *grammar, const lm_token_trie *trie,
                                     lm_grammar_frame_cache *cache, lm_sequence_grammar **out, lm_error *err) {
    *out = NULL;
    lm_mask_frames *frames = NULL;
    if (cache) {
        lm_status st = cached_frames(cache, grammar, trie, &frames, err);
        if (st != LM_OK) return st;
    }
    lm_sequence_grammar *sg = calloc(1, sizeof *sg);
    if (!sg) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    lm_status st = lm_masker_init(&sg->masker, &grammar->grammar, trie, frames, err);
    if (st != LM_OK) {
        free(sg);
        return st;
    }
    sg->token_work = LM_GRAMMAR_TOKEN_WORK;
    sg->bits = malloc(sizeof(uint64_t) * (((size_t)trie->vocab + 63) / 64));
    if (!sg->bits || !lm_gmatcher_start(&sg->masker.matcher, &sg->state)) {
        lm_sequence_grammar_free(sg);
        return lm_fail(err, LM_ERR_NOMEM, "grammar: out of memory starting the matcher");
    }
    *out = sg;
    return LM_OK;
}

void lm_sequence_grammar_free(lm_sequence_grammar *sg) {
    if (!sg) return;
    lm_masker_free(&sg->masker);
    lm_gstate_free(&sg->state);
    lm_gstate_free(&sg->scratch);
    lm_gstate_free(&sg->probe);
    free(sg->bits);
    free(sg);
}

lm_status lm_sequence_grammar_mask(lm_sequence_grammar *sg, float *logits, int vocab, const int32_t *stop_ids,
                                   int n_stop_ids, lm_error *err) {
    lm_gmatcher_budget(&sg->masker.matcher, sg->token_work);
    lm_status st = lm_masker_compute(&sg->masker, &sg->state, sg->bits, &sg->complete, err);
    if (st != LM_OK) return st;
    int trie_vocab = sg->masker.trie->vocab;
    /* stop ids keep their logits where the grammar may end */
    float kept[64];
    int n_kept = 0;
    for (int i = 0; i < n_stop_ids && n_kept < 64; i++)
        if (sg->complete && stop_ids[i] >= 0 && stop_ids[i] < vocab) kept[n_kept++] = logits[stop_ids[i]];
    bool any = n_kept > 0;
    size_t words = ((size_t)vocab + 63) / 64;
    for (size_t w = 0; w < words; w++) {
        uint64_t m = w * 64 < (size_t)trie_vocab ? sg->bits[w] : 0;
        if (m == ~0ull) {
            any = true;
            continue;
        }
        size_t end = w * 64 + 64 < (size_t)vocab ? w * 64 + 64 : (size_t)vocab;
        float *row = logits + w * 64;
        if (m) any = true;
        if (m == 0 || end - w * 64 < 64) {
            for (size_t k = 0; k < end - w * 64; k++)
                if (!((m >> k) & 1)) row[k] = -INFINITY;
            continue;
        }
        /* branch-free on 32-bit halves, which compilers vectorise (the
         * 64-bit shift they do not) */
        uint32_t lo = (uint32_t)m, hi = (uint32_t)(m >> 32);
        for (int k = 0; k < 32; k++) row[k] = ((lo >> k) & 1u) ? row[k] : -INFINITY;
        for (int k = 0; k < 32; k++) row[32 + k] = ((hi >> k) & 1u) ? row[32 + k] : -INFINITY;
    }
    n_kept = 0;
    for (int i = 0; i < n_stop_ids && n_kept < 64; i++)
        if (sg->complete && stop_ids[i] >= 0 && stop_ids[i] < vocab) logits[stop_ids[i]] = kept[n_kept++];
    if (!any) return lm_fail(err, LM_ERR_INVALID, "grammar: no token can continue the output and it is not complete");
    return LM_OK;
}

static bool advance(lm_sequence_grammar *sg, lm_gstate *state, const lm_tokenizer *tok, int32_t token) {
    size_t len = 0;
    const char *bytes = lm_tokenizer_is_added(tok, token) ? NULL : lm_tokenizer_token_bytes(tok, token, &len);
    if (!bytes || len == 0) return false;
    return lm_masker_accept_token(&sg->masker, state, &sg->scratch, bytes, len);
}

lm_status lm_sequence_grammar_accept(lm_sequence_grammar *sg, const lm_tokenizer *tok, int32_t token,
                                     bool *finished, lm_error *err) {
    lm_gmatcher_budget(&sg->masker.matcher, sg->token_work);
    if (!advance(sg, &sg->state, tok, token)) {
        const lm_gmatcher *m = &sg->masker.matcher;
        if (m->over_budget)
            return lm_fail(err, LM_ERR_UNSUPPORTED,
                           "grammar: advancing over token %d took more than its budget of matcher work (%llu "
                           "units): the grammar's automaton is too large (states of up to %u stacks)",
                           token, (unsigned long long)m->budget, m->max_stacks);
        return lm_fail(err, m->failed ? LM_ERR_NOMEM : LM_ERR_INTERNAL,
                       "grammar: the sampled token %d does not continue the grammar", token);
    }
    *finished = lm_gstate_finished(&sg->state);
    return LM_OK;
}

int lm_sequence_grammar_valid_prefix(lm_sequence_grammar *sg, const lm_tokenizer *tok, const int32_t *drafts,
                                     int n) {
    if (!lm_gstate_copy(&sg->probe, &sg->state)) return 0;
    /* over the budget no draft is taken: the next mask, under a budget of
     * its own, decides whether the sequence goes on */
    lm_gmatcher_budget(&sg->masker.matcher, sg->token_work);
    for (int i = 0; i < n; i++)
        if (!advance(sg, &sg->probe, tok, drafts[i])) return i;
    return n;
}
