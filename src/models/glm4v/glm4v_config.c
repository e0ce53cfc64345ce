#include "models/glm4v/glm4v_config.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/json_fields.h"
#include "models/config_fields.h"

/* ---- the kinds of config.json ---- */

static const lm_config_kind model_kinds[] = {
    {"glm4v_moe", "glm4v_moe_text", true, true},
    {"glm4v", "glm4v_text", false, true},
    {"glm4v_moe_text", "glm4v_moe_text", true, false},
    {"glm4v_text", "glm4v_text", false, false},
    {"glm46v", NULL, false, true}, /* its text_config says which (read_text_kind) */
};

/* ---- defaults (transformers' Glm4vMoeTextConfig / Glm4vTextConfig) ---- */

static void set_defaults(lm_glm4v_config *cfg, bool is_moe) {
    memset(cfg, 0, sizeof *cfg);
    cfg->is_moe = is_moe;
    cfg->vocab_size = is_moe ? 151424 : 151552;
    cfg->hidden_size = 4096;
    cfg->intermediate_size = is_moe ? 10944 : 13696;
    cfg->num_hidden_layers = is_moe ? 46 : 40;
    cfg->num_attention_heads = is_moe ? 96 : 32;
    cfg->num_key_value_heads = is_moe ? 8 : 2;
    cfg->head_dim = 0; /* hidden_size / num_attention_heads unless given */
    cfg->rms_norm_eps = 1e-5f;
    cfg->attention_bias = true;
    cfg->max_position_embeddings = is_moe ? 65536 : 32768;
    cfg->rope_theta = 10000.0f;
    cfg->partial_rotary_factor = 0.5f;
    cfg->mrope_section[0] = 8;
    cfg->mrope_section[1] = 12;
    cfg->mrope_section[2] = 12;
    if (is_moe) {
        cfg->first_k_dense_replace = 1;
        cfg->n_routed_experts = 128;
        cfg->num_experts_per_tok = 8;
        cfg->n_shared_experts = 1;
        cfg->moe_intermediate_size = 1408;
        cfg->n_group = 1;
        cfg->topk_group = 1;
        cfg->norm_topk_prob = true;
        cfg->routed_scaling_factor = 1.0f;
    }
    cfg->pad_token_id = -1;
    cfg->image_token_id = cfg->video_token_id = -1;
    cfg->image_start_token_id = cfg->image_end_token_id = -1;
    cfg->video_start_token_id = cfg->video_end_token_id = -1;
}

/* ---- text settings ---- */

#define INT_FIELD(name, lo, hi) LM_CONFIG_INT_FIELD(lm_glm4v_config, name, lo, hi)

static const lm_config_int_field text_int_fields[] = {
    INT_FIELD(vocab_size, 1, 1 << 22),
    INT_FIELD(hidden_size, 1, 65536),
    INT_FIELD(intermediate_size, 1, 1 << 20),
    INT_FIELD(num_hidden_layers, 1, LM_GLM4V_MAX_LAYERS),
    INT_FIELD(num_attention_heads, 1, 1024),
    INT_FIELD(num_key_value_heads, 1, 1024),
    INT_FIELD(head_dim, 1, 1024),
    INT_FIELD(max_position_embeddings, 1, INT_MAX),
};

static const lm_config_int_field moe_int_fields[] = {
    INT_FIELD(first_k_dense_replace, 0, LM_GLM4V_MAX_LAYERS),
    INT_FIELD(n_routed_experts, 1, 4096),
    INT_FIELD(num_experts_per_tok, 1, 4096),
    INT_FIELD(n_shared_experts, 0, 64),
    INT_FIELD(moe_intermediate_size, 1, 1 << 20),
    INT_FIELD(n_group, 1, 4096),
    INT_FIELD(topk_group, 1, 4096),
};

