// Gated DeltaNet (model-spec §A.7): the gates, the causal depthwise conv
// with its state window, and the gated delta rule in its recurrent form.
// The recurrent form serves decode and verify rows (a few tokens a
// sequence); sequences of GDN_CHUNKED_MIN_T rows or more (prefill) take the
// chunked form of gdn_chunked.cu.
#include <cooperative_groups.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/block_reduce.h"
#include "ops/cuda/cuda_state.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

namespace cg = cooperative_groups;

#define THREADS 256
/* Rows from which a sequence takes the chunked form.  Below it the
 * recurrent kernel's chain of T steps is short; verify rows (K + 1) and
 * decode always stay recurrent, so speculative and plain decoding share
 * their arithmetic. */
#define GDN_CHUNKED_MIN_T 16

// The gates are meant to give the host formula's exact bits (the model's
// float32 expf/log1pf, which glibc rounds correctly in all but rare
// cases); cuda's expf and log1pf may be 1-2 ulp off, so each step is done
// in double and rounded once to float.  The gates are n·H values: cheap.
__device__ static float expf_rounded(float x) { return (float)exp((double)x); }
__device__ static float log1pf_rounded(float x) { return (float)log1p((double)x); }
// torch's softplus (beta 1, threshold 20), as lm_ref_softplus.
__device__ static float softplus_f(float x) { return x > 20.0f ? x : log1pf_rounded(expf_rounded(x)); }

__global__ static void gdn_gates_kernel(float *beta, float *g, const float *neg_exp_A, const float *dt_bias,
                                        int64_t n, int H) {
    lm_cuda_let_next_then_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int h = (int)(i % H);
        beta[i] = 1.0f / (1.0f + expf_rounded(-beta[i]));
        g[i] = neg_exp_A[h] * softplus_f(g[i] + dt_bias[h]);
    }
}
void lm_cuda_gdn_gates(lm_backend *be, lm_mem beta, lm_mem g, lm_mem neg_exp_A, lm_mem dt_bias, int n, int H) {
    int64_t total = (int64_t)n * H;
    if (total <= 0) return;
    lm_cuda_launch(be, "gdn_gates", gdn_gates_kernel, lm_cuda_blocks(total, THREADS), THREADS, 0,
                   lm_cuda_f32(beta), lm_cuda_f32(g), lm_cuda_f32(neg_exp_A), lm_cuda_f32(dt_bias), total, H);
}

// ---- causal conv1d + SiLU ----
// Two kernels in stream order: the outputs (they read the old windows),
// then the windows' update.  Thread = channel c; block y = a chunk of
// CONV_ROWS rows of sequence blockIdx.z.
#define CONV_ROWS 64

// Element j of channel c's window for row t (x_{t-K+1+j}): from the step's
// rows `in` ([rows, C], the sequence starting at row f), or for rows
// before the step from the channel's saved window st (hist = K - 1 rows).
__device__ static inline float window_at(const float *in, const float *st, int64_t f, int C, int c, int hist, int t,
                                         int j) {
    int src = t - hist + j;
    return src >= 0 ? in[(f + src) * C + c] : st[hist + src];
}

__global__ static void conv1d_kernel(float *out, const float *in, int C, const float *weight, int K,
                                     const float *states, int64_t slot_stride, const int32_t *first,
                                     const int32_t *length, const int32_t *slot) {
    lm_cuda_let_next_then_wait();
    int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.z;
    if (c >= C) return;
    int T = length[s], t0 = blockIdx.y * CONV_ROWS, hist = K - 1;
    if (t0 >= T) return;
    int t1 = t0 + CONV_ROWS < T ? t0 + CONV_ROWS : T;
    int64_t f = first[s];
    const float *w = weight + (int64_t)c * K;
    const float *st = states + (int64_t)slot[s] * slot_stride + (int64_t)c * hist;
    for (int t = t0; t < t1; t++) {
        // window = [x_{t-K+1} .. x_t]; indices < 0 come from the state
        double acc = 0;
        for (int j = 0; j < K; j++) acc += (double)w[j] * window_at(in, st, f, C, c, hist, t, j);
        out[(f + t) * C + c] = lm_silu((float)acc);
    }
}

