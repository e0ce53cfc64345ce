// Paged attention on the tensor cores, for bf16 compute (flash style).
//
// The float32 kernel (attention.cu) gives every (token, head) a block that
// reads every key from the pool: at 8k-token prompts attention was 62% of
// a 9B prefill.  Here a block takes up to 64 query rows (tq consecutive
// tokens x the G query heads of one kv head), copies each tile of KT keys
// and values once into shared memory (cp.async, the next tile in flight
// while this one is used), and four warps of 16 rows compute S = Q·Kᵀ and
// O += P·V with mma.sync (operands rounded to bf16 as they are read,
// float32 accumulators), the softmax online in float32.
//
// Batch invariance: a row's arithmetic is the same whatever shares its
// block.  Key tiles start at multiples of KT for every row; a tensor-core
// product computes each output element from its own row and column only;
// the row max and sum are reduced over the row's four lanes in a fixed
// order; a tile past a row's context (its block goes further for another
// row) has p = 0, corr = exp(0) = 1, and leaves m, l and O bit for bit as
// they were.  Tokens of different sequences in one block's tile are run
// one sequence after another (segments), each over its own keys.
//
// The pool's element type T is a template parameter: a float32 pool's
// tiles are copied as float32 and rounded to nearest even when read as
// operands; a bf16 pool (bf16 compute's, lm_cuda_kv_dtype) holds values
// kv_write rounded the same way, copied as they are (half the bytes and
// half the shared memory).  The operands, and so the results, are the
// same bits.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/cuda_state.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define FA_WARPS 4
#define FA_ROWS (16 * FA_WARPS)

template <typename T, int D>
struct fa_tile {
    static constexpr int KT = D >= 256 ? 32 : 64; /* keys per tile (registers bound it at D 256) */
    /* Row strides in elements, chosen so the operand loads below hit 32
     * banks: float32 K rows D + 8 and V rows D + 4 floats; bf16 K rows
     * D + 8 (a lane's pair is a word: rows 4 words apart mod 8) and V rows
     * D + 8 (a lane's two halves of rows 2·t4, 2·t4 + 1: rows 8 words
     * apart mod 32). */
    static constexpr int K_LD = D + 8;
    static constexpr int V_LD = sizeof(T) == 4 ? D + 4 : D + 8;
    static constexpr int PER_COPY = 16 / (int)sizeof(T); /* elements in one 16-byte copy */
    static constexpr size_t BUF = (size_t)KT * (K_LD + V_LD);  /* elements */
    static constexpr size_t SHARED = 2 * BUF * sizeof(T);      /* two tiles in flight */
};

// Operand pairs from the shared tiles: two consecutive elements of a row
// (K), and element 0 of two rows ld apart (V), as bf16 in one register,
// the first in the low half.
__device__ __forceinline__ static uint32_t fa_pair(const float *p) {
    float2 x = *(const float2 *)p;
    return lm_pack_bf16(x.x, x.y);
}
__device__ __forceinline__ static uint32_t fa_pair(const __nv_bfloat16 *p) { return *(const uint32_t *)p; }
__device__ __forceinline__ static uint32_t fa_rows(const float *p, int ld) { return lm_pack_bf16(p[0], p[ld]); }
__device__ __forceinline__ static uint32_t fa_rows(const __nv_bfloat16 *p, int ld) {
    return (uint32_t)__bfloat16_as_ushort(p[0]) | (uint32_t)__bfloat16_as_ushort(p[ld]) << 16;
}

