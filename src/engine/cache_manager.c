/* The cache manager (cache_manager.h): the pools' set up and the moves of
 * blocks and slots between them and the sequences.  The prefix cache's
 * lookups and registrations are in prefix_cache.c. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/cache_manager.h"

#define DEFAULT_SNAPSHOT_BYTES ((int64_t)256 << 20)
#define MAX_SNAPSHOTS 4096
#define STATELESS_SNAPSHOTS 256 /* models without recurrent state: entries naming partial tails */

/* ------------------------------------------------------------ set up */

static void on_block_evicted(void *ctx, int32_t block, uint64_t number) {
    lm_cache_manager *cm = ctx;
    lm_state_snapshots_drop_block(&cm->snapshots, block, number);
}

lm_status lm_cache_manager_configure(lm_cache_manager *cm, const loom_engine_options *o, const lm_model_info *info,
                                     lm_context_options *context, lm_error *err) {
    cm->block_size = o->kv_block_size;
    if (o->enable_prefix_caching < -1 || o->enable_prefix_caching > 1 || o->prefix_snapshot_bytes < 0)
        return lm_fail(err, LM_ERR_INVALID, "prefix caching options out of range");
    cm->prefix_on = o->enable_prefix_caching >= 0;
    cm->prefix_has_state = info->n_state_layers > 0 && info->state_bytes_per_slot > 0;
    if (!cm->prefix_on) return LM_OK;
    int capacity = STATELESS_SNAPSHOTS;
    if (cm->prefix_has_state) {
        int64_t bytes = o->prefix_snapshot_bytes > 0 ? o->prefix_snapshot_bytes : DEFAULT_SNAPSHOT_BYTES;
        int64_t n = bytes / (int64_t)info->state_bytes_per_slot;
        if (n > MAX_SNAPSHOTS) n = MAX_SNAPSHOTS;
        if (n < 1) {
            fprintf(stderr,
                    "loom: prefix caching is off: %lld snapshot bytes hold no recurrent state of %zu bytes\n",
                    (long long)bytes, info->state_bytes_per_slot);
            cm->prefix_on = false;
            return LM_OK;
        }
        capacity = (int)n;
        context->state_snapshots = capacity;
        cm->snapshot_bytes = info->state_bytes_per_slot;
    }
    int interval = o->max_batch_tokens / o->kv_block_size * o->kv_block_size;
    cm->snapshot_interval = interval > o->kv_block_size ? interval : o->kv_block_size;
    return lm_state_snapshots_init(&cm->snapshots, capacity, err);
}

lm_status lm_cache_manager_start(lm_cache_manager *cm, lm_model_context *context, int n_blocks, int n_slots,
                                 lm_error *err) {
    cm->context = context;
    lm_status st = lm_kv_blocks_init(&cm->kv_blocks, n_blocks, cm->block_size, cm->prefix_on, err);
    if (st == LM_OK) st = lm_id_pool_init(&cm->state_slots, n_slots, "state slots", err);
    if (st != LM_OK) return st;
    cm->kv_blocks.on_evict = on_block_evicted;
    cm->kv_blocks.on_evict_ctx = cm;
    return LM_OK;
}

void lm_cache_manager_free(lm_cache_manager *cm) {
    cm->kv_blocks.on_evict = NULL;
    lm_state_snapshots_free(&cm->snapshots);
    lm_kv_blocks_free(&cm->kv_blocks); /* each frees what it made, if anything */
    lm_id_pool_free(&cm->state_slots);
}

/* ------------------------------------------------------------ moves */

int lm_cache_blocks_for(const lm_cache_manager *cm, int n_tokens) {
    return (n_tokens + cm->block_size - 1) / cm->block_size;
}

void lm_cache_release(lm_cache_manager *cm, lm_sequence *seq) {
    lm_kv_blocks_release(&cm->kv_blocks, seq->blocks, seq->n_blocks);
    if (seq->resume_tail >= 0) lm_kv_blocks_release(&cm->kv_blocks, &seq->resume_tail, 1);
    seq->resume_tail = seq->resume_snapshot = -1;
    seq->n_blocks = seq->n_chain = 0;
    seq->branch_point = seq->last_snapshot = 0;
    if (seq->state_slot >= 0) lm_id_pool_give_back(&cm->state_slots, &seq->state_slot, 1);
    seq->state_slot = -1;
    seq->n_cached = 0;
}

