/* 4-bit checkpoints kept at 4 bits (issue 51): MLX affine 4-bit as ggml
 * Q4_1 blocks, GPTQ and AWQ int4 as Q4_0 / Q5_0 blocks, each holding the
 * checkpoint's weights exactly.
 *
 * - the committed fixtures (dense, and MLX's MoE layout with switch_mlp
 *   expert stacks), made by the formats' own formulas and packing
 *   (tools/fixtures/make_mlx_fixture.py: mlx.core.quantize's affine rule;
 *   tools/fixtures/make_gptq_fixture.py: AutoGPTQ's QuantLinear.pack and
 *   AutoAWQ's WQLinear_GEMM.from_linear): float32 logits within 1e-3 of the
 *   logits' std of their dequantized float32 twins, on the backend under
 *   test ($LOOM_TEST_BACKEND: cpu, ref);
 * - what each matrix became (its dtype, the startup line), the parameters
 *   (the packed codes count as the weights they hold), and the bytes a
 *   decode step reads: 5 bits a quantized weight for Q4_1, 4.5 for Q4_0,
 *   5.5 for Q5_0 (desc_act's permuted groups: float32, said so);
 * - batch invariance: token-by-token decoding gives the full prefill's
 *   logits (bit for bit where every matrix is 4-bit);
 * - a model split over 2 ranks (tensor parallelism: rows and column
 *   windows of the blocks; expert parallelism on the MoE fixture);
 * - GPTQ with group_size -1 (one group a row) on the same tensors;
 * - refusals naming the field or tensor: bits 8, an unknown
 *   checkpoint_format, AWQ version gemv, missing qzeros / scales, scales of
 *   the wrong shape, a g_idx of the wrong length or out of range, qweight
 *   without a quantization_config. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/sequence_runner.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "model_util.h"
#include "models/tensor_parallel.h"
#include "safetensors_writer.h"

/* max |Δlogit| / std against the float32 twin: the weights are the twin's
 * exactly, only the kernels' order of summation differs. */
#define TWIN_TOLERANCE 1e-3
/* The same model through the same kernels, decode vs prefill: bit for bit
 * where every matrix is 4-bit (the MLX fixture: [0]); the GPTQ/AWQ
 * fixtures keep in_proj_a/b, the embedding and lm_head bf16, whose
 * products move by float32 rounding between one row and many (the bf16
 * qwen35-dense itself: [1.05e-5]; GPTQ [1.01e-5], AWQ [6.2e-6]). */
#define SAME_KERNELS_TOLERANCE 1e-4

/* ---- the fixtures against their twins ---- */

