/* Tests of the Qwen3.5 MTP head against fixtures/models/qwen35-dense
 * (`pK.mtp_logits`, fixtures/README.md): full-sequence logits, incremental
 * and batched feeding, rolling drafts back, loading from doctored checkpoint
 * copies (a missing tensor, other prefixes, norms already shifted).  The
 * mixture-of-experts head is tested by tests/test_qwen35_moe.c.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bf16.h"
#include "engine/sequence_runner.h"
#include "harness.h"
#include "model_util.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/qwen35/qwen35.h"
#include "models/qwen35/qwen35_context.h"
#include "models/qwen35/qwen35_mtp.h"
#include "models/registry.h"

#define LOGIT_TOLERANCE test_logit_tolerance() /* max |Δ| / std(reference), fixtures/README.md */

typedef struct {
    char dir[1024];
    test_model tm;            /* on the backend under test (LOOM_TEST_BACKEND) */
    lm_qwen35_config config;  /* a copy of *tm.config */
    lm_model *model;          /* tm.model */
    lm_qwen35_model *q;       /* tm.qwen */
    lm_backend *backend;      /* tm.backend */
    lm_safetensors *reference;
} fixture;

static fixture fx; /* loaded once for the whole binary */

static bool load_fixture(void) {
    char path[1200];
    test_fixture_path(fx.dir, sizeof fx.dir, "models/qwen35-dense");
    if (!test_model_open(&fx.tm, fx.dir, 2)) return false;
    fx.config = *fx.tm.config;
    fx.model = fx.tm.model;
    fx.q = fx.tm.qwen;
    fx.backend = fx.tm.backend;
    lm_error err = {0};
    snprintf(path, sizeof path, "%s/reference.safetensors", fx.dir);
    if (lm_safetensors_open(path, LM_LOAD_READ, &fx.reference, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return false;
    }
    return true;
}

static const lm_tensor *ref(const char *prompt, const char *what) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", prompt, what);
    return lm_safetensors_find(fx.reference, name);
}

/* max |got - want| / std(want) over n values; NaN gives infinity */
static double normalized_error(const float *got, const float *want, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) worst = d;
    }
    return isnan(worst) ? INFINITY : worst / test_stddev(want, n);
}

/* Prompts with an mtp_logits reference (p1 has one token: none). */
static const char *mtp_prompts[] = {"p0", "p2", "p3"};
#define N_PROMPTS (sizeof mtp_prompts / sizeof mtp_prompts[0])

static void prompt_ids(const char *p, const int32_t **ids, int *n) {
    const lm_tensor *t = ref(p, "input_ids");
    *ids = t ? t->data : NULL;
    *n = t ? (int)t->n_elements : 0;
}

/* The post-final-norm hidden states of every prompt position [n, H]. */
static float *main_hidden(lm_model *model, const int32_t *ids, int n, lm_error *err) {
    float *hidden = malloc(sizeof(float) * (size_t)n * fx.config.hidden_size);
    float *logits = malloc(sizeof(float) * (size_t)n * fx.config.vocab_size);
    lm_sequence_runner r;
    lm_status st = lm_sequence_runner_init(&r, model, n, err);
    if (st == LM_OK) st = lm_sequence_runner_feed(&r, ids, n, true, logits, hidden, NULL, err);
    lm_sequence_runner_free(&r);
    free(logits);
    if (st != LM_OK) {
        free(hidden);
        return NULL;
    }
    return hidden;
}

/* Normalized error of the head of `head_model` over a whole prompt, with
 * hidden states from fx.model; INFINITY and err set on failure. */
static double prompt_error(lm_model *head_model, const char *prompt, lm_error *err) {
    const int32_t *ids;
    int n;
    prompt_ids(prompt, &ids, &n);
    const lm_tensor *want = ref(prompt, "mtp_logits");
    int V = fx.config.vocab_size;
    if (!ids || !want || want->n_elements != (int64_t)(n - 1) * V) {
        lm_fail(err, LM_ERR_FORMAT, "reference for %s missing or of the wrong size", prompt);
        return INFINITY;
    }
    if (!lm_model_has_mtp_logits(head_model)) {
        lm_fail(err, LM_ERR_INVALID, "the model offers no MTP logits");
        return INFINITY;
    }
    float *hidden = main_hidden(fx.model, ids, n, err);
    if (!hidden) return INFINITY;
    float *logits = malloc(sizeof(float) * (size_t)(n - 1) * V);
    lm_status st = lm_model_mtp_sequence_logits(head_model, hidden, ids + 1, NULL, n - 1, logits, err);
    double e = st == LM_OK ? normalized_error(logits, want->data, (size_t)(n - 1) * V) : INFINITY;
    free(logits);
    free(hidden);
    return e;
}

