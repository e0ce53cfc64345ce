/* Golden tests of the Qwen3.5-MoE text model against transformers'
 * reference outputs in fixtures/models/qwen35-moe (fixtures/README.md):
 * logits of every prompt, greedy continuations (margin rule), the MTP head's
 * logits, and batch invariance and speculative equivalence through the
 * engine.  The checkpoint stores both expert layouts (model-spec §B.3): the
 * main layers per expert (experts.<e>.*_proj.weight), the MTP layer fused
 * (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]), so the
 * logits test one loader and the MTP logits the other. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sequence_runner.h"
#include "engine_util.h"
#include "harness.h"
#include "io/safetensors.h"
#include "loom.h"
#include "model_util.h"
#include "models/qwen35/qwen35_mtp.h"

#define LOGIT_TOLERANCE test_logit_tolerance() /* max |Δ| / std(reference), fixtures/README.md */
#define MARGIN_RULE 1e-3

static struct {
    char dir[1024];
    test_model tm;
    lm_safetensors *reference;
} fx;

static const char *const prompts[] = {"p0", "p1"};
#define N_PROMPTS (sizeof prompts / sizeof prompts[0])

static const lm_tensor *ref(const char *prompt, const char *what) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", prompt, what);
    return lm_safetensors_find(fx.reference, name);
}

static void test_model_is_moe_with_both_layouts(void) {
    const lm_qwen35_model *q = fx.tm.qwen;
    CHECK(q->config.is_moe && q->config.num_experts == 8 && q->config.num_experts_per_tok == 2);
    for (int i = 0; i < q->config.num_hidden_layers; i++) CHECK_MSG(q->layers[i].is_moe, "layer %d", i);
    CHECK_MSG(q->has_mtp, "the MoE MTP head must load: %s", q->mtp_missing);
    CHECK(q->has_mtp && q->mtp->layer.is_moe);
    /* Every tensor of the text model and the head is used, both layouts. */
    const lm_checkpoint *ck = q->checkpoint;
    int unused = 0;
    for (size_t i = 0; i < lm_checkpoint_count(ck); i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        if (strstr(t->name, "visual.")) continue;
        if (!lm_weights_was_used(&q->weights, t)) {
            fprintf(stderr, "  unused: %s\n", t->name);
            unused++;
        }
    }
    CHECK_MSG(unused == 0, "%d text or MTP tensors unused", unused);
}

static void test_prefill_logits_match_reference(void) {
    int V = fx.tm.config->vocab_size;
    for (size_t p = 0; p < N_PROMPTS; p++) {
        int n;
        const int32_t *ids = test_reference_ids(fx.reference, prompts[p], &n);
        const lm_tensor *want = ref(prompts[p], "logits");
        CHECK(ids && want && want->n_elements == (int64_t)n * V);
        lm_error err = {0};
        float *got = test_prefill(fx.tm.model, ids, n, NULL, NULL, &err);
        CHECK_MSG(got, "%s: %s", prompts[p], err.message);
        double e = test_normalized_error(got, want->data, (size_t)n * V);
        free(got);
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s (%d tokens): normalized logit error %.3g", prompts[p], n, e);
    }
}

static void test_greedy_continuations_match_reference(void) {
    for (size_t p = 0; p < N_PROMPTS; p++) {
        int n;
        const int32_t *ids = test_reference_ids(fx.reference, prompts[p], &n);
        const lm_tensor *greedy = ref(prompts[p], "greedy"), *margin = ref(prompts[p], "greedy_margin");
        CHECK(ids && greedy && margin);
        int G = (int)greedy->n_elements;
        const int32_t *want = greedy->data;
        const float *margins = margin->data;
        test_greedy_result res;
        lm_error err = {0};
        CHECK_OK(test_greedy_run(fx.tm.model, ids, n, want, G, &res, &err), &err);
        int compared = res.compared, mismatch_at = res.mismatch_at;
        if (mismatch_at >= 0)
            CHECK_MSG(margins[mismatch_at] < MARGIN_RULE,
                      "%s: greedy token %d differs with reference margin %.3g", prompts[p],
                      mismatch_at, margins[mismatch_at]);
        CHECK(compared > 0 || margins[0] < MARGIN_RULE);
    }
}

