/* The table-driven option parser (see options.h). */
#include "cli/options.h"

#include "cli/completion.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HELP_COLUMN 28
#define HELP_WIDTH 79

int lm_cli_usage_error(const char *command, const char *fmt, ...) {
    char message[LM_OPT_MESSAGE_MAX + 200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fprintf(stderr, "loom %s: %s; see loom %s --help\n", command, message, command);
    return 2;
}

/* True if `name` is one of the "|"-separated spellings in `names`. */
static bool names_match(const char *names, const char *name, size_t len) {
    for (const char *p = names; *p;) {
        const char *end = strchr(p, '|');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, name, len) == 0) return true;
        if (!end) break;
        p = end + 1;
    }
    return false;
}

static const lm_opt *find_in(const lm_opt_group *group, const char *name, size_t len, void **base) {
    for (size_t i = 0; i < group->n_opts; i++)
        if (names_match(group->opts[i].names, name, len)) {
            *base = group->base;
            return &group->opts[i];
        }
    return NULL;
}

static const lm_opt *find_option(const lm_cli_spec *spec, const char *name, size_t len, void **base) {
    for (int g = 0; g < spec->n_groups; g++) {
        const lm_opt *o = find_in(&spec->groups[g], name, len, base);
        if (o) return o;
    }
    return find_in(&spec->trailer, name, len, base);
}

static bool parse_number(const char *value, bool integer, double *out) {
    char *end;
    errno = 0;
    if (integer) {
        long long v = strtoll(value, &end, 10);
        *out = (double)v;
    } else {
        *out = strtod(value, &end);
    }
    return end != value && !*end && !errno && isfinite(*out);
}

/* Stores value into the option's field; false with a message when bad. */
static bool apply(const lm_opt *o, void *base, const char *typed, const char *value, char *message, size_t size) {
    void *field = (char *)base + o->offset;
    double v;
    switch (o->kind) {
    case LM_OPT_FLAG: *(bool *)field = true; return true;
    case LM_OPT_FLAG_OFF: *(bool *)field = false; return true;
    case LM_OPT_SET_INT: *(int *)field = (int)o->min; return true;
    case LM_OPT_STRING: *(const char **)field = value; return true;
    case LM_OPT_INT:
    case LM_OPT_INT64:
        if (!parse_number(value, true, &v) || v < o->min || v > o->max) {
            snprintf(message, size, "%s expects an integer in [%.0f, %.0f], got '%.60s'", typed, o->min, o->max,
                     value);
            return false;
        }
        if (o->kind == LM_OPT_INT) *(int *)field = (int)v;
        else *(int64_t *)field = (int64_t)v;
        return true;
    case LM_OPT_FLOAT:
        if (!parse_number(value, false, &v) || !(v >= o->min && v <= o->max)) {
            snprintf(message, size, "%s must be a number in [%g, %g], got '%.60s'", typed, o->min, o->max, value);
            return false;
        }
        *(float *)field = (float)v;
        return true;
    case LM_OPT_CUSTOM: {
        char why[LM_OPT_MESSAGE_MAX] = "";
        if (o->parse(value, field, why, sizeof why)) return true;
        snprintf(message, size, "%s: %s", typed, why);
        return false;
    }
    case LM_OPT_NOTE:
        if (o->values && value && !names_match(o->values, value, strlen(value))) {
            snprintf(message, size, "%s %.60s: %s", typed, value, o->refusal ? o->refusal : "not supported");
            return false;
        }
        return true;
    case LM_OPT_REFUSED: snprintf(message, size, "%s is not a loom option: %s", typed, o->help); return false;
    }
    return false;
}

void lm_cli_spec_add(lm_cli_spec *spec, const char *title, const lm_opt *opts, size_t n, void *base) {
    if (spec->n_groups < LM_CLI_MAX_GROUPS) spec->groups[spec->n_groups++] = (lm_opt_group){title, opts, n, base};
}

