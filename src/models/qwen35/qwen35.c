/* Qwen3.5 text model.  Reads top to bottom like model-spec §A: embedding,
 * decoder layers (Gated DeltaNet or gated attention, then SwiGLU), final
 * norm, lm_head.  All arithmetic is in ops/; this file only says which op
 * runs on which rows.  Loading is at the top, the forward below. */
#include "models/qwen35/qwen35.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/forward_common.h"
#include "models/qwen35/qwen35_context.h"
#include "models/qwen35/qwen35_gguf.h"
#include "models/qwen35/qwen35_mtp.h"
#include "models/qwen35/qwen35_vision.h"

/* ------------------------------------------------------------------ loading */

static lm_status matrix_at(lm_weights *w, const char *prefix, int layer, const char *name,
                           int64_t rows, int64_t cols, lm_matrix *out, lm_error *err) {
    char full[256];
    snprintf(full, sizeof full, "%slayers.%d.%s", prefix, layer, name);
    return lm_weights_linear(w, full, rows, cols, out, err);
}

static lm_status host_vector_at(lm_weights *w, const char *prefix, int layer, const char *name,
                                int64_t n, float offset, bool any_shape, float **out,
                                lm_error *err) {
    char full[256];
    snprintf(full, sizeof full, "%slayers.%d.%s", prefix, layer, name);
    return lm_weights_host_vector(w, full, n, offset, any_shape, out, err);
}

static lm_status vector_at(lm_weights *w, const char *prefix, int layer, const char *name,
                           int64_t n, float offset, bool any_shape, lm_mem *out, lm_error *err) {
    float *host;
    lm_status st = host_vector_at(w, prefix, layer, name, n, offset, any_shape, &host, err);
    return st == LM_OK ? lm_weights_import(w, host, n, name, out, err) : st;
}

#define TRY(call)                                     \
    do {                                              \
        lm_status try_status_ = (call);               \
        if (try_status_ != LM_OK) return try_status_; \
    } while (0)

/* ---- tensor parallelism: this rank's share of each weight ----
 *
 * m->config holds this rank's heads and MLP width; the checkpoint's are
 * share.n_ranks times them (kv heads and GDN key heads: share.kv,
 * share.linear_keys).  A column-parallel projection (its output split: q,
 * k, v, the GDN inputs, gate and up) keeps a run of rows per part, a
 * row-parallel one (its input split: o_proj, out_proj, down) a window of
 * columns, whose partial products the forward sums over the ranks. */

/* Rows [first, first + count) of the checkpoint's matrix, next in the slice. */
static void add_run(lm_weights_slice *sl, int64_t first, int64_t count) {
    sl->runs[sl->n_runs].first = first;
    sl->runs[sl->n_runs++].count = count;
}

/* The matrix [rows, cols] (the checkpoint's shape) of layer i, this rank's slice. */
static lm_status shard_at(const lm_qwen35_model *m, lm_weights *w, const char *prefix, int layer,
                          const char *name, int64_t rows, int64_t cols, const lm_weights_slice *sl,
                          lm_matrix *out, lm_error *err) {
    if (m->share.n_ranks <= 1) return matrix_at(w, prefix, layer, name, rows, cols, out, err);
    char full[256];
    snprintf(full, sizeof full, "%slayers.%d.%s", prefix, layer, name);
    return lm_weights_linear_slice(w, full, rows, cols, sl, out, err);
}

/* A column-parallel projection: `local` output rows a rank. */
static lm_status rows_at(const lm_qwen35_model *m, lm_weights *w, const char *prefix, int layer, const char *name,
                         int64_t local, int64_t cols, lm_matrix *out, lm_error *err) {
    lm_weights_slice sl = {0};
    add_run(&sl, (int64_t)m->share.rank * local, local);
    return shard_at(m, w, prefix, layer, name, local * m->share.n_ranks, cols, &sl, out, err);
}

/* A row-parallel projection: `local` input columns a rank. */
static lm_status cols_at(const lm_qwen35_model *m, lm_weights *w, const char *prefix, int layer, const char *name,
                         int64_t rows, int64_t local, lm_matrix *out, lm_error *err) {
    lm_weights_slice sl = {.col_first = (int64_t)m->share.rank * local, .col_count = local};
    return shard_at(m, w, prefix, layer, name, rows, local * m->share.n_ranks, &sl, out, err);
}

/* A host vector of the checkpoint's parts of `part` floats (heads,
 * channels), this rank's runs of parts moved to its front (count[k] parts
 * from part first[k], in increasing order).  The vector is the weights' own
 * host copy, and a run never moves backwards past an unread one. */
static void keep_runs(float *v, int64_t part, const int64_t *first, const int64_t *count, int n_runs) {
    int64_t at = 0;
    for (int k = 0; k < n_runs; k++) {
        int64_t from = first[k] * part, n = count[k] * part;
        memmove(v + at, v + from, sizeof(float) * (size_t)n);
        at += n;
    }
}

