/* Golden tests of the GLM-4.6V text family against transformers' references
 * (fixtures/README.md): tests/fixtures/models/glm46v-moe and every
 * folder of tests/data/glm-shapes/ (other shapes: several expert groups,
 * top-k above 2, experts no token picks, the dense glm4v; see the README
 * there).  Per fixture: the model uses every text tensor, prefill logits of
 * every prompt and the hidden state entering each layer within 1e-4 of the
 * reference's std, greedy continuations by the margin rule, batched ==
 * alone (chunks of two prompts mixed in one step, experts seeing other
 * token groups) and preempted == not through the engine. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/sequence_runner.h"
#include "engine_util.h"
#include "harness.h"
#include "io/json_file.h"
#include "loom.h"
#include "model_util.h"
#include "models/glm4v/glm4v.h"

#define LOGIT_TOLERANCE test_logit_tolerance() /* max |Δ| / std(reference), fixtures/README.md */
#define MARGIN_RULE 1e-3
#define MAX_FIXTURES 16
#define MAX_PROMPTS 8

typedef struct {
    char name[256], dir[1024];
    test_model m;
    const lm_model_info *info;
    lm_safetensors *reference;
    char prompts[MAX_PROMPTS][16]; /* reference.json's text prompts */
    int n_prompts;
} glm_fixture;

static bool read_prompt_names(glm_fixture *f) {
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", f->dir);
    cJSON *meta;
    lm_error err = {0};
    if (lm_json_read_file(path, 1 << 20, &meta, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return false;
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(meta, "prompts")) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(p, "kind");
        if (cJSON_IsString(name) && cJSON_IsString(kind) && strcmp(kind->valuestring, "text") == 0 &&
            f->n_prompts < MAX_PROMPTS)
            snprintf(f->prompts[f->n_prompts++], sizeof f->prompts[0], "%s", name->valuestring);
    }
    cJSON_Delete(meta);
    return f->n_prompts > 0;
}

static bool open_fixture(glm_fixture *f, const char *dir, const char *name) {
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%.200s", name);
    snprintf(f->dir, sizeof f->dir, "%.1000s", dir);
    if (!test_model_open(&f->m, f->dir, 2)) return false;
    f->info = lm_model_describe(f->m.model);
    char path[1200];
    lm_error err = {0};
    snprintf(path, sizeof path, "%s/reference.safetensors", f->dir);
    if (lm_safetensors_open(path, LM_LOAD_READ, &f->reference, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return false;
    }
    return read_prompt_names(f);
}

static void close_fixture(glm_fixture *f) {
    lm_safetensors_close(f->reference);
    test_model_close(&f->m);
}

static const lm_tensor *ref(const glm_fixture *f, const char *prompt, const char *what) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", prompt, what);
    return lm_safetensors_find(f->reference, key);
}

/* The family is GLM's, and every text tensor is used (the vision tower and
 * layers past num_hidden_layers are not the text model). */
static void test_uses_every_text_tensor(void *arg) {
    const glm_fixture *f = arg;
    CHECK_MSG(strcmp(f->info->family, "glm4v") == 0, "family %s", f->info->family);
    const lm_glm4v_model *g = (const lm_glm4v_model *)f->m.model;
    for (int i = 0; i < g->config.num_hidden_layers; i++)
        CHECK_MSG(g->layers[i].is_moe == (g->config.is_moe && i >= g->config.first_k_dense_replace),
                  "layer %d kind", i);
    int unused = 0;
    for (size_t i = 0; i < lm_checkpoint_count(g->checkpoint); i++) {
        const lm_tensor *t = lm_checkpoint_at(g->checkpoint, i);
        if (strstr(t->name, "visual.")) continue;
        if (!lm_weights_was_used(&g->weights, t)) {
            fprintf(stderr, "  unused: %s\n", t->name);
            unused++;
        }
    }
    CHECK_MSG(unused == 0, "%d text tensors unused", unused);
    CHECK(f->info->n_active_parameters <= f->info->n_parameters && f->info->n_active_parameters > 0);
    CHECK(!g->config.is_moe || f->info->n_active_parameters < f->info->n_parameters);
}

