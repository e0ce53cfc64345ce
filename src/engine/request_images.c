#include "engine/request_images.h"

#include <stdlib.h>
#include <string.h>

#include "io/image_decode.h"

static lm_status read_image(lm_request_image *img, const loom_image *in, int index,
                            const lm_image_processor *processor, int max_patches, lm_error *err) {
    lm_image_limits limits = lm_image_default_limits();
    if (!in->data || in->size == 0) return lm_fail(err, LM_ERR_INVALID, "image %d is empty", index + 1);
    if (in->size > limits.max_bytes)
        return lm_fail(err, LM_ERR_INVALID, "image %d is %zu bytes; the limit is %zu", index + 1,
                       in->size, limits.max_bytes);
    lm_image_rgb rgb = {0};
    lm_error why = {0};
    lm_status st = lm_image_decode(in->data, in->size, &limits, &rgb, &why);
    if (st == LM_OK) {
        st = lm_image_preprocess(processor, &rgb, &img->patches, &why);
        lm_image_rgb_free(&rgb);
    }
    if (st != LM_OK) return lm_fail(err, LM_ERR_INVALID, "image %d: %s", index + 1, lm_image_error_detail(why.message));
    if (img->patches.n_patches > max_patches) /* only images of extreme aspect ratios get here */
        return lm_fail(err, LM_ERR_INVALID,
                       "image %d is %d x %d patches after resizing; the vision workspace holds %d",
                       index + 1, img->patches.grid_h, img->patches.grid_w, max_patches);
    img->file = malloc(in->size);
    if (!img->file) return lm_fail(err, LM_ERR_NOMEM, "out of memory for image %d", index + 1);
    memcpy(img->file, in->data, in->size);
    img->file_bytes = in->size;
    img->content_hash = lm_image_file_hash(img->file, img->file_bytes, 0);
    img->grid = (lm_image_grid){img->patches.grid_t, img->patches.grid_h, img->patches.grid_w,
                                img->patches.merge_size};
    return LM_OK;
}

lm_status lm_request_attach_images(loom_request *r, const loom_request_params *p,
                                   const lm_vision_info *vision,
                                   const lm_image_processor *processor, int max_patches,
                                   lm_error *err) {
    r->params.images = NULL; /* the caller's memory: what is needed is copied below */
    r->params.n_images = 0;
    if (p->n_images == 0) return LM_OK;
    if (p->n_images < 0 || p->n_images > LOOM_MAX_IMAGES || !p->images)
        return lm_fail(err, LM_ERR_INVALID, "a request takes at most %d images", LOOM_MAX_IMAGES);
    if (!vision->present)
        return lm_fail(err, LM_ERR_INVALID, "this model has no vision tower: it takes no images");
    if (!processor)
        return lm_fail(err, LM_ERR_INVALID, "images are turned off on this server (--max-image-pixels -1)");
    r->images = calloc((size_t)p->n_images, sizeof *r->images);
    if (!r->images) return lm_fail(err, LM_ERR_NOMEM, "out of memory for %d images", p->n_images);
    r->n_images = p->n_images;
    int64_t rows = 0;
    for (int i = 0; i < p->n_images; i++) {
        lm_status st = read_image(&r->images[i], &p->images[i], i, processor, max_patches, err);
        if (st != LM_OK) return st;
        rows += lm_image_grid_tokens(&r->images[i].grid);
    }
    int64_t room = (int64_t)p->n_prompt + rows;
    if (room > (1 << 24)) return lm_fail(err, LM_ERR_INVALID, "the images take %lld tokens", (long long)rows);
    int32_t *expanded = malloc(sizeof(int32_t) * (size_t)room);
    lm_image_grid grids[LOOM_MAX_IMAGES];
    lm_image_span spans[LOOM_MAX_IMAGES];
    for (int i = 0; i < r->n_images; i++) grids[i] = r->images[i].grid;
    int n = 0;
    lm_status st = expanded ? lm_expand_image_placeholders(r->prompt, p->n_prompt, vision->image_token_id,
                                                           grids, r->n_images, expanded, (int)room, &n,
                                                           spans, err)
                            : lm_fail(err, LM_ERR_NOMEM, "out of memory for the prompt");
    if (st == LM_OK && !(r->positions = malloc(sizeof(int32_t) * 3 * (size_t)n)))
        st = lm_fail(err, LM_ERR_NOMEM, "out of memory for the prompt's positions");
    if (st != LM_OK) {
        free(expanded);
        return st;
    }
    for (int i = 0; i < r->n_images; i++) r->images[i].span = spans[i];
    lm_image_prompt_positions(n, grids, spans, r->n_images, r->positions, &r->rope_delta);
    free(r->prompt);
    r->prompt = expanded;
    r->params.prompt = expanded;
    r->params.n_prompt = n;
    return LM_OK;
}
