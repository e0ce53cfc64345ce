// The gated delta rule in its chunked form (model-spec §A.7), for prefill:
// the recurrent kernel (gdn.cu) walks a sequence token by token, a chain
// of T dependent steps (32 ms a layer at 8k tokens on an H200); here the
// chain is T / 64 chunks, each a handful of small matrix products.
//
// For a chunk of n <= 64 tokens with incoming state S [dk, dv] and
// γ_i = Σ_{s<=i} g_s (the log decays summed inside the chunk):
//   A_ij = β_i (k_i·k_j) e^{γ_i−γ_j}  (j < i),   M_ij = (q_i·k_j) e^{γ_i−γ_j}  (j <= i)
//   V'_i = β_i (v_i − e^{γ_i} k_iᵀS) − Σ_{j<i} A_ij V'_j      (forward substitution)
//   o_i  = e^{γ_i} q_iᵀS + Σ_{j<=i} M_ij V'_j
//   S   <- e^{γ_{n−1}} S + Σ_j e^{γ_{n−1}−γ_j} k_j V'_jᵀ
// which is the recurrence S_t = e^{g_t} S_{t−1} + k_t u_tᵀ, u_t = β_t (v_t −
// e^{g_t} S_{t−1}ᵀ k_t), o_t = S_tᵀ q_t unrolled over the chunk (V'_i = u_i).
//
// Two kernels.  T = (I + A)⁻¹ and M depend on a chunk's own rows, not on
// S: the first makes them for every (value head, chunk) at once into a
// scratch, so V' = T R with R_i = β_i (v_i − e^{γ_i} k_iᵀS).  A column of S
// evolves on its own (V' and the update of column c read column c of S
// only), so the second, the walk over a sequence's chunks in order, gives a
// block 32 columns of one value head's state for the whole call: grid
// (value head, column block, sequence), the column slice in shared memory,
// the chunk's rows, T and M copied in beside it; dv / 32 times the
// parallelism of one block per head (128 blocks for the 9B and 35B-A3B
// shapes, 32 otherwise).  Its products run on the tensor cores in 3xTF32
// where dk is a multiple of 16.  The older single kernel, which makes A and
// M itself and solves for V' by forward substitution, stays for comparison
// and where the scratch cannot be had.
//
// Float32 accuracy, γ summed in double (as the cpu's chunked form).  A
// sequence's result depends on its own rows and its length alone, never
// on the rest of the batch (nor on how its chunks fall into waves).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define CH 64          /* tokens per chunk */
#define CH_COLS 32     /* state columns per block */
#define CH_THREADS 256 /* 8 warps */
#define CH_MAX_DK 128
#define CH_LD (CH + 4) /* row stride of A and M: 16-byte rows, no bank conflicts */
/* Row strides of V (R, then V') and of the state's columns: 8 mod 32
 * words, so a tensor-core operand read down a column (lane (g, t) at row t,
 * column g) meets 32 banks; even, for the CUDA cores' 8-byte pairs. */
#define CV_LD (CH_COLS + 8)
#define CS_LD (CH_COLS + 8)
#define CH_SQUARE (CH * CH) /* floats of one chunk's T or M in the scratch */
/* The call's rows and sequences, as both kernels read them. */
typedef struct {
    const float *q, *k, *v, *g, *beta;
    const int32_t *first, *length, *slot;
    int Hk, Hv, dk, dv, min_T;
    bool quads; /* every row and column block starts on 16 bytes */
} chunk_args;

typedef struct {
    float *k, *q, *v, *g, *beta;
} chunk_rows;

/* Queues the copies of the rows of the chunk at t0 of the sequence whose
 * rows start at f (T of them): keys and queries of key head hk, rows dk + 4
 * floats apart, g and β of value head hv, and, where into.v is not NULL,
 * columns col0.. of value head hv; all 0 past the sequence's end. */
