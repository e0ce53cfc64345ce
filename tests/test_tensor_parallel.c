/* Tensor parallelism of the Qwen3.5 dense model on the cpu (issue 19):
 * ranks as threads, each loading its share of the qwen35-dense fixture
 * (half the attention, Gated DeltaNet heads and MLP columns at 2 ranks)
 * and summing its row-parallel products with the host communicator.  Every
 * prompt's logits match transformers' reference at the golden tolerance,
 * the whole model's within float32 rounding, and every rank holds the same
 * bits; greedy decoding after the prompt (the recurrent states and KV
 * caches kept per rank) follows the reference continuation; the same for
 * the MoE fixture (every rank routes every token, half of each expert's and
 * the shared expert's width a rank), and for GLM-4.6V's; at 4 ranks, with
 * fewer kv heads or Gated DeltaNet key heads than ranks, each such head is
 * kept whole by the ranks whose heads use it.  Shares that do not divide
 * are refused with a sentence.
 *
 * Expert parallelism (lm_model_load_options.expert_parallel): the same
 * checks on the MoE fixtures, each rank holding E / n whole experts (rank r
 * experts [r·E/n, (r+1)·E/n), at their whole width) while attention stays
 * split by heads; with the MTP head (its fused experts sliced by range)
 * through lm_tensor_parallel_open; a count of experts the ranks do not
 * divide refused naming it. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8_checkpoint.h"
#include "harness.h"
#include "io/safetensors.h"
#include "model_util.h"
#include "models/glm4v/glm4v.h"
#include "models/registry.h"
#include "models/tensor_parallel.h"
#include "ops/comm.h"

#define MAX_RANKS 4
#define MARGIN_RULE 1e-3 /* fixtures/README.md */
/* Against the unsplit model: float32 sums in another order.  On a GPU a
 * rank's products also cut their reductions differently (a narrower
 * matrix, other tiles): 4 ranks measured 1.1-1.3e-5 of the std on an H200. */
#define WHOLE_TOLERANCE 1e-5
#define WHOLE_TOLERANCE_GPU 4e-5

/* The routed experts a rank holds in its first MoE layer. */
typedef struct {
    int count, first, width; /* count 0: no MoE layer */
} held_experts;

static held_experts experts_held(lm_model *model) {
    const char *family = lm_model_describe(model)->family;
    if (strcmp(family, lm_qwen35_family.name) == 0) {
        const lm_qwen35_model *q = (const lm_qwen35_model *)model;
        for (int i = 0; i < q->config.num_hidden_layers; i++)
            if (q->layers[i].is_moe) {
                const lm_moe_experts *v = &q->layers[i].moe.experts.view;
                return (held_experts){v->n_experts, v->first_expert, v->inter};
            }
    } else if (strcmp(family, lm_glm4v_family.name) == 0) {
        const lm_glm4v_model *g = (const lm_glm4v_model *)model;
        for (int i = 0; i < g->config.num_hidden_layers; i++)
            if (g->layers[i].is_moe) {
                const lm_moe_experts *v = &g->layers[i].moe.experts.view;
                return (held_experts){v->n_experts, v->first_expert, v->inter};
            }
    }
    return (held_experts){0};
}

typedef struct {
    const char *dir;
    lm_comm *comm;
    bool expert_parallel;
    const int32_t *ids;
    int n;
    const int32_t *continuation; /* greedy reference (NULL: prefill only) */
    int G;
    float *logits; /* [n, V] out */
    test_greedy_result greedy;
    bool vocab_split; /* the rank's description says its lm_head is a run of vocabulary rows */
    held_experts held;
    lm_status status;
    char message[LM_ERROR_MESSAGE_MAX];
} rank_job;

static void *rank_main(void *arg) {
    rank_job *j = arg;
    test_model tm;
    lm_error err = {0};
    lm_model_load_options o = {.tensor_parallel = j->comm, .expert_parallel = j->expert_parallel};
    if (!test_model_open_with(&tm, j->dir, 1, &o)) {
        j->status = LM_ERR_INVALID;
        snprintf(j->message, sizeof j->message, "the model did not load (see stderr)");
        return NULL;
    }
    char *text = NULL;
    size_t text_size = 0;
    FILE *f = open_memstream(&text, &text_size);
    if (f) {
        lm_model_print_description(tm.model, f);
        fclose(f);
        j->vocab_split = text && strstr(text, "vocabulary rows");
        free(text);
    }
    j->held = experts_held(tm.model);
    j->logits = test_prefill(tm.model, j->ids, j->n, NULL, NULL, &err);
    j->status = j->logits ? LM_OK : err.code;
    if (j->status == LM_OK && j->continuation)
        j->status = test_greedy_run(tm.model, j->ids, j->n, j->continuation, j->G, &j->greedy, &err);
    if (j->status != LM_OK) snprintf(j->message, sizeof j->message, "%s", err.message);
    test_model_close(&tm);
    return NULL;
}