static void check_twin_of(const char *source, const char *name, const char *made_needle, lm_dtype want_dtype,
                          double bits_lo, double bits_hi) {
    char fixture[1024], q[1024], twin[1024], twin_name[256];
    test_fixture_path(fixture, sizeof fixture, source);
    snprintf(twin_name, sizeof twin_name, "%s-twin", name);
    test_fixture_path(q, sizeof q, name);
    test_fixture_path(twin, sizeof twin, twin_name);
    lm_safetensors *ref = test_open_reference(fixture);
    CHECK(ref);
    /* what the load made, and the bytes of a decode step */
    test_model tq, tt;
    CHECK(test_model_open(&tq, q, 1));
    CHECK(test_model_open(&tt, twin, 1));
    const lm_model_info *iq = lm_model_describe(tq.model), *it = lm_model_describe(tt.model);
    printf("  %s: %s\n", name, iq->weights_made);
    CHECK_MSG(strstr(iq->weights_made, made_needle), "the startup line '%s' does not say '%s'", iq->weights_made,
              made_needle);
    const lm_qwen35_layer *l0 = &tq.qwen->layers[0];
    lm_dtype got = l0->is_moe ? l0->moe.experts.view.down[0].dtype : l0->mlp.down_proj.dtype;
    CHECK_MSG(got == want_dtype, "layer 0's down_proj is %s, expected %s", lm_dtype_name(got), lm_dtype_name(want_dtype));
    /* The twin holds the quantized matrices as float32 and the rest as the
     * quantized checkpoint does, so the difference of the decode bytes is
     * (4 − b/8) bytes for each quantized weight a step reads: b, the bits a
     * kept weight costs, follows from the count of those weights. */
    double n_quant = 0;
    const lm_checkpoint *ck = tt.qwen->checkpoint;
    const lm_qwen35_config *c = tt.config;
    double routed = c->is_moe ? (double)c->num_experts_per_tok / c->num_experts : 1; /* of each expert a step reads */
    for (size_t i = 0; i < lm_checkpoint_count(ck); i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        if (t->dtype == LM_DTYPE_F32 && t->n_dims == 2 && !strstr(t->name, "embed_tokens"))
            n_quant += (double)t->n_elements * (strstr(t->name, ".experts.") ? routed : 1);
    }
    double diff = (double)it->decode_bytes_per_token - (double)iq->decode_bytes_per_token;
    double bits = n_quant > 0 ? 8.0 * (4.0 - diff / n_quant) : 0;
    printf("  %s: a decode step reads %zu bytes (its float32 twin %zu): %.3f bits a quantized weight\n", name,
           iq->decode_bytes_per_token, it->decode_bytes_per_token, bits);
    CHECK_MSG(bits >= bits_lo && bits <= bits_hi, "%.3f bits a weight, expected [%.2f, %.2f]", bits, bits_lo, bits_hi);
    /* the packed codes count as the weights they hold, scales as none */
    CHECK_MSG(iq->n_parameters == it->n_parameters && iq->n_active_parameters == it->n_active_parameters,
              "%s: %lld parameters (%lld active), its twin %lld (%lld)", name, (long long)iq->n_parameters,
              (long long)iq->n_active_parameters, (long long)it->n_parameters, (long long)it->n_active_parameters);
    test_model_close(&tq);
    test_model_close(&tt);
    int n_prompts = strstr(source, "moe") ? 2 : 4; /* the MoE fixture's reference has 2 */
    test_prompt_logits a, b;
    bool ok_a = test_run_prompts(q, NULL, ref, n_prompts, &a), ok_b = test_run_prompts(twin, NULL, ref, n_prompts, &b);
    if (ok_a && ok_b) {
        double e = test_worst_prompt_error(&a, &b, NULL, n_prompts),
               e_ref = test_worst_prompt_error(&a, NULL, ref, n_prompts);
        printf("  %s vs its float32 twin: %.3g of the logits' std; vs the bf16 reference: %.3g\n", name, e, e_ref);
        CHECK_MSG(e < TWIN_TOLERANCE, "%s differs from its twin by %.3g of the logits' std", name, e);
    }
    test_prompt_logits_free(&a);
    test_prompt_logits_free(&b);
    lm_safetensors_close(ref);
    CHECK(ok_a && ok_b);
}

static void check_twin(const char *name, const char *made_needle, lm_dtype want_dtype, double bits_lo,
                       double bits_hi) {
    check_twin_of("models/qwen35-dense", name, made_needle, want_dtype, bits_lo, bits_hi);
}

/* mlx-lm's MoE layout: switch_mlp stacks of 4-bit experts in groups of 32
 * (Q4_1), the router and shared-expert gate 8-bit (decoded to bf16, their
 * per-module overrides), against a twin holding the experts one float32
 * matrix each.  The bits a weight lie between Q4_1's 5 and the 8-bit
 * matrices' bf16 16. */
static void test_mlx4_moe_fixture(void) {
    check_twin_of("models/qwen35-moe", "models/qwen35-moe-mlx4", "MLX 4-bit kept 4-bit (Q4_1", LM_DTYPE_GGML_Q4_1, 4.99,
                  5.5);
}

static void test_mlx4_fixture(void) {
    check_twin("models/qwen35-dense-mlx4", "MLX 4-bit kept 4-bit (Q4_1", LM_DTYPE_GGML_Q4_1, 4.99, 5.01);
}
static void test_gptq4_fixture(void) { /* sym: every zero 8 */
    check_twin("models/qwen35-dense-gptq4", "GPTQ int4 kept 4-bit", LM_DTYPE_GGML_Q4_0, 4.49, 4.51);
}
static void test_gptq4_act_fixture(void) { /* desc_act: permuted groups, decoded */
    check_twin("models/qwen35-dense-gptq4-act", "desc_act matrices decoded to float32", LM_DTYPE_F32, 31.99, 32.01);
}
static void test_awq4_fixture(void) { /* zero points: Q5_0 */
    check_twin("models/qwen35-dense-awq4", "AWQ int4 kept 4-bit", LM_DTYPE_GGML_Q5_0, 5.49, 5.51);
}

