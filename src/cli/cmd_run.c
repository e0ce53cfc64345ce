/* loom run --model DIR --ids 1,2,3 --max-tokens N --temperature 0 --print-ids
 * Greedy generation from token ids, one sequence. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "engine/sequence_runner.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: loom run --model DIR --ids 1,2,3 [options]\n"
            "Generates a continuation of the prompt token ids.\n\n"
            "  --model DIR        Hugging Face checkpoint folder\n"
            "  --ids LIST         comma-separated prompt token ids\n"
            "  --max-tokens N     tokens to generate (default 16)\n"
            "  --temperature T    sampling temperature; only 0 (greedy) for now\n"
            "  --ignore-eos       keep going after an end-of-sequence token\n"
            "  --print-ids        print the generated ids, comma-separated, on one line\n"
            "  --threads N        CPU threads (default: all cores)\n"
            "  --mmap             map the weights instead of reading them into memory\n");
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static bool is_eos(const lm_qwen35_config *c, int id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] == id) return true;
    return false;
}

int cmd_run_main(int argc, char **argv) {
    static const struct option options[] = {
        {"model", required_argument, 0, 'm'},      {"ids", required_argument, 0, 'i'},
        {"max-tokens", required_argument, 0, 'n'}, {"temperature", required_argument, 0, 'T'},
        {"ignore-eos", no_argument, 0, 'e'},       {"print-ids", no_argument, 0, 'p'},
        {"threads", required_argument, 0, 't'},    {"mmap", no_argument, 0, 'M'},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0},
    };
    const char *model_dir = NULL, *ids_text = NULL;
    long max_tokens = 16, threads = 0;
    bool ignore_eos = false, print_ids = false;
    lm_load_mode mode = LM_LOAD_READ;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'm': model_dir = optarg; break;
        case 'i': ids_text = optarg; break;
        case 'n': if (!lm_cli_parse_int("--max-tokens", optarg, 0, 1 << 20, &max_tokens)) return 2; break;
        case 'T':
            if (strtod(optarg, NULL) != 0.0) {
                fprintf(stderr, "loom: only --temperature 0 (greedy) is supported by `loom run` so far\n");
                return 2;
            }
            break;
        case 'e': ignore_eos = true; break;
        case 'p': print_ids = true; break;
        case 't': if (!lm_cli_parse_int("--threads", optarg, 1, 1024, &threads)) return 2; break;
        case 'M': mode = LM_LOAD_MMAP; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model_dir || !ids_text || optind != argc) {
        usage(stderr);
        return 2;
    }
    lm_error err = {0};
    lm_loaded_model m;
    if (lm_loaded_model_open(&m, model_dir, mode, (int)threads, &err) != LM_OK) {
        fprintf(stderr, "loom: %s\n", err.message);
        return 1;
    }
    int rc = 1, n = 0;
    int32_t *ids = NULL;
    float *logits = NULL;
    lm_sequence_runner runner = {0};
    int V = m.config.vocab_size;
    if (lm_cli_parse_ids(ids_text, V, &ids, &n, &err) != LM_OK) goto done;
    logits = malloc(sizeof(float) * (size_t)V);
    if (!logits) {
        lm_fail(&err, LM_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (lm_sequence_runner_init(&runner, &m.model, m.backend, n + (int)max_tokens, &err) != LM_OK)
        goto done;
    if (max_tokens > 0 && lm_sequence_runner_feed(&runner, ids, n, false, logits, NULL, NULL, &err) != LM_OK)
        goto done;
    for (long i = 0; i < max_tokens; i++) {
        int32_t next = argmax(logits, V);
        printf("%s%d", i ? "," : "", next);
        fflush(stdout);
        if (!ignore_eos && is_eos(&m.config, next)) break;
        if (i + 1 < max_tokens &&
            lm_sequence_runner_feed(&runner, &next, 1, false, logits, NULL, NULL, &err) != LM_OK) {
            printf("\n");
            goto done;
        }
    }
    printf("\n");
    rc = 0;
done:
    if (rc) fprintf(stderr, "loom: %s\n", err.message);
    (void)print_ids; /* ids are the only output form until the tokenizer is wired in */
    lm_sequence_runner_free(&runner);
    free(logits);
    free(ids);
    lm_loaded_model_close(&m);
    return rc;
}