static void test_prefill_logits(void *arg) {
    const glm_fixture *f = arg;
    int V = f->info->vocab_size;
    for (int p = 0; p < f->n_prompts; p++) {
        int n;
        const int32_t *ids = test_reference_ids(f->reference, f->prompts[p], &n);
        const lm_tensor *want = ref(f, f->prompts[p], "logits");
        CHECK_MSG(ids && want && want->n_elements == (int64_t)n * V, "%s: logits reference missing",
                  f->prompts[p]);
        lm_error err = {0};
        float *got = test_prefill(f->m.model, ids, n, NULL, NULL, &err);
        CHECK_MSG(got, "%s: %s", f->prompts[p], err.message);
        double e = test_normalized_error(got, want->data, (size_t)n * V);
        free(got);
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s (%d tokens): normalized logit error %.3g", f->prompts[p], n,
                  e);
        if (getenv("LOOM_TEST_VERBOSE")) fprintf(stderr, "    %s %s: %.3g\n", f->name, f->prompts[p], e);
    }
}

/* p0.hidden.L: the state entering layer L (after the final norm for L =
 * layers); the first layer past the bound says where an error starts. */
static void test_hidden_states(void *arg) {
    const glm_fixture *f = arg;
    int L = f->info->n_layers, H = f->info->hidden_size, n;
    const int32_t *ids = test_reference_ids(f->reference, "p0", &n);
    CHECK_MSG(ids && ref(f, "p0", "hidden.0"), "p0 hidden-state references missing");
    float **hidden = calloc((size_t)L + 1, sizeof *hidden);
    CHECK(hidden);
    bool allocated = true;
    for (int l = 0; l <= L; l++) allocated = (hidden[l] = malloc(sizeof(float) * (size_t)n * H)) && allocated;
    lm_error err = {0};
    float *logits = allocated ? test_prefill(f->m.model, ids, n, NULL, hidden, &err) : NULL;
    int bad_layer = -1;
    double bad_error = 0;
    for (int l = 0; logits && l <= L && bad_layer < 0; l++) {
        char what[32];
        snprintf(what, sizeof what, "hidden.%d", l);
        const lm_tensor *want = ref(f, "p0", what);
        double e = want && want->n_elements == (int64_t)n * H
                       ? test_normalized_error(hidden[l], want->data, (size_t)n * H)
                       : INFINITY;
        if (!(e < LOGIT_TOLERANCE)) bad_layer = l, bad_error = e;
    }
    for (int l = 0; l <= L; l++) free(hidden[l]);
    free(hidden);
    free(logits);
    CHECK_MSG(allocated, "out of memory for hidden states");
    CHECK_MSG(logits, "p0: %s", err.message);
    CHECK_MSG(bad_layer < 0, "p0 hidden.%d (%s): normalized error %.3g", bad_layer,
              bad_layer == L ? "after the final norm" : "entering that layer", bad_error);
}

static void test_greedy_continuations(void *arg) {
    const glm_fixture *f = arg;
    for (int p = 0; p < f->n_prompts; p++) {
        int n;
        const int32_t *ids = test_reference_ids(f->reference, f->prompts[p], &n);
        const lm_tensor *greedy = ref(f, f->prompts[p], "greedy");
        const lm_tensor *margin = ref(f, f->prompts[p], "greedy_margin");
        CHECK_MSG(ids && greedy && margin && greedy->n_elements == margin->n_elements,
                  "%s: greedy reference missing", f->prompts[p]);
        int G = (int)greedy->n_elements;
        const float *margins = margin->data;
        test_greedy_result res;
        lm_error err = {0};
        CHECK_OK(test_greedy_run(f->m.model, ids, n, greedy->data, G, &res, &err), &err);
        /* after the first allowed difference later steps are not comparable */
        if (res.mismatch_at >= 0)
            CHECK_MSG(margins[res.mismatch_at] < MARGIN_RULE,
                      "%s: greedy token %d differs with reference margin %.3g", f->prompts[p],
                      res.mismatch_at, margins[res.mismatch_at]);
        CHECK(res.compared > 0 || margins[0] < MARGIN_RULE);
    }
}

/* The shortest and the longest prompt, in chunks of 17 and 3 rows mixed in
 * each step and on scattered KV blocks, give each row the logits it gets
 * alone. */