/* Runs the prompt on n_ranks ranks; jobs[r] holds rank r's results. */
static bool run_ranks(const char *dir, int n_ranks, bool expert_parallel, const int32_t *ids, int n,
                      const int32_t *continuation, int G, rank_job *jobs) {
    lm_host_comm_group *group = NULL;
    lm_error err = {0};
    if (lm_host_comm_group_create(n_ranks, &group, &err) != LM_OK) return false;
    pthread_t threads[MAX_RANKS];
    for (int r = 0; r < n_ranks; r++) {
        jobs[r] = (rank_job){.dir = dir, .comm = lm_host_comm_rank(group, r), .expert_parallel = expert_parallel,
                             .ids = ids, .n = n, .continuation = continuation, .G = G};
        if (pthread_create(&threads[r], NULL, rank_main, &jobs[r]) != 0) return false;
    }
    for (int r = 0; r < n_ranks; r++) pthread_join(threads[r], NULL);
    lm_host_comm_group_destroy(group);
    return true;
}

/* A folder of LOOM_FIXTURES, or under tests/ when it begins so. */
static void fixture_dir(char *dir, size_t size, const char *fixture) {
    if (strncmp(fixture, "tests/", 6) == 0)
        snprintf(dir, size, "%s", fixture);
    else
        test_fixture_path(dir, size, fixture);
}

static bool host_backend_under_test(void) { return strcmp(test_backend_name(), "cuda") != 0; }

/* Whether rank r holds the experts it should of the whole model's (E of
 * width I): with expert parallelism E / n whole ones from r·E / n, else
 * all E at width I / n; a dense model none.  why gets the difference. */
static void check_held(const held_experts *whole, const held_experts *held, int r, int n_ranks, bool expert_parallel,
                       char *why, size_t why_size) {
    held_experts want = *whole;
    if (whole->count > 0 && expert_parallel) {
        want.count = whole->count / n_ranks;
        want.first = r * want.count;
    } else if (whole->count > 0) {
        want.width = whole->width / n_ranks;
    }
    if (held->count != want.count || held->first != want.first || held->width != want.width)
        snprintf(why, why_size, "rank %d holds experts [%d, %d) of width %d; want [%d, %d) of width %d", r,
                 held->first, held->first + held->count, held->width, want.first, want.first + want.count,
                 want.width);
}

/* The fixture (a folder of LOOM_FIXTURES, or under tests/ when it begins
 * so) on n_ranks ranks, with or without expert parallelism. */
