#include "models/qwen35/qwen35_config.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "io/json_fields.h"
#include "models/config_fields.h"

/* ---- defaults (transformers' Qwen3_5TextConfig / Qwen3_5MoeTextConfig) ---- */

static void set_defaults(lm_qwen35_config *cfg, bool is_moe, bool nested) {
    memset(cfg, 0, sizeof *cfg);
    cfg->is_moe = is_moe;
    cfg->vocab_size = 248320;
    cfg->hidden_size = is_moe ? 2048 : 4096;
    cfg->intermediate_size = is_moe ? 0 : 12288;
    cfg->num_hidden_layers = is_moe ? 40 : 32;
    cfg->num_attention_heads = 16;
    cfg->num_key_value_heads = is_moe ? 2 : 4;
    cfg->head_dim = 256;
    cfg->rms_norm_eps = 1e-6f;
    cfg->max_position_embeddings = 32768;
    snprintf(cfg->hidden_act, sizeof cfg->hidden_act, "silu");
    cfg->rope_theta = 10000.0f;
    cfg->partial_rotary_factor = 0.25f;
    cfg->mrope_section[0] = 11;
    cfg->mrope_section[1] = 11;
    cfg->mrope_section[2] = 10;
    cfg->linear_conv_kernel_dim = 4;
    cfg->linear_key_head_dim = 128;
    cfg->linear_value_head_dim = 128;
    cfg->linear_num_key_heads = 16;
    cfg->linear_num_value_heads = 32;
    cfg->full_attention_interval = 4;
    cfg->pad_token_id = cfg->bos_token_id = -1;
    if (is_moe) {
        cfg->num_experts = 256;
        cfg->num_experts_per_tok = 8;
        cfg->moe_intermediate_size = 512;
        cfg->shared_expert_intermediate_size = 512;
    }
    cfg->image_token_id = nested ? 248056 : -1;
    cfg->video_token_id = nested ? 248057 : -1;
    cfg->vision_start_token_id = nested ? 248053 : -1;
    cfg->vision_end_token_id = nested ? 248054 : -1;
}

/* ---- text settings ---- */

#define INT_FIELD(name, lo, hi) LM_CONFIG_INT_FIELD(lm_qwen35_config, name, lo, hi)

static const lm_config_int_field text_int_fields[] = {
    INT_FIELD(vocab_size, 1, 1 << 22),
    INT_FIELD(hidden_size, 1, 65536),
    INT_FIELD(num_hidden_layers, 1, LM_QWEN35_MAX_LAYERS),
    INT_FIELD(num_attention_heads, 1, 1024),
    INT_FIELD(num_key_value_heads, 1, 1024),
    INT_FIELD(head_dim, 1, 1024),
    INT_FIELD(max_position_embeddings, 1, INT_MAX),
    INT_FIELD(linear_conv_kernel_dim, 1, 64),
    INT_FIELD(linear_key_head_dim, 1, 1024),
    INT_FIELD(linear_value_head_dim, 1, 1024),
    INT_FIELD(linear_num_key_heads, 1, 1024),
    INT_FIELD(linear_num_value_heads, 1, 1024),
    INT_FIELD(full_attention_interval, 1, LM_QWEN35_MAX_LAYERS),
    INT_FIELD(mtp_num_hidden_layers, 0, 16),
};

static const lm_config_int_field moe_int_fields[] = {
    INT_FIELD(num_experts, 1, 4096),
    INT_FIELD(num_experts_per_tok, 1, 4096),
    INT_FIELD(moe_intermediate_size, 1, 1 << 20),
    INT_FIELD(shared_expert_intermediate_size, 0, 1 << 20),
};

