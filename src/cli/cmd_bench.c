/* loom bench: prefill and decode tokens/s of one sequence (batch 1), on a
 * checkpoint or on random weights of any config.json shape, with the memory
 * roofline of decode (bandwidth / bytes read per token). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/clock.h"
#include "base/membw.h"
#include "cli/bench_prompts.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_options.h"
#include "cli/load_progress.h"
#include "engine/sequence_runner.h"
#include "io/json_file.h"
#include "cli/bench_oracle.h"
#include "loom.h"
#include "image/image_processor.h"
#include "image/multimodal_prompt.h"

static const char synopsis[] =
    "usage: loom bench [MODEL_DIR | --config FILE --random-weights] [options]\n"
    "Measures prefill and decode speed of one sequence (batch 1), or with\n"
    "--concurrency the offline throughput through the engine.  The model defaults\n"
    "to the bundled one.\n";

#define LM_BENCH_MAX_ROUNDS 32

typedef struct {
    const char *config_path, *levels, *prompt_file, *image_size, *json_schema;
    bool random_weights, chat;
    int prompt_tokens, gen_tokens, requests, rounds;
    int64_t seed;
    float temperature, bandwidth, planted_acceptance;
    int top_k;
    float top_p;
} bench_args;

/* What every request of a throughput run samples with. */
typedef struct {
    float temperature;
    int top_k;
    float top_p;
} bench_sampling;

#define ARG(field) offsetof(bench_args, field)
static const lm_opt bench_opts[] = {
    {"--config", LM_OPT_STRING, "FILE", ARG(config_path), 0, 0, "a config.json shape (with --random-weights)", NULL,
     NULL, NULL},
    {"--random-weights", LM_OPT_FLAG, NULL, ARG(random_weights), 0, 0,
     "random bf16 weights in memory, no checkpoint needed", NULL, NULL, NULL},
    {"--prompt-tokens", LM_OPT_INT, "N", ARG(prompt_tokens), 1, 1 << 20, "prompt length for prefill (default 256)",
     NULL, NULL, NULL},
    {"--gen-tokens", LM_OPT_INT, "N", ARG(gen_tokens), 1, 1 << 20, "tokens to decode (default 32)", NULL, NULL, NULL},
    {"--bandwidth", LM_OPT_FLOAT, "GBPS", ARG(bandwidth), 1e-6, 1e6,
     "skip the bandwidth measurement and use this figure", NULL, NULL, NULL},
    {"--seed", LM_OPT_INT64, "N", ARG(seed), 0, 1LL << 40, "random weights / prompt seed (default 1)", NULL, NULL,
     NULL},
    {"--concurrency", LM_OPT_STRING, "LIST", ARG(levels), 0, 0,
     "offline throughput through the engine instead: for each level (e.g.\n1,4,16,64) run --requests requests with "
     "that many in flight; reports\noutput tokens/s and time per token (with --speculative-tokens K:\neach level "
     "without and with K MTP drafts)",
     NULL, NULL, NULL},
    {"--requests", LM_OPT_INT, "N", ARG(requests), 1, 1 << 20, "requests per level (default: 2 x the level, at least 8)",
     NULL, NULL, NULL},
    {"--prompt-file", LM_OPT_STRING, "FILE", ARG(prompt_file), 0, 0,
     "with --concurrency: text prompts, one per line (\\n for a newline),\ncycled through, instead of random ids",
     NULL, NULL, NULL},
    {"--chat", LM_OPT_FLAG, NULL, ARG(chat), 0, 0,
     "with --prompt-file: each line is a user message sent through the chat\ntemplate", NULL, NULL, NULL},
    {"--temperature", LM_OPT_FLOAT, "T", ARG(temperature), 0, 100,
     "with --concurrency: sample at T, seeded per request (default 0, greedy)", NULL, NULL, NULL},
    {"--top-k", LM_OPT_INT, "K", ARG(top_k), -1, 1 << 30,
     "with --temperature: keep the K most likely tokens (default -1, off)", NULL, NULL, NULL},
    {"--top-p", LM_OPT_FLOAT, "P", ARG(top_p), 1e-6, 1,
     "with --temperature: keep the most likely tokens of mass P (default 1, off)", NULL, NULL, NULL},
    {"--json-schema", LM_OPT_STRING, "FILE", ARG(json_schema), 0, 0,
     "with --concurrency: every request constrained to this JSON schema\n(structured outputs); each level runs "
     "without, then with it, and reports\nthe cost",
     NULL, NULL, NULL},
    {"--planted-acceptance", LM_OPT_FLOAT, "P", ARG(planted_acceptance), 0, 1,
     "with --speculative-tokens (greedy): the plain pass records each prompt's\noutput, and in the speculative pass "
     "each MTP draft is replaced by the\ntrue next token with probability P: speculation's cost at a chosen\n"
     "acceptance",
     NULL, NULL, NULL},
    {"--rounds", LM_OPT_INT, "N", ARG(rounds), 1, LM_BENCH_MAX_ROUNDS,
     "with --json-schema: runs of each kind per level, alternating (default 3)", NULL, NULL, NULL},
    {"--image-size", LM_OPT_STRING, "WxH", ARG(image_size), 0, 0,
     "time to first token of one synthetic W x H image and --prompt-tokens\nof text: preprocessing, the vision "
     "tower (with its matmul rate) and the\nprefill, apart",
     NULL, NULL, NULL},
};

