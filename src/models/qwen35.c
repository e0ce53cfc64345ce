/* Qwen3.5 text model.  Reads top to bottom like model-spec §A: embedding,
 * decoder layers (Gated DeltaNet or gated attention, then SwiGLU), final
 * norm, lm_head.  All arithmetic is in ops/. */
#include "models/qwen35.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/qwen35_mtp.h"

/* ------------------------------------------------------------------ loading */

static lm_status matrix_at(lm_weights *w, const char *prefix, int layer, const char *name,
                           int64_t rows, int64_t cols, lm_matrix *out, lm_error *err) {
    char full[256];
    snprintf(full, sizeof full, "%slayers.%d.%s", prefix, layer, name);
    return lm_weights_matrix(w, full, rows, cols, out, err);
}

static lm_status vector_at(lm_weights *w, const char *prefix, int layer, const char *name,
                           int64_t n, float offset, bool any_shape, float **out, lm_error *err) {
    char full[256];
    snprintf(full, sizeof full, "%slayers.%d.%s", prefix, layer, name);
    return lm_weights_vector(w, full, n, offset, any_shape, out, err);
}

#define TRY(call)                            \
    do {                                     \
        lm_status try_status_ = (call);      \
        if (try_status_ != LM_OK) return try_status_; \
    } while (0)

static lm_status load_linear_attention(lm_qwen35_model *m, const char *prefix, int i,
                                       lm_qwen35_linear_attention *la, lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    lm_weights *w = &m->weights;
    int H = c->hidden_size, Hv = c->linear_num_value_heads;
    TRY(matrix_at(w, prefix, i, "linear_attn.in_proj_qkv.weight", m->conv_dim, H, &la->in_proj_qkv, err));
    TRY(matrix_at(w, prefix, i, "linear_attn.in_proj_z.weight", m->value_dim, H, &la->in_proj_z, err));
    TRY(matrix_at(w, prefix, i, "linear_attn.in_proj_b.weight", Hv, H, &la->in_proj_b, err));
    TRY(matrix_at(w, prefix, i, "linear_attn.in_proj_a.weight", Hv, H, &la->in_proj_a, err));
    TRY(matrix_at(w, prefix, i, "linear_attn.out_proj.weight", H, m->value_dim, &la->out_proj, err));
    TRY(vector_at(w, prefix, i, "linear_attn.conv1d.weight",
                  (int64_t)m->conv_dim * c->linear_conv_kernel_dim, 0, true, &la->conv_weight, err));
    TRY(vector_at(w, prefix, i, "linear_attn.A_log", Hv, 0, false, &la->neg_exp_A, err));
    for (int h = 0; h < Hv; h++) la->neg_exp_A[h] = -expf(la->neg_exp_A[h]);
    TRY(vector_at(w, prefix, i, "linear_attn.dt_bias", Hv, 0, false, &la->dt_bias, err));
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
    TRY(matrix_at(w, prefix, i, "self_attn.q_proj.weight", (int64_t)nH * 2 * D, H, &fa->q_proj, err));
    TRY(matrix_at(w, prefix, i, "self_attn.k_proj.weight", (int64_t)nKV * D, H, &fa->k_proj, err));
    TRY(matrix_at(w, prefix, i, "self_attn.v_proj.weight", (int64_t)nKV * D, H, &fa->v_proj, err));
    TRY(matrix_at(w, prefix, i, "self_attn.o_proj.weight", H, (int64_t)nH * D, &fa->o_proj, err));
    TRY(vector_at(w, prefix, i, "self_attn.q_norm.weight", D, norm_offset, false, &fa->q_norm, err));
    TRY(vector_at(w, prefix, i, "self_attn.k_norm.weight", D, norm_offset, false, &fa->k_norm, err));
    return LM_OK;
}

static lm_status load_mlp(lm_qwen35_model *m, const char *prefix, int i, lm_qwen35_mlp *mlp,
                          lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    lm_weights *w = &m->weights;
    int H = c->hidden_size, I = c->intermediate_size;
    TRY(matrix_at(w, prefix, i, "mlp.gate_proj.weight", I, H, &mlp->gate_proj, err));
    TRY(matrix_at(w, prefix, i, "mlp.up_proj.weight", I, H, &mlp->up_proj, err));
    TRY(matrix_at(w, prefix, i, "mlp.down_proj.weight", H, I, &mlp->down_proj, err));
    return LM_OK;
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
    if (c->is_moe)
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "%s: mixture-of-experts layers are not supported yet (%slayers.%d.mlp)",
                       c->model_type, prefix, i);
    return load_mlp(m, prefix, i, &layer->mlp, err);
}

