/* Sampling defaults from a checkpoint's generation_config.json, as vLLM
 * applies them (--generation-config auto): a request's own fields win, the
 * fields it leaves out take the checkpoint's values. */
#ifndef LOOM_SERVER_GENERATION_DEFAULTS_H
#define LOOM_SERVER_GENERATION_DEFAULTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "loom.h"

typedef struct {
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty;
    float temperature, top_p, min_p, repetition_penalty;
    int top_k;
} lm_generation_defaults;

/* Reads dir/generation_config.json; a folder without one gives no defaults
 * (LM_OK).  Values outside what a request may ask for are refused. */
lm_status lm_generation_defaults_load(const char *dir, lm_generation_defaults *out, lm_error *err);
bool lm_generation_defaults_any(const lm_generation_defaults *d);
/* Sets the fields of s that `request` (a parsed request body; NULL: none)
 * does not name, or names as null. */
void lm_generation_defaults_apply(const lm_generation_defaults *d, const cJSON *request, loom_sampling *s);
/* "temperature 0.6, top_p 0.95, top_k 20" ("none" when empty). */
void lm_generation_defaults_describe(const lm_generation_defaults *d, char *out, size_t size);

#endif