static void test_mtp_logits_match_reference(void) {
    int V = fx.tm.config->vocab_size, H = fx.tm.config->hidden_size, checked = 0;
    for (size_t p = 0; p < N_PROMPTS; p++) {
        int n;
        const int32_t *ids = test_reference_ids(fx.reference, prompts[p], &n);
        const lm_tensor *want = ref(prompts[p], "mtp_logits");
        if (!want) continue;
        CHECK(ids && n >= 2 && want->n_elements == (int64_t)(n - 1) * V);
        float *hidden = malloc(sizeof(float) * (size_t)n * H);
        float *got = malloc(sizeof(float) * (size_t)(n - 1) * V);
        lm_error err = {0};
        float *logits = test_prefill(fx.tm.model, ids, n, hidden, NULL, &err);
        lm_status st = logits ? lm_model_mtp_sequence_logits(fx.tm.model, hidden, ids + 1, NULL, n - 1, got, &err)
                              : err.code;
        double e = st == LM_OK ? test_normalized_error(got, want->data, (size_t)(n - 1) * V) : INFINITY;
        free(logits);
        free(hidden);
        free(got);
        CHECK_OK(st, &err);
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s: normalized MTP logit error %.3g", prompts[p], e);
        checked++;
    }
    CHECK_MSG(checked > 0, "no prompt has mtp_logits");
}

/* Two prompts in one step, chunked and mixed with each other, give each
 * the logits it gets alone (the experts see different token groups). */
static void test_batched_equals_alone(void) {
    int V = fx.tm.config->vocab_size;
    int n0, n1;
    const int32_t *a = test_reference_ids(fx.reference, "p0", &n0);
    const int32_t *b = test_reference_ids(fx.reference, "p1", &n1);
    CHECK(a && b);
    lm_error err = {0};
    float *alone[2] = {test_prefill(fx.tm.model, a, n0, NULL, NULL, &err), test_prefill(fx.tm.model, b, n1, NULL, NULL, &err)};
    CHECK_MSG(alone[0] && alone[1], "%s", err.message);
    lm_model_context *ctx;
    CHECK_OK(lm_model_context_create(fx.tm.model,
                                     &(lm_context_options){.kv_block_size = 16,
                                                           .kv_blocks = 16,
                                                           .state_slots = 2,
                                                           .max_step_tokens = 128,
                                                           .max_step_seqs = 2,
                                                           .max_blocks_per_seq = 8,
                                                           .max_logit_rows = 128},
                                     &ctx, &err),
             &err);
    int32_t tables[2][8];
    for (int i = 0; i < 8; i++) tables[0][i] = 15 - 2 * i, tables[1][i] = 2 * i;
    lm_model_reset_state(ctx, 0);
    lm_model_reset_state(ctx, 1);
    const int32_t *ids[2] = {a, b};
    int len[2] = {n0, n1}, done[2] = {0, 0};
    float *logits = malloc(sizeof(float) * 128 * (size_t)V);
    int32_t tokens[128], positions[128 * 3];
    double worst = 0;
    for (int step = 0; done[0] < n0 || done[1] < n1; step++) {
        lm_step_seq seqs[2];
        int n_seqs = 0, n_tok = 0;
        for (int s = 0; s < 2; s++) {
            int take = (step + s) % 2 ? 3 : 17;
            if (take > len[s] - done[s]) take = len[s] - done[s];
            if (take == 0) continue;
            seqs[n_seqs++] = (lm_step_seq){.first = n_tok, .n_new = take, .n_cached = done[s],
                                           .state_slot = s, .block_table = tables[s], .n_blocks = 8,
                                           .all_logits = true};
            for (int j = 0; j < take; j++, n_tok++) {
                tokens[n_tok] = ids[s][done[s] + j];
                positions[3 * n_tok] = positions[3 * n_tok + 1] = positions[3 * n_tok + 2] = done[s] + j;
            }
        }
        lm_step_batch batch = {.n_tokens = n_tok, .tokens = tokens, .positions = positions,
                               .n_seqs = n_seqs, .seqs = seqs};
        CHECK_OK(lm_model_forward(ctx, &batch, &(lm_forward_out){.logits = logits}, &err), &err);
        int row = 0;
        for (int q = 0; q < n_seqs; q++) {
            int s = seqs[q].state_slot;
            for (int j = 0; j < seqs[q].n_new; j++, row++) {
                const float *want = alone[s] + (size_t)(done[s] + j) * V;
                worst = fmax(worst, test_normalized_error(logits + (size_t)row * V, want, (size_t)V));
            }
            done[s] += seqs[q].n_new;
        }
    }
    CHECK_MSG(worst < 1e-5, "batched logits differ from single runs by %.3g (normalized)", worst);
    free(logits);
    free(alone[0]);
    free(alone[1]);
    lm_model_context_destroy(ctx);
}