__device__ static void stage_rows(const chunk_args &a, chunk_rows into, int64_t f, int T, int t0, int hk, int hv,
                                  int col0) {
    const int tid = threadIdx.x, dk = a.dk, dkp = dk + 4;
    const int n = T - t0 < CH ? T - t0 : CH;
    if (a.quads) { /* 16-byte copies: a quarter of the copies and index sums */
        const int row_quads = dk / 4;
        for (int idx = tid; idx < CH * row_quads; idx += CH_THREADS) {
            int i = idx / row_quads, d = (idx - i * row_quads) * 4;
            bool in = i < n;
            int64_t from = in ? ((f + t0 + i) * a.Hk + hk) * dk + d : 0;
            lm_copy_async16(&into.k[i * dkp + d], a.k + from, in);
            lm_copy_async16(&into.q[i * dkp + d], a.q + from, in);
        }
        for (int idx = tid; into.v && idx < CH * CH_COLS / 4; idx += CH_THREADS) {
            int i = idx / (CH_COLS / 4), c = idx % (CH_COLS / 4) * 4;
            bool in = i < n && col0 + c < a.dv; /* dv % 4 == 0: a quad is all in or all out */
            lm_copy_async16(&into.v[i * CH_COLS + c],
                            a.v + (in ? ((f + t0 + i) * a.Hv + hv) * a.dv + col0 + c : 0), in);
        }
    } else {
        for (int idx = tid; idx < CH * dk; idx += CH_THREADS) {
            int i = idx / dk, d = idx - i * dk;
            bool in = i < n;
            int64_t from = in ? ((f + t0 + i) * a.Hk + hk) * dk + d : 0;
            lm_copy_async4(&into.k[i * dkp + d], a.k + from, in);
            lm_copy_async4(&into.q[i * dkp + d], a.q + from, in);
        }
        for (int idx = tid; into.v && idx < CH * CH_COLS; idx += CH_THREADS) {
            int i = idx / CH_COLS, c = idx % CH_COLS;
            bool in = i < n && col0 + c < a.dv;
            lm_copy_async4(&into.v[idx], a.v + (in ? ((f + t0 + i) * a.Hv + hv) * a.dv + col0 + c : 0), in);
        }
    }
    if (tid < CH) {
        bool in = tid < n;
        int64_t from = in ? (f + t0 + tid) * a.Hv + hv : 0;
        lm_copy_async4(&into.g[tid], a.g + from, in);
        lm_copy_async4(&into.beta[tid], a.beta + from, in);
    }
}

/* γ, an inclusive scan of the chunk's g in double by warp 0 (two rows a
 * lane), then e^{γ_i}, e^{γ_{n−1}−γ_i} and β_i, all 0 past n.  Both
 * kernels make them with this code, so with the same bits. */
__device__ static void chunk_decays(const float *g, const float *beta, int n, double *gam, float *eg, float *tail,
                                    float *bet) {
    const int tid = threadIdx.x, lane = tid & 31;
    if (tid < 32) {
        double a = (double)g[2 * lane], b = (double)g[2 * lane + 1];
        double pair = a + b, scan = pair;
        for (int off = 1; off < 32; off <<= 1) {
            double o = __shfl_up_sync(0xffffffffu, scan, off);
            if (lane >= off) scan += o;
        }
        double before = __shfl_up_sync(0xffffffffu, scan, 1);
        if (lane == 0) before = 0;
        gam[2 * lane] = before + a;
        gam[2 * lane + 1] = before + pair;
    }
    __syncthreads();
    if (tid < CH) {
        bool in = tid < n;
        eg[tid] = in ? expf((float)gam[tid]) : 0.0f;
        tail[tid] = in ? expf((float)(gam[n - 1] - gam[tid])) : 0.0f;
        bet[tid] = beta[tid];
    }
    __syncthreads();
}

/* A and M [CH][CH_LD]: thread (ti, tj) owns rows ti + 16r and columns
 * tj + 16c; the tiles above the diagonal (c > r) are all zeros and skipped. */
__device__ static void decay_products(const float *Ks, const float *Qs, int dk, const double *gam,
                                      const float *bet, int n, float *Am, float *Mm) {
    const int tid = threadIdx.x, ti = tid >> 4, tj = tid & 15, dkp = dk + 4;
    float kk[4][4], qk[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) kk[r][c] = qk[r][c] = 0.0f;
    for (int d = 0; d < dk; d += 4) {
        float4 kr[4], qr[4], kc[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            kr[r] = *(const float4 *)&Ks[(ti + 16 * r) * dkp + d];
            qr[r] = *(const float4 *)&Qs[(ti + 16 * r) * dkp + d];
            kc[r] = *(const float4 *)&Ks[(tj + 16 * r) * dkp + d];
        }
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c <= r; c++) {
                kk[r][c] = fmaf(kr[r].x, kc[c].x, kk[r][c]);
                kk[r][c] = fmaf(kr[r].y, kc[c].y, kk[r][c]);
                kk[r][c] = fmaf(kr[r].z, kc[c].z, kk[r][c]);
                kk[r][c] = fmaf(kr[r].w, kc[c].w, kk[r][c]);
                qk[r][c] = fmaf(qr[r].x, kc[c].x, qk[r][c]);
                qk[r][c] = fmaf(qr[r].y, kc[c].y, qk[r][c]);
                qk[r][c] = fmaf(qr[r].z, kc[c].z, qk[r][c]);
                qk[r][c] = fmaf(qr[r].w, kc[c].w, qk[r][c]);
            }
    }
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            int i = ti + 16 * r, j = tj + 16 * c;
            float decay = j <= i && i < n ? expf((float)(gam[i] - gam[j])) : 0.0f;
            Am[i * CH_LD + j] = j < i ? bet[i] * kk[r][c] * decay : 0.0f;
            Mm[i * CH_LD + j] = qk[r][c] * decay;
        }
}

/* X <- (I + A)⁻¹ X for X [CH][CV_LD] (CH_COLS columns) by forward
 * substitution, right-looking: warp w owns columns 4w..4w+3, lane (row0,
 * column) rows row0 + 8m in registers.  Once row j is final its owner hands
 * it round by shuffle and every later row subtracts A_ij X_j, in j order. */
