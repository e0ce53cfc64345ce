/* Causal depthwise conv1d + SiLU of the Gated DeltaNet input (model-spec
 * §A.7 step 1), vectorised over channels.
 *
 * Weights [C, K] and state [C, K-1] are channel-major, so a range of
 * channels first copies them tap-major (wt[j][c], old[j][c]): then every tap
 * of 16 channels is one vector.  Tokens are the outer loop and channels the
 * inner one, so input and output rows stream through memory in order.
 *   Short calls (decode): ranges of SMALL_RANGE channels with their copies
 *   on the stack; in a batch, the one-token rows of all sequences go
 *   16 channels at a time together (conv_decode_groups: taps loaded once,
 *   states spread by permutes, no gathers per sequence).  Long calls (prefill): one range per thread, copies in one
 *   heap buffer; walking [T, C] a narrow channel block at a time instead
 *   hops a page per token and ran 5x slower, bound by cache misses. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ops/cpu/gdn.h"
#include "ops/cpu/gdn_simd.h"

#define SMALL_RANGE 64          /* channels per task of a short call */
#define MAX_TAPS 8              /* widest kernel of the vector path (Qwen3.5: 4) */
#define LONG_MIN_T 8            /* calls with this many tokens use per-thread ranges */
#define PARALLEL_MIN_WORK 32768 /* T·C below this runs on the calling thread */

typedef struct {
    float *out;
    const float *in;
    float *state;
    const float *weight;
    int T, C, K;
    bool simd;
    float *taps; /* long calls: [K][C] weights then [K-1][C] state, tap-major */
} conv_job;

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* Any K, one channel at a time: the path for kernels wider than MAX_TAPS. */
static void channel_any_width(const conv_job *job, int c) {
    const int K = job->K, hist = K - 1, C = job->C;
    const float *w = job->weight + (size_t)c * (size_t)K;
    float *st = job->state + (size_t)c * (size_t)hist;
    for (int t = 0; t < job->T; t++) {
        float acc = 0;
        for (int j = 0; j < K; j++) {
            int src = t - hist + j;
            acc +=
                w[j] * (src >= 0 ? job->in[(size_t)src * (size_t)C + (size_t)c] : st[hist + src]);
        }
        job->out[(size_t)t * (size_t)C + (size_t)c] = silu(acc);
    }
    /* keep the last K-1 inputs of [state ; in]; move forward so an old
     * entry is read before it is overwritten */
    for (int j = 0; j < hist; j++) {
        int src = job->T + j; /* index into the concatenation */
        st[j] = src < hist ? st[src] : job->in[(size_t)(src - hist) * (size_t)C + (size_t)c];
    }
}

/* Channels [c0, c0+n) with tap-major copies wt (K rows) and old (K-1 rows)
 * of row stride ld, already positioned at channel c0. */
static void conv_range(const conv_job *job, int c0, int n, float *wt, float *old, size_t ld) {
    const int K = job->K, hist = K - 1;
    const size_t C = (size_t)job->C;
    for (int c = 0; c < n; c++) {
        for (int j = 0; j < K; j++)
            wt[(size_t)j * ld + (size_t)c] = job->weight[(size_t)(c0 + c) * (size_t)K + (size_t)j];
        for (int j = 0; j < hist; j++)
            old[(size_t)j * ld + (size_t)c] =
                job->state[(size_t)(c0 + c) * (size_t)hist + (size_t)j];
    }
    for (int t = 0; t < job->T; t++) {
        const float *rows[MAX_TAPS]; /* the K inputs of token t, oldest first */
        for (int j = 0; j < K; j++) {
            int src = t - hist + j;
            rows[j] =
                src >= 0 ? job->in + (size_t)src * C + (size_t)c0 : old + (size_t)(hist + src) * ld;
        }
        float *o = job->out + (size_t)t * C + (size_t)c0;
#ifdef LM_GDN_AVX512
        if (job->simd) {
            int c = 0;
            for (; c + 16 <= n; c += 16) {
                __m512 acc = _mm512_setzero_ps();
                for (int j = 0; j < K; j++)
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(wt + (size_t)j * ld + (size_t)c),
                                          _mm512_loadu_ps(rows[j] + c), acc);
                _mm512_storeu_ps(o + c, lm_gdn_silu512(acc));
            }
            for (; c < n; c += 16) {
                __mmask16 m = lm_gdn_mask(n - c);
                __m512 acc = _mm512_setzero_ps();
                for (int j = 0; j < K; j++)
                    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, wt + (size_t)j * ld + (size_t)c),
                                          _mm512_maskz_loadu_ps(m, rows[j] + c), acc);
                _mm512_mask_storeu_ps(o + c, m, lm_gdn_silu512(acc));
            }
            continue;
        }
