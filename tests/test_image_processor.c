/* image/image_processor: smart resize (both rules, the spec's worked
 * numbers, half-even rounding, the pixel cap), the resampler against
 * transformers' two backends on every case of fixtures/preprocess
 * (byte-exact with torchvision's, and with PIL's through its precision;
 * the distance between them printed), pixel_values of the fixtures and of
 * the model fixtures' image0.png, the patch row order, and
 * preprocessor_config.json refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "io/image_decode.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "image/image_processor.h"
#include "image/image_resample.h"

static const char *test_data_path(char *buf, size_t size, const char *relative) {
    const char *data = getenv("LOOM_TEST_DATA");
    snprintf(buf, size, "%s/%s", data && *data ? data : "tests/data", relative);
    return buf;
}

static lm_image_processor processor(lm_smart_resize_rule rule) {
    lm_image_processor p;
    lm_image_processor_defaults(rule, &p);
    return p;
}

/* ---- smart resize: the spec's numbers (model-spec Appendix 1) ---- */

static bool resizes_to(const lm_image_processor *p, int h, int w, int want_h, int want_w) {
    lm_error err = {0};
    int rh = -1, rw = -1;
    if (lm_smart_resize(p, h, w, &rh, &rw, &err) != LM_OK) {
        fprintf(stderr, "  %d x %d (h x w): %s\n", h, w, err.message);
        return false;
    }
    if (rh != want_h || rw != want_w)
        fprintf(stderr, "  %d x %d (h x w) resized to %d x %d, not %d x %d\n", h, w, rh, rw, want_h, want_w);
    return rh == want_h && rw == want_w;
}

static void test_smart_resize_worked_numbers(void) {
    lm_image_processor q = processor(LM_SMART_RESIZE_QWEN2VL), g = processor(LM_SMART_RESIZE_GLM4V);
    /* 640 x 480 (w x h) stays, grid (1, 30, 40), 300 tokens */
    CHECK(resizes_to(&q, 480, 640, 480, 640));
    /* 300 x 200 -> 320 x 224, upscaled (192 x 288 < 65536): grid (1, 14, 20), 70 tokens */
    CHECK(resizes_to(&q, 200, 300, 224, 320));
    /* half-even: 80 / 32 = 2.5 -> 2 -> 64 (C's round() would give 96);
     * 48 / 32 = 1.5 -> 2, 112 / 32 = 3.5 -> 4 (width 1024 keeps the budget) */
    CHECK(resizes_to(&q, 80, 1024, 64, 1024));
    CHECK(resizes_to(&q, 48, 1024, 64, 1024));
    CHECK(resizes_to(&q, 112, 1024, 128, 1024));
    /* GLM: 640 x 480 -> 644 x 476, grid (1, 34, 46), 391 tokens */
    CHECK(resizes_to(&g, 480, 640, 476, 644));
    /* GLM scales sides under 28 up first: 10 x 10 -> 28 x 28, then the
     * budget (2 frames x 784 < 12544): beta = sqrt(8), 28 ceil(2.83) = 84 */
    CHECK(resizes_to(&g, 10, 10, 84, 84));
    /* GLM counts the 2 frames: one pixel less than 2 x 476 x 644 and it
     * shrinks (beta = sqrt(2 x 480 x 640 / 613087): 28 floor(17.12) = 476,
     * 28 floor(22.83) = 616) */
    lm_image_processor small = g;
    small.min_pixels = 1;
    small.max_pixels = 2 * 476 * 644 - 1;
    CHECK(resizes_to(&small, 480, 640, 476, 616));
    small.max_pixels = 2 * 476 * 644;
    CHECK(resizes_to(&small, 480, 640, 476, 644));
    lm_error err = {0};

    /* the grids and token counts of the worked numbers, through patchify */
    int cases[3][4] = {{480, 640, 30, 40}, {224, 320, 14, 20}, {476, 644, 34, 46}};
    int tokens[3] = {300, 70, 391};
    for (int i = 0; i < 3; i++) {
        lm_image_processor *p = i == 2 ? &g : &q;
        lm_image_rgb img = {cases[i][1], cases[i][0], calloc((size_t)cases[i][0] * cases[i][1] * 3, 1)};
        lm_image_patches patches;
        lm_status st = lm_image_patchify(p, &img, &patches, &err);
        free(img.rgb);
        CHECK_OK(st, &err);
        bool ok = patches.grid_t == 1 && patches.grid_h == cases[i][2] && patches.grid_w == cases[i][3] &&
                  lm_image_tokens(&patches) == tokens[i] &&
                  patches.patch_dim == 3 * 2 * p->patch_size * p->patch_size;
        lm_image_patches_free(&patches);
        CHECK_MSG(ok, "worked case %d: grid or tokens wrong", i);
    }
}