static lm_status load_layers(lm_qwen35_model *m, const char *prefix, lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        lm_qwen35_layer *layer = &m->layers[i];
        bool full = c->layer_types[i] == LM_LAYER_FULL_ATTENTION;
        layer->cache_index = full ? m->n_full_layers++ : m->n_linear_layers++;
        TRY(lm_qwen35_load_layer(m, prefix, i, c->layer_types[i], 1.0f, layer, err));
    }
    return LM_OK;
}

/* Loads from m->weights, already initialised (checkpoint or random). */
static lm_status load_model(lm_qwen35_model *m, const lm_qwen35_load_options *options,
                            lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    m->key_dim = c->linear_num_key_heads * c->linear_key_head_dim;
    m->value_dim = c->linear_num_value_heads * c->linear_value_head_dim;
    m->conv_dim = 2 * m->key_dim + m->value_dim;
    /* inv_freq[i] = 1 / theta^(2i/R) in float32, as transformers computes it. */
    int n_freq = c->rot_dim / 2;
    m->rope_inv_freq = malloc(sizeof(float) * (size_t)(n_freq > 0 ? n_freq : 1));
    if (!m->rope_inv_freq) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_freq; i++)
        m->rope_inv_freq[i] = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->rot_dim);
    m->rope = (lm_rope_params){
        .inv_freq = m->rope_inv_freq,
        .rot_dim = c->rot_dim,
        .theta = c->rope_theta,
        .sections = {c->mrope_section[0], c->mrope_section[1], c->mrope_section[2]},
        .interleaved_sections = true, /* Qwen3.5 is always interleaved (model-spec §A.6) */
        .pair_interleaved = false,    /* rotate-half */
    };

    /* Multimodal checkpoints nest the text model under model.language_model. */
    const char *prefix = lm_weights_has(&m->weights, "model.language_model.embed_tokens.weight")
                             ? "model.language_model."
                             : "model.";
    char name[256];
    lm_status st;
    snprintf(name, sizeof name, "%sembed_tokens.weight", prefix);
    st = lm_weights_matrix(&m->weights, name, c->vocab_size, c->hidden_size, &m->embed_tokens, err);
    if (st == LM_OK) {
        /* Tie rule: use lm_head.weight when present, else the embedding. */
        m->lm_head_tied = !lm_weights_has(&m->weights, "lm_head.weight");
        if (m->lm_head_tied)
            m->lm_head = m->embed_tokens;
        else
            st = lm_weights_matrix(&m->weights, "lm_head.weight", c->vocab_size, c->hidden_size,
                                   &m->lm_head, err);
    }
    if (st == LM_OK) {
        snprintf(name, sizeof name, "%snorm.weight", prefix);
        st = lm_weights_vector(&m->weights, name, c->hidden_size, 1.0f, false, &m->final_norm, err);
    }
    if (st == LM_OK) {
        m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
        st = m->layers ? load_layers(m, prefix, err)
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
    if (st != LM_OK) lm_qwen35_free(m);
    return st;
}

lm_status lm_qwen35_load_with(const lm_checkpoint *checkpoint, const lm_qwen35_config *config,
                              const lm_qwen35_load_options *options, lm_qwen35_model *m,
                              lm_error *err) {
    memset(m, 0, sizeof *m);
    m->config = *config;
    lm_weights_init(&m->weights, checkpoint);
    return load_model(m, options, err);
}

lm_status lm_qwen35_load(const lm_checkpoint *checkpoint, const lm_qwen35_config *config,
                         lm_qwen35_model *m, lm_error *err) {
    return lm_qwen35_load_with(checkpoint, config, NULL, m, err);
}

lm_status lm_qwen35_load_random(const lm_qwen35_config *config, uint64_t seed, lm_qwen35_model *m,
                                lm_error *err) {
    memset(m, 0, sizeof *m);
    m->config = *config;
    lm_weights_init_random(&m->weights, seed, !config->tie_word_embeddings);
    return load_model(m, NULL, err);
}

