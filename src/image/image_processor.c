/* Image preprocessing (model-spec §D.2, §E.4): settings, smart resize,
 * normalisation and patch rows.  The resampler is image_resample.c. */
#include "image/image_processor.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json_fields.h"
#include "io/json_file.h"

void lm_image_processor_defaults(lm_smart_resize_rule rule, lm_image_processor *out) {
    memset(out, 0, sizeof *out);
    out->rule = rule;
    out->temporal_patch_size = 2;
    out->merge_size = 2;
    out->rescale_factor = 1.0 / 255.0;
    if (rule == LM_SMART_RESIZE_GLM4V) {
        static const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
        static const float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
        out->patch_size = 14;
        out->min_pixels = 12544;
        out->max_pixels = 47040000;
        memcpy(out->mean, mean, sizeof mean);
        memcpy(out->std, std, sizeof std);
    } else {
        out->patch_size = 16;
        out->min_pixels = 65536;
        out->max_pixels = 16777216;
        for (int c = 0; c < 3; c++) out->mean[c] = out->std[c] = 0.5f;
    }
}

static lm_status read_triple(const lm_json_fields *f, const char *key, bool positive, float *out) {
    const cJSON *list = NULL;
    size_t n = 0;
    lm_status st = lm_json_read_array(f, key, 3, "numbers", &list, &n);
    if (st != LM_OK || !list) return st;
    if (n != 3) return lm_json_field_error(f, LM_ERR_FORMAT, key, "has %zu values; it needs 3 (R, G, B)", n);
    float v[3];
    int c = 0;
    for (const cJSON *e = list->child; e; e = e->next, c++) {
        if (!cJSON_IsNumber(e) || !(e->valuedouble > (positive ? 0.0 : -1e6)) || !(e->valuedouble < 1e6))
            return lm_json_field_error(f, LM_ERR_FORMAT, key, "must hold 3 %snumbers",
                                       positive ? "positive " : "");
        v[c] = (float)e->valuedouble;
    }
    memcpy(out, v, sizeof v);
    return LM_OK;
}

lm_status lm_image_processor_read(const char *dir, lm_image_processor *p, lm_error *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/preprocessor_config.json", dir) >= (int)sizeof path)
        return lm_fail(err, LM_ERR_INVALID, "model folder path too long");
    FILE *probe = fopen(path, "rb");
    if (!probe) return LM_OK; /* the family's defaults stand */
    fclose(probe);
    cJSON *root = NULL;
    lm_status st = lm_json_read_file(path, 1 << 20, &root, err);
    if (st != LM_OK) return st;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lm_fail(err, LM_ERR_FORMAT, "%s: not a JSON object", path);
    }
    lm_image_processor q = *p;
    lm_json_fields f = lm_json_fields_of(path, root, err), size;
    int min_edge = -1, max_edge = -1;
    if ((st = lm_json_read_int(&f, "patch_size", 1, 1024, &q.patch_size)) == LM_OK &&
        (st = lm_json_read_int(&f, "temporal_patch_size", 1, 16, &q.temporal_patch_size)) == LM_OK &&
        (st = lm_json_read_int(&f, "merge_size", 1, 16, &q.merge_size)) == LM_OK &&
        (st = lm_json_read_double(&f, "rescale_factor", 0.0, 1.0, &q.rescale_factor)) == LM_OK &&
        (st = read_triple(&f, "image_mean", false, q.mean)) == LM_OK &&
        (st = read_triple(&f, "image_std", true, q.std)) == LM_OK &&
        (st = lm_json_fields_sub(&f, "size", &size)) == LM_OK &&
        (st = lm_json_read_int(&size, "shortest_edge", 1, 1 << 30, &min_edge)) == LM_OK &&
        (st = lm_json_read_int(&size, "longest_edge", 1, 1 << 30, &max_edge)) == LM_OK) {
        /* min_pixels / max_pixels at top level (older configs) override size */
        int min_px = -1, max_px = -1;
        if ((st = lm_json_read_int(&f, "min_pixels", 1, 1 << 30, &min_px)) == LM_OK &&
            (st = lm_json_read_int(&f, "max_pixels", 1, 1 << 30, &max_px)) == LM_OK) {
            if (min_edge > 0) q.min_pixels = min_edge;
            if (max_edge > 0) q.max_pixels = max_edge;
            if (min_px > 0) q.min_pixels = min_px;
            if (max_px > 0) q.max_pixels = max_px;
            if (q.min_pixels > q.max_pixels)
                st = lm_fail(err, LM_ERR_FORMAT, "%s: the pixel budget's minimum %lld is above its maximum %lld",
                             path, (long long)q.min_pixels, (long long)q.max_pixels);
        }
    }
    cJSON_Delete(root);
    if (st == LM_OK) *p = q;
    return st;
}

