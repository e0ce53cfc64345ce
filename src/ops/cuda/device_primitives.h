/* Device-side building blocks the tensor-core and chunked kernels share:
 * bf16 packing, the m16n8k16 bf16 product, and the asynchronous copies
 * global -> shared (sm_80+).  Private to src/ops/cuda. */
#ifndef LOOM_OPS_CUDA_DEVICE_PRIMITIVES_H
#define LOOM_OPS_CUDA_DEVICE_PRIMITIVES_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "base/dtype.h"
#include "ops/cuda/ggml_blocks.h"

/* Element i (row · cols + column) of a weight matrix of `dtype` as float32:
 * bf16, f16, float32, or Q8_0 (base/dtype.h: cols a multiple of 32, so a
 * block never straddles rows; the scale times the int8 value is exact in
 * float32, 8 + 7 significant bits), or a ggml block format (ggml_blocks.h).
 * The scalar kernels' reader. */
__device__ __forceinline__ static float lm_weight_at(const void *w, int dtype, int64_t i) {
    if (dtype == LM_DTYPE_BF16) return __uint_as_float((uint32_t)((const uint16_t *)w)[i] << 16);
    if (dtype == LM_DTYPE_F16) return __half2float(((const __half *)w)[i]);
    if (dtype == LM_DTYPE_Q8_0) {
        const uint8_t *b = (const uint8_t *)w + (i / LM_Q8_BLOCK) * LM_Q8_BLOCK_BYTES;
        float scale = __uint_as_float((uint32_t)(b[0] | b[1] << 8) << 16);
        return scale * (float)(int8_t)b[2 + i % LM_Q8_BLOCK];
    }
    if (lm_ggml_dtype(dtype)) return lm_ggml_weight_at_dev(w, dtype, i);
    return ((const float *)w)[i];
}

/* An E4M3 byte as float32, exactly: its sign to bit 31 and its other 7
 * bits to bits 20..26 read as the value times 2^-120 (the exponent biases
 * are 7 and 127; subnormals map to subnormals), times 2^120.  NaN codes
 * never reach a kernel (the loader refuses them). */
__device__ __forceinline__ static float lm_e4m3_value(uint32_t b) {
    return __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7Fu) << 20)) * 0x1p120f;
}

/* The same as lm_weight_at for a matrix of `cols` columns, FP8_B128
 * included (its scales sit at each row's end: the row is needed). */
__device__ __forceinline__ static float lm_weight_in(const void *w, int dtype, int64_t cols, int64_t i) {
    if (dtype == LM_DTYPE_FP8_B128) {
        int64_t r = i / cols, c = i % cols;
        const uint8_t *row = (const uint8_t *)w + r * (cols + cols / LM_FP8_BLOCK * 4);
        return lm_e4m3_value(row[c]) * ((const float *)(row + cols))[c / LM_FP8_BLOCK];
    }
    return lm_weight_at(w, dtype, i);
}

/* SiLU as every kernel computes it (the gated norm, the conv's output):
 * one expression, so kernels that must agree bit for bit do. */
__device__ __forceinline__ static float lm_silu(float z) { return z / (1.0f + expf(-z)); }

/* f(x[j], j) for every j < n a block's thread owns (j = threadIdx.x,
 * + STRIDE, ...; STRIDE = the block's threads), in that order.  16-byte
 * loads when the row allows, LM_ROW_LOADS of them in flight a thread: a
 * 1 MB logits row read by one block is bound by how many loads wait at
 * once (one a thread: about 30 us on an H200).  Issuing loads early does
 * not change the order in which f sees the elements.  Plain loads, not the
 * read-only path: the sampler edits a row before it reads it. */