void lm_qwen35_free(lm_qwen35_model *m) {
    lm_qwen35_mtp_free(m);
    free(m->rope_inv_freq);
    m->rope_inv_freq = NULL;
    lm_weights_free(&m->weights);
    free(m->layers);
    m->layers = NULL;
}

lm_status lm_qwen35_caches_init(const lm_qwen35_model *m, int block_size, int n_blocks,
                                int n_state_slots, lm_qwen35_caches *caches, lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    memset(caches, 0, sizeof *caches);
    lm_status st = lm_kv_cache_init(&caches->kv, m->n_full_layers, c->num_key_value_heads,
                                    c->head_dim, block_size, n_blocks, err);
    if (st != LM_OK) return st;
    size_t conv = (size_t)m->conv_dim * (size_t)(c->linear_conv_kernel_dim - 1);
    size_t recurrent = (size_t)c->linear_num_value_heads * (size_t)c->linear_key_head_dim *
                       (size_t)c->linear_value_head_dim;
    st = lm_state_cache_init(&caches->state, m->n_linear_layers, n_state_slots, conv, recurrent, err);
    if (st != LM_OK) lm_kv_cache_free(&caches->kv);
    return st;
}

void lm_qwen35_caches_free(lm_qwen35_caches *caches) {
    lm_kv_cache_free(&caches->kv);
    lm_state_cache_free(&caches->state);
}

/* ---------------------------------------------------------------- workspace */

void lm_qwen35_workspace_free(lm_qwen35_workspace *ws) {
    free(ws->buffer);
    free(ws->slots);
    free(ws->seq_of);
    free(ws->ctx_len);
    free(ws->tables);
    free(ws->mtp_buffer);
    memset(ws, 0, sizeof *ws);
}

/* Scratch buffers of one forward, carved from ws->buffer. */
typedef struct {
    float *h;        /* [N, H] residual stream */
    float *x;        /* [N, H] normed input of a block */
    float *proj;     /* [N, max projection width] */
    float *proj2;    /* [N, max projection width] */
    float *q, *k, *v; /* [N, ...] */
    float *gates;    /* [N, ...] */
    float *small_a, *small_b; /* [N, Hv] */
} scratch;

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static lm_status workspace_reserve(const lm_qwen35_model *m, lm_qwen35_workspace *ws,
                                   const lm_step_batch *batch, scratch *s, lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    size_t N = (size_t)batch->n_tokens, H = (size_t)c->hidden_size;
    size_t attn_q = (size_t)c->num_attention_heads * (size_t)c->head_dim;
    size_t attn_kv = (size_t)c->num_key_value_heads * (size_t)c->head_dim;
    size_t wide = max_size(max_size(2 * attn_q, (size_t)m->conv_dim), (size_t)c->intermediate_size);
    size_t qk = max_size(attn_q, (size_t)m->key_dim);
    size_t kv = max_size(attn_kv, (size_t)m->key_dim);
    size_t vv = max_size(attn_kv, (size_t)m->value_dim);
    size_t gates = max_size(attn_q, (size_t)m->value_dim);
    size_t Hv = (size_t)c->linear_num_value_heads;
    size_t per_token = 2 * H + 2 * wide + qk + kv + vv + gates + 2 * Hv;
    size_t need = per_token * N;
    if (need > ws->capacity) {
        float *bigger = realloc(ws->buffer, need * sizeof(float));
        if (!bigger) return lm_fail(err, LM_ERR_NOMEM, "out of memory for a %zu-token step", N);
        ws->buffer = bigger;
        ws->capacity = need;
    }
    float *p = ws->buffer;
    s->h = p; p += N * H;
    s->x = p; p += N * H;
    s->proj = p; p += N * wide;
    s->proj2 = p; p += N * wide;
    s->q = p; p += N * qk;
    s->k = p; p += N * kv;
    s->v = p; p += N * vv;
    s->gates = p; p += N * gates;
    s->small_a = p; p += N * Hv;
    s->small_b = p;

    if (batch->n_tokens > ws->token_capacity) {
        int32_t *slots = realloc(ws->slots, sizeof(int32_t) * N);
        if (slots) ws->slots = slots;
        int32_t *seq_of = realloc(ws->seq_of, sizeof(int32_t) * N);
        if (seq_of) ws->seq_of = seq_of;
        int32_t *ctx = realloc(ws->ctx_len, sizeof(int32_t) * N);
        if (ctx) ws->ctx_len = ctx;
        if (!slots || !seq_of || !ctx) return lm_fail(err, LM_ERR_NOMEM, "out of memory for a step");
        ws->token_capacity = batch->n_tokens;
    }
    if (batch->n_seqs > ws->seq_capacity) {
        const int32_t **tables = realloc(ws->tables, sizeof(*tables) * (size_t)batch->n_seqs);
        if (!tables) return lm_fail(err, LM_ERR_NOMEM, "out of memory for a step");
        ws->tables = tables;
        ws->seq_capacity = batch->n_seqs;
    }
    return LM_OK;
}

