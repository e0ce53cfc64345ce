/* Memory of the backends whose memory is the host's (cpu, ref), and the
 * host views their op wrappers resolve lm_mem arguments into.  Private to
 * backends: models and the engine see only ops/ops.h.
 *
 * An lm_buffer here is a plain block of host memory, either allocated
 * (64-byte aligned, owned) or imported in place (the caller's, not owned).
 * Upload, download and copy are memcpy; ops run at once, so synchronize
 * has nothing to wait for.
 *
 * Views are resolved without a size: ops.h says kernels only ever see
 * consistent sizes, so an out-of-range view is a bug of the caller.  The
 * resolvers assert that the offset lies inside the buffer (debug builds);
 * the memory ops, which know their byte counts, assert the whole span. */
#ifndef LOOM_OPS_HOST_HOST_MEMORY_H
#define LOOM_OPS_HOST_HOST_MEMORY_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/ops.h"

struct lm_buffer {
    void *data; /* never NULL, also for 0 bytes */
    size_t size;
    bool owned; /* allocated here (freed with the buffer) or imported in place */
};

lm_status lm_host_alloc(lm_backend *be, size_t bytes, const char *what, lm_buffer **out,
                        lm_error *err);
lm_status lm_host_import(lm_backend *be, const void *data, size_t bytes, const char *what,
                         lm_buffer **out, lm_error *err);
void lm_host_free(lm_backend *be, lm_buffer *buffer);
size_t lm_host_buffer_size(const lm_buffer *buffer);
void lm_host_upload(lm_backend *be, lm_mem dst, const void *src, size_t bytes);
lm_status lm_host_download(lm_backend *be, void *dst, lm_mem src, size_t bytes, lm_error *err);
void lm_host_copy(lm_backend *be, lm_mem dst, lm_mem src, size_t bytes);
void lm_host_fill(lm_backend *be, lm_mem dst, uint8_t byte, size_t bytes);
lm_status lm_host_synchronize(lm_backend *be, lm_error *err);

/* The memory entries of a host backend's op table. */
#define LM_HOST_MEMORY_OPS                                                                         \
    .alloc = lm_host_alloc, .import_host = lm_host_import, .free = lm_host_free,                   \
    .buffer_size = lm_host_buffer_size, .upload = lm_host_upload, .download = lm_host_download,    \
    .copy = lm_host_copy, .fill = lm_host_fill, .synchronize = lm_host_synchronize

/* The host address of a view.  A view of no buffer is NULL (an argument
 * that the op will not read, e.g. the weights of a 0-column matrix). */
static inline void *lm_host_ptr(lm_mem m) {
    if (!m.buffer) return NULL;
    assert(m.offset <= m.buffer->size && "lm_mem view past the end of its buffer");
    return (char *)m.buffer->data + m.offset;
}
static inline float *lm_host_f32(lm_mem m) { return (float *)lm_host_ptr(m); }
static inline int32_t *lm_host_i32(lm_mem m) { return (int32_t *)lm_host_ptr(m); }

/* A weight matrix [rows, cols] in host memory, as the kernels take it. */
typedef struct {
    const void *data;
    lm_dtype dtype;
    int64_t rows, cols;
} lm_host_matrix;

static inline lm_host_matrix lm_host_matrix_of(const lm_matrix *w) {
    return (lm_host_matrix){lm_host_ptr(w->data), w->dtype, w->rows, w->cols};
}

/* lm_kv_layer with its pools resolved: k and v for float32 pools, k16 and
 * v16 (bf16 bits) for bf16 ones, the other pair NULL. */
typedef struct {
    float *k, *v;
    uint16_t *k16, *v16;
    int n_blocks, block_size, n_kv_heads, head_dim;
} lm_host_kv_layer;

static inline lm_host_kv_layer lm_host_kv_layer_of(const lm_kv_layer *kv) {
    bool bf16 = kv->dtype == LM_DTYPE_BF16;
    return (lm_host_kv_layer){.k = bf16 ? NULL : lm_host_f32(kv->k),
                              .v = bf16 ? NULL : lm_host_f32(kv->v),
                              .k16 = bf16 ? (uint16_t *)lm_host_ptr(kv->k) : NULL,
                              .v16 = bf16 ? (uint16_t *)lm_host_ptr(kv->v) : NULL,
                              .n_blocks = kv->n_blocks,
                              .block_size = kv->block_size,
                              .n_kv_heads = kv->n_kv_heads,
                              .head_dim = kv->head_dim};
}

/* lm_attention_batch with its index arrays resolved; block_tables row s is
 * block_tables + s * table_stride. */
typedef struct {
    int n_tokens;
    const int32_t *token_seq, *ctx_len, *block_tables;
    int table_stride, max_ctx_len;
    int n_heads, n_kv_heads, head_dim;
    float scale;
} lm_host_attention_batch;

static inline lm_host_attention_batch lm_host_attention_batch_of(const lm_attention_batch *b) {
    return (lm_host_attention_batch){.n_tokens = b->n_tokens,
                                     .token_seq = lm_host_i32(b->token_seq),
                                     .ctx_len = lm_host_i32(b->ctx_len),
                                     .block_tables = lm_host_i32(b->block_tables),
                                     .table_stride = b->table_stride,
                                     .max_ctx_len = b->max_ctx_len,
                                     .n_heads = b->n_heads,
                                     .n_kv_heads = b->n_kv_heads,
                                     .head_dim = b->head_dim,
                                     .scale = b->scale};
}

/* lm_seq_batch with its index arrays resolved. */
typedef struct {
    int n_seqs;
    const int32_t *first, *length, *slot;
    int max_length;
} lm_host_seq_batch;

static inline lm_host_seq_batch lm_host_seq_batch_of(const lm_seq_batch *s) {
    return (lm_host_seq_batch){s->n_seqs, lm_host_i32(s->first), lm_host_i32(s->length),
                               lm_host_i32(s->slot), s->max_length};
}

#endif
