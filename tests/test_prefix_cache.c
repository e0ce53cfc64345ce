/* Prefix caching (engine/prefix_cache.c, kv_blocks.c, state_snapshots.c):
 * every output with the cache on equals the output with it off (greedy ids
 * identical, top logprobs within 1e-4), across a second identical request,
 * a multi-turn chat resuming at each answer's end (mid-block), requests
 * sharing a system prompt and diverging, eviction under a tiny KV pool and
 * snapshot pool, speculative decoding with rejected drafts, n = 2 seeded
 * sampling, preemption, image prompts (a different image with the same
 * tokens never hits), a model without recurrent state (GLM) and a
 * randomized run of overlapping prompts.  The cache must actually hit where
 * it should (cached_tokens), and after an admin reset every block and
 * snapshot is free. */
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine_util.h"
#include "harness.h"
#include "io/image_decode.h"
#include "io/json_file.h"
#include "loom.h"
#include "model_util.h"

#define BLOCK 16 /* test_engine_open's KV block */
#define MAX_IDS 1024

static char qwen_dir[1024], glm_dir[1024];

typedef struct {
    int32_t ids[MAX_IDS];
    int n;
} ids;

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void append_random(ids *t, int n, uint64_t *seed, int vocab) {
    for (int i = 0; i < n && t->n < MAX_IDS; i++) t->ids[t->n++] = (int32_t)(lcg(seed) % (uint64_t)vocab);
}

static void append(ids *t, const int32_t *more, int n) {
    for (int i = 0; i < n && t->n < MAX_IDS; i++) t->ids[t->n++] = more[i];
}

static loom_request_params greedy(const ids *prompt, int max_tokens) {
    loom_request_params p;
    loom_request_params_default(&p);
    p.prompt = prompt->ids;
    p.n_prompt = prompt->n;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.sampling.temperature = 0;
    p.sampling.logprobs = 5;
    return p;
}

static loom_engine *engine(const char *dir, bool cached, int budget, int64_t kv_tokens, int max_running,
                           int k, int64_t snapshot_bytes) {
    /* the context limit is the pool's floor: a small pool needs a small one */
    int max_model_len = kv_tokens < 1024 ? (int)kv_tokens : 1024;
    return test_engine_open_cached(dir, budget, kv_tokens, max_model_len, max_running, k, cached ? 1 : -1,
                                   snapshot_bytes);
}

/* Runs one request to its end. */
static bool run(loom_engine *e, const loom_request_params *p, collected *out, int n_choices) {
    loom_request *r;
    char error[256];
    if (loom_submit(e, p, &r, error, sizeof error) != LOOM_OK) {
        fprintf(stderr, "submit: %s\n", error);
        return false;
    }
    collect_all(r, out, n_choices);
    loom_request_free(r);
    for (int c = 0; c < n_choices; c++)
        if (out[c].error) {
            fprintf(stderr, "request: %s\n", out[c].error_message);
            return false;
        }
    return true;
}

/* Cache on == cache off: the same tokens, top logprobs within 1e-4. */
static bool same(const collected *on, const collected *off, const char *what, int index) {
    if (on->n_tokens != off->n_tokens || memcmp(on->tokens, off->tokens, sizeof(int32_t) * (size_t)on->n_tokens)) {
        test_failed(__FILE__, __LINE__, "%s %d: the cache changed the tokens (%d vs %d)", what, index,
                    on->n_tokens, off->n_tokens);
        return false;
    }
    for (int t = 0; t < on->n_tokens; t++)
        for (int k = 0; k < 5; k++)
            if (fabsf(on->top[t][k].logprob - off->top[t][k].logprob) > 1e-4f) {
                test_failed(__FILE__, __LINE__, "%s %d token %d: top logprob %d moved by %g", what, index, t, k,
                            (double)fabsf(on->top[t][k].logprob - off->top[t][k].logprob));
                return false;
            }
    return true;
}

