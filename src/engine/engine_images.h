/* The engine's images part (engine_images.c): the processor submit uses
 * (read-only once the engine runs), what a request's image files may
 * declare, the vision workspace's bound, and the tower's outputs kept for
 * reuse (engine thread). */
#ifndef LOOM_ENGINE_ENGINE_IMAGES_H
#define LOOM_ENGINE_ENGINE_IMAGES_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/image_cache.h"
#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "loom.h"
#include "models/model.h"

typedef struct {
    bool on;
    lm_image_processor processor;
    lm_image_limits limits; /* what a request's image files may declare */
    int max_patches;
    lm_image_cache cache;
    uint64_t encoded;
    char marker[256]; /* "" when there is none */
} lm_engine_images;

/* At create (context->max_image_patches is set when images are on). */
lm_status lm_engine_images_init(loom_engine *e, const lm_model_info *info, lm_context_options *context,
                                lm_error *err);
void lm_engine_images_free(lm_engine_images *images);
/* Encodes (or finds in the cache) every image whose rows the plan's
 * prefill chunks reach; a sequence whose image fails finishes with the
 * error and leaves the plan. */
void lm_engine_prepare_images(loom_engine *e, lm_step_plan *plan);
/* The input row of token index pos of seq (an image placeholder's row of
 * the tower's output) or NULL; and its position. */
const float *lm_engine_input_row(const lm_sequence *seq, int pos);
void lm_engine_position(const lm_sequence *seq, int pos, int32_t out[3]);
/* Its part of the engine's stats. */
void lm_engine_images_stats(const lm_engine_images *images, loom_stats *stats);

#endif