static lm_status read_text(const lm_json_fields *r, lm_glm4v_config *cfg) {
    lm_status s = lm_config_read_ints(r, text_int_fields, sizeof text_int_fields / sizeof *text_int_fields, cfg);
    if (s == LM_OK && cfg->is_moe)
        s = lm_config_read_ints(r, moe_int_fields, sizeof moe_int_fields / sizeof *moe_int_fields, cfg);
    if (s == LM_OK && cfg->is_moe) s = lm_json_read_bool(r, "norm_topk_prob", &cfg->norm_topk_prob);
    if (s == LM_OK && cfg->is_moe)
        s = lm_json_read_float(r, "routed_scaling_factor", 0.0, 1e6, &cfg->routed_scaling_factor);
    if (s == LM_OK) s = lm_json_read_float(r, "rms_norm_eps", 0.0, 1.0, &cfg->rms_norm_eps);
    if (s == LM_OK) s = lm_json_read_bool(r, "attention_bias", &cfg->attention_bias);
    char act[16] = "silu";
    if (s == LM_OK) s = lm_json_read_string(r, "hidden_act", act, sizeof act);
    if (s == LM_OK && strcmp(act, "silu") != 0)
        s = lm_json_field_error(r, LM_ERR_UNSUPPORTED, "hidden_act",
                                "is '%s'; only 'silu' is supported", act);
    bool qk_norm = false;
    if (s == LM_OK) s = lm_json_read_bool(r, "use_qk_norm", &qk_norm);
    if (s == LM_OK && qk_norm)
        s = lm_json_field_error(r, LM_ERR_UNSUPPORTED, "use_qk_norm",
                                "is true; GLM attention with q/k norms is not supported");
    if (cfg->head_dim == 0 && cfg->hidden_size % cfg->num_attention_heads == 0)
        cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
    return s;
}

/* ---- rotary settings: rope_parameters, rope_scaling or the top level ---- */

static lm_status read_rope_from(const lm_json_fields *r, lm_glm4v_config *cfg) {
    size_t n = 3;
    lm_status s = lm_config_check_rope_type(r, "type");
    if (s == LM_OK) s = lm_config_check_rope_type(r, "rope_type");
    if (s == LM_OK) s = lm_json_read_float(r, "rope_theta", 0.0, 1e12, &cfg->rope_theta);
    if (s == LM_OK)
        s = lm_json_read_float(r, "partial_rotary_factor", 0.0, 1.0, &cfg->partial_rotary_factor);
    if (s == LM_OK) s = lm_json_read_int_array(r, "mrope_section", 0, 1024, 3, 3, false, cfg->mrope_section, &n);
    return s;
}

static lm_status read_rope(const lm_json_fields *text, lm_glm4v_config *cfg) {
    lm_json_fields scaling, params;
    lm_status s = lm_json_fields_sub(text, "rope_scaling", &scaling);
    if (s == LM_OK) s = lm_json_fields_sub(text, "rope_parameters", &params);
    if (s == LM_OK) s = lm_json_read_float(text, "rope_theta", 0.0, 1e12, &cfg->rope_theta);
    if (s == LM_OK)
        s = lm_json_read_float(text, "partial_rotary_factor", 0.0, 1.0, &cfg->partial_rotary_factor);
    if (s == LM_OK) s = read_rope_from(&scaling, cfg);
    if (s == LM_OK) s = read_rope_from(&params, cfg);
    cfg->rot_dim = (int)((double)cfg->head_dim * (double)cfg->partial_rotary_factor);
    return s;
}

/* ---- token ids ---- */

static lm_status read_eos(const lm_json_fields *r, lm_glm4v_config *cfg) {
    lm_status s = lm_config_read_eos(r, cfg->eos_token_ids, &cfg->n_eos, LM_GLM4V_MAX_EOS);
    if (s == LM_OK) s = lm_json_read_int(r, "pad_token_id", 0, INT_MAX, &cfg->pad_token_id);
    return s;
}

