/* The load's progress line (see load_progress.h). */
#include "cli/load_progress.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"

#define FIRST_DRAW_S 1.0  /* a load shorter than this shows nothing */
#define REDRAW_S 0.1

bool lm_cli_load_progress_init(lm_cli_load_progress *p, FILE *out) {
    memset(p, 0, sizeof *p);
    /* LOOM_PROGRESS: 0 never, 1 from the first byte on any stream; unset
     * (or anything else): on a terminal, once the load has run a second. */
    const char *mode = getenv("LOOM_PROGRESS");
    bool never = mode && strcmp(mode, "0") == 0, always = mode && strcmp(mode, "1") == 0;
    p->out = out && !never && (always || isatty(fileno(out))) ? out : NULL;
    p->first_draw_s = always ? 0.0 : FIRST_DRAW_S;
    p->start = lm_monotonic_seconds();
    p->latest = -1;
    pthread_mutex_t *m = malloc(sizeof *m);
    if (!m || pthread_mutex_init(m, NULL) != 0) {
        free(m);
        return false;
    }
    p->mutex = m;
    return true;
}

static void format_bytes(uint64_t bytes, char *out, size_t size) {
    double b = (double)bytes;
    if (b >= 1e9) snprintf(out, size, "%.1f GB", b / 1e9);
    else snprintf(out, size, "%.0f MB", b / 1e6);
}

/* The line for the latest phase: "loading: reading the checkpoint 3.2 GB
 * of 16.0 GB (20%), 1.10 GB/s, 12 s left". */
static void draw(lm_cli_load_progress *p, double now) {
    const lm_cli_load_phase *ph = &p->phases[p->latest];
    char done[32], total[32], line[256];
    format_bytes(ph->done, done, sizeof done);
    double secs = now - ph->start, rate = secs > 0 ? (double)ph->done / secs : 0;
    int n = snprintf(line, sizeof line, "loading: %s %s", ph->name, done);
    if (ph->total >= ph->done && ph->total > 0 && n > 0 && (size_t)n < sizeof line) {
        format_bytes(ph->total, total, sizeof total);
        n += snprintf(line + n, sizeof line - (size_t)n, " of %s (%.0f%%)", total, 100.0 * (double)ph->done / (double)ph->total);
    }
    if (rate > 0 && n > 0 && (size_t)n < sizeof line) {
        n += snprintf(line + n, sizeof line - (size_t)n, ", %.2f GB/s", rate / 1e9);
        if (ph->total > ph->done && n > 0 && (size_t)n < sizeof line)
            snprintf(line + n, sizeof line - (size_t)n, ", %.0f s left", (double)(ph->total - ph->done) / rate);
    }
    fprintf(p->out, "\r\033[K%s", line);
    fflush(p->out);
    p->drawn = true;
    p->last_draw = now;
}

void lm_cli_load_progress_add(void *ctx, const char *phase, uint64_t done_bytes, uint64_t more_total_bytes) {
    lm_cli_load_progress *p = ctx;
    pthread_mutex_lock(p->mutex);
    int i = 0;
    while (i < p->n_phases && p->phases[i].name != phase) i++;
    double now = lm_monotonic_seconds();
    if (i == p->n_phases && i < LM_CLI_PROGRESS_PHASES) {
        p->phases[i].name = phase;
        p->phases[i].start = now;
        p->n_phases++;
    }
    if (i < p->n_phases) {
        p->phases[i].done += done_bytes;
        p->phases[i].total += more_total_bytes;
        p->phases[i].last = now;
        if (done_bytes) p->latest = i;
    }
    if (p->out && p->latest >= 0 && now - p->start >= p->first_draw_s && now - p->last_draw >= REDRAW_S) draw(p, now);
    pthread_mutex_unlock(p->mutex);
}

void lm_cli_load_progress_finish(lm_cli_load_progress *p, char *summary, size_t size) {
    if (p->drawn) {
        fputs("\r\033[K", p->out);
        fflush(p->out);
    }
    size_t used = 0;
    if (size) summary[0] = '\0';
    for (int i = 0; i < p->n_phases && used < size; i++) {
        char bytes[32];
        format_bytes(p->phases[i].done, bytes, sizeof bytes);
        double secs = p->phases[i].last - p->phases[i].start;
        int n = snprintf(summary + used, size - used, "%s%s: %s", used ? ", " : "", p->phases[i].name, bytes);
        if (n > 0) used += (size_t)n;
        if (secs > 0.05 && used < size) { /* from its first report to its last */
            n = snprintf(summary + used, size - used, " at %.2f GB/s", (double)p->phases[i].done / secs / 1e9);
            if (n > 0) used += (size_t)n;
        }
    }
    pthread_mutex_destroy(p->mutex);
    free(p->mutex);
    p->mutex = NULL;
}

int lm_cli_engine_load(const loom_engine_options *options, FILE *tty, loom_engine **out, char *error,
                       size_t error_size, lm_cli_load_result *result) {
    lm_cli_load_progress progress;
    loom_engine_options o = *options;
    bool counting = lm_cli_load_progress_init(&progress, tty);
    if (counting) {
        o.load_progress = lm_cli_load_progress_add;
        o.load_progress_ctx = &progress;
    }
    double t0 = lm_monotonic_seconds();
    int rc = loom_engine_create(&o, out, error, error_size);
    result->seconds = lm_monotonic_seconds() - t0;
    result->summary[0] = '\0';
    if (counting) lm_cli_load_progress_finish(&progress, result->summary, sizeof result->summary);
    return rc;
}
