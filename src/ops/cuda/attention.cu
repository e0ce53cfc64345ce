// Paged attention: kv_write into the pools, and attention over the paged
// cache (ops.h).  float32 arithmetic: blocks per (run of keys, query head,
// token), online softmax over tiles of keys, then the runs combined.  With
// bf16 compute, calls with prefill rows run on the tensor cores instead
// (attention_mma.cu), and the pools hold bf16 (lm_cuda_kv_dtype): both
// kernels are templates over the pool's element type, and a bf16 pool
// gives the bits a float32 pool of the same rounded values gives.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define KV_THREADS 256

// Row t of k and v ([n, n_kv_heads * head_dim]) to pool slot slots[t],
// rounded to nearest even in a bf16 pool (as ref and cpu round: the pools
// hold the same bits on every backend).
template <typename T>
__global__ static void kv_write_kernel(T *k_pool, T *v_pool, const float *k, const float *v, const int32_t *slots,
                                       int64_t row) {
    lm_cuda_let_next_then_wait();
    int64_t t = blockIdx.x, slot = slots[t];
    for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
        lm_kv_store(&k_pool[slot * row + i], k[t * row + i]);
        lm_kv_store(&v_pool[slot * row + i], v[t * row + i]);
    }
}
void lm_cuda_kv_write(lm_backend *be, const lm_kv_layer *kv, lm_mem k, lm_mem v, int n,
                                 lm_mem slots) {
    int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;
    if (n <= 0 || row <= 0) return;
    if (kv->dtype == LM_DTYPE_BF16)
        lm_cuda_launch(be, "kv_write (bf16)", kv_write_kernel<__nv_bfloat16>, n, KV_THREADS, 0,
                       (__nv_bfloat16 *)lm_cuda_ptr(kv->k), (__nv_bfloat16 *)lm_cuda_ptr(kv->v), lm_cuda_f32(k),
                       lm_cuda_f32(v), lm_cuda_i32(slots), row);
    else
        lm_cuda_launch(be, "kv_write", kv_write_kernel<float>, n, KV_THREADS, 0, lm_cuda_f32(kv->k),
                       lm_cuda_f32(kv->v), lm_cuda_f32(k), lm_cuda_f32(v), lm_cuda_i32(slots), row);
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
// Within a run, ATT_THREADS threads walk tiles of ATT_TILE keys.  Two
// forms, each a template over the pool's element type T (float, bf16),
// with the same arithmetic for both, so a bf16 pool gives the bits of a
// float32 pool holding the same rounded values:
//
// attention_split8_kernel, for head dims 32, 64, 128, 256 and 16-byte
// aligned pools: each lane holds 8 consecutive dims (one 16-byte load of a
// bf16 row, two of a float32 one), D / 8 lanes a key, so ATT_THREADS·8 / D
// keys are scored at once (the lanes' dot products summed by a fixed
// shuffle tree) and as many keys' values accumulated at once, each group
// of lanes over its own keys of the tile (keys g, g + groups, ...); the
// groups' sums are added in group order when the run ends.
//
// attention_split_kernel, for the other head dims (a vision tower's may
// be one, the op test's odd sizes are) or unaligned pools: every warp scores ATT_TILE /
// warps keys (lanes over the head dims, a shuffle sum), then each thread
// accumulates its output dims (d = tid, tid + ATT_THREADS, ...: head_dim
// <= ATT_THREADS * ATT_DIMS) over the tile's values, read element by
// element.
#define ATT_THREADS 128
#define ATT_TILE 32
#define ATT_DIMS 2 /* head_dim <= 256 */
#define ATT_MAX_DIM (ATT_THREADS * ATT_DIMS)
#define ATT_MAX_SPLITS 64
#define ATT_SPLIT_KEYS 32 /* a run has at least this many keys, until ATT_MAX_SPLITS runs */
#define MMA_MIN_SEQ_ROWS 8 /* bf16 compute: calls with more rows of one sequence take the tensor cores */

__host__ __device__ static inline int att_splits(int len) {
    int s = (len + ATT_SPLIT_KEYS - 1) / ATT_SPLIT_KEYS;
    return s < 1 ? 1 : s > ATT_MAX_SPLITS ? ATT_MAX_SPLITS : s;
}

// A run's result in the partials: [m, l, acc[0..D)] at
// ((t - t0) * n_heads + h) * max_splits + split.
template <typename T, int D>
__global__ static void __launch_bounds__(ATT_THREADS)
attention_split8_kernel(float *part, int t0, int max_splits, const float *q, const T *k_pool, const T *v_pool,
                        int block_size, const int32_t *token_seq, const int32_t *ctx_len,
                        const int32_t *block_tables, int table_stride, int n_heads, int n_kv_heads, float scale) {
    lm_cuda_let_next_then_wait();
    constexpr int LANES = D / 8, GROUPS = ATT_THREADS / LANES; /* lanes a key; keys at once */
    static_assert(D % 8 == 0 && LANES <= 32 && 32 % LANES == 0 && GROUPS <= ATT_TILE, "split8 head dim");
    __shared__ float score[ATT_TILE], weight[ATT_TILE];
    __shared__ float sums[GROUPS][D]; /* the groups' acc at the run's end */
    int split = blockIdx.x, h = blockIdx.y, t = t0 + blockIdx.z, tid = threadIdx.x;
    int len = ctx_len[t], splits = min(att_splits(len), max_splits); // max_ctx_len bounds len: a guard
    if (split >= splits) return;
    int run = (len + splits - 1) / splits, j_begin = split * run;
    int j_end = j_begin + run < len ? j_begin + run : len;
    int group = tid / LANES, d0 = (tid % LANES) * 8;
    int kvh = h / (n_heads / n_kv_heads);
    int64_t kv_row = (int64_t)n_kv_heads * D, head = (int64_t)kvh * D + d0;
    const int32_t *table = block_tables + (int64_t)token_seq[t] * table_stride;
    const float *qh = q + ((int64_t)t * n_heads + h) * D + d0;
    float qd[8], kd[8], acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) qd[i] = qh[i], acc[i] = 0.0f;

    float m = -INFINITY, l = 0.0f;
    for (int j0 = j_begin; j0 < j_end; j0 += ATT_TILE) {
        int tile = j_end - j0 < ATT_TILE ? j_end - j0 : ATT_TILE;
        // Every lane goes round the same number of times (the shuffles
        // want whole warps); lanes past the tile add zeros.
        for (int base = 0; base < tile; base += GROUPS) {
            int jj = base + group;
            float dot = 0.0f;
            if (jj < tile) {
                int j = j0 + jj;
                int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
                lm_kv_load8(k_pool + slot * kv_row + head, kd);
#pragma unroll
                for (int i = 0; i < 8; i++) dot = __fmaf_rn(qd[i], kd[i], dot);
            }
#pragma unroll
            for (int off = LANES / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
            if (jj < tile && d0 == 0) score[jj] = dot * scale;
        }
        __syncthreads();
        // Every thread walks the tile's scores in the same order, so all
        // hold the same m and l.
        float tile_max = -INFINITY;
        for (int jj = 0; jj < tile; jj++) tile_max = fmaxf(tile_max, score[jj]);
        float new_m = fmaxf(m, tile_max);
        float corr = m == -INFINITY ? 0.0f : expf(m - new_m);
        if (tid < tile) weight[tid] = new_m == -INFINITY ? 0.0f : expf(score[tid] - new_m);
        __syncthreads();
        l *= corr;
        for (int jj = 0; jj < tile; jj++) l += weight[jj];
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] *= corr;
#pragma unroll 4
        for (int jj = group; jj < tile; jj += GROUPS) {
            int j = j0 + jj;
            int64_t slot = (int64_t)table[j / block_size] * block_size + j % block_size;
            lm_kv_load8(v_pool + slot * kv_row + head, kd);
            float p = weight[jj];
#pragma unroll
            for (int i = 0; i < 8; i++) acc[i] = __fmaf_rn(p, kd[i], acc[i]);
        }
        m = new_m;
        __syncthreads(); /* the next tile overwrites score and weight */
    }
#pragma unroll
    for (int i = 0; i < 8; i++) sums[group][d0 + i] = acc[i];
    __syncthreads();
    float *out = part + (((int64_t)blockIdx.z * n_heads + h) * max_splits + split) * (D + 2);
    if (tid == 0) out[0] = m, out[1] = l;
    for (int d = tid; d < D; d += ATT_THREADS) {
        float a = 0.0f;
        for (int g = 0; g < GROUPS; g++) a += sums[g][d];
        out[2 + d] = a;
    }
}

