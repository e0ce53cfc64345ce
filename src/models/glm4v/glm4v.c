/* GLM-4.6V text model.  Reads top to bottom like model-spec §E.2: embedding,
 * decoder layers (attention with q/k/v biases and partial M-RoPE, then a
 * dense or MoE SwiGLU), final norm, lm_head.  All arithmetic is in ops/;
 * this file only says which op runs on which rows.  Loading first, the
 * forward below. */
#include "models/glm4v/glm4v.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/forward_common.h"
#include "models/glm4v/glm4v_context.h"
#include "models/glm4v/glm4v_vision.h"

#define TRY(call)                                     \
    do {                                              \
        lm_status try_status_ = (call);               \
        if (try_status_ != LM_OK) return try_status_; \
    } while (0)

/* ------------------------------------------------------------------ loading */

/* Tensor parallelism (m->config holds this rank's share): a
 * column-parallel projection keeps `local` rows a rank, a row-parallel one
 * `local` columns, whose partial products the forward sums over the ranks. */
static lm_status linear_share(lm_glm4v_model *m, const char *name, int64_t rows, int64_t cols, bool split_rows,
                              lm_matrix *out, lm_error *err) {
    if (m->share.n_ranks <= 1) return lm_weights_linear(&m->weights, name, rows, cols, out, err);
    int64_t local = split_rows ? rows : cols, first = (int64_t)m->share.rank * local;
    lm_weights_slice sl = split_rows ? (lm_weights_slice){.n_runs = 1, .runs = {{first, local}}}
                                     : (lm_weights_slice){.col_first = first, .col_count = local};
    return lm_weights_linear_slice(&m->weights, name, split_rows ? rows * m->share.n_ranks : rows,
                                   split_rows ? cols : cols * m->share.n_ranks, &sl, out, err);
}

/* Entries [first, first + count) of a bias of n entries. */
static lm_status bias_run(lm_glm4v_model *m, const char *name, int64_t n, int64_t first, int64_t count, lm_mem *out,
                          lm_error *err) {
    float *host;
    TRY(lm_weights_host_vector(&m->weights, name, n, 0, false, &host, err));
    memmove(host, host + first, sizeof(float) * (size_t)count);
    return lm_weights_import(&m->weights, host, count, name, out, err);
}

/* A bias of `local` entries a rank: this rank's run of the checkpoint's. */
static lm_status bias_share(lm_glm4v_model *m, const char *name, int64_t local, lm_mem *out, lm_error *err) {
    return bias_run(m, name, local * m->share.n_ranks, (int64_t)m->share.rank * local, local, out, err);
}

static lm_status load_attention(lm_glm4v_model *m, const char *lp, lm_glm4v_attention *a,
                                lm_error *err) {
    const lm_glm4v_config *c = &m->config;
    int64_t H = c->hidden_size, q = (int64_t)c->num_attention_heads * c->head_dim;
    int64_t kv = (int64_t)c->num_key_value_heads * c->head_dim;
    char name[320];
    snprintf(name, sizeof name, "%sself_attn.q_proj.weight", lp);
    TRY(linear_share(m, name, q, H, true, &a->q_proj, err));
    /* this rank's kv heads: a run from share.kv.first of the checkpoint's */
    int64_t kv_rows = (int64_t)m->share.kv.total * c->head_dim, kv_first = (int64_t)m->share.kv.first * c->head_dim;
    lm_weights_slice kv_sl = {.n_runs = 1, .runs = {{kv_first, kv}}};
    snprintf(name, sizeof name, "%sself_attn.k_proj.weight", lp);
    TRY(m->share.n_ranks > 1 ? lm_weights_linear_slice(&m->weights, name, kv_rows, H, &kv_sl, &a->k_proj, err)
                             : lm_weights_linear(&m->weights, name, kv, H, &a->k_proj, err));
    snprintf(name, sizeof name, "%sself_attn.v_proj.weight", lp);
    TRY(m->share.n_ranks > 1 ? lm_weights_linear_slice(&m->weights, name, kv_rows, H, &kv_sl, &a->v_proj, err)
                             : lm_weights_linear(&m->weights, name, kv, H, &a->v_proj, err));
    snprintf(name, sizeof name, "%sself_attn.o_proj.weight", lp);
    TRY(linear_share(m, name, H, q, false, &a->o_proj, err));
    if (!c->attention_bias) return LM_OK;
    snprintf(name, sizeof name, "%sself_attn.q_proj.bias", lp);
    TRY(bias_share(m, name, q, &a->q_bias, err));
    snprintf(name, sizeof name, "%sself_attn.k_proj.bias", lp);
    TRY(bias_run(m, name, kv_rows, kv_first, kv, &a->k_bias, err));
    snprintf(name, sizeof name, "%sself_attn.v_proj.bias", lp);
    return bias_run(m, name, kv_rows, kv_first, kv, &a->v_bias, err);
}