lm_status lm_qwen35_validate_batch(const lm_qwen35_model *m, const lm_kv_cache *kv,
                                   const lm_state_cache *state, const lm_step_batch *b,
                                   lm_error *err) {
    if (b->n_tokens <= 0 || b->n_seqs <= 0)
        return lm_fail(err, LM_ERR_INVALID, "empty step batch");
    int expected_first = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const lm_step_seq *q = &b->seqs[s];
        if (q->first != expected_first || q->n_new <= 0 || q->n_cached < 0)
            return lm_fail(err, LM_ERR_INVALID, "step batch: sequence %d is not contiguous", s);
        expected_first += q->n_new;
        if (q->gdn_record && q->n_new > q->gdn_record->capacity)
            return lm_fail(err, LM_ERR_INVALID, "step batch: sequence %d records %d rows, room for %d", s,
                           q->n_new, q->gdn_record->capacity);
        if (state && m->n_linear_layers > 0 && (q->state_slot < 0 || q->state_slot >= state->n_slots))
            return lm_fail(err, LM_ERR_INVALID, "step batch: bad state slot %d", q->state_slot);
        if (kv->n_layers > 0) {
            int need = lm_kv_blocks_for(kv, q->n_cached + q->n_new);
            if (q->n_blocks < need)
                return lm_fail(err, LM_ERR_INVALID, "step batch: sequence %d has %d blocks, needs %d",
                               s, q->n_blocks, need);
            for (int j = 0; j < need; j++)
                if (q->block_table[j] < 0 || q->block_table[j] >= kv->n_blocks)
                    return lm_fail(err, LM_ERR_INVALID, "step batch: bad block id %d",
                                   q->block_table[j]);
        }
    }
    if (expected_first != b->n_tokens)
        return lm_fail(err, LM_ERR_INVALID, "step batch: sequences cover %d of %d tokens",
                       expected_first, b->n_tokens);
    for (int t = 0; t < b->n_tokens; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= m->config.vocab_size)
            return lm_fail(err, LM_ERR_INVALID, "token id %d is outside the vocabulary (size %d)",
                           b->tokens[t], m->config.vocab_size);
    return LM_OK;
}

/* ------------------------------------------------------------------ forward */

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Gated DeltaNet (model-spec §A.7), x [N, H] -> out added into h. */
/* ------------------------------------------------ speculative rollback */

lm_status lm_gdn_record_init(const lm_qwen35_model *m, int capacity, lm_gdn_record *r, lm_error *err) {
    memset(r, 0, sizeof *r);
    const lm_qwen35_config *c = &m->config;
    size_t L = (size_t)m->n_linear_layers, cap = (size_t)capacity;
    size_t Hv = (size_t)c->linear_num_value_heads;
    r->capacity = capacity;
    r->conv_floats = (size_t)m->conv_dim * (size_t)(c->linear_conv_kernel_dim - 1);
    r->recurrent_floats = Hv * (size_t)c->linear_key_head_dim * (size_t)c->linear_value_head_dim;
    size_t widest = (size_t)(m->conv_dim > m->value_dim ? m->conv_dim : m->value_dim);
    r->conv_before = malloc(sizeof(float) * (L * r->conv_floats + 1));
    r->state_before = malloc(sizeof(float) * (L * r->recurrent_floats + 1));
    r->mixed = malloc(sizeof(float) * (L * cap * (size_t)m->conv_dim + 1));
    r->k = malloc(sizeof(float) * (L * cap * (size_t)m->key_dim + 1));
    r->v = malloc(sizeof(float) * (L * cap * (size_t)m->value_dim + 1));
    r->g = malloc(sizeof(float) * (L * cap * Hv + 1));
    r->beta = malloc(sizeof(float) * (L * cap * Hv + 1));
    r->scratch = malloc(sizeof(float) * (cap * widest + 1));
    if (!r->conv_before || !r->state_before || !r->mixed || !r->k || !r->v || !r->g || !r->beta ||
        !r->scratch) {
        lm_gdn_record_free(r);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for speculative rollback buffers");
    }
    return LM_OK;
}

