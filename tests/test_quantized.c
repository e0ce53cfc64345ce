/* 8-bit weights: int8 (Q8_0) made at load from bf16 (--quantize int8) and
 * FP8 block-scaled checkpoints read as they are (converted to Q8_0 at load).
 *
 * - int8 models of the three fixtures against transformers' references and
 *   against the bf16 model, at the int8 tolerance below (measured: see the
 *   numbers each check prints and README.md's table);
 * - an int8 model decodes token by token to the logits of its own full
 *   prefill (the same kernels, so float32 agreement);
 * - an FP8 checkpoint made here from qwen35-dense (e4m3 weights with
 *   128x128 float32 / bf16 inverse scales, the layout of Qwen3.5's FP8
 *   releases) gives exactly the logits of a float32 checkpoint of its
 *   dequantized weights loaded with --quantize int8 (so e4m3 decoding and
 *   the scales are exact), and stays within stated tolerances of that
 *   float32 model unquantized and of the references;
 * - bad FP8 checkpoints (a scale missing, of the wrong shape, an
 *   unsupported block size or method, FP8 tensors without a
 *   quantization_config) are refused with a sentence naming the problem;
 * - a backend without int8 weights refuses them at load. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bf16.h"
#include "base/quant.h"
#include "engine/sequence_runner.h"
#include "fp8_checkpoint.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "model_util.h"
#include "safetensors_writer.h"

/* max |Δlogit| / std(reference) over every prompt's rows, per fixture,
 * measured on 2026-12-04 (in brackets) with some room.  The fixtures are
 * tiny random models (hidden 64) whose logits move far more than the
 * weights' 0.5 % int8 rounding error (bf16 activations move them by 1e-2
 * to 9e-2 the same way); in the random MoE one a perturbed router input
 * picks other experts for some tokens.  The trained bundled model moves by
 * 0.076 (README.md).  Garbage (a wrong scale, a wrong block) lands at 5 or
 * more. */
#define INT8_TOLERANCE_DENSE 0.5  /* [0.384] */
#define INT8_TOLERANCE_MOE 2.0    /* [1.18]  */
#define INT8_TOLERANCE_GLM 0.15   /* [0.0687] */
/* The same model in two runs of the same kernels (decode vs prefill). */
#define SAME_KERNELS_TOLERANCE 1e-5 /* [0: bit for bit] */
/* The FP8 fixture (e4m3 has 4 significant bits: its own float32 model is
 * [1.15] off the bf16 reference) loaded as int8: [0.238] off its own
 * float32 model, [1.17] off the reference. */
#define FP8_VS_DEQUANT_TOLERANCE 0.5
#define FP8_VS_REFERENCE_TOLERANCE 1.5
/* Loaded as bf16 (a backend without int8 weights): e4m3 · scale rounded
 * to bf16 moves a weight by at most 2^-9 of itself: [0.108] off its own
 * float32 model (int8's blocks: [0.238]), [1.20] off the reference. */
#define FP8_AS_BF16_TOLERANCE 0.25


/* The same on backend be (a test's own). */
static bool run_prompts_with(lm_backend *be, const char *dir, const lm_model_load_options *options,
                             const lm_safetensors *ref, int n_prompts, test_prompt_logits *out) {
    memset(out, 0, sizeof *out);
    lm_model *model = NULL;
    lm_error err = {0};
    if (lm_model_open(dir, options, be, &model, &err) != LM_OK) {
        fprintf(stderr, "%s: %s\n", dir, err.message);
        return false;
    }
    bool ok = test_prefill_prompts(model, dir, ref, n_prompts, out);
    lm_model_free(model);
    return ok;
}

static bool run_prompts_on(lm_backend *be, const char *dir, const lm_safetensors *ref, int n_prompts,
                           test_prompt_logits *out) {
    return run_prompts_with(be, dir, NULL, ref, n_prompts, out);
}

