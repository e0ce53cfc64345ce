// sample_rows (ops.h): a step's sampled rows drawn where their logits are,
// so a row brings back 8 bytes instead of its vocabulary of floats.
//
// One block of 1024 threads per row, the steps of ops/ref/sample.c: the
// edits, the row's max, the kept tokens (weight exp((x - max) / T) above
// zero and min_p), top_k's and top_p's thresholds by bisection over the
// logits' order keys (each step of it a count or a mass of the keys from
// a pivot up), then the draw walking the kept tokens in id order.  Every
// sum is a fixed tree or a fixed order, so a row's token depends on its
// logits and its uniform only, never on the other rows or on timing.
//
// Speed: a bisection step is one pass over the row (1 MB at Qwen's
// 248,320 tokens, from L2).  top_k first narrows the row to the tokens at
// or above a bound (the k-th largest of the threads' own maxima, never
// above the k-th largest of the row) and, when they are few, copies them
// to shared memory in id order: top_k's and top_p's bisections then run
// over a few thousand keys.  top_p alone does the same when the threads'
// maxima alone carry its mass (a peaked row), and bisects over the whole
// row otherwise (a flat one).
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_primitives.h"
#include "ops/cuda/launch.h"

#define THREADS 1024
#define WARPS (THREADS / 32)
#define CANDIDATES 4096 /* tokens of a top_k row kept in shared memory */

