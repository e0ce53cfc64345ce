/* The sampling options and defaults of the commands that generate: one
 * table over loom_request_params (run, chat), so both spell and bound them
 * alike, and one rule for the values a command starts from, shared with
 * serve: the flags (serve: a request's own fields), else the checkpoint's
 * generation_config.json (--generation-config), else loom's fallback,
 * lm_sampling_defaults (temperature 1, top-p 1, top-k off, min-p 0,
 * repetition penalty 1: OpenAI's and vLLM's defaults). */
#ifndef LOOM_CLI_SAMPLING_OPTIONS_H
#define LOOM_CLI_SAMPLING_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "cli/options.h"
#include "loom.h"
#include "server/generation_defaults.h"

/* Adds the "Sampling" group, writing into params; the sampling fields it
 * sets are marked unset first (NaN, top_k LM_CLI_UNSET_TOP_K), and
 * lm_cli_settle_sampling fills those no flag set (chat --url leaves them
 * to the server). */
void lm_cli_spec_add_sampling(lm_cli_spec *spec, loom_request_params *params);
#define LM_CLI_UNSET_TOP_K INT32_MIN
static inline bool lm_cli_sampling_is_set(float value) { return value == value; /* not NaN */ }

/* --generation-config auto|vllm|DIR (serve, run, chat). */
typedef struct {
    const char *generation_config; /* NULL: auto */
} lm_cli_sampling_source;
void lm_cli_spec_add_sampling_source(lm_cli_spec *spec, lm_cli_sampling_source *source);

/* The generation_config.json defaults `source` names (auto: model_dir's,
 * none when model_dir is NULL; vllm: none; else that folder's) into out,
 * and a phrase for where the values come from into why ("from
 * DIR/generation_config.json: temperature 0.6, top_k 20; the rest loom's
 * fallback").  Fails on a generation_config.json that cannot be read or
 * holds a value out of range. */
lm_status lm_cli_load_sampling_defaults(const lm_cli_sampling_source *source, const char *model_dir,
                                        lm_generation_defaults *out, char *why, size_t why_size, lm_error *err);

/* What a generation starts from when nothing else is given: the fallback
 * with g's fields (NULL: none) over it.  serve's requests start here too
 * (loom_request_params_default, then g where the request is silent). */
void lm_cli_default_sampling(const lm_generation_defaults *g, loom_sampling *out);

/* Fills the sampling fields no flag set: generation_config's (g; NULL:
 * none), else the fallback. */
void lm_cli_settle_sampling(loom_sampling *s, const lm_generation_defaults *g);

/* "temperature 0.7, top-p 0.9, top-k 40, min-p 0, repetition penalty 1.1"
 * (serve's summary, chat's /settings); a field still unset reads
 * "the server's" (chat --url). */
void lm_cli_describe_sampling_values(const loom_sampling *s, char *out, size_t size);

/* The same, then ", max tokens 512" and the seed if one is set (what loom
 * chat shows). */
void lm_cli_describe_sampling(const loom_request_params *params, char *out, size_t size);

#endif
