/* The text side of image prompts against transformers' references
 * (fixtures/README.md, prompt img0): placeholder expansion, the
 * 3-component positions (model-spec §D.5, §E.5) exactly, and the logits
 * and greedy continuation of the text model fed the reference's own
 * image_embeds in place of the placeholders' embeddings, with decode
 * positions past the prompt shifted by the rope delta.  Also: a prefill
 * cut into chunks inside the image equals the one-shot prefill.  The
 * vision tower itself is test_vision's. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sequence_runner.h"
#include "harness.h"
#include "io/json_file.h"
#include "model_util.h"
#include "image/multimodal_prompt.h"

#define LOGIT_TOLERANCE test_logit_tolerance() /* max |Δ| / std(reference), fixtures/README.md */
#define MARGIN_RULE 1e-3

typedef struct {
    char dir[4096];
    test_model m;
    lm_safetensors *reference;
    int32_t image_token_id;
    const int32_t *ids;
    int n;
    lm_image_grid grid;
    const float *embeds; /* [image tokens, H] */
    int H, V;
} image_fixture;

static bool read_image_token(image_fixture *f) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", f->dir);
    cJSON *config;
    lm_error err = {0};
    if (lm_json_read_file(path, 1 << 20, &config, &err) != LM_OK) {
        fprintf(stderr, "%s\n", err.message);
        return false;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(config, "image_token_id");
    bool ok = cJSON_IsNumber(id);
    if (ok) f->image_token_id = (int32_t)id->valueint;
    cJSON_Delete(config);
    return ok;
}

static const lm_tensor *ref(const image_fixture *f, const char *what) {
    char key[64];
    snprintf(key, sizeof key, "img0.%s", what);
    return lm_safetensors_find(f->reference, key);
}

static bool open_fixture(image_fixture *f, const char *dir) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%.4000s", dir);
    if (!read_image_token(f) || !test_model_open(&f->m, dir, 2)) return false;
    char path[4200];
    lm_error err = {0};
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    if (lm_safetensors_open(path, LM_LOAD_READ, &f->reference, &err) != LM_OK) {
        fprintf(stderr, "%s\n", err.message);
        return false;
    }
    const lm_tensor *ids = ref(f, "input_ids"), *grid = ref(f, "grid_thw"), *embeds = ref(f, "image_embeds");
    if (!ids || !grid || grid->n_elements != 3 || !embeds) return false;
    const int32_t *g = grid->data;
    f->ids = ids->data;
    f->n = (int)ids->n_elements;
    f->grid = (lm_image_grid){g[0], g[1], g[2], 2};
    f->embeds = embeds->data;
    f->H = lm_model_describe(f->m.model)->hidden_size;
    f->V = lm_model_describe(f->m.model)->vocab_size;
    return (size_t)embeds->n_elements == (size_t)lm_image_grid_tokens(&f->grid) * (size_t)f->H;
}

static void close_fixture(image_fixture *f) {
    lm_safetensors_close(f->reference);
    test_model_close(&f->m);
}

/* The prompt rows: the reference's image rows at the placeholders. */
static const float **input_rows_of(const image_fixture *f, const lm_image_span *span) {
    const float **rows = calloc((size_t)f->n, sizeof *rows);
    if (!rows) return NULL;
    for (int j = 0; j < span->count; j++) rows[span->first + j] = f->embeds + (size_t)j * (size_t)f->H;
    return rows;
}

/* The img0 prompt as the engine makes it: its image's span in the expanded
 * ids, every token's 3-component position, the rope delta, and the rows its
 * placeholders take (the reference's image_embeds).  False (and a message)
 * on failure. */
typedef struct {
    int32_t *positions; /* [n][3] */
    const float **rows; /* [n] */
    lm_image_span span;
    int delta;
} image_prompt;