template <typename T>
__global__ static void __launch_bounds__(ATT_THREADS)
attention_split_kernel(float *part, int t0, int max_splits, const float *q, const T *k_pool,
                       const T *v_pool, int block_size, const int32_t *token_seq, const int32_t *ctx_len,
                       const int32_t *block_tables, int table_stride, int n_heads, int n_kv_heads, int D,
                       float scale) {
    lm_cuda_let_next_then_wait();
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
            const T *kj = k_pool + slot * kv_row + (int64_t)kvh * D;
            float dot = 0.0f;
            for (int d = lane; d < D; d += 32) dot += qs[d] * lm_kv_float(kj[d]);
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
            const T *vj = v_pool + slot * kv_row + (int64_t)kvh * D;
            for (int i = 0; i < ATT_DIMS; i++) {
                int d = tid + i * ATT_THREADS;
                if (d < D) acc[i] += p * lm_kv_float(vj[d]);
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
// 0 / 0, NaN, as the reference.  With gates (gated_attention), each
// element then times sigmoid(gate) in sigmoid_mul's expression.
__global__ static void __launch_bounds__(ATT_THREADS)
attention_combine_kernel(float *out, const float *part, int t0, int max_splits, const int32_t *ctx_len,
                         int n_heads, int D, const float *gates) {
    lm_cuda_let_next_then_wait();
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
    int64_t row = ((int64_t)t * n_heads + h) * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < splits; s++) {
            float ms = p[(int64_t)s * (D + 2)];
            if (ms != -INFINITY) acc += p[(int64_t)s * (D + 2) + 2 + d] * expf(ms - M);
        }
        float o = acc / L;
        if (gates) o *= 1.0f / (1.0f + expf(-gates[row + d]));
        out[row + d] = o;
    }
}