#endif
        for (int c = 0; c < n; c++) {
            float acc = 0;
            for (int j = 0; j < K; j++) acc += wt[(size_t)j * ld + (size_t)c] * rows[j][c];
            o[c] = silu(acc);
        }
    }
    for (int j = 0; j < hist; j++) {
        int src = job->T + j; /* index into [old ; in] */
        const float *from =
            src < hist ? old + (size_t)src * ld : job->in + (size_t)(src - hist) * C + (size_t)c0;
        for (int c = 0; c < n; c++)
            job->state[(size_t)(c0 + c) * (size_t)hist + (size_t)j] = from[c];
    }
}

#ifdef LM_GDN_AVX512
/* One token (decode) on channels [c0, c0+n): the taps are gathered straight
 * from the channel-major weights and state (copying them tap-major first
 * cost 7 scalar moves a channel, most of the call), and the state update
 * is a shift of the flat [C, K-1] array by one float, with the new input
 * then written into each channel's last slot. */
static void conv_one_token_avx512(const conv_job *job, int c0, int n) {
    const int K = job->K, hist = K - 1;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i w_index = _mm512_mullo_epi32(lane, _mm512_set1_epi32(K));
    const __m512i s_index = _mm512_mullo_epi32(lane, _mm512_set1_epi32(hist));
    for (int c = c0; c < c0 + n; c += 16) {
        __mmask16 m = lm_gdn_mask(c0 + n - c);
        const float *w = job->weight + (size_t)c * (size_t)K;
        const float *st = job->state + (size_t)c * (size_t)hist;
        __m512 acc = _mm512_setzero_ps(); /* same order as conv_range: bit-identical */
        for (int j = 0; j < hist; j++)
            acc = _mm512_fmadd_ps(
                _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, w_index, w + j, 4),
                _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, s_index, st + j, 4), acc);
        acc =
            _mm512_fmadd_ps(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, w_index, w + hist, 4),
                            _mm512_maskz_loadu_ps(m, job->in + c), acc);
        _mm512_mask_storeu_ps(job->out + c, m, lm_gdn_silu512(acc));
    }
    if (hist == 0) return;
    float *flat = job->state + (size_t)c0 * (size_t)hist;
    const size_t len = (size_t)n * (size_t)hist;
    for (size_t i = 0; i < len; i += 16) { /* reads run ahead of writes: safe in place */
        size_t left = len - i;
        __m512 next =
            _mm512_maskz_loadu_ps(lm_gdn_mask((int)(left - 1 < 16 ? left - 1 : 16)), flat + i + 1);
        if (left >= 16)
            _mm512_storeu_ps(flat + i, next);
        else
            _mm512_mask_storeu_ps(flat + i, lm_gdn_mask((int)left), next);
    }
    for (int c = 0; c < n; c++) flat[(size_t)c * (size_t)hist + (size_t)hist - 1] = job->in[c0 + c];
}
#endif

#ifdef LM_GDN_AVX512
/* The decode rows (one token) of several sequences, 16 channels at a time
 * for all of them: the group's taps are gathered once and kept in
 * registers, and each sequence's 16 states (hist · 16 consecutive floats,
 * channel-major) are loaded as hist vectors and spread into tap vectors
 * with permutes, which replace conv_one_token_avx512's gathers.  The sums
 * are that function's, in its order, so the bits are too. */
