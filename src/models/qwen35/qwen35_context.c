/* The Qwen3.5 context: every cache and scratch array of the family carved
 * from one backend allocation made when the engine starts, and the step
 * descriptor each forward uploads in one piece. */
#include <stdlib.h>
#include <string.h>

#include "models/forward_common.h"
#include "models/step_context.h"
#include "models/qwen35/qwen35_context.h"
#include "models/qwen35/qwen35_vision.h"

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Lays out every array; with c->buffer NULL it only adds up the size. */
lm_vocab_head lm_qwen35_vocab_head(const lm_qwen35_context *ctx) {
    const lm_qwen35_model *m = ctx->model;
    return (lm_vocab_head){.weight = &m->lm_head, .vocab = m->config.vocab_size,
                           .tp = m->vocab_split ? m->share.comm : NULL, .scratch = ctx->vocab_scratch};
}

static void layout(void *context, lm_carver *c) {
    lm_qwen35_context *ctx = context;
    const lm_qwen35_model *m = ctx->model;
    const lm_qwen35_config *cfg = &m->config;
    const lm_context_options *o = &ctx->options;
    size_t H = (size_t)cfg->hidden_size, V = (size_t)cfg->vocab_size;
    size_t N = (size_t)o->max_step_tokens, S = (size_t)o->max_step_seqs;
    size_t R = (size_t)ctx->max_logit_rows, K = (size_t)o->speculative_tokens;
    size_t slots = (size_t)o->state_slots, L = (size_t)m->n_linear_layers;
    size_t Hv = (size_t)cfg->linear_num_value_heads;
    size_t kd = (size_t)m->key_dim, vd = (size_t)m->value_dim, cd = (size_t)m->conv_dim;
    bool mtp = K > 0 && m->has_mtp;

    size_t pool = lm_kv_pool_units((size_t)o->kv_blocks * (size_t)o->kv_block_size *
                                       (size_t)cfg->num_key_value_heads * (size_t)cfg->head_dim,
                                   ctx->kv_dtype);
    for (int l = 0; l < m->n_full_layers; l++) {
        lm_carve(c, &ctx->kv[l].k, pool);
        lm_carve(c, &ctx->kv[l].v, pool);
    }
    if (mtp) {
        lm_carve(c, &ctx->mtp_kv.k, pool);
        lm_carve(c, &ctx->mtp_kv.v, pool);
    }
    lm_carve(c, &ctx->conv_states, L * slots * ctx->conv_floats);
    lm_carve(c, &ctx->recurrent_states, L * slots * ctx->recurrent_floats);
    size_t snapshots = (size_t)o->state_snapshots;
    lm_carve(c, &ctx->snapshot_conv, L * snapshots * ctx->conv_floats);
    lm_carve(c, &ctx->snapshot_recurrent, L * snapshots * ctx->recurrent_floats);
    if (K > 0 && L > 0) {
        lm_qwen35_records *r = &ctx->records;
        size_t rows = slots * (size_t)r->rows_per_slot;
        lm_carve(c, &r->conv_before, L * slots * ctx->conv_floats);
        lm_carve(c, &r->state_before, L * slots * ctx->recurrent_floats);
        lm_carve(c, &r->mixed, L * rows * cd);
        lm_carve(c, &r->k, L * rows * kd);
        lm_carve(c, &r->v, L * rows * vd);
        lm_carve(c, &r->g, L * rows * Hv);
        lm_carve(c, &r->beta, L * rows * Hv);
        lm_carve(c, &r->scratch, rows * max_size(cd, vd));
    }
    size_t attn_q = (size_t)cfg->num_attention_heads * (size_t)cfg->head_dim;
    size_t attn_kv = (size_t)cfg->num_key_value_heads * (size_t)cfg->head_dim;
    size_t wide = max_size(max_size(2 * attn_q, cd), (size_t)cfg->intermediate_size);
    if (cfg->is_moe) wide = max_size(wide, (size_t)cfg->shared_expert_intermediate_size);
    lm_qwen35_scratch *s = &ctx->scratch;
    lm_carve(c, &s->h, N * H);
    lm_carve(c, &s->x, N * H);
    lm_carve(c, &s->proj, N * wide);
    lm_carve(c, &s->proj2, N * wide);
    lm_carve(c, &s->q, N * max_size(attn_q, kd));
    lm_carve(c, &s->k, N * max_size(attn_kv, kd));
    lm_carve(c, &s->v, N * max_size(attn_kv, vd));
    lm_carve(c, &s->gates, N * max_size(attn_q, vd));
    lm_carve(c, &s->beta, N * max_size(Hv, 1));
    lm_carve(c, &s->g, N * max_size(Hv, 1));
    if (cfg->is_moe) {
        lm_qwen35_moe_scratch *ms = &ctx->moe;
        size_t E = (size_t)cfg->num_experts, k = (size_t)cfg->num_experts_per_tok;
        lm_moe_experts shape = {.n_experts = cfg->num_experts, .hidden = cfg->hidden_size,
                                .inter = cfg->moe_intermediate_size};
        lm_carve(c, &ms->logits, N * E);
        lm_carve(c, &ms->ids, N * k);
        lm_carve(c, &ms->weights, N * k);
        lm_carve(c, &ms->routed, N * H);
        lm_carve(c, &ms->shared, N * H);
        lm_carve(c, &ms->shared_gate, N);
        lm_carve(c, &ms->expert_scratch, (lm_moe_scratch_bytes((int)N, (int)k, &shape) + 3) / 4);
    }
    if (K > 0) lm_carve(c, &ctx->hidden_all, N * H);
    lm_carve(c, &ctx->logit_x, R * H);
    lm_carve(c, &ctx->logits, R * V);
    if (ctx->model->vocab_split)
        lm_carve(c, &ctx->vocab_scratch, lm_vocab_split_scratch((int)V, ctx->model->share.n_ranks, max_size(S, R)));
    lm_carve(c, &ctx->logit_ids, R);
    lm_sample_buffers_carve(c, ctx->be, &ctx->sample, R);
    lm_carve(c, &ctx->descriptor, ctx->descriptor_ints);
    if (mtp) {
        lm_carve(c, &ctx->mtp_normed, N * H);
        lm_carve(c, &ctx->mtp_concat, N * 2 * H);
        lm_carve(c, &ctx->mtp_u, N * H);
        lm_carve(c, &ctx->mtp_hidden, N * H);
        /* drafting: one row per sequence; lm_qwen35_mtp_forward: the step's logit rows */
        lm_carve(c, &ctx->mtp_logits, max_size(S, R) * V);
        lm_carve(c, &ctx->draft_ids, K * S);
    }
    if (ctx->vision.max_patches > 0) lm_vision_layout(&ctx->vision, c);
}

