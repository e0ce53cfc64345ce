/* The Qwen3.5 MTP head.  Reads like model-spec §C.2: embed the next token,
 * normalise it and the target's hidden state, fc over their concatenation
 * (embedding first), one full-attention decoder layer (the main model's, run
 * on the head's own KV cache), mtp.norm, the shared lm_head. */
#include "models/qwen35_mtp.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ loading */

/* Records why the head is not used, in err and in m->mtp_missing. */
static lm_status no_head(lm_qwen35_model *m, lm_error *err, lm_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static lm_status no_head(lm_qwen35_model *m, lm_error *err, lm_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->mtp_missing, sizeof m->mtp_missing, fmt, ap);
    va_end(ap);
    if (code != LM_OK) lm_fail(err, code, "%s", m->mtp_missing);
    return code;
}

/* Checkpoints put the head at the top level ("mtp."); some converters nest it. */
static const char *find_prefix(const lm_weights *w) {
    static const char *const prefixes[] = {"mtp.", "model.mtp.", "language_model.mtp."};
    static const char *const probes[] = {"fc.weight", "norm.weight", "pre_fc_norm_hidden.weight",
                                         "layers.0.input_layernorm.weight"};
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++)
        for (size_t i = 0; i < sizeof probes / sizeof *probes; i++) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefixes[p], probes[i]);
            if (lm_weights_has(w, name)) return prefixes[p];
        }
    return prefixes[0]; /* none there: the error then names mtp.fc.weight */
}

static lm_status load_vector(lm_qwen35_model *m, const char *prefix, const char *name, float **out,
                             lm_error *err) {
    char full[128];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return lm_weights_vector(&m->weights, full, m->config.hidden_size, 0.0f, false, out, err);
}

/* Loads everything; the norms' offset is decided from the stored values. */
static lm_status load_tensors(lm_qwen35_model *m, lm_qwen35_mtp *mtp, lm_mtp_norms norms,
                              lm_error *err) {
    int H = m->config.hidden_size;
    char name[128];
    snprintf(name, sizeof name, "%sfc.weight", mtp->prefix);
    lm_status st = lm_weights_matrix(&m->weights, name, H, 2 * (int64_t)H, &mtp->fc, err);
    if (st == LM_OK)
        st = load_vector(m, mtp->prefix, "pre_fc_norm_embedding.weight",
                         &mtp->pre_fc_norm_embedding, err);
    if (st == LM_OK)
        st =
            load_vector(m, mtp->prefix, "pre_fc_norm_hidden.weight", &mtp->pre_fc_norm_hidden, err);
    if (st == LM_OK) st = load_vector(m, mtp->prefix, "norm.weight", &mtp->norm, err);
    if (st != LM_OK) return st;

    /* Zero-centred weights sit near 0; a converter that folded the 1 in
     * leaves them near 1.  The threshold 0.5 is vllm-mlx's. */
    double sum = 0;
    float *top[3] = {mtp->pre_fc_norm_embedding, mtp->pre_fc_norm_hidden, mtp->norm};
    for (int v = 0; v < 3; v++)
        for (int i = 0; i < H; i++) sum += top[v][i];
    mtp->stored_norm_mean = (float)(sum / (3.0 * H));
    mtp->norms_forced = norms != LM_MTP_NORMS_AUTO;
    mtp->norms_were_shifted = norms == LM_MTP_NORMS_SHIFTED ||
                              (norms == LM_MTP_NORMS_AUTO && mtp->stored_norm_mean > 0.5f);
    float offset = mtp->norms_were_shifted ? 0.0f : 1.0f;
    for (int v = 0; v < 3; v++)
        for (int i = 0; i < H; i++) top[v][i] += offset;

    mtp->layer.cache_index = 0;
    return lm_qwen35_load_layer(m, mtp->prefix, 0, LM_LAYER_FULL_ATTENTION, offset, &mtp->layer,
                                err);
}

