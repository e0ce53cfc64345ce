// The routed experts on the tensor cores, for bf16 compute: each expert's
// pairs (tokens routed to it, sorted by moe.cu's counting sort) times its
// matrices as a small GEMM with mma.sync, so an expert's weights are read
// once per tile of 64 pairs instead of once per pair and row by a warp.
//
// Two kernels, every expert in one launch: gate | up (act = silu(x·gateᵀ) ⊙
// x·upᵀ, both products in one block so x is staged once) and down (y =
// act·downᵀ).  A block takes one tile of up to 64 pairs of one expert from
// the list moe.cu's sort made, so the grid has about pairs / 64 + experts
// rows of blocks, not experts x the most pairs one could have.  (Waves of
// 256-512 pairs, launched one after another, kept the GPU a tenth busy: a
// 35B-A3B prefill step of 512 tokens took 2.1 ms a layer for gate | up.)  A block computes 64 pairs x 64 outputs; its four warps 32 x
// 32 each.  The pairs' rows (float32) and the weights' rows (bf16) are
// copied into shared memory by cp.async, the next 32 columns in flight
// while the current ones are used; the rows are rounded to bf16 as they
// are read.  A pair's outputs do not depend on the pairs beside it.
//
// int8 experts (Q8): a step's 32 columns of a weight row are one Q8_0
// block, which a thread pair reads (a half-block each: its scale and 8
// 2-byte loads) and writes to shared memory as bf16 s·q (rounded: 2^-9 of
// a weight at most, bf16 compute's precision).  Plain loads, not cp.async:
// they are issued with the next step's staging, before this step's
// products, and other blocks on the SM cover their latency.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define MM_TILE LM_CUDA_MOE_TILE /* pairs and outputs of a block */
#define MM_K 32             /* columns a step */
#define MM_THREADS 128
#define MM_A_LD (MM_K + 8)  /* float stride: the A operand's 8-byte loads hit distinct banks */
#define MM_B_LD (MM_K + 8)  /* bf16 stride, likewise */

template <int MAXE, int KINDS>
struct mm_mats {
    const void *w[KINDS][MAXE];
};

