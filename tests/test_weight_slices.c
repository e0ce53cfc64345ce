/* A rank's slice of a weight (lm_weights_linear_slice, tensor
 * parallelism): on the qwen35-dense fixture, each slice equals, byte for
 * byte, the same rows and columns of the whole matrix loaded as usual: one
 * run of rows (imported in place), several runs with a window of columns
 * (the fused q | k | v projection's share), a column window alone (a
 * row-parallel projection's), and int8 made from a 32-aligned window
 * equal to the whole row's int8 blocks there.  Slices outside the tensor
 * are errors naming it.  A range of a stack's matrices (a rank's experts
 * under expert parallelism, lm_weights_linear_stacked_range) equals those
 * matrices of the whole stack, as stored and as int8, on the qwen35-moe
 * fixture's fused MTP experts; with random weights it is made at the
 * range's shape.  Large conversions run on a pool of threads: the bytes
 * (whole, sliced, int8 and FP8) are those of one thread, and of two bad
 * rows the lower is the one named, whatever the threads. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "base/bf16.h"
#include "base/dtype.h"
#include "base/quant.h"
#include "fp8_checkpoint.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "models/weights.h"
#include "safetensors_writer.h"

#define QKV "model.language_model.layers.0.linear_attn.in_proj_qkv.weight" /* [128, 64] */
#define OUT "model.language_model.layers.0.linear_attn.out_proj.weight"    /* [64, 64] */
#define DOWN "model.language_model.layers.0.mlp.down_proj.weight"          /* [64, 128] */
/* qwen35-moe's MTP layer: 8 fused experts of width 32 over hidden 64 */
#define GATE_UP "mtp.layers.0.mlp.experts.gate_up_proj" /* [8, 64, 64] */
#define DOWNS "mtp.layers.0.mlp.experts.down_proj"      /* [8, 64, 32] */

typedef struct {
    lm_checkpoint *ck;
    lm_backend *be;
    lm_weights w;
} fixture;

static bool open_model(fixture *f, const char *model, bool int8, lm_error *err) {
    char dir[1024];
    memset(f, 0, sizeof *f);
    if (lm_checkpoint_open(test_fixture_path(dir, sizeof dir, model), LM_LOAD_READ, &f->ck, err) != LM_OK ||
        lm_backend_create("cpu", 1, &f->be, err) != LM_OK)
        return false;
    lm_weights_init(&f->w, f->ck, f->be);
    lm_weights_set_quant(&f->w, &(lm_weights_quant){.int8_linear = int8});
    return true;
}

static bool open_fixture(fixture *f, bool int8, lm_error *err) {
    return open_model(f, "models/qwen35-dense", int8, err);
}

static void close_fixture(fixture *f) {
    lm_weights_free(&f->w);
    lm_backend_destroy(f->be);
    lm_checkpoint_close(f->ck);
}

