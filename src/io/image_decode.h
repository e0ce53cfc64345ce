/* Decoding image files (PNG, JPEG, WebP) into 8-bit RGB, with the Debian
 * libraries (libpng, libjpeg-turbo, libwebp).
 *
 * The bytes are untrusted: the format is told by its signature, not by a
 * name; the declared size is checked against the limits before any pixel
 * buffer is allocated; animated, truncated or malformed files are
 * LM_ERR_INVALID with a sentence saying what is wrong.  The pixels are
 * what transformers' convert_to_rgb makes of the file: PIL's
 * image.convert("RGB"), which drops alpha (no compositing onto a
 * background), replicates greyscale and looks palettes up (what
 * fixtures/preprocess records as `<file>.decoded`; c.png there is RGBA).
 * 16-bit samples keep their high byte. */
#ifndef LOOM_IO_IMAGE_DECODE_H
#define LOOM_IO_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Defaults: 32 MiB of file, 64 Mpixel (8192 x 8192), 32768 on a side. */
#define LM_IMAGE_DEFAULT_MAX_BYTES ((size_t)32 << 20)
#define LM_IMAGE_DEFAULT_MAX_PIXELS ((int64_t)64 << 20)
#define LM_IMAGE_DEFAULT_MAX_SIDE 32768

typedef struct {
    size_t max_bytes;   /* of the encoded file */
    int64_t max_pixels; /* width * height as declared */
    int max_side;       /* width and height each */
} lm_image_limits;

static inline lm_image_limits lm_image_default_limits(void) {
    return (lm_image_limits){LM_IMAGE_DEFAULT_MAX_BYTES, LM_IMAGE_DEFAULT_MAX_PIXELS,
                             LM_IMAGE_DEFAULT_MAX_SIDE};
}

typedef struct {
    int width, height;
    uint8_t *rgb; /* [height][width][3], owned */
} lm_image_rgb;

/* What kind of file the bytes are ("png", "jpeg", "webp"), or NULL. */
const char *lm_image_format(const void *bytes, size_t n);

lm_status lm_image_decode(const void *bytes, size_t n, const lm_image_limits *limits,
                          lm_image_rgb *out, lm_error *err);
/* Reads a file (at most limits->max_bytes) and decodes it. */
lm_status lm_image_decode_file(const char *path, const lm_image_limits *limits, lm_image_rgb *out,
                               lm_error *err);
void lm_image_rgb_free(lm_image_rgb *image);

/* A decoder message without its leading "image: ", for callers that name
 * the image themselves ("image 2: not a PNG, JPEG or WebP file ..."). */
static inline const char *lm_image_error_detail(const char *message) {
    return message[0] == 'i' && message[1] == 'm' && message[2] == 'a' && message[3] == 'g' &&
                   message[4] == 'e' && message[5] == ':' && message[6] == ' '
               ? message + 7
               : message;
}

#endif
