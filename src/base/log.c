#include "base/log.h"

#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char *const level_names[] = {"DEBUG", "INFO", "WARNING", "ERROR"};

bool lm_log_level_parse(const char *name, lm_log_level *out) {
    for (int i = 0; i < 4; i++)
        if (strcasecmp(name, level_names[i]) == 0) {
            *out = (lm_log_level)i;
            return true;
        }
    if (strcasecmp(name, "warn") == 0) {
        *out = LM_LOG_WARNING;
        return true;
    }
    return false;
}

const char *lm_log_level_name(lm_log_level level) {
    return (unsigned)level < 4 ? level_names[level] : "?";
}

bool lm_log_enabled(const lm_log *log, lm_log_level level) { return log && level >= log->level; }

void lm_log_printf(const lm_log *log, lm_log_level level, const char *fmt, ...) {
    if (!lm_log_enabled(log, level)) return;
    char line[LM_LOG_LINE_MAX];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm utc;
    gmtime_r(&now.tv_sec, &utc);
    size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &utc);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %s %s%s", now.tv_nsec / 1000000,
                          lm_log_level_name(level), log->source ? log->source : "", log->source ? ": " : "");
    if (n < sizeof line) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
        va_end(ap);
        if (m > 0) n += (size_t)m;
    }
    if (n > sizeof line - 2) n = sizeof line - 2;
    for (size_t i = 0; i < n; i++)
        if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
    line[n++] = '\n';
    fwrite(line, 1, n, log->out ? log->out : stderr);
}
