/* The vision towers' shared pieces: workspace, per-image index arrays,
 * attention within each frame. */
#include "models/vision_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* int32 entries of the staging array: positions [N][3], tap ids [N][taps],
 * token_seq, ctx_len and frames [N] each. */
static size_t staged_ints(int max_patches, int taps) {
    return (size_t)max_patches * (size_t)(3 + taps + 3);
}

lm_status lm_vision_workspace_init(lm_vision_workspace *ws, const lm_vision_sizes *sizes,
                                   int max_patches, lm_error *err) {
    memset(ws, 0, sizeof *ws);
    ws->max_patches = max_patches;
    ws->sizes = *sizes;
    ws->host_ints = malloc(sizeof(int32_t) * staged_ints(max_patches, sizes->taps));
    ws->host_weights = malloc(sizeof(float) * (size_t)max_patches * (size_t)sizes->taps + 1);
    if (!ws->host_ints || !ws->host_weights) {
        lm_vision_workspace_free(ws);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the vision workspace's staging");
    }
    return LM_OK;
}

void lm_vision_workspace_free(lm_vision_workspace *ws) {
    free(ws->host_ints);
    free(ws->host_weights);
    memset(ws, 0, sizeof *ws);
}

void lm_vision_layout(lm_vision_workspace *ws, lm_carver *c) {
    const lm_vision_sizes *s = &ws->sizes;
    size_t N = (size_t)ws->max_patches, C = (size_t)s->hidden;
    size_t m2 = (size_t)s->merge * (size_t)s->merge, out_rows = (N + m2 - 1) / m2;
    size_t taps = (size_t)s->taps;
    lm_carve(c, &ws->pixels, N * (size_t)s->patch_dim);
    lm_carve(c, &ws->x, N * C);
    lm_carve(c, &ws->normed, N * C);
    lm_carve(c, &ws->q, N * C);
    lm_carve(c, &ws->k, N * C);
    lm_carve(c, &ws->v, N * C);
    lm_carve(c, &ws->attn, N * C);
    lm_carve(c, &ws->wide, N * (size_t)s->row_width);
    lm_carve(c, &ws->wide2, N * (size_t)s->row_width);
    lm_carve(c, &ws->merged, out_rows * (size_t)s->merged_width);
    lm_carve(c, &ws->merged2, out_rows * (size_t)s->merged_width);
    lm_carve(c, &ws->merged3, out_rows * (size_t)s->merged_width);
    lm_carve(c, &ws->embeds, out_rows * (size_t)s->out_hidden);
    lm_carve(c, &ws->positions, N * 3);
    lm_carve(c, &ws->tap_ids, N * taps + 1);
    lm_carve(c, &ws->tap_weights, N * taps + 1);
    lm_carve(c, &ws->token_seq, N);
    lm_carve(c, &ws->ctx_len, N);
    lm_carve(c, &ws->frames, N);
}

static lm_status check(const lm_vision_workspace *ws, const lm_image_patches *p, lm_error *err) {
    const lm_vision_sizes *s = &ws->sizes;
    if (ws->max_patches <= 0)
        return lm_fail(err, LM_ERR_INVALID,
                       "image: this context has no vision workspace (it was made with "
                       "max_image_patches 0)");
    if (p->patch_dim != s->patch_dim)
        return lm_fail(err, LM_ERR_INVALID,
                       "image: patch rows of %d values, but the vision tower's patch embedding "
                       "takes %d (3 channels x temporal patch x patch size squared)",
                       p->patch_dim, s->patch_dim);
    if (p->merge_size != s->merge)
        return lm_fail(err, LM_ERR_INVALID,
                       "image: made for a merge size of %d, but the vision tower merges %d x %d "
                       "patches",
                       p->merge_size, s->merge, s->merge);
    if (p->grid_t < 1 || p->grid_h < 1 || p->grid_w < 1 || p->grid_h % s->merge != 0 ||
        p->grid_w % s->merge != 0)
        return lm_fail(err, LM_ERR_INVALID,
                       "image: grid (t %d, h %d, w %d) must be positive with h and w multiples "
                       "of the merge size %d",
                       p->grid_t, p->grid_h, p->grid_w, s->merge);
    int64_t n = (int64_t)p->grid_t * p->grid_h * p->grid_w;
    if (n != p->n_patches)
        return lm_fail(err, LM_ERR_INVALID,
                       "image: grid (t %d, h %d, w %d) has %lld patches but the image holds %d rows",
                       p->grid_t, p->grid_h, p->grid_w, (long long)n, p->n_patches);
    if (p->n_patches > ws->max_patches)
        return lm_fail(err, LM_ERR_INVALID,
                       "image: %d patches is more than this context's vision workspace holds "
                       "(max_image_patches %d)",
                       p->n_patches, ws->max_patches);
    if (!p->pixels) return lm_fail(err, LM_ERR_INVALID, "image: no pixel rows");
    return LM_OK;
}