// The new window: the last K-1 inputs of [window ; rows].  Entry j comes
// from index T + j >= j of that concatenation, so walking j upwards reads
// every old entry before it is overwritten (as the reference).
__global__ static void conv1d_state_kernel(const float *in, int C, int K, float *states, int64_t slot_stride,
                                           const int32_t *first, const int32_t *length, const int32_t *slot) {
    lm_cuda_let_next_then_wait();
    int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
    if (c >= C) return;
    int T = length[s], hist = K - 1;
    int64_t f = first[s];
    float *st = states + (int64_t)slot[s] * slot_stride + (int64_t)c * hist;
    for (int j = 0; j < hist; j++) {
        int src = T + j;
        st[j] = src < hist ? st[src] : in[(f + src - hist) * C + c];
    }
}

void lm_cuda_causal_conv1d_silu(lm_backend *be, lm_mem out, lm_mem in, int C, lm_mem weight, int K,
                                lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs) {
    if (seqs->n_seqs <= 0 || C <= 0 || K <= 0) return;
    unsigned cblocks = lm_cuda_blocks(C, THREADS);
    if (seqs->max_length > 0) {
        dim3 grid(cblocks, lm_cuda_blocks(seqs->max_length, CONV_ROWS), (unsigned)seqs->n_seqs);
        lm_cuda_launch(be, "causal_conv1d_silu", conv1d_kernel, grid, THREADS, 0, lm_cuda_f32(out),
                       lm_cuda_f32(in), C, lm_cuda_f32(weight), K, lm_cuda_f32(states), slot_stride,
                       lm_cuda_i32(seqs->first), lm_cuda_i32(seqs->length), lm_cuda_i32(seqs->slot));
    }
    if (K > 1) {
        dim3 grid(cblocks, (unsigned)seqs->n_seqs);
        lm_cuda_launch(be, "causal_conv1d_silu (state)", conv1d_state_kernel, grid, THREADS, 0,
                       lm_cuda_f32(in), C, K, lm_cuda_f32(states), slot_stride, lm_cuda_i32(seqs->first),
                       lm_cuda_i32(seqs->length), lm_cuda_i32(seqs->slot));
    }
}

// ---- gdn_prepare: gates, conv, split and l2 norms in one launch ----
// Block (head, sequence): heads 0..Hk-1 are q's, Hk..2Hk-1 k's, the rest
// v's, each a run of the conv's channels.  A thread computes its channels'
// conv outputs for every row of the sequence exactly as conv1d_kernel
// does, writing them straight into q, k or v; a q or k head's block then
// scales the row as l2norm_scale_kernel does (same threads per row, same
// sums), and a v head's first thread makes that head's gates as
// gdn_gates_kernel does.  Each thread owns its channels' windows, so it
// updates them after its last row, as conv1d_state_kernel would.  Only
// for short sequences (decode, verify): a long one would run its rows in
// one block.
#define PREPARE_MAX_T 16
#define PREPARE_HELD_TAPS 4 /* the released conv kernel's width */

