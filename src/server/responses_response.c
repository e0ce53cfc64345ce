#include "server/responses_response.h"
#include "server/json_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The hex part of a response id ("resp_HEX"), which item ids reuse. */
static const char *id_base(const char *id) { return strncmp(id, "resp_", 5) == 0 ? id + 5 : id; }

static void item_id(char *out, size_t size, const char *prefix, const char *base, int index) {
    snprintf(out, size, "%s_%s%04x", prefix, base, (unsigned)index & 0xffffu);
}

static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static cJSON *output_text_part(const char *text) {
    cJSON *p = typed("output_text");
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    cJSON_AddStringToObject(p, "text", text);
    return p;
}

static cJSON *reasoning_text_part(const char *text) {
    cJSON *p = typed("reasoning_text");
    cJSON_AddStringToObject(p, "text", text);
    return p;
}

static cJSON *reasoning_item(const char *id, const char *text, bool with_content) {
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "id", id);
    cJSON_AddStringToObject(item, "type", "reasoning");
    cJSON_AddArrayToObject(item, "summary");
    cJSON *content = cJSON_AddArrayToObject(item, "content");
    if (with_content) cJSON_AddItemToArray(content, reasoning_text_part(text));
    return item;
}

static cJSON *message_item(const char *id, const char *status, const char *text, bool with_content) {
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "id", id);
    cJSON_AddStringToObject(item, "type", "message");
    cJSON_AddStringToObject(item, "status", status);
    cJSON_AddStringToObject(item, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(item, "content");
    if (with_content) cJSON_AddItemToArray(content, output_text_part(text));
    return item;
}

static cJSON *call_item(const char *id, const char *status, const char *call_id, const char *name, const char *args) {
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "id", id);
    cJSON_AddStringToObject(item, "type", "function_call");
    cJSON_AddStringToObject(item, "status", status);
    cJSON_AddStringToObject(item, "call_id", call_id);
    cJSON_AddStringToObject(item, "name", name);
    cJSON_AddStringToObject(item, "arguments", args);
    return item;
}

static cJSON *usage(const lm_responses_output *o) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", o->prompt_tokens);
    cJSON *in = cJSON_AddObjectToObject(u, "input_tokens_details");
    cJSON_AddNumberToObject(in, "cached_tokens", o->cached_tokens > o->prompt_tokens ? o->prompt_tokens : o->cached_tokens);
    cJSON_AddNumberToObject(u, "output_tokens", o->output_tokens);
    cJSON *out = cJSON_AddObjectToObject(u, "output_tokens_details");
    cJSON_AddNumberToObject(out, "reasoning_tokens", o->reasoning_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", o->prompt_tokens + o->output_tokens);
    return u;
}

/* The response object around output (taken over); status in_progress,
 * completed, incomplete or failed. */
static cJSON *response(const lm_responses_output *o, const char *status, cJSON *output, bool with_usage,
                       const char *error) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", o->id);
    cJSON_AddStringToObject(r, "object", "response");
    cJSON_AddNumberToObject(r, "created_at", (double)o->created_at);
    cJSON_AddStringToObject(r, "status", status);
    bool finished = strcmp(status, "in_progress") != 0;
    if (finished) cJSON_AddNumberToObject(r, "completed_at", (double)time(NULL));
    else cJSON_AddNullToObject(r, "completed_at");
    if (error) {
        cJSON *e = cJSON_AddObjectToObject(r, "error");
        cJSON_AddStringToObject(e, "code", "server_error");
        cJSON_AddStringToObject(e, "message", error);
    } else {
        cJSON_AddNullToObject(r, "error");
    }
    if (strcmp(status, "incomplete") == 0) {
        cJSON *d = cJSON_AddObjectToObject(r, "incomplete_details");
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
    } else {
        cJSON_AddNullToObject(r, "incomplete_details");
    }
    cJSON_AddStringToObject(r, "model", o->model);
    cJSON_AddItemToObject(r, "output", output ? output : cJSON_CreateArray());
    const cJSON *e;
    cJSON_ArrayForEach(e, o->echo) cJSON_AddItemToObject(r, e->string, cJSON_Duplicate(e, true));
    if (with_usage) cJSON_AddItemToObject(r, "usage", usage(o));
    else cJSON_AddNullToObject(r, "usage");
    return r;
}