static lm_status check_options(const lm_qwen35_model *m, const lm_context_options *o,
                               lm_error *err) {
    lm_status st = lm_context_check_sizes(o, err);
    if (st != LM_OK) return st;
    if (o->state_slots <= 0 || o->state_slots > 4096)
        return lm_fail(err, LM_ERR_INVALID, "context: %d state slots is out of range", o->state_slots);
    if (o->state_snapshots < 0 || o->state_snapshots > (1 << 16))
        return lm_fail(err, LM_ERR_INVALID, "context: %d state snapshots is out of range",
                       o->state_snapshots);
    if (o->speculative_tokens > 0 && !m->has_mtp)
        return lm_fail(err, LM_ERR_INVALID, "context: no speculation: %s", m->mtp_missing);
    return lm_context_check_images(o, m->vision != NULL, err);
}

lm_status lm_qwen35_context_create(lm_model *base, const lm_context_options *o,
                                   lm_model_context **out, lm_error *err) {
    lm_qwen35_model *m = (lm_qwen35_model *)base;
    const lm_qwen35_config *cfg = &m->config;
    lm_status st = check_options(m, o, err);
    if (st != LM_OK) return st;
    lm_qwen35_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return lm_fail(err, LM_ERR_NOMEM, "out of memory for the model context");
    ctx->base.model = base;
    ctx->model = m;
    ctx->be = base->backend;
    ctx->options = *o;
    ctx->kv_dtype = lm_kv_dtype(ctx->be, cfg->head_dim);
    ctx->max_logit_rows = lm_context_logit_rows(o);
    ctx->conv_floats = (size_t)m->conv_dim * (size_t)(cfg->linear_conv_kernel_dim - 1);
    ctx->recurrent_floats = (size_t)cfg->linear_num_value_heads *
                            (size_t)cfg->linear_key_head_dim * (size_t)cfg->linear_value_head_dim;
    ctx->records.rows_per_slot = o->speculative_tokens + 1;
    size_t N = (size_t)o->max_step_tokens, S = (size_t)o->max_step_seqs;
    ctx->descriptor_ints = lm_step_descriptor_ints(o->max_step_tokens, o->max_step_seqs, o->max_blocks_per_seq);
    ctx->kv = calloc((size_t)(m->n_full_layers > 0 ? m->n_full_layers : 1), sizeof *ctx->kv);
    ctx->host_descriptor = malloc(sizeof(int32_t) * ctx->descriptor_ints);
    ctx->host_draft_ids = malloc(sizeof(int32_t) * (size_t)(o->speculative_tokens + 1) * S);
    bool spec = o->speculative_tokens > 0;
    if (spec && m->n_linear_layers > 0)
        ctx->records.recorded_rows = calloc((size_t)o->state_slots, sizeof(int));
    lm_qwen35_draft_host *dh = &ctx->draft_host;
    if (spec) {
        dh->seqs = calloc(S, sizeof *dh->seqs);
        dh->tokens = malloc(sizeof(int32_t) * N);
        dh->positions = malloc(sizeof(int32_t) * 3 * N);
        dh->gather = malloc(sizeof(int32_t) * N);
        dh->order = malloc(sizeof(int32_t) * S);
    }
    bool draft_host_ok = !spec || (dh->seqs && dh->tokens && dh->positions && dh->gather && dh->order);
    if (!ctx->kv || !ctx->host_descriptor || !ctx->host_draft_ids || !draft_host_ok ||
        (spec && m->n_linear_layers > 0 && !ctx->records.recorded_rows)) {
        lm_qwen35_context_destroy(&ctx->base);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the model context");
    }
    if (o->max_image_patches > 0) {
        lm_vision_sizes sizes = lm_qwen35_vision_sizes(m->vision);
        st = lm_vision_workspace_init(&ctx->vision, &sizes, o->max_image_patches, err);
        if (st != LM_OK) {
            lm_qwen35_context_destroy(&ctx->base);
            return st;
        }
    }
    st = lm_context_carve(ctx->be, layout, ctx, "the KV cache, state slots and step workspace",
                          &ctx->buffer, err);
    if (st != LM_OK) {
        lm_qwen35_context_destroy(&ctx->base);
        return st;
    }
    lm_context_kv_shape(ctx->kv, m->n_full_layers, o, cfg->num_key_value_heads, cfg->head_dim, ctx->kv_dtype);
    lm_context_kv_shape(&ctx->mtp_kv, 1, o, cfg->num_key_value_heads, cfg->head_dim, ctx->kv_dtype);
    *out = &ctx->base;
    return LM_OK;
}

