/* The vision towers (model-spec §D.3 Qwen3.5, §E.3 GLM-4.6V) against
 * transformers' references: for tests/fixtures/models/qwen35-dense,
 * tests/fixtures/models/glm46v-moe and
 * tests/data/glm-shapes/groups4-top4-hd16, img0.pixel_values (already in
 * merge-block order) and img0.grid_thw through encode_image must give
 * img0.image_embeds within 1e-4 of the reference's std.  Per fixture also:
 * every model.visual.* tensor is used, the token ids the prompt side needs
 * are the ones around the placeholders of img0.input_ids, two frames in one
 * image are encoded each on its own (attention within a frame), and
 * contexts and images that do not fit the tower are refused.  Text-only
 * checkpoints still load, without a tower. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "model_util.h"
#include "models/glm4v/glm4v_config.h"
#include "models/model.h"
#include "models/qwen35/qwen35_config.h"

#define EMBED_TOLERANCE 1e-4 /* max |Δ| / std(reference), fixtures/README.md */
/* Two encodings of the same frame differ only by the rounding of
 * differently blocked matmuls (or not at all). */
#define SAME_FRAME_TOLERANCE 1e-5

typedef struct {
    const char *name;
    char dir[1024];
    test_model m;
    const lm_model_info *info;
    lm_safetensors *reference;
    lm_image_patches image; /* img0: pixels point into the reference file */
    const lm_tensor *want;  /* img0.image_embeds */
} vision_fixture;