/* After a reset, nothing is held or cached. */
static bool empty_after_reset(loom_engine *e) {
    char error[256];
    if (loom_engine_reset_prefix_cache(e, error, sizeof error) != LOOM_OK) return false;
    loom_stats s = wait_idle(e);
    loom_engine_stats(e, &s);
    if (s.kv_blocks_free != s.kv_blocks_total || s.kv_blocks_cached != 0 || s.snapshots_used != 0 ||
        s.state_slots_free != s.state_slots_total) {
        test_failed(__FILE__, __LINE__, "after the reset: %d of %d blocks free, %d cached, %d snapshots, %d of %d slots",
                    s.kv_blocks_free, s.kv_blocks_total, s.kv_blocks_cached, s.snapshots_used, s.state_slots_free,
                    s.state_slots_total);
        return false;
    }
    return true;
}

/* ------------------------------------------------------------ text */

/* The same prompt three times: the second resumes from a chunk's
 * snapshot, and its branch point makes the third resume at the prompt's
 * last block boundary. */
static void run_identical(const char *dir) {
    loom_engine *on = engine(dir, true, 64, 4096, 4, 0, 0), *off = engine(dir, false, 64, 4096, 4, 0, 0);
    CHECK(on && off);
    uint64_t seed = 1;
    ids prompt = {.n = 0};
    append_random(&prompt, 100, &seed, loom_engine_vocab_size(on));
    loom_request_params p = greedy(&prompt, 12);
    collected want, got[3];
    CHECK(run(off, &p, &want, 1));
    for (int i = 0; i < 3; i++) {
        CHECK(run(on, &p, &got[i], 1));
        if (!same(&got[i], &want, "identical request", i)) break;
    }
    CHECK_MSG(got[0].cached_tokens == 0, "a first request hit %d tokens", got[0].cached_tokens);
    CHECK_MSG(got[1].cached_tokens > 0, "a second identical request hit nothing");
    CHECK_MSG(got[2].cached_tokens == (prompt.n - 1) / BLOCK * BLOCK, "the third hit %d tokens",
              got[2].cached_tokens);
    loom_stats s;
    loom_engine_stats(on, &s);
    CHECK(s.prefix_caching && s.prefix_cache_queries == 3 * (uint64_t)prompt.n);
    CHECK(s.prefix_cache_hits == (uint64_t)(got[1].cached_tokens + got[2].cached_tokens));
    CHECK(empty_after_reset(on));
    loom_engine_destroy(on);
    loom_engine_destroy(off);
}
static void test_second_identical_request(void) { run_identical(qwen_dir); }
static void test_second_identical_request_glm(void) { run_identical(glm_dir); }

/* Four turns: each prompt is the conversation so far (the last answer
 * included) and a new user message; each resumes exactly where the last
 * answer ended, mid-block. */
static void run_chat(const char *dir, int k, lm_draft_override drafts, void *drafts_ctx, collected *answers,
                     bool cached) {
    loom_engine *e = engine(dir, cached, 64, 4096, 4, k, 0);
    CHECK(e);
    if (drafts) lm_engine_set_draft_override(e, drafts, drafts_ctx);
    uint64_t seed = 2;
    ids conv = {.n = 0};
    append_random(&conv, 50, &seed, loom_engine_vocab_size(e));
    int previous_end = 0;
    bool mid_block = false;
    for (int turn = 0; turn < 4; turn++) {
        loom_request_params p = greedy(&conv, 21);
        CHECK(run(e, &p, &answers[turn], 1));
        if (cached && turn > 0) {
            CHECK_MSG(answers[turn].cached_tokens == previous_end - 1,
                      "turn %d resumed at %d, not at the last answer's end %d", turn, answers[turn].cached_tokens,
                      previous_end - 1);
            mid_block |= answers[turn].cached_tokens % BLOCK != 0;
        }
        append(&conv, answers[turn].tokens, answers[turn].n_tokens);
        previous_end = conv.n;
        append_random(&conv, 9, &seed, loom_engine_vocab_size(e));
    }
    if (cached) CHECK_MSG(mid_block, "no turn resumed mid-block");
    if (cached) CHECK(empty_after_reset(e));
    loom_engine_destroy(e);
}

