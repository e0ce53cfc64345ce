/* config.json of GLM-4.6V checkpoints (model-spec §E.1, §E.6): model_type
 * "glm4v_moe" (GLM-4.5V / GLM-4.6V, MoE) or "glm4v" (GLM-4.1V / GLM-4.6V-Flash,
 * dense) with the text settings in "text_config", a bare text config
 * ("glm4v_moe_text" / "glm4v_text"), or transformers' "glm46v" wrapper, whose
 * text_config's model_type says which of the two it is.  Absent fields take
 * the transformers defaults; present ones are type- and range-checked.  Valid
 * settings loom does not implement (use_qk_norm, hidden_act other than silu,
 * rope types other than default) fail with LM_ERR_UNSUPPORTED naming the
 * field. */
#ifndef LOOM_MODELS_GLM4V_CONFIG_H
#define LOOM_MODELS_GLM4V_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "models/vision_config.h"

#define LM_GLM4V_MAX_LAYERS 512
#define LM_GLM4V_MAX_EOS 8

typedef struct {
    char model_type[32];   /* the top-level model_type */
    bool is_moe;           /* glm4v_moe: MoE layers from first_k_dense_replace on */
    int vocab_size, hidden_size, intermediate_size;
    int num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim;
    float rms_norm_eps;
    bool attention_bias;   /* biases on q/k/v (never on o) */
    bool tie_word_embeddings;
    int max_position_embeddings;
    float rope_theta, partial_rotary_factor;
    int rot_dim;           /* int(head_dim * partial_rotary_factor) */
    int mrope_section[3];  /* contiguous sections, sum rot_dim / 2 */
    /* MoE only */
    int first_k_dense_replace, n_routed_experts, num_experts_per_tok, n_shared_experts;
    int moe_intermediate_size, n_group, topk_group;
    bool norm_topk_prob;
    float routed_scaling_factor;
    int n_eos;
    int eos_token_ids[LM_GLM4V_MAX_EOS];
    int pad_token_id;      /* -1 if absent */
    /* top-level multimodal token ids; -1 for a bare text config */
    int image_token_id, video_token_id, image_start_token_id, image_end_token_id;
    int video_start_token_id, video_end_token_id;
    bool has_vision_config;
    /* vision_config (model-spec §E.3), read when has_vision_config;
     * hidden_act other than silu is refused. */
    lm_vision_config vision;
} lm_glm4v_config;

/* Parses `len` bytes of config.json text; `source_name` prefixes errors. */
lm_status lm_glm4v_config_parse(const char *json, size_t len, const char *source_name,
                                lm_glm4v_config *cfg, lm_error *err);
lm_status lm_glm4v_config_load(const char *path, lm_glm4v_config *cfg, lm_error *err);

#endif