__device__ static void forward_substitute(const float *Am, float *X) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = lane >> 2, cc = 4 * warp + (lane & 3);
    float x[8];
#pragma unroll
    for (int m = 0; m < 8; m++) x[m] = X[(row0 + 8 * m) * CV_LD + cc];
#pragma unroll
    for (int j = 0; j < CH; j++) {
        float vj = __shfl_sync(0xffffffffu, x[j / 8], (j % 8) * 4 + (lane & 3));
#pragma unroll
        for (int m = j / 8; m < 8; m++) /* rows <= j have A_ij = 0: unchanged */
            x[m] = fmaf(-Am[(row0 + 8 * m) * CH_LD + j], vj, x[m]);
    }
#pragma unroll
    for (int m = 0; m < 8; m++) X[(row0 + 8 * m) * CV_LD + cc] = x[m];
}

/* acc[m][e] += Σ_j P_ij X_j,c for rows i = rg + 16m and columns c = 2cg + e
 * of P [CH][CH_LD] times X [CH][CV_LD], j in order. */
__device__ static void chunk_product(const float *P, const float *X, int rg, int cg, float acc[4][2]) {
    for (int j = 0; j < CH; j += 4) {
        float2 xj[4];
#pragma unroll
        for (int e = 0; e < 4; e++) xj[e] = *(const float2 *)&X[(j + e) * CV_LD + 2 * cg];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            float4 pr = *(const float4 *)&P[(rg + 16 * m) * CH_LD + j];
            const float pv[4] = {pr.x, pr.y, pr.z, pr.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                acc[m][0] = fmaf(pv[e], xj[e].x, acc[m][0]);
                acc[m][1] = fmaf(pv[e], xj[e].y, acc[m][1]);
            }
        }
    }
}

/* Where chunk c - c0 of sequence s of a wave of `wave` chunks keeps its T
 * (then M) in the scratch: [CH][CH] floats each. */
__device__ __forceinline__ static float *prepared_at(float *scratch, int s, int wave, int c_in_wave, int Hv, int hv) {
    return scratch + (((int64_t)s * wave + c_in_wave) * Hv + hv) * 2 * CH_SQUARE;
}

// ---- the prepared form, first kernel: every chunk of the wave at once ----
//
// A chunk's T = (I + A)⁻¹ and M depend on its own keys, queries, g and β
// alone, not on the state: made here for every (value head, chunk) of the
// wave in parallel, they leave the kernel that walks the chunks in order
// with V' = T R, products only.  A and M were made there by each of a
// head's dv / 32 blocks and the forward substitution was a chain of 64
// dependent steps inside that walk (2.42 ms a layer at 8k tokens on an H100,
// PERF.md session 21).

/* Its shared memory: γ and its exponentials, g and β, A and M, then the
 * keys and queries, whose room holds X (the identity's columns being
 * solved) once A and M are made. */
static size_t prepare_rows_floats(int dk) {
    size_t rows = 2 * CH * ((size_t)dk + 4), x = CH * CV_LD;
    return rows > x ? rows : x;
}
static size_t prepare_shared_bytes(int dk) {
    return sizeof(double) * CH + sizeof(float) * (5 * CH + 2 * CH * CH_LD + prepare_rows_floats(dk));
}

__global__ static void __launch_bounds__(CH_THREADS)
    gdn_chunk_prepare_kernel(chunk_args a, float *scratch, int c0, int wave) {
    lm_cuda_let_next_then_wait();
    extern __shared__ __align__(16) unsigned char prepare_smem[];
    const int hv = blockIdx.x, c = c0 + (int)blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
    const int T = a.length[s];
    if (T < a.min_T || c * CH >= T) return;
    const int t0 = c * CH, n = T - t0 < CH ? T - t0 : CH, dkp = a.dk + 4;

    double *gam = (double *)prepare_smem; /* [CH] γ_i */
    float *eg = (float *)(gam + CH), *tail = eg + CH, *bet = tail + CH;
    chunk_rows rows;
    rows.g = bet + CH;
    rows.beta = rows.g + CH;
    float *Am = rows.beta + CH, *Mm = Am + CH * CH_LD;
    rows.k = Mm + CH * CH_LD;
    rows.q = rows.k + CH * dkp;
    rows.v = NULL;
    float *X = rows.k; /* [CH][CV_LD], once A and M are made */

    stage_rows(a, rows, a.first[s], T, t0, hv / (a.Hv / a.Hk), hv, 0);
    lm_copy_async_commit();
    lm_copy_async_wait_pending<0>();
    __syncthreads();
    chunk_decays(rows.g, rows.beta, n, gam, eg, tail, bet);
    decay_products(rows.k, rows.q, a.dk, gam, bet, n, Am, Mm);
    __syncthreads(); /* A and M are whole; the keys and queries are done with */

    float *Tg = prepared_at(scratch, s, wave, (int)blockIdx.y, a.Hv, hv), *Mg = Tg + CH_SQUARE;
    for (int idx = tid; idx < CH * CH / 4; idx += CH_THREADS) {
        int i = idx / (CH / 4), j = idx % (CH / 4) * 4;
        *(float4 *)&Mg[i * CH + j] = *(const float4 *)&Mm[i * CH_LD + j];
    }
    // T column block by column block: (I + A) T = I, the walk's own
    // forward substitution on CH_COLS columns of the identity.
    for (int half = 0; half < CH / CH_COLS; half++) {
        for (int idx = tid; idx < CH * CH_COLS; idx += CH_THREADS) {
            int i = idx / CH_COLS, j = idx % CH_COLS;
            X[i * CV_LD + j] = i == half * CH_COLS + j ? 1.0f : 0.0f;
        }
        __syncthreads();
        forward_substitute(Am, X);
        __syncthreads();
        for (int idx = tid; idx < CH * CH_COLS; idx += CH_THREADS) {
            int i = idx / CH_COLS, j = idx % CH_COLS;
            Tg[i * CH + half * CH_COLS + j] = X[i * CV_LD + j];
        }
        __syncthreads(); /* X is read before the next block's identity */
    }
}

