#include "text/tokenizer_gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "text/tokenizer_internal.h"

/* llama.cpp's token types (llama.h, llama_token_type / gguf-py TokenType). */
enum { TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3, TOKEN_USER_DEFINED = 4, TOKEN_UNUSED = 5, TOKEN_BYTE = 6 };

/* The split regex of each pre-tokenizer name, as the tokenizer.json of
 * the models that carry the name spells it (llama-vocab.cpp quotes them). */
static const struct {
    const char *name, *regex;
} PRE_TOKENIZERS[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
               "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

#define TRY(call)                                     \
    do {                                              \
        lm_status try_status_ = (call);               \
        if (try_status_ != LM_OK) return try_status_; \
    } while (0)

static lm_status nomem(lm_error *err) { return lm_fail(err, LM_ERR_NOMEM, "out of memory building a tokenizer"); }

static lm_status add_pre_tokenizer(const lm_gguf *g, cJSON *root, lm_error *err) {
    const char *pre = NULL;
    TRY(lm_gguf_get_string(g, "tokenizer.ggml.pre", true, &pre, err));
    const char *regex = NULL;
    for (size_t i = 0; i < sizeof PRE_TOKENIZERS / sizeof *PRE_TOKENIZERS; i++)
        if (strcmp(PRE_TOKENIZERS[i].name, pre) == 0) regex = PRE_TOKENIZERS[i].regex;
    if (!regex)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.60s' is a pre-tokenizer loom does not know "
                       "(it knows qwen2 and qwen35)", lm_gguf_name(g), pre);
    cJSON *normalizer = cJSON_AddObjectToObject(root, "normalizer");
    cJSON *p = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON *list = p ? cJSON_AddArrayToObject(p, "pretokenizers") : NULL;
    cJSON *split = cJSON_CreateObject(), *byte_level = cJSON_CreateObject();
    bool ok = normalizer && list && split && byte_level && cJSON_AddStringToObject(normalizer, "type", "NFC") &&
              cJSON_AddStringToObject(p, "type", "Sequence");
    if (ok) ok = cJSON_AddItemToArray(list, split);
    else cJSON_Delete(split);
    if (ok) ok = cJSON_AddItemToArray(list, byte_level);
    else cJSON_Delete(byte_level);
    cJSON *pattern = ok ? cJSON_AddObjectToObject(split, "pattern") : NULL;
    ok = pattern && cJSON_AddStringToObject(split, "type", "Split") && cJSON_AddStringToObject(pattern, "Regex", regex) &&
         cJSON_AddStringToObject(split, "behavior", "Isolated") && cJSON_AddBoolToObject(split, "invert", 0) &&
         cJSON_AddStringToObject(byte_level, "type", "ByteLevel") &&
         cJSON_AddBoolToObject(byte_level, "add_prefix_space", 0) && cJSON_AddBoolToObject(byte_level, "use_regex", 0);
    cJSON *decoder = ok ? cJSON_AddObjectToObject(root, "decoder") : NULL;
    if (!decoder || !cJSON_AddStringToObject(decoder, "type", "ByteLevel")) return nomem(err);
    return LM_OK;
}

