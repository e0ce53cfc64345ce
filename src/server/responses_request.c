#include "server/responses_request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/responses_context.h"
#include "server/sbuf.h"

typedef struct {
    char *param;
    size_t param_size;
    lm_error *err;
} rctx;

__attribute__((format(printf, 3, 4))) static lm_status bad(rctx *c, const char *param, const char *fmt, ...) {
    if (c->param && c->param_size) snprintf(c->param, c->param_size, "%s", param ? param : "");
    char message[LM_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return lm_fail(c->err, LM_ERR_INVALID, "%s", message);
}

static lm_status oom(rctx *c, const char *what) {
    return lm_fail(c->err, LM_ERR_NOMEM, "out of memory translating %s", what);
}

#define TRY(call)                             \
    do {                                      \
        lm_status try_st_ = (call);           \
        if (try_st_ != LM_OK) return try_st_; \
    } while (0)

#define NO_CONVERSATIONS                                                                                      \
    "loom has no Conversations API: pass previous_response_id (the response before, stored with store: true), " \
    "or send the whole conversation in 'input'"

/* The top-level fields read; a NUL escape under them is refused. */
static const char *const known_fields[] = {
    "model", "input", "instructions", "tools", "tool_choice", "text", "max_output_tokens", "temperature", "top_p",
    "stream", "parallel_tool_calls", "metadata", "store", "reasoning", "previous_response_id", "background",
    "conversation", "prompt", "include", "truncation", "top_logprobs", "user", "max_tool_calls"};
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

static bool is(const cJSON *v, const char *s) { return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0; }

/* ------------------------------------------------------------ input items */

typedef struct {
    cJSON *list;          /* the chat messages */
    cJSON *assistant;     /* the last message when it is an assistant turn calls may join */
    lm_sbuf reasoning;    /* a reasoning item's text, for the next assistant turn */
    bool has_reasoning;
} input_state;

static lm_status add_text_part(rctx *c, cJSON *parts, const char *text) {
    cJSON *p = cJSON_CreateObject();
    if (!p || !cJSON_AddStringToObject(p, "type", "text") || !cJSON_AddStringToObject(p, "text", text)) {
        cJSON_Delete(p);
        return oom(c, "a text part");
    }
    cJSON_AddItemToArray(parts, p);
    return LM_OK;
}

/* A message's content parts -> chat parts (text, image_url). */
static lm_status message_parts(rctx *c, const cJSON *content, const char *path, bool user, cJSON *parts) {
    const cJSON *part;
    int k = 0;
    cJSON_ArrayForEach(part, content) {
        char where[128];
        snprintf(where, sizeof where, "%.96s[%d]", path, k++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return bad(c, where, "'%s' must be a content part: an object with a string 'type'", where);
        const char *t = type->valuestring;
        if (strcmp(t, "input_text") == 0 || strcmp(t, "output_text") == 0 || strcmp(t, "refusal") == 0) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, strcmp(t, "refusal") == 0 ? "refusal" : "text");
            if (!cJSON_IsString(text))
                return bad(c, where, "'%s' (%s) needs a string '%s'", where, t, strcmp(t, "refusal") == 0 ? "refusal" : "text");
            TRY(add_text_part(c, parts, text->valuestring));
        } else if (strcmp(t, "input_image") == 0) {
            const cJSON *url = field(part, "image_url");
            if (field(part, "file_id") && !url)
                return bad(c, where, "'%s': images by file_id are not supported (loom has no Files API): send "
                           "image_url as a data: URI", where);
            if (!cJSON_IsString(url)) return bad(c, where, "'%s' (input_image) needs a string 'image_url'", where);
            if (!user) return bad(c, where, "'%s': images are taken in user messages only", where);
            cJSON *p = cJSON_CreateObject();
            cJSON *iu = p ? cJSON_AddObjectToObject(p, "image_url") : NULL;
            if (!iu || !cJSON_AddStringToObject(p, "type", "image_url") ||
                !cJSON_AddStringToObject(iu, "url", url->valuestring)) {
                cJSON_Delete(p);
                return oom(c, "an image part");
            }
            cJSON_AddItemToArray(parts, p);
        } else {
            char shown[48];
            shown_name(t, shown, sizeof shown);
            return bad(c, where, "'%s': content parts of type '%s' are not supported (input_text, output_text, "
                       "refusal and input_image)", where, shown);
        }
    }
    return LM_OK;
}

