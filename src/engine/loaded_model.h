/* A model ready to run: config, checkpoint (or random weights), weights and
 * a backend.  Shared by the engine and the single-sequence commands. */
#ifndef LOOM_ENGINE_LOADED_MODEL_H
#define LOOM_ENGINE_LOADED_MODEL_H

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
} lm_loaded_model;

/* Loads config.json and the checkpoint of dir and builds the model. */
/* options: NULL for the defaults (MTP norm convention detected). */
lm_status lm_loaded_model_open(lm_loaded_model *m, const char *dir, lm_load_mode mode, int threads,
                               const lm_qwen35_load_options *options, lm_error *err);
/* A model of a config.json's shape with random bf16 weights. */
lm_status lm_loaded_model_random(lm_loaded_model *m, const char *config_path, uint64_t seed,
                                 int threads, lm_error *err);
void lm_loaded_model_close(lm_loaded_model *m);

#endif
