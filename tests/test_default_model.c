/* The bundled default model (models/loom-tiny) against transformers.
 *
 * tests/data/default-model/ holds what tools/default_model/check_logits.py
 * computed with transformers (float64 on the bf16 weights) on the H200
 * machine: per prompt its text, token ids, selected logit rows, a greedy
 * continuation with margins and selected MTP logit rows.  loom must match
 * them under the fixtures' rules (max |Δ| / std within 1e-4, greedy equal
 * while the margin is at least 1e-3), encode the texts to the same ids and
 * render the chat prompt identically. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sequence_runner.h"
#include "harness.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model_util.h"
#include "models/qwen35/qwen35_mtp.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#define LOGIT_TOLERANCE test_logit_tolerance() /* max |Δ| / std(reference), fixtures/README.md */
#define MARGIN_RULE 1e-3

typedef struct {
    char dir[1024];
    test_model m;
    lm_safetensors *reference;
    cJSON *meta; /* reference.json */
} fixture;

static fixture fx;

static bool load(void) {
    const char *dir = getenv("LOOM_DEFAULT_MODEL");
    snprintf(fx.dir, sizeof fx.dir, "%s", dir ? dir : "models/loom-tiny");
    if (!test_model_open(&fx.m, fx.dir, 2)) return false;
    const char *data = getenv("LOOM_TEST_DATA");
    char path[1200];
    lm_error err = {0};
    snprintf(path, sizeof path, "%s/default-model/reference.safetensors", data ? data : "tests/data");
    if (lm_safetensors_open(path, LM_LOAD_READ, &fx.reference, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return false;
    }
    snprintf(path, sizeof path, "%s/default-model/reference.json", data ? data : "tests/data");
    if (lm_json_read_file(path, 1 << 20, &fx.meta, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return false;
    }
    return true;
}

static const lm_tensor *ref(int prompt, const char *what) {
    char name[64];
    snprintf(name, sizeof name, "p%d.%s", prompt, what);
    return lm_safetensors_find(fx.reference, name);
}

static int n_prompts(void) { return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(fx.meta, "prompts")); }

static const cJSON *prompt_meta(int p) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(fx.meta, "prompts"), p);
}

static double row_error(const float *got, const float *want, int V) {
    double worst = 0;
    for (int v = 0; v < V; v++) {
        double d = fabs((double)got[v] - want[v]);
        if (!(d <= worst)) worst = d; /* NaN fails */
    }
    return worst / test_stddev(want, (size_t)V);
}

static void test_shape(void) {
    const lm_qwen35_config *c = fx.m.config;
    CHECK(strcmp(c->model_type, "qwen3_5_text") == 0);
    CHECK(c->tie_word_embeddings && fx.m.qwen->lm_head_tied);
    /* three Gated DeltaNet layers per gated full-attention layer */
    CHECK(fx.m.qwen->n_linear_layers == 3 * fx.m.qwen->n_full_layers && fx.m.qwen->n_full_layers >= 2);
    CHECK_MSG(fx.m.qwen->has_mtp, "the default model must ship its MTP head");
    CHECK(n_prompts() >= 4);
}

/* Texts encode to transformers' ids; the chat prompt renders identically. */
static void test_tokenizer_and_template(void) {
    lm_tokenizer *tok = NULL;
    lm_chat_template *tpl = NULL;
    lm_error err = {0};
    CHECK_OK(lm_tokenizer_load(fx.dir, &tok, &err), &err);
    CHECK_OK(lm_chat_template_load_dir(fx.dir, &tpl, NULL, NULL, &err), &err);
    for (int p = 0; p < n_prompts(); p++) {
        const cJSON *meta = prompt_meta(p);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(meta, "text");
        const cJSON *messages = cJSON_GetObjectItemCaseSensitive(meta, "messages");
        CHECK(cJSON_IsString(text));
        if (messages) {
            cJSON *ctx = cJSON_CreateObject();
            cJSON_AddItemToObject(ctx, "messages", cJSON_Duplicate(messages, 1));
            cJSON_AddBoolToObject(ctx, "add_generation_prompt", 1);
            char *out = NULL;
            size_t len = 0;
            lm_status st = lm_chat_template_render(tpl, ctx, &out, &len, &err);
            cJSON_Delete(ctx);
            CHECK_OK(st, &err);
            CHECK_MSG(strcmp(out, text->valuestring) == 0, "prompt %d renders as '%s'", p, out);
            free(out);
        }
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(lm_tokenizer_encode(tok, text->valuestring, strlen(text->valuestring), false, &ids, &n, &err),
                 &err);
        const lm_tensor *want = ref(p, "input_ids");
        CHECK(want && (size_t)want->n_elements == n);
        CHECK_MSG(memcmp(ids, want->data, n * sizeof *ids) == 0, "prompt %d encodes differently", p);
        free(ids);
    }
    lm_chat_template_free(tpl);
    lm_tokenizer_free(tok);
}