/* The dense MLP: mlp.{gate,up,down}_proj, or (GLM-4.6V-Flash) mlp.gate_up_proj
 * [2I, H], gate rows first, cut into two views without copying. */
static lm_status load_dense_mlp(lm_glm4v_model *m, const char *lp, lm_swiglu *mlp, lm_error *err) {
    const lm_glm4v_config *c = &m->config;
    int64_t H = c->hidden_size, I = c->intermediate_size;
    char name[320];
    snprintf(name, sizeof name, "%smlp.gate_up_proj.weight", lp);
    if (!m->weights.random && lm_weights_has(&m->weights, name)) {
        lm_matrix gate_up;
        int64_t n = m->share.n_ranks, first = (int64_t)m->share.rank * I;
        /* this rank's gate rows, then its up rows (one run of each half) */
        lm_weights_slice sl = {.n_runs = 2, .runs = {{first, I}, {I * n + first, I}}};
        TRY(n > 1 ? lm_weights_linear_slice(&m->weights, name, 2 * I * n, H, &sl, &gate_up, err)
                  : lm_weights_linear(&m->weights, name, 2 * I, H, &gate_up, err));
        mlp->gate_proj = lm_matrix_rows(&gate_up, 0, I);
        mlp->up_proj = lm_matrix_rows(&gate_up, I, I);
        snprintf(name, sizeof name, "%smlp.down_proj.weight", lp);
        return linear_share(m, name, H, I, false, &mlp->down_proj, err);
    }
    snprintf(name, sizeof name, "%smlp.", lp);
    return lm_swiglu_load_share(&m->weights, name, I, H, m->share.rank, m->share.n_ranks, mlp, err);
}

static lm_status load_moe(lm_glm4v_model *m, const char *lp, lm_glm4v_moe *moe, lm_error *err) {
    const lm_glm4v_config *c = &m->config;
    int E = c->n_routed_experts, H = c->hidden_size;
    char name[320];
    snprintf(name, sizeof name, "%smlp.gate.weight", lp);
    TRY(lm_weights_matrix(&m->weights, name, E, H, &moe->router, err));
    /* Stored float32 and kept so: it only decides the selection. */
    snprintf(name, sizeof name, "%smlp.gate.e_score_correction_bias", lp);
    TRY(lm_weights_vector(&m->weights, name, E, 0, false, &moe->correction_bias, err));
    moe->routing = (lm_moe_routing){.n_experts = E,
                                    .top_k = c->num_experts_per_tok,
                                    .scoring = LM_MOE_SIGMOID,
                                    .correction_bias = moe->correction_bias,
                                    .n_group = c->n_group,
                                    .topk_group = c->topk_group,
                                    .renormalize = c->norm_topk_prob,
                                    .scale = c->routed_scaling_factor};
    snprintf(name, sizeof name, "%smlp.", lp);
    TRY(lm_expert_weights_load_share(&m->weights, name, E, c->moe_intermediate_size, H, &m->share, &moe->experts,
                                     err));
    /* Plural: mlp.shared_experts (model-spec §E.2.5). */
    snprintf(name, sizeof name, "%smlp.shared_experts.", lp);
    return lm_swiglu_load_share(&m->weights, name, m->shared_experts_width, H, m->share.rank, m->share.n_ranks,
                                &moe->shared, err);
}