static bool image_prompt_make(const image_fixture *f, image_prompt *p) {
    memset(p, 0, sizeof *p);
    int32_t *out = malloc(sizeof(int32_t) * (size_t)f->n);
    p->positions = malloc(sizeof(int32_t) * 3 * (size_t)f->n);
    int n_out = 0;
    lm_error err = {0};
    bool ok = out && p->positions &&
              lm_expand_image_placeholders(f->ids, f->n, f->image_token_id, &f->grid, 1, out, f->n, &n_out,
                                           &p->span, &err) == LM_OK;
    free(out);
    if (ok) {
        lm_image_prompt_positions(f->n, &f->grid, &p->span, 1, p->positions, &p->delta);
        ok = (p->rows = input_rows_of(f, &p->span)) != NULL;
    }
    if (!ok) fprintf(stderr, "  cannot make the img0 prompt: %s\n", err.message[0] ? err.message : "out of memory");
    return ok;
}

static void image_prompt_free(image_prompt *p) {
    free(p->positions);
    free(p->rows);
    memset(p, 0, sizeof *p);
}

/* The one-placeholder prompt a chat template writes expands to the
 * reference ids; the expanded ids are taken as they are; other counts are
 * refused. */
static void test_expansion(void *arg) {
    const image_fixture *f = arg;
    int32_t *collapsed = malloc(sizeof(int32_t) * (size_t)f->n), *out = malloc(sizeof(int32_t) * (size_t)f->n);
    CHECK(collapsed && out);
    int c = 0;
    for (int i = 0; i < f->n; i++)
        if (f->ids[i] != f->image_token_id || i == 0 || f->ids[i - 1] != f->image_token_id)
            collapsed[c++] = f->ids[i];
    int n_out = 0;
    lm_image_span span;
    lm_error err = {0};
    CHECK_OK(lm_expand_image_placeholders(collapsed, c, f->image_token_id, &f->grid, 1, out, f->n,
                                          &n_out, &span, &err), &err);
    CHECK(n_out == f->n && memcmp(out, f->ids, sizeof(int32_t) * (size_t)f->n) == 0);
    CHECK(span.count == lm_image_grid_tokens(&f->grid) && f->ids[span.first] == f->image_token_id &&
          f->ids[span.first - 1] != f->image_token_id);
    lm_image_span again;
    CHECK_OK(lm_expand_image_placeholders(f->ids, f->n, f->image_token_id, &f->grid, 1, out, f->n,
                                          &n_out, &again, &err), &err);
    CHECK(n_out == f->n && again.first == span.first && again.count == span.count);
    /* too little room, two images for one placeholder, a text-only prompt */
    CHECK(lm_expand_image_placeholders(collapsed, c, f->image_token_id, &f->grid, 1, out, f->n - 1,
                                       &n_out, &span, &err) == LM_ERR_INVALID);
    lm_image_grid two[2] = {f->grid, f->grid};
    lm_image_span spans[2];
    CHECK(lm_expand_image_placeholders(collapsed, c, f->image_token_id, two, 2, out, f->n, &n_out,
                                       spans, &err) == LM_ERR_INVALID);
    CHECK(strstr(err.message, "placeholders") != NULL);
    free(collapsed);
    free(out);
}

static void test_positions(void *arg) {
    const image_fixture *f = arg;
    const lm_tensor *want = ref(f, "position_ids");
    CHECK(want && (size_t)want->n_elements == 3 * (size_t)f->n);
    const int32_t *w = want->data; /* [3, T] */
    image_prompt ip;
    CHECK(image_prompt_make(f, &ip));
    int32_t *pos = ip.positions;
    int delta = ip.delta;
    int max = 0;
    for (int i = 0; i < f->n; i++)
        for (int c = 0; c < 3; c++) {
            CHECK_MSG(pos[3 * i + c] == w[(size_t)c * (size_t)f->n + (size_t)i],
                      "token %d component %d: %d, reference %d", i, c, pos[3 * i + c],
                      w[(size_t)c * (size_t)f->n + (size_t)i]);
            if (w[(size_t)c * (size_t)f->n + (size_t)i] > max) max = w[(size_t)c * (size_t)f->n + (size_t)i];
        }
    CHECK(delta == max + 1 - f->n && delta < 0); /* an image of more than one row moves positions back */
    image_prompt_free(&ip);
}

