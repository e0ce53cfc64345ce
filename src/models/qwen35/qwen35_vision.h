/* The Qwen3.5 vision tower (model-spec §D.3, a Qwen3-VL-style ViT without
 * deepstack): patch embedding, bilinear-interpolated learned position
 * embedding, blocks of LayerNorm + attention with the 2-D rotary +
 * LayerNorm + tanh-GELU MLP, and the patch merger.  Part of the qwen3_5
 * family: loaded with the model (model.visual.*), run by its encode_image. */
#ifndef LOOM_MODELS_QWEN35_VISION_H
#define LOOM_MODELS_QWEN35_VISION_H

#include "io/checkpoint.h"
#include "image/image_processor.h"
#include "models/vision_common.h"
#include "models/vision_config.h"
#include "models/weights.h"
#include "ops/ops.h"

typedef struct {
    lm_mem norm1_weight, norm1_bias, norm2_weight, norm2_bias; /* LayerNorm, eps 1e-6 */
    lm_matrix qkv, proj, fc1, fc2;                             /* attn.qkv, attn.proj, mlp.linear_fc1/2 */
    lm_mem qkv_bias, proj_bias, fc1_bias, fc2_bias;
} lm_qwen35_vision_block;

typedef struct lm_qwen35_vision {
    lm_vision_config config;
    lm_weights weights; /* its own, so the text model's counts stay the text model's */
    int patch_dim, head_dim, mlp_width;
    lm_matrix patch_embed; /* Conv3d [C, 3, tp, p, p] as [C, 3·tp·p·p] */
    lm_mem patch_bias;
    lm_matrix pos_embed; /* [side², C] */
    int pos_side;
    lm_qwen35_vision_block *blocks;
    lm_mem merger_norm_weight, merger_norm_bias; /* per patch row, before the grouping */
    lm_matrix merger_fc1, merger_fc2;            /* [m²C, m²C], [out, m²C] */
    lm_mem merger_fc1_bias, merger_fc2_bias;
    lm_rope_params rope;
    int64_t n_parameters;
    lm_image_processor processor;
} lm_qwen35_vision;

/* The tower of a checkpoint whose config.json has a vision_config (cfg),
 * when its tensors are there (model.visual.patch_embed.proj.weight): *out
 * NULL and LM_OK when they are not.  Widths come from cfg and are checked
 * against the tensors; out_hidden_size must be text_hidden.  The image
 * processor settings are dir's preprocessor_config.json over Qwen2-VL's
 * defaults and must agree with the tower's patch and merge sizes. */
/* checkpoint NULL: random weights of cfg's shape (benchmarks), from
 * random_seed, with the processor's defaults. */
lm_status lm_qwen35_vision_load(const lm_checkpoint *checkpoint, uint64_t random_seed,
                               const lm_weights_quant *quant,
                                lm_backend *backend, const lm_vision_config *cfg, int text_hidden,
                                lm_qwen35_vision **out, lm_error *err);
void lm_qwen35_vision_free(lm_qwen35_vision *v);

/* The widths its workspace needs. */
lm_vision_sizes lm_qwen35_vision_sizes(const lm_qwen35_vision *v);

/* One image (patches in merge-block order) through the tower:
 * embeds [n_patches / m², out_hidden] in host memory. */
lm_status lm_qwen35_vision_encode(const lm_qwen35_vision *v, lm_backend *be,
                                  const lm_vision_workspace *ws, const lm_image_patches *patches,
                                  float *embeds, lm_error *err);

/* One line per fact for `loom inspect`. */
void lm_qwen35_vision_describe(const lm_qwen35_vision *v, FILE *f);

#endif
