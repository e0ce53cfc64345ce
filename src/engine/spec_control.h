/* Adaptive speculation: how many MTP drafts each speculating sequence makes
 * in each step (0 included), chosen from measured costs and measured
 * acceptance so that speculation is never slower than plain decoding.
 *
 * Costs, learnt online from the engine's own steps:
 * - an engine step of R rows (from its start to the next one's:
 *   scheduling, forward, sampling, rollbacks, events, the engine loop;
 *   less the head's call): an
 *   exponential moving average per R, and through them a line a + b * R
 *   (least squares, each R weighted by its samples up to a bound), so that
 *   one noisy row count does not decide alone: a step with drafts costs the
 *   plain step (its own average) plus the line's slope per draft row;
 * - the MTP head's call (catch-up rows and drafting rounds): time =
 *   per_round * rounds + per_row * rows, rounds counting those with logits
 *   (a call that only catches up has none: its layer's cost goes to the
 *   rows, the vocabulary projection's to the rounds), fitted by
 *   exponentially weighted least squares.
 * Acceptance, per sequence: the probability that a draft is accepted given
 * that the one before it was, an exponentially decayed count with a prior
 * (the engine-wide rate, itself a moving average) so new sequences start
 * from what the others showed.  k drafts are expected to give
 * a + a^2 + ... + a^k accepted tokens.
 *
 * Each step the drafters' candidate drafts are ranked by expected gain and
 * the number m of drafts that maximises expected tokens per second of the
 * next step is taken (m = 0 included); that is compared with plain steps
 * without the head at all (a 3% margin each way, against flip-flopping);
 * while drafting, one step in 32 runs without drafts, so that the plain
 * step's cost is measured as the machine's load changes.
 * A sequence that drafts nothing for 3 steps goes cold: the head stops
 * catching up on it, so it costs exactly a plain sequence.  Cold sequences
 * come back when the cost model says drafting would pay at their
 * acceptance, and otherwise on a probe: every probe_interval steps
 * (doubling while probes keep failing, at most one probe starting per step,
 * all probes together spending at most 1.5% of the measured step time) one
 * of them catches up again for 16 steps and drafts the maximum once, which
 * refreshes its acceptance.  A returning sequence always catches up for 16
 * steps before it drafts: the head's KV entries of its cold spell are stale
 * and its drafts lean on the recent ones.
 *
 * Only the number of drafts depends on time; every draft is verified, so
 * outputs do not (tests/test_speculative.c). */
#ifndef LOOM_ENGINE_SPEC_CONTROL_H
#define LOOM_ENGINE_SPEC_CONTROL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

/* What a timed interval covered, given to the clock so that a test clock
 * can charge for the work instead of reading the time: an engine step,
 * from its start to the next step's start (the call there ends one and
 * starts the other), and inside it the MTP head's call. */
typedef enum { LM_TIMED_STEP, LM_TIMED_HEAD } lm_timed_phase;
typedef struct {
    lm_timed_phase phase;
    bool end;   /* the call ends an interval (a fake clock charges there) */
    int rows;   /* STEP: the ending step's rows; HEAD: catch-up rows + drafts */
    int rounds; /* HEAD: the head's rounds with logits (0: it only caught up) */
} lm_timed_work;

/* Nanoseconds on a monotonic clock; called at the start and at the end of
 * each timed interval. */
typedef uint64_t (*lm_spec_clock)(void *ctx, const lm_timed_work *work);
uint64_t lm_spec_monotonic_clock(void *ctx, const lm_timed_work *work);

/* A clock for tests that charges made-up costs instead of reading the
 * time: a step of R rows takes fixed + per_row * R seconds, a head call
 * head_round * rounds + head_row * rows (ctx: the lm_spec_sim_clock). */
typedef struct {
    uint64_t now;
    double fixed, per_row, head_round, head_row;
} lm_spec_sim_clock;
uint64_t lm_spec_sim_clock_now(void *ctx, const lm_timed_work *work);

/* A sequence's share of the controller (inside lm_sequence). */
typedef struct {
    double hits, tries;  /* decayed counts of verified drafts and of accepted ones */
    int zero_streak;     /* consecutive decisions of 0 drafts */
    bool cold;           /* the head does not catch up on it */
    int cold_steps;      /* steps since it went cold */
    int probe_interval;  /* steps before its next probe (0: the default) */
    int warming;         /* > 0: steps of catch-up still to run before it may draft */
    bool probing;        /* after warming: draft the maximum once */
} lm_spec_seq;

