#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler_vectors.h"

/* Histogram resolution: buckets per unit of (max - logit) / temperature, i.e.
 * per factor e of probability; the last bucket takes everything further. */
#define BUCKETS_PER_UNIT 32.0f
#define N_BUCKETS LM_SAMPLER_HIST_BUCKETS
#define DROPPED_BUCKET UINT16_MAX /* above every real bucket */

/* ------------------------------------------------------------ scratch */

#define X(s) extern const lm_sampler_vectors lm_sampler_vectors_##s;
LM_KERNEL_SETS
#undef X

const lm_sampler_vectors *lm_sampler_vectors_of(lm_kernel_set set) {
#define X(s) [LM_KERNEL_SET_ID(s)] = &lm_sampler_vectors_##s,
    static const lm_sampler_vectors *const sets[LM_KERNEL_SET_COUNT] = {LM_KERNEL_SETS};
#undef X
    return (unsigned)set < LM_KERNEL_SET_COUNT ? sets[set] : NULL;
}

lm_status lm_sampler_vectors_for_process(const lm_sampler_vectors **out, lm_error *err) {
    lm_kernel_set set;
    lm_status st = lm_kernel_set_for_process(&set, NULL, err);
    if (st != LM_OK) return lm_fail_context(err, "sampler: ");
    *out = lm_sampler_vectors_of(set);
    return LM_OK;
}

lm_status lm_sampler_scratch_init(lm_sampler_scratch *scratch, int vocab, lm_error *err) {
    memset(scratch, 0, sizeof *scratch);
    if (vocab <= 0 || vocab > LM_SAMPLER_MAX_VOCAB)
        return lm_fail(err, LM_ERR_INVALID, "sampler: vocabulary size %d is outside [1, %d]", vocab,
                       LM_SAMPLER_MAX_VOCAB);
    lm_status st = lm_sampler_vectors_for_process(&scratch->vectors, err);
    if (st != LM_OK) return st;
    size_t n = (size_t)vocab;
    scratch->weights = malloc(n * sizeof *scratch->weights);
    scratch->raw_logits = malloc(n * sizeof *scratch->raw_logits);
    scratch->candidates = malloc(n * sizeof *scratch->candidates);
    scratch->buckets = malloc(n * sizeof *scratch->buckets);
    scratch->block_mass = malloc((n + LM_SAMPLER_BLOCK - 1) / LM_SAMPLER_BLOCK * sizeof *scratch->block_mass);
    if (!scratch->weights || !scratch->raw_logits || !scratch->candidates || !scratch->buckets ||
        !scratch->block_mass) {
        lm_sampler_scratch_free(scratch);
        return lm_fail(err, LM_ERR_NOMEM, "sampler: cannot allocate work buffers for %d tokens", vocab);
    }
    scratch->vocab = vocab;
    return LM_OK;
}

void lm_sampler_scratch_free(lm_sampler_scratch *scratch) {
    if (!scratch) return;
    free(scratch->weights);
    free(scratch->raw_logits);
    free(scratch->candidates);
    free(scratch->buckets);
    free(scratch->block_mass);
    memset(scratch, 0, sizeof *scratch);
}

/* ------------------------------------------------------------ vector helpers */

/* First index of the largest element (0 when none is a number above -inf).
 * One pass: a block's max is found with vectors and the block is rescanned
 * (from L1) only when it beats the best so far. */
static int32_t argmax(const lm_sampler_vectors *v, const float *x, int n) {
    enum { BLOCK = 256 };
    int32_t best = 0;
    float best_value = -INFINITY;
    for (int start = 0; start < n; start += BLOCK) {
        int len = n - start < BLOCK ? n - start : BLOCK;
        float m = v->max(x + start, len);
        if (m > best_value) {
            int i = start;
            while (x[i] != m) i++;
            best = i;
            best_value = m;
        }
    }
    return best;
}

/* ------------------------------------------------------------ steps 1-3 */

