/* The adaptive speculation controller (engine/spec_control.c) on made-up
 * measurements: the cost fits recover known costs, expensive rows give no
 * drafts (and cold sequences), cheap rows and high acceptance give the
 * most, drafts go to the sequences that accept them, and a cold sequence
 * whose acceptance rises drafts again after a probe.  No clock is read. */
#include <stdio.h>
#include <string.h>

#include "engine/spec_control.h"
#include "harness.h"

enum { K = 3, ROWS = 64, CANDS = 8 };

static bool open_control(lm_spec_control *c) {
    lm_error err = {0};
    if (lm_spec_control_init(c, K, ROWS, CANDS, &err) != LM_OK) {
        fprintf(stderr, "%s\n", err.message);
        return false;
    }
    return true;
}

/* Steps of `rows` rows cost fixed + per_row * rows; the head per_round *
 * rounds + head_row * rows. */
typedef struct {
    double fixed, per_row, per_round, head_row;
} costs;

static void measure(lm_spec_control *c, const costs *k) {
    for (int rep = 0; rep < 8; rep++)
        for (int r = 1; r <= 24; r++) lm_spec_observe_forward(c, r, k->fixed + k->per_row * r);
    for (int rounds = 1; rounds <= K; rounds++)
        for (int rows = 1; rows <= 16; rows += 5)
            lm_spec_observe_head(c, rounds, rows, k->per_round * rounds + k->head_row * rows);
}

static void test_fits_recover_the_costs(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    CHECK(lm_spec_forward_seconds(&c, 4) < 0); /* nothing measured */
    costs k = {1e-3, 2e-4, 3e-4, 5e-5};
    measure(&c, &k);
    CHECK_NEAR(lm_spec_forward_seconds(&c, 3), 1e-3 + 3 * 2e-4, 1e-9);
    CHECK_NEAR(lm_spec_forward_seconds(&c, 40), 1e-3 + 40 * 2e-4, 1e-9); /* past the measured rows */
    CHECK_NEAR(lm_spec_head_seconds(&c, 2, 10), 2 * 3e-4 + 10 * 5e-5, 1e-9);
    CHECK(lm_spec_head_seconds(&c, 0, 0) == 0);
    lm_spec_control_free(&c);
}

/* One row count measured: the time is taken as proportional to the rows,
 * never cheaper per row than what was seen. */
static void test_one_row_count_extrapolates_proportionally(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    for (int i = 0; i < 5; i++) lm_spec_observe_forward(&c, 8, 4e-3);
    CHECK_NEAR(lm_spec_forward_seconds(&c, 8), 4e-3, 1e-12);
    CHECK_NEAR(lm_spec_forward_seconds(&c, 12), 6e-3, 1e-12);
    lm_spec_control_free(&c);
}

static void test_acceptance_follows_the_verifies(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    lm_spec_seq s;
    lm_spec_seq_init(&s);
    CHECK_NEAR(lm_spec_seq_acceptance(&c, &s), 0.5, 1e-12); /* the prior */
    for (int i = 0; i < 20; i++) lm_spec_observe_verify(&c, &s, 3, 3);
    CHECK(lm_spec_seq_acceptance(&c, &s) > 0.9);
    for (int i = 0; i < 60; i++) lm_spec_observe_verify(&c, &s, 3, 0); /* a window of ~20 verifies (ACCEPT_DECAY 0.95) */
    CHECK(lm_spec_seq_acceptance(&c, &s) < 0.25);
    /* a rejection at the second draft: 1 of 2 tried drafts accepted (the
     * third was never tried) */
    lm_spec_seq t;
    lm_spec_seq_init(&t);
    lm_spec_observe_verify(&c, &t, 3, 1);
    CHECK_NEAR(t.hits, 1, 1e-12);
    CHECK_NEAR(t.tries, 2, 1e-12);
    lm_spec_control_free(&c);
}

/* One decision step for n sequences (all with a pending token). */
static void decide(lm_spec_control *c, const costs *cost, lm_spec_seq *seqs, int n, int *k) {
    lm_spec_candidate cands[CANDS];
    int idx[CANDS], m = 0, head_rows = 0;
    lm_spec_step_begin(c);
    for (int i = 0; i < n; i++) {
        if (!lm_spec_wants_head(c, &seqs[i])) {
            /* cold: still a candidate to be brought back */
            idx[m] = i;
            cands[m++] = (lm_spec_candidate){.state = &seqs[i], .budget = K};
            continue;
        }
        head_rows++;
        idx[m] = i;
        cands[m++] = (lm_spec_candidate){.state = &seqs[i], .budget = K};
    }
    lm_spec_step step = {.base_rows = n, .base_tokens = n, .head_rows = head_rows};
    lm_spec_choose(c, &step, cands, m);
    /* the step as the engine measures it: earns probes their share */
    lm_spec_observe_forward(c, n, cost->fixed + cost->per_row * n);
    for (int i = 0; i < n; i++) k[i] = 0;
    for (int j = 0; j < m; j++)
        if (!seqs[idx[j]].cold) k[idx[j]] = cands[j].k;
}

