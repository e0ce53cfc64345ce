/* The reference sample_rows (ops.h): one row at a time, every pass over
 * the whole row, sums in float64.  It finds top_k's and top_p's
 * thresholds by bisection over the logits' order keys rather than by
 * sorting, so it needs no memory; the cuda kernel follows the same steps
 * with a block of threads per row, and the engine's host sampler
 * (engine/sampler.c, a histogram and partial sorts) is the independent
 * check of both (tests/test_engine.c). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops/ref/reference.h"

/* Order-preserving key of a float (a < b exactly when key(a) < key(b));
 * -0 and +0 share one key, as they are equal logits. */
static uint32_t order_key(float x) {
    if (x == 0) x = 0.0f;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static float bias_value(int32_t bits) {
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Steps 1-3: logit_bias in order, stop ids to -inf, penalties. */
static void apply_edits(const lm_sample_row *p, const lm_sample_entry *entries, float *x, int vocab) {
    for (int i = 0; i < p->n_bias; i++) {
        const lm_sample_entry *e = &entries[p->first_bias + i];
        if (e->id >= 0 && e->id < vocab) x[e->id] += bias_value(e->a);
    }
    for (int i = 0; i < p->n_stop; i++) {
        const lm_sample_entry *e = &entries[p->first_stop + i];
        if (e->id >= 0 && e->id < vocab) x[e->id] = -INFINITY;
    }
    float rep = p->repetition_penalty, presence = p->presence_penalty, frequency = p->frequency_penalty;
    bool rep_on = isfinite(rep) && rep > 0 && rep != 1.0f;
    bool presence_on = isfinite(presence) && presence != 0, frequency_on = isfinite(frequency) && frequency != 0;
    for (int i = 0; i < p->n_penalty; i++) {
        const lm_sample_entry *e = &entries[p->first_penalty + i];
        bool in_output = e->a > 0;
        if (e->id < 0 || e->id >= vocab || (!in_output && !e->b)) continue;
        float l = x[e->id];
        if (rep_on) l = l > 0 ? l / rep : l * rep;
        if (frequency_on) l -= frequency * (float)e->a;
        if (presence_on && in_output) l -= presence;
        x[e->id] = l;
    }
}

static int32_t argmax_of(const float *x, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
    return best < 0 ? 0 : best;
}

/* A row's temperature-scaled weights: exp((x - max) / T), the tokens
 * masking drops (not a number, too far below the max, under min_p) at 0. */
typedef struct {
    const float *x;
    int vocab;
    float max, inv_temp, min_weight;
} row_weights;

static float weight_of(const row_weights *rw, int i) {
    float distance = (rw->max - rw->x[i]) * rw->inv_temp;
    if (!(distance <= FLT_MAX)) return 0;
    float w = expf((rw->x[i] - rw->max) * rw->inv_temp);
    return w > 0 && w >= rw->min_weight ? w : 0;
}

/* Count and mass of the kept tokens with key >= floor. */
static void tally(const row_weights *rw, uint32_t floor, int64_t *count, double *mass) {
    *count = 0;
    *mass = 0;
    for (int i = 0; i < rw->vocab; i++) {
        float w = weight_of(rw, i);
        if (w > 0 && order_key(rw->x[i]) >= floor) {
            (*count)++;
            *mass += w;
        }
    }
}

/* The largest key T in [lo, hi] whose tally from T up still reaches the
 * goal (a count when by_count, else a mass); lo must reach it. */
static uint32_t bisect(const row_weights *rw, uint32_t lo, uint32_t hi, bool by_count, double goal) {
    while (lo < hi) {
        uint32_t mid = (uint32_t)(lo + ((uint64_t)hi - lo + 1) / 2);
        int64_t count;
        double mass;
        tally(rw, mid, &count, &mass);
        if ((by_count ? (double)count : mass) >= goal) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Steps 4-8 on an edited row: returns the token; *drew 1 if u was used. */
static int32_t draw_row(const lm_sample_row *p, const float *x, int vocab, int32_t *drew) {
    *drew = 0;
    if (!(p->temperature >= LM_SAMPLE_GREEDY_TEMPERATURE)) return argmax_of(x, vocab);
    float max = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (x[i] > max) max = x[i];
    if (!(max > -INFINITY && max < INFINITY)) return argmax_of(x, vocab);
    row_weights rw = {.x = x, .vocab = vocab, .max = max, .inv_temp = 1.0f / p->temperature,
                      .min_weight = p->min_p > 0 && p->min_p <= 1 ? p->min_p : 0};
    int64_t n_kept;
    double total;
    tally(&rw, 0, &n_kept, &total);
    if (n_kept == 0) return argmax_of(x, vocab);

    uint32_t floor = 0, top = order_key(max);
    if (p->top_k > 0 && p->top_k < n_kept) { /* ties with the k-th stay */
        floor = bisect(&rw, 0, top, true, (double)p->top_k);
        tally(&rw, floor, &n_kept, &total);
    }
    bool cut_ties = false;
    int32_t tie_last = vocab;
    if (p->top_p > 0 && p->top_p < 1) {
        double target = ((double)p->top_p - LM_SAMPLE_TOP_P_TOLERANCE) * total;
        uint32_t t = bisect(&rw, floor, top, false, target);
        int64_t n_above; /* t <= top, the key of a finite float: t + 1 does not wrap */
        double above;
        tally(&rw, t + 1, &n_above, &above);
        /* the tokens at t join in id order until the mass reaches target */
        float w_t = 0;
        int64_t n_ties = 0;
        for (int i = 0; i < vocab; i++)
            if (order_key(x[i]) == t && weight_of(&rw, i) > 0) {
                w_t = weight_of(&rw, i);
                n_ties++;
            }
        double need = w_t > 0 ? ceil((target - above) / w_t) : 1;
        int64_t keep = need < 1 ? 1 : need > (double)n_ties ? n_ties : (int64_t)need;
        for (int i = 0, seen = 0; i < vocab; i++)
            if (order_key(x[i]) == t && weight_of(&rw, i) > 0 && ++seen == keep) tie_last = i;
        floor = t;
        cut_ties = true;
    }

    /* step 8: the kept tokens in id order */
    double kept_mass = 0;
    for (int i = 0; i < vocab; i++) {
        uint32_t key = order_key(x[i]);
        if (key >= floor && !(cut_ties && key == floor && i > tie_last)) kept_mass += weight_of(&rw, i);
    }
    double target = p->uniform * kept_mass, cum = 0;
    int32_t last = -1;
    for (int i = 0; i < vocab; i++) {
        uint32_t key = order_key(x[i]);
        float w = weight_of(&rw, i);
        if (!(w > 0) || key < floor || (cut_ties && key == floor && i > tie_last)) continue;
        cum += w;
        last = i;
        if (cum > target) break;
    }
    *drew = 1;
    return last >= 0 ? last : argmax_of(x, vocab);
}

void lm_ref_sample_rows(int32_t *ids, int32_t *drew, float *logits, int rows, int vocab,
                        const lm_sample_row *params, const lm_sample_entry *entries) {
    for (int r = 0; r < rows; r++) {
        const lm_sample_row *p = &params[r];
        if (p->mode != LM_SAMPLE_ROW_DRAW) continue;
        float *x = logits + (int64_t)r * vocab;
        apply_edits(p, entries, x, vocab);
        ids[r] = draw_row(p, x, vocab, &drew[r]);
    }
}
