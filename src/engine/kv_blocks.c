#include "engine/kv_blocks.h"

#include <stdlib.h>
#include <string.h>

/* An image's bytes, kept once for all the registered blocks holding its
 * rows (the exact comparison needs them after the request is gone). */
struct lm_cached_image {
    int refs; /* registered blocks holding it */
    uint64_t hash;
    uint8_t *file;
    size_t file_bytes;
    lm_cached_image *next;
};

struct lm_block_image_ref {
    lm_cached_image *image;
    int span_first;
};

/* ------------------------------------------------------------- hashing */

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

static uint64_t content_hash(lm_block_key parent, const lm_block_content *c) {
    uint64_t h = mix(parent.hash, (uint64_t)c->n_tokens);
    for (int i = 0; i < c->n_tokens; i++) h = mix(h, (uint32_t)c->tokens[i]);
    for (int i = 0; i < c->n_images; i++) h = mix(mix(h, c->images[i].hash), (uint64_t)c->images[i].span_first);
    return h;
}

/* ------------------------------------------------------------- set up */

lm_status lm_kv_blocks_init(lm_kv_blocks *kb, int n_blocks, int block_size, bool indexed,
                            lm_error *err) {
    memset(kb, 0, sizeof *kb);
    kb->n_blocks = n_blocks;
    kb->block_size = block_size;
    kb->indexed = indexed;
    kb->newest = kb->oldest = -1;
    kb->next_number = 1;
    lm_status st = lm_id_pool_init(&kb->free, n_blocks, "KV blocks", err);
    if (st != LM_OK) return st;
    kb->entries = calloc((size_t)n_blocks, sizeof *kb->entries);
    if (!kb->entries) {
        lm_kv_blocks_free(kb);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for %d KV block entries", n_blocks);
    }
    for (int b = 0; b < n_blocks; b++) kb->entries[b].newer = kb->entries[b].older = kb->entries[b].next_in_bucket = -1;
    if (!indexed) return LM_OK;
    kb->n_buckets = 1;
    while (kb->n_buckets < 2 * n_blocks) kb->n_buckets *= 2;
    kb->buckets = malloc(sizeof(int32_t) * (size_t)kb->n_buckets);
    kb->tokens = malloc(sizeof(int32_t) * (size_t)n_blocks * (size_t)block_size);
    if (!kb->buckets || !kb->tokens) {
        lm_kv_blocks_free(kb);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the prefix cache's index of %d blocks", n_blocks);
    }
    for (int i = 0; i < kb->n_buckets; i++) kb->buckets[i] = -1;
    return LM_OK;
}

static void unregister(lm_kv_blocks *kb, int32_t block);

void lm_kv_blocks_free(lm_kv_blocks *kb) {
    kb->on_evict = NULL; /* what hangs on the blocks goes with its own owner */
    if (kb->entries)
        for (int b = 0; b < kb->n_blocks; b++)
            if (kb->entries[b].n_tokens) unregister(kb, b);
    lm_id_pool_free(&kb->free);
    free(kb->entries);
    free(kb->tokens);
    free(kb->buckets);
    memset(kb, 0, sizeof *kb);
}

/* ------------------------------------------------------------- images */

static lm_cached_image *hold_image(lm_kv_blocks *kb, const lm_block_image *img) {
    for (lm_cached_image *c = kb->images; c; c = c->next)
        if (c->hash == img->hash && c->file_bytes == img->file_bytes &&
            memcmp(c->file, img->file, img->file_bytes) == 0) {
            c->refs++;
            return c;
        }
    lm_cached_image *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->file = malloc(img->file_bytes ? img->file_bytes : 1);
    if (!c->file) {
        free(c);
        return NULL;
    }
    memcpy(c->file, img->file, img->file_bytes);
    c->file_bytes = img->file_bytes;
    c->hash = img->hash;
    c->refs = 1;
    c->next = kb->images;
    kb->images = c;
    return c;
}

