#include "models/config_fields.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/json_file.h"

#define MAX_CONFIG_BYTES ((size_t)16 << 20)

lm_status lm_config_read_ints(const lm_json_fields *r, const lm_config_int_field *fields, size_t n,
                              void *cfg) {
    for (size_t i = 0; i < n; i++) {
        int *slot = (int *)((char *)cfg + fields[i].offset);
        lm_status s = lm_json_read_int(r, fields[i].key, fields[i].min, fields[i].max, slot);
        if (s != LM_OK) return s;
    }
    return LM_OK;
}

lm_status lm_config_read_eos(const lm_json_fields *r, int *ids, int *n, int max) {
    if (r->object && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r->object, "eos_token_id"))) {
        *n = 0;
        return LM_OK;
    }
    size_t count = (size_t)*n;
    lm_status s = lm_json_read_int_array(r, "eos_token_id", 0, INT_MAX, 0, (size_t)max, true, ids,
                                         &count);
    *n = (int)count;
    return s;
}

lm_status lm_config_check_id(const lm_json_fields *r, const char *key, int id, int vocab) {
    if (id < vocab) return LM_OK;
    return lm_fail(r->err, LM_ERR_FORMAT, "%s: %s is %d, outside the vocabulary of %d tokens",
                   r->source, key, id, vocab);
}

lm_status lm_config_check_rope_type(const lm_json_fields *r, const char *key) {
    char type[32] = "default";
    lm_status s = lm_json_read_string(r, key, type, sizeof type);
    if (s != LM_OK) return s;
    /* "mrope" is how older configs named the same default frequencies. */
    if (strcmp(type, "default") != 0 && strcmp(type, "mrope") != 0)
        return lm_json_field_error(r, LM_ERR_UNSUPPORTED, key,
                                   "'%s' is not supported (only 'default')", type);
    return LM_OK;
}

lm_status lm_config_check_rotary(const lm_json_fields *r, int head_dim, float factor, int rot_dim,
                                 const int sections[3]) {
    if (rot_dim < 2 || rot_dim % 2 != 0 || rot_dim > head_dim)
        return lm_fail(r->err, LM_ERR_FORMAT,
                       "%s: the rotary dimension int(head_dim %d * partial_rotary_factor %g) = %d "
                       "must be even, at least 2 and at most head_dim",
                       r->source, head_dim, (double)factor, rot_dim);
    int sum = sections[0] + sections[1] + sections[2];
    if (sum != rot_dim / 2)
        return lm_fail(r->err, LM_ERR_FORMAT,
                       "%s: mrope_section [%d, %d, %d] sums to %d but must sum to half the "
                       "rotary dimension (%d)",
                       r->source, sections[0], sections[1], sections[2], sum, rot_dim / 2);
    return LM_OK;
}

#define VISION_INT(name, lo, hi) LM_CONFIG_INT_FIELD(lm_vision_config, name, lo, hi)

static const lm_config_int_field vision_int_fields[] = {
    VISION_INT(depth, 1, 1024),
    VISION_INT(hidden_size, 1, 65536),
    VISION_INT(num_heads, 1, 1024),
    VISION_INT(intermediate_size, 1, 1 << 20),
    VISION_INT(in_channels, 1, 64),
    VISION_INT(patch_size, 1, 1024),
    VISION_INT(temporal_patch_size, 1, 16),
    VISION_INT(spatial_merge_size, 1, 16),
    VISION_INT(out_hidden_size, 1, 65536),
};

