/* An image prompt run straight through the model interface (`loom
 * logits`): the images decoded, preprocessed and encoded by the tower, the
 * placeholders expanded, the positions computed and the rows the
 * placeholders take — what the engine does at submit and before the first
 * chunk, for one sequence runner. */
#ifndef LOOM_CLI_IMAGE_PROMPT_H
#define LOOM_CLI_IMAGE_PROMPT_H

#include "cli/image_files.h"
#include "engine/sequence_runner.h"
#include "models/model.h"

typedef struct {
    int32_t *ids;        /* the expanded prompt */
    int n;
    int32_t *positions;  /* [n][3] */
    const float **rows;  /* [n]: image rows, else NULL */
    float *embeds[LOOM_MAX_IMAGES];
    int n_images, rope_delta;
} lm_cli_image_prompt;

/* Builds the prompt of ids (one placeholder per image, or every image row)
 * and images, and starts runner on model with room for the prompt and
 * extra_tokens more and a vision workspace for these images.  pixel_cap >
 * 0 caps the processor's max_pixels; decode_pixels > 0 the pixels a file
 * may declare (lm_image_limits.max_pixels; 0: the default). */
lm_status lm_cli_image_prompt_build(lm_model *model, const lm_cli_images *images,
                                    const int32_t *ids, int n, int extra_tokens, int64_t pixel_cap,
                                    int64_t decode_pixels, lm_sequence_runner *runner,
                                    lm_cli_image_prompt *out, lm_error *err);
void lm_cli_image_prompt_free(lm_cli_image_prompt *p);

#endif