/* The matrix's bytes, downloaded (NULL on failure). */
static uint8_t *bytes_of(lm_backend *be, const lm_matrix *m, size_t *size) {
    *size = lm_dtype_row_bytes(m->dtype, m->cols) * (size_t)m->rows;
    uint8_t *out = malloc(*size ? *size : 1);
    lm_error err = {0};
    if (out && lm_download(be, out, m->data, *size, &err) != LM_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/* Whether slice sl of `name` equals those rows and columns of the whole. */
static bool slice_matches(bool int8, const char *name, int64_t rows, int64_t cols, const lm_weights_slice *sl,
                          char *why, size_t why_size) {
    fixture whole, part;
    lm_error err = {0};
    bool ok = false;
    uint8_t *a = NULL, *b = NULL;
    if (!open_fixture(&whole, int8, &err) || !open_fixture(&part, int8, &err)) {
        snprintf(why, why_size, "fixture: %s", err.message);
        return false;
    }
    lm_matrix full, sliced;
    if (lm_weights_linear(&whole.w, name, rows, cols, &full, &err) != LM_OK ||
        lm_weights_linear_slice(&part.w, name, rows, cols, sl, &sliced, &err) != LM_OK) {
        snprintf(why, why_size, "load: %s", err.message);
        goto done;
    }
    size_t full_size = 0, slice_size = 0;
    a = bytes_of(whole.be, &full, &full_size);
    b = bytes_of(part.be, &sliced, &slice_size);
    if (!a || !b) {
        snprintf(why, why_size, "download failed");
        goto done;
    }
    int64_t want_cols = sl->col_count ? sl->col_count : cols;
    if (sliced.cols != want_cols || sliced.dtype != full.dtype) {
        snprintf(why, why_size, "slice is %lld columns of %s; want %lld of %s", (long long)sliced.cols,
                 lm_dtype_name(sliced.dtype), (long long)want_cols, lm_dtype_name(full.dtype));
        goto done;
    }
    /* a window's bytes in a row: int8 windows are whole blocks */
    size_t full_row = lm_dtype_row_bytes(full.dtype, cols), slice_row = lm_dtype_row_bytes(full.dtype, want_cols);
    size_t skip = lm_dtype_row_bytes(full.dtype, sl->col_first);
    int64_t i = 0;
    for (int r = 0; r < (sl->n_runs ? sl->n_runs : 1); r++) {
        int64_t first = sl->n_runs ? sl->runs[r].first : 0, count = sl->n_runs ? sl->runs[r].count : rows;
        for (int64_t k = 0; k < count; k++, i++)
            if (memcmp(b + (size_t)i * slice_row, a + (size_t)(first + k) * full_row + skip, slice_row) != 0) {
                snprintf(why, why_size, "slice row %lld differs from row %lld", (long long)i, (long long)(first + k));
                goto done;
            }
    }
    if (sliced.rows != i) {
        snprintf(why, why_size, "slice has %lld rows; want %lld", (long long)sliced.rows, (long long)i);
        goto done;
    }
    ok = true;
done:
    free(a);
    free(b);
    close_fixture(&whole);
    close_fixture(&part);
    return ok;
}

static void test_one_run_of_rows(void) {
    char why[600] = "";
    lm_weights_slice sl = {.n_runs = 1, .runs = {{32, 64}}};
    CHECK_MSG(slice_matches(false, QKV, 128, 64, &sl, why, sizeof why), "%s", why);
    lm_weights_slice all = {0};
    CHECK_MSG(slice_matches(false, QKV, 128, 64, &all, why, sizeof why), "the whole: %s", why);
}

static void test_runs_and_a_window(void) {
    char why[600] = "";
    /* rank 1 of 2 of q | k | v (32 | 32 | 64 rows): q rows 16-31, k 48-63, v 96-127 */
    lm_weights_slice qkv = {.n_runs = 3, .runs = {{16, 16}, {48, 16}, {96, 32}}};
    CHECK_MSG(slice_matches(false, QKV, 128, 64, &qkv, why, sizeof why), "%s", why);
    qkv.col_first = 8, qkv.col_count = 40;
    CHECK_MSG(slice_matches(false, QKV, 128, 64, &qkv, why, sizeof why), "with a window: %s", why);
}

static void test_column_window(void) {
    char why[600] = "";
    lm_weights_slice half = {.col_first = 32, .col_count = 32};
    CHECK_MSG(slice_matches(false, OUT, 64, 64, &half, why, sizeof why), "%s", why);
    lm_weights_slice down = {.col_first = 64, .col_count = 64};
    CHECK_MSG(slice_matches(false, DOWN, 64, 128, &down, why, sizeof why), "%s", why);
}

static void test_int8_from_the_slice(void) {
    char why[600] = "";
    lm_weights_slice down = {.n_runs = 2, .runs = {{0, 8}, {40, 24}}, .col_first = 64, .col_count = 64};
    CHECK_MSG(slice_matches(true, DOWN, 64, 128, &down, why, sizeof why), "%s", why);
    lm_weights_slice rows = {.n_runs = 1, .runs = {{64, 64}}};
    CHECK_MSG(slice_matches(true, QKV, 128, 64, &rows, why, sizeof why), "%s", why);
}

static void test_slices_outside_refused(void) {
    fixture f;
    lm_error err = {0};
    CHECK_MSG(open_fixture(&f, false, &err), "%s", err.message);
    lm_matrix m;
    lm_weights_slice past = {.n_runs = 1, .runs = {{100, 40}}};
    lm_weights_slice window = {.col_first = 60, .col_count = 8};
    lm_weights_slice runs = {.n_runs = LM_SLICE_MAX_RUNS + 1};
    lm_weights_slice empty = {.n_runs = 1, .runs = {{0, 0}}};
    lm_status a = lm_weights_linear_slice(&f.w, QKV, 128, 64, &past, &m, &err);
    bool names_a = strstr(err.message, "in_proj_qkv") && strstr(err.message, "[100, 140)");
    lm_status b = lm_weights_linear_slice(&f.w, QKV, 128, 64, &window, &m, &err);
    bool names_b = strstr(err.message, "columns [60, 68)") != NULL;
    lm_status c = lm_weights_linear_slice(&f.w, QKV, 128, 64, &runs, &m, &err);
    lm_status d = lm_weights_linear_slice(&f.w, QKV, 128, 64, &empty, &m, &err);
    lm_status e = lm_weights_linear_slice(&f.w, QKV, 64, 64, &(lm_weights_slice){0}, &m, &err);
    bool names_e = strstr(err.message, "shape") != NULL;
    close_fixture(&f);
    CHECK(a == LM_ERR_INVALID && names_a);
    CHECK(b == LM_ERR_INVALID && names_b);
    CHECK(c == LM_ERR_INVALID && d == LM_ERR_INVALID);
    CHECK(e == LM_ERR_FORMAT && names_e);
}

/* Whether matrices [first, first + count) of the stack `name` [n, rows,
 * cols] loaded alone equal those of the whole stack, byte for byte. */
static bool range_matches(bool int8, const char *name, int64_t n, int64_t rows, int64_t cols, int64_t first,
                          int64_t count, char *why, size_t why_size) {
    fixture whole, part;
    lm_error err = {0};
    bool ok = false;
    uint8_t *a = NULL, *b = NULL;
    if (!open_model(&whole, "models/qwen35-moe", int8, &err) || !open_model(&part, "models/qwen35-moe", int8, &err)) {
        snprintf(why, why_size, "fixture: %s", err.message);
        return false;
    }
    lm_matrix full, range;
    if (lm_weights_linear_stacked(&whole.w, name, n, rows, cols, &full, &err) != LM_OK ||
        lm_weights_linear_stacked_range(&part.w, name, n, first, count, rows, cols, &range, &err) != LM_OK) {
        snprintf(why, why_size, "load: %s", err.message);
        goto done;
    }
    size_t full_size = 0, range_size = 0;
    a = bytes_of(whole.be, &full, &full_size);
    b = bytes_of(part.be, &range, &range_size);
    size_t matrix_bytes = lm_dtype_row_bytes(full.dtype, cols) * (size_t)rows;
    if (!a || !b)
        snprintf(why, why_size, "download failed");
    else if (range.rows != count * rows || range.cols != cols || range.dtype != full.dtype)
        snprintf(why, why_size, "the range is [%lld, %lld] of %s; want [%lld, %lld] of %s", (long long)range.rows,
                 (long long)range.cols, lm_dtype_name(range.dtype), (long long)(count * rows), (long long)cols,
                 lm_dtype_name(full.dtype));
    else if (memcmp(b, a + (size_t)first * matrix_bytes, (size_t)count * matrix_bytes) != 0)
        snprintf(why, why_size, "the range's bytes differ from matrices [%lld, %lld) of the whole", (long long)first,
                 (long long)(first + count));
    else
        ok = true;
done:
    free(a);
    free(b);
    close_fixture(&whole);
    close_fixture(&part);
    return ok;
}

static void test_range_of_stacked_matrices(void) {
    char why[600] = "";
    /* rank 1 of 4's experts 2 and 3; rank 1 of 2's 4 to 7; a lone expert */
    CHECK_MSG(range_matches(false, GATE_UP, 8, 64, 64, 2, 2, why, sizeof why), "%s", why);
    CHECK_MSG(range_matches(false, DOWNS, 8, 64, 32, 4, 4, why, sizeof why), "%s", why);
    CHECK_MSG(range_matches(false, DOWNS, 8, 64, 32, 7, 1, why, sizeof why), "%s", why);
    CHECK_MSG(range_matches(true, GATE_UP, 8, 64, 64, 6, 2, why, sizeof why), "int8: %s", why);
    CHECK_MSG(range_matches(true, DOWNS, 8, 64, 32, 0, 4, why, sizeof why), "int8: %s", why);
}

static void test_ranges_outside_refused_and_random_ranges_made_small(void) {
    fixture f;
    lm_error err = {0};
    CHECK_MSG(open_model(&f, "models/qwen35-moe", false, &err), "%s", err.message);
    lm_matrix m;
    lm_status past = lm_weights_linear_stacked_range(&f.w, DOWNS, 8, 6, 4, 64, 32, &m, &err);
    bool names_past = strstr(err.message, "down_proj") && strstr(err.message, "[6, 10)");
    lm_status none = lm_weights_linear_stacked_range(&f.w, DOWNS, 8, 0, 0, 64, 32, &m, &err);
    close_fixture(&f);
    CHECK_MSG(past == LM_ERR_INVALID && names_past, "%d '%s'", (int)past, err.message);
    CHECK(none == LM_ERR_INVALID);
    /* random weights: only the range is made, [2 · 64, 32] */
    lm_backend *be = NULL;
    CHECK_OK(lm_backend_create("cpu", 1, &be, &err), &err);
    lm_weights w;
    lm_weights_init_random(&w, 7, false, be);
    lm_status st = lm_weights_linear_stacked_range(&w, DOWNS, 8, 2, 2, 64, 32, &m, &err);
    size_t made = lm_weights_bytes_used(&w);
    lm_weights_free(&w);
    lm_backend_destroy(be);
    CHECK_OK(st, &err);
    CHECK_MSG(m.rows == 128 && m.cols == 32 && made == 2 * 64 * 32 * 2, "rows %lld, cols %lld, %zu bytes made",
              (long long)m.rows, (long long)m.cols, made);
}

/* ---- conversions on threads ---- */

#define BIG_ROWS 384
#define BIG_COLS 512 /* 196608 weights: past the one-thread size */

/* dir/model.safetensors with "good.weight" [384, 512] bf16, "bad.weight"
 * the same with non-finite values in rows 300 (inf), 200 (NaN) and 100
 * (-inf), and "fp8.weight" its e4m3 form with 128x128 float32 scales
 * ("fp8.weight_scale_inv", all 1/64), for a config of weight_block_size
 * [128, 128]. */
static bool write_big(const char *dir) {
    static uint16_t good[BIG_ROWS * BIG_COLS], bad[BIG_ROWS * BIG_COLS];
    static uint8_t fp8[BIG_ROWS * BIG_COLS];
    float scales[3 * 4];
    uint64_t x = 0x243f6a8885a308d3ull;
    for (int i = 0; i < BIG_ROWS * BIG_COLS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        float v = (float)((int64_t)(x >> 40) - (1 << 23)) / (float)(1 << 23); /* [-1, 1) */
        good[i] = bad[i] = lm_f32_to_bf16(v * (1 + i / BIG_COLS % 7));
        fp8[i] = (uint8_t)(x >> 8) & 0x7E ? (uint8_t)(x >> 8) : 0x38; /* any code but NaN */
        if ((fp8[i] & 0x7F) == 0x7F) fp8[i] = 0x38;
    }
    bad[300 * BIG_COLS + 7] = 0x7F80;
    bad[200 * BIG_COLS + 9] = 0x7FC0;
    bad[100 * BIG_COLS + 511] = 0xFF80;
    for (int i = 0; i < 12; i++) scales[i] = 1.0f / 64;
    lm_error err = {0};
    test_st_writer *w = NULL;
    const int64_t shape[2] = {BIG_ROWS, BIG_COLS}, sshape[2] = {3, 4};
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    bool ok = test_st_writer_create(&w, &err) == LM_OK &&
              test_st_writer_add(w, "good.weight", LM_DTYPE_BF16, 2, shape, &(test_st_piece){good, sizeof good}, 1,
                                 &err) == LM_OK &&
              test_st_writer_add(w, "bad.weight", LM_DTYPE_BF16, 2, shape, &(test_st_piece){bad, sizeof bad}, 1,
                                 &err) == LM_OK &&
              test_st_writer_add(w, "fp8.weight", LM_DTYPE_F8_E4M3, 2, shape, &(test_st_piece){fp8, sizeof fp8}, 1,
                                 &err) == LM_OK &&
              test_st_writer_add(w, "fp8.weight_scale_inv", LM_DTYPE_F32, 2, sshape,
                                 &(test_st_piece){scales, sizeof scales}, 1, &err) == LM_OK &&
              test_st_writer_write(w, path, &err) == LM_OK;
    if (!ok) fprintf(stderr, "%s\n", err.message);
    test_st_writer_free(w);
    return ok;
}

/* `name` (a slice when sl) as int8 (or as the FP8 it is) made on a cpu
 * backend of `threads` threads: the bytes, or NULL with *why. */
static uint8_t *convert_on(const char *dir, int threads, const char *name, const lm_weights_slice *sl, size_t *size,
                           char *why, size_t why_size) {
    lm_checkpoint *ck = NULL;
    lm_backend *be = NULL;
    lm_error err = {0};
    uint8_t *bytes = NULL;
    lm_matrix m;
    if (lm_checkpoint_open(dir, LM_LOAD_READ, &ck, &err) == LM_OK && lm_backend_create("cpu", threads, &be, &err) == LM_OK) {
        lm_weights w;
        lm_weights_init(&w, ck, be);
        lm_weights_set_quant(&w, &(lm_weights_quant){.int8_linear = true, .fp8_block_rows = 128, .fp8_block_cols = 128});
        lm_status st = sl ? lm_weights_linear_slice(&w, name, BIG_ROWS, BIG_COLS, sl, &m, &err)
                          : lm_weights_linear(&w, name, BIG_ROWS, BIG_COLS, &m, &err);
        if (st == LM_OK) bytes = bytes_of(be, &m, size);
        lm_weights_free(&w);
    }
    if (!bytes) snprintf(why, why_size, "%s", err.message);
    lm_backend_destroy(be);
    lm_checkpoint_close(ck);
    return bytes;
}

static void test_conversions_on_threads(void) {
    char dir[512];
    CHECK(test_make_temp_folder(dir, sizeof dir, "convert-threads") && write_big(dir));
    const lm_weights_slice window = {.n_runs = 2, .runs = {{10, 100}, {200, 150}}, .col_first = 64, .col_count = 256};
    const struct {
        const char *name;
        const lm_weights_slice *slice;
    } cases[] = {{"good.weight", NULL}, {"good.weight", &window}, {"fp8.weight", NULL}, {"fp8.weight", &window}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char why[512] = "";
        size_t n1 = 0, n3 = 0;
        uint8_t *one = convert_on(dir, 1, cases[c].name, cases[c].slice, &n1, why, sizeof why);
        uint8_t *three = one ? convert_on(dir, 3, cases[c].name, cases[c].slice, &n3, why, sizeof why) : NULL;
        CHECK_MSG(one && three && n1 == n3 && memcmp(one, three, n1) == 0, "%s%s: 3 threads %s one (%s)",
                  cases[c].name, cases[c].slice ? " (slice)" : "", one && three ? "differ from" : "failed beside", why);
        free(one);
        free(three);
    }
    for (int threads = 1; threads <= 4; threads += 3) {
        char why[512] = "";
        size_t n = 0;
        uint8_t *b = convert_on(dir, threads, "bad.weight", NULL, &n, why, sizeof why);
        CHECK_MSG(!b && strstr(why, "row 100 holds a value that is not finite"), "%d threads: %s", threads, why);
        free(b);
    }
    test_remove_checkpoint(dir);
}

/* Random weights past a million values are copied in chunks on the pool:
 * a 4096 x 1024 bf16 matrix (192 chunks) made on 3 threads holds one
 * thread's values. */
static void random_bytes_on(int threads, uint8_t **out, size_t *size) {
    lm_backend *be = NULL;
    lm_error err = {0};
    *out = NULL;
    CHECK_OK(lm_backend_create("cpu", threads, &be, &err), &err);
    lm_weights w;
    lm_weights_init_random(&w, 7, false, be);
    lm_matrix m;
    CHECK_OK(lm_weights_matrix(&w, "big.weight", 4096, 1024, &m, &err), &err);
    *out = bytes_of(be, &m, size);
    lm_weights_free(&w);
    lm_backend_destroy(be);
}

static void test_random_weights_on_threads(void) {
    uint8_t *one = NULL, *three = NULL;
    size_t n1 = 0, n3 = 0;
    random_bytes_on(1, &one, &n1);
    random_bytes_on(3, &three, &n3);
    CHECK_MSG(one && three && n1 == n3 && memcmp(one, three, n1) == 0, "random weights on 3 threads differ from one");
    size_t same_as_first_chunk = 0; /* past the first million the chunks are copies, not zeros */
    for (size_t i = (size_t)2 << 20; one && i + 2 < n1; i += 2) same_as_first_chunk += one[i] || one[i + 1];
    CHECK_MSG(same_as_first_chunk > n1 / 8, "the copied chunks are mostly zeros (%zu nonzero)", same_as_first_chunk);
    free(one);
    free(three);
}

int main(void) {
    RUN_TEST(test_one_run_of_rows);
    RUN_TEST(test_runs_and_a_window);
    RUN_TEST(test_column_window);
    RUN_TEST(test_int8_from_the_slice);
    RUN_TEST(test_slices_outside_refused);
    RUN_TEST(test_range_of_stacked_matrices);
    RUN_TEST(test_ranges_outside_refused_and_random_ranges_made_small);
    RUN_TEST(test_conversions_on_threads);
    RUN_TEST(test_random_weights_on_threads);
    return test_summary("test_weight_slices");
}
