/* Recurrent (token-by-token) form of the gated delta rule, model-spec §A.7:
 *   S = e^g·S;  d = β·(v − Sᵀk);  S += k ⊗ d;  o = Sᵀq.
 *
 * Every column j of S evolves on its own (column j of Sᵀk only reads column
 * j of S), so a value head is cut into tiles of TILE columns and each tile
 * runs all T tokens while it sits in L1: S is streamed from memory once per
 * call.  Per token a tile takes one fused pass over its rows:
 *   S_new = e^g·S + k ⊗ d   (store)   and, with S_new in registers,
 *   Sᵀk' and Sᵀq' for the NEXT token.
 * The output needs Sᵀq after the update, which we get without another pass:
 *   o = S_newᵀq = e^g·(Sᵀq) + (k·q)·d.
 * So T tokens cost T+1 passes over an L1-resident tile: the first reads the
 * state, the last writes it back, the ones between work on a private copy
 * (see WORK_LD below). */
#include <math.h>
#include <stddef.h>

#include "ops/cpu/gdn.h"
#include "ops/cpu/gdn_simd.h"

#define TILE 32 /* columns per tile: 128 rows × 32 floats = 16 KiB, half an L1 */

/* A task is one value head (all its tiles), or a share of one head's tiles
 * when there are fewer heads than threads.  Handing adjacent tiles of one
 * head to different threads made them fight over the cache lines where the
 * tiles meet (4x slower with 2 threads on a Xeon), so that is the exception. */
typedef struct {
    const lm_gdn_problem *p;
    int n_tiles;        /* tiles per head */
    int parts_per_head; /* tasks per head */
    bool simd;
} recurrent_job;

/* Pointers to token t's rows for value head hv / key head hk. */
typedef struct {
    const float *k, *q, *v;
    float *out;
    float decay, beta, kq;
} token_view;

/* k·q, once per token and tile: vectorised, since a scalar chain of dk
 * dependent FMAs costs as much as a third of the tile's own work. */
static float dot(const float *a, const float *b, int n, bool simd) {
#ifdef LM_GDN_AVX512
    if (simd) {
        __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
        int i = 0;
        for (; i + 32 <= n; i += 32) {
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
        }
        for (; i < n; i += 16) {
            __mmask16 m = lm_gdn_mask(n - i);
            acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i),
                                   acc0);
        }
        return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    }
#else
    (void)simd;
#endif
    float acc[4] = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int u = 0; u < 4; u++) acc[u] += a[i + u] * b[i + u];
    for (; i < n; i++) acc[0] += a[i] * b[i];
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

static token_view token_at(const lm_gdn_problem *p, int t, int hv, int hk, int j0, bool simd) {
    token_view tv;
    size_t kq_off = ((size_t)t * (size_t)p->Hk + (size_t)hk) * (size_t)p->dk;
    size_t v_off = ((size_t)t * (size_t)p->Hv + (size_t)hv) * (size_t)p->dv + (size_t)j0;
    size_t gate = (size_t)t * (size_t)p->Hv + (size_t)hv;
    tv.k = p->k + kq_off;
    tv.q = p->q + kq_off;
    tv.v = p->v + v_off;
    tv.out = p->out + v_off;
    tv.decay = expf(p->g[gate]);
    tv.beta = p->beta[gate];
    tv.kq = dot(tv.k, tv.q, p->dk, simd);
    return tv;
}

static void tile_portable(const lm_gdn_problem *p, int hv, int hk, int j0, int tw) {
    const int dk = p->dk, dv = p->dv;
    float *S = p->state + (size_t)hv * (size_t)dk * (size_t)dv + (size_t)j0;
    float mk[TILE], mq[TILE], d[TILE];
    token_view cur = token_at(p, 0, hv, hk, j0, false);
    for (int c = 0; c < tw; c++) mk[c] = mq[c] = 0;
    for (int i = 0; i < dk; i++) {
        const float *row = S + (size_t)i * (size_t)dv;
        for (int c = 0; c < tw; c++) {
            mk[c] += row[c] * cur.k[i];
            mq[c] += row[c] * cur.q[i];
        }
    }
    for (int t = 0; t < p->T; t++) {
        for (int c = 0; c < tw; c++) {
            d[c] = (cur.v[c] - cur.decay * mk[c]) * cur.beta;
            cur.out[c] = cur.decay * mq[c] + cur.kq * d[c];
        }
        if (t + 1 < p->T) {
            token_view next = token_at(p, t + 1, hv, hk, j0, false);
            for (int c = 0; c < tw; c++) mk[c] = mq[c] = 0;
            for (int i = 0; i < dk; i++) {
                float *row = S + (size_t)i * (size_t)dv;
                for (int c = 0; c < tw; c++) {
                    float s = cur.decay * row[c] + cur.k[i] * d[c];
                    row[c] = s;
                    mk[c] += s * next.k[i];
                    mq[c] += s * next.q[i];
                }
            }
            cur = next;
        } else {
            for (int i = 0; i < dk; i++) {
                float *row = S + (size_t)i * (size_t)dv;
                for (int c = 0; c < tw; c++) row[c] = cur.decay * row[c] + cur.k[i] * d[c];
            }
        }
    }
}

