/* The Qwen3.5 vision tower.  Reads top to bottom like model-spec §D.3:
 * loading first, then the position-table taps (§D.3.1), then the forward.
 * All arithmetic is in ops/. */
#include "models/qwen35/qwen35_vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                     \
    do {                                              \
        lm_status try_status_ = (call);               \
        if (try_status_ != LM_OK) return try_status_; \
    } while (0)

#define PREFIX "model.visual."
#define LAYERNORM_EPS 1e-6f

/* ------------------------------------------------------------------ loading */

static lm_status vector(lm_qwen35_vision *v, const char *name, int64_t n, lm_mem *out,
                        lm_error *err) {
    return lm_weights_vector(&v->weights, name, n, 0, false, out, err);
}

/* A Linear layer: name.weight [rows, cols] and name.bias [rows]. */
static lm_status linear(lm_qwen35_vision *v, const char *name, int64_t rows, int64_t cols,
                        lm_matrix *w, lm_mem *b, lm_error *err) {
    char full[256];
    snprintf(full, sizeof full, "%s.weight", name);
    TRY(lm_weights_matrix(&v->weights, full, rows, cols, w, err));
    snprintf(full, sizeof full, "%s.bias", name);
    return vector(v, full, rows, b, err);
}

static lm_status layernorm(lm_qwen35_vision *v, const char *name, int64_t n, lm_mem *w, lm_mem *b,
                           lm_error *err) {
    char full[256];
    snprintf(full, sizeof full, "%s.weight", name);
    TRY(vector(v, full, n, w, err));
    snprintf(full, sizeof full, "%s.bias", name);
    return vector(v, full, n, b, err);
}

static lm_status load_block(lm_qwen35_vision *v, int i, lm_qwen35_vision_block *b, lm_error *err) {
    int64_t C = v->config.hidden_size, I = v->mlp_width;
    char p[128], name[192];
    snprintf(p, sizeof p, PREFIX "blocks.%d.", i);
    snprintf(name, sizeof name, "%snorm1", p);
    TRY(layernorm(v, name, C, &b->norm1_weight, &b->norm1_bias, err));
    snprintf(name, sizeof name, "%snorm2", p);
    TRY(layernorm(v, name, C, &b->norm2_weight, &b->norm2_bias, err));
    snprintf(name, sizeof name, "%sattn.qkv", p);
    TRY(linear(v, name, 3 * C, C, &b->qkv, &b->qkv_bias, err));
    snprintf(name, sizeof name, "%sattn.proj", p);
    TRY(linear(v, name, C, C, &b->proj, &b->proj_bias, err));
    snprintf(name, sizeof name, "%smlp.linear_fc1", p);
    TRY(linear(v, name, I, C, &b->fc1, &b->fc1_bias, err));
    snprintf(name, sizeof name, "%smlp.linear_fc2", p);
    return linear(v, name, C, I, &b->fc2, &b->fc2_bias, err);
}

static lm_status load_tower(lm_qwen35_vision *v, int text_hidden, lm_error *err) {
    const lm_vision_config *c = &v->config;
    const char *dir = v->weights.checkpoint ? lm_checkpoint_dir(v->weights.checkpoint) : "(random weights)";
    int64_t C = c->hidden_size, m2 = (int64_t)c->spatial_merge_size * c->spatial_merge_size;
    if (c->out_hidden_size != text_hidden)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s/config.json: vision_config.out_hidden_size (%d) must be the text "
                       "model's hidden_size (%d): the tower's rows replace text embeddings",
                       dir, c->out_hidden_size, text_hidden);
    v->patch_dim = c->in_channels * c->temporal_patch_size * c->patch_size * c->patch_size;
    v->head_dim = c->hidden_size / c->num_heads;
    v->mlp_width = c->intermediate_size;
    v->pos_side = (int)lround(sqrt((double)c->num_position_embeddings));

    const int64_t conv[5] = {C, c->in_channels, c->temporal_patch_size, c->patch_size,
                             c->patch_size};
    TRY(lm_weights_flat_matrix(&v->weights, PREFIX "patch_embed.proj.weight", 5, conv,
                               &v->patch_embed, err));
    TRY(vector(v, PREFIX "patch_embed.proj.bias", C, &v->patch_bias, err));
    TRY(lm_weights_matrix(&v->weights, PREFIX "pos_embed.weight", c->num_position_embeddings, C,
                          &v->pos_embed, err));
    v->blocks = calloc((size_t)c->depth, sizeof *v->blocks);
    if (!v->blocks) return lm_fail(err, LM_ERR_NOMEM, "out of memory loading the vision tower");
    for (int i = 0; i < c->depth; i++) TRY(load_block(v, i, &v->blocks[i], err));
    TRY(layernorm(v, PREFIX "merger.norm", C, &v->merger_norm_weight, &v->merger_norm_bias, err));
    TRY(linear(v, PREFIX "merger.linear_fc1", m2 * C, m2 * C, &v->merger_fc1, &v->merger_fc1_bias,
               err));
    TRY(linear(v, PREFIX "merger.linear_fc2", c->out_hidden_size, m2 * C, &v->merger_fc2,
               &v->merger_fc2_bias, err));
    v->rope = (lm_rope_params){.rot_dim = v->head_dim, .theta = c->rope_theta, .two_d = true};
    v->n_parameters = lm_weights_parameters_used(&v->weights);

    /* How images become patch rows: Qwen2-VL's processor, as the folder sets it. */
    return lm_vision_processor_load(LM_SMART_RESIZE_QWEN2VL, c, v->weights.checkpoint ? dir : NULL, &v->processor, err);
}