/* Element i of a float32 array in backend memory (NaN if it cannot be read). */
static float backend_float(lm_mem m, size_t i) {
    float v = NAN;
    lm_error err = {0};
    if (lm_download(fx.backend, &v, lm_mem_f32(m, i), sizeof v, &err) != LM_OK) return NAN;
    return v;
}

static void test_head_is_loaded(void) {
    const lm_qwen35_model *m = fx.q;
    const lm_checkpoint *ck = m->checkpoint;
    CHECK_MSG(m->has_mtp && m->mtp, "no head: %s", m->mtp_missing);
    if (!m->has_mtp || !m->mtp) return;
    CHECK(lm_model_describe(fx.model)->has_mtp && lm_model_can_draft(fx.model));
    CHECK(strcmp(m->mtp->prefix, "mtp.") == 0);
    CHECK(!m->mtp->norms_were_shifted && !m->mtp->norms_forced);
    CHECK(fabsf(m->mtp->stored_norm_mean) < 0.5f);
    CHECK(m->mtp->fc.rows == fx.config.hidden_size && m->mtp->fc.cols == 2 * fx.config.hidden_size);
    /* zero-centred: the scales are 1 + w */
    const lm_tensor *w = lm_checkpoint_find(ck, "mtp.norm.weight");
    CHECK(w && w->dtype == LM_DTYPE_BF16);
    if (w)
        CHECK_NEAR(backend_float(m->mtp->norm, 3),
                   1.0f + lm_bf16_to_f32(((const uint16_t *)w->data)[3]), 1e-7);
    w = lm_checkpoint_find(ck, "mtp.layers.0.self_attn.k_norm.weight");
    CHECK(w);
    if (w)
        CHECK_NEAR(backend_float(m->mtp->layer.full.k_norm, 5),
                   1.0f + lm_bf16_to_f32(((const uint16_t *)w->data)[5]), 1e-7);
    /* every mtp tensor is used by the model */
    for (size_t i = 0; i < lm_checkpoint_count(ck); i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        if (strncmp(t->name, "mtp.", 4) == 0)
            CHECK_MSG(lm_weights_was_used(&m->weights, t), "%s not used", t->name);
    }
}

static void test_mtp_logits_match_reference(void) {
    for (size_t p = 0; p < N_PROMPTS; p++) {
        lm_error err = {0};
        double e = prompt_error(fx.model, mtp_prompts[p], &err);
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s: normalized MTP logit error %.3g %s", mtp_prompts[p], e,
                  err.message);
    }
}

/* ------------------------------------------------- incremental and batched */

#define MAX_ROWS 256

/* A context for MTP steps of one sequence: its KV pool (the head's cache
 * is the context's, with the same block ids as the main one) is the
 * sequence's blocks 0..n_blocks-1. */
typedef struct {
    lm_model_context *ctx;
    int32_t blocks[64];
    int n_blocks;
    int32_t positions[3 * MAX_ROWS];
} mtp_state;

static lm_status mtp_context(int block_size, int n_blocks, int max_tokens, int max_seqs,
                             int max_blocks_per_seq, int speculative_tokens,
                             lm_model_context **out, lm_error *err) {
    lm_context_options o = {.kv_block_size = block_size,
                            .kv_blocks = n_blocks,
                            .state_slots = 1,
                            .max_step_tokens = max_tokens,
                            .max_step_seqs = max_seqs,
                            .max_blocks_per_seq = max_blocks_per_seq,
                            .max_logit_rows = max_tokens,
                            .speculative_tokens = speculative_tokens};
    *out = NULL;
    lm_status st = lm_model_context_create(fx.model, &o, out, err);
    if (st == LM_OK) lm_model_reset_state(*out, 0);
    return st;
}

static lm_status mtp_state_init(mtp_state *ms, int block_size, int n_blocks, lm_error *err) {
    memset(ms, 0, sizeof *ms);
    ms->n_blocks = n_blocks;
    for (int b = 0; b < n_blocks; b++) ms->blocks[b] = b;
    return mtp_context(block_size, n_blocks, MAX_ROWS, 1, n_blocks, 1, &ms->ctx, err);
}

static void mtp_state_free(mtp_state *ms) {
    lm_model_context_destroy(ms->ctx);
    ms->ctx = NULL;
}

static void set_positions(int32_t *positions, int from, int n) {
    for (int i = 0; i < n; i++)
        positions[3 * i] = positions[3 * i + 1] = positions[3 * i + 2] = from + i;
}