// Block (output tile, tile of pairs).  GATE_UP: a = x rows of the pairs'
// tokens, K = H, N = I, out = act (rows by sorted pair); else a = act rows,
// K = I, N = H, out = y (rows by pair).
template <int MAXE, bool GATE_UP, bool Q8>
__global__ static void __launch_bounds__(MM_THREADS)
moe_mma_kernel(float *out, const float *a_rows, const int32_t *order, const int32_t *start,
               const int32_t *tile_expert, const int32_t *tile_first, const int32_t *tile_count, int top_k, int K,
               int N, const __grid_constant__ mm_mats<MAXE, GATE_UP ? 2 : 1> m) {
    lm_cuda_let_next_then_wait();
    constexpr int KINDS = GATE_UP ? 2 : 1;
    __shared__ __align__(16) float As[2][MM_TILE * MM_A_LD];
    __shared__ __align__(16) __nv_bfloat16 Bs[2][KINDS][MM_TILE * MM_B_LD];
    if ((int)blockIdx.y >= *tile_count) return; /* the grid is sized for the most tiles there could be */
    const int e = tile_expert[blockIdx.y], tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g4 = lane >> 2,
              t4 = lane & 3;
    const int lo = tile_first[blockIdx.y], hi = min(start[e + 1], lo + MM_TILE);
    const int n0 = blockIdx.x * MM_TILE;
    const int wm = warp >> 1, wn = warp & 1; /* this warp's 32 pairs and 32 outputs */

    __shared__ const float *a_row[MM_TILE]; /* pair lo + r's row of a, or NULL past the pairs */
    if (tid < MM_TILE) {
        int p = lo + tid;
        a_row[tid] = p >= hi  ? nullptr
                     : GATE_UP ? a_rows + (int64_t)(order[p] / top_k) * K
                               : a_rows + (int64_t)p * K;
    }
    __syncthreads();
    auto stage = [&](int b, int k0) {
        for (int i = tid; i < MM_TILE * (MM_K / 4); i += MM_THREADS) { /* a: 16 bytes = 4 floats */
            int r = i / (MM_K / 4), c = (i % (MM_K / 4)) * 4;
            const float *row = a_row[r];
            lm_copy_async16(&As[b][r * MM_A_LD + c], row ? row + k0 + c : a_rows, row != nullptr);
        }
        for (int kind = 0; kind < KINDS; kind++) {
            if (Q8) { /* row r's block k0 / 32: half-block tid % 2 by thread tid */
                static_assert(MM_K == LM_Q8_BLOCK && MM_TILE * 2 == MM_THREADS, "one Q8_0 half-block a thread");
                const int r = tid / 2, h = tid % 2;
                uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
                if (n0 + r < N) {
                    const uint8_t *row = (const uint8_t *)m.w[kind][e] +
                                         (int64_t)(n0 + r) * (K / LM_Q8_BLOCK) * LM_Q8_BLOCK_BYTES;
                    uint32_t q[LM_Q8_HALF / 2];
                    float s = lm_q8_half_load(row, (int64_t)(k0 / LM_Q8_BLOCK) * 2 + h, q);
                    uint32_t v[LM_Q8_HALF / 2];
#pragma unroll
                    for (int i = 0; i < LM_Q8_HALF / 2; i++)
                        v[i] = lm_pack_bf16(s * (float)(int8_t)(q[i] & 0xffu), s * (float)(int8_t)(q[i] >> 8));
                    lo = make_uint4(v[0], v[1], v[2], v[3]);
                    hi = make_uint4(v[4], v[5], v[6], v[7]);
                }
                uint4 *dst = (uint4 *)&Bs[b][kind][r * MM_B_LD + h * LM_Q8_HALF];
                dst[0] = lo;
                dst[1] = hi;
                continue;
            }
            const __nv_bfloat16 *w = (const __nv_bfloat16 *)m.w[kind][e];
            for (int i = tid; i < MM_TILE * (MM_K / 8); i += MM_THREADS) { /* weights: 8 bf16 */
                int r = i / (MM_K / 8), c = (i % (MM_K / 8)) * 8;
                bool in = n0 + r < N;
                lm_copy_async16(&Bs[b][kind][r * MM_B_LD + c], in ? w + (int64_t)(n0 + r) * K + k0 + c : w, in);
            }
        }
        lm_copy_async_commit();
    };

    float acc[KINDS][2][4][4];
#pragma unroll
    for (int kind = 0; kind < KINDS; kind++)
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < 4; nt++) acc[kind][mt][nt][0] = acc[kind][mt][nt][1] = acc[kind][mt][nt][2] = acc[kind][mt][nt][3] = 0.0f;

    stage(0, 0);
    for (int k0 = 0, cur = 0; k0 < K; k0 += MM_K, cur ^= 1) {
        if (k0 + MM_K < K)
            stage(cur ^ 1, k0 + MM_K);
        else
            lm_copy_async_commit(); /* an empty group: the wait counts the same */
        lm_copy_async_wait_all_but_one();
        __syncthreads();
#pragma unroll
        for (int kc = 0; kc < MM_K / 16; kc++) {
            uint32_t af[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const float *ar = &As[cur][(wm * 32 + mt * 16 + g4) * MM_A_LD + kc * 16 + 2 * t4];
                float2 x0 = *(const float2 *)&ar[0], x1 = *(const float2 *)&ar[8 * MM_A_LD];
                float2 x2 = *(const float2 *)&ar[8], x3 = *(const float2 *)&ar[8 * MM_A_LD + 8];
                af[mt][0] = lm_pack_bf16(x0.x, x0.y);
                af[mt][1] = lm_pack_bf16(x1.x, x1.y);
                af[mt][2] = lm_pack_bf16(x2.x, x2.y);
                af[mt][3] = lm_pack_bf16(x3.x, x3.y);
            }
#pragma unroll
            for (int kind = 0; kind < KINDS; kind++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const __nv_bfloat16 *br = &Bs[cur][kind][(wn * 32 + nt * 8 + g4) * MM_B_LD + kc * 16 + 2 * t4];
                    uint32_t b0 = *(const uint32_t *)&br[0], b1 = *(const uint32_t *)&br[8];
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) lm_mma_bf16_16816(acc[kind][mt][nt], af[mt], b0, b1);
                }
        }
        __syncthreads(); /* every warp is done with this buffer before it is refilled */
    }