static void test_smart_resize_cap_and_refusals(void) {
    lm_image_processor q = processor(LM_SMART_RESIZE_QWEN2VL);
    lm_error err = {0};
    int h, w;
    /* a cap under the image: resized down like an image over max_pixels */
    q.pixel_cap = 100000;
    CHECK(resizes_to(&q, 480, 640, 256, 352));
    /* a cap over max_pixels changes nothing */
    q.pixel_cap = (int64_t)1 << 40;
    CHECK(resizes_to(&q, 480, 640, 480, 640));
    /* a cap under min_pixels: the cap wins, even where the upscaling rule
     * would overshoot it (100 x 100 up to 160 x 160 > 20000, so down
     * again: beta = sqrt(1/2), 32 floor(4.42) = 128) */
    q.pixel_cap = 20000;
    CHECK(resizes_to(&q, 100, 100, 128, 128));
    /* a long thin image whose short side is held at 32: the long side gives
     * way (transformers' rule alone would give 32 x 3616 = 115712) */
    q.pixel_cap = 65536;
    CHECK(resizes_to(&q, 1, 200, 32, 2048));
    /* the cap holds for any shape, frames counted for GLM */
    for (int rule = 0; rule < 2; rule++) {
        lm_image_processor p = processor(rule ? LM_SMART_RESIZE_GLM4V : LM_SMART_RESIZE_QWEN2VL);
        p.pixel_cap = 65536;
        int frames = rule ? p.temporal_patch_size : 1;
        for (int a = 1; a < 6000; a = a * 3 + 1)
            for (int b = 1; b < 6000; b = b * 5 + 2) {
                if (lm_smart_resize(&p, a, b, &h, &w, &err) != LM_OK) continue; /* aspect ratio */
                CHECK_MSG((int64_t)frames * h * w <= p.pixel_cap, "rule %d, %d x %d -> %d x %d over the cap", rule,
                          a, b, h, w);
            }
    }
    q.pixel_cap = 0;
    /* aspect ratio over 200 */
    CHECK(lm_smart_resize(&q, 1, 201, &h, &w, &err) == LM_ERR_INVALID && strstr(err.message, "200"));
    CHECK(resizes_to(&q, 1, 200, 32, 3648));
    lm_image_processor g = processor(LM_SMART_RESIZE_GLM4V);
    CHECK(lm_smart_resize(&g, 300, 1, &h, &w, &err) == LM_ERR_INVALID);
    /* empty, negative, absurd */
    CHECK(lm_smart_resize(&q, 0, 10, &h, &w, &err) == LM_ERR_INVALID && h == 0 && w == 0);
    CHECK(lm_smart_resize(&q, 10, -1, &h, &w, &err) == LM_ERR_INVALID);
    CHECK(lm_smart_resize(&q, 1 << 21, 1 << 21, &h, &w, &err) == LM_ERR_INVALID);
    lm_image_processor bad = q;
    bad.patch_size = 0;
    CHECK(lm_smart_resize(&bad, 100, 100, &h, &w, &err) == LM_ERR_INVALID);
    /* preprocess refuses what smart resize refuses */
    lm_image_rgb thin = {300, 1, calloc(900, 1)};
    lm_image_patches patches = {0};
    lm_status st = lm_image_preprocess(&q, &thin, &patches, &err);
    free(thin.rgb);
    CHECK(st == LM_ERR_INVALID && patches.pixels == NULL);
}

