/* loom tokenize / loom detokenize --model DIR: text on stdin -> token ids as
 * a JSON array, and back.  DIR needs only the tokenizer files. */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_options.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

static const char tokenize_synopsis[] =
    "usage: loom tokenize [MODEL_DIR] [--add-special] [--jsonl]\n"
    "Reads UTF-8 text on stdin (all of it, byte for byte) and prints its token ids\n"
    "as a JSON array.  Special tokens written in the text are recognised.  The\n"
    "folder (default: the bundled model) needs only tokenizer.json.\n";

static const char detokenize_synopsis[] =
    "usage: loom detokenize [MODEL_DIR] [--skip-special] [--stream] [--jsonl]\n"
    "Reads a JSON array of token ids on stdin and prints the text they decode to\n"
    "(exactly, with no newline added).  The folder (default: the bundled model)\n"
    "needs only tokenizer.json.\n";

static void print_ids(const int32_t *ids, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
}

/* Writes s as a JSON string (UTF-8 kept, controls escaped). */
static void print_json_string(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    puts("\"");
}

typedef struct {
    const char *model;
    bool add_special, skip_special, stream, jsonl;
} options;

#define OPT(field) offsetof(options, field)
static const lm_opt tokenize_opts[] = {
    {"--add-special", LM_OPT_FLAG, NULL, OPT(add_special), 0, 0,
     "add what the tokenizer adds around a sequence (e.g. BOS)", NULL, NULL, NULL},
    {"--jsonl", LM_OPT_FLAG, NULL, OPT(jsonl), 0, 0, "each stdin line is a JSON string; print one array per line",
     NULL, NULL, NULL},
};
static const lm_opt detokenize_opts[] = {
    {"--skip-special", LM_OPT_FLAG, NULL, OPT(skip_special), 0, 0, "leave special tokens out", NULL, NULL, NULL},
    {"--stream", LM_OPT_FLAG, NULL, OPT(stream), 0, 0, "decode one id at a time with the incremental detokenizer",
     NULL, NULL, NULL},
    {"--jsonl", LM_OPT_FLAG, NULL, OPT(jsonl), 0, 0, "each stdin line is a JSON array; print one JSON string per line",
     NULL, NULL, NULL},
};

/* Returns -1 to go on (o filled), else the exit code. */
static int parse_options(int argc, char **argv, bool detok, options *o, char *model_buf, size_t model_buf_size) {
    memset(o, 0, sizeof *o);
    const char *command = detok ? "detokenize" : "tokenize";
    lm_cli_engine_settings settings;
    lm_cli_spec spec;
    lm_cli_spec_init(&spec, command, detok ? detokenize_synopsis : tokenize_synopsis, &settings, false);
    if (detok) LM_CLI_SPEC_ADD(&spec, "Output", detokenize_opts, o);
    else LM_CLI_SPEC_ADD(&spec, "Output", tokenize_opts, o);
    int parsed = lm_cli_parse(&spec, argc, argv);
    if (parsed >= 0) return parsed;
    lm_error err = {0};
    if (lm_cli_model_dir(settings.engine.model_dir, "tokenizer.json", model_buf, model_buf_size, &o->model, &err) !=
        LM_OK) {
        fprintf(stderr, "loom %s: %s\n", command, err.message);
        return 1;
    }
    return -1;
}

static int tokenize_one(const lm_tokenizer *tok, const char *text, size_t len, bool add_special) {
    int32_t *ids;
    size_t n;
    lm_error err;
    if (lm_tokenizer_encode(tok, text, len, add_special, &ids, &n, &err) != LM_OK) {
        fprintf(stderr, "loom tokenize: %s\n", err.message);
        return 1;
    }
    print_ids(ids, n);
    free(ids);
    return 0;
}

static int tokenize_lines(const lm_tokenizer *tok, char *input, size_t len, bool add_special) {
    int rc = 0;
    size_t line_no = 0;
    for (char *line = input; line < input + len && rc == 0;) {
        char *end = memchr(line, '\n', (size_t)(input + len - line));
        size_t line_len = end ? (size_t)(end - line) : (size_t)(input + len - line);
        line_no++;
        cJSON *v = cJSON_ParseWithLength(line, line_len);
        if (!cJSON_IsString(v)) {
            fprintf(stderr, "loom tokenize: line %zu is not a JSON string\n", line_no);
            rc = 1;
        } else {
            rc = tokenize_one(tok, v->valuestring, strlen(v->valuestring), add_special);
        }
        cJSON_Delete(v);
        line = line + line_len + 1;
    }
    return rc;
}

