/* config.json of Qwen3.5 checkpoints (model-spec §A.1, §B.1): model_type
 * "qwen3_5" / "qwen3_5_moe" with the text settings in "text_config", or a bare
 * text config ("qwen3_5_text" / "qwen3_5_moe_text").  Absent fields take the
 * Hugging Face defaults; present fields are type- and range-checked.  Valid
 * settings loom does not implement (attention_bias true, hidden_act other
 * than silu, attn_output_gate false, sliding-window attention, a rope_type
 * other than default, mrope_interleaved false, a layer type other than
 * linear/full attention) fail with LM_ERR_UNSUPPORTED naming the field, so
 * loom never runs a model other than the one the config describes. */
#ifndef LOOM_MODELS_QWEN35_CONFIG_H
#define LOOM_MODELS_QWEN35_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "models/vision_config.h"

#define LM_QWEN35_MAX_LAYERS 512
#define LM_QWEN35_MAX_EOS 8

typedef enum { LM_LAYER_LINEAR_ATTENTION, LM_LAYER_FULL_ATTENTION } lm_layer_type;

typedef struct {
    char model_type[32]; /* the top-level model_type */
    bool is_moe;
    int vocab_size, hidden_size;
    int intermediate_size; /* dense MLP width; 0 for MoE unless the config gives one */
    int num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim;
    float rms_norm_eps;
    bool attention_bias; /* false after a successful parse (true is refused) */
    bool tie_word_embeddings; /* true when either config level says true */
    int max_position_embeddings;
    char hidden_act[16]; /* "silu" after a successful parse (others are refused) */
    float rope_theta, partial_rotary_factor;
    int rot_dim;          /* int(head_dim * partial_rotary_factor) */
    int mrope_section[3]; /* sums to rot_dim / 2 */
    int linear_conv_kernel_dim, linear_key_head_dim, linear_value_head_dim;
    int linear_num_key_heads, linear_num_value_heads;
    int full_attention_interval;
    lm_layer_type layer_types[LM_QWEN35_MAX_LAYERS];
    int n_eos;
    int eos_token_ids[LM_QWEN35_MAX_EOS];
    int pad_token_id, bos_token_id; /* -1 if absent */
    int mtp_num_hidden_layers;      /* 0 when the config does not mention an MTP head */
    bool mtp_use_dedicated_embeddings;
    /* MoE only (0 for dense models) */
    int num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size;
    /* top-level multimodal token ids; -1 for a bare text config */
    int image_token_id, video_token_id, vision_start_token_id, vision_end_token_id;
    bool has_vision_config;
    /* vision_config (model-spec §D.1), read when has_vision_config: depth,
     * sizes, patch/merge, the position table, rope theta.  hidden_act other
     * than gelu_pytorch_tanh and a non-empty deepstack_visual_indexes
     * (Qwen3-VL's, not Qwen3.5's) are refused. */
    lm_vision_config vision;
    /* Set by qwen35_gguf.c, never by config.json: the checkpoint holds
     * llama.cpp's forms of two weights, the zero-centred norms with their
     * 1 added and linear_attn.A_log as -exp(A_log) (GGUF's ssm_a), used
     * as stored. */
    bool llama_cpp_forms;
} lm_qwen35_config;

/* Parses `len` bytes of config.json text; `source_name` prefixes errors. */
lm_status lm_qwen35_config_parse(const char *json, size_t len, const char *source_name,
                                 lm_qwen35_config *cfg, lm_error *err);
lm_status lm_qwen35_config_load(const char *path, lm_qwen35_config *cfg, lm_error *err);

#endif
