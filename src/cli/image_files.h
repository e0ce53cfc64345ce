/* Images named on the command line (`--image FILE`, chat's `/image FILE`):
 * the files read (bounded), and prompts given the model's image markers.
 * Decoding happens where the images are used (the engine at submit, or
 * image_prompt.c for `loom logits`). */
#ifndef LOOM_CLI_IMAGE_FILES_H
#define LOOM_CLI_IMAGE_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "loom.h"

typedef struct {
    loom_image images[LOOM_MAX_IMAGES];
    int n;
} lm_cli_images;

/* The --image FILE options of a command line, in order. */
typedef struct {
    const char *paths[LOOM_MAX_IMAGES];
    int n;
} lm_cli_image_paths;

/* An LM_OPT_CUSTOM parser appending to an lm_cli_image_paths. */
bool lm_cli_parse_image_path(const char *value, void *field, char *message, size_t size);

/* Reads path (at most the decoder's byte limit) as the next image. */
lm_status lm_cli_images_add(lm_cli_images *im, const char *path, lm_error *err);
void lm_cli_images_clear(lm_cli_images *im);

/* text with one marker per image in front (images before the question, as
 * chat templates place them), unless text already holds n_images markers;
 * malloc'd. */
char *lm_cli_text_with_images(const char *text, const char *marker, int n_images);

#endif
