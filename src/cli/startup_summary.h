/* The lines `loom serve` logs once the model is loaded: what the model is,
 * what it cost to load, how the engine is sized and why. */
#ifndef LOOM_CLI_STARTUP_SUMMARY_H
#define LOOM_CLI_STARTUP_SUMMARY_H

#include <stdint.h>

#include "base/log.h"
#include "loom.h"

typedef struct {
    const char *model;              /* the folder, or the config of random weights */
    const char *weight_dtypes;      /* "BF16 x170, F32 x12" ("" when unknown) */
    double load_seconds;
    const char *load_detail;        /* lm_cli_load_result's summary, or NULL */
    const loom_engine_info *engine;
    const char *model_len_why;      /* lm_cli_resolve_model_len's phrase */
    int speculative_asked;          /* --speculative-tokens */
    const char *sampling_defaults;  /* "generation_config.json: temperature 0.6, ..." */
} lm_startup_facts;

void lm_cli_log_startup(const lm_log *log, const lm_startup_facts *facts);

/* Resident memory of this process in bytes (0 if unknown). */
uint64_t lm_cli_resident_bytes(void);

#endif
