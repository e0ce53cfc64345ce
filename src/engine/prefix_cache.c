/* Prefix caching for hybrid models: the engine's side.
 *
 * Full-attention layers cache per token, so any block-aligned prefix of
 * registered KV blocks (engine/kv_blocks.c) is reusable; a Gated DeltaNet
 * layer's state covers the whole prefix in one matrix, so a hybrid model
 * resumes only where a state snapshot (engine/state_snapshots.c) was taken.
 * A sequence therefore resumes at the longest position that has both: all
 * its full KV blocks registered with exactly its tokens (and images), and a
 * snapshot at that position (for a model without recurrent state, any
 * block boundary, or a finished turn's partial tail).
 *
 * Snapshots are taken where copying is all it costs:
 *  - at the end of a prefill chunk (chunks end at block boundaries while
 *    the cache is on), at most one per snapshot_interval tokens;
 *  - at a branch point: when a sequence finds more registered blocks than
 *    snapshots, its prefill stops at the end of those blocks and snapshots
 *    there, so the next request sharing that prefix resumes at the fork;
 *  - when a sequence retires with consistent caches (its turn ended, or it
 *    was preempted): at exactly its cached length, with its partial last
 *    block kept as a partial entry, so the next turn of a chat resumes
 *    where the answer ended.
 *
 * Nothing here writes into a shared block: a sequence shares only full
 * blocks that lie wholly before its cached length, which it never writes
 * again; the partial tail it resumes from is copied into a block of its
 * own; verify rows, rollbacks and MTP drafts write at positions past the
 * cached length. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache_manager.h"

/* ------------------------------------------------------------ contents */

/* What block `index` of seq holds over its first n tokens: token ids and
 * the prompt images whose rows fall among them (into images). */
static lm_block_content block_content(const lm_cache_manager *cm, const lm_sequence *seq, int index, int n,
                                      lm_block_image images[LOOM_MAX_IMAGES]) {
    int first = index * cm->block_size;
    lm_block_content c = {.tokens = seq->tokens + first, .n_tokens = n, .images = images};
    const loom_request *r = seq->request;
    for (int k = 0; k < r->n_images && c.n_images < LOOM_MAX_IMAGES; k++) {
        const lm_request_image *img = &r->images[k];
        if (img->span.first < first + n && img->span.first + img->span.count > first)
            images[c.n_images++] = (lm_block_image){.file = img->file, .file_bytes = img->file_bytes,
                                                    .hash = img->content_hash,
                                                    .span_first = img->span.first};
    }
    return c;
}

/* ------------------------------------------------------------ lookup */

typedef struct {
    int pos;          /* tokens to resume with (0: nothing) */
    int snapshot;     /* to restore, or -1 */
    int32_t tail;     /* partial block to copy, or -1 */
    int n_matched;    /* full blocks found for the prefix (chain, blocks) */
} lm_prefix_match;

/* The longest resumable prefix of seq's first `limit` tokens; chain and
 * blocks get its matched full blocks ([limit / block_size]). */
static lm_prefix_match lookup(lm_cache_manager *cm, const lm_sequence *seq, int limit, lm_block_link *chain) {
    int B = cm->block_size;
    lm_block_image images[LOOM_MAX_IMAGES];
    lm_prefix_match m = {.snapshot = -1, .tail = -1};
    lm_block_key parent = lm_block_root();
    while ((m.n_matched + 1) * B <= limit) {
        lm_block_content c = block_content(cm, seq, m.n_matched, B, images);
        lm_block_key key;
        int32_t block = lm_kv_blocks_find(&cm->kv_blocks, parent, &c, &key);
        if (block < 0) break;
        chain[m.n_matched++] = (lm_block_link){key, block};
        parent = key;
    }
    if (!cm->prefix_has_state) m.pos = m.n_matched * B; /* any block boundary resumes */
    for (int id = 0; id < cm->snapshots.capacity; id++) {
        const lm_snapshot *s = &cm->snapshots.entries[id];
        if (!s->used || s->pos > limit || s->pos <= m.pos) continue;
        int index = (s->pos - 1) / B, n = s->pos - index * B;
        if (index > m.n_matched) continue;
        bool found;
        if (n == B) {
            found = index < m.n_matched && chain[index].block == s->block &&
                    chain[index].key.number == s->block_number;
        } else {
            lm_block_content c = block_content(cm, seq, index, n, images);
            found = lm_kv_blocks_matches(&cm->kv_blocks, s->block, s->block_number,
                                         index ? chain[index - 1].key : lm_block_root(), &c);
        }
        if (!found) continue;
        m.pos = s->pos;
        m.snapshot = cm->prefix_has_state ? id : -1;
        m.tail = n == B ? -1 : s->block;
        if (cm->prefix_has_state || m.tail >= 0) lm_state_snapshots_touch(&cm->snapshots, id);
    }
    return m;
}

void lm_prefix_cache_admit(lm_cache_manager *cm, lm_sequence *seq) {
    if (!cm->prefix_on || seq->n_cached > 0) return;
    int B = cm->block_size, limit = seq->n_tokens - 1; /* one token must run for the logits */
    lm_prefix_match m = {.snapshot = -1, .tail = -1};
    if (limit > 0 && lm_sequence_reserve_blocks(seq, limit / B + 1))
        m = lookup(cm, seq, limit, seq->chain);
    int shared = m.pos / B;
    for (int b = 0; b < shared; b++) {
        seq->blocks[b] = seq->chain[b].block;
        lm_kv_blocks_hold(&cm->kv_blocks, seq->blocks[b]);
    }
    seq->n_blocks = seq->n_chain = shared;
    seq->n_cached = m.pos;
    seq->last_snapshot = m.pos;
    seq->resume_snapshot = m.snapshot;
    seq->resume_tail = m.tail;
    if (m.tail >= 0) lm_kv_blocks_hold(&cm->kv_blocks, m.tail);
    /* More blocks registered than resumable: stop there and snapshot, so
     * the next request with this prefix resumes at the fork. */
    seq->branch_point = cm->prefix_has_state && m.n_matched * B >= m.pos + B ? m.n_matched * B : 0;
}

