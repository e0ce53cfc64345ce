#include "models/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/bf16.h"
#include "base/big_alloc.h"
#include "base/quant.h"
#include "base/threadpool.h"
#include "io/json_fields.h"
#include "io/json_file.h"
#include "models/mlx_quant.h"

#define MAX_CONFIG_BYTES ((size_t)16 << 20)

void lm_weights_init(lm_weights *w, const lm_checkpoint *checkpoint, lm_backend *backend) {
    memset(w, 0, sizeof *w);
    w->checkpoint = checkpoint;
    w->backend = backend;
}

void lm_weights_init_random(lm_weights *w, uint64_t seed, bool has_lm_head, lm_backend *backend) {
    memset(w, 0, sizeof *w);
    w->backend = backend;
    w->random = true;
    w->random_has_lm_head = has_lm_head;
    w->random_state = seed ? seed : 0x9e3779b97f4a7c15ull;
}

void lm_weights_set_quant(lm_weights *w, const lm_weights_quant *q) { w->quant = *q; }

void lm_weights_set_progress(lm_weights *w, const lm_progress *progress, int n_ranks) {
    w->progress = progress;
    w->progress_ranks = n_ranks > 1 ? n_ranks : 1;
    if (w->checkpoint)
        lm_progress_add(progress, LM_PROGRESS_PLACING, 0,
                        (uint64_t)lm_checkpoint_total_bytes(w->checkpoint) / (uint64_t)w->progress_ranks);
}

static void report_taken(const lm_weights *w, const lm_tensor *t) {
    if (w->progress)
        lm_progress_add(w->progress, w->random ? LM_PROGRESS_MAKING : LM_PROGRESS_PLACING,
                        (uint64_t)t->n_bytes / (uint64_t)w->progress_ranks, 0);
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
    for (size_t i = 0; i < w->n_buffers; i++) lm_buffer_free(w->backend, w->buffers[i]);
    free(w->buffers);
    for (size_t i = 0; i < w->n_random_owned; i++) free(w->random_owned[i]);
    free(w->random_owned);
    for (size_t i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    free(w->used);
    free(w->released);
    free(w->counted);
    if (w->convert_pool) lm_pool_destroy(w->convert_pool);
    cJSON_Delete(w->mlx_config);
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
    if (t && !lm_weights_was_used(w, t)) {
        push_pointer((void ***)&w->used, &w->n_used, &w->cap_used, (void *)t);
        report_taken(w, t);
    }
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

static const char *int4_method_name(lm_int4_method method) { return method == LM_INT4_AWQ ? "AWQ" : "GPTQ"; }

void lm_weights_made_note(const lm_weights *w, char *out, size_t size) {
    if (w->fp8_kept_bytes > 0)
        snprintf(out, size, "FP8 weights kept FP8 (E4M3, a float32 scale per 128): %.1f MB%s",
                 (double)w->fp8_kept_bytes / 1e6, w->q8_bytes ? ", the rest (expert stacks, odd shapes) made int8" : "");
    else if (w->fp8_made_bytes > 0)
        snprintf(out, size, "weights made FP8 at load (E4M3, a float32 scale per 128): %.1f MB",
                 (double)w->fp8_made_bytes / 1e6);
    else if (w->fp8_bf16_bytes > 0)
        snprintf(out, size, "FP8 weights made bf16 at load: %.1f MB, as the %s backend has no int8 weights yet",
                 (double)w->fp8_bf16_bytes / 1e6, w->backend->ops->name);
    else if (w->int4_kept_bytes > 0 || w->int4_f32_bytes > 0) { /* at most 160 bytes (lm_model_info) */
        int n = 0;
        const char *method = int4_method_name(w->quant.int4.method);
        if (w->int4_kept_bytes > 0)
            n = snprintf(out, size, "%s int4 kept 4-bit (Q4_0/Q5_0, exact): %zu matrices, %.1f MB", method,
                         w->int4_kept_matrices, (double)w->int4_kept_bytes / 1e6);
        if (w->int4_f32_bytes > 0 && n >= 0 && (size_t)n < size)
            snprintf(out + n, size - (size_t)n, "%s%zu %s decoded to %s: %.1f MB", n ? "; " : "",
                     w->int4_f32_matrices,
                     w->int4_f32_permuted ? "desc_act matrices"
                     : lm_backend_is_host(w->backend) ? "matrices (scales not f16)"
                                                      : "matrices (no 4-bit kernels here)",
                     w->int4_decoded == LM_DTYPE_BF16 ? "bf16" : "float32", (double)w->int4_f32_bytes / 1e6);
    } else if (w->mlx_kept_bytes > 0 || w->mlx_bytes > 0) {
        int n = 0;
        if (w->mlx_kept_bytes > 0)
            n = snprintf(out, size, "MLX 4-bit kept 4-bit (Q4_1, exact): %zu matrices, %.1f MB", w->mlx_kept_matrices,
                         (double)w->mlx_kept_bytes / 1e6);
        if (w->mlx_bytes > 0 && n >= 0 && (size_t)n < size)
            snprintf(out + n, size - (size_t)n, "%sMLX %d-bit decoded to %s: %zu matrices, %.1f MB", n ? "; " : "",
                     w->mlx_made_bits,
                     w->mlx_made == LM_DTYPE_Q8_0 ? "int8" : w->mlx_made == LM_DTYPE_BF16 ? "bf16" : "float32",
                     w->mlx_made_matrices, (double)w->mlx_bytes / 1e6);
    } else if (w->q8_bytes > 0)
        snprintf(out, size, "weights made int8 at load: %.1f MB", (double)w->q8_bytes / 1e6);
    else if (size > 0)
        out[0] = '\0';
}

/* Below this many weights a matrix is converted on the calling thread. */
#define CONVERT_PARALLEL_MIN ((int64_t)1 << 16)

/* The pool that converts large matrices (made at the first one): the host
 * backend's threads (the cpu's --threads; a rank's share under tensor
 * parallelism), or every core for a device backend, whose host threads
 * are otherwise idle at load.  NULL (one thread) when it cannot be made. */
static lm_pool *convert_pool(lm_weights *w) {
    if (!w->convert_pool && !w->convert_pool_failed) {
        int threads = lm_backend_is_host(w->backend) ? lm_backend_threads(w->backend) : 0; /* 0: every core */
        lm_error err = {0};
        if (threads == 1 || lm_pool_create(threads, &w->convert_pool, &err) != LM_OK) w->convert_pool_failed = true;
    }
    return w->convert_pool;
}

/* The chunks of a made-up tensor past its first million values, copied
 * on the pool: chunk k of `chunk` values at from[k]. */
typedef struct {
    uint16_t *p;
    const int64_t *from;
    int64_t start, n, chunk;
} chunk_copy;

static void copy_chunks(void *ctx, int task, int n_tasks) {
    const chunk_copy *c = ctx;
    int64_t chunks = (c->n - c->start + c->chunk - 1) / c->chunk;
    long begin, end;
    lm_split_range((long)chunks, n_tasks, task, &begin, &end);
    for (int64_t k = begin; k < end; k++) {
        int64_t i = c->start + k * c->chunk, take = c->n - i < c->chunk ? c->n - i : c->chunk;
        memcpy(c->p + i, c->p + c->from[k], sizeof *c->p * (size_t)take);
    }
}

/* Makes up a tensor for random mode; it joins `used` like a real one. */
static const lm_tensor *random_tensor(lm_weights *w, const char *name, int n_dims,
                                      const int64_t *shape, lm_dtype dtype, lm_error *err) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= shape[d];
    size_t bytes = (size_t)n * lm_dtype_size(dtype);
    lm_tensor *t = calloc(1, sizeof *t);
    char *name_copy = strdup(name);
    void *data = lm_big_alloc(bytes);
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
        /* Benchmark shapes reach 100 GB: past a million values a tensor is
         * made of chunks of its first million at random offsets (memcpy
         * speed), which keeps every row random enough for routing and
         * norms, and costs a second instead of minutes. */
        const int64_t pool = (int64_t)1 << 20, chunk = (int64_t)1 << 14;
        int64_t direct = n < pool ? n : pool, chunks = (n - direct + chunk - 1) / chunk;
        for (int64_t i = 0; i < direct; i++) p[i] = lm_f32_to_bf16(scale * random_unit(&w->random_state));
        /* the offsets drawn in order, the copies (and the pages' first
         * touch) on the pool: the same values as one thread's */
        int64_t *from = chunks > 0 ? malloc(sizeof *from * (size_t)chunks) : NULL;
        if (chunks > 0 && !from) {
            lm_fail(err, LM_ERR_NOMEM, "out of memory making random tensor '%s'", name);
            return NULL; /* t, its name and data are owned already */
        }
        for (int64_t k = 0; k < chunks; k++) {
            float u = 0.5f * (random_unit(&w->random_state) + 1.0f); /* [0, 1) */
            from[k] = (int64_t)(u * (float)(pool - chunk));
            if (from[k] < 0 || from[k] > pool - chunk) from[k] = 0;
        }
        chunk_copy copy = {p, from, direct, n, chunk};
        lm_pool *threads = chunks > 64 ? convert_pool(w) : NULL;
        if (threads) lm_pool_run(threads, lm_pool_size(threads), copy_chunks, &copy);
        else if (chunks > 0) copy_chunks(&copy, 0, 1);
        free(from);
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
    report_taken(w, t);
    w->random_latest = t;
    w->random_latest_slot = w->n_random_owned - 1; /* its values, pushed last */
    return t;
}

/* The bytes on the backend, remembered for lm_weights_free. */
static lm_status import(lm_weights *w, const void *data, size_t bytes, const char *what,
                        lm_buffer **out, lm_error *err) {
    if (w->n_buffers == w->cap_buffers) {
        size_t grown = w->cap_buffers ? w->cap_buffers * 2 : 64;
        lm_buffer **bigger = realloc(w->buffers, grown * sizeof *bigger);
        if (!bigger) return lm_fail(err, LM_ERR_NOMEM, "out of memory importing '%s'", what);
        w->buffers = bigger;
        w->cap_buffers = grown;
    }
    lm_status st = lm_import_host(w->backend, data, bytes, what, out, err);
    if (st == LM_OK) w->buffers[w->n_buffers++] = *out;
    lm_tensor *t = w->random_latest;
    if (st == LM_OK && t && t->data == data && t->n_bytes == bytes && !lm_backend_is_host(w->backend)) {
        /* the device holds its copy; nothing reads a made-up tensor twice */
        free(w->random_owned[w->random_latest_slot]);
        w->random_owned[w->random_latest_slot] = NULL;
        t->data = NULL;
        w->random_latest = NULL;
    }
    return st;
}

static bool is_float_dtype(lm_dtype d) {
    return d == LM_DTYPE_BF16 || d == LM_DTYPE_F16 || d == LM_DTYPE_F32;
}

/* A ggml block format (a GGUF file's Q4_0, Q4_K, ...) the backend runs:
 * such a matrix is used as stored, already quantized. */
static bool is_runnable_block(const lm_weights *w, lm_dtype d) {
    return lm_dtype_is_block(d) && d != LM_DTYPE_Q8_0 && lm_backend_supports_weights(w->backend, d);
}

static const lm_tensor *require(lm_weights *w, const char *name, int n_dims, const int64_t *shape,
                                lm_error *err) {
    if (w->random) return random_tensor(w, name, n_dims, shape, n_dims >= 2 ? LM_DTYPE_BF16 : LM_DTYPE_F32, err);
    const lm_tensor *t = lm_weights_find(w, name);
    if (!t)
        lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s' is missing", lm_checkpoint_dir(w->checkpoint),
                name);
    else if (n_dims >= 2 && is_runnable_block(w, t->dtype)) {
        return t;
    } else if (!is_float_dtype(t->dtype)) {
        lm_fail(err, LM_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; expected BF16, F16 or F32",
                t->file, name, lm_dtype_name(t->dtype));
        t = NULL;
    }
    return t;
}