/* ---- the fixtures' cases ---- */

typedef struct {
    size_t differ;
    int max;
} diff_stats;

static diff_stats compare_bytes(const uint8_t *a, const uint8_t *b, size_t n) {
    diff_stats s = {0, 0};
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        s.differ += d != 0;
        if (d > s.max) s.max = d;
    }
    return s;
}

static const lm_tensor *find_u8_image(const lm_safetensors *ref, const char *name, int h, int w) {
    const lm_tensor *t = lm_safetensors_find(ref, name);
    if (!t || t->dtype != LM_DTYPE_U8 || t->n_dims != 3 || t->shape[0] != h || t->shape[1] != w || t->shape[2] != 3)
        return NULL;
    return t;
}

static bool settings_from_cases(const cJSON *settings, const char *name, lm_image_processor *p) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(settings, name);
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(s, "size");
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(s, "patch_size");
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(s, "temporal_patch_size");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(s, "merge_size");
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(size, "shortest_edge");
    const cJSON *hi = cJSON_GetObjectItemCaseSensitive(size, "longest_edge");
    if (!cJSON_IsNumber(ps) || !cJSON_IsNumber(tp) || !cJSON_IsNumber(m) || !cJSON_IsNumber(lo) || !cJSON_IsNumber(hi))
        return false;
    lm_image_processor_defaults(strcmp(name, "glm4v") == 0 ? LM_SMART_RESIZE_GLM4V : LM_SMART_RESIZE_QWEN2VL, p);
    p->patch_size = ps->valueint;
    p->temporal_patch_size = tp->valueint;
    p->merge_size = m->valueint;
    p->min_pixels = (int64_t)lo->valuedouble;
    p->max_pixels = (int64_t)hi->valuedouble;
    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(s, "image_mean");
    const cJSON *std = cJSON_GetObjectItemCaseSensitive(s, "image_std");
    for (int c = 0; c < 3; c++) {
        if (mean) p->mean[c] = (float)cJSON_GetArrayItem(mean, c)->valuedouble;
        if (std) p->std[c] = (float)cJSON_GetArrayItem(std, c)->valuedouble;
    }
    return true;
}

typedef struct {
    int cases, exact_torchvision, exact_pil;
    size_t other_differ, other_bytes;
    int other_max;
} backend_tally;