int lm_cli_parse(const lm_cli_spec *spec, int argc, char **argv) {
    const char *cmd = spec->command;
    if (argc == 2 && strcmp(argv[1], LM_CLI_COMPLETION_ARG) == 0) {
        lm_cli_print_completion_case(spec, stdout);
        return 0;
    }
    bool positional_only = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!positional_only && (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)) {
            lm_cli_print_help(spec, stdout);
            return 0;
        }
        if (!positional_only && strcmp(arg, "--") == 0) {
            positional_only = true;
            continue;
        }
        if (positional_only || arg[0] != '-' || !arg[1]) {
            if (!spec->positional) return lm_cli_usage_error(cmd, "unexpected argument '%.100s'", arg);
            if (*spec->positional)
                return lm_cli_usage_error(cmd, "unexpected argument '%.100s' (%s is already '%.100s')", arg,
                                          spec->positional_name ? spec->positional_name : "the positional argument",
                                          *spec->positional);
            *spec->positional = arg;
            continue;
        }
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        char typed[80];
        snprintf(typed, sizeof typed, "%.*s", (int)(name_len < 79 ? name_len : 79), arg);
        void *base = NULL;
        const lm_opt *o = find_option(spec, arg, name_len, &base);
        if (!o) return lm_cli_usage_error(cmd, "unknown option '%s'", typed);
        const char *value = NULL;
        if (o->metavar) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else return lm_cli_usage_error(cmd, "%s needs a value (%s)", typed, o->metavar);
        } else if (eq) {
            return lm_cli_usage_error(cmd, "%s takes no value", typed);
        }
        char message[LM_OPT_MESSAGE_MAX + 100];
        if (!apply(o, base, typed, value, message, sizeof message)) return lm_cli_usage_error(cmd, "%s", message);
        if (o->kind == LM_OPT_NOTE) fprintf(stderr, "loom %s: %s: %s\n", cmd, typed, o->help);
    }
    return -1;
}

/* "--max-num-seqs N, -np, --parallel" */
static int option_label(const lm_opt *o, char *out, size_t size) {
    size_t used = 0;
    bool first = true;
    for (const char *p = o->names; *p && used < size;) {
        const char *end = strchr(p, '|');
        int n = end ? (int)(end - p) : (int)strlen(p);
        int w = snprintf(out + used, size - used, "%s%.*s%s%s", first ? "" : ", ", n, p,
                         first && o->metavar ? " " : "", first && o->metavar ? o->metavar : "");
        if (w < 0) break;
        used += (size_t)w;
        first = false;
        if (!end) break;
        p = end + 1;
    }
    return (int)(used < size ? used : size - 1);
}

/* Prints help from column `column` (already reached), word-wrapped before
 * HELP_WIDTH; a "\n" in help only separates words (the tables' line breaks
 * are hints for reading the source). */
static void print_help_text(const char *help, int column, FILE *out) {
    int at = column;
    bool first = true;
    for (const char *p = help; *p;) {
        while (*p == ' ' || *p == '\n') p++;
        size_t n = strcspn(p, " \n");
        if (!n) break;
        if (!first && at + 1 + (int)n > HELP_WIDTH) {
            fprintf(out, "\n%*s", HELP_COLUMN, "");
            at = HELP_COLUMN;
        } else if (!first) {
            fputc(' ', out);
            at++;
        }
        fprintf(out, "%.*s", (int)n, p);
        at += (int)n;
        first = false;
        p += n;
    }
    fputc('\n', out);
}

static void print_group(const lm_opt_group *group, FILE *out) {
    fprintf(out, "\n%s:\n", group->title);
    for (size_t i = 0; i < group->n_opts; i++) {
        const lm_opt *o = &group->opts[i];
        char label[160];
        int n = option_label(o, label, sizeof label);
        if (n + 2 >= HELP_COLUMN - 1) fprintf(out, "  %s\n%*s", label, HELP_COLUMN, "");
        else fprintf(out, "  %-*s", HELP_COLUMN - 2, label);
        print_help_text(o->help, HELP_COLUMN, out);
    }
}

void lm_cli_print_help(const lm_cli_spec *spec, FILE *out) {
    fputs(spec->synopsis, out);
    for (int g = 0; g < spec->n_groups; g++)
        if (spec->groups[g].title) print_group(&spec->groups[g], out);
    if (spec->trailer.title) print_group(&spec->trailer, out);
}
