// Mixture of experts (ops.h, model-spec §B.2, §E.2.4): routing, one block
// per token, and the routed experts, first versions.
//
// moe_experts sorts the step's (token, slot) pairs by expert (a counting
// sort on the device), then takes the sorted pairs in waves of
// lm_moe_wave_rows: per wave one kernel computes silu(x·gateᵀ) ⊙ x·upᵀ and
// one the down projection, each a grid of (row tile, sorted tile) blocks,
// a sorted tile being up to LM_CUDA_MOE_TILE pairs of one expert (the
// sort lists them), so an expert's weight rows are read by one block for
// up to that many of its pairs, and untouched experts get no blocks.  Every pair's output
// row has its own place; a last kernel sums each token's rows in slot
// order with its weights, so the result depends on neither the order of
// the sort nor the waves.  The experts' matrices go to the kernels by value
// (a table of device pointers in the launch's parameters: up to 32 KB on
// Hopper with CUDA >= 12.1).
//
// Expert parallelism (ops.h: the experts given are ids [first_expert,
// first_expert + n_experts) of the layer): the sort leaves the pairs of
// other ranks' experts out, so no tile, wave or tensor-core block sees
// them and the kernels index the given experts from 0; the combine skips
// them (their output rows are never written).
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_state.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define MOE_MAX_EXPERTS 1024 /* as the reference (LM_MOE_MAX_EXPERTS) */
#define MOE_MMA_MIN_TOKENS 9

// ---------------------------------------------------------------- routing

#define ROUTE_THREADS 256

// (v, i) beats (bv, bi): i is a candidate (>= 0) and either nothing is
// held, or it is larger, or equal with the lower index.  Callers never
// offer NaN.
__device__ static bool route_better(float v, int i, float bv, int bi) {
    return i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi));
}