#define LM_BENCH_MAX_SCHEMA_BYTES (1 << 20)

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    double sorted[LM_BENCH_MAX_ROUNDS];
    memcpy(sorted, v, sizeof(double) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_doubles);
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

typedef struct {
    double submitted, first_token, finished;
    int tokens;
} request_timing;

/* The device's copy rate in GB/s (bytes read + bytes written a second):
 * the median of 5 copies of 512 MiB within its memory, after one to warm. */
static lm_status device_copy_rate(lm_backend *be, double *gbps, lm_error *err) {
    const size_t bytes = (size_t)512 << 20;
    lm_buffer *src = NULL, *dst = NULL;
    lm_status st = lm_alloc(be, bytes, "bench: copy-rate source", &src, err);
    if (st == LM_OK) st = lm_alloc(be, bytes, "bench: copy-rate destination", &dst, err);
    double times[5];
    for (int i = 0; st == LM_OK && i < 6; i++) {
        if (i == 0) be->ops->fill(be, lm_mem_of(src), 1, bytes);
        if ((st = be->ops->synchronize(be, err)) != LM_OK) break;
        double t0 = lm_monotonic_seconds();
        be->ops->copy(be, lm_mem_of(dst), lm_mem_of(src), bytes);
        if ((st = be->ops->synchronize(be, err)) != LM_OK) break;
        if (i > 0) times[i - 1] = lm_monotonic_seconds() - t0;
    }
    if (st == LM_OK) *gbps = 2.0 * (double)bytes / median(times, 5) / 1e9;
    be->ops->free(be, dst);
    be->ops->free(be, src);
    return st;
}

/* Offline throughput at one concurrency level: `n_requests` requests (request
 * i sends prompt i modulo the set) of `gen_tokens` outputs, `level` in flight. */
static int throughput_level(loom_engine *engine, int level, int n_requests, const lm_bench_prompts *prompts,
                            int gen_tokens, const bench_sampling *sampling, uint64_t seed, const loom_grammar *grammar,
                            lm_bench_oracle *record, double *tokens_per_s, double *time_per_token_ms) {
    request_timing *t = calloc((size_t)n_requests, sizeof *t);
    loom_request **live = calloc((size_t)n_requests, sizeof *live);
    if (!t || !live) {
        free(t);
        free(live);
        fprintf(stderr, "loom bench: out of memory\n");
        return 1;
    }
    char error[256];
    int next = 0, done = 0, rc = 0;
    loom_stats before, after;
    loom_engine_stats(engine, &before);
    double t0 = lm_monotonic_seconds();
    /* One reader thread is enough: events queue per request, so draining the
     * oldest request first does not slow the others down. */
    while (done < n_requests && rc == 0) {
        while (next < n_requests && next - done < level) {
            loom_request_params p;
            loom_request_params_default(&p);
            p.prompt = prompts->ids[next % prompts->count];
            p.n_prompt = prompts->lengths[next % prompts->count];
            p.max_tokens = gen_tokens;
            p.ignore_eos = true;
            p.sampling.temperature = sampling->temperature;
            p.sampling.top_k = sampling->top_k;
            p.sampling.top_p = sampling->top_p;
            p.sampling.has_seed = sampling->temperature > 0;
            p.sampling.seed = seed + (uint64_t)next;
            p.grammar = grammar;
            t[next].submitted = lm_monotonic_seconds();
            if (loom_submit(engine, &p, &live[next], error, sizeof error) != LOOM_OK) {
                fprintf(stderr, "loom bench: %s\n", error);
                rc = 1;
                break;
            }
            next++;
        }
        /* Wait on the oldest live request (events come at the end of an
         * engine step, for all running requests at once), then poll the
         * others, so first-token times are seen when they happen.  Blocking
         * rather than a sleep-and-poll loop keeps this thread off the cores
         * the kernels run on: polling every 200 us cost ~15% of the
         * throughput at concurrency 8 on 2 cores. */
        for (int i = done; i < next; i++) {
            loom_event ev;
            int got = 0, wait_ms = i == done ? 5 : 0;
            /* Only the first read may wait: draining the oldest request for as
             * long as it produces (a step every few ms) would leave the
             * others' events unread and inflate their first-token times. */
            while (live[i] && (got = loom_next_event(live[i], &ev, wait_ms)) == 1) {
                wait_ms = 0;
                if (ev.type == LOOM_EVENT_TOKEN) {
                    if (t[i].tokens++ == 0) t[i].first_token = lm_monotonic_seconds();
                    if (record && i < prompts->count) lm_bench_oracle_record(record, i, ev.token);
                } else if (ev.type == LOOM_EVENT_ERROR) {
                    fprintf(stderr, "loom bench: %s\n", ev.error);
                    rc = 1;
                }
            }
            if (live[i] && got == -1) {
                t[i].finished = lm_monotonic_seconds();
                loom_request_free(live[i]);
                live[i] = NULL;
            }
        }
        while (done < next && !live[done]) done++;
    }
    double wall = lm_monotonic_seconds() - t0;
    loom_engine_stats(engine, &after);
    long total = 0;
    double tpot = 0, ttft = 0;
    for (int i = 0; i < n_requests; i++) {
        total += t[i].tokens;
        if (t[i].tokens > 1) tpot += (t[i].finished - t[i].first_token) / (t[i].tokens - 1);
        ttft += t[i].first_token - t[i].submitted;
        if (live[i]) loom_request_free(live[i]);
    }
    *tokens_per_s = (double)total / wall;
    *time_per_token_ms = 1e3 * tpot / n_requests;
    if (rc == 0)
        printf("concurrency %3d%s: %3d requests, %6ld output tokens in %7.2f s = %8.2f tokens/s; "
               "time per output token %.2f ms; time to first token %.0f ms\n",
               level, grammar ? " (schema)" : "", n_requests, total, wall, (double)total / wall,
               1e3 * tpot / n_requests, 1e3 * ttft / n_requests);
    if (rc == 0 && grammar) {
        uint64_t masks = after.grammar_masks - before.grammar_masks, ns = after.grammar_ns - before.grammar_ns;
        printf("  grammar: %llu masks, %.1f us each (mask, state and draft checks), %.2f%% of the wall time\n",
               (unsigned long long)masks, masks ? (double)ns / 1e3 / (double)masks : 0.0, 100.0 * (double)ns / 1e9 / wall);
    }
    fflush(stdout);
    free(t);
    free(live);
    return rc;
}