void lm_gdn_record_free(lm_gdn_record *r) {
    free(r->conv_before);
    free(r->state_before);
    free(r->mixed);
    free(r->k);
    free(r->v);
    free(r->g);
    free(r->beta);
    free(r->scratch);
    memset(r, 0, sizeof *r);
}

/* Before a layer's conv: the states as they were, and the pre-conv rows. */
static void record_before(const lm_qwen35_model *m, lm_state_cache *state_cache,
                          const lm_step_batch *b, const lm_qwen35_layer *layer, const float *mixed) {
    for (int q = 0; q < b->n_seqs; q++) {
        const lm_step_seq *seq = &b->seqs[q];
        lm_gdn_record *r = seq->gdn_record;
        if (!r) continue;
        size_t li = (size_t)layer->cache_index;
        r->n_rows = seq->n_new;
        memcpy(r->conv_before + li * r->conv_floats,
               lm_state_conv(state_cache, layer->cache_index, seq->state_slot),
               sizeof(float) * r->conv_floats);
        memcpy(r->state_before + li * r->recurrent_floats,
               lm_state_recurrent(state_cache, layer->cache_index, seq->state_slot),
               sizeof(float) * r->recurrent_floats);
        memcpy(r->mixed + li * (size_t)r->capacity * m->conv_dim, mixed + (size_t)seq->first * m->conv_dim,
               sizeof(float) * (size_t)seq->n_new * m->conv_dim);
    }
}

/* After the l2 norms: the delta-rule inputs a replay needs (q is not). */
static void record_inputs(const lm_qwen35_model *m, const lm_step_batch *b,
                          const lm_qwen35_layer *layer, const float *k, const float *v,
                          const float *g, const float *beta) {
    size_t Hv = (size_t)m->config.linear_num_value_heads;
    for (int q = 0; q < b->n_seqs; q++) {
        const lm_step_seq *seq = &b->seqs[q];
        lm_gdn_record *r = seq->gdn_record;
        if (!r) continue;
        size_t base = (size_t)layer->cache_index * (size_t)r->capacity, f = (size_t)seq->first;
        size_t rows = (size_t)seq->n_new;
        memcpy(r->k + base * m->key_dim, k + f * m->key_dim, sizeof(float) * rows * m->key_dim);
        memcpy(r->v + base * m->value_dim, v + f * m->value_dim, sizeof(float) * rows * m->value_dim);
        memcpy(r->g + base * Hv, g + f * Hv, sizeof(float) * rows * Hv);
        memcpy(r->beta + base * Hv, beta + f * Hv, sizeof(float) * rows * Hv);
    }
}

void lm_qwen35_rollback_linear_state(const lm_qwen35_model *m, lm_backend *be,
                                     lm_state_cache *state_cache, int slot, const lm_gdn_record *r,
                                     int n_keep) {
    const lm_qwen35_config *c = &m->config;
    int Hk = c->linear_num_key_heads, Hv = c->linear_num_value_heads;
    int dk = c->linear_key_head_dim, dv = c->linear_value_head_dim;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const lm_qwen35_layer *layer = &m->layers[i];
        if (layer->type != LM_LAYER_LINEAR_ATTENTION) continue;
        size_t li = (size_t)layer->cache_index, base = li * (size_t)r->capacity;
        float *conv = lm_state_conv(state_cache, layer->cache_index, slot);
        float *state = lm_state_recurrent(state_cache, layer->cache_index, slot);
        /* Replay the accepted rows from the saved states; the outputs were
         * already right (causality), only the states need redoing. */
        memcpy(conv, r->conv_before + li * r->conv_floats, sizeof(float) * r->conv_floats);
        lm_causal_conv1d_silu(be, r->scratch, r->mixed + base * m->conv_dim, n_keep, m->conv_dim, conv,
                              layer->linear.conv_weight, c->linear_conv_kernel_dim);
        memcpy(state, r->state_before + li * r->recurrent_floats, sizeof(float) * r->recurrent_floats);
        const float *k = r->k + base * m->key_dim;
        lm_gated_delta_rule(be, r->scratch, k, k, r->v + base * m->value_dim, r->g + base * Hv,
                            r->beta + base * Hv, state, n_keep, Hk, Hv, dk, dv);
    }
}