static lm_status load_layer(lm_glm4v_model *m, const char *prefix, int i, lm_glm4v_layer *layer,
                            lm_error *err) {
    const lm_glm4v_config *c = &m->config;
    lm_weights *w = &m->weights;
    char lp[128], name[320];
    snprintf(lp, sizeof lp, "%slayers.%d.", prefix, i);
    snprintf(name, sizeof name, "%sinput_layernorm.weight", lp);
    TRY(lm_weights_vector(w, name, c->hidden_size, 0, false, &layer->input_norm, err));
    snprintf(name, sizeof name, "%spost_attention_layernorm.weight", lp);
    TRY(lm_weights_vector(w, name, c->hidden_size, 0, false, &layer->post_attention_norm, err));
    if (m->sandwich_norms) {
        snprintf(name, sizeof name, "%spost_self_attn_layernorm.weight", lp);
        TRY(lm_weights_vector(w, name, c->hidden_size, 0, false, &layer->post_self_attn_norm, err));
        snprintf(name, sizeof name, "%spost_mlp_layernorm.weight", lp);
        TRY(lm_weights_vector(w, name, c->hidden_size, 0, false, &layer->post_mlp_norm, err));
    }
    TRY(load_attention(m, lp, &layer->attn, err));
    layer->is_moe = c->is_moe && i >= c->first_k_dense_replace;
    if (layer->is_moe) return load_moe(m, lp, &layer->moe, err);
    return load_dense_mlp(m, lp, &layer->mlp, err);
}

/* Bytes a decode step reads: every matrix of the text model once (lm_head
 * included, the embedding a row), of a MoE layer the router, the shared
 * experts and top_k routed experts.  Vectors are left out (under 0.1%). */
static size_t decode_bytes_per_token(const lm_glm4v_model *m) {
    const lm_glm4v_config *c = &m->config;
    double bytes = lm_matrix_bytes(&m->lm_head);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const lm_glm4v_layer *l = &m->layers[i];
        bytes += lm_matrix_bytes(&l->attn.q_proj) + lm_matrix_bytes(&l->attn.k_proj) +
                 lm_matrix_bytes(&l->attn.v_proj) + lm_matrix_bytes(&l->attn.o_proj);
        if (l->is_moe)
            bytes += lm_matrix_bytes(&l->moe.router) + lm_swiglu_bytes(&l->moe.shared) +
                     lm_expert_bytes_per_token(&l->moe.experts, c->num_experts_per_tok);
        else
            bytes += lm_swiglu_bytes(&l->mlp);
    }
    return (size_t)bytes;
}

static void describe_to_engine(lm_glm4v_model *m) {
    const lm_glm4v_config *c = &m->config;
    lm_model_info *info = &m->base.info;
    snprintf(info->family, sizeof info->family, "%s", lm_glm4v_family.name);
    snprintf(info->architecture, sizeof info->architecture, "%s", c->model_type);
    info->vocab_size = c->vocab_size;
    info->hidden_size = c->hidden_size;
    info->n_layers = c->num_hidden_layers;
    info->n_kv_layers = c->num_hidden_layers;
    info->n_kv_heads = c->num_key_value_heads;
    info->head_dim = c->head_dim;
    info->n_state_layers = 0;
    info->state_bytes_per_slot = 0;
    info->max_position_embeddings = c->max_position_embeddings;
    info->n_eos = 0;
    for (int i = 0; i < c->n_eos && info->n_eos < LM_MODEL_MAX_EOS; i++)
        info->eos_ids[info->n_eos++] = c->eos_token_ids[i];
    info->has_mtp = false;
    snprintf(info->mtp_status, sizeof info->mtp_status,
             "GLM-4.6V's own next-token layer is not run by loom: no speculative decoding");
    int64_t params = 0, inactive = 0;
    for (size_t i = 0; i < m->weights.n_used; i++) params += lm_weights_tensor_parameters(&m->weights, m->weights.used[i]);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const lm_moe_experts *e = &m->layers[i].moe.experts.view;
        if (!m->layers[i].is_moe) continue;
        int64_t per_expert = 3 * (int64_t)e->inter * e->hidden;
        inactive += (int64_t)(c->n_routed_experts - c->num_experts_per_tok) * per_expert;
    }
    info->n_parameters = params;
    info->n_active_parameters = params - inactive;
    info->weight_bytes = lm_weights_bytes_used(&m->weights);
    lm_weights_made_note(&m->weights, info->weights_made, sizeof info->weights_made);
    info->decode_bytes_per_token = decode_bytes_per_token(m);
    const lm_glm4v_vision *v = m->vision;
    lm_vision_describe(&info->vision, c->image_token_id, c->image_start_token_id, c->image_end_token_id,
                       &c->vision, v ? v->n_parameters : 0,
                       v ? v->downsample.rows * v->downsample.cols + v->merger_proj.rows * v->merger_proj.cols +
                               3 * (int64_t)v->merger_width * v->out_hidden
                         : 0,
                       v ? &v->processor : NULL);
}