lm_status lm_qwen35_mtp_load(lm_qwen35_model *m, lm_mtp_norms norms, lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    lm_qwen35_mtp_free(m);
    if (c->mtp_num_hidden_layers == 0)
        return no_head(m, err, LM_OK,
                       "no MTP head: the config declares none (mtp_num_hidden_layers 0)");
    if (c->mtp_num_hidden_layers > 1)
        return no_head(m, err, LM_ERR_UNSUPPORTED,
                       "MTP head not used: mtp_num_hidden_layers %d is not supported (only 1, as "
                       "in every release)",
                       c->mtp_num_hidden_layers);
    if (c->mtp_use_dedicated_embeddings)
        return no_head(m, err, LM_ERR_UNSUPPORTED,
                       "MTP head not used: mtp_use_dedicated_embeddings is not supported");
    if (c->is_moe)
        return no_head(m, err, LM_ERR_UNSUPPORTED,
                       "MTP head not used: its mixture-of-experts layer is not supported yet");

    lm_qwen35_mtp *mtp = calloc(1, sizeof *mtp);
    if (!mtp) return no_head(m, err, LM_ERR_NOMEM, "MTP head not loaded: out of memory");
    snprintf(mtp->prefix, sizeof mtp->prefix, "%s", find_prefix(&m->weights));
    size_t used_before = m->weights.n_used;
    lm_error why = {0};
    lm_status st = load_tensors(m, mtp, norms, &why);
    if (st != LM_OK) {
        /* The head's tensors count as unused again (loom inspect lists them);
         * float copies already made stay owned by m->weights until it is freed. */
        m->weights.n_used = used_before;
        free(mtp);
        return no_head(m, err, st, "MTP head not loaded: %s", why.message);
    }
    m->mtp = mtp;
    m->has_mtp = true;
    m->mtp_missing[0] = '\0';
    return LM_OK;
}

void lm_qwen35_mtp_free(lm_qwen35_model *m) {
    free(m->mtp); /* its vectors belong to m->weights */
    m->mtp = NULL;
    m->has_mtp = false;
}

lm_status lm_qwen35_mtp_cache_init(const lm_qwen35_model *m, int block_size, int n_blocks,
                                   lm_kv_cache *mtp_kv, lm_error *err) {
    memset(mtp_kv, 0, sizeof *mtp_kv);
    if (!m->has_mtp) return lm_fail(err, LM_ERR_INVALID, "%s", m->mtp_missing);
    return lm_kv_cache_init(mtp_kv, 1, m->config.num_key_value_heads, m->config.head_dim,
                            block_size, n_blocks, err);
}

/* ------------------------------------------------------------------ forward */