__global__ static void gdn_prepare_kernel(float *q, float *k, float *v, float *beta, float *g, const float *mixed,
                                          const float *weight, int K, float *states, int64_t slot_stride,
                                          const int32_t *first, const int32_t *length, const int32_t *slot,
                                          const float *neg_exp_A, const float *dt_bias, int Hk, int Hv, int dk,
                                          int dv, float q_scale, float eps) {
    int head = blockIdx.x, s = blockIdx.y, hist = K - 1;
    int C = 2 * Hk * dk + Hv * dv;
    int c0, dim, hv = -1;
    int64_t stride;
    float *dst, scale = 1.0f;
    if (head < Hk) {
        c0 = head * dk, dim = dk, dst = q + head * dk, stride = (int64_t)Hk * dk, scale = q_scale;
    } else if (head < 2 * Hk) {
        c0 = head * dk, dim = dk, dst = k + (head - Hk) * dk, stride = (int64_t)Hk * dk;
    } else {
        hv = head - 2 * Hk;
        c0 = 2 * Hk * dk + hv * dv, dim = dv, dst = v + hv * dv, stride = (int64_t)Hv * dv;
    }
    // Weights, loaded before the wait for the kernel before (launch.h): the
    // conv taps of the thread's first channel (lm_cuda_row_threads gives
    // one a thread at the released head dims) and a v head's gate
    // parameters.
    float taps[PREPARE_HELD_TAPS];
#pragma unroll
    for (int j = 0; j < PREPARE_HELD_TAPS; j++)
        taps[j] = (int)threadIdx.x < dim && j < K ? weight[(int64_t)(c0 + threadIdx.x) * K + j] : 0.0f;
    const float head_neg_exp_A = hv >= 0 ? neg_exp_A[hv] : 0.0f, head_dt_bias = hv >= 0 ? dt_bias[hv] : 0.0f;
    lm_cuda_let_next_then_wait();
    const int T = length[s];
    const int64_t f = first[s];
    float *st = states + (int64_t)slot[s] * slot_stride;
    for (int t = 0; t < T; t++) {
        float *out = dst + (f + t) * stride;
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {
            int c = c0 + i;
            const float *w = weight + (int64_t)c * K, *stc = st + (int64_t)c * hist;
            const bool held = i == (int)threadIdx.x;
            double acc = 0;
#pragma unroll
            for (int j = 0; j < PREPARE_HELD_TAPS; j++) // the held taps, then any past them, in tap order
                if (j < K) acc += (double)(held ? taps[j] : w[j]) * window_at(mixed, stc, f, C, c, hist, t, j);
            for (int j = PREPARE_HELD_TAPS; j < K; j++)
                acc += (double)w[j] * window_at(mixed, stc, f, C, c, hist, t, j);
            out[i] = lm_silu((float)acc);
        }
        if (hv < 0) { // l2norm_scale of this row of the head (each thread reads back what it wrote)
            float factor = 1.0f / sqrtf(lm_cuda_row_sum_squares(out, dim) + eps) * scale;
            for (int i = threadIdx.x; i < dim; i += blockDim.x) out[i] *= factor;
        } else if (threadIdx.x == 0) {
            int64_t i = (f + t) * Hv + hv;
            beta[i] = 1.0f / (1.0f + expf_rounded(-beta[i]));
            g[i] = head_neg_exp_A * softplus_f(g[i] + head_dt_bias);
        }
    }
    for (int i = threadIdx.x; i < dim; i += blockDim.x) { // the windows, after every row has read them
        int c = c0 + i;
        float *stc = st + (int64_t)c * hist;
        for (int j = 0; j < hist; j++) {
            int src = T + j;
            stc[j] = src < hist ? stc[src] : mixed[(f + src - hist) * C + c];
        }
    }
}

extern "C" bool lm_cuda_gdn_prepare(lm_backend *be, const lm_gdn_prepare_args *a) {
    const lm_seq_batch *seqs = a->seqs;
    if (lm_cuda_state_of(be)->unfused || seqs->n_seqs <= 0 || seqs->max_length > PREPARE_MAX_T || a->conv_kernel <= 0 || a->Hk <= 0 ||
        a->Hv <= 0 || a->dk <= 0 || a->dv <= 0 || 2 * a->Hk + a->Hv > 65535 || seqs->n_seqs > 65535)
        return false;
    dim3 grid((unsigned)(2 * a->Hk + a->Hv), (unsigned)seqs->n_seqs);
    lm_cuda_launch(be, "gdn_prepare", gdn_prepare_kernel, grid, lm_cuda_row_threads(a->dk), 0, lm_cuda_f32(a->q),
                   lm_cuda_f32(a->k), lm_cuda_f32(a->v), lm_cuda_f32(a->beta), lm_cuda_f32(a->g),
                   lm_cuda_f32(a->mixed), lm_cuda_f32(a->conv_weight), a->conv_kernel, lm_cuda_f32(a->conv_states),
                   a->conv_slot_stride, lm_cuda_i32(seqs->first), lm_cuda_i32(seqs->length),
                   lm_cuda_i32(seqs->slot), lm_cuda_f32(a->neg_exp_A), lm_cuda_f32(a->dt_bias), a->Hk, a->Hv,
                   a->dk, a->dv, a->q_scale, a->eps);
    return true;
}

// ---- gated delta rule, recurrent ----
// Block (value head hv = blockIdx.x, sequence blockIdx.y).  Column j of the
// state evolves on its own (Sᵀk and Sᵀq read column j only), so thread j
// (and j + blockDim, ...) runs each row's whole step for its columns, in
// the reference's order of operations: decay, m = Sᵀk, mem = (v - m)·β,
// S += k·mem, o = Sᵀq.  The state lives in shared memory when it fits
// (copied in at the start, back at the end), else it is worked on in place
// in global memory; q and k of the current row are staged in shared memory.
#define GDN_THREADS 128
#define GDN_SHARED_MAX (200 * 1024) /* Hopper allows up to 227 KB per block */