static const lm_model_ops glm4v_ops;

static void glm4v_free(lm_glm4v_model *m) {
    if (!m) return;
    lm_glm4v_vision_free(m->vision);
    lm_weights_free(&m->weights);
    for (int i = 0; m->layers && i < m->config.num_hidden_layers; i++)
        lm_expert_weights_free(&m->layers[i].moe.experts);
    free(m->layers);
    lm_checkpoint_close(m->checkpoint);
    free(m);
}

static void glm4v_destroy(lm_model *base) { glm4v_free((lm_glm4v_model *)base); }

static lm_status load_model(lm_glm4v_model *m, lm_error *err) {
    const lm_glm4v_config *c = &m->config;
    /* Multimodal checkpoints nest the text model under model.language_model. */
    const char *prefix = lm_weights_has(&m->weights, "model.language_model.embed_tokens.weight")
                             ? "model.language_model."
                             : "model.";
    char name[256];
    snprintf(name, sizeof name, "%sembed_tokens.weight", prefix);
    /* As in Qwen3.5: the embedding stays as stored unless it is the tied lm_head. */
    m->lm_head_tied = !lm_weights_has(&m->weights, "lm_head.weight");
    TRY((m->lm_head_tied ? lm_weights_linear : lm_weights_matrix)(&m->weights, name, c->vocab_size,
                                                                  c->hidden_size, &m->embed_tokens, err));
    TRY(lm_weights_lm_head(&m->weights, "lm_head.weight", &m->embed_tokens, m->lm_head_tied, c->vocab_size, c->hidden_size,
                           m->share.rank, m->share.n_ranks, &m->lm_head, &m->vocab_split, err));
    snprintf(name, sizeof name, "%snorm.weight", prefix);
    TRY(lm_weights_vector(&m->weights, name, c->hidden_size, 0, false, &m->final_norm, err));
    m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
    if (!m->layers) return lm_fail(err, LM_ERR_NOMEM, "out of memory loading layers");
    /* Layers numbered num_hidden_layers and up (GLM's own next-token
     * layer) are left in the checkpoint. */
    for (int i = 0; i < c->num_hidden_layers; i++) TRY(load_layer(m, prefix, i, &m->layers[i], err));
    return LM_OK;
}

/* This rank's share (models/rank_share.h): of the attention heads (query
 * and kv), the dense layers' MLP width, the shared experts' width and the
 * routed experts (a share of every expert's width, or whole experts with
 * expert parallelism); m->config becomes the rank's.  The router, the
 * embedding, lm_head, norms and the vision tower stay whole. */
static lm_status take_share(lm_glm4v_model *m, const lm_model_load_options *options, lm_error *err) {
    lm_glm4v_config *c = &m->config;
    m->shared_experts_width = c->moe_intermediate_size * c->n_shared_experts;
    lm_share_plan plan = {
        .attention = {{"num_attention_heads", &c->num_attention_heads},
                      {"num_key_value_heads", &c->num_key_value_heads}},
        .parts = {{"intermediate_size", &c->intermediate_size},
                  {"moe_intermediate_size x n_shared_experts", &m->shared_experts_width}},
        .n_parts = c->is_moe ? 2 : 1,
    };
    if (c->is_moe) {
        plan.experts = (lm_share_part){"n_routed_experts", &c->n_routed_experts};
        plan.expert_width = (lm_share_part){"moe_intermediate_size", &c->moe_intermediate_size};
    }
    return lm_rank_share_take(&m->share, options->tensor_parallel, options->expert_parallel, &plan, err);
}