typedef struct {
    __m512i tap_index[MAX_TAPS - 1];     /* tap j, lane c: (hist·c + j) % 16 */
    __mmask16 tap_mask[MAX_TAPS - 1][MAX_TAPS - 1]; /* [j][v]: lanes whose tap lies in vector v */
    __m512i in_index[MAX_TAPS - 1];      /* state vector v, lane l: the channel (16v + l) / hist */
    __mmask16 in_mask[MAX_TAPS - 1];     /* ... where 16v + l is a channel's last slot */
} conv_decode_layout;

static void conv_decode_layout_of(conv_decode_layout *L, int hist) {
    int32_t idx[16];
    for (int j = 0; j < hist; j++) {
        for (int v = 0; v < hist; v++) L->tap_mask[j][v] = 0;
        for (int c = 0; c < 16; c++) {
            int p = hist * c + j;
            idx[c] = p % 16;
            L->tap_mask[j][p / 16] |= (__mmask16)(1u << c);
        }
        L->tap_index[j] = _mm512_loadu_si512(idx);
    }
    for (int v = 0; v < hist; v++) {
        L->in_mask[v] = 0;
        for (int l = 0; l < 16; l++) {
            int p = 16 * v + l;
            idx[l] = p / hist;
            if (p % hist == hist - 1) L->in_mask[v] |= (__mmask16)(1u << l);
        }
        L->in_index[v] = _mm512_loadu_si512(idx);
    }
}

/* Channels [c0, c1) (whole groups of 16) of the decode sequences jobs[0..n). */
static void conv_decode_groups(const conv_job *jobs, int n, const conv_decode_layout *L, int c0,
                               int c1) {
    const int K = jobs[0].K, hist = K - 1;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i w_index = _mm512_mullo_epi32(lane, _mm512_set1_epi32(K));
    for (int c = c0; c < c1; c += 16) {
        __m512 wt[MAX_TAPS];
        const float *w = jobs[0].weight + (size_t)c * (size_t)K;
        for (int j = 0; j < K; j++) wt[j] = _mm512_i32gather_ps(w_index, w + j, 4);
        for (int s = 0; s < n; s++) {
            const conv_job *job = &jobs[s];
            float *st = job->state + (size_t)c * (size_t)hist;
            __m512 old[MAX_TAPS - 1], fresh[MAX_TAPS - 1];
            for (int v = 0; v < hist; v++) old[v] = _mm512_loadu_ps(st + 16 * v);
            __m512 in = _mm512_loadu_ps(job->in + c);
            __m512 acc = _mm512_setzero_ps();
            for (int j = 0; j < hist; j++) {
                __m512 tap = _mm512_setzero_ps();
                for (int v = 0; v < hist; v++)
                    tap = _mm512_mask_permutexvar_ps(tap, L->tap_mask[j][v], L->tap_index[j],
                                                     old[v]);
                acc = _mm512_fmadd_ps(wt[j], tap, acc);
            }
            acc = _mm512_fmadd_ps(wt[hist], in, acc);
            _mm512_storeu_ps(job->out + c, lm_gdn_silu512(acc));
            /* the state moves up one slot; each channel's last slot takes its input */
            for (int v = 0; v < hist; v++) {
                __m512 up = _mm512_maskz_loadu_ps(v + 1 < hist ? 0xFFFF : 0x7FFF, st + 16 * v + 1);
                fresh[v] = _mm512_mask_permutexvar_ps(up, L->in_mask[v], L->in_index[v], in);
            }
            for (int v = 0; v < hist; v++) _mm512_storeu_ps(st + 16 * v, fresh[v]);
        }
    }
}

#define DECODE_TASK_GROUPS 24 /* 16-channel groups per task */

typedef struct {
    const conv_job *seq;
    int n_seqs, full_groups;
    conv_decode_layout layout;
} decode_batch_job;

