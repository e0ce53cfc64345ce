#include "io/json_file.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Line and column (1-based) of byte `pos` in text, for syntax errors. */
static void line_and_column(const char *text, size_t pos, size_t *line, size_t *column) {
    *line = 1;
    *column = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *column = 1;
        } else {
            (*column)++;
        }
    }
}

static bool only_whitespace(const char *p, const char *end) {
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return false;
    return true;
}

/* text[len] must be '\0': cJSON then never reads past the buffer, whatever
 * the bytes are. */
static lm_status parse_terminated(const char *text, size_t len, const char *source_name,
                                  cJSON **out, lm_error *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len + 1, &end, false);
    if (!root) {
        size_t pos = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        size_t line, column;
        line_and_column(text, pos, &line, &column);
        return lm_fail(err, LM_ERR_FORMAT, "%s: not valid JSON (line %zu, column %zu)", source_name,
                       line, column);
    }
    if (!end || end < text || end > text + len || !only_whitespace(end, text + len)) {
        cJSON_Delete(root);
        return lm_fail(err, LM_ERR_FORMAT, "%s: unexpected text after the JSON value",
                       source_name);
    }
    *out = root;
    return LM_OK;
}

lm_status lm_json_parse(const char *text, size_t len, const char *source_name, cJSON **out,
                        lm_error *err) {
    *out = NULL;
    if (len == SIZE_MAX) return lm_fail(err, LM_ERR_INVALID, "%s: text too long", source_name);
    char *copy = malloc(len + 1);
    if (!copy) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory (%zu bytes)", source_name, len);
    if (len) memcpy(copy, text, len);
    copy[len] = '\0';
    lm_status st = parse_terminated(copy, len, source_name, out, err);
    free(copy);
    return st;
}

lm_status lm_read_small_file(const char *path, size_t max_bytes, char **data, size_t *len,
                             lm_error *err) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return lm_fail(err, LM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat info;
    if (fstat(fileno(f), &info) != 0 || !S_ISREG(info.st_mode)) {
        fclose(f);
        return lm_fail(err, LM_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)info.st_size > max_bytes) {
        fclose(f);
        return lm_fail(err, LM_ERR_FORMAT, "%s: %lld bytes is more than the %zu allowed", path,
                       (long long)info.st_size, max_bytes);
    }
    size_t size = (size_t)info.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory (%zu bytes)", path, size);
    }
    size_t got = fread(buf, 1, size, f);
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed || got != size) {
        free(buf);
        return lm_fail(err, LM_ERR_IO, "%s: read %zu of %zu bytes", path, got, size);
    }
    buf[size] = '\0';
    *data = buf;
    *len = size;
    return LM_OK;
}

lm_status lm_json_read_file(const char *path, size_t max_bytes, cJSON **out, lm_error *err) {
    *out = NULL;
    char *text;
    size_t len;
    lm_status st = lm_read_small_file(path, max_bytes, &text, &len, err);
    if (st != LM_OK) return st;
    st = parse_terminated(text, len, path, out, err);
    free(text);
    return st;
}
