/* The Qwen3.5 MTP head.  Reads like model-spec §C.2: embed the next token,
 * normalise it and the target's hidden state, fc over their concatenation
 * (embedding first), one full-attention decoder layer (the main model's, run
 * on the head's own KV cache), mtp.norm, the shared lm_head.  Drafting with
 * it inside the engine is models/qwen35_speculative.c. */
#include "models/qwen35/qwen35_mtp.h"

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

/* A norm weight of the head, as stored: its offset is decided later. */
static lm_status load_vector(lm_qwen35_model *m, const char *prefix, const char *name, float **out,
                             lm_error *err) {
    char full[128];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return lm_weights_host_vector(&m->weights, full, m->config.hidden_size, 0.0f, false, out, err);
}

/* Loads everything; the norms' offset is decided from the stored values. */
static lm_status load_tensors(lm_qwen35_model *m, lm_qwen35_mtp *mtp, lm_mtp_norms norms,
                              lm_error *err) {
    int H = m->config.hidden_size;
    char name[128];
    snprintf(name, sizeof name, "%sfc.weight", mtp->prefix);
    float *top[3];
    lm_status st = lm_weights_linear(&m->weights, name, H, 2 * (int64_t)H, &mtp->fc, err);
    if (st == LM_OK) st = load_vector(m, mtp->prefix, "pre_fc_norm_embedding.weight", &top[0], err);
    if (st == LM_OK) st = load_vector(m, mtp->prefix, "pre_fc_norm_hidden.weight", &top[1], err);
    if (st == LM_OK) st = load_vector(m, mtp->prefix, "norm.weight", &top[2], err);
    if (st != LM_OK) return st;

    /* Zero-centred weights sit near 0; a converter that folded the 1 in
     * leaves them near 1.  The threshold 0.5 is vllm-mlx's. */
    double sum = 0;
    for (int v = 0; v < 3; v++)
        for (int i = 0; i < H; i++) sum += top[v][i];
    mtp->stored_norm_mean = (float)(sum / (3.0 * H));
    mtp->norms_forced = norms != LM_MTP_NORMS_AUTO;
    mtp->norms_were_shifted = norms == LM_MTP_NORMS_SHIFTED ||
                              (norms == LM_MTP_NORMS_AUTO && mtp->stored_norm_mean > 0.5f);
    float offset = mtp->norms_were_shifted ? 0.0f : 1.0f;
    for (int v = 0; v < 3; v++)
        for (int i = 0; i < H; i++) top[v][i] += offset;
    lm_mem *scales[3] = {&mtp->pre_fc_norm_embedding, &mtp->pre_fc_norm_hidden, &mtp->norm};
    for (int v = 0; v < 3; v++) {
        st = lm_weights_import(&m->weights, top[v], H, "mtp norm", scales[v], err);
        if (st != LM_OK) return st;
    }

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
        lm_qwen35_layer_free(&mtp->layer);
        free(mtp);
        return no_head(m, err, st, "MTP head not loaded: %s", why.message);
    }
    m->mtp = mtp;
    m->has_mtp = true;
    m->mtp_missing[0] = '\0';
    return LM_OK;
}

void lm_qwen35_mtp_free(lm_qwen35_model *m) {
    if (m->mtp) lm_qwen35_layer_free(&m->mtp->layer);
    free(m->mtp); /* its vectors belong to m->weights */
    m->mtp = NULL;
    m->has_mtp = false;
}

void lm_qwen35_mtp_describe(const lm_qwen35_model *m, FILE *f) {
    if (!m->has_mtp) {
        fprintf(f, "%s\n", m->mtp_missing);
        return;
    }
    const lm_qwen35_mtp *h = m->mtp;
    fprintf(f, "mtp head: loaded (%s*: fc, one full-attention layer, %s)\n", h->prefix,
            h->layer.is_moe ? "mixture-of-experts MLP" : "dense MLP");
    fprintf(f, "  norms stored %s, %s (mean of the stored pre-fc and final norm weights %.3f)\n",
            h->norms_were_shifted ? "with the 1 already added" : "zero-centred (scale 1 + w)",
            h->norms_forced ? "as forced" : "detected", (double)h->stored_norm_mean);
}

/* ------------------------------------------------------------------ bytes */

