/* The options of every command that loads a model, in one table: the model
 * folder, threads, backend, weights mapping, context and KV pool sizes,
 * speculation, images.  serve, run, chat, bench, logits and inspect all
 * take the whole table (a flag a command has no use for changes nothing
 * there); tokenize, detokenize and render take the model folder alone.
 * Beside them: vLLM's and llama-server's flags that loom's behaviour
 * already covers (accepted with a note) or that it has another spelling
 * for (refused, naming it). */
#ifndef LOOM_CLI_ENGINE_OPTIONS_H
#define LOOM_CLI_ENGINE_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

#include "cli/options.h"
#include "loom.h"

typedef struct {
    loom_engine_options engine; /* model_dir is --model (or the positional folder) */
    bool allow_long_max_model_len;
} lm_cli_engine_settings;

void lm_cli_engine_settings_default(lm_cli_engine_settings *s);

/* The option groups, pointing into s. */
lm_opt_group lm_cli_engine_group(lm_cli_engine_settings *s);
lm_opt_group lm_cli_model_dir_group(lm_cli_engine_settings *s);
lm_opt_group lm_cli_compat_group(void);

/* Sets s to the defaults, fills spec's command, synopsis and positional
 * (the model folder) and adds the groups: the engine's (or the model folder
 * alone), then (as the trailer) the compatibility entries; the command adds
 * its own with LM_CLI_SPEC_ADD. */
void lm_cli_spec_init(lm_cli_spec *spec, const char *command, const char *synopsis, lm_cli_engine_settings *s,
                      bool whole_engine);

/* The context limit, checked before the weights load: --max-model-len if
 * given (refused above config.json's max_position_embeddings unless
 * --allow-long-max-model-len), else left 0 for the engine's default
 * (loom_default_max_model_len: max_position_embeddings, capped).  `why`
 * gets a phrase for the startup summary ("the model's
 * max_position_embeddings", "capped from max_position_embeddings 262144;
 * --max-model-len raises it").  Returns 0, or 2 after printing the refusal. */
int lm_cli_resolve_model_len(const char *command, lm_cli_engine_settings *s, const char *config_path, char *why,
                             size_t why_size);

/* max_position_embeddings of config.json (top level or text_config); 0 if
 * it cannot be read. */
int lm_cli_max_positions(const char *config_path);

/* True (with a warning in message) when --threads asks for more threads
 * than the machine has cores. */
bool lm_cli_threads_exceed_cores(const lm_cli_engine_settings *s, char *message, size_t size);

#endif
