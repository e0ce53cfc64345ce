/* Qwen3.6's expert naming (issue 51, "new releases"): every layer's routed
 * experts, the MTP head's included, stored as two fused tensors without the
 * `.weight` suffix (`mlp.experts.gate_up_proj` [E, 2I, H], gate rows first,
 * and `mlp.experts.down_proj` [E, H, I]; transformers' Qwen3_5MoeExperts).
 * fixtures/models/qwen35-moe-fused is fixtures/models/qwen35-moe with its
 * per-expert layers fused by tools/fixtures/make_fused_experts.py (the same
 * bf16 bytes), so both folders hold one model and must give the same bits:
 * the prefill logits, the final hidden rows and the MTP head's logits, on
 * one rank and over two (tensor parallel: every expert's rows of the stacks;
 * expert parallel: whole experts, only a rank's matrices of each stack
 * read), and within the golden tolerance of transformers' reference.  The
 * FP8 form (block-scaled e4m3 stacks with `gate_up_proj_scale_inv` [E,
 * ceil(2I/128), ceil(H/128)], as transformers' FP8 experts name them:
 * integrations/finegrained_fp8.py) must load to the same bits as its
 * dequantized twin. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sequence_runner.h"
#include "fp8_checkpoint.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "model_util.h"
#include "models/qwen35/qwen35_mtp.h"
#include "models/tensor_parallel.h"

#define LOGIT_TOLERANCE test_logit_tolerance() /* max |Δ| / std(reference), fixtures/README.md */
#define N_LAYERS 4                            /* the fixture's decoder layers, all MoE */
#define MAX_PROMPTS 4

static struct {
    char per_expert[1024], fused[1024];
    lm_safetensors *reference;
} fx;

/* ------------------------------------------------------------ layouts */

typedef struct {
    int fused_layers;      /* experts.gate_up_proj tensors (with their down_proj) */
    int per_expert_layers; /* experts.0.gate_proj.weight tensors */
    int suffixed_stacks;   /* fused tensors named with ".weight" (not Qwen3.6's naming) */
    size_t bytes;
} layout_count;

static bool count_layouts(const char *dir, layout_count *out) {
    lm_checkpoint *ck;
    lm_error err = {0};
    *out = (layout_count){0};
    if (lm_checkpoint_open(dir, LM_LOAD_MMAP, &ck, &err) != LM_OK) {
        fprintf(stderr, "  %s\n", err.message);
        return false;
    }
    for (size_t i = 0; i < lm_checkpoint_count(ck); i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        const char *at = strstr(t->name, "mlp.experts.");
        if (!at) continue;
        const char *rest = at + strlen("mlp.experts.");
        if (strcmp(rest, "gate_up_proj") == 0 && t->n_dims == 3) out->fused_layers++;
        if (strncmp(rest, "gate_up_proj.", 13) == 0 || strncmp(rest, "down_proj.", 10) == 0) out->suffixed_stacks++;
        if (strcmp(rest, "0.gate_proj.weight") == 0) out->per_expert_layers++;
    }
    out->bytes = lm_checkpoint_total_bytes(ck);
    lm_checkpoint_close(ck);
    return true;
}

static void test_fixture_is_fused_everywhere(void) {
    layout_count a, b;
    CHECK(count_layouts(fx.per_expert, &a));
    CHECK(count_layouts(fx.fused, &b));
    /* qwen35-moe: 4 layers per expert, the MTP layer fused; the copy: all 5 fused */
    CHECK_MSG(a.per_expert_layers == N_LAYERS && a.fused_layers == 1, "qwen35-moe: %d per expert, %d fused",
              a.per_expert_layers, a.fused_layers);
    CHECK_MSG(b.per_expert_layers == 0 && b.fused_layers == N_LAYERS + 1 && b.suffixed_stacks == 0,
              "qwen35-moe-fused: %d per expert, %d fused, %d with .weight (remake it with "
              "tools/fixtures/make_fused_experts.py)",
              b.per_expert_layers, b.fused_layers, b.suffixed_stacks);
    CHECK_MSG(a.bytes == b.bytes, "the fused folder holds %zu bytes of tensors, the original %zu", b.bytes, a.bytes);
}

