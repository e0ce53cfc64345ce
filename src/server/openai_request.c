#include "server/openai_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_decode.h"
#include "server/media.h"
#include "server/sbuf.h"
#include "server/structured_output.h"

#define MAX_MESSAGES 4096
#define MAX_PROMPT_IDS (1 << 20)
#define MAX_STOP_TOKEN_IDS 256

typedef struct {
    char *param;
    size_t param_size;
    lm_error *err;
    const lm_image_parts *images; /* NULL: image parts refused */
    lm_openai_request *r;
    size_t image_bytes;           /* of the images read so far */
} parse_ctx;

static lm_status bad(parse_ctx *c, const char *param, const char *fmt, const char *detail) {
    if (c->param && c->param_size) snprintf(c->param, c->param_size, "%s", param ? param : "");
    char message[LM_ERROR_MESSAGE_MAX];
    snprintf(message, sizeof message, fmt, param ? param : "", detail ? detail : "");
    return lm_fail(c->err, LM_ERR_INVALID, "%s", message);
}

/* An error in the messages, with a message of its own. */
__attribute__((format(printf, 2, 3))) static lm_status bad_messages(parse_ctx *c, const char *fmt, ...) {
    if (c->param && c->param_size) snprintf(c->param, c->param_size, "messages");
    char message[LM_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return lm_fail(c->err, LM_ERR_INVALID, "%s", message);
}

int lm_json_nesting_depth(const char *text, size_t len) {
    int depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (in_string) {
            if (ch == '\\') i++;
            else if (ch == '"') in_string = false;
        } else if (ch == '"') {
            in_string = true;
        } else if (ch == '[' || ch == '{') {
            if (++depth > deepest) deepest = depth;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return deepest;
}

/* The top-level fields the parser reads; others are ignored (and dropped
 * from the parsed document at once). */
static const char *const known_fields[] = {
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "n", "min_tokens", "ignore_eos",
    "skip_special_tokens", "speculative", "seed", "stop", "stop_token_ids", "logit_bias", "stream_options",
    "stream", "user", "messages", "tools", "tool_choice", "parallel_tool_calls", "logprobs", "top_logprobs", "chat_template_kwargs",
    "add_generation_prompt", "continue_final_message", "prompt", "echo", "suffix", "best_of",
    LM_STRUCTURED_FIELDS,
};
#define N_KNOWN_FIELDS ((int)(sizeof known_fields / sizeof known_fields[0]))

static bool is_hex4_zero(const char *s, size_t left) {
    return left >= 4 && s[0] == '0' && s[1] == '0' && s[2] == '0' && s[3] == '0';
}

void lm_json_prescan(const char *text, size_t len, int max_depth, size_t max_values,
                     const char *const *fields, int n_fields, lm_json_scan *out) {
    memset(out, 0, sizeof *out);
    int depth = 0;
    bool opened = false;      /* the last structural byte was [ or {: the next byte may start its first value */
    bool expect_key = false;  /* at depth 1 of an object, the next string is a key */
    bool top_object = false;
    char key[64] = "";        /* the top-level field being read (raw bytes, cut at 63) */
    bool key_known = fields == NULL;
    out->values = 1;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') continue;
        if (opened) {
            opened = false;
            if (ch != ']' && ch != '}') out->values++; /* a non-empty container's first value */
        }
        if (ch == '"') {
            bool is_key = depth == 1 && top_object && expect_key;
            size_t start = i + 1;
            for (i++; i < len && text[i] != '"'; i++) {
                if (text[i] != '\\') continue;
                if (i + 1 < len && text[i + 1] == 'u' && is_hex4_zero(text + i + 2, len - i - 2) && !out->nul) {
                    if (is_key) {
                        out->nul = true;
                        out->nul_field[0] = 0;
                    } else if (depth >= 1 && top_object && key_known) {
                        out->nul = true;
                        snprintf(out->nul_field, sizeof out->nul_field, "%s", key);
                    }
                }
                i++;
            }
            if (is_key) {
                size_t n = (i < len ? i : len) - start;
                if (n > sizeof key - 1) n = sizeof key - 1;
                memcpy(key, text + start, n);
                key[n] = 0;
                key_known = fields == NULL;
                for (int f = 0; !key_known && f < n_fields; f++) key_known = strcmp(key, fields[f]) == 0;
                expect_key = false;
            }
        } else if (ch == '[' || ch == '{') {
            if (++depth > out->depth) out->depth = depth;
            if (depth > max_depth) return;
            if (depth == 1) top_object = ch == '{', expect_key = ch == '{';
            opened = true;
        } else if (ch == ']' || ch == '}') {
            depth--;
        } else if (ch == ',') {
            if (++out->values > max_values) return;
            if (depth == 1) expect_key = true;
        }
    }
}

/* A field that is absent or JSON null counts as not given. */
static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(f) ? NULL : f;
}