__device__ __forceinline__ static float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ static float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1); /* a + b: the same bits in both lanes */
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Grid (token tiles of tq tokens, kv heads).  Lane (g4, t4) of warp w holds
// rows w·16 + g4 and w·16 + g4 + 8 of the block's tile: row r is token
// t0 + r / G, query head kvh·G + r % G.
template <typename T, int D>
__global__ static void __launch_bounds__(FA_WARPS * 32)
    attention_mma_kernel(float *out, const float *q, const T *k_pool, const T *v_pool, int block_size,
                         const int32_t *token_seq, const int32_t *ctx_len, const int32_t *block_tables,
                         int table_stride, int n_tokens, int n_heads, int n_kv_heads, int tq, float scale) {
    lm_cuda_let_next_then_wait();
    constexpr int KT = fa_tile<T, D>::KT, K_LD = fa_tile<T, D>::K_LD, V_LD = fa_tile<T, D>::V_LD;
    constexpr int PER_COPY = fa_tile<T, D>::PER_COPY;
    extern __shared__ __align__(16) float fa_shared[];
    T *fa_smem = (T *)fa_shared; /* [2] x (K [KT][K_LD], V [KT][V_LD]) */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g4 = lane >> 2, t4 = lane & 3;
    const int kvh = blockIdx.y, G = n_heads / n_kv_heads;
    const int t0 = blockIdx.x * tq, t_end = t0 + tq < n_tokens ? t0 + tq : n_tokens;
    const int64_t kv_row = (int64_t)n_kv_heads * D;

    int row[2], tok[2], head[2];
    bool has[2];
    for (int h = 0; h < 2; h++) {
        row[h] = warp * 16 + g4 + 8 * h;
        tok[h] = t0 + row[h] / G;
        head[h] = kvh * G + row[h] % G;
        has[h] = row[h] < tq * G && tok[h] < t_end;
    }

    // Q as the A operand: register kc covers dims kc·16 .. kc·16 + 15.
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kc = 0; kc < D / 16; kc++)
#pragma unroll
        for (int half = 0; half < 2; half++) /* dims +0 and +8 */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float2 x = make_float2(0.0f, 0.0f);
                if (has[h]) x = *(const float2 *)&q[((int64_t)tok[h] * n_heads + head[h]) * D + kc * 16 + half * 8 + 2 * t4];
                qf[kc][2 * half + h] = lm_pack_bf16(x.x, x.y);
            }

    for (int seg0 = t0; seg0 < t_end;) {
        const int seq = token_seq[seg0];
        int seg1 = seg0 + 1, max_len = ctx_len[seg0];
        while (seg1 < t_end && token_seq[seg1] == seq) {
            max_len = max(max_len, ctx_len[seg1]);
            seg1++;
        }
        bool active[2];
        int len[2];
        for (int h = 0; h < 2; h++) {
            active[h] = has[h] && tok[h] >= seg0 && tok[h] < seg1;
            len[h] = active[h] ? ctx_len[tok[h]] : 0;
        }
        const bool warp_works = __any_sync(0xffffffffu, active[0] || active[1]);
        const int32_t *table = block_tables + (int64_t)seq * table_stride;

        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
        float o[D / 8][4];
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;

        // Queues the copies of the tile of keys from j0 into buffer b.
        auto stage = [&](int b, int j0) {
            T *Kb = fa_smem + b * fa_tile<T, D>::BUF, *Vb = Kb + KT * K_LD;
            constexpr int PER_THREAD = KT * (D / PER_COPY) / (FA_WARPS * 32); /* 16 bytes of K and of V */
            static_assert(KT * (D / PER_COPY) % (FA_WARPS * 32) == 0, "whole copies a thread");
#pragma unroll 4
            for (int it = 0; it < PER_THREAD; it++) {
                int idx = tid + it * FA_WARPS * 32;
                int key = idx / (D / PER_COPY), d = (idx % (D / PER_COPY)) * PER_COPY, j = j0 + key;
                bool in = j < max_len;
                int64_t at = 0;
                if (in) at = ((int64_t)table[j / block_size] * block_size + j % block_size) * kv_row + (int64_t)kvh * D + d;
                lm_copy_async16(&Kb[key * K_LD + d], k_pool + at, in);
                lm_copy_async16(&Vb[key * V_LD + d], v_pool + at, in);
            }
            lm_copy_async_commit();
        };
        stage(0, 0);
        for (int j0 = 0, cur = 0; j0 < max_len; j0 += KT, cur ^= 1) {
            if (j0 + KT < max_len)
                stage(cur ^ 1, j0 + KT);
            else
                lm_copy_async_commit(); /* an empty group: the wait counts the same */
            lm_copy_async_wait_all_but_one();
            __syncthreads(); /* this tile has landed, every thread's copies */
            const T *Kf = fa_smem + cur * fa_tile<T, D>::BUF, *Vf = Kf + KT * K_LD;
            if (!warp_works) {
                __syncthreads();
                continue;
            }

            // S = Q·Kᵀ over this tile: n-tile nt is keys nt·8 .. nt·8 + 7.
            float s[KT / 8][4];
#pragma unroll
            for (int nt = 0; nt < KT / 8; nt++) {
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
                const T *kr = &Kf[(nt * 8 + g4) * K_LD + 2 * t4];
#pragma unroll
                for (int kc = 0; kc < D / 16; kc++)
                    lm_mma_bf16_16816(s[nt], qf[kc], fa_pair(&kr[kc * 16]), fa_pair(&kr[kc * 16 + 8]));
            }
            // Scale, mask past each row's context, the online softmax.
            float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < KT / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int h = e >> 1, j = j0 + nt * 8 + 2 * t4 + (e & 1);
                    s[nt][e] = j < len[h] ? s[nt][e] * scale : -INFINITY;
                    tile_max[h] = fmaxf(tile_max[h], s[nt][e]);
                }
            float corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float new_m = fmaxf(m[h], quad_max(tile_max[h]));
                corr[h] = m[h] == -INFINITY ? 0.0f : expf(m[h] - new_m);
                m[h] = new_m;
            }
#pragma unroll
            for (int nt = 0; nt < KT / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int h = e >> 1;
                    float p = s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - m[h]);
                    s[nt][e] = p;
                    sum[h] += p;
                }
