#include "server/anthropic_request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/sbuf.h"

#define MAX_MESSAGES 4096

typedef struct {
    char *param;
    size_t param_size;
    lm_error *err;
} actx;

__attribute__((format(printf, 3, 4))) static lm_status bad(actx *c, const char *param, const char *fmt, ...) {
    if (c->param && c->param_size) snprintf(c->param, c->param_size, "%s", param ? param : "");
    char message[LM_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return lm_fail(c->err, LM_ERR_INVALID, "%s", message);
}

static lm_status oom(actx *c, const char *what) {
    return lm_fail(c->err, LM_ERR_NOMEM, "out of memory translating %s", what);
}

#define TRY(call)                             \
    do {                                      \
        lm_status try_st_ = (call);           \
        if (try_st_ != LM_OK) return try_st_; \
    } while (0)

/* The top-level fields read; a NUL escape under them is refused. */
static const char *const known_fields[] = {"model",       "max_tokens",  "messages", "system", "stop_sequences",
                                           "stream",      "temperature", "top_p",    "top_k",  "thinking",
                                           "tools",       "tool_choice", "output_config", "output_format"};
#define N_KNOWN_FIELDS ((int)(sizeof known_fields / sizeof known_fields[0]))

/* A field that is absent or JSON null counts as not given. */
static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(f) ? NULL : f;
}

/* A type name for an error message: printable ASCII, cut at 40 bytes. */
static void shown_name(const char *name, char *out, size_t size) {
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < size && p - name < 40; p++) out[k++] = *p >= 0x20 && *p < 0x7f ? *p : '?';
    out[k] = 0;
}

/* Text of a string or a list of text blocks (system, tool_result content). */
static lm_status text_of(actx *c, const cJSON *v, const char *name, lm_sbuf *out) {
    if (cJSON_IsString(v)) {
        lm_sbuf_puts(out, v->valuestring);
        return LM_OK;
    }
    if (!cJSON_IsArray(v)) return bad(c, name, "'%s' must be a string or a list of text blocks", name);
    const cJSON *b;
    int i = 0;
    cJSON_ArrayForEach(b, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
        char path[160];
        snprintf(path, sizeof path, "%s[%d]", name, i);
        if (!cJSON_IsObject(b) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0)
            return bad(c, path, "'%s' must be a text block ({\"type\": \"text\", \"text\": ...}); only text is "
                       "supported here", path);
        if (!cJSON_IsString(text)) return bad(c, path, "'%s' needs a string 'text'", path);
        lm_sbuf_puts(out, text->valuestring);
        i++;
    }
    return LM_OK;
}

static cJSON *text_part(const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "text");
    cJSON_AddStringToObject(p, "text", text);
    return p;
}

/* An image block's source -> an OpenAI image_url part (a data: URI for
 * base64; a URL is passed on, and media.c refuses remote fetches). */
static lm_status image_part(actx *c, const cJSON *block, const char *path, cJSON **out) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(block, "source");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(src, "type");
    char name[128];
    snprintf(name, sizeof name, "%s.source", path);
    if (!cJSON_IsObject(src) || !cJSON_IsString(type))
        return bad(c, name, "'%s' must be an object with a type (base64 or url)", name);
    lm_sbuf url = {0};
    if (strcmp(type->valuestring, "base64") == 0) {
        const cJSON *media = cJSON_GetObjectItemCaseSensitive(src, "media_type");
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(src, "data");
        if (!cJSON_IsString(media) || !cJSON_IsString(data))
            return bad(c, name, "'%s' (base64) needs string 'media_type' and 'data'", name);
        lm_sbuf_printf(&url, "data:%s;base64,", media->valuestring);
        lm_sbuf_puts(&url, data->valuestring);
    } else if (strcmp(type->valuestring, "url") == 0) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(src, "url");
        if (!cJSON_IsString(u)) return bad(c, name, "'%s' (url) needs a string 'url'", name);
        lm_sbuf_puts(&url, u->valuestring);
    } else {
        char shown[48];
        shown_name(type->valuestring, shown, sizeof shown);
        return bad(c, name, "'%s' of type '%s' is not supported (base64 or url)", name, shown);
    }
    cJSON *p = NULL;
    if (!url.failed && (p = cJSON_CreateObject())) {
        cJSON_AddStringToObject(p, "type", "image_url");
        cJSON *iu = cJSON_AddObjectToObject(p, "image_url");
        if (!cJSON_AddStringToObject(iu, "url", lm_sbuf_str(&url))) {
            cJSON_Delete(p);
            p = NULL;
        }
    }
    lm_sbuf_free(&url);
    if (!p) return oom(c, "an image block");
    *out = p;
    return LM_OK;
}