/* base: the engine flags as given (prefix caching, compute precision, ...);
 * the bench sets the model, sizes and speculation itself. */
static loom_engine *bench_engine(const loom_engine_options *base, const char *backend, const char *model_dir,
                                 const char *config_path, bool mmap_weights, int threads, uint64_t seed,
                                 int max_level, int prompt_tokens, int gen_tokens, int speculative_tokens) {
    loom_engine_options o = *base;
    o.model_dir = model_dir;
    o.config_path = config_path;
    o.random_weights = config_path != NULL;
    o.random_seed = seed;
    o.threads = threads;
    o.backend = backend;
    o.mmap_weights = mmap_weights;
    o.max_running = max_level;
    o.max_model_len = prompt_tokens + gen_tokens;
    o.kv_cache_tokens = (int64_t)max_level * (prompt_tokens + gen_tokens + 16);
    o.speculative_tokens = speculative_tokens;
    loom_engine *engine;
    char error[512];
    lm_cli_load_result loaded;
    if (lm_cli_engine_load(&o, stderr, &engine, error, sizeof error, &loaded) != LOOM_OK) {
        fprintf(stderr, "loom bench: %s\n", error);
        return NULL;
    }
    printf("model: %s, %s, %d prompt + %d generated tokens per request, speculative tokens %d, "
           "loaded in %.1f s\n",
           model_dir ? model_dir : config_path, config_path ? "random bf16 weights" : "checkpoint",
           prompt_tokens, gen_tokens, speculative_tokens, loaded.seconds);
    return engine;
}

/* Where speculation's bytes go, by count (issue 53): a plain step, a
 * verify (one pass over the weights for all its rows), a draft round with
 * the draft head in use and with the whole vocabulary. */
static void print_spec_bytes(const loom_engine *engine, int k) {
    loom_engine_info info;
    loom_engine_describe(engine, &info);
    if (info.speculative_tokens == 0) return;
    double step = (double)info.decode_step_bytes, round = (double)info.draft_round_bytes,
           full = (double)info.draft_round_bytes_full;
    printf("bytes: plain decode step %.1f MB = verify of %d rows (one pass over the weights); draft round %.1f MB "
           "(%d of %d ids; the whole vocabulary: %.1f MB), %d drafts %.2f steps' bytes (%.2f with the whole "
           "vocabulary)\n",
           step / 1e6, k + 1, round / 1e6, info.draft_vocab, loom_engine_vocab_size(engine), full / 1e6, k,
           step > 0 ? k * round / step : 0.0, step > 0 ? k * full / step : 0.0);
}

