/* Speculative decoding with the Qwen3.5 MTP head (model-spec §C.4, §C.5),
 * the model interface's draft and rollback parts.
 *
 * Draft: after a step, each speculating sequence runs the head over the
 * positions it committed (target hidden h_p, next token t_{p+1}, position
 * p), which keeps the head's KV cache in step with the target's; a sequence
 * that wants drafts then drafts greedily, the first from its last catch-up
 * row, the rest feeding the head its own output (post mtp.norm) and its own
 * argmax.  All sequences share one head forward per round, and the rounds
 * run back to back on the backend: the draft ids come back to the host once,
 * at the end.
 *
 * Rollback: a verify step recorded, per state slot, the Gated DeltaNet
 * states before it and each row's conv and delta-rule inputs; rejecting
 * rows restores the states and replays the accepted rows' conv and
 * recurrence (no weight matmuls, no extra forward).  KV entries past the
 * accepted prefix need nothing: they are overwritten later. */
#include <string.h>

#include "models/qwen35/qwen35_mtp.h"

lm_status lm_qwen35_rollback(lm_model_context *base, const lm_rollback_seq *seqs, int n,
                             lm_error *err) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    const lm_qwen35_model *m = ctx->model;
    const lm_qwen35_config *c = &m->config;
    lm_qwen35_records *r = &ctx->records;
    if (n <= 0 || m->n_linear_layers == 0) return LM_OK;
    if (!r->recorded_rows || n > ctx->options.max_step_seqs)
        return lm_fail(err, LM_ERR_INVALID, "rollback: the context keeps no records for %d sequences", n);
    int32_t *first = ctx->host_descriptor, *length = first + n, *slot = length + n;
    int max_length = 0;
    for (int i = 0; i < n; i++) {
        int s = seqs[i].state_slot;
        if (s < 0 || s >= ctx->options.state_slots || seqs[i].n_keep < 1 ||
            seqs[i].n_keep > r->recorded_rows[s])
            return lm_fail(err, LM_ERR_INVALID, "rollback: slot %d keeps %d rows of %d recorded", s,
                           seqs[i].n_keep, s >= 0 && s < ctx->options.state_slots ? r->recorded_rows[s] : 0);
        first[i] = s * r->rows_per_slot;
        length[i] = seqs[i].n_keep;
        slot[i] = s;
        if (length[i] > max_length) max_length = length[i];
    }
    lm_backend *be = ctx->be;
    lm_upload(be, ctx->descriptor, ctx->host_descriptor, sizeof(int32_t) * 3 * (size_t)n);
    lm_seq_batch replay = {.n_seqs = n,
                           .first = ctx->descriptor,
                           .length = lm_mem_i32(ctx->descriptor, (size_t)n),
                           .slot = lm_mem_i32(ctx->descriptor, 2 * (size_t)n),
                           .max_length = max_length};
    size_t slots = (size_t)ctx->options.state_slots, rows = slots * (size_t)r->rows_per_slot;
    size_t kd = (size_t)m->key_dim, vd = (size_t)m->value_dim, cd = (size_t)m->conv_dim;
    size_t Hv = (size_t)c->linear_num_value_heads;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const lm_qwen35_layer *layer = &m->layers[i];
        if (layer->type != LM_LAYER_LINEAR_ATTENTION) continue;
        size_t li = (size_t)layer->cache_index;
        lm_mem conv = lm_qwen35_conv_states(ctx, layer->cache_index);
        lm_mem state = lm_qwen35_recurrent_states(ctx, layer->cache_index);
        for (int q = 0; q < n; q++) {
            size_t s = (size_t)seqs[q].state_slot;
            lm_copy(be, lm_mem_f32(conv, s * ctx->conv_floats),
                    lm_mem_f32(r->conv_before, (li * slots + s) * ctx->conv_floats),
                    sizeof(float) * ctx->conv_floats);
            lm_copy(be, lm_mem_f32(state, s * ctx->recurrent_floats),
                    lm_mem_f32(r->state_before, (li * slots + s) * ctx->recurrent_floats),
                    sizeof(float) * ctx->recurrent_floats);
        }
        /* Replay the accepted rows from the saved states; the outputs were
         * already right (causality), only the states need redoing. */
        lm_causal_conv1d_silu(be, r->scratch, lm_mem_f32(r->mixed, li * rows * cd), (int)cd,
                              layer->linear.conv_weight, c->linear_conv_kernel_dim, conv,
                              (int64_t)ctx->conv_floats, &replay);
        lm_mem k = lm_mem_f32(r->k, li * rows * kd);
        lm_gated_delta_rule(be, r->scratch, k, k, lm_mem_f32(r->v, li * rows * vd),
                            lm_mem_f32(r->g, li * rows * Hv), lm_mem_f32(r->beta, li * rows * Hv),
                            state, (int64_t)ctx->recurrent_floats, &replay,
                            c->linear_num_key_heads, c->linear_num_value_heads,
                            c->linear_key_head_dim, c->linear_value_head_dim);
    }
    for (int q = 0; q < n; q++) r->recorded_rows[seqs[q].state_slot] = 0; /* used up */
    return LM_OK;
}

