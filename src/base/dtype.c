#include "base/dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;        /* bytes per element; 0 for block formats */
    int64_t block;      /* elements per block (block formats) */
    size_t block_bytes; /* bytes per block (block formats) */
} dtype_info[LM_DTYPE_COUNT] = {
    [LM_DTYPE_F32] = {"F32", 4},      [LM_DTYPE_BF16] = {"BF16", 2},
    [LM_DTYPE_F16] = {"F16", 2},      [LM_DTYPE_F64] = {"F64", 8},
    [LM_DTYPE_I8] = {"I8", 1},        [LM_DTYPE_U8] = {"U8", 1},
    [LM_DTYPE_I16] = {"I16", 2},      [LM_DTYPE_U16] = {"U16", 2},
    [LM_DTYPE_I32] = {"I32", 4},      [LM_DTYPE_U32] = {"U32", 4},
    [LM_DTYPE_I64] = {"I64", 8},      [LM_DTYPE_U64] = {"U64", 8},
    [LM_DTYPE_BOOL] = {"BOOL", 1},    [LM_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [LM_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [LM_DTYPE_Q8_0] = {"Q8_0", 0, LM_Q8_BLOCK, LM_Q8_BLOCK_BYTES},
    /* ggml-common.h: block_q4_0 {d; qs[16]}, block_q4_1 {d, m; qs[16]},
     * block_q5_0 {d; qh[4]; qs[16]}, block_q5_1 {d, m; qh[4]; qs[16]},
     * block_q8_0 {d; qs[32]}, block_q4_K {d, dmin; scales[12]; qs[128]},
     * block_q5_K {d, dmin; scales[12]; qh[32]; qs[128]},
     * block_q6_K {ql[128]; qh[64]; scales[16]; d}. */
    [LM_DTYPE_GGML_Q4_0] = {"Q4_0", 0, 32, 18},
    [LM_DTYPE_GGML_Q4_1] = {"Q4_1", 0, 32, 20},
    [LM_DTYPE_GGML_Q5_0] = {"Q5_0", 0, 32, 22},
    [LM_DTYPE_GGML_Q5_1] = {"Q5_1", 0, 32, 24},
    [LM_DTYPE_GGML_Q8_0] = {"GGML_Q8_0", 0, 32, 34},
    [LM_DTYPE_GGML_Q4_K] = {"Q4_K", 0, 256, 144},
    [LM_DTYPE_GGML_Q5_K] = {"Q5_K", 0, 256, 176},
    [LM_DTYPE_GGML_Q6_K] = {"Q6_K", 0, 256, 210},
    /* planar within a row (dtype.h), but as many bytes as blocks of one
     * scale and 128 values */
    [LM_DTYPE_FP8_B128] = {"FP8_B128", 0, LM_FP8_BLOCK, LM_FP8_BLOCK + 4},
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