static lm_status read_text_scalars(const lm_json_fields *r, lm_qwen35_config *cfg) {
    /* Qwen3-Next spelled the MTP depth num_nextn_predict_layers. */
    lm_status s =
        lm_json_read_int(r, "num_nextn_predict_layers", 0, 16, &cfg->mtp_num_hidden_layers);
    if (s == LM_OK)
        s = lm_config_read_ints(r, text_int_fields, sizeof text_int_fields / sizeof *text_int_fields,
                            cfg);
    if (s == LM_OK && cfg->is_moe)
        s = lm_config_read_ints(r, moe_int_fields, sizeof moe_int_fields / sizeof *moe_int_fields, cfg);
    /* MoE models have no dense MLP, but a config may still carry the field. */
    if (s == LM_OK) s = lm_json_read_int(r, "intermediate_size", cfg->is_moe ? 0 : 1, 1 << 20,
                                 &cfg->intermediate_size);
    if (s == LM_OK) s = lm_json_read_float(r, "rms_norm_eps", 0.0, 1.0, &cfg->rms_norm_eps);
    if (s == LM_OK) s = lm_json_read_bool(r, "attention_bias", &cfg->attention_bias);
    if (s == LM_OK)
        s = lm_json_read_bool(r, "mtp_use_dedicated_embeddings",
                              &cfg->mtp_use_dedicated_embeddings);
    if (s == LM_OK)
        s = lm_json_read_string(r, "hidden_act", cfg->hidden_act, sizeof cfg->hidden_act);
    return s;
}

/* ---- settings loom parses but does not implement: refuse, never run another model ---- */

static lm_status refuse_unimplemented(const lm_json_fields *r, const lm_qwen35_config *cfg) {
    if (cfg->attention_bias)
        return lm_json_field_error(r, LM_ERR_UNSUPPORTED, "attention_bias",
                                   "is true; biases on q/k/v/o are not supported (only false)");
    if (strcmp(cfg->hidden_act, "silu") != 0)
        return lm_json_field_error(r, LM_ERR_UNSUPPORTED, "hidden_act",
                                   "is '%s'; only 'silu' is supported", cfg->hidden_act);
    /* Not read by transformers (the output gate is always there), but a config
     * that says it has none describes another model. */
    bool gate = true;
    lm_status s = lm_json_read_bool(r, "attn_output_gate", &gate);
    if (s == LM_OK && !gate)
        s = lm_json_field_error(r, LM_ERR_UNSUPPORTED, "attn_output_gate",
                                "is false; attention without the output gate is not supported");
    /* Qwen2-style sliding-window attention: off unless use_sliding_window. */
    bool sliding = false, sliding_given = lm_json_field(r, "use_sliding_window") != NULL;
    if (s == LM_OK) s = lm_json_read_bool(r, "use_sliding_window", &sliding);
    if (s == LM_OK && sliding)
        s = lm_json_field_error(r, LM_ERR_UNSUPPORTED, "use_sliding_window",
                                "is true; sliding-window attention is not supported");
    int window = 0;
    if (s == LM_OK) s = lm_json_read_int(r, "sliding_window", 0, INT_MAX, &window);
    if (s == LM_OK && lm_json_field(r, "sliding_window") && !sliding_given)
        s = lm_json_field_error(r, LM_ERR_UNSUPPORTED, "sliding_window",
                                "is %d; sliding-window attention is not supported", window);
    return s;
}

/* ---- rotary settings: rope_parameters, or the older top-level spellings ---- */

static lm_status read_mrope_section(const lm_json_fields *r, int section[3]) {
    size_t n = 3;
    return lm_json_read_int_array(r, "mrope_section", 0, 1024, 3, 3, false, section, &n);
}

/* Qwen3.5's M-RoPE is always interleaved (§A.6); transformers ignores the
 * flag, but false asks for the contiguous split loom does not implement here. */
static lm_status check_mrope_interleaved(const lm_json_fields *r) {
    bool interleaved = true;
    lm_status s = lm_json_read_bool(r, "mrope_interleaved", &interleaved);
    if (s == LM_OK && !interleaved)
        s = lm_json_field_error(r, LM_ERR_UNSUPPORTED, "mrope_interleaved",
                                "is false; only interleaved M-RoPE is supported");
    return s;
}