#ifdef LM_GDN_AVX512
/* Sᵀk and Sᵀq of a 32-column tile (two vectors each).  Even and odd rows
 * go to separate partial sums (p = 0, 1): 8 independent FMA chains, enough
 * to cover the FMA latency in a pass over 128 rows. */
typedef struct {
    __m512 k[2][2], q[2][2]; /* [row parity][vector] */
} tile_dots;

static inline void dots_zero(tile_dots *a) {
    a->k[0][0] = a->k[0][1] = a->k[1][0] = a->k[1][1] = _mm512_setzero_ps();
    a->q[0][0] = a->q[0][1] = a->q[1][0] = a->q[1][1] = _mm512_setzero_ps();
}

/* Adds row (s0, s1) of S times k_i and q_i into partial sum p. */
#define DOTS_ADD(a, p, s0, s1, ki, qi)                                                             \
    do {                                                                                           \
        __m512 kb_ = _mm512_set1_ps(ki), qb_ = _mm512_set1_ps(qi);                                 \
        (a).k[p][0] = _mm512_fmadd_ps((s0), kb_, (a).k[p][0]);                                     \
        (a).k[p][1] = _mm512_fmadd_ps((s1), kb_, (a).k[p][1]);                                     \
        (a).q[p][0] = _mm512_fmadd_ps((s0), qb_, (a).q[p][0]);                                     \
        (a).q[p][1] = _mm512_fmadd_ps((s1), qb_, (a).q[p][1]);                                     \
    } while (0)

/* Loads and stores of a tile row half; `masked` is a literal at every call
 * site.  Masked stores are slow on AMD cores (the conv kernel ran 1.5x
 * faster without them), so full tiles use plain ones. */
static inline __attribute__((always_inline)) __m512 load_half(const float *p, __mmask16 m,
                                                              bool masked) {
    return masked ? _mm512_maskz_loadu_ps(m, p) : _mm512_loadu_ps(p);
}
static inline __attribute__((always_inline)) void store_half(float *p, __m512 x, __mmask16 m,
                                                             bool masked) {
    if (masked)
        _mm512_mask_storeu_ps(p, m, x);
    else
        _mm512_storeu_ps(p, x);
}

/* A tile row: (s0, s1) = decay·src + k_i·d, stored to dst (which may be src). */
#define ROW_UPDATE(dst, src, s0, s1, decay, ki, d0, d1, load_masked, store_masked)                 \
    do {                                                                                           \
        __m512 kb_ = _mm512_set1_ps(ki);                                                           \
        s0 = _mm512_fmadd_ps(kb_, d0, _mm512_mul_ps(decay, load_half(src, m0, load_masked)));      \
        s1 = _mm512_fmadd_ps(kb_, d1,                                                              \
                             _mm512_mul_ps(decay, load_half((src) + 16, m1, load_masked)));        \
        store_half(dst, s0, m0, store_masked);                                                     \
        store_half((dst) + 16, s1, m1, store_masked);                                              \
    } while (0)

/* Between the first and the last token a tile lives in a private copy with
 * rows 48 floats apart.  In the state itself rows are dv floats apart (512
 * bytes for dv = 128), so every 8th row shares its address bits modulo
 * 4 KiB with a store still in flight, and on Intel cores those loads wait
 * on the false match ("4K aliasing"). */
#define WORK_LD 48
#define WORK_MAX_DK 256 /* larger heads update the state in place */

/* full: the tile is TILE columns wide (no masks on the state);
 * use_work: T > 1 and the tile fits the private copy.  Both literals. */
