/* Which vocabulary tokens a grammar state allows next.
 *
 * The vocabulary's byte strings are sorted into a trie (lm_token_trie, one
 * per tokenizer, immutable).  A mask walks the trie with the matcher,
 * pruning a subtree at the first byte no stack accepts, but most of the walk
 * is precomputed per "frame": the top position of a stack.  For a frame,
 * the trie is walked once with that position alone on the stack:
 *   - tokens consumed entirely inside the frame (or ending exactly where it
 *     completes) are allowed whatever lies below it on the real stack:
 *     the frame's accepted set;
 *   - a token that completes the frame and goes on depends on the rest of
 *     the stack: the trie nodes where that happens are kept, and only their
 *     subtrees are walked at mask time, with the real stack.
 * A state's mask is the union over its stacks of accepted[top] plus the
 * walks of those subtrees.  The frames are right-recursive loops (a whole
 * JSON string is one frame), so inside a string or a number a mask is a
 * copy of a precomputed set plus a few short walks, not a vocabulary scan.
 *
 * A frame whose tokens complete it and go on keeps the bytes they go on
 * with as a small trie of its own (the tails: a string's `",` `"}` `":`
 * are shared by thousands of tokens), walked once per mask from the stack
 * below the frame.
 *
 * A frame is keyed by the top position of a stack, or by its top few
 * positions for loops that may end after any byte (LM_MASK_DEEP_TAILS).
 *
 * Frames are computed on first use and kept in an lm_mask_frames table,
 * which maskers of equal grammars share. */
#ifndef LOOM_GRAMMAR_TOKEN_MASK_H
#define LOOM_GRAMMAR_TOKEN_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "grammar/matcher.h"

#define LM_TRIE_MAX_TOKEN_BYTES 1024 /* longer tokens are left out (never allowed) */
#define LM_MASK_MAX_FRAMES 512
/* A frame whose completion points hold more than LM_MASK_DEEP_TAILS tails
 * (a loop that may end after every byte, e.g. a pattern's [a-z]+) is
 * replaced, on stacks deep enough, by a frame of the top two positions (and
 * so on, up to LM_MASK_MAX_FRAME_DEPTH), which runs past the loop's end
 * instead of copying what follows every byte of it. */
#define LM_MASK_DEEP_TAILS 8192
#define LM_MASK_MAX_FRAME_DEPTH 4

typedef struct {
    uint32_t tok_lo, tok_hi;  /* the subtree's tokens: sorted[tok_lo .. tok_hi) */
    uint32_t first_child;
    uint16_t n_children;
    uint16_t depth;           /* bytes from the root */
    uint32_t n_end;           /* tokens ending here: sorted[tok_lo .. tok_lo + n_end) */
    uint8_t byte;
} lm_trie_node;

typedef struct {
    int vocab;             /* the id space */
    int32_t *sorted;       /* text token ids by their bytes */
    uint32_t n_sorted;
    uint8_t *blob;         /* every token's bytes */
    uint32_t *offset, *length; /* per sorted index, into blob */
    lm_trie_node *nodes;   /* node 0 is the root */
    uint32_t n_nodes;
    uint32_t max_depth;
} lm_token_trie;

/* bytes[id] / lengths[id] for id < vocab: a token's text bytes, bytes[id] NULL
 * for ids that are no text (special tokens, padding): they are never allowed. */
lm_status lm_token_trie_build(int vocab, const char *const *bytes, const size_t *lengths, lm_token_trie **out,
                              lm_error *err);
void lm_token_trie_free(lm_token_trie *t);

typedef struct lm_frame lm_frame;

/* The frames of one grammar over one trie, computed on first use: shared by
 * every masker of an equal grammar (lm_grammar_equal), so that sequences
 * with one schema pay for each frame once.  Reference counted, not thread
 * safe: one thread (the engine's) uses it.  Bounded: past
 * LM_MASK_MAX_FRAMES the table is emptied. */
/* The matcher states met in walks, interned, with their transitions by
 * byte: most trie nodes of a walk see a handful of distinct states (inside
 * a string, one), so after the first visit a step is a table lookup
 * instead of a stack expansion.  Bounded: LM_MASK_MEMO_STATES states and
 * LM_MASK_MEMO_WORDS words of them; when full it is emptied before the next
 * walk (during a walk, new states are just not interned). */
#define LM_MASK_MEMO_STATES 1024
#define LM_MASK_MEMO_WORDS (1u << 18)
#define LM_MASK_NO_STATE UINT32_MAX
typedef struct {
    uint32_t *words;          /* [LM_MASK_MEMO_WORDS] every state's words */
    uint32_t n_words;
    uint32_t *offset, *n_state_words, *n_stacks; /* per state */
    uint8_t *complete;        /* per state: lm_gstate_complete */
    lm_byte_class *next;      /* per state: lm_gstate_next_bytes */
    int32_t *trans;           /* [state * 256 + byte]: a state, or LM_MEMO_UNKNOWN / LM_MEMO_DEAD */
    uint32_t n_states;
    uint32_t max_states;      /* LM_MASK_MEMO_STATES (tests lower it) */
    uint32_t *slots;          /* open addressing: state + 1, 0 empty; [2 * LM_MASK_MEMO_STATES] */
} lm_state_memo;

typedef struct {
    int refs;
    const lm_token_trie *trie;
    uint64_t grammar_hash;  /* of the grammar its maskers run (lm_grammar.hash; 0 until the first) */
    lm_state_memo memo;
    uint32_t deep_tails;   /* LM_MASK_DEEP_TAILS (tests lower it) */
    lm_frame **slots;      /* open addressing by top positions, [2 * LM_MASK_MAX_FRAMES] */
    uint32_t n_frames;
    uint64_t built, reused; /* counters for benchmarks */
} lm_mask_frames;

lm_status lm_mask_frames_create(const lm_token_trie *trie, lm_mask_frames **out, lm_error *err);
/* How many top stack positions a frame is keyed by (for tests). */
uint32_t lm_frame_depth(const lm_frame *f);
lm_mask_frames *lm_mask_frames_ref(lm_mask_frames *f);
void lm_mask_frames_unref(lm_mask_frames *f);

typedef struct {
    const lm_grammar *grammar;
    const lm_token_trie *trie;
    lm_gmatcher matcher;
    lm_gstate *path;       /* [max_depth + 2] states along a walk */
    uint32_t *path_id;     /* [max_depth + 2] their memo states (path[d] stale), or LM_MASK_NO_STATE */
    lm_gstate one;         /* a single-stack state */
    lm_mask_frames *frames; /* a reference */
} lm_masker;

/* frames: a table shared with maskers of equal grammars over the same trie
 * (a reference is taken), or NULL for a table of the masker's own. */
lm_status lm_masker_init(lm_masker *m, const lm_grammar *g, const lm_token_trie *trie, lm_mask_frames *frames,
                         lm_error *err);
void lm_masker_free(lm_masker *m);

/* Sets bits (one per id, [ceil(vocab / 64)] words, cleared first) of the
 * tokens allowed after state.  *complete says whether the state may end
 * (end-of-sequence allowed).  Returns the number of allowed tokens through
 * *n_allowed when not NULL. */
lm_status lm_masker_compute(lm_masker *m, const lm_gstate *state, uint64_t *bits, bool *complete, lm_error *err);

/* Advances state by the bytes of token id (in place, using scratch); false
 * if the grammar refuses them (state is then unchanged). */
bool lm_masker_accept_token(lm_masker *m, lm_gstate *state, lm_gstate *scratch, const char *bytes, size_t len);

#endif
