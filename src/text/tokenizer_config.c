#include "text/tokenizer_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

lm_status lm_tokenizer_read_file(const char *path, size_t max, char **data, size_t *len, lm_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return lm_fail(err, LM_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return lm_fail(err, LM_ERR_IO, "%s is not a regular file", path);
    }
    if ((unsigned long long)sb.st_size > max) {
        fclose(f);
        return lm_fail(err, LM_ERR_FORMAT, "%s is %lld bytes, more than the %zu allowed", path, (long long)sb.st_size, max);
    }
    size_t size = (size_t)sb.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory reading %s (%zu bytes)", path, size);
    }
    size_t got = fread(buf, 1, size, f);
    int failed = ferror(f);
    fclose(f);
    if (failed || got != size) {
        free(buf);
        return lm_fail(err, LM_ERR_IO, "cannot read %s", path);
    }
    buf[size] = '\0';
    *data = buf;
    *len = size;
    return LM_OK;
}

/* A token given as "text" or as {"content": "text", ...}; NULL otherwise. */
static lm_status token_string(const cJSON *v, const char *what, char **out, lm_error *err) {
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return LM_OK;
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v)) return lm_fail(err, LM_ERR_FORMAT, "tokenizer_config.json: %s is not a string or {\"content\": ...}", what);
    *out = strdup(v->valuestring);
    if (!*out) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    return LM_OK;
}

/* "chat_template" is a string, or a list of {"name", "template"} (the one
 * named "default" is used, else the first). */
static lm_status chat_template(const cJSON *v, char **out, lm_error *err) {
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return LM_OK;
    if (cJSON_IsArray(v)) {
        const cJSON *item, *chosen = NULL;
        cJSON_ArrayForEach(item, v) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "name");
            if (!chosen) chosen = item;
            if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0) chosen = item;
        }
        if (!chosen) return LM_OK;
        v = cJSON_GetObjectItemCaseSensitive(chosen, "template");
    }
    if (!cJSON_IsString(v)) return lm_fail(err, LM_ERR_FORMAT, "tokenizer_config.json: chat_template is not a string");
    *out = strdup(v->valuestring);
    if (!*out) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    return LM_OK;
}

lm_status lm_tokenizer_config_parse(const char *json, size_t len, lm_tokenizer_config *cfg, lm_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return lm_fail(err, LM_ERR_FORMAT, "tokenizer_config.json is not valid JSON");
    lm_status st = LM_OK;
    if (!cJSON_IsObject(root)) st = lm_fail(err, LM_ERR_FORMAT, "tokenizer_config.json is not a JSON object");
    if (st == LM_OK) st = token_string(cJSON_GetObjectItemCaseSensitive(root, "bos_token"), "bos_token", &cfg->bos_token, err);
    if (st == LM_OK) st = token_string(cJSON_GetObjectItemCaseSensitive(root, "eos_token"), "eos_token", &cfg->eos_token, err);
    if (st == LM_OK) st = token_string(cJSON_GetObjectItemCaseSensitive(root, "pad_token"), "pad_token", &cfg->pad_token, err);
    if (st == LM_OK) st = token_string(cJSON_GetObjectItemCaseSensitive(root, "unk_token"), "unk_token", &cfg->unk_token, err);
    if (st == LM_OK) st = chat_template(cJSON_GetObjectItemCaseSensitive(root, "chat_template"), &cfg->chat_template, err);
    if (st == LM_OK) {
        cfg->add_bos_token = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "add_bos_token"));
        cfg->add_eos_token = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "add_eos_token"));
    }
    cJSON_Delete(root);
    if (st != LM_OK) lm_tokenizer_config_free(cfg);
    return st;
}

static lm_status join_path(char *buf, size_t size, const char *dir, const char *name, lm_error *err) {
    int n = snprintf(buf, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size) return lm_fail(err, LM_ERR_INVALID, "path too long: %s/%s", dir, name);
    return LM_OK;
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

lm_status lm_tokenizer_config_load(const char *dir, lm_tokenizer_config *cfg, lm_error *err) {
    memset(cfg, 0, sizeof *cfg);
    char path[4096];
    lm_status st = join_path(path, sizeof path, dir, "tokenizer_config.json", err);
    if (st != LM_OK) return st;
    char *data = NULL;
    size_t len = 0;
    if (file_exists(path)) {
        st = lm_tokenizer_read_file(path, LM_TOKENIZER_FILE_MAX, &data, &len, err);
        if (st != LM_OK) return st;
        st = lm_tokenizer_config_parse(data, len, cfg, err);
        free(data);
        if (st != LM_OK) return lm_fail_context(err, "%s", path);
    }
    st = join_path(path, sizeof path, dir, "chat_template.jinja", err);
    if (st == LM_OK && file_exists(path)) {
        st = lm_tokenizer_read_file(path, LM_TOKENIZER_FILE_MAX, &data, &len, err);
        if (st == LM_OK) {
            free(cfg->chat_template);
            cfg->chat_template = data;
        }
    }
    if (st != LM_OK) lm_tokenizer_config_free(cfg);
    return st;
}

void lm_tokenizer_config_free(lm_tokenizer_config *cfg) {
    free(cfg->bos_token);
    free(cfg->eos_token);
    free(cfg->pad_token);
    free(cfg->unk_token);
    free(cfg->chat_template);
    memset(cfg, 0, sizeof *cfg);
}