/* The weights of a backend that keeps no FP8 (int8 and the float types):
 * FP8 checkpoints then load as int8, as on backends without FP8 kernels. */
static bool int8_weights_only(const lm_backend *be, lm_dtype dtype) {
    (void)be;
    return dtype == LM_DTYPE_BF16 || dtype == LM_DTYPE_F16 || dtype == LM_DTYPE_F32 || dtype == LM_DTYPE_Q8_0;
}


/* Whether the backend under test takes int8 weights; the tests that load
 * int8 models skip, saying so, on one that does not (a backend refuses
 * them at load then, which test_backend_without_int8_refuses checks). */
static bool test_backend_has_int8(const char *test) {
    lm_backend *be = NULL;
    lm_error err = {0};
    if (lm_backend_create(test_backend_name(), 1, &be, &err) != LM_OK) {
        fprintf(stderr, "%s: %s\n", test, err.message);
        return true; /* let the test fail on opening it, with its message */
    }
    bool has = lm_backend_supports_weights(be, LM_DTYPE_Q8_0);
    lm_backend_destroy(be);
    if (!has) printf("  %s: skipped (the %s backend has no int8 weights)\n", test, test_backend_name());
    return has;
}

/* ------------------------------------------------------------ int8 */

static void check_int8_fixture(const char *fixture, int n_prompts, double tolerance) {
    if (!test_backend_has_int8(fixture)) return;
    char dir[1024];
    test_fixture_path(dir, sizeof dir, fixture);
    lm_safetensors *ref = test_open_reference(dir);
    CHECK(ref);
    if (!ref) return;
    test_prompt_logits bf16, int8;
    lm_model_load_options plain = {0}, quant = {.quantize_int8 = true};
    CHECK(test_run_prompts(dir, &plain, ref, n_prompts, &bf16));
    CHECK(test_run_prompts(dir, &quant, ref, n_prompts, &int8));
    if (bf16.logits[n_prompts - 1] && int8.logits[n_prompts - 1]) {
        double e_ref = test_worst_prompt_error(&int8, NULL, ref, n_prompts), e_bf16 = test_worst_prompt_error(&int8, &bf16, NULL, n_prompts);
        double e_base = test_worst_prompt_error(&bf16, NULL, ref, n_prompts);
        printf("  %s: int8 vs reference %.3g, int8 vs bf16 %.3g (bf16 vs reference %.3g)\n", fixture, e_ref,
               e_bf16, e_base);
        CHECK_MSG(e_ref < tolerance, "%s: int8 logits %.3g off the reference", fixture, e_ref);
        CHECK_MSG(e_bf16 < tolerance, "%s: int8 logits %.3g off the bf16 model", fixture, e_bf16);
        /* int8 really is in use: its logits differ from bf16's */
        CHECK_MSG(e_bf16 > 1e-4, "%s: int8 logits equal the bf16 ones (%.3g): nothing was quantized", fixture, e_bf16);
    }
    test_prompt_logits_free(&bf16);
    test_prompt_logits_free(&int8);
    lm_safetensors_close(ref);
}

static void test_int8_dense(void) { check_int8_fixture("models/qwen35-dense", 4, INT8_TOLERANCE_DENSE); }
static void test_int8_moe(void) { check_int8_fixture("models/qwen35-moe", 2, INT8_TOLERANCE_MOE); }
static void test_int8_glm(void) { check_int8_fixture("models/glm46v-moe", 2, INT8_TOLERANCE_GLM); }

/* Token-by-token decoding after a prefill of 5 gives the int8 model's own
 * full-prefill logits (the kernels are batch-invariant: a token's bits do
 * not depend on how many share its step). */