#define LM_ROW_LOADS 8
template <int STRIDE, typename F> __device__ static void lm_for_each_in_row(const float *x, int n, F f) {
    if (n % 4 == 0 && ((uintptr_t)x & 15) == 0) {
        const float4 *x4 = (const float4 *)x;
        const int n4 = n / 4;
        int j = threadIdx.x;
        for (; j + (LM_ROW_LOADS - 1) * STRIDE < n4; j += LM_ROW_LOADS * STRIDE) {
            float4 v[LM_ROW_LOADS];
#pragma unroll
            for (int u = 0; u < LM_ROW_LOADS; u++) v[u] = x4[j + u * STRIDE];
#pragma unroll
            for (int u = 0; u < LM_ROW_LOADS; u++) {
                int at = 4 * (j + u * STRIDE);
                f(v[u].x, at), f(v[u].y, at + 1), f(v[u].z, at + 2), f(v[u].w, at + 3);
            }
        }
        for (; j < n4; j += STRIDE) {
            float4 v = x4[j];
            f(v.x, 4 * j), f(v.y, 4 * j + 1), f(v.z, 4 * j + 2), f(v.w, 4 * j + 3);
        }
    } else {
        for (int j = threadIdx.x; j < n; j += STRIDE) f(x[j], j);
    }
}

/* The argmax order: v at index i beats bv at bi when it is larger, or equal
 * at a lower index; NaN never beats a number and every number beats NaN
 * (the start value).  A total order, so the winner does not depend on the
 * order of comparisons. */
__device__ __forceinline__ static bool lm_argmax_better(float v, int i, float bv, int bi) {
    if (isnan(v)) return false;
    if (isnan(bv)) return true;
    return v > bv || (v == bv && i < bi);
}

/* Q8_0 read in half-blocks of 16 weights (the vector kernels' unit: a
 * 4096-wide row has 256, one a lane for a warp's slice): half-block h of a
 * row at `row` (its first byte; rows and blocks start on 2-byte
 * boundaries, 34-byte blocks) as its block's scale and 8 2-byte loads. */
#define LM_Q8_HALF (LM_Q8_BLOCK / 2)
__device__ __forceinline__ static float lm_q8_half_load(const uint8_t *row, int64_t h, uint32_t (&q)[LM_Q8_HALF / 2]) {
    const unsigned short *blk = (const unsigned short *)(row + (h / 2) * LM_Q8_BLOCK_BYTES);
#pragma unroll
    for (int i = 0; i < LM_Q8_HALF / 2; i++)
        q[i] = __ldg(blk + 1 + (h % 2) * (LM_Q8_HALF / 2) + i);
    return __uint_as_float((uint32_t)__ldg(blk) << 16);
}

/* Byte k (0-3) of `flipped` (int8 values with every byte's top bit
 * flipped: a word ^ 0x80808080, two bytes ^ 0x8080) as the float of its
 * int8 value, exactly (float)(int8_t)byte: 2^23 + (q + 128) made in the bits, less 2^23 + 128
 * (both exact in float32).  A byte permute and an add, full-rate
 * instructions, where the conversion instruction runs at a quarter of
 * the rate. */
__device__ __forceinline__ static float lm_s8_to_float(uint32_t flipped, int k) {
    return __uint_as_float(__byte_perm(flipped, 0x4B000000u, 0x7650 + k)) - 8388736.0f;
}

/* Σ q_i·x_i over a half-block's 16 columns, in column order from 0 (q:
 * lm_q8_half_load's 8 two-byte words; xt: its 16 activations, 16-byte
 * aligned). */
__device__ __forceinline__ static float lm_q8_half_dot(const uint32_t (&q)[LM_Q8_HALF / 2], const float *xt) {
    const float4 *x4 = (const float4 *)xt;
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < LM_Q8_HALF / 4; i++) {
        float4 a = x4[i];
        uint32_t lo = q[2 * i] ^ 0x8080u, hi = q[2 * i + 1] ^ 0x8080u;
        sum = __fmaf_rn(lm_s8_to_float(lo, 0), a.x, sum);
        sum = __fmaf_rn(lm_s8_to_float(lo, 1), a.y, sum);
        sum = __fmaf_rn(lm_s8_to_float(hi, 0), a.z, sum);
        sum = __fmaf_rn(lm_s8_to_float(hi, 1), a.w, sum);
    }
    return sum;
}