// The top_k largest c[i] (the lowest index on ties; -inf counts, NaN never
// wins; -1 once only NaN is left), in order of choice: lm_ref's repeated
// best_untaken, by one warp.  Each lane holds the experts lane, lane + 32,
// ... and scans them in index order keeping only a strictly larger value,
// so its candidate is its lowest index among its largest; the shuffle tree
// then prefers the larger value and, on equal values, the lower index.
// Taken experts are marked in `taken`, which only this warp reads.
__device__ static void warp_top_k(const float *c, unsigned char *taken, int n, int top_k, int *chosen) {
    int lane = threadIdx.x & 31;
    for (int j = 0; j < top_k; j++) {
        float bv = 0.0f;
        int bi = -1;
        for (int i = lane; i < n; i += 32)
            if (!taken[i] && !isnan(c[i]) && (bi < 0 || c[i] > bv)) {
                bv = c[i];
                bi = i;
            }
        for (int off = 16; off > 0; off >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (route_better(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (lane == 0) {
            chosen[j] = bi;
            if (bi >= 0) taken[bi] = 1;
        }
        __syncwarp();
    }
}

// warp_top_k for E <= 32 * ROUTE_SLOTS experts with the candidates in
// registers: lane l holds experts l, l + 32, ... as keys whose order is
// the choice's (the value as an ordered integer, -0 as +0 since the
// reference finds them equal; NaN and taken experts 0, below every number
// including -inf), and each choice is two warp reductions (the largest
// key, then the lowest index holding it) instead of a shuffle tree over
// shared memory: the same experts in the same order.
#define ROUTE_SLOTS 8

__device__ static unsigned route_key(float v) {
    if (isnan(v)) return 0u;
    unsigned b = __float_as_uint(v == 0.0f ? 0.0f : v);
    return (b & 0x80000000u) ? ~b : b | 0x80000000u; // -inf: 0x007fffff, above NaN's 0
}

__device__ static void warp_top_k_slots(const float *c, int n, int top_k, int *chosen) {
    int lane = threadIdx.x & 31;
    unsigned key[ROUTE_SLOTS];
#pragma unroll
    for (int i = 0; i < ROUTE_SLOTS; i++) key[i] = lane + 32 * i < n ? route_key(c[lane + 32 * i]) : 0u;
    for (int j = 0; j < top_k; j++) {
        // this lane's best: the largest key, the lowest index on equal keys
        unsigned best = key[0];
        int at = 0;
#pragma unroll
        for (int i = 1; i < ROUTE_SLOTS; i++)
            if (key[i] > best) best = key[i], at = i;
        unsigned top = __reduce_max_sync(0xffffffffu, best);
        unsigned index = __reduce_min_sync(0xffffffffu, best == top ? (unsigned)(lane + 32 * at) : 0xffffffffu);
        if (top == 0u) { // only NaN (or nothing) left
            if (lane == 0) chosen[j] = -1;
            continue;
        }
        if (lane == 0) chosen[j] = (int)index;
#pragma unroll
        for (int i = 0; i < ROUTE_SLOTS; i++) // the winner's slot (unrolled: the keys stay in registers)
            if ((unsigned)(lane + 32 * i) == index) key[i] = 0u;
    }
    __syncwarp();
}

__global__ static void __launch_bounds__(ROUTE_THREADS)
moe_route_kernel(int32_t *ids, float *weights, const float *logits, const float *bias, int E, int top_k,
                 int sigmoid, int groups, int topk_group, int renormalize, float scale) {
    const held_weight held_bias = bias ? hold_weight(bias, E) : held_weight{}; /* a weight: before the wait */
    lm_cuda_let_next_then_wait();
    __shared__ float s[MOE_MAX_EXPERTS], c[MOE_MAX_EXPERTS], group_score[MOE_MAX_EXPERTS];
    __shared__ unsigned char taken[MOE_MAX_EXPERTS], keep[MOE_MAX_EXPERTS];
    __shared__ float red_v[ROUTE_THREADS / 32];
    __shared__ float top_shared;
    __shared__ double sum_shared;
    __shared__ int chosen[MOE_MAX_EXPERTS];
    int t = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float *l = logits + (int64_t)t * E;

    if (!sigmoid) {
        // max ignoring NaN (fmaxf, as the reference's comparison), then
        // the sum in double in index order by one thread, as the reference
        float top = -INFINITY;
        for (int e = tid; e < E; e += blockDim.x) top = fmaxf(top, l[e]);
        for (int off = 16; off > 0; off >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, off));
        if (lane == 0) red_v[warp] = top;
        __syncthreads();
        if (tid == 0) {
            float m = -INFINITY;
            for (int w = 0; w < (int)(blockDim.x / 32); w++) m = fmaxf(m, red_v[w]);
            top_shared = m;
        }
        __syncthreads();
        top = top_shared;
        for (int e = tid; e < E; e += blockDim.x) s[e] = expf(l[e] - top);
        __syncthreads();
        // The sum in index order in double (the reference's bits), the
        // divisions by every thread (each is the same division).  When
        // every term is 0 or at least 2^-21 (a multiple of 2^-44 then) and
        // there are at most 256 (each at most 1: the largest logit's term
        // is e^0), every partial sum is a multiple of 2^-44 below 2^9,
        // which a double holds exactly: the sum is exact in any order, so
        // the first warp adds it as a tree.  Otherwise one thread walks the
        // terms in order (256 dependent adds, about a microsecond).
        bool exact = E <= 256;
        for (int e = tid; e < E; e += blockDim.x) exact = exact && (s[e] == 0.0f || s[e] >= 0x1p-21f);
        if (__syncthreads_and(exact)) {
            if (warp == 0) {
                double part = 0;
                for (int e = lane; e < E; e += 32) part += s[e];
                for (int off = 16; off > 0; off >>= 1) part += __shfl_xor_sync(0xffffffffu, part, off);
                if (lane == 0) sum_shared = part;
            }
        } else if (tid == 0) {
            double sum = 0;
            for (int e = 0; e < E; e++) sum += s[e];
            sum_shared = sum;
        }
        __syncthreads();
        double sum = sum_shared;
        for (int e = tid; e < E; e += blockDim.x) s[e] = (float)(s[e] / sum);
        __syncthreads();
    } else {
        for (int e = tid; e < E; e += blockDim.x) s[e] = 1.0f / (1.0f + expf(-l[e]));
        __syncthreads();
    }
#pragma unroll NORM_W_HELD
    for (int e = tid, kth = 0; e < E; e += blockDim.x, kth++) {
        c[e] = s[e] + (bias ? weight_at(held_bias, bias, kth, e) : 0.0f);
        taken[e] = 0;
    }
    __syncthreads();

    if (groups > 1) {
        for (int e = tid; e < E; e += blockDim.x) keep[e] = 0; /* experts past the last whole group too */
        __syncthreads();
        // each group scored by its two largest choices; the best
        // topk_group groups stay, the rest leave the selection
        int per_group = E / groups;
        for (int g = tid; g < groups; g += blockDim.x) {
            const float *cg = c + g * per_group;
            int a = -1, b = -1;
            for (int i = 0; i < per_group; i++)
                if (!isnan(cg[i]) && (a < 0 || cg[i] > cg[a])) a = i;
            for (int i = 0; i < per_group; i++)
                if (i != a && !isnan(cg[i]) && (b < 0 || cg[i] > cg[b])) b = i;
            group_score[g] = (a >= 0 ? cg[a] : -INFINITY) + (b >= 0 ? cg[b] : 0.0f);
        }
        __syncthreads();
        if (tid == 0) {
            for (int kept = 0; kept < topk_group && kept < groups; kept++) {
                int best = -1;
                for (int g = 0; g < groups; g++)
                    if (!keep[g] && !isnan(group_score[g]) && (best < 0 || group_score[g] > group_score[best]))
                        best = g;
                if (best < 0) break;
                keep[best] = 1;
            }
        }
        __syncthreads();
        for (int e = tid; e < E; e += blockDim.x)
            if (!keep[e / per_group]) c[e] = -INFINITY;
        __syncthreads();
    }

    int32_t *ids_t = ids + (int64_t)t * top_k;
    float *w_t = weights + (int64_t)t * top_k;
    if (warp == 0) {
        if (E <= 32 * ROUTE_SLOTS) warp_top_k_slots(c, E, top_k, chosen);
        else warp_top_k(c, taken, E, top_k, chosen);
    }
    __syncthreads();
    // each slot's weight by its own thread: the sum in slot order (the
    // same bits on every thread), then its division
    for (int j = tid; j < top_k; j += blockDim.x) {
        double sum = 0;
        for (int i = 0; i < top_k; i++) sum += s[chosen[i] < 0 ? 0 : chosen[i]];
        int e = chosen[j] < 0 ? 0 : chosen[j]; /* only NaN left: any valid id */
        float w = s[e];
        if (renormalize) w = (float)(w / (sum + 1e-20));
        ids_t[j] = e;
        w_t[j] = w * scale;
    }
}

void lm_cuda_moe_route(lm_backend *be, lm_mem ids, lm_mem weights, lm_mem logits, int n,
                       const lm_moe_routing *r) {
    if (n <= 0 || r->top_k <= 0) return;
    if (r->n_experts > MOE_MAX_EXPERTS || r->n_experts <= 0 || r->top_k > r->n_experts) {
        lm_cuda_note_error(be, cudaErrorInvalidValue, "moe_route (more than 1024 experts, or top_k past them)");
        return;
    }
    int groups = r->n_group > 1 ? r->n_group : 1;
    const float *bias = r->correction_bias.buffer ? lm_cuda_f32(r->correction_bias) : NULL;
    lm_cuda_launch(be, "moe_route", moe_route_kernel, n, ROUTE_THREADS, 0, lm_cuda_i32(ids),
                   lm_cuda_f32(weights), lm_cuda_f32(logits), bias, r->n_experts, r->top_k,
                   r->scoring == LM_MOE_SIGMOID, groups, r->topk_group, r->renormalize, r->scale);
}

// ---------------------------------------------------------------- experts

#define SORT_THREADS 1024
static_assert(MOE_MAX_EXPERTS <= SORT_THREADS, "the sort gives each expert a thread");

// Exclusive prefix sums over the block of one value a thread (a and b at
// once), and their totals; every thread gets its own and the totals.
__device__ static void block_scan2(int a, int b, int *a_before, int *b_before, int *a_total, int *b_total) {
    __shared__ int warp_a[32], warp_b[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (int)(blockDim.x + 31) / 32;
    int ia = a, ib = b; // inclusive sums within the warp
    for (int off = 1; off < 32; off *= 2) {
        int ya = __shfl_up_sync(0xffffffffu, ia, off), yb = __shfl_up_sync(0xffffffffu, ib, off);
        if (lane >= off) ia += ya, ib += yb;
    }
    if (lane == 31) warp_a[warp] = ia, warp_b[warp] = ib;
    __syncthreads();
    if (warp == 0) { // the warps' totals, summed inclusively
        int va = lane < warps ? warp_a[lane] : 0, vb = lane < warps ? warp_b[lane] : 0;
        for (int off = 1; off < 32; off *= 2) {
            int ya = __shfl_up_sync(0xffffffffu, va, off), yb = __shfl_up_sync(0xffffffffu, vb, off);
            if (lane >= off) va += ya, vb += yb;
        }
        warp_a[lane] = va, warp_b[lane] = vb;
    }
    __syncthreads();
    *a_before = (warp > 0 ? warp_a[warp - 1] : 0) + ia - a;
    *b_before = (warp > 0 ? warp_b[warp - 1] : 0) + ib - b;
    *a_total = warp_a[warps - 1], *b_total = warp_b[warps - 1];
    __syncthreads(); // the sums may be reused
}

// Counting sort of the pairs p < pairs by expert ids[p] - first: start[e]
// .. start[e + 1] of order are given expert e's pairs (in no particular
// order); a pair whose expert is not one of the E given is in no bucket
// (start[E] counts the others).
// Thread e counts expert e (E <= SORT_THREADS); the starts and the tile
// list come from one block-wide scan (a lone thread's loop over 256
// experts took 21 us a call, 10% of a 35B-A3B decode step).
__global__ static void __launch_bounds__(SORT_THREADS)
moe_sort_kernel(int32_t *order, int32_t *start, int32_t *tile_expert, int32_t *tile_first, int32_t *tile_count,
                const int32_t *ids, int pairs, int E, int first, int tile) {
    lm_cuda_let_next_then_wait();
    __shared__ int count[MOE_MAX_EXPERTS], next[MOE_MAX_EXPERTS];
    int tid = threadIdx.x;
    for (int e = tid; e < E; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int p = tid; p < pairs; p += blockDim.x) {
        unsigned e = (unsigned)(ids[p] - first); // below first wraps past E
        if (e < (unsigned)E) atomicAdd(&count[e], 1);
    }
    __syncthreads();
    int c = tid < E ? count[tid] : 0, tiles = (c + tile - 1) / tile;
    int at, tile0, total, total_tiles;
    block_scan2(c, tiles, &at, &tile0, &total, &total_tiles);
    if (tid < E) {
        start[tid] = at;
        next[tid] = at;
        /* the tensor-core and row kernels' work list: each expert's pairs in tiles */
        for (int k = 0; k < tiles; k++) {
            tile_expert[tile0 + k] = tid;
            tile_first[tile0 + k] = at + k * tile;
        }
    }
    if (tid == 0) {
        start[E] = total;
        *tile_count = total_tiles;
    }
    __syncthreads();
    for (int p = tid; p < pairs; p += blockDim.x) {
        unsigned e = (unsigned)(ids[p] - first);
        if (e < (unsigned)E) order[atomicAdd(&next[e], 1)] = p;
    }
}

// The experts' matrices of one kernel (KINDS of them: gate and up, or
// down), by expert; MAXE the capacity (the launch passes it by value).
template <int MAXE, int KINDS> struct expert_mats {
    const void *w[KINDS][MAXE];
    unsigned char dtype[KINDS][MAXE];
};

#define MOE_THREADS 256
#define MOE_WARPS (MOE_THREADS / 32) /* one output row per warp */

__device__ static float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// x · w (and x · w2 when TWO) for one row of an expert: lanes over the
// columns, then a shuffle sum.  VEC_BF16 (every expert bf16, 16-byte
// rows): 16-byte loads of 8 weights, each summed in column order (the
// scalar loop's 2-byte loads used an eighth of each memory transaction:
// decode was bound by them); gate and up rows are read in the same loop,
// so both loads are in flight at once.  VEC_Q8 (every expert Q8_0): lanes
// over half-blocks of 16 weights (lm_q8_half_load), each half-block's sum
// in column order times its scale, as the dense int8 kernel.
enum { ROW_SCALAR, VEC_BF16, VEC_Q8 };

template <int VEC, bool TWO>
__device__ static void row_dots(const void *w, int dtype, const void *w2, int dtype2, int64_t row, const float *x,
                                int n, float *out, float *out2) {
    float acc = 0.0f, acc2 = 0.0f;
    if (VEC == VEC_Q8) {
        // row = r · n elements: row r's bytes start at r · n / 32 blocks
        int64_t row_bytes = (int64_t)n / LM_Q8_BLOCK * LM_Q8_BLOCK_BYTES, r = row / n;
        const uint8_t *wr = (const uint8_t *)w + r * row_bytes, *wr2 = (const uint8_t *)w2 + r * row_bytes;
        for (int64_t h = threadIdx.x & 31; h < n / LM_Q8_HALF; h += 32) {
            uint32_t q[LM_Q8_HALF / 2], q2[LM_Q8_HALF / 2];
            float s = lm_q8_half_load(wr, h, q), s2 = TWO ? lm_q8_half_load(wr2, h, q2) : 0.0f;
            acc = __fmaf_rn(s, lm_q8_half_dot(q, x + h * LM_Q8_HALF), acc);
            if (TWO) acc2 = __fmaf_rn(s2, lm_q8_half_dot(q2, x + h * LM_Q8_HALF), acc2);
        }
    } else if (VEC == VEC_BF16) {
        const uint4 *wr = (const uint4 *)w + row / 8, *wr2 = TWO ? (const uint4 *)w2 + row / 8 : wr;
        const float4 *x4 = (const float4 *)x;
#pragma unroll 4
        for (int g = threadIdx.x & 31; g < n / 8; g += 32) {
            uint4 p = __ldg(wr + g), p2 = TWO ? __ldg(wr2 + g) : p;
            float4 a = x4[2 * g], b = x4[2 * g + 1];
            acc = lm_dot8_bf16(p, a, b, acc);
            if (TWO) acc2 = lm_dot8_bf16(p2, a, b, acc2);
        }
    } else {
        for (int i = threadIdx.x & 31; i < n; i += 32) {
            acc += lm_weight_in(w, dtype, n, row + i) * x[i];
            if (TWO) acc2 += lm_weight_in(w2, dtype2, n, row + i) * x[i];
        }
    }
    *out = warp_sum(acc);
    if (TWO) *out2 = warp_sum(acc2);
}

// The pairs of the sort's tile blockIdx.y (one expert's, at most
// LM_CUDA_MOE_TILE) within the wave [w0, w1): [*lo, *hi) of the sorted
// places; false when the block has none.  The grid covers the most tiles
// there can be; only the touched experts' tiles do work.
__device__ static bool tile_pairs(const int32_t *start, const int32_t *tile_expert, const int32_t *tile_first,
                                  const int32_t *tile_count, int w0, int w1, int *e, int *lo, int *hi) {
    int tile = blockIdx.y;
    if (tile >= *tile_count) return false;
    *e = tile_expert[tile];
    int first = tile_first[tile], last = min(first + LM_CUDA_MOE_TILE, start[*e + 1]);
    *lo = max(first, w0), *hi = min(last, w1);
    return *lo < *hi;
}

// Block (row tile, sorted tile of pairs); warp = row r of gate[e] and
// up[e].  For each of the tile's pairs at sorted places [lo, hi):
// act[(place - w0), r] = silu(x_t · gate[e][r]) · (x_t · up[e][r]).
template <int MAXE, int VEC>
__global__ static void __launch_bounds__(MOE_THREADS)
moe_gate_up_kernel(float *act, const float *x, const int32_t *order, const int32_t *start,
                   const int32_t *tile_expert, const int32_t *tile_first, const int32_t *tile_count, int top_k,
                   int H, int I, int w0, int w1, const __grid_constant__ expert_mats<MAXE, 2> m) {
    lm_cuda_let_next_then_wait();
    int e, lo, hi, r = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (r >= I || !tile_pairs(start, tile_expert, tile_first, tile_count, w0, w1, &e, &lo, &hi)) return;
    const void *gw = m.w[0][e], *uw = m.w[1][e];
    int gd = m.dtype[0][e], ud = m.dtype[1][e];
    int64_t row = (int64_t)r * H;
    for (int q = lo; q < hi; q++) {
        const float *xt = x + (int64_t)(order[q] / top_k) * H;
        float g, u;
        row_dots<VEC, true>(gw, gd, uw, ud, row, xt, H, &g, &u);
        if ((threadIdx.x & 31) == 0) act[(int64_t)(q - w0) * I + r] = lm_silu(g) * u;
    }
}

// Block (row tile, sorted tile of pairs); warp = row r of down[e] ([H, I]):
// y[pair, r] = act[(place - w0)] · down[e][r] for the tile's pairs.
template <int MAXE, int VEC>
__global__ static void __launch_bounds__(MOE_THREADS)
moe_down_kernel(float *y, const float *act, const int32_t *order, const int32_t *start, const int32_t *tile_expert,
                const int32_t *tile_first, const int32_t *tile_count, int H, int I, int w0, int w1,
                const __grid_constant__ expert_mats<MAXE, 1> m) {
    lm_cuda_let_next_then_wait();
    int e, lo, hi, r = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (r >= H || !tile_pairs(start, tile_expert, tile_first, tile_count, w0, w1, &e, &lo, &hi)) return;
    const void *dw = m.w[0][e];
    int dd = m.dtype[0][e];
    int64_t row = (int64_t)r * I;
    for (int q = lo; q < hi; q++) {
        float acc;
        row_dots<VEC, false>(dw, dd, dw, dd, row, act + (int64_t)(q - w0) * I, I, &acc, &acc);
        if ((threadIdx.x & 31) == 0) y[(int64_t)order[q] * H + r] = acc;
    }
}

// out[t]'s element: Σ_j weights[t·top_k + j] · y_j in slot order (fmaf
// after fmaf), y_j at y + j · stride, over the slots whose expert is one
// of the E given from `first` (another rank's y_j is never written).  The
// combine and the direct path's down product both sum this way, so their
// bits agree.
__device__ static float slots_sum(const int32_t *ids, const float *weights, int64_t t, int top_k, int E, int first,
                                  const float *y, int64_t stride) {
    float o = 0.0f;
    for (int j = 0; j < top_k; j++) {
        int64_t p = t * top_k + j;
        if ((unsigned)(ids[p] - first) >= (unsigned)E) continue;
        o = __fmaf_rn(weights[p], y[j * stride], o);
    }
    return o;
}

// ---- few tokens (decode): no sort, the down product and the combine in one

// A step of at most MOE_DIRECT_MAX_TOKENS tokens of at most
// MOE_DIRECT_MAX_K experts each takes its pairs as the router left them:
// each pair's expert is read by the blocks of that pair (a token's top_k
// experts are distinct, so at one token every expert is read once, as the
// sort would have it; at a few tokens an expert two of them chose is read
// twice), with no sort launch and no tile lists to read before the
// weights; and each block of the down product takes a slice of a token's
// rows for all its experts, so it also sums them with their weights (the
// combine), in slot order: no combine launch.  Every output is the same
// arithmetic in the same order as the sorted path's (row_dots' lane order
// and shuffle tree, the combine's fmaf chain), so a token's bits do not
// depend on which path its step took: batched == alone.
#define MOE_DIRECT_MAX_TOKENS 4
#define MOE_DIRECT_MAX_K 16
#define DOWN_ROWS 8 /* a warp's rows of one expert's down matrix */

// ROWS bf16 rows w[r] (n columns, 16-byte aligned) times x: row_dots<VEC_BF16>'s
// sums (lane l adds groups l, l + 32, ... in order, then warp_sum), with
// LOADS groups of every row loaded at once before any is summed, so a
// warp has ROWS x LOADS 16-byte loads in flight.
template <int ROWS, int LOADS>
__device__ static void rows_dots_bf16(const uint4 *const (&w)[ROWS], const float *x, int n, float (&out)[ROWS]) {
    int lane = threadIdx.x & 31, groups = n / 8;
    const float4 *x4 = (const float4 *)x;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.0f;
    for (int g0 = lane; g0 < groups; g0 += 32 * LOADS) {
        uint4 p[ROWS][LOADS];
#pragma unroll
        for (int u = 0; u < LOADS; u++)
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                p[r][u] = g0 + 32 * u < groups ? __ldg(w[r] + g0 + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < LOADS; u++) {
            int g = g0 + 32 * u;
            if (g < groups) {
                float4 a = x4[2 * g], b = x4[2 * g + 1];
#pragma unroll
                for (int r = 0; r < ROWS; r++) acc[r] = lm_dot8_bf16(p[r][u], a, b, acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) out[r] = warp_sum(acc[r]);
}

// Block (row tile, pair p); warp = row r of gate[e] and up[e], e pair p's
// expert: act[p, r] = silu(x_t · gate[e][r]) · (x_t · up[e][r]).
template <int MAXE, int VEC>
__global__ static void __launch_bounds__(MOE_THREADS)
moe_gate_up_direct_kernel(float *act, const float *x, const int32_t *ids, int top_k, int H, int I, int E, int first,
                          const __grid_constant__ expert_mats<MAXE, 2> m) {
    lm_cuda_let_next_then_wait();
    int p = blockIdx.y, r = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    unsigned e = (unsigned)(ids[p] - first); // another rank's expert wraps past E
    if (r >= I || e >= (unsigned)E) return;
    const float *xt = x + (int64_t)(p / top_k) * H;
    float g, u;
    if (VEC == VEC_BF16) {
        const uint4 *rows[2] = {(const uint4 *)m.w[0][e] + (int64_t)r * H / 8,
                                (const uint4 *)m.w[1][e] + (int64_t)r * H / 8};
        float both[2];
        rows_dots_bf16<2, 4>(rows, xt, H, both);
        g = both[0], u = both[1];
    } else {
        row_dots<VEC, true>(m.w[0][e], m.dtype[0][e], m.w[1][e], m.dtype[1][e], (int64_t)r * H, xt, H, &g, &u);
    }
    if ((threadIdx.x & 31) == 0) act[(int64_t)p * I + r] = lm_silu(g) * u;
}

// Block (DOWN_ROWS rows from r0, token t): warp w takes the token's slots
// j = w, w + MOE_WARPS, ... and their experts' rows r0 .. r0 + DOWN_ROWS - 1
// of down[e] ([H, I]) times act[pair]; then out[t, r] = Σ_j weights[p] ·
// y[j][r] in j order (moe_combine_kernel's chain), slots of other ranks'
// experts left out.
template <int MAXE, int VEC>
__global__ static void __launch_bounds__(MOE_THREADS)
moe_down_combine_kernel(float *out, const float *act, const int32_t *ids, const float *weights, int top_k, int H,
                        int I, int E, int first, const __grid_constant__ expert_mats<MAXE, 1> m) {
    lm_cuda_let_next_then_wait();
    __shared__ float y[MOE_DIRECT_MAX_K][DOWN_ROWS];
    int t = blockIdx.y, r0 = blockIdx.x * DOWN_ROWS, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int j = warp; j < top_k; j += MOE_WARPS) {
        int64_t p = (int64_t)t * top_k + j;
        unsigned e = (unsigned)(ids[p] - first);
        if (e >= (unsigned)E) continue; // not summed below either
        const float *a = act + p * I;
        float sums[DOWN_ROWS] = {0.0f};
        if (VEC == VEC_BF16) {
            const uint4 *rows[DOWN_ROWS];
#pragma unroll
            for (int r = 0; r < DOWN_ROWS; r++) // rows past H read row r0's again, never stored
                rows[r] = (const uint4 *)m.w[0][e] + (int64_t)(r0 + r < H ? r0 + r : r0) * I / 8;
            rows_dots_bf16<DOWN_ROWS, 2>(rows, a, I, sums);
        } else {
            for (int r = 0; r < DOWN_ROWS; r++)
                if (r0 + r < H) row_dots<VEC, false>(m.w[0][e], m.dtype[0][e], m.w[0][e], m.dtype[0][e],
                                                     (int64_t)(r0 + r) * I, a, I, &sums[r], &sums[r]);
        }
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < DOWN_ROWS; r++) y[j][r] = sums[r];
    }
    __syncthreads();
    int r = threadIdx.x;
    if (r < DOWN_ROWS && r0 + r < H)
        out[(int64_t)t * H + r0 + r] = slots_sum(ids, weights, t, top_k, E, first, &y[0][r], DOWN_ROWS);
}

// out[t] = Σ_j weights[t, j] · y[t·top_k + j], in j order, over the
// slots whose expert is one of the E given from `first`.  Blocks along x
// take slices of a token's columns (one block a token left a decode step's
// 8 x H reads to one SM), y the tokens.  QUADS: a thread takes 4 columns
// with 16-byte loads (H a multiple of 4, out and y 16-byte aligned): a
// quarter of the threads, ids and weights loads, the same sums.
template <bool QUADS>
__global__ static void moe_combine_kernel(float *out, const float *y, const float *weights, const int32_t *ids,
                                          int n, int top_k, int H, int E, int first) {
    lm_cuda_let_next_then_wait();
    constexpr int W = QUADS ? 4 : 1;
    for (int64_t t = blockIdx.y; t < n; t += gridDim.y) {
        for (int c = (blockIdx.x * blockDim.x + threadIdx.x) * W; c < H; c += gridDim.x * blockDim.x * W) {
            if (!QUADS) {
                out[t * H + c] = slots_sum(ids, weights, t, top_k, E, first, y + t * top_k * H + c, H);
                continue;
            }
            float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f); /* slots_sum's chain, four columns at once */
            for (int j = 0; j < top_k; j++) {
                int64_t p = t * top_k + j;
                if ((unsigned)(ids[p] - first) >= (unsigned)E) continue;
                const float w = weights[p];
                const float4 v = *(const float4 *)(y + (t * top_k + j) * H + c);
                o.x = __fmaf_rn(w, v.x, o.x);
                o.y = __fmaf_rn(w, v.y, o.y);
                o.z = __fmaf_rn(w, v.z, o.z);
                o.w = __fmaf_rn(w, v.w, o.w);
            }
            *(float4 *)(out + t * H + c) = o;
        }
    }
}

// The experts' matrices as the kernels take them, and which row code
// fits them all: VEC_BF16 (every matrix bf16 with 16-byte rows and x, act
// 16-byte aligned), VEC_Q8 (every matrix Q8_0), else ROW_SCALAR.
template <int MAXE> struct expert_tables {
    expert_mats<MAXE, 2> gu;
    expert_mats<MAXE, 1> dn;
    int vec;
};

template <int MAXE>
static void expert_tables_make(expert_tables<MAXE> *t, const float *act, const float *x, const lm_moe_experts *ex) {
    int E = ex->n_experts, H = ex->hidden, I = ex->inter;
    memset(t, 0, sizeof *t); // every byte is a kernel argument the queue compares (launch.h)
    bool vec = H % 8 == 0 && I % 8 == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)act % 16) == 0;
    // int8 experts: scratch rows (act) and x 16-byte aligned, as the bf16 test
    bool q8 = H % LM_Q8_BLOCK == 0 && I % LM_Q8_BLOCK == 0 && ((uintptr_t)x % 16) == 0 &&
              ((uintptr_t)act % 16) == 0;
    for (int e = 0; e < E; e++) {
        t->gu.w[0][e] = lm_cuda_ptr(ex->gate[e].data);
        t->gu.dtype[0][e] = (unsigned char)ex->gate[e].dtype;
        t->gu.w[1][e] = lm_cuda_ptr(ex->up[e].data);
        t->gu.dtype[1][e] = (unsigned char)ex->up[e].dtype;
        t->dn.w[0][e] = lm_cuda_ptr(ex->down[e].data);
        t->dn.dtype[0][e] = (unsigned char)ex->down[e].dtype;
        for (int k = 0; k < 2; k++)
            vec = vec && t->gu.dtype[k][e] == LM_DTYPE_BF16 && ((uintptr_t)t->gu.w[k][e] % 16) == 0;
        vec = vec && t->dn.dtype[0][e] == LM_DTYPE_BF16 && ((uintptr_t)t->dn.w[0][e] % 16) == 0;
        for (int k = 0; k < 2; k++)
            q8 = q8 && t->gu.dtype[k][e] == LM_DTYPE_Q8_0 && ((uintptr_t)t->gu.w[k][e] % 2) == 0;
        q8 = q8 && t->dn.dtype[0][e] == LM_DTYPE_Q8_0 && ((uintptr_t)t->dn.w[0][e] % 2) == 0;
    }
    t->vec = vec ? VEC_BF16 : q8 ? VEC_Q8 : ROW_SCALAR;
}

// The sorted path: waves of the sorted pairs, each a gate-up and a down
// launch over the sort's tiles; every pair's output row in y.
template <int MAXE, int VEC>
static void run_sorted(lm_backend *be, float *act, float *y, const float *x, const int32_t *order,
                       const int32_t *start, const int32_t *tile_expert, const int32_t *tile_first,
                       const int32_t *tile_count, int pairs, int wave, int top_k, const lm_moe_experts *ex,
                       const expert_tables<MAXE> *t) {
    int E = ex->n_experts, H = ex->hidden, I = ex->inter;
    // The sort's tiles: one per touched expert and LM_CUDA_MOE_TILE of its
    // pairs, so at most this many (a decode step of top_k pairs: top_k).
    int64_t tiles = (pairs + LM_CUDA_MOE_TILE - 1) / LM_CUDA_MOE_TILE + (pairs < E ? pairs : E);
    if (tiles > 65535) { // a grid's y limit: 4 M pairs a step, far past any step budget
        lm_cuda_note_error(be, cudaErrorInvalidValue, "moe_experts (more than 65535 tiles of pairs)");
        return;
    }
    static const char *const names[][2] = {{"moe_experts (gate, up)", "moe_experts (down)"},
                                           {"moe_experts (gate, up)", "moe_experts (down)"},
                                           {"moe_experts (gate, up; int8)", "moe_experts (down; int8)"}};
    unsigned grid_y = (unsigned)tiles;
    for (int w0 = 0; w0 < pairs; w0 += wave) {
        int w1 = w0 + wave < pairs ? w0 + wave : pairs;
        dim3 gu_grid(lm_cuda_blocks(I, MOE_WARPS), grid_y), dn_grid(lm_cuda_blocks(H, MOE_WARPS), grid_y);
        lm_cuda_launch(be, names[VEC][0], moe_gate_up_kernel<MAXE, VEC>, gu_grid, MOE_THREADS, 0, act, x, order,
                       start, tile_expert, tile_first, tile_count, top_k, H, I, w0, w1, t->gu);
        lm_cuda_launch(be, names[VEC][1], moe_down_kernel<MAXE, VEC>, dn_grid, MOE_THREADS, 0, y, act, order, start,
                       tile_expert, tile_first, tile_count, H, I, w0, w1, t->dn);
    }
}

// The direct path (MOE_DIRECT_MAX_TOKENS): act [pairs, I], out [n, H].
template <int MAXE, int VEC>
static void run_direct(lm_backend *be, float *out, float *act, const float *x, const int32_t *ids,
                       const float *weights, int n, int top_k, const lm_moe_experts *ex, const expert_tables<MAXE> *t) {
    int E = ex->n_experts, H = ex->hidden, I = ex->inter, first = ex->first_expert;
    static const char *const names[][2] = {{"moe_experts (gate, up; direct)", "moe_experts (down, combine)"},
                                           {"moe_experts (gate, up; direct)", "moe_experts (down, combine)"},
                                           {"moe_experts (gate, up; direct, int8)", "moe_experts (down, combine; int8)"}};
    dim3 gu_grid(lm_cuda_blocks(I, MOE_WARPS), (unsigned)(n * top_k)), dn_grid(lm_cuda_blocks(H, DOWN_ROWS), n);
    lm_cuda_launch(be, names[VEC][0], moe_gate_up_direct_kernel<MAXE, VEC>, gu_grid, MOE_THREADS, 0, act, x, ids,
                   top_k, H, I, E, first, t->gu);
    lm_cuda_launch(be, names[VEC][1], moe_down_combine_kernel<MAXE, VEC>, dn_grid, MOE_THREADS, 0, out, act, ids,
                   weights, top_k, H, I, E, first, t->dn);
}

// The experts of a step whose pairs are sorted (sorted) or not (direct:
// out written here; else y, for the combine).
template <int MAXE>
static void run_experts(lm_backend *be, bool direct, float *out, float *act, float *y, const float *x,
                        const int32_t *ids, const float *weights, int n, const int32_t *order, const int32_t *start,
                        const int32_t *tile_expert, const int32_t *tile_first, const int32_t *tile_count, int pairs,
                        int wave, int top_k, const lm_moe_experts *ex) {
    expert_tables<MAXE> t;
    expert_tables_make(&t, act, x, ex);
    if (direct) {
        if (t.vec == VEC_BF16) run_direct<MAXE, VEC_BF16>(be, out, act, x, ids, weights, n, top_k, ex, &t);
        else if (t.vec == VEC_Q8) run_direct<MAXE, VEC_Q8>(be, out, act, x, ids, weights, n, top_k, ex, &t);
        else run_direct<MAXE, ROW_SCALAR>(be, out, act, x, ids, weights, n, top_k, ex, &t);
        return;
    }
    if (t.vec == VEC_BF16)
        run_sorted<MAXE, VEC_BF16>(be, act, y, x, order, start, tile_expert, tile_first, tile_count, pairs, wave,
                                   top_k, ex, &t);
    else if (t.vec == VEC_Q8)
        run_sorted<MAXE, VEC_Q8>(be, act, y, x, order, start, tile_expert, tile_first, tile_count, pairs, wave,
                                 top_k, ex, &t);
    else
        run_sorted<MAXE, ROW_SCALAR>(be, act, y, x, order, start, tile_expert, tile_first, tile_count, pairs, wave,
                                     top_k, ex, &t);
}

void lm_cuda_moe_experts(lm_backend *be, lm_mem out, lm_mem x, int n, lm_mem ids, lm_mem weights, int top_k,
                         const lm_moe_experts *ex, lm_mem scratch) {
    int E = ex->n_experts, H = ex->hidden, I = ex->inter;
    if (n <= 0 || H <= 0) return;
    if (top_k <= 0 || E <= 0 || I <= 0) { /* an empty sum */
        lm_cuda_enqueue_fill(be, "moe_experts", lm_cuda_ptr(out), 0, sizeof(float) * (size_t)n * H);
        return;
    }
    if (E > MOE_MAX_EXPERTS) {
        lm_cuda_note_error(be, cudaErrorInvalidValue, "moe_experts (more than 1024 experts)");
        return;
    }
    // scratch (ops.h's lm_moe_scratch_bytes): the SwiGLU rows of a wave
    // [wave, I] (for the tensor cores, every pair's in bf16 and x in bf16
    // after them: moe_mma.cu) within lm_moe_wave_floats | per-pair outputs
    // [pairs, H] | pair order [pairs] | expert starts [E + 1] | tiles'
    // experts and first pairs [pairs + E] each, and their count
    size_t pairs = (size_t)n * (size_t)top_k, wave = lm_moe_wave_rows(n, top_k);
    float *act = lm_cuda_f32(scratch);
    float *y = act + lm_moe_wave_floats(n, top_k, ex);
    int32_t *order = (int32_t *)(y + pairs * (size_t)H), *start = order + pairs;
    int32_t *tile_expert = start + E + 1, *tile_first = tile_expert + pairs + E, *tile_count = tile_first + pairs + E;
    const float *xf = lm_cuda_f32(x), *wf = lm_cuda_f32(weights);
    const int32_t *idf = lm_cuda_i32(ids);
    bool direct = n <= MOE_DIRECT_MAX_TOKENS && top_k <= MOE_DIRECT_MAX_K;
    // bf16 compute, bf16 experts, 9 tokens or more (as the dense products'
    // cuBLASLt threshold): the tensor-core kernels (moe_mma.cu), on tiles
    // of their own size.  Below it a step reads each touched expert once
    // either way, and the warp-per-row kernels below measured faster
    // (35B-A3B decode 96.5 tokens/s against 85.6 on an H200).
    bool mma =
        lm_cuda_state_of(be)->blas_matmul && n >= MOE_MMA_MIN_TOKENS && lm_cuda_moe_mma_takes(be, xf, act, ex);
    if (!direct)
        lm_cuda_launch(be, "moe_experts (sort)", moe_sort_kernel, 1, SORT_THREADS, 0, order, start, tile_expert,
                       tile_first, tile_count, idf, (int)pairs, E, ex->first_expert,
                       mma ? LM_CUDA_MOE_MMA_TILE : LM_CUDA_MOE_TILE);
    if (mma)
        lm_cuda_moe_experts_mma(be, act, y, xf, n, order, start, tile_expert, tile_first, tile_count, (int)pairs,
                                top_k, ex);
    else if (E <= 64)
        run_experts<64>(be, direct, lm_cuda_f32(out), act, y, xf, idf, wf, n, order, start, tile_expert, tile_first,
                        tile_count, (int)pairs, (int)wave, top_k, ex);
    else if (E <= 256)
        run_experts<256>(be, direct, lm_cuda_f32(out), act, y, xf, idf, wf, n, order, start, tile_expert, tile_first,
                         tile_count, (int)pairs, (int)wave, top_k, ex);
    else
        run_experts<MOE_MAX_EXPERTS>(be, direct, lm_cuda_f32(out), act, y, xf, idf, wf, n, order, start, tile_expert,
                                     tile_first, tile_count, (int)pairs, (int)wave, top_k, ex);
    if (direct) return; // the down launch summed the slots
    const bool quads = H % 4 == 0 && (uintptr_t)lm_cuda_ptr(out) % 16 == 0 && (uintptr_t)y % 16 == 0;
    dim3 combine_grid(lm_cuda_blocks(quads ? H / 4 : H, MOE_THREADS), (unsigned)(n < 65535 ? n : 65535));
    lm_cuda_launch(be, "moe_experts (combine)", quads ? moe_combine_kernel<true> : moe_combine_kernel<false>,
                   combine_grid, MOE_THREADS, 0, lm_cuda_f32(out), y, wf, idf, (int)n, top_k, H, E,
                   ex->first_expert);
}
