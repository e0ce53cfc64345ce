#include "engine/id_pool.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_id_pool_init(lm_id_pool *pool, int n, const char *what, lm_error *err) {
    memset(pool, 0, sizeof *pool);
    if (n <= 0) return lm_fail(err, LM_ERR_INVALID, "%s: a pool of %d is empty", what, n);
    pool->free_ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!pool->free_ids) return lm_fail(err, LM_ERR_NOMEM, "out of memory for %d %s", n, what);
    /* Hand out low ids first: pop from the end of the stack. */
    for (int i = 0; i < n; i++) pool->free_ids[i] = n - 1 - i;
    pool->n_ids = pool->n_free = n;
    return LM_OK;
}

void lm_id_pool_free(lm_id_pool *pool) {
    free(pool->free_ids);
    memset(pool, 0, sizeof *pool);
}

lm_status lm_id_pool_take(lm_id_pool *pool, int n, int32_t *out, lm_error *err) {
    if (n < 0 || n > pool->n_free)
        return lm_fail(err, LM_ERR_NOMEM, "%d wanted, %d free", n, pool->n_free);
    for (int i = 0; i < n; i++) out[i] = pool->free_ids[--pool->n_free];
    return LM_OK;
}

void lm_id_pool_give_back(lm_id_pool *pool, const int32_t *ids, int n) {
    for (int i = 0; i < n && pool->n_free < pool->n_ids; i++) pool->free_ids[pool->n_free++] = ids[i];
}