static lm_status glm4v_open(const char *config_path, const char *dir,
                            const lm_model_load_options *options, lm_backend *backend,
                            lm_model **out, lm_error *err) {
    lm_glm4v_config config;
    lm_status st = lm_glm4v_config_load(config_path, &config, err);
    lm_checkpoint *checkpoint = NULL;
    if (st == LM_OK && !options->random_weights)
        st = lm_checkpoint_open_with(dir, options->mode, options->progress, &checkpoint, err);
    if (st != LM_OK) return st;
    lm_glm4v_model *m = calloc(1, sizeof *m);
    if (!m) {
        lm_checkpoint_close(checkpoint);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory loading the model");
    }
    m->base.ops = &glm4v_ops;
    m->base.backend = backend;
    m->config = config;
    m->checkpoint = checkpoint;
    if ((st = take_share(m, options, err)) != LM_OK) {
        lm_checkpoint_close(checkpoint);
        free(m);
        return st;
    }
    if (checkpoint)
        lm_weights_init(&m->weights, checkpoint, backend);
    else
        lm_weights_init_random(&m->weights, options->random_seed, !config.tie_word_embeddings,
                               backend);
    if (options->progress)
        lm_weights_set_progress(&m->weights, options->progress,
                                options->tensor_parallel ? options->tensor_parallel->n_ranks : 1);
    const lm_weights_quant quant = {.int8_linear = options->quantize_int8,
                                    .fp8_linear = options->quantize_fp8,
                                    .fp8_block_rows = options->fp8_block_rows,
                                    .fp8_block_cols = options->fp8_block_cols,
                                    .mlx_bits = options->mlx_bits,
                                    .mlx_group = options->mlx_group,
                                    .mlx_overrides = options->mlx_overrides,
                                    .int4 = options->int4};
    lm_weights_set_quant(&m->weights, &quant);
    /* GLM-4.6V rotates halves, GLM-4.6V-Flash interleaved pairs (§E.2.2, §E.6);
     * both split the frequencies into contiguous T/H/W sections. */
    m->sandwich_norms = !config.is_moe;
    m->rope = (lm_rope_params){
        .rot_dim = config.rot_dim,
        .theta = config.rope_theta,
        .sections = {config.mrope_section[0], config.mrope_section[1], config.mrope_section[2]},
        .interleaved_sections = false,
        .pair_interleaved = !config.is_moe,
    };
    st = load_model(m, err);
    /* The vision tower: config.json's vision_config and the checkpoint's
     * model.visual.* (made up with random weights). */
    if (st == LM_OK && config.has_vision_config && (checkpoint || options->random_weights))
        st = lm_glm4v_vision_load(checkpoint, options->random_seed, &quant, backend, &m->config.vision,
                                  config.hidden_size, &m->vision, err);
    if (st != LM_OK) {
        glm4v_free(m);
        return st;
    }
    describe_to_engine(m);
    *out = &m->base;
    return LM_OK;
}

static const char *const glm4v_model_types[] = {"glm4v_moe", "glm4v", "glm4v_moe_text",
                                                "glm4v_text", "glm46v", NULL};

const lm_model_family lm_glm4v_family = {
    .name = "glm4v",
    .model_types = glm4v_model_types,
    .open = glm4v_open,
};

/* ------------------------------------------------------------------ forward */

/* y += b over n rows of w's width (a Linear layer's bias, when it has one). */
static void add_bias(lm_backend *be, lm_mem y, int n, const lm_matrix *w, lm_mem bias) {
    if (bias.buffer) lm_add_rows(be, y, bias, n, (int)w->rows);
}

/* A block's normed input x = rmsnorm(h) · weight (a device backend may
 * fold the norm into the residual add before it, or into the products
 * that read it: its fusion). */
typedef struct {
    lm_mem h, weight, x;
    float eps;
} block_norm;

static void input_norm(lm_backend *be, const block_norm *in, int N, int cols) {
    lm_rmsnorm(be, in->x, in->h, in->weight, N, cols, in->eps);
}

/* The products of a block's normed input in->x. */
static void input_products(lm_backend *be, const block_norm *in, int N, const lm_product *outs, int count) {
    input_norm(be, in, N, (int)outs[0].w->cols);
    for (int i = 0; i < count; i++) lm_matmul(be, outs[i].y, in->x, N, outs[i].w);
}