static void check_split(const char *fixture, int n_ranks, bool expert_parallel) {
    /* a GPU's ranks all on its device, summed through the host (staged) */
    char dir[1024], path[1200];
    fixture_dir(dir, sizeof dir, fixture);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    lm_safetensors *reference = NULL;
    lm_error err = {0};
    CHECK_OK(lm_safetensors_open(path, LM_LOAD_READ, &reference, &err), &err);
    test_model whole;
    bool opened = test_model_open(&whole, dir, 1);
    if (!opened) lm_safetensors_close(reference);
    CHECK(opened);
    int V = lm_model_describe(whole.model)->vocab_size;
    held_experts all = experts_held(whole.model);
    static const char *prompts[] = {"p0", "p1", "p2", "p3"};
    char why[600] = "";
    int checked = 0;
    for (size_t p = 0; p < sizeof prompts / sizeof *prompts && !why[0]; p++) {
        int n = 0;
        const int32_t *ids = test_reference_ids(reference, prompts[p], &n);
        char key[64];
        snprintf(key, sizeof key, "%s.logits", prompts[p]);
        const lm_tensor *want = lm_safetensors_find(reference, key);
        snprintf(key, sizeof key, "%s.greedy", prompts[p]);
        const lm_tensor *greedy = lm_safetensors_find(reference, key);
        snprintf(key, sizeof key, "%s.greedy_margin", prompts[p]);
        const lm_tensor *margin = lm_safetensors_find(reference, key);
        if (!greedy || !margin) greedy = margin = NULL; /* this prompt has logits only */
        if (!ids || !want) continue; /* the fixture has fewer prompts */
        checked++;
        float *alone = test_prefill(whole.model, ids, n, NULL, NULL, &err);
        rank_job jobs[MAX_RANKS];
        if (!alone || !run_ranks(dir, n_ranks, expert_parallel, ids, n, greedy ? greedy->data : NULL,
                                 greedy ? (int)greedy->n_elements : 0, jobs)) {
            snprintf(why, sizeof why, "%s: could not run", prompts[p]);
            free(alone);
            break;
        }
        size_t count = (size_t)n * (size_t)V;
        for (int r = 0; r < n_ranks && !why[0]; r++)
            if (jobs[r].status != LM_OK) snprintf(why, sizeof why, "%s rank %d: %s", prompts[p], r, jobs[r].message);
        for (int r = 0; r < n_ranks && !why[0]; r++)
            check_held(&all, &jobs[r].held, r, n_ranks, expert_parallel, why, sizeof why);
        if (!why[0]) {
            double e_ref = test_normalized_error(jobs[0].logits, want->data, count);
            double e_whole = test_normalized_error(jobs[0].logits, alone, count);
            int differs = 0; /* the first rank whose logits are not rank 0's bits */
            for (int r = n_ranks - 1; r >= 1; r--)
                if (memcmp(jobs[0].logits, jobs[r].logits, count * sizeof(float)) != 0) differs = r;
            const test_greedy_result *g = &jobs[0].greedy;
            if (!(e_ref < test_logit_tolerance()))
                snprintf(why, sizeof why, "%s: the logits are %.3g of the std from the reference", prompts[p], e_ref);
            else if (!(e_whole < (host_backend_under_test() ? WHOLE_TOLERANCE : WHOLE_TOLERANCE_GPU)))
                snprintf(why, sizeof why, "%s: the logits are %.3g of the std from the whole model's", prompts[p],
                         e_whole);
            else if (differs)
                snprintf(why, sizeof why, "%s: rank %d's logits differ from rank 0's", prompts[p], differs);
            else if (V % n_ranks == 0 && !(jobs[0].vocab_split && jobs[n_ranks - 1].vocab_split))
                snprintf(why, sizeof why, "%s: the lm_head was not split by vocabulary (%d over %d ranks)", prompts[p],
                         V, n_ranks);
            else if (greedy && g->mismatch_at >= 0 && !(((const float *)margin->data)[g->mismatch_at] < MARGIN_RULE))
                /* the fixtures' margin rule: only a near tie may go the other way */
                snprintf(why, sizeof why, "%s: greedy decoding left the reference at step %d", prompts[p],
                         g->mismatch_at);
            else if (greedy && g->compared < 1)
                snprintf(why, sizeof why, "%s: no greedy step compared", prompts[p]);
        }
        free(alone);
        for (int r = 0; r < n_ranks; r++) free(jobs[r].logits);
    }
    test_model_close(&whole);
    lm_safetensors_close(reference);
    CHECK_MSG(!why[0], "%s on %d ranks%s: %s", fixture, n_ranks, expert_parallel ? " (expert parallel)" : "", why);
    CHECK_MSG(checked >= 2, "%s: %d prompts with a reference", fixture, checked);
}

static void check_ranks(const char *fixture, int n_ranks) { check_split(fixture, n_ranks, false); }

static void test_dense_on_two_ranks(void) { check_ranks("models/qwen35-dense", 2); }
/* every rank routes every token and keeps half of each expert's width */
static void test_moe_on_two_ranks(void) { check_ranks("models/qwen35-moe", 2); }
/* GLM-4.6V: q/k/v biases by head, a dense first layer, sigmoid routing;
 * at 4 ranks its 2 kv heads are each kept by 2 ranks */
static void test_glm_on_two_and_four_ranks(void) {
    check_ranks("models/glm46v-moe", 2);
    check_ranks("models/glm46v-moe", 4);
}
/* 8 query heads over 2 kv heads, 4 GDN key and value heads, 8 layers: at 4
 * ranks each kv head is kept by 2 ranks */
static void test_shape_on_two_and_four_ranks(void) {
    check_ranks("tests/data/shapes/deep8-tied-theta1e7-gqa4", 2);
    check_ranks("tests/data/shapes/deep8-tied-theta1e7-gqa4", 4);
}

/* One lm_model over 2 ranks (lm_tensor_parallel_open), as the engine sees
 * it: the prompts' logits, greedy decoding (cache moves and states on
 * every rank) and the MTP head's logits against the reference. */
