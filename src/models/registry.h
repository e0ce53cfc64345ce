/* Which family a checkpoint is, and opening it: the registry reads
 * config.json's model_type (and architectures), finds the family that
 * claims it, and lets the family parse its own config and load its weights.
 * Adding a family = its files in models/<name>/, one of which defines
 * `const lm_model_family lm_<name>_family`, and one line X(<name>) in
 * registry.c's LM_MODEL_FAMILIES. */
#ifndef LOOM_MODELS_REGISTRY_H
#define LOOM_MODELS_REGISTRY_H

#include "io/gguf.h"
#include "models/model.h"

typedef struct {
    const char *name; /* "qwen3_5" */
    /* config.json model_type values it loads, NULL-terminated */
    const char *const *model_types;
    /* Opens the model of `config_path` (`dir`'s checkpoint, or random
     * weights when options->random_weights; dir is then NULL).  options is
     * never NULL: the registry passes its defaults. */
    lm_status (*open)(const char *config_path, const char *dir, const lm_model_load_options *options,
                      lm_backend *backend, lm_model **out, lm_error *err);
    /* GGUF general.architecture values it loads (NULL-terminated; NULL:
     * none), and the open of such a file, which takes g. */
    const char *const *gguf_architectures;
    lm_status (*open_gguf)(lm_gguf *g, const lm_model_load_options *options, lm_backend *backend, lm_model **out,
                           lm_error *err);
} lm_model_family;

/* The checkpoint folder dir (config.json + safetensors), or a GGUF file
 * (dir a .gguf file, or a folder holding exactly one and no config.json:
 * io/gguf.h, lm_gguf_locate), opened by the family that claims its
 * general.architecture. */
lm_status lm_model_open(const char *dir, const lm_model_load_options *options, lm_backend *backend,
                        lm_model **out, lm_error *err);
/* Random weights of the shape of a config.json (benchmarks), Linear
 * layers made int8 when quantize_int8 (as --quantize int8 makes them). */
lm_status lm_model_open_random(const char *config_path, uint64_t seed, bool quantize_int8,
                               lm_backend *backend, lm_model **out, lm_error *err);
/* The same with every load option (random_weights is taken as set):
 * a tensor-parallel rank's share of random weights. */
lm_status lm_model_open_random_with(const char *config_path, const lm_model_load_options *options,
                                    lm_backend *backend, lm_model **out, lm_error *err);
/* The family that loads model_type, or NULL. */
const lm_model_family *lm_model_family_for(const char *model_type);

#endif