void lm_qwen35_context_destroy(lm_model_context *base) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    if (!ctx) return;
    lm_buffer_free(ctx->be, ctx->buffer);
    free(ctx->kv);
    free(ctx->host_descriptor);
    free(ctx->host_draft_ids);
    free(ctx->records.recorded_rows);
    free(ctx->draft_host.seqs);
    free(ctx->draft_host.tokens);
    free(ctx->draft_host.positions);
    free(ctx->draft_host.gather);
    free(ctx->draft_host.order);
    lm_vision_workspace_free(&ctx->vision);
    free(ctx);
}

/* ------------------------------------------------------------ cache moves */

void lm_qwen35_copy_block(lm_model_context *base, int src, int dst) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    lm_kv_copy_block(ctx->be, ctx->kv, ctx->model->n_full_layers, src, dst);
    if (ctx->options.speculative_tokens > 0 && ctx->model->has_mtp)
        lm_kv_copy_block(ctx->be, &ctx->mtp_kv, 1, src, dst);
}

/* Copies every Gated DeltaNet layer's conv window and delta-rule state
 * between index `from` of one [L][count][floats] pair and index `to` of
 * another. */
static void copy_states(lm_qwen35_context *ctx, lm_mem dst_conv, lm_mem dst_rec, size_t dst_count,
                        int to, lm_mem src_conv, lm_mem src_rec, size_t src_count, int from) {
    size_t cf = ctx->conv_floats, rf = ctx->recurrent_floats;
    for (int l = 0; l < ctx->model->n_linear_layers; l++) {
        size_t L = (size_t)l;
        lm_copy(ctx->be, lm_mem_f32(dst_conv, (L * dst_count + (size_t)to) * cf),
                lm_mem_f32(src_conv, (L * src_count + (size_t)from) * cf), sizeof(float) * cf);
        lm_copy(ctx->be, lm_mem_f32(dst_rec, (L * dst_count + (size_t)to) * rf),
                lm_mem_f32(src_rec, (L * src_count + (size_t)from) * rf), sizeof(float) * rf);
    }
}