/* tokens, token_type and merges as tokenizer.json's model and added_tokens. */
static lm_status add_vocabulary(const lm_gguf *g, cJSON *root, lm_error *err) {
    const lm_gguf_kv *tokens, *types, *merges;
    TRY(lm_gguf_get_array(g, "tokenizer.ggml.tokens", true, &tokens, err));
    TRY(lm_gguf_get_array(g, "tokenizer.ggml.token_type", false, &types, err));
    TRY(lm_gguf_get_array(g, "tokenizer.ggml.merges", true, &merges, err));
    if (tokens->elem_type != LM_GGUF_STRING || merges->elem_type != LM_GGUF_STRING)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tokenizer.ggml.tokens and merges must be lists of strings",
                       lm_gguf_name(g));
    if (tokens->count > (uint64_t)LM_TOKENIZER_MAX_IDS)
        return lm_fail(err, LM_ERR_FORMAT, "%s: %llu tokens (at most %d)", lm_gguf_name(g),
                       (unsigned long long)tokens->count, LM_TOKENIZER_MAX_IDS);
    if (types && (types->count != tokens->count || !lm_gguf_is_int_type(types->elem_type)))
        return lm_fail(err, LM_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu integers for %llu tokens",
                       lm_gguf_name(g), (unsigned long long)types->count, (unsigned long long)tokens->count);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON *vocab = model ? cJSON_AddObjectToObject(model, "vocab") : NULL;
    cJSON *merge_list = vocab ? cJSON_AddArrayToObject(model, "merges") : NULL;
    cJSON *added = merge_list ? cJSON_AddArrayToObject(root, "added_tokens") : NULL;
    if (!added || !cJSON_AddStringToObject(model, "type", "BPE")) return nomem(err);
    for (uint64_t i = 0; i < tokens->count; i++) {
        int64_t type = types ? lm_gguf_array_int(types, i) : TOKEN_NORMAL;
        const char *text = tokens->strs[i];
        if (tokens->str_lens[i] != strlen(text))
            return lm_fail(err, LM_ERR_FORMAT, "%s: token %llu holds a NUL byte", lm_gguf_name(g),
                           (unsigned long long)i);
        if (type == TOKEN_UNUSED) continue;
        if (type == TOKEN_NORMAL) {
            if (cJSON_GetObjectItemCaseSensitive(vocab, text))
                return lm_fail(err, LM_ERR_FORMAT, "%s: token '%.60s' appears twice", lm_gguf_name(g), text);
            if (!cJSON_AddNumberToObject(vocab, text, (double)i)) return nomem(err);
            continue;
        }
        if (type != TOKEN_CONTROL && type != TOKEN_USER_DEFINED)
            return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: token %llu ('%.60s') has type %lld, which a byte-level BPE "
                           "vocabulary does not hold", lm_gguf_name(g), (unsigned long long)i, text, (long long)type);
        cJSON *t = cJSON_CreateObject();
        if (!t || !cJSON_AddItemToArray(added, t)) {
            cJSON_Delete(t);
            return nomem(err);
        }
        if (!cJSON_AddNumberToObject(t, "id", (double)i) || !cJSON_AddStringToObject(t, "content", text) ||
            !cJSON_AddBoolToObject(t, "special", type == TOKEN_CONTROL) || !cJSON_AddBoolToObject(t, "normalized", 0))
            return nomem(err);
    }
    for (uint64_t i = 0; i < merges->count; i++) {
        cJSON *m = cJSON_CreateString(merges->strs[i]);
        if (!m || !cJSON_AddItemToArray(merge_list, m)) {
            cJSON_Delete(m);
            return nomem(err);
        }
    }
    return LM_OK;
}

static lm_status check_model(const lm_gguf *g, lm_error *err) {
    const char *model = NULL;
    TRY(lm_gguf_get_string(g, "tokenizer.ggml.model", true, &model, err));
    if (strcmp(model, "gpt2") != 0)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model is '%.40s'; loom reads byte-level BPE (gpt2)",
                       lm_gguf_name(g), model);
    return LM_OK;
}

/* The text of the token an id key names (NULL when the key is absent). */
static lm_status token_of(const lm_gguf *g, const char *key, const char **out, lm_error *err) {
    *out = NULL;
    uint32_t id = UINT32_MAX;
    TRY(lm_gguf_get_u32(g, key, false, &id, err));
    if (id == UINT32_MAX) return LM_OK;
    const lm_gguf_kv *tokens;
    TRY(lm_gguf_get_array(g, "tokenizer.ggml.tokens", true, &tokens, err));
    if (tokens->elem_type != LM_GGUF_STRING || id >= tokens->count)
        return lm_fail(err, LM_ERR_FORMAT, "%s: %s %u names no token", lm_gguf_name(g), key, id);
    *out = tokens->strs[id];
    return LM_OK;
}

static lm_status dup_text(const char *s, char **out, lm_error *err) {
    *out = NULL;
    if (!s) return LM_OK;
    *out = strdup(s);
    return *out ? LM_OK : nomem(err);
}

