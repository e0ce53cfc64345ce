/* loom render: renders a model's chat template for a request read as JSON
 * on stdin ({"messages": [...], "tools": [...], "add_generation_prompt":
 * true, ...extra template variables}) and prints the prompt text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "text/chat_template.h"

#define STDIN_MAX_BYTES ((size_t)64 << 20)

static void usage(FILE *f) {
    fprintf(f,
            "usage: loom render --model DIR [--template FILE] [--date YYYY-MM-DD | --now "
            "UNIX_SECONDS] < request.json\n"
            "\n"
            "Renders the chat template of DIR (chat_template.jinja or tokenizer_config.json; the "
            "folder may\n"
            "hold only tokenizer files) for the JSON object on stdin: messages, optional tools,\n"
            "add_generation_prompt, and any further template variables (e.g. enable_thinking).\n"
            "The prompt is printed as is, without a trailing newline.\n"
            "\n"
            "  --model DIR       model or tokenizer folder (template, bos_token, eos_token)\n"
            "  --template FILE   use this template file instead (DIR then only gives the special "
            "tokens)\n"
            "  --date DATE       the date strftime_now() sees (UTC midnight), for reproducible "
            "prompts\n"
            "  --now SECONDS     the same as a unix time\n");
}

static char *read_stdin(size_t *len) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            if (cap >= STDIN_MAX_BYTES) {
                free(buf);
                return NULL;
            }
            cap *= 2;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
    }
    *len = n;
    return buf;
}

static bool parse_date(const char *s, int64_t *out) {
    int y, m, d;
    char extra;
    if (sscanf(s, "%d-%d-%d%c", &y, &m, &d, &extra) != 3 || m < 1 || m > 12 || d < 1 || d > 31 ||
        y < 1 || y > 9999)
        return false;
    struct tm tm = {.tm_year = y - 1900, .tm_mon = m - 1, .tm_mday = d};
    *out = (int64_t)timegm(&tm);
    return true;
}

int cmd_render_main(int argc, char **argv) {
    const char *model = NULL, *template_file = NULL;
    lm_chat_template_options opts;
    lm_chat_template_options_default(&opts);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "loom render: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--template"))
            template_file = v;
        else if (!strcmp(a, "--date")) {
            if (!parse_date(v, &opts.now)) {
                fprintf(stderr, "loom render: --date wants YYYY-MM-DD, got '%s'\n", v);
                return 2;
            }
            opts.has_now = true;
        } else if (!strcmp(a, "--now")) {
            char *end;
            opts.now = strtoll(v, &end, 10);
            if (*end || end == v) {
                fprintf(stderr, "loom render: --now wants unix seconds, got '%s'\n", v);
                return 2;
            }
            opts.has_now = true;
        } else {
            fprintf(stderr, "loom render: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model && !template_file) {
        usage(stderr);
        return 2;
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
    char *in = read_stdin(&in_len);
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