/* One image, one processor: size, grid, resized bytes of both backends. */
static void check_case(const lm_safetensors *ref, const char *file, const lm_image_rgb *img, const char *proc,
                       const lm_image_processor *p, const cJSON *want, backend_tally *tally) {
    const cJSON *hw = cJSON_GetObjectItemCaseSensitive(want, "resized_hw");
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(want, "grid_thw");
    CHECK_MSG(cJSON_GetArraySize(hw) == 2 && cJSON_GetArraySize(grid) == 3, "%s %s: case incomplete", file, proc);
    int want_h = cJSON_GetArrayItem(hw, 0)->valueint, want_w = cJSON_GetArrayItem(hw, 1)->valueint;
    lm_error err = {0};
    int h, w;
    CHECK_OK(lm_smart_resize(p, img->height, img->width, &h, &w, &err), &err);
    CHECK_MSG(h == want_h && w == want_w, "%s %s: resized to %d x %d, transformers %d x %d", file, proc, h, w,
              want_h, want_w);
    int gh = h / p->patch_size, gw = w / p->patch_size;
    CHECK_MSG(cJSON_GetArrayItem(grid, 0)->valueint == 1 && cJSON_GetArrayItem(grid, 1)->valueint == gh &&
                  cJSON_GetArrayItem(grid, 2)->valueint == gw,
              "%s %s: grid (1, %d, %d) differs from cases.json", file, proc, gh, gw);
    char name[128];
    snprintf(name, sizeof name, "%s.%s.torchvision.grid_thw", file, proc);
    const lm_tensor *g = lm_safetensors_find(ref, name);
    CHECK_MSG(g && g->dtype == LM_DTYPE_I32 && g->n_elements == 3, "%s missing", name);
    const int32_t *gv = g->data;
    CHECK_MSG(gv[0] == 1 && gv[1] == gh && gv[2] == gw, "%s: (%d, %d, %d)", name, gv[0], gv[1], gv[2]);

    const lm_tensor *tv, *pil;
    snprintf(name, sizeof name, "%s.%s.torchvision.resized", file, proc);
    CHECK_MSG((tv = find_u8_image(ref, name, h, w)), "%s missing or not %d x %d x 3", name, h, w);
    snprintf(name, sizeof name, "%s.%s.pil.resized", file, proc);
    CHECK_MSG((pil = find_u8_image(ref, name, h, w)), "%s missing or not %d x %d x 3", name, h, w);
    lm_image_rgb mine, mine_pil;
    CHECK_OK(lm_image_resize_bicubic(img, h, w, &mine, &err), &err);
    lm_status st = lm_image_resize_bicubic_with(img, h, w, LM_RESAMPLE_PIL, &mine_pil, &err);
    if (st != LM_OK) lm_image_rgb_free(&mine);
    CHECK_OK(st, &err);
    size_t n = (size_t)h * w * 3;
    diff_stats same = compare_bytes(mine.rgb, tv->data, n), other = compare_bytes(mine.rgb, pil->data, n);
    diff_stats pil_same = compare_bytes(mine_pil.rgb, pil->data, n);
    lm_image_rgb_free(&mine);
    lm_image_rgb_free(&mine_pil);
    printf("  %s %-8s %3d x %3d: torchvision %zu bytes differ; PIL backend %zu of %zu differ (max %d); "
           "loom's PIL variant %zu differ\n",
           file, proc, h, w, same.differ, other.differ, n, other.max, pil_same.differ);
    tally->cases++;
    tally->exact_torchvision += same.differ == 0;
    tally->exact_pil += pil_same.differ == 0;
    tally->other_differ += other.differ;
    tally->other_bytes += n;
    if (other.max > tally->other_max) tally->other_max = other.max;
    CHECK_MSG(same.differ == 0, "%s %s: %zu bytes differ from the torchvision backend (max %d)", file, proc,
              same.differ, same.max);
    CHECK_MSG(other.max <= 2, "%s %s: %d from the PIL backend", file, proc, other.max);
    CHECK_MSG(pil_same.differ == 0, "%s %s: loom's PIL variant: %zu bytes differ from the PIL backend", file, proc,
              pil_same.differ);
}

