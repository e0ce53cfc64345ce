/* The engine's side of images: the vision workspace and processor chosen
 * at create, encoding each image once (through the cache) right before the
 * first step whose prefill chunk reaches its rows, and the rows and
 * positions that image tokens carry in the StepBatch.  Decoding and
 * preprocessing happen at submit (request_images.c). */
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"

#define DEFAULT_MAX_IMAGE_PIXELS ((int64_t)1 << 20)
#define DEFAULT_IMAGE_CACHE_BYTES ((int64_t)256 << 20)

lm_status lm_engine_images_init(loom_engine *e, const lm_model_info *info,
                                lm_context_options *context, lm_error *err) {
    const loom_engine_options *o = &e->options;
    int64_t cap = o->max_image_pixels == 0 ? DEFAULT_MAX_IMAGE_PIXELS : o->max_image_pixels;
    int64_t cache = o->image_cache_bytes == 0 ? DEFAULT_IMAGE_CACHE_BYTES
                    : o->image_cache_bytes < 0 ? 0 : o->image_cache_bytes;
    if (o->max_image_pixels < -1 || (cap > 0 && cap < 1024) || cap > ((int64_t)1 << 28))
        return lm_fail(err, LM_ERR_INVALID,
                       "max_image_pixels %lld is out of range: -1 (off) or 1024 .. 268435456",
                       (long long)o->max_image_pixels);
    int64_t decode = o->max_image_decode_pixels == 0 ? LM_IMAGE_DEFAULT_MAX_PIXELS : o->max_image_decode_pixels;
    if (decode < LM_IMAGE_MIN_MAX_PIXELS || decode > LM_IMAGE_MAX_MAX_PIXELS)
        return lm_fail(err, LM_ERR_INVALID, "max_image_decode_pixels %lld is out of range: %lld .. %lld",
                       (long long)o->max_image_decode_pixels, (long long)LM_IMAGE_MIN_MAX_PIXELS,
                       (long long)LM_IMAGE_MAX_MAX_PIXELS);
    e->images.limits = lm_image_default_limits();
    e->images.limits.max_pixels = decode;
    lm_image_cache_init(&e->images.cache, (size_t)cache);
    if (!info->vision.present || !lm_model_has_vision(e->model) || cap < 0) return LM_OK;
    e->images.processor = info->vision.processor;
    e->images.processor.pixel_cap = cap;
    /* The most patches an image can take after smart_resize: the capped
     * budget (or the processor's minimum, when it is larger), one frame. */
    const lm_image_processor *p = &e->images.processor;
    int64_t budget = p->max_pixels < cap ? p->max_pixels : cap;
    if (budget < p->min_pixels) budget = p->min_pixels;
    int64_t side = (int64_t)p->patch_size * p->merge_size;
    int64_t patches = (budget + side * side) / ((int64_t)p->patch_size * p->patch_size);
    if (patches > (1 << 22)) patches = 1 << 22;
    e->images.max_patches = (int)patches;
    context->max_image_patches = e->images.max_patches;
    e->images.on = true;
    if (e->tokenizer) {
        const char *start = lm_tokenizer_id_to_token(e->tokenizer, info->vision.vision_start_token_id);
        const char *pad = lm_tokenizer_id_to_token(e->tokenizer, info->vision.image_token_id);
        const char *end = lm_tokenizer_id_to_token(e->tokenizer, info->vision.vision_end_token_id);
        if (start && pad && end)
            snprintf(e->images.marker, sizeof e->images.marker, "%s%s%s", start, pad, end);
    }
    return LM_OK;
}

const char *loom_engine_image_marker(const loom_engine *e) {
    return e->images.on && e->images.marker[0] ? e->images.marker : NULL;
}

static lm_status encode(loom_engine *e, lm_request_image *img, lm_error *err) {
    uint64_t digest = lm_image_processor_digest(&e->images.processor);
    img->embedding = lm_image_cache_find(&e->images.cache, img->file, img->file_bytes, digest);
    if (!img->embedding) {
        int rows = lm_image_tokens(&img->patches), H = lm_model_describe(e->model)->hidden_size;
        lm_image_embedding *emb = lm_image_embedding_create(img->file, img->file_bytes, digest, rows, H);
        if (!emb) return lm_fail(err, LM_ERR_NOMEM, "out of memory for an image's %d rows", rows);
        lm_status st = lm_model_encode_image(e->context, &img->patches, emb->rows, err);
        if (st != LM_OK) {
            lm_image_embedding_unref(emb);
            return st;
        }
        e->images.encoded++;
        lm_image_cache_add(&e->images.cache, emb);
        img->embedding = emb;
    }
    lm_image_patches_free(&img->patches); /* the rows stay with the request */
    return LM_OK;
}

void lm_engine_prepare_images(loom_engine *e, lm_step_plan *plan) {
    int kept = 0;
    for (int i = 0; i < plan->n; i++) {
        lm_plan_entry *entry = &plan->entries[i];
        lm_sequence *seq = entry->seq;
        loom_request *r = seq->request;
        int from = seq->n_cached, to = seq->n_cached + entry->n_new;
        lm_error err = {0};
        lm_status st = LM_OK;
        for (int k = 0; k < r->n_images && st == LM_OK; k++) {
            lm_request_image *img = &r->images[k];
            if (!img->embedding && img->span.first < to && img->span.first + img->span.count > from)
                st = encode(e, img, &err);
        }
        if (st != LM_OK) {
            char message[LM_ERROR_MESSAGE_MAX + 32];
            snprintf(message, sizeof message, "encoding an image: %s", err.message);
            lm_engine_finish_error(e, seq, message);
            continue;
        }
        plan->entries[kept++] = *entry;
    }
    plan->n = kept;
}

void lm_engine_images_free(lm_engine_images *images) { lm_image_cache_free(&images->cache); }

void lm_engine_images_stats(const lm_engine_images *images, loom_stats *stats) {
    stats->images_encoded = images->encoded;
    stats->image_cache_hits = images->cache.hits;
    stats->image_cache_bytes = images->cache.used;
}

const float *lm_engine_input_row(const lm_sequence *seq, int pos) {
    const loom_request *r = seq->request;
    if (pos >= seq->n_prompt) return NULL;
    for (int k = 0; k < r->n_images; k++) {
        const lm_request_image *img = &r->images[k];
        if (pos >= img->span.first && pos < img->span.first + img->span.count)
            return img->embedding->rows +
                   (size_t)(pos - img->span.first) * (size_t)img->embedding->width;
    }
    return NULL;
}

void lm_engine_position(const lm_sequence *seq, int pos, int32_t out[3]) {
    const loom_request *r = seq->request;
    if (r->positions && pos < seq->n_prompt) {
        memcpy(out, r->positions + 3 * (size_t)pos, sizeof(int32_t) * 3);
        return;
    }
    out[0] = out[1] = out[2] = pos + r->rope_delta; /* text: t = h = w = index (+ delta) */
}