size_t lm_qwen35_mtp_round_bytes(const lm_qwen35_model *m) {
    if (!m->has_mtp) return 0;
    const lm_qwen35_mtp *h = m->mtp;
    const lm_qwen35_layer *l = &h->layer;
    double bytes = lm_matrix_bytes(&h->fc) + lm_matrix_bytes(&l->full.q_proj) + lm_matrix_bytes(&l->full.k_proj) +
                   lm_matrix_bytes(&l->full.v_proj) + lm_matrix_bytes(&l->full.o_proj);
    if (l->is_moe)
        bytes += lm_matrix_bytes(&l->moe.router) + lm_matrix_bytes(&l->moe.shared_gate) +
                 lm_matrix_bytes(&l->moe.shared.gate_proj) + lm_matrix_bytes(&l->moe.shared.up_proj) +
                 lm_matrix_bytes(&l->moe.shared.down_proj) +
                 lm_expert_bytes_per_token(&l->moe.experts, m->config.num_experts_per_tok);
    else
        bytes += lm_matrix_bytes(&l->mlp.gate_proj) + lm_matrix_bytes(&l->mlp.up_proj) +
                 lm_matrix_bytes(&l->mlp.down_proj);
    return (size_t)bytes;
}

/* ------------------------------------------------------------------ forward */

lm_vocab_head lm_qwen35_draft_head(const lm_qwen35_context *ctx, lm_matrix *rows) {
    lm_vocab_head head = lm_qwen35_vocab_head(ctx);
    int n = ctx->options.draft_vocab;
    /* A split head's rows are spread over the ranks: drafts keep it whole. */
    if (n <= 0 || n >= head.vocab || head.tp) return head;
    /* Row j of the lm_head is token j's: the first n rows are the first n
     * ids, which a byte-level BPE vocabulary orders by merge rank, the
     * frequent tokens first (FR-Spec's point: drafts rarely need the rest). */
    *rows = lm_matrix_rows(head.weight, 0, n);
    head.weight = rows;
    head.vocab = n;
    return head;
}

void lm_qwen35_mtp_run(lm_qwen35_context *ctx, const lm_step_view *step, lm_mem tokens,
                       lm_mem hidden, lm_mem logits, lm_mem h_out, const lm_vocab_head *head) {
    const lm_qwen35_model *m = ctx->model;
    const lm_qwen35_mtp *mtp = m->mtp;
    lm_backend *be = ctx->be;
    int N = step->n_tokens, H = m->config.hidden_size;
    float eps = m->config.rms_norm_eps;

    /* u = fc([B1(embed(t_{p+1})) | B1(h_p)]): embedding first (trap 17). */
    lm_embed(be, ctx->mtp_normed, tokens, N, &m->embed_tokens);
    lm_rmsnorm(be, ctx->mtp_normed, ctx->mtp_normed, mtp->pre_fc_norm_embedding, N, H, eps);
    lm_copy_rows(be, ctx->mtp_concat, 2 * H, ctx->mtp_normed, H, N, H);
    lm_rmsnorm(be, ctx->mtp_normed, hidden, mtp->pre_fc_norm_hidden, N, H, eps);
    lm_copy_rows(be, lm_mem_f32(ctx->mtp_concat, (size_t)H), 2 * H, ctx->mtp_normed, H, N, H);
    lm_matmul(be, ctx->mtp_u, ctx->mtp_concat, N, &mtp->fc);

    lm_qwen35_attention_layer(ctx, step, &mtp->layer, &ctx->mtp_kv, ctx->mtp_u);

    /* h' = B1(u; mtp.norm) and the shared lm_head, on the rows asked for. */
    int rows = step->n_logit_rows;
    if (rows == 0) return;
    lm_gather_rows(be, h_out, ctx->mtp_u, step->logit_rows, rows, H);
    lm_rmsnorm(be, h_out, h_out, mtp->norm, rows, H, eps);
    lm_error gather_error = {0};
    lm_status st = lm_vocab_head_matmul(be, head, logits, h_out, rows, &gather_error);
    lm_rank_sums_keep(&ctx->ranks, st, &gather_error);
}

static lm_status check_head(const lm_qwen35_context *ctx, lm_error *err) {
    if (!ctx->model->has_mtp) return lm_fail(err, LM_ERR_INVALID, "%s", ctx->model->mtp_missing);
    if (ctx->options.speculative_tokens <= 0)
        return lm_fail(err, LM_ERR_INVALID, "the context was made without speculation");
    return LM_OK;
}