/* A tool_result block -> a tool message. */
static lm_status tool_result_message(actx *c, const cJSON *block, const char *path, cJSON **out) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(block, "tool_use_id");
    char name[128];
    snprintf(name, sizeof name, "%s.tool_use_id", path);
    if (!cJSON_IsString(id)) return bad(c, name, "'%s' must be a string", name);
    lm_sbuf text = {0};
    const cJSON *content = field(block, "content");
    snprintf(name, sizeof name, "%s.content", path);
    lm_status st = content ? text_of(c, content, name, &text) : LM_OK;
    cJSON *m = st == LM_OK && !text.failed ? cJSON_CreateObject() : NULL;
    if (m) {
        cJSON_AddStringToObject(m, "role", "tool");
        cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
        cJSON_AddStringToObject(m, "content", lm_sbuf_str(&text));
    }
    lm_sbuf_free(&text);
    if (st != LM_OK) return st;
    if (!m) return oom(c, "a tool_result block");
    *out = m;
    return LM_OK;
}

/* A tool_use block -> an OpenAI tool call (arguments as the input object). */
static lm_status tool_use_call(actx *c, const cJSON *block, const char *path, cJSON **out) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(block, "id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(block, "name");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(block, "input");
    char f[128];
    if (!cJSON_IsString(id)) return snprintf(f, sizeof f, "%s.id", path), bad(c, f, "'%s' must be a string", f);
    if (!cJSON_IsString(name)) return snprintf(f, sizeof f, "%s.name", path), bad(c, f, "'%s' must be a string", f);
    if (!cJSON_IsObject(input))
        return snprintf(f, sizeof f, "%s.input", path), bad(c, f, "'%s' must be an object", f);
    cJSON *call = cJSON_CreateObject();
    if (!call) return oom(c, "a tool_use block");
    cJSON_AddStringToObject(call, "id", id->valuestring);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(call, "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON *args = cJSON_Duplicate(input, true);
    if (!fn || !args) {
        cJSON_Delete(args);
        cJSON_Delete(call);
        return oom(c, "a tool_use block");
    }
    cJSON_AddItemToObject(fn, "arguments", args);
    *out = call;
    return LM_OK;
}

/* One message's content blocks.  A user message's tool_result blocks
 * become tool messages (added to list before it); its text and images its
 * parts.  An assistant message's text its parts, its thinking the
 * reasoning_content, its tool_use blocks tool_calls. */
static lm_status add_blocks(actx *c, cJSON *list, cJSON *msg, const cJSON *content, int index, bool user) {
    cJSON *parts = cJSON_AddArrayToObject(msg, "content");
    cJSON *calls = NULL;
    lm_sbuf thinking = {0};
    bool has_thinking = false;
    const cJSON *b;
    int k = 0;
    lm_status st = LM_OK;
    cJSON_ArrayForEach(b, content) {
        char path[64];
        snprintf(path, sizeof path, "messages[%d].content[%d]", index, k++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
            st = bad(c, path, "'%s' must be a content block: an object with a string 'type'", path);
            break;
        }
        const char *t = type->valuestring;
        cJSON *made = NULL;
        if (strcmp(t, "text") == 0) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "text");
            if (!cJSON_IsString(text)) st = bad(c, path, "'%s' (a text block) needs a string 'text'", path);
            else if (!(made = text_part(text->valuestring))) st = oom(c, "a text block");
            else cJSON_AddItemToArray(parts, made);
        } else if (user && strcmp(t, "image") == 0) {
            if ((st = image_part(c, b, path, &made)) == LM_OK) cJSON_AddItemToArray(parts, made);
        } else if (user && strcmp(t, "tool_result") == 0) {
            if ((st = tool_result_message(c, b, path, &made)) == LM_OK) cJSON_AddItemToArray(list, made);
        } else if (!user && strcmp(t, "tool_use") == 0) {
            if ((st = tool_use_call(c, b, path, &made)) == LM_OK) {
                if (!calls) calls = cJSON_AddArrayToObject(msg, "tool_calls");
                cJSON_AddItemToArray(calls, made);
            }
        } else if (!user && strcmp(t, "thinking") == 0) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(b, "thinking");
            if (!cJSON_IsString(text)) st = bad(c, path, "'%s' (a thinking block) needs a string 'thinking'", path);
            else lm_sbuf_puts(&thinking, text->valuestring), has_thinking = true;
        } else if (!user && strcmp(t, "redacted_thinking") == 0) {
            /* nothing the model can read */
        } else {
            char shown[48];
            shown_name(t, shown, sizeof shown);
            st = bad(c, path, "'%s': content blocks of type '%s' are not supported in %s messages (%s)", path, shown,
                     user ? "user" : "assistant",
                     user ? "text, image and tool_result" : "text, tool_use, thinking and redacted_thinking");
        }
        if (st != LM_OK) break;
    }
    if (st == LM_OK && has_thinking) {
        if (thinking.failed) st = oom(c, "thinking blocks");
        else cJSON_AddStringToObject(msg, "reasoning_content", lm_sbuf_str(&thinking));
    }
    lm_sbuf_free(&thinking);
    return st;
}