static void test_batched_equals_alone(void *arg) {
    const glm_fixture *f = arg;
    int V = f->info->vocab_size, shortest = 0, longest = 0, lens[MAX_PROMPTS];
    const int32_t *all[MAX_PROMPTS];
    for (int p = 0; p < f->n_prompts; p++) {
        all[p] = test_reference_ids(f->reference, f->prompts[p], &lens[p]);
        CHECK(all[p] && lens[p] <= 120);
        if (lens[p] < lens[shortest]) shortest = p;
        if (lens[p] > lens[longest]) longest = p;
    }
    const int32_t *ids[2] = {all[shortest], all[longest]};
    int len[2] = {lens[shortest], lens[longest]}, done[2] = {0, 0};
    lm_error err = {0};
    float *alone[2] = {test_prefill(f->m.model, ids[0], len[0], NULL, NULL, &err), test_prefill(f->m.model, ids[1], len[1], NULL, NULL, &err)};
    lm_model_context *ctx = NULL;
    lm_status st = alone[0] && alone[1]
                       ? lm_model_context_create(f->m.model,
                                                 &(lm_context_options){.kv_block_size = 16,
                                                                       .kv_blocks = 16,
                                                                       .state_slots = 2,
                                                                       .max_step_tokens = 128,
                                                                       .max_step_seqs = 2,
                                                                       .max_blocks_per_seq = 8,
                                                                       .max_logit_rows = 128},
                                                 &ctx, &err)
                       : LM_ERR_NOMEM;
    float *logits = malloc(sizeof(float) * 128 * (size_t)V);
    int32_t tables[2][8], tokens[128], positions[128 * 3];
    for (int i = 0; i < 8; i++) tables[0][i] = 15 - 2 * i, tables[1][i] = 2 * i;
    double worst = 0;
    for (int step = 0; st == LM_OK && logits && (done[0] < len[0] || done[1] < len[1]); step++) {
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
        st = lm_model_forward(ctx, &batch, &(lm_forward_out){.logits = logits}, &err);
        for (int q = 0, row = 0; st == LM_OK && q < n_seqs; q++) {
            int s = seqs[q].state_slot;
            for (int j = 0; j < seqs[q].n_new; j++, row++)
                worst = fmax(worst, test_normalized_error(logits + (size_t)row * V,
                                                          alone[s] + (size_t)(done[s] + j) * V, (size_t)V));
            done[s] += seqs[q].n_new;
        }
    }
    free(logits);
    free(alone[0]);
    free(alone[1]);
    lm_model_context_destroy(ctx);
    CHECK_MSG(st == LM_OK, "%s", err.message);
    CHECK_MSG(worst < 1e-5, "batched logits differ from single runs by %.3g (normalized)", worst);
}

/* Greedy requests through the engine on a KV pool too small for them all:
 * preempted and recomputed ones give the tokens they give alone. */
static void test_preemption_keeps_outputs_(void *arg) {
    const glm_fixture *f = arg;
    int longest = 0;
    const int32_t *ids = NULL;
    for (int p = 0; p < f->n_prompts; p++) {
        int len;
        const int32_t *x = test_reference_ids(f->reference, f->prompts[p], &len);
        if (len > longest) longest = len, ids = x;
    }
    char why[512];
    CHECK_MSG(ids && test_engine_preemption_keeps_outputs(f->dir, ids, longest, why, sizeof why), "%s", why);
}