static lm_status load_linear_attention(lm_qwen35_model *m, const char *prefix, int i,
                                       lm_qwen35_linear_attention *la, lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    lm_weights *w = &m->weights;
    int H = c->hidden_size, Hv = c->linear_num_value_heads, K = c->linear_conv_kernel_dim, n = m->share.n_ranks;
    int64_t kd = m->key_dim, vd = m->value_dim; /* this rank's */
    /* the checkpoint's key dim and this rank's first key channel in it
     * (with fewer key heads than ranks, the one head its value heads use),
     * its first value channel, and the checkpoint's q | k | v channels */
    int64_t all_kd = (int64_t)m->share.linear_keys.total * c->linear_key_head_dim;
    int64_t k0 = (int64_t)m->share.linear_keys.first * c->linear_key_head_dim, v0 = (int64_t)m->share.rank * vd;
    int64_t channels = 2 * all_kd + vd * n;
    const int64_t first[3] = {k0, all_kd + k0, 2 * all_kd + v0}, count[3] = {kd, kd, vd};
    /* q | k | v: a run of each part's heads */
    lm_weights_slice qkv = {0};
    for (int part = 0; part < 3; part++) add_run(&qkv, first[part], count[part]);
    TRY(shard_at(m, w, prefix, i, "linear_attn.in_proj_qkv.weight", channels, H, &qkv, &la->in_proj_qkv, err));
    TRY(rows_at(m, w, prefix, i, "linear_attn.in_proj_z.weight", vd, H, &la->in_proj_z, err));
    TRY(rows_at(m, w, prefix, i, "linear_attn.in_proj_b.weight", Hv, H, &la->in_proj_b, err));
    TRY(rows_at(m, w, prefix, i, "linear_attn.in_proj_a.weight", Hv, H, &la->in_proj_a, err));
    TRY(cols_at(m, w, prefix, i, "linear_attn.out_proj.weight", H, vd, &la->out_proj, err));
    /* the conv's channels are q | k | v too: the same runs, K taps a channel */
    float *conv;
    TRY(host_vector_at(w, prefix, i, "linear_attn.conv1d.weight", channels * K, 0, true, &conv, err));
    keep_runs(conv, K, first, count, 3);
    TRY(lm_weights_import(w, conv, (int64_t)m->conv_dim * K, "linear_attn.conv1d.weight", &la->conv_weight, err));
    /* The decay rate is used as -exp(A_log): computed once, here. */
    float *neg_exp_A, *dt_bias;
    TRY(host_vector_at(w, prefix, i, "linear_attn.A_log", (int64_t)Hv * n, 0, false, &neg_exp_A, err));
    const int64_t heads0 = (int64_t)m->share.rank * Hv, heads = Hv;
    keep_runs(neg_exp_A, 1, &heads0, &heads, 1);
    if (!c->llama_cpp_forms) /* a GGUF's ssm_a is -exp(A_log) already */
        for (int h = 0; h < Hv; h++) neg_exp_A[h] = -expf(neg_exp_A[h]);
    TRY(lm_weights_import(w, neg_exp_A, Hv, "linear_attn.A_log", &la->neg_exp_A, err));
    TRY(host_vector_at(w, prefix, i, "linear_attn.dt_bias", (int64_t)Hv * n, 0, false, &dt_bias, err));
    keep_runs(dt_bias, 1, &heads0, &heads, 1);
    TRY(lm_weights_import(w, dt_bias, Hv, "linear_attn.dt_bias", &la->dt_bias, err));
    /* The gated norm is plain w (model-spec trap 1): no offset. */
    TRY(vector_at(w, prefix, i, "linear_attn.norm.weight", c->linear_value_head_dim, 0, false,
                  &la->norm, err));
    return LM_OK;
}

static lm_status load_full_attention(lm_qwen35_model *m, const char *prefix, int i,
                                     float norm_offset, lm_qwen35_full_attention *fa,
                                     lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    lm_weights *w = &m->weights;
    int H = c->hidden_size, D = c->head_dim, nH = c->num_attention_heads, nKV = c->num_key_value_heads;
    /* q_proj carries the output gate: per head [q (D) | gate (D)]. */
    TRY(rows_at(m, w, prefix, i, "self_attn.q_proj.weight", (int64_t)nH * 2 * D, H, &fa->q_proj, err));
    /* this rank's kv heads: a run from share.kv.first of the checkpoint's */
    lm_weights_slice kv = {.n_runs = 1, .runs = {{(int64_t)m->share.kv.first * D, (int64_t)nKV * D}}};
    int64_t kv_rows = (int64_t)m->share.kv.total * D;
    TRY(shard_at(m, w, prefix, i, "self_attn.k_proj.weight", kv_rows, H, &kv, &fa->k_proj, err));
    TRY(shard_at(m, w, prefix, i, "self_attn.v_proj.weight", kv_rows, H, &kv, &fa->v_proj, err));
    TRY(cols_at(m, w, prefix, i, "self_attn.o_proj.weight", H, (int64_t)nH * D, &fa->o_proj, err));
    TRY(vector_at(w, prefix, i, "self_attn.q_norm.weight", D, norm_offset, false, &fa->q_norm, err));
    TRY(vector_at(w, prefix, i, "self_attn.k_norm.weight", D, norm_offset, false, &fa->k_norm, err));
    return LM_OK;
}

static lm_status load_mlp(lm_qwen35_model *m, const char *prefix, int i, lm_qwen35_mlp *mlp,
                          lm_error *err) {
    char name[160];
    snprintf(name, sizeof name, "%slayers.%d.mlp.", prefix, i);
    return lm_swiglu_load_share(&m->weights, name, m->config.intermediate_size, m->config.hidden_size, m->share.rank,
                                m->share.n_ranks, mlp, err);
}

static lm_status load_moe(lm_qwen35_model *m, const char *prefix, int i, lm_qwen35_moe *moe,
                          lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    char layer_prefix[128], name[256];
    snprintf(layer_prefix, sizeof layer_prefix, "%slayers.%d.", prefix, i);
    snprintf(name, sizeof name, "%smlp.gate.weight", layer_prefix);
    TRY(lm_weights_matrix(&m->weights, name, c->num_experts, c->hidden_size, &moe->router, err));
    snprintf(name, sizeof name, "%smlp.", layer_prefix);
    TRY(lm_expert_weights_load_share(&m->weights, name, c->num_experts, c->moe_intermediate_size, c->hidden_size,
                                     &m->share, &moe->experts, err));
    snprintf(name, sizeof name, "%smlp.shared_expert.", layer_prefix);
    TRY(lm_swiglu_load_share(&m->weights, name, c->shared_expert_intermediate_size, c->hidden_size, m->share.rank,
                             m->share.n_ranks, &moe->shared, err));
    snprintf(name, sizeof name, "%smlp.shared_expert_gate.weight", layer_prefix);
    return lm_weights_matrix(&m->weights, name, 1, c->hidden_size, &moe->shared_gate, err);
}

void lm_qwen35_layer_free(lm_qwen35_layer *layer) {
    lm_expert_weights_free(&layer->moe.experts);
}

lm_status lm_qwen35_load_layer(lm_qwen35_model *m, const char *prefix, int i, lm_layer_type type,
                               float norm_offset, lm_qwen35_layer *layer, lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    layer->type = type;
    TRY(vector_at(&m->weights, prefix, i, "input_layernorm.weight", c->hidden_size, norm_offset,
                  false, &layer->input_norm, err));
    TRY(vector_at(&m->weights, prefix, i, "post_attention_layernorm.weight", c->hidden_size,
                  norm_offset, false, &layer->post_attention_norm, err));
    if (type == LM_LAYER_FULL_ATTENTION)
        TRY(load_full_attention(m, prefix, i, norm_offset, &layer->full, err));
    else
        TRY(load_linear_attention(m, prefix, i, &layer->linear, err));
    layer->is_moe = c->is_moe; /* every Qwen3.5-MoE layer is sparse (model-spec §B.1) */
    if (layer->is_moe) return load_moe(m, prefix, i, &layer->moe, err);
    return load_mlp(m, prefix, i, &layer->mlp, err);
}

