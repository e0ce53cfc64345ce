/* What the two vision towers share (model-spec §D.3 Qwen3.5, §E.3 GLM-4.6V):
 * the workspace a context carves for images, the checks of one image's
 * patch rows, the index arrays made on the host per image (the 2-D rotary
 * positions in merge-block order, the taps of the learned position table,
 * the attention layout) and bidirectional attention within each frame.
 * Internal to the families' vision files and contexts. */
#ifndef LOOM_MODELS_VISION_COMMON_H
#define LOOM_MODELS_VISION_COMMON_H

#include <stdint.h>

#include "base/error.h"
#include "image/image_processor.h"
#include "models/model.h"
#include "models/step_descriptor.h"
#include "models/vision_config.h"
#include "models/weights.h"
#include "ops/ops.h"

/* The widths a tower's workspace needs. */
typedef struct {
    int patch_dim;    /* in_channels · temporal_patch_size · patch_size² */
    int hidden;       /* C, the tower's width */
    int merge;        /* spatial_merge_size m: m² patch rows make one output row */
    int taps;         /* position-table taps per patch: 4 (bilinear), 16 (bicubic) */
    int row_width;    /* the widest [N, ·] intermediate: 3C (qkv) or the block MLP's */
    int merged_width; /* the widest [N/m², ·] intermediate of the merger */
    int out_hidden;   /* the output rows' width (the text model's hidden size) */
} lm_vision_sizes;

/* Scratch for one image of up to max_patches patch rows (N below), carved
 * with the context's other arrays when the context is made, and host
 * staging for the image's index arrays.  max_patches 0: no images. */
typedef struct {
    int max_patches;
    lm_vision_sizes sizes;
    lm_mem pixels;           /* [N, patch_dim] the patch rows as uploaded */
    lm_mem x, normed;        /* [N, C] the residual stream; a block's normed input or output */
    lm_mem q, k, v, attn;    /* [N, C]; k and v are the image's KV pool (one block per frame) */
    lm_mem wide, wide2;      /* [N, row_width] qkv and MLP intermediates */
    lm_mem merged, merged2, merged3; /* [N/m², merged_width] merger intermediates */
    lm_mem embeds;           /* [N/m², out_hidden] the output rows */
    lm_mem positions;        /* int32 [N][3]: (0, patch row, patch column) for the 2-D rotary */
    lm_mem tap_ids;          /* int32 [N, taps] position-table rows */
    lm_mem tap_weights;      /* float32 [N, taps] their weights */
    lm_mem token_seq, ctx_len; /* int32 [N]: each patch's frame, the frame's length */
    lm_mem frames;           /* int32 [N]: frame f's pool block is f (an identity table) */
    int32_t *host_ints;      /* staging: positions, tap ids, token_seq, ctx_len, frames */
    float *host_weights;     /* staging: tap weights */
} lm_vision_workspace;

/* One image after lm_vision_prepare: n_patches rows in n_frames frames of
 * frame_len = grid_h · grid_w patches; n_out = n_patches / m² output rows. */
typedef struct {
    int n_patches, n_frames, frame_len, grid_h, grid_w, n_out;
} lm_vision_image;

/* The position-table taps of the patch at (row, col) of a grid_h × grid_w
 * frame, for a side × side table: ids[taps] rows and weights[taps]. */
typedef void (*lm_vision_taps_fn)(int row, int col, int grid_h, int grid_w, int side, int32_t *ids,
                                  float *weights);

/* Host staging for max_patches (> 0) rows of these sizes; ws->max_patches
 * and ws->sizes are set.  Then lm_vision_layout carves the backend arrays. */
/* What `lm_model_info.vision` says of a family's tower: the prompt's image
 * ids always (a text-only checkpoint keeps them too), the rest when a
 * tower is loaded (processor non-NULL). */
void lm_vision_describe(lm_vision_info *vi, int32_t image_token_id, int32_t start_id, int32_t end_id,
                        const lm_vision_config *c, int64_t n_parameters, int64_t merger_parameters,
                        const lm_image_processor *processor);

/* The tower's image processor: the family's rule's defaults with the
 * tower's patch geometry, then dir's preprocessor_config.json (dir NULL:
 * random weights, the defaults alone), which must agree with the tower. */
/* A tower's weights: the checkpoint's, or (checkpoint NULL) random ones
 * from a stream of their own, so the text model's weights stay those of the
 * seed.  Only FP8 checkpoints' block scales are taken from `quant` (NULL:
 * none): the tower's matrices are never made int8 (it runs once per image,
 * compute-bound: int8 would save no time). */
void lm_vision_weights_init(lm_weights *w, const lm_checkpoint *checkpoint, uint64_t random_seed,
                            const lm_weights_quant *quant, lm_backend *backend);
lm_status lm_vision_processor_load(lm_smart_resize_rule rule, const lm_vision_config *c,
                                   const char *dir, lm_image_processor *out, lm_error *err);

lm_status lm_vision_workspace_init(lm_vision_workspace *ws, const lm_vision_sizes *sizes,
                                   int max_patches, lm_error *err);
void lm_vision_layout(lm_vision_workspace *ws, lm_carver *c);
void lm_vision_workspace_free(lm_vision_workspace *ws);

/* Checks an image against the tower's sizes and the workspace (LM_ERR_INVALID
 * with a sentence: no workspace, patch_dim or merge size not the tower's, a
 * grid not divisible by the merge size or not matching n_patches, more
 * patches than the workspace holds), then makes its index arrays (taps()
 * for the position table of side `table_side`) and uploads them and the
 * pixels.  Queues uploads only. */
lm_status lm_vision_prepare(lm_backend *be, const lm_vision_workspace *ws,
                            const lm_image_patches *patches, lm_vision_taps_fn taps,
                            int table_side, lm_vision_image *img, lm_error *err);

/* Bidirectional attention of every patch over the patches of its own frame
 * (model-spec §D.3, trap 23): qkv [N, 3C] rows split [q | k | v], each
 * n_heads heads of C / n_heads (head-major); the 2-D rotary on q and k; then
 * the paged attention op over ws->k / ws->v as a pool of one block per frame
 * (frame_len tokens each, identity block table; every patch attends to the
 * whole of its frame).  Leaves [N, C] in ws->attn. */
void lm_vision_attention(lm_backend *be, const lm_vision_workspace *ws, const lm_vision_image *img,
                         lm_mem qkv, int n_heads, const lm_rope_params *rope);

/* The output rows [n_out, out_hidden] into host memory (waits). */
lm_status lm_vision_download(lm_backend *be, const lm_vision_workspace *ws,
                             const lm_vision_image *img, float *embeds, lm_error *err);

#endif