static void test_expensive_rows_give_no_drafts(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    costs k = {1e-5, 1e-3, 2e-4, 2e-4}; /* compute-bound: a row costs a row */
    measure(&c, &k);
    lm_spec_seq s[4];
    for (int i = 0; i < 4; i++) {
        lm_spec_seq_init(&s[i]);
        for (int j = 0; j < 10; j++) lm_spec_observe_verify(&c, &s[i], 3, 3); /* they accept everything */
    }
    int ks[4];
    for (int step = 0; step < 10; step++) {
        decide(&c, &k, s, 4, ks);
        for (int i = 0; i < 4; i++) CHECK_MSG(ks[i] == 0, "step %d: sequence %d drafts %d", step, i, ks[i]);
    }
    for (int i = 0; i < 4; i++) CHECK_MSG(s[i].cold, "sequence %d still costs the head", i);
    CHECK(c.cold_entries == 4);
    lm_spec_control_free(&c);
}

static void test_cheap_rows_and_high_acceptance_give_the_most(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    costs k = {5e-3, 1e-5, 1e-5, 1e-6}; /* overhead-bound: rows nearly free */
    measure(&c, &k);
    lm_spec_seq s[4];
    for (int i = 0; i < 4; i++) {
        lm_spec_seq_init(&s[i]);
        for (int j = 0; j < 10; j++) lm_spec_observe_verify(&c, &s[i], 3, j % 3 ? 3 : 2);
    }
    int ks[4], plain_steps = 0;
    for (int step = 0; step < 64; step++) {
        decide(&c, &k, s, 4, ks);
        /* one step in 32 runs plain, to keep measuring the plain step */
        if (ks[0] + ks[1] + ks[2] + ks[3] == 0) {
            plain_steps++;
            continue;
        }
        for (int i = 0; i < 4; i++) CHECK_MSG(ks[i] == K, "step %d: sequence %d drafts %d", step, i, ks[i]);
    }
    CHECK_MSG(plain_steps == 2, "%d plain steps in 64", plain_steps);
    CHECK(c.zero_decisions == 0 && c.cold_entries == 0);
    lm_spec_control_free(&c);
}

/* A step bound by its overhead under noise: more rows measured slightly
 * faster than fewer.  Rows are taken as free (slope 0), not as costing the
 * whole step each, and a sequence that accepts drafts gets the most. */
static void test_rows_measured_free_give_drafts(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    for (int rep = 0; rep < 8; rep++) {
        lm_spec_observe_forward(&c, 1, 10e-3);
        lm_spec_observe_forward(&c, 2, 9.9e-3);
        lm_spec_observe_forward(&c, 3, 9.8e-3);
        lm_spec_observe_head(&c, 2, 4, 0.5e-3);
        lm_spec_observe_head(&c, 1, 1, 0.3e-3);
    }
    CHECK_NEAR(lm_spec_forward_seconds(&c, 4), 9.9e-3, 1e-4);
    lm_spec_seq s;
    lm_spec_seq_init(&s);
    for (int j = 0; j < 10; j++) lm_spec_observe_verify(&c, &s, 3, j % 4 ? 3 : 1);
    costs k = {10e-3, 0, 0, 0};
    int ks;
    decide(&c, &k, &s, 1, &ks);
    CHECK_MSG(ks == K, "drafts %d", ks);
    lm_spec_control_free(&c);
}

/* Rows of moderate cost: the sequence that accepts drafts gets them, the
 * one that rejects them does not. */
static void test_drafts_go_where_they_are_accepted(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    costs k = {2e-3, 2e-4, 1e-4, 2e-5};
    measure(&c, &k);
    lm_spec_seq s[2];
    lm_spec_seq_init(&s[0]);
    lm_spec_seq_init(&s[1]);
    for (int j = 0; j < 20; j++) {
        lm_spec_observe_verify(&c, &s[0], 3, 3);
        lm_spec_observe_verify(&c, &s[1], 3, 0);
    }
    int ks[2];
    decide(&c, &k, s, 2, ks);
    CHECK_MSG(ks[0] == K && ks[1] == 0, "drafts %d and %d", ks[0], ks[1]);
    lm_spec_control_free(&c);
}

/* A sequence that went cold (it rejected everything) is probed: it catches
 * up again, then drafts the maximum once; when it now accepts, it keeps
 * drafting. */