/* Whether the checkpoint's zero-centred norms already hold their +1: mlx-lm
 * adds it when it converts a checkpoint, and marks the conversion by the
 * linear-attention conv1d it stores [C, K, 1] where Hugging Face stores
 * [C, 1, K] (the same bytes: loom reads either).  Its own rule, used here. */
static bool norms_hold_offset(const lm_qwen35_model *m, const char *prefix) {
    const lm_qwen35_config *c = &m->config;
    if (c->llama_cpp_forms) return true;
    if (!m->weights.checkpoint) return false;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        if (c->layer_types[i] == LM_LAYER_FULL_ATTENTION) continue;
        char name[256];
        snprintf(name, sizeof name, "%slayers.%d.linear_attn.conv1d.weight", prefix, i);
        const lm_tensor *t = lm_checkpoint_find(m->weights.checkpoint, name);
        return t && t->n_dims == 3 && t->shape[2] == 1 && t->shape[1] > 1;
    }
    return false;
}

static lm_status load_layers(lm_qwen35_model *m, const char *prefix, float norm_offset, lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        lm_qwen35_layer *layer = &m->layers[i];
        bool full = c->layer_types[i] == LM_LAYER_FULL_ATTENTION;
        layer->cache_index = full ? m->n_full_layers++ : m->n_linear_layers++;
        TRY(lm_qwen35_load_layer(m, prefix, i, c->layer_types[i], norm_offset, layer, err));
    }
    return LM_OK;
}

/* Bytes a decode step must read: every weight matrix of the text model once
 * (lm_head included; the embedding only a row; the MTP head not at all) plus
 * the recurrent state, read and written.  Norm vectors are left out (well
 * under 0.1%). */
static size_t decode_bytes_per_token(const lm_qwen35_model *m) {
    const lm_qwen35_config *c = &m->config;
    double bytes = lm_matrix_bytes(&m->lm_head);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const lm_qwen35_layer *l = &m->layers[i];
        if (l->type == LM_LAYER_FULL_ATTENTION)
            bytes += lm_matrix_bytes(&l->full.q_proj) + lm_matrix_bytes(&l->full.k_proj) +
                     lm_matrix_bytes(&l->full.v_proj) + lm_matrix_bytes(&l->full.o_proj);
        else
            bytes += lm_matrix_bytes(&l->linear.in_proj_qkv) + lm_matrix_bytes(&l->linear.in_proj_z) +
                     lm_matrix_bytes(&l->linear.in_proj_b) + lm_matrix_bytes(&l->linear.in_proj_a) +
                     lm_matrix_bytes(&l->linear.out_proj);
        if (l->is_moe) /* the router, the shared expert and top_k routed experts */
            bytes += lm_matrix_bytes(&l->moe.router) + lm_matrix_bytes(&l->moe.shared_gate) +
                     lm_matrix_bytes(&l->moe.shared.gate_proj) + lm_matrix_bytes(&l->moe.shared.up_proj) +
                     lm_matrix_bytes(&l->moe.shared.down_proj) +
                     lm_expert_bytes_per_token(&l->moe.experts, c->num_experts_per_tok);
        else
            bytes += lm_matrix_bytes(&l->mlp.gate_proj) + lm_matrix_bytes(&l->mlp.up_proj) +
                     lm_matrix_bytes(&l->mlp.down_proj);
    }
    double state = (double)c->linear_num_value_heads * c->linear_key_head_dim *
                   c->linear_value_head_dim * sizeof(float);
    return (size_t)(bytes + 2.0 * state * m->n_linear_layers);
}

/* What the engine needs to know (models/model.h). */
static void describe_to_engine(lm_qwen35_model *m) {
    const lm_qwen35_config *c = &m->config;
    lm_model_info *info = &m->base.info;
    snprintf(info->family, sizeof info->family, "%s", lm_qwen35_family.name);
    snprintf(info->architecture, sizeof info->architecture, "%s", c->model_type);
    info->vocab_size = c->vocab_size;
    info->hidden_size = c->hidden_size;
    info->n_layers = c->num_hidden_layers;
    info->n_kv_layers = m->n_full_layers;
    info->n_kv_heads = c->num_key_value_heads;
    info->head_dim = c->head_dim;
    info->n_state_layers = m->n_linear_layers;
    info->state_bytes_per_slot =
        sizeof(float) * (size_t)m->n_linear_layers *
        ((size_t)m->conv_dim * (size_t)(c->linear_conv_kernel_dim - 1) +
         (size_t)c->linear_num_value_heads * (size_t)c->linear_key_head_dim *
             (size_t)c->linear_value_head_dim);
    info->max_position_embeddings = c->max_position_embeddings;
    info->n_eos = 0;
    for (int i = 0; i < c->n_eos && info->n_eos < LM_MODEL_MAX_EOS; i++)
        info->eos_ids[info->n_eos++] = c->eos_token_ids[i];
    info->has_mtp = m->has_mtp;
    snprintf(info->mtp_status, sizeof info->mtp_status, "%s", m->has_mtp ? "" : m->mtp_missing);
    int64_t params = 0;
    for (size_t i = 0; i < m->weights.n_used; i++) {
        const lm_tensor *t = m->weights.used[i];
        if (strncmp(t->name, "mtp.", 4) != 0 && !strstr(t->name, ".mtp."))
            params += lm_weights_tensor_parameters(&m->weights, t);
    }
    info->n_parameters = params;
    int64_t inactive_per_layer =
        c->is_moe ? (int64_t)(c->num_experts - c->num_experts_per_tok) * 3 *
                        (int64_t)c->moe_intermediate_size * c->hidden_size
                  : 0;
    info->n_active_parameters = params - inactive_per_layer * c->num_hidden_layers;
    info->weight_bytes = lm_weights_bytes_used(&m->weights);
    lm_weights_made_note(&m->weights, info->weights_made, sizeof info->weights_made);
    info->decode_bytes_per_token = decode_bytes_per_token(m);
    info->mtp_round_bytes = lm_qwen35_mtp_round_bytes(m);
    info->lm_head_bytes = (size_t)lm_matrix_bytes(&m->lm_head);
    const lm_qwen35_vision *v = m->vision;
    lm_vision_describe(&info->vision, c->image_token_id, c->vision_start_token_id, c->vision_end_token_id,
                       &c->vision, v ? v->n_parameters : 0,
                       v ? v->merger_fc1.rows * v->merger_fc1.cols + v->merger_fc2.rows * v->merger_fc2.cols : 0,
                       v ? &v->processor : NULL);
}

