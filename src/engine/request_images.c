#include "engine/request_images.h"

#include <stdlib.h>
#include <string.h>

#include "io/image_decode.h"

/* lm_image_preprocess, with the decoded image freed as soon as it is
 * resized: at most the decoded image, the resampler's intermediate and the
 * resized image are held at once, then the resized image and the patches. */
static lm_status decode_and_cut(const loom_image *in, const lm_image_processor *processor,
                                const lm_image_limits *limits, lm_image_patches *out, lm_error *err) {
    lm_image_rgb rgb = {0};
    lm_status st = lm_image_decode(in->data, in->size, limits, &rgb, err);
    if (st != LM_OK) return st;
    int height, width;
    st = lm_smart_resize(processor, rgb.height, rgb.width, &height, &width, err);
    if (st == LM_OK && (height != rgb.height || width != rgb.width)) {
        lm_image_rgb resized;
        st = lm_image_resize_bicubic(&rgb, height, width, &resized, err);
        if (st == LM_OK) {
            lm_image_rgb_free(&rgb);
            rgb = resized;
        }
    }
    if (st == LM_OK) st = lm_image_patchify(processor, &rgb, out, err);
    lm_image_rgb_free(&rgb);
    return st;
}

static lm_status read_image(lm_request_image *img, const loom_image *in, int index,
                            const lm_image_processor *processor, int max_patches,
                            const lm_image_limits *limits, lm_error *err) {
    if (!in->data || in->size == 0) return lm_fail(err, LM_ERR_INVALID, "image %d is empty", index + 1);
    if (in->size > limits->max_bytes)
        return lm_fail(err, LM_ERR_INVALID, "image %d is %zu bytes; the limit is %zu", index + 1,
                       in->size, limits->max_bytes);
    lm_error why = {0};
    lm_status st = decode_and_cut(in, processor, limits, &img->patches, &why);
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
                                   const lm_image_limits *limits, int max_model_len, lm_error *err) {
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
        lm_status st = read_image(&r->images[i], &p->images[i], i, processor, max_patches, limits, err);
        if (st != LM_OK) return st;
        rows += lm_image_grid_tokens(&r->images[i].grid);
        /* the expanded prompt is at least this long (every placeholder
         * replaced by its image's rows, or already repeated as many
         * times): once it leaves no room in the context, the images
         * after this one are not decoded */
        int64_t at_least = (int64_t)p->n_prompt - p->n_images + rows;
        if (at_least < p->n_prompt) at_least = p->n_prompt;
        if (max_model_len > 0 && at_least >= max_model_len)
            return lm_fail(err, (lm_status)LOOM_ERR_TOO_LONG,
                           "image %d: the images up to it take %lld tokens, which leave no room in this "
                           "model's maximum context length of %d tokens (the prompt has %d more)",
                           i + 1, (long long)rows, max_model_len, p->n_prompt - p->n_images);
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