/* Runs MTP rows [first, first + n) with the given next tokens. */
static lm_status mtp_step(mtp_state *ms, const float *hidden, const int32_t *next, int first, int n,
                          bool all_logits, bool no_logits, float *logits, float *hidden_out,
                          lm_error *err) {
    set_positions(ms->positions, first, n);
    lm_step_seq seq = {.first = 0,
                       .n_new = n,
                       .n_cached = first,
                       .state_slot = -1,
                       .block_table = ms->blocks,
                       .n_blocks = ms->n_blocks,
                       .all_logits = all_logits,
                       .no_logits = no_logits};
    lm_step_batch batch = {
        .n_tokens = n, .tokens = next, .positions = ms->positions, .n_seqs = 1, .seqs = &seq};
    return lm_qwen35_mtp_forward((lm_qwen35_context *)ms->ctx, &batch, hidden, logits, hidden_out,
                                 err);
}

/* lm_head(h) of `rows` host rows [rows, H] into out [rows, V], on the backend. */
static lm_status head_logits(const float *h, int rows, float *out, lm_error *err) {
    size_t H = (size_t)fx.config.hidden_size, V = (size_t)fx.config.vocab_size;
    lm_buffer *buf = NULL;
    lm_status st = lm_alloc(fx.backend, sizeof(float) * (size_t)rows * (H + V), "test lm_head",
                            &buf, err);
    if (st != LM_OK) return st;
    lm_mem x = lm_mem_of(buf), y = lm_mem_f32(x, (size_t)rows * H);
    lm_upload(fx.backend, x, h, sizeof(float) * (size_t)rows * H);
    lm_matmul(fx.backend, y, x, rows, &fx.q->lm_head);
    st = lm_download(fx.backend, out, y, sizeof(float) * (size_t)rows * V, err);
    lm_buffer_free(fx.backend, buf);
    return st;
}

/* As speculative decoding runs it: the target is fed in chunks (prefill) and
 * then token by token, and the head follows one row behind (row p needs the
 * token at p+1).  The first head step only fills its cache (no logits); the
 * others return every row, the single-row steps only their last.  Each
 * logit row must match the reference, and lm_head(hidden_out) the logits. */
static void check_incremental(const char *prompt, int chunk1, int chunk2) {
    const int32_t *ids;
    int n;
    prompt_ids(prompt, &ids, &n);
    const lm_tensor *want = ref(prompt, "mtp_logits");
    CHECK(ids && want && n <= MAX_ROWS);
    if (!ids || !want || n > MAX_ROWS) return;
    int V = fx.config.vocab_size, H = fx.config.hidden_size;
    float *hidden = malloc(sizeof(float) * (size_t)n * H);
    float *main_logits = malloc(sizeof(float) * (size_t)n * V);
    float *logits = malloc(sizeof(float) * (size_t)n * V);
    float *hidden_out = malloc(sizeof(float) * (size_t)n * H);
    float *check = malloc(sizeof(float) * (size_t)n * V);
    float *got = malloc(sizeof(float) * (size_t)n * V); /* row p of the head's logits */
    bool *have = calloc((size_t)n, sizeof *have);
    lm_sequence_runner r;
    mtp_state ms = {0};
    lm_error err = {0};
    lm_status st = lm_sequence_runner_init(&r, fx.model, n, &err);
    if (st == LM_OK) st = mtp_state_init(&ms, 16, (n + 15) / 16, &err);
    double hidden_err = 0;
    int fed = 0, mtp_done = 0, steps = 0;
    while (st == LM_OK && fed < n) {
        int k = steps == 0 ? chunk1 : steps == 1 ? chunk2 : 1;
        if (k > n - fed) k = n - fed;
        st = lm_sequence_runner_feed(&r, ids + fed, k, true, main_logits, hidden + (size_t)fed * H,
                                     NULL, &err);
        fed += k;
        int rows = (fed < n ? fed : n) - 1 - mtp_done; /* rows whose next token is known */
        if (st != LM_OK || rows <= 0) {
            steps++;
            continue;
        }
        bool no_logits = steps == 0, all = rows > 1;
        st = mtp_step(&ms, hidden + (size_t)mtp_done * H, ids + mtp_done + 1, mtp_done, rows, all,
                      no_logits, logits, hidden_out, &err);
        int out_rows = no_logits ? 0 : all ? rows : 1;
        int first_out = all ? mtp_done : mtp_done + rows - 1;
        if (st == LM_OK && out_rows > 0) {
            st = head_logits(hidden_out, out_rows, check, &err);
            double e = normalized_error(check, logits, (size_t)out_rows * V);
            if (!(e <= hidden_err)) hidden_err = e;
            memcpy(got + (size_t)first_out * V, logits, sizeof(float) * (size_t)out_rows * V);
            for (int i = 0; i < out_rows; i++) have[first_out + i] = true;
        }
        mtp_done += rows;
        steps++;
    }
    double worst = 0;
    int worst_row = -1, compared = 0;
    for (int p = 0; p < n - 1 && st == LM_OK; p++) {
        if (!have[p]) continue;
        compared++;
        double e = normalized_error(got + (size_t)p * V, (const float *)want->data + (size_t)p * V,
                                    (size_t)V) *
                   test_stddev((const float *)want->data + (size_t)p * V, (size_t)V) /
                   test_stddev(want->data, (size_t)want->n_elements);
        if (!(e <= worst)) {
            worst = e;
            worst_row = p;
        }
    }
    lm_sequence_runner_free(&r);
    mtp_state_free(&ms);
    free(hidden);
    free(main_logits);
    free(logits);
    free(hidden_out);
    free(check);
    free(got);
    free(have);
    CHECK_OK(st, &err);
    CHECK_MSG(compared >= n - chunk1 - 1, "%s: only %d rows compared", prompt, compared);
    CHECK_MSG(worst < LOGIT_TOLERANCE, "%s chunks %d,%d: row %d normalized error %.3g", prompt,
              chunk1, chunk2, worst_row, worst);
    CHECK_MSG(hidden_err < 1e-5, "lm_head(hidden_out) differs from the logits by %.3g", hidden_err);
}

