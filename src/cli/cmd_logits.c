/* loom logits --model DIR (--ids 1,2,3 | --prompt TEXT) [--image FILE]... --out FILE [--mtp]
 * Writes the logits of every prompt position as raw little-endian float32,
 * row-major [T, V]; with --mtp those of the MTP head, [T-1, V].  With
 * images, T counts the expanded prompt (every image row). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_options.h"
#include "cli/image_files.h"
#include "cli/image_prompt.h"
#include "cli/prompt_encoder.h"
#include "engine/sequence_runner.h"

static const char synopsis[] =
    "usage: loom logits [MODEL_DIR] (--ids 1,2,3 | --prompt TEXT) --out FILE [options]\n"
    "Writes the logits of every position of the prompt as raw little-endian\n"
    "float32, row-major [T, V] (T = number of ids, V = vocab size).  The model\n"
    "defaults to the bundled one.\n";

typedef struct {
    const char *ids_text, *text, *out_path;
    bool mtp;
    lm_cli_image_paths images;
} logits_args;

#define ARG(field) offsetof(logits_args, field)
static const lm_opt logits_opts[] = {
    {"--ids", LM_OPT_STRING, "LIST", ARG(ids_text), 0, 0, "comma-separated prompt token ids", NULL, NULL, NULL},
    {"--prompt|-p", LM_OPT_STRING, "TEXT", ARG(text), 0, 0, "text, tokenized as is (no chat template)", NULL, NULL,
     NULL},
    {"--image", LM_OPT_CUSTOM, "FILE", ARG(images), 0, 0,
     "an image (PNG, JPEG, WebP; repeat for several): --ids hold one\nplaceholder id per image or every image row "
     "already; --prompt gets the\nimage markers in front unless it holds them.  T is then the expanded\nprompt's "
     "length (--max-image-pixels default: the checkpoint's own)",
     lm_cli_parse_image_path, NULL, NULL},
    {"--out|-o", LM_OPT_STRING, "FILE", ARG(out_path), 0, 0, "output file", NULL, NULL, NULL},
    {"--mtp", LM_OPT_FLAG, NULL, ARG(mtp), 0, 0,
     "write the MTP head's logits instead, [T-1, V]: row t predicts token t+2\nfrom the final hidden state at t and "
     "token t+1",
     NULL, NULL, NULL},
};

/* --prompt: the text tokenized as is, with the model's image markers in
 * front when images come with it and the text holds none. */