__device__ static uint32_t order_key(float x) {
    if (x == 0) x = 0.0f;
    uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ static float key_value(uint32_t key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// f(value, index) for each of the row's elements that this thread takes:
// 16 bytes a load when the row allows (a 1 MB row is read many times).
template <typename F> __device__ static void each_element(const float *x, int n, F f) {
    lm_for_each_in_row<THREADS>(x, n, f);
}

struct row_shared {
    uint32_t key[CANDIDATES]; // the candidates (top_k), in id order
    int32_t id[CANDIDATES];
    uint32_t maxima[THREADS]; // each thread's largest key (0: none)
    uint32_t bound;
    double sum_d[WARPS];
    long long sum_c[WARPS];
    float max_f[WARPS];
    int32_t idx[WARPS];
    double total_d;
    long long total_c;
    float best_v;
    int32_t best_i;
    int32_t pick;
};

// ---- block reductions: a warp tree, then the warps' results by warp 0;
// every thread gets the answer.  Fixed orders: the same bits every run.

__device__ static void block_tally(row_shared *s, long long &count, double &mass) {
    for (int off = 16; off > 0; off /= 2) {
        count += __shfl_down_sync(0xffffffffu, count, off);
        mass += __shfl_down_sync(0xffffffffu, mass, off);
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) s->sum_c[warp] = count, s->sum_d[warp] = mass;
    __syncthreads();
    if (warp == 0) {
        count = s->sum_c[lane];
        mass = s->sum_d[lane];
        for (int off = 16; off > 0; off /= 2) {
            count += __shfl_down_sync(0xffffffffu, count, off);
            mass += __shfl_down_sync(0xffffffffu, mass, off);
        }
        if (lane == 0) s->total_c = count, s->total_d = mass;
    }
    __syncthreads();
    count = s->total_c;
    mass = s->total_d;
    __syncthreads();
}


// The largest value (NaN never wins, the lowest id on ties): max and argmax.
__device__ static void block_best(row_shared *s, float &v, int &i) {
    for (int off = 16; off > 0; off /= 2) {
        float ov = __shfl_down_sync(0xffffffffu, v, off);
        int oi = __shfl_down_sync(0xffffffffu, i, off);
        if (lm_argmax_better(ov, oi, v, i)) v = ov, i = oi;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) s->max_f[warp] = v, s->idx[warp] = i;
    __syncthreads();
    if (warp == 0) {
        v = s->max_f[lane];
        i = s->idx[lane];
        for (int off = 16; off > 0; off /= 2) {
            float ov = __shfl_down_sync(0xffffffffu, v, off);
            int oi = __shfl_down_sync(0xffffffffu, i, off);
            if (lm_argmax_better(ov, oi, v, i)) v = ov, i = oi;
        }
        if (lane == 0) s->best_v = v, s->best_i = i;
    }
    __syncthreads();
    v = s->best_v;
    i = s->best_i;
    __syncthreads();
}

__device__ static int32_t row_argmax(row_shared *s, const float *x, int vocab) {
    float v = NAN;
    int i = 0x7fffffff;
    each_element(x, vocab, [&](float e, int j) {
        if (lm_argmax_better(e, j, v, i)) v = e, i = j;
    });
    block_best(s, v, i);
    return isnan(v) ? 0 : i;
}

// Exclusive prefix of every thread's v in thread order, and the total.
__device__ static double block_scan(row_shared *s, double v, double &total) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    double inclusive = v;
    for (int off = 1; off < 32; off *= 2) {
        double o = __shfl_up_sync(0xffffffffu, inclusive, off);
        if (lane >= off) inclusive += o;
    }
    if (lane == 31) s->sum_d[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        double w = s->sum_d[lane], wi = w;
        for (int off = 1; off < 32; off *= 2) {
            double o = __shfl_up_sync(0xffffffffu, wi, off);
            if (lane >= off) wi += o;
        }
        s->sum_d[lane] = wi - w; // the warps before this one
        if (lane == 31) s->total_d = wi;
    }
    __syncthreads();
    double before = s->sum_d[warp] + (inclusive - v);
    total = s->total_d;
    __syncthreads();
    return before;
}

// ---- the row

// Where the kept tokens are read from: the whole row, or the candidates.
struct source {
    const float *x; // the row (candidates: NULL)
    const row_shared *s;
    int n;          // tokens (vocab) or candidates
    __device__ uint32_t key(int j) const { return x ? order_key(x[j]) : s->key[j]; }
    __device__ bool number(int j) const { return x ? !isnan(x[j]) : true; }
    __device__ int32_t id(int j) const { return x ? j : s->id[j]; }
};

struct weights {
    float max, inv_temp;
    __device__ float of(float v) const { return __expf((v - max) * inv_temp); }
};

// Count and mass of the tokens whose key is at least `from`.
__device__ static void tally(row_shared *s, const source &src, const weights &w, uint32_t from, bool by_mass,
                             long long &count, double &mass) {
    count = 0;
    mass = 0;
    if (src.x) {
        each_element(src.x, src.n, [&](float e, int) {
            if (isnan(e) || order_key(e) < from) return;
            count++;
            if (by_mass) mass += w.of(e);
        });
    } else {
        for (int j = threadIdx.x; j < src.n; j += THREADS) {
            uint32_t k = src.key(j);
            if (k < from || !src.number(j)) continue;
            count++;
            if (by_mass) mass += w.of(key_value(k));
        }
    }
    block_tally(s, count, mass);
}

// bisect's search over n keys in shared memory, by the first warp alone
// (a few thousand keys: no block-wide barrier per step); every thread gets
// the answer.
__device__ static uint32_t bisect_shared(row_shared *s, const uint32_t *keys, int n, const weights &w, uint32_t lo,
                                         uint32_t hi, bool by_mass, double goal) {
    if (threadIdx.x < 32) {
        while (lo < hi) {
            uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) >> 1);
            long long c = 0;
            double m = 0;
            for (int j = threadIdx.x; j < n; j += 32) {
                uint32_t k = keys[j];
                if (k < mid) continue;
                c++;
                if (by_mass) m += w.of(key_value(k));
            }
            for (int off = 16; off > 0; off /= 2) {
                c += __shfl_down_sync(0xffffffffu, c, off);
                m += __shfl_down_sync(0xffffffffu, m, off);
            }
            c = __shfl_sync(0xffffffffu, c, 0); // lane 0's sums decide for all
            m = __shfl_sync(0xffffffffu, m, 0);
            if ((by_mass ? m : (double)c) >= goal) lo = mid;
            else hi = mid - 1;
        }
        if (threadIdx.x == 0) s->bound = lo;
    }
    __syncthreads();
    uint32_t found = s->bound;
    __syncthreads();
    return found;
}

