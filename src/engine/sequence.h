/* One choice of a request inside the engine: its tokens, caches, sampler
 * state and the text it has produced (for stop strings and streaming). */
#ifndef LOOM_ENGINE_SEQUENCE_H
#define LOOM_ENGINE_SEQUENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/kv_blocks.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sequence_grammar.h"
#include "engine/spec_control.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

#define LM_SEQUENCE_MAX_DRAFTS 8

/* PREEMPTED only inside one scheduling pass: it gave its caches back and
 * joins the waiting queue when the pass ends.  RETIRING: finished inside a
 * step, its caches kept until the step ends (rolled back, then offered to
 * the prefix cache). */
typedef enum { LM_SEQ_WAITING, LM_SEQ_RUNNING, LM_SEQ_PREEMPTED, LM_SEQ_RETIRING, LM_SEQ_FINISHED } lm_seq_state;

typedef struct lm_sequence {
    loom_request *request;
    int choice;
    lm_seq_state state;
    int32_t *tokens; /* prompt then generated tokens */
    int n_tokens, cap_tokens, n_prompt;
    int n_cached;    /* tokens held by the caches; < n_tokens while running */
    int state_slot;  /* -1 when none */
    int32_t *blocks;
    int n_blocks, cap_blocks;
    /* prefix caching (engine/prefix_cache.c): the keys of its first n_chain
     * full blocks ([cap_blocks]), what its admission resumed from, where
     * its prefill must stop for a snapshot, and what the cache gave it */
    lm_block_link *chain;
    int n_chain;
    int resume_snapshot;  /* admission: the snapshot to restore into its slot, or -1 */
    int32_t resume_tail;  /* admission: a held partial block to copy into its own, or -1 */
    int last_snapshot;    /* the position of its last snapshot (0: none) */
    int branch_point;     /* > n_cached: a prefill chunk ends here and snapshots */
    int cached_tokens;    /* prompt tokens the prefix cache gave its first admission */
    bool looked_up;       /* its first admission has been counted */
    uint64_t admit_order;
    struct lm_sequence *fork_parent; /* a later choice waiting to copy choice 0's prefill */

    /* speculative decoding (MTP drafts) */
    bool speculate;
    int32_t drafts[LM_SEQUENCE_MAX_DRAFTS];
    int n_drafts;               /* drafts waiting to be verified in the next step */
    int drafted, accepted;      /* totals for the usage report */
    lm_spec_seq spec_ctl;       /* how many to draft: its acceptance, cold or not (spec_control.h) */

    lm_rng rng;
    lm_token_counts counts;
    const lm_tokenizer *tokenizer;
    bool has_detokenizer;
    lm_detokenizer detokenizer;
    char *text;                 /* generated text so far */
    size_t text_len, text_cap, emitted; /* emitted: bytes already sent in events */
    int max_stop_len;
    lm_sequence_grammar *grammar; /* the request's grammar's state; NULL until its first sample */
    int32_t *stop_ids; /* eos (unless ignore_eos) + stop_token_ids: masked before min_tokens */
    int n_stop_ids;
} lm_sequence;

lm_status lm_sequence_create(loom_request *request, int choice, const lm_tokenizer *tokenizer,
                             const int32_t *eos_ids, int n_eos, uint64_t unseeded_entropy,
                             lm_sequence **out, lm_error *err);
void lm_sequence_free(lm_sequence *seq);

int lm_sequence_generated(const lm_sequence *seq);
/* Room for n blocks in the block table (and its chain); false when out of memory. */
bool lm_sequence_reserve_blocks(lm_sequence *seq, int n);

/* What accepting a sampled token led to. */
typedef struct {
    bool finished;
    loom_finish_reason reason;
    int32_t stop_token;   /* -1 unless a stop token / eos ended it */
    int stop_string;      /* -1 unless a stop string ended it */
    const char *text;     /* text released by this token (into seq->text) */
    size_t text_len;
} lm_token_outcome;

/* Appends a sampled token and applies the stop rules (stop tokens, eos,
 * stop strings, max_tokens, the context limit).  eos_ids are the model's. */
lm_status lm_sequence_accept(lm_sequence *seq, int32_t token, const int32_t *eos_ids, int n_eos,
                             int max_model_len, lm_token_outcome *outcome, lm_error *err);
/* Text still held back (a possible stop-string prefix) when the sequence ends otherwise. */
void lm_sequence_flush_text(lm_sequence *seq, const char **text, size_t *len);

#endif