static void test_int8_decode_matches_prefill(void) {
    if (!test_backend_has_int8("test_int8_decode_matches_prefill")) return;
    char dir[1024];
    test_fixture_path(dir, sizeof dir, "models/qwen35-dense");
    lm_safetensors *ref = test_open_reference(dir);
    CHECK(ref);
    test_model tm;
    lm_model_load_options quant = {.quantize_int8 = true};
    CHECK(ref && test_model_open_with(&tm, dir, 2, &quant));
    int n = 0, V = lm_model_describe(tm.model)->vocab_size;
    const int32_t *ids = test_reference_ids(ref, "p3", &n);
    lm_error err = {0};
    float *full = ids ? test_prefill(tm.model, ids, n, NULL, NULL, &err) : NULL;
    float *steps = malloc(sizeof(float) * (size_t)n * V);
    CHECK_MSG(full && steps, "%s", err.message);
    lm_sequence_runner r;
    CHECK_OK(lm_sequence_runner_init(&r, tm.model, n, &err), &err);
    CHECK_OK(lm_sequence_runner_feed(&r, ids, 5, true, steps, NULL, NULL, &err), &err);
    for (int pos = 5; pos < n; pos++)
        CHECK_OK(lm_sequence_runner_feed(&r, ids + pos, 1, true, steps + (size_t)pos * V, NULL, NULL, &err), &err);
    lm_sequence_runner_free(&r);
    double e = test_normalized_error(steps, full, (size_t)n * V);
    printf("  decode vs prefill, int8: %.3g\n", e);
    CHECK_MSG(e < SAME_KERNELS_TOLERANCE, "int8 decode differs from int8 prefill by %.3g", e);
    free(full);
    free(steps);
    test_model_close(&tm);
    lm_safetensors_close(ref);
}

/* A backend whose table does not offer int8 weights (as cuda's was)
 * refuses --quantize int8 at load with a sentence, and loads bf16. */
static void test_backend_without_int8_refuses(void) {
    char dir[1024];
    test_fixture_path(dir, sizeof dir, "models/qwen35-dense");
    lm_error err = {0};
    lm_backend *cpu;
    CHECK_OK(lm_backend_create("cpu", 1, &cpu, &err), &err);
    lm_backend_ops ops = *cpu->ops;
    ops.weight_dtype_supported = NULL;
    lm_backend plain = {.ops = &ops, .impl = cpu->impl};
    lm_model *model = NULL;
    lm_model_load_options quant = {.quantize_int8 = true};
    lm_status st = lm_model_open(dir, &quant, &plain, &model, &err);
    CHECK_MSG(st == LM_ERR_UNSUPPORTED && strstr(err.message, "no int8 weights") &&
                  strstr(err.message, "--device cpu"),
              "status %d: %s", (int)st, err.message);
    if (st == LM_OK) lm_model_free(model);
    CHECK_OK(lm_model_open(dir, NULL, &plain, &model, &err), &err);
    lm_model_free(model);
    lm_backend_destroy(cpu);
}

/* ------------------------------------------------------------ FP8 */

/* The FP8 checkpoint and the dequantized ones beside it (fp8_checkpoint.h). */
typedef struct {
    char fixture[1024], fp8[512], f32[512], bf16[512], all[512], all_f32[512];
    bool made;
} fp8_folders;

static bool make_fp8_folders(fp8_folders *f) {
    test_fixture_path(f->fixture, sizeof f->fixture, "models/qwen35-dense");
    f->made = test_make_temp_folder(f->fp8, sizeof f->fp8, "fp8") &&
              test_make_temp_folder(f->f32, sizeof f->f32, "fp8-dequant") &&
              test_make_temp_folder(f->bf16, sizeof f->bf16, "fp8-dequant-bf16") &&
              test_make_temp_folder(f->all, sizeof f->all, "fp8-all") &&
              test_make_temp_folder(f->all_f32, sizeof f->all_f32, "fp8-all-dequant");
    return f->made &&
           test_fp8_write_checkpoint(f->fixture, f->fp8, &(test_fp8_options){.form = TEST_FP8_WEIGHTS, .quant_json = TEST_FP8_CONFIG}) &&
           test_fp8_write_checkpoint(f->fixture, f->f32, &(test_fp8_options){.form = TEST_FP8_DEQUANT_F32}) &&
           test_fp8_write_checkpoint(f->fixture, f->bf16, &(test_fp8_options){.form = TEST_FP8_DEQUANT_BF16}) &&
           test_fp8_write_checkpoint(f->fixture, f->all, &(test_fp8_options){.form = TEST_FP8_WEIGHTS, .quant_json = TEST_FP8_CONFIG, .every_linear = true}) &&
           test_fp8_write_checkpoint(f->fixture, f->all_f32, &(test_fp8_options){.form = TEST_FP8_DEQUANT_F32, .every_linear = true});
}