static void test_incremental_matches_reference(void) {
    check_incremental("p0", 3, 2);
    check_incremental("p2", 30, 17);
    check_incremental("p3", 64, 33);
}

/* Three sequences in one head step, with block tables from one cache: p2
 * (every row), p0 (its last row) and p3's first rows (no logits). */
static void test_sequences_batched_in_one_step(void) {
    const int32_t *ids0, *ids2, *ids3;
    int n0, n2, n3;
    prompt_ids("p0", &ids0, &n0);
    prompt_ids("p2", &ids2, &n2);
    prompt_ids("p3", &ids3, &n3);
    int V = fx.config.vocab_size, H = fx.config.hidden_size;
    int r2 = n2 - 1, r0 = n0 - 1, r3 = 20, N = r2 + r0 + r3;
    lm_error err = {0};
    float *h0 = main_hidden(fx.model, ids0, n0, &err);
    float *h2 = main_hidden(fx.model, ids2, n2, &err);
    float *h3 = main_hidden(fx.model, ids3, n3, &err);
    float *hidden = malloc(sizeof(float) * (size_t)N * H);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)N);
    int32_t *positions = malloc(sizeof(int32_t) * 3 * (size_t)N);
    float *logits = malloc(sizeof(float) * (size_t)(r2 + 1) * V);
    lm_model_context *ctx = NULL;
    /* 13 of the 32 blocks of one pool, not in order (the engine's ids). */
    int32_t blocks[13];
    for (int i = 0; i < 13; i++) blocks[i] = 31 - 2 * i;
    lm_status st = h0 && h2 && h3 ? LM_OK : LM_ERR_INTERNAL;
    if (st == LM_OK) st = mtp_context(8, 32, N, 3, 9, 1, &ctx, &err);
    /* interleaved block ids: p3 gets 0, p2 gets 1..9, p0 gets 10, p3 also 11..12 */
    int32_t table3[3] = {blocks[0], blocks[11], blocks[12]}, table2[9], table0[1] = {blocks[10]};
    for (int i = 0; i < 9; i++) table2[i] = blocks[1 + i];
    if (st == LM_OK) {
        memcpy(hidden, h2, sizeof(float) * (size_t)r2 * H);
        memcpy(hidden + (size_t)r2 * H, h0, sizeof(float) * (size_t)r0 * H);
        memcpy(hidden + (size_t)(r2 + r0) * H, h3, sizeof(float) * (size_t)r3 * H);
        memcpy(tokens, ids2 + 1, sizeof(int32_t) * (size_t)r2);
        memcpy(tokens + r2, ids0 + 1, sizeof(int32_t) * (size_t)r0);
        memcpy(tokens + r2 + r0, ids3 + 1, sizeof(int32_t) * (size_t)r3);
        set_positions(positions, 0, r2);
        set_positions(positions + 3 * r2, 0, r0);
        set_positions(positions + 3 * (r2 + r0), 0, r3);
        lm_step_seq seqs[3] = {
            {.first = 0, .n_new = r2, .state_slot = -1, .block_table = table2, .n_blocks = 9,
             .all_logits = true},
            {.first = r2, .n_new = r0, .state_slot = -1, .block_table = table0, .n_blocks = 1},
            {.first = r2 + r0,
             .n_new = r3,
             .state_slot = -1,
             .block_table = table3,
             .n_blocks = 3,
             .no_logits = true},
        };
        lm_step_batch batch = {
            .n_tokens = N, .tokens = tokens, .positions = positions, .n_seqs = 3, .seqs = seqs};
        CHECK(lm_step_batch_logit_rows(&batch) == r2 + 1);
        st = lm_qwen35_mtp_forward((lm_qwen35_context *)ctx, &batch, hidden, logits, NULL, &err);
    }
    double e2 = INFINITY, e0 = INFINITY;
    if (st == LM_OK) {
        const lm_tensor *want2 = ref("p2", "mtp_logits"), *want0 = ref("p0", "mtp_logits");
        e2 = normalized_error(logits, want2->data, (size_t)r2 * V);
        e0 = normalized_error(logits + (size_t)r2 * V,
                              (const float *)want0->data + (size_t)(r0 - 1) * V, (size_t)V);
    }
    free(h0);
    free(h2);
    free(h3);
    free(hidden);
    free(tokens);
    free(positions);
    free(logits);
    lm_model_context_destroy(ctx);
    CHECK_OK(st, &err);
    CHECK_MSG(e2 < LOGIT_TOLERANCE && e0 < LOGIT_TOLERANCE, "batched errors p2 %.3g p0 %.3g", e2,
              e0);
}