lm_status lm_qwen35_mtp_forward(const lm_qwen35_model *m, lm_backend *be, lm_kv_cache *mtp_kv,
                                lm_qwen35_workspace *ws, const lm_step_batch *b,
                                const float *hidden, float *logits, float *hidden_out,
                                lm_error *err) {
    const lm_qwen35_config *c = &m->config;
    const lm_qwen35_mtp *mtp = m->mtp;
    if (!m->has_mtp || !mtp) return lm_fail(err, LM_ERR_INVALID, "%s", m->mtp_missing);
    if (mtp_kv->n_layers != 1 || mtp_kv->n_kv_heads != c->num_key_value_heads ||
        mtp_kv->head_dim != c->head_dim)
        return lm_fail(err, LM_ERR_INVALID, "MTP forward: the kv cache was not made for this head");
    lm_status st = lm_qwen35_validate_batch(m, mtp_kv, NULL, b, err);
    if (st != LM_OK) return st;

    size_t N = (size_t)b->n_tokens, H = (size_t)c->hidden_size;
    if (N > SIZE_MAX / sizeof(float) / (4 * H))
        return lm_fail(err, LM_ERR_NOMEM, "MTP forward: %zu tokens are too many", N);
    if (4 * N * H > ws->mtp_capacity) {
        float *bigger = realloc(ws->mtp_buffer, sizeof(float) * 4 * N * H);
        if (!bigger) return lm_fail(err, LM_ERR_NOMEM, "out of memory for a %zu-row MTP step", N);
        ws->mtp_buffer = bigger;
        ws->mtp_capacity = 4 * N * H;
    }
    float *normed = ws->mtp_buffer; /* [N, H] */
    float *concat = normed + N * H; /* [N, 2H] */
    float *u = concat + 2 * N * H;  /* [N, H], the head's residual stream */
    float eps = c->rms_norm_eps;

    /* u = fc([B1(embed(t_{p+1})) | B1(h_p)]): embedding first (trap 17). */
    lm_embed(be, normed, b->tokens, (int)N, &m->embed_tokens);
    lm_rmsnorm(be, normed, normed, mtp->pre_fc_norm_embedding, (int)N, (int)H, eps);
    for (size_t t = 0; t < N; t++) memcpy(concat + t * 2 * H, normed + t * H, sizeof(float) * H);
    lm_rmsnorm(be, normed, hidden, mtp->pre_fc_norm_hidden, (int)N, (int)H, eps);
    for (size_t t = 0; t < N; t++)
        memcpy(concat + t * 2 * H + H, normed + t * H, sizeof(float) * H);
    lm_matmul(be, u, concat, (int)N, &mtp->fc);

    st = lm_qwen35_attention_layer_forward(m, be, &mtp->layer, mtp_kv, ws, b, u, err);
    if (st != LM_OK) return st;

    /* h' = B1(u; mtp.norm) and the shared lm_head, on the rows asked for. */
    int rows = lm_qwen35_gather_logit_rows(b, u, (int)H);
    if (rows == 0) return LM_OK;
    float *h_out = hidden_out ? hidden_out : normed;
    lm_rmsnorm(be, h_out, u, mtp->norm, rows, (int)H, eps);
    if (logits) lm_matmul(be, logits, h_out, rows, &m->lm_head);
    return LM_OK;
}

#define SEQUENCE_BLOCK_SIZE 32

lm_status lm_qwen35_mtp_sequence_logits(const lm_qwen35_model *m, lm_backend *be,
                                        const float *hidden, const int32_t *next_ids, int n,
                                        float *logits, lm_error *err) {
    if (n <= 0 || n > (1 << 24))
        return lm_fail(err, LM_ERR_INVALID, "MTP: %d rows is out of range", n);
    int n_blocks = (n + SEQUENCE_BLOCK_SIZE - 1) / SEQUENCE_BLOCK_SIZE;
    lm_kv_cache kv;
    lm_status st = lm_qwen35_mtp_cache_init(m, SEQUENCE_BLOCK_SIZE, n_blocks, &kv, err);
    if (st != LM_OK) return st;
    lm_qwen35_workspace ws = {0};
    int32_t *blocks = malloc(sizeof(int32_t) * (size_t)n_blocks);
    int32_t *positions = malloc(sizeof(int32_t) * 3 * (size_t)n);
    if (!blocks || !positions) st = lm_fail(err, LM_ERR_NOMEM, "out of memory for %d MTP rows", n);
    if (st == LM_OK) st = lm_kv_cache_alloc(&kv, n_blocks, blocks, err);
    if (st == LM_OK) {
        for (int p = 0; p < n; p++) /* text: t = h = w = p */
            positions[3 * p] = positions[3 * p + 1] = positions[3 * p + 2] = p;
        lm_step_seq seq = {.first = 0,
                           .n_new = n,
                           .n_cached = 0,
                           .state_slot = -1,
                           .block_table = blocks,
                           .n_blocks = n_blocks,
                           .all_logits = true};
        lm_step_batch batch = {
            .n_tokens = n, .tokens = next_ids, .positions = positions, .n_seqs = 1, .seqs = &seq};
        st = lm_qwen35_mtp_forward(m, be, &kv, &ws, &batch, hidden, logits, NULL, err);
    }
    free(blocks);
    free(positions);
    lm_qwen35_workspace_free(&ws);
    lm_kv_cache_free(&kv);
    return st;
}