// ---- the walk's products on the tensor cores, in float32's accuracy ----
//
// mma.m16n8k8 in TF32 (PTX ISA fragment layouts), lane = 4g + t: A (16 x 8,
// rows r0.., columns k0..) a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3
// (g + 8, t + 4); B (8 x 8) b0 (t, g), b1 (t + 4, g); C (16 x 8) c0 (g, 2t),
// c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1).  Each operand is split
// into a TF32 high part and the TF32 rounding of the rest, and a·b is
// a_lo·b_hi + a_hi·b_lo + a_hi·b_hi: float32's accuracy at three products
// (3xTF32).  Operands are read through functions of (row, column), so one
// loader serves k, q, T, M, the decayed kᵀ and V.

typedef struct {
    uint32_t hi, lo;
} tf32_split;

__device__ __forceinline__ static uint32_t tf32_round(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ static tf32_split split_tf32(float x) {
    tf32_split p;
    p.hi = tf32_round(x);
    p.lo = tf32_round(x - __uint_as_float(p.hi));
    return p;
}

__device__ __forceinline__ static void mma_tf32(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

typedef struct {
    tf32_split x[4];
} frag_a;
typedef struct {
    tf32_split x[2];
} frag_b;

template <class At> __device__ __forceinline__ static frag_a load_frag_a(int r0, int k0, At at) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    frag_a f;
    f.x[0] = split_tf32(at(r0 + g, k0 + t));
    f.x[1] = split_tf32(at(r0 + g + 8, k0 + t));
    f.x[2] = split_tf32(at(r0 + g, k0 + t + 4));
    f.x[3] = split_tf32(at(r0 + g + 8, k0 + t + 4));
    return f;
}

template <class At> __device__ __forceinline__ static frag_b load_frag_b(int k0, int n0, At at) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    frag_b f;
    f.x[0] = split_tf32(at(k0 + t, n0 + g));
    f.x[1] = split_tf32(at(k0 + t + 4, n0 + g));
    return f;
}

/* c += a·b to float32's accuracy: the small terms first, then hi·hi. */
__device__ __forceinline__ static void mma_3xtf32(float c[4], const frag_a &a, const frag_b &b) {
    mma_tf32(c, a.x[0].lo, a.x[1].lo, a.x[2].lo, a.x[3].lo, b.x[0].hi, b.x[1].hi);
    mma_tf32(c, a.x[0].hi, a.x[1].hi, a.x[2].hi, a.x[3].hi, b.x[0].lo, b.x[1].lo);
    mma_tf32(c, a.x[0].hi, a.x[1].hi, a.x[2].hi, a.x[3].hi, b.x[0].hi, b.x[1].hi);
}

/* acc[u] (NT tiles of 16 x 8 at columns n0 + 8u) += rows r0.. of A times
 * B over k in [0, K), K a multiple of 8: one A fragment a step for all the
 * column tiles. */
template <int NT, class At, class Bt>
__device__ __forceinline__ static void warp_product(float acc[NT][4], int r0, int n0, int K, At a, Bt b) {
    for (int k0 = 0; k0 < K; k0 += 8) {
        frag_a fa = load_frag_a(r0, k0, a);
#pragma unroll
        for (int u = 0; u < NT; u++) mma_3xtf32(acc[u], fa, load_frag_b(k0, n0 + 8 * u, b));
    }
}

// ---- the walk over a sequence's chunks ----
//
// FORM_ONE_KERNEL: this kernel makes A and M itself and solves for V' by
// forward substitution (LOOM_CUDA_GDN_PREPARED=0, and where the scratch
// cannot be had).  The prepared forms take T and M from the first kernel's
// scratch and make V' = T R: FORM_PREPARED_MMA with every product on the
// tensor cores where dk is a multiple of 16 (LOOM_CUDA_GDN_MMA=0 keeps the
// CUDA cores), FORM_PREPARED on the CUDA cores.  The walk is products
// only once T is given; on the CUDA cores it was issue-bound at about 16 us
// a chunk (a 2048-token step's walk 519 us on an H100, session 22 run 2).
enum { FORM_ONE_KERNEL, FORM_PREPARED, FORM_PREPARED_MMA };

