#include "server/anthropic_response.h"
#include "server/error_body.h"
#include "server/json_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *lm_anthropic_stop_reason(loom_finish_reason reason, bool stop_sequence, bool tool_use) {
    switch (reason) {
    case LOOM_FINISH_LENGTH: return "max_tokens";
    case LOOM_FINISH_STOP: return stop_sequence ? "stop_sequence" : tool_use ? "tool_use" : "end_turn";
    default: return "end_turn"; /* cancelled or failed requests are not answered with a message */
    }
}

static cJSON *usage(const lm_anthropic_output *o, bool with_input) {
    cJSON *u = cJSON_CreateObject();
    if (with_input) {
        int cached = o->cached_tokens > o->prompt_tokens ? o->prompt_tokens : o->cached_tokens;
        cJSON_AddNumberToObject(u, "input_tokens", o->prompt_tokens - cached);
        cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
        cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
    }
    cJSON_AddNumberToObject(u, "output_tokens", o->output_tokens);
    return u;
}

/* A tool call's input: the arguments' object ({} should they not parse). */
static cJSON *call_input(const lm_tool_call *call) {
    cJSON *input = cJSON_Parse(call->arguments ? call->arguments : "{}");
    if (cJSON_IsObject(input)) return input;
    cJSON_Delete(input);
    return cJSON_CreateObject();
}

/* Anthropic's ids are "toolu_" and 24 letters and digits; loom's parser
 * names calls "call_" and 24 hex digits (96 random bits).  Those bits seed
 * the letters, so the streamed and the whole answer give a call one id. */
void lm_anthropic_tool_use_id(const char *call_id, char out[LM_ANTHROPIC_TOOL_USE_ID_SIZE]) {
    static const char digits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (const char *p = call_id; *p; p++) state = (state ^ (unsigned char)*p) * 0x100000001b3ull;
    memcpy(out, "toolu_", 6);
    for (int i = 0; i < 24; i++) {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        out[6 + i] = digits[(z ^ (z >> 31)) % 62];
    }
    out[30] = 0;
}

static cJSON *tool_use_block(const lm_tool_call *call, bool with_input) {
    char id[LM_ANTHROPIC_TOOL_USE_ID_SIZE];
    lm_anthropic_tool_use_id(call->id, id);
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", call->name);
    cJSON_AddItemToObject(b, "input", with_input ? call_input(call) : cJSON_CreateObject());
    return b;
}

static cJSON *thinking_block(const char *text) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "thinking");
    cJSON_AddStringToObject(b, "thinking", text);
    cJSON_AddStringToObject(b, "signature", "");
    return b;
}

static cJSON *text_block(const char *text) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "text");
    cJSON_AddStringToObject(b, "text", text);
    return b;
}

static cJSON *message(const lm_anthropic_output *o, bool start) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", o->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(m, "content");
    if (!start) {
        if (o->thinking && o->thinking[0]) cJSON_AddItemToArray(content, thinking_block(o->thinking));
        if (o->text && o->text[0]) cJSON_AddItemToArray(content, text_block(o->text));
        int n_calls = o->calls ? o->calls->n : 0;
        if (o->one_tool_use && n_calls > 1) n_calls = 1;
        for (int i = 0; i < n_calls; i++)
            cJSON_AddItemToArray(content, tool_use_block(&o->calls->items[i], true));
    }
    cJSON_AddStringToObject(m, "model", o->model);
    if (o->stop_reason) cJSON_AddStringToObject(m, "stop_reason", o->stop_reason);
    else cJSON_AddNullToObject(m, "stop_reason");
    if (o->stop_sequence) cJSON_AddStringToObject(m, "stop_sequence", o->stop_sequence);
    else cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(o, true));
    return m;
}

cJSON *lm_anthropic_message(const lm_anthropic_output *o) { return message(o, false); }

/* "event: NAME\ndata: JSON\n\n", taking obj's "type" as the name. */
static void event(lm_sbuf *out, cJSON *obj) {
    char *text = lm_json_print(obj);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!text || !cJSON_IsString(type)) {
        out->failed = true;
    } else {
        lm_sbuf_printf(out, "event: %s\ndata: ", type->valuestring);
        lm_sbuf_puts(out, text);
        lm_sbuf_puts(out, "\n\n");
    }
    cJSON_free(text);
    cJSON_Delete(obj);
}

static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

void lm_anthropic_stream_start(lm_sbuf *out, const lm_anthropic_output *o) {
    cJSON *e = typed("message_start");
    cJSON_AddItemToObject(e, "message", message(o, true));
    event(out, e);
    event(out, typed("ping"));
}

