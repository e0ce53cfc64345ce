#include "models/registry.h"

#include <stdio.h>
#include <string.h>

#include "io/json_file.h"
#include "models/weights.h"

#define MAX_CONFIG_BYTES ((size_t)16 << 20)

/* The families, one line each: X(name) is the descriptor
 * lm_<name>_family that models/<name>/ defines.  The registry includes no
 * family header; it knows a family by its descriptor alone.  The order is
 * the order of the known model_types an unknown one's error lists. */
#define LM_MODEL_FAMILIES(X) \
    X(qwen35)                \
    X(glm4v)

#define DECLARE_FAMILY(name) extern const lm_model_family lm_##name##_family;
LM_MODEL_FAMILIES(DECLARE_FAMILY)
#define FAMILY_ENTRY(name) &lm_##name##_family,
static const lm_model_family *const families[] = {LM_MODEL_FAMILIES(FAMILY_ENTRY)};

const lm_model_family *lm_model_family_for(const char *model_type) {
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
        for (const char *const *t = families[f]->model_types; *t; t++)
            if (strcmp(*t, model_type) == 0) return families[f];
    return NULL;
}

/* "qwen3_5, qwen3_5_moe, ..." for the error of an unknown model_type. */
static void known_types(char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
        for (const char *const *t = families[f]->model_types; *t && used < size; t++) {
            int n = snprintf(out + used, size - used, "%s%s", used ? ", " : "", *t);
            if (n < 0) break;
            used += (size_t)n;
        }
}

static lm_status open_family(const char *config_path, const char *dir,
                             const lm_model_load_options *options, lm_backend *backend,
                             lm_model **out, lm_error *err) {
    cJSON *config = NULL;
    lm_status st = lm_json_read_file(config_path, MAX_CONFIG_BYTES, &config, err);
    if (st != LM_OK) return st;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(config, "model_type");
    const cJSON *architecture = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(config, "architectures"), 0);
    char model_type[64] = "", arch[80] = "";
    if (cJSON_IsString(type)) snprintf(model_type, sizeof model_type, "%s", type->valuestring);
    if (cJSON_IsString(architecture)) snprintf(arch, sizeof arch, " (%.60s)", architecture->valuestring);
    cJSON_Delete(config);
    if (!model_type[0])
        return lm_fail(err, LM_ERR_FORMAT, "%s: model_type is missing or not a string", config_path);
    const lm_model_family *family = lm_model_family_for(model_type);
    if (!family) {
        char known[256];
        known_types(known, sizeof known);
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "%s: model_type '%.40s'%s is not an architecture loom runs; it runs checkpoints whose "
                       "model_type is one of: %s",
                       config_path, model_type, arch, known);
    }
    lm_model_load_options o = *options;
    lm_weights_quant quant = {0};
    lm_status qs = lm_weights_quant_config(config_path, &quant, err);
    if (qs != LM_OK) return qs;
    o.fp8_block_rows = quant.fp8_block_rows;
    o.fp8_block_cols = quant.fp8_block_cols;
    o.mlx_bits = quant.mlx_bits;
    o.mlx_group = quant.mlx_group;
    o.mlx_overrides = quant.mlx_overrides;
    o.int4 = quant.int4;
    return family->open(config_path, dir, &o, backend, out, err);
}

/* A GGUF file: the family by general.architecture. */
static lm_status open_gguf(const char *path, const lm_model_load_options *options, lm_backend *backend,
                           lm_model **out, lm_error *err) {
    lm_gguf *g;
    lm_status st = lm_gguf_open(path, options->mode, &g, err);
    if (st != LM_OK) return st;
    const char *arch;
    st = lm_gguf_get_string(g, "general.architecture", true, &arch, err);
    for (size_t f = 0; st == LM_OK && f < sizeof families / sizeof *families; f++)
        for (const char *const *a = families[f]->gguf_architectures; a && *a; a++)
            if (strcmp(*a, arch) == 0) return families[f]->open_gguf(g, options, backend, out, err);
    if (st == LM_OK) {
        char known[256] = "";
        size_t used = 0;
        for (size_t f = 0; f < sizeof families / sizeof *families; f++)
            for (const char *const *a = families[f]->gguf_architectures; a && *a && used < sizeof known; a++) {
                int n = snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", *a);
                if (n > 0) used += (size_t)n;
            }
        st = lm_fail(err, LM_ERR_UNSUPPORTED,
                     "%s: GGUF architecture '%.40s' is not one loom runs; it runs GGUF files of: %s", path, arch,
                     known);
    }
    lm_gguf_close(g);
    return st;
}

lm_status lm_model_open(const char *dir, const lm_model_load_options *options, lm_backend *backend,
                        lm_model **out, lm_error *err) {
    char gguf_path[4096];
    bool is_gguf = false;
    lm_status located = lm_gguf_locate(dir, &is_gguf, gguf_path, sizeof gguf_path, err);
    if (located != LM_OK) return located;
    if (is_gguf) {
        lm_model_load_options o = options ? *options : (lm_model_load_options){0};
        o.random_weights = false;
        return open_gguf(gguf_path, &o, backend, out, err);
    }
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", dir) >= sizeof path)
        return lm_fail(err, LM_ERR_INVALID, "the model folder path is too long");
    lm_model_load_options o = options ? *options : (lm_model_load_options){0};
    o.random_weights = false;
    return open_family(path, dir, &o, backend, out, err);
}

lm_status lm_model_open_random(const char *config_path, uint64_t seed, bool quantize_int8,
                               lm_backend *backend, lm_model **out, lm_error *err) {
    lm_model_load_options o = {.random_weights = true, .random_seed = seed, .quantize_int8 = quantize_int8};
    return open_family(config_path, NULL, &o, backend, out, err);
}

lm_status lm_model_open_random_with(const char *config_path, const lm_model_load_options *options,
                                    lm_backend *backend, lm_model **out, lm_error *err) {
    lm_model_load_options o = *options;
    o.random_weights = true;
    return open_family(config_path, NULL, &o, backend, out, err);
}
