#include "base/dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;        /* bytes per element; 0 for block formats */
    int64_t block;      /* elements per block (block formats) */
    size_t block_bytes; /* bytes per block (block formats) */
} dtype_info[LM_DTYPE_COUNT] = {
    [LM_DTYPE_F32] = {.name = "F32", .size = 4},      [LM_DTYPE_BF16] = {.name = "BF16", .size = 2},
    [LM_DTYPE_F16] = {.name = "F16", .size = 2},      [LM_DTYPE_F64] = {.name = "F64", .size = 8},
    [LM_DTYPE_I8] = {.name = "I8", .size = 1},        [LM_DTYPE_U8] = {.name = "U8", .size = 1},
    [LM_DTYPE_I16] = {.name = "I16", .size = 2},      [LM_DTYPE_U16] = {.name = "U16", .size = 2},
    [LM_DTYPE_I32] = {.name = "I32", .size = 4},      [LM_DTYPE_U32] = {.name = "U32", .size = 4},
    [LM_DTYPE_I64] = {.name = "I64", .size = 8},      [LM_DTYPE_U64] = {.name = "U64", .size = 8},
    [LM_DTYPE_BOOL] = {.name = "BOOL", .size = 1},    [LM_DTYPE_F8_E4M3] = {.name = "F8_E4M3", .size = 1},
    [LM_DTYPE_F8_E5M2] = {.name = "F8_E5M2", .size = 1},
    [LM_DTYPE_Q8_0] = {.name = "Q8_0", .block = LM_Q8_BLOCK, .block_bytes = LM_Q8_BLOCK_BYTES},
    /* ggml-common.h: block_q4_0 {d; qs[16]}, block_q4_1 {d, m; qs[16]},
     * block_q5_0 {d; qh[4]; qs[16]}, block_q5_1 {d, m; qh[4]; qs[16]},
     * block_q8_0 {d; qs[32]}, block_q4_K {d, dmin; scales[12]; qs[128]},
     * block_q5_K {d, dmin; scales[12]; qh[32]; qs[128]},
     * block_q6_K {ql[128]; qh[64]; scales[16]; d}. */
    [LM_DTYPE_GGML_Q4_0] = {.name = "Q4_0", .block = 32, .block_bytes = 18},
    [LM_DTYPE_GGML_Q4_1] = {.name = "Q4_1", .block = 32, .block_bytes = 20},
    [LM_DTYPE_GGML_Q5_0] = {.name = "Q5_0", .block = 32, .block_bytes = 22},
    [LM_DTYPE_GGML_Q5_1] = {.name = "Q5_1", .block = 32, .block_bytes = 24},
    [LM_DTYPE_GGML_Q8_0] = {.name = "GGML_Q8_0", .block = 32, .block_bytes = 34},
    [LM_DTYPE_GGML_Q4_K] = {.name = "Q4_K", .block = 256, .block_bytes = 144},
    [LM_DTYPE_GGML_Q5_K] = {.name = "Q5_K", .block = 256, .block_bytes = 176},
    [LM_DTYPE_GGML_Q6_K] = {.name = "Q6_K", .block = 256, .block_bytes = 210},
    /* planar within a row (dtype.h), but as many bytes as blocks of one
     * scale and 128 values */
    [LM_DTYPE_FP8_B128] = {.name = "FP8_B128", .block = LM_FP8_BLOCK, .block_bytes = LM_FP8_BLOCK + 4},
};

size_t lm_dtype_size(lm_dtype dtype) {
    return (unsigned)dtype < LM_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

int64_t lm_dtype_block_elems(lm_dtype dtype) {
    if ((unsigned)dtype >= LM_DTYPE_COUNT) return 1;
    return dtype_info[dtype].block ? dtype_info[dtype].block : 1;
}

size_t lm_dtype_block_bytes(lm_dtype dtype) {
    if ((unsigned)dtype >= LM_DTYPE_COUNT) return 0;
    return dtype_info[dtype].block ? dtype_info[dtype].block_bytes : dtype_info[dtype].size;
}

size_t lm_dtype_row_bytes(lm_dtype dtype, int64_t cols) {
    return (size_t)(cols / lm_dtype_block_elems(dtype)) * lm_dtype_block_bytes(dtype);
}

const char *lm_dtype_name(lm_dtype dtype) {
    return (unsigned)dtype < LM_DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

lm_dtype lm_dtype_from_name(const char *name) {
    for (int i = 0; i < LM_DTYPE_COUNT; i++) {
        if (dtype_info[i].block) continue; /* loom's and ggml's blocks: never in a safetensors file */
        if (strcmp(dtype_info[i].name, name) == 0) return (lm_dtype)i;
    }
    return LM_DTYPE_COUNT;
}