static lm_status get_bool(parse_ctx *c, const cJSON *obj, const char *key, bool *out) {
    const cJSON *f = field(obj, key);
    if (!f) return LM_OK;
    if (!cJSON_IsBool(f)) return bad(c, key, "'%s' must be a boolean%s", NULL);
    *out = cJSON_IsTrue(f);
    return LM_OK;
}

static lm_status get_number(parse_ctx *c, const cJSON *obj, const char *key, double min, double max,
                            float *out) {
    const cJSON *f = field(obj, key);
    if (!f) return LM_OK;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble)) return bad(c, key, "'%s' must be a number%s", NULL);
    if (f->valuedouble < min || f->valuedouble > max) {
        char range[96];
        snprintf(range, sizeof range, " in [%g, %g], got %g", min, max, f->valuedouble);
        return bad(c, key, "'%s' must be%s", range);
    }
    *out = (float)f->valuedouble;
    return LM_OK;
}

static lm_status check_int(parse_ctx *c, const char *key, const cJSON *f, double min, double max,
                           long long *out) {
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || f->valuedouble != floor(f->valuedouble))
        return bad(c, key, "'%s' must be an integer%s", NULL);
    if (f->valuedouble < min || f->valuedouble > max) {
        char range[96];
        snprintf(range, sizeof range, " between %.0f and %.0f, got %.0f", min, max, f->valuedouble);
        return bad(c, key, "'%s' must be%s", range);
    }
    *out = (long long)f->valuedouble;
    return LM_OK;
}

static lm_status get_int(parse_ctx *c, const cJSON *obj, const char *key, double min, double max,
                         int *out, bool *given) {
    const cJSON *f = field(obj, key);
    if (!f) return LM_OK;
    long long v;
    lm_status st = check_int(c, key, f, min, max, &v);
    if (st != LM_OK) return st;
    *out = (int)v;
    if (given) *given = true;
    return LM_OK;
}

static lm_status get_string(parse_ctx *c, const cJSON *obj, const char *key, const char **out) {
    const cJSON *f = field(obj, key);
    if (!f) return LM_OK;
    if (!cJSON_IsString(f)) return bad(c, key, "'%s' must be a string%s", NULL);
    *out = f->valuestring;
    return LM_OK;
}

#define TRY(call)                          \
    do {                                   \
        lm_status try_st_ = (call);        \
        if (try_st_ != LM_OK) return try_st_; \
    } while (0)

static lm_status parse_token_ids(parse_ctx *c, const char *key, const cJSON *arr, int max,
                                 int32_t **out, int *n) {
    int count = cJSON_GetArraySize(arr);
    if (count > max) return bad(c, key, "'%s' holds too many token ids%s", NULL);
    *n = 0;
    if (count == 0) return LM_OK;
    *out = malloc(sizeof(int32_t) * (size_t)count);
    if (!*out) return lm_fail(c->err, LM_ERR_NOMEM, "out of memory reading %d token ids of '%s'", count, key);
    const cJSON *item;
    cJSON_ArrayForEach(item, arr) {
        long long v;
        TRY(check_int(c, key, item, 0, 2147483647.0, &v));
        (*out)[(*n)++] = (int32_t)v;
    }
    return LM_OK;
}