void lm_qwen35_save_state(lm_model_context *base, int slot, int snapshot) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    copy_states(ctx, ctx->snapshot_conv, ctx->snapshot_recurrent, (size_t)ctx->options.state_snapshots,
                snapshot, ctx->conv_states, ctx->recurrent_states, (size_t)ctx->options.state_slots, slot);
}

void lm_qwen35_restore_state(lm_model_context *base, int snapshot, int slot) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    copy_states(ctx, ctx->conv_states, ctx->recurrent_states, (size_t)ctx->options.state_slots, slot,
                ctx->snapshot_conv, ctx->snapshot_recurrent, (size_t)ctx->options.state_snapshots,
                snapshot);
    if (ctx->records.recorded_rows) ctx->records.recorded_rows[slot] = 0;
}

void lm_qwen35_copy_state(lm_model_context *base, int src, int dst) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    size_t slots = (size_t)ctx->options.state_slots;
    copy_states(ctx, ctx->conv_states, ctx->recurrent_states, slots, dst, ctx->conv_states,
                ctx->recurrent_states, slots, src);
}

void lm_qwen35_reset_state(lm_model_context *base, int slot) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    for (int l = 0; l < ctx->model->n_linear_layers; l++) {
        lm_fill(ctx->be, lm_mem_f32(lm_qwen35_conv_states(ctx, l), (size_t)slot * ctx->conv_floats),
                0, sizeof(float) * ctx->conv_floats);
        lm_fill(ctx->be,
                lm_mem_f32(lm_qwen35_recurrent_states(ctx, l), (size_t)slot * ctx->recurrent_floats),
                0, sizeof(float) * ctx->recurrent_floats);
    }
    if (ctx->records.recorded_rows) ctx->records.recorded_rows[slot] = 0;
}

/* -------------------------------------------------------- step descriptor */

lm_status lm_qwen35_step_upload(lm_qwen35_context *ctx, const lm_step_batch *b, bool mtp,
                                const int32_t *gather, lm_step_view *step, lm_error *err) {
    const lm_qwen35_model *m = ctx->model;
    const lm_context_options *o = &ctx->options;
    /* The MTP layer has keys and values but no recurrent state and records nothing. */
    lm_step_limits limits = lm_context_step_limits(o, ctx->max_logit_rows, m->config.vocab_size);
    limits.uses_kv = mtp || m->n_full_layers > 0;
    limits.state_slots = !mtp && m->n_linear_layers > 0 ? o->state_slots : 0;
    limits.record_rows = !mtp && ctx->records.recorded_rows ? ctx->records.rows_per_slot : 0;
    lm_status st = lm_step_check(&limits, b, err);
    if (st != LM_OK) return st;
    lm_step_upload(ctx->be, ctx->descriptor, ctx->host_descriptor, b, o->kv_block_size, gather, step);
    return LM_OK;
}
