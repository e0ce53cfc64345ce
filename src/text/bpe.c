#include "text/bpe.h"

#include <stdlib.h>
#include <string.h>

#define LM_MERGE_EMPTY UINT64_MAX
#define NO_RANK UINT32_MAX
/* Pieces with at most this many symbols use the quadratic array scan. */
#define SMALL_PIECE 64

/* ---- growable id array ---- */

lm_status lm_ids_reserve(lm_ids *ids, size_t extra, lm_error *err) {
    if (extra > SIZE_MAX / sizeof(int32_t) / 2 - ids->n)
        return lm_fail(err, LM_ERR_NOMEM, "token id array too large");
    size_t need = ids->n + extra;
    if (need <= ids->cap && ids->v) return LM_OK;
    size_t cap = ids->cap ? ids->cap : 64;
    while (cap < need) cap *= 2;
    int32_t *v = realloc(ids->v, cap * sizeof *v);
    if (!v) return lm_fail(err, LM_ERR_NOMEM, "out of memory for %zu token ids", cap);
    ids->v = v;
    ids->cap = cap;
    return LM_OK;
}

/* ---- hashing ---- */

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}

uint64_t lm_hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = 0;
        memcpy(&v, s, n);
        h = (h ^ v) * 0x94d049bb133111ebull;
    }
    return mix64(h);
}

static size_t table_size_for(size_t expected) {
    size_t size = 64;
    while (size < expected * 2 + 1) size *= 2;
    return size;
}

/* ---- string map ---- */

lm_status lm_str_map_init(lm_str_map *m, size_t expected, lm_error *err) {
    memset(m, 0, sizeof *m);
    if (expected > ((size_t)1 << 26)) return lm_fail(err, LM_ERR_NOMEM, "string map of %zu keys is too large", expected);
    size_t size = table_size_for(expected);
    m->slots = calloc(size, sizeof *m->slots);
    m->cap = expected ? expected : 16;
    m->entries = malloc(m->cap * sizeof *m->entries);
    if (!m->slots || !m->entries) {
        lm_str_map_free(m);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for a string map of %zu keys", expected);
    }
    m->mask = size - 1;
    return LM_OK;
}

void lm_str_map_free(lm_str_map *m) {
    free(m->slots);
    free(m->entries);
    free(m->blob);
    memset(m, 0, sizeof *m);
}

static lm_status str_map_grow(lm_str_map *m, lm_error *err) {
    size_t size = (m->mask + 1) * 2;
    uint32_t *slots = calloc(size, sizeof *slots);
    if (!slots) return lm_fail(err, LM_ERR_NOMEM, "out of memory growing a string map");
    for (size_t i = 0; i < m->n; i++) {
        size_t j = m->entries[i].hash & (size - 1);
        while (slots[j]) j = (j + 1) & (size - 1);
        slots[j] = (uint32_t)(i + 1);
    }
    free(m->slots);
    m->slots = slots;
    m->mask = size - 1;
    return LM_OK;
}

int32_t lm_str_map_get(const lm_str_map *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    uint32_t h = (uint32_t)lm_hash_bytes(key, len);
    for (size_t j = h & m->mask;; j = (j + 1) & m->mask) {
        uint32_t e = m->slots[j];
        if (!e) return -1;
        const lm_str_entry *en = &m->entries[e - 1];
        if (en->hash == h && en->len == len && memcmp(m->blob + en->off, key, len) == 0) return en->id;
    }
}

lm_status lm_str_map_put(lm_str_map *m, const char *key, size_t len, int32_t id, lm_error *err) {
    if (len > UINT32_MAX / 2 || m->blob_len > UINT32_MAX / 2) return lm_fail(err, LM_ERR_NOMEM, "string map too large");
    uint32_t h = (uint32_t)lm_hash_bytes(key, len);
    size_t j = h & m->mask;
    for (;; j = (j + 1) & m->mask) {
        uint32_t e = m->slots[j];
        if (!e) break;
        lm_str_entry *en = &m->entries[e - 1];
        if (en->hash == h && en->len == len && memcmp(m->blob + en->off, key, len) == 0) {
            en->id = id;
            return LM_OK;
        }
    }
    if (m->n == m->cap) {
        size_t cap = m->cap * 2;
        lm_str_entry *entries = realloc(m->entries, cap * sizeof *entries);
        if (!entries) return lm_fail(err, LM_ERR_NOMEM, "out of memory growing a string map");
        m->entries = entries;
        m->cap = cap;
    }
    if (m->blob_len + len + 1 > m->blob_cap) {
        size_t cap = m->blob_cap ? m->blob_cap : 4096;
        while (cap < m->blob_len + len + 1) cap *= 2;
        char *blob = realloc(m->blob, cap);
        if (!blob) return lm_fail(err, LM_ERR_NOMEM, "out of memory growing a string map");
        m->blob = blob;
        m->blob_cap = cap;
    }
    memcpy(m->blob + m->blob_len, key, len);
    m->blob[m->blob_len + len] = '\0';
    m->entries[m->n] = (lm_str_entry){(uint32_t)m->blob_len, (uint32_t)len, id, h};
    m->blob_len += len + 1;
    m->slots[j] = (uint32_t)(m->n + 1);
    m->n++;
    if (m->n * 2 > m->mask + 1) return str_map_grow(m, err);
    return LM_OK;
}