static lm_status parse_sampling(parse_ctx *c, const cJSON *b, lm_openai_request *r) {
    loom_request_params *p = &r->params;
    loom_sampling *s = &p->sampling;
    bool given = false;
    TRY(get_int(c, b, "max_tokens", 1, 1 << 30, &p->max_tokens, &given));
    r->max_tokens_given |= given;
    given = false;
    TRY(get_int(c, b, "max_completion_tokens", 1, 1 << 30, &p->max_tokens, &given));
    r->max_tokens_given |= given;
    TRY(get_number(c, b, "temperature", 0, 100, &s->temperature));
    TRY(get_number(c, b, "top_p", 1e-9, 1, &s->top_p));
    TRY(get_int(c, b, "top_k", -1, 1 << 30, &s->top_k, NULL));
    TRY(get_number(c, b, "min_p", 0, 1, &s->min_p));
    TRY(get_number(c, b, "presence_penalty", -2, 2, &s->presence_penalty));
    TRY(get_number(c, b, "frequency_penalty", -2, 2, &s->frequency_penalty));
    TRY(get_number(c, b, "repetition_penalty", 1e-6, 100, &s->repetition_penalty));
    TRY(get_int(c, b, "n", 1, 64, &p->n, NULL));
    TRY(get_int(c, b, "min_tokens", 0, 1 << 30, &p->min_tokens, NULL));
    TRY(get_bool(c, b, "ignore_eos", &p->ignore_eos));
    TRY(get_bool(c, b, "skip_special_tokens", &p->skip_special_tokens));
    bool speculative = true; /* loom extra: "speculative": false opts out of MTP drafting */
    TRY(get_bool(c, b, "speculative", &speculative));
    p->no_speculation = !speculative;
    const cJSON *seed = field(b, "seed");
    if (seed) {
        long long v;
        TRY(check_int(c, "seed", seed, -9.2e18, 9.2e18, &v));
        s->has_seed = true;
        s->seed = (uint64_t)v;
    }
    const cJSON *stop = field(b, "stop");
    if (cJSON_IsString(stop)) {
        if (stop->valuestring[0]) r->stop[p->n_stop++] = stop->valuestring;
    } else if (cJSON_IsArray(stop)) {
        if (cJSON_GetArraySize(stop) > LM_REQUEST_MAX_STOP)
            return bad(c, "stop", "'%s' holds more than 16 strings%s", NULL);
        const cJSON *item;
        cJSON_ArrayForEach(item, stop) {
            if (!cJSON_IsString(item)) return bad(c, "stop", "'%s' must be a string or a list of strings%s", NULL);
            if (item->valuestring[0]) r->stop[p->n_stop++] = item->valuestring;
        }
    } else if (stop) {
        return bad(c, "stop", "'%s' must be a string or a list of strings%s", NULL);
    }
    p->stop = r->stop;
    const cJSON *stop_ids = field(b, "stop_token_ids");
    if (stop_ids) {
        if (!cJSON_IsArray(stop_ids)) return bad(c, "stop_token_ids", "'%s' must be a list of integers%s", NULL);
        TRY(parse_token_ids(c, "stop_token_ids", stop_ids, MAX_STOP_TOKEN_IDS, &r->stop_token_ids,
                            &p->n_stop_token_ids));
        p->stop_token_ids = r->stop_token_ids;
    }
    const cJSON *bias = field(b, "logit_bias");
    if (bias) {
        if (!cJSON_IsObject(bias)) return bad(c, "logit_bias", "'%s' must be an object of token id -> bias%s", NULL);
        int count = cJSON_GetArraySize(bias);
        if (count > LM_REQUEST_MAX_LOGIT_BIAS) return bad(c, "logit_bias", "'%s' has too many entries%s", NULL);
        if (count > 0) {
            r->bias_ids = malloc(sizeof(int32_t) * (size_t)count);
            r->bias_values = malloc(sizeof(float) * (size_t)count);
            if (!r->bias_ids || !r->bias_values)
                return lm_fail(c->err, LM_ERR_NOMEM, "out of memory reading %d logit_bias entries", count);
        }
        const cJSON *item;
        cJSON_ArrayForEach(item, bias) {
            char *end = NULL;
            long id = strtol(item->string, &end, 10);
            if (!item->string[0] || *end || id < 0 || id > 2147483647L)
                return bad(c, "logit_bias", "'%s' keys must be token ids%s", NULL);
            if (!cJSON_IsNumber(item) || !(item->valuedouble >= -100 && item->valuedouble <= 100))
                return bad(c, "logit_bias", "'%s' values must be numbers in [-100, 100]%s", NULL);
            r->bias_ids[s->n_logit_bias] = (int32_t)id;
            r->bias_values[s->n_logit_bias++] = (float)item->valuedouble;
        }
        s->logit_bias_ids = r->bias_ids;
        s->logit_bias_values = r->bias_values;
    }
    const cJSON *so = field(b, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return bad(c, "stream_options", "'%s' must be an object%s", NULL);
        TRY(get_bool(c, so, "include_usage", &r->include_usage));
    }
    TRY(get_bool(c, b, "stream", &r->stream));
    const char *user = NULL;
    TRY(get_string(c, b, "user", &user)); /* accepted and ignored */
    return LM_OK;
}