/* Rows written at draft time with wrong tokens are overwritten when the
 * sequence's n_cached is set back (model-spec §C.4 "Advance"). */
static void test_rolled_back_rows_are_overwritten(void) {
    const int32_t *ids;
    int n;
    prompt_ids("p2", &ids, &n);
    int V = fx.config.vocab_size, H = fx.config.hidden_size, split = 40;
    lm_error err = {0};
    float *hidden = main_hidden(fx.model, ids, n, &err);
    CHECK_OK(hidden ? LM_OK : err.code, &err);
    if (!hidden) return;
    float *logits = malloc(sizeof(float) * (size_t)n * V);
    float *draft_hidden = malloc(sizeof(float) * (size_t)H);
    int32_t wrong[4];
    mtp_state ms = {0};
    lm_status st = mtp_state_init(&ms, 16, 5, &err);
    if (st == LM_OK) st = mtp_step(&ms, hidden, ids + 1, 0, split, false, true, logits, NULL, &err);
    /* four recursive draft steps from row split: the head's own h' as hidden */
    memcpy(draft_hidden, hidden + (size_t)split * H, sizeof(float) * (size_t)H);
    for (int d = 0; d < 4 && st == LM_OK; d++) {
        wrong[d] = (ids[split + 1 + d] + 7 + d) % V;
        st = mtp_step(&ms, draft_hidden, &wrong[d], split + d, 1, false, false, logits,
                      draft_hidden, &err);
    }
    /* rejected: back to split, the target's rows with the right tokens */
    if (st == LM_OK)
        st = mtp_step(&ms, hidden + (size_t)split * H, ids + split + 1, split, n - 1 - split, true,
                      false, logits, NULL, &err);
    const lm_tensor *want = ref("p2", "mtp_logits");
    double e = st == LM_OK ? normalized_error(logits, (const float *)want->data + (size_t)split * V,
                                              (size_t)(n - 1 - split) * V)
                           : INFINITY;
    mtp_state_free(&ms);
    free(hidden);
    free(logits);
    free(draft_hidden);
    CHECK_OK(st, &err);
    CHECK_MSG(e < LOGIT_TOLERANCE, "after rollback: normalized error %.3g", e);
}

static void test_bad_batches_are_refused(void) {
    mtp_state ms;
    lm_error err = {0};
    CHECK_OK(mtp_state_init(&ms, 16, 1, &err), &err);
    float hidden[2 * 64] = {0}, logits[2 * 2048];
    int32_t tokens[2] = {5, 2048};
    lm_status st = mtp_step(&ms, hidden, tokens, 0, 2, true, false, logits, NULL, &err);
    bool bad_token = st == LM_ERR_INVALID && strstr(err.message, "2048");
    tokens[1] = 6;
    st = mtp_step(&ms, hidden, tokens, 15, 2, true, false, logits, NULL, &err); /* needs 2 blocks */
    bool too_long = st == LM_ERR_INVALID && strstr(err.message, "blocks");
    /* a context without the head's cache (made without speculation) */
    lm_model_context *other = NULL;
    lm_status made = mtp_context(16, 1, MAX_ROWS, 1, 1, 0, &other, &err);
    lm_step_seq seq = {.n_new = 1, .state_slot = -1, .block_table = ms.blocks, .n_blocks = 1};
    lm_step_batch batch = {
        .n_tokens = 1, .tokens = tokens, .positions = ms.positions, .n_seqs = 1, .seqs = &seq};
    st = made == LM_OK ? lm_qwen35_mtp_forward((lm_qwen35_context *)other, &batch, hidden, logits,
                                               NULL, &err)
                       : LM_OK;
    bool wrong_cache = st == LM_ERR_INVALID;
    lm_model_context_destroy(other);
    mtp_state_free(&ms);
    CHECK(bad_token);
    CHECK(too_long);
    CHECK(made == LM_OK && wrong_cache);
}

