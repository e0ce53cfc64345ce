/* Image preprocessing (model-spec §D.2, §E.4): settings. */
#include "models/image_processor.h"

#include <stdio.h>
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
