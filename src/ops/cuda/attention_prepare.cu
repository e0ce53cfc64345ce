// attention_prepare (ops.h): gated full attention's inputs in one launch.
// Block (head, token) over the n_heads query heads then the n_kv_heads key
// heads, lm_cuda_row_threads(head_dim) threads: the head's row rms-normed
// as rmsnorm_kernel does it (the same sums, threads and expression), then
// rotated as rope_kernel rotates (rope.h), in shared memory; a query head
// writes q and copies its gate, a key head writes k back and its k and v
// rows into the pool as kv_write does.  So the bits are the parts' (the op
// test checks it), in one launch instead of seven.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/block_reduce.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/rope.h"

template <typename T>
__global__ static void attention_prepare_kernel(float *q, float *gates, float *k, const float *v, const float *qg,
                                                const float *q_norm, const float *k_norm, const int32_t *positions,
                                                const int32_t *slots, T *k_pool, T *v_pool, int n_heads,
                                                int n_kv_heads, int D, float eps, const lm_rope_chunk c) {
    extern __shared__ float row[]; /* [D]: the head's normed row, then rotated */
    __shared__ float cs[LM_ROPE_CHUNK], sn[LM_ROPE_CHUNK];
    const int head = blockIdx.x, hk = head - n_heads;
    const int64_t t = blockIdx.y;
    const bool query = head < n_heads;
    const float *w = query ? q_norm : k_norm;
    const held_weight hw = hold_weight(w, D); /* before the wait: a weight */
    lm_cuda_let_next_then_wait();
    const float *src = query ? qg + (t * n_heads + head) * 2 * D : k + (t * n_kv_heads + hk) * D;
    lm_rope_angles(c, positions + t * 3, cs, sn);
    float inv = 1.0f / sqrtf(lm_cuda_row_sum_squares(src, D) / (float)D + eps);
#pragma unroll NORM_W_HELD
    for (int i = threadIdx.x, kth = 0; i < D; i += blockDim.x, kth++) row[i] = src[i] * inv * weight_at(hw, w, kth, i);
    __syncthreads(); /* the row and the angles are whole; src is read (k is rewritten below) */
    for (int j = threadIdx.x; j < c.count; j += blockDim.x) lm_rope_rotate(row, c, cs, sn, j);
    __syncthreads();
    if (query) {
        float *qo = q + (t * n_heads + head) * D, *go = gates + (t * n_heads + head) * D;
        for (int i = threadIdx.x; i < D; i += blockDim.x) {
            qo[i] = row[i];
            go[i] = src[D + i];
        }
    } else {
        float *ko = k + (t * n_kv_heads + hk) * D;
        const float *vo = v + (t * n_kv_heads + hk) * D;
        int64_t at = (int64_t)slots[t] * n_kv_heads * D + (int64_t)hk * D;
        for (int i = threadIdx.x; i < D; i += blockDim.x) {
            ko[i] = row[i];
            lm_kv_store(&k_pool[at + i], row[i]);
            lm_kv_store(&v_pool[at + i], vo[i]);
        }
    }
}

extern "C" bool lm_cuda_attention_prepare(lm_backend *be, const lm_attention_prepare_args *a) {
    const lm_kv_layer *kv = a->kv;
    int D = a->head_dim, heads = a->n_heads + a->n_kv_heads, half = a->rope->rot_dim / 2;
    if (lm_cuda_state_of(be)->unfused || a->n <= 0 || a->n > 65535 || a->n_heads <= 0 || a->n_kv_heads <= 0 ||
        heads > 65535 || D <= 0 || D > 8192 || half <= 0 || half > LM_ROPE_CHUNK || a->rope->rot_dim > D ||
        kv->n_kv_heads != a->n_kv_heads || kv->head_dim != D ||
        (kv->dtype != LM_DTYPE_F32 && kv->dtype != LM_DTYPE_BF16))
        return false;
    lm_rope_chunk c;
    lm_cuda_rope_chunk(a->rope, 0, &c);
    dim3 grid((unsigned)heads, (unsigned)a->n);
    int threads = lm_cuda_row_threads(D);
    size_t shared = sizeof(float) * (size_t)D;
    if (kv->dtype == LM_DTYPE_BF16)
        lm_cuda_launch(be, "attention_prepare (bf16 cache)", attention_prepare_kernel<__nv_bfloat16>, grid, threads,
                       shared, lm_cuda_f32(a->q), lm_cuda_f32(a->gates), lm_cuda_f32(a->k), lm_cuda_f32(a->v),
                       lm_cuda_f32(a->q_and_gate), lm_cuda_f32(a->q_norm), lm_cuda_f32(a->k_norm),
                       lm_cuda_i32(a->positions), lm_cuda_i32(a->kv_slots), (__nv_bfloat16 *)lm_cuda_ptr(kv->k),
                       (__nv_bfloat16 *)lm_cuda_ptr(kv->v), a->n_heads, a->n_kv_heads, D, a->eps, c);
    else
        lm_cuda_launch(be, "attention_prepare", attention_prepare_kernel<float>, grid, threads, shared,
                       lm_cuda_f32(a->q), lm_cuda_f32(a->gates), lm_cuda_f32(a->k), lm_cuda_f32(a->v),
                       lm_cuda_f32(a->q_and_gate), lm_cuda_f32(a->q_norm), lm_cuda_f32(a->k_norm),
                       lm_cuda_i32(a->positions), lm_cuda_i32(a->kv_slots), lm_cuda_f32(kv->k), lm_cuda_f32(kv->v),
                       a->n_heads, a->n_kv_heads, D, a->eps, c);
    return true;
}