/* ---- merge map ---- */

static inline uint64_t merge_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

lm_status lm_merge_map_init(lm_merge_map *m, size_t expected, lm_error *err) {
    memset(m, 0, sizeof *m);
    if (expected > ((size_t)1 << 26)) return lm_fail(err, LM_ERR_NOMEM, "%zu merges is too many", expected);
    size_t size = table_size_for(expected);
    m->slots = malloc(size * sizeof *m->slots);
    if (!m->slots) return lm_fail(err, LM_ERR_NOMEM, "out of memory for %zu merges", expected);
    for (size_t i = 0; i < size; i++) m->slots[i].key = LM_MERGE_EMPTY;
    m->mask = size - 1;
    unsigned bits = 0;
    while (((size_t)1 << bits) < size) bits++;
    m->shift = 64 - bits;
    return LM_OK;
}

void lm_merge_map_free(lm_merge_map *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static inline size_t merge_slot(const lm_merge_map *m, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> m->shift);
}

void lm_merge_map_put(lm_merge_map *m, int32_t left, int32_t right, uint32_t rank, int32_t merged) {
    uint64_t key = merge_key(left, right);
    size_t j = merge_slot(m, key);
    while (m->slots[j].key != LM_MERGE_EMPTY && m->slots[j].key != key) j = (j + 1) & m->mask;
    if (m->slots[j].key == LM_MERGE_EMPTY) m->n++;
    m->slots[j] = (lm_merge_slot){key, rank, merged};
}

/* The rank of merging (left, right), NO_RANK when they do not merge.
 * The table is sized at load for the number of merges (load factor <= 1/2). */
static inline uint32_t merge_get(const lm_merge_map *m, int32_t left, int32_t right, int32_t *merged) {
    uint64_t key = merge_key(left, right);
    for (size_t j = merge_slot(m, key);; j = (j + 1) & m->mask) {
        const lm_merge_slot *s = &m->slots[j];
        if (s->key == key) {
            *merged = s->merged;
            return s->rank;
        }
        if (s->key == LM_MERGE_EMPTY) return NO_RANK;
    }
}

/* ---- the merge loop ---- */

void lm_bpe_scratch_free(lm_bpe_scratch *s) {
    free(s->sym);
    free(s->rank);
    free(s->merged);
    free(s->prev);
    free(s->next);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

static lm_status scratch_reserve(lm_bpe_scratch *s, size_t n, lm_error *err) {
    if (n <= s->cap) return LM_OK;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < n) cap *= 2;
    int32_t *sym = realloc(s->sym, cap * sizeof *sym);
    if (sym) s->sym = sym;
    uint32_t *rank = realloc(s->rank, cap * sizeof *rank);
    if (rank) s->rank = rank;
    int32_t *merged = realloc(s->merged, cap * sizeof *merged);
    if (merged) s->merged = merged;
    int32_t *prev = realloc(s->prev, cap * sizeof *prev);
    if (prev) s->prev = prev;
    int32_t *next = realloc(s->next, cap * sizeof *next);
    if (next) s->next = next;
    if (!sym || !rank || !merged || !prev || !next)
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for a %zu-byte piece", n);
    s->cap = cap;
    return LM_OK;
}

/* Quadratic scan: find the lowest-ranked pair, merge it, repeat. */
static size_t merge_small(const lm_bpe *bpe, int32_t *sym, uint32_t *rank, int32_t *merged, size_t m) {
    for (size_t i = 0; i + 1 < m; i++) rank[i] = merge_get(&bpe->merges, sym[i], sym[i + 1], &merged[i]);
    while (m > 1) {
        uint32_t best = NO_RANK;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) {
                best = rank[i];
                at = i;
            }
        if (best == NO_RANK) break;
        sym[at] = merged[at];
        size_t tail = m - (at + 2); /* symbols after the removed one */
        memmove(sym + at + 1, sym + at + 2, tail * sizeof *sym);
        memmove(rank + at + 1, rank + at + 2, (tail ? tail - 1 : 0) * sizeof *rank);
        memmove(merged + at + 1, merged + at + 2, (tail ? tail - 1 : 0) * sizeof *merged);
        m--;
        if (at > 0) rank[at - 1] = merge_get(&bpe->merges, sym[at - 1], sym[at], &merged[at - 1]);
        if (at + 1 < m) rank[at] = merge_get(&bpe->merges, sym[at], sym[at + 1], &merged[at]);
    }
    return m;
}

