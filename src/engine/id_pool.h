/* A pool of interchangeable ids 0..n-1 (KV blocks, recurrent-state slots):
 * the engine's side of the caches.  The memory the ids stand for belongs to
 * the model's context (models/model.h); the engine only hands ids out and
 * takes them back. */
#ifndef LOOM_ENGINE_ID_POOL_H
#define LOOM_ENGINE_ID_POOL_H

#include <stdint.h>

#include "base/error.h"

typedef struct {
    int n_ids, n_free;
    int32_t *free_ids; /* stack of free ids */
} lm_id_pool;

/* All n ids free; the lowest ids are handed out first. */
lm_status lm_id_pool_init(lm_id_pool *pool, int n, const char *what, lm_error *err);
void lm_id_pool_free(lm_id_pool *pool);
/* Takes n ids into out; fails (changing nothing) if fewer are free. */
lm_status lm_id_pool_take(lm_id_pool *pool, int n, int32_t *out, lm_error *err);
void lm_id_pool_give_back(lm_id_pool *pool, const int32_t *ids, int n);

#endif