lm_status lm_weights_host_vector(lm_weights *w, const char *name, int64_t n, float offset,
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

lm_status lm_weights_import(lm_weights *w, const float *values, int64_t n, const char *what,
                            lm_mem *out, lm_error *err) {
    lm_buffer *buffer;
    lm_status st = import(w, values, sizeof(float) * (size_t)(n > 0 ? n : 1), what, &buffer, err);
    if (st == LM_OK) *out = lm_mem_of(buffer);
    return st;
}

lm_status lm_weights_vector(lm_weights *w, const char *name, int64_t n, float offset,
                            bool any_shape, lm_mem *out, lm_error *err) {
    float *host;
    lm_status st = lm_weights_host_vector(w, name, n, offset, any_shape, &host, err);
    return st == LM_OK ? lm_weights_import(w, host, n, name, out, err) : st;
}

int64_t lm_weights_tensor_parameters(const lm_weights *w, const lm_tensor *t) {
    for (size_t i = 0; i < w->n_counted; i++)
        if (w->counted[i].tensor == t) return w->counted[i].parameters;
    return t->n_elements;
}

/* Remembers what a quantized tensor stands for (no memory: the count
 * stays its elements, only `loom inspect`'s numbers are off). */
static void count_parameters(lm_weights *w, const lm_tensor *t, int64_t parameters) {
    if (!t || lm_weights_tensor_parameters(w, t) == parameters) return;
    if (w->n_counted == w->cap_counted) {
        size_t grown = w->cap_counted ? 2 * w->cap_counted : 64;
        struct lm_counted_params *bigger = realloc(w->counted, grown * sizeof *bigger);
        if (!bigger) return;
        w->counted = bigger;
        w->cap_counted = grown;
    }
    w->counted[w->n_counted++] = (struct lm_counted_params){t, parameters};
}

int64_t lm_weights_parameters_used(const lm_weights *w) {
    int64_t total = 0;
    for (size_t i = 0; i < w->n_used; i++) total += lm_weights_tensor_parameters(w, w->used[i]);
    return total;
}

void lm_weights_print_groups(const lm_weights *w, bool want_used, FILE *f) {
    lm_weights_print_groups_of(&w, 1, want_used, f);
}

void lm_weights_print_groups_of(const lm_weights *const *ws, int n_ws, bool want_used, FILE *f) {
    const lm_checkpoint *ck = n_ws > 0 ? ws[0]->checkpoint : NULL;
    size_t n = ck ? lm_checkpoint_count(ck) : 0;
    char last[128] = "";
    size_t count = 0;
    int64_t params = 0;
    for (size_t i = 0; i <= n; i++) {
        const lm_tensor *t = i < n ? lm_checkpoint_at(ck, i) : NULL;
        bool used = false;
        int user = 0;
        for (int k = 0; t && k < n_ws && !used; k++)
            if ((used = lm_weights_was_used(ws[k], t))) user = k;
        if (t && used != want_used) continue;
        char group[128] = "";
        if (t) { /* "model.visual.blocks.3.x" -> "model.visual" ; "mtp.fc.weight" -> "mtp" */
            const char *name = t->name;
            const char *cut = strchr(name, '.');
            if (cut && strncmp(name, "model.", 6) == 0) cut = strchr(cut + 1, '.');
            size_t len = cut ? (size_t)(cut - name) : strlen(name);
            if (len >= sizeof group) len = sizeof group - 1;
            memcpy(group, name, len);
        }
        if (strcmp(group, last) != 0) {
            if (count) fprintf(f, "    %-40s %6zu tensors, %lld parameters\n", last, count, (long long)params);
            snprintf(last, sizeof last, "%s", group);
            count = 0;
            params = 0;
        }
        if (t) {
            count++;
            params += used ? lm_weights_tensor_parameters(ws[user], t) : t->n_elements;
        }
    }
}

/* A float tensor of exactly `shape`, or an error that shows both shapes. */
static const lm_tensor *require_shape(lm_weights *w, const char *name, int n_dims,
                                      const int64_t *shape, lm_error *err) {
    const lm_tensor *t = require(w, name, n_dims, shape, err);
    if (!t) return NULL;
    bool same = t->n_dims == n_dims;
    for (int d = 0; same && d < n_dims; d++) same = t->shape[d] == shape[d];
    if (same) return t;
    char got[160] = "", want[160] = "";
    for (int d = 0; d < t->n_dims && d < LM_TENSOR_MAX_DIMS; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                 (long long)t->shape[d]);
    for (int d = 0; d < n_dims; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                 (long long)shape[d]);
    lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s' has shape [%s]; expected [%s]", t->file, name, got,
            want);
    return NULL;
}

lm_status lm_weights_flat_matrix(lm_weights *w, const char *name, int n_dims, const int64_t *shape,
                                 lm_matrix *out, lm_error *err) {
    const lm_tensor *t = require_shape(w, name, n_dims, shape, err);
    if (!t) return err->code;
    lm_buffer *buffer;
    lm_status st = import(w, t->data, t->n_bytes, name, &buffer, err);
    if (st != LM_OK) return st;
    *out = (lm_matrix){.data = lm_mem_of(buffer), .dtype = t->dtype, .rows = shape[0],
                       .cols = t->n_elements / (shape[0] > 0 ? shape[0] : 1)};
    return LM_OK;
}

lm_status lm_weights_conv2d_as_rows(lm_weights *w, const char *name, int64_t out_ch, int64_t in_ch,
                                    int64_t kh, int64_t kw, lm_matrix *out, lm_error *err) {
    const int64_t shape[4] = {out_ch, in_ch, kh, kw};
    const lm_tensor *t = require_shape(w, name, 4, shape, err);
    if (!t) return err->code;
    size_t elem = lm_dtype_size(t->dtype);
    char *moved = malloc(t->n_bytes ? t->n_bytes : 1);
    if (!moved || !push_pointer((void ***)&w->owned, &w->n_owned, &w->cap_owned, moved)) {
        free(moved);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory reordering '%s'", name);
    }
    const char *src = t->data;
    int64_t cols = kh * kw * in_ch;
    for (int64_t o = 0; o < out_ch; o++)
        for (int64_t c = 0; c < in_ch; c++)
            for (int64_t y = 0; y < kh; y++)
                for (int64_t x = 0; x < kw; x++) {
                    int64_t from = ((o * in_ch + c) * kh + y) * kw + x;
                    int64_t to = o * cols + (y * kw + x) * in_ch + c;
                    memcpy(moved + (size_t)to * elem, src + (size_t)from * elem, elem);
                }
    lm_buffer *buffer;
    lm_status st = import(w, moved, t->n_bytes, name, &buffer, err);
    if (st != LM_OK) return st;
    *out = (lm_matrix){.data = lm_mem_of(buffer), .dtype = t->dtype, .rows = out_ch, .cols = cols};
    return LM_OK;
}

lm_matrix lm_matrix_rows(const lm_matrix *m, int64_t first, int64_t rows) {
    return (lm_matrix){.data = lm_mem_bytes(m->data, (size_t)first * lm_dtype_row_bytes(m->dtype, m->cols)),
                       .dtype = m->dtype,
                       .rows = rows,
                       .cols = m->cols};
}

/* ---- matrices: as stored, Q8_0 made from float weights, or from FP8 ---- */

/* Host memory owned by w (freed with it), for weights made at load. */
static void *owned_bytes(lm_weights *w, size_t bytes, const char *name, lm_error *err) {
    void *p = lm_big_alloc(bytes ? bytes : 1);
    if (!p || !push_pointer((void ***)&w->owned, &w->n_owned, &w->cap_owned, p)) {
        free(p);
        lm_fail(err, LM_ERR_NOMEM, "out of memory converting '%s' (%zu MB)", name, bytes >> 20);
        return NULL;
    }
    return p;
}

static lm_status need_q8(lm_weights *w, const char *name, lm_error *err) {
    if (lm_backend_supports_weights(w->backend, LM_DTYPE_Q8_0)) return LM_OK;
    return lm_fail(err, LM_ERR_UNSUPPORTED,
                   "the %s backend has no int8 weights yet, which --quantize int8 needs ('%s'): run it with "
                   "--device cpu, or without --quantize (FP8 checkpoints load there as bf16)",
                   w->backend->ops->name, name);
}

