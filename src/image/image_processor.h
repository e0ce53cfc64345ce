/* Image preprocessing for the vision towers (model-spec §D.2 Qwen3.5,
 * §E.4 GLM-4.6V): smart resize, antialiased bicubic resampling, rescale
 * and normalisation, and the patch rows in merge-block order that the
 * tower's patch embedding reads.
 *
 * The settings come from the checkpoint's preprocessor_config.json over
 * the family's defaults; the family says which smart-resize rule applies.
 * Resampling matches transformers' default ("fast", torchvision) backend
 * byte for byte; image_resample.h has PIL's too (the two differ only in
 * the fixed-point precision of the weights; see image_resample.c). */
#ifndef LOOM_IMAGE_IMAGE_PROCESSOR_H
#define LOOM_IMAGE_IMAGE_PROCESSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "io/image_decode.h"

typedef enum {
    /* Qwen2-VL's smart_resize (Qwen3.5): budget in pixels of one frame. */
    LM_SMART_RESIZE_QWEN2VL,
    /* Glm4vImageProcessor's: sides below the factor scaled up first, the
     * temporal_patch_size frames counted in the budget. */
    LM_SMART_RESIZE_GLM4V,
} lm_smart_resize_rule;

typedef struct {
    lm_smart_resize_rule rule;
    int patch_size, temporal_patch_size, merge_size;
    int64_t min_pixels, max_pixels; /* size.shortest_edge / size.longest_edge */
    float mean[3], std[3];
    double rescale_factor;
    /* A cap on max_pixels set by the deployment (`--max-image-pixels`),
     * 0 for none; images above it are resized down like images above
     * max_pixels. */
    int64_t pixel_cap;
} lm_image_processor;

/* The defaults of a rule (the released Qwen3.5 / GLM-4.6V settings). */
void lm_image_processor_defaults(lm_smart_resize_rule rule, lm_image_processor *out);
/* Overlays dir/preprocessor_config.json on *p when the file exists.
 * Fields of the wrong type or impossible values are LM_ERR_INVALID naming
 * the field; a missing file leaves *p as it is. */
lm_status lm_image_processor_read(const char *dir, lm_image_processor *p, lm_error *err);

/* The resized height and width (multiples of patch_size * merge_size), or
 * LM_ERR_INVALID for images the rule refuses (aspect ratio over 200, a
 * side over 2^20).  The budget's maximum is min(max_pixels, pixel_cap)
 * when pixel_cap > 0 (and its minimum no more than that); the result
 * stays within the cap (frames counted, for GLM) unless the cap is under
 * one merge block. */
lm_status lm_smart_resize(const lm_image_processor *p, int height, int width, int *out_height,
                          int *out_width, lm_error *err);

/* Antialiased bicubic resampling of 8-bit RGB (Keys a = -0.5, support
 * scaled by the downscale factor, separable: horizontal then vertical,
 * rounded to uint8 between and after). */
lm_status lm_image_resize_bicubic(const lm_image_rgb *in, int out_height, int out_width,
                                  lm_image_rgb *out, lm_error *err);

/* One image as the tower's input: grid (t, h, w) in patches and n_patches
 * = t*h*w rows of patch_dim = 3 * temporal_patch_size * patch_size²
 * floats, in merge-block order, (c, t, y, x) inside a row. */
typedef struct {
    int grid_t, grid_h, grid_w;
    int merge_size;
    int n_patches, patch_dim;
    float *pixels; /* [n_patches][patch_dim], owned */
} lm_image_patches;

/* Rows of the tower's output = placeholder tokens in the prompt. */
static inline int lm_image_tokens(const lm_image_patches *p) {
    return p->n_patches / (p->merge_size * p->merge_size);
}

/* Resize, normalise and patchify one decoded image. */
lm_status lm_image_preprocess(const lm_image_processor *p, const lm_image_rgb *image,
                              lm_image_patches *out, lm_error *err);
/* The last two steps alone, on an image already of a valid resized size. */
lm_status lm_image_patchify(const lm_image_processor *p, const lm_image_rgb *resized,
                            lm_image_patches *out, lm_error *err);
void lm_image_patches_free(lm_image_patches *p);

/* A 64-bit digest of the processor settings that change the patch rows
 * (for the embedding cache's key, together with a hash of the bytes). */
uint64_t lm_image_processor_digest(const lm_image_processor *p);

#endif