static void apply_logit_bias(const loom_sampling *p, float *logits, int vocab) {
    if (p->n_logit_bias <= 0 || !p->logit_bias_ids || !p->logit_bias_values) return;
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias_ids[i];
        if (id >= 0 && id < vocab) logits[id] += p->logit_bias_values[i];
    }
}

static void mask_stop_ids(const lm_sample_context *ctx, float *logits, int vocab) {
    if (!ctx || ctx->n_generated >= ctx->min_tokens || !ctx->stop_ids) return;
    for (int i = 0; i < ctx->n_stop_ids; i++) {
        int32_t id = ctx->stop_ids[i];
        if (id >= 0 && id < vocab) logits[id] = -INFINITY;
    }
}

static bool repetition_on(const loom_sampling *p) {
    float rep = p->repetition_penalty;
    return isfinite(rep) && rep > 0 && rep != 1.0f;
}
static bool presence_on(const loom_sampling *p) {
    return isfinite(p->presence_penalty) && p->presence_penalty != 0;
}
static bool frequency_on(const loom_sampling *p) {
    return isfinite(p->frequency_penalty) && p->frequency_penalty != 0;
}

static void apply_penalties(const loom_sampling *p, const lm_sample_context *ctx, float *logits,
                            int vocab) {
    if (!ctx || !ctx->counts || !ctx->counts->entries) return;
    float rep = p->repetition_penalty, presence = p->presence_penalty, frequency = p->frequency_penalty;
    bool rep_on = repetition_on(p), presence_is_on = presence_on(p), frequency_is_on = frequency_on(p);
    if (!rep_on && !presence_is_on && !frequency_is_on) return;
    const lm_token_counts *counts = ctx->counts;
    for (int i = 0; i < counts->n_distinct; i++) {
        const lm_token_count_entry *e = &counts->entries[i];
        if (e->id < 0 || e->id >= vocab) continue;
        bool in_output = e->output_count > 0;
        if (!in_output && !e->in_prompt) continue;
        float l = logits[e->id];
        if (rep_on) l = l > 0 ? l / rep : l * rep;
        if (frequency_is_on) l -= frequency * (float)e->output_count;
        if (presence_is_on && in_output) l -= presence;
        logits[e->id] = l;
    }
}

/* Steps 1-3 change no logit and step 4 is greedy: the token is the argmax
 * of the logits as given.  Mirrors the "off" tests of steps 1-3. */
bool lm_sample_is_raw_argmax(const loom_sampling *p, const lm_sample_context *ctx) {
    if (p->temperature >= LM_SAMPLER_GREEDY_TEMPERATURE) return false;
    if (p->logprobs >= 0) return false;
    if (p->n_logit_bias > 0 && p->logit_bias_ids && p->logit_bias_values) return false;
    bool stops_masked = ctx && ctx->n_generated < ctx->min_tokens && ctx->stop_ids && ctx->n_stop_ids > 0;
    if (stops_masked) return false;
    bool has_history = ctx && ctx->counts && ctx->counts->entries;
    return !has_history || (!repetition_on(p) && !presence_on(p) && !frequency_on(p));
}

/* ------------------------------------------------------------ steps 4-7 */

typedef enum {
    PLAN_ONE_TOKEN,  /* greedy, or nothing left to sample: plan.token */
    PLAN_FULL,       /* every token, weighted by scratch->weights */
    PLAN_CANDIDATES, /* scratch->candidates[0 .. n) */
} plan_kind;

typedef struct {
    plan_kind kind;
    int32_t token; /* PLAN_ONE_TOKEN */
    int n;         /* PLAN_CANDIDATES */
    double total;  /* sum of the kept weights */
} sample_plan;

static int bucket_of(float distance) {
    float b = distance * BUCKETS_PER_UNIT;
    return b < (float)(N_BUCKETS - 1) ? (int)b : N_BUCKETS - 1;
}

