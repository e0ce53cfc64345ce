/* config.json's vision_config as loom reads it for both vision towers
 * (model-spec §D.1 Qwen3.5, §E.3 GLM-4.6V).  Each family sets its own
 * defaults (transformers' Qwen3_5VisionConfig / Glm4vVisionConfig), reads
 * the shared fields with lm_config_read_vision (models/config_fields.h),
 * then its own and refuses what it does not implement. */
#ifndef LOOM_MODELS_VISION_CONFIG_H
#define LOOM_MODELS_VISION_CONFIG_H

#include <stdbool.h>

typedef struct {
    int depth, hidden_size, num_heads;
    /* Qwen3.5: the block MLP's width.  GLM: the merger's SwiGLU width (its
     * blocks' MLP is out_hidden_size wide); the loader takes both from the
     * tensors' shapes. */
    int intermediate_size;
    int in_channels, patch_size, temporal_patch_size, spatial_merge_size;
    int out_hidden_size;         /* = the text model's hidden size */
    int num_position_embeddings; /* Qwen3.5: the learned position table (a square grid) */
    int image_size;              /* GLM: the position table covers (image_size / patch_size)² */
    float rms_norm_eps;          /* GLM's RMSNorms */
    bool attention_bias;         /* GLM: a bias on qkv (Qwen3.5's always has one) */
    float rope_theta;            /* the 2-D rotary: rope_parameters.rope_theta, 10000 */
} lm_vision_config;

#endif