static void drop_image(lm_kv_blocks *kb, lm_cached_image *img) {
    if (--img->refs > 0) return;
    for (lm_cached_image **p = &kb->images; *p; p = &(*p)->next)
        if (*p == img) {
            *p = img->next;
            break;
        }
    free(img->file);
    free(img);
}

/* ------------------------------------------------------------- the LRU */

static void lru_unlink(lm_kv_blocks *kb, int32_t b) {
    lm_block_entry *e = &kb->entries[b];
    if (e->newer >= 0) kb->entries[e->newer].older = e->older;
    else kb->newest = e->older;
    if (e->older >= 0) kb->entries[e->older].newer = e->newer;
    else kb->oldest = e->newer;
    e->newer = e->older = -1;
    kb->n_idle--;
}

static void lru_push_newest(lm_kv_blocks *kb, int32_t b) {
    lm_block_entry *e = &kb->entries[b];
    e->older = kb->newest;
    e->newer = -1;
    if (kb->newest >= 0) kb->entries[kb->newest].newer = b;
    kb->newest = b;
    if (kb->oldest < 0) kb->oldest = b;
    kb->n_idle++;
}

/* ------------------------------------------------------------- the index */

static int32_t *bucket_of(lm_kv_blocks *kb, uint64_t hash) {
    return &kb->buckets[hash & (uint64_t)(kb->n_buckets - 1)];
}

static void unregister(lm_kv_blocks *kb, int32_t block) {
    lm_block_entry *e = &kb->entries[block];
    if (e->n_tokens == kb->block_size) {
        for (int32_t *p = bucket_of(kb, e->hash); *p >= 0; p = &kb->entries[*p].next_in_bucket)
            if (*p == block) {
                *p = e->next_in_bucket;
                break;
            }
    }
    for (int i = 0; i < e->n_images; i++) drop_image(kb, e->images[i].image);
    free(e->images);
    e->images = NULL;
    e->n_images = 0;
    e->n_tokens = 0;
    e->next_in_bucket = -1;
    uint64_t number = e->number;
    e->number = 0;
    if (kb->on_evict) kb->on_evict(kb->on_evict_ctx, block, number);
}

/* Unregisters the oldest idle block and frees its id. */
static void reclaim_oldest(lm_kv_blocks *kb) {
    int32_t b = kb->oldest;
    lru_unlink(kb, b);
    unregister(kb, b);
    lm_id_pool_give_back(&kb->free, &b, 1);
}

static bool same_content(const lm_kv_blocks *kb, int32_t block, const lm_block_content *c) {
    const lm_block_entry *e = &kb->entries[block];
    if (e->n_tokens != c->n_tokens || e->n_images != c->n_images) return false;
    if (memcmp(kb->tokens + (size_t)block * (size_t)kb->block_size, c->tokens,
               sizeof(int32_t) * (size_t)c->n_tokens) != 0)
        return false;
    for (int i = 0; i < c->n_images; i++) {
        const lm_cached_image *img = e->images[i].image;
        if (e->images[i].span_first != c->images[i].span_first || img->file_bytes != c->images[i].file_bytes ||
            memcmp(img->file, c->images[i].file, img->file_bytes) != 0)
            return false;
    }
    return true;
}

/* ------------------------------------------------------------- interface */

bool lm_kv_blocks_take(lm_kv_blocks *kb, int n, int32_t *out) {
    if (n <= 0) return true;
    if (n > lm_kv_blocks_available(kb)) return false;
    while (kb->free.n_free < n) reclaim_oldest(kb);
    if (lm_id_pool_take(&kb->free, n, out, NULL) != LM_OK) return false;
    for (int i = 0; i < n; i++) kb->entries[out[i]].refs = 1;
    return true;
}

void lm_kv_blocks_hold(lm_kv_blocks *kb, int32_t block) {
    lm_block_entry *e = &kb->entries[block];
    if (e->refs++ == 0 && e->n_tokens) lru_unlink(kb, block);
}