/* h += a block's output `out` [N, H] (which then dies), through its
 * sandwich norm (glm4v's post_self_attn_norm, post_mlp_norm) where the
 * model has them. */
static void add_block_output(lm_glm4v_context *ctx, lm_mem out, lm_mem sandwich_norm, int N) {
    const lm_glm4v_model *m = ctx->model;
    int H = m->config.hidden_size;
    if (m->sandwich_norms) lm_rmsnorm(ctx->be, out, out, sandwich_norm, N, H, m->config.rms_norm_eps);
    lm_add(ctx->be, ctx->scratch.h, out, (int64_t)N * H);
    lm_discard(ctx->be, out, sizeof(float) * (size_t)N * (size_t)H);
}

/* Attention (model-spec §E.2.1) of the normed input, added to h. */
static void attention(lm_glm4v_context *ctx, const lm_step_view *step, const lm_glm4v_layer *layer,
                      const lm_kv_layer *kv, const block_norm *in) {
    const lm_glm4v_model *m = ctx->model;
    const lm_glm4v_config *c = &m->config;
    const lm_glm4v_attention *a = &layer->attn;
    const lm_glm4v_scratch *s = &ctx->scratch;
    lm_backend *be = ctx->be;
    int N = step->n_tokens, D = c->head_dim;
    int nH = c->num_attention_heads, nKV = c->num_key_value_heads;
    lm_product projections[] = {{s->q, &a->q_proj}, {s->k, &a->k_proj}, {s->v, &a->v_proj}};
    input_products(be, in, N, projections, 3);
    add_bias(be, s->q, N, &a->q_proj, a->q_bias);
    add_bias(be, s->k, N, &a->k_proj, a->k_bias);
    add_bias(be, s->v, N, &a->v_proj, a->v_bias);
    /* Rotary on the first rot_dim dims of every head, before the keys are cached. */
    lm_rope(be, s->q, N, nH, D, step->positions, &m->rope);
    lm_rope(be, s->k, N, nKV, D, step->positions, &m->rope);
    lm_kv_write(be, kv, s->k, s->v, N, step->kv_slots);
    lm_attention_batch ab = lm_step_attention(step, nH, nKV, D);
    lm_attention(be, s->attn, s->q, kv, &ab);
    lm_row_parallel_matmul(&ctx->ranks, be, s->x, s->attn, N, &a->o_proj); /* no bias */
    add_block_output(ctx, s->x, layer->post_self_attn_norm, N);
}

/* SwiGLU's first half, silu(x·gateᵀ) * (x·upᵀ) into s->proj, of the normed
 * input. */
static void swiglu_in(lm_glm4v_context *ctx, int N, const lm_swiglu *w, const block_norm *in) {
    const lm_glm4v_scratch *s = &ctx->scratch;
    input_norm(ctx->be, in, N, (int)w->gate_proj.cols);
    lm_forward_swiglu_in(ctx->be, s->proj, s->proj2, s->x, N, &w->gate_proj, &w->up_proj);
}

/* The MoE block (model-spec §E.2.4) of the normed input: s->routed, the
 * routed experts' weighted sum plus the (ungated) shared experts.  The
 * shared experts' SwiGLU runs first, so its products make x for the router
 * and the routed experts; their down product adds into the routed sum
 * (through s->shared, which dies). */
static void moe(lm_glm4v_context *ctx, int N, const lm_glm4v_moe *moe, const block_norm *in) {
    const lm_glm4v_config *c = &ctx->model->config;
    const lm_glm4v_scratch *s = &ctx->scratch;
    lm_backend *be = ctx->be;
    swiglu_in(ctx, N, &moe->shared, in);
    lm_matmul(be, s->router_logits, s->x, N, &moe->router); /* float32 like the reference */
    lm_moe_route(be, s->ids, s->weights, s->router_logits, N, &moe->routing);
    lm_moe_apply_experts(be, s->routed, s->x, N, s->ids, s->weights, c->num_experts_per_tok,
                         &moe->experts.view, s->expert_scratch);
    lm_forward_matmul_add(be, s->routed, s->shared, s->proj, N, &moe->shared.down_proj);
}

