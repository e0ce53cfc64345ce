/* The prompt side of images (model-spec §D.4-D.5, §E.5): each image's
 * placeholder repeated once per row of the vision tower's output, and the
 * 3-component positions of a prompt that mixes text and image tokens.
 *
 * Both families use the same rules; only the ids differ (lm_vision_info). */
#ifndef LOOM_IMAGE_MULTIMODAL_PROMPT_H
#define LOOM_IMAGE_MULTIMODAL_PROMPT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

/* An image's grid in patches (t, h, w) and the merge that turns 2-D blocks
 * of merge x merge patches into one token. */
typedef struct {
    int grid_t, grid_h, grid_w;
    int merge_size;
} lm_image_grid;

static inline int lm_image_grid_tokens(const lm_image_grid *g) {
    return g->grid_t * (g->grid_h / g->merge_size) * (g->grid_w / g->merge_size);
}

/* Where image i's placeholder rows lie in an expanded prompt. */
typedef struct {
    int first, count;
} lm_image_span;

/* The prompt with each image's placeholder expanded, into out (room for
 * max_out ids).  The prompt holds either one placeholder per image (as a
 * chat template writes it) or every image's rows already (as the fixtures'
 * ids): any other count of placeholders is LM_ERR_INVALID saying how many
 * were found and expected.  spans[i] receives image i's rows. */
lm_status lm_expand_image_placeholders(const int32_t *prompt, int n, int32_t image_token_id,
                                       const lm_image_grid *grids, int n_images, int32_t *out,
                                       int max_out, int *n_out, lm_image_span *spans,
                                       lm_error *err);

/* The positions [n][3] (t, h, w) of an expanded prompt whose images lie at
 * spans (from lm_expand_image_placeholders), and the rope delta: a token
 * at index s >= n is at (s + delta) in every component. */
void lm_image_prompt_positions(int n, const lm_image_grid *grids, const lm_image_span *spans,
                               int n_images, int32_t *positions, int *rope_delta);

#endif