/* Read from the oldest spelling to the newest, each overriding the one before. */
static lm_status read_rope(const lm_json_fields *text, lm_qwen35_config *cfg) {
    lm_json_fields scaling, params;
    lm_status s = lm_json_fields_sub(text, "rope_scaling", &scaling);
    if (s == LM_OK) s = lm_json_fields_sub(text, "rope_parameters", &params);
    if (s == LM_OK) s = lm_json_read_float(text, "rope_theta", 0.0, 1e12, &cfg->rope_theta);
    if (s == LM_OK)
        s = lm_json_read_float(text, "partial_rotary_factor", 0.0, 1.0,
                               &cfg->partial_rotary_factor);
    if (s == LM_OK) s = lm_config_check_rope_type(&scaling, "type");
    if (s == LM_OK) s = lm_config_check_rope_type(&scaling, "rope_type");
    if (s == LM_OK) s = check_mrope_interleaved(&scaling);
    if (s == LM_OK) s = read_mrope_section(&scaling, cfg->mrope_section);
    if (s == LM_OK) s = lm_config_check_rope_type(&params, "rope_type");
    if (s == LM_OK) s = check_mrope_interleaved(&params);
    if (s == LM_OK) s = lm_json_read_float(&params, "rope_theta", 0.0, 1e12, &cfg->rope_theta);
    if (s == LM_OK)
        s = lm_json_read_float(&params, "partial_rotary_factor", 0.0, 1.0,
                               &cfg->partial_rotary_factor);
    if (s == LM_OK) s = read_mrope_section(&params, cfg->mrope_section);
    /* Python's int(head_dim * factor), in double like Python. */
    cfg->rot_dim = (int)((double)cfg->head_dim * (double)cfg->partial_rotary_factor);
    return s;
}

/* ---- layer schedule ---- */

static bool parse_layer_type(const char *name, lm_layer_type *out) {
    /* "mamba" and "attention" are legacy spellings transformers still maps. */
    if (strcmp(name, "linear_attention") == 0 || strcmp(name, "mamba") == 0) {
        *out = LM_LAYER_LINEAR_ATTENTION;
    } else if (strcmp(name, "full_attention") == 0 || strcmp(name, "attention") == 0) {
        *out = LM_LAYER_FULL_ATTENTION;
    } else {
        return false;
    }
    return true;
}

static lm_status read_layer_types(const lm_json_fields *r, lm_qwen35_config *cfg) {
    int n = cfg->num_hidden_layers; /* already bounded by LM_QWEN35_MAX_LAYERS */
    const cJSON *v;
    size_t count;
    lm_status s = lm_json_read_array(r, "layer_types", LM_QWEN35_MAX_LAYERS, "strings", &v, &count);
    if (s != LM_OK) return s;
    if (!v) {
        for (int i = 0; i < n; i++)
            cfg->layer_types[i] = (i + 1) % cfg->full_attention_interval == 0
                                      ? LM_LAYER_FULL_ATTENTION
                                      : LM_LAYER_LINEAR_ATTENTION;
        return LM_OK;
    }
    if (count != (size_t)n)
        return lm_json_field_error(r, LM_ERR_FORMAT, "layer_types",
                                   "has %zu entries but num_hidden_layers is %d", count, n);
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e)) return lm_json_type_error(r, "layer_types", "a list of strings");
        /* a layer kind loom does not run (sliding_attention, ...) */
        if (!parse_layer_type(e->valuestring, &cfg->layer_types[i]))
            return lm_fail(r->err, LM_ERR_UNSUPPORTED,
                           "%s: %slayer_types[%d] is '%.40s'; expected 'linear_attention' or "
                           "'full_attention'",
                           r->source, r->path, i, e->valuestring);
    }
    return LM_OK;
}

/* ---- token ids ---- */

static lm_status read_eos(const lm_json_fields *r, lm_qwen35_config *cfg) {
    return lm_config_read_eos(r, cfg->eos_token_ids, &cfg->n_eos, LM_QWEN35_MAX_EOS);
}

static lm_status read_special_ids(const lm_json_fields *r, lm_qwen35_config *cfg) {
    lm_status s = read_eos(r, cfg);
    if (s == LM_OK) s = lm_json_read_int(r, "pad_token_id", 0, INT_MAX, &cfg->pad_token_id);
    if (s == LM_OK) s = lm_json_read_int(r, "bos_token_id", 0, INT_MAX, &cfg->bos_token_id);
    return s;
}

