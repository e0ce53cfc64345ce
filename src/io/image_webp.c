/* WebP through libwebp: the features first (size, alpha, animation, lossy
 * or lossless), then one decode into our buffer.  libwebp returns errors
 * and prints nothing.  Beside our RGB, libwebp holds for the whole image
 * a lossless file's ARGB (4 bytes a pixel, vp8l_dec.c's pixels_) and a
 * lossy file's alpha plane (1 byte a pixel, and up to 4 more while a
 * losslessly compressed alpha is decoded): those count in the memory
 * judged before decoding. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <webp/decode.h>

#include "io/image_codec.h"

static const char *status_text(VP8StatusCode status) {
    switch (status) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "malformed bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "a feature libwebp does not support";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "the file ends early (truncated)";
    default: return "not a WebP file";
    }
}

lm_status lm_image_decode_webp(const uint8_t *data, size_t n, const lm_image_limits *limits,
                               lm_image_rgb *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    WebPBitstreamFeatures features;
    VP8StatusCode status = WebPGetFeatures(data, n, &features);
    if (status != VP8_STATUS_OK) return lm_fail(err, LM_ERR_INVALID, "WebP image: %s", status_text(status));
    if (features.has_animation)
        return lm_fail(err, LM_ERR_INVALID, "WebP image: animated; only still images are taken");
    lm_status st = lm_image_check_size("WebP", features.width, features.height, limits, err);
    if (st != LM_OK) return st;
    uint64_t pixels = (uint64_t)features.width * (uint64_t)features.height;
    bool lossy = features.format == 1;
    uint64_t work = !lossy ? pixels * 4 : features.has_alpha ? pixels * 5 : 0;
    st = lm_image_check_memory("WebP", features.width, features.height, work,
                               !lossy ? "ARGB (lossless)" : "alpha", limits, err);
    if (st != LM_OK) return st;
    if ((st = lm_image_alloc(features.width, features.height, out, err)) != LM_OK) return st;
    /* RGB straight away: with alpha, the same colour values as RGBA less
     * its alpha (not premultiplied), which is what PIL's RGBA image
     * convert("RGB") keeps. */
    size_t rgb_bytes = (size_t)features.width * (size_t)features.height * 3;
    if (!WebPDecodeRGBInto(data, n, out->rgb, rgb_bytes, features.width * 3)) {
        lm_image_rgb_free(out);
        return lm_fail(err, LM_ERR_INVALID, "WebP image: cannot be decoded (malformed or truncated)");
    }
    return LM_OK;
}
