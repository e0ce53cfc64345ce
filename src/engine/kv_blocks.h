/* The engine's KV blocks: ids of the model context's KV pool, held by
 * reference count, and (prefix caching) an index of the blocks whose
 * content is known, so a sequence that starts with the same tokens shares
 * them instead of computing them again.
 *
 * A registered block is named by a key: a hash chained over its parent's
 * key and its own content (token ids and, for image rows, the images'
 * bytes), and a registration number that is never reused.  Lookups find
 * candidates by hash and then compare everything: the parent's number and
 * every token and image byte, so a hash collision is never trusted.
 *
 * A block lives in one of three states: free (in the id pool), held (refs
 * > 0: by the sequences whose block tables name it), or idle (refs 0 but
 * registered: its content stays findable in an LRU until the pool needs
 * the block, then it is unregistered and handed out again).  Full blocks
 * are indexed by hash; a partial block (the tail of a finished turn) is
 * registered without being indexed: a state snapshot names it, and a
 * sequence resuming there copies it (copy-on-write) instead of sharing it.
 *
 * The memory the ids stand for is the model context's; this file keeps
 * only ids and host-side bookkeeping.  Engine thread only. */
#ifndef LOOM_ENGINE_KV_BLOCKS_H
#define LOOM_ENGINE_KV_BLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "engine/id_pool.h"

/* A block's name in the index.  The root (no parent) is {LM_BLOCK_ROOT_HASH, 0}. */
typedef struct {
    uint64_t hash;
    uint64_t number; /* registration number, unique for the engine's life; 0: the root */
} lm_block_key;

#define LM_BLOCK_ROOT_HASH 0x6a09e667f3bcc909ull

static inline lm_block_key lm_block_root(void) { return (lm_block_key){LM_BLOCK_ROOT_HASH, 0}; }

/* One link of a sequence's chain: the key of its i-th full block and the
 * block registered under it (its own, or an equal one registered first). */
typedef struct {
    lm_block_key key;
    int32_t block;
} lm_block_link;

/* An image whose rows a block holds, as a sequence describes it. */
typedef struct {
    const uint8_t *file; /* the encoded image file */
    size_t file_bytes;
    uint64_t hash;       /* of the file (lm_image_file_hash) */
    int span_first;      /* prompt index of its first row */
} lm_block_image;

/* What a block holds: n_tokens token ids from position `first` and the
 * images whose rows are among them. */
typedef struct {
    const int32_t *tokens;
    int n_tokens;
    const lm_block_image *images;
    int n_images;
} lm_block_content;

typedef struct lm_cached_image lm_cached_image; /* an image's bytes, shared by its blocks */

typedef struct {
    uint64_t hash, number, parent_number;
    int refs;
    int n_tokens;           /* 0: not registered; block_size: full (indexed); else partial */
    int32_t newer, older;   /* the LRU of idle registered blocks (-1: end) */
    int32_t next_in_bucket; /* the hash index's chain (-1: end) */
    int n_images;
    struct lm_block_image_ref *images; /* [n_images] */
} lm_block_entry;

/* Called when an idle registered block is unregistered (to reuse it, or on
 * reset): what hangs on it (state snapshots) must go too. */
typedef void (*lm_block_evicted_fn)(void *ctx, int32_t block, uint64_t number);

typedef struct {
    int n_blocks, block_size;
    bool indexed;             /* prefix caching on: blocks may be registered */
    lm_id_pool free;
    lm_block_entry *entries;  /* [n_blocks] */
    int32_t *tokens;          /* [n_blocks][block_size]: a registered block's token ids */
    int32_t *buckets;         /* [n_buckets] */
    int n_buckets;            /* a power of two */
    int32_t newest, oldest;   /* idle registered blocks */
    int n_idle;
    uint64_t next_number;
    lm_cached_image *images;  /* the images registered blocks hold */
    lm_block_evicted_fn on_evict;
    void *on_evict_ctx;
} lm_kv_blocks;

lm_status lm_kv_blocks_init(lm_kv_blocks *kb, int n_blocks, int block_size, bool indexed,
                            lm_error *err);
void lm_kv_blocks_free(lm_kv_blocks *kb);

/* Blocks a take can have now: free ones and idle cached ones. */
static inline int lm_kv_blocks_available(const lm_kv_blocks *kb) { return kb->free.n_free + kb->n_idle; }

/* n fresh blocks (refs 1, unregistered) into out, reclaiming the least
 * recently used idle blocks when the free ones are too few; false (nothing
 * taken, nothing reclaimed) when even that is not enough. */
bool lm_kv_blocks_take(lm_kv_blocks *kb, int n, int32_t *out);
/* One more holder of a block (an idle one leaves the LRU). */
void lm_kv_blocks_hold(lm_kv_blocks *kb, int32_t block);
/* Drops one holder of each block, the last one first (so the deepest
 * blocks of a chain are the oldest in the LRU and go before their
 * parents); a block nobody holds goes to the LRU when registered, else
 * back to the free ids. */
void lm_kv_blocks_release(lm_kv_blocks *kb, const int32_t *blocks, int n);
/* Whether a sequence holding `block` may write into it: held by it alone
 * and not registered (a registered block's content is others' to read). */
bool lm_kv_blocks_writable(const lm_kv_blocks *kb, int32_t block);

/* The registered full block whose parent is `parent` and whose content is
 * c (compared exactly); -1 if none.  *key gets its key. */
int32_t lm_kv_blocks_find(const lm_kv_blocks *kb, lm_block_key parent, const lm_block_content *c,
                          lm_block_key *key);
/* Registers `block` (held by the caller) as the child of `parent` holding
 * c: a full block is indexed, a shorter one registered as a partial block.
 * A full block whose content is registered already stays unregistered and
 * the existing entry is returned instead, so a chain keeps one name per
 * content.  Returns the block registered under *key, or -1 when out of
 * memory (nothing changed). */
int32_t lm_kv_blocks_register(lm_kv_blocks *kb, int32_t block, lm_block_key parent,
                              const lm_block_content *c, lm_block_key *key);
/* Whether `block` is still registered under `number`, as the child of
 * `parent`, holding exactly c. */
bool lm_kv_blocks_matches(const lm_kv_blocks *kb, int32_t block, uint64_t number, lm_block_key parent,
                          const lm_block_content *c);
/* The key of a registered block. */
lm_block_key lm_kv_blocks_key(const lm_kv_blocks *kb, int32_t block);
/* Unregisters every idle block (they become free); returns how many. */
int lm_kv_blocks_drop_idle(lm_kv_blocks *kb);

#endif