/* What an FP8 matrix whose rows hold `cols` columns becomes: Q8_0 where
 * the backend takes int8 weights (float32 when cols is not a multiple of
 * LM_Q8_BLOCK: exact), else bf16 — a backend without int8 weights runs
 * the model at bf16's 2 bytes a weight rather than refusing it; e4m3 · scale rounded to bf16 moves a weight by at most 2^-9 of
 * itself, less than int8's rounding. */
static lm_dtype fp8_made_as(const lm_weights *w, int64_t cols) {
    if (!lm_backend_supports_weights(w->backend, LM_DTYPE_Q8_0)) return LM_DTYPE_BF16;
    return cols % LM_Q8_BLOCK == 0 ? LM_DTYPE_Q8_0 : LM_DTYPE_F32;
}

/* Whether an FP8 matrix (or a float one under --quantize fp8) of rows
 * holding columns [c0, c0 + n_cols) stays FP8, as FP8_B128: a matrix, not
 * a stack of experts (the MoE kernels read int8), on a backend with FP8
 * weights, its columns whole 128-blocks of the checkpoint's (each block's
 * scale then covers exactly one FP8_B128 block). */
void lm_weights_set_experts(lm_weights *w, bool experts) { w->loading_experts = experts; }

static bool fp8_kept(const lm_weights *w, int n_dims, int64_t c0, int64_t n_cols, bool from_fp8) {
    if (n_dims != 2 || w->loading_experts || c0 % LM_FP8_BLOCK != 0 || n_cols % LM_FP8_BLOCK != 0 ||
        !lm_backend_supports_weights(w->backend, LM_DTYPE_FP8_B128))
        return false;
    return !from_fp8 || w->quant.fp8_block_cols == LM_FP8_BLOCK;
}

/* Row r of a float tensor of `cols` columns as float32. */
static void float_row(const lm_tensor *t, int64_t r, int64_t cols, float *out) {
    const uint16_t *half = (const uint16_t *)t->data + r * cols;
    switch (t->dtype) {
    case LM_DTYPE_BF16:
        for (int64_t c = 0; c < cols; c++) out[c] = lm_bf16_to_f32(half[c]);
        return;
    case LM_DTYPE_F16:
        for (int64_t c = 0; c < cols; c++) out[c] = lm_f16_to_f32(half[c]);
        return;
    default: memcpy(out, (const float *)t->data + r * cols, sizeof(float) * (size_t)cols); return;
    }
}

/* The FP8 checkpoint's inverse-scale tensor of `t`, checked: name + "_scale_inv",
 * float, shape [n,] ceil(rows / br), ceil(cols / bc). */
static const lm_tensor *fp8_scales(lm_weights *w, const lm_tensor *t, const char *name, int n_dims,
                                   const int64_t *shape, lm_error *err) {
    int br = w->quant.fp8_block_rows, bc = w->quant.fp8_block_cols;
    if (br <= 0 || bc <= 0) {
        lm_fail(err, LM_ERR_FORMAT,
                "%s: tensor '%s' is F8_E4M3 but config.json has no quantization_config with quant_method "
                "\"fp8\" and a weight_block_size: loom reads block-scaled FP8 checkpoints only",
                t->file, name);
        return NULL;
    }
    char scale_name[320];
    snprintf(scale_name, sizeof scale_name, "%s_scale_inv", name);
    const lm_tensor *s = lm_weights_find(w, scale_name);
    if (!s) {
        lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s' is F8_E4M3 but its block scales '%s' are missing",
                t->file, name, scale_name);
        return NULL;
    }
    if (!is_float_dtype(s->dtype)) {
        lm_fail(err, LM_ERR_FORMAT, "%s: '%s' has dtype %s; expected F32, BF16 or F16", s->file,
                scale_name, lm_dtype_name(s->dtype));
        return NULL;
    }
    int64_t want[3] = {0};
    int d = 0;
    if (n_dims == 3) want[d++] = shape[0];
    want[d++] = (shape[n_dims - 2] + br - 1) / br;
    want[d++] = (shape[n_dims - 1] + bc - 1) / bc;
    bool same = s->n_dims == n_dims;
    for (int i = 0; same && i < n_dims; i++) same = s->shape[i] == want[i];
    if (!same) {
        char got[160] = "";
        for (int i = 0; i < s->n_dims && i < LM_TENSOR_MAX_DIMS; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                     (long long)s->shape[i]);
        char want_text[96] = "";
        for (int i = 0; i < n_dims; i++)
            snprintf(want_text + strlen(want_text), sizeof want_text - strlen(want_text), "%s%lld",
                     i ? ", " : "", (long long)want[i]);
        lm_fail(err, LM_ERR_FORMAT,
                "%s: '%s' has shape [%s]; expected [%s]: one scale per %dx%d block of '%s' "
                "(config.json's weight_block_size)",
                s->file, scale_name, got, want_text, br, bc, name);
        return NULL;
    }
    return s;
}

static float scale_at(const lm_tensor *s, int64_t i) {
    switch (s->dtype) {
    case LM_DTYPE_BF16: return lm_bf16_to_f32(((const uint16_t *)s->data)[i]);
    case LM_DTYPE_F16: return lm_f16_to_f32(((const uint16_t *)s->data)[i]);
    default: return ((const float *)s->data)[i];
    }
}

/* Row r (of rows_total = n * rows) of an FP8 tensor times its block scales. */
static lm_status fp8_row(const lm_weights *w, const lm_tensor *t, const lm_tensor *s, const char *name,
                         int64_t rows, int64_t cols, int64_t r, float *out, lm_error *err) {
    int br = w->quant.fp8_block_rows, bc = w->quant.fp8_block_cols;
    int64_t m = r / rows, rr = r % rows, srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
    const uint8_t *q = (const uint8_t *)t->data + r * cols;
    const int64_t sbase = (m * srows + rr / br) * scols;
    for (int64_t c0 = 0; c0 < cols; c0 += bc) {
        float scale = scale_at(s, sbase + c0 / bc);
        if (!isfinite(scale))
            return lm_fail(err, LM_ERR_FORMAT, "%s: a block scale of '%s' is not finite", s->file, name);
        int64_t c1 = c0 + bc < cols ? c0 + bc : cols;
        for (int64_t c = c0; c < c1; c++) {
            if (lm_e4m3_is_nan(q[c]))
                return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s' holds a NaN (row %lld, column %lld)",
                               t->file, name, (long long)r, (long long)c);
            out[c] = lm_e4m3_to_f32(q[c]) * scale;
        }
    }
    return LM_OK;
}

/* Columns [c0, c0 + n_cols) of row r of an FP8 tensor as an FP8_B128 row
 * at dst: its E4M3 bytes as stored, then one scale per 128 of them (the
 * checkpoint's block scale of that block, fp8_kept: 128 columns a block),
 * both checked as fp8_row checks them. */
static lm_status fp8_keep_row(const lm_weights *w, const lm_tensor *t, const lm_tensor *s, const char *name,
                              int64_t rows, int64_t cols, int64_t r, int64_t c0, int64_t n_cols, uint8_t *dst,
                              lm_error *err) {
    int br = w->quant.fp8_block_rows;
    int64_t m = r / rows, rr = r % rows, srows = (rows + br - 1) / br, scols = (cols + LM_FP8_BLOCK - 1) / LM_FP8_BLOCK;
    const uint8_t *q = (const uint8_t *)t->data + r * cols + c0;
    for (int64_t c = 0; c < n_cols; c++)
        if (lm_e4m3_is_nan(q[c]))
            return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s' holds a NaN (row %lld, column %lld)", t->file,
                           name, (long long)r, (long long)(c0 + c));
    memcpy(dst, q, (size_t)n_cols);
    for (int64_t b = 0; b < n_cols / LM_FP8_BLOCK; b++) {
        float scale = scale_at(s, (m * srows + rr / br) * scols + c0 / LM_FP8_BLOCK + b);
        if (!isfinite(scale))
            return lm_fail(err, LM_ERR_FORMAT, "%s: a block scale of '%s' is not finite", s->file, name);
        memcpy(dst + n_cols + 4 * b, &scale, sizeof scale);
    }
    return LM_OK;
}

/* ---- MLX affine-quantized matrices (models/mlx_quant.h) ---- */

/* A matrix stored as MLX codes: `weight` uint32 [n·rows, words], its
 * `scales` and `biases` [n·rows, groups], all checked. */
typedef struct {
    const lm_tensor *weight, *scales, *biases;
    int bits, group;
    int64_t words, groups;
} mlx_source;

/* Row r of an MLX matrix of `cols` weights in float32. */
static lm_status mlx_row(const mlx_source *m, int64_t r, int64_t cols, float *out, lm_error *err) {
    float *sb = malloc(sizeof(float) * (size_t)(2 * m->groups));
    if (!sb) return lm_fail(err, LM_ERR_NOMEM, "out of memory decoding '%s'", m->weight->name);
    for (int64_t g = 0; g < m->groups; g++) {
        sb[g] = scale_at(m->scales, r * m->groups + g);
        sb[m->groups + g] = scale_at(m->biases, r * m->groups + g);
    }
    lm_mlx_dequantize_row((const uint32_t *)m->weight->data + r * m->words, sb, sb + m->groups, m->bits, m->group,
                          cols, out);
    free(sb);
    return LM_OK;
}

/* Columns [c0, c0 + n_cols) of row r of an MLX 4-bit matrix as Q4_1
 * blocks at dst (mlx_fits_q4_1 said every group fits). */
static lm_status mlx_q4_1_row(const mlx_source *m, int64_t r, int64_t c0, int64_t n_cols, uint8_t *dst,
                              lm_error *err) {
    float *sb = malloc(sizeof(float) * (size_t)(2 * m->groups));
    if (!sb) return lm_fail(err, LM_ERR_NOMEM, "out of memory repacking '%s'", m->weight->name);
    for (int64_t g = 0; g < m->groups; g++) {
        sb[g] = scale_at(m->scales, r * m->groups + g);
        sb[m->groups + g] = scale_at(m->biases, r * m->groups + g);
    }
    lm_mlx_row_to_q4_1((const uint32_t *)m->weight->data + r * m->words, sb, sb + m->groups, m->group, c0, n_cols,
                       dst);
    free(sb);
    return LM_OK;
}