static void test_fixture_cases(void) {
    char path[1024];
    lm_error err = {0};
    cJSON *cases = NULL;
    CHECK_OK(lm_json_read_file(test_fixture_path(path, sizeof path, "preprocess/cases.json"), 1 << 20, &cases, &err),
             &err);
    lm_safetensors *ref = NULL;
    lm_status st = lm_safetensors_open(test_fixture_path(path, sizeof path, "preprocess/reference.safetensors"),
                                       LM_LOAD_READ, &ref, &err);
    if (st != LM_OK) cJSON_Delete(cases);
    CHECK_OK(st, &err);
    const cJSON *settings = cJSON_GetObjectItemCaseSensitive(cases, "settings");
    lm_image_processor qwen, glm;
    bool have_settings = settings_from_cases(settings, "qwen3_5", &qwen) && settings_from_cases(settings, "glm4v", &glm);
    /* the released settings are the defaults */
    lm_image_processor qd = processor(LM_SMART_RESIZE_QWEN2VL), gd = processor(LM_SMART_RESIZE_GLM4V);
    bool defaults = have_settings && lm_image_processor_digest(&qwen) == lm_image_processor_digest(&qd) &&
                    lm_image_processor_digest(&glm) == lm_image_processor_digest(&gd);
    backend_tally tally = {0};
    int n_images = 0, n_checked = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(cases, "cases")) {
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(c, "file");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(c, "size_wh");
        if (!cJSON_IsString(file) || cJSON_GetArraySize(size) != 2) continue;
        char relative[128];
        snprintf(relative, sizeof relative, "preprocess/%s", file->valuestring);
        lm_image_rgb img;
        if (lm_image_decode_file(test_fixture_path(path, sizeof path, relative), NULL, &img, &err) != LM_OK) {
            test_failed(__FILE__, __LINE__, "%s", err.message);
            continue;
        }
        n_images++;
        if (img.width != cJSON_GetArrayItem(size, 0)->valueint || img.height != cJSON_GetArrayItem(size, 1)->valueint)
            test_failed(__FILE__, __LINE__, "%s: %d x %d, cases.json says otherwise", file->valuestring, img.width,
                        img.height);
        const cJSON *proc;
        cJSON_ArrayForEach(proc, cJSON_GetObjectItemCaseSensitive(c, "processors")) {
            /* "qwen3_5.torchvision" and "qwen3_5.pil" describe one resize;
             * both backends' bytes are checked once, under the torchvision key */
            const char *key = proc->string;
            const char *dot = strchr(key, '.');
            if (!dot || strcmp(dot, ".torchvision") != 0) continue;
            bool is_glm = strncmp(key, "glm4v", (size_t)(dot - key)) == 0;
            char proc_name[32];
            snprintf(proc_name, sizeof proc_name, "%.*s", (int)(dot - key), key);
            check_case(ref, file->valuestring, &img, proc_name, is_glm ? &glm : &qwen, proc, &tally);
            n_checked++;
        }
        lm_image_rgb_free(&img);
    }
    printf("  %d cases: torchvision exact in %d, loom's PIL variant exact in %d; loom vs the PIL backend: %zu of %zu "
           "bytes differ (%.3f%%), by at most %d\n",
           tally.cases, tally.exact_torchvision, tally.exact_pil, tally.other_differ, tally.other_bytes,
           tally.other_bytes ? 100.0 * (double)tally.other_differ / (double)tally.other_bytes : 0.0, tally.other_max);
    lm_safetensors_close(ref);
    cJSON_Delete(cases);
    CHECK_MSG(have_settings && defaults, "cases.json settings unread, or not the defaults");
    CHECK(n_images == 4 && n_checked == 8);
}

/* ---- pixel values ---- */

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) worst = d; /* NaN sticks */
    }
    return worst;
}

/* Preprocesses image with p and compares with `prefix.pixel_values` and
 * `prefix.grid_thw` of ref. */
