/* loom inspect [--model DIR] (default: the bundled model): what a checkpoint folder holds and what loom
 * makes of it (architecture, shapes, dtypes, parameters, missing or unused
 * tensors). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/checkpoint_dtypes.h"
#include "cli/default_model.h"
#include "cli/engine_options.h"

static const char synopsis[] =
    "usage: loom inspect [MODEL_DIR] [options]\n"
    "Describes a Hugging Face checkpoint folder or a GGUF file (default: the\n"
    "bundled model):\n"
    "architecture, shapes, dtypes, parameter count, and which tensors are missing\n"
    "or unused.\n";

int cmd_inspect_main(int argc, char **argv) {
    lm_cli_engine_settings settings;
    lm_cli_spec cli;
    lm_cli_spec_init(&cli, "inspect", synopsis, &settings, true);
    int parsed = lm_cli_parse(&cli, argc, argv);
    if (parsed >= 0) return parsed;
    lm_cli_model_spec spec = {.tensor_parallel_size = settings.engine.tensor_parallel_size,
                              .load = {.mode = settings.engine.mmap_weights ? LM_LOAD_MMAP : LM_LOAD_READ,
                                       .mtp_norms = (lm_mtp_norms)settings.engine.mtp_norms,
                                       .quantize_int8 = settings.engine.quantize &&
                                                        strcmp(settings.engine.quantize, "int8") == 0,
                                       .quantize_fp8 = settings.engine.quantize &&
                                                       strcmp(settings.engine.quantize, "fp8") == 0,
                                       .expert_parallel = settings.engine.expert_parallel},
                              .backend = settings.engine.backend,
                              .threads = 1};
    lm_error err = {0};
    char model_buf[4096];
    const char *dir = NULL;
    if (lm_cli_model_dir(settings.engine.model_dir, NULL, model_buf, sizeof model_buf, &dir, &err) != LM_OK) {
        fprintf(stderr, "loom inspect: %s\n", err.message);
        return 1;
    }
    lm_checkpoint_summary ck;
    if (lm_cli_checkpoint_summary(dir, &ck, &err) != LM_OK) {
        fprintf(stderr, "loom inspect: %s\n", err.message);
        return 1;
    }
    printf("checkpoint: %s%s%zu tensors, %lld parameters, %.1f MB\n", ck.format, ck.format[0] ? "; " : "",
           ck.tensors, (long long)ck.parameters, (double)ck.bytes / 1e6);
    printf("  dtypes: %s\n", ck.dtypes);

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
    printf("parameters%s: %lld in the text model, %lld active per token (%.1f%%); a decode step "
           "reads %.1f MB of weights\n",
           settings.engine.tensor_parallel_size > 1 ? " (rank 0's share)" : "",
           (long long)info->n_parameters, (long long)info->n_active_parameters,
           info->n_parameters ? 100.0 * (double)info->n_active_parameters / (double)info->n_parameters
                              : 0.0,
           (double)info->decode_bytes_per_token / 1e6);
    if (info->weights_made[0]) printf("%s\n", info->weights_made); /* int8, or FP8 made bf16 */
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
