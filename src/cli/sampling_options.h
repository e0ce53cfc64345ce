/* The sampling options of the commands that generate (run, chat): one
 * table over loom_request_params, so both spell and bound them alike. */
#ifndef LOOM_CLI_SAMPLING_OPTIONS_H
#define LOOM_CLI_SAMPLING_OPTIONS_H

#include "cli/options.h"
#include "loom.h"

/* Adds the "Sampling" group, writing into params. */
void lm_cli_spec_add_sampling(lm_cli_spec *spec, loom_request_params *params);

/* "temperature 0.7, top-p 0.9, top-k 40, min-p 0, repetition penalty 1.1,
 * max tokens 512, seed 3" (what loom chat shows). */
void lm_cli_describe_sampling(const loom_request_params *params, char *out, size_t size);

#endif