static void linear_attention(const lm_qwen35_model *m, lm_backend *be, lm_state_cache *state_cache,
                             const lm_step_batch *b, const lm_qwen35_layer *layer, scratch *s) {
    const lm_qwen35_config *c = &m->config;
    const lm_qwen35_linear_attention *la = &layer->linear;
    int N = b->n_tokens, H = c->hidden_size;
    int Hk = c->linear_num_key_heads, Hv = c->linear_num_value_heads;
    int dk = c->linear_key_head_dim, dv = c->linear_value_head_dim, K = c->linear_conv_kernel_dim;
    float *mixed = s->proj, *conv_out = s->proj2, *z = s->gates, *beta = s->small_a, *g = s->small_b;

    lm_matmul(be, mixed, s->x, N, &la->in_proj_qkv); /* [N, conv_dim]: q | k | v */
    lm_matmul(be, z, s->x, N, &la->in_proj_z);       /* [N, value_dim] output gate */
    lm_matmul(be, beta, s->x, N, &la->in_proj_b);    /* [N, Hv] */
    lm_matmul(be, g, s->x, N, &la->in_proj_a);       /* [N, Hv] */

    /* beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias), in float32 */
    for (int t = 0; t < N; t++)
        for (int h = 0; h < Hv; h++) {
            float *bt = &beta[t * Hv + h], *gt = &g[t * Hv + h];
            *bt = 1.0f / (1.0f + expf(-*bt));
            *gt = la->neg_exp_A[h] * softplus(*gt + la->dt_bias[h]);
        }

    record_before(m, state_cache, b, layer, mixed);

    /* Causal conv + SiLU per sequence, carrying each sequence's window. */
    for (int q = 0; q < b->n_seqs; q++) {
        const lm_step_seq *seq = &b->seqs[q];
        float *state = lm_state_conv(state_cache, layer->cache_index, seq->state_slot);
        lm_causal_conv1d_silu(be, conv_out + (size_t)seq->first * m->conv_dim,
                              mixed + (size_t)seq->first * m->conv_dim, seq->n_new, m->conv_dim,
                              state, la->conv_weight, K);
    }

    /* Split into contiguous q [N, Hk, dk], k [N, Hk, dk], v [N, Hv, dv]. */
    for (int t = 0; t < N; t++) {
        const float *row = conv_out + (size_t)t * m->conv_dim;
        memcpy(s->q + (size_t)t * m->key_dim, row, sizeof(float) * (size_t)m->key_dim);
        memcpy(s->k + (size_t)t * m->key_dim, row + m->key_dim, sizeof(float) * (size_t)m->key_dim);
        memcpy(s->v + (size_t)t * m->value_dim, row + 2 * m->key_dim,
               sizeof(float) * (size_t)m->value_dim);
    }
    lm_l2norm_scale(be, s->q, N * Hk, dk, 1e-6f, 1.0f / sqrtf((float)dk));
    lm_l2norm_scale(be, s->k, N * Hk, dk, 1e-6f, 1.0f);

    record_inputs(m, b, layer, s->k, s->v, g, beta);

    float *core = mixed; /* reuse: [N, Hv, dv] */
    for (int q = 0; q < b->n_seqs; q++) {
        const lm_step_seq *seq = &b->seqs[q];
        size_t f = (size_t)seq->first;
        float *state = lm_state_recurrent(state_cache, layer->cache_index, seq->state_slot);
        lm_gated_delta_rule(be, core + f * m->value_dim, s->q + f * m->key_dim, s->k + f * m->key_dim,
                            s->v + f * m->value_dim, g + f * Hv, beta + f * Hv, state, seq->n_new,
                            Hk, Hv, dk, dv);
    }
    lm_gated_rmsnorm(be, core, core, z, la->norm, N * Hv, dv, c->rms_norm_eps);
    lm_matmul(be, s->x, core, N, &la->out_proj);
    lm_add(be, s->h, s->x, (int64_t)N * H);
}