/* Prefill logits of every row and the greedy continuation (decode at
 * index + delta) with the reference's image rows. */
static void test_logits_and_greedy(void *arg) {
    const image_fixture *f = arg;
    const lm_tensor *want = ref(f, "logits"), *greedy = ref(f, "greedy"), *margin = ref(f, "greedy_margin");
    CHECK(want && greedy && margin && (size_t)want->n_elements == (size_t)f->n * (size_t)f->V);
    float *logits = malloc(sizeof(float) * (size_t)f->n * (size_t)f->V);
    CHECK(logits);
    image_prompt ip;
    CHECK(image_prompt_make(f, &ip));
    int32_t *pos = ip.positions;
    int delta = ip.delta;
    const float **rows = ip.rows;
    lm_error err = {0};
    int G = (int)greedy->n_elements;
    lm_sequence_runner r;
    CHECK_OK(lm_sequence_runner_init(&r, f->m.model, f->n + G, &err), &err);
    CHECK_OK(lm_sequence_runner_feed_inputs(&r, f->ids, pos, rows, f->n, true, logits, NULL, NULL, &err),
             &err);
    double e = test_normalized_error(logits, want->data, want->n_elements);
    printf("  %s img0 logits: max |d|/std %.2e\n", f->dir, e);
    CHECK_MSG(e < LOGIT_TOLERANCE, "img0 logits off by %.3g of the std", e);

    /* Without the image rows (placeholder embeddings) the logits differ:
     * the rows are really used. */
    r.position_delta = delta;
    const float *last = logits + (size_t)(f->n - 1) * (size_t)f->V;
    float *row = malloc(sizeof(float) * (size_t)f->V);
    CHECK(row);
    memcpy(row, last, sizeof(float) * (size_t)f->V);
    const int32_t *g = greedy->data;
    const float *m = margin->data;
    for (int s = 0; s < G; s++) {
        int32_t next = test_argmax(row, f->V);
        if (next != g[s]) {
            CHECK_MSG(m[s] < MARGIN_RULE, "greedy step %d: %d, reference %d (margin %.3g)", s, next,
                      g[s], m[s]);
            break;
        }
        CHECK_OK(lm_sequence_runner_feed(&r, &next, 1, false, row, NULL, NULL, &err), &err);
    }
    lm_sequence_runner_free(&r);

    lm_sequence_runner plain;
    CHECK_OK(lm_sequence_runner_init(&plain, f->m.model, f->n, &err), &err);
    CHECK_OK(lm_sequence_runner_feed_inputs(&plain, f->ids, pos, NULL, f->n, true, logits, NULL,
                                            NULL, &err), &err);
    lm_sequence_runner_free(&plain);
    CHECK_MSG(test_normalized_error(logits, want->data, want->n_elements) > 1e-2,
              "the logits do not depend on the image rows");
    free(row);
    image_prompt_free(&ip);
    free(logits);
}

/* Prefill chunks that cut through the image (every chunk size from 1 to
 * the prompt) give the one-shot prefill's last row. */
