/* Log lines for people watching a long-running process (loom serve): one
 * line each on the log's stream (stderr), "2025-06-01T12:34:56.789Z INFO
 * loom serve: message".  The level and the stream live in an lm_log the
 * caller owns and passes down; there is no global logger. */
#ifndef LOOM_BASE_LOG_H
#define LOOM_BASE_LOG_H

#include <stdbool.h>
#include <stdio.h>

typedef enum { LM_LOG_DEBUG, LM_LOG_INFO, LM_LOG_WARNING, LM_LOG_ERROR } lm_log_level;

#define LM_LOG_LINE_MAX 2048 /* longer messages are cut */

typedef struct {
    lm_log_level level; /* lines below it are dropped */
    FILE *out;          /* NULL: stderr */
    const char *source; /* "loom serve", written after the level */
} lm_log;

/* "debug", "info", "warning" (or "warn"), "error", any case; false if none. */
bool lm_log_level_parse(const char *name, lm_log_level *out);
const char *lm_log_level_name(lm_log_level level);
bool lm_log_enabled(const lm_log *log, lm_log_level level);
/* Writes one line (newlines in the message become spaces) with one write. */
void lm_log_printf(const lm_log *log, lm_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
