/* Adaptive speculation: the cost model, the acceptance estimates and the
 * choice of drafts per sequence (spec_control.h says what and why). */
#include "engine/spec_control.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    FORWARD_WARMUP = 4,      /* first samples of a row count: plain mean */
    ZERO_STREAK_COLD = 3,    /* decisions of 0 drafts before the head stops catching up */
    WARM_STEPS = 16,         /* catch-up steps before a returning sequence drafts (measured on
                                loom-tiny: probes after 2 accepted 44%, after 16 67%, as many as
                                an always caught-up head) */
    PROBE_INTERVAL_MIN = 16, /* steps a cold sequence waits for its first probe */
    PROBE_INTERVAL_MAX = 256,
    PLAIN_REFRESH = 32,      /* while drafting, one step in this many runs plain */
};
#define FORWARD_ALPHA 0.05   /* moving average of a row count's step time (steps are
                                milliseconds: this still follows the load within a second) */
#define FORWARD_CLIP 4.0     /* a sample counts at most this many times the estimate: the
                                mean is what throughput pays, so only rare stalls are cut */
#define FORWARD_WEIGHT 8.0   /* the most weight one row count has in the fit */
#define HEAD_DECAY 0.9       /* per head measurement */
#define ACCEPT_DECAY 0.95     /* per verify of a sequence */
#define ACCEPT_PRIOR 2.0     /* pseudo-tries of the engine-wide rate in a sequence's estimate */
#define ACCEPT_GLOBAL 0.05   /* moving average of the engine-wide rate, per verify */
#define PROBE_SHARE 0.015    /* of the measured step time that probes may spend (with the
                                exploring and the steps before going cold, acceptance 0 then
                                costs under 3%: test_speculative's planted runs; 2% did not) */
#define PROBE_CREDIT_MAX 0.25 /* seconds of probe credit kept at most */
#define MARGIN 1.03          /* drafting must beat plain decoding by this much to start,
                                and lose by this much to stop */