/* A name for an error message: printable ASCII, cut at 64 bytes. */
static void printable_name(const char *name, char *out, size_t size) {
    size_t k = 0;
    for (const char *p = name; *p && k + 4 < size && p - name < 64; p++)
        out[k++] = *p >= 0x20 && *p < 0x7f ? *p : '?';
    if (strlen(name) > 64 && k + 4 < size) out[k++] = '.', out[k++] = '.', out[k++] = '.';
    out[k] = 0;
}

/* The URL of an image part: {"type": "image_url", "image_url": {"url": U}}
 * or "image_url": U (as vLLM); {"type": "image", "image" | "url": U}. */
static const cJSON *image_part_url(const cJSON *part, const char *type, const char **field) {
    if (strcmp(type, "image_url") == 0) {
        const cJSON *iu = cJSON_GetObjectItemCaseSensitive(part, "image_url");
        *field = "image_url.url";
        if (cJSON_IsString(iu)) {
            *field = "image_url";
            return iu;
        }
        return cJSON_GetObjectItemCaseSensitive(iu, "url");
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(part, "image");
    *field = "image";
    if (!u) {
        u = cJSON_GetObjectItemCaseSensitive(part, "url");
        *field = "url";
    }
    return u;
}

/* An image part: its bytes become the request's next image. */
static lm_status read_image_part(parse_ctx *c, const cJSON *part, const char *type, int msg, int index,
                                 const char *role) {
    lm_openai_request *r = c->r;
    if (!c->images || !c->images->marker)
        return bad_messages(c, "'messages[%d].content[%d]' is an image, and %s", msg, index,
                            c->images && c->images->refusal ? c->images->refusal : "this model does not take images");
    if (strcmp(role, "user") != 0)
        return bad_messages(c, "'messages[%d].content[%d]' is an image in a message of role '%s': images are taken "
                            "in user messages only", msg, index, role);
    if (!c->r || r->n_images >= LOOM_MAX_IMAGES)
        return bad_messages(c, "'messages' holds more than %d images, the most a request takes", LOOM_MAX_IMAGES);
    const char *field;
    const cJSON *url = image_part_url(part, type, &field);
    if (!cJSON_IsString(url))
        return bad_messages(c, "'messages[%d].content[%d]' (an image part) needs a string '%s'", msg, index,
                            strcmp(type, "image_url") == 0 ? "image_url.url" : "image");
    size_t max = c->images->max_image_bytes ? c->images->max_image_bytes : LM_IMAGE_DEFAULT_MAX_BYTES;
    size_t total = c->images->max_request_bytes ? c->images->max_request_bytes : LM_REQUEST_MAX_IMAGE_BYTES;
    size_t left = total > c->image_bytes ? total - c->image_bytes : 0;
    bool capped = max > left; /* by what the earlier images left */
    if (capped) max = left;
    lm_media_options mo = {.local_dir = c->images->local_dir, .max_bytes = max};
    uint8_t *data = NULL;
    size_t size = 0;
    lm_error why = {0};
    lm_status st = lm_media_load(&mo, url->valuestring, &data, &size, &why);
    if (st == LM_ERR_NOMEM) return lm_fail(c->err, st, "%s", why.message);
    if (st != LM_OK)
        return bad_messages(c, "'messages[%d].content[%d].%s' (image %d) %s%s", msg, index, field, r->n_images + 1,
                            why.message,
                            capped && strstr(why.message, "the limit is") ? " (what the request's earlier images left)" : "");
    r->image_data[r->n_images] = data;
    r->images[r->n_images] = (loom_image){data, size};
    r->n_images++;
    c->image_bytes += size;
    return LM_OK;
}

/* Text of a message's content: a string, null, or a list of parts (text,
 * and in user messages images, each written as the model's image marker). */
static lm_status content_text(parse_ctx *c, const cJSON *content, int msg, const char *role, cJSON **out) {
    if (!content || cJSON_IsNull(content)) {
        *out = cJSON_CreateString("");
    } else if (cJSON_IsString(content)) {
        *out = cJSON_CreateString(content->valuestring);
    } else if (cJSON_IsArray(content)) {
        lm_sbuf joined = {0};
        const cJSON *part;
        int index = 0;
        lm_status st = LM_OK;
        cJSON_ArrayForEach(part, content) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
                st = bad(c, "messages", "'%s' content parts must be objects with a type%s", NULL);
            } else if (strcmp(type->valuestring, "text") == 0) {
                if (!cJSON_IsString(text)) st = bad(c, "messages", "'%s' text parts need a string 'text'%s", NULL);
                else lm_sbuf_puts(&joined, text->valuestring);
            } else if (strcmp(type->valuestring, "image_url") == 0 || strcmp(type->valuestring, "image") == 0) {
                st = read_image_part(c, part, type->valuestring, msg, index, role);
                if (st == LM_OK) lm_sbuf_puts(&joined, c->images->marker);
            } else {
                char shown[80];
                printable_name(type->valuestring, shown, sizeof shown);
                st = bad(c, "messages", "'%s': content parts of type '%s' are not supported (text and image_url)",
                         shown);
            }
            if (st != LM_OK) break;
            index++;
        }
        if (st == LM_OK && joined.failed)
            st = lm_fail(c->err, LM_ERR_NOMEM, "out of memory joining %zu bytes of text parts", joined.len);
        if (st == LM_OK) *out = cJSON_CreateString(lm_sbuf_str(&joined));
        lm_sbuf_free(&joined);
        if (st != LM_OK) return st;
    } else {
        return bad(c, "messages", "'%s' content must be a string or a list of parts%s", NULL);
    }
    return *out ? LM_OK : lm_fail(c->err, LM_ERR_NOMEM, "out of memory copying a message's content");
}