lm_status lm_qwen35_mtp_forward(lm_qwen35_context *ctx, const lm_step_batch *b,
                                const float *hidden, float *logits, float *h_out, lm_error *err) {
    lm_status st = check_head(ctx, err);
    lm_step_view step;
    if (st == LM_OK) st = lm_qwen35_step_upload(ctx, b, true, NULL, &step, err);
    if (st != LM_OK) return st;
    const lm_qwen35_config *c = &ctx->model->config;
    size_t H = (size_t)c->hidden_size, V = (size_t)c->vocab_size, rows = (size_t)step.n_logit_rows;
    lm_upload(ctx->be, ctx->mtp_hidden, hidden, sizeof(float) * (size_t)step.n_tokens * H);
    lm_rank_sums_begin(&ctx->ranks, ctx->model->share.comm);
    lm_vocab_head head = lm_qwen35_vocab_head(ctx); /* the whole vocabulary: the fixtures' mtp_logits */
    lm_qwen35_mtp_run(ctx, &step, step.tokens, ctx->mtp_hidden, ctx->mtp_logits, ctx->mtp_hidden, &head);
    st = lm_rank_sums_status(&ctx->ranks, err);
    if (st != LM_OK) return st;
    if (rows == 0) return lm_synchronize(ctx->be, err);
    if (h_out) st = lm_download(ctx->be, h_out, ctx->mtp_hidden, sizeof(float) * rows * H, err);
    if (st == LM_OK) st = lm_download(ctx->be, logits, ctx->mtp_logits, sizeof(float) * rows * V, err);
    return st;
}

#define SEQUENCE_BLOCK_SIZE 32

lm_status lm_qwen35_mtp_sequence_logits(lm_model *base, const float *hidden,
                                        const int32_t *next_ids, const int32_t *given_positions,
                                        int n, float *logits, lm_error *err) {
    lm_qwen35_model *m = (lm_qwen35_model *)base;
    if (!m->has_mtp) return lm_fail(err, LM_ERR_INVALID, "%s", m->mtp_missing);
    if (n <= 0 || n > (1 << 20))
        return lm_fail(err, LM_ERR_INVALID, "MTP: %d rows is out of range", n);
    int n_blocks = (n + SEQUENCE_BLOCK_SIZE - 1) / SEQUENCE_BLOCK_SIZE;
    lm_context_options o = {.kv_block_size = SEQUENCE_BLOCK_SIZE,
                            .kv_blocks = n_blocks,
                            .state_slots = 1,
                            .max_step_tokens = n,
                            .max_step_seqs = 1,
                            .max_logit_rows = n,
                            .max_blocks_per_seq = n_blocks,
                            .speculative_tokens = 1};
    lm_model_context *base_ctx;
    lm_status st = lm_qwen35_context_create(base, &o, &base_ctx, err);
    if (st != LM_OK) return st;
    int32_t *blocks = malloc(sizeof(int32_t) * (size_t)n_blocks);
    int32_t *positions = malloc(sizeof(int32_t) * 3 * (size_t)n);
    if (!blocks || !positions) st = lm_fail(err, LM_ERR_NOMEM, "out of memory for %d MTP rows", n);
    if (st == LM_OK) {
        for (int b = 0; b < n_blocks; b++) blocks[b] = b;
        if (given_positions)
            memcpy(positions, given_positions, sizeof(int32_t) * 3 * (size_t)n);
        else
            for (int p = 0; p < n; p++) /* text: t = h = w = p */
                positions[3 * p] = positions[3 * p + 1] = positions[3 * p + 2] = p;
        lm_step_seq seq = {.first = 0,
                           .n_new = n,
                           .n_cached = 0,
                           .state_slot = 0,
                           .block_table = blocks,
                           .n_blocks = n_blocks,
                           .all_logits = true};
        lm_step_batch batch = {
            .n_tokens = n, .tokens = next_ids, .positions = positions, .n_seqs = 1, .seqs = &seq};
        st = lm_qwen35_mtp_forward((lm_qwen35_context *)base_ctx, &batch, hidden, logits, NULL, err);
    }
    free(blocks);
    free(positions);
    lm_qwen35_context_destroy(base_ctx);
    return st;
}