lm_status lm_qwen35_vision_load(const lm_checkpoint *checkpoint, uint64_t random_seed,
                               const lm_weights_quant *quant,
                                lm_backend *backend, const lm_vision_config *cfg, int text_hidden,
                                lm_qwen35_vision **out, lm_error *err) {
    *out = NULL;
    if (checkpoint && !lm_checkpoint_find(checkpoint, PREFIX "patch_embed.proj.weight"))
        return LM_OK; /* a text-only checkpoint */
    lm_qwen35_vision *v = calloc(1, sizeof *v);
    if (!v) return lm_fail(err, LM_ERR_NOMEM, "out of memory loading the vision tower");
    v->config = *cfg;
    lm_vision_weights_init(&v->weights, checkpoint, random_seed, quant, backend);
    lm_status st = load_tower(v, text_hidden, err);
    if (st != LM_OK) {
        lm_qwen35_vision_free(v);
        return st;
    }
    *out = v;
    return LM_OK;
}

void lm_qwen35_vision_free(lm_qwen35_vision *v) {
    if (!v) return;
    lm_weights_free(&v->weights);
    free(v->blocks);
    free(v);
}

lm_vision_sizes lm_qwen35_vision_sizes(const lm_qwen35_vision *v) {
    const lm_vision_config *c = &v->config;
    int C = c->hidden_size, m2 = c->spatial_merge_size * c->spatial_merge_size;
    return (lm_vision_sizes){.patch_dim = v->patch_dim,
                             .hidden = C,
                             .merge = c->spatial_merge_size,
                             .taps = 4,
                             .row_width = 3 * C > v->mlp_width ? 3 * C : v->mlp_width,
                             .merged_width = m2 * C,
                             .out_hidden = c->out_hidden_size};
}

/* ------------------------------------------- position-table taps (§D.3.1) */

/* torch.linspace(0, side - 1, n)[i] in float32 as torch computes it: from
 * the start in the first half, from the end in the second. */
static float linspace_at(int side, int n, int i) {
    if (n == 1) return 0.0f;
    float end = (float)(side - 1), step = end / (float)(n - 1);
    return i < n / 2 ? step * (float)i : end - step * (float)(n - 1 - i);
}

/* Bilinear with align_corners=True: the grid's corners on the table's
 * corners.  Taps (r0,c0), (r0,c1), (r1,c0), (r1,c1), weights in float32 as
 * transformers' fast_pos_embed_interpolate makes them. */
static void bilinear_taps(int row, int col, int grid_h, int grid_w, int side, int32_t *ids,
                          float *weights) {
    float sr = linspace_at(side, grid_h, row), sc = linspace_at(side, grid_w, col);
    int r0 = (int)sr, c0 = (int)sc;
    int r1 = r0 + 1 < side ? r0 + 1 : side - 1, c1 = c0 + 1 < side ? c0 + 1 : side - 1;
    float dr = sr - (float)r0, dc = sc - (float)c0;
    ids[0] = r0 * side + c0;
    ids[1] = r0 * side + c1;
    ids[2] = r1 * side + c0;
    ids[3] = r1 * side + c1;
    weights[0] = (1.0f - dr) * (1.0f - dc);
    weights[1] = (1.0f - dr) * dc;
    weights[2] = dr * (1.0f - dc);
    weights[3] = dr * dc;
}

