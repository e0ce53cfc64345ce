/* The vision tower's outputs kept for reuse: a second turn about the same
 * image does not encode it again.
 *
 * An entry is found by a hash of the image file's bytes and of the
 * processor settings, and then compared byte for byte with the file it was
 * made from (kept in the entry), so two different images never share
 * rows, whatever their hashes.  The cache is bounded in bytes (rows and
 * file together) and drops the least recently used entries first.
 *
 * Entries are reference counted (atomically): a request holds the entries
 * of its images for as long as it lives, wherever it is freed; the cache
 * holds one reference of its own while an entry is listed.  The list
 * itself belongs to the engine thread. */
#ifndef LOOM_ENGINE_IMAGE_CACHE_H
#define LOOM_ENGINE_IMAGE_CACHE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct lm_image_embedding {
    atomic_int refs;
    uint64_t hash;           /* of the file and the processor digest */
    uint64_t processor_digest;
    uint8_t *file;           /* the encoded image, for the exact comparison */
    size_t file_bytes;
    float *rows;             /* [n_rows, width]: the placeholders' rows */
    int n_rows, width;
    struct lm_image_embedding *newer, *older; /* the cache's list */
} lm_image_embedding;

typedef struct {
    size_t budget, used;
    lm_image_embedding *newest, *oldest;
    int n_entries;
    uint64_t hits, misses;
} lm_image_cache;

uint64_t lm_image_file_hash(const void *file, size_t bytes, uint64_t processor_digest);

void lm_image_cache_init(lm_image_cache *c, size_t budget);
void lm_image_cache_free(lm_image_cache *c);

/* A new entry (refs 1, for the caller) with room for n_rows x width rows
 * and a copy of the file; NULL when out of memory. */
lm_image_embedding *lm_image_embedding_create(const void *file, size_t file_bytes,
                                              uint64_t processor_digest, int n_rows, int width);
void lm_image_embedding_ref(lm_image_embedding *e);
void lm_image_embedding_unref(lm_image_embedding *e);

/* The entry made from exactly this file with these settings, with a
 * reference for the caller, or NULL. */
lm_image_embedding *lm_image_cache_find(lm_image_cache *c, const void *file, size_t file_bytes,
                                        uint64_t processor_digest);
/* Lists a filled entry (the cache takes its own reference), dropping the
 * oldest entries to stay within the budget; an entry larger than the whole
 * budget is not listed. */
void lm_image_cache_add(lm_image_cache *c, lm_image_embedding *e);

#endif