/* ------------------------------------------------------- doctored copies */

/* A copy of the fixture folder in the scratch dir: config.json and the main
 * shard linked, the MTP shard rewritten (one tensor dropped, the prefix
 * changed, or the norm weights stored as float32 1 + w) and a new index. */
typedef struct {
    const char *drop;   /* tensor left out, or NULL */
    const char *prefix; /* replaces "mtp.", or NULL */
    bool shift_norms;
} copy_edit;

static bool add_tensor(cJSON *header, const char *name, const char *dtype, const lm_tensor *t,
                       size_t begin, size_t end) {
    cJSON *entry = cJSON_AddObjectToObject(header, name);
    cJSON *shape = entry ? cJSON_AddArrayToObject(entry, "shape") : NULL;
    cJSON *offsets = entry ? cJSON_AddArrayToObject(entry, "data_offsets") : NULL;
    if (!shape || !offsets || !cJSON_AddStringToObject(entry, "dtype", dtype)) return false;
    for (int d = 0; d < t->n_dims; d++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)begin));
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)end));
    return true;
}

/* Every 1-D tensor of the dense head is a zero-centred norm weight. */
static bool is_norm(const lm_tensor *t) { return t->n_dims == 1 && strstr(t->name, "norm"); }

static bool write_mtp_shard(const char *path, const lm_safetensors *src, const copy_edit *edit,
                            cJSON *weight_map) {
    cJSON *header = cJSON_CreateObject();
    size_t n = lm_safetensors_count(src), total = 0;
    unsigned char *data = NULL;
    bool ok = header != NULL;
    for (size_t i = 0; i < n && ok; i++) { /* first pass: sizes */
        const lm_tensor *t = lm_safetensors_at(src, i);
        if (edit->drop && strcmp(t->name, edit->drop) == 0) continue;
        total += edit->shift_norms && is_norm(t) ? 4 * (size_t)t->n_elements : t->n_bytes;
    }
    data = malloc(total ? total : 1);
    size_t at = 0;
    for (size_t i = 0; i < n && ok && data; i++) {
        const lm_tensor *t = lm_safetensors_at(src, i);
        if (edit->drop && strcmp(t->name, edit->drop) == 0) continue;
        char name[256];
        snprintf(name, sizeof name, "%s%s", edit->prefix ? edit->prefix : "mtp.", t->name + 4);
        if (edit->shift_norms && is_norm(t)) {
            for (int64_t k = 0; k < t->n_elements; k++) {
                float v = 1.0f + lm_bf16_to_f32(((const uint16_t *)t->data)[k]);
                memcpy(data + at + 4 * (size_t)k, &v, 4);
            }
            ok = add_tensor(header, name, "F32", t, at, at + 4 * (size_t)t->n_elements);
            at += 4 * (size_t)t->n_elements;
        } else {
            memcpy(data + at, t->data, t->n_bytes);
            ok = add_tensor(header, name, lm_dtype_name(t->dtype), t, at, at + t->n_bytes);
            at += t->n_bytes;
        }
        ok = ok && cJSON_AddStringToObject(weight_map, name, "model-mtp.safetensors");
    }
    char *text = ok && data ? cJSON_PrintUnformatted(header) : NULL;
    FILE *f = text ? fopen(path, "wb") : NULL;
    if (f) {
        size_t len = strlen(text), padded = (len + 7) / 8 * 8;
        uint64_t header_len = padded;
        ok = fwrite(&header_len, 8, 1, f) == 1 && fwrite(text, 1, len, f) == len;
        for (size_t k = len; k < padded && ok; k++) ok = fputc(' ', f) != EOF;
        ok = ok && fwrite(data, 1, total, f) == total;
        ok = fclose(f) == 0 && ok;
    } else {
        ok = false;
    }
    free(text);
    free(data);
    cJSON_Delete(header);
    return ok;
}