/* bos/eos/pad, add_bos_token and the chat template: what
 * tokenizer_config.json would say. */
static lm_status fill_config(const lm_gguf *g, lm_tokenizer *tok, lm_error *err) {
    const char *bos, *eos, *pad, *template = NULL;
    TRY(token_of(g, "tokenizer.ggml.bos_token_id", &bos, err));
    TRY(token_of(g, "tokenizer.ggml.eos_token_id", &eos, err));
    TRY(token_of(g, "tokenizer.ggml.padding_token_id", &pad, err));
    TRY(lm_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", false, &tok->config.add_bos_token, err));
    TRY(lm_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", false, &tok->config.add_eos_token, err));
    TRY(lm_gguf_get_string(g, "tokenizer.chat_template", false, &template, err));
    TRY(dup_text(bos, &tok->config.bos_token, err));
    TRY(dup_text(eos, &tok->config.eos_token, err));
    TRY(dup_text(pad, &tok->config.pad_token, err));
    TRY(dup_text(template, &tok->config.chat_template, err));
    if (bos) tok->bos_id = lm_tokenizer_token_to_id(tok, bos);
    if (eos) tok->eos_id = lm_tokenizer_token_to_id(tok, eos);
    if (pad) tok->pad_id = lm_tokenizer_token_to_id(tok, pad);
    return LM_OK;
}

lm_status lm_tokenizer_from_gguf(const lm_gguf *g, lm_tokenizer **out, lm_error *err) {
    *out = NULL;
    TRY(check_model(g, err));
    cJSON *root = cJSON_CreateObject();
    if (!root) return nomem(err);
    lm_status st = add_pre_tokenizer(g, root, err);
    if (st == LM_OK) st = add_vocabulary(g, root, err);
    char *json = st == LM_OK ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (st != LM_OK) return st;
    if (!json) return nomem(err);
    lm_tokenizer *tok;
    st = lm_tokenizer_load_json(json, strlen(json), &tok, err);
    free(json);
    if (st != LM_OK) return lm_fail_context(err, "%s (GGUF tokenizer)", lm_gguf_name(g));
    st = fill_config(g, tok, err);
    if (st != LM_OK) {
        lm_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return LM_OK;
}

lm_status lm_chat_template_from_gguf(const lm_gguf *g, lm_chat_template **out, char **bos, char **eos,
                                     lm_error *err) {
    *out = NULL;
    if (bos) *bos = NULL;
    if (eos) *eos = NULL;
    const char *source = NULL, *b, *e;
    TRY(lm_gguf_get_string(g, "tokenizer.chat_template", false, &source, err));
    if (!source) return lm_fail(err, LM_ERR_FORMAT, "%s has no chat template (tokenizer.chat_template)", lm_gguf_name(g));
    TRY(token_of(g, "tokenizer.ggml.bos_token_id", &b, err));
    TRY(token_of(g, "tokenizer.ggml.eos_token_id", &e, err));
    lm_status st = lm_chat_template_compile(source, strlen(source), out, err);
    if (st != LM_OK) return lm_fail_context(err, "%s", lm_gguf_name(g));
    st = lm_chat_template_set_special_tokens(*out, b, e, err);
    if (st == LM_OK && bos) st = dup_text(b, bos, err);
    if (st == LM_OK && eos) st = dup_text(e, eos, err);
    if (st != LM_OK) {
        lm_chat_template_free(*out);
        *out = NULL;
        if (bos) free(*bos), *bos = NULL;
    }
    return st;
}

bool lm_tokenizer_available(const char *dir) {
    char path[4096];
    struct stat info;
    if ((size_t)snprintf(path, sizeof path, "%s/tokenizer.json", dir) < sizeof path && stat(path, &info) == 0 &&
        S_ISREG(info.st_mode))
        return true;
    bool found = false;
    lm_error ignored = {0};
    return lm_gguf_locate(dir, &found, path, sizeof path, &ignored) == LM_OK && found;
}