/* The next chunk's rows are copied to shared memory (cp.async) while the
 * current one is computed: two buffers of keys, queries, values, g and β. */
static size_t chunked_shared_bytes(int dk) {
    size_t dkp = (size_t)dk + 4;
    return sizeof(double) * CH +
           sizeof(float) * (3 * CH + 2 * (2 * CH * dkp + CH * CH_COLS + 2 * CH) + (size_t)dk * CS_LD +
                            CH * CV_LD + 2 * CH * CH_LD);
}

template <int FORM>
__global__ static void __launch_bounds__(CH_THREADS, 1)
    gated_delta_chunked_kernel(chunk_args a, float *out, float *states, int64_t slot_stride, const float *scratch,
                               int c0, int wave) {
    lm_cuda_let_next_then_wait();
    constexpr bool PREPARED = FORM != FORM_ONE_KERNEL, MMA = FORM == FORM_PREPARED_MMA;
    extern __shared__ __align__(16) unsigned char chunk_smem[];
    const int hv = blockIdx.x, col0 = blockIdx.y * CH_COLS, s = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
    const int T = a.length[s], t_begin = c0 * CH;
    if (T < a.min_T || t_begin >= T) return; /* the recurrent kernel's sequence, or none of its chunks here */
    const int t_end = T - t_begin <= wave * CH ? T : t_begin + wave * CH;
    const int hk = hv / (a.Hv / a.Hk), dk = a.dk, dv = a.dv, dkp = dk + 4;
    const int64_t f = a.first[s];

    double *gam = (double *)chunk_smem; /* [CH] γ_i */
    float *eg = (float *)(gam + CH);    /* [CH] e^{γ_i} */
    float *tail = eg + CH;              /* [CH] e^{γ_{n−1}−γ_i}, 0 past n */
    float *bet = tail + CH;             /* [CH] β_i, 0 past n */
    /* Two buffers, each [CH][dkp] keys and queries, [CH][CH_COLS] values,
     * [CH] g and β, all 0 past n; buffer b starts at rows + b * buf_floats. */
    float *rows = bet + CH;
    const int buf_floats = 2 * CH * dkp + CH * CH_COLS + 2 * CH;
    auto buf = [&](int b) {
        chunk_rows r;
        r.k = rows + b * buf_floats;
        r.q = r.k + CH * dkp;
        r.v = r.q + CH * dkp;
        r.g = r.v + CH * CH_COLS;
        r.beta = r.g + CH;
        return r;
    };
    float *at = rows + 2 * buf_floats;
    float *Ss = at;                     /* [dk][CS_LD] the state's columns */
    float *Vs = Ss + dk * CS_LD;        /* [CH][CV_LD] R, then V' */
    float *Am = Vs + CH * CV_LD;        /* [CH][CH_LD] A, or T where PREPARED */
    float *Mm = Am + CH * CH_LD;        /* [CH][CH_LD] */

    // Queues the copies of chunk c's rows r0 .. r0 + count - 1 of T, then
    // M, from the scratch (rows 0-63 T's, 64-127 M's) into Am, Mm.
    auto stage_prepared = [&](int c, int r0, int count, int thread, int threads) {
        const float *from = prepared_at((float *)scratch, s, wave, c - c0, a.Hv, hv);
        for (int idx = thread; idx < count * CH / 4; idx += threads) {
            int i = r0 + idx / (CH / 4), j = idx % (CH / 4) * 4;
            lm_copy_async16(&Am[i * CH_LD + j], from + i * CH + j, true);
        }
        lm_copy_async_commit();
    };

    float *S = states + (int64_t)a.slot[s] * slot_stride + (int64_t)hv * dk * dv;
    for (int idx = tid; idx < dk * CH_COLS; idx += CH_THREADS) {
        int d = idx / CH_COLS, c = idx % CH_COLS;
        Ss[d * CS_LD + c] = col0 + c < dv ? S[(int64_t)d * dv + col0 + c] : 0.0f;
    }
    stage_rows(a, buf(0), f, T, t_begin, hk, hv, col0);
    lm_copy_async_commit();
    if (PREPARED) stage_prepared(c0, 0, 2 * CH, tid, CH_THREADS); /* Mm follows Am: one copy of both */

    for (int t0 = t_begin, cur = 0; t0 < t_end; t0 += CH, cur ^= 1) {
        const int n = T - t0 < CH ? T - t0 : CH;
        const bool more = t0 + CH < t_end;
        const chunk_rows now = buf(cur);
        const float *Ks = now.k, *Qs = now.q, *Vr = now.v;
        __syncthreads(); /* the previous chunk is done with every array, its buffer too */
        if (more) stage_rows(a, buf(cur ^ 1), f, T, t0 + CH, hk, hv, col0);
        lm_copy_async_commit(); /* empty past the wave's end: the wait below counts the same */
        lm_copy_async_wait_all_but_one(); /* every group but those rows: this chunk's rows, T and M */
        __syncthreads(); /* this chunk's rows have landed, every thread's copies */

        chunk_decays(now.g, now.beta, n, gam, eg, tail, bet);
        if (!PREPARED) decay_products(Ks, Qs, dk, gam, bet, n, Am, Mm);

        if constexpr (MMA) {
            // [K; Q] S: warp w makes rows 16w.. of the 128 (keys, then
            // queries) by the block's 32 columns.  Keys' warps write R_i =
            // β_i (v_i − e^{γ_i} k_iᵀS) to Vs; queries' warps keep
            // e^{γ_i} q_iᵀS in registers, where o_i goes on.
            const bool keys = warp < 4;
            const float *rows_of = keys ? Ks : Qs;
            const int r0 = 16 * (warp & 3);
            float o[4][4] = {};
            warp_product<4>(o, r0, 0, dk, [&](int i, int d) { return rows_of[i * dkp + d]; },
                            [&](int d, int c) { return Ss[d * CS_LD + c]; });
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int h = 0; h < 4; h++) {
                    int i = r0 + g8 + 8 * (h >> 1), c = 8 * u + 2 * t4 + (h & 1);
                    if (keys)
                        Vs[i * CV_LD + c] = bet[i] * (Vr[i * CH_COLS + c] - eg[i] * o[u][h]);
                    else
                        o[u][h] *= eg[i];
                }
            __syncthreads();
            // V' = T R: warp w makes rows 16 (w % 4).. by columns 16 (w / 4)..
            {
                float x[2][4] = {};
                const int vr0 = 16 * (warp & 3), vc0 = 16 * (warp >> 2);
                warp_product<2>(x, vr0, vc0, CH, [&](int i, int j) { return Am[i * CH_LD + j]; },
                                [&](int j, int c) { return Vs[j * CV_LD + c]; });
                __syncthreads(); /* every warp has read R and T */
#pragma unroll
                for (int u = 0; u < 2; u++)
#pragma unroll
                    for (int h = 0; h < 4; h++)
                        Vs[(vr0 + g8 + 8 * (h >> 1)) * CV_LD + vc0 + 8 * u + 2 * t4 + (h & 1)] = x[u][h];
            }
            if (more) stage_prepared(t0 / CH + 1, 0, CH, tid, CH_THREADS); /* T's rows: read by no one now */
            __syncthreads(); /* V' is whole */
            // The state update, S <- e^{γ_{n−1}} S + Σ_j e^{γ_{n−1}−γ_j} k_j V'_jᵀ,
            // 16 of its rows a warp, the keys' warps first while the
            // queries' warps make o_i += Σ_{j<=i} M_ij V'_j.
            auto update_state = [&](int d0) {
                if (d0 >= dk) return;
                float acc[4][4];
                const float decay_all = eg[n - 1];
#pragma unroll
                for (int u = 0; u < 4; u++)
#pragma unroll
                    for (int h = 0; h < 4; h++)
                        acc[u][h] = decay_all * Ss[(d0 + g8 + 8 * (h >> 1)) * CS_LD + 8 * u + 2 * t4 + (h & 1)];
                warp_product<4>(acc, d0, 0, CH, [&](int d, int j) { return tail[j] * Ks[j * dkp + d]; },
                                [&](int j, int c) { return Vs[j * CV_LD + c]; });
#pragma unroll
                for (int u = 0; u < 4; u++)
#pragma unroll
                    for (int h = 0; h < 4; h++)
                        Ss[(d0 + g8 + 8 * (h >> 1)) * CS_LD + 8 * u + 2 * t4 + (h & 1)] = acc[u][h];
            };
            if (keys) {
                update_state(16 * warp);
            } else {
                warp_product<4>(o, r0, 0, CH, [&](int i, int j) { return Mm[i * CH_LD + j]; },
                                [&](int j, int c) { return Vs[j * CV_LD + c]; });
                /* this warp's rows of M are read (every lane's loads are
                 * ordered before the copies by the __syncwarp, which the
                 * mma's convergence alone does not say): the next chunk's
                 * come in */
                __syncwarp();
                if (more) stage_prepared(t0 / CH + 1, CH + r0, 16, lane, 32);
#pragma unroll
                for (int u = 0; u < 4; u++)
#pragma unroll
                    for (int h = 0; h < 4; h++) {
                        int i = r0 + g8 + 8 * (h >> 1), c = col0 + 8 * u + 2 * t4 + (h & 1);
                        if (i < n && c < dv) out[((f + t0 + i) * a.Hv + hv) * dv + c] = o[u][h];
                    }
                update_state(16 * warp);
            }
            continue;
        }

        // k_iᵀS and q_iᵀS: thread (row group rg, column pair cg) owns rows
        // rg + 16m and columns 2cg, 2cg + 1.  R_i = β_i (v_i − e^{γ_i} k_iᵀS)
        // goes to Vs; e^{γ_i} q_iᵀS starts o_i.
        const int rg = tid >> 4, cg = tid & 15;
        float o[4][2];
        {
            float ks[4][2], qs[4][2];
#pragma unroll
            for (int m = 0; m < 4; m++) ks[m][0] = ks[m][1] = qs[m][0] = qs[m][1] = 0.0f;
            for (int d = 0; d < dk; d += 4) {
                float2 sd[4];
#pragma unroll
                for (int e = 0; e < 4; e++) sd[e] = *(const float2 *)&Ss[(d + e) * CS_LD + 2 * cg];
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    float4 kr = *(const float4 *)&Ks[(rg + 16 * m) * dkp + d];
                    float4 qr = *(const float4 *)&Qs[(rg + 16 * m) * dkp + d];
                    const float kv[4] = {kr.x, kr.y, kr.z, kr.w}, qv[4] = {qr.x, qr.y, qr.z, qr.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        ks[m][0] = fmaf(kv[e], sd[e].x, ks[m][0]);
                        ks[m][1] = fmaf(kv[e], sd[e].y, ks[m][1]);
                        qs[m][0] = fmaf(qv[e], sd[e].x, qs[m][0]);
                        qs[m][1] = fmaf(qv[e], sd[e].y, qs[m][1]);
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < 4; m++) {
                int i = rg + 16 * m;
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int c = 2 * cg + e;
                    Vs[i * CV_LD + c] = bet[i] * (Vr[i * CH_COLS + c] - eg[i] * ks[m][e]);
                    o[m][e] = eg[i] * qs[m][e];
                }
            }
        }
        __syncthreads();

        // V' = (I + A)⁻¹ R: T R where PREPARED, else forward substitution.
        if (PREPARED) {
            float x[4][2] = {};
            chunk_product(Am, Vs, rg, cg, x);
            __syncthreads(); /* every thread has read R */
#pragma unroll
            for (int m = 0; m < 4; m++)
                *(float2 *)&Vs[(rg + 16 * m) * CV_LD + 2 * cg] = make_float2(x[m][0], x[m][1]);
        } else {
            forward_substitute(Am, Vs);
        }
        __syncthreads();

        // o_i += Σ_{j<=i} M_ij V'_j (M is 0 above the diagonal and past n).
        chunk_product(Mm, Vs, rg, cg, o);
#pragma unroll
        for (int m = 0; m < 4; m++) {
            int i = rg + 16 * m;
#pragma unroll
            for (int e = 0; e < 2; e++)
                if (i < n && col0 + 2 * cg + e < dv) out[((f + t0 + i) * a.Hv + hv) * dv + col0 + 2 * cg + e] = o[m][e];
        }
        if (PREPARED && more) {
            __syncthreads(); /* every thread is done with T and M */
            stage_prepared(t0 / CH + 1, 0, 2 * CH, tid, CH_THREADS);
        }

        // S <- e^{γ_{n−1}} S + Σ_j e^{γ_{n−1}−γ_j} k_j V'_jᵀ: thread (rows
        // rg + 16m of S, columns 2cg, 2cg + 1); each rewrites only what it read.
        {
            float acc[CH_MAX_DK / 16][2];
            const float decay_all = eg[n - 1];
#pragma unroll
            for (int m = 0; m < CH_MAX_DK / 16; m++) {
                int d = rg + 16 * m;
                float2 sv = d < dk ? *(const float2 *)&Ss[d * CS_LD + 2 * cg] : make_float2(0.0f, 0.0f);
                acc[m][0] = decay_all * sv.x;
                acc[m][1] = decay_all * sv.y;
            }
            for (int j = 0; j < n; j++) {
                float2 vj = *(const float2 *)&Vs[j * CV_LD + 2 * cg];
                float w = tail[j];
                vj.x *= w;
                vj.y *= w;
                const float *kj = &Ks[j * dkp];
#pragma unroll
                for (int m = 0; m < CH_MAX_DK / 16; m++) {
                    int d = rg + 16 * m;
                    if (d < dk) {
                        float kd = kj[d];
                        acc[m][0] = fmaf(kd, vj.x, acc[m][0]);
                        acc[m][1] = fmaf(kd, vj.y, acc[m][1]);
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < CH_MAX_DK / 16; m++) {
                int d = rg + 16 * m;
                if (d < dk) *(float2 *)&Ss[d * CS_LD + 2 * cg] = make_float2(acc[m][0], acc[m][1]);
            }
        }
    }
    __syncthreads();
    for (int idx = tid; idx < dk * CH_COLS; idx += CH_THREADS) {
        int d = idx / CH_COLS, c = idx % CH_COLS;
        if (col0 + c < dv) S[(int64_t)d * dv + col0 + c] = Ss[d * CS_LD + c];
    }
}

bool lm_cuda_gdn_chunked_fits(int dk) { return dk > 0 && dk % 4 == 0 && dk <= CH_MAX_DK; }

/* Whether the rows can be staged 16 bytes a copy: every row and column
 * block starts on 16 bytes. */
static bool rows_in_quads(lm_mem q, lm_mem k, lm_mem v, int dk, int dv) {
    return dk % 4 == 0 && dv % 4 == 0 && (uintptr_t)lm_cuda_ptr(q) % 16 == 0 && (uintptr_t)lm_cuda_ptr(k) % 16 == 0 &&
           (uintptr_t)lm_cuda_ptr(v) % 16 == 0;
}

static bool shared_attribute(const void *kernel, size_t bytes) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) == cudaSuccess)
        return true;
    (void)cudaGetLastError(); /* not sticky */
    return false;
}

