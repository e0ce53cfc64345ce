/* The step sampler (step_sampler.h): a step's logit rows, where each is
 * drawn, and the draws themselves. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/step_sampler.h"

uint64_t lm_step_sampler_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

lm_status lm_step_sampler_init(lm_step_sampler *ss, int vocab_size, int logit_rows, lm_backend *backend,
                               lm_tokenizer *tokenizer, lm_error *err) {
    memset(ss, 0, sizeof *ss);
    int V = vocab_size;
    ss->vocab_size = V;
    ss->tokenizer = tokenizer;
    ss->grammar_token_work = LM_GRAMMAR_TOKEN_WORK;
    ss->logits = malloc(sizeof(float) * (size_t)V * (size_t)logit_rows);
    ss->sample_row = malloc(sizeof(float) * (size_t)V);
    ss->logit_argmax = malloc(sizeof(int32_t) * (size_t)logit_rows);
    ss->logits_wanted = malloc(sizeof(bool) * (size_t)logit_rows);
    if (!ss->logits || !ss->sample_row || !ss->logit_argmax || !ss->logits_wanted)
        return lm_fail(err, LM_ERR_NOMEM, "out of memory for the engine's step buffers");
    const char *all_logits = getenv("LOOM_DOWNLOAD_ALL_LOGITS");
    ss->all_logits = all_logits && strcmp(all_logits, "1") == 0;
    const char *device = getenv("LOOM_DEVICE_SAMPLING");
    bool wanted = device ? strcmp(device, "0") != 0 : !lm_backend_is_host(backend);
    ss->device_sampling = wanted && lm_backend_samples_rows(backend);
    if (ss->device_sampling) {
        ss->sample_rows = calloc((size_t)logit_rows, sizeof *ss->sample_rows);
        ss->sample_entries = malloc(sizeof *ss->sample_entries * LM_FORWARD_SAMPLE_ENTRIES);
        ss->sample_drew = calloc((size_t)logit_rows, sizeof *ss->sample_drew);
        ss->rng_before = calloc((size_t)logit_rows, sizeof *ss->rng_before);
        if (!ss->sample_rows || !ss->sample_entries || !ss->sample_drew || !ss->rng_before)
            return lm_fail(err, LM_ERR_NOMEM, "out of memory for the engine's device draws");
    }
    lm_status st = lm_sampler_scratch_init(&ss->scratch, V, err);
    if (st != LM_OK) return st;
    ss->scratch_open = true;
    /* With a device backend the host's cores are free while the rows are
     * sampled; a host backend's pool would compete with its own. */
    const char *env = getenv("LOOM_SAMPLE_THREADS");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = env ? atoi(env) : lm_backend_is_host(backend) ? 0 : (int)(cores < 16 ? cores : 16);
    return lm_presampler_init(&ss->presampler, threads, V, logit_rows, err);
}

void lm_step_sampler_free(lm_step_sampler *ss) {
    if (ss->scratch_open) lm_sampler_scratch_free(&ss->scratch);
    lm_presampler_free(&ss->presampler);
    lm_grammar_frame_cache_free(&ss->grammar_frames);
    lm_token_trie_free(ss->grammar_trie);
    free(ss->logits);
    free(ss->sample_row);
    free(ss->logit_argmax);
    free(ss->logits_wanted);
    free(ss->sample_rows);
    free(ss->sample_entries);
    free(ss->sample_drew);
    free(ss->rng_before);
    memset(ss, 0, sizeof *ss);
}

static lm_sample_context sample_context_of(const lm_sequence *seq) {
    return (lm_sample_context){.counts = &seq->counts,
                               .n_generated = lm_sequence_generated(seq),
                               .min_tokens = seq->request->params.min_tokens,
                               .stop_ids = seq->stop_ids,
                               .n_stop_ids = seq->n_stop_ids};
}

/* Whether seq's next draw needs its logits row on the host: anything but a
 * plain argmax (a grammar, sampling, penalties, logprobs), and the first
 * choice of a request of several (the others sample from its row). */
static bool needs_logits_row(const lm_step_sampler *ss, const lm_sequence *seq) {
    const loom_request_params *p = &seq->request->params;
    if (ss->all_logits || p->grammar || (seq->choice == 0 && p->n > 1)) return true;
    lm_sample_context ctx = sample_context_of(seq);
    return !lm_sample_is_raw_argmax(&p->sampling, &ctx);
}

/* Plans seq's draw from logit row `row` on the device: its uniform taken
 * from the sequence's rng now (the draw is the next use of that rng), the
 * rng as it was kept to give back if the device needs no uniform.  False
 * (nothing changed) when the draw needs the row on the host. */
static bool plan_device_draw(lm_step_sampler *ss, lm_sequence *seq, int row) {
    const loom_request_params *p = &seq->request->params;
    if (!ss->device_sampling || ss->all_logits || p->grammar || (seq->choice == 0 && p->n > 1)) return false;
    lm_sample_context ctx = sample_context_of(seq);
    lm_rng before = seq->rng;
    double u = lm_rng_uniform(&seq->rng);
    if (!lm_sampler_device_row(&p->sampling, &ctx, u, &ss->sample_rows[row], ss->sample_entries,
                               LM_FORWARD_SAMPLE_ENTRIES, &ss->n_sample_entries)) {
        seq->rng = before;
        return false;
    }
    ss->rng_before[row] = before;
    ss->any_device_draws = true;
    return true;
}