#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int p = lo + wm * 32 + mt * 16 + g4 + 8 * half;
            if (p >= hi) continue;
            float *orow = GATE_UP ? out + (int64_t)p * N : out + (int64_t)order[p] * N;
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    int o = n0 + wn * 32 + nt * 8 + 2 * t4 + c;
                    if (o >= N) continue;
                    float v;
                    if (GATE_UP) {
                        float g = acc[0][mt][nt][2 * half + c], u = acc[KINDS - 1][mt][nt][2 * half + c];
                        v = lm_silu(g) * u;
                    } else {
                        v = acc[0][mt][nt][2 * half + c];
                    }
                    orow[o] = v;
                }
        }
}

template <int MAXE, bool Q8>
static void run_tiles(lm_backend *be, float *act, float *y, const float *x, const int32_t *order,
                      const int32_t *start, const int32_t *tile_expert, const int32_t *tile_first,
                      const int32_t *tile_count, int pairs, int top_k, const lm_moe_experts *ex) {
    int E = ex->n_experts, H = ex->hidden, I = ex->inter;
    mm_mats<MAXE, 2> gu;
    mm_mats<MAXE, 1> dn;
    memset(&gu, 0, sizeof gu); // every byte is a kernel argument the queue compares (launch.h)
    memset(&dn, 0, sizeof dn);
    for (int e = 0; e < E; e++) {
        gu.w[0][e] = lm_cuda_ptr(ex->gate[e].data);
        gu.w[1][e] = lm_cuda_ptr(ex->up[e].data);
        dn.w[0][e] = lm_cuda_ptr(ex->down[e].data);
    }
    /* each expert's pairs fill whole tiles but its last: at most this many */
    unsigned most_tiles = (unsigned)((pairs + MM_TILE - 1) / MM_TILE + (E < pairs ? E : pairs));
    lm_cuda_launch(be, "moe_experts (gate, up; tensor cores)", moe_mma_kernel<MAXE, true, Q8>,
                   dim3(lm_cuda_blocks(I, MM_TILE), most_tiles), MM_THREADS, 0, act, x, order, start, tile_expert,
                   tile_first, tile_count, top_k, H, I, gu);
    lm_cuda_launch(be, "moe_experts (down; tensor cores)", moe_mma_kernel<MAXE, false, Q8>,
                   dim3(lm_cuda_blocks(H, MM_TILE), most_tiles), MM_THREADS, 0, y, act, order, start, tile_expert,
                   tile_first, tile_count, top_k, I, H, dn);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

extern "C" bool lm_cuda_moe_experts_mma(lm_backend *be, float *act, float *y, const float *x, const int32_t *order,
                                        const int32_t *start, const int32_t *tile_expert,
                                        const int32_t *tile_first, const int32_t *tile_count, int pairs, int top_k,
                                        const lm_moe_experts *ex) {
    int E = ex->n_experts, H = ex->hidden, I = ex->inter;
    if (H % MM_K || I % MM_K || E > 1024 || E <= 0 || !aligned16(x) || !aligned16(act)) return false;
    // every expert bf16 (16-byte rows for cp.async), or every one Q8_0 (2-byte reads)
    const bool q8 = ex->gate[0].dtype == LM_DTYPE_Q8_0;
    for (int e = 0; e < E; e++) {
        const lm_matrix *ms[3] = {&ex->gate[e], &ex->up[e], &ex->down[e]};
        for (int i = 0; i < 3; i++) {
            uintptr_t p = (uintptr_t)lm_cuda_ptr(ms[i]->data);
            bool ok = q8 ? ms[i]->dtype == LM_DTYPE_Q8_0 && p % 2 == 0 : ms[i]->dtype == LM_DTYPE_BF16 && p % 16 == 0;
            if (!ok) return false;
        }
    }
    if (E <= 64)
        (q8 ? run_tiles<64, true> : run_tiles<64, false>)(be, act, y, x, order, start, tile_expert, tile_first,
                                                          tile_count, pairs, top_k, ex);
    else if (E <= 256)
        (q8 ? run_tiles<256, true> : run_tiles<256, false>)(be, act, y, x, order, start, tile_expert, tile_first,
                                                            tile_count, pairs, top_k, ex);
    else
        (q8 ? run_tiles<1024, true> : run_tiles<1024, false>)(be, act, y, x, order, start, tile_expert, tile_first,
                                                              tile_count, pairs, top_k, ex);
    return true;
}