static void test_a_cold_sequence_is_probed_and_comes_back(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    costs k = {2e-3, 2e-4, 1e-5, 2e-6};
    measure(&c, &k);
    lm_spec_seq s;
    lm_spec_seq_init(&s);
    int ks, step = 0, back_at = -1, drafting_after = 0;
    bool cold_before = false;
    for (; step < 200; step++) {
        decide(&c, &k, &s, 1, &ks);
        if (step < 30) cold_before |= s.cold;
        if (ks > 0) {
            /* rejects everything until step 30, then accepts everything */
            lm_spec_observe_verify(&c, &s, ks, step < 30 ? 0 : ks);
            if (step >= 30) drafting_after++;
            if (step >= 30 && back_at < 0) back_at = step;
        }
    }
    CHECK_MSG(cold_before && c.probes >= 1, "cold before the change: %d; probes %llu", cold_before,
              (unsigned long long)c.probes);
    CHECK_MSG(back_at > 0 && back_at < 30 + 64, "the first draft after the change came at step %d", back_at);
    CHECK_MSG(drafting_after > 100, "drafted in %d of the last 170 steps", drafting_after);
    CHECK(!s.cold);
    lm_spec_control_free(&c);
}

/* Probes back off while they keep failing, and at most one starts per step
 * (cheap probes: the intervals bind, not the time share). */
static void test_probes_back_off_and_take_turns(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    costs k = {2e-3, 2e-4, 1e-5, 1e-6};
    measure(&c, &k);
    lm_spec_seq s[4];
    for (int i = 0; i < 4; i++) lm_spec_seq_init(&s[i]);
    int ks[4];
    uint64_t probes_before = 0;
    for (int step = 0; step < 600; step++) {
        probes_before = c.probes;
        decide(&c, &k, s, 4, ks);
        CHECK(c.probes - probes_before <= 1);
        for (int i = 0; i < 4; i++)
            if (ks[i] > 0) lm_spec_observe_verify(&c, &s[i], ks[i], 0);
    }
    /* 600 steps at the first intervals 16, 32, 64, 128, 256 (plus the
     * warm-up and the streak to go cold again): at most 5 probes each */
    CHECK_MSG(c.probes <= 4 * 6 && c.probes >= 4 * 3, "%llu probes", (unsigned long long)c.probes);
    for (int i = 0; i < 4; i++) CHECK(s[i].probe_interval >= 64);
    lm_spec_control_free(&c);
}

/* Expensive probes (a head call and verify rows that cost much): all
 * probes together spend at most their share (2%) of the measured time. */
static void test_probes_spend_a_bounded_share(void) {
    lm_spec_control c;
    CHECK(open_control(&c));
    costs k = {1e-5, 1e-3, 2e-3, 2e-4};
    measure(&c, &k);
    lm_spec_seq s[4];
    for (int i = 0; i < 4; i++) lm_spec_seq_init(&s[i]);
    int ks[4];
    double total = 0;
    enum { STEPS = 3000 };
    for (int step = 0; step < STEPS; step++) {
        decide(&c, &k, s, 4, ks);
        total += k.fixed + k.per_row * 4;
        for (int i = 0; i < 4; i++)
            if (ks[i] > 0) lm_spec_observe_verify(&c, &s[i], ks[i], 0);
    }
    /* a probe: 16 catch-up head calls alone (a row each, no logits round),
     * then 3 drafts (3 rounds) and their rows; probes spend 1.5% */
    double probe = 16 * 2e-4 + (3 * 2e-3 + 3 * 2e-4) + 3 * 1e-3;
    CHECK_MSG(c.probes >= 1 && c.probes * probe <= 0.015 * total + 0.25 + probe,
              "%llu probes of %.1f ms in %.1f s of steps", (unsigned long long)c.probes, probe * 1e3, total);
    lm_spec_control_free(&c);
}

/* The choice as a pure function of costs and acceptance (lm_spec_best_k),
 * on costs shaped like the 0.8B shape's bytes on a machine bound by memory
 * bandwidth (loom bench's "bytes:" line): a plain step reads 1541 MB, a
 * verify row adds ~1% (compute), a draft round reads 108 MB with the
 * 32768-id draft head, 550 MB with the whole vocabulary. */
static lm_spec_costs shaped(double round_mb) {
    double step = 1541.5;
    return (lm_spec_costs){.plain = 1.0, .per_draft = 0.01, .head_round = round_mb / step, .head_row = 1e-4,
                           .head_rows = 1};
}

static double speedup(const lm_spec_costs *c, double a, int k) {
    double gain = 0, g = 1;
    for (int j = 1; j <= k; j++) gain += g *= a;
    return lm_spec_rate(c, 1, gain, k, k) / lm_spec_rate(c, 1, 0, 0, 0);
}