static lm_status normalise_messages(parse_ctx *c, const cJSON *messages, cJSON **out) {
    if (!cJSON_IsArray(messages)) return bad(c, "messages", "'%s' must be a list of messages%s", NULL);
    int count = cJSON_GetArraySize(messages);
    if (count == 0) return bad(c, "messages", "'%s' must not be empty%s", NULL);
    if (count > MAX_MESSAGES) return bad(c, "messages", "'%s' holds too many messages%s", NULL);
    cJSON *list = cJSON_CreateArray();
    if (!list) return lm_fail(c->err, LM_ERR_NOMEM, "out of memory copying the messages");
    *out = list;
    const cJSON *m;
    int index = 0;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return bad(c, "messages", "'%s' entries must be objects with a string 'role'%s", NULL);
        const char *r = role->valuestring;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool") &&
            strcmp(r, "developer"))
            return bad(c, "messages", "'%s': unknown role '%s'", r);
        /* The copy holds every field but the content (which may hold
         * megabytes of base64), then the content as one string. */
        cJSON *copy = cJSON_CreateObject();
        if (!copy) return lm_fail(c->err, LM_ERR_NOMEM, "out of memory copying a message");
        cJSON_AddItemToArray(list, copy);
        for (const cJSON *f = m->child; f; f = f->next) {
            if (f->string && strcmp(f->string, "content") == 0) continue;
            cJSON *dup = cJSON_Duplicate(f, true);
            if (!dup) return lm_fail(c->err, LM_ERR_NOMEM, "out of memory copying a message");
            cJSON_AddItemToObject(copy, f->string ? f->string : "", dup);
        }
        if (strcmp(r, "developer") == 0) cJSON_ReplaceItemInObjectCaseSensitive(copy, "role", cJSON_CreateString("system"));
        cJSON *text;
        TRY(content_text(c, cJSON_GetObjectItemCaseSensitive(m, "content"), index, strcmp(r, "developer") ? r : "system",
                         &text));
        cJSON_AddItemToObject(copy, "content", text);
        index++;
        const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(copy, "reasoning_content");
        if (reasoning && !cJSON_IsString(reasoning) && !cJSON_IsNull(reasoning))
            return bad(c, "messages", "'%s' reasoning_content must be a string%s", NULL);
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(copy, "tool_calls");
        if (cJSON_IsNull(calls)) {
            cJSON_DeleteItemFromObjectCaseSensitive(copy, "tool_calls");
        } else if (calls) {
            if (!cJSON_IsArray(calls)) return bad(c, "messages", "'%s' tool_calls must be a list%s", NULL);
            cJSON *call;
            cJSON_ArrayForEach(call, calls) {
                cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                if (!cJSON_IsObject(fn) || !cJSON_IsString(name))
                    return bad(c, "messages", "'%s' tool calls need a function with a name%s", NULL);
                cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                /* Templates iterate over arguments (Qwen3.5's XML form), so
                 * give them the object the JSON string describes. */
                if (cJSON_IsString(args)) {
                    cJSON *parsed = cJSON_Parse(args->valuestring);
                    if (cJSON_IsObject(parsed)) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
                    else cJSON_Delete(parsed);
                }
            }
        }
    }
    return LM_OK;
}

