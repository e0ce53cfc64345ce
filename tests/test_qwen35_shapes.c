/* Golden tests of the Qwen3.5 dense model on checkpoints of other shapes than
 * the visible fixture: every folder of tests/data/shapes/ (made by
 * tools/fixtures/make_shape_fixtures.py, see the README there) is loaded and
 * checked for prefill logits of every prompt, the hidden state entering each
 * layer, greedy continuations (margin rule) and MTP logits where present,
 * against references computed in float64 (fixtures/README.md).  A fourth check
 * is the premise of the others: a prompt is only a fair test of a float32
 * engine at 1e-4 if float32 rounding cannot move its logits that far, so
 * nudging the embedding by one ulp must move them by much less. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/sequence_runner.h"
#include "harness.h"
#include "io/json_file.h"
#include "model_util.h"
#include "models/qwen35/qwen35_mtp.h"

#define LOGIT_TOLERANCE test_logit_tolerance() /* max |Δ| / std(reference), fixtures/README.md */
#define MARGIN_RULE 1e-3
/* What one-ulp nudges of the input may move the logits by, at most, for a
 * prompt to be a fair test at LOGIT_TOLERANCE. */
#define CONDITIONING_LIMIT (LOGIT_TOLERANCE / 2)
#define MAX_FIXTURES 32
#define MAX_PROMPTS 16

typedef struct {
    char name[256], dir[1024];
    test_model m;
    lm_safetensors *reference;
    char prompts[MAX_PROMPTS][16]; /* reference.json's text prompts */
    int n_prompts;
} shape_fixture;

static const char *shapes_dir(char *buf, size_t size) {
    const char *data = getenv("LOOM_TEST_DATA");
    snprintf(buf, size, "%s/shapes", data && *data ? data : "tests/data");
    return buf;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The fixture folders (those holding a config.json), sorted; -1 if the shapes
 * folder cannot be read. */
static int list_fixtures(const char *root, char names[][256], int max) {
    DIR *d = opendir(root);
    if (!d) return -1;
    char found[MAX_FIXTURES][256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < max;) {
        char config[1400];
        struct stat st;
        snprintf(config, sizeof config, "%s/%s/config.json", root, e->d_name);
        if (e->d_name[0] != '.' && stat(config, &st) == 0) snprintf(found[n++], 256, "%s", e->d_name);
    }
    closedir(d);
    char *order[MAX_FIXTURES];
    for (int i = 0; i < n; i++) order[i] = found[i];
    qsort(order, (size_t)n, sizeof *order, compare_names);
    for (int i = 0; i < n; i++) snprintf(names[i], 256, "%s", order[i]);
    return n;
}

static bool read_prompt_names(shape_fixture *f) {
    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", f->dir);
    cJSON *meta;
    lm_error err = {0};
    if (lm_json_read_file(path, 1 << 20, &meta, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return false;
    }
    const cJSON *prompts = cJSON_GetObjectItemCaseSensitive(meta, "prompts"), *p;
    cJSON_ArrayForEach(p, prompts) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(p, "kind");
        if (cJSON_IsString(name) && cJSON_IsString(kind) && strcmp(kind->valuestring, "text") == 0 &&
            f->n_prompts < MAX_PROMPTS)
            snprintf(f->prompts[f->n_prompts++], sizeof f->prompts[0], "%s", name->valuestring);
    }
    cJSON_Delete(meta);
    return f->n_prompts > 0;
}

static bool open_fixture(shape_fixture *f, const char *root, const char *name) {
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%.200s", name);
    snprintf(f->dir, sizeof f->dir, "%.800s/%.200s", root, name);
    if (!test_model_open(&f->m, f->dir, 2)) return false;
    char path[1200];
    lm_error err = {0};
    snprintf(path, sizeof path, "%s/reference.safetensors", f->dir);
    if (lm_safetensors_open(path, LM_LOAD_READ, &f->reference, &err) != LM_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.message);
        return false;
    }
    return read_prompt_names(f);
}

static void close_fixture(shape_fixture *f) {
    lm_safetensors_close(f->reference);
    test_model_close(&f->m);
}

static const lm_tensor *ref(const shape_fixture *f, const char *prompt, const char *what) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", prompt, what);
    return lm_safetensors_find(f->reference, key);
}

static void test_prefill_logits(void *arg) {
    const shape_fixture *f = arg;
    int V = f->m.config->vocab_size;
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
    }
}