bool lm_cache_ensure_blocks(lm_cache_manager *cm, lm_sequence *seq, int n_tokens) {
    int need = lm_cache_blocks_for(cm, n_tokens);
    if (need <= seq->n_blocks) return true;
    if (!lm_sequence_reserve_blocks(seq, need) ||
        !lm_kv_blocks_take(&cm->kv_blocks, need - seq->n_blocks, seq->blocks + seq->n_blocks))
        return false;
    seq->n_blocks = need;
    return true;
}

bool lm_cache_slot_free(const lm_cache_manager *cm) { return cm->state_slots.n_free > 0; }

bool lm_cache_take_state_slot(lm_cache_manager *cm, lm_sequence *seq) {
    if (lm_id_pool_take(&cm->state_slots, 1, &seq->state_slot, NULL) != LM_OK) return false;
    if (seq->resume_snapshot >= 0) lm_model_restore_state(cm->context, seq->resume_snapshot, seq->state_slot);
    else lm_model_reset_state(cm->context, seq->state_slot);
    seq->resume_snapshot = -1;
    return true;
}

bool lm_cache_fork(lm_cache_manager *cm, lm_sequence *child, const lm_sequence *parent) {
    if (!lm_sequence_reserve_blocks(child, lm_cache_blocks_for(cm, parent->n_cached))) return false;
    if (lm_id_pool_take(&cm->state_slots, 1, &child->state_slot, NULL) != LM_OK) return false;
    /* Full blocks are shared (neither writes them again); the partial
     * last one, which both go on writing, is copied. */
    int full = parent->n_cached / cm->block_size;
    for (int b = 0; b < full; b++) {
        child->blocks[b] = parent->blocks[b];
        lm_kv_blocks_hold(&cm->kv_blocks, child->blocks[b]);
    }
    child->n_blocks = full;
    if (!lm_cache_ensure_blocks(cm, child, parent->n_cached)) {
        lm_cache_release(cm, child);
        return false;
    }
    lm_model_copy_state(cm->context, parent->state_slot, child->state_slot);
    for (int b = full; b < lm_cache_blocks_for(cm, parent->n_cached); b++)
        lm_model_copy_block(cm->context, parent->blocks[b], child->blocks[b]);
    return true;
}

bool lm_cache_writable(const lm_cache_manager *cm, const lm_sequence *seq, int n_new) {
    int first = seq->n_cached / cm->block_size;
    int last = (seq->n_cached + n_new - 1) / cm->block_size;
    bool ok = true;
    for (int b = first; b <= last && b < seq->n_blocks; b++) ok &= lm_kv_blocks_writable(&cm->kv_blocks, seq->blocks[b]);
    return ok;
}

void lm_cache_stats(const lm_cache_manager *cm, loom_stats *stats) {
    stats->kv_blocks_total = cm->kv_blocks.n_blocks;
    stats->kv_blocks_free = lm_kv_blocks_available(&cm->kv_blocks); /* held by no sequence */
    stats->kv_blocks_cached = cm->kv_blocks.n_idle;
    stats->prefix_caching = cm->prefix_on;
    stats->prefix_cache_queries = cm->prefix_queries;
    stats->prefix_cache_hits = cm->prefix_hits;
    stats->snapshots_total = cm->prefix_has_state ? cm->snapshots.capacity : 0;
    stats->snapshots_used = cm->prefix_has_state ? cm->snapshots.n_used : 0;
    stats->snapshot_bytes_total = (uint64_t)stats->snapshots_total * cm->snapshot_bytes;
    stats->snapshot_bytes_used = (uint64_t)stats->snapshots_used * cm->snapshot_bytes;
    stats->state_slots_total = cm->state_slots.n_ids;
    stats->state_slots_free = cm->state_slots.n_free;
}