static void check_one_model_with(const char *fixture, const lm_model_load_options *options) {
    /* cuda: one rank a GPU, the sums through NCCL */
    const char *share = getenv("LOOM_TP_SHARE_GPU"); /* ranks on one GPU, staged through the host */
    if (!host_backend_under_test() && lm_backend_device_count(test_backend_name()) < 2 && !(share && share[0] == '1')) {
        printf("  skipped: 2 ranks of %s need 2 GPUs (this machine shows %d)\n", test_backend_name(),
               lm_backend_device_count(test_backend_name()));
        return;
    }
    char dir[1024], path[1200];
    test_fixture_path(dir, sizeof dir, fixture);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    lm_safetensors *reference = NULL;
    lm_error err = {0};
    CHECK_OK(lm_safetensors_open(path, LM_LOAD_READ, &reference, &err), &err);
    lm_backend *backend = NULL;
    lm_model *model = NULL;
    lm_status st = lm_backend_create(test_backend_name(), 2, &backend, &err);
    if (st == LM_OK) st = lm_tensor_parallel_open(dir, NULL, options, backend, 2, &model, &err);
    char why[600] = "";
    if (st != LM_OK) snprintf(why, sizeof why, "open: %s", err.message);
    int V = model ? lm_model_describe(model)->vocab_size : 0, H = model ? lm_model_describe(model)->hidden_size : 0;
    for (int p = 0; p < 4 && !why[0]; p++) {
        char name[16], key[64];
        snprintf(name, sizeof name, "p%d", p);
        int n = 0;
        const int32_t *ids = test_reference_ids(reference, name, &n);
        snprintf(key, sizeof key, "%s.logits", name);
        const lm_tensor *want = lm_safetensors_find(reference, key);
        snprintf(key, sizeof key, "%s.mtp_logits", name);
        const lm_tensor *want_mtp = lm_safetensors_find(reference, key);
        snprintf(key, sizeof key, "%s.greedy", name);
        const lm_tensor *greedy = lm_safetensors_find(reference, key);
        snprintf(key, sizeof key, "%s.greedy_margin", name);
        const lm_tensor *margin = lm_safetensors_find(reference, key);
        if (!ids || !want) continue;
        float *hidden = malloc(sizeof(float) * (size_t)n * (size_t)H);
        float *logits = hidden ? test_prefill(model, ids, n, hidden, NULL, &err) : NULL;
        double e = logits ? test_normalized_error(logits, want->data, (size_t)n * (size_t)V) : INFINITY;
        if (!(e < test_logit_tolerance())) snprintf(why, sizeof why, "%s: logits %.3g of the std off (%s)", name, e,
                                                    logits ? "" : err.message);
        if (!why[0] && want_mtp && lm_model_has_mtp_logits(model)) {
            float *mtp = malloc(sizeof(float) * (size_t)(n - 1) * (size_t)V);
            st = mtp ? lm_model_mtp_sequence_logits(model, hidden, ids + 1, NULL, n - 1, mtp, &err) : LM_ERR_NOMEM;
            e = st == LM_OK ? test_normalized_error(mtp, want_mtp->data, (size_t)(n - 1) * (size_t)V) : INFINITY;
            if (!(e < test_logit_tolerance()))
                snprintf(why, sizeof why, "%s: MTP logits %.3g of the std off (%s)", name, e,
                         st == LM_OK ? "" : err.message);
            free(mtp);
        }
        if (!why[0] && greedy && margin) {
            test_greedy_result g;
            st = test_greedy_run(model, ids, n, greedy->data, (int)greedy->n_elements, &g, &err);
            if (st != LM_OK) snprintf(why, sizeof why, "%s: greedy: %s", name, err.message);
            else if (g.mismatch_at >= 0 && !(((const float *)margin->data)[g.mismatch_at] < MARGIN_RULE))
                snprintf(why, sizeof why, "%s: greedy left the reference at step %d", name, g.mismatch_at);
        }
        free(logits);
        free(hidden);
    }
    bool mtp_present = model && lm_model_has_mtp_logits(model);
    lm_model_free(model);
    lm_backend_destroy(backend);
    lm_safetensors_close(reference);
    CHECK_MSG(!why[0], "%s: %s", fixture, why);
    CHECK_MSG(mtp_present, "%s: the MTP head did not come through the ranks", fixture);
}

static void check_one_model(const char *fixture) { check_one_model_with(fixture, NULL); }

static void test_one_model_over_two_ranks(void) { check_one_model("models/qwen35-dense"); }
/* its MTP head's experts are stored fused ([E, 2I, H]): each rank slices every one */
static void test_one_moe_model_over_two_ranks(void) { check_one_model("models/qwen35-moe"); }

/* A load that must fail on every rank, with a message holding `words`. */
static void check_refused_with(const char *fixture, int n_ranks, bool expert_parallel, lm_status want,
                               const char *words) {
    char dir[1024];
    fixture_dir(dir, sizeof dir, fixture);
    lm_host_comm_group *group = NULL;
    lm_error err = {0};
    CHECK_OK(lm_host_comm_group_create(n_ranks, &group, &err), &err);
    lm_backend *be = NULL;
    lm_status st = lm_backend_create("cpu", 1, &be, &err);
    lm_model *model = NULL;
    if (st == LM_OK) {
        lm_model_load_options o = {.tensor_parallel = lm_host_comm_rank(group, 0), .expert_parallel = expert_parallel};
        st = lm_model_open(dir, &o, be, &model, &err);
    }
    lm_model_free(model);
    lm_backend_destroy(be);
    lm_host_comm_group_destroy(group);
    CHECK_MSG(st == want && strstr(err.message, words), "%s on %d ranks: status %d, '%s'", fixture, n_ranks,
              (int)st, err.message);
}

static void check_refused(const char *fixture, int n_ranks, lm_status want, const char *words) {
    check_refused_with(fixture, n_ranks, false, want, words);
}