__global__ static void __launch_bounds__(GDN_THREADS)
gated_delta_kernel(float *out, const float *q, const float *k, const float *v, const float *g,
                   const float *beta, float *states, int64_t slot_stride, const int32_t *first,
                   const int32_t *length, const int32_t *slot, int Hk, int Hv, int dk, int dv,
                   int state_in_shared) {
    lm_cuda_let_next_then_wait();
    extern __shared__ float smem[];
    float *qs = smem, *ks = smem + dk;
    int hv = blockIdx.x, s = blockIdx.y, tid = threadIdx.x;
    int hk = hv / (Hv / Hk);
    int T = length[s];
    int64_t f = first[s], size = (int64_t)dk * dv;
    float *Sg = states + (int64_t)slot[s] * slot_stride + (int64_t)hv * size;
    float *S = Sg;
    if (state_in_shared) {
        S = smem + 2 * dk;
        for (int64_t i = tid; i < size; i += blockDim.x) S[i] = Sg[i];
    }
    for (int t = 0; t < T; t++) {
        int64_t row = f + t;
        __syncthreads(); /* the previous row is done with qs, ks (and S is loaded) */
        for (int i = tid; i < dk; i += blockDim.x) {
            qs[i] = q[(row * Hk + hk) * dk + i];
            ks[i] = k[(row * Hk + hk) * dk + i];
        }
        __syncthreads();
        float decay = expf(g[row * Hv + hv]);
        float b = beta[row * Hv + hv];
        const float *vt = v + (row * Hv + hv) * dv;
        float *ot = out + (row * Hv + hv) * dv;
        for (int j = tid; j < dv; j += blockDim.x) {
            double m = 0;
            for (int i = 0; i < dk; i++) {
                float sij = S[(int64_t)i * dv + j] * decay;
                S[(int64_t)i * dv + j] = sij;
                m += (double)sij * ks[i];
            }
            double mem = ((double)vt[j] - m) * b;
            double o = 0;
            for (int i = 0; i < dk; i++) {
                float sij = S[(int64_t)i * dv + j] + (float)(ks[i] * mem);
                S[(int64_t)i * dv + j] = sij;
                o += (double)sij * qs[i];
            }
            ot[j] = (float)o;
        }
    }
    if (state_in_shared) {
        __syncthreads();
        for (int64_t i = tid; i < size; i += blockDim.x) Sg[i] = S[i];
    }
}

// The state in registers: block (value head hv, a group of COLS columns,
// sequence) of COLS x PARTS threads; thread (part p, column j) holds
// S[i][j] for the rows i of its part (dk / PARTS of them) in registers for
// the whole call.  Each row's m = Sᵀk and o = Sᵀq are summed per part in
// double, the PARTS partial sums added in part order through shared
// memory.  The per-element operations are the reference's; only the
// double sums are grouped by part.  The state is read once and written
// once per call, by Hv x dv / COLS blocks at a time (256 for the released
// shapes) instead of Hv.  16 columns x 8 parts: at 32 x 4 (128 blocks, one
// an SM) a 9B decode call took 16.5 us for its 2 MB of state, latency-bound.
#define COLS 16
#define PARTS 8
#define MAX_PER_PART (256 / PARTS) /* dk <= 256 */

// One row's step of the recurrence for a thread's slice of a state column
// (its part p's rows i0 .. i0 + per - 1 of column jj, in col), the row's q
// and k staged in qs and ks: decay, m = Sᵀk (each part's double sum, then
// the parts' in part order), mem = (v − m)·β, S += k·mem, o = Sᵀq summed
// the same way, returned to every thread.  The one arithmetic of the
// recurrent kernels that must agree bit for bit.
// A row's q and k of key head hk into qs and ks, by the block's BLOCK
// threads: the recurrent kernels' staging before delta_rule_row, between
// the two syncs (the block size a constant, as the loop was written).
template <int BLOCK>
__device__ static void stage_row_qk(float *qs, float *ks, const float *q, const float *k, int64_t row, int Hk, int hk,
                                    int dk) {
    __syncthreads(); /* the previous row is done with qs, ks, part_sum */
    for (int i = threadIdx.x; i < dk; i += BLOCK) {
        qs[i] = q[(row * Hk + hk) * dk + i];
        ks[i] = k[(row * Hk + hk) * dk + i];
    }
    __syncthreads();
}

