/* Antialiased bicubic resampling of 8-bit RGB, as torchvision's uint8 path
 * (aten's _upsample_bicubic2d_aa, itself a port of PIL's Resample.c) and
 * PIL compute it:
 *
 *   - separable: a horizontal pass (when the width changes) into uint8
 *     rows, then a vertical pass (when the height changes), each output
 *     rounded and clamped to 0..255;
 *   - output sample i of a side scaled by s = in/out is centred at
 *     s (i + 0.5); the filter (Keys' cubic, a = -0.5) is stretched by
 *     max(s, 1), so its support is 2 max(s, 1) input samples each way; the
 *     taps are the inputs [trunc(c - support + 0.5), trunc(c + support + 0.5))
 *     clipped to the side, weighted filter((j - c + 0.5) / max(s, 1)) and
 *     normalised to sum 1 (in double);
 *   - the weights are then fixed point: PIL uses 22 fraction bits in int32,
 *     torchvision int16 with as many bits (at most 22) as keep the largest
 *     weight of the side below 2^15.  That precision is the only
 *     difference between the two, and what makes them differ by a unit in
 *     some bytes.
 *
 * Each pass accumulates pixel * weight plus half a unit of the precision
 * and shifts back. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_processor.h"
#include "image/image_resample.h"

typedef struct {
    int out_size, ksize, precision;
    int *first, *count; /* per output sample: first input sample and number of taps */
    int32_t *weight;    /* [out_size][ksize] fixed point */
} taps;

static void taps_free(taps *t) {
    free(t->first);
    free(t->count);
    free(t->weight);
    memset(t, 0, sizeof *t);
}

static double keys_cubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

static int32_t to_fixed(double w, int precision) {
    double scaled = w * (double)(1 << precision);
    return (int32_t)(scaled < 0 ? scaled - 0.5 : scaled + 0.5);
}

static lm_status make_taps(int in_size, int out_size, lm_resample_backend backend, taps *t,
                           lm_error *err) {
    memset(t, 0, sizeof *t);
    double scale = (double)in_size / (double)out_size;
    double stretch = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * stretch;
    int ksize = (int)ceil(support) * 2 + 1;
    size_t n = (size_t)out_size * (size_t)ksize;
    double *w = calloc(n, sizeof *w);
    t->first = malloc(sizeof *t->first * (size_t)out_size);
    t->count = malloc(sizeof *t->count * (size_t)out_size);
    t->weight = calloc(n, sizeof *t->weight);
    if (!w || !t->first || !t->count || !t->weight) {
        free(w);
        taps_free(t);
        return lm_fail(err, LM_ERR_NOMEM, "image resize: out of memory (%zu taps)", n);
    }
    t->out_size = out_size;
    t->ksize = ksize;
    double w_max = 0.0;
    for (int i = 0; i < out_size; i++) {
        double center = scale * (i + 0.5);
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in_size) hi = in_size;
        int count = hi - lo;
        if (count > ksize) count = ksize; /* cannot happen: support + 1 each way at most */
        double *k = w + (size_t)i * (size_t)ksize, total = 0.0;
        for (int j = 0; j < count; j++) {
            k[j] = keys_cubic((j + lo - center + 0.5) / stretch);
            total += k[j];
        }
        for (int j = 0; j < count; j++) {
            if (total != 0.0) k[j] /= total;
            if (k[j] > w_max) w_max = k[j];
        }
        t->first[i] = lo;
        t->count[i] = count < 0 ? 0 : count;
    }
    if (backend == LM_RESAMPLE_PIL) {
        t->precision = 22;
    } else {
        int p = 0;
        while (p < 22 && (int)(0.5 + w_max * (double)(1 << (p + 1))) < (1 << 15)) p++;
        t->precision = p;
    }
    for (size_t i = 0; i < n; i++) t->weight[i] = to_fixed(w[i], t->precision);
    free(w);
    return LM_OK;
}

static inline uint8_t settle(int64_t sum, int precision) {
    if (sum < 0) return 0;
    int64_t v = sum >> precision;
    return (uint8_t)(v > 255 ? 255 : v);
}