static const lm_model_ops qwen35_ops;

static void qwen35_free(lm_qwen35_model *m) {
    if (!m) return;
    lm_qwen35_mtp_free(m);
    lm_qwen35_vision_free(m->vision);
    lm_weights_free(&m->weights);
    for (int i = 0; m->layers && i < m->config.num_hidden_layers; i++) lm_qwen35_layer_free(&m->layers[i]);
    free(m->layers);
    lm_checkpoint_close(m->checkpoint);
    free(m);
}

static void qwen35_destroy(lm_model *base) { qwen35_free((lm_qwen35_model *)base); }

/* This rank's share (models/rank_share.h): of the attention heads (query
 * and kv), the Gated DeltaNet heads (key and value), the MLP width, and in
 * MoE the shared expert's width and the routed experts (a share of every
 * expert's width, or whole experts with expert parallelism); m->config
 * becomes the rank's.  The router, the shared expert's gate, the
 * embedding, lm_head, norms and vision tower stay whole on every rank.
 * Without options or a communicator: the whole model. */
static lm_status take_share(lm_qwen35_model *m, const lm_model_load_options *options, lm_error *err) {
    lm_qwen35_config *c = &m->config;
    lm_share_plan plan = {
        .attention = {{"num_attention_heads", &c->num_attention_heads},
                      {"num_key_value_heads", &c->num_key_value_heads}},
        .linear_attention = {{"linear_num_value_heads", &c->linear_num_value_heads},
                             {"linear_num_key_heads", &c->linear_num_key_heads}},
        .parts = {c->is_moe ? (lm_share_part){"shared_expert_intermediate_size", &c->shared_expert_intermediate_size}
                            : (lm_share_part){"intermediate_size", &c->intermediate_size}},
        .n_parts = 1,
    };
    if (c->is_moe) {
        plan.experts = (lm_share_part){"num_experts", &c->num_experts};
        plan.expert_width = (lm_share_part){"moe_intermediate_size", &c->moe_intermediate_size};
    }
    return lm_rank_share_take(&m->share, options ? options->tensor_parallel : NULL,
                              options && options->expert_parallel, &plan, err);
}

lm_status lm_qwen35_load(lm_checkpoint *checkpoint, const lm_qwen35_config *config,
                         const lm_model_load_options *options, lm_backend *backend,
                         lm_qwen35_model **out, lm_error *err) {
    lm_qwen35_model *m = calloc(1, sizeof *m);
    if (!m) {
        lm_checkpoint_close(checkpoint);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory loading the model");
    }
    m->base.ops = &qwen35_ops;
    m->base.backend = backend;
    m->config = *config;
    m->checkpoint = checkpoint;
    const lm_qwen35_config *c = &m->config;
    if (checkpoint)
        lm_weights_init(&m->weights, checkpoint, backend);
    else
        lm_weights_init_random(&m->weights, options ? options->random_seed : 0,
                               !config->tie_word_embeddings, backend);
    if (options && options->progress)
        lm_weights_set_progress(&m->weights, options->progress,
                                options->tensor_parallel ? options->tensor_parallel->n_ranks : 1);
    lm_weights_quant quant = {0};
    if (options)
        quant = (lm_weights_quant){.int8_linear = options->quantize_int8,
                                   .fp8_linear = options->quantize_fp8,
                                   .fp8_block_rows = options->fp8_block_rows,
                                   .fp8_block_cols = options->fp8_block_cols,
                                   .mlx_bits = options->mlx_bits,
                                   .mlx_group = options->mlx_group,
                                   .mlx_overrides = options->mlx_overrides,
                                   .int4 = options->int4};
    lm_weights_set_quant(&m->weights, &quant);
    lm_status st = take_share(m, options, err);
    m->key_dim = c->linear_num_key_heads * c->linear_key_head_dim;
    m->value_dim = c->linear_num_value_heads * c->linear_value_head_dim;
    m->conv_dim = 2 * m->key_dim + m->value_dim;
    m->rope = (lm_rope_params){
        .rot_dim = c->rot_dim,
        .theta = c->rope_theta,
        .sections = {c->mrope_section[0], c->mrope_section[1], c->mrope_section[2]},
        .interleaved_sections = true, /* Qwen3.5 is always interleaved (model-spec §A.6) */
        .pair_interleaved = false,    /* rotate-half */
    };
    m->routing = (lm_moe_routing){.n_experts = c->num_experts,
                                  .top_k = c->num_experts_per_tok,
                                  .scoring = LM_MOE_SOFTMAX,
                                  .n_group = 1,
                                  .topk_group = 1,
                                  .renormalize = true, /* always, in HF's Qwen3.5-MoE */
                                  .scale = 1.0f};

    /* Multimodal checkpoints nest the text model under model.language_model. */
    /* mlx-lm saves it as language_model.model (and language_model.lm_head). */
    const char *prefix = lm_weights_has(&m->weights, "model.language_model.embed_tokens.weight")  ? "model.language_model."
                         : lm_weights_has(&m->weights, "language_model.model.embed_tokens.weight") ? "language_model.model."
                                                                                                  : "model.";
    const char *lm_head_name = strcmp(prefix, "language_model.model.") == 0 ? "language_model.lm_head.weight"
                                                                            : "lm_head.weight";
    const float norm_offset = norms_hold_offset(m, prefix) ? 0.0f : 1.0f;
    /* mlx-lm keeps the text model only: its checkpoints run without images */
    const bool text_only = strcmp(prefix, "language_model.model.") == 0 &&
                           !lm_weights_has(&m->weights, "model.visual.patch_embed.proj.weight");
    char name[256];
    snprintf(name, sizeof name, "%sembed_tokens.weight", prefix);
    if (st != LM_OK) {
        qwen35_free(m);
        return st;
    }
    /* The embedding table stays as stored (a step reads a few of its rows),
     * unless it is also the (tied) lm_head, which every decode step reads
     * whole: then it is quantized like the other Linear layers, and the
     * embedding rows are read from the int8 table. */
    bool tied = !lm_weights_has(&m->weights, lm_head_name);
    st = (tied ? lm_weights_linear : lm_weights_matrix)(&m->weights, name, c->vocab_size, c->hidden_size,
                                                        &m->embed_tokens, err);
    if (st == LM_OK) {
        /* Tie rule: use lm_head.weight when present, else the embedding. */
        m->lm_head_tied = tied;
        st = lm_weights_lm_head(&m->weights, lm_head_name, &m->embed_tokens, tied, c->vocab_size, c->hidden_size, m->share.rank,
                             m->share.n_ranks, &m->lm_head, &m->vocab_split, err);
    }
    if (st == LM_OK) {
        snprintf(name, sizeof name, "%snorm.weight", prefix);
        st = lm_weights_vector(&m->weights, name, c->hidden_size, norm_offset, false, &m->final_norm, err);
    }
    if (st == LM_OK) {
        m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
        st = m->layers ? load_layers(m, prefix, norm_offset, err)
                       : lm_fail(err, LM_ERR_NOMEM, "out of memory loading layers");
    }
    if (st == LM_OK) {
        /* A head that is absent, incomplete or unsupported only turns
         * speculation off (m->mtp_missing says why); running out of memory
         * fails the load. */
        lm_error mtp_err = {0};
        if (lm_qwen35_mtp_load(m, options ? options->mtp_norms : LM_MTP_NORMS_AUTO, &mtp_err) ==
            LM_ERR_NOMEM)
            st = lm_fail(err, LM_ERR_NOMEM, "%s", mtp_err.message);
    }
    /* The vision tower: config.json's vision_config and the checkpoint's
     * model.visual.* (made up with random weights). */
    if (st == LM_OK && c->has_vision_config && !text_only && (checkpoint || (options && options->random_weights)))
        st = lm_qwen35_vision_load(checkpoint, options ? options->random_seed : 0, &quant, backend, &c->vision,
                                   c->hidden_size, &m->vision, err);
    if (st != LM_OK) {
        qwen35_free(m);
        return st;
    }
    describe_to_engine(m);
    *out = m;
    return LM_OK;
}

