/* loom run: generation from the command line through the engine.
 *   --ids 1,2,3            one prompt of token ids
 *   --ids-file FILE        one comma-separated prompt per line, run together
 *   --prompt TEXT          text, with the chat template unless --raw
 *   --image FILE           (repeatable) images for the prompt
 * Ids prompts print the generated ids (one line per prompt, input order);
 * a text prompt streams the generated text. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/prefix_cache_flags.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/image_files.h"
#include "cli/prompt_encoder.h"
#include "engine/sampler.h"
#include "loom.h"

#define MAX_PROMPTS 100000

static void usage(FILE *f) {
    fprintf(f,
            "usage: loom run [--model DIR] (--ids LIST | --ids-file FILE | --prompt TEXT) [options]\n"
            "Generates continuations through the batching engine.\n\n"
            "  --model DIR             Hugging Face checkpoint folder (default: the bundled\n"
            "                          models/loom-tiny, or $LOOM_MODEL)\n"
            "  --ids LIST              comma-separated prompt token ids\n"
            "  --ids-file FILE         one comma-separated prompt per line; prints one line of\n"
            "                          generated ids per prompt, in input order\n"
            "  --prompt TEXT           a text prompt (chat template applied unless --raw)\n"
            "  --raw                   tokenize --prompt as is, no chat template\n"
            "  --image FILE            an image for the prompt (PNG, JPEG, WebP; repeat for\n"
            "                          several): with --prompt its markers go before the text\n"
            "                          (unless the text holds them); --ids must hold one\n"
            "                          image placeholder id per image (or every image row)\n"
            "  --max-image-pixels N    resize larger images down to N pixels (default 1048576)\n"
            "  --concurrency N         prompts in flight at once (default: all)\n"
            "  --max-tokens N          tokens to generate per prompt (default 16)\n"
            "  --temperature T         0 = greedy (default 0)\n"
            "  --top-p P, --top-k K, --min-p P, --repetition-penalty R, --seed S\n"
            "  --ignore-eos            keep going after an end-of-sequence token\n"
            "  --print-ids             print generated ids (comma-separated) instead of text\n"
            "  --threads N             CPU threads (default: all cores)\n"
            "  --backend NAME          cpu (default), ref (plain reference kernels) or cuda\n"
            "  --device NAME           the same (vLLM's spelling)\n"
            "  --max-batch-tokens N    token budget of one engine step (default 512)\n"
            "  --gpu-memory-utilization F  with --device cuda: the fraction of the card the\n"
            "                          engine may hold; the KV pool gets what the weights leave\n"
            "  --mmap                  map the weights instead of reading them into memory\n"
            "  --speculative-tokens K  draft K tokens per step with the MTP head (0-8, default 0);\n"
            "                          acceptance statistics go to stderr\n"
            "  --mtp-norms MODE        MTP head norm weights: auto (detect), zero-centred, shifted\n"
            LM_CLI_PREFIX_CACHE_USAGE);
}

typedef struct {
    int32_t *ids;
    int n;
} prompt;

static void free_prompts(prompt *p, int n) {
    for (int i = 0; i < n; i++) free(p[i].ids);
    free(p);
}

static lm_status read_ids_file(const char *path, int vocab, prompt **out, int *count, lm_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return lm_fail(err, LM_ERR_IO, "cannot open %s", path);
    prompt *list = NULL;
    int n = 0, cap = 0, line_no = 0;
    char *line = NULL;
    size_t line_cap = 0;
    lm_status st = LM_OK;
    while (getline(&line, &line_cap, f) > 0) {
        line_no++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue; /* blank line */
        if (n == MAX_PROMPTS) {
            st = lm_fail(err, LM_ERR_INVALID, "%s: more than %d prompts", path, MAX_PROMPTS);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            prompt *bigger = realloc(list, sizeof *list * (size_t)cap);
            if (!bigger) {
                st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
                break;
            }
            list = bigger;
        }
        line[strcspn(line, "\r\n")] = '\0';
        st = lm_cli_parse_ids(line, vocab, &list[n].ids, &list[n].n, err);
        if (st != LM_OK) {
            lm_fail_context(err, "%s line %d", path, line_no);
            break;
        }
        n++;
    }
    free(line);
    fclose(f);
    if (st == LM_OK && n == 0) st = lm_fail(err, LM_ERR_INVALID, "%s holds no prompt", path);
    if (st != LM_OK) {
        free_prompts(list, n);
        return st;
    }
    *out = list;
    *count = n;
    return LM_OK;
}

