#include "models/step_context.h"

#include "models/forward_common.h"

int lm_context_logit_rows(const lm_context_options *o) {
    int rows = o->max_logit_rows > 0 ? o->max_logit_rows : o->max_step_seqs;
    return rows < o->max_step_tokens ? rows : o->max_step_tokens;
}

lm_status lm_context_carve(lm_backend *be, lm_context_layout layout, void *ctx, const char *what,
                           lm_buffer **buffer, lm_error *err) {
    lm_carver count = {0};
    layout(ctx, &count);
    lm_status st = lm_context_buffer_alloc(be, count.used, what, buffer, err);
    if (st != LM_OK) return st;
    lm_carver assign = {.buffer = *buffer};
    layout(ctx, &assign);
    return LM_OK;
}

void lm_context_kv_shape(lm_kv_layer *layers, int n, const lm_context_options *o, int n_kv_heads,
                         int head_dim, lm_dtype dtype) {
    for (int l = 0; l < n; l++)
        layers[l] = (lm_kv_layer){.k = layers[l].k,
                                  .v = layers[l].v,
                                  .n_blocks = o->kv_blocks,
                                  .block_size = o->kv_block_size,
                                  .n_kv_heads = n_kv_heads,
                                  .head_dim = head_dim,
                                  .dtype = dtype};
}

lm_step_limits lm_context_step_limits(const lm_context_options *o, int max_logit_rows, int vocab_size) {
    return (lm_step_limits){
        .max_step_tokens = o->max_step_tokens,
        .max_step_seqs = o->max_step_seqs,
        .max_logit_rows = max_logit_rows,
        .kv_block_size = o->kv_block_size,
        .kv_blocks = o->kv_blocks,
        .max_blocks_per_seq = o->max_blocks_per_seq,
        .vocab_size = vocab_size,
    };
}