/* A new assistant turn (it takes a reasoning item given before it). */
static cJSON *new_assistant(input_state *in) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", "assistant")) {
        cJSON_Delete(m);
        return NULL;
    }
    if (in->has_reasoning && !cJSON_AddStringToObject(m, "reasoning_content", lm_sbuf_str(&in->reasoning))) {
        cJSON_Delete(m);
        return NULL;
    }
    in->has_reasoning = false;
    lm_sbuf_clear(&in->reasoning);
    cJSON_AddItemToArray(in->list, m);
    in->assistant = m;
    return m;
}

static lm_status message_item(rctx *c, input_state *in, const cJSON *item, const char *path) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(item, "role");
    char where[96];
    snprintf(where, sizeof where, "%s.role", path);
    if (!is(role, "user") && !is(role, "assistant") && !is(role, "system") && !is(role, "developer"))
        return bad(c, where, "'%s' must be user, assistant, system or developer", where);
    bool assistant = is(role, "assistant");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(item, "content");
    snprintf(where, sizeof where, "%s.content", path);
    if (!cJSON_IsString(content) && !cJSON_IsArray(content))
        return bad(c, where, "'%s' must be a string or a list of content parts", where);
    cJSON *m;
    if (assistant) {
        if (!(m = new_assistant(in))) return oom(c, "a message");
    } else {
        if (!(m = cJSON_CreateObject())) return oom(c, "a message");
        cJSON_AddItemToArray(in->list, m);
        if (!cJSON_AddStringToObject(m, "role", role->valuestring)) return oom(c, "a message");
        in->assistant = NULL;
    }
    if (cJSON_IsString(content)) return cJSON_AddStringToObject(m, "content", content->valuestring) ? LM_OK : oom(c, "a message");
    cJSON *parts = cJSON_AddArrayToObject(m, "content");
    if (!parts) return oom(c, "a message");
    return message_parts(c, content, where, is(role, "user"), parts);
}

static lm_status function_call_item(rctx *c, input_state *in, const cJSON *item, const char *path) {
    static const char *const keys[] = {"call_id", "name", "arguments"};
    const cJSON *v[3];
    for (int k = 0; k < 3; k++) {
        v[k] = cJSON_GetObjectItemCaseSensitive(item, keys[k]);
        char where[96];
        snprintf(where, sizeof where, "%s.%s", path, keys[k]);
        if (!cJSON_IsString(v[k])) return bad(c, where, "'%s' must be a string", where);
    }
    /* Calls join the assistant turn before them (one turn, several calls). */
    cJSON *m = in->assistant && !in->has_reasoning ? in->assistant : new_assistant(in);
    if (!m) return oom(c, "a function_call item");
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    if (!calls && !(calls = cJSON_AddArrayToObject(m, "tool_calls"))) return oom(c, "a function_call item");
    cJSON *call = cJSON_CreateObject();
    cJSON *fn = call ? cJSON_AddObjectToObject(call, "function") : NULL;
    if (!fn || !cJSON_AddStringToObject(call, "id", v[0]->valuestring) || !cJSON_AddStringToObject(call, "type", "function") ||
        !cJSON_AddStringToObject(fn, "name", v[1]->valuestring) ||
        !cJSON_AddStringToObject(fn, "arguments", v[2]->valuestring)) {
        cJSON_Delete(call);
        return oom(c, "a function_call item");
    }
    cJSON_AddItemToArray(calls, call);
    return LM_OK;
}