/* The token ids of a text prompt: chat template (one user message) unless raw. */
static lm_status encode_text(const char *dir, const char *text, bool raw, prompt *out, lm_error *err) {
    lm_prompt_encoder pe;
    lm_status st = lm_prompt_encoder_open(dir, !raw, &pe, err);
    if (st != LM_OK) return st;
    st = (raw ? lm_prompt_encoder_raw : lm_prompt_encoder_user)(&pe, text, &out->ids, &out->n, err);
    lm_prompt_encoder_close(&pe);
    return st;
}

int cmd_run_main(int argc, char **argv) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'},        {"ids", required_argument, 0, 'i'},
        {"ids-file", required_argument, 0, 'f'},     {"prompt", required_argument, 0, 'P'},
        {"raw", no_argument, 0, 'R'},                {"concurrency", required_argument, 0, 'c'},
        {"max-tokens", required_argument, 0, 'n'},   {"temperature", required_argument, 0, 'T'},
        {"top-p", required_argument, 0, 'p'},        {"top-k", required_argument, 0, 'k'},
        {"min-p", required_argument, 0, 'q'},        {"repetition-penalty", required_argument, 0, 'r'},
        {"seed", required_argument, 0, 's'},         {"ignore-eos", no_argument, 0, 'e'},
        {"print-ids", no_argument, 0, 'I'},          {"threads", required_argument, 0, 't'},
        {"backend", required_argument, 0, 'B'}, {"device", required_argument, 0, 'B'},
        {"max-batch-tokens", required_argument, 0, 'b'}, {"gpu-memory-utilization", required_argument, 0, 0x100}, {"mmap", no_argument, 0, 'M'},
        {"speculative-tokens", required_argument, 0, 'D'}, {"mtp-norms", required_argument, 0, 'N'},
        {"image", required_argument, 0, 'G'},        {"max-image-pixels", required_argument, 0, 'X'},
        {"help", no_argument, 0, 'h'},               LM_CLI_PREFIX_CACHE_OPTIONS, {0, 0, 0, 0},
    };
    const char *model_dir = NULL, *ids_text = NULL, *ids_file = NULL, *text = NULL;
    const char *image_paths[LOOM_MAX_IMAGES];
    int n_image_paths = 0;
    bool raw = false, print_ids = false;
    long concurrency = 0, threads = 0, batch_tokens = 0, seed = 0;
    const char *backend = NULL;
    loom_request_params base;
    loom_request_params_default(&base);
    base.sampling.temperature = 0;
    loom_engine_options eo;
    loom_engine_options_default(&eo);
    int opt;
    optind = 1;
    long v;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'm': model_dir = optarg; break;
        case 'i': ids_text = optarg; break;
        case 'f': ids_file = optarg; break;
        case 'P': text = optarg; break;
        case 'R': raw = true; break;
        case 'c': if (!lm_cli_parse_int("--concurrency", optarg, 1, 1 << 20, &concurrency)) return 2; break;
        case 'n': if (!lm_cli_parse_int("--max-tokens", optarg, 1, 1 << 20, &v)) return 2; base.max_tokens = (int)v; break;
        case 'T': if (!lm_cli_parse_float("--temperature", optarg, 0, 100, &base.sampling.temperature)) return 2; break;
        case 'p': if (!lm_cli_parse_float("--top-p", optarg, 0, 1, &base.sampling.top_p)) return 2; break;
        case 'k': if (!lm_cli_parse_int("--top-k", optarg, -1, 1 << 24, &v)) return 2; base.sampling.top_k = (int)v; break;
        case 'q': if (!lm_cli_parse_float("--min-p", optarg, 0, 1, &base.sampling.min_p)) return 2; break;
        case 'r':
            if (!lm_cli_parse_float("--repetition-penalty", optarg, 0.01, 100, &base.sampling.repetition_penalty))
                return 2;
            break;
        case 's':
            if (!lm_cli_parse_int("--seed", optarg, 0, 1L << 62, &seed)) return 2;
            base.sampling.has_seed = true;
            base.sampling.seed = (uint64_t)seed;
            break;
        case 'e': base.ignore_eos = true; break;
        case 'I': print_ids = true; break;
        case 't': if (!lm_cli_parse_int("--threads", optarg, 1, 1024, &threads)) return 2; break;
        case 'B': if (!lm_cli_parse_backend(optarg, &backend)) return 2; break;
        case 0x100:
            if (!lm_cli_parse_float("--gpu-memory-utilization", optarg, 0.01, 1, &eo.gpu_memory_utilization)) return 2;
            break;
        case 'b': if (!lm_cli_parse_int("--max-batch-tokens", optarg, 1, 1 << 20, &batch_tokens)) return 2; break;
        case 'M': eo.mmap_weights = true; break;
        case 'N': {
            lm_mtp_norms norms;
            if (!lm_cli_parse_mtp_norms(optarg, &norms)) return 2;
            eo.mtp_norms = (loom_mtp_norms)norms;
            break;
        }
        case 'D': if (!lm_cli_parse_int("--speculative-tokens", optarg, 0, 8, &v)) return 2; eo.speculative_tokens = (int)v; break;
        case 'G':
            if (n_image_paths == LOOM_MAX_IMAGES) {
                fprintf(stderr, "loom: at most %d images\n", LOOM_MAX_IMAGES);
                return 2;
            }
            image_paths[n_image_paths++] = optarg;
            break;
        case 'X':
            if (!lm_cli_parse_int("--max-image-pixels", optarg, -1, 1L << 28, &v)) return 2;
            eo.max_image_pixels = v;
            break;
        case 'h': usage(stdout); return 0;
        default:
            if (lm_cli_prefix_cache_option(opt, optarg, &eo) > 0) break;
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || (!!ids_text + !!ids_file + !!text) != 1) {
        usage(stderr);
        return 2;
    }
    if (n_image_paths > 0 && ids_file) {
        fprintf(stderr, "loom: --image goes with one prompt (--ids or --prompt), not --ids-file\n");
        return 2;
    }
    char error[512], model_buf[4096];
    lm_error derr = {0};
    if (lm_cli_model_dir(model_dir, model_buf, sizeof model_buf, &model_dir, &derr) != LM_OK) {
        fprintf(stderr, "loom: %s\n", derr.message);
        return 1;
    }
    if (!lm_sampling_validate(&base.sampling, 0, error, sizeof error)) {
        fprintf(stderr, "loom: %s\n", error);
        return 2;
    }
    eo.model_dir = model_dir;
    eo.threads = (int)threads;
    eo.backend = backend;
    if (batch_tokens) eo.max_batch_tokens = (int)batch_tokens;
    loom_engine *engine = NULL;
    if (loom_engine_create(&eo, &engine, error, sizeof error) != LOOM_OK) {
        fprintf(stderr, "loom: %s\n", error);
        return 1;
    }
    lm_error err = {0};
    prompt *prompts = NULL;
    int n_prompts = 0, rc = 1;
    int vocab = loom_engine_vocab_size(engine);
    lm_cli_images images = {0};
    char *text_with_images = NULL;
    for (int i = 0; i < n_image_paths; i++)
        if (lm_cli_images_add(&images, image_paths[i], &err) != LM_OK) {
            fprintf(stderr, "loom: %s\n", err.message);
            goto done;
        }
    if (images.n > 0 && text) {
        const char *marker = loom_engine_image_marker(engine);
        if (!marker) {
            fprintf(stderr, "loom: this model takes no images\n");
            goto done;
        }
        if (!(text_with_images = lm_cli_text_with_images(text, marker, images.n))) {
            fprintf(stderr, "loom: out of memory\n");
            goto done;
        }
        text = text_with_images;
    }
    if (ids_text) {
        prompts = calloc(1, sizeof *prompts);
        n_prompts = 1;
        if (!prompts || lm_cli_parse_ids(ids_text, vocab, &prompts[0].ids, &prompts[0].n, &err) != LM_OK) {
            fprintf(stderr, "loom: %s\n", prompts ? err.message : "out of memory");
            goto done;
        }
    } else if (ids_file) {
        if (read_ids_file(ids_file, vocab, &prompts, &n_prompts, &err) != LM_OK) {
            fprintf(stderr, "loom: %s\n", err.message);
            goto done;
        }
    } else {
        prompts = calloc(1, sizeof *prompts);
        n_prompts = 1;
        if (!prompts || encode_text(model_dir, text, raw, &prompts[0], &err) != LM_OK) {
            fprintf(stderr, "loom: %s\n", prompts ? err.message : "out of memory");
            goto done;
        }
    }
    bool show_text = text && !print_ids;
    if (concurrency <= 0 || concurrency > n_prompts) concurrency = n_prompts;

    /* Outputs are kept per prompt and printed in input order. */
    char **lines = calloc((size_t)n_prompts, sizeof *lines);
    loom_request **live = calloc((size_t)n_prompts, sizeof *live);
    if (!lines || !live) {
        fprintf(stderr, "loom: out of memory\n");
        free(lines);
        free(live);
        goto done;
    }
    int next = 0, finished = 0;
    bool failed = false;
    while (finished < n_prompts && !failed) {
        while (next < n_prompts && next - finished < concurrency) {
            loom_request_params p = base;
            p.prompt = prompts[next].ids;
            p.n_prompt = prompts[next].n;
            p.images = images.images;
            p.n_images = images.n;
            int st = loom_submit(engine, &p, &live[next], error, sizeof error);
            if (st != LOOM_OK) {
                fprintf(stderr, "loom: prompt %d: %s\n", next + 1, error);
                failed = true;
                break;
            }
            next++;
        }
        if (failed) break;
        /* Drain the oldest unfinished request (others keep running meanwhile). */
        loom_request *r = live[finished];
        size_t cap = 256, len = 0;
        char *out = malloc(cap);
        loom_event ev;
        int got;
        while (out && (got = loom_next_event(r, &ev, -1)) == 1) {
            char piece[32];
            const char *add = NULL;
            size_t add_len = 0;
            if (ev.type == LOOM_EVENT_ERROR) {
                fprintf(stderr, "loom: prompt %d: %s\n", finished + 1, ev.error);
                failed = true;
            } else if (show_text) {
                if (ev.text) {
                    fwrite(ev.text, 1, ev.text_len, stdout);
                    fflush(stdout);
                }
            } else if (ev.type == LOOM_EVENT_TOKEN) {
                snprintf(piece, sizeof piece, "%s%d", len ? "," : "", ev.token);
                add = piece;
                add_len = strlen(piece);
            }
            if (add && len + add_len + 1 > cap) {
                while (len + add_len + 1 > cap) cap *= 2;
                char *bigger = realloc(out, cap);
                if (!bigger) break;
                out = bigger;
            }
            if (add) {
                memcpy(out + len, add, add_len);
                len += add_len;
            }
        }
        if (out) out[len] = '\0';
        lines[finished] = out;
        loom_request_free(r);
        live[finished] = NULL;
        /* Print every finished line in order as soon as it is complete. */
        if (!show_text) printf("%s\n", out ? out : "");
        else printf("\n");
        fflush(stdout);
        finished++;
    }
    for (int i = 0; i < n_prompts; i++) {
        free(lines[i]);
        if (live[i]) loom_request_free(live[i]);
    }
    free(lines);
    free(live);
    rc = failed ? 1 : 0;
    if (eo.speculative_tokens > 0) {
        loom_stats stats;
        loom_engine_stats(engine, &stats);
        if (stats.spec_verify_steps > 0)
            fprintf(stderr, "speculative: K=%d, %llu drafted, %llu accepted (%.1f%%), %.2f tokens per verify step\n",
                    stats.speculative_tokens, (unsigned long long)stats.spec_drafted_tokens,
                    (unsigned long long)stats.spec_accepted_tokens,
                    100.0 * (double)stats.spec_accepted_tokens / (double)stats.spec_drafted_tokens,
                    1.0 + (double)stats.spec_accepted_tokens / (double)stats.spec_verify_steps);
    }
done:
    free_prompts(prompts, n_prompts);
    lm_cli_images_clear(&images);
    free(text_with_images);
    loom_engine_destroy(engine);
    return rc;
}
