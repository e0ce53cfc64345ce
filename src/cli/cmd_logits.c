/* loom logits --model DIR --ids 1,2,3 --out FILE [--mtp]
 * Writes the logits of every prompt position as raw little-endian float32,
 * row-major [T, V]; with --mtp those of the MTP head, [T-1, V]. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "engine/sequence_runner.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: loom logits --model DIR --ids 1,2,3 --out FILE [options]\n"
            "Writes the logits of every position of the prompt as raw little-endian\n"
            "float32, row-major [T, V] (T = number of ids, V = vocab size).\n\n"
            "  --model DIR     Hugging Face checkpoint folder (config.json + safetensors)\n"
            "  --ids LIST      comma-separated prompt token ids\n"
            "  --out FILE      output file\n"
            "  --mtp           write the MTP head's logits instead, [T-1, V]: row t predicts\n"
            "                  token t+2 from the final hidden state at t and token t+1\n"
            "                  (position t, causal over rows 0..t of the head's own cache)\n"
            "  --threads N     CPU threads (default: all cores)\n"
            "  --backend NAME  cpu (default) or ref (the plain reference kernels)\n"
            "  --mmap          map the weights instead of reading them into memory\n"
            "  --mtp-norms M   MTP head norm weights: auto (detect), zero-centred, shifted\n");
}

int cmd_logits_main(int argc, char **argv) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'}, {"ids", required_argument, 0, 'i'},
        {"out", required_argument, 0, 'o'},   {"threads", required_argument, 0, 't'},
        {"mmap", no_argument, 0, 'M'},        {"help", no_argument, 0, 'h'},
        {"mtp-norms", required_argument, 0, 'N'},
        {"mtp", no_argument, 0, 'P'},         {"backend", required_argument, 0, 'B'},
        {0, 0, 0, 0},
    };
    const char *model_dir = NULL, *ids_text = NULL, *out_path = NULL;
    long threads = 0;
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
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model_dir || !ids_text || !out_path || optind != argc) {
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
    FILE *out = NULL;
    size_t V = (size_t)info->vocab_size;
    if (lm_cli_parse_ids(ids_text, info->vocab_size, &ids, &n, &err) != LM_OK) goto done;
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
    if (lm_sequence_runner_init(&runner, model, n, &err) != LM_OK) goto done;
    if (lm_sequence_runner_feed(&runner, ids, n, true, logits, hidden, NULL, &err) != LM_OK)
        goto done;
    /* The head's rows 0..T-2: hidden state at t, token t+1. */
    if (mtp && lm_model_mtp_sequence_logits(model, hidden, ids + 1, n - 1, logits, &err) != LM_OK)
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
    free(logits);
    free(hidden);
    free(ids);
    lm_cli_close_model(backend, model);
    return rc;
}