static lm_status encode_prompt(const char *dir, const lm_model_info *info, const char *text,
                               int n_images, int32_t **ids, int *n, lm_error *err) {
    lm_prompt_encoder pe;
    lm_status st = lm_prompt_encoder_open(dir, false, &pe, err);
    if (st != LM_OK) return st;
    char marker[256] = "", *with_images = NULL;
    if (n_images > 0) {
        const char *start = lm_tokenizer_id_to_token(pe.tokenizer, info->vision.vision_start_token_id);
        const char *pad = lm_tokenizer_id_to_token(pe.tokenizer, info->vision.image_token_id);
        const char *end = lm_tokenizer_id_to_token(pe.tokenizer, info->vision.vision_end_token_id);
        if (!start || !pad || !end)
            st = lm_fail(err, LM_ERR_INVALID, "the tokenizer lacks the model's image tokens");
        else
            snprintf(marker, sizeof marker, "%s%s%s", start, pad, end);
        if (st == LM_OK && !(with_images = lm_cli_text_with_images(text, marker, n_images)))
            st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    if (st == LM_OK) st = lm_prompt_encoder_raw(&pe, with_images ? with_images : text, ids, n, err);
    free(with_images);
    lm_prompt_encoder_close(&pe);
    return st;
}

int cmd_logits_main(int argc, char **argv) {
    logits_args args = {0};
    lm_cli_engine_settings settings;
    lm_cli_spec cli;
    lm_cli_spec_init(&cli, "logits", synopsis, &settings, true);
    LM_CLI_SPEC_ADD(&cli, "Prompt and output", logits_opts, &args);
    int parsed = lm_cli_parse(&cli, argc, argv);
    if (parsed >= 0) return parsed;
    const char *ids_text = args.ids_text, *text = args.text, *out_path = args.out_path;
    bool mtp = args.mtp;
    int64_t pixel_cap = settings.engine.max_image_pixels > 0 ? settings.engine.max_image_pixels : 0;
    if (!!ids_text + !!text != 1) return lm_cli_usage_error("logits", "give one of --ids or --prompt");
    if (!out_path) return lm_cli_usage_error("logits", "--out FILE is required");
    lm_cli_model_spec spec = {.tensor_parallel_size = settings.engine.tensor_parallel_size,
                              .load = {.mode = settings.engine.mmap_weights ? LM_LOAD_MMAP : LM_LOAD_READ,
                                       .mtp_norms = (lm_mtp_norms)settings.engine.mtp_norms,
                                       .quantize_int8 = settings.engine.quantize &&
                                                        strcmp(settings.engine.quantize, "int8") == 0,
                                       .quantize_fp8 = settings.engine.quantize &&
                                                       strcmp(settings.engine.quantize, "fp8") == 0,
                                       .expert_parallel = settings.engine.expert_parallel},
                              .backend = settings.engine.backend,
                              .compute = settings.engine.compute_dtype};
    char model_buf[4096];
    const char *model_dir = NULL;
    lm_error derr = {0};
    if (lm_cli_model_dir(settings.engine.model_dir, NULL, model_buf, sizeof model_buf, &model_dir, &derr) != LM_OK) {
        fprintf(stderr, "loom logits: %s\n", derr.message);
        return 1;
    }
    long threads = settings.engine.threads;
    lm_error err = {0};
    lm_backend *backend;
    lm_model *model;
    spec.dir = model_dir;
    spec.threads = (int)threads;
    if (lm_cli_open_model(&spec, &backend, &model, &err) != LM_OK) {
        fprintf(stderr, "loom logits: %s\n", err.message);
        return 1;
    }
    const lm_model_info *info = lm_model_describe(model);
    int rc = 1;
    int32_t *ids = NULL;
    float *logits = NULL, *hidden = NULL;
    int n = 0;
    lm_sequence_runner runner = {0};
    lm_cli_images images = {0};
    lm_cli_image_prompt image_prompt = {0};
    FILE *out = NULL;
    size_t V = (size_t)info->vocab_size;
    for (int i = 0; i < args.images.n; i++)
        if (lm_cli_images_add(&images, args.images.paths[i], &err) != LM_OK) goto done;
    if (images.n > 0 && !lm_model_has_vision(model)) {
        lm_fail(&err, LM_ERR_INVALID, "this model has no vision tower: it takes no images");
        goto done;
    }
    if (ids_text && lm_cli_parse_ids(ids_text, info->vocab_size, &ids, &n, &err) != LM_OK) goto done;
    if (text && encode_prompt(model_dir, info, text, images.n, &ids, &n, &err) != LM_OK) goto done;
    if (images.n > 0) {
        if (lm_cli_image_prompt_build(model, &images, ids, n, 0, pixel_cap,
                                      settings.engine.max_image_decode_pixels, &runner, &image_prompt, &err) != LM_OK)
            goto done;
        free(ids);
        ids = image_prompt.ids; /* the expanded prompt */
        n = image_prompt.n;
        image_prompt.ids = NULL;
    }
    if (mtp && !lm_model_has_mtp_logits(model)) {
        lm_fail(&err, LM_ERR_UNSUPPORTED, "%s",
                info->mtp_status[0] ? info->mtp_status : "this model has no MTP head");
        goto done;
    }
    if (mtp && n < 2) {
        lm_fail(&err, LM_ERR_INVALID, "--mtp needs at least 2 ids");
        goto done;
    }
    logits = malloc(sizeof(float) * V * (size_t)n);
    hidden = mtp ? malloc(sizeof(float) * (size_t)info->hidden_size * (size_t)n) : NULL;
    if (!logits || (mtp && !hidden)) {
        lm_fail(&err, LM_ERR_NOMEM, "out of memory for %d x %zu logits", n, V);
        goto done;
    }
    if (images.n == 0 && lm_sequence_runner_init(&runner, model, n, &err) != LM_OK) goto done;
    if (lm_sequence_runner_feed_inputs(&runner, ids, image_prompt.positions, image_prompt.rows, n, true,
                                       logits, hidden, NULL, &err) != LM_OK)
        goto done;
    /* The head's rows 0..T-2: hidden state at t, token t+1. */
    if (mtp && lm_model_mtp_sequence_logits(model, hidden, ids + 1, image_prompt.positions, n - 1, logits,
                                            &err) != LM_OK)
        goto done;
    size_t rows = mtp ? (size_t)n - 1 : (size_t)n;
    out = fopen(out_path, "wb");
    if (!out) {
        lm_fail(&err, LM_ERR_IO, "cannot write %s", out_path);
        goto done;
    }
    if (fwrite(logits, sizeof(float), V * rows, out) != V * rows || fclose(out) != 0) {
        out = NULL;
        lm_fail(&err, LM_ERR_IO, "error writing %s", out_path);
        goto done;
    }
    out = NULL;
    rc = 0;
done:
    if (out) fclose(out);
    if (rc) fprintf(stderr, "loom logits: %s\n", err.message);
    lm_sequence_runner_free(&runner);
    lm_cli_image_prompt_free(&image_prompt);
    lm_cli_images_clear(&images);
    free(logits);
    free(hidden);
    free(ids);
    lm_cli_close_model(backend, model);
    return rc;
}
