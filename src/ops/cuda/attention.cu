// Paged attention: kv_write into the pools, and attention over the paged
// cache (ops.h).  float32 throughout: blocks per (run of keys, query head,
// token), online softmax over tiles of keys, then the runs combined.  With
// bf16 compute, attention runs on the tensor cores instead
// (attention_mma.cu).
#include <math.h>
#include <stdint.h>

#include "ops/cuda/launch.h"

#define KV_THREADS 256

// Row t of k and v ([n, n_kv_heads * head_dim]) to pool slot slots[t].
__global__ static void kv_write_kernel(float *k_pool, float *v_pool, const float *k, const float *v,
                                       const int32_t *slots, int64_t row) {
    int64_t t = blockIdx.x, slot = slots[t];
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
        k_pool[slot * row + i] = k[t * row + i];
        v_pool[slot * row + i] = v[t * row + i];
    }
}
void lm_cuda_kv_write(lm_backend *be, const lm_kv_layer *kv, lm_mem k, lm_mem v, int n,
                                 lm_mem slots) {
    int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;
    if (n <= 0 || row <= 0) return;
    lm_cuda_launch(be, "kv_write", kv_write_kernel, n, KV_THREADS, 0, lm_cuda_f32(kv->k), lm_cuda_f32(kv->v),
                   lm_cuda_f32(k), lm_cuda_f32(v), lm_cuda_i32(slots), row);
}

// Split-K ("flash decoding"): a token's keys are cut into att_splits(len)
// nearly equal runs, a block per (run, query head, token) computes that
// run's running max m, sum l and unnormalised output acc, and a second
// kernel combines the runs in run order.  A decode step has one token a
// sequence: without the split it had one block per query head (16 blocks
// on a 132-SM card, each walking the whole context).  The runs depend on
// the token's own context length only, so a token gets the same bits
// alone or batched, in a prefill chunk or a decode step.
//
// Within a run, ATT_THREADS threads: each tile of ATT_TILE keys, every
// warp scores ATT_TILE / warps keys (lanes over the head dims, a shuffle
// sum), then the running max and sum are rescaled and each thread
// accumulates its output dims (d = tid, tid + ATT_THREADS, ...: head_dim
// <= ATT_THREADS * ATT_DIMS) over the tile's values, read from the pool.
#define ATT_THREADS 128
#define ATT_TILE 32
#define ATT_DIMS 2 /* head_dim <= 256 */
#define ATT_MAX_DIM (ATT_THREADS * ATT_DIMS)
#define ATT_MAX_SPLITS 64
#define ATT_SPLIT_KEYS 32
#define MMA_MIN_SEQ_ROWS 8 /* bf16 compute: calls with more rows of one sequence take the tensor cores */ /* a run has at least this many keys, until ATT_MAX_SPLITS runs */

__host__ __device__ static inline int att_splits(int len) {
    int s = (len + ATT_SPLIT_KEYS - 1) / ATT_SPLIT_KEYS;
    return s < 1 ? 1 : s > ATT_MAX_SPLITS ? ATT_MAX_SPLITS : s;
}

// A run's result in the partials: [m, l, acc[0..D)] at
// ((t - t0) * n_heads + h) * max_splits + split.
__global__ static void __launch_bounds__(ATT_THREADS)
attention_split_kernel(float *part, int t0, int max_splits, const float *q, const float *k_pool,
                       const float *v_pool, int block_size, const int32_t *token_seq, const int32_t *ctx_len,
                       const int32_t *block_tables, int table_stride, int n_heads, int n_kv_heads, int D,
                       float scale) {
    __shared__ float qs[ATT_MAX_DIM];
    __shared__ float score[ATT_TILE];
    int split = blockIdx.x, h = blockIdx.y, t = t0 + blockIdx.z, tid = threadIdx.x;
    int len = ctx_len[t], splits = min(att_splits(len), max_splits); // max_ctx_len bounds len: a guard
    if (split >= splits) return;
    int run = (len + splits - 1) / splits, j_begin = split * run;
    int j_end = j_begin + run < len ? j_begin + run : len;
    int lane = tid & 31, warp = tid >> 5, warps = ATT_THREADS / 32;
    int kvh = h / (n_heads / n_kv_heads);
    int64_t kv_row = (int64_t)n_kv_heads * D;
    const int32_t *table = block_tables + (int64_t)token_seq[t] * table_stride;
    const float *qh = q + ((int64_t)t * n_heads + h) * D;
    for (int d = tid; d < D; d += ATT_THREADS) qs[d] = qh[d];
    __syncthreads();

    float m = -INFINITY, l = 0.0f, acc[ATT_DIMS];
    for (int i = 0; i < ATT_DIMS; i++) acc[i] = 0.0f;
    for (int j0 = j_begin; j0 < j_end; j0 += ATT_TILE) {
        int tile = j_end - j0 < ATT_TILE ? j_end - j0 : ATT_TILE;
        for (int jj = warp; jj < tile; jj += warps) {
            int j = j0 + jj;
            int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
            const float *kj = k_pool + slot * kv_row + (int64_t)kvh * D;
            float dot = 0.0f;
            for (int d = lane; d < D; d += 32) dot += qs[d] * kj[d];
            for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            if (lane == 0) score[jj] = dot * scale;
        }
        __syncthreads();
        // Every thread walks the tile's scores in the same order, so all
        // hold the same m and l.
        float tile_max = -INFINITY;
        for (int jj = 0; jj < tile; jj++) tile_max = fmaxf(tile_max, score[jj]);
        float new_m = fmaxf(m, tile_max);
        float corr = m == -INFINITY ? 0.0f : expf(m - new_m);
        l *= corr;
        for (int i = 0; i < ATT_DIMS; i++) acc[i] *= corr;
#pragma unroll 4
        for (int jj = 0; jj < tile; jj++) {
            float p = new_m == -INFINITY ? 0.0f : expf(score[jj] - new_m);
            l += p;
            int j = j0 + jj;
            int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
            const float *vj = v_pool + slot * kv_row + (int64_t)kvh * D;
            for (int i = 0; i < ATT_DIMS; i++) {
                int d = tid + i * ATT_THREADS;
                if (d < D) acc[i] += p * vj[d];
            }
        }
        m = new_m;
        __syncthreads(); /* the next tile overwrites score */
    }
    float *out = part + (((int64_t)blockIdx.z * n_heads + h) * max_splits + split) * (D + 2);
    if (tid == 0) out[0] = m, out[1] = l;
    for (int i = 0; i < ATT_DIMS; i++) {
        int d = tid + i * ATT_THREADS;
        if (d < D) out[2 + d] = acc[i];
    }
}

