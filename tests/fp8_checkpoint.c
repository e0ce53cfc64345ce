#include "fp8_checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bf16.h"
#include "base/quant.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "safetensors_writer.h"

#define FP8_BLOCK 128
#define MAX_TENSORS 256

/* The nearest E4M3 value (ties to the even code) to x, |x| <= 448. */
static uint8_t f32_to_e4m3(float x) {
    uint8_t best = 0;
    float best_d = INFINITY;
    for (int code = 0; code < 0x7F; code++) {
        float d = fabsf(fabsf(x) - lm_e4m3_to_f32((uint8_t)code));
        if (d < best_d || (d == best_d && !(code & 1))) {
            best_d = d;
            best = (uint8_t)code;
        }
    }
    return (uint8_t)(best | (x < 0 ? 0x80 : 0));
}

/* What the FP8 writer makes of one float tensor [n,] rows, cols. */
typedef struct {
    uint8_t *q;            /* e4m3, the tensor's shape */
    float *scale;          /* [n,] ceil(rows/128), ceil(cols/128) */
    uint16_t *scale_bf16;
    float *dequant;        /* e4m3 · scale as loom computes it */
    uint16_t *dequant_bf16;
} fp8_tensor;

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

static bool is_fp8_target(const lm_tensor *t, bool every_linear) {
    bool bf16 = t->dtype == LM_DTYPE_BF16 && !strstr(t->name, "visual");
    if (every_linear) {
        bool router = ends_with(t->name, "mlp.gate.weight") || strstr(t->name, "shared_expert_gate");
        bool matrix = t->n_dims == 2 && ends_with(t->name, ".weight") && !strstr(t->name, "embed_tokens") &&
                      !strstr(t->name, "norm") && !router;
        bool fused_experts = t->n_dims == 3 && strstr(t->name, "mlp.experts.") && ends_with(t->name, "_proj");
        return bf16 && (matrix || fused_experts);
    }
    return bf16 && t->n_dims == 2 && (ends_with(t->name, "_proj.weight") || strcmp(t->name, "mtp.fc.weight") == 0);
}

/* Block scales amax / 448 (rounded to bf16 when bf16_scales, as some
 * releases store them), e4m3 values of w / scale, for each of the n
 * matrices of t. */
static bool fp8_quantize(const lm_tensor *t, bool bf16_scales, fp8_tensor *out) {
    int64_t n = t->n_dims == 3 ? t->shape[0] : 1, rows = t->shape[t->n_dims - 2], cols = t->shape[t->n_dims - 1];
    int64_t sr = (rows + FP8_BLOCK - 1) / FP8_BLOCK, sc = (cols + FP8_BLOCK - 1) / FP8_BLOCK;
    size_t count = (size_t)(n * rows * cols), scales = (size_t)(n * sr * sc);
    out->q = malloc(count);
    out->scale = malloc(sizeof(float) * scales);
    out->scale_bf16 = malloc(sizeof(uint16_t) * scales);
    out->dequant = malloc(sizeof(float) * count);
    out->dequant_bf16 = malloc(sizeof(uint16_t) * count);
    if (!out->q || !out->scale || !out->scale_bf16 || !out->dequant || !out->dequant_bf16) return false;
    const uint16_t *w = t->data;
    for (int64_t m = 0; m < n; m++)
        for (int64_t br = 0; br < sr; br++)
            for (int64_t bc = 0; bc < sc; bc++) {
                size_t si = (size_t)((m * sr + br) * sc + bc);
                float amax = 0;
                for (int64_t r = br * FP8_BLOCK; r < rows && r < (br + 1) * FP8_BLOCK; r++)
                    for (int64_t c = bc * FP8_BLOCK; c < cols && c < (bc + 1) * FP8_BLOCK; c++)
                        amax = fmaxf(amax, fabsf(lm_bf16_to_f32(w[(m * rows + r) * cols + c])));
                float s = amax > 0 ? amax / 448.0f : 1.0f;
                out->scale_bf16[si] = lm_f32_to_bf16(s);
                if (bf16_scales) s = lm_bf16_to_f32(out->scale_bf16[si]);
                out->scale[si] = s;
                for (int64_t r = br * FP8_BLOCK; r < rows && r < (br + 1) * FP8_BLOCK; r++)
                    for (int64_t c = bc * FP8_BLOCK; c < cols && c < (bc + 1) * FP8_BLOCK; c++) {
                        size_t i = (size_t)((m * rows + r) * cols + c);
                        float v = lm_bf16_to_f32(w[i]) / s;
                        out->q[i] = f32_to_e4m3(fminf(fmaxf(v, -448.0f), 448.0f));
                        out->dequant[i] = lm_e4m3_to_f32(out->q[i]) * s;
                        out->dequant_bf16[i] = lm_f32_to_bf16(out->dequant[i]);
                    }
            }
    return true;
}

