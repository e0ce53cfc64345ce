#include "models/forward_common.h"

lm_status lm_context_check_sizes(const lm_context_options *o, lm_error *err) {
    if (o->kv_block_size <= 0 || o->kv_block_size > 4096 || o->kv_blocks <= 0 ||
        o->kv_blocks > (1 << 24))
        return lm_fail(err, LM_ERR_INVALID, "context: KV pool of %d blocks of %d tokens is out of range",
                       o->kv_blocks, o->kv_block_size);
    if (o->max_step_tokens <= 0 || o->max_step_tokens > (1 << 20) || o->max_step_seqs <= 0 ||
        o->max_step_seqs > o->max_step_tokens || o->max_blocks_per_seq <= 0 ||
        o->max_blocks_per_seq > o->kv_blocks || o->max_logit_rows < 0)
        return lm_fail(err, LM_ERR_INVALID,
                       "context: step of %d tokens, %d sequences, %d blocks per sequence is out "
                       "of range",
                       o->max_step_tokens, o->max_step_seqs, o->max_blocks_per_seq);
    if (o->speculative_tokens < 0 || o->speculative_tokens > 16)
        return lm_fail(err, LM_ERR_INVALID, "context: %d speculative tokens is out of range",
                       o->speculative_tokens);
    return LM_OK;
}

void lm_forward_embed_inputs(lm_backend *be, lm_mem h, lm_mem tokens, const lm_step_batch *b,
                             const lm_matrix *embed_tokens, int hidden) {
    lm_embed(be, h, tokens, b->n_tokens, embed_tokens);
    if (!b->input_rows) return;
    size_t row_bytes = sizeof(float) * (size_t)hidden;
    for (int i = 0; i < b->n_tokens;) {
        if (!b->input_rows[i]) {
            i++;
            continue;
        }
        int run = 1;
        while (i + run < b->n_tokens && b->input_rows[i + run] &&
               b->input_rows[i + run] == b->input_rows[i] + (size_t)run * (size_t)hidden)
            run++;
        lm_upload(be, lm_mem_bytes(h, row_bytes * (size_t)i), b->input_rows[i], row_bytes * (size_t)run);
        i += run;
    }
}

lm_status lm_context_check_images(const lm_context_options *o, bool has_tower, lm_error *err) {
    if (o->max_image_patches < 0 || o->max_image_patches > (1 << 22))
        return lm_fail(err, LM_ERR_INVALID, "context: max_image_patches %d is out of range",
                       o->max_image_patches);
    if (o->max_image_patches > 0 && !has_tower)
        return lm_fail(err, LM_ERR_INVALID,
                       "context: max_image_patches is %d but the model has no vision tower",
                       o->max_image_patches);
    return LM_OK;
}

void lm_sample_buffers_carve(lm_carver *c, const lm_backend *be, lm_sample_buffers *b, size_t rows) {
    *b = (lm_sample_buffers){0};
    if (!lm_backend_samples_rows(be)) return;
    lm_carve(c, &b->params, rows * sizeof(lm_sample_row) / 4);
    lm_carve(c, &b->entries, (size_t)LM_FORWARD_SAMPLE_ENTRIES * sizeof(lm_sample_entry) / 4);
    lm_carve(c, &b->drew, rows);
}

void lm_sample_upload(lm_backend *be, const lm_sample_buffers *b, const lm_forward_out *out, int rows) {
    if (!out->sample_rows || !b->params.buffer || rows <= 0) return;
    lm_upload(be, b->params, out->sample_rows, sizeof(lm_sample_row) * (size_t)rows);
    int n = out->n_sample_entries < LM_FORWARD_SAMPLE_ENTRIES ? out->n_sample_entries : LM_FORWARD_SAMPLE_ENTRIES;
    if (n > 0) lm_upload(be, b->entries, out->sample_entries, sizeof(lm_sample_entry) * (size_t)n);
}