lm_status lm_vision_prepare(lm_backend *be, const lm_vision_workspace *ws,
                            const lm_image_patches *p, lm_vision_taps_fn taps, int table_side,
                            lm_vision_image *img, lm_error *err) {
    lm_status st = check(ws, p, err);
    if (st != LM_OK) return st;
    int m = ws->sizes.merge, T = ws->sizes.taps, N = p->n_patches;
    int frame_len = p->grid_h * p->grid_w, blocks_per_row = p->grid_w / m;
    *img = (lm_vision_image){.n_patches = N, .n_frames = p->grid_t, .frame_len = frame_len,
                             .grid_h = p->grid_h, .grid_w = p->grid_w, .n_out = N / (m * m)};
    int32_t *positions = ws->host_ints, *tap_ids = positions + (size_t)N * 3;
    int32_t *token_seq = tap_ids + (size_t)N * T, *ctx_len = token_seq + N, *frames = ctx_len + N;
    for (int i = 0; i < N; i++) {
        /* merge-block order (model-spec §D.2 step 5): frame, block row, block
         * column, then the m x m patches of the block in raster order */
        int j = i % frame_len, block = j / (m * m), within = j % (m * m);
        int row = block / blocks_per_row * m + within / m;
        int col = block % blocks_per_row * m + within % m;
        positions[3 * i] = 0;
        positions[3 * i + 1] = row;
        positions[3 * i + 2] = col;
        taps(row, col, p->grid_h, p->grid_w, table_side, tap_ids + (size_t)i * T,
             ws->host_weights + (size_t)i * T);
        token_seq[i] = i / frame_len;
        ctx_len[i] = frame_len;
        frames[i] = i; /* entries past n_frames are not read */
    }
    lm_upload(be, ws->pixels, p->pixels, sizeof(float) * (size_t)N * (size_t)p->patch_dim);
    lm_upload(be, ws->positions, positions, sizeof(int32_t) * (size_t)N * 3);
    lm_upload(be, ws->tap_ids, tap_ids, sizeof(int32_t) * (size_t)N * T);
    lm_upload(be, ws->tap_weights, ws->host_weights, sizeof(float) * (size_t)N * T);
    lm_upload(be, ws->token_seq, token_seq, sizeof(int32_t) * (size_t)N);
    lm_upload(be, ws->ctx_len, ctx_len, sizeof(int32_t) * (size_t)N);
    lm_upload(be, ws->frames, frames, sizeof(int32_t) * (size_t)p->grid_t);
    return LM_OK;
}

