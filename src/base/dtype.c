#include "base/dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_info[LM_DTYPE_COUNT] = {
    [LM_DTYPE_F32] = {"F32", 4},      [LM_DTYPE_BF16] = {"BF16", 2},
    [LM_DTYPE_F16] = {"F16", 2},      [LM_DTYPE_F64] = {"F64", 8},
    [LM_DTYPE_I8] = {"I8", 1},        [LM_DTYPE_U8] = {"U8", 1},
    [LM_DTYPE_I16] = {"I16", 2},      [LM_DTYPE_U16] = {"U16", 2},
    [LM_DTYPE_I32] = {"I32", 4},      [LM_DTYPE_U32] = {"U32", 4},
    [LM_DTYPE_I64] = {"I64", 8},      [LM_DTYPE_U64] = {"U64", 8},
    [LM_DTYPE_BOOL] = {"BOOL", 1},    [LM_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [LM_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [LM_DTYPE_Q8_0] = {"Q8_0", 0},
};

size_t lm_dtype_size(lm_dtype dtype) {
    return (unsigned)dtype < LM_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

size_t lm_dtype_row_bytes(lm_dtype dtype, int64_t cols) {
    if (dtype == LM_DTYPE_Q8_0) return (size_t)(cols / LM_Q8_BLOCK) * LM_Q8_BLOCK_BYTES;
    return (size_t)cols * lm_dtype_size(dtype);
}

const char *lm_dtype_name(lm_dtype dtype) {
    return (unsigned)dtype < LM_DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

lm_dtype lm_dtype_from_name(const char *name) {
    for (int i = 0; i < LM_DTYPE_COUNT; i++) {
        if (i == LM_DTYPE_Q8_0) continue;
        if (strcmp(dtype_info[i].name, name) == 0) return (lm_dtype)i;
    }
    return LM_DTYPE_COUNT;
}