static lm_status function_output_item(rctx *c, input_state *in, const cJSON *item, const char *path) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "call_id");
    const cJSON *output = cJSON_GetObjectItemCaseSensitive(item, "output");
    char where[96];
    snprintf(where, sizeof where, "%s.call_id", path);
    if (!cJSON_IsString(id)) return bad(c, where, "'%s' must be a string", where);
    snprintf(where, sizeof where, "%s.output", path);
    lm_sbuf text = {0};
    if (cJSON_IsString(output)) {
        lm_sbuf_puts(&text, output->valuestring);
    } else if (cJSON_IsArray(output)) {
        const cJSON *part;
        int k = 0;
        cJSON_ArrayForEach(part, output) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!is(cJSON_GetObjectItemCaseSensitive(part, "type"), "input_text") || !cJSON_IsString(t)) {
                lm_sbuf_free(&text);
                snprintf(where, sizeof where, "%s.output[%d]", path, k);
                return bad(c, where, "'%s' must be an input_text part with a string 'text' (only text is supported "
                           "in function outputs)", where);
            }
            lm_sbuf_puts(&text, t->valuestring);
            k++;
        }
    } else {
        return bad(c, where, "'%s' must be a string or a list of input_text parts", where);
    }
    cJSON *m = text.failed ? NULL : cJSON_CreateObject();
    bool ok = m && cJSON_AddStringToObject(m, "role", "tool") && cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) &&
              cJSON_AddStringToObject(m, "content", lm_sbuf_str(&text));
    lm_sbuf_free(&text);
    if (!ok) {
        cJSON_Delete(m);
        return oom(c, "a function_call_output item");
    }
    cJSON_AddItemToArray(in->list, m);
    in->assistant = NULL;
    return LM_OK;
}

/* A reasoning item: its text (content, else summary) for the next assistant turn. */
static lm_status reasoning_item(rctx *c, input_state *in, const cJSON *item, const char *path) {
    const char *lists[] = {"content", "summary"};
    lm_sbuf_clear(&in->reasoning);
    for (int k = 0; k < 2 && in->reasoning.len == 0; k++) {
        const cJSON *list = field(item, lists[k]);
        char where[96];
        snprintf(where, sizeof where, "%s.%s", path, lists[k]);
        if (!list) continue;
        if (!cJSON_IsArray(list)) return bad(c, where, "'%s' must be a list of text parts", where);
        const cJSON *part;
        cJSON_ArrayForEach(part, list) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsString(t)) return bad(c, where, "'%s' entries need a string 'text'", where);
            lm_sbuf_puts(&in->reasoning, t->valuestring);
        }
    }
    if (in->reasoning.failed) return oom(c, "a reasoning item");
    char where[96];
    snprintf(where, sizeof where, "%s.encrypted_content", path);
    if (in->reasoning.len == 0 && field(item, "encrypted_content"))
        return bad(c, where, "'%s': encrypted reasoning is not supported: loom writes its reasoning as text (the "
                   "item's content) and reads it back from content or summary", where);
    in->has_reasoning = true;
    in->assistant = NULL;
    return LM_OK;
}

/* The input's own shape, before its stored context is looked up. */
static lm_status check_input(rctx *c, const cJSON *body) {
    const cJSON *instructions = field(body, "instructions");
    if (instructions && !cJSON_IsString(instructions)) return bad(c, "instructions", "'instructions' must be a string");
    const cJSON *input = field(body, "input");
    if (!input) return bad(c, "input", "'input' is required");
    if (cJSON_IsString(input)) return LM_OK;
    if (!cJSON_IsArray(input)) return bad(c, "input", "'input' must be a string or a list of items");
    int count = cJSON_GetArraySize(input);
    if (count == 0) return bad(c, "input", "'input' must not be empty");
    if (count > LM_RESPONSES_MAX_ITEMS)
        return bad(c, "input", "'input' holds more than %d items", LM_RESPONSES_MAX_ITEMS);
    return LM_OK;
}

/* instructions, then the whole input (responses_context.h: the stored
 * context first) as chat messages. */
static lm_status translate_input(rctx *c, const cJSON *body, const lm_responses_context *ctx, cJSON *out) {
    input_state in = {.list = cJSON_AddArrayToObject(out, "messages")};
    if (!in.list) return oom(c, "the input");
    const cJSON *instructions = field(body, "instructions");
    if (instructions) {
        cJSON *m = cJSON_CreateObject();
        if (!m) return oom(c, "the instructions");
        cJSON_AddItemToArray(in.list, m);
        if (!cJSON_AddStringToObject(m, "role", "system") || !cJSON_AddStringToObject(m, "content", instructions->valuestring))
            return oom(c, "the instructions");
    }
    const cJSON *item;
    int i = 0;
    lm_status st = LM_OK;
    cJSON_ArrayForEach(item, ctx->items) {
        char path[64];
        if (i < ctx->n_history) snprintf(path, sizeof path, "previous_response_id's item %d", i);
        else snprintf(path, sizeof path, "input[%d]", i - ctx->n_history);
        i++;
        const cJSON *type = field(item, "type");
        if (!cJSON_IsObject(item)) st = bad(c, path, "'%s' must be an object (an input item)", path);
        else if (type && !cJSON_IsString(type)) st = bad(c, path, "'%s.type' must be a string", path);
        else if (!type || is(type, "message")) st = message_item(c, &in, item, path);
        else if (is(type, "function_call")) st = function_call_item(c, &in, item, path);
        else if (is(type, "function_call_output")) st = function_output_item(c, &in, item, path);
        else if (is(type, "reasoning")) st = reasoning_item(c, &in, item, path);
        else {
            char shown[48], where[80];
            shown_name(type->valuestring, shown, sizeof shown);
            snprintf(where, sizeof where, "%s.type", path);
            st = bad(c, where, "'%s' is '%s': input items of that type are not supported (message, function_call, "
                     "function_call_output, reasoning and item_reference)", where, shown);
        }
        if (st != LM_OK) break;
    }
    lm_sbuf_free(&in.reasoning);
    return st;
}

