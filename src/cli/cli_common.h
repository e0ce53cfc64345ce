/* Helpers shared by the subcommands: parsing ids and numbers, opening a
 * model on a backend for the commands that run one without the engine. */
#ifndef LOOM_CLI_COMMON_H
#define LOOM_CLI_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/model.h"
#include "ops/ops.h"

/* Parses "1,2,3" into a malloc'd array; ids must be in [0, vocab). */
lm_status lm_cli_parse_ids(const char *text, int vocab, int32_t **ids, int *n, lm_error *err);

/* Parses a positive integer option value; prints an error and returns false if bad. */
bool lm_cli_parse_int(const char *option, const char *value, long min, long max, long *out);

/* Parses a number in [min, max]; prints an error and returns false if bad. */
bool lm_cli_parse_float(const char *option, const char *value, double min, double max, float *out);

/* Parses --mtp-norms auto|zero-centred|shifted; prints an error and returns false if bad. */
bool lm_cli_parse_mtp_norms(const char *value, lm_mtp_norms *out);

/* Parses --backend NAME (one of lm_backend_names()); prints an error and
 * returns false if there is no such backend. */
bool lm_cli_parse_backend(const char *value, const char **out);

/* A model for `loom logits` / `bench` (no engine): the checkpoint folder
 * `dir`, or random weights of `random_config`'s shape when dir is NULL. */
typedef struct {
    const char *dir, *random_config;
    uint64_t seed;
    const char *backend; /* NULL: cpu */
    int threads;
    lm_model_load_options load;
} lm_cli_model_spec;
lm_status lm_cli_open_model(const lm_cli_model_spec *spec, lm_backend **backend, lm_model **model,
                            lm_error *err);
void lm_cli_close_model(lm_backend *backend, lm_model *model);

/* The context limit the engine uses by default for config.json at
 * `config_path`: max_position_embeddings (top level or text_config), capped
 * at 32768; 4096 if it cannot be read. */
int lm_cli_model_len(const char *config_path);

/* All of stdin, malloc'd (not NUL-terminated); NULL when it cannot be read
 * or holds more than max bytes. */
char *lm_cli_read_stdin(size_t max, size_t *len);

#endif