/* One of an MLX matrix's companions (`<X>.scales`, `<X>.biases`): float,
 * of shape [n,] rows, groups. */
static const lm_tensor *mlx_companion(lm_weights *w, const char *prefix, const char *suffix, const lm_tensor *t,
                                      int n_dims, const int64_t *shape, int64_t groups, lm_error *err) {
    char cname[320];
    snprintf(cname, sizeof cname, "%s.%s", prefix, suffix);
    const lm_tensor *c = lm_weights_find(w, cname);
    if (!c) {
        lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s.weight' is MLX-quantized (uint32) but its '%s' are missing",
                t->file, prefix, cname);
        return NULL;
    }
    if (!is_float_dtype(c->dtype)) {
        lm_fail(err, LM_ERR_FORMAT, "%s: '%s' has dtype %s; expected BF16, F16 or F32", c->file, cname,
                lm_dtype_name(c->dtype));
        return NULL;
    }
    bool same = c->n_dims == n_dims && c->shape[n_dims - 1] == groups;
    for (int d = 0; same && d < n_dims - 1; d++) same = c->shape[d] == shape[d];
    if (!same) {
        lm_fail(err, LM_ERR_FORMAT,
                "%s: '%s' has %d dims, the last %lld; expected %lld groups of %lld rows (config.json's "
                "quantization group_size)",
                c->file, cname, c->n_dims, (long long)c->shape[c->n_dims - 1], (long long)groups,
                (long long)shape[n_dims - 2]);
        return NULL;
    }
    return c;
}

/* The bits and group size of module `prefix` (X of X.weight): its own
 * entry in config.json's "quantization" when it has one (read once per
 * lm_weights), else the top level's already in *bits, *group.  An entry
 * of false (not quantized) for a uint32 tensor is an error. */
static lm_status module_quantization(lm_weights *w, const char *prefix, const lm_tensor *t, int *bits, int *group,
                                     lm_error *err) {
    if (!w->quant.mlx_overrides) return LM_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", lm_checkpoint_dir(w->checkpoint));
    bool first = !w->mlx_config;
    if (first && lm_json_read_file(path, MAX_CONFIG_BYTES, &w->mlx_config, err) != LM_OK) return err->code;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(w->mlx_config, "quantization");
    if (!cJSON_IsObject(q)) q = cJSON_GetObjectItemCaseSensitive(w->mlx_config, "quantization_config");
    /* once: every module named must be in the checkpoint (a typo, or a
     * config of another model, would otherwise go unnoticed) */
    for (const cJSON *item = first && cJSON_IsObject(q) ? q->child : NULL; item; item = item->next) {
        const char *key = item->string ? item->string : "";
        if (!strcmp(key, "bits") || !strcmp(key, "group_size") || !strcmp(key, "mode")) continue;
        char weight[320];
        snprintf(weight, sizeof weight, "%s.weight", key);
        if (!lm_checkpoint_find(w->checkpoint, weight))
            return lm_fail(err, LM_ERR_FORMAT,
                           "%s: quantization.%s names a module the checkpoint does not have (no tensor '%s')", path,
                           key, weight);
    }
    const cJSON *own = cJSON_IsObject(q) ? cJSON_GetObjectItemCaseSensitive(q, prefix) : NULL;
    if (!own) return LM_OK;
    if (cJSON_IsFalse(own))
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: tensor '%s.weight' is uint32 (MLX-quantized) but config.json's quantization.%s is false "
                       "(not quantized)",
                       t->file, prefix, prefix);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(own, "bits"), *g = cJSON_GetObjectItemCaseSensitive(own, "group_size");
    if (!lm_json_int_value(b, bits) || !lm_json_int_value(g, group)) /* checked by lm_weights_quant_config */
        return lm_fail(err, LM_ERR_FORMAT, "%s: quantization.%s has no integer bits and group_size", path, prefix);
    return LM_OK;
}

/* Whether `name` is stored as MLX codes (a uint32 `X.weight`; never in
 * random mode); if so *m, checked against `shape` ([rows, cols] or [n,
 * rows, cols]), or an error (returns true, err set, m->scales NULL). */
static bool find_mlx(lm_weights *w, const char *name, int n_dims, const int64_t *shape, mlx_source *m,
                     lm_error *err) {
    memset(m, 0, sizeof *m);
    const lm_tensor *t = w->random ? NULL : lm_checkpoint_find(w->checkpoint, name);
    if (!t || t->dtype != LM_DTYPE_U32) return false;
    lm_weights_find(w, name); /* marks it used */
    size_t len = strlen(name);
    if (len < 8 || strcmp(name + len - 7, ".weight") != 0 || len - 7 >= 300) {
        lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s' is uint32, which loom reads only as an MLX quantized X.weight",
                t->file, name);
        return true;
    }
    if (w->quant.mlx_bits <= 0) {
        lm_fail(err, LM_ERR_FORMAT,
                "%s: tensor '%s' is uint32 (MLX-quantized) but config.json has no \"quantization\" with bits and "
                "group_size",
                t->file, name);
        return true;
    }
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 7), name);
    int bits = w->quant.mlx_bits, group = w->quant.mlx_group;
    if (module_quantization(w, prefix, t, &bits, &group, err) != LM_OK) return true;
    int64_t cols = shape[n_dims - 1];
    char what[600];
    snprintf(what, sizeof what, "%s: tensor '%s'", t->file, name);
    if (lm_mlx_check_row(what, cols, bits, group, err) != LM_OK) return true;
    int64_t words = lm_mlx_packed_words(cols, bits), groups = cols / group;
    bool same = t->n_dims == n_dims && t->shape[n_dims - 1] == words;
    for (int d = 0; same && d < n_dims - 1; d++) same = t->shape[d] == shape[d];
    if (!same) {
        lm_fail(err, LM_ERR_FORMAT,
                "%s: tensor '%s' has %d dims, the last %lld words; expected %lld rows of %lld words (%lld weights "
                "at %d bits, config.json's quantization)",
                t->file, name, t->n_dims, (long long)t->shape[t->n_dims - 1], (long long)shape[n_dims - 2],
                (long long)words, (long long)cols, bits);
        return true;
    }
    const lm_tensor *scales = mlx_companion(w, prefix, "scales", t, n_dims, shape, groups, err);
    const lm_tensor *biases = scales ? mlx_companion(w, prefix, "biases", t, n_dims, shape, groups, err) : NULL;
    if (!biases) return true;
    *m = (mlx_source){t, scales, biases, bits, group, words, groups};
    count_parameters(w, t, t->n_elements / words * cols);
    count_parameters(w, scales, 0);
    count_parameters(w, biases, 0);
    return true;
}

/* Whether every group of an MLX 4-bit matrix is exactly a Q4_1 block's d
 * and m (lm_mlx_group_fits_q4_1; a group's codes are read only when a
 * scale is not a float16). */
static bool mlx_fits_q4_1(const mlx_source *m) {
    int64_t n_rows = m->weight->n_elements / (m->words > 0 ? m->words : 1);
    uint8_t codes[128];
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t g = 0; g < m->groups; g++) {
            float scale = scale_at(m->scales, r * m->groups + g), bias = scale_at(m->biases, r * m->groups + g);
            if (lm_mlx_group_fits_q4_1(scale, bias, NULL, 0)) continue;
            lm_mlx_unpack_codes((const uint32_t *)m->weight->data + r * m->words, m->bits, g * m->group, m->group,
                                codes);
            if (!lm_mlx_group_fits_q4_1(scale, bias, codes, m->group)) return false;
        }
    return true;
}

/* What an MLX matrix (its columns [c0, c0 + n_cols)) becomes: 4-bit codes
 * stay 4-bit as ggml Q4_1 blocks, the same weights exactly, where the
 * backend runs Q4_1, the columns are whole 32-blocks and every scale and
 * bias is a float16 (mlx_fits_q4_1) — even under --quantize int8, which
 * would only round them again at twice the bytes; a rank's slice whose
 * columns are not whole 32-blocks then float32, exact; else Q8_0 for a Linear
 * layer under --quantize int8 (cols a multiple of LM_Q8_BLOCK), else its
 * scales' dtype (bf16 as mlx itself computes; float32 for f16 scales,
 * which store_row lacks). */
static lm_dtype mlx_made_as(const lm_weights *w, const mlx_source *m, bool linear, int64_t c0, int64_t cols) {
    if (m->bits == 4 && lm_backend_supports_weights(w->backend, LM_DTYPE_GGML_Q4_1) && mlx_fits_q4_1(m))
        /* a rank's window of odd 32-blocks: float32, the whole model's weights still */
        return c0 % 32 == 0 && cols % 32 == 0 ? LM_DTYPE_GGML_Q4_1 : LM_DTYPE_F32;
    if (linear && w->quant.int8_linear && cols % LM_Q8_BLOCK == 0 &&
        lm_backend_supports_weights(w->backend, LM_DTYPE_Q8_0))
        return LM_DTYPE_Q8_0;
    return m->scales->dtype == LM_DTYPE_BF16 ? LM_DTYPE_BF16 : LM_DTYPE_F32;
}

/* ---- GPTQ / AWQ int4 matrices (models/gptq_quant.h) ---- */

/* A matrix stored as GPTQ or AWQ int4 (X.qweight, X.qzeros, X.scales,
 * X.g_idx), checked; in_order: its groups run in column order (no
 * desc_act permutation). */
typedef struct {
    lm_int4_matrix m;
    const lm_tensor *qweight;
    bool in_order;
} int4_source;


/* Companion `suffix` of module prefix, of one of the dtypes allowed and
 * exactly the shape [d0, d1] (d1 < 0: [d0]); NULL with err set when absent
 * or wrong. */
