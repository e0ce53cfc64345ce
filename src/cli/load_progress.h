/* Loading's progress on a terminal: once a load has run for a second, one
 * line on stderr redrawn in place (phase, bytes done of the total, rate,
 * time left), cleared when the load ends; nothing when stderr is not a
 * terminal (LOOM_PROGRESS=0: never; =1: from the first byte, terminal or
 * not).  lm_cli_engine_load wraps loom_engine_create with it and says
 * what the load did, for the command's "loaded" line. */
#ifndef LOOM_CLI_LOAD_PROGRESS_H
#define LOOM_CLI_LOAD_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "loom.h"

typedef struct {
    double seconds;    /* the whole load */
    char summary[256]; /* "1.6 GB read at 1.21 GB/s, 1.6 GB placed" (empty: nothing reported) */
} lm_cli_load_result;

/* loom_engine_create(options, out, error, error_size) with the progress
 * line on `tty` (stderr, or NULL for none) when it is a terminal. */
int lm_cli_engine_load(const loom_engine_options *options, FILE *tty, loom_engine **out, char *error,
                       size_t error_size, lm_cli_load_result *result);

/* One load's progress, for a caller that creates the engine itself. */
#define LM_CLI_PROGRESS_PHASES 4
typedef struct {
    const char *name;
    uint64_t done, total;
    double start, last; /* the first and the latest report */
} lm_cli_load_phase;
typedef struct {
    FILE *out; /* NULL: count, draw nothing */
    double start, last_draw;
    double first_draw_s; /* drawn once the load has run this long */
    bool drawn;
    int n_phases, latest;
    lm_cli_load_phase phases[LM_CLI_PROGRESS_PHASES];
    void *mutex; /* a pthread_mutex_t */
} lm_cli_load_progress;

bool lm_cli_load_progress_init(lm_cli_load_progress *p, FILE *out);
/* loom_engine_options.load_progress's shape: ctx is the lm_cli_load_progress. */
void lm_cli_load_progress_add(void *ctx, const char *phase, uint64_t done_bytes, uint64_t more_total_bytes);
/* Clears the line, writes the summary, frees the lock. */
void lm_cli_load_progress_finish(lm_cli_load_progress *p, char *summary, size_t size);

#endif