static void test_best_k_from_costs_and_acceptance(void) {
    lm_spec_costs cut = shaped(108.0), whole = shaped(549.5);
    /* acceptance 0: no drafts, however cheap */
    CHECK(lm_spec_best_k(&cut, 0.0, 4, false) == 0);
    CHECK(lm_spec_best_k(&cut, 0.0, 4, true) == 0);
    lm_spec_costs free_head = cut;
    free_head.head_round = free_head.head_row = 0;
    CHECK(lm_spec_best_k(&free_head, 0.0, 4, false) == 0);
    /* acceptance 0.7 with cheap drafts: at least 2, and what it picks is
     * the best k (no other k is faster by the model) */
    int k = lm_spec_best_k(&cut, 0.7, 4, false);
    CHECK_MSG(k >= 2, "k %d at acceptance 0.7 with the cut head", k);
    for (int j = 1; j <= 4; j++) CHECK(speedup(&cut, 0.7, j) <= speedup(&cut, 0.7, k) + 1e-12);
    CHECK_MSG(speedup(&cut, 0.7, k) > 1.6, "modelled speedup %.2f", speedup(&cut, 0.7, k));
    /* the whole vocabulary's head: drafting still pays at 0.7 (1.26x at
     * k = 2), much less than with the cut, and not at 0.3 */
    int kw = lm_spec_best_k(&whole, 0.7, 4, false);
    CHECK_MSG(kw == 2, "k %d with the whole vocabulary's head", kw);
    CHECK(speedup(&whole, 0.7, kw) < speedup(&cut, 0.7, k) - 0.3);
    CHECK(lm_spec_best_k(&whole, 0.3, 4, false) == 0);
    /* a verify row as dear as a whole step (compute-bound): never */
    lm_spec_costs dear = cut;
    dear.per_draft = 1.0;
    CHECK(lm_spec_best_k(&dear, 0.9, 4, false) == 0);
    /* hysteresis: a 2% gain does not start drafting but keeps it going */
    lm_spec_costs edge = {.plain = 1.0, .per_draft = 0.0, .head_round = 0.0, .head_row = 0.0};
    double a = 0.02; /* k = 1: 1.02 tokens for one step */
    CHECK(lm_spec_best_k(&edge, a, 1, false) == 0);
    CHECK(lm_spec_best_k(&edge, a, 1, true) == 1);
}

/* lm_spec_choose on measured costs decides as lm_spec_best_k on those
 * costs, for a lone sequence. */
static void test_choose_agrees_with_best_k(void) {
    const double accept[] = {0.0, 0.2, 0.45, 0.7, 0.95};
    const costs cases[] = {{1e-2, 1e-4, 7e-4, 1e-6}, {1e-2, 1e-4, 3.6e-3, 1e-6}, {1e-3, 1e-3, 1e-4, 1e-5}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (size_t ai = 0; ai < sizeof accept / sizeof *accept; ai++) {
            lm_spec_control c;
            CHECK(open_control(&c));
            measure(&c, &cases[ci]);
            c.acceptance = accept[ai];
            lm_spec_seq s;
            lm_spec_seq_init(&s);
            lm_spec_candidate cand = {.state = &s, .budget = K};
            lm_spec_step step = {.base_rows = 1, .base_tokens = 1, .head_rows = 1};
            lm_spec_costs model = {.plain = lm_spec_forward_seconds(&c, 1), .per_draft = cases[ci].per_row,
                                   .head_round = cases[ci].per_round, .head_row = cases[ci].head_row,
                                   .head_rows = 1};
            int want = lm_spec_best_k(&model, accept[ai], K, false);
            lm_spec_choose(&c, &step, &cand, 1);
            CHECK_MSG(cand.k == want, "costs %zu acceptance %.2f: chose %d, the model's best %d", ci, accept[ai],
                      cand.k, want);
            lm_spec_control_free(&c);
        }
}

int main(void) {
    RUN_TEST(test_fits_recover_the_costs);
    RUN_TEST(test_best_k_from_costs_and_acceptance);
    RUN_TEST(test_choose_agrees_with_best_k);
    RUN_TEST(test_one_row_count_extrapolates_proportionally);
    RUN_TEST(test_acceptance_follows_the_verifies);
    RUN_TEST(test_expensive_rows_give_no_drafts);
    RUN_TEST(test_cheap_rows_and_high_acceptance_give_the_most);
    RUN_TEST(test_drafts_go_where_they_are_accepted);
    RUN_TEST(test_rows_measured_free_give_drafts);
    RUN_TEST(test_a_cold_sequence_is_probed_and_comes_back);
    RUN_TEST(test_probes_back_off_and_take_turns);
    RUN_TEST(test_probes_spend_a_bounded_share);
    return test_summary("test_spec_control");
}
