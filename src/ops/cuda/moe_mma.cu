// The routed experts on the tensor cores, for bf16 compute: each expert's
// pairs (tokens routed to it, sorted by moe.cu's counting sort) times its
// matrices as a small GEMM with mma.sync, so an expert's weights are read
// once per tile of 64 pairs instead of once per pair and row by a warp.
//
// Two kernels, every expert in one launch: gate | up (act = silu(x·gateᵀ) ⊙
// x·upᵀ, both products in one block so x is staged once) and down (y =
// act·downᵀ).  A block takes one tile of up to 128 pairs of one expert
// from the list moe.cu's sort made, so the grid has about pairs / 128 +
// experts rows of blocks, not experts x the most pairs one could have.
// (Waves of 256-512 pairs, launched one after another, kept the GPU a
// tenth busy: a 35B-A3B prefill step of 512 tokens took 2.1 ms a layer for
// gate | up.)  128 pairs, not 64: a 35B-A3B prefill step of 2048 tokens
// gives an expert about 64 of them, so tiles of 64 read most experts'
// weights twice, and L2, not HBM, was the kernels' busiest unit.
//
// A gate | up block computes 128 pairs x 128 outputs (of each of gate and
// up), its sixteen warps 32 x 32 each; a down block half a tile, 64 pairs x
// 128 outputs in eight warps (two blocks an SM: down's 16-warp blocks were
// slower, 401 against 348 us); a warp whose pairs are all past the tile's
// end only stages.  Both operands are bf16 in memory: x is
// rounded once a call, before the gate | up kernel, and gate | up writes
// act rounded (the values the products used to round as they read them,
// so the same bits).  Rows and weights go to shared memory by cp.async,
// MM_STAGES steps of 32 columns in flight, and to the warps' fragments by
// ldmatrix.  (The first version, 64 x 64 tiles of four warps with float32
// rows rounded at every fragment load, read as many activation bytes from
// L2 as weight bytes and ran a 35B-A3B prefill step's gate | up at about
// 100 TFLOP/s.)  Each accumulator sums its k steps in order, as before.
// A pair's outputs do not depend on the pairs beside it.
//
// int8 experts (Q8): a step's 32 columns of a weight row are one Q8_0
// block, which a thread pair reads (a half-block each: its scale and 8
// 2-byte loads) and writes to shared memory as bf16 s·q (rounded: 2^-9 of
// a weight at most, bf16 compute's precision).  Plain loads, not cp.async:
// they are issued with the later step's staging, before this step's
// products, and other blocks on the SM cover their latency.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_state.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define MM_TILE LM_CUDA_MOE_MMA_TILE /* pairs of a sorted tile, and of a gate | up block */
#define MM_N 128            /* outputs of a block (of each kind) */
#define MM_K 32             /* columns a step */
#define MM_STAGES 4         /* steps staged: 3 in flight while one is used */
#define MM_DOWN_PAIRS 64    /* pairs of a down block: half a tile */
#define MM_LD (MM_K + 8)    /* bf16 row stride: 80 bytes, so ldmatrix's 8 rows hit distinct banks */

static_assert(MM_N == 128 && MM_TILE % MM_DOWN_PAIRS == 0 && MM_DOWN_PAIRS % 32 == 0, "the warp grid below");

// A block of PAIRS pairs has PAIRS / 32 x 4 warps of 32 pairs x 32 outputs:
// gate | up 128 pairs (16 warps, one block an SM), down 64 (8 warps, two an
// SM).  Measured on a 35B-A3B prefill step (PERF.md session 21): gate | up
// 692 -> 622 us from 64 to 128 pairs (an expert's weights read once), down
// 348 -> 401 us (one block an SM).
__host__ __device__ constexpr int mm_pairs(bool gate_up) { return gate_up ? MM_TILE : MM_DOWN_PAIRS; }
__host__ __device__ constexpr int mm_threads(bool gate_up) { return mm_pairs(gate_up) * 4; }

template <int MAXE, int KINDS>
struct mm_mats {
    const void *w[KINDS][MAXE];
};

template <int KINDS>
__host__ __device__ constexpr size_t mm_shared_bytes() {
    return sizeof(__nv_bfloat16) * MM_STAGES * (mm_pairs(KINDS == 2) + KINDS * MM_N) * MM_LD;
}