template <int PER, int NCOLS>
__device__ static double delta_rule_row(float (&col)[PER], int per, const float *qs, const float *ks,
                                        double (*part_sum)[NCOLS], int p, int jj, int i0, float g_row, float beta_row,
                                        float v_row) {
    float decay = expf(g_row);
    double m = 0;
#pragma unroll
    for (int ii = 0; ii < PER; ii++)
        if (ii < per) {
            col[ii] *= decay;
            m += (double)col[ii] * ks[i0 + ii];
        }
    part_sum[p][jj] = m;
    __syncthreads();
    m = 0;
    for (int r = 0; r < PARTS; r++)
        m += part_sum[r][jj];
    double mem = ((double)v_row - m) * beta_row;
    double o = 0;
#pragma unroll
    for (int ii = 0; ii < PER; ii++)
        if (ii < per) {
            col[ii] = col[ii] + (float)(ks[i0 + ii] * mem);
            o += (double)col[ii] * qs[i0 + ii];
        }
    __syncthreads(); /* every thread has read part_sum's m */
    part_sum[p][jj] = o;
    __syncthreads();
    o = 0;
    for (int r = 0; r < PARTS; r++)
        o += part_sum[r][jj];
    return o;
}

__global__ static void __launch_bounds__(COLS *PARTS)
    gated_delta_columns_kernel(float *out, const float *q, const float *k, const float *v, const float *g,
                               const float *beta, float *states, int64_t slot_stride, const int32_t *first,
                               const int32_t *length, const int32_t *slot, int Hk, int Hv, int dk, int dv,
                               int skip_from) {
    lm_cuda_let_next_then_wait();
    __shared__ float qs[MAX_PER_PART * PARTS], ks[MAX_PER_PART * PARTS];
    __shared__ double part_sum[PARTS][COLS];
    int hv = blockIdx.x, s = blockIdx.z, jj = threadIdx.x % COLS, p = threadIdx.x / COLS;
    int j = blockIdx.y * COLS + jj, per = dk / PARTS, i0 = p * per;
    int hk = hv / (Hv / Hk), T = length[s];
    if (T >= skip_from) return; /* the chunked kernel's sequence */
    bool live = j < dv;
    int64_t f = first[s];
    float *S = states + (int64_t)slot[s] * slot_stride + (int64_t)hv * dk * dv;
    float col[MAX_PER_PART];
#pragma unroll
    for (int ii = 0; ii < MAX_PER_PART; ii++)
        col[ii] = ii < per && live ? S[(int64_t)(i0 + ii) * dv + j] : 0.0f;
    for (int t = 0; t < T; t++) {
        int64_t row = f + t;
        // The row's gate, β and v are loaded with q and k, not after the
        // sums that first use them: one wait for memory a row, not three.
        const float g_row = g[row * Hv + hv], beta_row = beta[row * Hv + hv];
        const float v_row = live ? v[(row * Hv + hv) * dv + j] : 0.0f;
        stage_row_qk<COLS * PARTS>(qs, ks, q, k, row, Hk, hk, dk);
        double o = delta_rule_row<MAX_PER_PART, COLS>(col, per, qs, ks, part_sum, p, jj, i0, g_row, beta_row, v_row);
        if (p == 0 && live) out[(row * Hv + hv) * dv + j] = (float)o;
    }
#pragma unroll
    for (int ii = 0; ii < MAX_PER_PART; ii++)
        if (ii < per && live) S[(int64_t)(i0 + ii) * dv + j] = col[ii];
}

