#include "engine/token_counts.h"

#include <stdlib.h>
#include <string.h>

#define MIN_ENTRIES 16
#define MAX_INITIAL_ENTRIES 4096

/* Fibonacci hashing: the top bits of id * 2^32/phi spread consecutive ids. */
static uint32_t slot_of(int32_t id, int bits) {
    return (uint32_t)((uint32_t)id * 2654435769u) >> (32 - bits);
}

/* Smallest index that keeps n entries at a load factor <= 1/2. */
static int bits_for(int n) {
    int bits = 5;
    while ((1 << (bits - 1)) < n) bits++;
    return bits;
}

/* The slot holding id, or the empty slot where it would go. */
static int32_t *find_slot(const lm_token_counts *counts, int32_t id) {
    uint32_t mask = (1u << counts->hash_bits) - 1u;
    uint32_t i = slot_of(id, counts->hash_bits);
    while (counts->slots[i] >= 0 && counts->entries[counts->slots[i]].id != id) i = (i + 1) & mask;
    return &counts->slots[i];
}

/* Replaces the index by one of 2^bits slots over the current entries. */
static lm_status rebuild_index(lm_token_counts *counts, int bits, lm_error *err) {
    int32_t *slots = malloc(sizeof *slots << bits);
    if (!slots) return lm_fail(err, LM_ERR_NOMEM, "token history: cannot allocate %d index slots", 1 << bits);
    memset(slots, 0xff, sizeof *slots << bits); /* every slot -1 */
    free(counts->slots);
    counts->slots = slots;
    counts->hash_bits = bits;
    for (int i = 0; i < counts->n_distinct; i++) *find_slot(counts, counts->entries[i].id) = i;
    return LM_OK;
}

lm_status lm_token_counts_init(lm_token_counts *counts, int expected_distinct, lm_error *err) {
    memset(counts, 0, sizeof *counts);
    int n = expected_distinct < MIN_ENTRIES ? MIN_ENTRIES
            : expected_distinct > MAX_INITIAL_ENTRIES ? MAX_INITIAL_ENTRIES
                                                      : expected_distinct;
    counts->entries = malloc(sizeof *counts->entries * (size_t)n);
    if (!counts->entries)
        return lm_fail(err, LM_ERR_NOMEM, "token history: cannot allocate %d entries", n);
    counts->entries_capacity = n;
    lm_status st = rebuild_index(counts, bits_for(n), err);
    if (st != LM_OK) lm_token_counts_free(counts);
    return st;
}

void lm_token_counts_free(lm_token_counts *counts) {
    if (!counts) return;
    free(counts->entries);
    free(counts->slots);
    memset(counts, 0, sizeof *counts);
}

void lm_token_counts_clear(lm_token_counts *counts) {
    if (counts->slots) memset(counts->slots, 0xff, sizeof *counts->slots << counts->hash_bits);
    counts->n_distinct = 0;
}

lm_status lm_token_counts_copy(lm_token_counts *dst, const lm_token_counts *src, lm_error *err) {
    memset(dst, 0, sizeof *dst);
    size_t entry_bytes = sizeof *src->entries * (size_t)src->entries_capacity;
    size_t slot_bytes = sizeof *src->slots << src->hash_bits;
    lm_token_count_entry *entries = malloc(entry_bytes);
    int32_t *slots = malloc(slot_bytes);
    if (!entries || !slots) {
        free(entries);
        free(slots);
        return lm_fail(err, LM_ERR_NOMEM, "token history: cannot copy %d entries", src->n_distinct);
    }
    memcpy(entries, src->entries, entry_bytes);
    memcpy(slots, src->slots, slot_bytes);
    *dst = *src;
    dst->entries = entries;
    dst->slots = slots;
    return LM_OK;
}

/* The entry of id, appended (zeroed) when new. */
static lm_status entry_for(lm_token_counts *counts, int32_t id, lm_token_count_entry **out,
                           lm_error *err) {
    if (id < 0) return lm_fail(err, LM_ERR_INVALID, "token history: negative token id %d", (int)id);
    int32_t *slot = find_slot(counts, id);
    if (*slot < 0) {
        int n = counts->n_distinct;
        if (n >= LM_TOKEN_COUNTS_MAX_DISTINCT)
            return lm_fail(err, LM_ERR_NOMEM, "token history: more than %d distinct tokens",
                           LM_TOKEN_COUNTS_MAX_DISTINCT);
        if (n == counts->entries_capacity) {
            int capacity = n * 2 < LM_TOKEN_COUNTS_MAX_DISTINCT ? n * 2 : LM_TOKEN_COUNTS_MAX_DISTINCT;
            lm_token_count_entry *grown = realloc(counts->entries, sizeof *grown * (size_t)capacity);
            if (!grown) return lm_fail(err, LM_ERR_NOMEM, "token history: cannot grow to %d entries", capacity);
            counts->entries = grown;
            counts->entries_capacity = capacity;
        }
        if (2 * (n + 1) > 1 << counts->hash_bits) {
            lm_status st = rebuild_index(counts, counts->hash_bits + 1, err);
            if (st != LM_OK) return st;
            slot = find_slot(counts, id);
        }
        counts->entries[n] = (lm_token_count_entry){.id = id};
        *slot = n;
        counts->n_distinct = n + 1;
    }
    *out = &counts->entries[*slot];
    return LM_OK;
}

lm_status lm_token_counts_add_prompt(lm_token_counts *counts, const int32_t *ids, int n,
                                     lm_error *err) {
    for (int i = 0; i < n; i++) {
        lm_token_count_entry *e;
        lm_status st = entry_for(counts, ids[i], &e, err);
        if (st != LM_OK) return st;
        e->in_prompt = true;
    }
    return LM_OK;
}

lm_status lm_token_counts_add_output(lm_token_counts *counts, int32_t id, lm_error *err) {
    lm_token_count_entry *e;
    lm_status st = entry_for(counts, id, &e, err);
    if (st != LM_OK) return st;
    if (e->output_count < INT32_MAX) e->output_count++;
    return LM_OK;
}

void lm_token_counts_remove_output(lm_token_counts *counts, int32_t id) {
    if (id < 0 || !counts->slots) return;
    int32_t slot = *find_slot(counts, id);
    if (slot >= 0 && counts->entries[slot].output_count > 0) counts->entries[slot].output_count--;
}

bool lm_token_counts_get(const lm_token_counts *counts, int32_t id, int32_t *output_count,
                         bool *in_prompt) {
    *output_count = 0;
    *in_prompt = false;
    if (id < 0 || !counts->slots) return false;
    int32_t slot = *find_slot(counts, id);
    if (slot < 0) return false;
    *output_count = counts->entries[slot].output_count;
    *in_prompt = counts->entries[slot].in_prompt;
    return true;
}
