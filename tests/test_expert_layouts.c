/* A checkpoint with its experts fused and one with them per expert load to
 * identical outputs (issue 13; model-spec §B.3, §E.2.5).  Each fixture below
 * is re-saved into a temporary folder with every expert layer in the other
 * layout (tests/safetensors_writer.c; bf16 bytes copied verbatim, shards and
 * index kept): per-expert layers (experts.<e>.{gate,up,down}_proj.weight)
 * become fused (experts.gate_up_proj [E, 2I, H], gate rows first, and
 * experts.down_proj [E, H, I]) and fused ones per expert.  Both folders are
 * loaded and their prefill logits, final hidden rows and MTP logits must be
 * bit-identical (and right: within the golden tolerance of the reference).
 * A control copy that fuses the up rows before the gate rows must differ, so
 * the comparison sees the layout. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/sequence_runner.h"
#include "harness.h"
#include "io/checkpoint.h"
#include "model_util.h"
#include "models/glm4v/glm4v.h"
#include "safetensors_writer.h"

#define LOGIT_TOLERANCE test_logit_tolerance() /* max |Δ| / std(reference), fixtures/README.md */
#define INDEX_FILE "model.safetensors.index.json"
#define MAX_PROMPTS 4

typedef struct {
    const char *fixture;                /* under the fixtures folder */
    const char *prompts[MAX_PROMPTS];   /* reference prompts compared (NULL ends) */
    int made_fused, made_per_expert;    /* expert layers the swap turns into each layout */
    bool mtp;                           /* compare the MTP head's logits too */
} layout_case;

