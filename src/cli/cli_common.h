/* Helpers shared by the subcommands: parsing token ids, reading stdin, opening a
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

/* A model for `loom logits` / `bench` (no engine): the checkpoint folder
 * `dir`, or random weights of `random_config`'s shape when dir is NULL. */
typedef struct {
    const char *dir, *random_config;
    uint64_t seed;
    const char *backend; /* NULL: cpu */
    const char *compute; /* "f32" / "bf16" (lm_backend_set_compute); NULL = f32 */
    int threads;
    int tensor_parallel_size; /* > 1: split over that many ranks (models/tensor_parallel.h) */
    lm_model_load_options load;
} lm_cli_model_spec;
lm_status lm_cli_open_model(const lm_cli_model_spec *spec, lm_backend **backend, lm_model **model,
                            lm_error *err);
void lm_cli_close_model(lm_backend *backend, lm_model *model);

/* All of stdin, malloc'd (not NUL-terminated); NULL when it cannot be read
 * or holds more than max bytes. */
char *lm_cli_read_stdin(size_t max, size_t *len);

#endif