static void check_chat(const char *dir, int k, lm_draft_override drafts, void *ctx) {
    collected on[4], off[4];
    run_chat(dir, k, drafts, ctx, off, false);
    if (test_current_failed()) return;
    run_chat(dir, k, drafts, ctx, on, true);
    for (int t = 0; t < 4 && !test_current_failed(); t++) same(&on[t], &off[t], "chat turn", t);
}
static void test_multi_turn_chat(void) { check_chat(qwen_dir, 0, NULL, NULL); }
static void test_multi_turn_chat_glm(void) { check_chat(glm_dir, 0, NULL, NULL); }

/* Drafts that are the true continuation with every third call's second
 * draft wrong, so verifies accept all, some or none. */
typedef struct {
    const ids *prompts;
    const collected *answers;
    int n, calls;
} oracle;

static int oracle_drafts(void *ctx, const int32_t *tokens, int n_tokens, int n_prompt, int32_t *drafts, int k) {
    oracle *o = ctx;
    for (int i = 0; i < o->n; i++) {
        if (o->prompts[i].n != n_prompt || memcmp(o->prompts[i].ids, tokens, sizeof(int32_t) * (size_t)n_prompt))
            continue;
        int g = n_tokens - n_prompt, made = 0;
        for (int j = 0; j < k && g + j < o->answers[i].n_tokens; j++) drafts[made++] = o->answers[i].tokens[g + j];
        if (++o->calls % 3 == 0 && made > 1) drafts[1] = (drafts[1] + 1) % 64;
        return made;
    }
    return 0;
}

/* Speculative decoding with rejected drafts, multi-turn: a verify that
 * ends a turn is rolled back before its state is snapshotted, and no
 * verify writes into a shared block. */
static void test_speculative_rejected_drafts(void) {
    collected plain[4];
    run_chat(qwen_dir, 0, NULL, NULL, plain, false);
    if (test_current_failed()) return;
    /* the prompts run_chat builds from the same seed */
    ids prompts[4];
    loom_engine *probe = engine(qwen_dir, false, 64, 4096, 4, 0, 0);
    CHECK(probe);
    int vocab = loom_engine_vocab_size(probe);
    loom_engine_destroy(probe);
    uint64_t seed = 2;
    ids conv = {.n = 0};
    append_random(&conv, 50, &seed, vocab);
    for (int t = 0; t < 4; t++) {
        prompts[t] = conv;
        append(&conv, plain[t].tokens, plain[t].n_tokens);
        append_random(&conv, 9, &seed, vocab);
    }
    collected on[4], off[4];
    oracle o = {.prompts = prompts, .answers = plain, .n = 4};
    run_chat(qwen_dir, 3, oracle_drafts, &o, off, false);
    o.calls = 0;
    run_chat(qwen_dir, 3, oracle_drafts, &o, on, true);
    for (int t = 0; t < 4 && !test_current_failed(); t++) {
        same(&on[t], &plain[t], "speculative chat turn", t);
        same(&off[t], &plain[t], "speculative chat (cache off) turn", t);
    }
    CHECK_MSG(o.calls > 6, "the oracle drafted %d times", o.calls);
}

/* A system prompt shared by three requests that diverge after it: the
 * second resumes at the first's chunk snapshot and snapshots where the
 * shared blocks end; the third resumes there. */
static void test_shared_system_prompt(void) {
    loom_engine *on = engine(qwen_dir, true, 64, 4096, 4, 0, 0), *off = engine(qwen_dir, false, 64, 4096, 4, 0, 0);
    CHECK(on && off);
    int vocab = loom_engine_vocab_size(on);
    uint64_t seed = 3;
    ids system = {.n = 0};
    append_random(&system, 90, &seed, vocab);
    collected got[3], want[3];
    for (int i = 0; i < 3; i++) {
        ids prompt = system;
        append_random(&prompt, 20 + i, &seed, vocab);
        loom_request_params p = greedy(&prompt, 10);
        CHECK(run(off, &p, &want[i], 1));
        CHECK(run(on, &p, &got[i], 1));
        if (!same(&got[i], &want[i], "shared system prompt", i)) return;
    }
    CHECK_MSG(got[1].cached_tokens >= 64, "the second hit %d tokens", got[1].cached_tokens);
    CHECK_MSG(got[2].cached_tokens == system.n / BLOCK * BLOCK, "the third hit %d tokens", got[2].cached_tokens);
    CHECK(empty_after_reset(on));
    loom_engine_destroy(on);
    loom_engine_destroy(off);
}