/* ------------------------------------------------------------------ forward */

/* y = x·Wᵀ + b over n rows. */
static void dense(lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w, lm_mem bias) {
    lm_matmul(be, y, x, n, w);
    lm_add_rows(be, y, bias, n, (int)w->rows);
}

static void block(const lm_qwen35_vision *v, lm_backend *be, const lm_vision_workspace *ws,
                  const lm_vision_image *img, const lm_qwen35_vision_block *b) {
    int N = img->n_patches, C = v->config.hidden_size, I = v->mlp_width;
    /* X = X + proj(Attn(LayerNorm(X; norm1))) */
    lm_layernorm(be, ws->normed, ws->x, b->norm1_weight, b->norm1_bias, N, C, LAYERNORM_EPS);
    dense(be, ws->wide, ws->normed, N, &b->qkv, b->qkv_bias);
    lm_vision_attention(be, ws, img, ws->wide, v->config.num_heads, &v->rope);
    dense(be, ws->normed, ws->attn, N, &b->proj, b->proj_bias);
    lm_add(be, ws->x, ws->normed, (int64_t)N * C);
    /* X = X + fc2(gelu_tanh(fc1(LayerNorm(X; norm2)))) */
    lm_layernorm(be, ws->normed, ws->x, b->norm2_weight, b->norm2_bias, N, C, LAYERNORM_EPS);
    dense(be, ws->wide, ws->normed, N, &b->fc1, b->fc1_bias);
    lm_gelu(be, ws->wide, (int64_t)N * I, LM_GELU_TANH);
    dense(be, ws->normed, ws->wide, N, &b->fc2, b->fc2_bias);
    lm_add(be, ws->x, ws->normed, (int64_t)N * C);
}

lm_status lm_qwen35_vision_encode(const lm_qwen35_vision *v, lm_backend *be,
                                  const lm_vision_workspace *ws, const lm_image_patches *patches,
                                  float *embeds, lm_error *err) {
    lm_vision_image img;
    TRY(lm_vision_prepare(be, ws, patches, bilinear_taps, v->pos_side, &img, err));
    const lm_vision_config *c = &v->config;
    int N = img.n_patches, C = c->hidden_size, m2 = c->spatial_merge_size * c->spatial_merge_size;

    /* patch embedding (the Conv3d as a matmul over each row) + position embedding */
    dense(be, ws->x, ws->pixels, N, &v->patch_embed, v->patch_bias);
    lm_add_weighted_rows(be, ws->x, &v->pos_embed, ws->tap_ids, ws->tap_weights, N, 4);
    for (int i = 0; i < c->depth; i++) block(v, be, ws, &img, &v->blocks[i]);

    /* merger (§D.3.4): LayerNorm per patch row, then m² consecutive rows as
     * one [m²C] row (the rows are already in merge-block order) */
    lm_layernorm(be, ws->normed, ws->x, v->merger_norm_weight, v->merger_norm_bias, N, C,
                 LAYERNORM_EPS);
    dense(be, ws->merged, ws->normed, img.n_out, &v->merger_fc1, v->merger_fc1_bias);
    lm_gelu(be, ws->merged, (int64_t)img.n_out * m2 * C, LM_GELU_ERF);
    dense(be, ws->embeds, ws->merged, img.n_out, &v->merger_fc2, v->merger_fc2_bias);
    return lm_vision_download(be, ws, &img, embeds, err);
}

void lm_qwen35_vision_describe(const lm_qwen35_vision *v, FILE *f) {
    const lm_vision_config *c = &v->config;
    fprintf(f,
            "  vision: %d blocks, hidden %d, %d heads of %d, mlp %d (tanh gelu), patch %d "
            "x %d (temporal %d), merge %d x %d, position table %d x %d (bilinear), 2-D rotary "
            "theta %g, out %d\n",
            c->depth, c->hidden_size, c->num_heads, v->head_dim, v->mlp_width, c->patch_size,
            c->patch_size, c->temporal_patch_size, c->spatial_merge_size, c->spatial_merge_size,
            v->pos_side, v->pos_side, (double)c->rope_theta, c->out_hidden_size);
}
