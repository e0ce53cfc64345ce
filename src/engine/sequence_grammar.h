/* A sequence's grammar (loom_request_params.grammar) on the engine thread:
 * its matcher state over the committed output, the masker (frames cached
 * per sequence) and the mask of the next token.
 *
 * Every emitted token goes through lm_sequence_grammar_accept, so the state
 * always stands for the committed output: a speculative verify samples
 * each row after the previous row's token was accepted, and rejected drafts
 * never touched it (nothing to roll back).  Drafts are checked beforehand
 * (lm_sequence_grammar_valid_prefix) so that a draft the grammar refuses is
 * never verified. */
#ifndef LOOM_ENGINE_SEQUENCE_GRAMMAR_H
#define LOOM_ENGINE_SEQUENCE_GRAMMAR_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "grammar/token_mask.h"
#include "loom.h"
#include "text/tokenizer.h"

typedef struct {
    lm_masker masker;
    lm_gstate state, scratch, probe;
    uint64_t *bits;       /* [ceil(vocab / 64)] the mask */
    bool complete;        /* of the mask just computed */
} lm_sequence_grammar;

/* The vocabulary trie of a tokenizer's text tokens (added tokens are no text
 * a grammar could match), for vocab ids (the model's vocabulary may pad
 * past the tokenizer's). */
lm_status lm_grammar_vocab_trie(const lm_tokenizer *tok, int vocab, lm_token_trie **out, lm_error *err);

/* The frame tables (grammar/token_mask.h) of the grammars seen lately,
 * kept across requests: requests with the same schema compile equal
 * grammars, and share one table.  Engine thread only; bounded to
 * LM_GRAMMAR_FRAME_CACHE grammars (the least recently used one goes;
 * sequences using it keep their reference). */
#define LM_GRAMMAR_FRAME_CACHE 8
typedef struct {
    struct {
        const loom_grammar *grammar; /* a reference, for lm_grammar_equal */
        lm_mask_frames *frames;      /* a reference */
        uint64_t last_used;
    } entries[LM_GRAMMAR_FRAME_CACHE];
    uint64_t clock;
} lm_grammar_frame_cache;

void lm_grammar_frame_cache_free(lm_grammar_frame_cache *cache);

/* cache may be NULL: the sequence gets a frame table of its own. */
lm_status lm_sequence_grammar_create(const loom_grammar *grammar, const lm_token_trie *trie,
                                     lm_grammar_frame_cache *cache, lm_sequence_grammar **out, lm_error *err);
void lm_sequence_grammar_free(lm_sequence_grammar *sg);

/* Masks logits [vocab] in place: refused tokens -inf, stop_ids kept only
 * where the grammar is complete.  Fails (LM_ERR_INVALID) when nothing may
 * follow: no token continues the grammar and it is not complete. */
lm_status lm_sequence_grammar_mask(lm_sequence_grammar *sg, float *logits, int vocab, const int32_t *stop_ids,
                                   int n_stop_ids, lm_error *err);

/* Advances over an emitted (non-stop) token; *finished: complete and
 * nothing may follow.  Fails when the grammar refuses it. */
lm_status lm_sequence_grammar_accept(lm_sequence_grammar *sg, const lm_tokenizer *tok, int32_t token,
                                     bool *finished, lm_error *err);

/* How many of drafts[0..n) the grammar allows in a row after the state. */
int lm_sequence_grammar_valid_prefix(lm_sequence_grammar *sg, const lm_tokenizer *tok, const int32_t *drafts,
                                     int n);

#endif
