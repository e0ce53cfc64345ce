/* Causal depthwise conv1d + SiLU of the Gated DeltaNet input (model-spec
 * §A.7 step 1), vectorised over channels.  Channels are processed in blocks
 * of CB; a block first copies its weights and conv state into channel-minor
 * buffers so every tap is one contiguous vector, then walks the tokens. */
#include <math.h>
#include <stddef.h>

#include "ops/cpu/gdn.h"
#include "ops/cpu/gdn_simd.h"

#define CB 64      /* channels per block (4 AVX-512 vectors) */
#define MAX_TAPS 8 /* kernel widths handled by the blocked path (Qwen3.5: 4) */
#define PARALLEL_MIN_WORK 32768 /* T·C below this runs on the calling thread */

typedef struct {
    float *out;
    const float *in;
    float *state;
    const float *weight;
    int T, C, K;
    bool simd;
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
            acc += w[j] * (src >= 0 ? job->in[(size_t)src * (size_t)C + (size_t)c] : st[hist + src]);
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

static void block(const conv_job *job, int c0, int cb) {
    const int K = job->K, hist = K - 1;
    const size_t C = (size_t)job->C;
    float wt[MAX_TAPS][CB];         /* wt[j][c]   = weight[c0+c][j] */
    float old[MAX_TAPS - 1][CB];    /* old[j][c]  = state[c0+c][j] */
    for (int c = 0; c < cb; c++) {
        for (int j = 0; j < K; j++) wt[j][c] = job->weight[(size_t)(c0 + c) * (size_t)K + (size_t)j];
        for (int j = 0; j < hist; j++) old[j][c] = job->state[(size_t)(c0 + c) * (size_t)hist + (size_t)j];
    }
    for (int t = 0; t < job->T; t++) {
        const float *rows[MAX_TAPS]; /* the K inputs of token t, oldest first */
        for (int j = 0; j < K; j++) {
            int src = t - hist + j;
            rows[j] = src >= 0 ? job->in + (size_t)src * C + (size_t)c0 : old[hist + src];
        }
        float *o = job->out + (size_t)t * C + (size_t)c0;
#ifdef LM_GDN_AVX512
        if (job->simd) {
            for (int c = 0; c < cb; c += 16) {
                __mmask16 m = lm_gdn_mask(cb - c);
                __m512 acc = _mm512_setzero_ps();
                for (int j = 0; j < K; j++)
                    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, &wt[j][c]),
                                          _mm512_maskz_loadu_ps(m, rows[j] + c), acc);
                _mm512_mask_storeu_ps(o + c, m, lm_gdn_silu512(acc));
            }
            continue;
        }
#endif
        for (int c = 0; c < cb; c++) {
            float acc = 0;
            for (int j = 0; j < K; j++) acc += wt[j][c] * rows[j][c];
            o[c] = silu(acc);
        }
    }
    for (int j = 0; j < hist; j++) {
        int src = job->T + j; /* index into [old ; in] */
        const float *from = src < hist ? old[src] : job->in + (size_t)(src - hist) * C + (size_t)c0;
        for (int c = 0; c < cb; c++) job->state[(size_t)(c0 + c) * (size_t)hist + (size_t)j] = from[c];
    }
}

static void conv_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const conv_job *job = ctx;
    int c0 = task * CB;
    int cb = job->C - c0 < CB ? job->C - c0 : CB;
    if (job->K > MAX_TAPS) {
        for (int c = c0; c < c0 + cb; c++) channel_any_width(job, c);
        return;
    }
    block(job, c0, cb);
}

void lm_gdn_conv1d_silu(lm_pool *pool, float *out, const float *in, int T, int C, float *state,
                        const float *weight, int K, bool simd) {
    if (T <= 0 || C <= 0 || K <= 0) return;
    conv_job job = {.out = out, .in = in, .state = state, .weight = weight,
                    .T = T, .C = C, .K = K, .simd = simd};
    int n_blocks = (C + CB - 1) / CB;
    if ((long)T * (long)C < PARALLEL_MIN_WORK) pool = NULL;
    lm_gdn_run(pool, n_blocks, conv_task, &job);
}
