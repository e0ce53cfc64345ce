/* A step as the ops see it, for any family whose layers read the StepBatch
 * through paged attention and per-sequence ops: the StepBatch checked
 * against the context's limits, then packed into one int32 descriptor in
 * backend memory and uploaded in one piece. */
#ifndef LOOM_MODELS_STEP_DESCRIPTOR_H
#define LOOM_MODELS_STEP_DESCRIPTOR_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "models/step_batch.h"
#include "ops/ops.h"

/* The step's arrays in backend memory (int32 each). */
typedef struct {
    int n_tokens, n_seqs, n_logit_rows;
    int max_ctx_len, max_seq_len;
    int table_stride;    /* entries per row of block_tables */
    lm_mem tokens;       /* [n_tokens] */
    lm_mem positions;    /* [n_tokens][3] */
    lm_mem token_seq;    /* [n_tokens] sequence of each token */
    lm_mem ctx_len;      /* [n_tokens] entries each token attends to */
    lm_mem kv_slots;     /* [n_tokens] pool slot of each token's keys and values */
    lm_mem seq_first, seq_len, seq_slot; /* [n_seqs] */
    lm_mem block_tables; /* [n_seqs][table_stride] */
    lm_mem logit_rows;   /* [n_logit_rows] batch rows that need logits */
    lm_mem gather_rows;  /* [n_tokens] optional: rows of another step's arrays (MTP) */
} lm_step_view;

/* What a context accepts. */
typedef struct {
    int max_step_tokens, max_step_seqs, max_logit_rows;
    int kv_block_size, kv_blocks, max_blocks_per_seq;
    bool uses_kv;        /* the sequences must bring block tables for their tokens */
    int state_slots;     /* > 0: every sequence needs a slot below it; 0: no per-sequence state */
    int record_rows;     /* most rows a sequence may record for rollback; 0: none may */
    int vocab_size;      /* token ids must lie below it */
} lm_step_limits;

/* int32 entries a descriptor of these limits needs (host staging and device). */
size_t lm_step_descriptor_ints(int max_step_tokens, int max_step_seqs, int max_blocks_per_seq);

/* A clear error for a batch the context cannot run. */
lm_status lm_step_check(const lm_step_limits *limits, const lm_step_batch *b, lm_error *err);

/* Packs a checked batch into host (lm_step_descriptor_ints entries),
 * uploads it to descriptor and fills the view.  tokens NULL in the batch:
 * the caller supplies token ids some other way (MTP draft rounds); gather
 * (optional, [n_tokens]) fills view->gather_rows. */
void lm_step_upload(lm_backend *be, lm_mem descriptor, int32_t *host, const lm_step_batch *b,
                    int kv_block_size, const int32_t *gather, lm_step_view *view);

/* The step's sequences as the recurrent ops take them. */
static inline lm_seq_batch lm_step_sequences(const lm_step_view *step) {
    return (lm_seq_batch){.n_seqs = step->n_seqs,
                          .first = step->seq_first,
                          .length = step->seq_len,
                          .slot = step->seq_slot,
                          .max_length = step->max_seq_len};
}

/* The step's tokens as paged attention over one KV layer takes them
 * (scale 1/sqrt(head_dim)). */
static inline lm_attention_batch lm_step_attention(const lm_step_view *step, int n_heads,
                                                   int n_kv_heads, int head_dim) {
    return (lm_attention_batch){.n_tokens = step->n_tokens,
                                .token_seq = step->token_seq,
                                .ctx_len = step->ctx_len,
                                .block_tables = step->block_tables,
                                .table_stride = step->table_stride,
                                .max_ctx_len = step->max_ctx_len,
                                .max_seq_tokens = step->max_seq_len,
                                .n_heads = n_heads,
                                .n_kv_heads = n_kv_heads,
                                .head_dim = head_dim,
                                .scale = 1.0f / sqrtf((float)head_dim)};
}

/* Carves a context's arrays out of one backend allocation: a first pass
 * with buffer NULL adds up the size, a second assigns the views. */
typedef struct {
    lm_buffer *buffer; /* NULL while counting */
    size_t used;       /* bytes */
} lm_carver;

static inline void lm_carve(lm_carver *c, lm_mem *out, size_t count) { /* 4-byte elements */
    size_t bytes = (count * 4 + 63) / 64 * 64; /* every array 64-byte aligned */
    *out = (lm_mem){c->buffer, c->used};
    c->used += bytes;
}

#endif