/* p0.hidden.L: the state entering layer L, and after the final norm for L =
 * layers; the first layer past the bound says where an error starts. */
static void test_hidden_states(void *arg) {
    const shape_fixture *f = arg;
    int L = f->m.config->num_hidden_layers, H = f->m.config->hidden_size, n;
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
        if (!(e < LOGIT_TOLERANCE)) {
            bad_layer = l;
            bad_error = e;
        }
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
    const shape_fixture *f = arg;
    for (int p = 0; p < f->n_prompts; p++) {
        int n;
        const int32_t *ids = test_reference_ids(f->reference, f->prompts[p], &n);
        const lm_tensor *greedy = ref(f, f->prompts[p], "greedy");
        const lm_tensor *margin = ref(f, f->prompts[p], "greedy_margin");
        CHECK_MSG(ids && greedy && margin && greedy->n_elements == margin->n_elements,
                  "%s: greedy reference missing", f->prompts[p]);
        int G = (int)greedy->n_elements;
        const int32_t *want = greedy->data;
        const float *margins = margin->data;
        test_greedy_result res;
        lm_error err = {0};
        CHECK_OK(test_greedy_run(f->m.model, ids, n, want, G, &res, &err), &err);
        int compared = res.compared, mismatch_at = res.mismatch_at;
        /* after the first allowed difference later steps are not comparable */
        if (mismatch_at >= 0)
            CHECK_MSG(margins[mismatch_at] < MARGIN_RULE,
                      "%s: greedy token %d differs with reference margin %.3g", f->prompts[p],
                      mismatch_at, margins[mismatch_at]);
        CHECK(compared > 0 || margins[0] < MARGIN_RULE);
    }
}

static void test_mtp_logits(void *arg) {
    const shape_fixture *f = arg;
    int V = f->m.config->vocab_size, H = f->m.config->hidden_size, checked = 0;
    for (int p = 0; p < f->n_prompts; p++) {
        int n;
        const int32_t *ids = test_reference_ids(f->reference, f->prompts[p], &n);
        const lm_tensor *want = ref(f, f->prompts[p], "mtp_logits");
        if (!want) continue; /* one-token prompts, or left out for size */
        CHECK_MSG(f->m.qwen->has_mtp, "mtp_logits reference but no head: %s", f->m.qwen->mtp_missing);
        CHECK(ids && n >= 2 && want->n_elements == (int64_t)(n - 1) * V);
        float *hidden = malloc(sizeof(float) * (size_t)n * H);
        float *got = malloc(sizeof(float) * (size_t)(n - 1) * V);
        lm_error err = {0};
        float *logits = hidden && got ? test_prefill(f->m.model, ids, n, hidden, NULL, &err) : NULL;
        lm_status st = logits ? lm_model_mtp_sequence_logits(f->m.model, hidden, ids + 1, NULL, n - 1, got, &err)
                              : LM_ERR_NOMEM;
        double e = st == LM_OK ? test_normalized_error(got, want->data, (size_t)(n - 1) * V)
                               : INFINITY;
        free(logits);
        free(got);
        free(hidden);
        CHECK_MSG(st == LM_OK, "%s: %s", f->prompts[p], err.message[0] ? err.message : "out of memory");
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s (%d tokens): normalized MTP logit error %.3g",
                  f->prompts[p], n, e);
        checked++;
    }
    CHECK_MSG(checked > 0 || !f->m.config->mtp_num_hidden_layers,
              "the config has an MTP head but no prompt has mtp_logits");
}

/* ---- the premise: one-ulp nudges of the input move the logits far less
 * than the tolerance ---- */

/* A backend like the model's whose embed then moves each value one ulp up
 * or down by a hash of its index and the seed (through the backend's own
 * download and upload: the test cannot touch backend memory). */
typedef struct {
    lm_backend base; /* first: what the model runs on during the check */
    const lm_backend_ops *inner;
    lm_backend_ops ops;
    uint64_t seed;
} nudging_backend;