static void close_block(lm_anthropic_stream *st, lm_sbuf *out) {
    if (st->open == LM_ANTHROPIC_BLOCK_NONE) return;
    if (st->open == LM_ANTHROPIC_BLOCK_THINKING) { /* a thinking block ends with its signature */
        cJSON *e = typed("content_block_delta");
        cJSON_AddNumberToObject(e, "index", st->next_index - 1);
        cJSON *d = cJSON_AddObjectToObject(e, "delta");
        cJSON_AddStringToObject(d, "type", "signature_delta");
        cJSON_AddStringToObject(d, "signature", "");
        event(out, e);
    }
    cJSON *e = typed("content_block_stop");
    cJSON_AddNumberToObject(e, "index", st->next_index - 1);
    event(out, e);
    st->open = LM_ANTHROPIC_BLOCK_NONE;
}

static void open_block(lm_anthropic_stream *st, lm_sbuf *out, lm_anthropic_block kind, cJSON *block) {
    close_block(st, out);
    cJSON *e = typed("content_block_start");
    cJSON_AddNumberToObject(e, "index", st->next_index++);
    cJSON_AddItemToObject(e, "content_block", block);
    event(out, e);
    st->open = kind;
}

static void delta(lm_anthropic_stream *st, lm_sbuf *out, const char *type, const char *key, const char *text) {
    cJSON *e = typed("content_block_delta");
    cJSON_AddNumberToObject(e, "index", st->next_index - 1);
    cJSON *d = cJSON_AddObjectToObject(e, "delta");
    cJSON_AddStringToObject(d, "type", type);
    cJSON_AddStringToObject(d, key, text);
    event(out, e);
}

void lm_anthropic_stream_delta(lm_anthropic_stream *st, lm_sbuf *out, const char *thinking, const char *text) {
    if (thinking && thinking[0]) {
        if (st->open != LM_ANTHROPIC_BLOCK_THINKING) {
            cJSON *b = thinking_block("");
            open_block(st, out, LM_ANTHROPIC_BLOCK_THINKING, b);
        }
        delta(st, out, "thinking_delta", "thinking", thinking);
    }
    if (text && text[0]) {
        if (st->open != LM_ANTHROPIC_BLOCK_TEXT) open_block(st, out, LM_ANTHROPIC_BLOCK_TEXT, text_block(""));
        delta(st, out, "text_delta", "text", text);
    }
}

static bool is_object_text(const char *text) {
    cJSON *doc = cJSON_ParseWithOpts(text, NULL, true);
    bool ok = cJSON_IsObject(doc);
    cJSON_Delete(doc);
    return ok;
}

void lm_anthropic_stream_tool(lm_anthropic_stream *st, lm_sbuf *out, const lm_tool_delta *d) {
    if (st->one_tool_use && d->index > 0) return; /* disable_parallel_tool_use: the first call alone */
    if (d->first) {
        lm_tool_call call = {.name = (char *)d->name};
        snprintf(call.id, sizeof call.id, "%s", d->id);
        open_block(st, out, LM_ANTHROPIC_BLOCK_TOOL, tool_use_block(&call, false));
        st->tool_json_sent = 0;
    }
    char *fragment = strndup(d->fragment, d->fragment_len);
    if (!fragment) {
        out->failed = true;
        return;
    }
    /* input is an object: a forced call cut before it wrote one ends as {} */
    bool whole_non_object = d->last && st->tool_json_sent == 0 && !is_object_text(d->arguments);
    const char *json = whole_non_object ? "{}" : fragment;
    if (json[0]) {
        delta(st, out, "input_json_delta", "partial_json", json);
        st->tool_json_sent += strlen(json);
    }
    free(fragment);
    if (d->last) close_block(st, out);
}

void lm_anthropic_stream_end(lm_anthropic_stream *st, lm_sbuf *out, const lm_anthropic_output *o) {
    close_block(st, out);
    cJSON *e = typed("message_delta");
    cJSON *d = cJSON_AddObjectToObject(e, "delta");
    cJSON_AddStringToObject(d, "stop_reason", o->stop_reason ? o->stop_reason : "end_turn");
    if (o->stop_sequence) cJSON_AddStringToObject(d, "stop_sequence", o->stop_sequence);
    else cJSON_AddNullToObject(d, "stop_sequence");
    cJSON_AddItemToObject(e, "usage", usage(o, true));
    event(out, e);
    event(out, typed("message_stop"));
}

static cJSON *error_object(unsigned status, const char *message) {
    cJSON *root = typed("error");
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "type", lm_anthropic_error_type(status));
    cJSON_AddStringToObject(e, "message", message ? message : "");
    return root;
}

void lm_anthropic_stream_error(lm_sbuf *out, unsigned status, const char *message) {
    event(out, error_object(status, message));
}
