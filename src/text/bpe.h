/* Byte-level BPE: the vocabulary and merge tables, the merge loop for one
 * pre-tokenised piece, and a bounded per-call cache of piece -> ids.
 *
 * The merge rule is the Rust tokenizers library's: repeatedly merge the
 * adjacent pair with the lowest merge rank, the leftmost one on ties.  Short
 * pieces use a quadratic scan over an array (fast for the usual 1-20
 * symbols); long ones (whitespace runs, CJK runs) a binary heap, O(n log n). */
#ifndef LOOM_TEXT_BPE_H
#define LOOM_TEXT_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* A growable array of token ids. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} lm_ids;

lm_status lm_ids_reserve(lm_ids *ids, size_t extra, lm_error *err);
static inline lm_status lm_ids_push(lm_ids *ids, int32_t id, lm_error *err) {
    if (ids->n == ids->cap) {
        lm_status st = lm_ids_reserve(ids, 1, err);
        if (st != LM_OK) return st;
    }
    ids->v[ids->n++] = id;
    return LM_OK;
}

/* A hash of n bytes (not cryptographic; for the tables below). */
uint64_t lm_hash_bytes(const void *p, size_t n);

/* Byte string -> id.  Keys are copied into the map's own storage. */
typedef struct {
    uint32_t off, len; /* key bytes in blob */
    int32_t id;
    uint32_t hash;
} lm_str_entry;

typedef struct {
    uint32_t *slots; /* entry index + 1; 0 = empty */
    size_t mask;
    lm_str_entry *entries;
    size_t n, cap;
    char *blob;
    size_t blob_len, blob_cap;
} lm_str_map;

lm_status lm_str_map_init(lm_str_map *m, size_t expected, lm_error *err);
/* Adds key -> id, or replaces the id of an existing key. */
lm_status lm_str_map_put(lm_str_map *m, const char *key, size_t len, int32_t id, lm_error *err);
/* The id of key, or -1. */
int32_t lm_str_map_get(const lm_str_map *m, const char *key, size_t len);
void lm_str_map_free(lm_str_map *m);

/* (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t key; /* left << 32 | right; LM_MERGE_EMPTY when free */
    uint32_t rank;
    int32_t merged;
} lm_merge_slot;

typedef struct {
    lm_merge_slot *slots;
    size_t mask, n;
    unsigned shift;
} lm_merge_map;

lm_status lm_merge_map_init(lm_merge_map *m, size_t expected, lm_error *err);
/* Adds or replaces (a later duplicate merge overrides an earlier one, as in the Rust library). */
void lm_merge_map_put(lm_merge_map *m, int32_t left, int32_t right, uint32_t rank, int32_t merged);
void lm_merge_map_free(lm_merge_map *m);

typedef struct {
    lm_merge_map merges;
    int32_t byte_to_id[256]; /* id of the one-byte token of each byte, -1 if none */
    int32_t unk_id;          /* -1: bytes without a token are dropped (the library's behaviour) */
    bool fuse_unk;
    /* ignore_merges: a piece that is itself a vocabulary token is emitted as
     * it is (Llama-3 style); needs the vocabulary keyed by raw bytes. */
    bool ignore_merges;
    const lm_str_map *vocab_by_bytes;
} lm_bpe;

/* Scratch memory for one encode call (never shared between threads). */
typedef struct {
    int32_t *sym;   /* symbol ids */
    uint32_t *rank; /* rank of the pair (i, i+1) */
    int32_t *merged;
    int32_t *prev, *next;
    void *heap;
    size_t cap, heap_cap;
} lm_bpe_scratch;

void lm_bpe_scratch_free(lm_bpe_scratch *s);

/* Encodes one piece (raw bytes) and appends its ids to out. */
lm_status lm_bpe_encode_piece(const lm_bpe *bpe, const uint8_t *piece, size_t n, lm_bpe_scratch *scratch,
                              lm_ids *out, lm_error *err);

/* A bounded cache of piece -> ids for one encode call. */
typedef struct {
    struct lm_bpe_cache_slot *slots;
    size_t mask, count;
    uint8_t *keys;
    size_t keys_len, keys_cap;
    int32_t *ids;
    size_t ids_len, ids_cap;
} lm_bpe_cache;

/* Pieces longer than this are not cached. */
#define LM_BPE_CACHE_MAX_PIECE 64
/* At most this many pieces are cached; then the cache starts afresh. */
#define LM_BPE_CACHE_MAX_ENTRIES 16384

/* Encodes a piece through the cache. */
lm_status lm_bpe_encode_cached(const lm_bpe *bpe, const uint8_t *piece, size_t n, lm_bpe_cache *cache,
                               lm_bpe_scratch *scratch, lm_ids *out, lm_error *err);
void lm_bpe_cache_free(lm_bpe_cache *cache);

#endif