void lm_vision_attention(lm_backend *be, const lm_vision_workspace *ws, const lm_vision_image *img,
                         lm_mem qkv, int n_heads, const lm_rope_params *rope) {
    int N = img->n_patches, C = ws->sizes.hidden, D = C / n_heads;
    lm_copy_rows(be, ws->q, C, qkv, 3 * C, N, C);
    lm_copy_rows(be, ws->k, C, lm_mem_f32(qkv, (size_t)C), 3 * C, N, C);
    lm_copy_rows(be, ws->v, C, lm_mem_f32(qkv, 2 * (size_t)C), 3 * C, N, C);
    lm_rope(be, ws->q, N, n_heads, D, ws->positions, rope);
    lm_rope(be, ws->k, N, n_heads, D, ws->positions, rope);
    /* k and v [N, C] are already a pool of n_frames blocks of frame_len
     * tokens: frame f's keys are block f. */
    lm_kv_layer pool = {.k = ws->k, .v = ws->v, .n_blocks = img->n_frames,
                        .block_size = img->frame_len, .n_kv_heads = n_heads, .head_dim = D};
    lm_attention_batch batch = {.n_tokens = N,
                                .token_seq = ws->token_seq,
                                .ctx_len = ws->ctx_len,
                                .block_tables = ws->frames,
                                .table_stride = 1,
                                .max_ctx_len = img->frame_len,
                                .n_heads = n_heads,
                                .n_kv_heads = n_heads,
                                .head_dim = D,
                                .scale = 1.0f / sqrtf((float)D)};
    lm_attention(be, ws->attn, ws->q, &pool, &batch);
}

lm_status lm_vision_download(lm_backend *be, const lm_vision_workspace *ws,
                             const lm_vision_image *img, float *embeds, lm_error *err) {
    return lm_download(be, embeds, ws->embeds,
                       sizeof(float) * (size_t)img->n_out * (size_t)ws->sizes.out_hidden, err);
}

lm_status lm_vision_processor_load(lm_smart_resize_rule rule, const lm_vision_config *c,
                                   const char *dir, lm_image_processor *out, lm_error *err) {
    lm_image_processor_defaults(rule, out);
    /* the patch geometry is the tower's when the folder has no
     * preprocessor_config.json; one that says otherwise is refused below */
    out->patch_size = c->patch_size;
    out->temporal_patch_size = c->temporal_patch_size;
    out->merge_size = c->spatial_merge_size;
    if (!dir) return LM_OK;
    lm_status st = lm_image_processor_read(dir, out, err);
    if (st != LM_OK) return st;
    if (out->patch_size != c->patch_size || out->temporal_patch_size != c->temporal_patch_size ||
        out->merge_size != c->spatial_merge_size)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: preprocessor_config.json makes patches of %d (temporal %d, merge %d) "
                       "but config.json's vision_config has patch_size %d, temporal_patch_size "
                       "%d, spatial_merge_size %d",
                       dir, out->patch_size, out->temporal_patch_size, out->merge_size, c->patch_size,
                       c->temporal_patch_size, c->spatial_merge_size);
    return LM_OK;
}

void lm_vision_describe(lm_vision_info *vi, int32_t image_token_id, int32_t start_id, int32_t end_id,
                        const lm_vision_config *c, int64_t n_parameters, int64_t merger_parameters,
                        const lm_image_processor *processor) {
    memset(vi, 0, sizeof *vi);
    vi->image_token_id = image_token_id;
    vi->vision_start_token_id = start_id;
    vi->vision_end_token_id = end_id;
    if (!processor) return;
    vi->present = true;
    vi->depth = c->depth;
    vi->hidden_size = c->hidden_size;
    vi->n_heads = c->num_heads;
    vi->n_parameters = n_parameters;
    vi->merger_parameters = merger_parameters;
    vi->processor = *processor;
}

void lm_vision_weights_init(lm_weights *w, const lm_checkpoint *checkpoint, uint64_t random_seed,
                            const lm_weights_quant *quant, lm_backend *backend) {
    if (checkpoint)
        lm_weights_init(w, checkpoint, backend);
    else
        lm_weights_init_random(w, random_seed ^ 0x76697369u, false, backend);
    lm_weights_set_quant(w, &(lm_weights_quant){.fp8_block_rows = quant ? quant->fp8_block_rows : 0,
                                                .fp8_block_cols = quant ? quant->fp8_block_cols : 0,
                                                .mlx_bits = quant ? quant->mlx_bits : 0,
                                                .mlx_group = quant ? quant->mlx_group : 0,
                                                .mlx_overrides = quant ? quant->mlx_overrides : false});
}
