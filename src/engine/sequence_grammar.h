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

/* The engine thread's budget per token of a sequence, in matcher work units
 * (grammar/matcher.h: an expansion step or a stack compared, a few
 * nanoseconds each): the mask may spend this much, advancing the state by
 * the emitted token as much again, and checking a step's drafts as much
 * again.  A mask past it fails (LM_ERR_UNSUPPORTED, saying so) and the
 * engine ends the request with an error instead of holding every other
 * sequence's step: a grammar that passed its compile-time check
 * (grammar/cost.h) can still reach large states deep in its output.  The
 * costliest masks of ordinary grammars on a 151,669-token vocabulary (the
 * frame of a free string being built) spend about 340,000 units
 * (bench/grammar_mask); this is 12x that, 20-80 ms of one core on the
 * development VM, once: the request ends there. */
#define LM_GRAMMAR_TOKEN_WORK (4u << 20)

typedef struct {
    lm_masker masker;
    lm_gstate state, scratch, probe;
    uint64_t *bits;       /* [ceil(vocab / 64)] the mask */
    bool complete;        /* of the mask just computed */
    uint64_t token_work;  /* the budget per token: LM_GRAMMAR_TOKEN_WORK (tests lower it) */
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