static const layout_case cases[] = {
    /* main layers per expert -> fused; the MTP layer fused -> per expert */
    {"models/qwen35-moe", {"p0", "p1"}, 4, 1, true},
    /* GLM-4.6V: per expert in the layers >= first_k_dense_replace -> fused */
    {"models/glm46v-moe", {"p0", "p1", "p2"}, 2, 0, false},
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* ------------------------------------------------------------ re-layout */

#define MAX_GROUPS 128
#define MAX_EXPERTS 512
#define MAX_SHARDS 16

enum { PROJ_GATE, PROJ_UP, PROJ_DOWN, PROJ_GATE_UP };

typedef struct {
    size_t prefix_len; /* the name up to and including "mlp.experts." */
    bool fused;
    int expert, proj;
} expert_name;

/* Whether name is a routed-expert tensor of either layout, and which. */
static bool parse_expert_name(const char *name, expert_name *out) {
    const char *at = strstr(name, "mlp.experts.");
    if (!at) return false;
    const char *rest = at + strlen("mlp.experts.");
    *out = (expert_name){.prefix_len = (size_t)(rest - name), .expert = -1};
    if (strcmp(rest, "gate_up_proj") == 0 || strcmp(rest, "down_proj") == 0) {
        out->fused = true;
        out->proj = rest[0] == 'g' ? PROJ_GATE_UP : PROJ_DOWN;
        return true;
    }
    if (rest[0] < '0' || rest[0] > '9') return false;
    char *end;
    long e = strtol(rest, &end, 10);
    if (*end != '.' || e >= MAX_EXPERTS) return false;
    out->expert = (int)e;
    if (strcmp(end + 1, "gate_proj.weight") == 0) out->proj = PROJ_GATE;
    else if (strcmp(end + 1, "up_proj.weight") == 0) out->proj = PROJ_UP;
    else if (strcmp(end + 1, "down_proj.weight") == 0) out->proj = PROJ_DOWN;
    else return false;
    return true;
}

typedef struct {
    char prefix[256];
    int shard;
    bool fused, per_expert;
    const lm_tensor *gate_up, *down;                               /* fused */
    const lm_tensor *e_gate[MAX_EXPERTS], *e_up[MAX_EXPERTS], *e_down[MAX_EXPERTS];
    int n_experts;                                                 /* per expert: top index + 1 */
} expert_group;

typedef struct {
    char name[256];
    test_st_writer *w;
} out_shard;

typedef struct {
    lm_checkpoint *ck;
    expert_group *groups;
    int n_groups;
    out_shard shards[MAX_SHARDS];
    int n_shards;
    bool up_first; /* the control: up rows where gate rows belong, both directions */
    int made_fused, made_per_expert;
} relayout;

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static lm_status shard_of(relayout *r, const lm_tensor *t, int *out, lm_error *err) {
    const char *name = base_name(t->file);
    for (int i = 0; i < r->n_shards; i++)
        if (strcmp(r->shards[i].name, name) == 0) return *out = i, LM_OK;
    if (r->n_shards == MAX_SHARDS || strlen(name) >= sizeof r->shards[0].name)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: too many shards or too long a name", name);
    out_shard *s = &r->shards[r->n_shards];
    snprintf(s->name, sizeof s->name, "%s", name);
    lm_status st = test_st_writer_create(&s->w, err);
    if (st == LM_OK) *out = r->n_shards++;
    return st;
}

static lm_status note_expert_tensor(relayout *r, const lm_tensor *t, const expert_name *en, int shard,
                                    lm_error *err) {
    expert_group *g = NULL;
    for (int i = 0; i < r->n_groups && !g; i++)
        if (strlen(r->groups[i].prefix) == en->prefix_len &&
            strncmp(r->groups[i].prefix, t->name, en->prefix_len) == 0)
            g = &r->groups[i];
    if (!g) {
        if (r->n_groups == MAX_GROUPS || en->prefix_len >= sizeof g->prefix)
            return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: too many expert layers", t->name);
        g = &r->groups[r->n_groups++];
        memcpy(g->prefix, t->name, en->prefix_len);
        g->prefix[en->prefix_len] = '\0';
        g->shard = shard;
    }
    if (en->fused) {
        g->fused = true;
        const lm_tensor **slot = en->proj == PROJ_GATE_UP ? &g->gate_up : &g->down;
        *slot = t;
    } else {
        g->per_expert = true;
        const lm_tensor **slot = en->proj == PROJ_GATE ? &g->e_gate[en->expert]
                                 : en->proj == PROJ_UP ? &g->e_up[en->expert]
                                                       : &g->e_down[en->expert];
        *slot = t;
        if (en->expert + 1 > g->n_experts) g->n_experts = en->expert + 1;
    }
    if (g->fused && g->per_expert)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s*: both layouts in one layer", g->prefix);
    return LM_OK;
}

static bool is_matrix(const lm_tensor *t, lm_dtype dtype, int64_t rows, int64_t cols) {
    return t && t->dtype == dtype && t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols;
}

/* Per expert -> experts.gate_up_proj [E, 2I, H] (gate rows first) + experts.down_proj [E, H, I]. */
static lm_status fuse_group(relayout *r, const expert_group *g, lm_error *err) {
    int E = g->n_experts;
    const lm_tensor *g0 = g->e_gate[0];
    if (!g0 || g0->n_dims != 2) return lm_fail(err, LM_ERR_FORMAT, "%s0.gate_proj.weight: missing or not 2-D", g->prefix);
    lm_dtype dt = g0->dtype;
    int64_t I = g0->shape[0], H = g0->shape[1];
    test_st_piece *pieces = malloc(sizeof *pieces * 2 * (size_t)E);
    if (!pieces) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    lm_status st = LM_OK;
    for (int e = 0; e < E && st == LM_OK; e++) {
        if (!is_matrix(g->e_gate[e], dt, I, H) || !is_matrix(g->e_up[e], dt, I, H) ||
            !is_matrix(g->e_down[e], dt, H, I))
            st = lm_fail(err, LM_ERR_FORMAT, "%s%d.*: missing, or shapes unlike expert 0's", g->prefix, e);
        else {
            const lm_tensor *first = r->up_first ? g->e_up[e] : g->e_gate[e];
            const lm_tensor *second = r->up_first ? g->e_gate[e] : g->e_up[e];
            pieces[2 * e] = (test_st_piece){first->data, first->n_bytes};
            pieces[2 * e + 1] = (test_st_piece){second->data, second->n_bytes};
        }
    }
    char name[300];
    test_st_writer *w = r->shards[g->shard].w;
    if (st == LM_OK) {
        snprintf(name, sizeof name, "%sgate_up_proj", g->prefix);
        st = test_st_writer_add(w, name, dt, 3, (int64_t[]){E, 2 * I, H}, pieces, 2 * E, err);
    }
    for (int e = 0; e < E && st == LM_OK; e++)
        pieces[e] = (test_st_piece){g->e_down[e]->data, g->e_down[e]->n_bytes};
    if (st == LM_OK) {
        snprintf(name, sizeof name, "%sdown_proj", g->prefix);
        st = test_st_writer_add(w, name, dt, 3, (int64_t[]){E, H, I}, pieces, E, err);
    }
    free(pieces);
    if (st == LM_OK) r->made_fused++;
    return st;
}

/* Fused -> experts.<e>.{gate,up,down}_proj.weight, slices of the fused bytes. */
static lm_status split_group(relayout *r, const expert_group *g, lm_error *err) {
    const lm_tensor *gu = g->gate_up, *dn = g->down;
    if (!gu || !dn || gu->n_dims != 3 || dn->n_dims != 3 || gu->dtype != dn->dtype ||
        gu->shape[0] != dn->shape[0] || gu->shape[1] % 2 || gu->shape[2] != dn->shape[1] ||
        dn->shape[2] != gu->shape[1] / 2)
        return lm_fail(err, LM_ERR_FORMAT, "%s{gate_up_proj,down_proj}: missing or not [E, 2I, H] and [E, H, I]",
                       g->prefix);
    int64_t E = gu->shape[0], I = gu->shape[1] / 2, H = gu->shape[2];
    size_t es = lm_dtype_size(gu->dtype), block = (size_t)(I * H) * es;
    const uint8_t *gate_up = gu->data, *down = dn->data;
    test_st_writer *w = r->shards[g->shard].w;
    static const char *const proj_names[] = {"gate_proj", "up_proj", "down_proj"};
    lm_status st = LM_OK;
    for (int64_t e = 0; e < E && st == LM_OK; e++) {
        const uint8_t *gate = gate_up + (size_t)(2 * e) * block, *up = gate + block;
        if (r->up_first) {
            const uint8_t *t = gate;
            gate = up;
            up = t;
        }
        const uint8_t *data[3] = {gate, up, down + (size_t)e * block};
        for (int p = 0; p < 3 && st == LM_OK; p++) {
            char name[300];
            snprintf(name, sizeof name, "%s%lld.%s.weight", g->prefix, (long long)e, proj_names[p]);
            int64_t shape[2] = {p == 2 ? H : I, p == 2 ? I : H};
            test_st_piece piece = {data[p], block};
            st = test_st_writer_add(w, name, gu->dtype, 2, shape, &piece, 1, err);
        }
    }
    if (st == LM_OK) r->made_per_expert++;
    return st;
}

static lm_status copy_file(const char *from, const char *to, lm_error *err) {
    FILE *in = fopen(from, "rb");
    if (!in) return lm_fail(err, LM_ERR_IO, "%s: cannot open: %s", from, strerror(errno));
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return lm_fail(err, LM_ERR_IO, "%s: cannot create: %s", to, strerror(errno));
    }
    char buf[65536];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    fclose(in);
    if (fclose(out) != 0) ok = false;
    return ok ? LM_OK : lm_fail(err, LM_ERR_IO, "copying %s to %s failed", from, to);
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* Every file of src but the weights and the index (config.json, the
 * tokenizer, generation_config.json, ...), unchanged. */
static lm_status copy_other_files(const char *src, const char *dst, lm_error *err) {
    DIR *d = opendir(src);
    if (!d) return lm_fail(err, LM_ERR_IO, "%s: cannot list: %s", src, strerror(errno));
    lm_status st = LM_OK;
    for (struct dirent *e; st == LM_OK && (e = readdir(d));) {
        char from[2048], to[2048];
        struct stat info;
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dst, e->d_name);
        if (stat(from, &info) != 0 || !S_ISREG(info.st_mode) || ends_with(e->d_name, ".safetensors") ||
            strcmp(e->d_name, INDEX_FILE) == 0)
            continue;
        st = copy_file(from, to, err);
    }
    closedir(d);
    return st;
}