/* ------------------------------------------------------------ one rank */

/* Prefill logits [n, V] and final hidden rows [n, H] of ids; false with err set. */
static bool prefill(lm_model *model, const int32_t *ids, int n, float **logits, float **hidden, lm_error *err) {
    const lm_model_info *info = lm_model_describe(model);
    *hidden = malloc(sizeof(float) * (size_t)n * (size_t)info->hidden_size);
    *logits = *hidden ? test_prefill(model, ids, n, *hidden, NULL, err) : NULL;
    if (*logits) return true;
    if (!*hidden) lm_fail(err, LM_ERR_NOMEM, "out of memory");
    free(*hidden);
    *hidden = NULL;
    return false;
}

/* The reference prompts p0.. (those present), up to MAX_PROMPTS. */
static int reference_prompts(const char *names[MAX_PROMPTS]) {
    static const char *const all[MAX_PROMPTS] = {"p0", "p1", "p2", "p3"};
    int count = 0;
    for (int p = 0; p < MAX_PROMPTS; p++) {
        int n;
        if (test_reference_ids(fx.reference, all[p], &n) && n > 0) names[count++] = all[p];
    }
    return count;
}

/* Whether b's n values are a's: the same bits (tolerance 0), or within
 * tolerance of the std of a's. */
static bool same_values(const float *a, const float *b, size_t n, double tolerance) {
    if (tolerance == 0) return memcmp(a, b, sizeof(float) * n) == 0;
    return test_normalized_error(b, a, n) < tolerance;
}

/* Both models' logits, final hidden rows and (mtp) MTP logits of every
 * reference prompt: the same bits (tolerance 0: the hidden rows too) or
 * within tolerance, and b's within the golden tolerance of the reference
 * (against_reference). */
static void compare_models(lm_model *a, lm_model *b, bool mtp, bool against_reference, double tolerance) {
    const char *names[MAX_PROMPTS];
    int n_prompts = reference_prompts(names), V = lm_model_describe(a)->vocab_size;
    int H = lm_model_describe(a)->hidden_size;
    CHECK(n_prompts > 0);
    for (int p = 0; p < n_prompts; p++) {
        int n;
        const int32_t *ids = test_reference_ids(fx.reference, names[p], &n);
        float *logits[2] = {0}, *hidden[2] = {0}, *mtp_logits[2] = {0};
        lm_error err = {0};
        bool ok = prefill(a, ids, n, &logits[0], &hidden[0], &err) && prefill(b, ids, n, &logits[1], &hidden[1], &err);
        CHECK_MSG(ok, "%s: %s", names[p], err.message);
        if (ok) {
            CHECK_MSG(same_values(logits[0], logits[1], (size_t)n * V, tolerance), "%s: the logits differ (%.3g of the std)",
                      names[p], test_normalized_error(logits[1], logits[0], (size_t)n * V));
            CHECK_MSG(tolerance > 0 || memcmp(hidden[0], hidden[1], sizeof(float) * (size_t)n * H) == 0,
                      "%s: the final hidden rows differ", names[p]);
            char key[64];
            snprintf(key, sizeof key, "%s.logits", names[p]);
            const lm_tensor *want = lm_safetensors_find(fx.reference, key);
            if (against_reference) {
                CHECK_MSG(want && want->n_elements == (int64_t)n * V, "%s: no reference logits", names[p]);
                double e = want ? test_normalized_error(logits[1], want->data, (size_t)n * V) : INFINITY;
                CHECK_MSG(e < LOGIT_TOLERANCE, "%s: %.3g of the std off the reference", names[p], e);
            }
        }
        if (ok && mtp && n >= 2) {
            for (int i = 0; i < 2 && ok; i++) {
                lm_model *m = i ? b : a;
                mtp_logits[i] = malloc(sizeof(float) * (size_t)(n - 1) * V);
                ok = mtp_logits[i] && lm_model_mtp_sequence_logits(m, hidden[i], ids + 1, NULL, n - 1, mtp_logits[i],
                                                                   &err) == LM_OK;
            }
            CHECK_MSG(ok, "%s: MTP logits: %s", names[p], err.message);
            if (ok)
                CHECK_MSG(same_values(mtp_logits[0], mtp_logits[1], (size_t)(n - 1) * V, tolerance),
                          "%s: the MTP logits differ", names[p]);
            char key[64];
            snprintf(key, sizeof key, "%s.mtp_logits", names[p]);
            const lm_tensor *want = lm_safetensors_find(fx.reference, key);
            if (ok && against_reference && want && want->n_elements == (int64_t)(n - 1) * V) {
                double e = test_normalized_error(mtp_logits[1], want->data, (size_t)(n - 1) * V);
                CHECK_MSG(e < LOGIT_TOLERANCE, "%s: MTP logits %.3g of the std off the reference", names[p], e);
            }
        }
        for (int i = 0; i < 2; i++) free(logits[i]), free(hidden[i]), free(mtp_logits[i]);
    }
}