static void decode_batch_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const decode_batch_job *job = ctx;
    int g0 = task * DECODE_TASK_GROUPS;
    int g1 = g0 + DECODE_TASK_GROUPS;
    if (g1 > job->full_groups) g1 = job->full_groups;
    if (g0 < g1) conv_decode_groups(job->seq, job->n_seqs, &job->layout, 16 * g0, 16 * g1);
    /* the last task also takes the channels past the last whole group */
    if (g1 == job->full_groups && job->seq[0].C > 16 * g1)
        for (int s = 0; s < job->n_seqs; s++)
            conv_one_token_avx512(&job->seq[s], 16 * g1, job->seq[0].C - 16 * g1);
}

/* Whether the decode rows of a batch take conv_decode_groups. */
static bool decode_groups_apply(int K, int C, bool simd) {
    return simd && K >= 2 && K <= MAX_TAPS && (long)C * K <= INT32_MAX;
}

static void run_decode_batch(lm_pool *pool, const conv_job *seqs, int n) {
    decode_batch_job job = {.seq = seqs, .n_seqs = n, .full_groups = seqs[0].C / 16};
    conv_decode_layout_of(&job.layout, seqs[0].K - 1);
    int n_tasks = (job.full_groups + DECODE_TASK_GROUPS - 1) / DECODE_TASK_GROUPS;
    if (n_tasks == 0) n_tasks = 1;
    lm_gdn_run((long)n * seqs[0].C < PARALLEL_MIN_WORK ? NULL : pool, n_tasks, decode_batch_task,
               &job);
}
#endif

/* Channels [c_begin, c_end) of one call. */
static void conv_channels(const conv_job *job, long c_begin, long c_end) {
    if (c_begin >= c_end) return;
    if (job->K > MAX_TAPS) {
        for (long c = c_begin; c < c_end; c++) channel_any_width(job, (int)c);
        return;
    }
#ifdef LM_GDN_AVX512
    if (job->simd && job->T == 1 && (long)job->C * job->K <= INT32_MAX) {
        conv_one_token_avx512(job, (int)c_begin, (int)(c_end - c_begin));
        return;
    }
#endif
    if (job->taps) {
        size_t ld = (size_t)job->C;
        float *wt = job->taps + (size_t)c_begin;
        conv_range(job, (int)c_begin, (int)(c_end - c_begin), wt, wt + (size_t)job->K * ld, ld);
    } else {
        float wt[MAX_TAPS * SMALL_RANGE], old[(MAX_TAPS - 1) * SMALL_RANGE];
        conv_range(job, (int)c_begin, (int)(c_end - c_begin), wt, old, SMALL_RANGE);
    }
}

/* Channel range `chunk` of SMALL_RANGE channels of a short call. */
static void conv_small_chunk(const conv_job *job, int chunk) {
    long c_begin = (long)chunk * SMALL_RANGE;
    conv_channels(job, c_begin, c_begin + SMALL_RANGE < job->C ? c_begin + SMALL_RANGE : job->C);
}

static void conv_task(void *ctx, int task, int n_tasks) {
    const conv_job *job = ctx;
    if (!job->taps) {
        conv_small_chunk(job, task);
        return;
    }
    /* a multiple of 16 channels per range, so ranges meet on vector bounds */
    long groups = (job->C + 15) / 16, g0, g1;
    lm_split_range(groups, n_tasks, task, &g0, &g1);
    conv_channels(job, 16 * g0, 16 * g1 < job->C ? 16 * g1 : job->C);
}

/* Whether a call of T tokens takes the long-call layout (per-thread
 * channel ranges and a heap copy of the taps). */
static bool is_long_call(int T, int K) { return T >= LONG_MIN_T && K <= MAX_TAPS; }