static lm_status write_index(const relayout *r, const char *dst, lm_error *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON *map = root && cJSON_AddObjectToObject(root, "metadata") ? cJSON_AddObjectToObject(root, "weight_map")
                                                                    : NULL;
    bool ok = map != NULL;
    for (int s = 0; ok && s < r->n_shards; s++)
        for (size_t i = 0; ok && i < test_st_writer_count(r->shards[s].w); i++)
            ok = cJSON_AddStringToObject(map, test_st_writer_name(r->shards[s].w, i), r->shards[s].name) != NULL;
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return lm_fail(err, LM_ERR_NOMEM, "out of memory for the index");
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dst, INDEX_FILE);
    FILE *f = fopen(path, "w");
    ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) ok = false;
    free(text);
    return ok ? LM_OK : lm_fail(err, LM_ERR_IO, "%s: cannot write", path);
}

/* Re-saves the checkpoint folder src into dst (an existing empty folder)
 * with every expert layer in the other layout; the other tensors, their
 * shards and the other files unchanged.  made_*: how many layers became each. */
static lm_status swap_expert_layouts(const char *src, const char *dst, bool up_first, int *made_fused,
                                     int *made_per_expert, lm_error *err) {
    relayout r = {.up_first = up_first};
    lm_status st = lm_checkpoint_open(src, LM_LOAD_READ, &r.ck, err);
    if (st == LM_OK && !(r.groups = calloc(MAX_GROUPS, sizeof *r.groups)))
        st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LM_OK && i < lm_checkpoint_count(r.ck); i++) {
        const lm_tensor *t = lm_checkpoint_at(r.ck, i);
        expert_name en;
        int shard = 0;
        st = shard_of(&r, t, &shard, err);
        if (st != LM_OK) break;
        st = parse_expert_name(t->name, &en) ? note_expert_tensor(&r, t, &en, shard, err)
                                             : test_st_writer_add_tensor(r.shards[shard].w, t, err);
    }
    for (int g = 0; st == LM_OK && g < r.n_groups; g++)
        st = r.groups[g].fused ? split_group(&r, &r.groups[g], err) : fuse_group(&r, &r.groups[g], err);
    for (int s = 0; st == LM_OK && s < r.n_shards; s++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dst, r.shards[s].name);
        st = test_st_writer_write(r.shards[s].w, path, err);
    }
    char index[2048];
    snprintf(index, sizeof index, "%s/%s", src, INDEX_FILE);
    if (st == LM_OK && access(index, F_OK) == 0) st = write_index(&r, dst, err);
    if (st == LM_OK) st = copy_other_files(src, dst, err);
    *made_fused = r.made_fused;
    *made_per_expert = r.made_per_expert;
    for (int s = 0; s < r.n_shards; s++) test_st_writer_free(r.shards[s].w);
    free(r.groups);
    lm_checkpoint_close(r.ck);
    return st;
}