/* Chunks of each sequence per wave of the prepared form: as many as the
 * scratch's cap holds for every sequence and head; 0 when not one does. */
static int chunks_per_wave(const lm_cuda_state *st, const lm_seq_batch *seqs, int Hv) {
    size_t per_chunk = sizeof(float) * 2 * CH_SQUARE * (size_t)Hv * (size_t)seqs->n_seqs;
    size_t fit = st->gdn_scratch_cap / per_chunk;
    int chunks = (seqs->max_length + CH - 1) / CH;
    return fit < (size_t)chunks ? (int)fit : chunks;
}

bool lm_cuda_gated_delta_chunked(lm_backend *be, lm_mem out, lm_mem q, lm_mem k, lm_mem v, lm_mem g, lm_mem beta,
                                 lm_mem states, int64_t slot_stride, const lm_seq_batch *seqs, int Hk, int Hv,
                                 int dk, int dv, int min_T) {
    if (!lm_cuda_gdn_chunked_fits(dk)) return false;
    lm_cuda_state *st = lm_cuda_state_of(be);
    size_t shared = chunked_shared_bytes(dk);
    lm_cuda_use_device(st); /* the attributes are the current GPU's */
    chunk_args a;
    memset(&a, 0, sizeof a); /* the queue compares its bytes, padding too (launch.h) */
    a.q = lm_cuda_f32(q), a.k = lm_cuda_f32(k), a.v = lm_cuda_f32(v), a.g = lm_cuda_f32(g), a.beta = lm_cuda_f32(beta);
    a.first = lm_cuda_i32(seqs->first), a.length = lm_cuda_i32(seqs->length), a.slot = lm_cuda_i32(seqs->slot);
    a.Hk = Hk, a.Hv = Hv, a.dk = dk, a.dv = dv, a.min_T = min_T, a.quads = rows_in_quads(q, k, v, dk, dv);
    dim3 grid((unsigned)Hv, lm_cuda_blocks(dv, CH_COLS), (unsigned)seqs->n_seqs);
    int wave = st->gdn_unprepared ? 0 : chunks_per_wave(st, seqs, Hv);
    bool mma = !st->gdn_cuda_cores && dk % 16 == 0;
    const void *walk = mma ? (const void *)gated_delta_chunked_kernel<FORM_PREPARED_MMA>
                           : (const void *)gated_delta_chunked_kernel<FORM_PREPARED>;
    if (wave > 0 && shared_attribute((const void *)gdn_chunk_prepare_kernel, prepare_shared_bytes(dk)) &&
        shared_attribute(walk, shared) &&
        lm_cuda_grow(be, &st->gdn_scratch, &st->gdn_scratch_bytes,
                     sizeof(float) * 2 * CH_SQUARE * (size_t)Hv * (size_t)seqs->n_seqs * (size_t)wave)) {
        int chunks = (seqs->max_length + CH - 1) / CH;
        for (int c0 = 0; c0 < chunks; c0 += wave) {
            lm_cuda_launch(be, "gated_delta_rule (chunks' T and M)", gdn_chunk_prepare_kernel,
                           dim3((unsigned)Hv, (unsigned)wave, (unsigned)seqs->n_seqs), CH_THREADS,
                           prepare_shared_bytes(dk), a, (float *)st->gdn_scratch, c0, wave);
            if (mma)
                lm_cuda_launch(be, "gated_delta_rule (chunked, tensor cores)",
                               gated_delta_chunked_kernel<FORM_PREPARED_MMA>, grid, CH_THREADS, shared, a,
                               lm_cuda_f32(out), lm_cuda_f32(states), slot_stride, (const float *)st->gdn_scratch,
                               c0, wave);
            else
                lm_cuda_launch(be, "gated_delta_rule (chunked)", gated_delta_chunked_kernel<FORM_PREPARED>, grid,
                               CH_THREADS, shared, a, lm_cuda_f32(out), lm_cuda_f32(states), slot_stride,
                               (const float *)st->gdn_scratch, c0, wave);
        }
        return true;
    }
    if (!shared_attribute((const void *)gated_delta_chunked_kernel<FORM_ONE_KERNEL>, shared))
        return false; /* the recurrent kernel takes every sequence */
    lm_cuda_launch(be, "gated_delta_rule (chunked)", gated_delta_chunked_kernel<FORM_ONE_KERNEL>, grid, CH_THREADS, shared, a,
                   lm_cuda_f32(out), lm_cuda_f32(states), slot_stride, (const float *)NULL, 0, INT32_MAX / CH);
    return true;
}
