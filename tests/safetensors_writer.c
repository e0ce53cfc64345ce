#include "safetensors_writer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    lm_dtype dtype;
    int n_dims;
    int64_t shape[LM_TENSOR_MAX_DIMS];
    test_st_piece *pieces;
    int n_pieces;
    size_t n_bytes;
} writer_tensor;

struct test_st_writer {
    writer_tensor *tensors;
    size_t count, capacity;
};

lm_status test_st_writer_create(test_st_writer **out, lm_error *err) {
    *out = calloc(1, sizeof **out);
    return *out ? LM_OK : lm_fail(err, LM_ERR_NOMEM, "out of memory for a safetensors writer");
}

void test_st_writer_free(test_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->count; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].pieces);
    }
    free(w->tensors);
    free(w);
}

lm_status test_st_writer_add(test_st_writer *w, const char *name, lm_dtype dtype, int n_dims,
                             const int64_t *shape, const test_st_piece *pieces, int n_pieces,
                             lm_error *err) {
    if (dtype < 0 || dtype >= LM_DTYPE_COUNT)
        return lm_fail(err, LM_ERR_INVALID, "%s: unknown dtype %d", name, (int)dtype);
    if (n_dims < 0 || n_dims > LM_TENSOR_MAX_DIMS)
        return lm_fail(err, LM_ERR_INVALID, "%s: %d dimensions", name, n_dims);
    if (n_pieces < 0 || (n_pieces > 0 && !pieces))
        return lm_fail(err, LM_ERR_INVALID, "%s: %d pieces", name, n_pieces);
    for (size_t i = 0; i < w->count; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return lm_fail(err, LM_ERR_INVALID, "%s: added twice", name);
    size_t want = lm_dtype_size(dtype);
    for (int d = 0; d < n_dims; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && want > SIZE_MAX / (size_t)shape[d]))
            return lm_fail(err, LM_ERR_INVALID, "%s: bad dimension %lld", name, (long long)shape[d]);
        want *= (size_t)shape[d];
    }
    size_t have = 0;
    for (int p = 0; p < n_pieces; p++) {
        if (pieces[p].n_bytes && !pieces[p].data)
            return lm_fail(err, LM_ERR_INVALID, "%s: piece %d has no data", name, p);
        have += pieces[p].n_bytes;
    }
    if (have != want)
        return lm_fail(err, LM_ERR_INVALID, "%s: pieces hold %zu bytes, the shape %zu", name, have, want);
    if (w->count == w->capacity) {
        size_t cap = w->capacity ? 2 * w->capacity : 64;
        writer_tensor *grown = realloc(w->tensors, cap * sizeof *grown);
        if (!grown) return lm_fail(err, LM_ERR_NOMEM, "out of memory for tensor %s", name);
        w->tensors = grown;
        w->capacity = cap;
    }
    writer_tensor *t = &w->tensors[w->count];
    *t = (writer_tensor){.dtype = dtype, .n_dims = n_dims, .n_pieces = n_pieces, .n_bytes = want};
    t->name = strdup(name);
    t->pieces = malloc((n_pieces ? (size_t)n_pieces : 1) * sizeof *t->pieces);
    if (!t->name || !t->pieces) {
        free(t->name);
        free(t->pieces);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for tensor %s", name);
    }
    if (n_pieces) memcpy(t->pieces, pieces, (size_t)n_pieces * sizeof *pieces);
    if (n_dims) memcpy(t->shape, shape, (size_t)n_dims * sizeof *shape);
    w->count++;
    return LM_OK;
}

lm_status test_st_writer_add_tensor(test_st_writer *w, const lm_tensor *t, lm_error *err) {
    test_st_piece piece = {t->data, t->n_bytes};
    return test_st_writer_add(w, t->name, t->dtype, t->n_dims, t->shape, &piece, 1, err);
}

size_t test_st_writer_count(const test_st_writer *w) { return w->count; }

const char *test_st_writer_name(const test_st_writer *w, size_t i) {
    return i < w->count ? w->tensors[i].name : NULL;
}

/* The header JSON, unpadded; NULL when out of memory. */
static char *header_json(const test_st_writer *w) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    bool ok = root && meta && cJSON_AddStringToObject(meta, "format", "pt");
    size_t offset = 0;
    for (size_t i = 0; ok && i < w->count; i++) {
        const writer_tensor *t = &w->tensors[i];
        cJSON *entry = cJSON_AddObjectToObject(root, t->name);
        cJSON *shape = entry ? cJSON_AddArrayToObject(entry, "shape") : NULL;
        cJSON *offsets = entry ? cJSON_AddArrayToObject(entry, "data_offsets") : NULL;
        ok = entry && shape && offsets && cJSON_AddStringToObject(entry, "dtype", lm_dtype_name(t->dtype));
        for (int d = 0; ok && d < t->n_dims; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        ok = ok && cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)offset)) &&
             cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)(offset + t->n_bytes)));
        offset += t->n_bytes;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

lm_status test_st_writer_write(const test_st_writer *w, const char *path, lm_error *err) {
    char *json = header_json(w);
    if (!json) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory for the header", path);
    size_t n = strlen(json), padded = (n + 7) / 8 * 8;
    uint8_t prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(json);
        return lm_fail(err, LM_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    bool ok = fwrite(prefix, 1, 8, f) == 8 && fwrite(json, 1, n, f) == n;
    for (size_t i = n; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    free(json);
    for (size_t i = 0; ok && i < w->count; i++)
        for (int p = 0; ok && p < w->tensors[i].n_pieces; p++) {
            const test_st_piece *piece = &w->tensors[i].pieces[p];
            ok = fwrite(piece->data, 1, piece->n_bytes, f) == piece->n_bytes;
        }
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    return ok ? LM_OK : lm_fail(err, LM_ERR_IO, "%s: write failed: %s", path, strerror(saved));
}
