/* Element types of tensors as checkpoints store them. */
#ifndef LOOM_BASE_DTYPE_H
#define LOOM_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

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
    /* loom's own weight format, never read from a file: each row of a
     * matrix is cols / LM_Q8_BLOCK blocks of LM_Q8_BLOCK_BYTES bytes, a
     * block being one bf16 scale s (little-endian) then LM_Q8_BLOCK int8
     * values q, and the weights are s * q.  Made at load from float weights
     * (--quantize int8) or FP8 checkpoints (models/weights.c). */
    LM_DTYPE_Q8_0,
    LM_DTYPE_COUNT
} lm_dtype;

#define LM_Q8_BLOCK 32
#define LM_Q8_BLOCK_BYTES (2 + LM_Q8_BLOCK)

/* Bytes per element; 0 for the block format LM_DTYPE_Q8_0 (see
 * lm_dtype_row_bytes). */
size_t lm_dtype_size(lm_dtype dtype);
/* Bytes of one row of `cols` elements (Q8_0: cols a multiple of LM_Q8_BLOCK). */
size_t lm_dtype_row_bytes(lm_dtype dtype, int64_t cols);
const char *lm_dtype_name(lm_dtype dtype); /* safetensors spelling: "BF16", "F32", ...; "Q8_0" */
/* The dtypes a safetensors file may name; LM_DTYPE_COUNT when the name is
 * unknown (loom's own Q8_0 included: no file holds it). */
lm_dtype lm_dtype_from_name(const char *name);

#endif