static void test_device_backends_refused(void) {
    /* a device kind (as cuda) with fewer devices than ranks (and no
     * LOOM_TP_SHARE_GPU, which would put them all on one) */
    char *share = getenv("LOOM_TP_SHARE_GPU") ? strdup(getenv("LOOM_TP_SHARE_GPU")) : NULL;
    unsetenv("LOOM_TP_SHARE_GPU");
    lm_backend *cpu = NULL;
    lm_error err = {0};
    CHECK_OK(lm_backend_create("cpu", 1, &cpu, &err), &err);
    lm_backend_ops ops = *cpu->ops;
    ops.name = "device";
    lm_backend device = {.ops = &ops, .impl = cpu->impl};
    char dir[1024];
    lm_model *model = NULL;
    lm_status st = lm_tensor_parallel_open(test_fixture_path(dir, sizeof dir, "models/qwen35-dense"), NULL, NULL, &device,
                                           2, &model, &err);
    lm_model_free(model);
    lm_backend_destroy(cpu);
    if (share) setenv("LOOM_TP_SHARE_GPU", share, 1);
    free(share);
    CHECK_MSG(st == LM_ERR_INVALID && strstr(err.message, "over 2 ranks needs 2 GPUs: this machine shows 0"),
              "%d '%s'", (int)st, err.message);
}

static void test_shares_that_do_not_divide_are_refused(void) {
    check_refused("models/qwen35-dense", 3, LM_ERR_INVALID, "num_attention_heads (4) is not a multiple of 3");
    /* 6 query heads go to 3 ranks, but 2 kv heads cannot be kept whole by 3 */
    check_refused("tests/data/shapes/gqa3-conv3-dk32-dv24", 3, LM_ERR_INVALID,
                  "num_key_value_heads (2) is not a multiple of 3");
    check_refused("models/glm46v-moe", 3, LM_ERR_INVALID, "is not a multiple of 3");
}

/* Gated DeltaNet with fewer key heads than ranks: each key head kept whole
 * by the ranks whose value heads use it (value head h uses key head
 * h / (Hv / Hk)), as the kv heads: qwen35-dense's 2 key heads over 4 ranks
 * (one value head a rank), and a shape of 1 key head over 4 value heads,
 * kept by every rank */
static void test_gdn_key_heads_repeated_over_ranks(void) {
    check_ranks("models/qwen35-dense", 4);
    check_ranks("tests/data/shapes/h128-ratio4-dk24-dv20", 2);
    check_ranks("tests/data/shapes/h128-ratio4-dk24-dv20", 4);
}

/* tensor parallelism at 4 ranks: 8 columns of each expert's 32 a rank */
static void test_moe_on_four_ranks(void) { check_ranks("models/qwen35-moe", 4); }

static void test_moe_shares_that_do_not_divide_are_refused(void) {
    /* 8 experts of 32 columns: 3 ranks cannot share them */
    check_refused("models/qwen35-moe", 3, LM_ERR_INVALID, "is not a multiple of 3");
}

/* Expert parallelism: 8 experts, 4 whole ones a rank at 2 ranks, 2 at 4
 * (the per-expert tensors of the text model, each rank reading only its
 * own), attention and Gated DeltaNet heads split as with tensor
 * parallelism (at 4 ranks each kv and GDN key head kept by 2 ranks) */
static void test_experts_over_two_and_four_ranks(void) {
    check_split("models/qwen35-moe", 2, true);
    check_split("models/qwen35-moe", 4, true);
}
/* GLM-4.6V: sigmoid routing in 2 groups of 4 experts (at 2 ranks a rank
 * holds one group), 2 experts a rank at 4 ranks, where the 2 kv heads are
 * each kept by 2 ranks; the shared expert is split by width */
static void test_glm_experts_over_two_and_four_ranks(void) {
    check_split("models/glm46v-moe", 2, true);
    check_split("models/glm46v-moe", 4, true);
}
/* a dense model has no experts to deal out: the flag changes nothing */
static void test_expert_parallel_dense_is_tensor_parallel(void) { check_split("models/qwen35-dense", 2, true); }

/* One lm_model over 2 ranks: greedy and the MTP head, whose experts are
 * stored fused ([E, 2I, H]): each rank reads its 4 experts of the stacks */
static void test_one_model_experts_over_two_ranks(void) {
    lm_model_load_options o = {.expert_parallel = true};
    check_one_model_with("models/qwen35-moe", &o);
}

static void test_experts_that_do_not_divide_are_refused(void) {
    check_refused_with("models/qwen35-moe", 3, true, LM_ERR_INVALID,
                       "expert parallelism over 3 ranks: num_experts (8) is not a multiple of 3");
    check_refused_with("models/glm46v-moe", 3, true, LM_ERR_INVALID,
                       "expert parallelism over 3 ranks: n_routed_experts (8) is not a multiple of 3");
}

/* ---------------------------------------------------- FP8 checkpoints */

