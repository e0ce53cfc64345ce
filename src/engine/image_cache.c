#include "engine/image_cache.h"

#include <stdlib.h>
#include <string.h>

uint64_t lm_image_file_hash(const void *file, size_t bytes, uint64_t processor_digest) {
    /* FNV-1a, 64-bit: only to find candidates; the bytes decide. */
    uint64_t h = 1469598103934665603ull ^ processor_digest;
    const uint8_t *p = file;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static size_t entry_cost(const lm_image_embedding *e) {
    return sizeof *e + e->file_bytes + sizeof(float) * (size_t)e->n_rows * (size_t)e->width;
}

void lm_image_cache_init(lm_image_cache *c, size_t budget) {
    memset(c, 0, sizeof *c);
    c->budget = budget;
}

lm_image_embedding *lm_image_embedding_create(const void *file, size_t file_bytes,
                                              uint64_t processor_digest, int n_rows, int width) {
    lm_image_embedding *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->file = malloc(file_bytes ? file_bytes : 1);
    e->rows = malloc(sizeof(float) * (size_t)n_rows * (size_t)width);
    if (!e->file || !e->rows) {
        free(e->file);
        free(e->rows);
        free(e);
        return NULL;
    }
    memcpy(e->file, file, file_bytes);
    atomic_init(&e->refs, 1);
    e->file_bytes = file_bytes;
    e->processor_digest = processor_digest;
    e->hash = lm_image_file_hash(file, file_bytes, processor_digest);
    e->n_rows = n_rows;
    e->width = width;
    return e;
}

void lm_image_embedding_ref(lm_image_embedding *e) { atomic_fetch_add(&e->refs, 1); }

void lm_image_embedding_unref(lm_image_embedding *e) {
    if (!e || atomic_fetch_sub(&e->refs, 1) != 1) return;
    free(e->file);
    free(e->rows);
    free(e);
}

static void unlink_entry(lm_image_cache *c, lm_image_embedding *e) {
    if (e->newer) e->newer->older = e->older;
    else c->newest = e->older;
    if (e->older) e->older->newer = e->newer;
    else c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void push_newest(lm_image_cache *c, lm_image_embedding *e) {
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest) c->newest->newer = e;
    c->newest = e;
    if (!c->oldest) c->oldest = e;
}

lm_image_embedding *lm_image_cache_find(lm_image_cache *c, const void *file, size_t file_bytes,
                                        uint64_t processor_digest) {
    uint64_t hash = lm_image_file_hash(file, file_bytes, processor_digest);
    for (lm_image_embedding *e = c->newest; e; e = e->older)
        if (e->hash == hash && e->processor_digest == processor_digest &&
            e->file_bytes == file_bytes && memcmp(e->file, file, file_bytes) == 0) {
            unlink_entry(c, e);
            push_newest(c, e);
            lm_image_embedding_ref(e);
            c->hits++;
            return e;
        }
    c->misses++;
    return NULL;
}

void lm_image_cache_add(lm_image_cache *c, lm_image_embedding *e) {
    size_t cost = entry_cost(e);
    if (cost > c->budget) return;
    while (c->oldest && c->used + cost > c->budget) {
        lm_image_embedding *old = c->oldest;
        unlink_entry(c, old);
        c->used -= entry_cost(old);
        c->n_entries--;
        lm_image_embedding_unref(old);
    }
    lm_image_embedding_ref(e);
    push_newest(c, e);
    c->used += cost;
    c->n_entries++;
}

void lm_image_cache_free(lm_image_cache *c) {
    while (c->oldest) {
        lm_image_embedding *old = c->oldest;
        unlink_entry(c, old);
        lm_image_embedding_unref(old);
    }
    memset(c, 0, sizeof *c);
}