/* Greedy with MTP drafts (K = 2, the MoE head drafting) equals plain greedy. */
static void test_speculative_greedy_equals_plain(void) {
    int n0, n1;
    const int32_t *a = test_reference_ids(fx.reference, "p0", &n0);
    const int32_t *b = test_reference_ids(fx.reference, "p1", &n1);
    collected got[2][2];
    for (int k = 0; k <= 2; k += 2) {
        loom_engine *e = test_engine_open(fx.dir, 64, 0, 256, 4, k);
        CHECK(e);
        loom_request *reqs[2];
        char error[256];
        for (int i = 0; i < 2; i++) {
            loom_request_params p;
            loom_request_params_default(&p);
            p.prompt = i ? b : a;
            p.n_prompt = i ? n1 : n0;
            p.max_tokens = 24;
            p.ignore_eos = true;
            p.sampling.temperature = 0;
            CHECK_MSG(loom_submit(e, &p, &reqs[i], error, sizeof error) == LOOM_OK, "%s", error);
        }
        for (int i = 0; i < 2; i++) {
            collect_all(reqs[i], &got[k / 2][i], 1);
            loom_request_free(reqs[i]);
        }
        loom_stats stats = wait_idle(e);
        if (k > 0) CHECK_MSG(stats.spec_drafted_tokens > 0, "K=%d drafted nothing", k);
        loom_engine_destroy(e);
    }
    for (int i = 0; i < 2; i++) {
        CHECK(!got[0][i].error && !got[1][i].error && got[0][i].n_tokens == 24 &&
              got[1][i].n_tokens == 24);
        CHECK_MSG(memcmp(got[0][i].tokens, got[1][i].tokens, sizeof(int32_t) * 24) == 0,
                  "request %d: speculative greedy differs from plain greedy", i);
    }
}

/* Preempted and recomputed requests (the engine restarts them, states and
 * all) give the tokens they give alone. */
static void test_preemption_keeps_outputs_moe(void) {
    int n;
    const int32_t *ids = test_reference_ids(fx.reference, "p1", &n);
    char why[512];
    CHECK_MSG(ids && test_engine_preemption_keeps_outputs(fx.dir, ids, n, why, sizeof why), "%s", why);
}

int main(void) {
    test_fixture_path(fx.dir, sizeof fx.dir, "models/qwen35-moe");
    char path[1200];
    lm_error err = {0};
    snprintf(path, sizeof path, "%s/reference.safetensors", fx.dir);
    if (!test_model_open(&fx.tm, fx.dir, 2) ||
        lm_safetensors_open(path, LM_LOAD_READ, &fx.reference, &err) != LM_OK) {
        fprintf(stderr, "cannot load the qwen35-moe fixture: %s\n", err.message);
        printf("test_qwen35_moe: 0 passed, 1 failed\n");
        return 1;
    }
    RUN_TEST(test_model_is_moe_with_both_layouts);
    RUN_TEST(test_prefill_logits_match_reference);
    RUN_TEST(test_greedy_continuations_match_reference);
    RUN_TEST(test_mtp_logits_match_reference);
    RUN_TEST(test_batched_equals_alone);
    RUN_TEST(test_speculative_greedy_equals_plain);
    RUN_TEST(test_preemption_keeps_outputs_moe);
    lm_safetensors_close(fx.reference);
    test_model_close(&fx.tm);
    return test_summary("test_qwen35_moe");
}