static void fp8_free(fp8_tensor *f) {
    free(f->q);
    free(f->scale);
    free(f->scale_bf16);
    free(f->dequant);
    free(f->dequant_bf16);
}

/* Adds t's FP8 form (and its scales) or its dequantized form to w. */
static bool add_converted(test_st_writer *w, const lm_tensor *t, fp8_tensor *f, const test_fp8_options *o,
                          lm_error *err) {
    bool bf16_scales = strstr(t->name, "layers.1.") != NULL; /* one layer's scales in bf16 */
    if (!fp8_quantize(t, bf16_scales, f)) return false;
    int nd = t->n_dims;
    int64_t n = nd == 3 ? t->shape[0] : 1, rows = t->shape[nd - 2], cols = t->shape[nd - 1];
    size_t count = (size_t)(n * rows * cols);
    if (o->form == TEST_FP8_DEQUANT_F32) {
        test_st_piece piece = {f->dequant, sizeof(float) * count};
        return test_st_writer_add(w, t->name, LM_DTYPE_F32, nd, t->shape, &piece, 1, err) == LM_OK;
    }
    if (o->form == TEST_FP8_DEQUANT_BF16) {
        test_st_piece piece = {f->dequant_bf16, sizeof(uint16_t) * count};
        return test_st_writer_add(w, t->name, LM_DTYPE_BF16, nd, t->shape, &piece, 1, err) == LM_OK;
    }
    test_st_piece piece = {f->q, count};
    if (test_st_writer_add(w, t->name, LM_DTYPE_F8_E4M3, nd, t->shape, &piece, 1, err) != LM_OK) return false;
    bool target = strstr(t->name, "layers.3.self_attn.q_proj.weight") != NULL; /* 256 rows: 2 scale rows */
    if (target && o->spoil == TEST_FP8_NO_SCALE) return true;
    int64_t sshape[3] = {n, (rows + FP8_BLOCK - 1) / FP8_BLOCK, (cols + FP8_BLOCK - 1) / FP8_BLOCK};
    if (target && o->spoil == TEST_FP8_WRONG_SCALE_SHAPE) sshape[1] = 1;
    size_t scales = (size_t)(sshape[0] * sshape[1] * sshape[2]);
    test_st_piece sp = bf16_scales ? (test_st_piece){f->scale_bf16, sizeof(uint16_t) * scales}
                                   : (test_st_piece){f->scale, sizeof(float) * scales};
    char scale_name[320];
    snprintf(scale_name, sizeof scale_name, "%s_scale_inv", t->name);
    return test_st_writer_add(w, scale_name, bf16_scales ? LM_DTYPE_BF16 : LM_DTYPE_F32, nd, nd == 3 ? sshape : sshape + 1,
                              &sp, 1, err) == LM_OK;
}

bool test_fp8_write_checkpoint(const char *fixture_dir, const char *dir, const test_fp8_options *o) {
    lm_error err = {0};
    lm_checkpoint *ck = NULL;
    if (lm_checkpoint_open(fixture_dir, LM_LOAD_READ, &ck, &err) != LM_OK) {
        fprintf(stderr, "%s\n", err.message);
        return false;
    }
    test_st_writer *w = NULL;
    fp8_tensor made[MAX_TENSORS];
    int n_made = 0;
    bool ok = test_st_writer_create(&w, &err) == LM_OK;
    for (size_t i = 0; ok && i < lm_checkpoint_count(ck); i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        if (!is_fp8_target(t, o->every_linear) || n_made == MAX_TENSORS) {
            ok = test_st_writer_add_tensor(w, t, &err) == LM_OK;
            continue;
        }
        fp8_tensor *f = &made[n_made++];
        memset(f, 0, sizeof *f);
        ok = add_converted(w, t, f, o, &err);
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (ok) ok = test_st_writer_write(w, path, &err) == LM_OK;
    if (!ok) fprintf(stderr, "writing %s: %s\n", path, err.message);
    for (int i = 0; i < n_made; i++) fp8_free(&made[i]);
    test_st_writer_free(w);
    lm_checkpoint_close(ck);
    /* config.json, with the quantization_config */
    cJSON *config = NULL;
    snprintf(path, sizeof path, "%s/config.json", fixture_dir);
    if (ok) ok = lm_json_read_file(path, 1 << 20, &config, &err) == LM_OK;
    if (ok && o->form == TEST_FP8_WEIGHTS && o->quant_json) {
        cJSON *q = cJSON_Parse(o->quant_json);
        ok = q && cJSON_AddItemToObject(config, "quantization_config", q);
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

void test_remove_checkpoint(const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}