static void remove_fp8_folders(const fp8_folders *f) {
    test_remove_checkpoint(f->fp8);
    test_remove_checkpoint(f->f32);
    test_remove_checkpoint(f->bf16);
    test_remove_checkpoint(f->all);
    test_remove_checkpoint(f->all_f32);
}

/* On a backend with int8 weights and no FP8 ones (be): the FP8 checkpoint
 * loads as int8, exactly the int8 weights --quantize int8 makes of its
 * dequantized float32 twin (so e4m3 decoding and the scales are exact),
 * within the stated tolerances of that twin unquantized and of the
 * references; its error against the twin in *int8_error. */
static void check_fp8_as_int8(lm_backend *be, const fp8_folders *f, const lm_safetensors *ref, double *int8_error) {
    test_prompt_logits fp8, dequant, all, all_dequant_int8;
    lm_model_load_options quant = {.quantize_int8 = true};
    *int8_error = INFINITY;
    CHECK(run_prompts_on(be, f->fp8, ref, 4, &fp8));
    CHECK(run_prompts_on(be, f->f32, ref, 4, &dequant));
    CHECK(run_prompts_on(be, f->all, ref, 4, &all));
    CHECK(run_prompts_with(be, f->all_f32, &quant, ref, 4, &all_dequant_int8));
    if (fp8.logits[3] && all_dequant_int8.logits[3] && dequant.logits[3] && all.logits[3]) {
        double e_same = test_worst_prompt_error(&all, &all_dequant_int8, NULL, 4);
        double e_dequant = test_worst_prompt_error(&fp8, &dequant, NULL, 4), e_ref = test_worst_prompt_error(&fp8, NULL, ref, 4);
        double e_fp8_itself = test_worst_prompt_error(&dequant, NULL, ref, 4);
        printf("  fp8 (every linear) vs its dequantized weights made int8 %.3g; fp8 vs its dequantized weights in float32 %.3g; "
               "vs reference %.3g (the dequantized float32 model vs reference: %.3g)\n",
               e_same, e_dequant, e_ref, e_fp8_itself);
        *int8_error = e_dequant;
        CHECK_MSG(e_same == 0, "FP8 load differs from its dequantized weights made int8 by %.3g", e_same);
        CHECK_MSG(e_dequant < FP8_VS_DEQUANT_TOLERANCE, "FP8 load %.3g off its dequantized float32 model", e_dequant);
        CHECK_MSG(e_ref < FP8_VS_REFERENCE_TOLERANCE, "FP8 load %.3g off the reference", e_ref);
    }
    test_prompt_logits_free(&fp8);
    test_prompt_logits_free(&dequant);
    test_prompt_logits_free(&all);
    test_prompt_logits_free(&all_dequant_int8);
}

/* On a backend without int8 weights (be; NULL: the backend under test):
 * the FP8 checkpoint loads as bf16, exactly its dequantized weights
 * rounded to bf16 (nearest even), and within FP8_AS_BF16_TOLERANCE of the
 * dequantized float32 model. */
