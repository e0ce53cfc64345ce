#include "engine/state_cache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t slot_floats(const lm_state_cache *c) {
    return (size_t)c->n_layers * (c->conv_floats + c->recurrent_floats);
}

lm_status lm_state_cache_init(lm_state_cache *cache, int n_layers, int n_slots, size_t conv_floats,
                              size_t recurrent_floats, lm_error *err) {
    memset(cache, 0, sizeof *cache);
    if (n_layers < 0 || n_slots <= 0)
        return lm_fail(err, LM_ERR_INVALID, "state cache: invalid geometry");
    cache->n_layers = n_layers;
    cache->n_slots = n_slots;
    cache->conv_floats = conv_floats;
    cache->recurrent_floats = recurrent_floats;
    size_t per_slot = slot_floats(cache);
    if (per_slot && (size_t)n_slots > SIZE_MAX / sizeof(float) / per_slot)
        return lm_fail(err, LM_ERR_NOMEM, "state cache: %d slots are too many", n_slots);
    cache->storage = calloc(per_slot ? per_slot * (size_t)n_slots : 1, sizeof(float));
    cache->free_slots = malloc(sizeof(int32_t) * (size_t)n_slots);
    if (!cache->storage || !cache->free_slots) {
        lm_state_cache_free(cache);
        return lm_fail(err, LM_ERR_NOMEM, "state cache: cannot allocate %zu MB",
                       per_slot * (size_t)n_slots * sizeof(float) >> 20);
    }
    for (int s = 0; s < n_slots; s++) cache->free_slots[s] = n_slots - 1 - s;
    cache->n_free = n_slots;
    return LM_OK;
}

void lm_state_cache_free(lm_state_cache *cache) {
    free(cache->storage);
    free(cache->free_slots);
    memset(cache, 0, sizeof *cache);
}

lm_status lm_state_cache_acquire(lm_state_cache *cache, int *slot, lm_error *err) {
    if (cache->n_free == 0)
        return lm_fail(err, LM_ERR_NOMEM, "state cache: all %d slots in use", cache->n_slots);
    *slot = cache->free_slots[--cache->n_free];
    lm_state_cache_zero(cache, *slot);
    return LM_OK;
}

void lm_state_cache_release(lm_state_cache *cache, int slot) {
    if (slot >= 0 && slot < cache->n_slots && cache->n_free < cache->n_slots)
        cache->free_slots[cache->n_free++] = slot;
}

void lm_state_cache_zero(lm_state_cache *cache, int slot) {
    size_t per_slot = slot_floats(cache);
    memset(cache->storage + per_slot * (size_t)slot, 0, per_slot * sizeof(float));
}

void lm_state_cache_copy(lm_state_cache *cache, int src, int dst) {
    size_t per_slot = slot_floats(cache);
    memcpy(cache->storage + per_slot * (size_t)dst, cache->storage + per_slot * (size_t)src,
           per_slot * sizeof(float));
}

/* Layout: slot-major, then layer, then [conv | recurrent]. */
float *lm_state_conv(const lm_state_cache *cache, int layer, int slot) {
    return cache->storage + slot_floats(cache) * (size_t)slot +
           (cache->conv_floats + cache->recurrent_floats) * (size_t)layer;
}

float *lm_state_recurrent(const lm_state_cache *cache, int layer, int slot) {
    return lm_state_conv(cache, layer, slot) + cache->conv_floats;
}