void lm_step_sampler_plan_rows(lm_step_sampler *ss, const lm_step_plan *plan) {
    int row = 0;
    ss->any_device_draws = false;
    ss->n_sample_entries = 0;
    for (int i = 0; i < plan->n; i++) {
        const lm_plan_entry *p = &plan->entries[i];
        int rows = p->n_drafts > 0 ? p->n_drafts + 1 : p->wants_logits;
        bool whole = needs_logits_row(ss, p->seq);
        for (int r = 0; r < rows; r++, row++) {
            bool drawn = whole && p->n_drafts == 0 && plan_device_draw(ss, p->seq, row);
            ss->logits_wanted[row] = whole && !drawn;
            if (ss->sample_rows && !drawn) ss->sample_rows[row].mode = LM_SAMPLE_ROW_SKIP;
        }
    }
}

lm_forward_out lm_step_sampler_forward_out(lm_step_sampler *ss) {
    return (lm_forward_out){.logits = ss->logits, .argmax = ss->logit_argmax, .logits_wanted = ss->logits_wanted,
                            .sample_rows = ss->any_device_draws ? ss->sample_rows : NULL,
                            .sample_entries = ss->sample_entries, .n_sample_entries = ss->n_sample_entries,
                            .drew = ss->sample_drew};
}

void lm_step_sampler_presample(lm_step_sampler *ss, const lm_step_plan *plan) {
    if (!ss->presampler.pool) return;
    int row = 0, jobs = 0;
    for (int i = 0; i < plan->n; i++) {
        const lm_plan_entry *e = &plan->entries[i];
        if (e->n_drafts > 0) {
            row += e->n_drafts + 1;
            continue;
        }
        if (!e->wants_logits) continue;
        lm_sequence *seq = e->seq;
        const loom_request_params *p = &seq->request->params;
        if (ss->logits_wanted[row] && !p->grammar)
            ss->presampler.jobs[jobs++] = (lm_presample_job){
                .owner = seq, .row = row, .params = &p->sampling, .ctx = sample_context_of(seq), .rng = &seq->rng};
        row++;
    }
    if (jobs >= 2) lm_presampler_run(&ss->presampler, ss->logits, jobs);
}

/* A grammar's mask on ss->sample_row (before every sampler step: the
 * sampler's order comment).  The vocabulary trie is built once, for the
 * first sequence with a grammar; each sequence keeps its own state. */
static lm_status apply_grammar(lm_step_sampler *ss, lm_sequence *seq, lm_error *err) {
    lm_status st = LM_OK;
    if (!ss->grammar_trie) st = lm_grammar_vocab_trie(ss->tokenizer, ss->vocab_size, &ss->grammar_trie, err);
    if (st == LM_OK && !seq->grammar)
        st = lm_sequence_grammar_create(seq->request->params.grammar, ss->grammar_trie, &ss->grammar_frames,
                                        &seq->grammar, err);
    if (st != LM_OK) return st;
    seq->grammar->token_work = ss->grammar_token_work;
    return lm_sequence_grammar_mask(seq->grammar, ss->sample_row, ss->vocab_size, seq->stop_ids, seq->n_stop_ids,
                                    err);
}

lm_status lm_step_sampler_draw(lm_step_sampler *ss, lm_sequence *seq, int row, lm_sample_result *storage,
                               const lm_sample_result **out, lm_error *err) {
    int V = ss->vocab_size;
    const loom_request_params *p = &seq->request->params;
    lm_sample_context ctx = sample_context_of(seq);
    *storage = (lm_sample_result){0};
    *out = storage;
    if (ss->sample_rows && ss->sample_rows[row].mode == LM_SAMPLE_ROW_DRAW) {
        /* drawn on the device; a draw that took no uniform (greedy, or
         * nothing left to sample) gives the rng back */
        if (!ss->sample_drew[row]) seq->rng = ss->rng_before[row];
        storage->token = ss->logit_argmax[row];
        return LM_OK;
    }
    if (!ss->logits_wanted[row]) {
        /* planned as a plain argmax; nothing a draw depends on changes
         * between planning and here but the output count, which can only
         * lift min_tokens' mask */
        if (needs_logits_row(ss, seq))
            return lm_fail(err, LM_ERR_INTERNAL, "engine: a row's logits were left on the device");
        storage->token = ss->logit_argmax[row];
        return LM_OK;
    }
    const lm_sample_result *drawn = lm_presampler_take(&ss->presampler, seq, row);
    if (drawn) {
        *out = drawn;
        return LM_OK;
    }
    memcpy(ss->sample_row, ss->logits + (size_t)V * (size_t)row, sizeof(float) * (size_t)V);
    if (p->grammar) {
        uint64_t t0 = lm_step_sampler_now_ns();
        lm_status masked = apply_grammar(ss, seq, err);
        ss->grammar_ns += lm_step_sampler_now_ns() - t0;
        ss->grammar_masks++;
        if (masked != LM_OK) return masked;
    }
    return lm_sample(&p->sampling, ss->sample_row, V, &ctx, &seq->rng, &ss->scratch, storage, err);
}

lm_status lm_step_sampler_grammar_accept(lm_step_sampler *ss, lm_sequence *seq, int32_t token, bool *done,
                                         lm_error *err) {
    uint64_t t0 = lm_step_sampler_now_ns();
    lm_status st = lm_sequence_grammar_accept(seq->grammar, ss->tokenizer, token, done, err);
    ss->grammar_ns += lm_step_sampler_now_ns() - t0;
    return st;
}

int lm_step_sampler_grammar_prefix(lm_step_sampler *ss, lm_sequence *seq, const int32_t *drafts, int n) {
    uint64_t t0 = lm_step_sampler_now_ns();
    int made = lm_sequence_grammar_valid_prefix(seq->grammar, ss->tokenizer, drafts, n);
    ss->grammar_ns += lm_step_sampler_now_ns() - t0;
    return made;
}

void lm_step_sampler_stats(const lm_step_sampler *ss, loom_stats *stats) {
    stats->grammar_masks = ss->grammar_masks;
    stats->grammar_ns = ss->grammar_ns;
}