// ---- the delta rule and its output's gated rmsnorm in one launch ----
// gated_delta_rule_norm (ops.h) for decode and verify steps of the
// released head shape (dk = dv = 128): a value head's 128 state columns
// are a cluster of NORM_CLUSTER blocks of NORM_COLS columns x PARTS parts
// (gated_delta_columns_kernel's blocks: thread (part p, column j),
// NORM_PER state rows a part in registers, the parts' double sums added in
// part order), 256 blocks for the 9B and 35B-A3B shapes' 32 heads.  A
// row's norm needs the head's 128 outputs: each block's part-0 threads
// write theirs into every block of the cluster (distributed shared
// memory), and after the cluster's barrier each block norms the row as
// rmsnorm_kernel normalises a row of 128 with 128 threads (its own 128
// threads, 4 warps, one element each: the same sums in the same tree), so
// every block has the norm's bits and writes its columns.  The bits are
// the two ops'.  One block per head (32 blocks of 1024 threads, 12.0 us a
// call under ncu on an H100) kept three quarters of the SMs idle for a
// latency-bound 2 MB of state.
#define NORM_DV 128
#define NORM_PER 16
#define NORM_COLS 16
#define NORM_CLUSTER (NORM_DV / NORM_COLS)
static_assert(NORM_COLS * PARTS == NORM_DV, "a block's threads are the norm's 128, one element each");

__global__ static void __cluster_dims__(1, NORM_CLUSTER, 1) __launch_bounds__(NORM_COLS *PARTS)
    gated_delta_norm_kernel(float *out, const float *q, const float *k, const float *v, const float *g,
                            const float *beta, float *states, int64_t slot_stride, const int32_t *first,
                            const int32_t *length, const int32_t *slot, int Hk, int Hv, const float *z,
                            const float *norm, float eps) {
    constexpr int dk = NORM_PER * PARTS, dv = NORM_DV;
    __shared__ float qs[dk], ks[dk];
    __shared__ double part_sum[PARTS][NORM_COLS];
    /* the head's outputs of a row, written by every block of the cluster;
     * two, so a row's writes never meet the previous row's reads */
    __shared__ float head_row[2][NORM_DV];
    cg::cluster_group cluster = cg::this_cluster();
    const int hv = blockIdx.x, s = blockIdx.z, jj = threadIdx.x % NORM_COLS, p = threadIdx.x / NORM_COLS;
    const int j = blockIdx.y * NORM_COLS + jj;
    const float norm_j = norm[j]; /* a weight: loaded before the wait (launch.h) */
    lm_cuda_let_next_then_wait();
    const int i0 = p * NORM_PER, hk = hv / (Hv / Hk), T = length[s];
    const int64_t f = first[s];
    float *S = states + (int64_t)slot[s] * slot_stride + (int64_t)hv * dk * dv;
    // A peer's shared memory may be written only once the peer has started
    // (CUDA's rule for distributed shared memory): every block arrives now
    // and waits just before its first remote write, so the barrier's
    // latency hides behind the first row's sums.
    cg::cluster_group::arrival_token started = cluster.barrier_arrive();
    float col[NORM_PER];
#pragma unroll
    for (int ii = 0; ii < NORM_PER; ii++) col[ii] = S[(int64_t)(i0 + ii) * dv + j];
    for (int t = 0; t < T; t++) {
        const int64_t row = f + t, at = (row * Hv + hv) * dv + j;
        const float g_row = g[row * Hv + hv], beta_row = beta[row * Hv + hv], v_row = v[at];
        const float z_row = p == 0 ? z[at] : 0.0f; /* with the row's other loads, not after its sums */
        stage_row_qk<NORM_COLS * PARTS>(qs, ks, q, k, row, Hk, hk, dk);
        double o = delta_rule_row<NORM_PER, NORM_COLS>(col, NORM_PER, qs, ks, part_sum, p, jj, i0, g_row, beta_row,
                                                       v_row);
        float x = (float)o; /* o_j, the same on every part's thread of column j */
        if (t == 0) cluster.barrier_wait(std::move(started));
        if (p == 0)
            for (unsigned b = 0; b < NORM_CLUSTER; b++) cluster.map_shared_rank(head_row[t & 1], b)[j] = x;
        cluster.sync(); /* the row's 128 outputs are in every block */
        // gated_rmsnorm of the row: rmsnorm_kernel's sum (one element a
        // thread, fma(x, x, 0)) and expression
        float e = head_row[t & 1][threadIdx.x];
        float inv = 1.0f / sqrtf(lm_cuda_block_sum(__fmaf_rn(e, e, 0.0f)) / (float)dv + eps);
        if (p == 0) out[at] = x * inv * norm_j * lm_silu(z_row);
    }
    if (T == 0) cluster.barrier_wait(std::move(started)); /* every arrival has its wait */
#pragma unroll
    for (int ii = 0; ii < NORM_PER; ii++) S[(int64_t)(i0 + ii) * dv + j] = col[ii];
}