/* n = 2 with seeded sampling: each choice equals its cache-off self, the
 * second request (which hits) equals the first. */
static void test_two_choices(void) {
    collected on[2][2], off[2][2];
    for (int cached = 0; cached < 2; cached++) {
        loom_engine *e = engine(qwen_dir, cached, 64, 4096, 4, 0, 0);
        CHECK(e);
        uint64_t seed = 4;
        ids prompt = {.n = 0};
        append_random(&prompt, 70, &seed, loom_engine_vocab_size(e));
        loom_request_params p = greedy(&prompt, 14);
        p.n = 2;
        p.sampling.temperature = 0.9f;
        p.sampling.has_seed = true;
        p.sampling.seed = 11;
        for (int r = 0; r < 2; r++) CHECK(run(e, &p, cached ? on[r] : off[r], 2));
        if (cached) CHECK(empty_after_reset(e));
        loom_engine_destroy(e);
    }
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2; c++) {
            if (!same(&on[r][c], &off[r][c], "n = 2 choice", c)) return;
            if (!same(&on[r][c], &on[0][c], "n = 2 repeated, choice", c)) return;
        }
    CHECK_MSG(on[1][0].cached_tokens > 0, "the repeated n = 2 request hit nothing");
}

/* Four requests sharing a prefix start together on a pool too small for
 * them: preempted sequences snapshot where they stopped and resume there. */
static void test_preemption(void) {
    enum { N = 4, GEN = 40 };
    collected on[N], off[N];
    loom_engine *probe = engine(qwen_dir, false, 64, 4096, 4, 0, 0);
    CHECK(probe);
    int vocab = loom_engine_vocab_size(probe);
    loom_engine_destroy(probe);
    uint64_t seed = 5;
    ids shared = {.n = 0};
    append_random(&shared, 40, &seed, vocab);
    ids prompts[N];
    for (int i = 0; i < N; i++) {
        prompts[i] = shared;
        append_random(&prompts[i], 25 + 3 * i, &seed, vocab);
    }
    uint64_t preemptions = 0;
    for (int cached = 0; cached < 2; cached++) {
        /* alone (cache off) on a roomy pool; together (cache on) on 9 blocks */
        loom_engine *e = engine(qwen_dir, cached, 40, cached ? 9 * BLOCK : 4096, cached ? N : 1, 0, 0);
        CHECK(e);
        loom_request *r[N];
        char error[256];
        if (cached) lm_engine_hold(e, true);
        for (int i = 0; i < N; i++) {
            loom_request_params p = greedy(&prompts[i], GEN);
            CHECK_MSG(loom_submit(e, &p, &r[i], error, sizeof error) == LOOM_OK, "%s", error);
            if (!cached) collect_all(r[i], &off[i], 1);
        }
        if (cached) lm_engine_hold(e, false);
        for (int i = 0; cached && i < N; i++) collect_all(r[i], &on[i], 1);
        for (int i = 0; i < N; i++) loom_request_free(r[i]);
        loom_stats s = wait_idle(e);
        if (cached) preemptions = s.preemptions;
        if (cached) CHECK(empty_after_reset(e));
        loom_engine_destroy(e);
    }
    CHECK_MSG(preemptions > 0, "the small pool caused no preemption");
    for (int i = 0; i < N; i++) {
        CHECK_MSG(!on[i].error, "request %d: %s", i, on[i].error_message);
        if (!same(&on[i], &off[i], "preempted request", i)) return;
    }
}

/* Many requests over a few shared prefixes on a tiny KV pool and a
 * three-snapshot pool, some at once: blocks and snapshots are evicted and
 * reused, and no output changes.  Randomized, with identical prompts,
 * prompts that are prefixes of others and prompts that diverge mid-block. */