static inline __attribute__((always_inline)) void tile_avx512_body(const lm_gdn_problem *p, int hv,
                                                                   int hk, int j0, int tw,
                                                                   bool full, bool use_work) {
    const int dk = p->dk;
    const size_t dv = (size_t)p->dv;
    float *S = p->state + (size_t)hv * (size_t)dk * dv + (size_t)j0;
    const __mmask16 m0 = lm_gdn_mask(tw), m1 = lm_gdn_mask(tw - 16);
    const bool s_masked = !full, w_masked = !use_work && !full;
    float work_rows[WORK_MAX_DK * WORK_LD] __attribute__((aligned(64)));
    float *W = use_work ? work_rows : S;
    const size_t wld = use_work ? WORK_LD : dv;

    /* first pass: Sᵀk and Sᵀq for token 0 (and the copy into W); it also
     * prefetches the next tile's columns of the same rows (the next head's
     * first tile after the last), so the state streams in while this tile
     * computes instead of in a burst at the next one's start */
    const float *ahead = j0 + TILE < p->dv ? S + TILE
                        : hv + 1 < p->Hv  ? p->state + (size_t)(hv + 1) * (size_t)dk * dv
                                          : NULL;
    token_view cur = token_at(p, 0, hv, hk, j0, true);
    tile_dots acc;
    dots_zero(&acc);
    for (int i = 0; i < dk; i += 2) { /* two rows a step: parities 0 and 1 are literals */
        if (ahead) {
            _mm_prefetch((const char *)(ahead + (size_t)i * dv), _MM_HINT_T0);
            _mm_prefetch((const char *)(ahead + (size_t)i * dv + 16), _MM_HINT_T0);
            if (i + 1 < dk) {
                _mm_prefetch((const char *)(ahead + (size_t)(i + 1) * dv), _MM_HINT_T0);
                _mm_prefetch((const char *)(ahead + (size_t)(i + 1) * dv + 16), _MM_HINT_T0);
            }
        }
        __m512 s0 = load_half(S + (size_t)i * dv, m0, s_masked);
        __m512 s1 = load_half(S + (size_t)i * dv + 16, m1, s_masked);
        if (use_work) {
            _mm512_store_ps(W + (size_t)i * wld, s0);
            _mm512_store_ps(W + (size_t)i * wld + 16, s1);
        }
        DOTS_ADD(acc, 0, s0, s1, cur.k[i], cur.q[i]);
        if (i + 1 == dk) break;
        s0 = load_half(S + (size_t)(i + 1) * dv, m0, s_masked);
        s1 = load_half(S + (size_t)(i + 1) * dv + 16, m1, s_masked);
        if (use_work) {
            _mm512_store_ps(W + (size_t)(i + 1) * wld, s0);
            _mm512_store_ps(W + (size_t)(i + 1) * wld + 16, s1);
        }
        DOTS_ADD(acc, 1, s0, s1, cur.k[i + 1], cur.q[i + 1]);
    }
    for (int t = 0; t < p->T; t++) {
        const __m512 decay = _mm512_set1_ps(cur.decay), beta = _mm512_set1_ps(cur.beta);
        const __m512 kq = _mm512_set1_ps(cur.kq);
        __m512 mk0 = _mm512_add_ps(acc.k[0][0], acc.k[1][0]);
        __m512 mk1 = _mm512_add_ps(acc.k[0][1], acc.k[1][1]);
        __m512 mq0 = _mm512_add_ps(acc.q[0][0], acc.q[1][0]);
        __m512 mq1 = _mm512_add_ps(acc.q[0][1], acc.q[1][1]);
        __m512 d0 =
            _mm512_mul_ps(_mm512_fnmadd_ps(decay, mk0, _mm512_maskz_loadu_ps(m0, cur.v)), beta);
        __m512 d1 = _mm512_mul_ps(
            _mm512_fnmadd_ps(decay, mk1, _mm512_maskz_loadu_ps(m1, cur.v + 16)), beta);
        _mm512_mask_storeu_ps(cur.out, m0, _mm512_fmadd_ps(kq, d0, _mm512_mul_ps(decay, mq0)));
        _mm512_mask_storeu_ps(cur.out + 16, m1, _mm512_fmadd_ps(kq, d1, _mm512_mul_ps(decay, mq1)));
        __m512 s0, s1;
        if (t + 1 < p->T) { /* update in W, dots for the next token */
            token_view next = token_at(p, t + 1, hv, hk, j0, true);
            dots_zero(&acc);
            for (int i = 0; i < dk; i += 2) {
                float *row = W + (size_t)i * wld;
                ROW_UPDATE(row, row, s0, s1, decay, cur.k[i], d0, d1, w_masked, w_masked);
                DOTS_ADD(acc, 0, s0, s1, next.k[i], next.q[i]);
                if (i + 1 == dk) break;
                row += wld;
                ROW_UPDATE(row, row, s0, s1, decay, cur.k[i + 1], d0, d1, w_masked, w_masked);
                DOTS_ADD(acc, 1, s0, s1, next.k[i + 1], next.q[i + 1]);
            }
            cur = next;
        } else { /* last token: from W back into the state */
            for (int i = 0; i < dk; i++)
                ROW_UPDATE(S + (size_t)i * dv, W + (size_t)i * wld, s0, s1, decay, cur.k[i], d0, d1,
                           w_masked, s_masked);
        }
    }
}