static void check_pixel_values(const lm_image_processor *p, const char *image_path, const char *ref_path,
                               const char *prefix) {
    lm_error err = {0};
    lm_image_rgb img;
    CHECK_OK(lm_image_decode_file(image_path, NULL, &img, &err), &err);
    lm_image_patches patches;
    lm_status st = lm_image_preprocess(p, &img, &patches, &err);
    lm_image_rgb_free(&img);
    CHECK_OK(st, &err);
    lm_safetensors *ref = NULL;
    if ((st = lm_safetensors_open(ref_path, LM_LOAD_READ, &ref, &err)) != LM_OK) lm_image_patches_free(&patches);
    CHECK_OK(st, &err);
    char name[128];
    snprintf(name, sizeof name, "%s.pixel_values", prefix);
    const lm_tensor *pv = lm_safetensors_find(ref, name);
    snprintf(name, sizeof name, "%s.grid_thw", prefix);
    const lm_tensor *grid = lm_safetensors_find(ref, name);
    bool shape = pv && pv->dtype == LM_DTYPE_F32 && pv->n_dims == 2 && pv->shape[0] == patches.n_patches &&
                 pv->shape[1] == patches.patch_dim;
    const int32_t *g = grid && grid->dtype == LM_DTYPE_I32 && grid->n_elements == 3 ? grid->data : NULL;
    bool grid_ok = g && g[0] == patches.grid_t && g[1] == patches.grid_h && g[2] == patches.grid_w;
    double worst = shape ? max_abs_diff(patches.pixels, pv->data, (size_t)pv->n_elements) : INFINITY;
    size_t bit_differ = 0;
    if (shape)
        for (int64_t i = 0; i < pv->n_elements; i++)
            bit_differ += memcmp(&patches.pixels[i], (const float *)pv->data + i, sizeof(float)) != 0;
    printf("  %s (%s): %d x %d patch values, grid (%d, %d, %d): max |diff| %.3g, %zu not bit-identical\n", prefix,
           ref_path, patches.n_patches, patches.patch_dim, patches.grid_t, patches.grid_h, patches.grid_w, worst,
           bit_differ);
    lm_image_patches_free(&patches);
    lm_safetensors_close(ref);
    CHECK_MSG(shape, "%s: pixel_values missing or of another shape", prefix);
    CHECK_MSG(grid_ok, "%s: grid_thw differs", prefix);
    CHECK_MSG(worst <= 1e-6, "%s: pixel values off by %g", prefix, worst);
}

static void test_pixel_values_of_the_preprocess_fixture(void) {
    char image[1024], ref[1024];
    test_fixture_path(image, sizeof image, "preprocess/a.png");
    test_fixture_path(ref, sizeof ref, "preprocess/reference.safetensors");
    lm_image_processor q = processor(LM_SMART_RESIZE_QWEN2VL), g = processor(LM_SMART_RESIZE_GLM4V);
    check_pixel_values(&q, image, ref, "a.png.qwen3_5.torchvision");
    check_pixel_values(&g, image, ref, "a.png.glm4v.torchvision");
}

static void check_model_fixture(const char *dir, lm_smart_resize_rule rule) {
    lm_image_processor p = processor(rule);
    lm_error err = {0};
    CHECK_OK(lm_image_processor_read(dir, &p, &err), &err);
    CHECK_MSG(p.patch_size == 4 && p.min_pixels == 64 && p.max_pixels == 4096, "%s: preprocessor_config.json unread",
              dir);
    char image[1200], ref[1200];
    snprintf(image, sizeof image, "%s/image0.png", dir);
    snprintf(ref, sizeof ref, "%s/reference.safetensors", dir);
    check_pixel_values(&p, image, ref, "img0");
}

static void test_pixel_values_of_the_model_fixtures(void) {
    char dir[1024];
    check_model_fixture(test_fixture_path(dir, sizeof dir, "models/qwen35-dense"), LM_SMART_RESIZE_QWEN2VL);
    if (test_current_failed()) return;
    check_model_fixture(test_fixture_path(dir, sizeof dir, "models/glm46v-moe"), LM_SMART_RESIZE_GLM4V);
    if (test_current_failed()) return;
    check_model_fixture(test_data_path(dir, sizeof dir, "glm-shapes/groups4-top4-hd16"), LM_SMART_RESIZE_GLM4V);
}

/* ---- patch rows ---- */