/* Offline throughput at each level; with K > 0 each level runs without and
 * with speculation and reports the acceptance and the speedup. */
static int run_throughput(const loom_engine_options *base, const char *backend, const char *model_dir, const char *config_path, bool mmap_weights,
                          int threads, uint64_t seed, const char *levels, int requests,
                          int prompt_tokens, int gen_tokens, int speculative_tokens,
                          const char *prompt_file, bool chat, const bench_sampling *sampling, const char *schema_path,
                          int rounds, double planted) {
    int max_level = 0;
    for (const char *p = levels; *p;) {
        long level = strtol(p, (char **)&p, 10);
        if (level > max_level) max_level = (int)level;
        if (*p == ',') p++;
        else if (*p) break;
    }
    if (max_level <= 0 || max_level > 4096)
        return lm_cli_usage_error("bench", "--concurrency expects a list like 1,4,16,64");
    lm_bench_prompts prompts = {0};
    if (prompt_file) {
        lm_error err = {0};
        if (lm_bench_prompts_file(&prompts, prompt_file, model_dir, chat, &err) != LM_OK) {
            fprintf(stderr, "loom bench: %s\n", err.message);
            return 1;
        }
        long total = 0;
        for (int i = 0; i < prompts.count; i++) total += prompts.lengths[i];
        printf("prompts: %d from %s%s, %.1f tokens on average, %d at most\n", prompts.count, prompt_file,
               chat ? " (chat template)" : "", (double)total / prompts.count, prompts.max_length);
        prompt_tokens = prompts.max_length;
    }
    loom_grammar *grammar = NULL;
    if (schema_path) {
        cJSON *schema;
        lm_error err = {0};
        if (lm_json_read_file(schema_path, LM_BENCH_MAX_SCHEMA_BYTES, &schema, &err) != LM_OK) {
            fprintf(stderr, "loom bench: --json-schema: %s\n", err.message);
            lm_bench_prompts_free(&prompts);
            return 1;
        }
        char *text = cJSON_PrintUnformatted(schema);
        cJSON_Delete(schema);
        char msg[512] = "out of memory";
        loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_SCHEMA, .text = text, .text_len = text ? strlen(text) : 0};
        int grc = text ? loom_grammar_compile(&spec, &grammar, msg, sizeof msg) : LOOM_ERR_NOMEM;
        free(text);
        if (grc != LOOM_OK) {
            fprintf(stderr, "loom bench: --json-schema %s: %s\n", schema_path, msg);
            lm_bench_prompts_free(&prompts);
            return 1;
        }
        printf("grammar: every request's output constrained to the JSON schema in %s\n", schema_path);
    }
    double plain[64] = {0};
    int rc = 0;
    lm_bench_oracle oracle = {0};
    bool planting = planted >= 0;
    for (int pass = 0; pass < (speculative_tokens > 0 ? 2 : 1) && rc == 0; pass++) {
        int k = pass == 0 ? 0 : speculative_tokens;
        loom_engine *engine = bench_engine(base, backend, model_dir, config_path, mmap_weights, threads, seed,
                                           max_level, prompt_tokens, gen_tokens, k);
        if (!engine) {
            rc = 1;
            break;
        }
        if (!prompts.count) {
            int most = requests > 0 ? requests : (2 * max_level > 8 ? 2 * max_level : 8);
            lm_error err = {0};
            if (lm_bench_prompts_random(&prompts, most, prompt_tokens, loom_engine_vocab_size(engine), seed,
                                        &err) != LM_OK) {
                fprintf(stderr, "loom bench: %s\n", err.message);
                loom_engine_destroy(engine);
                rc = 1;
                break;
            }
        }
        if (planting && pass == 0) {
            lm_error err = {0};
            if (lm_bench_oracle_init(&oracle, &prompts, gen_tokens, planted, loom_engine_vocab_size(engine), &err) !=
                LM_OK) {
                fprintf(stderr, "loom bench: %s\n", err.message);
                loom_engine_destroy(engine);
                rc = 1;
                break;
            }
        }
        if (k > 0) print_spec_bytes(engine, k);
        if (planting && pass == 1) {
            loom_engine_set_draft_override(engine, lm_bench_oracle_draft, &oracle);
            printf("planted acceptance: each MTP draft replaced by the true next token with probability %.2f\n",
                   planted);
        }
        int index = 0;
        bool grammar_warm = false;
        for (const char *p = levels; *p && rc == 0; index++) {
            long level = strtol(p, (char **)&p, 10);
            if (*p == ',') p++;
            int n = requests > 0 ? requests : (int)(2 * level > 8 ? 2 * level : 8);
            loom_stats before, after;
            if (grammar && !grammar_warm) {
                /* not reported: the first requests warm the engine, and the
                 * first constrained one builds the schema's token-mask frames
                 * (kept by the engine for the requests that follow) */
                double wtps, wtpot;
                rc = throughput_level(engine, 1, 1, &prompts, gen_tokens, sampling, (uint64_t)seed, NULL, NULL,
                                      &wtps, &wtpot);
                if (rc == 0)
                    rc = throughput_level(engine, 1, 1, &prompts, gen_tokens, sampling, (uint64_t)seed, grammar,
                                          NULL, &wtps, &wtpot);
                grammar_warm = true;
            }
            /* with a grammar, unconstrained and constrained runs alternate,
             * `rounds` of each, and the medians are compared */
            double tps = 0, tpot = 0, ptps[LM_BENCH_MAX_ROUNDS], ptpot[LM_BENCH_MAX_ROUNDS],
                   gtps[LM_BENCH_MAX_ROUNDS], gtpot[LM_BENCH_MAX_ROUNDS];
            int n_rounds = grammar ? rounds : 1;
            for (int r = 0; r < n_rounds && rc == 0; r++) {
                if (r == 0) loom_engine_stats(engine, &before);
                rc = throughput_level(engine, (int)level, n, &prompts, gen_tokens, sampling, (uint64_t)seed, NULL,
                                      planting && k == 0 ? &oracle : NULL, &ptps[r], &ptpot[r]);
                if (r == 0) loom_engine_stats(engine, &after);
                if (grammar && rc == 0)
                    rc = throughput_level(engine, (int)level, n, &prompts, gen_tokens, sampling, (uint64_t)seed,
                                          grammar, NULL, &gtps[r], &gtpot[r]);
            }
            if (rc == 0) {
                tps = median(ptps, n_rounds);
                tpot = median(ptpot, n_rounds);
            }
            if (grammar && rc == 0) {
                double g_tps = median(gtps, n_rounds), g_tpot = median(gtpot, n_rounds);
                printf("  concurrency %d, medians of %d rounds: %.2f tokens/s unconstrained, %.2f with the schema "
                       "(%.1f%%); time per output token %.2f ms, %.2f ms (%+.1f%%)\n",
                       (int)level, n_rounds, tps, g_tps, tps > 0 ? 100.0 * g_tps / tps : 0.0, tpot, g_tpot,
                       tpot > 0 ? 100.0 * (g_tpot - tpot) / tpot : 0.0);
            }
            if (index < 64 && k == 0) plain[index] = tps;
            if (k > 0 && rc == 0) {
                uint64_t drafted = after.spec_drafted_tokens - before.spec_drafted_tokens;
                uint64_t accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
                uint64_t verifies = after.spec_verify_steps - before.spec_verify_steps;
                uint64_t generated = after.generation_tokens - before.generation_tokens;
                /* K is the most: the engine drafts what pays at this concurrency */
                printf("  K<=%d: acceptance %.1f%% (%llu of %llu drafts), mean accepted length %.2f "
                       "tokens per verify, %.2f drafts per output token, speedup over K=0 %.2fx\n",
                       k, drafted ? 100.0 * (double)accepted / (double)drafted : 0.0,
                       (unsigned long long)accepted, (unsigned long long)drafted,
                       verifies ? 1.0 + (double)accepted / (double)verifies : 1.0,
                       generated ? (double)drafted / (double)generated : 0.0,
                       index < 64 && plain[index] > 0 ? tps / plain[index] : 0.0);
            }
        }
        loom_engine_destroy(engine);
    }
    lm_bench_prompts_free(&prompts);
    lm_bench_oracle_free(&oracle);
    loom_grammar_free(grammar);
    return rc;
}