lm_status lm_forward_logits(lm_backend *be, const lm_step_view *step, lm_mem h,
                            const lm_logits_head *head, const lm_forward_out *out, lm_error *err) {
    int rows = step->n_logit_rows, H = head->hidden;
    if (rows == 0) return LM_OK; /* nothing to wait for: a device error shows at the next download */
    lm_gather_rows(be, head->logit_x, h, step->logit_rows, rows, H);
    lm_rmsnorm(be, head->logit_x, head->logit_x, head->final_norm, rows, H, head->eps);
    size_t hidden_bytes = sizeof(float) * (size_t)rows * (size_t)H;
    lm_status st = LM_OK;
    if (out->layer_hidden && out->layer_hidden[head->n_layers])
        st = lm_download(be, out->layer_hidden[head->n_layers], head->logit_x, hidden_bytes, err);
    if (st == LM_OK && out->hidden) st = lm_download(be, out->hidden, head->logit_x, hidden_bytes, err);
    if (st != LM_OK) return st;
    st = lm_vocab_head_matmul(be, &head->lm_head, head->logits, head->logit_x, rows, err);
    if (st != LM_OK) return st;
    int V = head->lm_head.vocab;
    size_t row_bytes = sizeof(float) * (size_t)V;
    if (out->argmax) {
        lm_argmax_rows(be, head->logit_ids, head->logits, rows, V);
        bool draws = out->sample_rows && head->sample && lm_backend_samples_rows(be);
        if (draws)
            lm_sample_rows(be, head->logit_ids, head->sample->drew, head->logits, rows, V, head->sample->params,
                           head->sample->entries);
        st = lm_download(be, out->argmax, head->logit_ids, sizeof(int32_t) * (size_t)rows, err);
        if (st == LM_OK && draws)
            st = lm_download(be, out->drew, head->sample->drew, sizeof(int32_t) * (size_t)rows, err);
        if (st != LM_OK) return st;
    }
    if (!out->argmax || !out->logits_wanted) return lm_download(be, out->logits, head->logits, row_bytes * (size_t)rows, err);
    /* one download per run of wanted rows */
    for (int r = 0; r < rows && st == LM_OK;) {
        if (!out->logits_wanted[r]) {
            r++;
            continue;
        }
        int run = 1;
        while (r + run < rows && out->logits_wanted[r + run]) run++;
        st = lm_download(be, out->logits + (size_t)r * (size_t)V, lm_mem_bytes(head->logits, row_bytes * (size_t)r),
                         row_bytes * (size_t)run, err);
        r += run;
    }
    return st;
}

lm_status lm_vocab_head_matmul(lm_backend *be, const lm_vocab_head *head, lm_mem logits, lm_mem x, int rows,
                               lm_error *err) {
    if (!head->tp) {
        lm_matmul(be, logits, x, rows, head->weight);
        return LM_OK;
    }
    int n = head->tp->n_ranks, share = head->vocab / n;
    size_t local_floats = (size_t)rows * (size_t)share;
    lm_mem local = head->scratch, gathered = lm_mem_f32(head->scratch, local_floats);
    lm_matmul(be, local, x, rows, head->weight);
    /* gathered = rank 0's [rows, V/n] | rank 1's | ...: each rank's block
     * of columns into its place in every row */
    lm_status st = lm_all_gather(head->tp, be, gathered, local, local_floats, err);
    if (st != LM_OK) return st;
    for (int r = 0; r < n; r++)
        lm_copy_rows(be, lm_mem_f32(logits, (size_t)r * (size_t)share), head->vocab,
                     lm_mem_f32(gathered, (size_t)r * local_floats), share, rows, share);
    return LM_OK;
}

lm_status lm_context_buffer_alloc(lm_backend *be, size_t bytes, const char *what, lm_buffer **out,
                                  lm_error *err) {
    lm_status st = lm_alloc(be, bytes, what, out, err);
    if (st != LM_OK) return st;
    lm_fill(be, (lm_mem){*out, 0}, 0, bytes);
    return LM_OK;
}

size_t lm_kv_pool_units(size_t elements, lm_dtype dtype) {
    return (elements * lm_dtype_size(dtype) + 3) / 4;
}

void lm_kv_copy_block(lm_backend *be, const lm_kv_layer *layers, int n, int src, int dst) {
    for (int l = 0; l < n; l++) {
        const lm_kv_layer *kv = &layers[l];
        size_t block = (size_t)kv->block_size * (size_t)kv->n_kv_heads * (size_t)kv->head_dim *
                       lm_dtype_size(kv->dtype); /* bytes */
        lm_copy(be, lm_mem_bytes(kv->k, block * (size_t)dst), lm_mem_bytes(kv->k, block * (size_t)src), block);
        lm_copy(be, lm_mem_bytes(kv->v, block * (size_t)dst), lm_mem_bytes(kv->v, block * (size_t)src), block);
    }
}

void lm_forward_swiglu_in(lm_backend *be, lm_mem y, lm_mem up_half, lm_mem x, int n, const lm_matrix *gate,
                          const lm_matrix *up) {
    lm_matmul(be, y, x, n, gate);
    lm_matmul(be, up_half, x, n, up);
    lm_silu_mul(be, y, y, up_half, (int64_t)n * gate->rows);
    lm_discard(be, up_half, sizeof(float) * (size_t)n * (size_t)up->rows);
}

void lm_forward_matmul_add(lm_backend *be, lm_mem y, lm_mem scratch, lm_mem x, int n, const lm_matrix *w) {
    lm_matmul(be, scratch, x, n, w);
    lm_add(be, y, scratch, (int64_t)n * w->rows);
    lm_discard(be, scratch, sizeof(float) * (size_t)n * (size_t)w->rows);
}