// Block (output tile, tile of pairs).  GATE_UP: a = x rows (bf16) of the
// pairs' tokens, K = H, N = I, out = act (bf16, rows by sorted pair); else
// a = act rows, K = I, N = H, out = y (float32, rows by pair).
template <int MAXE, bool GATE_UP, bool Q8>
__global__ static void __launch_bounds__(mm_threads(GATE_UP), MM_TILE / mm_pairs(GATE_UP))
moe_mma_kernel(void *out, const __nv_bfloat16 *a_rows, const int32_t *order, const int32_t *start,
               const int32_t *tile_expert, const int32_t *tile_first, const int32_t *tile_count, int top_k, int K,
               int N, const __grid_constant__ mm_mats<MAXE, GATE_UP ? 2 : 1> m) {
    lm_cuda_let_next_then_wait();
    constexpr int KINDS = GATE_UP ? 2 : 1, PAIRS = mm_pairs(GATE_UP), THREADS = mm_threads(GATE_UP),
                  PARTS = MM_TILE / PAIRS;
    extern __shared__ __align__(16) unsigned char mm_smem[];
    /* stage b: A rows [PAIRS][MM_LD], then kind k's weight rows [MM_N][MM_LD] */
    auto As = [&](int b) { return (__nv_bfloat16 *)mm_smem + (size_t)b * (PAIRS + KINDS * MM_N) * MM_LD; };
    auto Bs = [&](int b, int kind) { return As(b) + (PAIRS + kind * MM_N) * MM_LD; };
    __shared__ const __nv_bfloat16 *a_row[PAIRS]; /* pair lo + r's row of a, or NULL past the pairs */
    /* part blockIdx.y % PARTS of tile blockIdx.y / PARTS; the grid is sized
     * for the most tiles there could be */
    const int tile = blockIdx.y / PARTS, part = blockIdx.y % PARTS;
    if (tile >= *tile_count) return;
    const int e = tile_expert[tile], tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g4 = lane >> 2,
              t4 = lane & 3;
    const int lo = tile_first[tile] + part * PAIRS;
    const int hi = min(start[e + 1], min(tile_first[tile] + MM_TILE, lo + PAIRS));
    if (lo >= hi) return; /* a tile's empty part */
    const int n0 = blockIdx.x * MM_N;
    const int wm = warp >> 2, wn = warp & 3; /* this warp's 32 pairs and 32 outputs */
    static_assert(THREADS / 32 == PAIRS / 32 * 4, "wm and wn: PAIRS / 32 x 4 warps");

    if (tid < PAIRS) {
        int p = lo + tid;
        a_row[tid] = p >= hi  ? nullptr
                     : GATE_UP ? a_rows + (int64_t)(order[p] / top_k) * K
                               : a_rows + (int64_t)p * K;
    }
    __syncthreads();
    // Queues step k0's columns into stage b (the Q8 weights written now).
    auto stage = [&](int b, int k0) {
        { /* a: PAIRS rows of 4 x 16 bytes, one copy a thread */
            static_assert(PAIRS * (MM_K / 8) == THREADS, "one copy of a a thread");
            int r = tid / (MM_K / 8), c = (tid % (MM_K / 8)) * 8;
            const __nv_bfloat16 *row = a_row[r];
            lm_copy_async16(&As(b)[r * MM_LD + c], row ? row + k0 + c : a_rows, row != nullptr);
        }
        if (Q8) { /* row r's block k0 / 32: half-block h by a thread */
            static_assert(MM_K == LM_Q8_BLOCK, "a step is one Q8_0 block");
            for (int i = tid; i < KINDS * MM_N * 2; i += THREADS) {
                const int kind = i / (MM_N * 2), r = (i / 2) % MM_N, h = i % 2;
                uint4 lo4 = make_uint4(0, 0, 0, 0), hi4 = lo4;
                if (n0 + r < N) {
                    const uint8_t *row = (const uint8_t *)m.w[kind][e] +
                                         (int64_t)(n0 + r) * (K / LM_Q8_BLOCK) * LM_Q8_BLOCK_BYTES;
                    uint32_t q[LM_Q8_HALF / 2];
                    float s = lm_q8_half_load(row, (int64_t)(k0 / LM_Q8_BLOCK) * 2 + h, q);
                    uint32_t v[LM_Q8_HALF / 2];
#pragma unroll
                    for (int j = 0; j < LM_Q8_HALF / 2; j++)
                        v[j] = lm_pack_bf16(s * (float)(int8_t)(q[j] & 0xffu), s * (float)(int8_t)(q[j] >> 8));
                    lo4 = make_uint4(v[0], v[1], v[2], v[3]);
                    hi4 = make_uint4(v[4], v[5], v[6], v[7]);
                }
                uint4 *dst = (uint4 *)&Bs(b, kind)[r * MM_LD + h * LM_Q8_HALF];
                dst[0] = lo4;
                dst[1] = hi4;
            }
        } else {
            for (int i = tid; i < KINDS * MM_N * (MM_K / 8); i += THREADS) { /* weights: 8 bf16 a copy */
                const int kind = i / (MM_N * (MM_K / 8)), r = (i / (MM_K / 8)) % MM_N, c = (i % (MM_K / 8)) * 8;
                const __nv_bfloat16 *w = (const __nv_bfloat16 *)m.w[kind][e];
                bool in = n0 + r < N;
                lm_copy_async16(&Bs(b, kind)[r * MM_LD + c], in ? w + (int64_t)(n0 + r) * K + k0 + c : w, in);
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

    const int steps = K / MM_K;
#pragma unroll
    for (int b = 0; b < MM_STAGES - 1; b++) {
        if (b < steps)
            stage(b, b * MM_K);
        else
            lm_copy_async_commit(); /* empty groups: the waits below count the same */
    }
    // ldmatrix rows: A's lane l gives row l % 16 at column 8 (l / 16) (the
    // fragment's four 8 x 8 quarters in mma's order); B's gives output
    // l % 8 + 8 (l / 16) at column 8 (l / 8 % 2): two 8-output tiles.
    const int a_r = lane & 15, a_c = (lane >> 4) * 8;
    const int b_r = (lane & 7) + ((lane >> 4) << 3), b_c = ((lane >> 3) & 1) * 8;
    // This warp's 16-pair halves that hold pairs (0, 1 or 2): an expert's
    // last tile is often nearly empty, and its empty halves skip their
    // fragments and products (the same for the whole warp, so ldmatrix's
    // and mma's warp-wide forms stay whole).
    const int rows_here = hi - lo - wm * 32, halves = rows_here <= 0 ? 0 : rows_here <= 16 ? 1 : 2;
    for (int step = 0; step < steps; step++) {
        const int cur = step % MM_STAGES;
        lm_copy_async_wait_pending<MM_STAGES - 2>();
        __syncthreads(); /* this step's stage landed; every warp is done with the stage refilled below */
        if (step + MM_STAGES - 1 < steps)
            stage((step + MM_STAGES - 1) % MM_STAGES, (step + MM_STAGES - 1) * MM_K);
        else
            lm_copy_async_commit();
        if (halves == 0) continue;
        const __nv_bfloat16 *A = As(cur);
#pragma unroll
        for (int kc = 0; kc < MM_K / 16; kc++) {
            uint32_t af[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                if (mt < halves) lm_load_matrix_x4(af[mt], &A[(wm * 32 + mt * 16 + a_r) * MM_LD + kc * 16 + a_c]);
#pragma unroll
            for (int kind = 0; kind < KINDS; kind++) {
                const __nv_bfloat16 *B = Bs(cur, kind);
#pragma unroll
                for (int np = 0; np < 2; np++) { /* output tiles 2np, 2np + 1 */
                    uint32_t bf[4];
                    lm_load_matrix_x4(bf, &B[(wn * 32 + np * 16 + b_r) * MM_LD + kc * 16 + b_c]);
#pragma unroll
                    for (int h = 0; h < 2; h++)
#pragma unroll
                        for (int mt = 0; mt < 2; mt++)
                            if (mt < halves)
                                lm_mma_bf16_16816(acc[kind][mt][2 * np + h], af[mt], bf[2 * h], bf[2 * h + 1]);
                }
            }
        }
    }

#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int p = lo + wm * 32 + mt * 16 + g4 + 8 * half;
            if (p >= hi) continue;
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                int o = n0 + wn * 32 + nt * 8 + 2 * t4; /* o and o + 1: N is a multiple of 32 */
                if (o >= N) continue;
                const float *c0 = &acc[0][mt][nt][2 * half];
                if (GATE_UP) {
                    const float *c1 = &acc[KINDS - 1][mt][nt][2 * half];
                    *(uint32_t *)((__nv_bfloat16 *)out + (int64_t)p * N + o) =
                        lm_pack_bf16(lm_silu(c0[0]) * c1[0], lm_silu(c0[1]) * c1[1]);
                } else {
                    *(float2 *)((float *)out + (int64_t)order[p] * N + o) = make_float2(c0[0], c0[1]);
                }
            }
        }
}

// act16: the scratch's SwiGLU region, float32 pairs x I or more
// (lm_moe_wave_floats), which holds act in bf16 (pairs x I) and x in bf16
// (n x H) after it: 2 pairs I + 2 n H bytes <= 4 pairs I + 4 n H.
template <int MAXE, bool Q8>
static void run_tiles(lm_backend *be, void *act16, float *y, const float *x, int n, const int32_t *order,
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
    int64_t most_tiles = (pairs + MM_TILE - 1) / MM_TILE + (E < pairs ? E : pairs);
    const int64_t down_blocks = most_tiles * (MM_TILE / MM_DOWN_PAIRS);
    if (down_blocks > 65535) { /* a grid's y limit: 4 M pairs a step, far past any step budget */
        lm_cuda_note_error(be, cudaErrorInvalidValue, "moe_experts (more than 65535 blocks of pairs)");
        return;
    }
    __nv_bfloat16 *act = (__nv_bfloat16 *)act16, *x16 = act + (size_t)pairs * I;
    lm_cuda_round_to_bf16(be, "moe_experts (x to bf16)", x16, x, (int64_t)n * H);
    lm_cuda_launch(be, "moe_experts (gate, up; tensor cores)", moe_mma_kernel<MAXE, true, Q8>,
                   dim3(lm_cuda_blocks(I, MM_N), (unsigned)most_tiles), mm_threads(true), mm_shared_bytes<2>(),
                   (void *)act, x16, order, start, tile_expert, tile_first, tile_count, top_k, H, I, gu);
    lm_cuda_launch(be, "moe_experts (down; tensor cores)", moe_mma_kernel<MAXE, false, Q8>,
                   dim3(lm_cuda_blocks(H, MM_N), (unsigned)down_blocks), mm_threads(false), mm_shared_bytes<1>(),
                   (void *)y, act, order, start, tile_expert, tile_first, tile_count, top_k, I, H, dn);
}

// Sets the two kernels' dynamic shared memory above the default 48 KB;
// false (the error cleared: not sticky) when the device refuses.
template <int MAXE, bool Q8>
static bool allow_shared(lm_backend *be) {
    lm_cuda_use_device(lm_cuda_state_of(be)); /* the attribute is the current GPU's */
    if (cudaFuncSetAttribute(moe_mma_kernel<MAXE, true, Q8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)mm_shared_bytes<2>()) == cudaSuccess &&
        cudaFuncSetAttribute(moe_mma_kernel<MAXE, false, Q8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)mm_shared_bytes<1>()) == cudaSuccess)
        return true;
    (void)cudaGetLastError();
    return false;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Every expert bf16 (16-byte rows for cp.async), or every one Q8_0 (2-byte reads).
static bool experts_fit(const lm_moe_experts *ex, bool q8) {
    for (int e = 0; e < ex->n_experts; e++) {
        const lm_matrix *ms[3] = {&ex->gate[e], &ex->up[e], &ex->down[e]};
        for (int i = 0; i < 3; i++) {
            uintptr_t p = (uintptr_t)lm_cuda_ptr(ms[i]->data);
            bool ok = q8 ? ms[i]->dtype == LM_DTYPE_Q8_0 && p % 2 == 0 : ms[i]->dtype == LM_DTYPE_BF16 && p % 16 == 0;
            if (!ok) return false;
        }
    }
    return true;
}

extern "C" bool lm_cuda_moe_mma_takes(lm_backend *be, const float *x, const float *act, const lm_moe_experts *ex) {
    int E = ex->n_experts, H = ex->hidden, I = ex->inter;
    if (H % MM_K || I % MM_K || E > 1024 || E <= 0 || !aligned16(x) || !aligned16(act)) return false;
    const bool q8 = ex->gate[0].dtype == LM_DTYPE_Q8_0;
    if (!experts_fit(ex, q8)) return false;
    if (E <= 64) return q8 ? allow_shared<64, true>(be) : allow_shared<64, false>(be);
    if (E <= 256) return q8 ? allow_shared<256, true>(be) : allow_shared<256, false>(be);
    return q8 ? allow_shared<1024, true>(be) : allow_shared<1024, false>(be);
}

extern "C" void lm_cuda_moe_experts_mma(lm_backend *be, float *act, float *y, const float *x, int n,
                                        const int32_t *order, const int32_t *start, const int32_t *tile_expert,
                                        const int32_t *tile_first, const int32_t *tile_count, int pairs, int top_k,
                                        const lm_moe_experts *ex) {
    const int E = ex->n_experts;
    const bool q8 = ex->gate[0].dtype == LM_DTYPE_Q8_0;
    if (E <= 64)
        (q8 ? run_tiles<64, true> : run_tiles<64, false>)(be, act, y, x, n, order, start, tile_expert, tile_first,
                                                          tile_count, pairs, top_k, ex);
    else if (E <= 256)
        (q8 ? run_tiles<256, true> : run_tiles<256, false>)(be, act, y, x, n, order, start, tile_expert, tile_first,
                                                            tile_count, pairs, top_k, ex);
    else
        (q8 ? run_tiles<1024, true> : run_tiles<1024, false>)(be, act, y, x, n, order, start, tile_expert,
                                                              tile_first, tile_count, pairs, top_k, ex);
}