uint64_t lm_image_processor_digest(const lm_image_processor *p) {
    /* FNV-1a over the fields that shape the patch rows (not over padding). */
    uint64_t h = 1469598103934665603ull;
#define MIX(v)                                                                 \
    do {                                                                       \
        const unsigned char *b_ = (const unsigned char *)&(v);                 \
        for (size_t i_ = 0; i_ < sizeof(v); i_++) h = (h ^ b_[i_]) * 1099511628211ull; \
    } while (0)
    int rule = (int)p->rule;
    MIX(rule);
    MIX(p->patch_size);
    MIX(p->temporal_patch_size);
    MIX(p->merge_size);
    MIX(p->min_pixels);
    MIX(p->max_pixels);
    MIX(p->mean);
    MIX(p->std);
    MIX(p->rescale_factor);
    MIX(p->pixel_cap);
#undef MIX
    return h;
}

/* ---- smart resize (model-spec §D.2 step 2, §E.4) ---- */

/* Python's round() of a float: half to even, which nearbyint does in the
 * default rounding mode (C's round() goes half away from zero: trap H.14). */
static double round_half_even(double x) { return nearbyint(x); }

static lm_status check_settings(const lm_image_processor *p, lm_error *err) {
    if (p->patch_size < 1 || p->patch_size > 1024 || p->merge_size < 1 || p->merge_size > 16 ||
        p->temporal_patch_size < 1 || p->temporal_patch_size > 16)
        return lm_fail(err, LM_ERR_INVALID, "image processor: patch %d, merge %d, temporal patch %d out of range",
                       p->patch_size, p->merge_size, p->temporal_patch_size);
    if (p->min_pixels < 1 || p->max_pixels < p->min_pixels || p->pixel_cap < 0)
        return lm_fail(err, LM_ERR_INVALID, "image processor: pixel budget %lld..%lld (cap %lld) out of range",
                       (long long)p->min_pixels, (long long)p->max_pixels, (long long)p->pixel_cap);
    if (!(p->rescale_factor > 0.0) || !(p->rescale_factor <= 1.0))
        return lm_fail(err, LM_ERR_INVALID, "image processor: rescale factor %g out of range", p->rescale_factor);
    for (int c = 0; c < 3; c++)
        if (!(p->std[c] > 0.0f) || !isfinite(p->mean[c]) || !isfinite(p->std[c]))
            return lm_fail(err, LM_ERR_INVALID, "image processor: mean/std of channel %d out of range", c);
    return LM_OK;
}

lm_status lm_smart_resize(const lm_image_processor *p, int height, int width, int *out_height,
                          int *out_width, lm_error *err) {
    *out_height = *out_width = 0;
    lm_status st = check_settings(p, err);
    if (st != LM_OK) return st;
    if (height < 1 || width < 1 || height > (1 << 20) || width > (1 << 20))
        return lm_fail(err, LM_ERR_INVALID, "image: size %d x %d is empty or over 2^20 on a side", width,
                       height);
    const int64_t factor = (int64_t)p->patch_size * p->merge_size;
    int64_t max_pixels = p->max_pixels;
    if (p->pixel_cap > 0 && p->pixel_cap < max_pixels) max_pixels = p->pixel_cap;
    int64_t min_pixels = p->min_pixels < max_pixels ? p->min_pixels : max_pixels;
    /* the frames one image counts as in the budget: 1 for Qwen2-VL's rule,
     * temporal_patch_size (rounded to a multiple of itself: itself) for GLM's */
    int64_t frames = 1;
    double h = height, w = width;
    if (p->rule == LM_SMART_RESIZE_GLM4V) {
        frames = p->temporal_patch_size;
        if (height < factor || width < factor) {
            double scale = fmax((double)factor / height, (double)factor / width);
            h = trunc(height * scale); /* Python's int() */
            w = trunc(width * scale);
            if (!(h >= 1 && w >= 1 && h <= INT32_MAX && w <= INT32_MAX))
                return lm_fail(err, LM_ERR_INVALID, "image: size %d x %d cannot be scaled up", width, height);
        }
    }
    if (fmax(h, w) / fmin(h, w) > 200)
        return lm_fail(err, LM_ERR_INVALID,
                       "image: %d x %d has an aspect ratio over 200 (the processor refuses it)", width, height);
    double hb = (double)factor * round_half_even(h / (double)factor);
    double wb = (double)factor * round_half_even(w / (double)factor);
    /* sides up to 2^20 (x 28 when GLM scales them up): every product below
     * is exact in double, as Python's integers are */
    double area = h * w * (double)frames;
    if (hb * wb * (double)frames > (double)max_pixels) {
        double beta = sqrt(area / (double)max_pixels);
        hb = fmax((double)factor, (double)factor * floor(h / beta / (double)factor));
        wb = fmax((double)factor, (double)factor * floor(w / beta / (double)factor));
    } else if (hb * wb * (double)frames < (double)min_pixels) {
        double beta = sqrt((double)min_pixels / area);
        hb = (double)factor * ceil(h * beta / (double)factor);
        wb = (double)factor * ceil(w * beta / (double)factor);
    }
    /* loom's own cap is a bound: where the upscaling rule overshot it,
     * resize down to it instead (as an image over max_pixels would be) */
    const double cap = (double)p->pixel_cap, f = (double)factor;
    if (p->pixel_cap > 0 && hb * wb * (double)frames > cap) {
        double beta = sqrt(area / cap);
        hb = fmax(f, f * floor(h / beta / f));
        wb = fmax(f, f * floor(w / beta / f));
        /* a side held at the factor (a very long, thin image) leaves the
         * other to give way */
        if (hb * wb * (double)frames > cap && hb == f) wb = fmax(f, f * floor(cap / ((double)frames * f) / f));
        if (hb * wb * (double)frames > cap && wb == f) hb = fmax(f, f * floor(cap / ((double)frames * f) / f));
    }
    if (!(hb >= (double)factor && wb >= (double)factor && hb <= (double)(1 << 20) && wb <= (double)(1 << 20)))
        return lm_fail(err, LM_ERR_INVALID, "image: %d x %d resizes to %.0f x %.0f, out of range", width, height,
                       wb, hb);
    *out_height = (int)hb;
    *out_width = (int)wb;
    return LM_OK;
}