int cmd_tokenize_main(int argc, char **argv) {
    options o;
    char model_buf[4096];
    int rc = parse_options(argc, argv, false, &o, model_buf, sizeof model_buf);
    if (rc >= 0) return rc;
    lm_tokenizer *tok;
    lm_error err;
    if (lm_tokenizer_load(o.model, &tok, &err) != LM_OK) {
        fprintf(stderr, "loom tokenize: %s\n", err.message);
        return 1;
    }
    size_t len;
    char *input = lm_cli_read_stdin(LM_TOKENIZER_MAX_TEXT, &len);
    if (!input) {
        fprintf(stderr, "loom tokenize: cannot read stdin (at most %zu bytes)\n", (size_t)LM_TOKENIZER_MAX_TEXT);
        lm_tokenizer_free(tok);
        return 1;
    }
    rc = o.jsonl ? tokenize_lines(tok, input, len, o.add_special) : tokenize_one(tok, input, len, o.add_special);
    free(input);
    lm_tokenizer_free(tok);
    return rc;
}

/* Parses a JSON array of ids. */
static int32_t *parse_id_array(const char *text, size_t len, size_t *n) {
    cJSON *v = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsArray(v)) {
        cJSON_Delete(v);
        return NULL;
    }
    size_t count = (size_t)cJSON_GetArraySize(v);
    int32_t *ids = malloc((count ? count : 1) * sizeof *ids);
    const cJSON *item;
    size_t i = 0;
    cJSON_ArrayForEach(item, v) {
        double d = cJSON_IsNumber(item) ? item->valuedouble : -1;
        if (!ids || !(d >= 0 && d <= INT32_MAX) || d != (double)(int32_t)d) {
            free(ids);
            cJSON_Delete(v);
            return NULL;
        }
        ids[i++] = (int32_t)d;
    }
    cJSON_Delete(v);
    *n = count;
    return ids;
}

static lm_status decode_stream(const lm_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special, char **text,
                               size_t *len, lm_error *err) {
    lm_detokenizer d;
    lm_detokenizer_init(&d, tok, skip_special);
    lm_text_buf all = {0};
    lm_status st = LM_OK;
    const char *piece;
    size_t piece_len;
    for (size_t i = 0; i <= n && st == LM_OK; i++) {
        st = i < n ? lm_detokenizer_push(&d, ids[i], &piece, &piece_len, err)
                   : lm_detokenizer_finish(&d, &piece, &piece_len, err);
        if (st == LM_OK && !lm_text_buf_append(&all, piece, piece_len)) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    lm_detokenizer_free(&d);
    if (st != LM_OK) {
        lm_text_buf_free(&all);
        return st;
    }
    if (!all.p && !lm_text_buf_reserve(&all, 0)) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    *text = all.p;
    *len = all.n;
    return LM_OK;
}

static int detokenize_one(const lm_tokenizer *tok, const char *json, size_t json_len, const options *o) {
    size_t n;
    int32_t *ids = parse_id_array(json, json_len, &n);
    if (!ids) {
        fprintf(stderr, "loom detokenize: input is not a JSON array of token ids\n");
        return 1;
    }
    char *text;
    size_t len;
    lm_error err;
    lm_status st = o->stream ? decode_stream(tok, ids, n, o->skip_special, &text, &len, &err)
                             : lm_tokenizer_decode(tok, ids, n, o->skip_special, &text, &len, &err);
    free(ids);
    if (st != LM_OK) {
        fprintf(stderr, "loom detokenize: %s\n", err.message);
        return 1;
    }
    if (o->jsonl) print_json_string(text, len);
    else fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}

int cmd_detokenize_main(int argc, char **argv) {
    options o;
    char model_buf[4096];
    int rc = parse_options(argc, argv, true, &o, model_buf, sizeof model_buf);
    if (rc >= 0) return rc;
    lm_tokenizer *tok;
    lm_error err;
    if (lm_tokenizer_load(o.model, &tok, &err) != LM_OK) {
        fprintf(stderr, "loom detokenize: %s\n", err.message);
        return 1;
    }
    size_t len;
    char *input = lm_cli_read_stdin(LM_TOKENIZER_MAX_TEXT, &len);
    if (!input) {
        fprintf(stderr, "loom detokenize: cannot read stdin (at most %zu bytes)\n", (size_t)LM_TOKENIZER_MAX_TEXT);
        lm_tokenizer_free(tok);
        return 1;
    }
    if (!o.jsonl) {
        rc = detokenize_one(tok, input, len, &o);
    } else {
        rc = 0;
        for (char *line = input; line < input + len && rc == 0;) {
            char *end = memchr(line, '\n', (size_t)(input + len - line));
            size_t line_len = end ? (size_t)(end - line) : (size_t)(input + len - line);
            rc = detokenize_one(tok, line, line_len, &o);
            line += line_len + 1;
        }
    }
    free(input);
    lm_tokenizer_free(tok);
    return rc;
}