/* Qwen3.5's largest releases, the ones that need several GPUs, ship in FP8:
 * each rank decodes only its rows of every FP8 matrix and makes them what
 * the whole model makes of FP8 for those columns (int8 blocks, or bf16 on
 * a backend without int8 weights).  So the FP8 checkpoint over 2 ranks
 * must give the very bits — logits and MTP logits — of its dequantized
 * twin (float32 loaded with --quantize int8; or rounded to bf16) over 2
 * ranks: the twin's slices go through the paths already checked against
 * the references above. */
typedef struct {
    const char *dir;
    lm_comm *comm;
    lm_backend *backend;
    lm_model_load_options options;
    const lm_safetensors *reference;
    float *logits[4], *mtp[4];
    size_t count[4], mtp_count[4];
    lm_status status;
    char message[LM_ERROR_MESSAGE_MAX];
} fp8_rank_job;

static void *fp8_rank_main(void *arg) {
    fp8_rank_job *j = arg;
    lm_error err = {0};
    lm_model *model = NULL;
    j->options.tensor_parallel = j->comm;
    j->status = lm_model_open(j->dir, &j->options, j->backend, &model, &err);
    int V = model ? lm_model_describe(model)->vocab_size : 0, H = model ? lm_model_describe(model)->hidden_size : 0;
    for (int p = 0; p < 4 && j->status == LM_OK; p++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", p);
        int n = 0;
        const int32_t *ids = test_reference_ids(j->reference, name, &n);
        if (!ids) continue;
        float *hidden = malloc(sizeof(float) * (size_t)n * (size_t)H);
        j->logits[p] = hidden ? test_prefill(model, ids, n, hidden, NULL, &err) : NULL;
        j->count[p] = (size_t)n * (size_t)V;
        if (!j->logits[p]) j->status = hidden ? err.code : LM_ERR_NOMEM;
        if (j->status == LM_OK && lm_model_has_mtp_logits(model) && n > 1) {
            j->mtp_count[p] = (size_t)(n - 1) * (size_t)V;
            j->mtp[p] = malloc(sizeof(float) * j->mtp_count[p]);
            j->status = j->mtp[p] ? lm_model_mtp_sequence_logits(model, hidden, ids + 1, NULL, n - 1, j->mtp[p], &err)
                                  : LM_ERR_NOMEM;
        }
        free(hidden);
    }
    if (j->status != LM_OK) snprintf(j->message, sizeof j->message, "%s", err.message);
    lm_model_free(model);
    return NULL;
}

static void fp8_jobs_free(fp8_rank_job *jobs, int n) {
    for (int r = 0; r < n; r++)
        for (int p = 0; p < 4; p++) {
            free(jobs[r].logits[p]);
            free(jobs[r].mtp[p]);
        }
}

/* dir's model over the ranks on `backends`, the logits into jobs. */
static bool run_fp8_ranks(const char *dir, const lm_model_load_options *options, lm_backend **backends,
                          int n_ranks, const lm_safetensors *reference, fp8_rank_job *jobs) {
    lm_host_comm_group *group = NULL;
    lm_error err = {0};
    if (lm_host_comm_group_create(n_ranks, &group, &err) != LM_OK) return false;
    pthread_t threads[MAX_RANKS];
    for (int r = 0; r < n_ranks; r++) {
        jobs[r] = (fp8_rank_job){.dir = dir, .comm = lm_host_comm_rank(group, r), .backend = backends[r],
                                 .options = *options, .reference = reference};
        if (pthread_create(&threads[r], NULL, fp8_rank_main, &jobs[r]) != 0) return false;
    }
    for (int r = 0; r < n_ranks; r++) pthread_join(threads[r], NULL);
    lm_host_comm_group_destroy(group);
    return true;
}

/* The FP8 form of fixture over 2 ranks (with expert parallelism or not)
 * against its dequantized twin, on rank backends `backends`, and against
 * the whole FP8 model on backends[0] within float32 rounding where the
 * ranks' int8 blocks are the whole model's (`aligned`: every row-parallel
 * share's columns a multiple of 32, or as unaligned as the whole's) or the
 * weights bf16 (made per element: any slice holds the whole's values).
 * The twin shares the slicing code; the whole model does not. */