/* Heap entries: a candidate merge of the symbol at pos with its right neighbour. */
typedef struct {
    uint32_t rank;
    int32_t pos;
    int32_t merged;
} heap_entry;

static inline bool heap_less(const heap_entry *a, const heap_entry *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(heap_entry *h, size_t *n, heap_entry e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&e, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

static heap_entry heap_pop(heap_entry *h, size_t *n) {
    heap_entry top = h[0], last = h[--*n];
    size_t i = 0, size = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= size) break;
        if (c + 1 < size && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (size) h[i] = last;
    return top;
}

/* The Rust library's algorithm: a heap of candidate merges over a linked
 * list of symbols; stale candidates are recognised by re-checking the pair. */
static lm_status merge_large(const lm_bpe *bpe, lm_bpe_scratch *s, size_t m, size_t *out_m, lm_error *err) {
    /* m - 1 initial candidates; each merge pops one and pushes at most two,
     * and there are at most m - 1 merges: the heap never holds more than 2m. */
    size_t need = 2 * m + 1;
    if (need > s->heap_cap) {
        heap_entry *h = realloc(s->heap, need * sizeof *h);
        if (!h) return lm_fail(err, LM_ERR_NOMEM, "out of memory for a %zu-symbol piece", m);
        s->heap = h;
        s->heap_cap = need;
    }
    heap_entry *heap = s->heap;
    size_t hn = 0;
    int32_t *sym = s->sym, *prev = s->prev, *next = s->next;
    for (size_t i = 0; i < m; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < m; i++) {
        int32_t merged;
        uint32_t r = merge_get(&bpe->merges, sym[i], sym[i + 1], &merged);
        if (r != NO_RANK) heap_push(heap, &hn, (heap_entry){r, (int32_t)i, merged});
    }
    /* sym[i] == -1 marks a symbol merged into its left neighbour. */
    while (hn) {
        heap_entry top = heap_pop(heap, &hn);
        int32_t pos = top.pos;
        if (sym[pos] < 0 || next[pos] < 0) continue;
        int32_t right = next[pos];
        int32_t merged;
        if (merge_get(&bpe->merges, sym[pos], sym[right], &merged) == NO_RANK || merged != top.merged) continue;
        sym[pos] = merged;
        sym[right] = -1;
        next[pos] = next[right];
        if (next[right] >= 0) prev[next[right]] = pos;
        if (prev[pos] >= 0) {
            uint32_t r = merge_get(&bpe->merges, sym[prev[pos]], sym[pos], &merged);
            if (r != NO_RANK) heap_push(heap, &hn, (heap_entry){r, prev[pos], merged});
        }
        if (next[pos] >= 0) {
            uint32_t r = merge_get(&bpe->merges, sym[pos], sym[next[pos]], &merged);
            if (r != NO_RANK) heap_push(heap, &hn, (heap_entry){r, pos, merged});
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        if (sym[i] >= 0) sym[k++] = sym[i];
    *out_m = k;
    return LM_OK;
}

lm_status lm_bpe_encode_piece(const lm_bpe *bpe, const uint8_t *piece, size_t n, lm_bpe_scratch *s, lm_ids *out,
                              lm_error *err) {
    if (n == 0) return LM_OK;
    if (n > INT32_MAX / 4) return lm_fail(err, LM_ERR_NOMEM, "piece of %zu bytes is too long", n);
    if (bpe->ignore_merges && bpe->vocab_by_bytes) {
        int32_t id = lm_str_map_get(bpe->vocab_by_bytes, (const char *)piece, n);
        if (id >= 0) return lm_ids_push(out, id, err);
    }
    lm_status st = scratch_reserve(s, n, err);
    if (st != LM_OK) return st;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = bpe->byte_to_id[piece[i]];
        if (id < 0) {
            id = bpe->unk_id;
            if (id < 0) continue; /* no unknown token: the byte is dropped */
            if (bpe->fuse_unk && m > 0 && s->sym[m - 1] == id) continue;
        }
        s->sym[m++] = id;
    }
    if (m > SMALL_PIECE) st = merge_large(bpe, s, m, &m, err);
    else m = merge_small(bpe, s->sym, s->rank, s->merged, m);
    if (st != LM_OK) return st;
    st = lm_ids_reserve(out, m, err);
    if (st != LM_OK) return st;
    memcpy(out->v + out->n, s->sym, m * sizeof(int32_t));
    out->n += m;
    return LM_OK;
}

/* ---- per-call cache ---- */

struct lm_bpe_cache_slot {
    uint64_t hash; /* 0 = empty (a real hash of 0 is stored as 1) */
    uint32_t key_off, key_len;
    uint32_t ids_off, n_ids;
};

void lm_bpe_cache_free(lm_bpe_cache *c) {
    free(c->slots);
    free(c->keys);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

static void cache_clear(lm_bpe_cache *c) {
    memset(c->slots, 0, (c->mask + 1) * sizeof *c->slots);
    c->count = 0;
    c->keys_len = 0;
    c->ids_len = 0;
}

/* Makes room for one more entry; returns false when memory ran out (the
 * caller then simply does not cache). */
static bool cache_make_room(lm_bpe_cache *c, size_t key_len, size_t n_ids) {
    if (!c->slots) {
        size_t size = 256; /* grows with the text: short texts stay cheap */
        c->slots = calloc(size, sizeof *c->slots);
        if (!c->slots) return false;
        c->mask = size - 1;
    }
    if (c->count >= LM_BPE_CACHE_MAX_ENTRIES) cache_clear(c);
    if ((c->count + 1) * 2 > c->mask + 1) {
        size_t size = (c->mask + 1) * 2;
        struct lm_bpe_cache_slot *slots = calloc(size, sizeof *slots);
        if (!slots) return false;
        for (size_t i = 0; i <= c->mask; i++) {
            if (!c->slots[i].hash) continue;
            size_t j = c->slots[i].hash & (size - 1);
            while (slots[j].hash) j = (j + 1) & (size - 1);
            slots[j] = c->slots[i];
        }
        free(c->slots);
        c->slots = slots;
        c->mask = size - 1;
    }
    if (c->keys_len + key_len > c->keys_cap) {
        size_t cap = c->keys_cap ? c->keys_cap * 2 : 2048;
        while (cap < c->keys_len + key_len) cap *= 2;
        uint8_t *keys = realloc(c->keys, cap);
        if (!keys) return false;
        c->keys = keys;
        c->keys_cap = cap;
    }
    if (c->ids_len + n_ids > c->ids_cap) {
        size_t cap = c->ids_cap ? c->ids_cap * 2 : 1024;
        while (cap < c->ids_len + n_ids) cap *= 2;
        int32_t *ids = realloc(c->ids, cap * sizeof *ids);
        if (!ids) return false;
        c->ids = ids;
        c->ids_cap = cap;
    }
    return true;
}

lm_status lm_bpe_encode_cached(const lm_bpe *bpe, const uint8_t *piece, size_t n, lm_bpe_cache *c,
                               lm_bpe_scratch *scratch, lm_ids *out, lm_error *err) {
    if (n > LM_BPE_CACHE_MAX_PIECE || n == 0) return lm_bpe_encode_piece(bpe, piece, n, scratch, out, err);
    uint64_t h = lm_hash_bytes(piece, n);
    if (!h) h = 1;
    if (c->slots) {
        for (size_t j = h & c->mask;; j = (j + 1) & c->mask) {
            const struct lm_bpe_cache_slot *s = &c->slots[j];
            if (!s->hash) break;
            if (s->hash == h && s->key_len == n && memcmp(c->keys + s->key_off, piece, n) == 0) {
                lm_status st = lm_ids_reserve(out, s->n_ids, err);
                if (st != LM_OK) return st;
                if (s->n_ids) memcpy(out->v + out->n, c->ids + s->ids_off, s->n_ids * sizeof(int32_t));
                out->n += s->n_ids;
                return LM_OK;
            }
        }
    }
    size_t before = out->n;
    lm_status st = lm_bpe_encode_piece(bpe, piece, n, scratch, out, err);
    if (st != LM_OK) return st;
    size_t n_ids = out->n - before;
    if (!cache_make_room(c, n, n_ids)) return LM_OK;
    size_t j = h & c->mask;
    while (c->slots[j].hash) j = (j + 1) & c->mask;
    memcpy(c->keys + c->keys_len, piece, n);
    if (n_ids) memcpy(c->ids + c->ids_len, out->v + before, n_ids * sizeof(int32_t));
    c->slots[j] = (struct lm_bpe_cache_slot){h, (uint32_t)c->keys_len, (uint32_t)n, (uint32_t)c->ids_len,
                                             (uint32_t)n_ids};
    c->keys_len += n;
    c->ids_len += n_ids;
    c->count++;
    return LM_OK;
}