static lm_status add_message(actx *c, cJSON *list, const cJSON *m, int index, bool *ends_with_assistant) {
    char path[64];
    snprintf(path, sizeof path, "messages[%d]", index);
    if (!cJSON_IsObject(m)) return bad(c, path, "'%s' must be an object with 'role' and 'content'", path);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    snprintf(path, sizeof path, "messages[%d].role", index);
    if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return bad(c, path, "'%s' must be \"user\" or \"assistant\" (the system prompt is the top-level 'system')",
                   path);
    bool user = strcmp(role->valuestring, "user") == 0;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    snprintf(path, sizeof path, "messages[%d].content", index);
    if (!cJSON_IsString(content) && !cJSON_IsArray(content))
        return bad(c, path, "'%s' must be a string or a list of content blocks", path);
    cJSON *msg = cJSON_CreateObject();
    if (!msg) return oom(c, "a message");
    cJSON_AddStringToObject(msg, "role", role->valuestring);
    lm_status st = LM_OK;
    if (cJSON_IsString(content)) cJSON_AddStringToObject(msg, "content", content->valuestring);
    else st = add_blocks(c, list, msg, content, index, user);
    if (st != LM_OK) {
        cJSON_Delete(msg);
        return st;
    }
    /* A user turn of tool results alone is those tool messages. */
    bool only_results = user && cJSON_IsArray(content) && cJSON_GetArraySize(content) > 0 &&
                        cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(msg, "content")) == 0;
    if (only_results) cJSON_Delete(msg);
    else cJSON_AddItemToArray(list, msg);
    *ends_with_assistant = !user;
    if (!user && cJSON_GetObjectItemCaseSensitive(msg, "tool_calls")) *ends_with_assistant = false;
    return LM_OK;
}

