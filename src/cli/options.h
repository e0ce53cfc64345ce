/* The command-line parser every loom command uses: options are table
 * entries (names, kind, where the value goes, bounds, help), so adding a
 * flag is one entry and --help is printed from the same tables.
 *
 * A command hands lm_cli_parse groups of entries, each with the struct its
 * offsets point into: the shared model and engine options
 * (engine_options.h), the vLLM / llama-server compatibility entries, and
 * the command's own.  Spellings: --name VALUE, --name=VALUE, and short
 * aliases as llama-server writes them (-m DIR, -np 4).  Usage errors print
 * one line, "loom CMD: what is wrong; see loom CMD --help", and exit 2. */
#ifndef LOOM_CLI_OPTIONS_H
#define LOOM_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    LM_OPT_FLAG,    /* no value: sets a bool */
    LM_OPT_FLAG_OFF, /* no value: clears a bool (the --no-... spelling of a default-on flag) */
    LM_OPT_SET_INT, /* no value: sets an int to the entry's min (a tri-state's on / off spellings) */
    LM_OPT_INT,     /* an int in [min, max] */
    LM_OPT_INT64,   /* an int64_t in [min, max] */
    LM_OPT_FLOAT,   /* a float in [min, max] */
    LM_OPT_STRING,  /* a const char * (pointing into argv) */
    LM_OPT_CUSTOM,  /* parse() reads the value into the field */
    LM_OPT_NOTE,    /* accepted, and loom already does what it asks: prints the note */
    LM_OPT_REFUSED, /* a usage error whose message (the note) names loom's equivalent */
} lm_opt_kind;

#define LM_OPT_MESSAGE_MAX 300

typedef struct {
    const char *names;   /* "--max-num-seqs|-np|--parallel": the first is the one --help shows first */
    lm_opt_kind kind;
    const char *metavar; /* "N"; NULL: takes no value (FLAG, and NOTE / REFUSED flags without one) */
    size_t offset;       /* of the field in the group's struct */
    double min, max;     /* INT, INT64, FLOAT */
    const char *help;    /* --help text ("\n" starts an indented line); the note of NOTE / REFUSED */
    /* CUSTOM: reads value into field; false with a message (without the
     * option's name) when it is bad. */
    bool (*parse)(const char *value, void *field, char *message, size_t size);
    /* The words a value may be, "|"-separated: NOTE accepts these as
     * covered (NULL: any) and refuses another with `refusal`; for the other
     * kinds they are what completion offers (completion.h), the parser
     * checking the value itself. */
    const char *values;
    const char *refusal;
} lm_opt;

typedef struct {
    const char *title; /* the --help heading; NULL: not listed (hidden aliases) */
    const lm_opt *opts;
    size_t n_opts;
    void *base; /* the struct the offsets point into */
} lm_opt_group;

#define LM_CLI_MAX_GROUPS 6

typedef struct {
    const char *command;  /* "serve": messages start "loom serve: " */
    const char *synopsis; /* the first lines of --help ("usage: ...\nWhat it does.\n") */
    lm_opt_group groups[LM_CLI_MAX_GROUPS];
    int n_groups;
    lm_opt_group trailer; /* after the others, in --help too (the compatibility entries); may be empty */
    /* Where a positional argument goes (the model folder); NULL: none taken. */
    const char **positional;
    const char *positional_name; /* "the model folder" for the error of a second one */
} lm_cli_spec;

/* Adds a group (at most LM_CLI_MAX_GROUPS). */
void lm_cli_spec_add(lm_cli_spec *spec, const char *title, const lm_opt *opts, size_t n, void *base);
#define LM_CLI_SPEC_ADD(spec, title, table, base) \
    lm_cli_spec_add((spec), (title), (table), sizeof(table) / sizeof((table)[0]), (base))

/* Parses argv[1..argc).  Returns -1 when the command should go on, 0 after
 * printing --help (stdout), 2 after a usage error (one line on stderr).
 * argv[1] == LM_CLI_COMPLETION_ARG, alone: prints the command's part of
 * the bash completion script instead (completion.h) and returns 0. */
#define LM_CLI_COMPLETION_ARG "--loom-completion-case"
int lm_cli_parse(const lm_cli_spec *spec, int argc, char **argv);

/* --help from the tables. */
void lm_cli_print_help(const lm_cli_spec *spec, FILE *out);

/* A usage error after parsing (a bad combination of options): prints
 * "loom CMD: MESSAGE; see loom CMD --help" and returns 2. */
int lm_cli_usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
