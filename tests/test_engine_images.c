/* Image requests through the engine (include/loom.h), per fixture with an
 * img0 prompt (qwen35-dense, glm46v-moe, glm-shapes/groups4-top4-hd16):
 * the greedy continuation of transformers' reference from the image file
 * itself (decode, preprocess, tower, placeholders, positions, decode at
 * index + rope delta), with the prompt's placeholder given once or
 * expanded; image requests batched among text requests with prefill
 * chunks that cut through the image equal to each alone; preempted equal
 * to not; speculative greedy equal to plain greedy with the drafts
 * verified (speculation stays on for images); the cache encodes a
 * repeated image once; and bad images, placeholders or models are refused
 * at submit with a sentence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine_util.h"
#include "harness.h"
#include "io/json_file.h"
#include "loom.h"
#include "model_util.h"

#define MARGIN_RULE 1e-3
#define GEN 16

typedef struct {
    char dir[4096];
    lm_safetensors *reference;
    const int32_t *ids; /* expanded */
    int n;
    int32_t *collapsed; /* one placeholder */
    int n_collapsed;
    int32_t image_token_id;
    int image_rows;
    char *image;
    size_t image_bytes;
    bool has_mtp;
} fixture;

static const lm_tensor *ref(const fixture *f, const char *what) {
    char key[64];
    snprintf(key, sizeof key, "img0.%s", what);
    return lm_safetensors_find(f->reference, key);
}

static bool open_fixture(fixture *f, const char *dir) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%.4000s", dir);
    char path[4200];
    lm_error err = {0};
    snprintf(path, sizeof path, "%s/reference.safetensors", f->dir);
    if (lm_safetensors_open(path, LM_LOAD_READ, &f->reference, &err) != LM_OK) return false;
    snprintf(path, sizeof path, "%s/image0.png", f->dir);
    if (lm_read_small_file(path, 1 << 24, &f->image, &f->image_bytes, &err) != LM_OK) return false;
    snprintf(path, sizeof path, "%s/config.json", f->dir);
    cJSON *config;
    if (lm_json_read_file(path, 1 << 20, &config, &err) != LM_OK) return false;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(config, "image_token_id");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(config, "text_config");
    const cJSON *mtp = text ? cJSON_GetObjectItemCaseSensitive(text, "mtp_num_hidden_layers") : NULL;
    f->has_mtp = cJSON_IsNumber(mtp) && mtp->valueint > 0;
    bool ok = cJSON_IsNumber(id);
    if (ok) f->image_token_id = (int32_t)id->valueint;
    cJSON_Delete(config);
    const lm_tensor *ids = ref(f, "input_ids");
    if (!ok || !ids) return false;
    f->ids = ids->data;
    f->n = (int)ids->n_elements;
    f->collapsed = malloc(sizeof(int32_t) * (size_t)f->n);
    if (!f->collapsed) return false;
    for (int i = 0; i < f->n; i++) {
        bool pad = f->ids[i] == f->image_token_id;
        f->image_rows += pad;
        if (!pad || i == 0 || f->ids[i - 1] != f->image_token_id) f->collapsed[f->n_collapsed++] = f->ids[i];
    }
    return f->image_rows > 1;
}

static void close_fixture(fixture *f) {
    lm_safetensors_close(f->reference);
    free(f->collapsed);
    free(f->image);
}

static loom_request_params image_params(const fixture *f, const loom_image *image, bool expanded, int gen) {
    loom_request_params p;
    loom_request_params_default(&p);
    p.prompt = expanded ? f->ids : f->collapsed;
    p.n_prompt = expanded ? f->n : f->n_collapsed;
    p.images = image;
    p.n_images = 1;
    p.max_tokens = gen;
    p.ignore_eos = true;
    p.sampling.temperature = 0;
    return p;
}