static void test_chunk_inside_image(void *arg) {
    const image_fixture *f = arg;
    float *whole = malloc(sizeof(float) * (size_t)f->V), *chunked = malloc(sizeof(float) * (size_t)f->V);
    CHECK(whole && chunked);
    image_prompt ip;
    CHECK(image_prompt_make(f, &ip));
    int32_t *pos = ip.positions;
    const float **rows = ip.rows;
    lm_image_span span = ip.span;
    lm_error err = {0};
    lm_sequence_runner r;
    CHECK_OK(lm_sequence_runner_init(&r, f->m.model, f->n, &err), &err);
    CHECK_OK(lm_sequence_runner_feed_inputs(&r, f->ids, pos, rows, f->n, false, whole, NULL, NULL, &err), &err);
    lm_sequence_runner_free(&r);
    int sizes[] = {1, 5, 7, span.first + 3, span.count - 1};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int chunk = sizes[k] > 0 ? sizes[k] : 1;
        CHECK_OK(lm_sequence_runner_init(&r, f->m.model, f->n, &err), &err);
        for (int done = 0; done < f->n; done += chunk) {
            int len = f->n - done < chunk ? f->n - done : chunk;
            CHECK_OK(lm_sequence_runner_feed_inputs(&r, f->ids + done, pos + 3 * done, rows + done, len,
                                                    false, chunked, NULL, NULL, &err), &err);
        }
        lm_sequence_runner_free(&r);
        double e = test_normalized_error(chunked, whole, (size_t)f->V);
        CHECK_MSG(e < 1e-5, "chunks of %d: last row off by %.3g of the std", chunk, e);
    }
    image_prompt_free(&ip);
    free(whole);
    free(chunked);
}

/* Two images with text between and after, worked by hand from model-spec
 * §D.5: [t t I*6 t I t] with grids (1,4,6) and (1,2,2), merge 2. */
static void test_two_images_worked(void) {
    const int32_t I = 7;
    int32_t prompt[6] = {1, 2, I, 3, I, 4}, out[16];
    lm_image_grid grids[2] = {{1, 4, 6, 2}, {1, 2, 2, 2}};
    lm_image_span spans[2];
    int n = 0, delta = 0;
    lm_error err = {0};
    CHECK_OK(lm_expand_image_placeholders(prompt, 6, I, grids, 2, out, 16, &n, spans, &err), &err);
    CHECK(n == 11 && spans[0].first == 2 && spans[0].count == 6 && spans[1].first == 9 &&
          spans[1].count == 1);
    int32_t pos[11][3];
    lm_image_prompt_positions(n, grids, spans, 2, &pos[0][0], &delta);
    const int32_t want[11][3] = {{0, 0, 0}, {1, 1, 1},                         /* text */
                                 {2, 2, 2}, {2, 2, 3}, {2, 2, 4},              /* image 1, row 0 */
                                 {2, 3, 2}, {2, 3, 3}, {2, 3, 4},              /* row 1 */
                                 {5, 5, 5},                                    /* text: 2 + max(2, 3) */
                                 {6, 6, 6},                                    /* image 2 */
                                 {7, 7, 7}};                                   /* text */
    CHECK(memcmp(pos, want, sizeof want) == 0);
    CHECK(delta == 8 - 11);
}

/* The MTP head drafts on an image prompt at the target's positions
 * (model-spec §C.6): after the prompt's first k rows (every k), the draft
 * the engine's path makes (catch-up over the step's rows, lm_model_draft)
 * is the argmax of the head's logits computed from scratch at the image
 * positions, wherever that argmax is clear. */
