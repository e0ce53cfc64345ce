/* Helpers shared by the subcommands: loading a model folder, parsing ids. */
#ifndef LOOM_CLI_COMMON_H
#define LOOM_CLI_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "io/checkpoint.h"
#include "models/qwen35.h"
#include "ops/ops.h"

typedef struct {
    lm_qwen35_config config;
    lm_checkpoint *checkpoint; /* NULL for random weights */
    lm_qwen35_model model;
    lm_backend *backend;
    bool model_loaded;
} lm_cli_model;

/* Loads config.json and the checkpoint of dir and builds the model. */
lm_status lm_cli_model_open(lm_cli_model *m, const char *dir, lm_load_mode mode, int threads,
                            lm_error *err);
/* A model of a config.json's shape with random bf16 weights. */
lm_status lm_cli_model_random(lm_cli_model *m, const char *config_path, uint64_t seed, int threads,
                              lm_error *err);
void lm_cli_model_close(lm_cli_model *m);

/* Parses "1,2,3" into a malloc'd array; ids must be in [0, vocab). */
lm_status lm_cli_parse_ids(const char *text, int vocab, int32_t **ids, int *n, lm_error *err);

/* Parses a positive integer option value; prints an error and returns false if bad. */
bool lm_cli_parse_int(const char *option, const char *value, long min, long max, long *out);

#endif