/* The reference's greedy tokens, by the margin rule, from the image file. */
static void test_greedy_from_the_file(void *arg) {
    const fixture *f = arg;
    const lm_tensor *greedy = ref(f, "greedy"), *margin = ref(f, "greedy_margin");
    CHECK(greedy && margin);
    int G = (int)greedy->n_elements;
    loom_engine *e = test_engine_open(f->dir, 64, 1024, 256, 4, 0);
    CHECK(e);
    loom_image image = {f->image, f->image_bytes};
    for (int expanded = 0; expanded < 2; expanded++) {
        loom_request_params p = image_params(f, &image, expanded, G);
        loom_request *r;
        char error[256];
        int st = loom_submit(e, &p, &r, error, sizeof error);
        CHECK_MSG(st == LOOM_OK, "submit: %s", error);
        collected c = {0};
        collect_all(r, &c, 1);
        loom_request_free(r);
        CHECK_MSG(!c.error, "%s", c.error_message);
        const int32_t *want = greedy->data;
        const float *m = margin->data;
        for (int s = 0; s < G; s++)
            if (c.tokens[s] != want[s]) {
                CHECK_MSG(m[s] < MARGIN_RULE, "greedy step %d: %d, reference %d (margin %.3g)", s,
                          c.tokens[s], want[s], m[s]);
                break;
            }
    }
    loom_stats s = wait_idle(e);
    CHECK_MSG(s.images_encoded == 1 && s.image_cache_hits == 1,
              "the same image twice: encoded %llu times, %llu cache hits",
              (unsigned long long)s.images_encoded, (unsigned long long)s.image_cache_hits);
    loom_engine_destroy(e);
}

/* Two image requests (one with the placeholder once) and two text requests
 * at once, in steps of 8 tokens (chunks cut through the image), each
 * equal to itself alone. */
static void test_batched_equals_alone(void *arg) {
    const fixture *f = arg;
    enum { N = 4 };
    static collected alone[N], together[N];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    loom_image image = {f->image, f->image_bytes};
    loom_request_params params[N];
    params[0] = image_params(f, &image, true, GEN);
    params[1] = image_params(f, &image, false, GEN);
    for (int i = 2; i < N; i++) { /* text: the prompt's text tokens, shifted */
        params[i] = image_params(f, NULL, false, GEN);
        params[i].n_images = 0;
        params[i].prompt = f->collapsed + (i - 2);
        params[i].n_prompt = f->n_collapsed - (i - 2);
    }
    /* the collapsed prompt still holds its one placeholder: drop it from the text prompts */
    int32_t text_ids[2][256];
    for (int i = 2; i < N; i++) {
        int k = 0;
        for (int j = 0; j < params[i].n_prompt && k < 256; j++)
            if (params[i].prompt[j] != f->image_token_id) text_ids[i - 2][k++] = params[i].prompt[j];
        params[i].prompt = text_ids[i - 2];
        params[i].n_prompt = k;
    }
    for (int pass = 0; pass < 2; pass++) {
        loom_engine *e = test_engine_open(f->dir, pass ? 8 : 64, 2048, 256, N, 0);
        CHECK(e);
        loom_request *r[N] = {0};
        char error[256];
        if (pass) lm_engine_hold(e, true); /* all four start together */
        for (int i = 0; i < N; i++) {
            CHECK_MSG(loom_submit(e, &params[i], &r[i], error, sizeof error) == LOOM_OK, "submit: %s", error);
            if (!pass) collect_all(r[i], &alone[i], 1);
        }
        if (pass) lm_engine_hold(e, false);
        for (int i = 0; pass && i < N; i++) collect_all(r[i], &together[i], 1);
        for (int i = 0; i < N; i++) loom_request_free(r[i]);
        wait_idle(e);
        loom_engine_destroy(e);
    }
    for (int i = 0; i < N; i++) {
        CHECK_MSG(!alone[i].error && !together[i].error && alone[i].n_tokens == GEN &&
                      together[i].n_tokens == GEN,
                  "request %d: %s %s", i, alone[i].error_message, together[i].error_message);
        CHECK_MSG(memcmp(alone[i].tokens, together[i].tokens, sizeof(int32_t) * GEN) == 0,
                  "request %d changed when batched in 8-token steps", i);
    }
    CHECK_MSG(memcmp(alone[0].tokens, alone[1].tokens, sizeof(int32_t) * GEN) == 0,
              "the placeholder given once and expanded differ");
}