static void check_fp8_as_bf16(lm_backend *be, const fp8_folders *f, const lm_safetensors *ref) {
    test_prompt_logits fp8, bf16, dequant;
    lm_model_load_options plain = {0};
    CHECK(be ? run_prompts_on(be, f->fp8, ref, 4, &fp8) : test_run_prompts(f->fp8, &plain, ref, 4, &fp8));
    CHECK(be ? run_prompts_on(be, f->bf16, ref, 4, &bf16) : test_run_prompts(f->bf16, &plain, ref, 4, &bf16));
    CHECK(be ? run_prompts_on(be, f->f32, ref, 4, &dequant) : test_run_prompts(f->f32, &plain, ref, 4, &dequant));
    if (fp8.logits[3] && bf16.logits[3] && dequant.logits[3]) {
        double e_same = test_worst_prompt_error(&fp8, &bf16, NULL, 4), e_dequant = test_worst_prompt_error(&fp8, &dequant, NULL, 4);
        double e_ref = test_worst_prompt_error(&fp8, NULL, ref, 4);
        printf("  fp8 as bf16: vs its dequantized weights rounded to bf16 %.3g; vs them in float32 %.3g; "
               "vs reference %.3g\n", e_same, e_dequant, e_ref);
        CHECK_MSG(e_same == 0, "FP8 loaded as bf16 differs from its dequantized weights in bf16 by %.3g", e_same);
        CHECK_MSG(e_dequant < FP8_AS_BF16_TOLERANCE, "FP8 loaded as bf16 %.3g off its dequantized float32 model",
                  e_dequant);
        CHECK_MSG(e_ref < FP8_VS_REFERENCE_TOLERANCE, "FP8 loaded as bf16 %.3g off the reference", e_ref);
    }
    test_prompt_logits_free(&fp8);
    test_prompt_logits_free(&bf16);
    test_prompt_logits_free(&dequant);
}

/* On the backend under test, which keeps FP8 (be): the matrices whose
 * columns are whole 128-blocks stay FP8 (at this fixture's widths, the
 * MLP's down_proj and the attention's o_proj), the rest int8 as before;
 * the logits are then nearer the dequantized float32 twin than the int8
 * load's (int8_error), and within its tolerance. */
static void check_fp8_kept(lm_backend *be, const fp8_folders *f, const lm_safetensors *ref, double int8_error) {
    test_prompt_logits fp8, dequant;
    CHECK(run_prompts_on(be, f->fp8, ref, 4, &fp8));
    CHECK(run_prompts_on(be, f->f32, ref, 4, &dequant));
    lm_model *model = NULL;
    lm_error err = {0};
    CHECK_OK(lm_model_open(f->fp8, NULL, be, &model, &err), &err);
    char note[200] = "";
    if (model) snprintf(note, sizeof note, "%s", lm_model_describe(model)->weights_made);
    CHECK_MSG(strstr(note, "kept FP8") != NULL, "the FP8 load keeps no FP8 weights: '%s'", note);
    lm_model_free(model);
    if (fp8.logits[3] && dequant.logits[3]) {
        double e_dequant = test_worst_prompt_error(&fp8, &dequant, NULL, 4);
        printf("  fp8 kept: %s; vs its dequantized weights in float32 %.3g (as int8: %.3g)\n", note, e_dequant,
               int8_error);
        CHECK_MSG(e_dequant < int8_error, "FP8 kept is %.3g off its dequantized float32 model, int8 %.3g", e_dequant,
                  int8_error);
        CHECK_MSG(e_dequant < FP8_VS_DEQUANT_TOLERANCE, "FP8 kept %.3g off its dequantized float32 model", e_dequant);
    }
    test_prompt_logits_free(&fp8);
    test_prompt_logits_free(&dequant);
}