static void test_same_bits_on_one_rank(void) {
    test_model a, b;
    CHECK(test_model_open(&a, fx.per_expert, 2));
    if (!a.model) return;
    if (!test_model_open(&b, fx.fused, 2)) {
        test_model_close(&a);
        CHECK(false);
        return;
    }
    /* the loader took the fused stacks in every layer and the MTP head */
    for (int i = 0; i < b.config->num_hidden_layers; i++)
        CHECK_MSG(b.qwen->layers[i].is_moe && b.qwen->layers[i].moe.experts.fused &&
                      !a.qwen->layers[i].moe.experts.fused,
                  "layer %d: not loaded fused from the fused folder (or fused from the per-expert one)", i);
    CHECK_MSG(b.qwen->has_mtp && b.qwen->mtp->layer.moe.experts.fused, "the fused MTP head: %s",
              b.qwen->mtp_missing);
    CHECK(lm_model_describe(a.model)->n_parameters == lm_model_describe(b.model)->n_parameters);
    compare_models(a.model, b.model, true, true, 0);
    test_model_close(&b);
    test_model_close(&a);
}

/* ------------------------------------------------------------ two ranks */

static lm_model *open_ranks(const char *dir, lm_backend *backend, bool expert_parallel) {
    lm_model_load_options o = {.expert_parallel = expert_parallel};
    lm_model *model = NULL;
    lm_error err = {0};
    if (lm_tensor_parallel_open(dir, NULL, &o, backend, 2, &model, &err) != LM_OK) {
        fprintf(stderr, "  %s over 2 ranks: %s\n", dir, err.message);
        return NULL;
    }
    return model;
}

static void check_over_two_ranks(bool expert_parallel) {
    lm_backend *be[2] = {NULL, NULL};
    lm_error err = {0};
    for (int i = 0; i < 2; i++) CHECK_OK(lm_backend_create(test_backend_name(), 2, &be[i], &err), &err);
    lm_model *a = be[0] ? open_ranks(fx.per_expert, be[0], expert_parallel) : NULL;
    lm_model *b = be[1] ? open_ranks(fx.fused, be[1], expert_parallel) : NULL;
    CHECK(a && b);
    if (a && b) compare_models(a, b, true, true, 0);
    lm_model_free(b);
    lm_model_free(a);
    for (int i = 0; i < 2; i++) lm_backend_destroy(be[i]);
}

static void test_same_bits_tensor_parallel(void) { check_over_two_ranks(false); }
static void test_same_bits_expert_parallel(void) { check_over_two_ranks(true); }

/* ------------------------------------------------------------ FP8 */

/* The cpu's weight table without FP8_B128 (test_quantized's trick): every
 * FP8 matrix is then made int8, none kept FP8, so the FP8 load and the
 * dequantized twin made int8 hold the same weights. */
static bool int8_weights_only(const lm_backend *be, lm_dtype dtype) {
    (void)be;
    return dtype == LM_DTYPE_BF16 || dtype == LM_DTYPE_F16 || dtype == LM_DTYPE_F32 || dtype == LM_DTYPE_Q8_0;
}