/* One decoder layer (model-spec §E.2; §E.6's sandwich norms for glm4v). */
static void decoder_layer(lm_glm4v_context *ctx, const lm_step_view *step,
                          const lm_glm4v_layer *layer, const lm_kv_layer *kv) {
    const lm_glm4v_model *m = ctx->model;
    const lm_glm4v_config *c = &m->config;
    const lm_glm4v_scratch *s = &ctx->scratch;
    lm_backend *be = ctx->be;
    int N = step->n_tokens, H = c->hidden_size;
    float eps = c->rms_norm_eps;
    block_norm in = {.h = s->h, .weight = layer->input_norm, .x = s->x, .eps = eps};
    attention(ctx, step, layer, kv, &in);
    block_norm post = {.h = s->h, .weight = layer->post_attention_norm, .x = s->x, .eps = eps};
    if (layer->is_moe) {
        moe(ctx, N, &layer->moe, &post);
        lm_rank_sum(&ctx->ranks, be, s->routed, (size_t)N * (size_t)H);
        add_block_output(ctx, s->routed, layer->post_mlp_norm, N);
    } else {
        swiglu_in(ctx, N, &layer->mlp, &post);
        lm_row_parallel_matmul(&ctx->ranks, be, s->x, s->proj, N, &layer->mlp.down_proj);
        add_block_output(ctx, s->x, layer->post_mlp_norm, N);
    }
}

static lm_status glm4v_forward(lm_model_context *base, const lm_step_batch *b,
                               const lm_forward_out *out, lm_error *err) {
    lm_glm4v_context *ctx = (lm_glm4v_context *)base;
    const lm_glm4v_model *m = ctx->model;
    const lm_glm4v_config *c = &m->config;
    lm_backend *be = ctx->be;
    lm_step_view step;
    lm_status st = lm_glm4v_step_upload(ctx, b, &step, err);
    if (st != LM_OK) return st;
    lm_sample_upload(be, &ctx->sample, out, step.n_logit_rows);
    int N = step.n_tokens, H = c->hidden_size, L = c->num_hidden_layers;
    size_t rows_bytes = sizeof(float) * (size_t)N * (size_t)H;
    lm_mem h = ctx->scratch.h;

    lm_rank_sums_begin(&ctx->ranks, m->share.comm);
    lm_forward_embed_inputs(be, h, step.tokens, b, &m->embed_tokens, H);
    for (int i = 0; i < L; i++) {
        if (out->layer_hidden && out->layer_hidden[i]) {
            st = lm_download(be, out->layer_hidden[i], h, rows_bytes, err);
            if (st != LM_OK) return st;
        }
        decoder_layer(ctx, &step, &m->layers[i], &ctx->kv[i]);
    }
    st = lm_rank_sums_status(&ctx->ranks, err);
    if (st != LM_OK) return st;
    /* Final norm and lm_head only on the rows that need logits. */
    lm_logits_head head = {.final_norm = m->final_norm, .eps = c->rms_norm_eps,
                           .lm_head = {.weight = &m->lm_head, .vocab = c->vocab_size,
                                       .tp = m->vocab_split ? m->share.comm : NULL, .scratch = ctx->vocab_scratch},
                           .hidden = H, .n_layers = L, .logit_x = ctx->logit_x, .logits = ctx->logits,
                           .logit_ids = ctx->logit_ids, .sample = &ctx->sample};
    return lm_forward_logits(be, &step, h, &head, out, err);
}

/* No per-sequence state: nothing to copy or clear. */
static void glm4v_copy_state(lm_model_context *ctx, int src, int dst) {
    (void)ctx, (void)src, (void)dst;
}
static void glm4v_reset_state(lm_model_context *ctx, int slot) { (void)ctx, (void)slot; }

/* The vision tower over one image, in the context's vision workspace. */
static lm_status glm4v_encode_image(lm_model_context *base, const lm_image_patches *patches,
                                    float *embeds, lm_error *err) {
    lm_glm4v_context *ctx = (lm_glm4v_context *)base;
    if (!ctx->model->vision)
        return lm_fail(err, LM_ERR_INVALID, "image: this model has no vision tower");
    return lm_glm4v_vision_encode(ctx->model->vision, ctx->be, &ctx->vision, patches, embeds, err);
}