void lm_prefix_cache_admitted(lm_cache_manager *cm, lm_sequence *seq) {
    if (cm->prefix_on && !seq->looked_up) { /* vLLM's counters: the first admission's prompt */
        seq->looked_up = true;
        seq->cached_tokens = seq->n_cached < seq->n_prompt ? seq->n_cached : seq->n_prompt;
        cm->prefix_queries += (uint64_t)seq->n_prompt;
        cm->prefix_hits += (uint64_t)seq->cached_tokens;
    }
    if (seq->resume_tail < 0) return;
    lm_model_copy_block(cm->context, seq->resume_tail, seq->blocks[seq->n_cached / cm->block_size]);
    lm_kv_blocks_release(&cm->kv_blocks, &seq->resume_tail, 1);
    seq->resume_tail = -1;
}

int lm_prefix_cache_chunk(const lm_cache_manager *cm, const lm_sequence *seq, int take) {
    int end = seq->n_cached + take;
    if (!cm->prefix_on || !cm->prefix_has_state) return take;
    if (seq->branch_point > seq->n_cached && seq->branch_point < end) return seq->branch_point - seq->n_cached;
    if (end >= seq->n_tokens) return take;
    int aligned = end / cm->block_size * cm->block_size;
    return aligned > seq->n_cached ? aligned - seq->n_cached : take;
}

/* ------------------------------------------------------------ registering */

static void register_full_blocks(lm_cache_manager *cm, lm_sequence *seq) {
    int B = cm->block_size;
    lm_block_image images[LOOM_MAX_IMAGES];
    while ((seq->n_chain + 1) * B <= seq->n_cached && seq->n_chain < seq->n_blocks) {
        int j = seq->n_chain;
        lm_block_content c = block_content(cm, seq, j, B, images);
        lm_block_key key;
        int32_t block = lm_kv_blocks_register(&cm->kv_blocks, seq->blocks[j],
                                              j ? seq->chain[j - 1].key : lm_block_root(), &c, &key);
        if (block < 0) return; /* out of memory: the rest stays unshared */
        seq->chain[j] = (lm_block_link){key, block};
        seq->n_chain = j + 1;
    }
}

/* A snapshot of seq's state at pos (its n_cached) on the registered block
 * holding pos - 1, unless an equal one exists. */
static void snapshot(lm_cache_manager *cm, lm_sequence *seq, int32_t block, uint64_t number) {
    int pos = seq->n_cached;
    seq->last_snapshot = pos;
    for (int id = 0; id < cm->snapshots.capacity; id++) {
        const lm_snapshot *s = &cm->snapshots.entries[id];
        if (s->used && s->pos == pos && s->block == block && s->block_number == number) {
            lm_state_snapshots_touch(&cm->snapshots, id);
            return;
        }
    }
    int id = lm_state_snapshots_add(&cm->snapshots, pos, block, number);
    if (id >= 0 && cm->prefix_has_state) lm_model_save_state(cm->context, seq->state_slot, id);
}

void lm_prefix_cache_progress(lm_cache_manager *cm, lm_sequence *seq, bool prefill) {
    if (!cm->prefix_on) return;
    register_full_blocks(cm, seq);
    int B = cm->block_size, pos = seq->n_cached;
    if (!prefill || !cm->prefix_has_state || pos % B || pos >= seq->n_tokens || seq->n_chain < pos / B)
        return;
    if (pos == seq->branch_point || pos - seq->last_snapshot >= cm->snapshot_interval) {
        const lm_block_link *last = &seq->chain[pos / B - 1];
        snapshot(cm, seq, last->block, last->key.number);
    }
}

void lm_prefix_cache_retire(lm_cache_manager *cm, lm_sequence *seq) {
    if (!cm->prefix_on || seq->n_cached <= 0 || (seq->state_slot < 0 && cm->prefix_has_state)) return;
    register_full_blocks(cm, seq);
    int B = cm->block_size, pos = seq->n_cached, index = (pos - 1) / B, n = pos - index * B;
    if (seq->n_chain < index || index >= seq->n_blocks) return; /* its chain is not all registered */
    if (n == B) {
        if (cm->prefix_has_state) snapshot(cm, seq, seq->chain[index].block, seq->chain[index].key.number);
        return;
    }
    lm_block_link *scratch = seq->chain; /* the lookup rewrites only what it re-finds */
    if (lookup(cm, seq, pos, scratch).pos == pos) return; /* this tail is resumable already */
    lm_block_image images[LOOM_MAX_IMAGES];
    lm_block_content c = block_content(cm, seq, index, n, images);
    lm_block_key key;
    int32_t block = lm_kv_blocks_register(&cm->kv_blocks, seq->blocks[index],
                                          index ? seq->chain[index - 1].key : lm_block_root(), &c, &key);
    if (block >= 0) snapshot(cm, seq, block, key.number);
}

void lm_prefix_cache_reset(lm_cache_manager *cm) {
    lm_state_snapshots_clear(&cm->snapshots);
    lm_kv_blocks_drop_idle(&cm->kv_blocks);
}
