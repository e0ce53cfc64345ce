/* The resampler behind lm_image_resize_bicubic (image_processor.h), with
 * the choice of fixed-point precision that tells transformers' two
 * backends apart: torchvision's (the default, what lm_image_resize_bicubic
 * does) and PIL's.  See image_resample.c. */
#ifndef LOOM_IMAGE_IMAGE_RESAMPLE_H
#define LOOM_IMAGE_IMAGE_RESAMPLE_H

#include "base/error.h"
#include "io/image_decode.h"

typedef enum {
    LM_RESAMPLE_TORCHVISION, /* int16 weights, precision from the largest weight */
    LM_RESAMPLE_PIL,         /* int32 weights with 22 fraction bits */
} lm_resample_backend;

/* Sides up to 2^20 each and 2^31 pixels out. */
lm_status lm_image_resize_bicubic_with(const lm_image_rgb *in, int out_height, int out_width,
                                       lm_resample_backend backend, lm_image_rgb *out, lm_error *err);

#endif