lm_status lm_config_read_vision(const lm_json_fields *r, lm_vision_config *v) {
    lm_status s = lm_config_read_ints(r, vision_int_fields,
                                      sizeof vision_int_fields / sizeof *vision_int_fields, v);
    lm_json_fields params;
    if (s == LM_OK) s = lm_json_read_float(r, "rope_theta", 0.0, 1e12, &v->rope_theta);
    if (s == LM_OK) s = lm_json_fields_sub(r, "rope_parameters", &params);
    char type[32] = "default";
    if (s == LM_OK) s = lm_json_read_string(&params, "rope_type", type, sizeof type);
    /* transformers writes "axial" for the towers' 2-D rotary (the same frequencies) */
    if (s == LM_OK && strcmp(type, "default") != 0 && strcmp(type, "axial") != 0)
        s = lm_json_field_error(&params, LM_ERR_UNSUPPORTED, "rope_type",
                                "'%s' is not supported (only 'default' or 'axial')", type);
    if (s == LM_OK) s = lm_json_read_float(&params, "rope_theta", 0.0, 1e12, &v->rope_theta);
    if (s != LM_OK) return s;
    if (v->in_channels != 3)
        return lm_json_field_error(r, LM_ERR_UNSUPPORTED, "in_channels",
                                   "is %d; only RGB (3) images are supported", v->in_channels);
    if (v->hidden_size % v->num_heads != 0)
        return lm_fail(r->err, LM_ERR_FORMAT,
                       "%s: %shidden_size (%d) must be a multiple of %snum_heads (%d)", r->source,
                       r->path, v->hidden_size, r->path, v->num_heads);
    if ((v->hidden_size / v->num_heads) % 4 != 0)
        return lm_fail(r->err, LM_ERR_UNSUPPORTED,
                       "%s: %shidden_size / num_heads = %d; the 2-D rotary needs a head "
                       "dimension divisible by 4",
                       r->source, r->path, v->hidden_size / v->num_heads);
    return LM_OK;
}

lm_status lm_config_parse(const char *json, size_t len, const char *source_name,
                          lm_config_reader read, void *cfg, lm_error *err) {
    cJSON *root;
    lm_status s = lm_json_parse(json, len, source_name, &root, err);
    if (s != LM_OK) return s;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lm_fail(err, LM_ERR_FORMAT, "%s: not a JSON object", source_name);
    }
    lm_json_fields top = lm_json_fields_of(source_name, root, err);
    s = read(&top, cfg);
    cJSON_Delete(root);
    return s;
}

lm_status lm_config_load(const char *path, lm_config_reader read, void *cfg, lm_error *err) {
    char *text;
    size_t len;
    lm_status s = lm_read_small_file(path, MAX_CONFIG_BYTES, &text, &len, err);
    if (s != LM_OK) return s;
    s = lm_config_parse(text, len, path, read, cfg, err);
    free(text);
    return s;
}

lm_status lm_config_find_kind(const lm_json_fields *top, const lm_config_kind *kinds, size_t n,
                              const char *family, const lm_config_kind **kind) {
    const cJSON *v = lm_json_field(top, "model_type");
    if (!v) return lm_fail(top->err, LM_ERR_FORMAT, "%s: model_type is missing", top->source);
    if (!cJSON_IsString(v)) return lm_json_type_error(top, "model_type", "a string");
    for (size_t i = 0; i < n; i++)
        if (strcmp(v->valuestring, kinds[i].model_type) == 0) {
            *kind = &kinds[i];
            return LM_OK;
        }
    /* "a, b, c or d" */
    char expected[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < n && used < sizeof expected; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
        int w = snprintf(expected + used, sizeof expected - used, "%s%s", sep, kinds[i].model_type);
        if (w < 0) break;
        used += (size_t)w;
    }
    return lm_fail(top->err, LM_ERR_UNSUPPORTED, "%s: model_type '%.40s' is not a %s model (expected %s)",
                   top->source, v->valuestring, family, expected);
}

lm_status lm_config_check_text_model_type(const lm_json_fields *text, const lm_config_kind *kind) {
    char type[32] = "";
    lm_status s = lm_json_read_string(text, "model_type", type, sizeof type);
    if (s == LM_OK && type[0] && strcmp(type, kind->text_model_type) != 0)
        s = lm_fail(text->err, LM_ERR_FORMAT, "%s: %smodel_type is '%s' but %s expects '%s'",
                    text->source, text->path, type, kind->model_type, kind->text_model_type);
    return s;
}

lm_status lm_config_read_tying(const lm_json_fields *top, const lm_json_fields *text, bool nested,
                               bool *tie) {
    bool tie_top = false, tie_text = false;
    lm_status s = nested ? lm_json_read_bool(top, "tie_word_embeddings", &tie_top) : LM_OK;
    if (s == LM_OK) s = lm_json_read_bool(text, "tie_word_embeddings", &tie_text);
    *tie = tie_top || tie_text;
    return s;
}