static lm_status read_multimodal_ids(const lm_json_fields *r, lm_qwen35_config *cfg) {
    lm_status s = lm_json_read_int(r, "image_token_id", 0, INT_MAX, &cfg->image_token_id);
    if (s == LM_OK) s = lm_json_read_int(r, "video_token_id", 0, INT_MAX, &cfg->video_token_id);
    if (s == LM_OK)
        s = lm_json_read_int(r, "vision_start_token_id", 0, INT_MAX, &cfg->vision_start_token_id);
    if (s == LM_OK)
        s = lm_json_read_int(r, "vision_end_token_id", 0, INT_MAX, &cfg->vision_end_token_id);
    return s;
}

/* ---- checks across fields ---- */

static lm_status check_token_ids(const lm_json_fields *r, const lm_qwen35_config *cfg) {
    int v = cfg->vocab_size;
    lm_status s = LM_OK;
    for (int i = 0; s == LM_OK && i < cfg->n_eos; i++)
        s = lm_config_check_id(r, "eos_token_id", cfg->eos_token_ids[i], v);
    if (s == LM_OK) s = lm_config_check_id(r, "pad_token_id", cfg->pad_token_id, v);
    if (s == LM_OK) s = lm_config_check_id(r, "bos_token_id", cfg->bos_token_id, v);
    if (s == LM_OK) s = lm_config_check_id(r, "image_token_id", cfg->image_token_id, v);
    if (s == LM_OK) s = lm_config_check_id(r, "video_token_id", cfg->video_token_id, v);
    if (s == LM_OK) s = lm_config_check_id(r, "vision_start_token_id", cfg->vision_start_token_id, v);
    if (s == LM_OK) s = lm_config_check_id(r, "vision_end_token_id", cfg->vision_end_token_id, v);
    return s;
}

static lm_status check_multiple(const lm_json_fields *r, const char *what, int value,
                                const char *of_what, int of) {
    if (value % of == 0) return LM_OK;
    return lm_fail(r->err, LM_ERR_FORMAT, "%s: %s%s (%d) must be a multiple of %s%s (%d)",
                   r->source, r->path, what, value, r->path, of_what, of);
}

static lm_status check_shapes(const lm_json_fields *r, const lm_qwen35_config *cfg) {
    lm_status s = check_multiple(r, "num_attention_heads", cfg->num_attention_heads,
                                 "num_key_value_heads", cfg->num_key_value_heads);
    if (s == LM_OK)
        s = check_multiple(r, "linear_num_value_heads", cfg->linear_num_value_heads,
                           "linear_num_key_heads", cfg->linear_num_key_heads);
    if (s == LM_OK && cfg->head_dim % 2 != 0)
        s = lm_fail(r->err, LM_ERR_FORMAT, "%s: %shead_dim (%d) must be even", r->source, r->path,
                    cfg->head_dim);
    if (s == LM_OK && cfg->is_moe && cfg->num_experts_per_tok > cfg->num_experts)
        s = lm_fail(r->err, LM_ERR_FORMAT,
                    "%s: %snum_experts_per_tok (%d) is more than num_experts (%d)", r->source,
                    r->path, cfg->num_experts_per_tok, cfg->num_experts);
    return s;
}

static lm_status check_rope(const lm_json_fields *r, const lm_qwen35_config *cfg) {
    return lm_config_check_rotary(r, cfg->head_dim, cfg->partial_rotary_factor, cfg->rot_dim,
                                  cfg->mrope_section);
}

/* ---- the vision tower (model-spec §D.1; transformers' Qwen3_5VisionConfig) ---- */