/* Three image requests on a pool too small for all: preempted and
 * recomputed (the image rows are kept), each equal to itself alone. */
static void test_preempted_equals_alone(void *arg) {
    const fixture *f = arg;
    enum { N = 3, LONG_GEN = 40 };
    static collected alone[N], together[N];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    loom_image image = {f->image, f->image_bytes};
    uint64_t preemptions = 0;
    for (int pass = 0; pass < 2; pass++) {
        int64_t pool = pass ? (int64_t)(f->n + LONG_GEN) * 2 : 4096;
        /* prefix caching off: the three share their image prompt, and sharing would spare the pool */
        loom_engine *e = test_engine_open_cached(f->dir, 32, pool, f->n + LONG_GEN + 16, pass ? N : 1, 0, -1, 0);
        CHECK(e);
        loom_request *r[N] = {0};
        char error[256];
        if (pass) lm_engine_hold(e, true); /* all three start together: the pool must preempt */
        for (int i = 0; i < N; i++) {
            loom_request_params p = image_params(f, &image, i != 1, LONG_GEN);
            p.max_tokens = LONG_GEN - 4 * i; /* so they do not all end at once */
            CHECK_MSG(loom_submit(e, &p, &r[i], error, sizeof error) == LOOM_OK, "submit: %s", error);
            if (!pass) collect_all(r[i], &alone[i], 1);
        }
        if (pass) lm_engine_hold(e, false);
        for (int i = 0; pass && i < N; i++) collect_all(r[i], &together[i], 1);
        for (int i = 0; i < N; i++) loom_request_free(r[i]);
        loom_stats s = wait_idle(e);
        if (pass) preemptions = s.preemptions;
        CHECK_MSG(s.kv_blocks_free == s.kv_blocks_total, "blocks leaked");
        loom_engine_destroy(e);
    }
    CHECK_MSG(preemptions > 0, "the small pool caused no preemption");
    for (int i = 0; i < N; i++) {
        CHECK_MSG(!alone[i].error && !together[i].error, "%s %s", alone[i].error_message,
                  together[i].error_message);
        CHECK_MSG(alone[i].n_tokens == together[i].n_tokens &&
                      memcmp(alone[i].tokens, together[i].tokens, sizeof(int32_t) * (size_t)alone[i].n_tokens) == 0,
                  "request %d changed under preemption", i);
    }
}

/* Speculative greedy == plain greedy on an image request, with drafts
 * really verified (the MTP head drafts at the target's positions). */
static void test_speculative_equals_plain(void *arg) {
    const fixture *f = arg;
    if (!f->has_mtp) return;
    loom_image image = {f->image, f->image_bytes};
    collected plain = {0}, spec = {0};
    uint64_t drafted = 0;
    for (int k = 0; k <= 2; k += 2) {
        loom_engine *e = test_engine_open(f->dir, 16, 1024, 256, 2, k);
        CHECK(e);
        loom_request_params p = image_params(f, &image, false, 32);
        loom_request *r;
        char error[256];
        CHECK_MSG(loom_submit(e, &p, &r, error, sizeof error) == LOOM_OK, "submit: %s", error);
        collect_all(r, k ? &spec : &plain, 1);
        loom_request_free(r);
        loom_stats s = wait_idle(e);
        if (k) drafted = s.spec_drafted_tokens;
        loom_engine_destroy(e);
    }
    CHECK_MSG(!plain.error && !spec.error, "%s %s", plain.error_message, spec.error_message);
    CHECK_MSG(drafted > 0, "no drafts on an image request");
    CHECK_MSG(plain.n_tokens == spec.n_tokens &&
                  memcmp(plain.tokens, spec.tokens, sizeof(int32_t) * (size_t)plain.n_tokens) == 0,
              "speculative greedy differs from plain greedy");
}