/* Logits of the selected rows and MTP logits of the selected rows. */
static void test_logits_and_mtp(void) {
    int V = fx.m.config->vocab_size, H = fx.m.config->hidden_size;
    for (int p = 0; p < n_prompts(); p++) {
        const lm_tensor *ids_t = ref(p, "input_ids"), *rows = ref(p, "rows"), *want = ref(p, "logits");
        CHECK(ids_t && rows && want && want->n_elements == rows->n_elements * V);
        int n = (int)ids_t->n_elements;
        const int32_t *ids = ids_t->data;
        float *logits = malloc(sizeof(float) * (size_t)n * V), *hidden = malloc(sizeof(float) * (size_t)n * H);
        lm_sequence_runner r;
        lm_error err = {0};
        CHECK_OK(lm_sequence_runner_init(&r, fx.m.model, n, &err), &err);
        lm_status st = lm_sequence_runner_feed(&r, ids, n, true, logits, hidden, NULL, &err);
        lm_sequence_runner_free(&r);
        CHECK_OK(st, &err);
        for (int64_t k = 0; k < rows->n_elements; k++) {
            int row = ((const int32_t *)rows->data)[k];
            double e = row_error(logits + (size_t)row * V, (const float *)want->data + k * V, V);
            CHECK_MSG(e < LOGIT_TOLERANCE, "prompt %d row %d: normalized logit error %.3g", p, row, e);
        }
        const lm_tensor *mrows = ref(p, "mtp_rows"), *mwant = ref(p, "mtp_logits");
        if (n >= 2) {
            CHECK(mrows && mwant && mwant->n_elements == mrows->n_elements * V);
            float *mlogits = malloc(sizeof(float) * (size_t)(n - 1) * V);
            CHECK_OK(lm_model_mtp_sequence_logits(fx.m.model, hidden, ids + 1, NULL, n - 1, mlogits,
                                                   &err),
                     &err);
            for (int64_t k = 0; k < mrows->n_elements; k++) {
                int row = ((const int32_t *)mrows->data)[k];
                double e = row_error(mlogits + (size_t)row * V, (const float *)mwant->data + k * V, V);
                CHECK_MSG(e < LOGIT_TOLERANCE, "prompt %d MTP row %d: normalized logit error %.3g", p, row, e);
            }
            free(mlogits);
        }
        free(logits);
        free(hidden);
    }
}

/* Greedy continuations (prefill, then one token at a time) under the margin rule. */
static void test_greedy(void) {
    int V = fx.m.config->vocab_size;
    for (int p = 0; p < n_prompts(); p++) {
        const lm_tensor *ids_t = ref(p, "input_ids"), *greedy = ref(p, "greedy"), *margin = ref(p, "greedy_margin");
        CHECK(ids_t && greedy && margin);
        int n = (int)ids_t->n_elements, G = (int)greedy->n_elements;
        float *logits = malloc(sizeof(float) * (size_t)V);
        lm_sequence_runner r;
        lm_error err = {0};
        CHECK_OK(lm_sequence_runner_init(&r, fx.m.model, n + G, &err), &err);
        lm_status st = lm_sequence_runner_feed(&r, ids_t->data, n, false, logits, NULL, NULL, &err);
        int compared = 0;
        for (int g = 0; g < G && st == LM_OK; g++) {
            int32_t next = test_argmax(logits, V), want = ((const int32_t *)greedy->data)[g];
            float m = ((const float *)margin->data)[g];
            if (m < MARGIN_RULE) break; /* a near tie: later steps are not comparable */
            CHECK_MSG(next == want, "prompt %d step %d: greedy %d, transformers %d (margin %.3g)", p, g, next,
                      want, m);
            compared++;
            st = lm_sequence_runner_feed(&r, &next, 1, false, logits, NULL, NULL, &err);
        }
        lm_sequence_runner_free(&r);
        free(logits);
        CHECK_OK(st, &err);
        CHECK(compared > 0);
    }
}

int main(void) {
    if (!load()) {
        fprintf(stderr, "test_default_model: cannot load the default model or its reference\n");
        return 1;
    }
    RUN_TEST(test_shape);
    RUN_TEST(test_tokenizer_and_template);
    RUN_TEST(test_logits_and_mtp);
    RUN_TEST(test_greedy);
    lm_safetensors_close(fx.reference);
    cJSON_Delete(fx.meta);
    test_model_close(&fx.m);
    return test_summary("default_model");
}
