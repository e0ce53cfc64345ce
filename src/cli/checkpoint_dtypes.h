/* The dtypes a checkpoint folder stores its tensors in, from the
 * safetensors headers alone ("BF16 x170, F32 x12"), or a GGUF file's
 * tensor types and architecture from its header, for `loom inspect` and
 * the startup summary. */
#ifndef LOOM_CLI_CHECKPOINT_DTYPES_H
#define LOOM_CLI_CHECKPOINT_DTYPES_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct {
    size_t tensors;
    int64_t parameters;
    uint64_t bytes;
    char dtypes[128]; /* "BF16 x170, F32 x12"; a GGUF's ggml types: "F32 x30, Q4_K x120, Q6_K x13" */
    char format[96];  /* "" for safetensors; "GGUF v3, architecture qwen35" */
} lm_checkpoint_summary;

lm_status lm_cli_checkpoint_summary(const char *dir, lm_checkpoint_summary *out, lm_error *err);

#endif