static void run_random(uint64_t seed, int64_t kv_tokens, int n_snapshots) {
    enum { N = 24, WAVE = 4 };
    loom_engine *off = engine(qwen_dir, false, 48, 4096, 1, 0, 0);
    CHECK(off);
    int vocab = loom_engine_vocab_size(off);
    size_t state_bytes = lm_model_describe(off->model)->state_bytes_per_slot;
    loom_engine *on = engine(qwen_dir, true, 48, kv_tokens, WAVE, 0, (int64_t)state_bytes * n_snapshots);
    CHECK(on);
    ids bases[3];
    for (int b = 0; b < 3; b++) {
        bases[b].n = 0;
        append_random(&bases[b], 30 + 37 * b, &seed, vocab);
    }
    static ids prompts[N];
    static collected want[N], got[N];
    int gen[N];
    for (int i = 0; i < N; i++) {
        const ids *base = &bases[lcg(&seed) % 3];
        prompts[i].n = 0;
        append(&prompts[i], base->ids, 1 + (int)(lcg(&seed) % (uint64_t)base->n));
        if (lcg(&seed) % 3) append_random(&prompts[i], (int)(lcg(&seed) % 40), &seed, vocab);
        if (i > 0 && lcg(&seed) % 5 == 0) prompts[i] = prompts[i - 1]; /* an identical one */
        gen[i] = 4 + (int)(lcg(&seed) % 16);
        loom_request_params p = greedy(&prompts[i], gen[i]);
        CHECK(run(off, &p, &want[i], 1));
    }
    uint64_t hits = 0;
    for (int w = 0; w < N; w += WAVE) {
        loom_request *r[WAVE];
        char error[256];
        for (int i = 0; i < WAVE; i++) {
            loom_request_params p = greedy(&prompts[w + i], gen[w + i]);
            CHECK_MSG(loom_submit(on, &p, &r[i], error, sizeof error) == LOOM_OK, "%s", error);
        }
        for (int i = 0; i < WAVE; i++) {
            collect_all(r[i], &got[w + i], 1);
            loom_request_free(r[i]);
            hits += (uint64_t)got[w + i].cached_tokens;
        }
    }
    for (int i = 0; i < N; i++) {
        CHECK_MSG(!got[i].error, "request %d: %s", i, got[i].error_message);
        if (!same(&got[i], &want[i], "random request", i)) return;
    }
    loom_stats s = wait_idle(on);
    CHECK_MSG(hits > 0 && s.prefix_cache_hits == hits, "%llu tokens hit, stats %llu", (unsigned long long)hits,
              (unsigned long long)s.prefix_cache_hits);
    CHECK(s.snapshots_total == n_snapshots);
    /* 24 requests take more snapshots than a small pool holds: it filled up and evicted */
    CHECK(n_snapshots > 8 || s.snapshots_used == n_snapshots);
    CHECK(s.kv_blocks_free == s.kv_blocks_total);
    CHECK(empty_after_reset(on));
    loom_engine_destroy(on);
    loom_engine_destroy(off);
}
static void test_eviction_under_pressure(void) { run_random(6, 30 * BLOCK, 6); }
static void test_randomized_isolation(void) {
    for (uint64_t seed = 100; seed < 103 && !test_current_failed(); seed++) run_random(seed, 4096, 64);
}

/* ------------------------------------------------------------ images */

typedef struct {
    uint8_t *data;
    size_t n, cap;
} png_bytes;

static void png_write_bytes(png_structp png, png_bytep data, size_t n) {
    png_bytes *b = png_get_io_ptr(png);
    if (b->n + n > b->cap) {
        size_t cap = (b->n + n) * 2;
        uint8_t *bigger = realloc(b->data, cap);
        if (!bigger) png_error(png, "out of memory");
        b->data = bigger;
        b->cap = cap;
    }
    memcpy(b->data + b->n, data, n);
    b->n += n;
}
static void png_flush_nothing(png_structp png) { (void)png; }

static bool encode_png(const lm_image_rgb *img, png_bytes *out) {
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    bool ok = info != NULL;
    if (ok && setjmp(png_jmpbuf(png))) ok = false;
    else if (ok) {
        png_set_write_fn(png, out, png_write_bytes, png_flush_nothing);
        png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8, PNG_COLOR_TYPE_RGB,
                     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        for (int y = 0; y < img->height; y++) png_write_row(png, img->rgb + (size_t)y * (size_t)img->width * 3);
        png_write_end(png, info);
    }
    png_destroy_write_struct(&png, &info);
    return ok;
}