static lm_status read_multimodal_ids(const lm_json_fields *r, lm_glm4v_config *cfg) {
    struct {
        const char *key;
        int *slot;
    } ids[] = {
        {"image_token_id", &cfg->image_token_id},
        {"video_token_id", &cfg->video_token_id},
        {"image_start_token_id", &cfg->image_start_token_id},
        {"image_end_token_id", &cfg->image_end_token_id},
        {"video_start_token_id", &cfg->video_start_token_id},
        {"video_end_token_id", &cfg->video_end_token_id},
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        lm_status s = lm_json_read_int(r, ids[i].key, 0, INT_MAX, ids[i].slot);
        if (s != LM_OK) return s;
    }
    return LM_OK;
}

/* ---- checks across fields ---- */

static lm_status check(const lm_json_fields *r, const lm_glm4v_config *cfg) {
    if (cfg->head_dim == 0)
        return lm_fail(r->err, LM_ERR_FORMAT,
                       "%s: %shead_dim is missing and hidden_size (%d) is not a multiple of "
                       "num_attention_heads (%d)",
                       r->source, r->path, cfg->hidden_size, cfg->num_attention_heads);
    if (cfg->num_attention_heads % cfg->num_key_value_heads != 0)
        return lm_fail(r->err, LM_ERR_FORMAT,
                       "%s: %snum_attention_heads (%d) must be a multiple of num_key_value_heads (%d)",
                       r->source, r->path, cfg->num_attention_heads, cfg->num_key_value_heads);
    lm_status s = lm_config_check_rotary(r, cfg->head_dim, cfg->partial_rotary_factor,
                                         cfg->rot_dim, cfg->mrope_section);
    if (s != LM_OK) return s;
    if (!cfg->is_moe) return LM_OK;
    if (cfg->num_experts_per_tok > cfg->n_routed_experts)
        return lm_fail(r->err, LM_ERR_FORMAT,
                       "%s: %snum_experts_per_tok (%d) is more than n_routed_experts (%d)",
                       r->source, r->path, cfg->num_experts_per_tok, cfg->n_routed_experts);
    if (cfg->n_routed_experts % cfg->n_group != 0 || cfg->topk_group > cfg->n_group)
        return lm_fail(r->err, LM_ERR_FORMAT,
                       "%s: %sn_routed_experts (%d) must split into n_group (%d) equal groups, "
                       "of which topk_group (%d) are kept",
                       r->source, r->path, cfg->n_routed_experts, cfg->n_group, cfg->topk_group);
    /* Groups are scored by their two best experts, and the kept groups must
     * hold enough experts for the top-k. */
    int per_group = cfg->n_routed_experts / cfg->n_group;
    if (cfg->n_group > 1 && (per_group < 2 || per_group * cfg->topk_group < cfg->num_experts_per_tok))
        return lm_fail(r->err, LM_ERR_FORMAT,
                       "%s: %s%d groups of %d experts, %d kept, cannot give %d experts per token",
                       r->source, r->path, cfg->n_group, per_group, cfg->topk_group,
                       cfg->num_experts_per_tok);
    return LM_OK;
}

static lm_status check_token_ids(const lm_json_fields *r, const lm_glm4v_config *cfg) {
    lm_status s = LM_OK;
    for (int i = 0; s == LM_OK && i < cfg->n_eos; i++)
        s = lm_config_check_id(r, "eos_token_id", cfg->eos_token_ids[i], cfg->vocab_size);
    if (s == LM_OK) s = lm_config_check_id(r, "pad_token_id", cfg->pad_token_id, cfg->vocab_size);
    return s;
}

/* ---- the vision tower (model-spec §E.3; transformers' Glm4vVisionConfig) ---- */

