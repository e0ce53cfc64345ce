/* Paged KV cache for full-attention layers: a pool of fixed-size blocks shared
 * by all sequences, each with a block table.  Memory is set at creation, not
 * by the longest request. */
#ifndef LOOM_ENGINE_KV_CACHE_H
#define LOOM_ENGINE_KV_CACHE_H

#include "base/error.h"
#include "ops/ops.h"

typedef struct {
    int n_layers, n_blocks, block_size, n_kv_heads, head_dim;
    lm_kv_layer *layers; /* [n_layers] views into the pools */
    float *storage;      /* all k and v pools */
    int32_t *free_blocks; /* stack of free block ids */
    int n_free;
} lm_kv_cache;

lm_status lm_kv_cache_init(lm_kv_cache *cache, int n_layers, int n_kv_heads, int head_dim,
                           int block_size, int n_blocks, lm_error *err);
void lm_kv_cache_free(lm_kv_cache *cache);
/* Bytes one block takes over all layers (k and v). */
size_t lm_kv_cache_block_bytes(int n_layers, int n_kv_heads, int head_dim, int block_size);
/* Takes n blocks from the pool into out; fails (changing nothing) if fewer are free. */
lm_status lm_kv_cache_alloc(lm_kv_cache *cache, int n, int32_t *out, lm_error *err);
void lm_kv_cache_release(lm_kv_cache *cache, const int32_t *blocks, int n);
/* Copies block src's keys and values (every layer) into block dst. */
void lm_kv_cache_copy_block(lm_kv_cache *cache, int32_t src, int32_t dst);
/* Blocks needed to hold n_tokens. */
static inline int lm_kv_blocks_for(const lm_kv_cache *cache, int n_tokens) {
    return (n_tokens + cache->block_size - 1) / cache->block_size;
}

#endif