/* The registry's entry (models/registry.c). */
static lm_status qwen35_open(const char *config_path, const char *dir,
                             const lm_model_load_options *options, lm_backend *backend,
                             lm_model **out, lm_error *err) {
    lm_qwen35_config config;
    lm_status st = lm_qwen35_config_load(config_path, &config, err);
    lm_checkpoint *checkpoint = NULL;
    if (st == LM_OK && !options->random_weights)
        st = lm_checkpoint_open_with(dir, options->mode, options->progress, &checkpoint, err);
    if (st != LM_OK) return st;
    lm_qwen35_model *m;
    st = lm_qwen35_load(checkpoint, &config, options, backend, &m, err);
    if (st == LM_OK) *out = &m->base;
    return st;
}

static const char *const qwen35_model_types[] = {"qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                                 "qwen3_5_moe_text", NULL};

static const char *const qwen35_gguf_architectures[] = {"qwen35", "qwen35moe", NULL};

const lm_model_family lm_qwen35_family = {
    .name = "qwen3_5",
    .model_types = qwen35_model_types,
    .open = qwen35_open,
    .gguf_architectures = qwen35_gguf_architectures,
    .open_gguf = lm_qwen35_open_gguf, /* qwen35_gguf.c */
};

/* ------------------------------------------------------------------ forward */

/* Before a layer's conv, for every sequence that records: the states as
 * they were and the pre-conv rows (copies queued on the backend). */
static void record_before(lm_qwen35_context *ctx, const lm_step_batch *b,
                          const lm_qwen35_layer *layer, lm_mem mixed) {
    const lm_qwen35_model *m = ctx->model;
    lm_qwen35_records *r = &ctx->records;
    size_t li = (size_t)layer->cache_index, slots = (size_t)ctx->options.state_slots;
    for (int q = 0; q < b->n_seqs; q++) {
        const lm_step_seq *seq = &b->seqs[q];
        if (!seq->record_for_rollback) continue;
        size_t slot = (size_t)seq->state_slot, row0 = slot * (size_t)r->rows_per_slot;
        lm_copy(ctx->be, lm_mem_f32(r->conv_before, (li * slots + slot) * ctx->conv_floats),
                lm_mem_f32(lm_qwen35_conv_states(ctx, layer->cache_index), slot * ctx->conv_floats),
                sizeof(float) * ctx->conv_floats);
        lm_copy(ctx->be, lm_mem_f32(r->state_before, (li * slots + slot) * ctx->recurrent_floats),
                lm_mem_f32(lm_qwen35_recurrent_states(ctx, layer->cache_index),
                           slot * ctx->recurrent_floats),
                sizeof(float) * ctx->recurrent_floats);
        size_t conv_dim = (size_t)m->conv_dim;
        lm_copy(ctx->be, lm_mem_f32(r->mixed, (li * slots * r->rows_per_slot + row0) * conv_dim),
                lm_mem_f32(mixed, (size_t)seq->first * conv_dim),
                sizeof(float) * (size_t)seq->n_new * conv_dim);
    }
}

/* After the l2 norms: the delta-rule inputs a replay needs (q is not). */
static void record_inputs(lm_qwen35_context *ctx, const lm_step_batch *b,
                          const lm_qwen35_layer *layer, const lm_qwen35_scratch *s) {
    const lm_qwen35_model *m = ctx->model;
    lm_qwen35_records *r = &ctx->records;
    size_t li = (size_t)layer->cache_index, slots = (size_t)ctx->options.state_slots;
    size_t layer_rows = li * slots * (size_t)r->rows_per_slot;
    size_t kd = (size_t)m->key_dim, vd = (size_t)m->value_dim;
    size_t Hv = (size_t)m->config.linear_num_value_heads;
    for (int q = 0; q < b->n_seqs; q++) {
        const lm_step_seq *seq = &b->seqs[q];
        if (!seq->record_for_rollback) continue;
        size_t row = layer_rows + (size_t)seq->state_slot * (size_t)r->rows_per_slot;
        size_t f = (size_t)seq->first, n = (size_t)seq->n_new;
        lm_copy(ctx->be, lm_mem_f32(r->k, row * kd), lm_mem_f32(s->k, f * kd), sizeof(float) * n * kd);
        lm_copy(ctx->be, lm_mem_f32(r->v, row * vd), lm_mem_f32(s->v, f * vd), sizeof(float) * n * vd);
        lm_copy(ctx->be, lm_mem_f32(r->g, row * Hv), lm_mem_f32(s->g, f * Hv), sizeof(float) * n * Hv);
        lm_copy(ctx->be, lm_mem_f32(r->beta, row * Hv), lm_mem_f32(s->beta, f * Hv),
                sizeof(float) * n * Hv);
    }
}

/* A block's input (attention's or the MLP's): x = rmsnorm(h) · weight.
 * A device backend may fold the norm into the residual add before it
 * (add_rmsnorm) or into the products that read it (its fusion). */
typedef struct {
    lm_mem h, weight, x;
    float eps;
} block_input;

static void input_norm(lm_backend *be, const block_input *in, int N, int cols) {
    lm_rmsnorm(be, in->x, in->h, in->weight, N, cols, in->eps);
}

static void input_products(lm_backend *be, const block_input *in, int N, const lm_product *outs,
                           int count) {
    input_norm(be, in, N, (int)outs[0].w->cols);
    for (int i = 0; i < count; i++) lm_matmul(be, outs[i].y, in->x, N, outs[i].w);
}

/* A block's last product (attention's out projection, the MLP's down),
 * row-parallel, added into the residual stream h through s->x. */
static void residual_product(lm_qwen35_context *ctx, lm_mem h, lm_mem in, int N, const lm_matrix *w) {
    lm_row_parallel_residual(&ctx->ranks, ctx->be, h, ctx->scratch.x, in, N, w);
}

/* Gated DeltaNet (model-spec §A.7) of the normed input, added to h. */
static void linear_attention(lm_qwen35_context *ctx, const lm_step_view *step, const lm_step_batch *b,
                             const lm_qwen35_layer *layer, const block_input *in, lm_mem h) {
    const lm_qwen35_model *m = ctx->model;
    const lm_qwen35_config *c = &m->config;
    const lm_qwen35_linear_attention *la = &layer->linear;
    const lm_qwen35_scratch *s = &ctx->scratch;
    lm_backend *be = ctx->be;
    int N = step->n_tokens;
    int Hk = c->linear_num_key_heads, Hv = c->linear_num_value_heads;
    int dk = c->linear_key_head_dim, dv = c->linear_value_head_dim;
    lm_mem mixed = s->proj, conv_out = s->proj2, z = s->gates;
    lm_seq_batch seqs = lm_step_sequences(step);

    lm_product projections[] = {
        {mixed, &la->in_proj_qkv}, /* [N, conv_dim]: q | k | v */
        {z, &la->in_proj_z},       /* [N, value_dim] output gate */
        {s->beta, &la->in_proj_b}, /* [N, Hv] */
        {s->g, &la->in_proj_a},    /* [N, Hv] */
    };
    input_products(be, in, N, projections, 4);

    record_before(ctx, b, layer, mixed);
    /* beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias) */
    lm_gdn_gates(be, s->beta, s->g, la->neg_exp_A, la->dt_bias, N, Hv);
    /* the causal conv + SiLU of q | k | v, split into q [N, Hk, dk]
     * (l2-normed, times 1/sqrt(dk)), k [N, Hk, dk] (l2-normed) and v [N, Hv, dv] */
    int kd = Hk * dk, vd = Hv * dv, cd = 2 * kd + vd;
    lm_causal_conv1d_silu(be, conv_out, mixed, cd, la->conv_weight, c->linear_conv_kernel_dim,
                          lm_qwen35_conv_states(ctx, layer->cache_index), (int64_t)ctx->conv_floats, &seqs);
    lm_copy_rows(be, s->q, kd, conv_out, cd, N, kd);
    lm_copy_rows(be, s->k, kd, lm_mem_f32(conv_out, (size_t)kd), cd, N, kd);
    lm_copy_rows(be, s->v, vd, lm_mem_f32(conv_out, 2 * (size_t)kd), cd, N, vd);
    lm_l2norm_scale(be, s->q, N * Hk, dk, 1e-6f, 1.0f / sqrtf((float)dk));
    lm_l2norm_scale(be, s->k, N * Hk, dk, 1e-6f, 1.0f);
    lm_discard(be, conv_out, sizeof(float) * (size_t)N * (size_t)cd);
    record_inputs(ctx, b, layer, s);

    lm_mem core = mixed; /* reuse: [N, Hv, dv] */
    /* the delta rule over the recurrent states, then o = rmsnorm(o) · norm · silu(z) per value head */
    lm_gated_delta_rule(be, core, s->q, s->k, s->v, s->g, s->beta, lm_qwen35_recurrent_states(ctx, layer->cache_index),
                        (int64_t)ctx->recurrent_floats, &seqs, Hk, Hv, dk, dv);
    lm_gated_rmsnorm(be, core, core, z, la->norm, N * Hv, dv, c->rms_norm_eps);
    residual_product(ctx, h, core, N, &la->out_proj);
}

/* Gated full attention (model-spec §A.5) over a paged KV cache layer, of
 * the normed input, added to h. */
static void full_attention(lm_qwen35_context *ctx, const lm_step_view *step, const lm_qwen35_layer *layer,
                           const lm_kv_layer *kv, const block_input *in, lm_mem h) {
    const lm_qwen35_model *m = ctx->model;
    const lm_qwen35_config *c = &m->config;
    const lm_qwen35_full_attention *fa = &layer->full;
    const lm_qwen35_scratch *s = &ctx->scratch;
    lm_backend *be = ctx->be;
    int N = step->n_tokens, D = c->head_dim;
    int nH = c->num_attention_heads, nKV = c->num_key_value_heads;
    lm_mem qg = s->proj, attn = s->proj2;

    lm_product projections[] = {
        {qg, &fa->q_proj}, /* per head [q | gate] */
        {s->k, &fa->k_proj},
        {s->v, &fa->v_proj},
    };
    input_products(be, in, N, projections, 3);
    /* q | gate split per head; q and k rms-normed per head and rotated; k
     * and v into the cache. */
    lm_copy_rows(be, s->q, D, qg, 2 * D, N * nH, D);
    lm_copy_rows(be, s->gates, D, lm_mem_f32(qg, (size_t)D), 2 * D, N * nH, D);
    lm_rmsnorm(be, s->q, s->q, fa->q_norm, N * nH, D, c->rms_norm_eps);
    lm_rmsnorm(be, s->k, s->k, fa->k_norm, N * nKV, D, c->rms_norm_eps);
    lm_rope(be, s->q, N, nH, D, step->positions, &m->rope);
    lm_rope(be, s->k, N, nKV, D, step->positions, &m->rope);
    lm_kv_write(be, kv, s->k, s->v, N, step->kv_slots);
    lm_attention_batch ab = lm_step_attention(step, nH, nKV, D);
    lm_attention(be, attn, s->q, kv, &ab);
    lm_sigmoid_mul(be, attn, s->gates, (int64_t)N * nH * D); /* attention ⊙ sigmoid(gates) */
    residual_product(ctx, h, attn, N, &fa->o_proj);
}

/* The SwiGLU MLP of the normed input, added to h. */
static void mlp(lm_qwen35_context *ctx, int N, const lm_qwen35_mlp *w, const block_input *in, lm_mem h) {
    const lm_qwen35_scratch *s = &ctx->scratch;
    lm_backend *be = ctx->be;
    input_norm(be, in, N, (int)w->gate_proj.cols);
    lm_forward_swiglu_in(be, s->proj, s->proj2, s->x, N, &w->gate_proj, &w->up_proj);
    residual_product(ctx, h, s->proj, N, &w->down_proj);
}

/* The sparse MoE block (model-spec §B.2) of the normed input: the routed
 * experts, plus the shared expert scaled by sigmoid(x·shared_gateᵀ),
 * summed over the ranks (each holds a share of every expert, or whole
 * experts) and added to h. */
static void moe_mlp(lm_qwen35_context *ctx, int N, const lm_qwen35_moe *moe, const block_input *in, lm_mem h) {
    const lm_qwen35_model *m = ctx->model;
    const lm_qwen35_config *c = &m->config;
    const lm_qwen35_scratch *s = &ctx->scratch;
    const lm_qwen35_moe_scratch *ms = &ctx->moe;
    lm_backend *be = ctx->be;
    int H = c->hidden_size, k = c->num_experts_per_tok, Is = c->shared_expert_intermediate_size;
    lm_product projections[] = {
        {ms->logits, &moe->router},
        {s->proj, &moe->shared.gate_proj},
        {s->proj2, &moe->shared.up_proj},
        {ms->shared_gate, &moe->shared_gate}, /* [N, 1] */
    };
    input_products(be, in, N, projections, 4); /* x written: the experts read it */
    lm_moe_route(be, ms->ids, ms->weights, ms->logits, N, &m->routing);
    lm_moe_apply_experts(be, ms->routed, s->x, N, ms->ids, ms->weights, k, &moe->experts.view,
                         ms->expert_scratch);
    /* routed += sigmoid(shared_gate) · SwiGLU_shared(x) */
    lm_silu_mul(be, s->proj, s->proj, s->proj2, (int64_t)N * Is);
    lm_matmul(be, ms->shared, s->proj, N, &moe->shared.down_proj);
    lm_sigmoid_scale_rows(be, ms->shared, ms->shared_gate, N, H);
    lm_add(be, ms->routed, ms->shared, (int64_t)N * H);
    lm_rank_sum(&ctx->ranks, be, ms->routed, (size_t)N * (size_t)H);
    lm_add(be, h, ms->routed, (int64_t)N * H);
    lm_discard(be, ms->shared, sizeof(float) * (size_t)N * (size_t)H);
    lm_discard(be, ms->routed, sizeof(float) * (size_t)N * (size_t)H);
    lm_discard(be, s->proj, sizeof(float) * (size_t)N * (size_t)Is);
}

/* One decoder layer (model-spec §A.4) on the residual stream h: full
 * attention over kv, or Gated DeltaNet (b: the step's sequences, for the
 * rollback records), then the MLP, each added to h. */
static void decoder_layer(lm_qwen35_context *ctx, const lm_step_view *step, const lm_step_batch *b,
                          const lm_qwen35_layer *layer, const lm_kv_layer *kv, lm_mem h) {
    const lm_qwen35_config *c = &ctx->model->config;
    const lm_qwen35_scratch *s = &ctx->scratch;
    int N = step->n_tokens;
    block_input in = {.h = h, .weight = layer->input_norm, .x = s->x, .eps = c->rms_norm_eps};
    if (layer->type == LM_LAYER_FULL_ATTENTION) full_attention(ctx, step, layer, kv, &in, h);
    else linear_attention(ctx, step, b, layer, &in, h);
    block_input post = {.h = h, .weight = layer->post_attention_norm, .x = s->x, .eps = c->rms_norm_eps};
    if (layer->is_moe) moe_mlp(ctx, N, &layer->moe, &post, h);
    else mlp(ctx, N, &layer->mlp, &post, h);
}

void lm_qwen35_attention_layer(lm_qwen35_context *ctx, const lm_step_view *step,
                               const lm_qwen35_layer *layer, const lm_kv_layer *kv, lm_mem h) {
    decoder_layer(ctx, step, NULL, layer, kv, h);
}

lm_status lm_qwen35_forward(lm_model_context *base, const lm_step_batch *b,
                            const lm_forward_out *out, lm_error *err) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    const lm_qwen35_model *m = ctx->model;
    const lm_qwen35_config *c = &m->config;
    lm_backend *be = ctx->be;
    lm_step_view step;
    lm_status st = lm_qwen35_step_upload(ctx, b, false, NULL, &step, err);
    if (st != LM_OK) return st;
    lm_sample_upload(be, &ctx->sample, out, step.n_logit_rows);
    int N = step.n_tokens, H = c->hidden_size, L = c->num_hidden_layers;
    size_t rows_bytes = sizeof(float) * (size_t)N * (size_t)H;
    lm_mem h = ctx->scratch.h;
    for (int q = 0; q < b->n_seqs && ctx->records.recorded_rows && m->n_linear_layers > 0; q++)
            ctx->records.recorded_rows[b->seqs[q].state_slot] =
                b->seqs[q].record_for_rollback ? b->seqs[q].n_new : 0;

    lm_rank_sums_begin(&ctx->ranks, m->share.comm);
    lm_forward_embed_inputs(be, h, step.tokens, b, &m->embed_tokens, H);
    for (int i = 0; i < L; i++) {
        if (out->layer_hidden && out->layer_hidden[i]) {
            st = lm_rank_sums_status(&ctx->ranks, err);
            if (st == LM_OK) st = lm_download(be, out->layer_hidden[i], h, rows_bytes, err);
            if (st != LM_OK) return st;
        }
        const lm_qwen35_layer *layer = &m->layers[i];
        decoder_layer(ctx, &step, b, layer,
                      layer->type == LM_LAYER_FULL_ATTENTION ? &ctx->kv[layer->cache_index] : NULL, h);
    }
    st = lm_rank_sums_status(&ctx->ranks, err);
    if (st != LM_OK) return st;
    /* The MTP head drafts from the post-norm state of every committed row. */
    if (ctx->options.speculative_tokens > 0)
        lm_rmsnorm(be, ctx->hidden_all, h, m->final_norm, N, H, c->rms_norm_eps);
    ctx->last_step_tokens = N;

    /* Final norm and lm_head only on the rows that need logits. */
    lm_logits_head head = {.final_norm = m->final_norm, .eps = c->rms_norm_eps, .lm_head = lm_qwen35_vocab_head(ctx),
                           .hidden = H, .n_layers = L, .logit_x = ctx->logit_x, .logits = ctx->logits,
                           .logit_ids = ctx->logit_ids, .sample = &ctx->sample};
    return lm_forward_logits(be, &step, h, &head, out, err);
}