extern "C" bool lm_cuda_gated_delta_rule_norm(lm_backend *be, const lm_delta_rule_norm_args *a) {
    const lm_seq_batch *seqs = a->seqs;
    if (lm_cuda_state_of(be)->unfused || seqs->n_seqs <= 0 || seqs->n_seqs > 65535 ||
        seqs->max_length >= GDN_CHUNKED_MIN_T || a->n <= 0 || a->dk != NORM_PER * PARTS || a->dv != NORM_DV ||
        a->Hk <= 0 || a->Hv <= 0 || a->Hv % a->Hk != 0 || a->Hv > 65535)
        return false;
    dim3 grid((unsigned)a->Hv, NORM_CLUSTER, (unsigned)seqs->n_seqs);
    lm_cuda_launch(be, "gated_delta_rule + gated_rmsnorm", gated_delta_norm_kernel, grid, NORM_COLS * PARTS, 0,
                   lm_cuda_f32(a->out), lm_cuda_f32(a->q), lm_cuda_f32(a->k), lm_cuda_f32(a->v), lm_cuda_f32(a->g),
                   lm_cuda_f32(a->beta), lm_cuda_f32(a->states), a->slot_stride, lm_cuda_i32(seqs->first),
                   lm_cuda_i32(seqs->length), lm_cuda_i32(seqs->slot), a->Hk, a->Hv, lm_cuda_f32(a->z),
                   lm_cuda_f32(a->norm), a->eps);
    return true;
}

void lm_cuda_gated_delta_rule(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v, lm_mem g, lm_mem beta,
                              lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs, int Hk, int Hv,
                              int dk, int dv) {
    if (seqs->n_seqs <= 0 || Hv <= 0 || dk <= 0 || dv <= 0) return;
    if (dk % PARTS == 0 && dk / PARTS <= MAX_PER_PART) {
        int skip_from = INT32_MAX;
        if (seqs->max_length >= GDN_CHUNKED_MIN_T && !lm_cuda_state_of(be)->gdn_recurrent_only &&
            lm_cuda_gated_delta_chunked(be, out, q, k, v, g, beta, states, slot_stride, seqs, Hk, Hv, dk, dv,
                                        GDN_CHUNKED_MIN_T))
            skip_from = GDN_CHUNKED_MIN_T;
        dim3 grid((unsigned)Hv, lm_cuda_blocks(dv, COLS), (unsigned)seqs->n_seqs);
        lm_cuda_launch(be, "gated_delta_rule", gated_delta_columns_kernel, grid, COLS * PARTS, 0,
                       lm_cuda_f32(out), lm_cuda_f32(q), lm_cuda_f32(k), lm_cuda_f32(v), lm_cuda_f32(g),
                       lm_cuda_f32(beta), lm_cuda_f32(states), slot_stride, lm_cuda_i32(seqs->first),
                       lm_cuda_i32(seqs->length), lm_cuda_i32(seqs->slot), Hk, Hv, dk, dv, skip_from);
        return;
    }
    size_t stage = sizeof(float) * 2 * (size_t)dk, state = sizeof(float) * (size_t)dk * (size_t)dv;
    int in_shared = stage + state <= GDN_SHARED_MAX;
    size_t shared = stage + (in_shared ? state : 0);
    if (shared > 48 * 1024) {
        lm_cuda_use_device(lm_cuda_state_of(be)); /* the attribute is the current GPU's */
        cudaError_t e = cudaFuncSetAttribute(gated_delta_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)shared);
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* not sticky: fall back to the state in global memory */
            in_shared = 0;
            shared = stage;
        }
    }
    dim3 grid((unsigned)Hv, (unsigned)seqs->n_seqs);
    lm_cuda_launch(be, "gated_delta_rule", gated_delta_kernel, grid, GDN_THREADS, shared, lm_cuda_f32(out),
                   lm_cuda_f32(q), lm_cuda_f32(k), lm_cuda_f32(v), lm_cuda_f32(g), lm_cuda_f32(beta),
                   lm_cuda_f32(states), slot_stride, lm_cuda_i32(seqs->first), lm_cuda_i32(seqs->length),
                   lm_cuda_i32(seqs->slot), Hk, Hv, dk, dv, in_shared);
}