static void embed_nudged(lm_backend *be, lm_mem out, lm_mem ids, int n, const lm_matrix *table) {
    nudging_backend *nb = (nudging_backend *)be;
    nb->inner->embed(be, out, ids, n, table);
    size_t count = (size_t)n * (size_t)table->cols;
    float *host = malloc(sizeof(float) * (count ? count : 1));
    lm_error err = {0};
    if (!host || nb->inner->download(be, host, out, sizeof(float) * count, &err) != LM_OK) {
        free(host);
        return; /* the logits then do not move, which fails the check's own assert below */
    }
    for (size_t i = 0; i < count; i++) {
        uint64_t h = ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull ^ nb->seed * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        h *= 0x94D049BB133111EBull;
        host[i] = nextafterf(host[i], (h >> 40) & 1 ? INFINITY : -INFINITY);
    }
    nb->inner->upload(be, out, host, sizeof(float) * count);
    free(host);
}

static void test_prompts_are_fair_at_the_tolerance(void *arg) {
    shape_fixture *f = arg;
    int V = f->m.config->vocab_size;
    lm_backend *real = f->m.model->backend;
    for (int p = 0; p < f->n_prompts; p++) {
        int n;
        const int32_t *ids = test_reference_ids(f->reference, f->prompts[p], &n);
        const lm_tensor *want = ref(f, f->prompts[p], "logits");
        CHECK(ids && want && want->n_elements == (int64_t)n * V);
        lm_error err = {0};
        float *plain = test_prefill(f->m.model, ids, n, NULL, NULL, &err);
        CHECK_MSG(plain, "%s: %s", f->prompts[p], err.message);
        double scale = test_stddev(want->data, (size_t)n * V), moved = 0;
        for (uint64_t seed = 1; seed <= 4 && moved < INFINITY; seed++) {
            nudging_backend nb = {.base = *real, .inner = real->ops, .ops = *real->ops, .seed = seed};
            nb.ops.embed = embed_nudged;
            nb.base.ops = &nb.ops;
            f->m.model->backend = &nb.base; /* contexts made now run on it */
            float *got = test_prefill(f->m.model, ids, n, NULL, NULL, &err);
            f->m.model->backend = real;
            double d = INFINITY;
            if (got) {
                d = 0;
                for (size_t i = 0; i < (size_t)n * V; i++) d = fmax(d, fabs((double)got[i] - plain[i]));
                d /= scale;
            }
            moved = fmax(moved, d);
            free(got);
        }
        free(plain);
        /* Nudges that move nothing at all did not happen. */
        CHECK_MSG(moved > 0, "%s: the nudged embedding did not reach the logits", f->prompts[p]);
        CHECK_MSG(moved < CONDITIONING_LIMIT,
                  "%s (%d tokens): one-ulp nudges of the embedding move the logits by %.3g of their "
                  "std: float32 rounding alone can miss the %.0e bound here, so the prompt does not "
                  "test the engine (tests/data/shapes/README.md)",
                  f->prompts[p], n, moved, LOGIT_TOLERANCE);
    }
}

static void test_fixture_loads(void *arg) {
    test_failed(__FILE__, __LINE__, "cannot load the fixture in %s", (const char *)arg);
}

int main(void) {
    char root[1024], names[MAX_FIXTURES][256];
    shapes_dir(root, sizeof root);
    int n = list_fixtures(root, names, MAX_FIXTURES);
    if (n <= 0) {
        fprintf(stderr, "no fixtures in %s\n", root);
        printf("test_qwen35_shapes: 0 passed, 1 failed\n");
        return 1;
    }
    static const struct {
        const char *what;
        void (*fn)(void *);
    } checks[] = {
        {"prefill logits", test_prefill_logits},
        {"hidden states", test_hidden_states},
        {"greedy continuations", test_greedy_continuations},
        {"MTP logits", test_mtp_logits},
        {"prompts are fair at the tolerance", test_prompts_are_fair_at_the_tolerance},
    };
    for (int i = 0; i < n; i++) {
        shape_fixture *f = malloc(sizeof *f);
        if (!f || !open_fixture(f, root, names[i])) {
            char name[400];
            snprintf(name, sizeof name, "%.200s: loads", names[i]);
            test_run_with(name, test_fixture_loads, names[i]);
            if (f) close_fixture(f);
            free(f);
            continue;
        }
        for (size_t c = 0; c < sizeof checks / sizeof *checks; c++) {
            char name[400];
            snprintf(name, sizeof name, "%.200s: %s", names[i], checks[c].what);
            test_run_with(name, checks[c].fn, f);
        }
        close_fixture(f);
        free(f);
    }
    return test_summary("test_qwen35_shapes");
}