/* acc + the dot product of 8 bf16 weights (one 16-byte load, low half of
 * each word first) with 8 floats (a then b), each product an explicit fma
 * in column order: the float32 products' batch-invariant step. */
__device__ __forceinline__ static float lm_dot8_bf16(uint4 p, float4 a, float4 b, float acc) {
    acc = __fmaf_rn(__uint_as_float(p.x << 16), a.x, acc);
    acc = __fmaf_rn(__uint_as_float(p.x & 0xffff0000u), a.y, acc);
    acc = __fmaf_rn(__uint_as_float(p.y << 16), a.z, acc);
    acc = __fmaf_rn(__uint_as_float(p.y & 0xffff0000u), a.w, acc);
    acc = __fmaf_rn(__uint_as_float(p.z << 16), b.x, acc);
    acc = __fmaf_rn(__uint_as_float(p.z & 0xffff0000u), b.y, acc);
    acc = __fmaf_rn(__uint_as_float(p.w << 16), b.z, acc);
    return __fmaf_rn(__uint_as_float(p.w & 0xffff0000u), b.w, acc);
}

/* Two floats rounded to bf16 in one register, lo in the low half (the
 * lower index of an mma operand pair). */
__device__ __forceinline__ static uint32_t lm_pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* A KV pool's elements (ops.h: lm_kv_layer.dtype): float32 or bf16.  A
 * bf16 pool holds what kv_write rounded to nearest even, so reading it
 * gives exactly the floats a float32 pool of the rounded values gives. */
__device__ __forceinline__ static float lm_kv_float(float x) { return x; }
__device__ __forceinline__ static float lm_kv_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ static void lm_kv_store(float *p, float x) { *p = x; }
__device__ __forceinline__ static void lm_kv_store(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }
/* 8 consecutive pool elements as floats: two 16-byte loads of float32, one
 * of bf16 (p 16-byte aligned). */
__device__ __forceinline__ static void lm_kv_load8(const float *p, float x[8]) {
    float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
__device__ __forceinline__ static void lm_kv_load8(const __nv_bfloat16 *p, float x[8]) {
    uint4 u = *(const uint4 *)p;
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        x[2 * i] = __uint_as_float(w[i] << 16); /* the lower index in the low half */
        x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

/* c += a·b: a 16x16 (row) by 16x8 (column) bf16 product, f32 accumulators
 * (the PTX ISA's fragment layouts for mma.m16n8k16). */
__device__ __forceinline__ static void lm_mma_bf16_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 4 or 16 bytes global -> shared without passing through registers; with
 * valid false nothing is read and the bytes are zeroed (src must still be
 * a valid address).  The 16-byte form needs both addresses 16-byte aligned. */
__device__ __forceinline__ static void lm_copy_async4(void *dst, const void *src, bool valid) {
    unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ static void lm_copy_async16(void *dst, const void *src, bool valid) {
    unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(valid ? 16 : 0));
}
/* Four 8x8 matrices of 16-bit elements from shared memory, one register
 * each (ldmatrix.x4): lanes 8i..8i+7 give the addresses of matrix i's 8
 * rows (16 bytes each); lane l receives row l / 4, elements 2(l % 4) and
 * 2(l % 4) + 1 of every matrix, the mma fragments' layout. */
__device__ __forceinline__ static void lm_load_matrix_x4(uint32_t r[4], const void *row) {
    unsigned at = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at)
                 : "memory");
}

/* Closes this thread's group of copies. */
__device__ __forceinline__ static void lm_copy_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
/* Waits until at most one group (the latest) of this thread's copies is in
 * flight; a __syncthreads() after it makes every thread's landed copies
 * visible. */
__device__ __forceinline__ static void lm_copy_async_wait_all_but_one(void) {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}
/* Waits until at most PENDING groups (the latest) are in flight. */
template <int PENDING>
__device__ __forceinline__ static void lm_copy_async_wait_pending(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

#endif