static void tile_avx512(const lm_gdn_problem *p, int hv, int hk, int j0, int tw) {
    const bool full = tw == TILE, use_work = p->T > 1 && p->dk <= WORK_MAX_DK;
    if (full && use_work)
        tile_avx512_body(p, hv, hk, j0, tw, true, true);
    else if (full)
        tile_avx512_body(p, hv, hk, j0, tw, true, false);
    else if (use_work)
        tile_avx512_body(p, hv, hk, j0, tw, false, true);
    else
        tile_avx512_body(p, hv, hk, j0, tw, false, false);
}
#endif

/* Tiles [part's share] of value head hv of problem p. */
static void run_head_part(const lm_gdn_problem *p, int hv, int part, int parts, int n_tiles,
                          bool simd) {
    int hk = hv / (p->Hv / p->Hk); /* repeat-interleave, model-spec §H.4 */
    long tile_begin, tile_end;
    lm_split_range(n_tiles, parts, part, &tile_begin, &tile_end);
    for (long tile = tile_begin; tile < tile_end; tile++) {
        int j0 = (int)tile * TILE;
        int tw = p->dv - j0 < TILE ? p->dv - j0 : TILE;
#ifdef LM_GDN_AVX512
        if (simd) {
            tile_avx512(p, hv, hk, j0, tw);
            continue;
        }
#else
        (void)simd;
#endif
        tile_portable(p, hv, hk, j0, tw);
    }
}

static void recurrent_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const recurrent_job *job = ctx;
    run_head_part(job->p, task / job->parts_per_head, task % job->parts_per_head,
                  job->parts_per_head, job->n_tiles, job->simd);
}

/* Tasks per head when `heads` heads are shared out over the pool: one,
 * unless there are fewer heads than threads. */
static int parts_per_head(lm_pool *pool, long heads, int n_tiles) {
    int threads = pool ? lm_pool_size(pool) : 1;
    if (heads >= threads) return 1;
    int parts = (int)((threads + heads - 1) / heads);
    return parts < n_tiles ? parts : n_tiles;
}

void lm_gdn_recurrent(lm_pool *pool, const lm_gdn_problem *p, bool simd) {
    if (p->T <= 0 || p->Hv <= 0 || p->dv <= 0) return;
    recurrent_job job = {.p = p, .n_tiles = (p->dv + TILE - 1) / TILE, .simd = simd};
    job.parts_per_head = parts_per_head(pool, p->Hv, job.n_tiles);
    lm_gdn_run(pool, p->Hv * job.parts_per_head, recurrent_task, &job);
}

/* The batch's sequences in groups of up to BATCH_GROUP per pool run (a
 * stack list of their indices: kernels do not allocate to run). */
#define BATCH_GROUP 256

typedef struct {
    const lm_gdn_batch *b;
    int seq[BATCH_GROUP]; /* indices into b->seqs of this run's sequences */
    int n_tiles, parts_per_head;
    bool simd;
} batch_job;

/* Task = (sequence, value head, part): each sequence's heads are computed
 * exactly as lm_gdn_recurrent computes them (the split into parts only
 * decides which thread takes which tile), so a sequence's results do not
 * depend on the batch around it. */
static void batch_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const batch_job *job = ctx;
    int per_seq = job->b->Hv * job->parts_per_head;
    lm_gdn_problem p = lm_gdn_problem_of(job->b, job->seq[task / per_seq]);
    int rest = task % per_seq;
    run_head_part(&p, rest / job->parts_per_head, rest % job->parts_per_head, job->parts_per_head,
                  job->n_tiles, job->simd);
}

void lm_gdn_recurrent_batch(lm_pool *pool, const lm_gdn_batch *b, int max_T, bool simd) {
    if (b->Hv <= 0 || b->dv <= 0) return;
    batch_job job = {.b = b, .n_tiles = (b->dv + TILE - 1) / TILE, .simd = simd};
    for (int s = 0; s < b->seqs.n_seqs;) {
        int n = 0;
        for (; s < b->seqs.n_seqs && n < BATCH_GROUP; s++)
            if (b->seqs.length[s] > 0 && b->seqs.length[s] < max_T) job.seq[n++] = s;
        if (n == 0) continue;
        job.parts_per_head = parts_per_head(pool, (long)n * b->Hv, job.n_tiles);
        lm_gdn_run(pool, n * b->Hv * job.parts_per_head, batch_task, &job);
    }
}