lm_status lm_qwen35_draft(lm_model_context *base, lm_draft_seq *seqs, int n, lm_error *err) {
    lm_qwen35_context *ctx = (lm_qwen35_context *)base;
    const lm_qwen35_model *m = ctx->model;
    int K = ctx->options.speculative_tokens, S = ctx->options.max_step_seqs;
    int H = m->config.hidden_size;
    lm_backend *be = ctx->be;
    if (!m->has_mtp || K <= 0 || !ctx->draft_host.seqs)
        return lm_fail(err, LM_ERR_INVALID, "drafting: %s",
                       m->has_mtp ? "the context was made without speculation" : m->mtp_missing);
    if (n <= 0) return LM_OK;
    if (n > S) return lm_fail(err, LM_ERR_INVALID, "drafting: %d sequences, room for %d", n, S);
    int total = 0, max_drafts = 0;
    for (int i = 0; i < n; i++) {
        const lm_draft_seq *d = &seqs[i];
        if (d->count <= 0 || d->from < 0 || d->hidden_row < 0 ||
            d->hidden_row + d->count > ctx->last_step_tokens || d->n_drafts < 0 || d->n_drafts > K ||
            (d->n_drafts > 0 && !d->drafts))
            return lm_fail(err, LM_ERR_INVALID, "drafting: sequence %d asks for rows %d..%d and %d drafts",
                           i, d->hidden_row, d->hidden_row + d->count, d->n_drafts);
        total += d->count;
        if (d->n_drafts > max_drafts) max_drafts = d->n_drafts;
    }
    if (total > ctx->options.max_step_tokens)
        return lm_fail(err, LM_ERR_INVALID, "drafting: %d catch-up rows, room for %d", total,
                       ctx->options.max_step_tokens);

    /* Drafters first, most drafts first (stable): round r then runs on a
     * prefix of round r-1's rows, so its inputs are where round r-1 left
     * its outputs. */
    lm_qwen35_draft_host *hw = &ctx->draft_host;
    int n_order = 0;
    for (int want = K; want >= 1; want--)
        for (int i = 0; i < n; i++)
            if (seqs[i].n_drafts == want) hw->order[n_order++] = i;
    int n_drafting = n_order;
    for (int i = 0; i < n; i++)
        if (seqs[i].n_drafts == 0) hw->order[n_order++] = i;

    /* Round 0: every sequence's committed rows. */
    int row = 0;
    for (int o = 0; o < n; o++) {
        const lm_draft_seq *d = &seqs[hw->order[o]];
        hw->seqs[o] = (lm_step_seq){.first = row, .n_new = d->count, .n_cached = d->from,
                                    .state_slot = -1, .block_table = d->block_table,
                                    .n_blocks = d->n_blocks, .no_logits = d->n_drafts == 0};
        for (int j = 0; j < d->count; j++, row++) {
            hw->tokens[row] = d->next_tokens[j];
            /* the target's positions (model-spec §C.6) */
            if (d->positions)
                memcpy(hw->positions + 3 * row, d->positions + 3 * j, sizeof(int32_t) * 3);
            else
                hw->positions[3 * row] = hw->positions[3 * row + 1] = hw->positions[3 * row + 2] =
                    d->from + j + d->position_delta;
            hw->gather[row] = d->hidden_row + j;
        }
    }
    lm_step_batch batch = {.n_tokens = total, .tokens = hw->tokens, .positions = hw->positions,
                           .n_seqs = n, .seqs = hw->seqs};
    lm_step_view step;
    lm_status st = lm_qwen35_step_upload(ctx, &batch, true, hw->gather, &step, err);
    if (st != LM_OK) return st;
    lm_gather_rows(be, ctx->mtp_hidden, ctx->hidden_all, step.gather_rows, total, H);
    lm_rank_sums_begin(&ctx->ranks, ctx->model->share.comm); /* the head's sums, the split lm_head's gathers */
    /* Drafts choose among the draft head's ids (a reduced vocabulary:
     * ids [0, draft_vocab)); the verify samples from the whole one. */
    lm_matrix draft_rows;
    lm_vocab_head head = lm_qwen35_draft_head(ctx, &draft_rows);
    int V = head.vocab;
    lm_qwen35_mtp_run(ctx, &step, step.tokens, ctx->mtp_hidden, ctx->mtp_logits, ctx->mtp_hidden, &head);
    if (n_drafting == 0)
        return lm_rank_sums_status(&ctx->ranks, err);
    lm_argmax_rows(be, ctx->draft_ids, ctx->mtp_logits, n_drafting, V);

    /* Rounds 1..: the previous round's draft at the next position. */
    for (int r = 1; r < max_drafts; r++) {
        int n_round = 0;
        while (n_round < n_drafting && seqs[hw->order[n_round]].n_drafts > r) {
            const lm_draft_seq *d = &seqs[hw->order[n_round]];
            int pos = d->from + d->count + r - 1;
            hw->seqs[n_round] = (lm_step_seq){.first = n_round, .n_new = 1, .n_cached = pos,
                                              .state_slot = -1, .block_table = d->block_table,
                                              .n_blocks = d->n_blocks};
            hw->positions[3 * n_round] = hw->positions[3 * n_round + 1] =
                hw->positions[3 * n_round + 2] = pos + d->position_delta;
            n_round++;
        }
        batch = (lm_step_batch){.n_tokens = n_round, .tokens = NULL, .positions = hw->positions,
                                .n_seqs = n_round, .seqs = hw->seqs};
        st = lm_qwen35_step_upload(ctx, &batch, true, NULL, &step, err);
        if (st != LM_OK) return st;
        lm_mem previous = lm_mem_i32(ctx->draft_ids, (size_t)(r - 1) * (size_t)S);
        lm_qwen35_mtp_run(ctx, &step, previous, ctx->mtp_hidden, ctx->mtp_logits, ctx->mtp_hidden, &head);
        lm_argmax_rows(be, lm_mem_i32(ctx->draft_ids, (size_t)r * (size_t)S), ctx->mtp_logits,
                       n_round, V);
    }
    st = lm_rank_sums_status(&ctx->ranks, err);
    if (st != LM_OK) return st;
    st = lm_download(be, ctx->host_draft_ids, ctx->draft_ids,
                     sizeof(int32_t) * (size_t)max_drafts * (size_t)S, err);
    if (st != LM_OK) return st;
    for (int o = 0; o < n_drafting; o++) {
        lm_draft_seq *d = &seqs[hw->order[o]];
        for (int r = 0; r < d->n_drafts; r++) d->drafts[r] = ctx->host_draft_ids[r * S + o];
    }
    return LM_OK;
}