/* ------------------------------------------------------------ the family */

static void glm4v_describe(const lm_model *base, FILE *f) {
    const lm_glm4v_model *m = (const lm_glm4v_model *)base;
    const lm_glm4v_config *c = &m->config;
    fprintf(f, "architecture: %s%s\n", c->model_type,
            c->is_moe ? " (GLM-4.6V, mixture of experts)" : " (GLM-4.6V-Flash, dense)");
    fprintf(f, "  vocab %d, hidden %d, layers %d, dense mlp %d%s\n", c->vocab_size, c->hidden_size,
            c->num_hidden_layers, c->intermediate_size,
            m->sandwich_norms ? ", four norms per layer" : "");
    fprintf(f,
            "  attention: %d heads, %d kv heads, head dim %d, q/k/v bias %s, rotary dims %d "
            "(theta %g, %s, contiguous mrope sections %d/%d/%d)\n",
            c->num_attention_heads, c->num_key_value_heads, c->head_dim,
            c->attention_bias ? "yes" : "no", c->rot_dim, (double)c->rope_theta,
            m->rope.pair_interleaved ? "interleaved pairs" : "rotate-half", c->mrope_section[0],
            c->mrope_section[1], c->mrope_section[2]);
    fprintf(f, "  layer kinds: ");
    for (int i = 0; i < c->num_hidden_layers; i++) fputc(m->layers[i].is_moe ? 'E' : 'D', f);
    fprintf(f, "  (D = dense mlp, E = mixture of experts)\n");
    if (c->is_moe)
        fprintf(f,
                "  experts: %d routed, %d per token (sigmoid router with correction bias, %d "
                "groups, best %d kept, %s, scale %g), width %d, %d shared (%s layout)\n",
                c->n_routed_experts, c->num_experts_per_tok, c->n_group, c->topk_group,
                c->norm_topk_prob ? "renormalised" : "not renormalised",
                (double)c->routed_scaling_factor, c->moe_intermediate_size, c->n_shared_experts,
                c->first_k_dense_replace < c->num_hidden_layers &&
                        m->layers[c->first_k_dense_replace].moe.experts.fused
                    ? "fused"
                    : "per-expert");
    fprintf(f, "  vision tower: %s, tied embeddings: %s\n",
            m->vision              ? "loaded"
            : c->has_vision_config ? "in config.json, not in the checkpoint"
                                   : "no",
            c->tie_word_embeddings ? "yes" : "no");
    if (m->vision) lm_glm4v_vision_describe(m->vision, f);
    fprintf(f, "text model: complete (%zu tensors used, %.1f MB, lm_head %s)\n", m->weights.n_used,
            (double)lm_weights_bytes_used(&m->weights) / 1e6,
            m->lm_head_tied ? "tied to embed_tokens" : "separate");
    if (m->vocab_split)
        fprintf(f, "lm_head: vocabulary rows %lld..%lld of this rank (split over %d ranks, logits gathered)\n",
                (long long)m->lm_head.rows * m->share.rank, (long long)m->lm_head.rows * (m->share.rank + 1) - 1,
                m->share.n_ranks);
    if (m->checkpoint) {
        fprintf(f, "  used (text model):\n");
        lm_weights_print_groups(&m->weights, true, f);
        if (m->vision) {
            fprintf(f, "  used (vision tower):\n");
            lm_weights_print_groups(&m->vision->weights, true, f);
        }
        const lm_weights *parts[2] = {&m->weights, m->vision ? &m->vision->weights : NULL};
        fprintf(f, "  not used (GLM's next-token layer is not run):\n");
        lm_weights_print_groups_of(parts, m->vision ? 2 : 1, false, f);
    }
}

static const lm_model_ops glm4v_ops = {
    .destroy = glm4v_destroy,
    .context_create = lm_glm4v_context_create,
    .context_destroy = lm_glm4v_context_destroy,
    .forward = glm4v_forward,
    .copy_block = lm_glm4v_copy_block,
    .copy_state = glm4v_copy_state,
    .reset_state = glm4v_reset_state,
    .encode_image = glm4v_encode_image,
    .describe = glm4v_describe,
};