static int by_logit_desc(const void *a, const void *b) {
    const lm_sampler_candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void sort_candidates(lm_sampler_candidate *c, int n) {
    if (n > 1) qsort(c, (size_t)n, sizeof *c, by_logit_desc);
}

static double weight_sum(const lm_sampler_candidate *c, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += c[i].weight;
    return s;
}

/* Copies the kept tokens of buckets 0..last into scratch->candidates,
 * grouped by bucket (so in descending order of bucket), and returns how many. */
static int collect_candidates(const float *logits, int vocab, int last, lm_sampler_scratch *s) {
    int pos = 0;
    for (int b = 0; b <= last; b++) {
        s->bucket_start[b] = pos;
        pos += s->hist_count[b];
    }
    s->bucket_start[last + 1] = pos;
    /* hist_count is spent: reuse it as each bucket's write cursor. */
    for (int b = 0; b <= last; b++) s->hist_count[b] = s->bucket_start[b];
    for (int i = 0; i < vocab; i++) {
        int b = s->buckets[i];
        if (b <= last) s->candidates[s->hist_count[b]++] = (lm_sampler_candidate){i, logits[i], s->weights[i]};
    }
    return pos;
}

/* top_k then top_p over the histogram of the kept tokens; only the bucket
 * holding a boundary is sorted. */
static sample_plan select_top(const loom_sampling *p, const float *logits, int vocab, int n_kept,
                              double total, lm_sampler_scratch *s) {
    bool top_k_on = p->top_k > 0 && p->top_k < n_kept;
    bool top_p_on = p->top_p > 0 && p->top_p < 1;
    int last = N_BUCKETS - 1;
    if (top_k_on) {
        int count = 0;
        for (int b = 0; b < N_BUCKETS; b++) {
            count += s->hist_count[b];
            if (count >= p->top_k) {
                last = b;
                break;
            }
        }
    } else {
        double target = ((double)p->top_p - LM_SAMPLER_TOP_P_TOLERANCE) * total, cum = 0;
        for (int b = 0; b < N_BUCKETS; b++) {
            cum += s->hist_mass[b];
            if (cum >= target) {
                last = b;
                break;
            }
        }
    }
    int n = collect_candidates(logits, vocab, last, s);
    lm_sampler_candidate *c = s->candidates;
    int sorted_bucket = -1;
    if (top_k_on) {
        sort_candidates(c + s->bucket_start[last], s->bucket_start[last + 1] - s->bucket_start[last]);
        sorted_bucket = last;
        int keep = p->top_k;
        while (keep < n && c[keep].logit == c[keep - 1].logit) keep++;
        n = keep;
        total = weight_sum(c, n);
    }
    if (top_p_on) {
        double target = ((double)p->top_p - LM_SAMPLER_TOP_P_TOLERANCE) * total, cum = 0;
        for (int b = 0; b <= last; b++) {
            int lo = s->bucket_start[b], hi = s->bucket_start[b + 1] < n ? s->bucket_start[b + 1] : n;
            if (lo >= n) break;
            double mass = weight_sum(c + lo, hi - lo);
            if (cum + mass < target) {
                cum += mass;
                continue;
            }
            if (b != sorted_bucket) sort_candidates(c + lo, hi - lo);
            n = hi; /* if rounding keeps the running sum short: the whole bucket */
            for (int j = lo; j < hi; j++) {
                cum += c[j].weight;
                if (cum >= target) {
                    n = j + 1;
                    break;
                }
            }
            break;
        }
    }
    return (sample_plan){.kind = PLAN_CANDIDATES, .n = n, .total = weight_sum(c, n)};
}

/* The masking pass: drops -inf / NaN logits, underflowed weights and min_p
 * losers (weight 0 from here on), records each block's kept mass (so a draw
 * need not walk the whole vocabulary) and, when narrowing, the histogram.
 * Returns the kept mass, the sum of the block masses in order. */
static double mask_weights(const float *logits, int vocab, float max, float inv_temp, float min_weight,
                           bool narrowing, lm_sampler_scratch *s, int *n_kept) {
    float *w = s->weights;
    double total = 0;
    int kept = 0;
    for (int start = 0, block = 0; start < vocab; start += LM_SAMPLER_BLOCK, block++) {
        int end = vocab - start < LM_SAMPLER_BLOCK ? vocab : start + LM_SAMPLER_BLOCK;
        double acc[4] = {0, 0, 0, 0}; /* four chains: double adds have latency */
        for (int i = start; i < end; i++) {
            float distance = (max - logits[i]) * inv_temp;
            if (!(distance <= FLT_MAX) || !(w[i] > 0) || w[i] < min_weight) {
                w[i] = 0;
                if (narrowing) s->buckets[i] = DROPPED_BUCKET;
                continue;
            }
            acc[i & 3] += w[i];
            kept++;
            if (narrowing) {
                int b = bucket_of(distance);
                s->buckets[i] = (uint16_t)b;
                s->hist_count[b]++;
                s->hist_mass[b] += w[i];
            }
        }
        s->block_mass[block] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        total += s->block_mass[block];
    }
    *n_kept = kept;
    return total;
}

/* top_k (then top_p) without weighing every token, when k is at most the
 * number of LM_SAMPLER_BLOCK blocks: the k-th largest of the blocks'
 * maxima is a bound B at or below the k-th largest logit, so the tokens
 * at or above B hold the top k; only they are weighed and sorted.  Their
 * weights come from the same exp as the full path's, and the kept set,
 * its order and the top_p walk are the full path's (select_top), so the
 * plan is the one the histogram would give.  False (nothing to use) when
 * the bound does not narrow the row enough or fewer than k of the tokens
 * at or above it are kept (min_p): the caller takes the full path.  The
 * weights of tokens outside the plan are left undefined (the draw reads
 * a weight only for a token the plan keeps). */
static bool plan_top_k_fast(const loom_sampling *p, const float *logits, int vocab, float max, float inv_temp,
                            float min_weight, lm_sampler_scratch *s, sample_plan *plan) {
    int k = p->top_k, n_blocks = (vocab + LM_SAMPLER_BLOCK - 1) / LM_SAMPLER_BLOCK;
    if (k <= 0 || k > n_blocks || k >= vocab) return false;
    lm_sampler_candidate *c = s->candidates;
    for (int b = 0; b < n_blocks; b++) {
        int start = b * LM_SAMPLER_BLOCK, len = vocab - start < LM_SAMPLER_BLOCK ? vocab - start : LM_SAMPLER_BLOCK;
        c[b] = (lm_sampler_candidate){.id = b, .logit = s->vectors->max(logits + start, len)};
    }
    sort_candidates(c, n_blocks);
    float bound = c[k - 1].logit;
    if (!(bound > -INFINITY)) return false;
    /* the tokens at or above the bound, their logits gathered for the exp */
    enum { MAX_FAST = 1 << 16 };
    int n = 0;
    for (int i = 0; i < vocab; i++)
        if (logits[i] >= bound) {
            if (n == MAX_FAST) return false;
            c[n++] = (lm_sampler_candidate){.id = i, .logit = logits[i]};
        }
    float *w = s->weights; /* scratch for the gathered logits, then their weights */
    for (int j = 0; j < n; j++) w[j] = c[j].logit;
    s->vectors->exp_scaled(w, n, max, inv_temp, w);
    int kept = 0;
    for (int j = 0; j < n; j++) {
        float distance = (max - c[j].logit) * inv_temp;
        if (!(distance <= FLT_MAX) || !(w[j] > 0) || w[j] < min_weight) continue;
        c[kept] = c[j];
        c[kept++].weight = w[j];
    }
    if (kept < k) return false;
    sort_candidates(c, kept);
    int keep = k; /* ties with the k-th stay */
    while (keep < kept && c[keep].logit == c[keep - 1].logit) keep++;
    n = keep;
    if (p->top_p > 0 && p->top_p < 1) {
        double target = ((double)p->top_p - LM_SAMPLER_TOP_P_TOLERANCE) * weight_sum(c, n), cum = 0;
        for (int j = 0; j < n; j++) {
            cum += c[j].weight;
            if (cum >= target) {
                n = j + 1;
                break;
            }
        }
    }
    for (int j = 0; j < n; j++) s->weights[c[j].id] = c[j].weight;
    *plan = (sample_plan){.kind = PLAN_CANDIDATES, .n = n, .total = weight_sum(c, n)};
    return true;
}

/* Steps 1-7: what to draw from. */
static sample_plan plan_sample(const loom_sampling *p, float *logits, int vocab,
                               const lm_sample_context *ctx, lm_sampler_scratch *s) {
    apply_logit_bias(p, logits, vocab);
    mask_stop_ids(ctx, logits, vocab);
    apply_penalties(p, ctx, logits, vocab);

    sample_plan one = {.kind = PLAN_ONE_TOKEN};
    if (!(p->temperature >= LM_SAMPLER_GREEDY_TEMPERATURE)) {
        one.token = argmax(s->vectors, logits, vocab);
        return one;
    }
    float max = s->vectors->max(logits, vocab);
    if (!(max > -INFINITY && max < INFINITY)) {
        one.token = argmax(s->vectors, logits, vocab);
        return one;
    }
    float inv_temp = 1.0f / p->temperature;
    bool min_p_on = p->min_p > 0 && p->min_p <= 1;
    float min_weight = min_p_on ? p->min_p : 0; /* the max token's weight is exactly 1 */
    sample_plan fast;
    if (plan_top_k_fast(p, logits, vocab, max, inv_temp, min_weight, s, &fast)) return fast;
    s->vectors->exp_scaled(logits, vocab, max, inv_temp, s->weights);

    bool narrowing = (p->top_k > 0 && p->top_k < vocab) || (p->top_p > 0 && p->top_p < 1);
    if (narrowing) {
        memset(s->hist_count, 0, sizeof s->hist_count);
        memset(s->hist_mass, 0, sizeof s->hist_mass);
    }
    int n_kept = 0;
    double total = mask_weights(logits, vocab, max, inv_temp, min_weight, narrowing, s, &n_kept);
    if (n_kept == 0) {
        one.token = argmax(s->vectors, logits, vocab);
        return one;
    }
    bool top_k_on = p->top_k > 0 && p->top_k < n_kept;
    bool top_p_on = p->top_p > 0 && p->top_p < 1;
    if (!top_k_on && !top_p_on) return (sample_plan){.kind = PLAN_FULL, .total = total};
    return select_top(p, logits, vocab, n_kept, total, s);
}

/* ------------------------------------------------------------ step 8 */

/* The kept candidates as a rule over the whole vocabulary: a token is
 * kept when its weight is not 0 and its logit is above `floor`, or equal
 * to it with an id up to `tie_last` (the candidates are every kept token
 * above the lowest kept logit and, at that logit, a prefix in id order:
 * top_k keeps all ties, top_p takes tied tokens lower id first).  Refills
 * block_mass with the candidates' mass per block. */
typedef struct {
    float floor;
    int32_t tie_last;
} kept_rule;

static kept_rule candidates_rule(const sample_plan *plan, lm_sampler_scratch *s, int vocab) {
    kept_rule rule = {.floor = INFINITY, .tie_last = -1};
    const lm_sampler_candidate *c = s->candidates;
    for (int i = 0; i < plan->n; i++)
        if (c[i].logit < rule.floor) rule.floor = c[i].logit;
    int n_blocks = (vocab + LM_SAMPLER_BLOCK - 1) / LM_SAMPLER_BLOCK;
    memset(s->block_mass, 0, sizeof *s->block_mass * (size_t)n_blocks);
    for (int i = 0; i < plan->n; i++) {
        if (c[i].logit == rule.floor && c[i].id > rule.tie_last) rule.tie_last = c[i].id;
        s->block_mass[c[i].id / LM_SAMPLER_BLOCK] += c[i].weight;
    }
    return rule;
}

static bool kept_by(const kept_rule *rule, const float *logits, int32_t i) {
    return logits[i] > rule->floor || (logits[i] == rule->floor && i <= rule->tie_last);
}

/* Step 8: the kept tokens in id order (whatever the plan; sample_rows on a
 * device walks them the same way), u·total into them. */
static int32_t draw(const sample_plan *plan, lm_sampler_scratch *s, const float *logits, int vocab, double u) {
    double target = u * plan->total, cum = 0;
    int32_t last = -1;
    bool candidates = plan->kind == PLAN_CANDIDATES;
    kept_rule rule = candidates ? candidates_rule(plan, s, vocab) : (kept_rule){0};
    /* Find the block by its mass, then the token inside it. */
    for (int start = 0, block = 0; start < vocab; start += LM_SAMPLER_BLOCK, block++) {
        double mass = s->block_mass[block];
        if (!(cum + mass > target)) {
            cum += mass;
            continue;
        }
        int end = vocab - start < LM_SAMPLER_BLOCK ? vocab : start + LM_SAMPLER_BLOCK;
        for (int i = start; i < end; i++) {
            if ((candidates && !kept_by(&rule, logits, i)) || !(s->weights[i] > 0)) continue;
            cum += s->weights[i];
            last = i;
            if (cum > target) return i;
        }
        return last; /* the block's own sum fell short of its mass by rounding */
    }
    for (int i = vocab - 1; i >= 0 && last < 0; i--)
        if ((!candidates || kept_by(&rule, logits, i)) && s->weights[i] > 0) last = i;
    return last; /* rounding left target at the very top */
}

/* ------------------------------------------------------------ logprobs */

/* log(sum(exp(x))): the raw logprob of token i is x[i] minus this. */
static double raw_log_normalizer(const lm_sampler_vectors *v, const float *x, int n) {
    float max = v->max(x, n);
    if (!(max > -INFINITY && max < INFINITY)) return max == INFINITY ? INFINITY : 0;
    return (double)max + log(v->exp_sum(x, n, max));
}

/* The k largest raw logits into top (as values, not yet logprobs), best
 * first, ties: lower id first; NaN skipped.  Returns how many (<= k). */
static int raw_top(const lm_sampler_vectors *v, const float *x, int n, int k, loom_token_logprob *top) {
    enum { BLOCK = 256 };
    int count = 0;
    for (int start = 0; start < n && k > 0; start += BLOCK) {
        int end = n - start < BLOCK ? n : start + BLOCK;
        /* Once the list is full, most blocks hold nothing better: skip them whole. */
        if (count == k && !(v->max(x + start, end - start) > top[k - 1].logprob)) continue;
        for (int i = start; i < end; i++) {
            float value = x[i];
            if (value != value) continue;
            int pos;
            if (count == k) {
                if (!(value > top[k - 1].logprob)) continue; /* equal: the lower id stays */
                pos = k - 1;
            } else {
                pos = count++;
            }
            while (pos > 0 && top[pos - 1].logprob < value) {
                top[pos] = top[pos - 1];
                pos--;
            }
            top[pos] = (loom_token_logprob){.token = i, .logprob = value};
        }
    }
    return count;
}

/* ------------------------------------------------------------ public */

static lm_status check_call(const loom_sampling *p, const float *logits, int vocab,
                            const lm_sampler_scratch *s, const void *out, lm_error *err) {
    if (!p || !logits || !s || !out) return lm_fail(err, LM_ERR_INVALID, "sampler: NULL argument");
    if (vocab <= 0 || vocab > s->vocab)
        return lm_fail(err, LM_ERR_INVALID, "sampler: vocabulary size %d is outside the scratch's [1, %d]",
                       vocab, s->vocab);
    return LM_OK;
}

lm_status lm_sample(const loom_sampling *params, float *logits, int vocab,
                    const lm_sample_context *ctx, lm_rng *rng, lm_sampler_scratch *scratch,
                    lm_sample_result *result, lm_error *err) {
    lm_status st = check_call(params, logits, vocab, scratch, result, err);
    if (st != LM_OK) return st;
    memset(result, 0, sizeof *result);
    int n_logprobs = params->logprobs;
    double log_normalizer = 0;
    if (n_logprobs >= 0) {
        if (n_logprobs > LM_SAMPLER_MAX_LOGPROBS) n_logprobs = LM_SAMPLER_MAX_LOGPROBS;
        memcpy(scratch->raw_logits, logits, sizeof *logits * (size_t)vocab);
        log_normalizer = raw_log_normalizer(scratch->vectors, logits, vocab);
        result->n_top = raw_top(scratch->vectors, logits, vocab, n_logprobs, result->top);
        for (int i = 0; i < result->n_top; i++)
            result->top[i].logprob = (float)((double)result->top[i].logprob - log_normalizer);
    }

    sample_plan plan = plan_sample(params, logits, vocab, ctx, scratch);
    if (plan.kind == PLAN_ONE_TOKEN) {
        result->token = plan.token;
    } else {
        if (!rng) return lm_fail(err, LM_ERR_INVALID, "sampler: random sampling needs an rng");
        int32_t token = draw(&plan, scratch, logits, vocab, lm_rng_uniform(rng));
        result->token = token >= 0 ? token : argmax(scratch->vectors, logits, vocab);
    }
    if (n_logprobs >= 0)
        result->logprob = (float)((double)scratch->raw_logits[result->token] - log_normalizer);
    return LM_OK;
}

lm_status lm_sampler_distribution(const loom_sampling *params, float *logits, int vocab,
                                  const lm_sample_context *ctx, lm_sampler_scratch *scratch,
                                  float *probs, lm_error *err) {
    lm_status st = check_call(params, logits, vocab, scratch, probs, err);
    if (st != LM_OK) return st;
    sample_plan plan = plan_sample(params, logits, vocab, ctx, scratch);
    memset(probs, 0, sizeof *probs * (size_t)vocab);
    if (plan.kind == PLAN_ONE_TOKEN) {
        probs[plan.token] = 1;
    } else if (plan.kind == PLAN_FULL) {
        for (int i = 0; i < vocab; i++) probs[i] = (float)(scratch->weights[i] / plan.total);
    } else {
        for (int i = 0; i < plan.n; i++)
            probs[scratch->candidates[i].id] = (float)(scratch->candidates[i].weight / plan.total);
    }
    return LM_OK;
}

/* ------------------------------------------------------------ on the device */

bool lm_sampler_device_row(const loom_sampling *p, const lm_sample_context *ctx, double uniform,
                           lm_sample_row *row, lm_sample_entry *entries, int max_entries, int *n_entries) {
    if (p->logprobs >= 0) return false;
    int n_bias = p->n_logit_bias > 0 && p->logit_bias_ids && p->logit_bias_values ? p->n_logit_bias : 0;
    bool stops = ctx && ctx->n_generated < ctx->min_tokens && ctx->stop_ids;
    int n_stop = stops && ctx->n_stop_ids > 0 ? ctx->n_stop_ids : 0;
    bool penalties = ctx && ctx->counts && ctx->counts->entries &&
                     (repetition_on(p) || presence_on(p) || frequency_on(p));
    int n_penalty = penalties ? ctx->counts->n_distinct : 0;
    int at = *n_entries;
    if ((int64_t)n_bias + n_stop + n_penalty > (int64_t)max_entries - at) return false;
    *row = (lm_sample_row){.mode = LM_SAMPLE_ROW_DRAW,
                           .top_k = p->top_k,
                           .temperature = p->temperature,
                           .top_p = p->top_p,
                           .min_p = p->min_p,
                           .repetition_penalty = p->repetition_penalty,
                           .presence_penalty = p->presence_penalty,
                           .frequency_penalty = p->frequency_penalty,
                           .uniform = uniform};
    row->first_bias = at, row->n_bias = n_bias;
    for (int i = 0; i < n_bias; i++) {
        int32_t bits;
        memcpy(&bits, &p->logit_bias_values[i], sizeof bits);
        entries[at++] = (lm_sample_entry){.id = p->logit_bias_ids[i], .a = bits};
    }
    row->first_stop = at, row->n_stop = n_stop;
    for (int i = 0; i < n_stop; i++) entries[at++] = (lm_sample_entry){.id = ctx->stop_ids[i]};
    row->first_penalty = at, row->n_penalty = n_penalty;
    for (int i = 0; i < n_penalty; i++) {
        const lm_token_count_entry *e = &ctx->counts->entries[i];
        entries[at++] = (lm_sample_entry){.id = e->id, .a = e->output_count, .b = e->in_prompt};
    }
    *n_entries = at;
    return true;
}

/* ------------------------------------------------------------ parameters */

static bool invalid(char *err, size_t err_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool invalid(char *err, size_t err_size, const char *fmt, ...) {
    if (err && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return false;
}

bool lm_sampling_validate(const loom_sampling *s, int vocab, char *err, size_t err_size) {
    if (!(isfinite(s->temperature) && s->temperature >= 0))
        return invalid(err, err_size, "temperature must be a finite number >= 0, got %g", (double)s->temperature);
    if (!(s->top_p > 0 && s->top_p <= 1))
        return invalid(err, err_size, "top_p must be in (0, 1], got %g", (double)s->top_p);
    if (s->top_k < -1)
        return invalid(err, err_size, "top_k must be -1 or 0 (off) or at least 1, got %d", s->top_k);
    if (!(s->min_p >= 0 && s->min_p <= 1))
        return invalid(err, err_size, "min_p must be in [0, 1], got %g", (double)s->min_p);
    if (!(isfinite(s->repetition_penalty) && s->repetition_penalty > 0))
        return invalid(err, err_size, "repetition_penalty must be a finite number > 0, got %g",
                       (double)s->repetition_penalty);
    if (!(s->presence_penalty >= -2 && s->presence_penalty <= 2))
        return invalid(err, err_size, "presence_penalty must be in [-2, 2], got %g", (double)s->presence_penalty);
    if (!(s->frequency_penalty >= -2 && s->frequency_penalty <= 2))
        return invalid(err, err_size, "frequency_penalty must be in [-2, 2], got %g",
                       (double)s->frequency_penalty);
    if (s->n_logit_bias < 0)
        return invalid(err, err_size, "logit_bias has a negative size %d", s->n_logit_bias);
    if (s->n_logit_bias > 0 && (!s->logit_bias_ids || !s->logit_bias_values))
        return invalid(err, err_size, "logit_bias has %d entries but no ids or values", s->n_logit_bias);
    for (int i = 0; i < s->n_logit_bias; i++) {
        int32_t id = s->logit_bias_ids[i];
        float v = s->logit_bias_values[i];
        if (id < 0 || (vocab > 0 && id >= vocab)) {
            if (vocab > 0)
                return invalid(err, err_size, "logit_bias token id %d is outside the vocabulary [0, %d)",
                               (int)id, vocab);
            return invalid(err, err_size, "logit_bias token id %d is negative", (int)id);
        }
        if (!(v >= -100 && v <= 100))
            return invalid(err, err_size, "logit_bias value for token %d must be in [-100, 100], got %g",
                           (int)id, (double)v);
    }
    if (s->logprobs > LM_SAMPLER_MAX_LOGPROBS)
        return invalid(err, err_size, "logprobs must be at most %d, got %d", LM_SAMPLER_MAX_LOGPROBS,
                       s->logprobs);
    if (s->logprobs < -1)
        return invalid(err, err_size, "logprobs must be -1 (none) or in [0, %d], got %d",
                       LM_SAMPLER_MAX_LOGPROBS, s->logprobs);
    return true;
}

void lm_sampling_defaults(loom_sampling *s) {
    memset(s, 0, sizeof *s);
    s->temperature = 1.0f;
    s->top_k = -1;
    s->top_p = 1.0f;
    s->min_p = 0.0f;
    s->repetition_penalty = 1.0f;
    s->presence_penalty = 0.0f;
    s->frequency_penalty = 0.0f;
    s->has_seed = false;
    s->logprobs = -1;
}
