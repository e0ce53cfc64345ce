#include "ops/host/host_memory.h"

#include <stdlib.h>
#include <string.h>

#include "base/big_alloc.h"

#define HOST_ALIGN 64 /* a cache line, and the widest vector */

/* A view [m.offset, m.offset + bytes) of its buffer, checked in debug builds. */
static char *span(lm_mem m, size_t bytes) {
    assert(m.buffer && m.offset <= m.buffer->size && bytes <= m.buffer->size - m.offset &&
           "lm_mem span past the end of its buffer");
    (void)bytes;
    return (char *)m.buffer->data + m.offset;
}

lm_status lm_host_alloc(lm_backend *be, size_t bytes, const char *what, lm_buffer **out,
                        lm_error *err) {
    (void)be;
    *out = NULL;
    /* aligned_alloc wants a multiple of the alignment; 0 bytes still get a
     * block, so every buffer has a real address */
    size_t rounded = (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
    if (rounded < bytes)
        return lm_fail(err, LM_ERR_NOMEM, "%s: %zu bytes is too large", what ? what : "buffer",
                       bytes);
    lm_buffer *b = malloc(sizeof *b);
    void *data = lm_big_alloc(rounded ? rounded : HOST_ALIGN); /* HOST_ALIGN-aligned at least */
    if (!b || !data) {
        free(b);
        free(data);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory allocating %zu bytes for %s", bytes,
                       what ? what : "a buffer");
    }
    *b = (lm_buffer){.data = data, .size = bytes, .owned = true};
    *out = b;
    return LM_OK;
}

lm_status lm_host_import(lm_backend *be, const void *data, size_t bytes, const char *what,
                         lm_buffer **out, lm_error *err) {
    (void)be;
    *out = NULL;
    lm_buffer *b = malloc(sizeof *b);
    if (!b)
        return lm_fail(err, LM_ERR_NOMEM, "out of memory importing %s", what ? what : "a buffer");
    /* In place: the caller keeps data alive and unchanged (ops.h).  Kernels
     * take const views of imported weights; the cast only fits the handle. */
    static const char empty[1];
    *b = (lm_buffer){.data = (void *)(data ? data : empty), .size = bytes, .owned = false};
    *out = b;
    return LM_OK;
}

void lm_host_free(lm_backend *be, lm_buffer *buffer) {
    (void)be;
    if (!buffer) return;
    if (buffer->owned) free(buffer->data);
    free(buffer);
}

size_t lm_host_buffer_size(const lm_buffer *buffer) { return buffer ? buffer->size : 0; }

void lm_host_upload(lm_backend *be, lm_mem dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(span(dst, bytes), src, bytes);
}

lm_status lm_host_download(lm_backend *be, void *dst, lm_mem src, size_t bytes, lm_error *err) {
    (void)be;
    (void)err; /* host ops ran at once and cannot fail */
    if (bytes) memcpy(dst, span(src, bytes), bytes);
    return LM_OK;
}

void lm_host_copy(lm_backend *be, lm_mem dst, lm_mem src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(span(dst, bytes), span(src, bytes), bytes);
}

void lm_host_fill(lm_backend *be, lm_mem dst, uint8_t byte, size_t bytes) {
    (void)be;
    if (bytes) memset(span(dst, bytes), byte, bytes);
}

lm_status lm_host_synchronize(lm_backend *be, lm_error *err) {
    (void)be;
    (void)err;
    return LM_OK;
}