static void test_fp8_checkpoint(void) {
    fp8_folders f = {0};
    CHECK(make_fp8_folders(&f));
    lm_safetensors *ref = test_open_reference(f.fixture);
    CHECK(ref);
    if (ref && f.made) {
        lm_backend *be = NULL;
        lm_error err = {0};
        CHECK_OK(lm_backend_create(test_backend_name(), 1, &be, &err), &err);
        bool int8 = be && lm_backend_supports_weights(be, LM_DTYPE_Q8_0);
        if (int8) {
            lm_backend_ops ops = *be->ops;
            ops.weight_dtype_supported = int8_weights_only;
            lm_backend no_fp8 = {.ops = &ops, .impl = be->impl};
            double int8_error;
            check_fp8_as_int8(&no_fp8, &f, ref, &int8_error);
            if (lm_backend_supports_weights(be, LM_DTYPE_FP8_B128)) check_fp8_kept(be, &f, ref, int8_error);
        } else
            check_fp8_as_bf16(NULL, &f, ref);
        lm_backend_destroy(be);
    }
    lm_safetensors_close(ref);
    remove_fp8_folders(&f);
}

/* A backend whose table does not offer int8 weights (here the
 * cpu's table without them) runs an FP8 checkpoint in bf16 instead of
 * refusing it. */
static void test_fp8_without_int8_loads_bf16(void) {
    fp8_folders f = {0};
    CHECK(make_fp8_folders(&f));
    lm_safetensors *ref = test_open_reference(f.fixture);
    CHECK(ref);
    lm_error err = {0};
    lm_backend *cpu = NULL;
    CHECK_OK(lm_backend_create("cpu", 1, &cpu, &err), &err);
    if (ref && f.made && cpu) {
        lm_backend_ops ops = *cpu->ops;
        ops.weight_dtype_supported = NULL;
        lm_backend plain = {.ops = &ops, .impl = cpu->impl};
        check_fp8_as_bf16(&plain, &f, ref);
    }
    lm_backend_destroy(cpu);
    lm_safetensors_close(ref);
    remove_fp8_folders(&f);
}

/* One spoiled FP8 checkpoint: lm_model_open fails, naming `needle`. */
static void check_bad_fp8(const char *fixture, const char *quant_json, test_fp8_spoil spoil, const char *needle) {
    char dir[512];
    CHECK(test_make_temp_folder(dir, sizeof dir, "fp8-bad"));
    CHECK(test_fp8_write_checkpoint(fixture, dir,
                                    &(test_fp8_options){.form = TEST_FP8_WEIGHTS, .quant_json = quant_json, .spoil = spoil}));
    lm_error err = {0};
    lm_backend *be;
    CHECK_OK(lm_backend_create("cpu", 1, &be, &err), &err);
    lm_model *model = NULL;
    lm_status st = lm_model_open(dir, NULL, be, &model, &err);
    CHECK_MSG(st != LM_OK && strstr(err.message, needle), "expected an error naming '%s', got %d: %s", needle,
              (int)st, err.message);
    if (st == LM_OK) lm_model_free(model);
    else printf("  refused: %s\n", err.message);
    lm_backend_destroy(be);
    test_remove_checkpoint(dir);
}

static void test_bad_fp8_checkpoints(void) {
    char fixture[1024];
    test_fixture_path(fixture, sizeof fixture, "models/qwen35-dense");
    check_bad_fp8(fixture, TEST_FP8_CONFIG, TEST_FP8_NO_SCALE, "q_proj.weight_scale_inv' are missing");
    check_bad_fp8(fixture, TEST_FP8_CONFIG, TEST_FP8_WRONG_SCALE_SHAPE, "has shape [1, 1]; expected [2, 1]");
    check_bad_fp8(fixture, NULL, TEST_FP8_GOOD, "no quantization_config");
    check_bad_fp8(fixture, "{\"quant_method\": \"fp8\", \"weight_block_size\": [128]}", TEST_FP8_GOOD,
                  "weight_block_size must be a list of two");
    check_bad_fp8(fixture, "{\"quant_method\": \"fp8\", \"weight_block_size\": [0, 128]}", TEST_FP8_GOOD,
                  "weight_block_size");
    check_bad_fp8(fixture, "{\"quant_method\": \"fp8\"}", TEST_FP8_GOOD, "block-scaled FP8 checkpoints only");
    check_bad_fp8(fixture, "{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true}", TEST_FP8_GOOD,
                  "quant_method is 'bitsandbytes'");
    check_bad_fp8(fixture, "{\"quant_method\": \"fp8\", \"fmt\": \"e5m2\", \"weight_block_size\": [128, 128]}",
                  TEST_FP8_GOOD, "E4M3");
    /* a block size the scales do not match: [64, 128] wants 4 scale rows */
    check_bad_fp8(fixture, "{\"quant_method\": \"fp8\", \"weight_block_size\": [64, 128]}", TEST_FP8_GOOD,
                  "one scale per 64x128 block");
}