// One wave of count tokens from t0 through the split kernel that takes
// the pool: split8 for its head dims and 16-byte aligned pools (fixed per
// pool: a model's calls all take one kernel), else the element-wise one.
template <typename T>
static void launch_split(lm_backend *be, const lm_cuda_state *st, lm_mem q, const lm_kv_layer *kv,
                         const lm_attention_batch *b, int t0, int count, int max_splits) {
    dim3 grid((unsigned)max_splits, (unsigned)b->n_heads, (unsigned)count);
    const T *k = (const T *)lm_cuda_ptr(kv->k), *v = (const T *)lm_cuda_ptr(kv->v);
    float *part = (float *)st->attention_partials;
    const float *qf = lm_cuda_f32(q);
    const int32_t *seq = lm_cuda_i32(b->token_seq), *len = lm_cuda_i32(b->ctx_len), *tab = lm_cuda_i32(b->block_tables);
    int D = b->head_dim;
    bool aligned = (uintptr_t)k % 16 == 0 && (uintptr_t)v % 16 == 0;
#define LM_SPLIT8(dim)                                                                                             \
    lm_cuda_launch(be, "attention", attention_split8_kernel<T, dim>, grid, ATT_THREADS, 0, part, t0, max_splits, qf, \
                   k, v, kv->block_size, seq, len, tab, b->table_stride, b->n_heads, b->n_kv_heads, b->scale)
    if (aligned && D == 256)
        LM_SPLIT8(256);
    else if (aligned && D == 128)
        LM_SPLIT8(128);
    else if (aligned && D == 64)
        LM_SPLIT8(64);
    else if (aligned && D == 32)
        LM_SPLIT8(32);
    else
        lm_cuda_launch(be, "attention", attention_split_kernel<T>, grid, ATT_THREADS, 0, part, t0, max_splits, qf, k,
                       v, kv->block_size, seq, len, tab, b->table_stride, b->n_heads, b->n_kv_heads, D, b->scale);
#undef LM_SPLIT8
}