/* ------------------------------------------------------------ tools and options */

static lm_status translate_tools(rctx *c, const cJSON *body, cJSON *out) {
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
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
            snprintf(path, sizeof path, "tools[%d].type", i);
            if (!is(type, "function")) {
                char shown[48];
                shown_name(cJSON_IsString(type) ? type->valuestring : "?", shown, sizeof shown);
                return bad(c, path, "'%s' is '%s': only function tools are supported (OpenAI's hosted tools, such as "
                           "web_search or file_search, are not)", path, shown);
            }
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
            const cJSON *description = field(t, "description");
            const cJSON *params = field(t, "parameters");
            const cJSON *strict = field(t, "strict");
            snprintf(path, sizeof path, "tools[%d].name", i);
            if (!cJSON_IsString(name) || !lm_valid_function_name(name->valuestring))
                return bad(c, path, "'%s' must be 1 to 64 of a-z, A-Z, 0-9, _ and -", path);
            snprintf(path, sizeof path, "tools[%d].description", i);
            if (description && !cJSON_IsString(description)) return bad(c, path, "'%s' must be a string", path);
            snprintf(path, sizeof path, "tools[%d].parameters", i);
            if (params && !cJSON_IsObject(params)) return bad(c, path, "'%s' must be an object (a JSON Schema)", path);
            snprintf(path, sizeof path, "tools[%d].strict", i);
            if (strict && !cJSON_IsBool(strict)) return bad(c, path, "'%s' must be a boolean", path);
            cJSON *tool = cJSON_CreateObject();
            if (!tool) return oom(c, "a tool");
            cJSON_AddItemToArray(list, tool);
            cJSON *fn = cJSON_AddObjectToObject(tool, "function");
            if (!fn || !cJSON_AddStringToObject(tool, "type", "function") ||
                !cJSON_AddStringToObject(fn, "name", name->valuestring))
                return oom(c, "a tool");
            if (description && !cJSON_AddStringToObject(fn, "description", description->valuestring)) return oom(c, "a tool");
            if (params) {
                cJSON *dup = cJSON_Duplicate(params, true);
                if (!dup) return oom(c, "a tool's parameters");
                cJSON_AddItemToObject(fn, "parameters", dup);
            }
            if (strict) cJSON_AddBoolToObject(fn, "strict", cJSON_IsTrue(strict));
            i++;
        }
    }
    const cJSON *choice = field(body, "tool_choice");
    if (!choice) return LM_OK;
    if (cJSON_IsString(choice)) {
        if (!is(choice, "none") && !is(choice, "auto") && !is(choice, "required"))
            return bad(c, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
        return cJSON_AddStringToObject(out, "tool_choice", choice->valuestring) ? LM_OK : oom(c, "tool_choice");
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(choice, "type");
    if (!cJSON_IsObject(choice) || !cJSON_IsString(type))
        return bad(c, "tool_choice", "'tool_choice' must be a string or an object with a type");
    if (!is(type, "function")) {
        char shown[48];
        shown_name(type->valuestring, shown, sizeof shown);
        return bad(c, "tool_choice.type", "'tool_choice.type' is '%s': only function (with a name) is supported", shown);
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(choice, "name");
    if (!cJSON_IsString(name)) return bad(c, "tool_choice.name", "'tool_choice.name' must be a string");
    cJSON *o = cJSON_AddObjectToObject(out, "tool_choice");
    cJSON *fn = o ? cJSON_AddObjectToObject(o, "function") : NULL;
    if (!fn || !cJSON_AddStringToObject(o, "type", "function") || !cJSON_AddStringToObject(fn, "name", name->valuestring))
        return oom(c, "tool_choice");
    return LM_OK;
}

/* text.format -> response_format (what constrains the output is the chat path's). */
static lm_status translate_text(rctx *c, const cJSON *body, cJSON *out) {
    const cJSON *text = field(body, "text");
    if (!text) return LM_OK;
    if (!cJSON_IsObject(text)) return bad(c, "text", "'text' must be an object");
    const cJSON *verbosity = field(text, "verbosity");
    if (verbosity && !is(verbosity, "low") && !is(verbosity, "medium") && !is(verbosity, "high"))
        return bad(c, "text.verbosity", "'text.verbosity' must be low, medium or high");
    const cJSON *format = field(text, "format");
    if (!format) return LM_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(format, "type");
    if (!cJSON_IsObject(format) || !cJSON_IsString(type))
        return bad(c, "text.format", "'text.format' must be an object with a type (text, json_object or json_schema)");
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    if (!rf) return oom(c, "text.format");
    if (is(type, "text") || is(type, "json_object"))
        return cJSON_AddStringToObject(rf, "type", type->valuestring) ? LM_OK : oom(c, "text.format");
    if (!is(type, "json_schema"))
        return bad(c, "text.format.type", "'text.format.type' must be text, json_object or json_schema");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(format, "name");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(format, "schema");
    const cJSON *strict = field(format, "strict");
    const cJSON *description = field(format, "description");
    if (!cJSON_IsString(name)) return bad(c, "text.format.name", "'text.format.name' must be a string (json_schema)");
    if (!cJSON_IsObject(schema))
        return bad(c, "text.format.schema", "'text.format.schema' must be an object (a JSON Schema)");
    if (strict && !cJSON_IsBool(strict)) return bad(c, "text.format.strict", "'text.format.strict' must be a boolean");
    if (description && !cJSON_IsString(description))
        return bad(c, "text.format.description", "'text.format.description' must be a string");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON *dup = cJSON_Duplicate(schema, true);
    if (!js || !dup || !cJSON_AddStringToObject(rf, "type", "json_schema") ||
        !cJSON_AddStringToObject(js, "name", name->valuestring)) {
        cJSON_Delete(dup);
        return oom(c, "text.format");
    }
    cJSON_AddItemToObject(js, "schema", dup);
    if (strict) cJSON_AddBoolToObject(js, "strict", cJSON_IsTrue(strict));
    if (description) cJSON_AddStringToObject(js, "description", description->valuestring);
    return LM_OK;
}

/* Fields of the Responses API loom does not serve: 400s that say why. */
static lm_status refuse_unsupported(rctx *c, const cJSON *body) {
    if (field(body, "conversation")) return bad(c, "conversation", "'conversation': " NO_CONVERSATIONS);
    const cJSON *store = field(body, "store");
    if (store && !cJSON_IsBool(store)) return bad(c, "store", "'store' must be a boolean");
    const cJSON *background = field(body, "background");
    if (background && !cJSON_IsBool(background)) return bad(c, "background", "'background' must be a boolean");
    if (cJSON_IsTrue(background))
        return bad(c, "background", "'background' is true: loom runs responses in the foreground only (stream them "
                   "with stream: true)");
    if (field(body, "prompt")) return bad(c, "prompt", "'prompt' (a stored prompt template) is not supported");
    const cJSON *top = field(body, "top_logprobs");
    if (top && !(cJSON_IsNumber(top) && top->valuedouble == 0))
        return bad(c, "top_logprobs", "'top_logprobs' is not supported on /v1/responses (use /v1/chat/completions)");
    if (field(body, "max_tool_calls")) return bad(c, "max_tool_calls", "'max_tool_calls' is not supported");
    const cJSON *truncation = field(body, "truncation");
    if (truncation && !is(truncation, "disabled") && !is(truncation, "auto"))
        return bad(c, "truncation", "'truncation' must be disabled or auto");
    const cJSON *include = field(body, "include");
    if (include && !cJSON_IsArray(include)) return bad(c, "include", "'include' must be a list of strings");
    const cJSON *ptc = field(body, "parallel_tool_calls");
    if (ptc && !cJSON_IsBool(ptc)) return bad(c, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    const cJSON *metadata = field(body, "metadata");
    if (metadata) {
        if (!cJSON_IsObject(metadata)) return bad(c, "metadata", "'metadata' must be an object of strings");
        if (cJSON_GetArraySize(metadata) > LM_RESPONSES_MAX_METADATA)
            return bad(c, "metadata", "'metadata' holds more than %d pairs", LM_RESPONSES_MAX_METADATA);
        const cJSON *m;
        cJSON_ArrayForEach(m, metadata) if (!cJSON_IsString(m) || strlen(m->string) > 64 || strlen(m->valuestring) > 512)
            return bad(c, "metadata", "'metadata' values must be strings of at most 512 bytes, keys at most 64");
    }
    return LM_OK;
}

static lm_status copy_as(rctx *c, const cJSON *body, cJSON *out, const char *from, const char *to) {
    const cJSON *f = field(body, from);
    if (!f) return LM_OK;
    cJSON *dup = cJSON_Duplicate(f, true);
    if (!dup) return oom(c, from);
    cJSON_AddItemToObject(out, to, dup);
    return LM_OK;
}

static lm_status translate_options(rctx *c, const cJSON *body, cJSON *out) {
    TRY(copy_as(c, body, out, "model", "model"));
    TRY(copy_as(c, body, out, "max_output_tokens", "max_tokens"));
    TRY(copy_as(c, body, out, "temperature", "temperature"));
    TRY(copy_as(c, body, out, "top_p", "top_p"));
    TRY(copy_as(c, body, out, "stream", "stream"));
    TRY(copy_as(c, body, out, "user", "user"));
    const cJSON *reasoning = field(body, "reasoning");
    if (!reasoning) return LM_OK;
    if (!cJSON_IsObject(reasoning)) return bad(c, "reasoning", "'reasoning' must be an object");
    const cJSON *effort = field(reasoning, "effort");
    if (!effort) return LM_OK;
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    int k = 0;
    while (k < 6 && !is(effort, efforts[k])) k++;
    if (k == 6) return bad(c, "reasoning.effort", "'reasoning.effort' must be none, minimal, low, medium, high or xhigh");
    /* The template's thinking switch: off for none and minimal. */
    cJSON *kwargs = cJSON_AddObjectToObject(out, "chat_template_kwargs");
    if (!kwargs || !cJSON_AddBoolToObject(kwargs, "enable_thinking", k >= 2)) return oom(c, "reasoning");
    return LM_OK;
}

/* What the response object repeats of the request. */
static cJSON *make_echo(const cJSON *body, bool stored) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return NULL;
    static const char *const copied[] = {"instructions", "max_output_tokens", "metadata", "temperature", "top_p",
                                         "user", "truncation"};
    for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
        const cJSON *f = field(body, copied[i]);
        cJSON_AddItemToObject(e, copied[i], f ? cJSON_Duplicate(f, true) : cJSON_CreateNull());
    }
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(e, "metadata")))
        cJSON_ReplaceItemInObjectCaseSensitive(e, "metadata", cJSON_CreateObject());
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "truncation")))
        cJSON_ReplaceItemInObjectCaseSensitive(e, "truncation", cJSON_CreateString("disabled"));
    const cJSON *tools = field(body, "tools"), *choice = field(body, "tool_choice");
    cJSON_AddItemToObject(e, "tools", tools ? cJSON_Duplicate(tools, true) : cJSON_CreateArray());
    cJSON_AddItemToObject(e, "tool_choice", choice ? cJSON_Duplicate(choice, true) : cJSON_CreateString("auto"));
    const cJSON *ptc = field(body, "parallel_tool_calls");
    cJSON_AddBoolToObject(e, "parallel_tool_calls", ptc ? cJSON_IsTrue(ptc) : true);
    const cJSON *text = field(body, "text");
    cJSON *t = text ? cJSON_Duplicate(text, true) : cJSON_CreateObject();
    if (t && !cJSON_GetObjectItemCaseSensitive(t, "format")) {
        cJSON *f = cJSON_AddObjectToObject(t, "format");
        cJSON_AddStringToObject(f, "type", "text");
    }
    cJSON_AddItemToObject(e, "text", t);
    const cJSON *reasoning = field(body, "reasoning");
    cJSON_AddItemToObject(e, "reasoning", reasoning ? cJSON_Duplicate(reasoning, true) : cJSON_CreateNull());
    cJSON_AddBoolToObject(e, "store", stored);
    cJSON_AddBoolToObject(e, "background", false);
    const cJSON *prev = field(body, "previous_response_id");
    cJSON_AddItemToObject(e, "previous_response_id", prev ? cJSON_Duplicate(prev, true) : cJSON_CreateNull());
    return e;
}