#pragma unroll
            for (int h = 0; h < 2; h++) l[h] = l[h] * corr[h] + quad_sum(sum[h]);
#pragma unroll
            for (int dn = 0; dn < D / 8; dn++) {
                o[dn][0] *= corr[0];
                o[dn][1] *= corr[0];
                o[dn][2] *= corr[1];
                o[dn][3] *= corr[1];
            }
            // O += P·V: P's accumulator layout is the A operand's, two n-tiles a k-step.
#pragma unroll
            for (int kc = 0; kc < KT / 16; kc++) {
                uint32_t pa[4] = {lm_pack_bf16(s[2 * kc][0], s[2 * kc][1]), lm_pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                                  lm_pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                  lm_pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
                for (int dn = 0; dn < D / 8; dn++) {
                    const T *vr = &Vf[(kc * 16 + 2 * t4) * V_LD + dn * 8 + g4];
                    lm_mma_bf16_16816(o[dn], pa, fa_rows(vr, V_LD), fa_rows(vr + 8 * V_LD, V_LD));
                }
            }
            __syncthreads(); /* every warp is done with this buffer before it is refilled */
        }
#pragma unroll
        for (int h = 0; h < 2; h++)
            if (active[h]) {
                float *oh = out + ((int64_t)tok[h] * n_heads + head[h]) * D + 2 * t4;
#pragma unroll
                for (int dn = 0; dn < D / 8; dn++)
                    *(float2 *)&oh[dn * 8] = make_float2(o[dn][2 * h] / l[h], o[dn][2 * h + 1] / l[h]);
            }
        seg0 = seg1;
    }
}

template <typename T, int D>
static bool launch_mma(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv, const lm_attention_batch *b,
                       int tq) {
    lm_cuda_use_device(lm_cuda_state_of(be)); /* the attribute is the current GPU's */
    if (cudaFuncSetAttribute(attention_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)fa_tile<T, D>::SHARED) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: the float32 kernel takes the call */
        return false;
    }
    dim3 grid((unsigned)((b->n_tokens + tq - 1) / tq), (unsigned)b->n_kv_heads);
    lm_cuda_launch(be, "attention (tensor cores)", attention_mma_kernel<T, D>, grid, FA_WARPS * 32,
                   fa_tile<T, D>::SHARED, lm_cuda_f32(out), lm_cuda_f32(q), (const T *)lm_cuda_ptr(kv->k),
                   (const T *)lm_cuda_ptr(kv->v), kv->block_size,
                   lm_cuda_i32(b->token_seq), lm_cuda_i32(b->ctx_len), lm_cuda_i32(b->block_tables),
                   b->table_stride, b->n_tokens, b->n_heads, b->n_kv_heads, tq, b->scale);
    return true;
}

extern "C" bool lm_cuda_attention_mma(lm_backend *be, lm_mem out, lm_mem q, const lm_kv_layer *kv,
                                      const lm_attention_batch *b) {
    int D = b->head_dim, G = b->n_heads / b->n_kv_heads;
    if (G < 1 || G > FA_ROWS || b->n_heads % b->n_kv_heads != 0) return false;
    if (D != 32 && D != 64 && D != 128 && D != 256) return false; /* KT·D/4 a multiple of the threads */
    // 16-byte loads of the pools' rows, 8-byte loads of q's (fixed per
    // pool and workspace: a model's calls all take one kernel).
    if ((uintptr_t)lm_cuda_ptr(kv->k) % 16 || (uintptr_t)lm_cuda_ptr(kv->v) % 16 || (uintptr_t)lm_cuda_f32(q) % 8)
        return false;
    // Tokens a block takes: as many of one sequence as its 64 rows hold (a
    // decode step's tokens each belong to another sequence: one a block).
    int run = b->max_seq_tokens > 0 && b->max_seq_tokens < b->n_tokens ? b->max_seq_tokens : b->n_tokens;
    int tq = FA_ROWS / G;
    if (run < tq) tq = run;
    if (tq < 1) tq = 1;
    if (kv->dtype == LM_DTYPE_BF16) switch (D) {
        case 32: return launch_mma<__nv_bfloat16, 32>(be, out, q, kv, b, tq);
        case 64: return launch_mma<__nv_bfloat16, 64>(be, out, q, kv, b, tq);
        case 128: return launch_mma<__nv_bfloat16, 128>(be, out, q, kv, b, tq);
        default: return launch_mma<__nv_bfloat16, 256>(be, out, q, kv, b, tq);
        }
    switch (D) {
    case 32: return launch_mma<float, 32>(be, out, q, kv, b, tq);
    case 64: return launch_mma<float, 64>(be, out, q, kv, b, tq);
    case 128: return launch_mma<float, 128>(be, out, q, kv, b, tq);
    default: return launch_mma<float, 256>(be, out, q, kv, b, tq);
    }
}
