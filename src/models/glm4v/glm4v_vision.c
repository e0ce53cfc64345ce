/* The GLM-4.6V vision tower.  Reads top to bottom like model-spec §E.3:
 * loading first, then the position-table taps (§E.3.1), then the forward.
 * All arithmetic is in ops/. */
#include "models/glm4v/glm4v_vision.h"

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
#define MERGER_LAYERNORM_EPS 1e-5f /* nn.LayerNorm's default */

/* ------------------------------------------------------------------ loading */

static lm_status vector(lm_glm4v_vision *v, const char *name, int64_t n, lm_mem *out,
                        lm_error *err) {
    return lm_weights_vector(&v->weights, name, n, 0, false, out, err);
}

/* Rows of a tensor as the checkpoint has it (0 when absent), for widths
 * that config.json does not pin down. */
static int64_t rows_of(const lm_glm4v_vision *v, const char *name) {
    if (!v->weights.checkpoint) { /* random weights: transformers' convention */
        if (strstr(name, "merger.")) return v->config.intermediate_size;
        return v->config.out_hidden_size; /* downsample, block MLP */
    }
    const lm_tensor *t = lm_checkpoint_find(v->weights.checkpoint, name);
    return t && t->n_dims >= 1 ? t->shape[0] : 0;
}

static lm_status load_block(lm_glm4v_vision *v, int i, lm_glm4v_vision_block *b, lm_error *err) {
    int64_t C = v->config.hidden_size;
    char p[128], name[192];
    snprintf(p, sizeof p, PREFIX "blocks.%d.", i);
    snprintf(name, sizeof name, "%snorm1.weight", p);
    TRY(vector(v, name, C, &b->norm1, err));
    snprintf(name, sizeof name, "%snorm2.weight", p);
    TRY(vector(v, name, C, &b->norm2, err));
    snprintf(name, sizeof name, "%sattn.qkv.weight", p);
    TRY(lm_weights_matrix(&v->weights, name, 3 * C, C, &b->qkv, err));
    if (v->config.attention_bias) {
        snprintf(name, sizeof name, "%sattn.qkv.bias", p);
        TRY(vector(v, name, 3 * C, &b->qkv_bias, err));
    }
    snprintf(name, sizeof name, "%sattn.proj.weight", p);
    TRY(lm_weights_matrix(&v->weights, name, C, C, &b->proj, err));
    snprintf(name, sizeof name, "%smlp.", p);
    return lm_swiglu_load(&v->weights, name, v->mlp_width, C, &b->mlp, err);
}

static lm_status load_tower(lm_glm4v_vision *v, int text_hidden, lm_error *err) {
    const lm_vision_config *c = &v->config;
    const char *dir = v->weights.checkpoint ? lm_checkpoint_dir(v->weights.checkpoint) : "(random weights)";
    int64_t C = c->hidden_size, m = c->spatial_merge_size;
    v->patch_dim = c->in_channels * c->temporal_patch_size * c->patch_size * c->patch_size;
    v->head_dim = c->hidden_size / c->num_heads;
    v->out_hidden = (int)rows_of(v, PREFIX "downsample.weight");
    v->mlp_width = (int)rows_of(v, PREFIX "blocks.0.mlp.gate_proj.weight");
    v->merger_width = (int)rows_of(v, PREFIX "merger.gate_proj.weight");
    if (v->out_hidden != text_hidden || v->out_hidden != c->out_hidden_size)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: the vision tower's output width (downsample.weight: %d rows, "
                       "vision_config.out_hidden_size %d) must be the text model's hidden_size "
                       "(%d): the tower's rows replace text embeddings",
                       dir, v->out_hidden, c->out_hidden_size, text_hidden);
    if (v->mlp_width <= 0 || v->merger_width <= 0)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: the vision tower's blocks.0.mlp.gate_proj or merger.gate_proj is "
                       "missing",
                       dir);
    if (c->image_size % c->patch_size != 0)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s/config.json: vision_config.image_size (%d) must be a multiple of "
                       "patch_size (%d)",
                       dir, c->image_size, c->patch_size);
    v->pos_side = c->image_size / c->patch_size;
    int64_t O = v->out_hidden;

    const int64_t conv[5] = {C, c->in_channels, c->temporal_patch_size, c->patch_size,
                             c->patch_size};
    TRY(lm_weights_flat_matrix(&v->weights, PREFIX "patch_embed.proj.weight", 5, conv,
                               &v->patch_embed, err));
    TRY(vector(v, PREFIX "patch_embed.proj.bias", C, &v->patch_bias, err));
    TRY(vector(v, PREFIX "post_conv_layernorm.weight", C, &v->post_conv_norm, err));
    TRY(lm_weights_matrix(&v->weights, PREFIX "embeddings.position_embedding.weight",
                          (int64_t)v->pos_side * v->pos_side, C, &v->pos_embed, err));
    v->blocks = calloc((size_t)c->depth, sizeof *v->blocks);
    if (!v->blocks) return lm_fail(err, LM_ERR_NOMEM, "out of memory loading the vision tower");
    for (int i = 0; i < c->depth; i++) TRY(load_block(v, i, &v->blocks[i], err));
    TRY(vector(v, PREFIX "post_layernorm.weight", C, &v->post_norm, err));
    /* The 2×2 convolution over the m² consecutive rows of a block, reordered
     * so that row (kh·m + kw)·C + c of the block multiplies W[o, c, kh, kw]. */
    TRY(lm_weights_conv2d_as_rows(&v->weights, PREFIX "downsample.weight", O, C, m, m,
                                  &v->downsample, err));
    TRY(vector(v, PREFIX "downsample.bias", O, &v->downsample_bias, err));
    TRY(lm_weights_matrix(&v->weights, PREFIX "merger.proj.weight", O, O, &v->merger_proj, err));
    TRY(vector(v, PREFIX "merger.post_projection_norm.weight", O, &v->merger_norm_weight, err));
    TRY(vector(v, PREFIX "merger.post_projection_norm.bias", O, &v->merger_norm_bias, err));
    TRY(lm_swiglu_load(&v->weights, PREFIX "merger.", v->merger_width, O, &v->merger, err));
    v->rope = (lm_rope_params){.rot_dim = v->head_dim, .theta = c->rope_theta, .two_d = true};
    v->n_parameters = lm_weights_parameters_used(&v->weights);

    /* How images become patch rows: Glm4vImageProcessor, as the folder sets it. */
    return lm_vision_processor_load(LM_SMART_RESIZE_GLM4V, c, v->weights.checkpoint ? dir : NULL, &v->processor, err);
}

