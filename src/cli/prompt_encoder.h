/* Text prompts -> token ids for the CLI commands: a model folder's tokenizer
 * and chat template, loaded once and used for many prompts (loom chat
 * re-encodes the whole conversation every turn). */
#ifndef LOOM_CLI_PROMPT_ENCODER_H
#define LOOM_CLI_PROMPT_ENCODER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

typedef struct {
    lm_tokenizer *tokenizer;
    lm_chat_template *template; /* NULL when opened without one */
} lm_prompt_encoder;

/* Loads DIR's tokenizer and, with `chat`, its chat template. */
lm_status lm_prompt_encoder_open(const char *dir, bool chat, lm_prompt_encoder *pe, lm_error *err);

/* Renders `messages` (a JSON array of {role, content}) with the generation
 * prompt and encodes it (the template writes any special tokens itself).
 * variables (an object, may be NULL) adds template variables such as
 * enable_thinking.  *ids is malloc'd; *text (optional, malloc'd) receives
 * the rendered prompt. */
lm_status lm_prompt_encoder_chat(const lm_prompt_encoder *pe, const cJSON *messages, const cJSON *variables,
                                 int32_t **ids, int *n, char **text, lm_error *err);

/* The same for a conversation of one user message holding `text`. */
lm_status lm_prompt_encoder_user(const lm_prompt_encoder *pe, const char *text, int32_t **ids, int *n,
                                 lm_error *err);

/* Encodes text as is, with what the tokenizer adds around a sequence (BOS). */
lm_status lm_prompt_encoder_raw(const lm_prompt_encoder *pe, const char *text, int32_t **ids, int *n,
                                lm_error *err);

void lm_prompt_encoder_close(lm_prompt_encoder *pe);

#endif
