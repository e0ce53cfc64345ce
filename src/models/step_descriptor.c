/* Checking a StepBatch against a context and packing it into the int32
 * descriptor its ops read (models/step_descriptor.h). */
#include "models/step_descriptor.h"

#include <string.h>

size_t lm_step_descriptor_ints(int max_step_tokens, int max_step_seqs, int max_blocks_per_seq) {
    size_t N = (size_t)max_step_tokens, S = (size_t)max_step_seqs;
    /* tokens, 3 positions, token_seq, ctx_len, kv_slots, gather_rows, logit_rows: 9 per token
     * (8 + at most one logit row each); first, len, slot and a block table per sequence */
    return 9 * N + 3 * S + S * (size_t)max_blocks_per_seq;
}

lm_status lm_step_check(const lm_step_limits *l, const lm_step_batch *b, lm_error *err) {
    if (b->n_tokens <= 0 || b->n_seqs <= 0) return lm_fail(err, LM_ERR_INVALID, "empty step batch");
    if (b->n_tokens > l->max_step_tokens || b->n_seqs > l->max_step_seqs)
        return lm_fail(err, LM_ERR_INVALID,
                       "step batch of %d tokens in %d sequences; the context holds %d in %d",
                       b->n_tokens, b->n_seqs, l->max_step_tokens, l->max_step_seqs);
    if (lm_step_batch_logit_rows(b) > l->max_logit_rows)
        return lm_fail(err, LM_ERR_INVALID, "step batch wants %d logit rows; the context has %d",
                       lm_step_batch_logit_rows(b), l->max_logit_rows);
    int expected_first = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const lm_step_seq *q = &b->seqs[s];
        if (q->first != expected_first || q->n_new <= 0 || q->n_cached < 0)
            return lm_fail(err, LM_ERR_INVALID, "step batch: sequence %d is not contiguous", s);
        expected_first += q->n_new;
        if (l->state_slots > 0 && (q->state_slot < 0 || q->state_slot >= l->state_slots))
            return lm_fail(err, LM_ERR_INVALID, "step batch: bad state slot %d", q->state_slot);
        if (q->record_for_rollback && q->n_new > l->record_rows)
            return lm_fail(err, LM_ERR_INVALID,
                           "step batch: sequence %d records %d rows, room for %d", s, q->n_new,
                           l->record_rows);
        if (l->uses_kv) {
            int need = (q->n_cached + q->n_new + l->kv_block_size - 1) / l->kv_block_size;
            if (!q->block_table || q->n_blocks < need || need > l->max_blocks_per_seq)
                return lm_fail(err, LM_ERR_INVALID, "step batch: sequence %d has %d blocks, needs %d",
                               s, q->n_blocks, need);
            for (int j = 0; j < need; j++)
                if (q->block_table[j] < 0 || q->block_table[j] >= l->kv_blocks)
                    return lm_fail(err, LM_ERR_INVALID, "step batch: bad block id %d",
                                   q->block_table[j]);
        }
    }
    if (expected_first != b->n_tokens)
        return lm_fail(err, LM_ERR_INVALID, "step batch: sequences cover %d of %d tokens",
                       expected_first, b->n_tokens);
    for (int t = 0; b->tokens && t < b->n_tokens; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= l->vocab_size)
            return lm_fail(err, LM_ERR_INVALID, "token id %d is outside the vocabulary (size %d)",
                           b->tokens[t], l->vocab_size);
    return LM_OK;
}

void lm_step_upload(lm_backend *be, lm_mem d, int32_t *host, const lm_step_batch *b, int bs,
                    const int32_t *gather, lm_step_view *step) {
    int N = b->n_tokens, S = b->n_seqs;
    int stride = 1;
    for (int q = 0; q < S; q++) {
        int need = (b->seqs[q].n_cached + b->seqs[q].n_new + bs - 1) / bs;
        if (need > stride) stride = need;
    }
    /* Packed in this order; every array starts at an int offset. */
    size_t at = 0;
    int32_t *tokens = host + at;        at += (size_t)N;
    int32_t *positions = host + at;     at += 3 * (size_t)N;
    int32_t *token_seq = host + at;     at += (size_t)N;
    int32_t *ctx_len = host + at;       at += (size_t)N;
    int32_t *kv_slots = host + at;      at += (size_t)N;
    int32_t *gather_rows = host + at;   at += (size_t)N;
    int32_t *seq_first = host + at;     at += (size_t)S;
    int32_t *seq_len = host + at;       at += (size_t)S;
    int32_t *seq_slot = host + at;      at += (size_t)S;
    int32_t *tables = host + at;        at += (size_t)S * (size_t)stride;
    int32_t *logit_rows = host + at;
    if (b->tokens) memcpy(tokens, b->tokens, sizeof(int32_t) * (size_t)N);
    memcpy(positions, b->positions, sizeof(int32_t) * 3 * (size_t)N);
    if (gather) memcpy(gather_rows, gather, sizeof(int32_t) * (size_t)N);
    int rows = 0, max_ctx = 0, max_len = 0;
    for (int q = 0; q < S; q++) {
        const lm_step_seq *seq = &b->seqs[q];
        int need = (seq->n_cached + seq->n_new + bs - 1) / bs;
        seq_first[q] = seq->first;
        seq_len[q] = seq->n_new;
        seq_slot[q] = seq->state_slot < 0 ? 0 : seq->state_slot;
        if (seq->block_table) memcpy(tables + (size_t)q * stride, seq->block_table, sizeof(int32_t) * need);
        for (int i = 0; i < seq->n_new; i++) {
            int t = seq->first + i, pos = seq->n_cached + i;
            token_seq[t] = q;
            ctx_len[t] = pos + 1;
            kv_slots[t] = seq->block_table ? seq->block_table[pos / bs] * bs + pos % bs : 0;
        }
        if (seq->n_cached + seq->n_new > max_ctx) max_ctx = seq->n_cached + seq->n_new;
        if (seq->n_new > max_len) max_len = seq->n_new;
        if (seq->no_logits) continue;
        int from = seq->all_logits ? seq->first : seq->first + seq->n_new - 1;
        for (int i = from; i < seq->first + seq->n_new; i++) logit_rows[rows++] = i;
    }
    at += (size_t)rows;
    lm_upload(be, d, host, sizeof(int32_t) * at);
    size_t o = 0;
    *step = (lm_step_view){.n_tokens = N, .n_seqs = S, .n_logit_rows = rows,
                           .max_ctx_len = max_ctx, .max_seq_len = max_len, .table_stride = stride};
    step->tokens = lm_mem_i32(d, o);       o += (size_t)N;
    step->positions = lm_mem_i32(d, o);    o += 3 * (size_t)N;
    step->token_seq = lm_mem_i32(d, o);    o += (size_t)N;
    step->ctx_len = lm_mem_i32(d, o);      o += (size_t)N;
    step->kv_slots = lm_mem_i32(d, o);     o += (size_t)N;
    step->gather_rows = lm_mem_i32(d, o);  o += (size_t)N;
    step->seq_first = lm_mem_i32(d, o);    o += (size_t)S;
    step->seq_len = lm_mem_i32(d, o);      o += (size_t)S;
    step->seq_slot = lm_mem_i32(d, o);     o += (size_t)S;
    step->block_tables = lm_mem_i32(d, o); o += (size_t)S * (size_t)stride;
    step->logit_rows = lm_mem_i32(d, o);
}