static const lm_tensor *int4_companion(lm_weights *w, const char *prefix, const char *suffix, bool ints,
                                       int64_t d0, int64_t d1, lm_error *err) {
    char cname[320];
    snprintf(cname, sizeof cname, "%s.%s", prefix, suffix);
    const lm_tensor *c = lm_weights_find(w, cname);
    const char *method = int4_method_name(w->quant.int4.method);
    if (!c) {
        lm_fail(err, LM_ERR_FORMAT, "%s: %s module '%s' has no '%s'", lm_checkpoint_dir(w->checkpoint), method,
                prefix, cname);
        return NULL;
    }
    bool dtype_ok = ints ? c->dtype == LM_DTYPE_I32 || c->dtype == LM_DTYPE_U32 : is_float_dtype(c->dtype);
    if (!dtype_ok) {
        lm_fail(err, LM_ERR_FORMAT, "%s: '%s' has dtype %s; expected %s", c->file, cname, lm_dtype_name(c->dtype),
                ints ? "I32" : "F16, BF16 or F32");
        return NULL;
    }
    int want_dims = d1 < 0 ? 1 : 2;
    if (c->n_dims != want_dims || c->shape[0] != d0 || (d1 >= 0 && c->shape[1] != d1)) {
        char want[64];
        if (d1 < 0) snprintf(want, sizeof want, "[%lld]", (long long)d0);
        else snprintf(want, sizeof want, "[%lld, %lld]", (long long)d0, (long long)d1);
        lm_fail(err, LM_ERR_FORMAT, "%s: '%s' has %d dims [%lld%s...]; expected %s (%s, config.json's group_size %d)",
                c->file, cname, c->n_dims, (long long)c->shape[0], c->n_dims > 1 ? ", " : "", want, method,
                w->quant.int4.group_size);
        return NULL;
    }
    return c;
}

/* Whether `name` (X.weight) is stored as GPTQ/AWQ int4: X.qweight exists
 * (never in random mode); if so *q checked against `shape`, or an error
 * (returns true, err set, q->qweight NULL). */
static bool find_int4(lm_weights *w, const char *name, int n_dims, const int64_t *shape, int4_source *q,
                      lm_error *err) {
    memset(q, 0, sizeof *q);
    size_t len = strlen(name);
    if (w->random || len < 8 || strcmp(name + len - 7, ".weight") != 0 || len - 7 >= 300) return false;
    char prefix[300], qname[320];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 7), name);
    snprintf(qname, sizeof qname, "%s.qweight", prefix);
    const lm_tensor *t = lm_checkpoint_find(w->checkpoint, qname);
    if (!t) return false;
    lm_weights_find(w, qname);
    const lm_int4_quant *cfg = &w->quant.int4;
    if (cfg->method == LM_INT4_NONE) {
        lm_fail(err, LM_ERR_FORMAT,
                "%s: '%s' is GPTQ/AWQ-quantized but config.json has no quantization_config with quant_method "
                "\"gptq\" or \"awq\"",
                t->file, qname);
        return true;
    }
    const char *method = int4_method_name(cfg->method);
    if (n_dims != 2) {
        lm_fail(err, LM_ERR_UNSUPPORTED, "%s: '%s' is %s int4 where loom expects a stack of matrices", t->file, qname,
                method);
        return true;
    }
    int64_t out = shape[0], in = shape[1], group = lm_int4_group_cols(cfg->group_size, in),
            groups = lm_int4_groups(cfg, in);
    bool awq = cfg->method == LM_INT4_AWQ;
    if (out % 8 != 0 || in % 8 != 0 || (awq && in % group != 0)) {
        lm_fail(err, LM_ERR_FORMAT,
                "%s: '%s' is %s int4 of a [%lld, %lld] matrix: its rows and columns must be multiples of 8%s",
                t->file, qname, method, (long long)out, (long long)in, awq ? " and of group_size" : "");
        return true;
    }
    if (t->dtype != LM_DTYPE_I32 && t->dtype != LM_DTYPE_U32) {
        lm_fail(err, LM_ERR_FORMAT, "%s: '%s' has dtype %s; expected I32 (8 codes of 4 bits a word)", t->file,
                qname, lm_dtype_name(t->dtype));
        return true;
    }
    int64_t d0 = awq ? in : in / 8, d1 = awq ? out / 8 : out;
    if (t->n_dims != 2 || t->shape[0] != d0 || t->shape[1] != d1) {
        lm_fail(err, LM_ERR_FORMAT,
                "%s: '%s' has %d dims [%lld%s...]; expected [%lld, %lld]: %s packs the [%lld, %lld] weight 8 codes "
                "a word along its %s (config.json's bits 4)",
                t->file, qname, t->n_dims, (long long)t->shape[0], t->n_dims > 1 ? ", " : "", (long long)d0,
                (long long)d1, method, (long long)out, (long long)in, awq ? "rows" : "columns");
        return true;
    }
    const lm_tensor *zeros = int4_companion(w, prefix, "qzeros", true, groups, out / 8, err);
    const lm_tensor *scales = zeros ? int4_companion(w, prefix, "scales", false, groups, out, err) : NULL;
    if (!scales) return true;
    const lm_tensor *g_idx = NULL;
    char gname[320];
    snprintf(gname, sizeof gname, "%s.g_idx", prefix);
    if (!awq && lm_checkpoint_find(w->checkpoint, gname) &&
        !(g_idx = int4_companion(w, prefix, "g_idx", true, in, -1, err)))
        return true;
    q->m = (lm_int4_matrix){.method = cfg->method, .qweight = t->data, .qzeros = zeros->data, .scales = scales->data,
                            .scales_dtype = scales->dtype, .g_idx = g_idx ? g_idx->data : NULL, .out = out, .in = in,
                            .group = group, .groups = groups, .zero_offset = cfg->zero_offset};
    int64_t bad = -1;
    q->in_order = lm_int4_gidx_in_order(&q->m, &bad);
    if (bad >= 0) {
        lm_fail(err, LM_ERR_FORMAT, "%s: '%s' puts column %lld in group %d; the matrix has %lld groups", g_idx->file,
                gname, (long long)bad, (int)q->m.g_idx[bad], (long long)groups);
        return true;
    }
    q->qweight = t;
    count_parameters(w, t, out * in);
    count_parameters(w, zeros, 0);
    count_parameters(w, scales, 0);
    count_parameters(w, g_idx, 0);
    return true;
}

/* What an int4 matrix's columns [c0, c0 + n_cols) become: Q4_0 (every
 * zero 8) or Q5_0 blocks holding its weights exactly, where its groups
 * run in order in whole 32-column blocks, its scales are float16 and the
 * backend runs the format; else decoded: float32 on a host backend (exact,
 * 4 bytes a weight: the cpu's numbers stay the checkpoint's), bf16 on a
 * device (2 bytes; a weight moves by at most 2^-9 of itself), as FP8
 * checkpoints there. */
static lm_dtype int4_made_as(const lm_weights *w, const int4_source *q, int64_t c0, int64_t n_cols) {
    lm_dtype decoded = lm_backend_is_host(w->backend) ? LM_DTYPE_F32 : LM_DTYPE_BF16;
    if (!q->in_order || q->m.group % 32 != 0 || c0 % 32 != 0 || n_cols % 32 != 0 || !lm_int4_scales_are_f16(&q->m))
        return decoded;
    lm_dtype d = lm_int4_zeros_all_8(&q->m) ? LM_DTYPE_GGML_Q4_0 : LM_DTYPE_GGML_Q5_0;
    return lm_backend_supports_weights(w->backend, d) ? d : decoded;
}

/* Row i of the slice: the tensor's row. */
static int64_t slice_row(const lm_weights_slice *sl, int64_t i) {
    for (int r = 0; r < sl->n_runs; r++) {
        if (i < sl->runs[r].count) return sl->runs[r].first + i;
        i -= sl->runs[r].count;
    }
    return i; /* no runs: every row */
}

/* Where a converted matrix's rows come from: matrices [first, first +
 * count) of the tensor's n matrices of `rows` rows and `cols` columns,
 * each cut to `slice` (s_rows of its rows, columns [c0, c0 + n_cols)). */
typedef struct {
    int64_t rows, cols, first, count;
    const lm_weights_slice *slice;
    int64_t s_rows, c0, n_cols;
} row_source;

/* One float32 row made `dtype` at dst: Q8_0 blocks, bf16 (nearest even)
 * or float32 as it is.  False when a value is not finite. */
static bool store_row(const float *row, int64_t cols, lm_dtype dtype, uint8_t *dst) {
    if (dtype == LM_DTYPE_Q8_0) return lm_q8_quantize_row(row, cols, dst);
    if (dtype == LM_DTYPE_FP8_B128) return lm_fp8_quantize_row(row, cols, dst);
    for (int64_t c = 0; c < cols; c++)
        if (!isfinite(row[c])) return false;
    if (dtype == LM_DTYPE_BF16) {
        uint16_t *out = (uint16_t *)dst;
        for (int64_t c = 0; c < cols; c++) out[c] = lm_f32_to_bf16(row[c]);
    } else {
        memcpy(dst, row, sizeof(float) * (size_t)cols);
    }
    return true;
}

/* One conversion split over a pool's tasks (convert_rows): task k makes
 * rows [begin, end) of its share; the first row a task cannot make ends it
 * and is kept with its error, so the lowest failing row is reported
 * whatever the split.  Rows are independent: the bytes do not depend on
 * the number of threads. */
typedef struct {
    lm_weights *w;
    const lm_tensor *t, *s;
    const mlx_source *mlx; /* NULL: t is float or FP8 */
    const int4_source *int4; /* GPTQ / AWQ (t is its qweight) */
    const char *name;
    const row_source *src;
    lm_dtype dtype;
    uint8_t *dst;
    size_t row_bytes;
    struct convert_failure {
        lm_status st;
        lm_error err;
    } *failed; /* [n_tasks]; st LM_OK: the task made all its rows */
} convert_job;

