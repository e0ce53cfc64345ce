#include "models/weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"

void lm_weights_init(lm_weights *w, const lm_checkpoint *checkpoint) {
    memset(w, 0, sizeof *w);
    w->checkpoint = checkpoint;
}

void lm_weights_init_random(lm_weights *w, uint64_t seed, bool has_lm_head) {
    memset(w, 0, sizeof *w);
    w->random = true;
    w->random_has_lm_head = has_lm_head;
    w->random_state = seed ? seed : 0x9e3779b97f4a7c15ull;
}

static uint64_t next_random(uint64_t *state) { /* xorshift64* */
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [-1, 1). */
static float random_unit(uint64_t *state) {
    return (float)(next_random(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

void lm_weights_free(lm_weights *w) {
    for (size_t i = 0; i < w->n_random_owned; i++) free(w->random_owned[i]);
    free(w->random_owned);
    for (size_t i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    free(w->used);
    memset(w, 0, sizeof *w);
}

static bool push_pointer(void ***array, size_t *n, size_t *cap, void *p) {
    if (*n == *cap) {
        size_t grown = *cap ? *cap * 2 : 64;
        void **bigger = realloc(*array, grown * sizeof *bigger);
        if (!bigger) return false;
        *array = bigger;
        *cap = grown;
    }
    (*array)[(*n)++] = p;
    return true;
}

bool lm_weights_was_used(const lm_weights *w, const lm_tensor *t) {
    for (size_t i = 0; i < w->n_used; i++)
        if (w->used[i] == t) return true;
    return false;
}

const lm_tensor *lm_weights_find(lm_weights *w, const char *name) {
    const lm_tensor *t = lm_checkpoint_find(w->checkpoint, name);
    if (t && !lm_weights_was_used(w, t))
        push_pointer((void ***)&w->used, &w->n_used, &w->cap_used, (void *)t);
    return t;
}

bool lm_weights_has(const lm_weights *w, const char *name) {
    if (w->random) return strcmp(name, "lm_head.weight") != 0 || w->random_has_lm_head;
    return lm_checkpoint_find(w->checkpoint, name) != NULL;
}

size_t lm_weights_bytes_used(const lm_weights *w) {
    size_t total = 0;
    for (size_t i = 0; i < w->n_used; i++) total += w->used[i]->n_bytes;
    return total;
}

/* Makes up a tensor for random mode; it joins `used` like a real one. */
static const lm_tensor *random_tensor(lm_weights *w, const char *name, int n_dims,
                                      const int64_t *shape, lm_dtype dtype, lm_error *err) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= shape[d];
    size_t bytes = (size_t)n * lm_dtype_size(dtype);
    lm_tensor *t = calloc(1, sizeof *t);
    char *name_copy = strdup(name);
    void *data = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!t || !name_copy || !data ||
        !push_pointer(&w->random_owned, &w->n_random_owned, &w->cap_random_owned, t) ||
        !push_pointer(&w->random_owned, &w->n_random_owned, &w->cap_random_owned, name_copy) ||
        !push_pointer(&w->random_owned, &w->n_random_owned, &w->cap_random_owned, data)) {
        free(t);
        free(name_copy);
        free(data);
        lm_fail(err, LM_ERR_NOMEM, "out of memory making random tensor '%s' (%zu MB)", name,
                bytes >> 20);
        return NULL;
    }
    float scale = n_dims == 2 ? 1.0f / sqrtf((float)shape[1]) : 0.1f;
    if (dtype == LM_DTYPE_BF16) {
        uint16_t *p = data;
        for (int64_t i = 0; i < n; i++) p[i] = lm_f32_to_bf16(scale * random_unit(&w->random_state));
    } else {
        float *p = data;
        for (int64_t i = 0; i < n; i++) p[i] = scale * random_unit(&w->random_state);
    }
    t->name = name_copy;
    t->dtype = dtype;
    t->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) t->shape[d] = shape[d];
    t->n_elements = n;
    t->n_bytes = bytes;
    t->data = data;
    t->file = "(random weights)";
    push_pointer((void ***)&w->used, &w->n_used, &w->cap_used, (void *)t);
    return t;
}

static bool is_float_dtype(lm_dtype d) {
    return d == LM_DTYPE_BF16 || d == LM_DTYPE_F16 || d == LM_DTYPE_F32;
}

static const lm_tensor *require(lm_weights *w, const char *name, int n_dims, const int64_t *shape,
                                lm_error *err) {
    if (w->random) return random_tensor(w, name, n_dims, shape, n_dims == 2 ? LM_DTYPE_BF16 : LM_DTYPE_F32, err);
    const lm_tensor *t = lm_weights_find(w, name);
    if (!t)
        lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s' is missing", lm_checkpoint_dir(w->checkpoint),
                name);
    else if (!is_float_dtype(t->dtype)) {
        lm_fail(err, LM_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; expected BF16, F16 or F32",
                t->file, name, lm_dtype_name(t->dtype));
        t = NULL;
    }
    return t;
}

lm_status lm_weights_matrix(lm_weights *w, const char *name, int64_t rows, int64_t cols,
                            lm_matrix *out, lm_error *err) {
    const int64_t shape[2] = {rows, cols};
    const lm_tensor *t = require(w, name, 2, shape, err);
    if (!t) return err->code;
    if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: tensor '%s' has %d dims [%lld, %lld...]; expected [%lld, %lld]", t->file,
                       name, t->n_dims, (long long)t->shape[0],
                       (long long)(t->n_dims > 1 ? t->shape[1] : 0), (long long)rows,
                       (long long)cols);
    *out = (lm_matrix){.data = t->data, .dtype = t->dtype, .rows = rows, .cols = cols};
    return LM_OK;
}

lm_status lm_weights_vector(lm_weights *w, const char *name, int64_t n, float offset,
                            bool any_shape, float **out, lm_error *err) {
    const lm_tensor *t = require(w, name, 1, &n, err);
    if (!t) return err->code;
    if (t->n_elements != n || (!any_shape && t->n_dims != 1))
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s' has %lld elements in %d dims; expected [%lld]",
                       t->file, name, (long long)t->n_elements, t->n_dims, (long long)n);
    float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!v || !push_pointer((void ***)&w->owned, &w->n_owned, &w->cap_owned, v)) {
        free(v);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory converting '%s'", name);
    }
    for (int64_t i = 0; i < n; i++) {
        float x;
        switch (t->dtype) {
        case LM_DTYPE_BF16: x = lm_bf16_to_f32(((const uint16_t *)t->data)[i]); break;
        case LM_DTYPE_F16: x = lm_f16_to_f32(((const uint16_t *)t->data)[i]); break;
        default: x = ((const float *)t->data)[i]; break;
        }
        v[i] = x + offset;
    }
    *out = v;
    return LM_OK;
}