void lm_gdn_conv1d_silu(lm_pool *pool, float *out, const float *in, int T, int C, float *state,
                        const float *weight, int K, bool simd) {
    if (T <= 0 || C <= 0 || K <= 0) return;
    conv_job job = {.out = out,
                    .in = in,
                    .state = state,
                    .weight = weight,
                    .T = T,
                    .C = C,
                    .K = K,
                    .simd = simd};
    if ((long)T * (long)C < PARALLEL_MIN_WORK) pool = NULL;
    if (is_long_call(T, K)) /* on failure: the short-call layout */
        job.taps = malloc(sizeof(float) * (size_t)(2 * K - 1) * (size_t)C);
    int n_tasks = job.taps ? (pool ? lm_pool_size(pool) : 1) : (C + SMALL_RANGE - 1) / SMALL_RANGE;
    lm_gdn_run(pool, n_tasks, conv_task, &job);
    free(job.taps);
}

/* Short sequences of a batch, up to SHORT_GROUP per pool run.  A task is
 * a range of SHORT_TASK_CHUNKS channel chunks of every sequence of the
 * group (a task per (sequence, chunk) cost more in taking tasks than in
 * the work at batched decode).  A chunk is computed exactly as in a call
 * of that sequence alone (the same conv_small_chunk), so batching does not
 * change a bit. */
#define SHORT_GROUP 64
#define SHORT_TASK_CHUNKS 8

typedef struct {
    conv_job seq[SHORT_GROUP];
    int n_seqs;
    int chunks; /* per sequence */
} short_batch_job;

static void short_batch_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const short_batch_job *job = ctx;
    int c0 = task * SHORT_TASK_CHUNKS;
    int c1 = c0 + SHORT_TASK_CHUNKS < job->chunks ? c0 + SHORT_TASK_CHUNKS : job->chunks;
    for (int c = c0; c < c1; c++)
        for (int s = 0; s < job->n_seqs; s++) conv_small_chunk(&job->seq[s], c);
}

static void run_short_batch(lm_pool *pool, short_batch_job *job, long work) {
    lm_gdn_run(work < PARALLEL_MIN_WORK ? NULL : pool,
               (job->chunks + SHORT_TASK_CHUNKS - 1) / SHORT_TASK_CHUNKS, short_batch_task, job);
}

void lm_gdn_conv1d_silu_batch(lm_pool *pool, float *out, const float *in, int C,
                              const float *weight, int K, float *states, int64_t slot_stride,
                              const lm_host_seq_batch *seqs, bool simd) {
    if (C <= 0 || K <= 0) return;
    short_batch_job job;
    job.chunks = (C + SMALL_RANGE - 1) / SMALL_RANGE;
    int n = 0;
    long work = 0;
#ifdef LM_GDN_AVX512
    conv_job decode[SHORT_GROUP]; /* one-token rows, when decode_groups_apply */
    int n_decode = 0;
#endif
    for (int s = 0; s < seqs->n_seqs; s++) {
        int T = seqs->length[s];
        if (T <= 0) continue;
        size_t f = (size_t)seqs->first[s];
        float *state = states + (size_t)seqs->slot[s] * (size_t)slot_stride;
        if (is_long_call(T, K)) { /* prefill: enough work for a pool run of its own */
            lm_gdn_conv1d_silu(pool, out + f * (size_t)C, in + f * (size_t)C, T, C, state, weight,
                               K, simd);
            continue;
        }
        conv_job one = {.out = out + f * (size_t)C,
                        .in = in + f * (size_t)C,
                        .state = state,
                        .weight = weight,
                        .T = T,
                        .C = C,
                        .K = K,
                        .simd = simd};
#ifdef LM_GDN_AVX512
        if (T == 1 && decode_groups_apply(K, C, simd)) {
            decode[n_decode++] = one;
            if (n_decode == SHORT_GROUP) {
                run_decode_batch(pool, decode, n_decode);
                n_decode = 0;
            }
            continue;
        }
#endif
        job.seq[n++] = one;
        work += (long)T * C;
        if (n == SHORT_GROUP) {
            job.n_seqs = n;
            run_short_batch(pool, &job, work);
            n = 0;
            work = 0;
        }
    }
    if (n > 0) {
        job.n_seqs = n;
        run_short_batch(pool, &job, work);
    }
#ifdef LM_GDN_AVX512
    if (n_decode > 0) run_decode_batch(pool, decode, n_decode);
#endif
}