/* Token-by-token decoding after a prefill of 5 gives the model's own
 * full-prefill logits (a token's bits do not depend on its batchmates). */
static void check_decode_matches_prefill(const char *name, double tolerance) {
    char dir[1024], fixture[1024];
    test_fixture_path(dir, sizeof dir, name);
    test_fixture_path(fixture, sizeof fixture, "models/qwen35-dense");
    lm_safetensors *ref = test_open_reference(fixture);
    CHECK(ref);
    test_model tm;
    CHECK(test_model_open(&tm, dir, 2));
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
    printf("  %s: decode vs prefill %.3g\n", name, e);
    CHECK_MSG(e <= tolerance, "%s: decode differs from prefill by %.3g", name, e);
    free(full);
    free(steps);
    test_model_close(&tm);
    lm_safetensors_close(ref);
}

static void test_decode_matches_prefill(void) {
    check_decode_matches_prefill("models/qwen35-dense-mlx4", 0);
    check_decode_matches_prefill("models/qwen35-dense-gptq4", SAME_KERNELS_TOLERANCE);
    check_decode_matches_prefill("models/qwen35-dense-awq4", SAME_KERNELS_TOLERANCE);
}

/* ---- checkpoints made from a fixture with one thing changed ---- */

typedef enum { KEEP, DROP, BAD_SHAPE, GIDX_OUT_OF_RANGE } change_kind;

typedef struct {
    const char *tensor; /* a name's tail ("layers.0.mlp.down_proj.qzeros"); NULL: nothing */
    change_kind kind;
    const char *quant_key; /* a quantization_config key to set to quant_value (JSON); NULL: none */
    const char *quant_value;
    bool no_quant_config;
} change;

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