/* Expert layers of each layout in a checkpoint folder; false if unreadable. */
static bool count_layouts(const char *dir, int *fused, int *per_expert, size_t *bytes) {
    lm_checkpoint *ck;
    lm_error err = {0};
    if (lm_checkpoint_open(dir, LM_LOAD_MMAP, &ck, &err) != LM_OK) {
        fprintf(stderr, "  %s\n", err.message);
        return false;
    }
    *fused = *per_expert = 0;
    for (size_t i = 0; i < lm_checkpoint_count(ck); i++) {
        expert_name en;
        const char *name = lm_checkpoint_at(ck, i)->name;
        if (!parse_expert_name(name, &en)) continue;
        if (en.fused && en.proj == PROJ_GATE_UP) (*fused)++;
        if (!en.fused && en.expert == 0 && en.proj == PROJ_GATE) (*per_expert)++;
    }
    *bytes = lm_checkpoint_total_bytes(ck);
    lm_checkpoint_close(ck);
    return true;
}

/* Removes a flat folder and its files. */
static bool remove_folder(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool ok = true;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) ok = false;
    }
    closedir(d);
    return rmdir(dir) == 0 && ok;
}

/* ------------------------------------------------------------ the tests */

typedef struct {
    const layout_case *c;
    char fixture_dir[1024], copy_dir[1100], control_dir[1100];
    int made_fused, made_per_expert;
    lm_error relayout_err;
    bool relaid, loaded;
    test_model original, copy, control;
    lm_safetensors *reference;
} layout_run;

