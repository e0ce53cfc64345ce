/* Element types of tensors as checkpoints store them. */
#ifndef LOOM_BASE_DTYPE_H
#define LOOM_BASE_DTYPE_H

#include <stddef.h>

typedef enum {
    LM_DTYPE_F32,
    LM_DTYPE_BF16,
    LM_DTYPE_F16,
    LM_DTYPE_F64,
    LM_DTYPE_I8,
    LM_DTYPE_U8,
    LM_DTYPE_I16,
    LM_DTYPE_U16,
    LM_DTYPE_I32,
    LM_DTYPE_U32,
    LM_DTYPE_I64,
    LM_DTYPE_U64,
    LM_DTYPE_BOOL,
    LM_DTYPE_F8_E4M3,
    LM_DTYPE_F8_E5M2,
    LM_DTYPE_COUNT
} lm_dtype;

size_t lm_dtype_size(lm_dtype dtype);
const char *lm_dtype_name(lm_dtype dtype); /* safetensors spelling: "BF16", "F32", ... */
/* Returns LM_DTYPE_COUNT when the name is unknown. */
lm_dtype lm_dtype_from_name(const char *name);

#endif