// out = Σ_s acc_s·w_s / Σ_s l_s·w_s with w_s = exp(m_s − max m), the sums
// in run order.  One run: w = exp(0) = 1, out = acc / l.  No keys (len 0):
// 0 / 0, NaN, as the reference.
__global__ static void __launch_bounds__(ATT_THREADS)
attention_combine_kernel(float *out, const float *part, int t0, int max_splits, const int32_t *ctx_len,
                         int n_heads, int D) {
    int h = blockIdx.x, t = t0 + blockIdx.y;
    int splits = min(att_splits(ctx_len[t]), max_splits);
    const float *p = part + ((int64_t)blockIdx.y * n_heads + h) * max_splits * (D + 2);
    float M = -INFINITY;
    for (int s = 0; s < splits; s++) M = fmaxf(M, p[(int64_t)s * (D + 2)]);
    float L = 0.0f;
    for (int s = 0; s < splits; s++) {
        float ms = p[(int64_t)s * (D + 2)];
        if (ms != -INFINITY) L += p[(int64_t)s * (D + 2) + 1] * expf(ms - M);
    }
    float *oh = out + ((int64_t)t * n_heads + h) * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < splits; s++) {
            float ms = p[(int64_t)s * (D + 2)];
            if (ms != -INFINITY) acc += p[(int64_t)s * (D + 2) + 2 + d] * expf(ms - M);
        }
        oh[d] = acc / L;
    }
}

void lm_cuda_attention(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                                  const lm_attention_batch *b) {
    if (b->n_tokens <= 0 || b->n_heads <= 0) return;
    // head_dim > ATT_MAX_DIM is not supported by this version; the models
    // use at most 256.  A launch with grid.y > 65535 heads fails loudly.
    if (b->head_dim > ATT_MAX_DIM) {
        lm_cuda_note_error(be, cudaErrorInvalidValue, "attention (head_dim > 256)");
        return;
    }
    // bf16 compute: the tensor-core kernel for calls with a prefill chunk.
    // Calls of decode and verify rows only (at most MMA_MIN_SEQ_ROWS a
    // sequence) take the split kernel below: the tensor-core one gives a
    // block to each kv head's tile of rows and walks the whole context (4
    // blocks for a 9B decode step at batch 1: 85.5 against 151.7 tokens/s
    // at a 4k-token context, H200).  As with the products (cuBLASLt from 9
    // rows), bf16 compute's bits then depend on the step's shape; float32
    // compute has one kernel for every call.
    const lm_cuda_state *st = lm_cuda_state_of(be);
    bool decode_only = b->max_seq_tokens > 0 && b->max_seq_tokens <= MMA_MIN_SEQ_ROWS;
    if (st->blas_matmul && !st->attention_simt_only && !decode_only && lm_cuda_attention_mma(be, out, q, kv, b))
        return;
    // The runs' partials, in waves of tokens that fit the buffer (made
    // with the backend: a decode step of 64 sequences at long contexts is
    // one wave).
    int max_splits = st->attention_one_run ? 1 : att_splits(b->max_ctx_len), D = b->head_dim;
    size_t per_token = sizeof(float) * (size_t)b->n_heads * (size_t)max_splits * (size_t)(D + 2);
    int wave = (int)(st->attention_partial_bytes / per_token);
    if (wave < 1) {
        lm_cuda_note_error(be, cudaErrorMemoryAllocation, "attention (partials of one token)");
        return;
    }
    if (wave > 65535) wave = 65535;
    for (int t0 = 0; t0 < b->n_tokens; t0 += wave) {
        int count = b->n_tokens - t0 < wave ? b->n_tokens - t0 : wave;
        dim3 grid((unsigned)max_splits, (unsigned)b->n_heads, (unsigned)count);
        lm_cuda_launch(be, "attention", attention_split_kernel, grid, ATT_THREADS, 0,
                       (float *)st->attention_partials, t0, max_splits, lm_cuda_f32(q), lm_cuda_f32(kv->k),
                       lm_cuda_f32(kv->v), kv->block_size, lm_cuda_i32(b->token_seq), lm_cuda_i32(b->ctx_len),
                       lm_cuda_i32(b->block_tables), b->table_stride, b->n_heads, b->n_kv_heads, D, b->scale);
        dim3 combine((unsigned)b->n_heads, (unsigned)count);
        lm_cuda_launch(be, "attention (combine)", attention_combine_kernel, combine, ATT_THREADS, 0,
                       lm_cuda_f32(out), (const float *)st->attention_partials, t0, max_splits,
                       lm_cuda_i32(b->ctx_len), b->n_heads, D);
    }
}