/* Every row's logits [n, V] and final hidden rows [n, H]; false on failure. */
static bool prefill(lm_model *model, const int32_t *ids, int n, float **logits, float **hidden, lm_error *err) {
    const lm_model_info *info = lm_model_describe(model);
    *logits = malloc(sizeof(float) * (size_t)n * (size_t)info->vocab_size);
    *hidden = malloc(sizeof(float) * (size_t)n * (size_t)info->hidden_size);
    lm_sequence_runner r;
    lm_status st = *logits && *hidden ? lm_sequence_runner_init(&r, model, n, err)
                                      : lm_fail(err, LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) {
        st = lm_sequence_runner_feed(&r, ids, n, true, *logits, *hidden, NULL, err);
        lm_sequence_runner_free(&r);
    }
    if (st == LM_OK) return true;
    free(*logits);
    free(*hidden);
    *logits = *hidden = NULL;
    return false;
}

static void test_every_expert_layer_swapped(void *arg) {
    layout_run *run = arg;
    CHECK_MSG(run->relaid, "re-saving %s: %s", run->c->fixture, run->relayout_err.message);
    CHECK_MSG(run->made_fused == run->c->made_fused && run->made_per_expert == run->c->made_per_expert,
              "%d layers fused and %d split, want %d and %d", run->made_fused, run->made_per_expert,
              run->c->made_fused, run->c->made_per_expert);
    int fused[2], per_expert[2];
    size_t bytes[2];
    CHECK(count_layouts(run->fixture_dir, &fused[0], &per_expert[0], &bytes[0]));
    CHECK(count_layouts(run->copy_dir, &fused[1], &per_expert[1], &bytes[1]));
    CHECK_MSG(fused[1] == per_expert[0] && per_expert[1] == fused[0],
              "layouts: original %d fused / %d per expert, copy %d / %d", fused[0], per_expert[0], fused[1],
              per_expert[1]);
    CHECK_MSG(bytes[0] == bytes[1], "the copy holds %zu bytes of tensors, the original %zu", bytes[1], bytes[0]);
}

static void test_copy_loads_and_uses_every_tensor(void *arg) {
    layout_run *run = arg;
    CHECK_MSG(run->loaded, "the original or the copy did not load");
    const lm_model_info *a = lm_model_describe(run->original.model), *b = lm_model_describe(run->copy.model);
    CHECK(strcmp(a->family, b->family) == 0 && a->n_parameters == b->n_parameters &&
          a->weight_bytes == b->weight_bytes && a->has_mtp == b->has_mtp);
    CHECK_MSG(!run->c->mtp || b->has_mtp, "the copy's MTP head did not load: %s", b->mtp_status);
    if (strcmp(b->family, "qwen3_5") == 0) { /* a family that records which tensors it read */
        const lm_qwen35_model *q = run->copy.qwen;
        int unused = 0;
        for (size_t i = 0; i < lm_checkpoint_count(q->checkpoint); i++) {
            const lm_tensor *t = lm_checkpoint_at(q->checkpoint, i);
            if (strstr(t->name, "visual.") || lm_weights_was_used(&q->weights, t)) continue;
            fprintf(stderr, "  unused: %s\n", t->name);
            unused++;
        }
        CHECK_MSG(unused == 0, "%d text or MTP tensors of the copy unused", unused);
    }
    if (strcmp(b->family, "glm4v") == 0) { /* the loader took the other layout */
        const lm_glm4v_model *o = (const lm_glm4v_model *)run->original.model;
        const lm_glm4v_model *c = (const lm_glm4v_model *)run->copy.model;
        for (int i = 0; i < c->config.num_hidden_layers; i++)
            CHECK_MSG(!c->layers[i].is_moe || (c->layers[i].moe.experts.fused && !o->layers[i].moe.experts.fused),
                      "layer %d: the copy's experts were not loaded fused", i);
    }
}

