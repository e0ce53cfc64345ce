#include "engine/sequence.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_sequence_create(loom_request *request, int choice, const lm_tokenizer *tokenizer,
                             const int32_t *eos_ids, int n_eos, uint64_t unseeded_entropy,
                             lm_sequence **out, lm_error *err) {
    const loom_request_params *p = &request->params;
    lm_sequence *seq = calloc(1, sizeof *seq);
    if (!seq) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    seq->request = request;
    seq->choice = choice;
    seq->state = LM_SEQ_WAITING;
    seq->state_slot = -1;
    seq->resume_snapshot = -1;
    seq->resume_tail = -1;
    seq->cap_tokens = p->n_prompt + p->max_tokens + 1;
    seq->tokens = malloc(sizeof(int32_t) * (size_t)seq->cap_tokens);
    seq->stop_ids = malloc(sizeof(int32_t) * (size_t)(n_eos + p->n_stop_token_ids + 1));
    if (!seq->tokens || !seq->stop_ids) {
        lm_sequence_free(seq);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    if (!p->ignore_eos)
        for (int i = 0; i < n_eos; i++) seq->stop_ids[seq->n_stop_ids++] = eos_ids[i];
    for (int i = 0; i < p->n_stop_token_ids; i++) seq->stop_ids[seq->n_stop_ids++] = p->stop_token_ids[i];
    memcpy(seq->tokens, p->prompt, sizeof(int32_t) * (size_t)p->n_prompt);
    seq->n_tokens = seq->n_prompt = p->n_prompt;
    /* A seeded choice draws from its own stream, whatever else runs. */
    uint64_t seed = p->sampling.has_seed ? lm_rng_derive(p->sampling.seed, (uint64_t)choice)
                                         : unseeded_entropy;
    lm_rng_seed(&seq->rng, seed);
    lm_status st = lm_token_counts_init(&seq->counts, p->n_prompt + p->max_tokens, err);
    if (st == LM_OK) st = lm_token_counts_add_prompt(&seq->counts, p->prompt, p->n_prompt, err);
    if (st != LM_OK) {
        lm_sequence_free(seq);
        return st;
    }
    if (tokenizer) {
        lm_detokenizer_init(&seq->detokenizer, tokenizer, p->skip_special_tokens);
        lm_detokenizer_keep_special(&seq->detokenizer, p->keep_special_token_ids, p->n_keep_special_token_ids);
        seq->tokenizer = tokenizer;
        seq->has_detokenizer = true;
    }
    for (int i = 0; i < p->n_stop; i++) {
        int len = (int)strlen(p->stop[i]);
        if (len > seq->max_stop_len) seq->max_stop_len = len;
    }
    *out = seq;
    return LM_OK;
}

void lm_sequence_free(lm_sequence *seq) {
    if (!seq) return;
    lm_token_counts_free(&seq->counts);
    lm_sequence_grammar_free(seq->grammar);
    free(seq->stop_ids);
    if (seq->has_detokenizer) lm_detokenizer_free(&seq->detokenizer);
    free(seq->tokens);
    free(seq->blocks);
    free(seq->chain);
    free(seq->text);
    free(seq);
}

int lm_sequence_generated(const lm_sequence *seq) { return seq->n_tokens - seq->n_prompt; }

bool lm_sequence_reserve_blocks(lm_sequence *seq, int n) {
    if (n <= seq->cap_blocks) return true;
    int32_t *blocks = realloc(seq->blocks, sizeof *blocks * (size_t)n);
    if (!blocks) return false;
    seq->blocks = blocks;
    lm_block_link *chain = realloc(seq->chain, sizeof *chain * (size_t)n);
    if (!chain) return false;
    seq->chain = chain;
    seq->cap_blocks = n;
    return true;
}

static bool append_text(lm_sequence *seq, const char *text, size_t len) {
    if (seq->text_len + len + 1 > seq->text_cap) {
        size_t cap = seq->text_cap ? seq->text_cap : 256;
        while (cap < seq->text_len + len + 1) cap *= 2;
        char *bigger = realloc(seq->text, cap);
        if (!bigger) return false;
        seq->text = bigger;
        seq->text_cap = cap;
    }
    memcpy(seq->text + seq->text_len, text, len);
    seq->text_len += len;
    seq->text[seq->text_len] = '\0';
    return true;
}

/* Bytes at the end of the text that could begin a stop string: they are
 * held back until the next tokens settle it. */
static size_t stop_prefix_hold(const lm_sequence *seq) {
    const loom_request_params *p = &seq->request->params;
    size_t hold = 0;
    for (int i = 0; i < p->n_stop; i++) {
        size_t n = strlen(p->stop[i]);
        if (n == 0) continue;
        for (size_t k = n - 1; k > hold; k--)
            if (k <= seq->text_len - seq->emitted &&
                memcmp(seq->text + seq->text_len - k, p->stop[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Earliest stop string in the text not yet emitted (a match may start
 * inside the held-back tail). */
static int find_stop_string(const lm_sequence *seq, size_t *at) {
    const loom_request_params *p = &seq->request->params;
    int found = -1;
    size_t best = seq->text_len;
    size_t from = seq->emitted;
    for (int i = 0; i < p->n_stop; i++) {
        if (!p->stop[i][0]) continue;
        const char *hit = memmem(seq->text + from, seq->text_len - from, p->stop[i], strlen(p->stop[i]));
        if (hit && (size_t)(hit - seq->text) < best) {
            best = (size_t)(hit - seq->text);
            found = i;
        }
    }
    *at = best;
    return found;
}

static bool contains(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

lm_status lm_sequence_accept(lm_sequence *seq, int32_t token, const int32_t *eos_ids, int n_eos,
                             int max_model_len, lm_token_outcome *out, lm_error *err) {
    const loom_request_params *p = &seq->request->params;
    memset(out, 0, sizeof *out);
    out->stop_token = -1;
    out->stop_string = -1;
    int generated = lm_sequence_generated(seq) + 1; /* counting this token */

    bool is_stop_token = contains(p->stop_token_ids, p->n_stop_token_ids, token) ||
                         (!p->ignore_eos && contains(eos_ids, n_eos, token));
    if (seq->n_tokens >= seq->cap_tokens)
        return lm_fail(err, LM_ERR_INTERNAL, "sequence token buffer overflow");
    seq->tokens[seq->n_tokens++] = token;
    if (is_stop_token && generated > p->min_tokens - 1) {
        /* The stop token itself is counted but not turned into text. */
        out->finished = true;
        out->reason = LOOM_FINISH_STOP;
        out->stop_token = token;
        return LM_OK;
    }
    lm_status st = lm_token_counts_add_output(&seq->counts, token, err);
    if (st != LM_OK) return st;

    if (seq->has_detokenizer) {
        const char *delta = "";
        size_t delta_len = 0, bytes;
        /* Models pad their vocabulary past the tokenizer's: such ids are no text. */
        if (lm_tokenizer_token_bytes(seq->tokenizer, token, &bytes)) {
            st = lm_detokenizer_push(&seq->detokenizer, token, &delta, &delta_len, err);
            if (st != LM_OK) return st;
        }
        if (!append_text(seq, delta, delta_len)) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
        size_t at;
        int stop = p->n_stop > 0 ? find_stop_string(seq, &at) : -1;
        size_t release_to = seq->text_len - stop_prefix_hold(seq);
        if (stop >= 0) {
            release_to = at; /* the stop string and what follows are not emitted */
            out->finished = true;
            out->reason = LOOM_FINISH_STOP;
            out->stop_string = stop;
        }
        out->text = seq->text + seq->emitted;
        out->text_len = release_to > seq->emitted ? release_to - seq->emitted : 0;
        seq->emitted += out->text_len;
        if (stop >= 0) {
            seq->text_len = release_to; /* nothing after the stop string survives */
            seq->emitted = release_to;
            return LM_OK;
        }
    }
    if (generated >= p->max_tokens || seq->n_tokens >= max_model_len) {
        out->finished = true;
        out->reason = LOOM_FINISH_LENGTH;
    }
    return LM_OK;
}

void lm_sequence_flush_text(lm_sequence *seq, const char **text, size_t *len) {
    if (seq->has_detokenizer) {
        const char *tail;
        size_t tail_len;
        lm_error ignored;
        if (lm_detokenizer_finish(&seq->detokenizer, &tail, &tail_len, &ignored) == LM_OK)
            append_text(seq, tail, tail_len);
    }
    *text = seq->text ? seq->text + seq->emitted : "";
    *len = seq->text_len - seq->emitted;
    seq->emitted = seq->text_len;
}