static lm_status translate_messages(actx *c, const cJSON *body, cJSON *out, bool *prefill) {
    cJSON *list = cJSON_AddArrayToObject(out, "messages");
    if (!list) return oom(c, "the messages");
    const cJSON *system = field(body, "system");
    if (system) {
        lm_sbuf text = {0};
        TRY(text_of(c, system, "system", &text));
        cJSON *m = text.failed ? NULL : cJSON_CreateObject();
        if (m) {
            cJSON_AddStringToObject(m, "role", "system");
            cJSON_AddStringToObject(m, "content", lm_sbuf_str(&text));
            cJSON_AddItemToArray(list, m);
        }
        lm_sbuf_free(&text);
        if (!m) return oom(c, "the system prompt");
    }
    const cJSON *messages = field(body, "messages");
    if (!messages) return bad(c, "messages", "'messages' is required");
    if (!cJSON_IsArray(messages)) return bad(c, "messages", "'messages' must be a list of messages");
    int count = cJSON_GetArraySize(messages);
    if (count == 0) return bad(c, "messages", "'messages' must not be empty");
    if (count > MAX_MESSAGES) return bad(c, "messages", "'messages' holds more than %d messages", MAX_MESSAGES);
    const cJSON *m;
    int index = 0;
    bool last_assistant = false;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        bool assistant = cJSON_IsString(role) && strcmp(role->valuestring, "assistant") == 0;
        TRY(add_message(c, list, m, index, &last_assistant));
        if (assistant && index == count - 1 && !last_assistant) {
            char path[64];
            snprintf(path, sizeof path, "messages[%d]", index);
            return bad(c, path, "'%s': the last message is an assistant turn with tool_use blocks; send their "
                       "tool_result blocks in a user message", path);
        }
        index++;
    }
    /* A last assistant turn is a prefill: the reply continues it. */
    *prefill = last_assistant;
    return LM_OK;
}