/* rows x in_w x 3 -> rows x t->out_size x 3 */
static void horizontal(const uint8_t *in, int rows, int in_w, const taps *t, uint8_t *out) {
    int64_t half = (int64_t)1 << t->precision >> 1;
    for (int y = 0; y < rows; y++) {
        const uint8_t *src = in + (size_t)y * (size_t)in_w * 3;
        uint8_t *dst = out + (size_t)y * (size_t)t->out_size * 3;
        for (int x = 0; x < t->out_size; x++) {
            const int32_t *k = t->weight + (size_t)x * (size_t)t->ksize;
            const uint8_t *p = src + (size_t)t->first[x] * 3;
            int64_t r = half, g = half, b = half;
            for (int j = 0; j < t->count[x]; j++) {
                r += (int64_t)p[3 * j] * k[j];
                g += (int64_t)p[3 * j + 1] * k[j];
                b += (int64_t)p[3 * j + 2] * k[j];
            }
            dst[3 * x] = settle(r, t->precision);
            dst[3 * x + 1] = settle(g, t->precision);
            dst[3 * x + 2] = settle(b, t->precision);
        }
    }
}

/* in_h x width x 3 -> t->out_size x width x 3, a row of sums at a time
 * (acc: width x 3) */
static void vertical(const uint8_t *in, int width, const taps *t, int64_t *acc, uint8_t *out) {
    int64_t half = (int64_t)1 << t->precision >> 1;
    size_t stride = (size_t)width * 3;
    for (int y = 0; y < t->out_size; y++) {
        const int32_t *k = t->weight + (size_t)y * (size_t)t->ksize;
        for (size_t i = 0; i < stride; i++) acc[i] = half;
        for (int j = 0; j < t->count[y]; j++) {
            const uint8_t *src = in + (size_t)(t->first[y] + j) * stride;
            for (size_t i = 0; i < stride; i++) acc[i] += (int64_t)src[i] * k[j];
        }
        uint8_t *dst = out + (size_t)y * stride;
        for (size_t i = 0; i < stride; i++) dst[i] = settle(acc[i], t->precision);
    }
}

lm_status lm_image_resize_bicubic_with(const lm_image_rgb *in, int out_height, int out_width,
                                       lm_resample_backend backend, lm_image_rgb *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    const int max_side = 1 << 20;
    if (!in || !in->rgb || in->width <= 0 || in->height <= 0 || in->width > max_side ||
        in->height > max_side)
        return lm_fail(err, LM_ERR_INVALID, "image resize: no input image, or one over 2^20 on a side");
    if (out_height <= 0 || out_width <= 0 || out_height > max_side || out_width > max_side ||
        (int64_t)out_height * out_width > ((int64_t)1 << 31))
        return lm_fail(err, LM_ERR_INVALID, "image resize: output size %d x %d out of range",
                       out_width, out_height);
    size_t out_bytes = (size_t)out_height * (size_t)out_width * 3;
    uint8_t *result = malloc(out_bytes);
    if (!result) return lm_fail(err, LM_ERR_NOMEM, "image resize: out of memory (%zu bytes)", out_bytes);
    bool need_h = out_width != in->width, need_v = out_height != in->height;
    if (!need_h && !need_v) {
        memcpy(result, in->rgb, out_bytes);
        *out = (lm_image_rgb){out_width, out_height, result};
        return LM_OK;
    }
    taps th = {0}, tv = {0};
    uint8_t *middle = NULL;
    int64_t *acc = NULL;
    lm_status st = LM_OK;
    if (need_h && (st = make_taps(in->width, out_width, backend, &th, err)) != LM_OK) goto done;
    if (need_v && (st = make_taps(in->height, out_height, backend, &tv, err)) != LM_OK) goto done;
    const uint8_t *rows = in->rgb;
    if (need_h) {
        uint8_t *target = result;
        if (need_v) {
            size_t bytes = (size_t)in->height * (size_t)out_width * 3;
            if (!(middle = malloc(bytes))) {
                st = lm_fail(err, LM_ERR_NOMEM, "image resize: out of memory (%zu bytes)", bytes);
                goto done;
            }
            target = middle;
        }
        horizontal(in->rgb, in->height, in->width, &th, target);
        rows = target;
    }
    if (need_v) {
        if (!(acc = malloc(sizeof *acc * (size_t)out_width * 3))) {
            st = lm_fail(err, LM_ERR_NOMEM, "image resize: out of memory");
            goto done;
        }
        vertical(rows, out_width, &tv, acc, result);
    }
done:
    free(acc);
    taps_free(&th);
    taps_free(&tv);
    free(middle);
    if (st != LM_OK) {
        free(result);
        return st;
    }
    *out = (lm_image_rgb){out_width, out_height, result};
    return LM_OK;
}

lm_status lm_image_resize_bicubic(const lm_image_rgb *in, int out_height, int out_width,
                                  lm_image_rgb *out, lm_error *err) {
    return lm_image_resize_bicubic_with(in, out_height, out_width, LM_RESAMPLE_TORCHVISION, out, err);
}
