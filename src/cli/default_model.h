/* Where a command finds its model when no --model is given: the trained
 * default model that ships in the repository's models/ folder. */
#ifndef LOOM_CLI_DEFAULT_MODEL_H
#define LOOM_CLI_DEFAULT_MODEL_H

#include <stddef.h>

#include "base/error.h"

#define LM_DEFAULT_MODEL_NAME "loom-tiny"

/* Sets *dir to `given` when it is not NULL, after checking that it is a
 * folder holding `needs` (NULL: "config.json"; the tokenizer commands ask
 * for "tokenizer.json"), with an error that teaches otherwise
 * (model_folder.h).  Otherwise looks, in order, at
 * $LOOM_MODEL, <binary dir>/../models/loom-tiny (the build tree),
 * <binary dir>/../share/loom/models/loom-tiny (an install) and
 * ./models/loom-tiny, and copies the first folder holding a config.json into
 * buf.  The error lists every place looked at. */
lm_status lm_cli_model_dir(const char *given, const char *needs, char *buf, size_t buf_size, const char **dir,
                           lm_error *err);

#endif