static lm_status translate_tools(actx *c, const cJSON *body, cJSON *out, bool *one_tool_use) {
    const cJSON *tools = field(body, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return bad(c, "tools", "'tools' must be a list");
        if (cJSON_GetArraySize(tools) > LM_REQUEST_MAX_TOOLS)
            return bad(c, "tools", "'tools' holds more than %d tools", LM_REQUEST_MAX_TOOLS);
        cJSON *list = cJSON_AddArrayToObject(out, "tools");
        if (!list) return oom(c, "the tools");
        const cJSON *t;
        int i = 0;
        cJSON_ArrayForEach(t, tools) {
            char path[64];
            snprintf(path, sizeof path, "tools[%d]", i);
            if (!cJSON_IsObject(t)) return bad(c, path, "'%s' must be an object", path);
            const cJSON *type = field(t, "type");
            if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom") != 0)) {
                char shown[48];
                shown_name(cJSON_IsString(type) ? type->valuestring : "?", shown, sizeof shown);
                snprintf(path, sizeof path, "tools[%d].type", i);
                return bad(c, path, "'%s' is '%s': only client tools (name, description, input_schema) are "
                           "supported, not Anthropic's server tools", path, shown);
            }
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
            const cJSON *description = field(t, "description");
            const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
            snprintf(path, sizeof path, "tools[%d].name", i);
            if (!cJSON_IsString(name) || !lm_valid_function_name(name->valuestring))
                return bad(c, path, "'%s' must be 1 to 64 of a-z, A-Z, 0-9, _ and -", path);
            snprintf(path, sizeof path, "tools[%d].description", i);
            if (description && !cJSON_IsString(description)) return bad(c, path, "'%s' must be a string", path);
            snprintf(path, sizeof path, "tools[%d].input_schema", i);
            if (!cJSON_IsObject(schema)) return bad(c, path, "'%s' must be an object (a JSON Schema)", path);
            const cJSON *strict = field(t, "strict");
            snprintf(path, sizeof path, "tools[%d].strict", i);
            if (strict && !cJSON_IsBool(strict)) return bad(c, path, "'%s' must be a boolean", path);
            cJSON *tool = cJSON_CreateObject();
            if (!tool) return oom(c, "a tool");
            cJSON_AddItemToArray(list, tool);
            cJSON_AddStringToObject(tool, "type", "function");
            cJSON *fn = cJSON_AddObjectToObject(tool, "function");
            if (!fn) return oom(c, "a tool");
            cJSON_AddStringToObject(fn, "name", name->valuestring);
            if (description) cJSON_AddStringToObject(fn, "description", description->valuestring);
            cJSON *params = cJSON_Duplicate(schema, true);
            if (!params) return oom(c, "a tool's input_schema");
            cJSON_AddItemToObject(fn, "parameters", params);
            /* strict: a forced call's input follows input_schema (tool_choice.c) */
            if (cJSON_IsTrue(strict) && !cJSON_AddBoolToObject(fn, "strict", true)) return oom(c, "a tool");
            i++;
        }
    }
    const cJSON *choice = field(body, "tool_choice");
    if (!choice) return LM_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(choice, "type");
    if (!cJSON_IsObject(choice) || !cJSON_IsString(type))
        return bad(c, "tool_choice", "'tool_choice' must be an object with a type (auto, any, tool or none)");
    const cJSON *dp = field(choice, "disable_parallel_tool_use");
    if (dp && !cJSON_IsBool(dp))
        return bad(c, "tool_choice.disable_parallel_tool_use", "'tool_choice.disable_parallel_tool_use' must be a boolean");
    const char *t = type->valuestring;
    *one_tool_use = cJSON_IsTrue(dp) && strcmp(t, "none") != 0;
    if (strcmp(t, "auto") == 0) return cJSON_AddStringToObject(out, "tool_choice", "auto") ? LM_OK : oom(c, "tool_choice");
    if (strcmp(t, "none") == 0) return cJSON_AddStringToObject(out, "tool_choice", "none") ? LM_OK : oom(c, "tool_choice");
    if (strcmp(t, "any") == 0) {
        if (!tools) return bad(c, "tool_choice", "'tool_choice' is 'any' but no tools were given");
        return cJSON_AddStringToObject(out, "tool_choice", "required") ? LM_OK : oom(c, "tool_choice");
    }
    if (strcmp(t, "tool") != 0)
        return bad(c, "tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(choice, "name");
    if (!cJSON_IsString(name)) return bad(c, "tool_choice.name", "'tool_choice.name' must be a string (type tool)");
    cJSON *o = cJSON_AddObjectToObject(out, "tool_choice");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(o, "function");
    if (!fn || !cJSON_AddStringToObject(fn, "name", name->valuestring)) return oom(c, "tool_choice");
    return LM_OK;
}

/* output_config.format (or the beta's top-level output_format, which the
 * SDK now sends as output_config.format): {"type": "json_schema", "schema":
 * S} constrains the text to S as OpenAI's response_format json_schema does
 * (structured_output.c compiles it; a schema loom cannot enforce is a 400).
 * output_config.effort is accepted and has no effect. */
static lm_status translate_output_format(actx *c, const cJSON *body, cJSON *out) {
    const cJSON *config = field(body, "output_config");
    const cJSON *legacy = field(body, "output_format");
    if (config && !cJSON_IsObject(config)) return bad(c, "output_config", "'output_config' must be an object");
    const cJSON *effort = config ? field(config, "effort") : NULL;
    if (effort && !cJSON_IsString(effort))
        return bad(c, "output_config.effort", "'output_config.effort' must be a string");
    const cJSON *format = config ? field(config, "format") : NULL;
    const char *name = "output_config.format";
    if (format && legacy) return bad(c, "output_format", "give 'output_config.format' or 'output_format', not both");
    if (!format) format = legacy, name = "output_format";
    if (!format) return LM_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(format, "type");
    if (!cJSON_IsObject(format) || !cJSON_IsString(type) || strcmp(type->valuestring, "json_schema") != 0)
        return bad(c, name, "'%s' must be {\"type\": \"json_schema\", \"schema\": {...}}", name);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(format, "schema");
    char path[48];
    snprintf(path, sizeof path, "%s.schema", name);
    if (!cJSON_IsObject(schema)) return bad(c, path, "'%s' must be an object (a JSON Schema)", path);
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    cJSON *js = rf && cJSON_AddStringToObject(rf, "type", "json_schema") ? cJSON_AddObjectToObject(rf, "json_schema")
                                                                         : NULL;
    cJSON *dup = js && cJSON_AddStringToObject(js, "name", "output") && cJSON_AddBoolToObject(js, "strict", true)
                     ? cJSON_Duplicate(schema, true)
                     : NULL;
    if (!dup) return oom(c, name);
    cJSON_AddItemToObject(js, "schema", dup);
    return LM_OK;
}