static void check_fp8_over_ranks(const char *fixture, bool expert_parallel, bool aligned, lm_backend **backends) {
    enum { N = 2 };
    bool int8 = lm_backend_supports_weights(backends[0], LM_DTYPE_Q8_0);
    char source[1024], fp8_dir[512], twin_dir[512], path[1200];
    test_fixture_path(source, sizeof source, fixture);
    bool made = test_make_temp_folder(fp8_dir, sizeof fp8_dir, "tp-fp8") &&
                test_make_temp_folder(twin_dir, sizeof twin_dir, "tp-fp8-twin") &&
                test_fp8_write_checkpoint(source, fp8_dir, &(test_fp8_options){.form = TEST_FP8_WEIGHTS, .quant_json = TEST_FP8_CONFIG, .every_linear = true}) &&
                test_fp8_write_checkpoint(source, twin_dir, &(test_fp8_options){.form = int8 ? TEST_FP8_DEQUANT_F32 : TEST_FP8_DEQUANT_BF16, .every_linear = true});
    CHECK(made);
    snprintf(path, sizeof path, "%s/reference.safetensors", source);
    lm_safetensors *reference = NULL;
    lm_error err = {0};
    CHECK_OK(lm_safetensors_open(path, LM_LOAD_READ, &reference, &err), &err);
    fp8_rank_job fp8[N], twin[N];
    memset(fp8, 0, sizeof fp8);
    memset(twin, 0, sizeof twin);
    lm_model_load_options o_fp8 = {.expert_parallel = expert_parallel};
    lm_model_load_options o_twin = {.expert_parallel = expert_parallel, .quantize_int8 = int8};
    char why[600] = "";
    if (!made || !reference || !run_fp8_ranks(fp8_dir, &o_fp8, backends, N, reference, fp8) ||
        !run_fp8_ranks(twin_dir, &o_twin, backends, N, reference, twin))
        snprintf(why, sizeof why, "could not run");
    for (int r = 0; r < N && !why[0]; r++)
        if (fp8[r].status != LM_OK || twin[r].status != LM_OK)
            snprintf(why, sizeof why, "rank %d: %s", r, fp8[r].status != LM_OK ? fp8[r].message : twin[r].message);
    fp8_rank_job whole = {.dir = fp8_dir, .backend = backends[0], .reference = reference};
    bool against_whole = !why[0] && (aligned || !int8);
    double e_whole = 0;
    if (against_whole) {
        fp8_rank_main(&whole); /* no communicator: the whole model */
        if (whole.status != LM_OK) snprintf(why, sizeof why, "the whole model: %s", whole.message);
        for (int p = 0; p < 4 && !why[0]; p++)
            if (fp8[0].logits[p] && whole.logits[p])
                e_whole = fmax(e_whole, test_normalized_error(fp8[0].logits[p], whole.logits[p], fp8[0].count[p]));
        if (!why[0] && !(e_whole < (host_backend_under_test() ? WHOLE_TOLERANCE : WHOLE_TOLERANCE_GPU)))
            snprintf(why, sizeof why, "the logits are %.3g of the std from the whole FP8 model's", e_whole);
    }
    fp8_jobs_free(&whole, 1);
    int compared = 0, mtp_compared = 0;
    for (int p = 0; p < 4 && !why[0]; p++) {
        if (!fp8[0].logits[p]) continue;
        compared++;
        if (memcmp(fp8[0].logits[p], twin[0].logits[p], sizeof(float) * fp8[0].count[p]) != 0)
            snprintf(why, sizeof why, "p%d: the logits are %.3g of the std from the twin's", p,
                     test_normalized_error(fp8[0].logits[p], twin[0].logits[p], fp8[0].count[p]));
        else if (fp8[0].mtp[p] && (!twin[0].mtp[p] || memcmp(fp8[0].mtp[p], twin[0].mtp[p], sizeof(float) * fp8[0].mtp_count[p]) != 0))
            snprintf(why, sizeof why, "p%d: the MTP logits differ from the twin's", p);
        mtp_compared += fp8[0].mtp[p] != NULL;
    }
    fp8_jobs_free(fp8, N);
    fp8_jobs_free(twin, N);
    lm_safetensors_close(reference);
    test_remove_checkpoint(fp8_dir);
    test_remove_checkpoint(twin_dir);
    CHECK_MSG(!why[0], "%s FP8 on 2 ranks%s (%s): %s", fixture, expert_parallel ? ", expert parallel" : "",
              int8 ? "int8" : "bf16", why);
    CHECK_MSG(compared >= 2, "%s: %d prompts compared", fixture, compared);
    char vs_whole[96] = "";
    if (against_whole) snprintf(vs_whole, sizeof vs_whole, "; %.2g of the std from the whole model's", e_whole);
    printf("  %s FP8 over 2 ranks%s as %s: %d prompts' logits and %d prompts' MTP logits the twin's bits%s\n", fixture,
           expert_parallel ? " (expert parallel)" : "", int8 ? "int8" : "bf16", compared, mtp_compared, vs_whole);
}

/* The weights of a backend that keeps no FP8: FP8 checkpoints load as
 * int8 on every rank and on the whole model alike.  (Kept FP8, a matrix
 * whose rank slices are not whole 128-blocks would be int8 on the ranks
 * and FP8 whole: not the same model.) */
static bool int8_weights_only(const lm_backend *be, lm_dtype dtype) {
    (void)be;
    return dtype == LM_DTYPE_BF16 || dtype == LM_DTYPE_F16 || dtype == LM_DTYPE_F32 || dtype == LM_DTYPE_Q8_0;
}

