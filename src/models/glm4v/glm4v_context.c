/* The GLM-4.6V context: a KV pool per layer and the step's scratch arrays,
 * carved from one backend allocation made when the engine starts.  The
 * family keeps no per-sequence state, so state slots cost nothing. */
#include <stdlib.h>

#include "models/forward_common.h"
#include "models/step_context.h"
#include "models/glm4v/glm4v_context.h"
#include "models/glm4v/glm4v_vision.h"

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Lays out every array; with c->buffer NULL it only adds up the size. */
static void layout(void *context, lm_carver *c) {
    lm_glm4v_context *ctx = context;
    const lm_glm4v_config *cfg = &ctx->model->config;
    const lm_context_options *o = &ctx->options;
    size_t H = (size_t)cfg->hidden_size, V = (size_t)cfg->vocab_size;
    size_t N = (size_t)o->max_step_tokens, R = (size_t)ctx->max_logit_rows;
    size_t D = (size_t)cfg->head_dim;
    size_t q = (size_t)cfg->num_attention_heads * D, kv = (size_t)cfg->num_key_value_heads * D;
    size_t pool = lm_kv_pool_units((size_t)o->kv_blocks * (size_t)o->kv_block_size * kv, ctx->kv_dtype);
    for (int l = 0; l < cfg->num_hidden_layers; l++) {
        lm_carve(c, &ctx->kv[l].k, pool);
        lm_carve(c, &ctx->kv[l].v, pool);
    }
    size_t wide = (size_t)cfg->intermediate_size;
    if (cfg->is_moe)
        wide = max_size(wide, (size_t)ctx->model->shared_experts_width); /* this rank's */
    lm_glm4v_scratch *s = &ctx->scratch;
    lm_carve(c, &s->h, N * H);
    lm_carve(c, &s->x, N * H);
    lm_carve(c, &s->q, N * q);
    lm_carve(c, &s->k, N * kv);
    lm_carve(c, &s->v, N * kv);
    lm_carve(c, &s->attn, N * q);
    lm_carve(c, &s->proj, N * max_size(wide, 1));
    lm_carve(c, &s->proj2, N * max_size(wide, 1));
    if (cfg->is_moe) {
        size_t E = (size_t)cfg->n_routed_experts, k = (size_t)cfg->num_experts_per_tok;
        lm_moe_experts shape = {.n_experts = cfg->n_routed_experts, .hidden = cfg->hidden_size,
                                .inter = cfg->moe_intermediate_size};
        lm_carve(c, &s->router_logits, N * E);
        lm_carve(c, &s->ids, N * k);
        lm_carve(c, &s->weights, N * k);
        lm_carve(c, &s->routed, N * H);
        lm_carve(c, &s->shared, N * H);
        lm_carve(c, &s->expert_scratch, (lm_moe_scratch_bytes((int)N, (int)k, &shape) + 3) / 4);
    }
    lm_carve(c, &ctx->logit_x, R * H);
    lm_carve(c, &ctx->logits, R * V);
    if (ctx->model->vocab_split)
        lm_carve(c, &ctx->vocab_scratch, lm_vocab_split_scratch((int)V, ctx->model->share.n_ranks, R));
    lm_carve(c, &ctx->logit_ids, R);
    lm_sample_buffers_carve(c, ctx->be, &ctx->sample, R);
    lm_carve(c, &ctx->descriptor, ctx->descriptor_ints);
    if (ctx->vision.max_patches > 0) lm_vision_layout(&ctx->vision, c);
}

static lm_status check_options(const lm_glm4v_model *m, const lm_context_options *o,
                               lm_error *err) {
    lm_status st = lm_context_check_sizes(o, err);
    if (st != LM_OK) return st;
    if (o->speculative_tokens != 0)
        return lm_fail(err, LM_ERR_INVALID,
                       "context: no speculation: GLM-4.6V has no draft head loom runs");
    return lm_context_check_images(o, m->vision != NULL, err);
}

lm_status lm_glm4v_context_create(lm_model *base, const lm_context_options *o,
                                  lm_model_context **out, lm_error *err) {
    lm_glm4v_model *m = (lm_glm4v_model *)base;
    const lm_glm4v_config *cfg = &m->config;
    lm_status st = check_options(m, o, err);
    if (st != LM_OK) return st;
    lm_glm4v_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return lm_fail(err, LM_ERR_NOMEM, "out of memory for the model context");
    ctx->base.model = base;
    ctx->model = m;
    ctx->be = base->backend;
    ctx->options = *o;
    ctx->kv_dtype = lm_kv_dtype(ctx->be, ctx->model->config.head_dim);
    ctx->max_logit_rows = lm_context_logit_rows(o);
    ctx->descriptor_ints =
        lm_step_descriptor_ints(o->max_step_tokens, o->max_step_seqs, o->max_blocks_per_seq);
    ctx->kv = calloc((size_t)cfg->num_hidden_layers, sizeof *ctx->kv);
    ctx->host_descriptor = malloc(sizeof(int32_t) * ctx->descriptor_ints);
    if (!ctx->kv || !ctx->host_descriptor) {
        lm_glm4v_context_destroy(&ctx->base);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the model context");
    }
    if (o->max_image_patches > 0) {
        lm_vision_sizes sizes = lm_glm4v_vision_sizes(m->vision);
        st = lm_vision_workspace_init(&ctx->vision, &sizes, o->max_image_patches, err);
        if (st != LM_OK) {
            lm_glm4v_context_destroy(&ctx->base);
            return st;
        }
    }
    st = lm_context_carve(ctx->be, layout, ctx, "the KV cache and step workspace", &ctx->buffer, err);
    if (st != LM_OK) {
        lm_glm4v_context_destroy(&ctx->base);
        return st;
    }
    lm_context_kv_shape(ctx->kv, cfg->num_hidden_layers, o, cfg->num_key_value_heads, cfg->head_dim,
                        ctx->kv_dtype);
    *out = &ctx->base;
    return LM_OK;
}

void lm_glm4v_context_destroy(lm_model_context *base) {
    lm_glm4v_context *ctx = (lm_glm4v_context *)base;
    if (!ctx) return;
    lm_buffer_free(ctx->be, ctx->buffer);
    free(ctx->kv);
    free(ctx->host_descriptor);
    lm_vision_workspace_free(&ctx->vision);
    free(ctx);
}

void lm_glm4v_copy_block(lm_model_context *base, int src, int dst) {
    lm_glm4v_context *ctx = (lm_glm4v_context *)base;
    lm_kv_copy_block(ctx->be, ctx->kv, ctx->model->config.num_hidden_layers, src, dst);
}

lm_status lm_glm4v_step_upload(lm_glm4v_context *ctx, const lm_step_batch *b, lm_step_view *step,
                               lm_error *err) {
    const lm_context_options *o = &ctx->options;
    lm_step_limits limits = lm_context_step_limits(o, ctx->max_logit_rows, ctx->model->config.vocab_size);
    limits.uses_kv = true; /* no recurrent layers: no state slots, nothing recorded */
    lm_status st = lm_step_check(&limits, b, err);
    if (st != LM_OK) return st;
    lm_step_upload(ctx->be, ctx->descriptor, ctx->host_descriptor, b, o->kv_block_size, NULL, step);
    return LM_OK;
}