/* ---- normalisation and patch rows (§D.2 steps 4-5) ---- */

lm_status lm_image_patchify(const lm_image_processor *p, const lm_image_rgb *resized,
                            lm_image_patches *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    lm_status st = check_settings(p, err);
    if (st != LM_OK) return st;
    const int ps = p->patch_size, m = p->merge_size, tp = p->temporal_patch_size;
    const int W = resized->width, H = resized->height;
    if (!resized->rgb || W < 1 || H < 1 || W % (ps * m) != 0 || H % (ps * m) != 0)
        return lm_fail(err, LM_ERR_INVALID, "image: %d x %d is not a multiple of %d on each side", W, H,
                       ps * m);
    const int gh = H / ps, gw = W / ps;
    const int64_t n_patches = (int64_t)gh * gw, patch_dim = 3LL * tp * ps * ps;
    if (n_patches > INT32_MAX || (uint64_t)n_patches * (uint64_t)patch_dim > ((uint64_t)1 << 34))
        return lm_fail(err, LM_ERR_INVALID, "image: %lld patches of %lld values is too many",
                       (long long)n_patches, (long long)patch_dim);
    size_t n_values = (size_t)n_patches * (size_t)patch_dim;
    float *pixels = malloc(n_values * sizeof *pixels);
    if (!pixels) return lm_fail(err, LM_ERR_NOMEM, "image: out of memory (%zu patch values)", n_values);

    /* transformers' torchvision backend fuses rescale and normalise into
     * (x - mean / rescale) / (std / rescale) in float32, mean and std
     * being float32 tensors scaled by the float32 of 1 / rescale_factor */
    float table[3][256];
    const float inv = (float)(1.0 / p->rescale_factor);
    for (int c = 0; c < 3; c++) {
        float mean = p->mean[c] * inv, std = p->std[c] * inv;
        for (int v = 0; v < 256; v++) table[c][v] = ((float)v - mean) / std;
    }
    /* rows in merge-block order: blocks of m x m patches in raster order,
     * raster order inside a block; inside a row (c, t, y, x), the one frame
     * standing for all tp of the temporal patch */
    float *row = pixels;
    for (int br = 0; br < gh / m; br++)
        for (int bc = 0; bc < gw / m; bc++)
            for (int ir = 0; ir < m; ir++)
                for (int ic = 0; ic < m; ic++) {
                    const int y0 = (br * m + ir) * ps, x0 = (bc * m + ic) * ps;
                    for (int c = 0; c < 3; c++) {
                        float *plane = row;
                        for (int y = 0; y < ps; y++) {
                            const uint8_t *src = resized->rgb + ((size_t)(y0 + y) * W + (size_t)x0) * 3 + c;
                            for (int x = 0; x < ps; x++) *row++ = table[c][src[3 * x]];
                        }
                        for (int t = 1; t < tp; t++, row += ps * ps)
                            memcpy(row, plane, sizeof *row * (size_t)ps * ps);
                    }
                }
    *out = (lm_image_patches){.grid_t = 1, .grid_h = gh, .grid_w = gw, .merge_size = m,
                              .n_patches = (int)n_patches, .patch_dim = (int)patch_dim, .pixels = pixels};
    return LM_OK;
}

lm_status lm_image_preprocess(const lm_image_processor *p, const lm_image_rgb *image,
                              lm_image_patches *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    if (!image || !image->rgb) return lm_fail(err, LM_ERR_INVALID, "image: none given");
    int height, width;
    lm_status st = lm_smart_resize(p, image->height, image->width, &height, &width, err);
    if (st != LM_OK) return st;
    if (height == image->height && width == image->width) return lm_image_patchify(p, image, out, err);
    lm_image_rgb resized;
    if ((st = lm_image_resize_bicubic(image, height, width, &resized, err)) != LM_OK) return st;
    st = lm_image_patchify(p, &resized, out, err);
    lm_image_rgb_free(&resized);
    return st;
}

void lm_image_patches_free(lm_image_patches *p) {
    if (!p) return;
    free(p->pixels);
    memset(p, 0, sizeof *p);
}