/* Gated full attention (model-spec §A.5) over the layer's paged KV cache. */
static void full_attention(const lm_qwen35_model *m, lm_backend *be, const lm_kv_layer *kv,
                           lm_qwen35_workspace *ws, const lm_step_batch *b,
                           const lm_qwen35_layer *layer, scratch *s) {
    const lm_qwen35_config *c = &m->config;
    const lm_qwen35_full_attention *fa = &layer->full;
    int N = b->n_tokens, H = c->hidden_size, D = c->head_dim;
    int nH = c->num_attention_heads, nKV = c->num_key_value_heads;
    float *qg = s->proj, *attn = s->proj2;

    lm_matmul(be, qg, s->x, N, &fa->q_proj); /* per head [q | gate] */
    lm_matmul(be, s->k, s->x, N, &fa->k_proj);
    lm_matmul(be, s->v, s->x, N, &fa->v_proj);
    for (int t = 0; t < N; t++)
        for (int h = 0; h < nH; h++) {
            const float *src = qg + ((size_t)t * nH + h) * 2 * D;
            memcpy(s->q + ((size_t)t * nH + h) * D, src, sizeof(float) * (size_t)D);
            memcpy(s->gates + ((size_t)t * nH + h) * D, src + D, sizeof(float) * (size_t)D);
        }
    lm_rmsnorm(be, s->q, s->q, fa->q_norm, N * nH, D, c->rms_norm_eps);
    lm_rmsnorm(be, s->k, s->k, fa->k_norm, N * nKV, D, c->rms_norm_eps);
    lm_rope(be, s->q, N, nH, D, b->positions, &m->rope);
    lm_rope(be, s->k, N, nKV, D, b->positions, &m->rope);

    lm_kv_write(be, kv, s->k, s->v, N, ws->slots);
    lm_attention_batch ab = {
        .n_tokens = N,
        .token_seq = ws->seq_of,
        .ctx_len = ws->ctx_len,
        .block_tables = ws->tables,
        .n_heads = nH,
        .n_kv_heads = nKV,
        .head_dim = D,
        .scale = 1.0f / sqrtf((float)D),
    };
    lm_attention(be, attn, s->q, kv, &ab);
    lm_sigmoid_mul(be, attn, s->gates, (int64_t)N * nH * D);
    lm_matmul(be, s->x, attn, N, &fa->o_proj);
    lm_add(be, s->h, s->x, (int64_t)N * H);
}

static void mlp(const lm_qwen35_model *m, lm_backend *be, int N, const lm_qwen35_mlp *w, scratch *s) {
    int H = m->config.hidden_size, I = m->config.intermediate_size;
    lm_matmul(be, s->proj, s->x, N, &w->gate_proj);
    lm_matmul(be, s->proj2, s->x, N, &w->up_proj);
    lm_silu_mul(be, s->proj, s->proj, s->proj2, (int64_t)N * I);
    lm_matmul(be, s->x, s->proj, N, &w->down_proj);
    lm_add(be, s->h, s->x, (int64_t)N * H);
}

/* Per-token cache bookkeeping shared by every full-attention layer. */
static void prepare_attention_rows(int bs, lm_qwen35_workspace *ws, const lm_step_batch *b) {
    for (int q = 0; q < b->n_seqs; q++) {
        const lm_step_seq *seq = &b->seqs[q];
        ws->tables[q] = seq->block_table;
        for (int i = 0; i < seq->n_new; i++) {
            int t = seq->first + i, pos = seq->n_cached + i;
            ws->seq_of[t] = q;
            ws->ctx_len[t] = pos + 1;
            ws->slots[t] = seq->block_table ? seq->block_table[pos / bs] * bs + pos % bs : 0;
        }
    }
}

int lm_qwen35_gather_logit_rows(const lm_step_batch *b, float *x, int width) {
    int rows = 0;
    for (int q = 0; q < b->n_seqs; q++) {
        const lm_step_seq *seq = &b->seqs[q];
        if (seq->no_logits) continue;
        int from = seq->all_logits ? seq->first : seq->first + seq->n_new - 1;
        int count = seq->all_logits ? seq->n_new : 1;
        memmove(x + (size_t)rows * width, x + (size_t)from * width,
                sizeof(float) * (size_t)count * width);
        rows += count;
    }
    return rows;
}

