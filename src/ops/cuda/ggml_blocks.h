/* ggml's block formats (base/dtype.h, LM_DTYPE_GGML_*) read on the device:
 * one weight as float32 (the scalar readers: embed, add_weighted_rows, the
 * experts' row path, the plain matmul kernel, the rows made bf16 for
 * cuBLASLt), with the operations, in the order, of base/ggml_quant.c's
 * dequantize_* (each product and sum rounded on its own: no contraction
 * into fma), so a weight has exactly the bits the host backends and gguf-py
 * give it.  Private to src/ops/cuda. */
#ifndef LOOM_OPS_CUDA_GGML_BLOCKS_H
#define LOOM_OPS_CUDA_GGML_BLOCKS_H

#include <cuda_fp16.h>
#include <stdint.h>

#include "base/dtype.h"

__device__ __forceinline__ static bool lm_ggml_dtype(int dtype) {
    return dtype >= LM_DTYPE_GGML_Q4_0 && dtype <= LM_DTYPE_GGML_Q6_K;
}

/* The float16 at p (2-byte aligned, little-endian) as float32. */
__device__ __forceinline__ static float lm_ggml_f16(const uint8_t *p) {
    return __half2float(__ushort_as_half(*(const unsigned short *)p));
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12
 * scale bytes (ggml's get_scale_min_k4, as base/ggml_quant.h). */
__device__ __forceinline__ static void lm_ggml_k4_scale_min_dev(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Weight i (row · cols + column: cols is a multiple of the block, so a
 * block never straddles rows) of a matrix of ggml blocks. */
__device__ static float lm_ggml_weight_at_dev(const void *w, int dtype, int64_t i) {
    const uint8_t *base = (const uint8_t *)w;
    switch (dtype) {
    case LM_DTYPE_GGML_Q4_0: {
        const uint8_t *b = base + (i / 32) * 18;
        int j = (int)(i % 32), q = j < 16 ? b[2 + j] & 0xF : b[2 + j - 16] >> 4;
        return __fmul_rn((float)(q - 8), lm_ggml_f16(b));
    }
    case LM_DTYPE_GGML_Q4_1: {
        const uint8_t *b = base + (i / 32) * 20;
        int j = (int)(i % 32), q = j < 16 ? b[4 + j] & 0xF : b[4 + j - 16] >> 4;
        return __fadd_rn(__fmul_rn((float)q, lm_ggml_f16(b)), lm_ggml_f16(b + 2));
    }
    case LM_DTYPE_GGML_Q5_0:
    case LM_DTYPE_GGML_Q5_1: {
        bool affine = dtype == LM_DTYPE_GGML_Q5_1;
        const uint8_t *b = base + (i / 32) * (affine ? 24 : 22);
        const uint8_t *qh = b + (affine ? 4 : 2), *qs = qh + 4;
        int j = (int)(i % 32);
        int bit = (qh[j / 8] >> (j % 8)) & 1; /* bit j of the little-endian qh */
        int q = (j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4) | bit << 4;
        if (affine) return __fadd_rn(__fmul_rn((float)q, lm_ggml_f16(b)), lm_ggml_f16(b + 2));
        return __fmul_rn((float)(q - 16), lm_ggml_f16(b));
    }
    case LM_DTYPE_GGML_Q8_0: {
        const uint8_t *b = base + (i / 32) * 34;
        return __fmul_rn((float)(int8_t)b[2 + i % 32], lm_ggml_f16(b));
    }
    case LM_DTYPE_GGML_Q4_K:
    case LM_DTYPE_GGML_Q5_K: {
        bool five = dtype == LM_DTYPE_GGML_Q5_K;
        const uint8_t *b = base + (i / 256) * (five ? 176 : 144);
        int j = (int)(i % 256), sub = j / 32, l = j % 32, sc, m;
        const uint8_t *qs = b + (five ? 48 : 16) + 32 * (sub / 2);
        int q = sub & 1 ? qs[l] >> 4 : qs[l] & 0xF;
        if (five) q += (b[16 + l] >> sub) & 1 ? 16 : 0;
        lm_ggml_k4_scale_min_dev(b + 4, sub, &sc, &m);
        float d1 = __fmul_rn(lm_ggml_f16(b), (float)sc), m1 = __fmul_rn(lm_ggml_f16(b + 2), (float)m);
        return __fsub_rn(__fmul_rn(d1, (float)q), m1);
    }
    case LM_DTYPE_GGML_Q6_K: {
        const uint8_t *b = base + (i / 256) * 210;
        int j = (int)(i % 256), half = j / 128, k = (j % 128) / 32, l = j % 32;
        int lo = b[64 * half + l + 32 * (k & 1)], hi = b[128 + 32 * half + l];
        int q = ((k >= 2 ? lo >> 4 : lo & 0xF) | ((hi >> (2 * k)) & 3) << 4) - 32;
        float scale = (float)(int8_t)b[192 + 8 * half + l / 16 + 2 * k];
        return __fmul_rn(__fmul_rn(lm_ggml_f16(b + 208), scale), (float)q);
    }
    default: return __int_as_float(0x7fc00000); /* not a ggml block: NaN */
    }
}

#endif
