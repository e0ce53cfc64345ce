/* Decoding image files (PNG, JPEG, WebP) into 8-bit RGB, with the Debian
 * libraries (libpng, libjpeg-turbo, libwebp).
 *
 * The bytes are untrusted: the format is told by its signature, not by a
 * name; every PNG chunk's length is checked against the bytes that remain
 * (JPEG markers: by libjpeg's source, which ends where the bytes do); the
 * declared size and the memory the decode will need are checked against
 * the limits before any pixel buffer is allocated; compressed data is
 * inflated only as far as the image it declares; animated, truncated or
 * malformed files are
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

/* Defaults: 32 MiB of file, 16 Mpixel (4096 x 4096), 32768 on a side.
 *
 * The pixel cap is Pillow's decompression-bomb rule (Image.MAX_IMAGE_PIXELS:
 * a quarter GiB of 24-bit pixels) scaled to the 64 MB that one image may
 * cost a server beyond idle: 16 Mpixel is 48 MiB of RGB, and its resize
 * for the vision tower adds about a quarter of that.  Phone photos (12
 * Mpixel) fit; larger files are refused before any pixel is allocated. */
#define LM_IMAGE_DEFAULT_MAX_BYTES ((size_t)32 << 20)
#define LM_IMAGE_DEFAULT_MAX_PIXELS ((int64_t)1 << 24)
#define LM_IMAGE_DEFAULT_MAX_SIDE 32768
/* The range of a deployment's pixel cap (--max-image-decode-pixels). */
#define LM_IMAGE_MIN_MAX_PIXELS ((int64_t)1024)
#define LM_IMAGE_MAX_MAX_PIXELS ((int64_t)1 << 30)

typedef struct {
    size_t max_bytes;   /* of the encoded file */
    int64_t max_pixels; /* width * height as declared */
    int max_side;       /* width and height each */
    /* The memory one decode may hold, judged from the header before the
     * library allocates: the RGB it makes plus what the library keeps for
     * the whole image (a progressive or multi-scan JPEG's coefficients, a
     * lossless WebP's ARGB, a WebP's alpha plane).  Row buffers (a few MiB
     * at most) come on top.  0: 3 bytes a pixel of max_pixels, what the
     * largest image allowed needs anyway. */
    size_t max_decode_bytes;
} lm_image_limits;

static inline lm_image_limits lm_image_default_limits(void) {
    return (lm_image_limits){LM_IMAGE_DEFAULT_MAX_BYTES, LM_IMAGE_DEFAULT_MAX_PIXELS,
                             LM_IMAGE_DEFAULT_MAX_SIDE, 0};
}

/* The decode budget of *limits: max_decode_bytes, or 3 * max_pixels. */
static inline size_t lm_image_decode_budget(const lm_image_limits *limits) {
    if (limits->max_decode_bytes) return limits->max_decode_bytes;
    return limits->max_pixels > 0 ? (size_t)limits->max_pixels * 3 : 0;
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