/* OpenAI's rule for function names: ^[a-zA-Z0-9_-]{1,64}$.  It also keeps
 * names from writing markup into the prompt (a forced call's opening holds
 * the name). */
bool lm_valid_function_name(const char *name) {
    size_t n = 0;
    for (const char *p = name; *p; p++, n++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '-'))
            return false;
    return n >= 1 && n <= LM_REQUEST_MAX_TOOL_NAME;
}

static lm_status parse_tools(parse_ctx *c, const cJSON *b, lm_openai_request *r) {
    const cJSON *tools = field(b, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return bad(c, "tools", "'%s' must be a list%s", NULL);
        if (cJSON_GetArraySize(tools) > LM_REQUEST_MAX_TOOLS) return bad(c, "tools", "'%s' holds more than 128 tools%s", NULL);
        const cJSON *t;
        int index = 0;
        cJSON_ArrayForEach(t, tools) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            if (!cJSON_IsObject(t) || !cJSON_IsObject(fn) || !cJSON_IsString(name))
                return bad(c, "tools", "'%s' entries need a function with a string name%s", NULL);
            if (!lm_valid_function_name(name->valuestring)) {
                char shown[80], detail[200];
                printable_name(name->valuestring, shown, sizeof shown);
                snprintf(detail, sizeof detail, "[%d].function.name' ('%s') is not a valid function name: use 1 to 64 of "
                         "a-z, A-Z, 0-9, _ and -", index, shown);
                return bad(c, "tools", "'%s%s", detail);
            }
            index++;
        }
        if (cJSON_GetArraySize(tools) > 0) r->tools = tools;
    }
    const cJSON *choice = field(b, "tool_choice");
    if (cJSON_IsString(choice)) {
        const char *v = choice->valuestring;
        if (strcmp(v, "none") == 0) r->tool_choice = LM_TOOL_CHOICE_NONE;
        else if (strcmp(v, "auto") == 0) r->tool_choice = LM_TOOL_CHOICE_AUTO;
        else if (strcmp(v, "required") == 0) r->tool_choice = LM_TOOL_CHOICE_REQUIRED;
        else return bad(c, "tool_choice", "'%s' must be none, auto, required or a named function%s", NULL);
    } else if (cJSON_IsObject(choice)) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(name)) return bad(c, "tool_choice", "'%s' needs function.name%s", NULL);
        r->tool_choice = LM_TOOL_CHOICE_NAMED;
        r->tool_name = name->valuestring;
        bool found = false;
        const cJSON *t;
        cJSON_ArrayForEach(t, r->tools) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
            found |= strcmp(n->valuestring, r->tool_name) == 0;
        }
        if (!found) return bad(c, "tool_choice", "'%s' names the function '%s', which is not in tools", r->tool_name);
    } else if (choice) {
        return bad(c, "tool_choice", "'%s' must be a string or an object%s", NULL);
    }
    const cJSON *ptc = field(b, "parallel_tool_calls");
    if (ptc && !cJSON_IsBool(ptc)) return bad(c, "parallel_tool_calls", "'%s' must be a boolean%s", NULL);
    r->parallel_tool_calls = !cJSON_IsFalse(ptc);
    if ((r->tool_choice == LM_TOOL_CHOICE_REQUIRED) && !r->tools)
        return bad(c, "tool_choice", "'%s' is required but no tools were given%s", NULL);
    if (r->tool_choice == LM_TOOL_CHOICE_NONE) r->tools = NULL;
    return LM_OK;
}

