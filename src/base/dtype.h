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
    /* The block formats of ggml (llama.cpp's GGUF files), byte for byte as
     * ggml-common.h lays them out: a row of cols elements is cols /
     * lm_dtype_block_elems blocks of lm_dtype_block_bytes bytes each, scales
     * float16.  Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 hold 32 elements a block, the
     * K-quants 256.  GGML_Q8_0 differs from loom's Q8_0 above only in its
     * scale (float16, not bf16), so neither is read as the other. */
    LM_DTYPE_GGML_Q4_0,
    LM_DTYPE_GGML_Q4_1,
    LM_DTYPE_GGML_Q5_0,
    LM_DTYPE_GGML_Q5_1,
    LM_DTYPE_GGML_Q8_0,
    LM_DTYPE_GGML_Q4_K,
    LM_DTYPE_GGML_Q5_K,
    LM_DTYPE_GGML_Q6_K,
    /* loom's FP8 weight format, never read from a file: FP8 E4M3 values
     * with one float32 scale per 128 consecutive values of a row.  A row
     * of cols (a multiple of LM_FP8_BLOCK) weights is its cols E4M3 bytes,
     * then its cols / LM_FP8_BLOCK scales (float32, little-endian): the
     * bytes of a row are contiguous, so GPU tiles of weights load as one
     * strided matrix, and the scales ride at the row's end.  Weight c is
     * e4m3(row[c]) * scale[c / 128].  Made at load from block-scaled FP8
     * checkpoints (each of their 128x128 blocks gives its scale to its
     * 128 rows), bytes kept as they are. */
    LM_DTYPE_FP8_B128,
    LM_DTYPE_COUNT
} lm_dtype;

#define LM_FP8_BLOCK 128
#define LM_Q8_BLOCK 32
#define LM_Q8_BLOCK_BYTES (2 + LM_Q8_BLOCK)

/* Bytes per element; 0 for the block formats (Q8_0 and the GGML ones: see
 * lm_dtype_row_bytes). */
size_t lm_dtype_size(lm_dtype dtype);
/* Elements and bytes of one block: 1 and lm_dtype_size for plain types. */
int64_t lm_dtype_block_elems(lm_dtype dtype);
size_t lm_dtype_block_bytes(lm_dtype dtype);
static inline int lm_dtype_is_block(lm_dtype dtype) { return lm_dtype_block_elems(dtype) > 1; }
/* Bytes of one row of `cols` elements (block formats: cols a multiple of
 * lm_dtype_block_elems). */
size_t lm_dtype_row_bytes(lm_dtype dtype, int64_t cols);
const char *lm_dtype_name(lm_dtype dtype); /* safetensors spelling: "BF16", "F32", ...; "Q8_0" */
/* The dtypes a safetensors file may name; LM_DTYPE_COUNT when the name is
 * unknown (loom's own Q8_0 included: no file holds it). */
lm_dtype lm_dtype_from_name(const char *name);

#endif
