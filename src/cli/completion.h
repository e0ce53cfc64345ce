/* `loom completion bash`: a bash completion script made from the option
 * tables themselves, so it offers exactly the flags each command's parser
 * takes (the old script scraped --help and offered words of its prose,
 * such as --local-dir and --template, and the refused vLLM spellings).
 *
 * Each command is asked for its part by running its main with the one
 * argument LM_CLI_COMPLETION_ARG: lm_cli_parse then prints the command's
 * case arm from its spec (lm_cli_print_completion_case) and returns 0, so
 * the tables stay where they are, in each command's file.  A flag's value
 * is completed from the option's entry: its `values` words (--device: cpu
 * ref cuda), folders when the metavar names a DIR, files for a FILE, else
 * nothing; a word that is no flag completes as the model folder. */
#ifndef LOOM_CLI_COMPLETION_H
#define LOOM_CLI_COMPLETION_H

#include <stddef.h>
#include <stdio.h>

#include "cli/commands.h"
#include "cli/options.h"

/* The case arm of one command: "    serve)\n ... ;;\n". */
void lm_cli_print_completion_case(const lm_cli_spec *spec, FILE *out);

/* loom completion SHELL: the script on stdout (only bash); 0, or 2 after
 * a usage error. */
int lm_cli_completion_main(int argc, char **argv, const lm_command *commands, size_t n_commands);

#endif