/* Fields passed on as they are: the OpenAI parser checks their types and
 * ranges under the same names. */
static lm_status copy_field(actx *c, const cJSON *body, cJSON *out, const char *key) {
    const cJSON *f = field(body, key);
    if (!f) return LM_OK;
    cJSON *dup = cJSON_Duplicate(f, true);
    if (!dup) return oom(c, key);
    cJSON_AddItemToObject(out, key, dup);
    return LM_OK;
}

static lm_status translate_sampling(actx *c, const cJSON *body, cJSON *out, bool count_tokens) {
    if (!count_tokens && !field(body, "max_tokens")) return bad(c, "max_tokens", "'max_tokens' is required");
    static const char *const copied[] = {"model", "max_tokens", "temperature", "top_p", "top_k", "stream"};
    for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++)
        if (!count_tokens || i == 0) TRY(copy_field(c, body, out, copied[i]));
    const cJSON *stop = field(body, "stop_sequences");
    if (stop && !count_tokens) {
        if (!cJSON_IsArray(stop)) return bad(c, "stop_sequences", "'stop_sequences' must be a list of strings");
        if (cJSON_GetArraySize(stop) > LM_REQUEST_MAX_STOP)
            return bad(c, "stop_sequences", "'stop_sequences' holds more than %d strings", LM_REQUEST_MAX_STOP);
        const cJSON *s;
        cJSON_ArrayForEach(s, stop) if (!cJSON_IsString(s))
            return bad(c, "stop_sequences", "'stop_sequences' must be a list of strings");
        TRY(copy_field(c, body, out, "stop_sequences"));
        cJSON *copy = cJSON_DetachItemFromObjectCaseSensitive(out, "stop_sequences");
        cJSON_AddItemToObject(out, "stop", copy);
    }
    const cJSON *thinking = field(body, "thinking");
    if (!thinking) return LM_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(thinking, "type");
    if (!cJSON_IsObject(thinking) || !cJSON_IsString(type))
        return bad(c, "thinking", "'thinking' must be an object with a type (enabled or disabled)");
    bool enabled = strcmp(type->valuestring, "enabled") == 0;
    if (!enabled && strcmp(type->valuestring, "disabled") != 0)
        return bad(c, "thinking.type", "'thinking.type' must be enabled or disabled");
    if (enabled) {
        const cJSON *budget = cJSON_GetObjectItemCaseSensitive(thinking, "budget_tokens");
        if (!cJSON_IsNumber(budget) || budget->valuedouble < 1 || budget->valuedouble > 1e9 ||
            budget->valuedouble != (double)(long long)budget->valuedouble)
            return bad(c, "thinking.budget_tokens", "'thinking.budget_tokens' must be a positive integer");
    }
    cJSON *kwargs = cJSON_AddObjectToObject(out, "chat_template_kwargs");
    if (!kwargs || !cJSON_AddBoolToObject(kwargs, "enable_thinking", enabled)) return oom(c, "thinking");
    return LM_OK;
}