/* ------------------------------------------------------------ the family */

static void qwen35_describe(const lm_model *base, FILE *f);

/* The vision tower over one image, in the context's vision workspace. */
static lm_status qwen35_encode_image(lm_model_context *base, const lm_image_patches *patches,
                                     float *embeds, lm_error *err) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    if (!ctx->model->vision)
        return lm_fail(err, LM_ERR_INVALID, "image: this model has no vision tower");
    return lm_qwen35_vision_encode(ctx->model->vision, ctx->be, &ctx->vision, patches, embeds, err);
}

static const lm_model_ops qwen35_ops = {
    .destroy = qwen35_destroy,
    .context_create = lm_qwen35_context_create,
    .context_destroy = lm_qwen35_context_destroy,
    .forward = lm_qwen35_forward,
    .copy_block = lm_qwen35_copy_block,
    .copy_state = lm_qwen35_copy_state,
    .reset_state = lm_qwen35_reset_state,
    .save_state = lm_qwen35_save_state,
    .restore_state = lm_qwen35_restore_state,
    .draft = lm_qwen35_draft,
    .rollback = lm_qwen35_rollback,
    .mtp_sequence_logits = lm_qwen35_mtp_sequence_logits,
    .encode_image = qwen35_encode_image,
    .describe = qwen35_describe,
};

