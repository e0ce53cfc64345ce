/* loom render: renders a model's chat template for a request read as JSON
 * on stdin ({"messages": [...], "tools": [...], "add_generation_prompt":
 * true, ...extra template variables}) and prints the prompt text. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_options.h"
#include "text/chat_template.h"

#define STDIN_MAX_BYTES ((size_t)64 << 20)

static const char synopsis[] =
    "usage: loom render [MODEL_DIR] [--template FILE] [--date YYYY-MM-DD | --now UNIX_SECONDS] < request.json\n"
    "Renders the chat template of the model folder (chat_template.jinja or\n"
    "tokenizer_config.json; default: the bundled model; the folder may hold only\n"
    "tokenizer files) for the JSON object on stdin: messages, optional tools,\n"
    "add_generation_prompt, and any further template variables (e.g.\n"
    "enable_thinking).  The prompt is printed as is, without a trailing newline.\n";

static bool parse_date(const char *value, void *field, char *message, size_t size) {
    lm_chat_template_options *opts = field;
    int y, m, d;
    char extra;
    if (sscanf(value, "%d-%d-%d%c", &y, &m, &d, &extra) != 3 || m < 1 || m > 12 || d < 1 || d > 31 || y < 1 ||
        y > 9999) {
        snprintf(message, size, "wants YYYY-MM-DD, got '%.40s'", value);
        return false;
    }
    struct tm tm = {.tm_year = y - 1900, .tm_mon = m - 1, .tm_mday = d};
    opts->now = (int64_t)timegm(&tm);
    opts->has_now = true;
    return true;
}

static bool parse_now(const char *value, void *field, char *message, size_t size) {
    lm_chat_template_options *opts = field;
    char *end;
    opts->now = strtoll(value, &end, 10);
    if (*end || end == value) {
        snprintf(message, size, "wants unix seconds, got '%.40s'", value);
        return false;
    }
    opts->has_now = true;
    return true;
}

typedef struct {
    const char *template_file;
    lm_chat_template_options opts;
} render_args;

#define ARG(field) offsetof(render_args, field)
static const lm_opt render_opts[] = {
    {"--template", LM_OPT_STRING, "FILE", ARG(template_file), 0, 0,
     "use this template file instead (the folder then only gives the special\ntokens)", NULL, NULL, NULL},
    {"--date", LM_OPT_CUSTOM, "DATE", ARG(opts), 0, 0, "the date strftime_now() sees (UTC midnight), for\nreproducible "
     "prompts", parse_date, NULL, NULL},
    {"--now", LM_OPT_CUSTOM, "SECONDS", ARG(opts), 0, 0, "the same as a unix time", parse_now, NULL, NULL},
};

int cmd_render_main(int argc, char **argv) {
    render_args args = {0};
    lm_chat_template_options_default(&args.opts);
    lm_cli_engine_settings settings;
    lm_cli_spec spec;
    lm_cli_spec_init(&spec, "render", synopsis, &settings, false);
    LM_CLI_SPEC_ADD(&spec, "Template", render_opts, &args);
    int parsed = lm_cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    const char *model = NULL, *template_file = args.template_file;
    lm_chat_template_options opts = args.opts;
    char model_buf[4096];
    lm_error derr = {0};
    if ((settings.engine.model_dir || !template_file) &&
        lm_cli_model_dir(settings.engine.model_dir, "tokenizer.json", model_buf, sizeof model_buf, &model, &derr) !=
            LM_OK) {
        fprintf(stderr, "loom render: %s\n", derr.message);
        return 1;
    }

    lm_error err = {0};
    lm_chat_template *t = NULL;
    lm_status st = LM_OK;
    if (template_file) {
        FILE *f = fopen(template_file, "rb");
        char *src = NULL;
        size_t len = 0;
        if (!f)
            st = lm_fail(&err, LM_ERR_IO, "cannot open %s", template_file);
        else {
            src = malloc((1 << 20) + 2);
            len = src ? fread(src, 1, (1 << 20) + 1, f) : 0;
            fclose(f);
            if (!src) st = lm_fail(&err, LM_ERR_NOMEM, "out of memory");
        }
        if (!st) st = lm_chat_template_compile(src, len, &t, &err);
        free(src);
        if (!st && model) { /* the folder still gives bos_token / eos_token */
            lm_chat_template *dir_t = NULL;
            char *bos = NULL, *eos = NULL;
            st = lm_chat_template_load_dir(model, &dir_t, &bos, &eos, &err);
            if (!st) st = lm_chat_template_set_special_tokens(t, bos, eos, &err);
            lm_chat_template_free(dir_t);
            free(bos);
            free(eos);
        }
    } else {
        st = lm_chat_template_load_dir(model, &t, NULL, NULL, &err);
    }
    if (st) {
        fprintf(stderr, "loom render: %s\n", err.message);
        lm_chat_template_free(t);
        return 1;
    }
    size_t in_len = 0;
    char *in = lm_cli_read_stdin(STDIN_MAX_BYTES, &in_len);
    if (!in) {
        fprintf(stderr, "loom render: cannot read stdin (at most %zu bytes)\n", STDIN_MAX_BYTES);
        lm_chat_template_free(t);
        return 1;
    }
    char *out = NULL;
    size_t out_len = 0;
    st = lm_chat_template_render_json(t, in, in_len, &opts, &out, &out_len, &err);
    free(in);
    lm_chat_template_free(t);
    if (st) {
        fprintf(stderr, "loom render: %s\n", err.message);
        return 1;
    }
    fwrite(out, 1, out_len, stdout);
    free(out);
    return fflush(stdout) == 0 ? 0 : 1;
}