static int submit_error(loom_engine *e, const loom_request_params *p, char *error, size_t size) {
    loom_request *r = NULL;
    int st = loom_submit(e, p, &r, error, size);
    if (st == LOOM_OK) loom_request_free(r);
    return st;
}

static void test_refusals(void *arg) {
    const fixture *f = arg;
    loom_engine *e = test_engine_open(f->dir, 64, 1024, 256, 2, 0);
    CHECK(e);
    char error[256];
    /* not an image, a truncated one */
    loom_image junk = {"not an image at all", 19};
    loom_request_params p = image_params(f, &junk, false, 4);
    CHECK(submit_error(e, &p, error, sizeof error) == LOOM_ERR_INVALID && strstr(error, "image 1"));
    loom_image cut = {f->image, f->image_bytes / 2};
    p = image_params(f, &cut, false, 4);
    CHECK(submit_error(e, &p, error, sizeof error) == LOOM_ERR_INVALID && strstr(error, "image 1"));
    /* two images for one placeholder, an image for a text prompt */
    loom_image two[2] = {{f->image, f->image_bytes}, {f->image, f->image_bytes}};
    p = image_params(f, two, false, 4);
    p.n_images = 2;
    CHECK(submit_error(e, &p, error, sizeof error) == LOOM_ERR_INVALID && strstr(error, "placeholder"));
    int32_t text[3] = {f->collapsed[0], f->collapsed[1], f->collapsed[2]};
    p = image_params(f, two, false, 4);
    p.prompt = text;
    p.n_prompt = text[0] == f->image_token_id || text[1] == f->image_token_id || text[2] == f->image_token_id ? 0 : 3;
    if (p.n_prompt) CHECK(submit_error(e, &p, error, sizeof error) == LOOM_ERR_INVALID);
    /* too many images */
    loom_image many[LOOM_MAX_IMAGES + 1];
    for (int i = 0; i <= LOOM_MAX_IMAGES; i++) many[i] = two[0];
    p = image_params(f, many, false, 4);
    p.n_images = LOOM_MAX_IMAGES + 1;
    CHECK(submit_error(e, &p, error, sizeof error) == LOOM_ERR_INVALID && strstr(error, "at most"));
    /* two images, two placeholders: runs, and counts both images' rows */
    int32_t *doubled = malloc(sizeof(int32_t) * (size_t)(2 * f->n_collapsed));
    CHECK(doubled);
    memcpy(doubled, f->collapsed, sizeof(int32_t) * (size_t)f->n_collapsed);
    memcpy(doubled + f->n_collapsed, f->collapsed, sizeof(int32_t) * (size_t)f->n_collapsed);
    p = image_params(f, two, false, 4);
    p.prompt = doubled;
    p.n_prompt = 2 * f->n_collapsed;
    p.n_images = 2;
    loom_request *r;
    CHECK_MSG(loom_submit(e, &p, &r, error, sizeof error) == LOOM_OK, "two images: %s", error);
    collected c = {0};
    collect_all(r, &c, 1);
    loom_request_free(r);
    free(doubled);
    CHECK_MSG(!c.error && c.n_tokens == 4, "two images: %s", c.error_message);
    wait_idle(e);
    loom_engine_destroy(e);

    /* sixteen images in a context with room for their placeholders and
     * about two images: refused at the image that fills it, the rest not
     * decoded */
    int context = LOOM_MAX_IMAGES * f->n_collapsed + 2 * f->n;
    e = test_engine_open(f->dir, 64, 1024, context, 2, 0);
    CHECK(e);
    int32_t *sixteen = malloc(sizeof(int32_t) * (size_t)(LOOM_MAX_IMAGES * f->n_collapsed));
    CHECK(sixteen);
    for (int i = 0; i < LOOM_MAX_IMAGES; i++)
        memcpy(sixteen + i * f->n_collapsed, f->collapsed, sizeof(int32_t) * (size_t)f->n_collapsed);
    p = image_params(f, many, false, 4);
    p.prompt = sixteen;
    p.n_prompt = LOOM_MAX_IMAGES * f->n_collapsed;
    p.n_images = LOOM_MAX_IMAGES;
    int st = submit_error(e, &p, error, sizeof error);
    free(sixteen);
    int at = 0;
    CHECK_MSG(st == LOOM_ERR_TOO_LONG && sscanf(error, "image %d:", &at) == 1 && at >= 2 && at < LOOM_MAX_IMAGES &&
                  strstr(error, "leave no room"),
              "sixteen images in a context of %d: %d %s", context, st, error);
    loom_engine_destroy(e);

    /* images turned off */
    loom_engine_options o;
    loom_engine_options_default(&o);
    o.model_dir = f->dir;
    o.threads = 2;
    o.backend = test_backend_name();
    if (strcmp(test_quantize_name(), "int8") == 0) o.quantize = "int8";
    o.max_image_pixels = -1;
    CHECK(loom_engine_create(&o, &e, error, sizeof error) == LOOM_OK);
    CHECK(loom_engine_image_marker(e) == NULL);
    p = image_params(f, two, false, 4);
    CHECK(submit_error(e, &p, error, sizeof error) == LOOM_ERR_INVALID && strstr(error, "off"));
    loom_engine_destroy(e);

    /* a decode cap under the file's pixels: refused from its header,
     * naming the image and the option; a cap out of range: no engine */
    o.max_image_pixels = 0;
    o.max_image_decode_pixels = 1024;
    CHECK(loom_engine_create(&o, &e, error, sizeof error) == LOOM_OK);
    p = image_params(f, two, false, 4);
    CHECK_MSG(submit_error(e, &p, error, sizeof error) == LOOM_ERR_INVALID && strncmp(error, "image 1: ", 9) == 0 &&
                  strstr(error, "more than the 1024 pixels allowed (--max-image-decode-pixels)"),
              "a decode cap of 1024 pixels: %s", error);
    loom_engine_destroy(e);
    o.max_image_decode_pixels = 1023;
    e = NULL;
    CHECK(loom_engine_create(&o, &e, error, sizeof error) != LOOM_OK && strstr(error, "max_image_decode_pixels"));
    CHECK(e == NULL);
}