static void qwen35_describe(const lm_model *base, FILE *f) {
    const lm_qwen35_model *m = (const lm_qwen35_model *)base;
    const lm_qwen35_config *c = &m->config;
    fprintf(f, "architecture: %s%s\n", c->model_type, c->is_moe ? " (mixture of experts)" : " (dense)");
    fprintf(f, "  vocab %d, hidden %d, layers %d, mlp %d\n", c->vocab_size, c->hidden_size,
            c->num_hidden_layers, c->intermediate_size);
    fprintf(f,
            "  full attention: %d heads, %d kv heads, head dim %d, rotary dims %d (theta %g, "
            "mrope sections %d/%d/%d)\n",
            c->num_attention_heads, c->num_key_value_heads, c->head_dim, c->rot_dim,
            (double)c->rope_theta, c->mrope_section[0], c->mrope_section[1], c->mrope_section[2]);
    fprintf(f, "  gated deltanet: %d key heads x %d, %d value heads x %d, conv width %d\n",
            c->linear_num_key_heads, c->linear_key_head_dim, c->linear_num_value_heads,
            c->linear_value_head_dim, c->linear_conv_kernel_dim);
    fprintf(f, "  layer schedule: ");
    for (int i = 0; i < c->num_hidden_layers; i++)
        fputc(c->layer_types[i] == LM_LAYER_FULL_ATTENTION ? 'F' : 'L', f);
    fprintf(f, "  (L = gated deltanet, F = full attention)\n");
    if (c->is_moe)
        fprintf(f, "  experts: %d, %d per token, width %d, shared expert width %d\n", c->num_experts,
                c->num_experts_per_tok, c->moe_intermediate_size, c->shared_expert_intermediate_size);
    fprintf(f, "  mtp head layers: %d, vision tower: %s, tied embeddings: %s\n",
            c->mtp_num_hidden_layers,
            m->vision              ? "loaded"
            : c->has_vision_config ? "in config.json, not in the checkpoint"
                                   : "no",
            c->tie_word_embeddings ? "yes" : "no");
    if (m->vision) lm_qwen35_vision_describe(m->vision, f);
    fprintf(f, "text model: complete (%zu tensors used, %.1f MB, lm_head %s)\n", m->weights.n_used,
            (double)lm_weights_bytes_used(&m->weights) / 1e6,
            m->lm_head_tied ? "tied to embed_tokens" : "separate");
    if (m->vocab_split)
        fprintf(f, "lm_head: vocabulary rows %lld..%lld of this rank (split over %d ranks, logits gathered)\n",
                (long long)m->lm_head.rows * m->share.rank, (long long)m->lm_head.rows * (m->share.rank + 1) - 1,
                m->share.n_ranks);
    lm_qwen35_mtp_describe(m, f);
    if (m->checkpoint) {
        fprintf(f, "  used (text model and mtp head):\n");
        lm_weights_print_groups(&m->weights, true, f);
        if (m->vision) {
            fprintf(f, "  used (vision tower):\n");
            lm_weights_print_groups(&m->vision->weights, true, f);
        }
        const lm_weights *parts[2] = {&m->weights, m->vision ? &m->vision->weights : NULL};
        fprintf(f, "  not used:\n");
        lm_weights_print_groups_of(parts, m->vision ? 2 : 1, false, f);
    }
}
