/* The GLM-4.6V vision tower (model-spec §E.3; the dense GLM-4.6V-Flash has
 * the same one, §E.6): patch embedding + RMSNorm, bicubic-interpolated
 * position embedding, blocks of RMSNorm + attention with the 2-D rotary +
 * RMSNorm + SwiGLU, a final RMSNorm, the 2×2 downsample convolution and the
 * merger (projection, LayerNorm, erf-GELU, SwiGLU).  Part of the glm4v
 * family: loaded with the model (model.visual.*), run by its encode_image. */
#ifndef LOOM_MODELS_GLM4V_VISION_H
#define LOOM_MODELS_GLM4V_VISION_H

#include "io/checkpoint.h"
#include "models/expert_weights.h"
#include "image/image_processor.h"
#include "models/vision_common.h"
#include "models/vision_config.h"
#include "models/weights.h"
#include "ops/ops.h"

typedef struct {
    lm_mem norm1, norm2;     /* RMSNorm, plain w, eps vision_config.rms_norm_eps */
    lm_matrix qkv, proj;     /* attn.qkv [3C, C], attn.proj [C, C] (no bias) */
    lm_mem qkv_bias;         /* attention_bias only; else buffer NULL */
    lm_swiglu mlp;           /* mlp.{gate,up,down}_proj, width mlp_width */
} lm_glm4v_vision_block;

typedef struct lm_glm4v_vision {
    lm_vision_config config;
    lm_weights weights; /* its own, so the text model's counts stay the text model's */
    int patch_dim, head_dim;
    /* Widths read from the tensors: transformers sizes the blocks' MLP by
     * out_hidden_size and the merger's SwiGLU by intermediate_size. */
    int mlp_width, merger_width, out_hidden;
    lm_matrix patch_embed;   /* Conv3d [C, 3, tp, p, p] as [C, 3·tp·p·p] */
    lm_mem patch_bias;
    lm_mem post_conv_norm;   /* RMSNorm after the patch embedding */
    lm_matrix pos_embed;     /* [side², C] */
    int pos_side;
    lm_glm4v_vision_block *blocks;
    lm_mem post_norm;        /* RMSNorm after the blocks */
    lm_matrix downsample;    /* Conv2d [O, C, m, m] as [O, (kh, kw, c)]: one matmul per m² rows */
    lm_mem downsample_bias;
    lm_matrix merger_proj;   /* [O, O], no bias */
    lm_mem merger_norm_weight, merger_norm_bias; /* LayerNorm, eps 1e-5 */
    lm_swiglu merger;        /* gate/up [W, O], down [O, W], no bias */
    lm_rope_params rope;
    int64_t n_parameters;
    lm_image_processor processor;
} lm_glm4v_vision;

/* The tower of a checkpoint whose config.json has a vision_config (cfg),
 * when its tensors are there (model.visual.patch_embed.proj.weight): *out
 * NULL and LM_OK when they are not.  The output width must be text_hidden.
 * The image processor settings are dir's preprocessor_config.json over
 * Glm4vImageProcessor's defaults and must agree with the tower's patch and
 * merge sizes. */
/* checkpoint NULL: random weights of cfg's shape (benchmarks), from
 * random_seed, with the processor's defaults. */
lm_status lm_glm4v_vision_load(const lm_checkpoint *checkpoint, uint64_t random_seed,
                               const lm_weights_quant *quant,
                               lm_backend *backend, const lm_vision_config *cfg, int text_hidden,
                               lm_glm4v_vision **out, lm_error *err);
void lm_glm4v_vision_free(lm_glm4v_vision *v);

/* The widths its workspace needs. */
lm_vision_sizes lm_glm4v_vision_sizes(const lm_glm4v_vision *v);

/* One image (patches in merge-block order) through the tower:
 * embeds [n_patches / m², out_hidden] in host memory. */
lm_status lm_glm4v_vision_encode(const lm_glm4v_vision *v, lm_backend *be,
                                 const lm_vision_workspace *ws, const lm_image_patches *patches,
                                 float *embeds, lm_error *err);

void lm_glm4v_vision_describe(const lm_glm4v_vision *v, FILE *f);

#endif