/* An error message of the OpenAI parser in Anthropic's terms: its first
 * "'from'" becomes "'to'" (what the client sent). */
static void rename_field(lm_error *err, const char *from, const char *to) {
    if (!err) return;
    char quoted[40];
    snprintf(quoted, sizeof quoted, "'%s'", from);
    char *at = strstr(err->message, quoted);
    if (!at) return;
    char rest[LM_ERROR_MESSAGE_MAX];
    snprintf(rest, sizeof rest, "%s", at + strlen(quoted));
    size_t head = (size_t)(at - err->message);
    snprintf(at, sizeof err->message - head, "'%s'%s", to, rest);
}

lm_status lm_anthropic_request_parse(const char *body, size_t len, bool count_tokens,
                                     const lm_image_parts *images, lm_openai_request *out, bool *one_tool_use,
                                     char *param, size_t param_size, lm_error *err) {
    memset(out, 0, sizeof *out);
    *one_tool_use = false;
    out->kind = LM_API_CHAT;
    loom_request_params_default(&out->params);
    actx c = {param, param_size, err};
    if (param && param_size) param[0] = 0;
    lm_json_scan scan;
    lm_json_prescan(body, len, LM_REQUEST_MAX_DEPTH, LM_REQUEST_MAX_VALUES, known_fields, N_KNOWN_FIELDS, &scan);
    if (scan.depth > LM_REQUEST_MAX_DEPTH)
        return bad(&c, NULL, "the request body is nested deeper than the server accepts (%d levels)",
                   LM_REQUEST_MAX_DEPTH);
    if (scan.values > LM_REQUEST_MAX_VALUES) {
        out->too_large = true;
        return bad(&c, NULL, "the request body holds more JSON values than the server accepts (%d)",
                   LM_REQUEST_MAX_VALUES);
    }
    if (scan.nul && scan.nul_field[0])
        return bad(&c, scan.nul_field, "'%s' holds a NUL character (\\u0000), which is not accepted", scan.nul_field);
    if (scan.nul) return bad(&c, NULL, "a field name holds a NUL character (\\u0000)");
    cJSON *in = cJSON_ParseWithLength(body, len);
    if (!in) return bad(&c, NULL, "the request body is not valid JSON");
    cJSON *doc = cJSON_CreateObject();
    bool prefill = false;
    lm_status st = !doc ? oom(&c, "the request")
                   : !cJSON_IsObject(in) ? bad(&c, NULL, "the request body must be a JSON object")
                                         : LM_OK;
    if (st == LM_OK) st = translate_sampling(&c, in, doc, count_tokens);
    if (st == LM_OK) st = translate_messages(&c, in, doc, &prefill);
    if (st == LM_OK) st = translate_tools(&c, in, doc, one_tool_use);
    /* disable_parallel_tool_use: a forced call is the only one (tool_choice.h) */
    if (st == LM_OK && *one_tool_use && !cJSON_AddFalseToObject(doc, "parallel_tool_calls"))
        st = oom(&c, "tool_choice");
    if (st == LM_OK && !count_tokens) st = translate_output_format(&c, in, doc);
    if (st == LM_OK && prefill) st = cJSON_AddBoolToObject(doc, "continue_final_message", true) ? LM_OK : oom(&c, "");
    const char *format_name = field(in, "output_format") ? "output_format" : "output_config.format";
    cJSON_Delete(in);
    if (st != LM_OK) {
        cJSON_Delete(doc);
        return st;
    }
    st = lm_openai_request_parse_doc(LM_API_CHAT, doc, images, out, param, param_size, err);
    /* The OpenAI parser's names for the stop strings and the format. */
    if (st != LM_OK && param && strcmp(param, "stop") == 0) snprintf(param, param_size, "stop_sequences");
    if (st != LM_OK && param && strcmp(param, "response_format") == 0) {
        snprintf(param, param_size, "%s", format_name);
        rename_field(err, "response_format", format_name);
    }
    return st;
}