/* --image-size: one image through preprocessing, the tower and the prefill
 * of its rows plus `prompt_tokens` of text, each timed (batch 1, the
 * sequence runner in the engine's steps of `chunk` rows: no engine between).  The image is a smooth gradient
 * with noise, so the resampler and the tower see ordinary pixels. */
static int run_image(lm_model *model, int width, int height, int prompt_tokens, int chunk, uint64_t seed) {
    const lm_model_info *info = lm_model_describe(model);
    const lm_vision_info *vi = &info->vision;
    lm_error err = {0};
    if (!lm_model_has_vision(model)) {
        fprintf(stderr, "loom bench: --image-size: this model has no vision tower\n");
        return 1;
    }
    lm_image_rgb rgb = {width, height, malloc((size_t)width * (size_t)height * 3)};
    lm_image_patches patches = {0};
    lm_sequence_runner runner = {0};
    float *embeds = NULL, *logits = malloc(sizeof(float) * (size_t)info->vocab_size);
    int32_t *ids = NULL, *positions = NULL;
    const float **rows = NULL;
    int rc = 1;
    if (!rgb.rgb || !logits) {
        lm_fail(&err, LM_ERR_NOMEM, "out of memory");
        goto done;
    }
    uint64_t x = seed * 2654435761u + 7;
    for (int y = 0; y < height; y++)
        for (int i = 0; i < width; i++)
            for (int c = 0; c < 3; c++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                int v = (i * 255 / width + y * 255 / height * (c + 1) / 3 + (int)((x >> 59) & 15)) & 255;
                rgb.rgb[((size_t)y * (size_t)width + (size_t)i) * 3 + (size_t)c] = (uint8_t)v;
            }
    double t0 = lm_monotonic_seconds();
    if (lm_image_preprocess(&vi->processor, &rgb, &patches, &err) != LM_OK) goto done;
    double preprocess_s = lm_monotonic_seconds() - t0;
    int N = patches.n_patches, image_tokens = lm_image_tokens(&patches), T = image_tokens + prompt_tokens;
    if (lm_sequence_runner_init_sized(&runner, model, T + 1, chunk, N, &err) != LM_OK) goto done;
    embeds = malloc(sizeof(float) * (size_t)image_tokens * (size_t)info->hidden_size);
    ids = malloc(sizeof(int32_t) * (size_t)T);
    positions = malloc(sizeof(int32_t) * 3 * (size_t)T);
    rows = calloc((size_t)T, sizeof *rows);
    if (!embeds || !ids || !positions || !rows) {
        lm_fail(&err, LM_ERR_NOMEM, "out of memory");
        goto done;
    }
    double t1 = lm_monotonic_seconds();
    if (lm_model_encode_image(runner.context, &patches, embeds, &err) != LM_OK) goto done;
    double encode_s = lm_monotonic_seconds() - t1;
    /* the image first, then the text, as a chat template places them */
    lm_image_grid grid = {patches.grid_t, patches.grid_h, patches.grid_w, patches.merge_size};
    lm_image_span span = {0, image_tokens};
    for (int i = 0; i < T; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = i < image_tokens ? vi->image_token_id : (int32_t)((x >> 33) % (uint64_t)info->vocab_size);
        rows[i] = i < image_tokens ? embeds + (size_t)i * (size_t)info->hidden_size : NULL;
    }
    int delta;
    lm_image_prompt_positions(T, &grid, &span, 1, positions, &delta);
    double t2 = lm_monotonic_seconds();
    if (lm_sequence_runner_feed_inputs(&runner, ids, positions, rows, T, false, logits, NULL, NULL, &err) != LM_OK)
        goto done;
    double prefill_s = lm_monotonic_seconds() - t2;
    /* matmul work: the merger once per output row, the rest once per patch
     * (n_parameters also counts norms and the position table: a slight
     * overcount); attention q·k and p·v over each image's own patches */
    int m2 = patches.merge_size * patches.merge_size;
    double matmul_flops = 2.0 * ((double)N * (double)(vi->n_parameters - vi->merger_parameters) +
                                 (double)(N / m2) * (double)vi->merger_parameters);
    double frame = (double)N / patches.grid_t;
    double attention_flops = 4.0 * vi->depth * (double)patches.grid_t * frame * frame * vi->hidden_size;
    printf("image: %d x %d -> %d x %d pixels, grid %d x %d, %d patches, %d tokens\n", width, height,
           patches.grid_h * vi->processor.patch_size, patches.grid_w * vi->processor.patch_size,
           patches.grid_h, patches.grid_w, N, image_tokens);
    printf("preprocess: %.1f ms\n", preprocess_s * 1e3);
    printf("vision tower: %.3f s; matmuls %.1f GFLOP + attention %.1f GFLOP = %.1f GFLOP/s\n", encode_s,
           matmul_flops / 1e9, attention_flops / 1e9, (matmul_flops + attention_flops) / encode_s / 1e9);
    printf("prefill: %d tokens (%d image + %d text) in %.3f s = %.1f tokens/s (steps of %d tokens)\n", T,
           image_tokens, prompt_tokens, prefill_s, T / prefill_s, runner.prefill_chunk);
    printf("time to first token: %.3f s (preprocess + tower + prefill)\n", preprocess_s + encode_s + prefill_s);
    rc = 0;
done:
    if (rc) fprintf(stderr, "loom bench: %s\n", err.message);
    lm_sequence_runner_free(&runner);
    lm_image_patches_free(&patches);
    free(rgb.rgb);
    free(embeds);
    free(logits);
    free(ids);
    free(positions);
    free(rows);
    return rc;
}