static lm_status parse_chat(parse_ctx *c, cJSON *b, lm_openai_request *r) {
    TRY(normalise_messages(c, field(b, "messages"), &r->messages));
    r->params.images = r->n_images ? r->images : NULL;
    r->params.n_images = r->n_images;
    /* The request is served from the normalised copy: the body's messages
     * (images' base64 among them) need not be held while it runs. */
    cJSON_DeleteItemFromObjectCaseSensitive(b, "messages");
    TRY(parse_tools(c, b, r));
    TRY(get_bool(c, b, "logprobs", &r->logprobs));
    TRY(get_int(c, b, "top_logprobs", 0, LM_REQUEST_MAX_TOP_LOGPROBS, &r->top_logprobs, NULL));
    if (r->top_logprobs > 0 && !r->logprobs)
        return bad(c, "top_logprobs", "'%s' needs logprobs to be true%s", NULL);
    const cJSON *kwargs = field(b, "chat_template_kwargs");
    if (kwargs && !cJSON_IsObject(kwargs)) return bad(c, "chat_template_kwargs", "'%s' must be an object%s", NULL);
    r->template_kwargs = kwargs;
    r->add_generation_prompt = true;
    TRY(get_bool(c, b, "add_generation_prompt", &r->add_generation_prompt));
    TRY(get_bool(c, b, "continue_final_message", &r->continue_final_message));
    if (r->continue_final_message && r->add_generation_prompt && field(b, "add_generation_prompt"))
        return bad(c, "continue_final_message",
                   "'%s' and add_generation_prompt cannot both be true%s", NULL);
    if (r->continue_final_message) r->add_generation_prompt = false;
    return LM_OK;
}

/* One prompt: a string or a list of token ids. */
static lm_status parse_one_prompt(parse_ctx *c, const cJSON *prompt, lm_prompt_input *out) {
    if (cJSON_IsString(prompt)) {
        out->text = prompt->valuestring;
        out->text_len = strlen(prompt->valuestring);
        return LM_OK;
    }
    if (cJSON_IsArray(prompt) && (cJSON_GetArraySize(prompt) == 0 || cJSON_IsNumber(prompt->child)))
        return parse_token_ids(c, "prompt", prompt, MAX_PROMPT_IDS, &out->ids, &out->n_ids);
    return bad(c, "prompt", "'%s' must be a string, a list of token ids, or a list of either%s", NULL);
}

static lm_status parse_completion(parse_ctx *c, const cJSON *b, lm_openai_request *r) {
    const cJSON *prompt = field(b, "prompt");
    if (!prompt) return bad(c, "prompt", "'%s' is required%s", NULL);
    /* A list of prompts (strings or lists of token ids), as OpenAI's batch
     * form; a list of numbers is one prompt of token ids. */
    bool list = cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) > 0 && !cJSON_IsNumber(prompt->child);
    int count = list ? cJSON_GetArraySize(prompt) : 1;
    if (count > LM_REQUEST_MAX_PROMPTS) return bad(c, "prompt", "'%s' holds more than 128 prompts%s", NULL);
    if (count * r->params.n > LM_REQUEST_MAX_PROMPTS)
        return bad(c, "prompt", "'%s': prompts x n must be at most 128%s", NULL);
    r->prompts = calloc((size_t)count, sizeof *r->prompts);
    if (!r->prompts) return lm_fail(c->err, LM_ERR_NOMEM, "out of memory listing %d prompts", count);
    r->n_prompts = count;
    if (!list) {
        TRY(parse_one_prompt(c, prompt, &r->prompts[0]));
    } else {
        int i = 0;
        const cJSON *item;
        cJSON_ArrayForEach(item, prompt) TRY(parse_one_prompt(c, item, &r->prompts[i++]));
    }
    const cJSON *lp = field(b, "logprobs");
    if (lp) {
        long long k;
        TRY(check_int(c, "logprobs", lp, 0, LM_REQUEST_MAX_TOP_LOGPROBS, &k));
        r->logprobs = true;
        r->top_logprobs = (int)k;
    }
    TRY(get_bool(c, b, "echo", &r->echo));
    const char *suffix = NULL;
    TRY(get_string(c, b, "suffix", &suffix));
    if (suffix && suffix[0]) return bad(c, "suffix", "'%s' is not supported%s", NULL);
    const cJSON *best_of = field(b, "best_of");
    if (best_of) {
        long long v;
        TRY(check_int(c, "best_of", best_of, 1, 1, &v)); /* only the default */
    }
    return LM_OK;
}