/* E4M3 decoding: every code against its definition. */
static void test_e4m3_decoding(void) {
    CHECK(lm_e4m3_to_f32(0x00) == 0.0f && signbit(lm_e4m3_to_f32(0x80)));
    CHECK(lm_e4m3_to_f32(0x01) == ldexpf(1, -9));       /* smallest subnormal */
    CHECK(lm_e4m3_to_f32(0x07) == 7 * ldexpf(1, -9));   /* largest subnormal */
    CHECK(lm_e4m3_to_f32(0x08) == ldexpf(1, -6));       /* smallest normal */
    CHECK(lm_e4m3_to_f32(0x38) == 1.0f);
    CHECK(lm_e4m3_to_f32(0x7E) == 448.0f && lm_e4m3_to_f32(0xFE) == -448.0f);
    CHECK(isnan(lm_e4m3_to_f32(0x7F)) && isnan(lm_e4m3_to_f32(0xFF)));
    for (int b = 0; b < 256; b++) {
        if ((b & 0x7F) == 0x7F) continue;
        int e = (b >> 3) & 15, m = b & 7;
        double want = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
        if (b & 0x80) want = -want;
        CHECK_MSG(lm_e4m3_to_f32((uint8_t)b) == (float)want, "code 0x%02x", b);
    }
}

/* Q8_0 rows: scales rounded up to bf16, |q| <= 127, zero blocks, non-finite refused. */
static void test_q8_quantize_row(void) {
    float x[64];
    uint8_t q[2 * LM_Q8_BLOCK_BYTES];
    for (int i = 0; i < 64; i++) x[i] = i < 32 ? 0.0f : (float)(i - 48) * 0.37f;
    CHECK(lm_q8_quantize_row(x, 64, q));
    CHECK(lm_q8_block_scale(q) == 0.0f);
    float s = lm_q8_block_scale(q + LM_Q8_BLOCK_BYTES);
    CHECK(s >= 16 * 0.37f / 127 && s < 16 * 0.37f / 127 * 1.01f);
    for (int i = 32; i < 64; i++) {
        float back = lm_q8_weight_at(q, i);
        CHECK_MSG(fabsf(back - x[i]) <= s / 2 * 1.0001f, "col %d: %g vs %g", i, back, x[i]);
    }
    x[40] = NAN;
    CHECK(!lm_q8_quantize_row(x, 64, q));
    x[40] = INFINITY;
    CHECK(!lm_q8_quantize_row(x, 64, q));
}

int main(void) {
    RUN_TEST(test_e4m3_decoding);
    RUN_TEST(test_q8_quantize_row);
    RUN_TEST(test_int8_dense);
    RUN_TEST(test_int8_moe);
    RUN_TEST(test_int8_glm);
    RUN_TEST(test_int8_decode_matches_prefill);
    RUN_TEST(test_backend_without_int8_refuses);
    RUN_TEST(test_fp8_checkpoint);
    RUN_TEST(test_fp8_without_int8_loads_bf16);
    RUN_TEST(test_bad_fp8_checkpoints);
    return test_summary("test_quantized");
}