int cmd_bench_main(int argc, char **argv) {
    bench_args args = {.prompt_tokens = 256, .gen_tokens = 32, .seed = 1, .rounds = 3, .planted_acceptance = -1,
                       .top_k = -1, .top_p = 1};
    lm_cli_engine_settings settings;
    lm_cli_spec cli;
    lm_cli_spec_init(&cli, "bench", synopsis, &settings, true);
    LM_CLI_SPEC_ADD(&cli, "Benchmark", bench_opts, &args);
    int parsed = lm_cli_parse(&cli, argc, argv);
    if (parsed >= 0) return parsed;
    const char *model_dir = settings.engine.model_dir, *config_path = args.config_path;
    bool random_weights = args.random_weights, chat = args.chat;
    long prompt_tokens = args.prompt_tokens, gen_tokens = args.gen_tokens, threads = settings.engine.threads;
    long seed = (long)args.seed, requests = args.requests, speculative = settings.engine.speculative_tokens;
    const char *backend_name = settings.engine.backend, *levels = args.levels, *prompt_file = args.prompt_file;
    double bandwidth = args.bandwidth;
    float temperature = args.temperature;
    int image_width = 0, image_height = 0;
    lm_load_mode mode = settings.engine.mmap_weights ? LM_LOAD_MMAP : LM_LOAD_READ;
    if (args.image_size && (sscanf(args.image_size, "%dx%d", &image_width, &image_height) != 2 || image_width < 1 ||
                            image_height < 1 || image_width > 16384 || image_height > 16384))
        return lm_cli_usage_error("bench", "--image-size expects WxH, each 1..16384 (e.g. 1024x1024)");
    if ((model_dir && config_path) || (config_path && !random_weights) || (random_weights && !config_path))
        return lm_cli_usage_error("bench", "give a model folder, or --config FILE with --random-weights");
    if ((args.top_k != -1 || args.top_p < 1) && !(temperature > 0))
        return lm_cli_usage_error("bench", "--top-k and --top-p need --temperature");
    if ((prompt_file || chat || temperature > 0 || args.json_schema) && !levels)
        return lm_cli_usage_error("bench", "--prompt-file, --chat, --temperature and --json-schema need --concurrency");
    if (args.planted_acceptance >= 0 && (speculative <= 0 || temperature > 0 || args.json_schema))
        return lm_cli_usage_error("bench", "--planted-acceptance needs --speculative-tokens, greedy decoding and no "
                                           "--json-schema");
    if (chat && !prompt_file)
        return lm_cli_usage_error("bench", "--chat needs --prompt-file");
    if (prompt_file && config_path)
        return lm_cli_usage_error("bench", "--prompt-file needs a checkpoint with a tokenizer (--model)");
    char model_buf[4096];
    if (!config_path) {
        lm_error derr = {0};
        if (lm_cli_model_dir(model_dir, NULL, model_buf, sizeof model_buf, &model_dir, &derr) != LM_OK) {
            fprintf(stderr, "loom bench: %s\n", derr.message);
            return 1;
        }
    }

    if (image_width > 0 && levels)
        return lm_cli_usage_error("bench", "--image-size runs one sequence: not with --concurrency");
    if (levels)
        return run_throughput(&settings.engine, backend_name, model_dir, model_dir ? NULL : config_path, mode == LM_LOAD_MMAP,
                              (int)threads, (uint64_t)seed, levels, (int)requests,
                              (int)prompt_tokens, (int)gen_tokens, (int)speculative, prompt_file, chat,
                              &(bench_sampling){temperature, args.top_k, args.top_p}, args.json_schema, args.rounds,
                              args.planted_acceptance);
    if (speculative > 0)
        return lm_cli_usage_error("bench", "--speculative-tokens needs --concurrency (it runs through the engine)");

    lm_error err = {0};
    lm_backend *backend;
    lm_model *model;
    double t0 = lm_monotonic_seconds();
    lm_cli_model_spec spec = {.tensor_parallel_size = settings.engine.tensor_parallel_size,
                              .dir = model_dir, .random_config = config_path, .seed = (uint64_t)seed,
                              .backend = backend_name, .compute = settings.engine.compute_dtype,
                              .threads = (int)threads,
                              .load = {.mode = mode,
                                       .quantize_int8 = settings.engine.quantize &&
                                                        strcmp(settings.engine.quantize, "int8") == 0,
                                       .quantize_fp8 = settings.engine.quantize &&
                                                       strcmp(settings.engine.quantize, "fp8") == 0,
                                       .expert_parallel = settings.engine.expert_parallel}};
    lm_status st = lm_cli_open_model(&spec, &backend, &model, &err);
    if (st != LM_OK) {
        fprintf(stderr, "loom bench: %s\n", err.message);
        return 1;
    }
    double load_s = lm_monotonic_seconds() - t0;
    /* prefill in the engine's steps: --max-num-batched-tokens, or its default */
    int chunk = settings.engine.max_batch_tokens > 0 ? settings.engine.max_batch_tokens
                                                    : loom_default_batch_tokens(backend_name);
    if (image_width > 0) {
        printf("model: %s, %s, %s backend, %d threads, loaded in %.1f s\n",
               model_dir ? model_dir : config_path, model_dir ? "checkpoint" : "random bf16 weights",
               backend->ops->name, lm_backend_threads(backend), load_s);
        int image_rc = run_image(model, image_width, image_height, (int)prompt_tokens, chunk, (uint64_t)seed);
        lm_cli_close_model(backend, model);
        return image_rc;
    }
    const lm_model_info *info = lm_model_describe(model);
    int V = info->vocab_size;
    int rc = 1;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)prompt_tokens);
    lm_sequence_runner runner = {0};
    if (!prompt) {
        lm_fail(&err, LM_ERR_NOMEM, "out of memory");
        goto done;
    }
    uint64_t x = (uint64_t)seed * 2654435761u + 1;
    for (long i = 0; i < prompt_tokens; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((x >> 33) % (uint64_t)V);
    }
    if (lm_sequence_runner_init_sized(&runner, model, (int)(prompt_tokens + gen_tokens), chunk, 0, &err) != LM_OK)
        goto done;

    const char *made = lm_model_describe(model)->weights_made; /* int8, or FP8 as bf16 */
    const char *kernels = lm_backend_cpu_kernels(backend); /* the cpu's kernel set: which code the figures are of */
    printf("model: %s, %s weights%s%s%s, %s backend (%s compute%s%s%s), %d threads, loaded in %.1f s\n",
           model_dir ? model_dir : config_path,
           model_dir ? (mode == LM_LOAD_MMAP ? "mapped" : "read") : "random bf16", made[0] ? " (" : "", made,
           made[0] ? ")" : "", backend->ops->name, lm_backend_compute(backend), kernels ? ", " : "",
           kernels ? kernels : "", kernels ? " kernels" : "", lm_backend_threads(backend), load_s);
    fflush(stdout);
    double t1 = lm_monotonic_seconds();
    int32_t next = 0;
    if (lm_sequence_runner_feed_greedy(&runner, prompt, (int)prompt_tokens, &next, &err) != LM_OK) goto done;
    double prefill_s = lm_monotonic_seconds() - t1;

    /* Decode: feed argmax tokens one at a time, the argmax taken where the
     * logits are (only the id comes back, as in the engine's greedy steps);
     * the first step warms up. */
    double t2 = 0;
    for (long i = 0; i < gen_tokens; i++) {
        if (i == 1) t2 = lm_monotonic_seconds();
        if (lm_sequence_runner_feed_greedy(&runner, &next, 1, &next, &err) != LM_OK) goto done;
    }
    double decode_s = gen_tokens > 1 ? lm_monotonic_seconds() - t2 : 0;
    double decode_tps = gen_tokens > 1 ? (double)(gen_tokens - 1) / decode_s : 0;
    double bytes = (double)info->decode_bytes_per_token;
    const char *bandwidth_kind = "read bandwidth";
    if (bandwidth <= 0 && !lm_backend_is_host(backend)) {
        /* A device's decode reads its own memory: the host's bandwidth says
         * nothing of it.  Its copy rate (read + written) is the figure
         * docs/PERF.md divides by. */
        if (device_copy_rate(backend, &bandwidth, &err) != LM_OK) goto done;
        bandwidth_kind = "device copy rate";
    } else if (bandwidth <= 0) {
        /* The bandwidth the kernels can draw: measured with as many threads. */
        lm_pool *pool = NULL;
        if (lm_pool_create(lm_backend_threads(backend), &pool, &err) != LM_OK) goto done;
        bandwidth = lm_measure_read_bandwidth(pool) / 1e9;
        lm_pool_destroy(pool);
    }
    double roofline = bandwidth * 1e9 / bytes;

    printf("prefill: %ld tokens in %.3f s = %.1f tokens/s (steps of %d tokens)\n", prompt_tokens, prefill_s,
           (double)prompt_tokens / prefill_s, runner.prefill_chunk);
    printf("decode:  %ld tokens in %.3f s = %.2f tokens/s (%.1f ms/token)\n", gen_tokens - 1,
           decode_s, decode_tps, decode_tps > 0 ? 1e3 / decode_tps : 0);
    printf("roofline: %.1f GB/s %s / %.1f MB per token = %.2f tokens/s; reached %.0f%%\n", bandwidth,
           bandwidth_kind, bytes / 1e6, roofline, 100.0 * decode_tps / roofline);
    rc = 0;
done:
    if (rc) fprintf(stderr, "loom bench: %s\n", err.message);
    lm_sequence_runner_free(&runner);
    free(prompt);
    lm_cli_close_model(backend, model);
    return rc;
}
