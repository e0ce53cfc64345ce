/* Chat templates: the Jinja2 subset that Hugging Face chat templates use,
 * rendered the way transformers' apply_chat_template renders them
 * (trim_blocks, lstrip_blocks, loop controls, tojson = json.dumps with
 * ensure_ascii=False, raise_exception, strftime_now).
 *
 * Sandboxed: a template cannot read files or the environment; loop
 * iterations, macro recursion, output size, memory and total work are
 * bounded, and every failure is an lm_error naming the template line
 * ("chat template line 12: unknown filter 'foo'").  A compiled template is
 * immutable and may be rendered from several threads at once. */
#ifndef LOOM_TEXT_CHAT_TEMPLATE_H
#define LOOM_TEXT_CHAT_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct lm_chat_template lm_chat_template;

typedef struct {
    uint64_t max_loop_iterations; /* total for one render (default 1,000,000) */
    int max_macro_depth;          /* nested macro calls (default 64) */
    size_t max_output;            /* bytes of output, and of any one string (default 16 MiB) */
    size_t max_memory;            /* bytes of live values (default 512 MiB) */
    uint64_t max_steps;           /* evaluation work (default 50,000,000) */
    uint64_t max_time_ms;         /* wall-clock safety net (default 10,000; 0 = none) */
    bool has_now;                 /* strftime_now formats `now` (UTC) instead of the local clock */
    int64_t now;                  /* unix seconds */
} lm_chat_template_options;

void lm_chat_template_options_default(lm_chat_template_options *o);

/* Compiles template source (at most 1 MiB). */
lm_status lm_chat_template_compile(const char *source, size_t len, lm_chat_template **out,
                                   lm_error *err);
void lm_chat_template_free(lm_chat_template *t);

/* Strings the template sees as bos_token / eos_token (copied; NULL leaves
 * the variable undefined).  Call before rendering, not during. */
lm_status lm_chat_template_set_special_tokens(lm_chat_template *t, const char *bos, const char *eos,
                                              lm_error *err);

/* Renders with the variables of `context` (a JSON object: messages, tools,
 * add_generation_prompt and any extra keys such as enable_thinking).  As
 * transformers does, tools and documents default to None and
 * add_generation_prompt to false; bos_token and eos_token come from
 * lm_chat_template_set_special_tokens unless the context sets them.
 * cJSON keeps no int/float distinction: an integral number is an int (a
 * cJSON_Raw item is parsed exactly, e.g. "1.0").  *out is malloc'd,
 * NUL-terminated, free()d by the caller. */
lm_status lm_chat_template_render(const lm_chat_template *t, const cJSON *context, char **out,
                                  size_t *out_len, lm_error *err);
lm_status lm_chat_template_render_ex(const lm_chat_template *t, const cJSON *context,
                                     const lm_chat_template_options *opts, char **out,
                                     size_t *out_len, lm_error *err);
/* The same with the context as JSON text, parsed exactly like Python's
 * json.loads (1 and 1.0 print differently, as in transformers). */
lm_status lm_chat_template_render_json(const lm_chat_template *t, const char *json, size_t json_len,
                                       const lm_chat_template_options *opts, char **out,
                                       size_t *out_len, lm_error *err);

/* Loads a model folder's template: chat_template.jinja, else
 * chat_template.json's "chat_template", else tokenizer_config.json's
 * "chat_template" (a string, or a list of {name, template} of which
 * "default" is used).  bos/eos (may be NULL) receive tokenizer_config.json's
 * bos_token / eos_token (a string or {"content": ...}; NULL when absent),
 * malloc'd; the template is also given them for rendering. */
lm_status lm_chat_template_load_dir(const char *dir, lm_chat_template **out, char **bos, char **eos,
                                    lm_error *err);

#endif
