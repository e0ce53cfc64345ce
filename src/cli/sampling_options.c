#include "cli/sampling_options.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define PARAM(field) offsetof(loom_request_params, field)

static bool parse_seed(const char *value, void *field, char *message, size_t size) {
    loom_sampling *s = field;
    char *end;
    long long v = strtoll(value, &end, 10);
    if (end == value || *end || v < 0) {
        snprintf(message, size, "expects an integer >= 0, got '%.40s'", value);
        return false;
    }
    s->has_seed = true;
    s->seed = (uint64_t)v;
    return true;
}

static const lm_opt sampling_opts[] = {
    {"--max-tokens", LM_OPT_INT, "N", PARAM(max_tokens), 1, 1 << 20, "tokens to generate (default: run 16, chat 512)", NULL, NULL,
     NULL},
    {"--temperature|--temp", LM_OPT_FLOAT, "T", PARAM(sampling.temperature), 0, 100, "0 = greedy", NULL, NULL,
     NULL},
    {"--top-p", LM_OPT_FLOAT, "P", PARAM(sampling.top_p), 0, 1, "nucleus sampling (1 = off)", NULL, NULL, NULL},
    {"--top-k", LM_OPT_INT, "K", PARAM(sampling.top_k), -1, 1 << 24, "(0 or -1 = off)", NULL, NULL, NULL},
    {"--min-p", LM_OPT_FLOAT, "P", PARAM(sampling.min_p), 0, 1, "(0 = off)", NULL, NULL, NULL},
    {"--repetition-penalty|--repeat-penalty", LM_OPT_FLOAT, "R", PARAM(sampling.repetition_penalty), 0.01, 100,
     "(1 = off)", NULL, NULL, NULL},
    {"--seed|-s", LM_OPT_CUSTOM, "S", PARAM(sampling), 0, 0, "reproducible sampling", parse_seed, NULL, NULL},
    {"--ignore-eos", LM_OPT_FLAG, NULL, PARAM(ignore_eos), 0, 0, "keep going past an end-of-sequence token", NULL,
     NULL, NULL},
};

void lm_cli_spec_add_sampling(lm_cli_spec *spec, loom_request_params *params) {
    LM_CLI_SPEC_ADD(spec, "Sampling", sampling_opts, params);
}

void lm_cli_describe_sampling(const loom_request_params *p, char *out, size_t size) {
    const loom_sampling *s = &p->sampling;
    int n = snprintf(out, size, "temperature %g, top-p %g, top-k %d, min-p %g, repetition penalty %g, max tokens %d",
                     s->temperature, s->top_p, s->top_k, s->min_p, s->repetition_penalty, p->max_tokens);
    if (s->has_seed && n > 0 && (size_t)n < size) snprintf(out + n, size - (size_t)n, ", seed %llu", (unsigned long long)s->seed);
}