// bf16 compute: the tensor-core kernel for calls with a prefill chunk.
// Calls of decode and verify rows only (at most MMA_MIN_SEQ_ROWS a
// sequence) take the split kernel below: the tensor-core one gives a
// block to each kv head's tile of rows and walks the whole context (4
// blocks for a 9B decode step at batch 1: 85.5 against 151.7 tokens/s
// at a 4k-token context, H200).  As with the products (cuBLASLt from 9
// rows), bf16 compute's bits then depend on the step's shape; float32
// compute has one kernel for every call.
static bool wants_mma(const lm_cuda_state *st, const lm_attention_batch *b) {
    bool decode_only = b->max_seq_tokens > 0 && b->max_seq_tokens <= MMA_MIN_SEQ_ROWS;
    return st->blas_matmul && !st->attention_simt_only && !decode_only;
}

// head_dim > ATT_MAX_DIM is not supported by this version; the models use
// at most 256.  A launch with grid.y > 65535 heads fails loudly.
static bool head_dim_taken(lm_backend *be, const lm_attention_batch *b) {
    if (b->head_dim <= ATT_MAX_DIM) return true;
    lm_cuda_note_error(be, cudaErrorInvalidValue, "attention (head_dim > 256)");
    return false;
}

// The split kernel and its combine, which multiplies by sigmoid(gates)
// when given.
static void attention_split(lm_backend *be, lm_mem out, lm_mem q, const float *gates, const lm_kv_layer *kv,
                            const lm_attention_batch *b) {
    const lm_cuda_state *st = lm_cuda_state_of(be);
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
        if (kv->dtype == LM_DTYPE_BF16)
            launch_split<__nv_bfloat16>(be, st, q, kv, b, t0, count, max_splits);
        else
            launch_split<float>(be, st, q, kv, b, t0, count, max_splits);
        dim3 combine((unsigned)b->n_heads, (unsigned)count);
        lm_cuda_launch(be, "attention (combine)", attention_combine_kernel, combine, ATT_THREADS, 0,
                       lm_cuda_f32(out), (const float *)st->attention_partials, t0, max_splits,
                       lm_cuda_i32(b->ctx_len), b->n_heads, D, gates);
    }
}

void lm_cuda_attention(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv, const lm_attention_batch *b) {
    if (b->n_tokens <= 0 || b->n_heads <= 0 || !head_dim_taken(be, b)) return;
    if (wants_mma(lm_cuda_state_of(be), b) && lm_cuda_attention_mma(be, out, q, kv, b)) return;
    attention_split(be, out, q, nullptr, kv, b);
}

// Decode and verify calls (the split kernel's) only: the tensor-core
// kernel's calls decline, so the parts run (its prefill rows gain little
// from one sigmoid launch less).
bool lm_cuda_gated_attention(lm_backend *be, lm_mem out, lm_mem q, lm_mem gates, const lm_kv_layer *kv,
                             const lm_attention_batch *b) {
    if (b->n_tokens <= 0 || b->n_heads <= 0) return true;
    if (!head_dim_taken(be, b)) return true; /* the error is noted */
    if (wants_mma(lm_cuda_state_of(be), b)) return false;
    attention_split(be, out, q, lm_cuda_f32(gates), kv, b);
    return true;
}

// bf16 pools under bf16 compute, where attention takes every head dim it
// takes at all (both kernels read either pool): the tensor-core kernel
// rounds k and v to bf16 as it reads them anyway, and the split kernel of
// decode rows then reads half the bytes.  Float32 compute keeps float32
// pools (its attention is float32 throughout).
lm_dtype lm_cuda_kv_dtype(const lm_backend *be, int head_dim) {
    const lm_cuda_state *st = (const lm_cuda_state *)be->impl;
    return st->blas_matmul && !st->kv_f32 && head_dim > 0 && head_dim <= ATT_MAX_DIM ? LM_DTYPE_BF16 : LM_DTYPE_F32;
}