static int32_t image_token_of(const char *dir) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *config;
    lm_error err = {0};
    if (lm_json_read_file(path, 1 << 20, &config, &err) != LM_OK) return -1;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(config, "image_token_id");
    int32_t token = cJSON_IsNumber(id) ? (int32_t)id->valueint : -1;
    cJSON_Delete(config);
    return token;
}

/* The fixture's img0 prompt with its image, then a different image of the
 * same size (so the same token ids): the repeated image hits, the other
 * resumes no further than its first row. */
static void run_images(const char *dir) {
    char path[1200];
    lm_error err = {0};
    lm_safetensors *reference;
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    CHECK_OK(lm_safetensors_open(path, LM_LOAD_READ, &reference, &err), &err);
    const lm_tensor *t = lm_safetensors_find(reference, "img0.input_ids");
    CHECK(t);
    ids prompt = {.n = 0};
    append(&prompt, t->data, (int)t->n_elements);
    lm_safetensors_close(reference);
    char *file;
    size_t bytes;
    snprintf(path, sizeof path, "%s/image0.png", dir);
    CHECK_OK(lm_read_small_file(path, 1 << 24, &file, &bytes, &err), &err);
    lm_image_limits limits = lm_image_default_limits();
    lm_image_rgb rgb;
    CHECK_OK(lm_image_decode(file, bytes, &limits, &rgb, &err), &err);
    for (size_t i = 0; i < (size_t)rgb.width * (size_t)rgb.height * 3; i += 7) rgb.rgb[i] ^= 0x5a;
    png_bytes other = {0};
    bool encoded = encode_png(&rgb, &other);
    lm_image_rgb_free(&rgb);
    CHECK(encoded);
    loom_image images[3] = {{file, bytes}, {file, bytes}, {other.data, other.n}};
    collected on[3], off[3];
    for (int cached = 0; cached < 2; cached++) {
        /* 16-token steps: the first request snapshots at every block */
        loom_engine *e = engine(dir, cached, 16, 4096, 2, 0, 0);
        CHECK(e);
        for (int i = 0; i < 3; i++) {
            loom_request_params p = greedy(&prompt, 12);
            p.images = &images[i];
            p.n_images = 1;
            CHECK(run(e, &p, cached ? &on[i] : &off[i], 1));
        }
        if (cached) CHECK(empty_after_reset(e));
        loom_engine_destroy(e);
    }
    int first_row = 0;
    int32_t image_token = image_token_of(dir);
    while (first_row < prompt.n && prompt.ids[first_row] != image_token) first_row++;
    for (int i = 0; i < 3; i++)
        if (!same(&on[i], &off[i], "image request", i)) break;
    CHECK_MSG(on[1].cached_tokens > first_row, "the repeated image hit %d tokens (rows from %d)",
              on[1].cached_tokens, first_row);
    CHECK_MSG(on[2].cached_tokens <= first_row, "a different image resumed at %d, past its first row %d",
              on[2].cached_tokens, first_row);
    CHECK_MSG(off[2].n_tokens == 12 && memcmp(off[2].tokens, off[0].tokens, sizeof(int32_t) * 12) != 0,
              "the altered image gives the same output: the isolation check proves nothing");
    free(file);
    free(other.data);
}
static void test_image_prompts(void) { run_images(qwen_dir); }
static void test_image_prompts_glm(void) { run_images(glm_dir); }

int main(void) {
    test_fixture_path(qwen_dir, sizeof qwen_dir, "models/qwen35-dense");
    test_fixture_path(glm_dir, sizeof glm_dir, "models/glm46v-moe");
    RUN_TEST(test_second_identical_request);
    RUN_TEST(test_second_identical_request_glm);
    RUN_TEST(test_multi_turn_chat);
    RUN_TEST(test_multi_turn_chat_glm);
    RUN_TEST(test_shared_system_prompt);
    RUN_TEST(test_speculative_rejected_drafts);
    RUN_TEST(test_two_choices);
    RUN_TEST(test_preemption);
    RUN_TEST(test_eviction_under_pressure);
    RUN_TEST(test_randomized_isolation);
    RUN_TEST(test_image_prompts);
    RUN_TEST(test_image_prompts_glm);
    return test_summary("test_prefix_cache");
}