/* The chat parser's names for the fields, in the Responses API's terms
 * (the param, and the quoted name at the start of the message). */
static void rename_param(char *param, size_t size, lm_error *err) {
    static const char *const names[][2] = {{"messages", "input"},      {"max_tokens", "max_output_tokens"},
                                           {"response_format", "text.format"}, {"chat_template_kwargs", "reasoning"}};
    for (size_t i = 0; param && i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(param, names[i][0]) != 0) continue;
        snprintf(param, size, "%s", names[i][1]);
        char quoted[48];
        snprintf(quoted, sizeof quoted, "'%s'", names[i][0]);
        size_t n = strlen(quoted);
        if (err && strncmp(err->message, quoted, n) == 0) {
            char message[LM_ERROR_MESSAGE_MAX];
            snprintf(message, sizeof message, "'%s'%s", names[i][1], err->message + n);
            snprintf(err->message, sizeof err->message, "%s", message);
        }
        return;
    }
}

/* The resolver's refusal as this parser's: the field, and 404 / 413. */
static lm_status context_failed(const lm_responses_context *ctx, lm_openai_request *out, lm_status st) {
    out->too_large = ctx->refusal == LM_CONTEXT_TOO_LARGE;
    out->not_found = ctx->refusal == LM_CONTEXT_NOT_FOUND;
    return st;
}