uint64_t lm_spec_monotonic_clock(void *ctx, const lm_timed_work *work) {
    (void)ctx;
    (void)work;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t lm_spec_sim_clock_now(void *ctx, const lm_timed_work *work) {
    lm_spec_sim_clock *f = ctx;
    if (work->end) {
        double s = work->phase == LM_TIMED_STEP ? f->fixed + f->per_row * work->rows
                                                : f->head_round * work->rounds + f->head_row * work->rows;
        f->now += (uint64_t)(s * 1e9);
    }
    return f->now;
}

lm_status lm_spec_control_init(lm_spec_control *c, int k_max, int max_rows, int max_candidates,
                               lm_error *err) {
    memset(c, 0, sizeof *c);
    if (k_max < 1 || max_rows < 1 || max_candidates < 1)
        return lm_fail(err, LM_ERR_INVALID, "speculation control: k_max %d, rows %d, candidates %d", k_max,
                       max_rows, max_candidates);
    c->clock = lm_spec_monotonic_clock;
    c->k_max = k_max;
    c->max_rows = max_rows;
    c->acceptance = 0.5;
    c->cap_candidates = max_candidates;
    c->forward = calloc((size_t)max_rows + 1, sizeof *c->forward);
    c->samples = calloc((size_t)max_rows + 1, sizeof *c->samples);
    c->gains = malloc(sizeof *c->gains * (size_t)max_candidates * (size_t)k_max);
    c->order = malloc(sizeof *c->order * (size_t)max_candidates * (size_t)k_max);
    c->owner = malloc(sizeof *c->owner * (size_t)max_candidates * (size_t)k_max);
    c->count = malloc(sizeof *c->count * (size_t)max_candidates);
    if (!c->forward || !c->samples || !c->gains || !c->order || !c->owner || !c->count) {
        lm_spec_control_free(c);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the speculation controller");
    }
    return LM_OK;
}

void lm_spec_control_free(lm_spec_control *c) {
    free(c->forward);
    free(c->samples);
    free(c->gains);
    free(c->order);
    free(c->owner);
    free(c->count);
    c->forward = c->gains = NULL;
    c->samples = NULL;
    c->order = c->owner = c->count = NULL;
}

void lm_spec_control_set_clock(lm_spec_control *c, lm_spec_clock clock, void *ctx) {
    c->clock = clock ? clock : lm_spec_monotonic_clock;
    c->clock_ctx = clock ? ctx : NULL;
}

void lm_spec_control_simulate(lm_spec_control *c, const lm_spec_sim_clock *costs) {
    c->sim = *costs;
    c->clock = lm_spec_sim_clock_now;
    c->clock_ctx = &c->sim;
}

uint64_t lm_spec_now(const lm_spec_control *c, const lm_timed_work *work) { return c->clock(c->clock_ctx, work); }

void lm_spec_seq_init(lm_spec_seq *s) { memset(s, 0, sizeof *s); }

void lm_spec_seq_start(const lm_spec_control *c, lm_spec_seq *s) {
    lm_spec_seq_init(s);
    /* Not drafting now (measured): it starts as a plain sequence. */
    if (c->decisions > 0 && !c->drafting) s->cold = true;
}

/* ------------------------------------------------------------- measuring */

void lm_spec_observe_forward(lm_spec_control *c, int rows, double seconds) {
    if (rows < 1 || rows > c->max_rows || !(seconds >= 0)) return;
    double *f = &c->forward[rows];
    uint32_t n = c->samples[rows];
    if (n < FORWARD_WARMUP) {
        *f = (*f * n + seconds) / (n + 1);
    } else {
        /* one slow step (the machine busy elsewhere) moves it by a bounded amount */
        if (seconds > FORWARD_CLIP * *f) seconds = FORWARD_CLIP * *f;
        *f += FORWARD_ALPHA * (seconds - *f);
    }
    if (n < UINT32_MAX) c->samples[rows] = n + 1;
    c->probe_credit += PROBE_SHARE * seconds;
    if (c->probe_credit > PROBE_CREDIT_MAX) c->probe_credit = PROBE_CREDIT_MAX;
}

void lm_spec_observe_head(lm_spec_control *c, int rounds, int rows, double seconds) {
    if (rounds < 0 || rows < 0 || rounds + rows == 0 || !(seconds >= 0)) return;
    double r = rounds, w = rows;
    c->h_rr = HEAD_DECAY * c->h_rr + r * r;
    c->h_rw = HEAD_DECAY * c->h_rw + r * w;
    c->h_ww = HEAD_DECAY * c->h_ww + w * w;
    c->h_rt = HEAD_DECAY * c->h_rt + r * seconds;
    c->h_wt = HEAD_DECAY * c->h_wt + w * seconds;
}

void lm_spec_observe_verify(lm_spec_control *c, lm_spec_seq *s, int k, int accepted) {
    if (k <= 0) return;
    int tries = accepted < k ? accepted + 1 : k;
    s->hits = ACCEPT_DECAY * s->hits + accepted;
    s->tries = ACCEPT_DECAY * s->tries + tries;
    c->acceptance += ACCEPT_GLOBAL * ((double)accepted / tries - c->acceptance);
}

/* ------------------------------------------------------------- estimates */

double lm_spec_seq_acceptance(const lm_spec_control *c, const lm_spec_seq *s) {
    double a = (s->hits + ACCEPT_PRIOR * c->acceptance) / (s->tries + ACCEPT_PRIOR);
    return a < 0 ? 0 : a > 1 ? 1 : a;
}

/* The step time as a line a + b * rows, fitted by least squares over the
 * measured row counts up to `upto`, each weighted by its samples (at most
 * FORWARD_WEIGHT): pooling the row counts smooths one count's noise.  With
 * one row count measured the line goes through the origin and the mean
 * (all of the time proportional to the rows: no cheaper rows than
 * measured).  Returns how many row counts were measured (0: none). */
static int forward_fit(const lm_spec_control *c, int upto, double *a, double *b) {
    if (upto > c->max_rows) upto = c->max_rows;
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int distinct = 0;
    for (int r = 1; r <= upto; r++) {
        if (!c->samples[r]) continue;
        double w = c->samples[r] < FORWARD_WEIGHT ? c->samples[r] : FORWARD_WEIGHT, y = c->forward[r];
        sw += w;
        sx += w * r;
        sy += w * y;
        sxx += w * r * r;
        sxy += w * r * y;
        distinct++;
    }
    if (distinct == 0) {
        /* only larger steps measured: proportional to the smallest of them */
        for (int r = upto + 1; r <= c->max_rows; r++)
            if (c->samples[r]) {
                *a = 0;
                *b = c->forward[r] / r;
                return 1;
            }
        return 0;
    }
    double var = sxx - sx * sx / sw;
    if (distinct < 2 || !(var > 0)) {
        *a = 0;
        *b = sy / sx;
        return 1;
    }
    /* A slope below zero is noise around rows that cost nothing measurable
     * (a step bound by its overhead): 0, not less. */
    *b = (sxy - sx * sy / sw) / var;
    if (*b < 0) *b = 0;
    *a = (sy - *b * sx) / sw;
    return distinct;
}

double lm_spec_forward_seconds(const lm_spec_control *c, int rows) {
    double a, b;
    if (rows < 1) return 0;
    if (forward_fit(c, 2 * rows, &a, &b) == 0) return -1;
    double t = a + b * rows;
    return t > 0 ? t : b * rows;
}

/* Least squares of time = per_round * rounds + per_row * rows, both >= 0;
 * 0 before any measurement (drafting looks free until measured). */
static void head_fit(const lm_spec_control *c, double *per_round, double *per_row) {
    /* Calls that all had rows in one proportion to rounds (catch-up only:
     * one round of one row per sequence) cannot tell the two apart; the
     * time is the rounds' (a round's fixed cost, the lm_head above all,
     * is what a call pays at these sizes), not split between them, which
     * would price a draft's extra rows as whole rounds. */
    if (c->h_rr > 0 && c->h_rr * c->h_ww - c->h_rw * c->h_rw <= 1e-3 * c->h_rr * c->h_ww) {
        *per_round = c->h_rt > 0 ? c->h_rt / c->h_rr : 0;
        *per_row = 0;
        return;
    }
    double eps = 1e-9 * (c->h_rr + c->h_ww) + 1e-30;
    double a = c->h_rr + eps, b = c->h_rw, d = c->h_ww + eps;
    double det = a * d - b * b;
    double pr = det > 0 ? (d * c->h_rt - b * c->h_wt) / det : 0;
    double pw = det > 0 ? (a * c->h_wt - b * c->h_rt) / det : 0;
    if (pr < 0) {
        pr = 0;
        pw = c->h_wt / d;
    }
    if (pw < 0) {
        pw = 0;
        pr = c->h_rt / a;
    }
    *per_round = pr > 0 ? pr : 0;
    *per_row = pw > 0 ? pw : 0;
}

double lm_spec_head_seconds(const lm_spec_control *c, int rounds, int rows) {
    if (rounds <= 0 && rows <= 0) return 0;
    double pr, pw;
    head_fit(c, &pr, &pw);
    return pr * rounds + pw * rows;
}

/* -------------------------------------------------------------- choosing */

double lm_spec_rate(const lm_spec_costs *c, double tokens, double gain, int drafts, int rounds) {
    double t = c->plain + c->per_draft * drafts + c->head_round * rounds + c->head_row * (c->head_rows + drafts);
    return t > 0 ? (tokens + gain) / t : 0;
}

int lm_spec_best_k(const lm_spec_costs *c, double acceptance, int k_max, bool drafting) {
    double a = acceptance < 0 ? 0 : acceptance > 1 ? 1 : acceptance, gain = 0, g = 1;
    lm_spec_costs plain = *c;
    plain.head_rows = 0; /* not drafting, it goes cold: no head at all */
    double plain_rate = lm_spec_rate(&plain, 1, 0, 0, 0), best_rate = 0;
    int best = 0;
    for (int k = 1; k <= k_max; k++) {
        gain += g *= a;
        double rate = lm_spec_rate(c, 1, gain, k, k);
        if (rate > best_rate) {
            best_rate = rate;
            best = k;
        }
    }
    return best_rate < plain_rate * (drafting ? 1 / MARGIN : MARGIN) ? 0 : best;
}


void lm_spec_step_begin(lm_spec_control *c) { c->probe_started = false; }

bool lm_spec_wants_head(lm_spec_control *c, lm_spec_seq *s) {
    if (!s->cold) return true;
    s->cold_steps++;
    int interval = s->probe_interval > 0 ? s->probe_interval : PROBE_INTERVAL_MIN;
    if (s->cold_steps < interval || c->probe_started) return false;
    /* What a probe costs, as measured: the head's catch-up steps (each as
     * if it ran for this sequence alone), then k_max drafts and their
     * verify rows; probes spend at most PROBE_SHARE of the step time. */
    double cost = WARM_STEPS * lm_spec_head_seconds(c, 0, 1) + lm_spec_head_seconds(c, c->k_max, c->k_max);
    double with = lm_spec_forward_seconds(c, 1 + c->k_max), without = lm_spec_forward_seconds(c, 1);
    if (with > without && without > 0) cost += with - without;
    if (c->probe_credit < cost) return false;
    c->probe_credit -= cost;
    /* The probe: catch up for a few steps (the head's recent KV entries
     * matter most to its drafts), then draft the maximum once. */
    c->probe_started = true;
    c->probes++;
    s->cold = false;
    s->warming = WARM_STEPS;
    s->probing = true;
    s->zero_streak = 0;
    return true;
}

static int by_gain(const void *pa, const void *pb, void *ctx) {
    const double *g = ctx;
    double a = g[*(const int *)pa], b = g[*(const int *)pb];
    return a > b ? -1 : a < b ? 1 : *(const int *)pa - *(const int *)pb;
}

void lm_spec_choose(lm_spec_control *c, const lm_spec_step *step, lm_spec_candidate *cands, int n) {
    if (n > c->cap_candidates) n = c->cap_candidates;
    int n_gain = 0, forced_rows = 0, forced_k = 0;
    double forced_gain = 0;
    int *order = c->order, *owner = c->owner, *count = c->count;
    for (int i = 0; i < n; i++) {
        lm_spec_candidate *cd = &cands[i];
        lm_spec_seq *s = cd->state;
        int budget = cd->budget < 0 ? 0 : cd->budget > c->k_max ? c->k_max : cd->budget;
        cd->k = 0;
        if (!s->cold && s->warming > 0) continue;
        double a = lm_spec_seq_acceptance(c, s), g = 1;
        if (!s->cold && s->probing && budget > 0) {
            cd->k = budget;
            for (int j = 1; j <= budget; j++) forced_gain += g *= a;
            forced_rows += budget;
            if (budget > forced_k) forced_k = budget;
            continue;
        }
        for (int j = 1; j <= budget; j++) {
            c->gains[n_gain] = g *= a;
            owner[n_gain++] = i;
        }
    }
    for (int i = 0; i < n_gain; i++) order[i] = i;
    qsort_r(order, (size_t)n_gain, sizeof *order, by_gain, c->gains);

    /* Take the m drafts of largest expected gain, for the m that gives the
     * most expected tokens per second of the next step (forward and head). */
    int base_rows = step->base_rows > 0 ? step->base_rows : 1;
    double base_tokens = step->base_tokens > 0 ? step->base_tokens : 1;
    /* The plain step: its own average once it has a few samples (it is run
     * most), else the line; each draft adds the line's slope, the cost of a
     * row around this batch size.  Until the plain step and one more row
     * count are measured, explore: plain steps until the plain step has a
     * sample, then the k_max best drafts (one sequence's worth, cheap at
     * any batch), whose verify step gives the second row count. */
    double fa, fb;
    bool measured = forward_fit(c, 2 * (base_rows + forced_rows + n_gain), &fa, &fb) >= 2;
    bool plain_known = base_rows <= c->max_rows && c->samples[base_rows] > 0;
    double plain = base_rows <= c->max_rows && c->samples[base_rows] >= FORWARD_WARMUP ? c->forward[base_rows]
                                                                                       : fa + fb * base_rows;
    int best_m = plain_known ? (n_gain < c->k_max ? n_gain : c->k_max) : 0; /* not measured yet: explore */
    bool exploring = !(measured && plain > 0);
    if (!exploring) {
        lm_spec_costs costs = {.plain = plain, .per_draft = fb, .head_rows = step->head_rows};
        head_fit(c, &costs.head_round, &costs.head_row);
        lm_spec_costs headless = costs; /* plain steps without the head at all */
        headless.head_rows = 0;
        double plain_rate = lm_spec_rate(&headless, base_tokens, 0, 0, 0), best_rate = 0, gain = 0;
        int max_k = forced_k;
        memset(count, 0, sizeof *count * (size_t)n);
        best_m = 0;
        for (int m = 0; m <= n_gain; m++) {
            if (m > 0) {
                gain += c->gains[order[m - 1]];
                int o = owner[order[m - 1]];
                if (++count[o] > max_k) max_k = count[o];
            }
            int rounds = max_k;
            double rate = lm_spec_rate(&costs, base_tokens, forced_gain + gain, forced_rows + m, rounds);
            if (m == 0 || rate > best_rate) {
                best_rate = rate;
                best_m = m;
            }
        }
        /* hysteresis: near break-even, measurement noise must not flip
         * drafting on and off (each flip costs the head's cold spells) */
        if (best_rate < plain_rate * (c->drafting ? 1 / MARGIN : MARGIN)) best_m = 0;
    }
    /* While drafting, the plain step's average is not measured: every
     * PLAIN_REFRESH decisions one step runs without drafts (nobody's streak
     * counts it), so that a plain step's cost follows the machine. */
    bool refresh = false;
    if (best_m > 0 && measured && ++c->since_plain >= PLAIN_REFRESH) {
        best_m = 0;
        refresh = true;
    }
    if (best_m == 0) c->since_plain = 0;
    /* A step where nobody may draft (a sequence's last token, a prompt
     * chunk) says nothing about whether drafting pays: a new sequence
     * after it must not start cold for it. */
    if (n_gain > 0 || forced_rows > 0) c->drafting = best_m > 0 || refresh;
    for (int m = 0; m < best_m; m++) cands[owner[order[m]]].k++;

    c->decisions++;
    for (int i = 0; i < n; i++) {
        lm_spec_seq *s = cands[i].state;
        if (s->cold) {
            if (cands[i].k > 0) { /* drafting would pay at its acceptance: catch up again */
                s->cold = false;
                s->warming = WARM_STEPS;
                s->zero_streak = 0;
                c->rewarms++;
            }
            continue;
        }
        if (s->warming > 0) {
            s->warming--;
            continue;
        }
        if (s->probing) {
            s->probing = cands[i].budget <= 0; /* probes when it may draft */
            continue;
        }
        if (cands[i].budget <= 0 || refresh || exploring) continue; /* says nothing about paying */
        if (cands[i].k > 0) {
            s->zero_streak = 0;
            s->probe_interval = 0; /* it pays: the next cold spell probes soon */
            continue;
        }
        c->zero_decisions++;
        if (++s->zero_streak >= ZERO_STREAK_COLD) {
            s->cold = true;
            s->cold_steps = 0;
            int interval = s->probe_interval > 0 ? s->probe_interval : PROBE_INTERVAL_MIN / 2;
            s->probe_interval = interval * 2 < PROBE_INTERVAL_MAX ? interval * 2 : PROBE_INTERVAL_MAX;
            c->cold_entries++;
        }
    }
}