static void convert_task(void *ctx, int task, int n_tasks) {
    convert_job *j = ctx;
    const row_source *src = j->src;
    struct convert_failure *f = &j->failed[task];
    long begin, end;
    lm_split_range((long)(src->count * src->s_rows), n_tasks, task, &begin, &end);
    float *row = malloc(sizeof(float) * (size_t)(src->cols > 0 ? src->cols : 1));
    if (!row) {
        f->st = lm_fail(&f->err, LM_ERR_NOMEM, "out of memory converting '%s'", j->name);
        return;
    }
    for (int64_t i = begin; i < end && f->st == LM_OK; i++) {
        int64_t r = (src->first + i / src->s_rows) * src->rows + slice_row(src->slice, i % src->s_rows);
        if (j->s && j->dtype == LM_DTYPE_FP8_B128) { /* FP8 kept: its bytes, no float detour */
            f->st = fp8_keep_row(j->w, j->t, j->s, j->name, src->rows, src->cols, r, src->c0, src->n_cols,
                                 j->dst + (size_t)i * j->row_bytes, &f->err);
            continue;
        }
        if (j->int4 && lm_dtype_is_block(j->dtype)) { /* codes kept as ggml blocks */
            lm_int4_row_to_blocks(&j->int4->m, r, src->c0, src->n_cols, j->dtype, j->dst + (size_t)i * j->row_bytes);
            continue;
        }
        if (j->mlx && j->dtype == LM_DTYPE_GGML_Q4_1) { /* the codes kept: no float detour */
            f->st = mlx_q4_1_row(j->mlx, r, src->c0, src->n_cols, j->dst + (size_t)i * j->row_bytes, &f->err);
            continue;
        }
        if (j->int4) lm_int4_dequantize_row(&j->int4->m, r, row);
        else if (j->mlx) f->st = mlx_row(j->mlx, r, src->cols, row, &f->err);
        else if (j->s) f->st = fp8_row(j->w, j->t, j->s, j->name, src->rows, src->cols, r, row, &f->err);
        else float_row(j->t, r, src->cols, row);
        if (f->st == LM_OK && !store_row(row + src->c0, src->n_cols, j->dtype, j->dst + (size_t)i * j->row_bytes))
            f->st = lm_fail(&f->err, LM_ERR_FORMAT, "%s: tensor '%s' row %lld holds a value that is not finite%s",
                            j->t->file, j->name, (long long)r, j->s ? " (times its block scale)" : "");
    }
    free(row);
}

/* The matrix [count · s_rows, n_cols] of tensor t's rows (src) made
 * `dtype` (Q8_0, BF16 or F32) on the host row by row — from float weights,
 * or FP8 weights times their block scales s — then imported.  Large
 * matrices are made on a pool of threads (the same bytes). */
static lm_status convert_rows_from(lm_weights *w, const lm_tensor *t, const lm_tensor *s, const mlx_source *mlx,
                                   const int4_source *int4, const char *name, const row_source *src, lm_dtype dtype,
                                   lm_matrix *out, lm_error *err) {
    int64_t n_rows = src->count * src->s_rows;
    size_t row_bytes = lm_dtype_row_bytes(dtype, src->n_cols), bytes = row_bytes * (size_t)n_rows;
    uint8_t *dst = owned_bytes(w, bytes, name, err);
    if (!dst) return err->code;
    lm_pool *pool = n_rows * src->cols >= CONVERT_PARALLEL_MIN ? convert_pool(w) : NULL;
    int n_tasks = pool ? lm_pool_size(pool) : 1;
    if (n_tasks > n_rows) n_tasks = n_rows > 0 ? (int)n_rows : 1;
    convert_job job = {w,     t,   s,         mlx, int4, name, src,
                       dtype, dst, row_bytes, calloc((size_t)n_tasks, sizeof *job.failed)};
    if (!job.failed) return lm_fail(err, LM_ERR_NOMEM, "out of memory converting '%s'", name);
    if (pool && n_tasks > 1) lm_pool_run(pool, n_tasks, convert_task, &job);
    else convert_task(&job, 0, 1);
    lm_status st = LM_OK;
    for (int k = 0; k < n_tasks && st == LM_OK; k++)
        if (job.failed[k].st != LM_OK) {
            *err = job.failed[k].err;
            st = job.failed[k].st;
        }
    free(job.failed);
    if (st != LM_OK) return st;
    lm_buffer *buffer;
    st = import(w, dst, bytes, name, &buffer, err);
    if (st != LM_OK) return st;
    if (dtype == LM_DTYPE_Q8_0) w->q8_bytes += bytes;
    if (dtype == LM_DTYPE_FP8_B128) {
        if (s) w->fp8_kept_bytes += bytes;
        else w->fp8_made_bytes += bytes;
    }
    if (s && dtype == LM_DTYPE_BF16) w->fp8_bf16_bytes += bytes;
    if (int4 && lm_dtype_is_block(dtype)) {
        w->int4_kept_bytes += bytes;
        w->int4_kept_matrices++;
    } else if (int4) {
        w->int4_f32_bytes += bytes;
        w->int4_f32_matrices++;
        w->int4_decoded = dtype;
        if (!int4->in_order) w->int4_f32_permuted++;
    }
    if (mlx && dtype == LM_DTYPE_GGML_Q4_1) {
        w->mlx_kept_bytes += bytes;
        w->mlx_kept_matrices++;
    } else if (mlx) {
        w->mlx_bytes += bytes;
        w->mlx_made = dtype;
        w->mlx_made_bits = mlx->bits;
        w->mlx_made_matrices++;
    }
    *out = (lm_matrix){.data = lm_mem_of(buffer), .dtype = dtype, .rows = n_rows, .cols = src->n_cols};
    return LM_OK;
}

static lm_status convert_rows(lm_weights *w, const lm_tensor *t, const lm_tensor *s, const mlx_source *mlx,
                              const char *name, const row_source *src, lm_dtype dtype, lm_matrix *out,
                              lm_error *err) {
    return convert_rows_from(w, t, s, mlx, NULL, name, src, dtype, out, err);
}

/* Whether `name` is stored F8_E4M3 (not in random mode); if so *t and its
 * checked block scales *s, or an error (*t set, *s NULL) when its shape
 * is not `shape` or its scales are wrong. */
static bool find_fp8(lm_weights *w, const char *name, int n_dims, const int64_t *shape, const lm_tensor **t,
                     const lm_tensor **s, lm_error *err) {
    *t = w->random ? NULL : lm_checkpoint_find(w->checkpoint, name);
    *s = NULL;
    if (!*t || (*t)->dtype != LM_DTYPE_F8_E4M3) return false;
    lm_weights_find(w, name); /* marks it used */
    bool same = (*t)->n_dims == n_dims;
    for (int d = 0; same && d < n_dims; d++) same = (*t)->shape[d] == shape[d];
    if (!same)
        lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%s' has %d dims [%lld, %lld...]; expected %s[%lld, %lld]", (*t)->file,
                name, (*t)->n_dims, (long long)(*t)->shape[0], (long long)((*t)->n_dims > 1 ? (*t)->shape[1] : 0),
                n_dims == 3 ? "a stack of " : "", (long long)shape[n_dims - 2], (long long)shape[n_dims - 1]);
    else
        *s = fp8_scales(w, *t, name, n_dims, shape, err);
    return true;
}

static bool was_released(const lm_weights *w, const lm_tensor *t) {
    for (size_t i = 0; i < w->n_released; i++)
        if (w->released[i] == t) return true;
    return false;
}

/* After t's data was converted: its memory goes back to the system (the
 * int8 model then holds about half the bytes of the bf16 one), and t is
 * never handed out again. */
static void release_source(lm_weights *w, const lm_tensor *t) {
    if (push_pointer((void ***)&w->released, &w->n_released, &w->cap_released, (void *)t))
        lm_big_release(t->data, t->n_bytes);
}

/* A matrix [rows, cols] (n_dims 2) or a stack [n, rows, cols] (n_dims 3). */
static lm_status load_matrix(lm_weights *w, const char *name, int n_dims, int64_t n, int64_t rows,
                             int64_t cols, bool linear, lm_matrix *out, lm_error *err) {
    const int64_t shape2[2] = {rows, cols}, shape3[3] = {n, rows, cols};
    const int64_t *shape = n_dims == 3 ? shape3 : shape2;
    const lm_weights_slice whole = {0};
    const row_source all = {.rows = rows, .cols = cols, .first = 0, .count = n, .slice = &whole,
                            .s_rows = rows, .c0 = 0, .n_cols = cols};
    const lm_tensor *t, *s;
    mlx_source mlx;
    int4_source int4;
    if (find_int4(w, name, n_dims, shape, &int4, err))
        return int4.qweight ? convert_rows_from(w, int4.qweight, NULL, NULL, &int4, name, &all,
                                                int4_made_as(w, &int4, 0, cols), out, err)
                            : err->code;
    if (find_mlx(w, name, n_dims, shape, &mlx, err)) {
        if (!mlx.scales) return err->code;
        if (was_released(w, mlx.weight))
            return lm_fail(err, LM_ERR_INVALID, "'%s' was asked for twice after its conversion", name);
        return convert_rows(w, mlx.weight, NULL, &mlx, name, &all, mlx_made_as(w, &mlx, linear, 0, cols), out, err);
    }
    if (find_fp8(w, name, n_dims, shape, &t, &s, err)) {
        if (!s) return err->code;
        if (was_released(w, t))
            return lm_fail(err, LM_ERR_INVALID, "'%s' was asked for twice after its conversion", name);
        lm_dtype made = fp8_kept(w, n_dims, 0, cols, true) ? LM_DTYPE_FP8_B128 : fp8_made_as(w, cols);
        lm_status st = convert_rows(w, t, s, NULL, name, &all, made, out, err);
        if (st == LM_OK) release_source(w, t);
        return st;
    }
    t = require_shape(w, name, n_dims, shape, err);
    if (!t) return err->code;
    if (was_released(w, t))
        return lm_fail(err, LM_ERR_INVALID, "'%s' was asked for twice after its conversion", name);
    if (linear && w->quant.int8_linear && cols % LM_Q8_BLOCK == 0 && !lm_dtype_is_block(t->dtype)) {
        if (need_q8(w, name, err) != LM_OK) return err->code;
        lm_status st = convert_rows(w, t, NULL, NULL, name, &all, LM_DTYPE_Q8_0, out, err);
        if (st == LM_OK) release_source(w, t);
        return st;
    }
    if (linear && w->quant.fp8_linear && !lm_dtype_is_block(t->dtype) && fp8_kept(w, n_dims, 0, cols, false)) {
        lm_status st = convert_rows(w, t, NULL, NULL, name, &all, LM_DTYPE_FP8_B128, out, err);
        if (st == LM_OK) release_source(w, t);
        return st;
    }
    lm_buffer *buffer;
    lm_status st = import(w, t->data, t->n_bytes, name, &buffer, err);
    if (st != LM_OK) return st;
    *out = (lm_matrix){.data = lm_mem_of(buffer), .dtype = t->dtype, .rows = n * rows, .cols = cols};
    return LM_OK;
}