static void test_patch_rows_in_merge_block_order(void) {
    /* patch 2, merge 2, 3 frames of temporal patch; a 8 x 12 (w x h) image
     * whose bytes say where they are; rescale 1/255, mean 0, std 1, so
     * each value is its byte / 255 */
    lm_image_processor p = processor(LM_SMART_RESIZE_QWEN2VL);
    p.patch_size = 2, p.merge_size = 2, p.temporal_patch_size = 3;
    for (int c = 0; c < 3; c++) p.mean[c] = 0.0f, p.std[c] = 1.0f;
    enum { W = 8, H = 12, P = 2, M = 2, T = 3 };
    lm_image_rgb img = {W, H, malloc(W * H * 3)};
    CHECK(img.rgb);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) img.rgb[(y * W + x) * 3 + c] = (uint8_t)(c * 100 + y * W + x);
    lm_error err = {0};
    lm_image_patches got;
    lm_status st = lm_image_patchify(&p, &img, &got, &err);
    CHECK_OK(st, &err);
    CHECK(got.grid_t == 1 && got.grid_h == H / P && got.grid_w == W / P && got.n_patches == (H / P) * (W / P) &&
          got.patch_dim == 3 * T * P * P && lm_image_tokens(&got) == got.n_patches / 4);
    /* transformers: patches [gt, T, C, gh/M, M, P, gw/M, M, P] permuted to
     * (gt, gh/M, gw/M, M, M, C, T, P, P) and flattened */
    size_t i = 0, bad = 0;
    for (int bh = 0; bh < H / P / M; bh++)
        for (int bw = 0; bw < W / P / M; bw++)
            for (int mh = 0; mh < M; mh++)
                for (int mw = 0; mw < M; mw++)
                    for (int c = 0; c < 3; c++)
                        for (int t = 0; t < T; t++)
                            for (int py = 0; py < P; py++)
                                for (int px = 0; px < P; px++, i++) {
                                    int y = (bh * M + mh) * P + py, x = (bw * M + mw) * P + px;
                                    float want = (float)img.rgb[(y * W + x) * 3 + c] / 255.0f;
                                    bad += got.pixels[i] != want;
                                }
    bool all = i == (size_t)got.n_patches * got.patch_dim;
    lm_image_patches_free(&got);
    /* not a multiple of patch x merge */
    lm_image_rgb odd = {W - 2, H, img.rgb};
    st = lm_image_patchify(&p, &odd, &got, &err);
    free(img.rgb);
    CHECK(all && bad == 0);
    CHECK(st == LM_ERR_INVALID && got.pixels == NULL);
}

static void test_resize_edges(void) {
    lm_error err = {0};
    uint8_t px[3 * 6] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180};
    lm_image_rgb in = {3, 2, px}, out;
    /* same size: a copy */
    CHECK_OK(lm_image_resize_bicubic(&in, 2, 3, &out, &err), &err);
    bool copy = out.width == 3 && out.height == 2 && memcmp(out.rgb, px, sizeof px) == 0;
    lm_image_rgb_free(&out);
    CHECK(copy);
    /* a constant image stays constant, up or down, one side or both */
    uint8_t flat[5 * 7 * 3];
    memset(flat, 201, sizeof flat);
    lm_image_rgb f = {7, 5, flat};
    int sizes[4][2] = {{5, 19}, {23, 7}, {2, 3}, {64, 1}};
    for (int s = 0; s < 4; s++) {
        for (int b = 0; b < 2; b++) {
            CHECK_OK(lm_image_resize_bicubic_with(&f, sizes[s][0], sizes[s][1], (lm_resample_backend)b, &out, &err),
                     &err);
            size_t off = 0;
            for (size_t i = 0; i < (size_t)out.width * out.height * 3; i++) off += out.rgb[i] != 201;
            lm_image_rgb_free(&out);
            CHECK_MSG(off == 0, "constant image resized to %d x %d: %zu bytes moved", sizes[s][1], sizes[s][0], off);
        }
    }
    /* refusals */
    CHECK(lm_image_resize_bicubic(&in, 0, 3, &out, &err) == LM_ERR_INVALID && out.rgb == NULL);
    CHECK(lm_image_resize_bicubic(&in, 3, -2, &out, &err) == LM_ERR_INVALID);
    lm_image_rgb none = {0, 0, NULL};
    CHECK(lm_image_resize_bicubic(&none, 3, 3, &out, &err) == LM_ERR_INVALID);
}