/* A text-only checkpoint (the bundled model) takes no images. */
static void test_text_model_refuses_images(void) {
    loom_engine *e = test_engine_open("models/loom-tiny", 64, 1024, 256, 2, 0);
    CHECK(e);
    CHECK(loom_engine_image_marker(e) == NULL);
    int32_t ids[2] = {1, 2};
    loom_image image = {"x", 1};
    loom_request_params p;
    loom_request_params_default(&p);
    p.prompt = ids;
    p.n_prompt = 2;
    p.images = &image;
    p.n_images = 1;
    char error[256];
    CHECK(submit_error(e, &p, error, sizeof error) == LOOM_ERR_INVALID && strstr(error, "vision"));
    loom_engine_destroy(e);
}

int main(void) {
    char paths[3][4096];
    test_fixture_path(paths[0], sizeof paths[0], "models/qwen35-dense");
    test_fixture_path(paths[1], sizeof paths[1], "models/glm46v-moe");
    snprintf(paths[2], sizeof paths[2], "tests/data/glm-shapes/groups4-top4-hd16");
    for (int i = 0; i < 3; i++) {
        fixture f;
        if (!open_fixture(&f, paths[i])) {
            test_failed(__FILE__, __LINE__, "cannot open the img0 fixture of %s", paths[i]);
            close_fixture(&f);
            continue;
        }
        test_run_with("greedy_from_the_file", test_greedy_from_the_file, &f);
        test_run_with("batched_equals_alone", test_batched_equals_alone, &f);
        test_run_with("preempted_equals_alone", test_preempted_equals_alone, &f);
        test_run_with("speculative_equals_plain", test_speculative_equals_plain, &f);
        test_run_with("refusals", test_refusals, &f);
        close_fixture(&f);
    }
    RUN_TEST(test_text_model_refuses_images);
    return test_summary("test_engine_images");
}