// The largest key T in [lo, hi] whose tally from T up still reaches goal.
__device__ static uint32_t bisect(row_shared *s, const source &src, const weights &w, uint32_t lo, uint32_t hi,
                                  bool by_mass, double goal) {
    if (!src.x) return bisect_shared(s, s->key, src.n, w, lo, hi, by_mass, goal);
    while (lo < hi) {
        uint32_t mid = lo + (uint32_t)(((uint64_t)hi - lo + 1) >> 1);
        long long count;
        double mass;
        tally(s, src, w, mid, by_mass, count, mass);
        if ((by_mass ? mass : (double)count) >= goal) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The tokens with key >= from, copied to shared memory in id order (each
// thread takes a contiguous stretch of ids): how many, or -1 when they do
// not fit.
__device__ static int gather_candidates(row_shared *s, const float *x, int vocab, uint32_t from) {
    int per = (vocab + THREADS - 1) / THREADS, lo = threadIdx.x * per;
    int hi = min(lo + per, vocab);
    int mine = 0;
    for (int j = lo; j < hi; j++) mine += !isnan(x[j]) && order_key(x[j]) >= from;
    double total;
    int at = (int)block_scan(s, (double)mine, total);
    if (total > CANDIDATES) return -1;
    for (int j = lo; j < hi; j++)
        if (!isnan(x[j]) && order_key(x[j]) >= from) s->key[at] = order_key(x[j]), s->id[at++] = j;
    __syncthreads();
    return (int)total;
}

// The lowest of the threads' keys (0xffffffff from a thread without one).
__device__ static uint32_t block_min_key(row_shared *s, uint32_t key) {
    float v = key == 0xffffffffu ? NAN : 0.0f; // "best" = a number, then the lowest index
    int i = (int)(key ^ 0x80000000u);          // as a signed int, in the keys' order
    block_best(s, v, i);
    return isnan(v) ? 0xffffffffu : ((uint32_t)i ^ 0x80000000u);
}

// A bound at or below the key top_k or top_p stops at, from the threads'
// own largest keys at or above floor: the largest key B whose maxima from
// B up reach the goal (k of them; or their mass reaches it), since the
// whole row from B up holds at least those.  floor when they do not.
__device__ static uint32_t thread_max_bound(row_shared *s, const float *x, int vocab, uint32_t floor, uint32_t top,
                                            const weights &w, bool by_mass, double goal) {
    uint32_t mine = 0;
    each_element(x, vocab, [&](float e, int) {
        if (!isnan(e) && order_key(e) >= floor) mine = max(mine, order_key(e));
    });
    s->maxima[threadIdx.x] = mine;
    __syncthreads();
    return bisect_shared(s, s->maxima, THREADS, w, floor, top, by_mass, goal);
}

// The id of the `nth` (from 1) token whose key is `key`, in id order.
__device__ static int32_t nth_tie(row_shared *s, const source &src, uint32_t key, long long nth) {
    int per = (src.n + THREADS - 1) / THREADS, lo = threadIdx.x * per;
    int hi = min(lo + per, src.n);
    long long mine = 0;
    for (int j = lo; j < hi; j++) mine += src.number(j) && src.key(j) == key;
    double total;
    long long seen = (long long)block_scan(s, (double)mine, total);
    if (threadIdx.x == 0) s->pick = 0x7fffffff;
    __syncthreads();
    for (int j = lo; j < hi && seen < nth; j++)
        if (src.number(j) && src.key(j) == key && ++seen == nth) s->pick = src.id(j);
    __syncthreads();
    return s->pick;
}

// Step 8: the kept tokens (key >= floor; at the floor, ids up to tie_last)
// in id order; the thread whose stretch holds u·total walks it.
__device__ static int32_t draw(row_shared *s, const source &src, const weights &w, uint32_t floor,
                               int32_t tie_last, double u) {
    int per = (src.n + THREADS - 1) / THREADS, lo = threadIdx.x * per;
    int hi = min(lo + per, src.n);
    double mine = 0;
    int32_t last = -1;
    for (int j = lo; j < hi; j++) {
        uint32_t k = src.key(j);
        if (!src.number(j) || k < floor || (k == floor && src.id(j) > tie_last)) continue;
        mine += w.of(key_value(k));
        last = src.id(j);
    }
    double total;
    double before = block_scan(s, mine, total);
    double target = u * total;
    if (threadIdx.x == 0) s->pick = -1;
    __syncthreads();
    // the first thread whose stretch crosses the target (the sums below
    // repeat its own in the same order, so it finds its token)
    bool crosses = before + mine > target && mine > 0;
    int first = __syncthreads_or(crosses) ? 0 : -1;
    if (first == 0) {
        __shared__ int first_thread;
        if (threadIdx.x == 0) first_thread = THREADS;
        __syncthreads();
        if (crosses) atomicMin(&first_thread, (int)threadIdx.x);
        __syncthreads();
        if ((int)threadIdx.x == first_thread) {
            double cum = before;
            for (int j = lo; j < hi; j++) {
                uint32_t k = src.key(j);
                if (!src.number(j) || k < floor || (k == floor && src.id(j) > tie_last)) continue;
                cum += w.of(key_value(k));
                s->pick = src.id(j);
                if (cum > target) break;
            }
        }
        __syncthreads();
        return s->pick;
    }
    // rounding left the target at the very top: the last kept token
    float v = last >= 0 ? 0.0f : NAN;
    int i = last >= 0 ? -last : 0x7fffffff; // the largest id as the "lowest" index
    block_best(s, v, i);
    return isnan(v) ? -1 : -i;
}

__device__ static float bias_value(int32_t bits) { return __int_as_float(bits); }

// Steps 1-3, as ops/ref/sample.c: logit_bias in order (one thread: an id
// may repeat), stop ids, the penalties (distinct ids: in parallel).
__device__ static void apply_edits(const lm_sample_row &p, const lm_sample_entry *entries, float *x, int vocab) {
    if (threadIdx.x == 0)
        for (int i = 0; i < p.n_bias; i++) {
            const lm_sample_entry e = entries[p.first_bias + i];
            if (e.id >= 0 && e.id < vocab) x[e.id] += bias_value(e.a);
        }
    __syncthreads();
    for (int i = threadIdx.x; i < p.n_stop; i += THREADS) {
        int32_t id = entries[p.first_stop + i].id;
        if (id >= 0 && id < vocab) x[id] = -INFINITY;
    }
    __syncthreads();
    float rep = p.repetition_penalty, presence = p.presence_penalty, frequency = p.frequency_penalty;
    bool rep_on = isfinite(rep) && rep > 0 && rep != 1.0f;
    bool presence_on = isfinite(presence) && presence != 0, frequency_on = isfinite(frequency) && frequency != 0;
    for (int i = threadIdx.x; i < p.n_penalty; i += THREADS) {
        const lm_sample_entry e = entries[p.first_penalty + i];
        bool in_output = e.a > 0;
        if (e.id < 0 || e.id >= vocab || (!in_output && !e.b)) continue;
        float l = x[e.id];
        if (rep_on) l = l > 0 ? l / rep : l * rep;
        if (frequency_on) l -= frequency * (float)e.a;
        if (presence_on && in_output) l -= presence;
        x[e.id] = l;
    }
    __syncthreads();
}

__global__ static void __launch_bounds__(THREADS) sample_kernel(int32_t *ids, int32_t *drew, float *logits, int vocab,
                                                                const lm_sample_row *params,
                                                                const lm_sample_entry *entries) {
    lm_cuda_let_next_then_wait();
    __shared__ row_shared s;
    const lm_sample_row p = params[blockIdx.x];
    if (p.mode != LM_SAMPLE_ROW_DRAW) return;
    float *x = logits + (int64_t)blockIdx.x * vocab;
    apply_edits(p, entries, x, vocab);
    bool first = threadIdx.x == 0;
    if (!(p.temperature >= LM_SAMPLE_GREEDY_TEMPERATURE)) {
        int32_t t = row_argmax(&s, x, vocab);
        if (first) ids[blockIdx.x] = t, drew[blockIdx.x] = 0;
        return;
    }
    float max = -INFINITY;
    each_element(x, vocab, [&](float e, int) { max = fmaxf(max, e); }); // fmaxf skips NaN
    {
        int unused = 0;
        block_best(&s, max, unused);
    }
    weights w = {max, 1.0f / p.temperature};
    float min_weight = p.min_p > 0 && p.min_p <= 1 ? p.min_p : 0;
    // the kept tokens: every key from the lowest one whose weight passes
    uint32_t lowest = 0xffffffffu;
    long long n_kept = 0;
    if (max > -INFINITY && max < INFINITY)
        each_element(x, vocab, [&](float e, int) {
            float distance = (max - e) * w.inv_temp;
            if (!(distance <= FLT_MAX)) return;
            float we = w.of(e);
            if (we > 0 && we >= min_weight) lowest = min(lowest, order_key(e)), n_kept++;
        });
    {
        double unused = 0;
        block_tally(&s, n_kept, unused);
    }
    lowest = block_min_key(&s, lowest);
    if (n_kept == 0) {
        int32_t t = row_argmax(&s, x, vocab);
        if (first) ids[blockIdx.x] = t, drew[blockIdx.x] = 0;
        return;
    }
    uint32_t floor = lowest, top = order_key(max);
    source src = {x, &s, vocab};
    if (p.top_k > 0 && p.top_k < n_kept) {
        uint32_t bound = thread_max_bound(&s, x, vocab, floor, top, w, false, (double)p.top_k);
        int n = gather_candidates(&s, x, vocab, bound);
        if (n >= 0) src = source{NULL, &s, n};
        floor = bisect(&s, src, w, bound, top, false, (double)p.top_k); // ties with the k-th stay
    }
    int32_t tie_last = 0x7fffffff;
    if (p.top_p > 0 && p.top_p < 1) {
        long long count;
        double total;
        tally(&s, src, w, floor, true, count, total);
        double target = ((double)p.top_p - LM_SAMPLE_TOP_P_TOLERANCE) * total;
        uint32_t lo = floor;
        if (src.x) { /* a peaked row: the few tokens the threads' maxima say carry the mass */
            uint32_t bound = thread_max_bound(&s, x, vocab, floor, top, w, true, target);
            int n = bound > floor ? gather_candidates(&s, x, vocab, bound) : -1;
            if (n >= 0) src = source{NULL, &s, n}, lo = bound;
        }
        uint32_t t = bisect(&s, src, w, lo, top, true, target);
        long long n_at, n_above;
        double m_at, above;
        tally(&s, src, w, t, false, n_at, m_at);
        tally(&s, src, w, t + 1, true, n_above, above); // t <= top, a finite float's key: no wrap
        long long n_ties = n_at - n_above;
        float w_t = w.of(key_value(t));
        double need = w_t > 0 ? ceil((target - above) / w_t) : 1;
        long long keep = need < 1 ? 1 : need > (double)n_ties ? n_ties : (long long)need;
        if (keep < n_ties) tie_last = nth_tie(&s, src, t, keep);
        floor = t;
    }
    int32_t t = draw(&s, src, w, floor, tie_last, p.uniform);
    if (t < 0) t = row_argmax(&s, x, vocab);
    if (first) ids[blockIdx.x] = t, drew[blockIdx.x] = 1;
}

void lm_cuda_sample_rows(lm_backend *be, lm_mem ids, lm_mem drew, lm_mem logits, int rows, int vocab, lm_mem params,
                         lm_mem entries) {
    if (rows <= 0 || vocab <= 0) return;
    lm_cuda_launch(be, "sample_rows", sample_kernel, rows, THREADS, 0, lm_cuda_i32(ids), lm_cuda_i32(drew),
                   lm_cuda_f32(logits), vocab, (const lm_sample_row *)lm_cuda_ptr(params),
                   (const lm_sample_entry *)lm_cuda_ptr(entries));
}
