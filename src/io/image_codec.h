/* Inside src/io: the three decoders behind lm_image_decode (image_decode.c)
 * and the helpers they share.  Each decoder gets bytes whose signature
 * already says its format, checks the declared size with
 * lm_image_check_size before it allocates pixels, and fills *out with 8-bit
 * RGB (alpha dropped), or fails with *out left empty and err saying why. */
#ifndef LOOM_IO_IMAGE_CODEC_H
#define LOOM_IO_IMAGE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "io/image_decode.h"

/* LM_ERR_INVALID naming the format when width x height is empty or over
 * the limits (each side, and the product). */
lm_status lm_image_check_size(const char *format, int64_t width, int64_t height,
                              const lm_image_limits *limits, lm_error *err);

/* LM_ERR_INVALID naming the format when the decode of a width x height
 * image would hold more than the limits' budget: its RGB (3 bytes a
 * pixel) and work_bytes the library keeps for the whole image (`what`
 * says what they are, for the message: "coefficients", NULL for none). */
lm_status lm_image_check_memory(const char *format, int64_t width, int64_t height, uint64_t work_bytes,
                                const char *what, const lm_image_limits *limits, lm_error *err);

/* A new width x height x 3 buffer in *out (the size already checked). */
lm_status lm_image_alloc(int width, int height, lm_image_rgb *out, lm_error *err);

lm_status lm_image_decode_png(const uint8_t *bytes, size_t n, const lm_image_limits *limits,
                              lm_image_rgb *out, lm_error *err);
lm_status lm_image_decode_jpeg(const uint8_t *bytes, size_t n, const lm_image_limits *limits,
                               lm_image_rgb *out, lm_error *err);
lm_status lm_image_decode_webp(const uint8_t *bytes, size_t n, const lm_image_limits *limits,
                               lm_image_rgb *out, lm_error *err);

#endif