lm_status lm_openai_request_parse(lm_api_kind kind, const char *body, size_t len,
                                  const lm_image_parts *images, lm_openai_request *out, char *param,
                                  size_t param_size, lm_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    loom_request_params_default(&out->params);
    parse_ctx c = {param, param_size, err, images, out, 0};
    if (param && param_size) param[0] = 0;
    /* The bounds, on the bytes, before cJSON builds anything. */
    lm_json_scan scan;
    lm_json_prescan(body, len, LM_REQUEST_MAX_DEPTH, LM_REQUEST_MAX_VALUES, known_fields, N_KNOWN_FIELDS, &scan);
    if (scan.depth > LM_REQUEST_MAX_DEPTH)
        return bad(&c, NULL, "the request body is nested deeper than the server accepts (64 levels)%s%s", NULL);
    if (scan.values > LM_REQUEST_MAX_VALUES) {
        out->too_large = true;
        return bad(&c, NULL, "the request body holds more JSON values than the server accepts (524288)%s%s", NULL);
    }
    /* cJSON strings end at a NUL: a \u0000 would silently cut the prompt,
     * a message or the model name, so it is refused. */
    if (scan.nul && scan.nul_field[0])
        return bad(&c, scan.nul_field, "'%s' holds a NUL character (\\u0000), which is not accepted%s", NULL);
    if (scan.nul) return bad(&c, NULL, "a field name holds a NUL character (\\u0000)%s%s", NULL);
    cJSON *doc = cJSON_ParseWithLength(body, len);
    if (!doc) return bad(&c, NULL, "the request body is not valid JSON%s%s", NULL);
    return lm_openai_request_parse_doc(kind, doc, images, out, param, param_size, err);
}

lm_status lm_openai_request_parse_doc(lm_api_kind kind, cJSON *doc, const lm_image_parts *images,
                                      lm_openai_request *out, char *param, size_t param_size, lm_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    loom_request_params_default(&out->params);
    parse_ctx c = {param, param_size, err, images, out, 0};
    if (param && param_size) param[0] = 0;
    out->doc = doc;
    if (!cJSON_IsObject(out->doc)) return bad(&c, NULL, "the request body must be a JSON object%s%s", NULL);
    /* Unknown fields are ignored: drop them now rather than hold them for
     * the whole generation. */
    for (cJSON *f = out->doc->child, *next; f; f = next) {
        next = f->next;
        bool known = false;
        for (int k = 0; !known && k < N_KNOWN_FIELDS; k++) known = f->string && strcmp(f->string, known_fields[k]) == 0;
        if (!known) cJSON_Delete(cJSON_DetachItemViaPointer(out->doc, f));
    }
    lm_status st = get_string(&c, out->doc, "model", &out->model);
    if (st == LM_OK) st = parse_sampling(&c, out->doc, out);
    if (st == LM_OK) st = kind == LM_API_CHAT ? parse_chat(&c, out->doc, out) : parse_completion(&c, out->doc, out);
    out->grammars = images ? images->grammars : NULL;
    if (st == LM_OK) st = lm_structured_output_parse(out->doc, out->grammars, &out->grammar, param, param_size, err);
    if (st != LM_OK) return st;
    out->params.grammar = out->grammar;
    out->params.sampling.logprobs = out->logprobs ? out->top_logprobs : -1;
    return LM_OK;
}

void lm_openai_request_free(lm_openai_request *r) {
    cJSON_Delete(r->doc);
    cJSON_Delete(r->messages);
    for (int i = 0; i < r->n_images; i++) free(r->image_data[i]);
    for (int i = 0; r->prompts && i < r->n_prompts; i++) free(r->prompts[i].ids);
    free(r->prompts);
    free(r->stop_token_ids);
    free(r->bias_ids);
    free(r->bias_values);
    loom_grammar_free(r->grammar);
    memset(r, 0, sizeof *r);
}
