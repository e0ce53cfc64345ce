/* libFuzzer target for image input: lm_image_decode (PNG, JPEG, WebP by
 * signature) with small limits, then, for what decodes (up to 32768
 * pixels), lm_image_preprocess under both smart-resize rules with a pixel
 * cap, and the PIL-precision resampler.  Every result is read end to end (so ASan sees a short
 * buffer) and checked against its invariants: a failure clears the output
 * and says why, sizes are within the limits, patch rows are finite and
 * their count matches the grid. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_decode.h"
#include "image/image_processor.h"
#include "image/image_resample.h"

static void check_patches(const lm_image_processor *p, const lm_image_patches *patches) {
    if (!patches->pixels || patches->grid_t != 1 || patches->grid_h < 1 || patches->grid_w < 1 ||
        patches->n_patches != patches->grid_h * patches->grid_w ||
        patches->patch_dim != 3 * p->temporal_patch_size * p->patch_size * p->patch_size ||
        patches->grid_h % p->merge_size != 0 || patches->grid_w % p->merge_size != 0 ||
        (int64_t)patches->grid_h * patches->grid_w * p->patch_size * p->patch_size > p->pixel_cap)
        abort();
    for (size_t i = 0; i < (size_t)patches->n_patches * (size_t)patches->patch_dim; i++)
        if (!isfinite(patches->pixels[i]) || fabsf(patches->pixels[i]) > 1e3f) abort();
}

static void preprocess(const lm_image_rgb *img, lm_smart_resize_rule rule) {
    lm_image_processor p;
    lm_image_processor_defaults(rule, &p);
    p.pixel_cap = (int64_t)1 << 14; /* small: the fuzzer's time goes to decoding */
    lm_error err;
    err.message[0] = '\0';
    lm_image_patches patches = {0};
    if (lm_image_preprocess(&p, img, &patches, &err) == LM_OK) {
        check_patches(&p, &patches);
        lm_image_patches_free(&patches);
    } else if (patches.pixels != NULL || err.message[0] == '\0') {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lm_image_limits limits = {.max_bytes = 1 << 20, .max_pixels = 1 << 18, .max_side = 4096};
    lm_error err;
    err.message[0] = '\0';
    lm_image_rgb img = {0};
    if (lm_image_decode(data, size, &limits, &img, &err) != LM_OK) {
        if (img.rgb != NULL || img.width != 0 || err.message[0] == '\0') abort();
        return 0;
    }
    if (!img.rgb || img.width < 1 || img.height < 1 || img.width > limits.max_side ||
        img.height > limits.max_side || (int64_t)img.width * img.height > limits.max_pixels)
        abort();
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < (size_t)img.width * img.height * 3; i++) sink ^= img.rgb[i];
    (void)sink;
    /* the resampler's loops are slow under coverage tracing: larger images
     * are only decoded, so that the time goes to the decoders */
    if ((int64_t)img.width * img.height > (1 << 15)) {
        lm_image_rgb_free(&img);
        return 0;
    }
    preprocess(&img, LM_SMART_RESIZE_QWEN2VL);
    preprocess(&img, LM_SMART_RESIZE_GLM4V);
    /* PIL's precision, to a size the input picks (within 1..64) */
    int h = 1 + (int)(data[size - 1] & 63), w = 1 + (int)(data[size / 2] & 63);
    lm_image_rgb small;
    if (lm_image_resize_bicubic_with(&img, h, w, LM_RESAMPLE_PIL, &small, &err) != LM_OK) abort();
    if (small.width != w || small.height != h) abort();
    lm_image_rgb_free(&small);
    lm_image_rgb_free(&img);
    return 0;
}