cJSON *lm_responses_object(const lm_responses_output *o) {
    const char *base = id_base(o->id);
    const char *status = o->incomplete ? "incomplete" : "completed";
    cJSON *output = cJSON_CreateArray();
    char id[96];
    int index = 0;
    bool calls = o->calls && o->calls->n > 0;
    if (o->reasoning && o->reasoning[0]) {
        item_id(id, sizeof id, "rs", base, index++);
        cJSON_AddItemToArray(output, reasoning_item(id, o->reasoning, true));
    }
    if ((o->text && o->text[0]) || !calls) {
        item_id(id, sizeof id, "msg", base, index++);
        cJSON_AddItemToArray(output, message_item(id, status, o->text ? o->text : "", true));
    }
    for (int i = 0; calls && i < o->calls->n; i++) {
        const lm_tool_call *c = &o->calls->items[i];
        item_id(id, sizeof id, "fc", base, index++);
        cJSON_AddItemToArray(output, call_item(id, "completed", c->id, c->name, c->arguments));
    }
    return response(o, status, output, true, NULL);
}

/* ------------------------------------------------------------ streaming */

/* "event: TYPE\ndata: JSON\n\n" with the next sequence_number. */
static void event(lm_responses_stream *st, lm_sbuf *out, cJSON *obj) {
    cJSON_AddNumberToObject(obj, "sequence_number", st->sequence++);
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

/* An event about the open item (output_index, item_id). */
static cJSON *item_event(const lm_responses_stream *st, const char *type, bool with_content_index) {
    cJSON *e = typed(type);
    cJSON_AddStringToObject(e, "item_id", st->item_id);
    cJSON_AddNumberToObject(e, "output_index", st->next_output - 1);
    if (with_content_index) cJSON_AddNumberToObject(e, "content_index", 0);
    return e;
}

static void item_added(lm_responses_stream *st, lm_sbuf *out, cJSON *item) {
    cJSON *e = typed("response.output_item.added");
    cJSON_AddNumberToObject(e, "output_index", st->next_output - 1);
    cJSON_AddItemToObject(e, "item", item);
    event(st, out, e);
}

static void item_done(lm_responses_stream *st, lm_sbuf *out, cJSON *item) {
    if (!st->done) st->done = cJSON_CreateArray();
    cJSON_AddItemToArray(st->done, cJSON_Duplicate(item, true));
    cJSON *e = typed("response.output_item.done");
    cJSON_AddNumberToObject(e, "output_index", st->next_output - 1);
    cJSON_AddItemToObject(e, "item", item);
    event(st, out, e);
}

static void close_item(lm_responses_stream *st, lm_sbuf *out, bool incomplete) {
    const char *text = lm_sbuf_str(&st->text);
    cJSON *e;
    switch (st->open) {
    case LM_RESPONSES_ITEM_NONE: return;
    case LM_RESPONSES_ITEM_REASONING:
        e = item_event(st, "response.reasoning_text.done", true);
        cJSON_AddStringToObject(e, "text", text);
        event(st, out, e);
        e = item_event(st, "response.content_part.done", true);
        cJSON_AddItemToObject(e, "part", reasoning_text_part(text));
        event(st, out, e);
        item_done(st, out, reasoning_item(st->item_id, text, true));
        break;
    case LM_RESPONSES_ITEM_MESSAGE:
        e = item_event(st, "response.output_text.done", true);
        cJSON_AddArrayToObject(e, "logprobs");
        cJSON_AddStringToObject(e, "text", text);
        event(st, out, e);
        e = item_event(st, "response.content_part.done", true);
        cJSON_AddItemToObject(e, "part", output_text_part(text));
        event(st, out, e);
        item_done(st, out, message_item(st->item_id, incomplete ? "incomplete" : "completed", text, true));
        break;
    case LM_RESPONSES_ITEM_CALL: {
        const char *name = cJSON_GetObjectItemCaseSensitive(st->call, "name")->valuestring;
        e = item_event(st, "response.function_call_arguments.done", false);
        cJSON_AddStringToObject(e, "name", name);
        cJSON_AddStringToObject(e, "arguments", text);
        event(st, out, e);
        cJSON_ReplaceItemInObjectCaseSensitive(st->call, "arguments", cJSON_CreateString(text));
        cJSON_ReplaceItemInObjectCaseSensitive(st->call, "status", cJSON_CreateString(incomplete ? "incomplete" : "completed"));
        item_done(st, out, st->call);
        st->call = NULL;
        break;
    }
    }
    st->open = LM_RESPONSES_ITEM_NONE;
    lm_sbuf_clear(&st->text);
}

static void open_item(lm_responses_stream *st, lm_sbuf *out, lm_responses_item kind) {
    close_item(st, out, false);
    int index = st->next_output++;
    st->open = kind;
    if (kind == LM_RESPONSES_ITEM_REASONING) {
        item_id(st->item_id, sizeof st->item_id, "rs", st->base, index);
        item_added(st, out, reasoning_item(st->item_id, "", false));
        cJSON *e = item_event(st, "response.content_part.added", true);
        cJSON_AddItemToObject(e, "part", reasoning_text_part(""));
        event(st, out, e);
    } else if (kind == LM_RESPONSES_ITEM_MESSAGE) {
        st->had_answer = true;
        item_id(st->item_id, sizeof st->item_id, "msg", st->base, index);
        item_added(st, out, message_item(st->item_id, "in_progress", "", false));
        cJSON *e = item_event(st, "response.content_part.added", true);
        cJSON_AddItemToObject(e, "part", output_text_part(""));
        event(st, out, e);
    }
}

void lm_responses_stream_start(lm_responses_stream *st, lm_sbuf *out, const lm_responses_output *o) {
    snprintf(st->base, sizeof st->base, "%s", id_base(o->id));
    cJSON *e = typed("response.created");
    cJSON_AddItemToObject(e, "response", response(o, "in_progress", NULL, false, NULL));
    event(st, out, e);
    e = typed("response.in_progress");
    cJSON_AddItemToObject(e, "response", response(o, "in_progress", NULL, false, NULL));
    event(st, out, e);
}

void lm_responses_stream_delta(lm_responses_stream *st, lm_sbuf *out, const char *reasoning, const char *text) {
    if (reasoning && reasoning[0]) {
        if (st->open != LM_RESPONSES_ITEM_REASONING) open_item(st, out, LM_RESPONSES_ITEM_REASONING);
        cJSON *e = item_event(st, "response.reasoning_text.delta", true);
        cJSON_AddStringToObject(e, "delta", reasoning);
        event(st, out, e);
        lm_sbuf_puts(&st->text, reasoning);
    }
    if (text && text[0]) {
        if (st->open != LM_RESPONSES_ITEM_MESSAGE) open_item(st, out, LM_RESPONSES_ITEM_MESSAGE);
        cJSON *e = item_event(st, "response.output_text.delta", true);
        cJSON_AddArrayToObject(e, "logprobs");
        cJSON_AddStringToObject(e, "delta", text);
        event(st, out, e);
        lm_sbuf_puts(&st->text, text);
    }
}

void lm_responses_stream_tool(lm_responses_stream *st, lm_sbuf *out, const lm_tool_delta *d) {
    if (d->first) {
        open_item(st, out, LM_RESPONSES_ITEM_CALL);
        st->had_answer = true;
        item_id(st->item_id, sizeof st->item_id, "fc", st->base, st->next_output - 1);
        st->call = call_item(st->item_id, "in_progress", d->id, d->name, "");
        item_added(st, out, cJSON_Duplicate(st->call, true));
    }
    if (d->fragment_len) {
        char *fragment = strndup(d->fragment, d->fragment_len);
        if (!fragment) {
            out->failed = true;
            return;
        }
        cJSON *e = item_event(st, "response.function_call_arguments.delta", false);
        cJSON_AddStringToObject(e, "delta", fragment);
        event(st, out, e);
        lm_sbuf_puts(&st->text, fragment);
        free(fragment);
    }
    if (d->last) close_item(st, out, false);
}

void lm_responses_stream_end(lm_responses_stream *st, lm_sbuf *out, const lm_responses_output *o) {
    if (!st->had_answer) open_item(st, out, LM_RESPONSES_ITEM_MESSAGE); /* as the whole object: an empty message */
    close_item(st, out, o->incomplete);
    cJSON *e = typed(o->incomplete ? "response.incomplete" : "response.completed");
    cJSON *output = st->done;
    st->done = NULL;
    cJSON *r = response(o, o->incomplete ? "incomplete" : "completed", output, true, NULL);
    cJSON_Delete(st->final);
    st->final = cJSON_Duplicate(r, true); /* what a stored response keeps: the object as the client got it */
    cJSON_AddItemToObject(e, "response", r);
    event(st, out, e);
}

void lm_responses_stream_error(lm_responses_stream *st, lm_sbuf *out, const lm_responses_output *o, unsigned status,
                               const char *message) {
    cJSON *e = typed("error");
    cJSON_AddStringToObject(e, "code", status == 503 ? "server_is_overloaded" : "server_error");
    cJSON_AddStringToObject(e, "message", message ? message : "");
    cJSON_AddNullToObject(e, "param");
    event(st, out, e);
    e = typed("response.failed");
    cJSON *output = st->done;
    st->done = NULL;
    cJSON_AddItemToObject(e, "response", response(o, "failed", output, true, message ? message : ""));
    event(st, out, e);
}

void lm_responses_stream_free(lm_responses_stream *st) {
    lm_sbuf_free(&st->text);
    cJSON_Delete(st->call);
    cJSON_Delete(st->done);
    cJSON_Delete(st->final);
    memset(st, 0, sizeof *st);
}