/* On the backend under test (one a rank; cuda's ranks on one GPU, summed
 * through the host as LOOM_TP_SHARE_GPU does), its table keeping no FP8. */
static void check_fp8_on_test_backend(const char *fixture, bool expert_parallel, bool aligned) {
    lm_backend *backends[2] = {0};
    lm_error err = {0};
    bool ok = true;
    for (int r = 0; r < 2 && ok; r++) {
        ok = lm_backend_create(test_backend_name(), 1, &backends[r], &err) == LM_OK;
        if (ok && strcmp(test_compute_name(), "bf16") == 0)
            ok = lm_backend_set_compute(backends[r], "bf16", &err) == LM_OK;
    }
    CHECK_MSG(ok, "%s", err.message);
    if (ok) {
        lm_backend_ops ops = *backends[0]->ops;
        ops.weight_dtype_supported = int8_weights_only;
        lm_backend no_fp8[2] = {{.ops = &ops, .impl = backends[0]->impl}, {.ops = &ops, .impl = backends[1]->impl}};
        lm_backend *ranks[2] = {&no_fp8[0], &no_fp8[1]};
        check_fp8_over_ranks(fixture, expert_parallel, aligned, ranks);
    }
    for (int r = 0; r < 2; r++) lm_backend_destroy(backends[r]);
}

static void test_fp8_over_two_ranks(void) {
    check_fp8_on_test_backend("models/qwen35-dense", false, true);
    /* per-expert FP8 tensors cut by width (down_proj's 32 columns into 16:
     * float32 slices of whole int8 blocks), the MTP head's fused FP8 stacks
     * ([E, 2I, H]) sliced; then whole experts a rank (the stacks by range) */
    check_fp8_on_test_backend("models/qwen35-moe", false, false);
    check_fp8_on_test_backend("models/qwen35-moe", true, true);
    /* Qwen3.6's naming: every layer's experts fused FP8 stacks (test_fused_experts) */
    check_fp8_on_test_backend("models/qwen35-moe-fused", false, false);
    check_fp8_on_test_backend("models/qwen35-moe-fused", true, true);
    /* GLM's shared expert is split by width into 16 columns */
    check_fp8_on_test_backend("models/glm46v-moe", true, false);
}

/* A backend without int8 weights (here the cpu's table
 * without them): every rank's FP8 slices made bf16. */
static void test_fp8_over_two_ranks_without_int8(void) {
    lm_backend *cpu[2] = {0};
    lm_error err = {0};
    lm_backend_ops ops;
    lm_backend plain[2];
    bool ok = true;
    for (int r = 0; r < 2 && ok; r++) {
        ok = lm_backend_create("cpu", 1, &cpu[r], &err) == LM_OK;
        if (ok && r == 0) {
            ops = *cpu[0]->ops; /* the table of the kernel set both run */
            ops.weight_dtype_supported = NULL;
        }
        if (ok) plain[r] = (lm_backend){.ops = &ops, .impl = cpu[r]->impl};
    }
    CHECK_MSG(ok, "%s", err.message);
    lm_backend *ranks[2] = {&plain[0], &plain[1]};
    if (ok) {
        check_fp8_over_ranks("models/qwen35-dense", false, true, ranks);
        check_fp8_over_ranks("models/qwen35-moe", false, true, ranks);
        check_fp8_over_ranks("models/qwen35-moe", true, true, ranks);
    }
    for (int r = 0; r < 2; r++) lm_backend_destroy(cpu[r]);
}

int main(void) {
    RUN_TEST(test_dense_on_two_ranks);
    RUN_TEST(test_moe_on_two_ranks);
    RUN_TEST(test_glm_on_two_and_four_ranks);
    RUN_TEST(test_shape_on_two_and_four_ranks);
    RUN_TEST(test_one_model_over_two_ranks);
    RUN_TEST(test_one_moe_model_over_two_ranks);
    RUN_TEST(test_device_backends_refused);
    RUN_TEST(test_shares_that_do_not_divide_are_refused);
    RUN_TEST(test_moe_on_four_ranks);
    RUN_TEST(test_moe_shares_that_do_not_divide_are_refused);
    RUN_TEST(test_gdn_key_heads_repeated_over_ranks);
    RUN_TEST(test_experts_over_two_and_four_ranks);
    RUN_TEST(test_glm_experts_over_two_and_four_ranks);
    RUN_TEST(test_expert_parallel_dense_is_tensor_parallel);
    RUN_TEST(test_one_model_experts_over_two_ranks);
    RUN_TEST(test_experts_that_do_not_divide_are_refused);
    RUN_TEST(test_fp8_over_two_ranks);
    RUN_TEST(test_fp8_over_two_ranks_without_int8);
    return test_summary("test_tensor_parallel");
}