lm_status lm_weights_matrix(lm_weights *w, const char *name, int64_t rows, int64_t cols,
                            lm_matrix *out, lm_error *err) {
    return load_matrix(w, name, 2, 1, rows, cols, false, out, err);
}

lm_status lm_weights_linear(lm_weights *w, const char *name, int64_t rows, int64_t cols,
                            lm_matrix *out, lm_error *err) {
    return load_matrix(w, name, 2, 1, rows, cols, true, out, err);
}

lm_status lm_weights_stacked(lm_weights *w, const char *name, int64_t n, int64_t rows, int64_t cols,
                             lm_matrix *out, lm_error *err) {
    return load_matrix(w, name, 3, n, rows, cols, false, out, err);
}

lm_status lm_weights_linear_stacked(lm_weights *w, const char *name, int64_t n, int64_t rows,
                                    int64_t cols, lm_matrix *out, lm_error *err) {
    return load_matrix(w, name, 3, n, rows, cols, true, out, err);
}

/* ---- a rank's slice of a matrix (tensor parallelism) ---- */

static lm_status check_slice(const char *name, int64_t rows, int64_t cols, const lm_weights_slice *sl,
                             int64_t *out_rows, int64_t *out_cols, lm_error *err) {
    if (sl->n_runs < 0 || sl->n_runs > LM_SLICE_MAX_RUNS)
        return lm_fail(err, LM_ERR_INVALID, "'%s': a slice of %d runs of rows (at most %d)", name, sl->n_runs,
                       LM_SLICE_MAX_RUNS);
    int64_t total = sl->n_runs ? 0 : rows;
    for (int i = 0; i < sl->n_runs; i++) {
        int64_t first = sl->runs[i].first, count = sl->runs[i].count;
        if (first < 0 || count <= 0 || first > rows - count)
            return lm_fail(err, LM_ERR_INVALID, "'%s': rows [%lld, %lld) are not inside its %lld rows", name,
                           (long long)first, (long long)(first + count), (long long)rows);
        total += count;
    }
    int64_t c0 = sl->col_first, cn = sl->col_count ? sl->col_count : cols - c0;
    if (c0 < 0 || cn <= 0 || c0 > cols - cn)
        return lm_fail(err, LM_ERR_INVALID, "'%s': columns [%lld, %lld) are not inside its %lld columns", name,
                       (long long)c0, (long long)(c0 + cn), (long long)cols);
    *out_rows = total;
    *out_cols = cn;
    return LM_OK;
}

/* The slice of each of the matrices [first, first + count) of the n
 * matrices [rows, cols] of a tensor of n_dims dims ([rows, cols], or [n,
 * rows, cols] stacked), as one matrix [count · slice rows, slice cols]. */
static lm_status load_slice(lm_weights *w, const char *name, int n_dims, int64_t n, int64_t first, int64_t count,
                            int64_t rows, int64_t cols, const lm_weights_slice *slice, lm_matrix *out,
                            lm_error *err) {
    int64_t s_rows = 0, n_cols = 0;
    lm_status st = check_slice(name, rows, cols, slice, &s_rows, &n_cols, err);
    if (st != LM_OK) return st;
    if (first < 0 || count <= 0 || first > n - count)
        return lm_fail(err, LM_ERR_INVALID, "'%s': matrices [%lld, %lld) are not inside its %lld", name,
                       (long long)first, (long long)(first + count), (long long)n);
    int64_t n_rows = count * s_rows;
    const lm_weights_slice whole = {0};
    if (w->random) {
        /* Random weights are made at the slice's shape: a rank never makes
         * the whole tensor (a benchmark shape's ranks would each hold the
         * whole model on the host).  The ranks' values are their own, not
         * slices of one model's. */
        rows = s_rows;
        cols = n_cols;
        n = count;
        first = 0;
        slice = &whole;
    }
    const int64_t shape2[2] = {rows, cols}, shape3[3] = {n, rows, cols};
    const int64_t *shape = n_dims == 3 ? shape3 : shape2;
    int64_t c0 = slice->col_first;
    const row_source part = {.rows = rows, .cols = cols, .first = first, .count = count, .slice = slice,
                             .s_rows = s_rows, .c0 = c0, .n_cols = n_cols};
    /* FP8: each rank decodes only its rows, made as the whole matrix's
     * would be for its columns (int8 blocks start at its first column). */
    const lm_tensor *t, *s;
    mlx_source mlx;
    int4_source int4;
    if (find_int4(w, name, n_dims, shape, &int4, err))
        return int4.qweight ? convert_rows_from(w, int4.qweight, NULL, NULL, &int4, name, &part,
                                                int4_made_as(w, &int4, c0, n_cols), out, err)
                            : err->code;
    if (find_mlx(w, name, n_dims, shape, &mlx, err))
        return mlx.scales ? convert_rows(w, mlx.weight, NULL, &mlx, name, &part, mlx_made_as(w, &mlx, true, c0, n_cols),
                                         out, err)
                          : err->code;
    if (find_fp8(w, name, n_dims, shape, &t, &s, err))
        return s ? convert_rows(w, t, s, NULL, name, &part,
                                fp8_kept(w, n_dims, c0, n_cols, true) ? LM_DTYPE_FP8_B128 : fp8_made_as(w, n_cols),
                                out, err)
                 : err->code;
    t = require_shape(w, name, n_dims, shape, err);
    if (!t) return err->code;
    if (was_released(w, t))
        return lm_fail(err, LM_ERR_INVALID, "'%s' was asked for after its conversion", name);
    bool whole_rows = n_cols == cols;
    bool block = lm_dtype_is_block(t->dtype);
    if (w->quant.int8_linear && n_cols % LM_Q8_BLOCK == 0 && !block) {
        if (need_q8(w, name, err) != LM_OK) return err->code;
        return convert_rows(w, t, NULL, NULL, name, &part, LM_DTYPE_Q8_0, out, err);
    }
    if (w->quant.fp8_linear && !block && fp8_kept(w, n_dims, c0, n_cols, false))
        return convert_rows(w, t, NULL, NULL, name, &part, LM_DTYPE_FP8_B128, out, err);
    /* a block format's rows are cut at whole blocks only */
    int64_t per_block = lm_dtype_block_elems(t->dtype);
    if (block && (c0 % per_block || n_cols % per_block))
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "'%s' is %s, blocks of %lld columns: a rank's columns [%lld, %lld) are not whole blocks", name,
                       lm_dtype_name(t->dtype), (long long)per_block, (long long)c0, (long long)(c0 + n_cols));
    size_t src_row = lm_dtype_row_bytes(t->dtype, cols), dst_row = lm_dtype_row_bytes(t->dtype, n_cols);
    size_t col_offset = lm_dtype_row_bytes(t->dtype, c0), bytes = dst_row * (size_t)n_rows;
    const uint8_t *src = t->data;
    lm_buffer *buffer;
    /* one run of whole rows of one matrix, or whole matrices: the stored
     * bytes, in place */
    if (whole_rows && slice->n_runs <= 1 && (count == 1 || s_rows == rows)) {
        int64_t row0 = first * rows + (slice->n_runs ? slice->runs[0].first : 0);
        st = import(w, src + (size_t)row0 * src_row, bytes, name, &buffer, err);
    } else {
        uint8_t *dst = owned_bytes(w, bytes, name, err);
        if (!dst) return err->code;
        for (int64_t i = 0; i < n_rows; i++) {
            int64_t r = (first + i / s_rows) * rows + slice_row(slice, i % s_rows);
            memcpy(dst + (size_t)i * dst_row, src + (size_t)r * src_row + col_offset, dst_row);
        }
        st = import(w, dst, bytes, name, &buffer, err);
    }
    if (st != LM_OK) return st;
    *out = (lm_matrix){.data = lm_mem_of(buffer), .dtype = t->dtype, .rows = n_rows, .cols = n_cols};
    return LM_OK;
}

lm_status lm_weights_linear_slice(lm_weights *w, const char *name, int64_t rows, int64_t cols,
                                  const lm_weights_slice *slice, lm_matrix *out, lm_error *err) {
    return load_slice(w, name, 2, 1, 0, 1, rows, cols, slice, out, err);
}

lm_status lm_weights_linear_stacked_slice(lm_weights *w, const char *name, int64_t n, int64_t rows, int64_t cols,
                                          const lm_weights_slice *slice, lm_matrix *out, lm_error *err) {
    return load_slice(w, name, 3, n, 0, n, rows, cols, slice, out, err);
}

lm_status lm_weights_linear_stacked_range(lm_weights *w, const char *name, int64_t n, int64_t first, int64_t count,
                                          int64_t rows, int64_t cols, lm_matrix *out, lm_error *err) {
    const lm_weights_slice whole = {0};
    return load_slice(w, name, 3, n, first, count, rows, cols, &whole, out, err);
}

/* ---- config.json's quantization_config ---- */

/* GPTQ's and AWQ's quantization_config (models/gptq_quant.h): bits 4,
 * group_size -1 or a positive width; GPTQ's checkpoint_format "gptq"
 * (zeros stored minus 1) or "gptq_v2", sym and desc_act booleans (the
 * tensors say the rest: zeros, g_idx); AWQ's version "gemm" with
 * zero_point true; modules_to_not_convert null or a list of module names
 * (those modules are stored as float X.weight, which the loader takes as
 * stored wherever it finds one). */