static void test_prefill_identical(void *arg) {
    layout_run *run = arg;
    CHECK(run->loaded);
    const lm_model_info *info = lm_model_describe(run->original.model);
    int V = info->vocab_size, H = info->hidden_size, compared = 0;
    for (int p = 0; p < MAX_PROMPTS && run->c->prompts[p]; p++) {
        const char *name = run->c->prompts[p];
        int n;
        const int32_t *ids = test_reference_ids(run->reference, name, &n);
        char key[64];
        snprintf(key, sizeof key, "%s.logits", name);
        const lm_tensor *want = lm_safetensors_find(run->reference, key);
        CHECK_MSG(ids && want && want->n_elements == (int64_t)n * V, "%s: no reference", name);
        float *logits[2], *hidden[2];
        lm_error err = {0};
        CHECK_MSG(prefill(run->original.model, ids, n, &logits[0], &hidden[0], &err), "%s", err.message);
        if (!prefill(run->copy.model, ids, n, &logits[1], &hidden[1], &err)) {
            free(logits[0]);
            free(hidden[0]);
            CHECK_MSG(false, "%s", err.message);
        }
        bool same_logits = memcmp(logits[0], logits[1], sizeof(float) * (size_t)n * V) == 0;
        bool same_hidden = memcmp(hidden[0], hidden[1], sizeof(float) * (size_t)n * H) == 0;
        double e = test_normalized_error(logits[0], want->data, (size_t)n * V);
        for (int i = 0; i < 2; i++) free(logits[i]), free(hidden[i]);
        CHECK_MSG(same_logits && same_hidden, "%s: the copy's %s differ", name,
                  same_logits ? "final hidden rows" : "logits");
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s: normalized logit error %.3g against the reference", name, e);
        compared++;
    }
    CHECK(compared > 0);
}

static void test_mtp_identical(void *arg) {
    layout_run *run = arg;
    CHECK(run->loaded);
    if (!run->c->mtp) return;
    CHECK(lm_model_has_mtp_logits(run->original.model) && lm_model_has_mtp_logits(run->copy.model));
    int V = lm_model_describe(run->original.model)->vocab_size, compared = 0;
    for (int p = 0; p < MAX_PROMPTS && run->c->prompts[p]; p++) {
        const char *name = run->c->prompts[p];
        int n;
        const int32_t *ids = test_reference_ids(run->reference, name, &n);
        char key[64];
        snprintf(key, sizeof key, "%s.mtp_logits", name);
        const lm_tensor *want = lm_safetensors_find(run->reference, key);
        if (!want) continue;
        CHECK(ids && n >= 2 && want->n_elements == (int64_t)(n - 1) * V);
        float *mtp[2] = {malloc(sizeof(float) * (size_t)(n - 1) * V), malloc(sizeof(float) * (size_t)(n - 1) * V)};
        lm_status st[2] = {LM_ERR_NOMEM, LM_ERR_NOMEM};
        lm_error err = {0};
        for (int i = 0; i < 2; i++) {
            lm_model *model = i ? run->copy.model : run->original.model;
            float *logits, *hidden;
            if (mtp[i] && prefill(model, ids, n, &logits, &hidden, &err)) {
                st[i] = lm_model_mtp_sequence_logits(model, hidden, ids + 1, NULL, n - 1, mtp[i], &err);
                free(logits);
                free(hidden);
            }
        }
        bool ok = st[0] == LM_OK && st[1] == LM_OK;
        bool same = ok && memcmp(mtp[0], mtp[1], sizeof(float) * (size_t)(n - 1) * V) == 0;
        double e = ok ? test_normalized_error(mtp[0], want->data, (size_t)(n - 1) * V) : 0;
        free(mtp[0]);
        free(mtp[1]);
        CHECK_MSG(ok, "%s: MTP logits: %s", name, err.message);
        CHECK_MSG(same, "%s: the copy's MTP logits differ", name);
        CHECK_MSG(e < LOGIT_TOLERANCE, "%s: normalized MTP logit error %.3g against the reference", name, e);
        compared++;
    }
    CHECK_MSG(compared > 0, "no prompt has mtp_logits");
}