static lm_status read_vision(const lm_json_fields *top, lm_glm4v_config *cfg) {
    lm_vision_config *v = &cfg->vision;
    *v = (lm_vision_config){.depth = 24, .hidden_size = 1536, .num_heads = 12,
                            .intermediate_size = 13696, .in_channels = 3, .patch_size = 14,
                            .temporal_patch_size = 2, .spatial_merge_size = 2,
                            .out_hidden_size = 4096, .image_size = 336, .rms_norm_eps = 1e-5f,
                            .attention_bias = false, .rope_theta = 10000.0f};
    lm_json_fields r;
    lm_status s = lm_json_fields_sub(top, "vision_config", &r);
    if (s == LM_OK) s = lm_config_read_vision(&r, v);
    if (s == LM_OK) s = lm_json_read_int(&r, "image_size", 1, 1 << 16, &v->image_size);
    if (s == LM_OK) s = lm_json_read_float(&r, "rms_norm_eps", 0.0, 1.0, &v->rms_norm_eps);
    if (s == LM_OK) s = lm_json_read_bool(&r, "attention_bias", &v->attention_bias);
    char act[32] = "silu";
    if (s == LM_OK) s = lm_json_read_string(&r, "hidden_act", act, sizeof act);
    if (s == LM_OK && strcmp(act, "silu") != 0)
        s = lm_json_field_error(&r, LM_ERR_UNSUPPORTED, "hidden_act",
                                "is '%s'; only 'silu' is supported", act);
    return s;
}

/* ---- the whole file ---- */

/* The text sub-config's model_type: must match the kind, or (glm46v) picks it. */
static lm_status read_text_kind(const lm_json_fields *text, const lm_config_kind *kind, bool *is_moe) {
    if (kind->text_model_type) {
        *is_moe = kind->is_moe;
        return lm_config_check_text_model_type(text, kind);
    }
    char type[32] = "";
    lm_status s = lm_json_read_string(text, "model_type", type, sizeof type);
    if (s != LM_OK) return s;
    if (strcmp(type, "glm4v_moe_text") == 0 || strcmp(type, "glm4v_text") == 0) {
        *is_moe = strcmp(type, "glm4v_moe_text") == 0;
        return LM_OK;
    }
    return lm_fail(text->err, LM_ERR_UNSUPPORTED,
                   "%s: %smodel_type is '%.40s'; %s needs 'glm4v_moe_text' or 'glm4v_text'",
                   text->source, text->path, type, kind->model_type);
}

static lm_status read_config(const lm_json_fields *top, lm_glm4v_config *cfg) {
    const lm_config_kind *kind = NULL;
    lm_status s = lm_config_find_kind(top, model_kinds, sizeof model_kinds / sizeof *model_kinds,
                                      "GLM-4.6V", &kind);
    if (s != LM_OK) return s;
    lm_json_fields text = *top;
    if (kind->nested) s = lm_json_fields_sub(top, "text_config", &text);
    bool is_moe = kind->is_moe;
    if (s == LM_OK && kind->nested) s = read_text_kind(&text, kind, &is_moe);
    if (s != LM_OK) return s;
    set_defaults(cfg, is_moe);
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", kind->model_type);
    s = read_text(&text, cfg);
    if (s == LM_OK) s = read_rope(&text, cfg);
    /* Token ids and tying may sit at either level; the text level wins. */
    if (s == LM_OK && kind->nested) s = read_eos(top, cfg);
    if (s == LM_OK) s = read_eos(&text, cfg);
    if (s == LM_OK) s = read_multimodal_ids(top, cfg);
    if (s == LM_OK) s = lm_config_read_tying(top, &text, kind->nested, &cfg->tie_word_embeddings);
    cfg->has_vision_config = cJSON_IsObject(lm_json_field(top, "vision_config"));
    if (s == LM_OK && cfg->has_vision_config) s = read_vision(top, cfg);
    if (s == LM_OK) s = check(&text, cfg);
    if (s == LM_OK) s = check_token_ids(top, cfg);
    return s;
}

static lm_status read_any(const lm_json_fields *top, void *cfg) { return read_config(top, cfg); }

lm_status lm_glm4v_config_parse(const char *json, size_t len, const char *source_name,
                                lm_glm4v_config *cfg, lm_error *err) {
    return lm_config_parse(json, len, source_name, read_any, cfg, err);
}

lm_status lm_glm4v_config_load(const char *path, lm_glm4v_config *cfg, lm_error *err) {
    return lm_config_load(path, read_any, cfg, err);
}
