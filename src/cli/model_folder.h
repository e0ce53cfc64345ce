/* What --model was given, when it is not a checkpoint folder: a file (a
 * .safetensors or a GGUF), a folder without config.json, a Hugging Face hub
 * id, or nothing at all.  Each error names the problem and the fix. */
#ifndef LOOM_CLI_MODEL_FOLDER_H
#define LOOM_CLI_MODEL_FOLDER_H

#include "base/error.h"

/* LM_OK when dir is a folder holding `needs` ("config.json" for commands
 * that load weights, "tokenizer.json" for those that only tokenize). */
lm_status lm_cli_check_model_folder(const char *dir, const char *needs, lm_error *err);

#endif