/* One decoder layer (model-spec §A.4) on the residual stream s->h. */
static void decoder_layer(const lm_qwen35_model *m, lm_backend *be, lm_kv_cache *kv,
                          lm_state_cache *state, lm_qwen35_workspace *ws, const lm_step_batch *b,
                          const lm_qwen35_layer *layer, scratch *s) {
    const lm_qwen35_config *c = &m->config;
    int N = b->n_tokens, H = c->hidden_size;
    lm_rmsnorm(be, s->x, s->h, layer->input_norm, N, H, c->rms_norm_eps);
    if (layer->type == LM_LAYER_FULL_ATTENTION)
        full_attention(m, be, &kv->layers[layer->cache_index], ws, b, layer, s);
    else
        linear_attention(m, be, state, b, layer, s);
    lm_rmsnorm(be, s->x, s->h, layer->post_attention_norm, N, H, c->rms_norm_eps);
    mlp(m, be, N, &layer->mlp, s);
}

lm_status lm_qwen35_attention_layer_forward(const lm_qwen35_model *m, lm_backend *be,
                                            const lm_qwen35_layer *layer, lm_kv_cache *kv,
                                            lm_qwen35_workspace *ws, const lm_step_batch *b,
                                            float *h, lm_error *err) {
    if (layer->type != LM_LAYER_FULL_ATTENTION || layer->cache_index < 0 ||
        layer->cache_index >= kv->n_layers)
        return lm_fail(err, LM_ERR_INVALID, "attention layer: no kv cache layer %d",
                       layer->cache_index);
    lm_status st = lm_qwen35_validate_batch(m, kv, NULL, b, err);
    if (st != LM_OK) return st;
    scratch s = {0};
    st = workspace_reserve(m, ws, b, &s, err);
    if (st != LM_OK) return st;
    s.h = h; /* the caller's residual stream instead of the workspace's */
    prepare_attention_rows(kv->block_size, ws, b);
    decoder_layer(m, be, kv, NULL, ws, b, layer, &s);
    return LM_OK;
}

lm_status lm_qwen35_forward(const lm_qwen35_model *m, lm_backend *be, lm_qwen35_caches *caches,
                            lm_qwen35_workspace *ws, const lm_step_batch *b, float *logits,
                            float *hidden, const lm_qwen35_capture *capture, lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    lm_status st = lm_qwen35_validate_batch(m, &caches->kv, &caches->state, b, err);
    if (st != LM_OK) return st;
    scratch s = {0};
    st = workspace_reserve(m, ws, b, &s, err);
    if (st != LM_OK) return st;
    int N = b->n_tokens, H = c->hidden_size;
    size_t row_bytes = sizeof(float) * (size_t)N * (size_t)H;
    prepare_attention_rows(caches->kv.block_size, ws, b);

    lm_embed(be, s.h, b->tokens, N, &m->embed_tokens);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const lm_qwen35_layer *layer = &m->layers[i];
        if (capture && capture->hidden && capture->hidden[i]) memcpy(capture->hidden[i], s.h, row_bytes);
        decoder_layer(m, be, &caches->kv, &caches->state, ws, b, layer, &s);
    }

    if (capture && capture->final_hidden_all)
        lm_rmsnorm(be, capture->final_hidden_all, s.h, m->final_norm, N, H, c->rms_norm_eps);
    /* Final norm and lm_head only on the rows that need logits. */
    int rows = lm_qwen35_gather_logit_rows(b, s.h, H);
    if (rows == 0) return LM_OK;
    lm_rmsnorm(be, s.x, s.h, m->final_norm, rows, H, c->rms_norm_eps);
    if (capture && capture->hidden && capture->hidden[c->num_hidden_layers])
        memcpy(capture->hidden[c->num_hidden_layers], s.x, sizeof(float) * (size_t)rows * H);
    if (hidden) memcpy(hidden, s.x, sizeof(float) * (size_t)rows * H);
    lm_matmul(be, logits, s.x, rows, &m->lm_head);
    return LM_OK;
}