lm_status lm_glm4v_vision_load(const lm_checkpoint *checkpoint, uint64_t random_seed,
                               const lm_weights_quant *quant,
                               lm_backend *backend, const lm_vision_config *cfg, int text_hidden,
                               lm_glm4v_vision **out, lm_error *err) {
    *out = NULL;
    if (checkpoint && !lm_checkpoint_find(checkpoint, PREFIX "patch_embed.proj.weight"))
        return LM_OK; /* a text-only checkpoint */
    lm_glm4v_vision *v = calloc(1, sizeof *v);
    if (!v) return lm_fail(err, LM_ERR_NOMEM, "out of memory loading the vision tower");
    v->config = *cfg;
    lm_vision_weights_init(&v->weights, checkpoint, random_seed, quant, backend);
    lm_status st = load_tower(v, text_hidden, err);
    if (st != LM_OK) {
        lm_glm4v_vision_free(v);
        return st;
    }
    *out = v;
    return LM_OK;
}

void lm_glm4v_vision_free(lm_glm4v_vision *v) {
    if (!v) return;
    lm_weights_free(&v->weights);
    free(v->blocks);
    free(v);
}

lm_vision_sizes lm_glm4v_vision_sizes(const lm_glm4v_vision *v) {
    int C = v->config.hidden_size;
    return (lm_vision_sizes){
        .patch_dim = v->patch_dim,
        .hidden = C,
        .merge = v->config.spatial_merge_size,
        .taps = 16,
        .row_width = 3 * C > v->mlp_width ? 3 * C : v->mlp_width,
        .merged_width = v->out_hidden > v->merger_width ? v->out_hidden : v->merger_width,
        .out_hidden = v->out_hidden};
}

/* ------------------------------------------- position-table taps (§E.3.1) */

/* Keys' cubic convolution with A = -0.75, as PyTorch's upsampling writes it. */
#define CUBIC_A (-0.75f)
static float cubic_near(float x) { return ((CUBIC_A + 2) * x - (CUBIC_A + 3)) * x * x + 1; }
static float cubic_far(float x) {
    return ((CUBIC_A * x - 5 * CUBIC_A) * x + 8 * CUBIC_A) * x - 4 * CUBIC_A;
}

/* The source coordinate of patch i of n along a side of the table, as
 * grid_sample (align_corners=False) computes it in float32 from the
 * normalised grid transformers builds: ((i + 0.5) / n)·2 - 1. */
static float source_coordinate(int i, int n, int side) {
    float norm = ((float)i + 0.5f) / (float)n * 2.0f - 1.0f;
    return (norm + 1.0f) * ((float)side / 2.0f) - 0.5f;
}

static int clamp_index(int i, int side) { return i < 0 ? 0 : i >= side ? side - 1 : i; }

/* grid_sample bicubic, padding "border": 4 × 4 taps around the source
 * point, each index clamped into the table; tap a·4 + b is row y0-1+a,
 * column x0-1+b, weight wy[a]·wx[b]. */
static void bicubic_taps(int row, int col, int grid_h, int grid_w, int side, int32_t *ids,
                         float *weights) {
    float sy = source_coordinate(row, grid_h, side), sx = source_coordinate(col, grid_w, side);
    float fy = floorf(sy), fx = floorf(sx), ty = sy - fy, tx = sx - fx;
    int y0 = (int)fy, x0 = (int)fx;
    float wy[4] = {cubic_far(ty + 1.0f), cubic_near(ty), cubic_near(1.0f - ty),
                   cubic_far(2.0f - ty)};
    float wx[4] = {cubic_far(tx + 1.0f), cubic_near(tx), cubic_near(1.0f - tx),
                   cubic_far(2.0f - tx)};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            ids[a * 4 + b] = clamp_index(y0 - 1 + a, side) * side + clamp_index(x0 - 1 + b, side);
            weights[a * 4 + b] = wy[a] * wx[b];
        }
}