static void test_drafts_at_image_positions(void *arg) {
    const image_fixture *f = arg;
    if (!lm_model_has_mtp_logits(f->m.model)) return;
    const lm_tensor *greedy = ref(f, "greedy");
    CHECK(greedy);
    int n = f->n, H = f->H, V = f->V;
    int32_t *next = malloc(sizeof(int32_t) * (size_t)n);
    float *hidden = malloc(sizeof(float) * (size_t)n * (size_t)H);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)V), *mtp = malloc(sizeof(float) * (size_t)n * (size_t)V);
    CHECK(next && hidden && logits && mtp);
    image_prompt ip;
    CHECK(image_prompt_make(f, &ip));
    int32_t *pos = ip.positions;
    int delta = ip.delta;
    const float **rows = ip.rows;
    lm_error err = {0};
    lm_sequence_runner r;
    CHECK_OK(lm_sequence_runner_init(&r, f->m.model, n, &err), &err);
    CHECK_OK(lm_sequence_runner_feed_inputs(&r, f->ids, pos, rows, n, true, logits, hidden, NULL, &err), &err);
    lm_sequence_runner_free(&r);
    memcpy(next, f->ids + 1, sizeof(int32_t) * (size_t)(n - 1));
    next[n - 1] = ((const int32_t *)greedy->data)[0];
    CHECK_OK(lm_model_mtp_sequence_logits(f->m.model, hidden, next, pos, n, mtp, &err), &err);

    enum { BLOCK = 16 };
    int n_blocks = (n + 2 + BLOCK - 1) / BLOCK, compared = 0;
    int32_t table[64];
    CHECK(n_blocks <= 64);
    for (int b = 0; b < n_blocks; b++) table[b] = b;
    lm_context_options o = {.kv_block_size = BLOCK, .kv_blocks = n_blocks, .state_slots = 1,
                            .max_step_tokens = n, .max_step_seqs = 1, .max_blocks_per_seq = n_blocks,
                            .max_logit_rows = n, .speculative_tokens = 1};
    for (int k = 1; k <= n; k++) {
        const float *row = mtp + (size_t)(k - 1) * (size_t)V;
        int best = test_argmax(row, V);
        float second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != best && row[v] > second) second = row[v];
        if (row[best] - second < MARGIN_RULE) continue;
        lm_model_context *ctx;
        CHECK_OK(lm_model_context_create(f->m.model, &o, &ctx, &err), &err);
        lm_model_reset_state(ctx, 0);
        lm_step_seq seq = {.first = 0, .n_new = k, .n_cached = 0, .state_slot = 0, .block_table = table,
                           .n_blocks = n_blocks};
        lm_step_batch b = {.n_tokens = k, .tokens = f->ids, .positions = pos, .input_rows = rows,
                           .n_seqs = 1, .seqs = &seq};
        lm_forward_out fo = {.logits = logits};
        lm_status st = lm_model_forward(ctx, &b, &fo, &err);
        int32_t draft = -1;
        lm_draft_seq d = {.hidden_row = 0, .from = 0, .count = k, .next_tokens = next, .block_table = table,
                          .n_blocks = n_blocks, .positions = pos, .position_delta = delta, .n_drafts = 1,
                          .drafts = &draft};
        if (st == LM_OK) st = lm_model_draft(ctx, &d, 1, &err);
        lm_model_context_destroy(ctx);
        CHECK_OK(st, &err);
        CHECK_MSG(draft == best, "after %d rows: drafted %d, the head at the image positions says %d", k,
                  draft, best);
        compared++;
    }
    printf("  %s: %d drafts at image positions checked\n", f->dir, compared);
    CHECK(compared > n / 2);
    image_prompt_free(&ip);
    free(next);
    free(hidden);
    free(logits);
    free(mtp);
}

int main(void) {
    RUN_TEST(test_two_images_worked);
    char paths[3][1024];
    test_fixture_path(paths[0], sizeof paths[0], "models/qwen35-dense");
    test_fixture_path(paths[1], sizeof paths[1], "models/glm46v-moe");
    snprintf(paths[2], sizeof paths[2], "tests/data/glm-shapes/groups4-top4-hd16");
    for (int i = 0; i < 3; i++) {
        image_fixture f;
        if (!open_fixture(&f, paths[i])) {
            test_failed(__FILE__, __LINE__, "cannot open the img0 fixture of %s", paths[i]);
            close_fixture(&f);
            continue;
        }
        test_run_with("expansion", test_expansion, &f);
        test_run_with("positions", test_positions, &f);
        test_run_with("logits_and_greedy", test_logits_and_greedy, &f);
        test_run_with("chunk_inside_image", test_chunk_inside_image, &f);
        test_run_with("drafts_at_image_positions", test_drafts_at_image_positions, &f);
        close_fixture(&f);
    }
    return test_summary("test_image_prompt");
}