static bool write_changed(const char *fixture_dir, const char *dir, const change *c) {
    lm_error err = {0};
    lm_checkpoint *ck = NULL;
    if (lm_checkpoint_open(fixture_dir, LM_LOAD_READ, &ck, &err) != LM_OK) {
        fprintf(stderr, "%s\n", err.message);
        return false;
    }
    test_st_writer *w = NULL;
    bool ok = test_st_writer_create(&w, &err) == LM_OK;
    int32_t *spoiled = NULL;
    for (size_t i = 0; ok && i < lm_checkpoint_count(ck); i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        bool target = c->tensor && ends_with(t->name, c->tensor);
        if (!target || c->kind == KEEP) {
            ok = test_st_writer_add_tensor(w, t, &err) == LM_OK;
        } else if (c->kind == BAD_SHAPE) { /* one row or element fewer */
            int64_t shape[LM_TENSOR_MAX_DIMS];
            for (int d = 0; d < t->n_dims; d++) shape[d] = t->shape[d];
            shape[0] -= 1;
            size_t row = t->n_bytes / (size_t)t->shape[0];
            test_st_piece p = {t->data, t->n_bytes - row};
            ok = test_st_writer_add(w, t->name, t->dtype, t->n_dims, shape, &p, 1, &err) == LM_OK;
        } else if (c->kind == GIDX_OUT_OF_RANGE) {
            spoiled = malloc(t->n_bytes);
            ok = spoiled != NULL;
            if (ok) {
                memcpy(spoiled, t->data, t->n_bytes);
                spoiled[3] = 99;
                test_st_piece p = {spoiled, t->n_bytes};
                ok = test_st_writer_add(w, t->name, t->dtype, t->n_dims, t->shape, &p, 1, &err) == LM_OK;
            }
        } /* DROP: left out */
    }
    char path[1400];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (ok) ok = test_st_writer_write(w, path, &err) == LM_OK;
    if (!ok) fprintf(stderr, "writing %s: %s\n", path, err.message);
    free(spoiled);
    test_st_writer_free(w);
    lm_checkpoint_close(ck);
    /* config.json, its quantization_config changed */
    cJSON *config = NULL;
    snprintf(path, sizeof path, "%s/config.json", fixture_dir);
    if (ok) ok = lm_json_read_file(path, 1 << 20, &config, &err) == LM_OK;
    cJSON *qc = ok ? cJSON_GetObjectItemCaseSensitive(config, "quantization_config") : NULL;
    if (ok && c->no_quant_config) cJSON_DeleteItemFromObject(config, "quantization_config");
    else if (ok && c->quant_key && qc) {
        cJSON *v = cJSON_Parse(c->quant_value);
        ok = v && cJSON_ReplaceItemInObject(qc, c->quant_key, v);
    }
    char *text = ok ? cJSON_Print(config) : NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = text ? fopen(path, "w") : NULL;
    ok = f && fputs(text, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    free(text);
    cJSON_Delete(config);
    return ok;
}

static void remove_checkpoint(const char *dir) {
    char path[1400];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

/* group_size -1 (one group a row): the gptq4 fixture's rows of 64 and 128
 * columns have one group at 128 too, so the same tensors read as per
 * channel give the same model. */
static void test_gptq_per_channel(void) {
    char fixture[1024], dir[1024], twin[1024], dense[1024];
    test_fixture_path(fixture, sizeof fixture, "models/qwen35-dense-gptq4");
    test_fixture_path(twin, sizeof twin, "models/qwen35-dense-gptq4-twin");
    test_fixture_path(dense, sizeof dense, "models/qwen35-dense");
    CHECK(test_make_temp_folder(dir, sizeof dir, "gptq-per-channel"));
    const change c = {.quant_key = "group_size", .quant_value = "-1"};
    CHECK(write_changed(fixture, dir, &c));
    lm_safetensors *ref = test_open_reference(dense);
    CHECK(ref);
    test_prompt_logits a, b;
    bool ok_a = test_run_prompts(dir, NULL, ref, 2, &a), ok_b = test_run_prompts(twin, NULL, ref, 2, &b);
    if (ok_a && ok_b) {
        double e = test_worst_prompt_error(&a, &b, NULL, 2);
        printf("  GPTQ group_size -1 vs the twin: %.3g\n", e);
        CHECK_MSG(e < TWIN_TOLERANCE, "per-channel GPTQ differs from its twin by %.3g", e);
    }
    test_prompt_logits_free(&a);
    test_prompt_logits_free(&b);
    lm_safetensors_close(ref);
    remove_checkpoint(dir);
    CHECK(ok_a && ok_b);
}

/* A rank's slices over 2 ranks (tensor parallelism: rows and column
 * windows of the blocks; expert parallelism: whole experts of the
 * stacks) against the whole twin on one rank. */
static void check_split(const char *source, const char *name, bool expert_parallel) {
    char fixture[1024], q[1024], twin[1024], twin_name[256];
    test_fixture_path(fixture, sizeof fixture, source);
    snprintf(twin_name, sizeof twin_name, "%s-twin", name);
    test_fixture_path(q, sizeof q, name);
    test_fixture_path(twin, sizeof twin, twin_name);
    lm_safetensors *ref = test_open_reference(fixture);
    CHECK(ref);
    lm_error err = {0};
    lm_backend *be = NULL;
    CHECK_OK(lm_backend_create(test_backend_name(), 2, &be, &err), &err);
    lm_model *model = NULL;
    lm_model_load_options options = {.expert_parallel = expert_parallel};
    lm_status st = lm_tensor_parallel_open(q, NULL, &options, be, 2, &model, &err);
    CHECK_MSG(st == LM_OK, "%s over 2 ranks: %s", name, err.message);
    int n_prompts = strstr(source, "moe") ? 2 : 4;
    test_prompt_logits a, b;
    memset(&a, 0, sizeof a);
    bool ok_a = test_prefill_prompts(model, q, ref, n_prompts, &a), ok_b = test_run_prompts(twin, NULL, ref, n_prompts, &b);
    if (ok_a && ok_b) {
        double e = test_worst_prompt_error(&a, &b, NULL, n_prompts);
        printf("  %s over 2 ranks%s vs its twin: %.3g\n", name, expert_parallel ? " (experts whole)" : "", e);
        CHECK_MSG(e < TWIN_TOLERANCE, "%s over 2 ranks differs from its twin by %.3g", name, e);
    }
    test_prompt_logits_free(&a);
    test_prompt_logits_free(&b);
    lm_model_free(model);
    lm_backend_destroy(be);
    lm_safetensors_close(ref);
    CHECK(ok_a && ok_b);
}

static void test_split_over_ranks(void) {
    check_split("models/qwen35-dense", "models/qwen35-dense-gptq4", false);
    check_split("models/qwen35-dense", "models/qwen35-dense-awq4", false);
    check_split("models/qwen35-dense", "models/qwen35-dense-mlx4", false);
    check_split("models/qwen35-moe", "models/qwen35-moe-mlx4", false);
    check_split("models/qwen35-moe", "models/qwen35-moe-mlx4", true);
}

static void check_refused(const char *fixture_name, const change *c, const char *needle) {
    char fixture[1024], dir[1024];
    test_fixture_path(fixture, sizeof fixture, fixture_name);
    CHECK(test_make_temp_folder(dir, sizeof dir, "int4-bad"));
    CHECK(write_changed(fixture, dir, c));
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
    remove_checkpoint(dir);
}

static void test_refusals(void) {
    const char *gptq = "models/qwen35-dense-gptq4", *act = "models/qwen35-dense-gptq4-act",
               *awq = "models/qwen35-dense-awq4";
    check_refused(gptq, &(change){.quant_key = "bits", .quant_value = "8"}, "quantization_config.bits is 8");
    check_refused(gptq, &(change){.quant_key = "checkpoint_format", .quant_value = "\"marlin\""},
                  "checkpoint_format is 'marlin'");
    check_refused(awq, &(change){.quant_key = "version", .quant_value = "\"gemv\""}, "version is 'gemv'");
    check_refused(gptq, &(change){.quant_key = "group_size", .quant_value = "0"}, "group_size is 0");
    check_refused(gptq, &(change){.tensor = "layers.0.mlp.down_proj.qzeros", .kind = DROP},
                  "has no 'model.language_model.layers.0.mlp.down_proj.qzeros'");
    check_refused(awq, &(change){.tensor = "layers.3.self_attn.q_proj.scales", .kind = DROP},
                  "has no 'model.language_model.layers.3.self_attn.q_proj.scales'");
    check_refused(awq, &(change){.tensor = "layers.0.mlp.up_proj.scales", .kind = BAD_SHAPE},
                  "up_proj.scales' has 2 dims [0, ...]; expected [1, 128]");
    check_refused(gptq, &(change){.tensor = "layers.0.mlp.gate_proj.qweight", .kind = BAD_SHAPE},
                  "gate_proj.qweight' has 2 dims [7, ...]; expected [8, 128]");
    check_refused(act, &(change){.tensor = "layers.0.mlp.down_proj.g_idx", .kind = BAD_SHAPE},
                  "down_proj.g_idx' has 1 dims [127...]; expected [128]");
    check_refused(act, &(change){.tensor = "layers.0.mlp.down_proj.g_idx", .kind = GIDX_OUT_OF_RANGE},
                  "down_proj.g_idx' puts column 3 in group 99; the matrix has 4 groups");
    check_refused(gptq, &(change){.no_quant_config = true}, "no quantization_config with quant_method");
    /* AWQ's group_size disagreeing with the tensors: the scales' rows */
    check_refused(awq, &(change){.quant_key = "group_size", .quant_value = "32"},
                  "qzeros' has 2 dims [1, ...]; expected [2, 16] (AWQ, config.json's group_size 32)");
}

int main(void) {
    RUN_TEST(test_mlx4_fixture);
    RUN_TEST(test_mlx4_moe_fixture);
    RUN_TEST(test_gptq4_fixture);
    RUN_TEST(test_gptq4_act_fixture);
    RUN_TEST(test_awq4_fixture);
    RUN_TEST(test_decode_matches_prefill);
    RUN_TEST(test_gptq_per_channel);
    RUN_TEST(test_split_over_ranks);
    RUN_TEST(test_refusals);
    return test_summary("test_quant4");
}
