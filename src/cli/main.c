/* loom's command line: one subcommand per file, dispatched from this table. */
#include <stdio.h>
#include <string.h>

#include "base/build_info.h"
#include "cli/commands.h"
#include "cli/completion.h"

static const lm_command commands[] = {
    {"serve", "run the OpenAI-compatible HTTP server", cmd_serve_main},
    {"run", "generate from token ids or a prompt", cmd_run_main},
    {"chat", "chat with the model in the terminal", cmd_chat_main},
    {"logits", "write the logits of every prompt position", cmd_logits_main},
    {"inspect", "describe a checkpoint folder", cmd_inspect_main},
    {"bench", "measure prefill and decode speed", cmd_bench_main},
    {"tokenize", "text on stdin -> token ids", cmd_tokenize_main},
    {"detokenize", "token ids on stdin -> text", cmd_detokenize_main},
    {"render", "render a chat template (JSON on stdin)", cmd_render_main},
    {"health", "ask a running server for GET /health (exit 0: healthy)", cmd_health_main},
};

/* 0, or 1 when $LOOM_CPU_KERNELS names a kernel set that cannot run here. */
static int print_version(void) {
    lm_build_info b;
    lm_build_info_get(&b);
    printf("loom %s (commit %s)\ncompiler: %s\ncpu features: %s\n", b.version, b.git_commit, b.compiler,
           b.cpu_features);
    if (b.cpu_kernels)
        printf("cpu kernels: %s (%s; built: %s)\n", b.cpu_kernels,
               b.cpu_kernels_forced ? "LOOM_CPU_KERNELS" : "the best this CPU runs", b.kernel_sets);
    else
        printf("cpu kernels: none (built: %s): %s\n", b.kernel_sets, b.cpu_kernels_error.message);
    printf("backends: %s\n", b.backends);
    return b.cpu_kernels ? 0 : 1;
}

static void usage(FILE *f) {
    fprintf(f, "usage: loom <command> [options]\n       loom --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].main) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "  %-10s %s\n", "completion", "print the bash completion script (loom completion bash)");
    fprintf(f, "\n`loom <command> --help` describes each command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "version") == 0) {
        return print_version();
    }
    if (strcmp(argv[1], "completion") == 0)
        return lm_cli_completion_main(argc - 1, argv + 1, commands, sizeof commands / sizeof commands[0]);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].main && strcmp(argv[1], commands[i].name) == 0)
            return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "loom: unknown command '%.100s'; see loom --help\n", argv[1]);
    return 2;
}