lm_status lm_responses_request_parse(const char *body, size_t len, const lm_image_parts *images,
                                     lm_responses_store *store, long long now, lm_openai_request *out,
                                     lm_responses_parsed *parsed, char *param, size_t param_size, lm_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = LM_API_CHAT;
    loom_request_params_default(&out->params);
    *parsed = (lm_responses_parsed){0};
    rctx c = {param, param_size, err};
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
    lm_responses_context ctx = {0};
    lm_status st = !doc ? oom(&c, "the request")
                   : !cJSON_IsObject(in) ? bad(&c, NULL, "the request body must be a JSON object")
                                         : LM_OK;
    if (st == LM_OK) st = refuse_unsupported(&c, in);
    if (st == LM_OK) st = translate_options(&c, in, doc);
    if (st == LM_OK) st = check_input(&c, in);
    if (st == LM_OK && (st = lm_responses_context_resolve(in, store, now, &ctx, param, param_size, err)) != LM_OK)
        context_failed(&ctx, out, st);
    if (st == LM_OK) st = translate_input(&c, in, &ctx, doc);
    if (st == LM_OK) st = translate_tools(&c, in, doc);
    /* a forced call is followed by more only when parallel_tool_calls allows (tool_choice.h) */
    const cJSON *ptc = field(in, "parallel_tool_calls");
    if (st == LM_OK && cJSON_IsFalse(ptc) && !cJSON_AddFalseToObject(doc, "parallel_tool_calls"))
        st = oom(&c, "parallel_tool_calls");
    if (st == LM_OK) st = translate_text(&c, in, doc);
    /* store defaults to true, as OpenAI's; a server keeping nothing stores nothing */
    bool stored = store && !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(in, "store"));
    cJSON *e = st == LM_OK ? make_echo(in, stored) : NULL;
    if (st == LM_OK && !e) st = oom(&c, "the response's echo of the request");
    cJSON_Delete(in);
    if (st != LM_OK) {
        cJSON_Delete(doc);
        cJSON_Delete(e);
        cJSON_Delete(ctx.items);
        return st;
    }
    st = lm_openai_request_parse_doc(LM_API_CHAT, doc, images, out, param, param_size, err);
    if (st != LM_OK) {
        rename_param(param, param_size, err);
        cJSON_Delete(e);
        cJSON_Delete(ctx.items);
        return st;
    }
    *parsed = (lm_responses_parsed){.echo = e, .input = ctx.items, .store = stored};
    return LM_OK;
}

void lm_responses_parsed_free(lm_responses_parsed *p) {
    cJSON_Delete(p->echo);
    cJSON_Delete(p->input);
    *p = (lm_responses_parsed){0};
}
