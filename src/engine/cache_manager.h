/* The cache manager: everything a sequence holds of the model's caches.
 * It owns the KV block pool (kv_blocks.c, with the prefix cache's index),
 * the recurrent-state slots (id_pool.c), the state snapshots
 * (state_snapshots.c) and the prefix cache's policy (prefix_cache.c); the
 * scheduler and the runner ask it for blocks and slots, the prefix cache's
 * lookups and registrations, and never touch the pools themselves.
 *
 * Engine thread only.  The storage itself is the model context's
 * (models/model.h); the manager names ids into it. */
#ifndef LOOM_ENGINE_CACHE_MANAGER_H
#define LOOM_ENGINE_CACHE_MANAGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/id_pool.h"
#include "engine/kv_blocks.h"
#include "engine/sequence.h"
#include "engine/state_snapshots.h"
#include "loom.h"
#include "models/model.h"

typedef struct {
    lm_model_context *context; /* borrowed: where the ids point */
    int block_size;
    lm_kv_blocks kv_blocks;   /* ids of the context's KV blocks (and the prefix cache's index) */
    lm_id_pool state_slots;   /* ids of its recurrent-state slots */
    /* prefix caching: on or off, whether resuming needs a recurrent-state
     * snapshot, the snapshot pool, one snapshot's bytes, how far apart a
     * prefill's snapshots are */
    bool prefix_on, prefix_has_state;
    lm_state_snapshots snapshots;
    size_t snapshot_bytes;
    int snapshot_interval;
    uint64_t prefix_queries, prefix_hits;
} lm_cache_manager;

/* At create, before the context is made: the block size and the prefix
 * cache's choice (on/off, the snapshot pool; sets context->state_snapshots). */
lm_status lm_cache_manager_configure(lm_cache_manager *cm, const loom_engine_options *o, const lm_model_info *info,
                                     lm_context_options *context, lm_error *err);
/* Once the context exists: the pools of its n_blocks blocks and n_slots slots. */
lm_status lm_cache_manager_start(lm_cache_manager *cm, lm_model_context *context, int n_blocks, int n_slots,
                                 lm_error *err);
void lm_cache_manager_free(lm_cache_manager *cm);

/* Blocks that hold n_tokens. */
int lm_cache_blocks_for(const lm_cache_manager *cm, int n_tokens);
/* Grows seq's block table to hold n_tokens; false if the pool is short. */
bool lm_cache_ensure_blocks(lm_cache_manager *cm, lm_sequence *seq, int n_tokens);
/* Whether a state slot is free now. */
bool lm_cache_slot_free(const lm_cache_manager *cm);
/* A state slot for seq: zeroed for a sequence that starts from nothing,
 * else the snapshot its admission resumes from.  False if none is free. */
bool lm_cache_take_state_slot(lm_cache_manager *cm, lm_sequence *seq);
/* Everything seq holds goes back (blocks, slot, the held resume tail). */
void lm_cache_release(lm_cache_manager *cm, lm_sequence *seq);
/* child takes parent's prompt state: full blocks shared, the partial last
 * one and the recurrent state copied.  False (child holds nothing) if the
 * pools are short. */
bool lm_cache_fork(lm_cache_manager *cm, lm_sequence *child, const lm_sequence *parent);
/* Whether seq may write n_new rows from its cached length: none of those
 * blocks is shared or held by the prefix cache. */
bool lm_cache_writable(const lm_cache_manager *cm, const lm_sequence *seq, int n_new);
/* Its part of the engine's stats. */
void lm_cache_stats(const lm_cache_manager *cm, loom_stats *stats);

/* prefix_cache.c: admission of a sequence with nothing cached: holds the
 * longest cached prefix that can be resumed (its full blocks into the
 * block table, n_cached set; the snapshot and partial tail to restore in
 * resume_snapshot / resume_tail). */
void lm_prefix_cache_admit(lm_cache_manager *cm, lm_sequence *seq);
/* prefix_cache.c: once the admitted sequence has its own blocks and slot:
 * counts the first admission's query, copies the held partial tail into
 * its block and lets it go. */
void lm_prefix_cache_admitted(lm_cache_manager *cm, lm_sequence *seq);
/* prefix_cache.c: the tokens of a prefill chunk of seq that may run now
 * (at most `take`): chunks end at block boundaries and at a branch point,
 * where a snapshot is taken. */
int lm_prefix_cache_chunk(const lm_cache_manager *cm, const lm_sequence *seq, int take);
/* prefix_cache.c: after a step committed rows of seq: registers its new
 * full blocks; after a prefill chunk (`prefill`), snapshots its state when
 * the chunk ended at a snapshot point. */
void lm_prefix_cache_progress(lm_cache_manager *cm, lm_sequence *seq, bool prefill);
/* prefix_cache.c: seq stops with caches consistent at n_cached (a turn's
 * end, or preemption): its partial tail block and its state are kept. */
void lm_prefix_cache_retire(lm_cache_manager *cm, lm_sequence *seq);
/* prefix_cache.c: drops every idle cached block and every snapshot. */
void lm_prefix_cache_reset(lm_cache_manager *cm);

#endif