/* ---- preprocessor_config.json ---- */

static lm_status read_config(const char *text, lm_image_processor *p, lm_error *err) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/config", test_scratch_dir());
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return lm_fail(err, LM_ERR_IO, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    lm_image_processor_defaults(LM_SMART_RESIZE_QWEN2VL, p);
    return lm_image_processor_read(dir, p, err);
}

static void test_processor_read(void) {
    lm_error err = {0};
    lm_image_processor p, defaults = processor(LM_SMART_RESIZE_QWEN2VL);
    /* no file: the defaults stand */
    p = defaults;
    CHECK_OK(lm_image_processor_read("/nonexistent/loom-model", &p, &err), &err);
    CHECK(lm_image_processor_digest(&p) == lm_image_processor_digest(&defaults));
    /* fields read over the defaults; older top-level min/max_pixels win over size */
    CHECK_OK(read_config("{\"patch_size\": 14, \"merge_size\": 2, \"temporal_patch_size\": 2,"
                         " \"image_mean\": [0.1, 0.2, 0.3], \"image_std\": [1, 2, 3],"
                         " \"size\": {\"shortest_edge\": 100, \"longest_edge\": 10000}, \"max_pixels\": 9000}",
                         &p, &err),
             &err);
    CHECK(p.patch_size == 14 && p.min_pixels == 100 && p.max_pixels == 9000 && p.mean[1] == 0.2f && p.std[2] == 3.0f);
    CHECK(lm_image_processor_digest(&p) != lm_image_processor_digest(&defaults));
    /* refusals, each naming its field */
    static const struct {
        const char *json, *field;
    } bad[] = {
        {"{\"patch_size\": \"16\"}", "patch_size"},
        {"{\"patch_size\": 0}", "patch_size"},
        {"{\"merge_size\": 17}", "merge_size"},
        {"{\"temporal_patch_size\": -1}", "temporal_patch_size"},
        {"{\"rescale_factor\": 2}", "rescale_factor"},
        {"{\"image_mean\": [0.5, 0.5]}", "image_mean"},
        {"{\"image_mean\": \"gray\"}", "image_mean"},
        {"{\"image_std\": [0.5, 0, 0.5]}", "image_std"},
        {"{\"image_std\": [0.5, \"x\", 0.5]}", "image_std"},
        {"{\"size\": {\"shortest_edge\": 0}}", "shortest_edge"},
        {"{\"size\": {\"longest_edge\": 1.5}}", "longest_edge"},
        {"{\"size\": {\"shortest_edge\": 5000, \"longest_edge\": 100}}", "minimum"},
        {"{\"size\": 7}", "size"},
        {"{\"patch_size\": 16", "JSON"},
        {"[1, 2]", "object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lm_status st = read_config(bad[i].json, &p, &err);
        CHECK_MSG(st != LM_OK, "%s was taken", bad[i].json);
        CHECK_MSG(strstr(err.message, bad[i].field), "%s: the error (%s) does not name %s", bad[i].json, err.message,
                  bad[i].field);
        CHECK_MSG(lm_image_processor_digest(&p) == lm_image_processor_digest(&defaults),
                  "%s: a refused file changed the settings", bad[i].json);
    }
}

int main(void) {
    RUN_TEST(test_smart_resize_worked_numbers);
    RUN_TEST(test_smart_resize_cap_and_refusals);
    RUN_TEST(test_fixture_cases);
    RUN_TEST(test_pixel_values_of_the_preprocess_fixture);
    RUN_TEST(test_pixel_values_of_the_model_fixtures);
    RUN_TEST(test_patch_rows_in_merge_block_order);
    RUN_TEST(test_resize_edges);
    RUN_TEST(test_processor_read);
    return test_summary("test_image_processor");
}
