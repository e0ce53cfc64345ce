#include "engine/kv_cache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t lm_kv_cache_block_bytes(int n_layers, int n_kv_heads, int head_dim, int block_size) {
    return (size_t)2 * (size_t)n_layers * (size_t)block_size * (size_t)n_kv_heads *
           (size_t)head_dim * sizeof(float);
}

lm_status lm_kv_cache_init(lm_kv_cache *cache, int n_layers, int n_kv_heads, int head_dim,
                           int block_size, int n_blocks, lm_error *err) {
    memset(cache, 0, sizeof *cache);
    if (n_layers < 0 || n_kv_heads <= 0 || head_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return lm_fail(err, LM_ERR_INVALID, "kv cache: invalid geometry");
    size_t per_layer = (size_t)n_blocks * (size_t)block_size * (size_t)n_kv_heads * (size_t)head_dim;
    if (per_layer > (SIZE_MAX / sizeof(float)) / 2 / (size_t)(n_layers > 0 ? n_layers : 1))
        return lm_fail(err, LM_ERR_NOMEM, "kv cache: %d blocks are too many", n_blocks);
    cache->n_layers = n_layers;
    cache->n_blocks = n_blocks;
    cache->block_size = block_size;
    cache->n_kv_heads = n_kv_heads;
    cache->head_dim = head_dim;
    cache->layers = calloc((size_t)(n_layers > 0 ? n_layers : 1), sizeof *cache->layers);
    cache->storage = n_layers > 0 ? calloc(per_layer * 2 * (size_t)n_layers, sizeof(float)) : NULL;
    cache->free_blocks = malloc(sizeof(int32_t) * (size_t)n_blocks);
    if (!cache->layers || (n_layers > 0 && !cache->storage) || !cache->free_blocks) {
        lm_kv_cache_free(cache);
        return lm_fail(err, LM_ERR_NOMEM, "kv cache: cannot allocate %zu MB",
                       per_layer * 2 * (size_t)n_layers * sizeof(float) >> 20);
    }
    for (int l = 0; l < n_layers; l++) {
        lm_kv_layer *layer = &cache->layers[l];
        layer->k = cache->storage + per_layer * (size_t)(2 * l);
        layer->v = cache->storage + per_layer * (size_t)(2 * l + 1);
        layer->n_blocks = n_blocks;
        layer->block_size = block_size;
        layer->n_kv_heads = n_kv_heads;
        layer->head_dim = head_dim;
    }
    /* Hand out low block ids first: pop from the end of the stack. */
    for (int b = 0; b < n_blocks; b++) cache->free_blocks[b] = n_blocks - 1 - b;
    cache->n_free = n_blocks;
    return LM_OK;
}

void lm_kv_cache_free(lm_kv_cache *cache) {
    free(cache->layers);
    free(cache->storage);
    free(cache->free_blocks);
    memset(cache, 0, sizeof *cache);
}

lm_status lm_kv_cache_alloc(lm_kv_cache *cache, int n, int32_t *out, lm_error *err) {
    if (n < 0 || n > cache->n_free)
        return lm_fail(err, LM_ERR_NOMEM, "kv cache: %d blocks wanted, %d free", n, cache->n_free);
    for (int i = 0; i < n; i++) out[i] = cache->free_blocks[--cache->n_free];
    return LM_OK;
}

void lm_kv_cache_release(lm_kv_cache *cache, const int32_t *blocks, int n) {
    for (int i = 0; i < n && cache->n_free < cache->n_blocks; i++)
        cache->free_blocks[cache->n_free++] = blocks[i];
}

void lm_kv_cache_copy_block(lm_kv_cache *cache, int32_t src, int32_t dst) {
    size_t block = (size_t)cache->block_size * (size_t)cache->n_kv_heads * (size_t)cache->head_dim;
    for (int l = 0; l < cache->n_layers; l++) {
        lm_kv_layer *layer = &cache->layers[l];
        memcpy(layer->k + block * (size_t)dst, layer->k + block * (size_t)src, block * sizeof(float));
        memcpy(layer->v + block * (size_t)dst, layer->v + block * (size_t)src, block * sizeof(float));
    }
}
