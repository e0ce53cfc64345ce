/* loom inspect [--model DIR] (default: the bundled model): what a checkpoint folder holds and what loom
 * makes of it (architecture, shapes, dtypes, parameters, missing or unused
 * tensors). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "io/checkpoint.h"

static void usage(FILE *f) {
    fprintf(f, "usage: loom inspect [--model DIR] [--mmap] [--mtp-norms auto|zero-centred|shifted]\n"
               "                    [--backend|--device cpu|ref|cuda]\n"
               "Describes a Hugging Face checkpoint folder: architecture, shapes, dtypes,\n"
               "parameter count, and which tensors are missing or unused.\n");
}

int cmd_inspect_main(int argc, char **argv) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'}, {"mmap", no_argument, 0, 'M'},
        {"mtp-norms", required_argument, 0, 'N'}, {"backend", required_argument, 0, 'B'}, {"device", required_argument, 0, 'B'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0},
    };
    const char *dir = NULL;
    lm_cli_model_spec spec = {.load = {.mode = LM_LOAD_READ, .mtp_norms = LM_MTP_NORMS_AUTO},
                              .threads = 1};
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'm': dir = optarg; break;
        case 'M': spec.load.mode = LM_LOAD_MMAP; break;
        case 'N': if (!lm_cli_parse_mtp_norms(optarg, &spec.load.mtp_norms)) return 2; break;
        case 'B': if (!lm_cli_parse_backend(optarg, &spec.backend)) return 2; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    lm_error err = {0};
    char model_buf[4096];
    if (lm_cli_model_dir(dir, model_buf, sizeof model_buf, &dir, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
        return 1;
    }
    lm_checkpoint *ck = NULL;
    if (lm_checkpoint_open(dir, spec.load.mode, &ck, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
        return 1;
    }
    size_t n = lm_checkpoint_count(ck);
    size_t by_dtype[LM_DTYPE_COUNT] = {0};
    int64_t params = 0;
    for (size_t i = 0; i < n; i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        by_dtype[t->dtype]++;
        params += t->n_elements;
    }
    printf("checkpoint: %zu tensors, %lld parameters, %.1f MB\n", n, (long long)params,
           (double)lm_checkpoint_total_bytes(ck) / 1e6);
    printf("  dtypes:");
    for (int d = 0; d < LM_DTYPE_COUNT; d++)
        if (by_dtype[d]) printf(" %s x%zu", lm_dtype_name((lm_dtype)d), by_dtype[d]);
    printf("\n");

    lm_checkpoint_close(ck);
    lm_backend *backend;
    lm_model *model;
    spec.dir = dir;
    if (lm_cli_open_model(&spec, &backend, &model, &err) != LM_OK) {
        printf("text model: cannot be built: %s\n", err.message);
        return 1;
    }
    const lm_model_info *info = lm_model_describe(model);
    printf("family: %s\n", info->family);
    lm_model_print_description(model, stdout);
    printf("parameters: %lld in the text model, %lld active per token (%.1f%%); a decode step "
           "reads %.1f MB of weights\n",
           (long long)info->n_parameters, (long long)info->n_active_parameters,
           info->n_parameters ? 100.0 * (double)info->n_active_parameters / (double)info->n_parameters
                              : 0.0,
           (double)info->decode_bytes_per_token / 1e6);
    const lm_vision_info *v = &info->vision;
    if (v->present) {
        const lm_image_processor *p = &v->processor;
        printf("vision tower: %d blocks, hidden %d, %d heads, patch %d (temporal %d), merge %d x %d, "
               "%lld parameters; images resized to %lld..%lld pixels (%s smart resize), one "
               "placeholder token %d per %d patches between %d and %d\n",
               v->depth, v->hidden_size, v->n_heads, p->patch_size, p->temporal_patch_size,
               p->merge_size, p->merge_size, (long long)v->n_parameters, (long long)p->min_pixels,
               (long long)p->max_pixels, p->rule == LM_SMART_RESIZE_GLM4V ? "GLM-4V" : "Qwen2-VL",
               v->image_token_id, p->merge_size * p->merge_size, v->vision_start_token_id,
               v->vision_end_token_id);
    } else {
        printf("vision tower: none\n");
    }
    lm_cli_close_model(backend, model);
    return 0;
}