void lm_kv_blocks_release(lm_kv_blocks *kb, const int32_t *blocks, int n) {
    for (int i = n - 1; i >= 0; i--) {
        int32_t b = blocks[i];
        lm_block_entry *e = &kb->entries[b];
        if (e->refs <= 0 || --e->refs > 0) continue;
        if (e->n_tokens) lru_push_newest(kb, b);
        else lm_id_pool_give_back(&kb->free, &b, 1);
    }
}

bool lm_kv_blocks_writable(const lm_kv_blocks *kb, int32_t block) {
    const lm_block_entry *e = &kb->entries[block];
    return e->refs == 1 && e->n_tokens == 0;
}

int32_t lm_kv_blocks_find(const lm_kv_blocks *kb, lm_block_key parent, const lm_block_content *c,
                          lm_block_key *key) {
    if (!kb->indexed || c->n_tokens != kb->block_size) return -1;
    uint64_t hash = content_hash(parent, c);
    for (int32_t b = kb->buckets[hash & (uint64_t)(kb->n_buckets - 1)]; b >= 0; b = kb->entries[b].next_in_bucket) {
        const lm_block_entry *e = &kb->entries[b];
        if (e->hash == hash && e->parent_number == parent.number && same_content(kb, b, c)) {
            *key = (lm_block_key){e->hash, e->number};
            return b;
        }
    }
    return -1;
}

int32_t lm_kv_blocks_register(lm_kv_blocks *kb, int32_t block, lm_block_key parent,
                              const lm_block_content *c, lm_block_key *key) {
    lm_block_entry *e = &kb->entries[block];
    if (!kb->indexed || c->n_tokens <= 0 || c->n_tokens > kb->block_size) return -1;
    if (e->n_tokens) { /* already registered (a block shared with its registrar) */
        *key = (lm_block_key){e->hash, e->number};
        return block;
    }
    bool full = c->n_tokens == kb->block_size;
    if (full) {
        int32_t existing = lm_kv_blocks_find(kb, parent, c, key);
        if (existing >= 0) return existing;
    }
    struct lm_block_image_ref *refs = NULL;
    if (c->n_images > 0) {
        refs = calloc((size_t)c->n_images, sizeof *refs);
        if (!refs) return -1;
        for (int i = 0; i < c->n_images; i++) {
            refs[i].image = hold_image(kb, &c->images[i]);
            refs[i].span_first = c->images[i].span_first;
            if (!refs[i].image) {
                for (int j = 0; j < i; j++) drop_image(kb, refs[j].image);
                free(refs);
                return -1;
            }
        }
    }
    e->hash = content_hash(parent, c);
    e->number = kb->next_number++;
    e->parent_number = parent.number;
    e->n_tokens = c->n_tokens;
    e->images = refs;
    e->n_images = c->n_images;
    memcpy(kb->tokens + (size_t)block * (size_t)kb->block_size, c->tokens, sizeof(int32_t) * (size_t)c->n_tokens);
    if (full) {
        int32_t *head = bucket_of(kb, e->hash);
        e->next_in_bucket = *head;
        *head = block;
    }
    if (e->refs == 0) lru_push_newest(kb, block);
    *key = (lm_block_key){e->hash, e->number};
    return block;
}

bool lm_kv_blocks_matches(const lm_kv_blocks *kb, int32_t block, uint64_t number, lm_block_key parent,
                          const lm_block_content *c) {
    if (block < 0 || block >= kb->n_blocks) return false;
    const lm_block_entry *e = &kb->entries[block];
    return e->n_tokens && e->number == number && e->parent_number == parent.number && same_content(kb, block, c);
}

lm_block_key lm_kv_blocks_key(const lm_kv_blocks *kb, int32_t block) {
    const lm_block_entry *e = &kb->entries[block];
    return (lm_block_key){e->hash, e->number};
}

int lm_kv_blocks_drop_idle(lm_kv_blocks *kb) {
    int n = 0;
    while (kb->oldest >= 0) {
        reclaim_oldest(kb);
        n++;
    }
    return n;
}
