/* loom run: generation from the command line through the engine.
 *   --ids 1,2,3            one prompt of token ids
 *   --ids-file FILE        one comma-separated prompt per line, run together
 *   --prompt TEXT          text, with the chat template unless --raw
 *   --image FILE           (repeatable) images for the prompt
 * Ids prompts print the generated ids (one line per prompt, input order);
 * a text prompt streams the generated text. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_options.h"
#include "cli/image_files.h"
#include "cli/load_progress.h"
#include "cli/prompt_encoder.h"
#include "cli/sampling_options.h"
#include "engine/sampler.h"
#include "loom.h"

#define MAX_PROMPTS 100000

static const char synopsis[] =
    "usage: loom run [MODEL_DIR] (--ids LIST | --ids-file FILE | --prompt TEXT) [options]\n"
    "Generates continuations through the batching engine.  Ids prompts print the\n"
    "generated ids (one line per prompt, input order); a text prompt streams text.\n";

typedef struct {
    const char *ids_text, *ids_file, *text;
    bool raw, print_ids;
    int concurrency;
    lm_cli_image_paths images;
} run_args;

#define ARG(field) offsetof(run_args, field)
static const lm_opt run_opts[] = {
    {"--ids", LM_OPT_STRING, "LIST", ARG(ids_text), 0, 0, "comma-separated prompt token ids", NULL, NULL, NULL},
    {"--ids-file", LM_OPT_STRING, "FILE", ARG(ids_file), 0, 0,
     "one comma-separated prompt per line; prints one line of generated\nids per prompt, in input order", NULL,
     NULL, NULL},
    {"--prompt|-p", LM_OPT_STRING, "TEXT", ARG(text), 0, 0, "a text prompt (chat template applied unless --raw)",
     NULL, NULL, NULL},
    {"--raw", LM_OPT_FLAG, NULL, ARG(raw), 0, 0, "tokenize --prompt as is, no chat template", NULL, NULL, NULL},
    {"--image", LM_OPT_CUSTOM, "FILE", ARG(images), 0, 0,
     "an image for the prompt (PNG, JPEG, WebP; repeat for several): with\n--prompt its markers go before the "
     "text (unless the text holds them);\n--ids must hold one image placeholder id per image (or every row)",
     lm_cli_parse_image_path, NULL, NULL},
    {"--concurrency", LM_OPT_INT, "N", ARG(concurrency), 1, 1 << 20, "prompts in flight at once (default: all)",
     NULL, NULL, NULL},
    {"--print-ids", LM_OPT_FLAG, NULL, ARG(print_ids), 0, 0, "print generated ids instead of text", NULL, NULL,
     NULL},
};

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
    run_args args = {0};
    loom_request_params base;
    loom_request_params_default(&base);
    lm_cli_sampling_source sampling_source = {0};
    lm_cli_engine_settings settings;
    lm_cli_spec spec;
    lm_cli_spec_init(&spec, "run", synopsis, &settings, true);
    LM_CLI_SPEC_ADD(&spec, "Prompts", run_opts, &args);
    lm_cli_spec_add_sampling(&spec, &base);
    lm_cli_spec_add_sampling_source(&spec, &sampling_source);
    int parsed = lm_cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    const char *ids_text = args.ids_text, *ids_file = args.ids_file, *text = args.text;
    bool raw = args.raw, print_ids = args.print_ids;
    long concurrency = args.concurrency;
    if ((!!ids_text + !!ids_file + !!text) != 1)
        return lm_cli_usage_error("run", "give one of --ids, --ids-file or --prompt");
    if (args.images.n > 0 && ids_file)
        return lm_cli_usage_error("run", "--image goes with one prompt (--ids or --prompt), not --ids-file");
    char error[512], model_buf[4096], why[160];
    lm_error derr = {0};
    const char *model_dir = NULL;
    if (lm_cli_model_dir(settings.engine.model_dir, NULL, model_buf, sizeof model_buf, &model_dir, &derr) != LM_OK) {
        fprintf(stderr, "loom run: %s\n", derr.message);
        return 1;
    }
    lm_generation_defaults generation_defaults;
    char sampling_why[300];
    if (lm_cli_load_sampling_defaults(&sampling_source, model_dir, &generation_defaults, sampling_why,
                                      sizeof sampling_why, &derr) != LM_OK) {
        fprintf(stderr, "loom run: %s\n", derr.message);
        return 1;
    }
    lm_cli_settle_sampling(&base.sampling, &generation_defaults);
    if (!lm_sampling_validate(&base.sampling, 0, error, sizeof error)) return lm_cli_usage_error("run", "%s", error);
    char config_path[4200];
    snprintf(config_path, sizeof config_path, "%s/config.json", model_dir);
    if (lm_cli_resolve_model_len("run", &settings, config_path, why, sizeof why) != 0) return 2;
    if (lm_cli_threads_exceed_cores(&settings, error, sizeof error)) fprintf(stderr, "loom run: %s\n", error);
    loom_engine_options eo = settings.engine;
    eo.model_dir = model_dir;
    loom_engine *engine = NULL;
    lm_cli_load_result loaded;
    if (lm_cli_engine_load(&eo, stderr, &engine, error, sizeof error, &loaded) != LOOM_OK) {
        fprintf(stderr, "loom run: %s\n", error);
        return 1;
    }
    if (loaded.seconds >= 1.0)
        fprintf(stderr, "loom run: loaded %s in %.1f s%s%s%s\n", model_dir, loaded.seconds, loaded.summary[0] ? " (" : "",
                loaded.summary, loaded.summary[0] ? ")" : "");
    loom_engine_info info;
    loom_engine_describe(engine, &info);
    if (info.max_model_len_note[0]) fprintf(stderr, "loom run: %s\n", info.max_model_len_note);
    lm_error err = {0};
    prompt *prompts = NULL;
    int n_prompts = 0, rc = 1;
    int vocab = loom_engine_vocab_size(engine);
    lm_cli_images images = {0};
    char *text_with_images = NULL;
    for (int i = 0; i < args.images.n; i++)
        if (lm_cli_images_add(&images, args.images.paths[i], &err) != LM_OK) {
            fprintf(stderr, "loom run: %s\n", err.message);
            goto done;
        }
    if (images.n > 0 && text) {
        const char *marker = loom_engine_image_marker(engine);
        if (!marker) {
            fprintf(stderr, "loom run: this model takes no images\n");
            goto done;
        }
        if (!(text_with_images = lm_cli_text_with_images(text, marker, images.n))) {
            fprintf(stderr, "loom run: out of memory\n");
            goto done;
        }
        text = text_with_images;
    }
    if (ids_text) {
        prompts = calloc(1, sizeof *prompts);
        n_prompts = 1;
        if (!prompts || lm_cli_parse_ids(ids_text, vocab, &prompts[0].ids, &prompts[0].n, &err) != LM_OK) {
            fprintf(stderr, "loom run: %s\n", prompts ? err.message : "out of memory");
            goto done;
        }
    } else if (ids_file) {
        if (read_ids_file(ids_file, vocab, &prompts, &n_prompts, &err) != LM_OK) {
            fprintf(stderr, "loom run: %s\n", err.message);
            goto done;
        }
    } else {
        prompts = calloc(1, sizeof *prompts);
        n_prompts = 1;
        if (!prompts || encode_text(model_dir, text, raw, &prompts[0], &err) != LM_OK) {
            fprintf(stderr, "loom run: %s\n", prompts ? err.message : "out of memory");
            goto done;
        }
    }
    bool show_text = text && !print_ids;
    if (concurrency <= 0 || concurrency > n_prompts) concurrency = n_prompts;

    /* Outputs are kept per prompt and printed in input order. */
    char **lines = calloc((size_t)n_prompts, sizeof *lines);
    loom_request **live = calloc((size_t)n_prompts, sizeof *live);
    if (!lines || !live) {
        fprintf(stderr, "loom run: out of memory\n");
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
                fprintf(stderr, "loom run: prompt %d: %s\n", next + 1, error);
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
                fprintf(stderr, "loom run: prompt %d: %s\n", finished + 1, ev.error);
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
