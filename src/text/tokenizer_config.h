/* What tokenizer_config.json (and chat_template.jinja) say about a
 * tokenizer: its bos/eos/pad/unk token strings, whether a BOS token is added,
 * and the chat template. */
#ifndef LOOM_TEXT_TOKENIZER_CONFIG_H
#define LOOM_TEXT_TOKENIZER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

typedef struct {
    char *bos_token, *eos_token, *pad_token, *unk_token; /* NULL when absent or null */
    bool add_bos_token, add_eos_token;
    char *chat_template; /* NULL when none */
} lm_tokenizer_config;

/* Tokenizer files larger than this are refused. */
#define LM_TOKENIZER_FILE_MAX ((size_t)512 << 20)

/* Reads dir/tokenizer_config.json and dir/chat_template.jinja; each may be
 * missing (then the fields stay empty).  chat_template.jinja, when present,
 * wins over the config's "chat_template". */
lm_status lm_tokenizer_config_load(const char *dir, lm_tokenizer_config *out, lm_error *err);
/* Parses tokenizer_config.json text. */
lm_status lm_tokenizer_config_parse(const char *json, size_t len, lm_tokenizer_config *out, lm_error *err);
void lm_tokenizer_config_free(lm_tokenizer_config *cfg);

/* Reads a whole file (at most max bytes) into a malloc'd NUL-terminated
 * buffer.  LM_ERR_IO with errno's message when it cannot be opened. */
lm_status lm_tokenizer_read_file(const char *path, size_t max, char **data, size_t *len, lm_error *err);

#endif
