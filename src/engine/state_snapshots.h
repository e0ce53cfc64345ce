/* Recurrent-state snapshots for prefix caching.
 *
 * A Gated DeltaNet layer's state is one matrix per sequence: it cannot be
 * cut back to a shorter prefix the way a paged KV cache can, so a prefix is
 * resumable only where a copy of the state was kept.  A snapshot is such a
 * copy (in the model context's snapshot area, by id) taken when a sequence
 * had exactly `pos` tokens in its caches, and it hangs on the registered KV
 * block that holds position pos - 1 (a full block, or the partial tail
 * block of a finished turn).  That block's key ties the snapshot to the
 * whole chain of tokens before it; when the block is unregistered the
 * snapshot is dropped with it.
 *
 * The pool is bounded (its size set in bytes by the engine) and evicts the
 * least recently used snapshot first.  For a model without recurrent state
 * the entries carry no state at all: they only name resumable partial
 * blocks.  Engine thread only. */
#ifndef LOOM_ENGINE_STATE_SNAPSHOTS_H
#define LOOM_ENGINE_STATE_SNAPSHOTS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "engine/id_pool.h"

typedef struct {
    bool used;
    int pos;               /* tokens the state covers */
    int32_t block;         /* the registered block holding position pos - 1 */
    uint64_t block_number; /* its registration number (lm_block_key.number) */
    int32_t newer, older;  /* LRU links (-1: end) */
} lm_snapshot;

typedef struct {
    int capacity;
    lm_snapshot *entries; /* [capacity]; an entry's index is its id in the model's snapshot area */
    lm_id_pool free;
    int32_t newest, oldest;
    int n_used;
} lm_state_snapshots;

lm_status lm_state_snapshots_init(lm_state_snapshots *s, int capacity, lm_error *err);
void lm_state_snapshots_free(lm_state_snapshots *s);

/* A snapshot id for a new snapshot at pos on block (the newest in the
 * LRU), evicting the least recently used one when the pool is full. */
int lm_state_snapshots_add(lm_state_snapshots *s, int pos, int32_t block, uint64_t block_number);
/* Marks a snapshot as just used. */
void lm_state_snapshots_touch(lm_state_snapshots *s, int id);
/* Drops every snapshot that hangs on the block registered as number. */
void lm_state_snapshots_drop_block(lm_state_snapshots *s, int32_t block, uint64_t number);
/* Drops every snapshot. */
void lm_state_snapshots_clear(lm_state_snapshots *s);

#endif