typedef struct {
    lm_spec_clock clock;
    void *clock_ctx;
    lm_spec_sim_clock sim; /* tests: lm_spec_control_simulate */
    int k_max;
    int max_rows;         /* forward rows the table covers */
    double *forward;      /* [max_rows + 1]: seconds of a step of R rows */
    uint32_t *samples;    /* [max_rows + 1]: measurements behind each */
    /* head: weighted sums for least squares over (rounds, rows) */
    double h_rr, h_rw, h_ww, h_rt, h_wt;
    double acceptance;    /* engine-wide moving average */
    bool probe_started;   /* a probe started in this step */
    double probe_credit;  /* seconds probes may spend now (a share of the measured steps) */
    bool drafting;        /* the last decision drafted */
    int since_plain;      /* decisions since the last one without drafts */
    /* decisions, for tests and stats */
    uint64_t decisions, zero_decisions, cold_entries, probes, rewarms;
    /* scratch for the choice */
    double *gains;        /* [max candidates * k_max]: candidate drafts' expected gains */
    int *order, *owner;   /* [max candidates * k_max]: by gain; whose draft */
    int *count;           /* [max candidates] */
    int cap_candidates;
} lm_spec_control;

/* Candidate of one decision: a sequence that may draft now (a warm one
 * with a pending token) or a cold one the controller may bring back. */
typedef struct {
    lm_spec_seq *state;
    int budget; /* drafts it may make (KV, max_tokens, context) */
    int k;      /* out: drafts to make (a cold candidate: > 0 means "warm up") */
} lm_spec_candidate;

/* Composition of the next step as the controller sees it. */
typedef struct {
    int base_rows;    /* rows of the next step without drafts */
    int base_tokens;  /* tokens it samples without drafts (its decoding sequences) */
    int head_rows;    /* catch-up rows the head runs now */
} lm_spec_step;

/* What the next step costs as the controller models it (seconds), from
 * its measurements (lm_spec_step_costs) or, in tests, made up. */
typedef struct {
    double plain;      /* the step without drafts */
    double per_draft;  /* what each draft's verify row adds to it */
    double head_round, head_row; /* the MTP head's call: per round, per row */
    int head_rows;     /* catch-up rows the head runs for the drafting sequences */
} lm_spec_costs;

/* Expected tokens per second of the next step: `tokens` sampled without
 * drafts, `drafts` draft rows expected to add `gain` tokens, the head's
 * call: `rounds` rounds with logits (the vocabulary projection; 0: the
 * head only catches up) over head_rows + drafts rows (head_rows 0 and no
 * rounds: no head at all). */
double lm_spec_rate(const lm_spec_costs *c, double tokens, double gain, int drafts, int rounds);
/* The drafts a lone sequence makes at this acceptance (the probability
 * that a draft is accepted given the one before was), 0..k_max: the k of
 * most expected tokens per second, 1 + a + ... + a^k tokens a step of
 * plain + k * per_draft + the head's k rounds over head_rows + k rows;
 * 0 unless that beats plain steps without the head by 3% (while
 * `drafting`: unless it loses by 3%).  lm_spec_choose decides the same
 * way over many sequences. */
int lm_spec_best_k(const lm_spec_costs *c, double acceptance, int k_max, bool drafting);

lm_status lm_spec_control_init(lm_spec_control *c, int k_max, int max_rows, int max_candidates,
                               lm_error *err);
void lm_spec_control_free(lm_spec_control *c);
void lm_spec_control_set_clock(lm_spec_control *c, lm_spec_clock clock, void *ctx);
/* Tests: the controller's own simulated clock with these costs. */
void lm_spec_control_simulate(lm_spec_control *c, const lm_spec_sim_clock *costs);
uint64_t lm_spec_now(const lm_spec_control *c, const lm_timed_work *work);

void lm_spec_seq_init(lm_spec_seq *s);
/* A new speculating sequence: cold from the start when the engine is not
 * drafting now (its head catch-up, prompt included, would be paid for
 * nothing), else warm with the engine-wide acceptance as its prior. */
void lm_spec_seq_start(const lm_spec_control *c, lm_spec_seq *s);
/* Measurements. */
void lm_spec_observe_forward(lm_spec_control *c, int rows, double seconds);
void lm_spec_observe_head(lm_spec_control *c, int rounds, int rows, double seconds);
/* A verify of k drafts of which `accepted` were accepted (the first
 * rejected one counts as a try, drafts after it do not). */
void lm_spec_observe_verify(lm_spec_control *c, lm_spec_seq *s, int k, int accepted);

/* The controller's estimates (tests, and the choice itself). */
double lm_spec_forward_seconds(const lm_spec_control *c, int rows);
double lm_spec_head_seconds(const lm_spec_control *c, int rounds, int rows);
double lm_spec_seq_acceptance(const lm_spec_control *c, const lm_spec_seq *s);

/* Called once per step for every speculating sequence before its catch-up
 * is queued: false while it is cold (the head skips it).  Counts down a
 * cold sequence's probe. */
bool lm_spec_wants_head(lm_spec_control *c, lm_spec_seq *s);
/* The start of a step (one probe may start per step). */
void lm_spec_step_begin(lm_spec_control *c);
/* Chooses k for the candidates (warm ones with budgets, and cold ones:
 * state->cold).  Updates their states (streaks, cold, warming). */
void lm_spec_choose(lm_spec_control *c, const lm_spec_step *step, lm_spec_candidate *cands, int n);

#endif