/* The control: gate and up exchanged in every re-laid layer must show. */
static void test_control_with_gate_and_up_exchanged_differs(void *arg) {
    layout_run *run = arg;
    CHECK(run->loaded && run->control.model);
    int n;
    const int32_t *ids = test_reference_ids(run->reference, run->c->prompts[0], &n);
    CHECK(ids);
    int V = lm_model_describe(run->original.model)->vocab_size;
    float *logits[2], *hidden[2];
    lm_error err = {0};
    CHECK_MSG(prefill(run->original.model, ids, n, &logits[0], &hidden[0], &err), "%s", err.message);
    if (!prefill(run->control.model, ids, n, &logits[1], &hidden[1], &err)) {
        free(logits[0]);
        free(hidden[0]);
        CHECK_MSG(false, "%s", err.message);
    }
    bool same = memcmp(logits[0], logits[1], sizeof(float) * (size_t)n * V) == 0;
    for (int i = 0; i < 2; i++) free(logits[i]), free(hidden[i]);
    CHECK_MSG(!same, "exchanging gate and up rows changed nothing: the comparison cannot see the layout");
}

static void run_case(const layout_case *c) {
    layout_run run = {.c = c};
    test_fixture_path(run.fixture_dir, sizeof run.fixture_dir, c->fixture);
    bool folders = test_make_temp_folder(run.copy_dir, sizeof run.copy_dir, "layouts") &&
                   test_make_temp_folder(run.control_dir, sizeof run.control_dir, "layouts-control");
    int control_fused, control_split;
    lm_error control_err = {0};
    run.relaid = folders && swap_expert_layouts(run.fixture_dir, run.copy_dir, false, &run.made_fused,
                                                &run.made_per_expert, &run.relayout_err) == LM_OK;
    bool control = run.relaid && swap_expert_layouts(run.fixture_dir, run.control_dir, true, &control_fused,
                                                     &control_split, &control_err) == LM_OK;
    if (run.relaid && !control) fprintf(stderr, "control copy: %s\n", control_err.message);
    char path[1200];
    lm_error err = {0};
    snprintf(path, sizeof path, "%s/reference.safetensors", run.fixture_dir);
    run.loaded = run.relaid && test_model_open(&run.original, run.fixture_dir, 2) &&
                 test_model_open(&run.copy, run.copy_dir, 2) &&
                 lm_safetensors_open(path, LM_LOAD_READ, &run.reference, &err) == LM_OK;
    if (run.relaid && !run.loaded && err.message[0]) fprintf(stderr, "%s\n", err.message);
    if (run.loaded && control) test_model_open(&run.control, run.control_dir, 2);

    char label[256];
#define RUN_CASE_TEST(fn)                                               \
    snprintf(label, sizeof label, "%s: %s", c->fixture, #fn); \
    test_run_with(label, fn, &run)
    RUN_CASE_TEST(test_every_expert_layer_swapped);
    RUN_CASE_TEST(test_copy_loads_and_uses_every_tensor);
    RUN_CASE_TEST(test_prefill_identical);
    RUN_CASE_TEST(test_mtp_identical);
    RUN_CASE_TEST(test_control_with_gate_and_up_exchanged_differs);
#undef RUN_CASE_TEST

    test_model_close(&run.control);
    test_model_close(&run.copy);
    test_model_close(&run.original);
    lm_safetensors_close(run.reference);
    /* mkdtemp leaves the template's XXXXXX in place when it fails */
    if (!strstr(run.copy_dir, "XXXXXX") && !remove_folder(run.copy_dir))
        fprintf(stderr, "could not remove %s\n", run.copy_dir);
    if (run.control_dir[0] && !strstr(run.control_dir, "XXXXXX") && !remove_folder(run.control_dir))
        fprintf(stderr, "could not remove %s\n", run.control_dir);
}

int main(void) {
    for (size_t i = 0; i < N_CASES; i++) run_case(&cases[i]);
    return test_summary("test_expert_layouts");
}