/* config.json: the kinds, and settings loom refuses with the field named. */
static void test_config_kinds_and_refusals(void) {
    lm_glm4v_config c;
    lm_error err = {0};
    const char *moe = "{\"model_type\":\"glm46v\",\"text_config\":{\"model_type\":\"glm4v_moe_text\","
                      "\"hidden_size\":64,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                      "\"rope_parameters\":{\"mrope_section\":[1,1,2]}}}";
    CHECK_OK(lm_glm4v_config_parse(moe, strlen(moe), "moe", &c, &err), &err);
    CHECK(c.is_moe && c.head_dim == 16 && c.rot_dim == 8 && c.n_routed_experts == 128);
    const char *dense = "{\"model_type\":\"glm4v_text\",\"hidden_size\":64,\"num_attention_heads\":4,"
                        "\"num_key_value_heads\":2,\"rope_parameters\":{\"mrope_section\":[2,1,1]}}";
    CHECK_OK(lm_glm4v_config_parse(dense, strlen(dense), "dense", &c, &err), &err);
    CHECK(!c.is_moe && c.intermediate_size == 13696);
    static const struct {
        const char *json, *says;
    } bad[] = {
        {"\"use_qk_norm\":true}", "use_qk_norm"},
        {"\"hidden_act\":\"gelu\"}", "hidden_act"},
        {"\"n_group\":3}", "n_group"},
        {"\"num_experts_per_tok\":200}", "num_experts_per_tok"},
        {"\"n_routed_experts\":8,\"num_experts_per_tok\":5,\"n_group\":4,\"topk_group\":2}", "groups"},
        {"\"partial_rotary_factor\":0.25}", "mrope_section"},
        {"\"rope_scaling\":{\"rope_type\":\"yarn\"}}", "yarn"},
        {"\"eos_token_id\":[5,999999]}", "eos_token_id"},
        {"\"max_position_embeddings\":0}", "max_position_embeddings"},
    };
    /* a valid small MoE text config, then the field that breaks it */
    const char *base = "{\"model_type\":\"glm4v_moe_text\",\"hidden_size\":64,\"num_attention_heads\":4,"
                       "\"num_key_value_heads\":2,\"vocab_size\":2048,\"rope_parameters\":{\"mrope_section\":[1,1,2]},";
    char json[512];
    snprintf(json, sizeof json, "%s\"n_group\":1}", base);
    CHECK_OK(lm_glm4v_config_parse(json, strlen(json), "base", &c, &err), &err);
    static const char *const wrong_kind[] = {
        "{\"model_type\":\"glm46v\",\"text_config\":{\"model_type\":\"llama\"}}", "llama",
        "{\"model_type\":\"glm4v_moe\",\"text_config\":{\"model_type\":\"glm4v_text\"}}", "glm4v_text",
        "{\"model_type\":\"glm4v_moe_text\",\"hidden_size\":100,\"num_attention_heads\":3}", "head_dim",
    };
    for (size_t i = 0; i < sizeof wrong_kind / sizeof *wrong_kind; i += 2) {
        lm_error e = {0};
        CHECK_MSG(lm_glm4v_config_parse(wrong_kind[i], strlen(wrong_kind[i]), "config.json", &c, &e) != LM_OK,
                  "accepted %s", wrong_kind[i]);
        CHECK_MSG(strstr(e.message, wrong_kind[i + 1]), "error for %s does not name %s: %s",
                  wrong_kind[i], wrong_kind[i + 1], e.message);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lm_error e = {0};
        snprintf(json, sizeof json, "%s%s", base, bad[i].json);
        CHECK_MSG(lm_glm4v_config_parse(json, strlen(json), "config.json", &c, &e) != LM_OK,
                  "accepted %s", json);
        CHECK_MSG(strstr(e.message, bad[i].says), "error for %s does not name %s: %s", json,
                  bad[i].says, e.message);
    }
}

static void run_fixture(const char *dir, const char *name) {
    static glm_fixture f; /* large; one at a time */
    char label[400];
    if (!open_fixture(&f, dir, name)) {
        test_failed(__FILE__, __LINE__, "cannot load the %s fixture", name);
        close_fixture(&f);
        return;
    }
    struct {
        const char *what;
        void (*fn)(void *);
    } tests[] = {
        {"uses_every_text_tensor", test_uses_every_text_tensor},
        {"prefill_logits", test_prefill_logits},
        {"hidden_states", test_hidden_states},
        {"greedy_continuations", test_greedy_continuations},
        {"batched_equals_alone", test_batched_equals_alone},
        {"preemption_keeps_outputs", test_preemption_keeps_outputs_},
    };
    for (size_t t = 0; t < sizeof tests / sizeof *tests; t++) {
        snprintf(label, sizeof label, "%s/%s", name, tests[t].what);
        test_run_with(label, tests[t].fn, &f);
    }
    close_fixture(&f);
}

static int compare_names(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

int main(void) {
    char dir[1024];
    RUN_TEST(test_config_kinds_and_refusals);
    run_fixture(test_fixture_path(dir, sizeof dir, "models/glm46v-moe"), "glm46v-moe");
    /* tests/data/glm-shapes/<name>/config.json, in name order */
    const char *data = getenv("LOOM_TEST_DATA");
    char root[1024];
    snprintf(root, sizeof root, "%s/glm-shapes", data && *data ? data : "tests/data");
    DIR *d = opendir(root);
    char names[MAX_FIXTURES][256];
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) && n < MAX_FIXTURES;) {
        char config[1400];
        struct stat st;
        snprintf(config, sizeof config, "%s/%.255s/config.json", root, e->d_name);
        if (e->d_name[0] != '.' && stat(config, &st) == 0) snprintf(names[n++], 256, "%s", e->d_name);
    }
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof names[0], compare_names);
    for (int i = 0; i < n; i++) {
        snprintf(dir, sizeof dir, "%.800s/%.200s", root, names[i]);
        run_fixture(dir, names[i]);
    }
    return test_summary("test_glm4v");
}
