/* Subcommands of the loom binary.  Each cmd_*.c file implements one; main.c
 * lists them.  A command returns the process exit code: 0 success, 1 failure,
 * 2 bad usage. */
#ifndef LOOM_CLI_COMMANDS_H
#define LOOM_CLI_COMMANDS_H

typedef struct {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);
} lm_command;

int cmd_serve_main(int argc, char **argv);
int cmd_run_main(int argc, char **argv);
int cmd_chat_main(int argc, char **argv);
int cmd_logits_main(int argc, char **argv);
int cmd_inspect_main(int argc, char **argv);
int cmd_bench_main(int argc, char **argv);
int cmd_tokenize_main(int argc, char **argv);
int cmd_detokenize_main(int argc, char **argv);
int cmd_render_main(int argc, char **argv);
int cmd_health_main(int argc, char **argv);

#endif