/* ------------------------------------------------------------------ forward */

static void swiglu(lm_backend *be, lm_mem out, lm_mem x, int n, const lm_swiglu *w, lm_mem gate,
                   lm_mem up) {
    lm_matmul(be, gate, x, n, &w->gate_proj);
    lm_matmul(be, up, x, n, &w->up_proj);
    lm_silu_mul(be, gate, gate, up, (int64_t)n * w->gate_proj.rows);
    lm_matmul(be, out, gate, n, &w->down_proj);
}

static void block(const lm_glm4v_vision *v, lm_backend *be, const lm_vision_workspace *ws,
                  const lm_vision_image *img, const lm_glm4v_vision_block *b) {
    int N = img->n_patches, C = v->config.hidden_size;
    float eps = v->config.rms_norm_eps;
    /* X = X + proj(Attn(RMSNorm(X; norm1))) */
    lm_rmsnorm(be, ws->normed, ws->x, b->norm1, N, C, eps);
    lm_matmul(be, ws->wide, ws->normed, N, &b->qkv);
    if (b->qkv_bias.buffer) lm_add_rows(be, ws->wide, b->qkv_bias, N, 3 * C);
    lm_vision_attention(be, ws, img, ws->wide, v->config.num_heads, &v->rope);
    lm_matmul(be, ws->normed, ws->attn, N, &b->proj);
    lm_add(be, ws->x, ws->normed, (int64_t)N * C);
    /* X = X + SwiGLU(RMSNorm(X; norm2)) */
    lm_rmsnorm(be, ws->normed, ws->x, b->norm2, N, C, eps);
    swiglu(be, ws->normed, ws->normed, N, &b->mlp, ws->wide, ws->wide2);
    lm_add(be, ws->x, ws->normed, (int64_t)N * C);
}

lm_status lm_glm4v_vision_encode(const lm_glm4v_vision *v, lm_backend *be,
                                 const lm_vision_workspace *ws, const lm_image_patches *patches,
                                 float *embeds, lm_error *err) {
    lm_vision_image img;
    TRY(lm_vision_prepare(be, ws, patches, bicubic_taps, v->pos_side, &img, err));
    const lm_vision_config *c = &v->config;
    int N = img.n_patches, C = c->hidden_size, O = v->out_hidden, n = img.n_out;
    float eps = c->rms_norm_eps;

    /* patch embedding (the Conv3d as a matmul over each row), its RMSNorm,
     * then the position embedding */
    lm_matmul(be, ws->x, ws->pixels, N, &v->patch_embed);
    lm_add_rows(be, ws->x, v->patch_bias, N, C);
    lm_rmsnorm(be, ws->x, ws->x, v->post_conv_norm, N, C, eps);
    lm_add_weighted_rows(be, ws->x, &v->pos_embed, ws->tap_ids, ws->tap_weights, N, 16);
    for (int i = 0; i < c->depth; i++) block(v, be, ws, &img, &v->blocks[i]);
    lm_rmsnorm(be, ws->x, ws->x, v->post_norm, N, C, eps);

    /* the 2×2 downsample: the m² consecutive rows of a block (merge-block
     * order) are one [m²·C] row, and the reordered kernel makes it one matmul */
    lm_matmul(be, ws->merged, ws->x, n, &v->downsample);
    lm_add_rows(be, ws->merged, v->downsample_bias, n, O);
    /* merger: proj -> LayerNorm -> gelu_erf -> SwiGLU */
    lm_matmul(be, ws->merged2, ws->merged, n, &v->merger_proj);
    lm_layernorm(be, ws->merged2, ws->merged2, v->merger_norm_weight, v->merger_norm_bias, n, O,
                 MERGER_LAYERNORM_EPS);
    lm_gelu(be, ws->merged2, (int64_t)n * O, LM_GELU_ERF);
    swiglu(be, ws->embeds, ws->merged2, n, &v->merger, ws->merged, ws->merged3);
    return lm_vision_download(be, ws, &img, embeds, err);
}

void lm_glm4v_vision_describe(const lm_glm4v_vision *v, FILE *f) {
    const lm_vision_config *c = &v->config;
    fprintf(f,
            "  vision: %d blocks, hidden %d, %d heads of %d, swiglu %d, patch %d x %d "
            "(temporal %d), merge %d x %d (2x2 conv to %d), position table %d x %d (bicubic), "
            "2-D rotary theta %g, merger swiglu %d, out %d\n",
            c->depth, c->hidden_size, c->num_heads, v->head_dim, v->mlp_width, c->patch_size,
            c->patch_size, c->temporal_patch_size, c->spatial_merge_size, c->spatial_merge_size,
            v->out_hidden, v->pos_side, v->pos_side, (double)c->rope_theta, v->merger_width,
            v->out_hidden);
}
