/* Recurrent-state slots for Gated DeltaNet layers: per slot and layer, the
 * causal-conv window [conv_dim, K-1] and the delta-rule state [Hv, dk, dv],
 * float32.  A sequence takes a slot when admitted and frees it when done. */
#ifndef LOOM_ENGINE_STATE_CACHE_H
#define LOOM_ENGINE_STATE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct {
    int n_layers, n_slots;
    size_t conv_floats, recurrent_floats; /* per slot and layer */
    float *storage;
    int32_t *free_slots;
    int n_free;
} lm_state_cache;

lm_status lm_state_cache_init(lm_state_cache *cache, int n_layers, int n_slots, size_t conv_floats,
                              size_t recurrent_floats, lm_error *err);
void lm_state_cache_free(lm_state_cache *cache);
/* Takes a free slot, zeroed (a new sequence starts from zero state). */
lm_status lm_state_cache_acquire(lm_state_cache *cache, int *slot, lm_error *err);
void lm_state_cache_release(lm_state_cache *cache, int slot);
void lm_state_cache_zero(lm_state_cache *cache, int slot);
/* Copies every layer's state of slot src into slot dst (forking a sequence). */
void lm_state_cache_copy(lm_state_cache *cache, int src, int dst);
float *lm_state_conv(const lm_state_cache *cache, int layer, int slot);
float *lm_state_recurrent(const lm_state_cache *cache, int layer, int slot);

#endif
