/* loom logits --model DIR (--ids 1,2,3 | --prompt TEXT) [--image FILE]... --out FILE [--mtp]
 * Writes the logits of every prompt position as raw little-endian float32,
 * row-major [T, V]; with --mtp those of the MTP head, [T-1, V].  With
 * images, T counts the expanded prompt (every image row). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/image_prompt.h"
#include "cli/prompt_encoder.h"
#include "engine/sequence_runner.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: loom logits --model DIR (--ids 1,2,3 | --prompt TEXT) --out FILE [options]\n"
            "Writes the logits of every position of the prompt as raw little-endian\n"
            "float32, row-major [T, V] (T = number of ids, V = vocab size).\n\n"
            "  --model DIR     Hugging Face checkpoint folder (config.json + safetensors)\n"
            "  --ids LIST      comma-separated prompt token ids\n"
            "  --prompt TEXT   text, tokenized as is (no chat template)\n"
            "  --image FILE    an image (PNG, JPEG, WebP; repeat for several): --ids hold one\n"
            "                  placeholder id per image or every image row already (as the\n"
            "                  fixtures); --prompt gets the image markers in front unless it\n"
            "                  holds them.  T is then the expanded prompt's length\n"
            "  --max-image-pixels N  resize larger images down to N pixels (default: the\n"
            "                  checkpoint's preprocessor_config.json alone)\n"
            "  --out FILE      output file\n"
            "  --mtp           write the MTP head's logits instead, [T-1, V]: row t predicts\n"
            "                  token t+2 from the final hidden state at t and token t+1\n"
            "                  (position t, or the image prompt's position of row t;\n"
            "                  causal over rows 0..t of the head's own cache)\n"
            "  --threads N     CPU threads (default: all cores)\n"
            "  --backend NAME  cpu (default), ref (the plain reference kernels) or cuda\n"
            "  --device NAME   the same (vLLM's spelling)\n"
            "  --mmap          map the weights instead of reading them into memory\n"
            "  --mtp-norms M   MTP head norm weights: auto (detect), zero-centred, shifted\n");
}

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
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'}, {"ids", required_argument, 0, 'i'},
        {"out", required_argument, 0, 'o'},   {"threads", required_argument, 0, 't'},
        {"mmap", no_argument, 0, 'M'},        {"help", no_argument, 0, 'h'},
        {"mtp-norms", required_argument, 0, 'N'},
        {"mtp", no_argument, 0, 'P'},         {"backend", required_argument, 0, 'B'}, {"device", required_argument, 0, 'B'},
        {"prompt", required_argument, 0, 'p'}, {"image", required_argument, 0, 'G'},
        {"max-image-pixels", required_argument, 0, 'X'},
        {0, 0, 0, 0},
    };
    const char *model_dir = NULL, *ids_text = NULL, *out_path = NULL, *text = NULL;
    const char *image_paths[LOOM_MAX_IMAGES];
    int n_image_paths = 0;
    long threads = 0, pixel_cap = 0;
    lm_cli_model_spec spec = {.load = {.mode = LM_LOAD_READ, .mtp_norms = LM_MTP_NORMS_AUTO}};
    bool mtp = false;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'm': model_dir = optarg; break;
        case 'i': ids_text = optarg; break;
        case 'o': out_path = optarg; break;
        case 't': if (!lm_cli_parse_int("--threads", optarg, 1, 1024, &threads)) return 2; break;
        case 'M': spec.load.mode = LM_LOAD_MMAP; break;
        case 'N': if (!lm_cli_parse_mtp_norms(optarg, &spec.load.mtp_norms)) return 2; break;
        case 'B': if (!lm_cli_parse_backend(optarg, &spec.backend)) return 2; break;
        case 'P': mtp = true; break;
        case 'p': text = optarg; break;
        case 'G':
            if (n_image_paths == LOOM_MAX_IMAGES) {
                fprintf(stderr, "loom: at most %d images\n", LOOM_MAX_IMAGES);
                return 2;
            }
            image_paths[n_image_paths++] = optarg;
            break;
        case 'X': if (!lm_cli_parse_int("--max-image-pixels", optarg, 1024, 1L << 28, &pixel_cap)) return 2; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model_dir || !!ids_text + !!text != 1 || !out_path || optind != argc) {
        usage(stderr);
        return 2;
    }

    lm_error err = {0};
    lm_backend *backend;
    lm_model *model;
    spec.dir = model_dir;
    spec.threads = (int)threads;
    if (lm_cli_open_model(&spec, &backend, &model, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
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
    for (int i = 0; i < n_image_paths; i++)
        if (lm_cli_images_add(&images, image_paths[i], &err) != LM_OK) goto done;
    if (images.n > 0 && !lm_model_has_vision(model)) {
        lm_fail(&err, LM_ERR_INVALID, "this model has no vision tower: it takes no images");
        goto done;
    }
    if (ids_text && lm_cli_parse_ids(ids_text, info->vocab_size, &ids, &n, &err) != LM_OK) goto done;
    if (text && encode_prompt(model_dir, info, text, images.n, &ids, &n, &err) != LM_OK) goto done;
    if (images.n > 0) {
        if (lm_cli_image_prompt_build(model, &images, ids, n, 0, pixel_cap, &runner, &image_prompt, &err) != LM_OK)
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
    if (rc) fprintf(stderr, "loom: %s\n", err.message);
    lm_sequence_runner_free(&runner);
    lm_cli_image_prompt_free(&image_prompt);
    lm_cli_images_clear(&images);
    free(logits);
    free(hidden);
    free(ids);
    lm_cli_close_model(backend, model);
    return rc;
}
