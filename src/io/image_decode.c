/* Image files to 8-bit RGB: the format by signature and the size limits
 * the three decoders share. */
#include "io/image_decode.h"

#include <stdlib.h>
#include <string.h>

#include "io/image_codec.h"
#include "io/json_file.h"

const char *lm_image_format(const void *bytes, size_t n) {
    const uint8_t *b = bytes;
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (!b) return NULL;
    if (n >= 8 && memcmp(b, png, 8) == 0) return "png";
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return "jpeg";
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) return "webp";
    return NULL;
}

lm_status lm_image_check_size(const char *format, int64_t width, int64_t height,
                              const lm_image_limits *limits, lm_error *err) {
    if (width <= 0 || height <= 0)
        return lm_fail(err, LM_ERR_INVALID, "%s image: its size %lld x %lld is empty", format,
                       (long long)width, (long long)height);
    if (width > limits->max_side || height > limits->max_side)
        return lm_fail(err, LM_ERR_INVALID,
                       "%s image: %lld x %lld is more than the %d pixels allowed on a side", format,
                       (long long)width, (long long)height, limits->max_side);
    /* both sides are at most INT_MAX here, so the product fits */
    if (width * height > limits->max_pixels)
        return lm_fail(err, LM_ERR_INVALID,
                       "%s image: %lld x %lld = %lld pixels is more than the %lld pixels allowed "
                       "(--max-image-decode-pixels)",
                       format, (long long)width, (long long)height, (long long)(width * height),
                       (long long)limits->max_pixels);
    return LM_OK;
}

static double mib(uint64_t bytes) { return (double)bytes / (1 << 20); }

lm_status lm_image_check_memory(const char *format, int64_t width, int64_t height, uint64_t work_bytes,
                                const char *what, const lm_image_limits *limits, lm_error *err) {
    /* the sides are checked first (at most 2^31 each), so nothing overflows */
    uint64_t rgb = (uint64_t)width * (uint64_t)height * 3, budget = lm_image_decode_budget(limits);
    if (rgb + work_bytes <= budget) return LM_OK;
    if (!what)
        return lm_fail(err, LM_ERR_INVALID,
                       "%s image: %lld x %lld needs %.1f MiB of RGB to decode; the decoder's limit is %.1f MiB",
                       format, (long long)width, (long long)height, mib(rgb), mib(budget));
    return lm_fail(err, LM_ERR_INVALID,
                   "%s image: %lld x %lld needs %.1f MiB to decode (%.1f MiB of %s for the whole image and "
                   "%.1f MiB of RGB); the decoder's limit is %.1f MiB (3 bytes a pixel of "
                   "--max-image-decode-pixels)",
                   format, (long long)width, (long long)height, mib(rgb + work_bytes), mib(work_bytes), what,
                   mib(rgb), mib(budget));
}

lm_status lm_image_alloc(int width, int height, lm_image_rgb *out, lm_error *err) {
    size_t bytes = (size_t)width * (size_t)height * 3;
    uint8_t *rgb = malloc(bytes ? bytes : 1);
    if (!rgb) return lm_fail(err, LM_ERR_NOMEM, "image: out of memory (%zu bytes)", bytes);
    out->width = width;
    out->height = height;
    out->rgb = rgb;
    return LM_OK;
}

lm_status lm_image_decode(const void *bytes, size_t n, const lm_image_limits *limits,
                          lm_image_rgb *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    lm_image_limits defaults = lm_image_default_limits();
    if (!limits) limits = &defaults;
    if (!bytes || n == 0) return lm_fail(err, LM_ERR_INVALID, "image: no bytes");
    if (n > limits->max_bytes)
        return lm_fail(err, LM_ERR_INVALID, "image: %zu bytes is more than the %zu allowed", n,
                       limits->max_bytes);
    const char *format = lm_image_format(bytes, n);
    lm_status st;
    if (!format)
        return lm_fail(err, LM_ERR_INVALID, "image: not a PNG, JPEG or WebP file (by its first bytes)");
    if (strcmp(format, "png") == 0)
        st = lm_image_decode_png(bytes, n, limits, out, err);
    else if (strcmp(format, "jpeg") == 0)
        st = lm_image_decode_jpeg(bytes, n, limits, out, err);
    else
        st = lm_image_decode_webp(bytes, n, limits, out, err);
    if (st != LM_OK) lm_image_rgb_free(out);
    return st;
}

lm_status lm_image_decode_file(const char *path, const lm_image_limits *limits, lm_image_rgb *out,
                               lm_error *err) {
    memset(out, 0, sizeof *out);
    lm_image_limits defaults = lm_image_default_limits();
    if (!limits) limits = &defaults;
    char *data = NULL;
    size_t n = 0;
    lm_status st = lm_read_small_file(path, limits->max_bytes, &data, &n, err);
    if (st != LM_OK) return st;
    st = lm_image_decode(data, n, limits, out, err);
    free(data);
    if (st != LM_OK && err) lm_fail_context(err, "%s", path);
    return st;
}

void lm_image_rgb_free(lm_image_rgb *image) {
    if (!image) return;
    free(image->rgb);
    memset(image, 0, sizeof *image);
}