static lm_status read_int4_quant(const lm_json_fields *q, lm_int4_method method, lm_weights_quant *out) {
    int bits = 0, group = 0;
    lm_status s;
    if (!lm_json_field(q, "bits"))
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "bits", "is missing: GPTQ and AWQ checkpoints give bits (4)");
    if ((s = lm_json_read_int(q, "bits", 1, 64, &bits)) != LM_OK) return s;
    if (bits != 4)
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "bits",
                                   "is %d: loom reads GPTQ and AWQ weights of 4 bits only", bits);
    if (!lm_json_field(q, "group_size"))
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "group_size", "is missing (128, or -1 for one group a row)");
    if ((s = lm_json_read_int(q, "group_size", -1, 1 << 20, &group)) != LM_OK) return s;
    if (group == 0) return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "group_size", "is 0: a positive width or -1");
    bool flag = true;
    if ((s = lm_json_read_bool(q, "sym", &flag)) != LM_OK) return s;
    if ((s = lm_json_read_bool(q, "desc_act", &flag)) != LM_OK) return s;
    const cJSON *skip = NULL;
    size_t n_skip = 0;
    if ((s = lm_json_read_array(q, "modules_to_not_convert", 1 << 16, "strings", &skip, &n_skip)) != LM_OK) return s;
    for (const cJSON *m = skip ? skip->child : NULL; m; m = m->next)
        if (!cJSON_IsString(m)) return lm_json_type_error(q, "modules_to_not_convert", "a list of strings");
    int offset = 0;
    if (method == LM_INT4_GPTQ) {
        char format[32] = "";
        if ((s = lm_json_read_string(q, "checkpoint_format", format, sizeof format)) != LM_OK) return s;
        if (!format[0] || !strcmp(format, "gptq")) offset = 1; /* AutoGPTQ's pack stores z - 1 */
        else if (strcmp(format, "gptq_v2") != 0)
            return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "checkpoint_format",
                                       "is '%s': loom reads GPTQ's \"gptq\" and \"gptq_v2\" packing", format);
    } else {
        char version[32] = "";
        if ((s = lm_json_read_string(q, "version", version, sizeof version)) != LM_OK) return s;
        if (version[0] && strcasecmp(version, "gemm") != 0)
            return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "version",
                                       "is '%s': loom reads AutoAWQ's GEMM packing only (version \"gemm\")", version);
        bool zero_point = true;
        if ((s = lm_json_read_bool(q, "zero_point", &zero_point)) != LM_OK) return s;
        if (!zero_point)
            return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "zero_point",
                                       "is false: AWQ's GEMM checkpoints have zero points (qzeros)");
    }
    out->int4 = (lm_int4_quant){.method = method, .group_size = group, .zero_offset = offset};
    return LM_OK;
}

static lm_status read_quant(const lm_json_fields *q, lm_weights_quant *out) {
    char method[32] = "", fmt[32] = "", activation[32] = "";
    lm_status s = lm_json_read_string(q, "quant_method", method, sizeof method);
    if (s != LM_OK) return s;
    if (!strcmp(method, "gptq")) return read_int4_quant(q, LM_INT4_GPTQ, out);
    if (!strcmp(method, "awq")) return read_int4_quant(q, LM_INT4_AWQ, out);
    if (strcmp(method, "fp8") != 0)
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "quant_method",
                                   "is '%s': loom reads bf16 checkpoints, block-scaled FP8 ones "
                                   "(quant_method \"fp8\"), GPTQ and AWQ int4 (\"gptq\", \"awq\") and MLX's; "
                                   "for int8 weights load the bf16 checkpoint with --quantize int8",
                                   method[0] ? method : "(missing)");
    if ((s = lm_json_read_string(q, "fmt", fmt, sizeof fmt)) != LM_OK) return s;
    if (fmt[0] && strcmp(fmt, "e4m3") != 0)
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "fmt", "is '%s': loom reads FP8 E4M3 weights only", fmt);
    if ((s = lm_json_read_string(q, "activation_scheme", activation, sizeof activation)) != LM_OK) return s;
    if (activation[0] && strcmp(activation, "dynamic") != 0 && strcmp(activation, "static") != 0)
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "activation_scheme",
                                   "is '%s': expected dynamic or static", activation);
    int block[2];
    size_t n = 0;
    const cJSON *field = lm_json_field(q, "weight_block_size");
    if (!field)
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "weight_block_size",
                                   "is missing: loom reads block-scaled FP8 checkpoints only "
                                   "(weight_scale_inv per block, e.g. [128, 128])");
    if (!cJSON_IsArray(field) || cJSON_GetArraySize(field) != 2)
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "weight_block_size",
                                   "must be a list of two block sizes [rows, cols], e.g. [128, 128]");
    if ((s = lm_json_read_int_array(q, "weight_block_size", 1, 65536, 2, 2, false, block, &n)) != LM_OK)
        return s;
    out->fp8_block_rows = block[0];
    out->fp8_block_cols = block[1];
    return LM_OK;
}

/* MLX's "quantization": group_size, bits, mode "affine" when given; any
 * other key is a per-layer override (a module path), refused by name
 * until overrides are read. */
static lm_status read_mlx_quant(const lm_json_fields *q, lm_weights_quant *out) {
    int bits = 0, group = 0;
    lm_status s;
    if (!lm_json_field(q, "bits"))
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "bits", "is missing: MLX quantization needs bits and group_size");
    if (!lm_json_field(q, "group_size"))
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "group_size",
                                   "is missing: MLX quantization needs bits and group_size");
    if ((s = lm_json_read_int(q, "bits", 1, 64, &bits)) != LM_OK) return s;
    if (!lm_mlx_bits_supported(bits))
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "bits", "is %d: MLX affine weights of 2, 3, 4, 5, 6 or 8 bits",
                                   bits);
    if ((s = lm_json_read_int(q, "group_size", 1, 1 << 20, &group)) != LM_OK) return s;
    if (!lm_mlx_group_supported(group))
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "group_size", "is %d: MLX affine groups of 32, 64 or 128",
                                   group);
    char mode[32] = "";
    if ((s = lm_json_read_string(q, "mode", mode, sizeof mode)) != LM_OK) return s;
    if (mode[0] && strcmp(mode, "affine") != 0)
        return lm_json_field_error(q, LM_ERR_UNSUPPORTED, "mode", "is '%s': loom reads MLX affine quantization only",
                                   mode);
    out->mlx_overrides = false;
    for (const cJSON *item = q->object->child; item; item = item->next) {
        const char *key = item->string ? item->string : "";
        if (!strcmp(key, "bits") || !strcmp(key, "group_size") || !strcmp(key, "mode")) continue;
        out->mlx_overrides = true;
        if (cJSON_IsFalse(item)) continue; /* a module left unquantized */
        if (!cJSON_IsObject(item))
            return lm_json_field_error(q, LM_ERR_UNSUPPORTED, key,
                                       "is neither a module's {\"group_size\", \"bits\"} nor false");
        lm_json_fields layer;
        int lbits = 0, lgroup = 0;
        if ((s = lm_json_fields_sub(q, key, &layer)) != LM_OK) return s;
        if ((s = lm_json_read_int(&layer, "bits", 1, 64, &lbits)) != LM_OK) return s;
        if ((s = lm_json_read_int(&layer, "group_size", 1, 1 << 20, &lgroup)) != LM_OK) return s;
        if (!lm_mlx_bits_supported(lbits) || !lm_mlx_group_supported(lgroup))
            return lm_json_field_error(q, LM_ERR_UNSUPPORTED, key,
                                       "asks for %d bits in groups of %d: MLX affine has 2, 3, 4, 5, 6 or 8 bits "
                                       "and groups of 32, 64 or 128",
                                       lbits, lgroup);
    }
    out->mlx_bits = bits;
    out->mlx_group = group;
    return LM_OK;
}

lm_status lm_weights_quant_config(const char *config_path, lm_weights_quant *q, lm_error *err) {
    q->fp8_block_rows = q->fp8_block_cols = 0;
    q->mlx_bits = q->mlx_group = 0;
    q->int4 = (lm_int4_quant){0};
    cJSON *root = NULL;
    lm_status s = lm_json_read_file(config_path, MAX_CONFIG_BYTES, &root, err);
    if (s != LM_OK) return s;
    lm_json_fields top = lm_json_fields_of(config_path, root, err), text, qc;
    s = lm_json_fields_sub(&top, "quantization_config", &qc);
    if (s == LM_OK && !qc.object) {
        s = lm_json_fields_sub(&top, "text_config", &text);
        if (s == LM_OK) s = lm_json_fields_sub(&text, "quantization_config", &qc);
    }
    /* mlx-lm writes "quantization" (and, lately, the same object again as
     * quantization_config, without a quant_method) */
    lm_json_fields mlx = {0};
    if (s == LM_OK) s = lm_json_fields_sub(&top, "quantization", &mlx);
    if (s == LM_OK && !mlx.object && qc.object && !lm_json_field(&qc, "quant_method") && lm_json_field(&qc, "bits"))
        mlx = qc;
    if (s == LM_OK && mlx.object) s = read_mlx_quant(&mlx, q);
    else if (s == LM_OK && qc.object) s = read_quant(&qc, q);
    cJSON_Delete(root);
    return s;
}

lm_status lm_weights_lm_head(lm_weights *w, const char *name, const lm_matrix *embed_tokens, bool tied, int vocab,
                             int hidden, int rank, int n_ranks, lm_matrix *out, bool *split, lm_error *err) {
    *split = n_ranks > 1 && vocab % n_ranks == 0;
    if (!*split) {
        if (tied) *out = *embed_tokens;
        return tied ? LM_OK : lm_weights_linear(w, name, vocab, hidden, out, err);
    }
    int64_t share = vocab / n_ranks, first = share * rank;
    if (tied) {
        *out = lm_matrix_rows(embed_tokens, first, share);
        return LM_OK;
    }
    lm_weights_slice slice = {.n_runs = 1, .runs = {{.first = first, .count = share}}};
    return lm_weights_linear_slice(w, name, vocab, hidden, &slice, out, err);
}