/* The fused folder as an FP8 checkpoint (every Linear layer e4m3 with its
 * 128x128 block scales, the expert stacks [E, rows, cols] with
 * `<stack>_scale_inv` [E, rows/128, cols/128]) and its dequantized twin:
 * float32 where the backend takes int8 weights (an FP8 matrix loads as the
 * int8 that --quantize int8 makes of its float32 values; FP8 kept FP8 is
 * turned off for the comparison), else rounded to bf16 (what FP8 loads as
 * there): the same bits.  (Over two ranks, tensor and expert parallel, the
 * same folder's FP8 form against its twin: test_tensor_parallel's
 * test_fp8_over_two_ranks.) */
static void test_fp8_fused_stacks(void) {
    char fp8[512], twin[512];
    lm_backend *be = NULL;
    lm_error err = {0};
    CHECK_OK(lm_backend_create(test_backend_name(), 2, &be, &err), &err);
    if (!be) return;
    bool int8 = lm_backend_supports_weights(be, LM_DTYPE_Q8_0);
    bool made = test_make_temp_folder(fp8, sizeof fp8, "fused-fp8") &&
                test_make_temp_folder(twin, sizeof twin, "fused-fp8-twin") &&
                test_fp8_write_checkpoint(fx.fused, fp8,
                                          &(test_fp8_options){.form = TEST_FP8_WEIGHTS, .quant_json = TEST_FP8_CONFIG,
                                                              .every_linear = true}) &&
                test_fp8_write_checkpoint(fx.fused, twin,
                                          &(test_fp8_options){.form = int8 ? TEST_FP8_DEQUANT_F32 : TEST_FP8_DEQUANT_BF16,
                                                              .every_linear = true});
    CHECK(made);
    lm_checkpoint *ck = NULL;
    if (made && lm_checkpoint_open(fp8, LM_LOAD_MMAP, &ck, &err) == LM_OK) {
        const lm_tensor *stack = lm_checkpoint_find(ck, "model.language_model.layers.0.mlp.experts.gate_up_proj");
        const lm_tensor *scales =
            lm_checkpoint_find(ck, "model.language_model.layers.0.mlp.experts.gate_up_proj_scale_inv");
        const lm_tensor *mtp_scales = lm_checkpoint_find(ck, "mtp.layers.0.mlp.experts.down_proj_scale_inv");
        CHECK_MSG(stack && stack->dtype == LM_DTYPE_F8_E4M3 && scales && scales->n_dims == 3 && mtp_scales,
                  "the FP8 folder has no FP8 expert stacks with their _scale_inv");
        lm_checkpoint_close(ck);
    }
    lm_backend_ops ops = *be->ops;
    ops.weight_dtype_supported = int8_weights_only;
    lm_backend no_fp8 = {.ops = &ops, .impl = be->impl};
    lm_backend *one = int8 ? &no_fp8 : be;
    lm_model *q = NULL, *t = NULL;
    lm_model_load_options twin_options = {.quantize_int8 = int8};
    if (made) {
        CHECK_OK(lm_model_open(fp8, NULL, one, &q, &err), &err);
        CHECK_OK(lm_model_open(twin, &twin_options, one, &t, &err), &err);
    }
    if (q && t) compare_models(q, t, true, false, 0);
    lm_model_free(t);
    lm_model_free(q);
    lm_backend_destroy(be);
    if (made) {
        test_remove_checkpoint(fp8);
        test_remove_checkpoint(twin);
    }
}

int main(void) {
    test_fixture_path(fx.per_expert, sizeof fx.per_expert, "models/qwen35-moe");
    test_fixture_path(fx.fused, sizeof fx.fused, "models/qwen35-moe-fused");
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.safetensors", fx.per_expert);
    lm_error err = {0};
    if (lm_safetensors_open(path, LM_LOAD_READ, &fx.reference, &err) != LM_OK) {
        fprintf(stderr, "test_fused_experts: %s\n", err.message);
        return 1;
    }
    RUN_TEST(test_fixture_is_fused_everywhere);
    RUN_TEST(test_same_bits_on_one_rank);
    RUN_TEST(test_same_bits_tensor_parallel);
    RUN_TEST(test_same_bits_expert_parallel);
    RUN_TEST(test_fp8_fused_stacks);
    lm_safetensors_close(fx.reference);
    return test_summary("test_fused_experts");
}