static lm_status read_vision(const lm_json_fields *top, lm_qwen35_config *cfg) {
    lm_vision_config *v = &cfg->vision;
    *v = (lm_vision_config){.depth = 27, .hidden_size = 1152, .num_heads = 16,
                            .intermediate_size = 4304, .in_channels = 3, .patch_size = 16,
                            .temporal_patch_size = 2, .spatial_merge_size = 2,
                            .out_hidden_size = 3584, .num_position_embeddings = 2304,
                            .rope_theta = 10000.0f};
    lm_json_fields r;
    lm_status s = lm_json_fields_sub(top, "vision_config", &r);
    if (s == LM_OK) s = lm_config_read_vision(&r, v);
    if (s == LM_OK)
        s = lm_json_read_int(&r, "num_position_embeddings", 1, 1 << 24, &v->num_position_embeddings);
    char act[32] = "gelu_pytorch_tanh";
    if (s == LM_OK) s = lm_json_read_string(&r, "hidden_act", act, sizeof act);
    if (s == LM_OK && strcmp(act, "gelu_pytorch_tanh") != 0)
        s = lm_json_field_error(&r, LM_ERR_UNSUPPORTED, "hidden_act",
                                "is '%s'; only 'gelu_pytorch_tanh' is supported", act);
    /* Qwen3-VL's deepstack mergers feed chosen blocks' outputs to the text
     * model's first layers; Qwen3.5 has none. */
    const cJSON *deepstack = NULL;
    size_t n_deepstack = 0;
    if (s == LM_OK)
        s = lm_json_read_array(&r, "deepstack_visual_indexes", 1024, "integers", &deepstack,
                               &n_deepstack);
    if (s == LM_OK && n_deepstack > 0)
        s = lm_json_field_error(&r, LM_ERR_UNSUPPORTED, "deepstack_visual_indexes",
                                "has %zu entries; deepstack (Qwen3-VL) is not supported, "
                                "Qwen3.5 has none",
                                n_deepstack);
    if (s != LM_OK) return s;
    int side = (int)lround(sqrt((double)v->num_position_embeddings));
    if (side * side != v->num_position_embeddings)
        return lm_json_field_error(&r, LM_ERR_FORMAT, "num_position_embeddings",
                                   "is %d; it must be a square (the table is a grid)",
                                   v->num_position_embeddings);
    return LM_OK;
}

/* ---- the whole file ---- */

static const lm_config_kind model_kinds[] = {
    {"qwen3_5", "qwen3_5_text", false, true},
    {"qwen3_5_moe", "qwen3_5_moe_text", true, true},
    {"qwen3_5_text", "qwen3_5_text", false, false},
    {"qwen3_5_moe_text", "qwen3_5_moe_text", true, false},
};

static lm_status read_config(const lm_json_fields *top, lm_qwen35_config *cfg) {
    const lm_config_kind *kind = NULL;
    lm_status s = lm_config_find_kind(top, model_kinds, sizeof model_kinds / sizeof *model_kinds,
                                      "Qwen3.5", &kind);
    if (s != LM_OK) return s;
    set_defaults(cfg, kind->is_moe, kind->nested);
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", kind->model_type);
    lm_json_fields text = *top;
    if (kind->nested) s = lm_json_fields_sub(top, "text_config", &text);
    if (s == LM_OK && kind->nested) s = lm_config_check_text_model_type(&text, kind);
    if (s == LM_OK) s = read_text_scalars(&text, cfg);
    if (s == LM_OK) s = refuse_unimplemented(&text, cfg);
    if (s == LM_OK) s = read_rope(&text, cfg);
    if (s == LM_OK) s = read_layer_types(&text, cfg);
    /* Token ids and tying may sit at either level; the text level wins. */
    if (s == LM_OK && kind->nested) s = read_special_ids(top, cfg);
    if (s == LM_OK) s = read_special_ids(&text, cfg);
    if (s == LM_OK) s = read_multimodal_ids(top, cfg);
    if (s == LM_OK) s = lm_config_read_tying(top, &text, kind->nested, &cfg->tie_word_embeddings);
    cfg->has_vision_config = cJSON_IsObject(lm_json_field(top, "vision_config"));
    if (s == LM_OK && cfg->has_vision_config) s = read_vision(top, cfg);
    if (s == LM_OK) s = check_shapes(&text, cfg);
    if (s == LM_OK) s = check_rope(&text, cfg);
    if (s == LM_OK) s = check_token_ids(top, cfg);
    return s;
}

static lm_status read_any(const lm_json_fields *top, void *cfg) { return read_config(top, cfg); }

lm_status lm_qwen35_config_parse(const char *json, size_t len, const char *source_name,
                                 lm_qwen35_config *cfg, lm_error *err) {
    return lm_config_parse(json, len, source_name, read_any, cfg, err);
}

lm_status lm_qwen35_config_load(const char *path, lm_qwen35_config *cfg, lm_error *err) {
    return lm_config_load(path, read_any, cfg, err);
}