static bool make_copy(const char *name, const copy_edit *edit, char *dir, size_t size) {
    char src[1400], dst[1400];
    snprintf(dir, size, "%s/%s", test_scratch_dir(), name);
    if (mkdir(dir, 0755) != 0) return false;
    static const char *const linked[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char target[PATH_MAX];
        snprintf(src, sizeof src, "%s/%s", fx.dir, linked[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, linked[i]);
        if (!realpath(src, target) || symlink(target, dst) != 0) return false;
    }
    lm_error err = {0};
    lm_safetensors *main_shard = NULL, *mtp_shard = NULL;
    cJSON *index = cJSON_CreateObject();
    cJSON *map = index ? cJSON_AddObjectToObject(index, "weight_map") : NULL;
    snprintf(src, sizeof src, "%s/model.safetensors", fx.dir);
    bool ok = map && lm_safetensors_open(src, LM_LOAD_READ, &main_shard, &err) == LM_OK;
    for (size_t i = 0; ok && i < lm_safetensors_count(main_shard); i++)
        ok = cJSON_AddStringToObject(map, lm_safetensors_at(main_shard, i)->name,
                                     "model.safetensors");
    snprintf(src, sizeof src, "%s/model-mtp.safetensors", fx.dir);
    snprintf(dst, sizeof dst, "%s/model-mtp.safetensors", dir);
    ok = ok && lm_safetensors_open(src, LM_LOAD_READ, &mtp_shard, &err) == LM_OK &&
         write_mtp_shard(dst, mtp_shard, edit, map);
    char *text = ok ? cJSON_Print(index) : NULL;
    snprintf(dst, sizeof dst, "%s/model.safetensors.index.json", dir);
    FILE *f = text ? fopen(dst, "w") : NULL;
    ok = f && fputs(text, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    free(text);
    cJSON_Delete(index);
    lm_safetensors_close(main_shard);
    lm_safetensors_close(mtp_shard);
    return ok;
}

typedef struct {
    lm_model *model;
    lm_qwen35_model *q; /* the same model */
} loaded_copy;

static lm_status load_copy(const char *dir, lm_mtp_norms norms, loaded_copy *c, lm_error *err) {
    memset(c, 0, sizeof *c);
    lm_model_load_options options = {.mtp_norms = norms};
    lm_status st = lm_model_open(dir, &options, fx.backend, &c->model, err);
    if (st == LM_OK) c->q = (lm_qwen35_model *)c->model;
    return st;
}

static void free_copy(loaded_copy *c) {
    lm_model_free(c->model);
    memset(c, 0, sizeof *c);
}

static void test_missing_tensor_loads_without_head(void) {
    char dir[1200];
    const char *dropped = "mtp.layers.0.mlp.up_proj.weight";
    copy_edit edit = {.drop = dropped};
    CHECK(make_copy("missing", &edit, dir, sizeof dir));
    loaded_copy c;
    lm_error err = {0};
    lm_status st = load_copy(dir, LM_MTP_NORMS_AUTO, &c, &err);
    bool has = st == LM_OK && c.q->has_mtp;
    bool info_has = st == LM_OK && lm_model_describe(c.model)->has_mtp;
    char why[LM_ERROR_MESSAGE_MAX] = "";
    if (st == LM_OK) snprintf(why, sizeof why, "%s", c.q->mtp_missing);
    /* the head's tensors are not counted as used */
    const lm_tensor *fc =
        st == LM_OK && c.q->checkpoint ? lm_checkpoint_find(c.q->checkpoint, "mtp.fc.weight") : NULL;
    bool fc_used = st == LM_OK && fc && lm_weights_was_used(&c.q->weights, fc);
    /* a context with the head's cache cannot be made */
    lm_context_options o = {.kv_block_size = 16, .kv_blocks = 1, .state_slots = 1,
                            .max_step_tokens = 16, .max_step_seqs = 1, .max_blocks_per_seq = 1,
                            .speculative_tokens = 1};
    lm_model_context *ctx = NULL;
    lm_error cache_err = {0};
    lm_status cache_st =
        st == LM_OK ? lm_model_context_create(c.model, &o, &ctx, &cache_err) : LM_ERR_INTERNAL;
    lm_model_context_destroy(cache_st == LM_OK ? ctx : NULL);
    /* the text model itself runs */
    const int32_t *ids;
    int n;
    prompt_ids("p0", &ids, &n);
    float *hidden = st == LM_OK ? main_hidden(c.model, ids, n, &err) : NULL;
    free(hidden);
    free_copy(&c);
    CHECK_OK(st, &err);
    CHECK(!has && !info_has);
    CHECK_MSG(strstr(why, dropped) && strstr(why, "missing"), "reason: %s", why);
    CHECK(fc && !fc_used);
    CHECK_MSG(cache_st == LM_ERR_INVALID && strstr(cache_err.message, dropped), "context: %s",
              cache_err.message);
    CHECK(hidden != NULL);
}

static void test_other_prefixes(void) {
    static const char *const prefixes[] = {"model.mtp.", "language_model.mtp."};
    for (int i = 0; i < 2; i++) {
        char dir[1200], name[32];
        snprintf(name, sizeof name, "prefix%d", i);
        copy_edit edit = {.prefix = prefixes[i]};
        CHECK(make_copy(name, &edit, dir, sizeof dir));
        loaded_copy c;
        lm_error err = {0};
        lm_status st = load_copy(dir, LM_MTP_NORMS_AUTO, &c, &err);
        bool right = st == LM_OK && c.q->has_mtp && strcmp(c.q->mtp->prefix, prefixes[i]) == 0;
        double e = right ? prompt_error(c.model, "p0", &err) : INFINITY;
        free_copy(&c);
        CHECK_OK(st, &err);
        CHECK_MSG(right, "%s: %s", prefixes[i], err.message);
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s: normalized error %.3g", prefixes[i], e);
    }
}

/* Norm weights stored as 1 + w (float32, exact) are detected and give the
 * same logits; forcing the convention either way is obeyed. */
static void test_shifted_norms_are_detected(void) {
    char dir[1200];
    copy_edit edit = {.shift_norms = true};
    CHECK(make_copy("shifted", &edit, dir, sizeof dir));
    static const struct {
        bool doctored;
        lm_mtp_norms norms;
        bool shifted, matches;
    } cases[] = {
        {true, LM_MTP_NORMS_AUTO, true, true},           {true, LM_MTP_NORMS_SHIFTED, true, true},
        {true, LM_MTP_NORMS_ZERO_CENTRED, false, false}, {false, LM_MTP_NORMS_SHIFTED, true, false},
        {false, LM_MTP_NORMS_ZERO_CENTRED, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        loaded_copy c;
        lm_error err = {0};
        lm_status st = load_copy(cases[i].doctored ? dir : fx.dir, cases[i].norms, &c, &err);
        bool has = st == LM_OK && c.q->has_mtp;
        bool shifted = has && c.q->mtp->norms_were_shifted;
        bool forced = has && c.q->mtp->norms_forced;
        float mean = has ? c.q->mtp->stored_norm_mean : NAN;
        double e = has ? prompt_error(c.model, "p2", &err) : INFINITY;
        free_copy(&c);
        CHECK_OK(st, &err);
        CHECK_MSG(has, "case %zu: %s", i, err.message);
        CHECK_MSG(shifted == cases[i].shifted, "case %zu: shifted %d", i, shifted);
        CHECK_MSG(!has || forced == (cases[i].norms != LM_MTP_NORMS_AUTO), "case %zu: forced %d", i,
                  forced);
        CHECK_MSG(cases[i].doctored ? mean > 0.5f : mean < 0.5f, "case %zu: mean %g", i, mean);
        if (cases[i].matches)
            CHECK_MSG(e < LOGIT_TOLERANCE, "case %zu: normalized error %.3g", i, e);
        else
            CHECK_MSG(e > 1e-2, "case %zu: wrong norms still match (%.3g)", i, e);
    }
}

/* -------------------------------------------------------- other configs */

static void test_config_without_head(void) {
    lm_qwen35_config config = fx.config;
    config.mtp_num_hidden_layers = 0;
    lm_checkpoint *ck = NULL;
    lm_qwen35_model *m = NULL;
    lm_error err = {0};
    CHECK_OK(lm_checkpoint_open(fx.dir, LM_LOAD_READ, &ck, &err), &err);
    CHECK_OK(lm_qwen35_load(ck, &config, NULL, fx.backend, &m, &err), &err); /* takes ck */
    if (!m) return;
    bool has = m->has_mtp || lm_model_describe(&m->base)->has_mtp;
    bool said = strstr(m->mtp_missing, "no MTP head") != NULL;
    const lm_tensor *fc = lm_checkpoint_find(m->checkpoint, "mtp.fc.weight");
    bool used = fc && lm_weights_was_used(&m->weights, fc);
    lm_model_free(&m->base);
    CHECK(fc != NULL);
    CHECK(!has && said && !used);
}


int main(void) {
    if (!load_fixture()) {
        printf("test_mtp: 0 passed, 1 failed\n");
        return 1;
    }
    RUN_TEST(test_head_is_loaded);
    RUN_TEST(test_mtp_logits_match_reference);
    RUN_TEST(test_incremental_matches_reference);
    RUN_TEST(test_sequences_batched_in_one_step);
    RUN_TEST(test_rolled_back_rows_are_overwritten);
    RUN_TEST(test_bad_batches_are_refused);
    RUN_TEST(test_missing_tensor_loads_without_head);
    RUN_TEST(test_other_prefixes);
    RUN_TEST(test_shifted_norms_are_detected);
    RUN_TEST(test_config_without_head);
    lm_safetensors_close(fx.reference);
    test_model_close(&fx.tm);
    return test_summary("test_mtp");
}