static bool open_fixture(vision_fixture *f, const char *name, const char *dir) {
    memset(f, 0, sizeof *f);
    f->name = name;
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    if (!test_model_open(&f->m, f->dir, 2)) return false;
    f->info = lm_model_describe(f->m.model);
    char path[1200];
    lm_error err = {0};
    snprintf(path, sizeof path, "%s/reference.safetensors", f->dir);
    if (lm_safetensors_open(path, LM_LOAD_READ, &f->reference, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return false;
    }
    const lm_tensor *pixels = lm_safetensors_find(f->reference, "img0.pixel_values");
    const lm_tensor *grid = lm_safetensors_find(f->reference, "img0.grid_thw");
    f->want = lm_safetensors_find(f->reference, "img0.image_embeds");
    if (!pixels || !grid || !f->want || pixels->n_dims != 2 || grid->n_elements != 3 ||
        pixels->dtype != LM_DTYPE_F32 || f->want->dtype != LM_DTYPE_F32) {
        fprintf(stderr, "%s: img0 pixel_values / grid_thw / image_embeds missing\n", path);
        return false;
    }
    const int32_t *thw = grid->data;
    f->image = (lm_image_patches){.grid_t = thw[0],
                                  .grid_h = thw[1],
                                  .grid_w = thw[2],
                                  .merge_size = f->info->vision.processor.merge_size,
                                  .n_patches = (int)pixels->shape[0],
                                  .patch_dim = (int)pixels->shape[1],
                                  .pixels = (float *)pixels->data};
    return true;
}

static void close_fixture(vision_fixture *f) {
    lm_safetensors_close(f->reference);
    test_model_close(&f->m);
}

/* A context for images of up to max_patches patches (0: none). */
static lm_model_context *image_context(lm_model *model, int max_patches, lm_error *err) {
    lm_context_options o = {.kv_block_size = 16,
                            .kv_blocks = 4,
                            .state_slots = 1,
                            .max_step_tokens = 16,
                            .max_step_seqs = 1,
                            .max_blocks_per_seq = 4,
                            .max_image_patches = max_patches};
    lm_model_context *ctx = NULL;
    return lm_model_context_create(model, &o, &ctx, err) == LM_OK ? ctx : NULL;
}

/* The tower's rows for one image, or NULL with err set. */
static float *encode(lm_model_context *ctx, const lm_image_patches *p, lm_error *err) {
    size_t n = (size_t)lm_image_tokens(p) * (size_t)lm_model_describe(ctx->model)->hidden_size;
    float *out = malloc(sizeof(float) * (n ? n : 1));
    if (!out) {
        lm_fail(err, LM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (lm_model_encode_image(ctx, p, out, err) != LM_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/* ---- against the reference ---- */

static void test_image_embeds(void *arg) {
    vision_fixture *f = arg;
    CHECK_MSG(lm_model_has_vision(f->m.model), "no vision tower loaded");
    int rows = lm_image_tokens(&f->image), H = f->info->hidden_size;
    CHECK_MSG(f->want->n_dims == 2 && f->want->shape[0] == rows && f->want->shape[1] == H,
              "image_embeds is [%lld, %lld]; the tower makes [%d, %d]", (long long)f->want->shape[0],
              (long long)(f->want->n_dims > 1 ? f->want->shape[1] : 0), rows, H);
    lm_error err = {0};
    lm_model_context *ctx = image_context(f->m.model, f->image.n_patches, &err);
    CHECK_MSG(ctx, "context: %s", err.message);
    float *got = encode(ctx, &f->image, &err);
    lm_model_context_destroy(ctx);
    CHECK_MSG(got, "encode: %s", err.message);
    double e = test_normalized_error(got, f->want->data, (size_t)rows * H);
    free(got);
    fprintf(stderr, "    %s (%s): grid %dx%dx%d, %d patches -> %d rows: max |d| / std = %.3g\n",
            f->name, test_backend_name(), f->image.grid_t, f->image.grid_h, f->image.grid_w,
            f->image.n_patches, rows, e);
    CHECK_MSG(e < EMBED_TOLERANCE, "normalized image_embeds error %.3g", e);
}

/* ---- what the model says about its tower ---- */

static void test_vision_info(void *arg) {
    vision_fixture *f = arg;
    const lm_vision_info *vi = &f->info->vision;
    CHECK(vi->present);
    CHECK(vi->depth > 0 && vi->hidden_size > 0 && vi->n_heads > 0);
    /* every model.visual.* tensor is the tower's, and n_parameters counts them */
    lm_checkpoint *ck = NULL;
    lm_error err = {0};
    CHECK_OK(lm_checkpoint_open(f->dir, LM_LOAD_MMAP, &ck, &err), &err);
    int64_t visual = 0;
    for (size_t i = 0; i < lm_checkpoint_count(ck); i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        if (strncmp(t->name, "model.visual.", 13) == 0) visual += t->n_elements;
    }
    lm_checkpoint_close(ck);
    CHECK_MSG(vi->n_parameters == visual, "n_parameters %lld, model.visual.* holds %lld",
              (long long)vi->n_parameters, (long long)visual);
    CHECK(f->info->n_parameters > 0);
    /* the prompt: start, one placeholder per output row, end (model-spec §D.4, §E.5) */
    int n;
    const int32_t *ids = test_reference_ids(f->reference, "img0", &n);
    CHECK(ids);
    int first = -1, count = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] == vi->image_token_id) {
            if (first < 0) first = i;
            count++;
        }
    CHECK_MSG(count == lm_image_tokens(&f->image), "%d placeholders (id %d) for %d rows", count,
              vi->image_token_id, lm_image_tokens(&f->image));
    CHECK(first > 0 && ids[first - 1] == vi->vision_start_token_id);
    CHECK(first + count < n && ids[first + count] == vi->vision_end_token_id);
    /* the processor matches the pixel rows */
    const lm_image_processor *p = &vi->processor;
    CHECK(3 * p->temporal_patch_size * p->patch_size * p->patch_size == f->image.patch_dim);
    CHECK(p->min_pixels > 0 && p->min_pixels <= p->max_pixels);
}

/* ---- frames: attention and positions are per frame ---- */

/* The image's frame with every value v replaced by a·v + b (another frame). */
static float *transformed(const lm_image_patches *p, float a, float b) {
    size_t n = (size_t)p->n_patches * (size_t)p->patch_dim;
    float *out = malloc(sizeof(float) * n);
    if (out)
        for (size_t i = 0; i < n; i++) out[i] = a * p->pixels[i] + b;
    return out;
}

static void test_frames_are_separate(void *arg) {
    vision_fixture *f = arg;
    const lm_image_patches *one = &f->image;
    CHECK(one->grid_t == 1);
    int rows = lm_image_tokens(one), H = f->info->hidden_size;
    size_t frame_floats = (size_t)one->n_patches * (size_t)one->patch_dim;
    lm_error err = {0};
    lm_model_context *ctx = image_context(f->m.model, 2 * one->n_patches, &err);
    CHECK_MSG(ctx, "context: %s", err.message);
    float *other = transformed(one, -0.5f, 0.25f);
    float *both = malloc(sizeof(float) * 2 * frame_floats);
    float *twice = malloc(sizeof(float) * 2 * frame_floats);
    float *a = NULL, *b = NULL, *ab = NULL, *aa = NULL;
    bool ok = other && both && twice;
    if (ok) {
        memcpy(both, one->pixels, sizeof(float) * frame_floats);
        memcpy(both + frame_floats, other, sizeof(float) * frame_floats);
        memcpy(twice, one->pixels, sizeof(float) * frame_floats);
        memcpy(twice + frame_floats, one->pixels, sizeof(float) * frame_floats);
        lm_image_patches pb = *one, pab = *one, paa = *one;
        pb.pixels = other;
        pab.grid_t = paa.grid_t = 2;
        pab.n_patches = paa.n_patches = 2 * one->n_patches;
        pab.pixels = both;
        paa.pixels = twice;
        ok = (a = encode(ctx, one, &err)) && (b = encode(ctx, &pb, &err)) &&
             (ab = encode(ctx, &pab, &err)) && (aa = encode(ctx, &paa, &err));
    }
    double e_aa0 = INFINITY, e_aa1 = INFINITY, e_ab0 = INFINITY, e_ab1 = INFINITY, e_ab = 0;
    if (ok) {
        size_t n = (size_t)rows * H;
        e_aa0 = test_normalized_error(aa, a, n);
        e_aa1 = test_normalized_error(aa + n, a, n);
        e_ab0 = test_normalized_error(ab, a, n);
        e_ab1 = test_normalized_error(ab + n, b, n);
        e_ab = test_normalized_error(b, a, n); /* the frames are different images */
    }
    free(other);
    free(both);
    free(twice);
    free(a);
    free(b);
    free(ab);
    free(aa);
    lm_model_context_destroy(ctx);
    CHECK_MSG(ok, "encode: %s", err.message);
    CHECK_MSG(e_ab > 0.1, "the two frames give the same rows (%.3g): the test shows nothing", e_ab);
    CHECK_MSG(e_aa0 < SAME_FRAME_TOLERANCE && e_aa1 < SAME_FRAME_TOLERANCE,
              "the same frame twice: rows differ from one frame by %.3g / %.3g", e_aa0, e_aa1);
    CHECK_MSG(e_ab0 < SAME_FRAME_TOLERANCE && e_ab1 < SAME_FRAME_TOLERANCE,
              "two frames: rows differ from each frame alone by %.3g / %.3g (attention across "
              "frames?)",
              e_ab0, e_ab1);
}

/* ---- refusals ---- */

static bool refused(lm_model_context *ctx, const lm_image_patches *p, const char *fragment) {
    lm_error err = {0};
    float *out = malloc(sizeof(float) * (size_t)(lm_image_tokens(p) > 0 ? lm_image_tokens(p) : 1) *
                        (size_t)lm_model_describe(ctx->model)->hidden_size);
    lm_status st = out ? lm_model_encode_image(ctx, p, out, &err) : LM_ERR_NOMEM;
    free(out);
    if (st == LM_ERR_INVALID && strstr(err.message, fragment)) return true;
    fprintf(stderr, "    expected a refusal naming '%s', got %d: %s\n", fragment, (int)st,
            err.message);
    return false;
}

static void test_refusals(void *arg) {
    vision_fixture *f = arg;
    lm_error err = {0};
    /* a context without vision workspace */
    lm_model_context *plain = image_context(f->m.model, 0, &err);
    CHECK_MSG(plain, "context: %s", err.message);
    bool no_workspace = refused(plain, &f->image, "no vision workspace");
    lm_model_context_destroy(plain);
    CHECK(no_workspace);
    /* images that do not fit the tower or the workspace */
    lm_model_context *ctx = image_context(f->m.model, f->image.n_patches, &err);
    CHECK_MSG(ctx, "context: %s", err.message);
    lm_image_patches wrong_dim = f->image, wrong_merge = f->image, odd_grid = f->image;
    lm_image_patches wrong_count = f->image, too_many = f->image;
    wrong_dim.patch_dim = f->image.patch_dim / 2; /* e.g. one temporal frame */
    wrong_merge.merge_size = 1;
    odd_grid.grid_h = f->image.grid_h + 1; /* not a multiple of the merge size */
    wrong_count.n_patches = f->image.n_patches - 4;
    too_many.grid_t = 2;
    too_many.n_patches = 2 * f->image.n_patches;
    bool ok = refused(ctx, &wrong_dim, "patch rows of") && refused(ctx, &wrong_merge, "merge size") &&
              refused(ctx, &odd_grid, "multiples of the merge size") &&
              refused(ctx, &wrong_count, "holds") && refused(ctx, &too_many, "max_image_patches");
    lm_model_context_destroy(ctx);
    CHECK(ok);
    /* and a workspace the context cannot have */
    lm_model_context *bad = image_context(f->m.model, -1, &err);
    CHECK_MSG(!bad && err.code == LM_ERR_INVALID, "max_image_patches -1 was accepted");
}

/* ---- checkpoints without images ---- */

/* models/loom-tiny (qwen3_5_text, no vision_config) and the dense GLM
 * fixture, whose tower has no image reference: both load; loom-tiny has
 * no tower and refuses a vision workspace, dense-glm4v's tower runs. */
static void test_text_only_and_untested_towers(void) {
    test_model tiny;
    CHECK(test_model_open(&tiny, "models/loom-tiny", 1));
    bool present = lm_model_describe(tiny.model)->vision.present;
    lm_error err = {0};
    lm_model_context *ctx = image_context(tiny.model, 64, &err);
    lm_model_context_destroy(ctx);
    test_model_close(&tiny);
    CHECK_MSG(!present, "loom-tiny has a vision tower?");
    CHECK_MSG(!ctx && strstr(err.message, "no vision tower"), "a vision workspace without a tower: %s",
              err.message);

    test_model dense;
    CHECK(test_model_open(&dense, "tests/data/glm-shapes/dense-glm4v", 1));
    const lm_model_info *info = lm_model_describe(dense.model);
    CHECK_MSG(info->vision.present, "dense-glm4v's tower did not load");
    /* its merger (width 64, intermediate_size) and blocks (width 96,
     * out_hidden_size) differ: an image of 4 x 4 patches runs */
    enum { GRID = 4, PATCH_DIM = 3 * 2 * 4 * 4 };
    float *pixels = malloc(sizeof(float) * GRID * GRID * PATCH_DIM);
    float *out = malloc(sizeof(float) * (GRID * GRID / 4) * (size_t)info->hidden_size);
    ctx = image_context(dense.model, GRID * GRID, &err);
    lm_status st = LM_ERR_NOMEM;
    bool finite = true;
    if (pixels && out && ctx) {
        for (int i = 0; i < GRID * GRID * PATCH_DIM; i++) pixels[i] = sinf(0.37f * (float)i);
        lm_image_patches p = {.grid_t = 1, .grid_h = GRID, .grid_w = GRID, .merge_size = 2,
                              .n_patches = GRID * GRID, .patch_dim = PATCH_DIM, .pixels = pixels};
        st = lm_model_encode_image(ctx, &p, out, &err);
        for (int i = 0; st == LM_OK && i < (GRID * GRID / 4) * info->hidden_size; i++)
            finite = finite && isfinite(out[i]);
    }
    lm_model_context_destroy(ctx);
    free(pixels);
    free(out);
    test_model_close(&dense);
    CHECK_MSG(st == LM_OK, "dense-glm4v encode: %s", err.message);
    CHECK(finite);
}

/* ---- vision_config: defaults, and what loom refuses, naming the field ---- */

static void test_vision_config(void) {
    const char *qwen = "{\"model_type\":\"qwen3_5\",\"text_config\":{},\"vision_config\":{%s}}";
    const char *glm = "{\"model_type\":\"glm4v_moe\",\"text_config\":{\"hidden_size\":64,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":2048,"
                      "\"rope_parameters\":{\"mrope_section\":[1,1,2]}},\"vision_config\":{%s}}";
    char json[1024];
    lm_error err = {0};
    lm_qwen35_config q;
    lm_glm4v_config g;
    snprintf(json, sizeof json, qwen, "\"deepstack_visual_indexes\":[]");
    CHECK_OK(lm_qwen35_config_parse(json, strlen(json), "config.json", &q, &err), &err);
    CHECK(q.has_vision_config && q.vision.depth == 27 && q.vision.hidden_size == 1152 &&
          q.vision.num_position_embeddings == 2304 && q.vision.rope_theta == 10000.0f);
    snprintf(json, sizeof json, glm, "\"rope_parameters\":{\"rope_type\":\"axial\",\"rope_theta\":5e4}");
    CHECK_OK(lm_glm4v_config_parse(json, strlen(json), "config.json", &g, &err), &err);
    CHECK(g.has_vision_config && g.vision.depth == 24 && g.vision.image_size == 336 &&
          g.vision.rms_norm_eps == 1e-5f && g.vision.rope_theta == 5e4f && !g.vision.attention_bias);
    static const struct {
        bool glm;
        const char *fields, *says;
        lm_status code;
    } bad[] = {
        {false, "\"hidden_act\":\"gelu\"", "vision_config.hidden_act", LM_ERR_UNSUPPORTED},
        {false, "\"deepstack_visual_indexes\":[8,16,24]", "vision_config.deepstack_visual_indexes",
         LM_ERR_UNSUPPORTED},
        {false, "\"num_position_embeddings\":60", "vision_config.num_position_embeddings",
         LM_ERR_FORMAT},
        {false, "\"in_channels\":4", "vision_config.in_channels", LM_ERR_UNSUPPORTED},
        {false, "\"rope_parameters\":{\"rope_type\":\"yarn\"}", "vision_config.rope_parameters.rope_type",
         LM_ERR_UNSUPPORTED},
        {false, "\"hidden_size\":36,\"num_heads\":2", "divisible by 4", LM_ERR_UNSUPPORTED},
        {false, "\"hidden_size\":36,\"num_heads\":5", "num_heads", LM_ERR_FORMAT},
        {false, "\"depth\":0", "vision_config.depth", LM_ERR_FORMAT},
        {true, "\"hidden_act\":\"gelu\"", "vision_config.hidden_act", LM_ERR_UNSUPPORTED},
        {true, "\"attention_bias\":1", "vision_config.attention_bias", LM_ERR_FORMAT},
        {true, "\"spatial_merge_size\":0", "vision_config.spatial_merge_size", LM_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(json, sizeof json, bad[i].glm ? glm : qwen, bad[i].fields);
        err = (lm_error){0};
        lm_status st = bad[i].glm ? lm_glm4v_config_parse(json, strlen(json), "config.json", &g, &err)
                                  : lm_qwen35_config_parse(json, strlen(json), "config.json", &q, &err);
        CHECK_MSG(st == bad[i].code && strstr(err.message, bad[i].says),
                  "%s {%s}: status %d, '%s' (wanted %d naming '%s')", bad[i].glm ? "glm" : "qwen",
                  bad[i].fields, (int)st, err.message, (int)bad[i].code, bad[i].says);
    }
}

static void fixture_missing(void *arg) {
    test_failed(__FILE__, __LINE__, "cannot open the fixture %s", (const char *)arg);
}

int main(void) {
    static char dirs[3][1024];
    static vision_fixture fixtures[3];
    const char *names[3] = {"qwen35-dense", "glm46v-moe", "groups4-top4-hd16"};
    const char *data = getenv("LOOM_TEST_DATA");
    test_fixture_path(dirs[0], sizeof dirs[0], "models/qwen35-dense");
    test_fixture_path(dirs[1], sizeof dirs[1], "models/glm46v-moe");
    snprintf(dirs[2], sizeof dirs[2], "%s/glm-shapes/groups4-top4-hd16",
             data && *data ? data : "tests/data");
    for (int i = 0; i < 3; i++) {
        char label[128];
        if (!open_fixture(&fixtures[i], names[i], dirs[i])) {
            snprintf(label, sizeof label, "open %s", names[i]);
            test_run_with(label, fixture_missing, dirs[i]);
            close_fixture(&fixtures[i]);
            continue;
        }
        snprintf(label, sizeof label, "test_image_embeds[%s]", names[i]);
        test_run_with(label, test_image_embeds, &fixtures[i]);
        snprintf(label, sizeof label, "test_vision_info[%s]", names[i]);
        test_run_with(label, test_vision_info, &fixtures[i]);
        snprintf(label, sizeof label, "test_frames_are_separate[%s]", names[i]);
        test_run_with(label, test_frames_are_separate, &fixtures[i]);
        snprintf(label, sizeof label, "test_refusals[%s]", names[i]);
        test_run_with(label, test_refusals, &fixtures[i]);
        close_fixture(&fixtures[i]);
    }
    RUN_TEST(test_vision_config);
    RUN_TEST(test_text_only_and_untested_towers);
    return test_summary("test_vision");
}
