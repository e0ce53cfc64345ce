#include "cli/sampling_options.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"

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
    {"--temperature|--temp", LM_OPT_FLOAT, "T", PARAM(sampling.temperature), 0, 100,
     "0 = greedy; default: generation_config.json's, else 1", NULL, NULL, NULL},
    {"--top-p", LM_OPT_FLOAT, "P", PARAM(sampling.top_p), 0, 1, "nucleus sampling, 1 = off; default: generation_config.json's,\nelse 1", NULL, NULL,
     NULL},
    {"--top-k", LM_OPT_INT, "K", PARAM(sampling.top_k), -1, 1 << 24, "0 or -1 = off; default: generation_config.json's, else off", NULL, NULL, NULL},
    {"--min-p", LM_OPT_FLOAT, "P", PARAM(sampling.min_p), 0, 1, "0 = off; default: generation_config.json's, else 0", NULL, NULL, NULL},
    {"--repetition-penalty|--repeat-penalty", LM_OPT_FLOAT, "R", PARAM(sampling.repetition_penalty), 0.01, 100,
     "1 = off; default: generation_config.json's, else 1", NULL, NULL, NULL},
    {"--seed|-s", LM_OPT_CUSTOM, "S", PARAM(sampling), 0, 0, "reproducible sampling", parse_seed, NULL, NULL},
    {"--ignore-eos", LM_OPT_FLAG, NULL, PARAM(ignore_eos), 0, 0, "keep going past an end-of-sequence token", NULL,
     NULL, NULL},
};

static const lm_opt source_opts[] = {
    {"--generation-config", LM_OPT_STRING, "auto|vllm|DIR", offsetof(lm_cli_sampling_source, generation_config), 0,
     0,
     "where the defaults of the sampling settings come from (for what the\nflags, or a request, leave out): auto "
     "(default) the model's\ngeneration_config.json, DIR another folder's, vllm none; what it\nleaves out is loom's "
     "fallback: temperature 1, top-p 1, top-k off,\nmin-p 0, repetition penalty 1",
     NULL, "auto|vllm", NULL},
};

/* Unset: not given on the command line yet. */
static void mark_unset(loom_sampling *s) {
    s->temperature = s->top_p = s->min_p = s->repetition_penalty = NAN;
    s->top_k = LM_CLI_UNSET_TOP_K;
}

void lm_cli_spec_add_sampling(lm_cli_spec *spec, loom_request_params *params) {
    mark_unset(&params->sampling);
    LM_CLI_SPEC_ADD(spec, "Sampling", sampling_opts, params);
}

void lm_cli_spec_add_sampling_source(lm_cli_spec *spec, lm_cli_sampling_source *source) {
    LM_CLI_SPEC_ADD(spec, "Sampling defaults", source_opts, source);
}

lm_status lm_cli_load_sampling_defaults(const lm_cli_sampling_source *source, const char *model_dir,
                                        lm_generation_defaults *out, char *why, size_t why_size, lm_error *err) {
    memset(out, 0, sizeof *out);
    const char *choice = source && source->generation_config ? source->generation_config : "auto";
    if (strcmp(choice, "vllm") == 0) {
        snprintf(why, why_size, "--generation-config vllm, so loom's fallback");
        return LM_OK;
    }
    if (strcmp(choice, "auto") == 0 && !model_dir) {
        snprintf(why, why_size, "no model folder, so loom's fallback");
        return LM_OK;
    }
    const char *dir = strcmp(choice, "auto") == 0 ? model_dir : choice;
    lm_status st = lm_generation_defaults_load(dir, out, err);
    if (st != LM_OK) return lm_fail_context(err, "--generation-config %s", choice);
    char list[200];
    lm_generation_defaults_describe(out, list, sizeof list);
    bool all = out->has_temperature && out->has_top_p && out->has_top_k && out->has_min_p && out->has_repetition_penalty;
    if (lm_generation_defaults_any(out))
        snprintf(why, why_size, "from %s/generation_config.json: %s%s", dir, list, all ? "" : "; the rest loom's fallback");
    else
        snprintf(why, why_size, "none in %s/generation_config.json, so loom's fallback", dir);
    return LM_OK;
}

void lm_cli_default_sampling(const lm_generation_defaults *g, loom_sampling *out) {
    lm_sampling_defaults(out);
    lm_generation_defaults_apply(g, NULL, out);
}

void lm_cli_settle_sampling(loom_sampling *s, const lm_generation_defaults *g) {
    loom_sampling fallback;
    lm_cli_default_sampling(g, &fallback);
    if (isnan(s->temperature)) s->temperature = fallback.temperature;
    if (isnan(s->top_p)) s->top_p = fallback.top_p;
    if (s->top_k == LM_CLI_UNSET_TOP_K) s->top_k = fallback.top_k;
    if (isnan(s->min_p)) s->min_p = fallback.min_p;
    if (isnan(s->repetition_penalty)) s->repetition_penalty = fallback.repetition_penalty;
}

/* "%g", or "the server's" for a field still unset. */
static const char *value_text(float v, char *buf, size_t size) {
    if (!lm_cli_sampling_is_set(v)) return "the server's";
    snprintf(buf, size, "%g", v);
    return buf;
}

void lm_cli_describe_sampling_values(const loom_sampling *s, char *out, size_t size) {
    char t[32], p[32], k[32], m[32], r[32];
    if (s->top_k == LM_CLI_UNSET_TOP_K) snprintf(k, sizeof k, "the server's");
    else snprintf(k, sizeof k, "%d", s->top_k);
    snprintf(out, size, "temperature %s, top-p %s, top-k %s, min-p %s, repetition penalty %s",
             value_text(s->temperature, t, sizeof t), value_text(s->top_p, p, sizeof p), k,
             value_text(s->min_p, m, sizeof m), value_text(s->repetition_penalty, r, sizeof r));
}

void lm_cli_describe_sampling(const loom_request_params *p, char *out, size_t size) {
    lm_cli_describe_sampling_values(&p->sampling, out, size);
    size_t n = strlen(out);
    if (n < size) snprintf(out + n, size - n, ", max tokens %d", p->max_tokens);
    n = strlen(out);
    if (p->sampling.has_seed && n < size)
        snprintf(out + n, size - n, ", seed %llu", (unsigned long long)p->sampling.seed);
}
