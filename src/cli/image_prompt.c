#include "cli/image_prompt.h"

#include <stdlib.h>
#include <string.h>

#include "io/image_decode.h"
#include "image/image_processor.h"
#include "image/multimodal_prompt.h"

static lm_status preprocess_all(const lm_model_info *info, const lm_cli_images *images,
                                int64_t pixel_cap, int64_t decode_pixels, lm_image_patches *patches,
                                lm_error *err) {
    lm_image_processor processor = info->vision.processor;
    processor.pixel_cap = pixel_cap > 0 ? pixel_cap : 0;
    lm_image_limits limits = lm_image_default_limits();
    if (decode_pixels > 0) limits.max_pixels = decode_pixels;
    for (int i = 0; i < images->n; i++) {
        lm_image_rgb rgb = {0};
        lm_error why = {0};
        lm_status st = lm_image_decode(images->images[i].data, images->images[i].size, &limits, &rgb, &why);
        if (st == LM_OK) st = lm_image_preprocess(&processor, &rgb, &patches[i], &why);
        lm_image_rgb_free(&rgb);
        if (st != LM_OK) return lm_fail(err, st, "image %d: %s", i + 1, lm_image_error_detail(why.message));
    }
    return LM_OK;
}

lm_status lm_cli_image_prompt_build(lm_model *model, const lm_cli_images *images,
                                    const int32_t *ids, int n, int extra_tokens, int64_t pixel_cap,
                                    int64_t decode_pixels, lm_sequence_runner *runner,
                                    lm_cli_image_prompt *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    const lm_model_info *info = lm_model_describe(model);
    if (!lm_model_has_vision(model))
        return lm_fail(err, LM_ERR_INVALID, "this model has no vision tower: it takes no images");
    lm_image_patches patches[LOOM_MAX_IMAGES] = {0};
    lm_image_grid grids[LOOM_MAX_IMAGES];
    lm_image_span spans[LOOM_MAX_IMAGES];
    lm_status st = preprocess_all(info, images, pixel_cap, decode_pixels, patches, err);
    int64_t rows = 0;
    int max_patches = 0;
    for (int i = 0; st == LM_OK && i < images->n; i++) {
        grids[i] = (lm_image_grid){patches[i].grid_t, patches[i].grid_h, patches[i].grid_w,
                                   patches[i].merge_size};
        rows += lm_image_grid_tokens(&grids[i]);
        if (patches[i].n_patches > max_patches) max_patches = patches[i].n_patches;
    }
    int room = 0;
    if (st == LM_OK && (int64_t)n + rows > (1 << 24)) st = lm_fail(err, LM_ERR_INVALID, "the images take too many tokens");
    if (st == LM_OK) {
        room = (int)((int64_t)n + rows);
        out->ids = malloc(sizeof(int32_t) * (size_t)room);
        if (!out->ids) st = lm_fail(err, LM_ERR_NOMEM, "out of memory for the prompt");
    }
    if (st == LM_OK)
        st = lm_expand_image_placeholders(ids, n, info->vision.image_token_id, grids, images->n,
                                          out->ids, room, &out->n, spans, err);
    if (st == LM_OK) {
        out->positions = malloc(sizeof(int32_t) * 3 * (size_t)out->n);
        out->rows = calloc((size_t)out->n, sizeof *out->rows);
        if (!out->positions || !out->rows) st = lm_fail(err, LM_ERR_NOMEM, "out of memory for the prompt");
    }
    if (st == LM_OK) {
        lm_image_prompt_positions(out->n, grids, spans, images->n, out->positions, &out->rope_delta);
        st = lm_sequence_runner_init_vision(runner, model, out->n + extra_tokens, max_patches, err);
    }
    for (int i = 0; st == LM_OK && i < images->n; i++) {
        out->embeds[i] = malloc(sizeof(float) * (size_t)spans[i].count * (size_t)info->hidden_size);
        out->n_images = i + 1;
        if (!out->embeds[i]) st = lm_fail(err, LM_ERR_NOMEM, "out of memory for image %d's rows", i + 1);
        if (st == LM_OK) st = lm_model_encode_image(runner->context, &patches[i], out->embeds[i], err);
        for (int j = 0; st == LM_OK && j < spans[i].count; j++)
            out->rows[spans[i].first + j] = out->embeds[i] + (size_t)j * (size_t)info->hidden_size;
    }
    if (st == LM_OK) runner->position_delta = out->rope_delta;
    for (int i = 0; i < images->n; i++) lm_image_patches_free(&patches[i]);
    if (st != LM_OK) lm_cli_image_prompt_free(out);
    return st;
}

void lm_cli_image_prompt_free(lm_cli_image_prompt *p) {
    free(p->ids);
    free(p->positions);
    free(p->rows);
    for (int i = 0; i < p->n_images; i++) free(p->embeds[i]);
    memset(p, 0, sizeof *p);
}
