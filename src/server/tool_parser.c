#include "server/tool_parser.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/marker.h"

#define CALL_OPEN "<tool_call>"
#define CALL_CLOSE "</tool_call>"
#define MAX_CALLS 128

void lm_tool_call_list_free(lm_tool_call_list *list) {
    for (int i = 0; i < list->n; i++) {
        free(list->items[i].name);
        free(list->items[i].arguments);
    }
    free(list->items);
    memset(list, 0, sizeof *list);
}

void lm_tool_parser_init(lm_tool_parser *p, const cJSON *tools, uint64_t id_seed) {
    memset(p, 0, sizeof *p);
    p->tools = tools;
    p->id_state = id_seed;
    lm_call_stream_init(&p->stream);
}

void lm_tool_parser_free(lm_tool_parser *p) {
    lm_sbuf_free(&p->pending);
    lm_sbuf_free(&p->block);
    free(p->forced_name);
    p->forced_name = NULL;
    lm_call_stream_free(&p->stream);
}

lm_tool_form lm_tool_form_of_template(const char *template_source) {
    if (!template_source) return LM_TOOL_FORM_JSON;
    if (strstr(template_source, "<function=")) return LM_TOOL_FORM_XML;
    if (strstr(template_source, "<arg_key>")) return LM_TOOL_FORM_GLM;
    return LM_TOOL_FORM_JSON;
}

void lm_output_markers(bool split_reasoning, bool tools, lm_tool_form form, const char *out[LM_OUTPUT_MARKERS]) {
    static const char *const all[LM_OUTPUT_MARKERS] = {"<think>",   "</think>",    "<tool_call>", "</tool_call>",
                                                       "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
    for (int k = 0; k < LM_OUTPUT_MARKERS; k++) {
        bool wanted = k < 2 ? split_reasoning : k < 4 ? tools : tools && form == LM_TOOL_FORM_GLM;
        out[k] = wanted ? all[k] : NULL;
    }
}

bool lm_tool_call_opening(lm_tool_form form, const char *name, lm_sbuf *out) {
    switch (form) {
    case LM_TOOL_FORM_XML:
        return lm_sbuf_puts(out, CALL_OPEN "\n<function=") && (!name || lm_sbuf_printf(out, "%s>\n", name));
    case LM_TOOL_FORM_GLM:
        return lm_sbuf_puts(out, CALL_OPEN) && (!name || lm_sbuf_printf(out, "%s\n", name));
    case LM_TOOL_FORM_JSON:
    default:
        if (!lm_sbuf_puts(out, CALL_OPEN "\n{\"name\": \"")) return false;
        if (!name) return true;
        /* The name as a JSON string's body: cJSON's quoted form less its quotes. */
        cJSON *str = cJSON_CreateString(name);
        char *quoted = str ? cJSON_PrintUnformatted(str) : NULL;
        cJSON_Delete(str);
        if (!quoted) return false;
        bool ok = lm_sbuf_append(out, quoted + 1, strlen(quoted) - 2) && lm_sbuf_puts(out, "\", \"arguments\": ");
        cJSON_free(quoted);
        return ok;
    }
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void new_call_id(lm_tool_parser *p, char id[40]) {
    uint64_t a = splitmix64(&p->id_state), b = splitmix64(&p->id_state);
    snprintf(id, 40, "call_%016llx%08llx", (unsigned long long)a, (unsigned long long)(b & 0xffffffffu));
}

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* A malloc'd copy of s[0..n) with surrounding whitespace removed. */
static char *trimmed_copy(const char *s, size_t n) {
    while (n && is_space(*s)) s++, n--;
    while (n && is_space(s[n - 1])) n--;
    char *out = malloc(n + 1);
    if (!out) return NULL;
    memcpy(out, s, n);
    out[n] = 0;
    return out;
}

/* The schema of function's parameter param (NULL when not listed). */
static const cJSON *param_schema(const cJSON *tools, const char *function, const char *param) {
    const cJSON *tool;
    cJSON_ArrayForEach(tool, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(name) || strcmp(name->valuestring, function) != 0) continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
        return cJSON_GetObjectItemCaseSensitive(props, param);
    }
    return NULL;
}

const char *lm_tool_param_type(const cJSON *tools, const char *function, const char *param) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(param_schema(tools, function, param), "type");
    return cJSON_IsString(type) ? type->valuestring : NULL;
}

bool lm_tool_param_is_json(const cJSON *tools, const char *function, const char *param) {
    const char *type = lm_tool_param_type(tools, function, param);
    return param_schema(tools, function, param) && !(type && strcmp(type, "string") == 0);
}

cJSON *lm_tool_param_value(const cJSON *tools, const char *function, const char *key, const char *value) {
    cJSON *item = NULL;
    if (lm_tool_param_is_json(tools, function, key)) item = cJSON_Parse(value);
    if (!item) item = cJSON_CreateString(value);
    return item;
}

/* Adds key = value to args, typed by the schema: strings stay strings; other
 * declared types are parsed as JSON when the text is valid JSON. */
static bool add_param(cJSON *args, const cJSON *tools, const char *function, const char *key,
                      const char *value) {
    cJSON *item = lm_tool_param_value(tools, function, key, value);
    if (!item) return false;
    cJSON_DeleteItemFromObjectCaseSensitive(args, key);
    cJSON_AddItemToObject(args, key, item);
    return true;
}

/* Finds open..close after *pos in body; returns the inner text (malloc'd,
 * trimmed of one surrounding newline each side) and advances *pos. */
static char *take_between(const char *body, size_t len, size_t *pos, const char *open,
                          const char *close, bool trim_all) {
    size_t at = *pos + lm_marker_find(body + *pos, len - *pos, open);
    if (at >= len) return NULL;
    size_t start = at + strlen(open);
    size_t end = start + lm_marker_find(body + start, len - start, close);
    if (end >= len) return NULL;
    *pos = end + strlen(close);
    if (trim_all) return trimmed_copy(body + start, end - start);
    const char *s = body + start;
    size_t n = end - start;
    if (n && s[0] == '\n') s++, n--;
    if (n && s[n - 1] == '\n') n--;
    char *out = malloc(n + 1);
    if (!out) return NULL;
    memcpy(out, s, n);
    out[n] = 0;
    return out;
}

static bool parse_json_form(const char *text, char **name, cJSON **args) {
    cJSON *doc = cJSON_Parse(text);
    if (!cJSON_IsObject(doc)) goto fail;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(doc, "name");
    cJSON *a = cJSON_GetObjectItemCaseSensitive(doc, "arguments");
    if (!a) a = cJSON_GetObjectItemCaseSensitive(doc, "parameters");
    if (!cJSON_IsString(n) || !n->valuestring[0]) goto fail;
    if (cJSON_IsString(a)) {
        cJSON *parsed = cJSON_Parse(a->valuestring);
        if (!cJSON_IsObject(parsed)) {
            cJSON_Delete(parsed);
            goto fail;
        }
        *args = parsed;
    } else if (cJSON_IsObject(a)) {
        *args = cJSON_DetachItemViaPointer(doc, a);
    } else if (!a) {
        *args = cJSON_CreateObject();
    } else {
        goto fail;
    }
    *name = strdup(n->valuestring);
    cJSON_Delete(doc);
    return *name && *args;
fail:
    cJSON_Delete(doc);
    return false;
}

static bool parse_xml_form(const char *text, const cJSON *tools, char **name, cJSON **args) {
    size_t len = strlen(text), pos = 0;
    char *fn = take_between(text, len, &pos, "<function=", ">", true);
    if (!fn || !fn[0]) {
        free(fn);
        return false;
    }
    cJSON *obj = cJSON_CreateObject();
    bool ok = obj != NULL;
    while (ok) {
        size_t at = pos + lm_marker_find(text + pos, len - pos, "<parameter=");
        if (at >= len) break;
        size_t key_start = at + strlen("<parameter=");
        size_t key_end = key_start + lm_marker_find(text + key_start, len - key_start, ">");
        if (key_end >= len) {
            ok = false;
            break;
        }
        char *key = trimmed_copy(text + key_start, key_end - key_start);
        /* The value runs to </parameter> (or to the next parameter or the
         * end of the function when the model forgot to close it). */
        size_t vstart = key_end + 1;
        size_t vend = vstart + lm_marker_find(text + vstart, len - vstart, "</parameter>");
        size_t next = vend + strlen("</parameter>");
        if (vend >= len) {
            size_t alt = vstart + lm_marker_find(text + vstart, len - vstart, "<parameter=");
            size_t fend = vstart + lm_marker_find(text + vstart, len - vstart, "</function>");
            vend = alt < fend ? alt : fend;
            next = vend;
        }
        const char *v = text + vstart;
        size_t n = vend - vstart;
        if (n && v[0] == '\n') v++, n--;
        if (n && v[n - 1] == '\n') n--;
        char *value = malloc(n + 1);
        if (key && value) {
            memcpy(value, v, n);
            value[n] = 0;
            ok = key[0] && add_param(obj, tools, fn, key, value);
        } else {
            ok = false;
        }
        free(key);
        free(value);
        pos = next;
    }
    if (!ok) {
        cJSON_Delete(obj);
        free(fn);
        return false;
    }
    *name = fn;
    *args = obj;
    return true;
}

/* cut_short: the output ended inside the block (max_tokens, a stop): a key
 * not closed ends the arguments, and a value not closed keeps what was
 * written, as in the XML form (so a forced call cut short reads as the
 * streamed one showed it). */
static bool parse_glm_form(const char *text, const cJSON *tools, bool cut_short, char **name, cJSON **args) {
    size_t len = strlen(text);
    size_t name_end = lm_marker_find(text, len, "<arg_key>");
    size_t nl = lm_marker_find(text, len, "\n");
    if (nl < name_end) name_end = nl;
    char *fn = trimmed_copy(text, name_end);
    if (!fn || !fn[0] || strpbrk(fn, "<>{}\" ")) {
        free(fn);
        return false;
    }
    cJSON *obj = cJSON_CreateObject();
    bool ok = obj != NULL;
    size_t pos = name_end;
    while (ok && pos < len) {
        size_t probe = pos + lm_marker_find(text + pos, len - pos, "<arg_key>");
        if (probe >= len) break;
        char *key = take_between(text, len, &pos, "<arg_key>", "</arg_key>", true);
        if (!key && cut_short && lm_marker_find(text + probe, len - probe, "</arg_key>") >= len - probe) break;
        char *value = key ? take_between(text, len, &pos, "<arg_value>", "</arg_value>", false) : NULL;
        if (key && !value && cut_short) {
            size_t open = pos + lm_marker_find(text + pos, len - pos, "<arg_value>");
            if (open >= len || lm_marker_find(text + open, len - open, "</arg_value>") < len - open) {
                free(key);
                break; /* the value had not begun */
            }
            const char *v = text + open + strlen("<arg_value>");
            size_t n = len - (size_t)(v - text);
            if (n && v[0] == '\n') v++, n--;
            value = malloc(n + 1);
            if (value) memcpy(value, v, n), value[n] = 0;
            pos = len;
        }
        ok = key && value && key[0] && add_param(obj, tools, fn, key, value);
        free(key);
        free(value);
    }
    if (!ok) {
        cJSON_Delete(obj);
        free(fn);
        return false;
    }
    *name = fn;
    *args = obj;
    return true;
}

/* Appends a call; takes ownership of name and arguments (JSON text). */
static bool push_call_text(lm_tool_parser *p, lm_tool_call_list *calls, char *name, char *arguments) {
    if (!name || !arguments || calls->n >= MAX_CALLS) goto fail;
    if (calls->n == calls->cap) {
        int cap = calls->cap ? calls->cap * 2 : 4;
        lm_tool_call *items = realloc(calls->items, sizeof *items * (size_t)cap);
        if (!items) goto fail;
        calls->items = items;
        calls->cap = cap;
    }
    lm_tool_call *c = &calls->items[calls->n++];
    if (p->stream_calls && p->stream.name) /* announced: it keeps its id */
        memcpy(c->id, p->stream_id, sizeof c->id);
    else
        new_call_id(p, c->id);
    c->name = name;
    c->arguments = arguments;
    return true;
fail:
    free(arguments);
    free(name);
    return false;
}

static bool push_call(lm_tool_parser *p, lm_tool_call_list *calls, char *name, cJSON *args) {
    char *json = cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    return push_call_text(p, calls, name, json);
}

static bool is_json(const char *text) {
    cJSON *doc = cJSON_ParseWithOpts(text, NULL, true);
    cJSON_Delete(doc);
    return doc != NULL;
}

/* The forced call when its block did not parse: the first JSON object the
 * model wrote, else what a stream showed of it completed into JSON, else its
 * raw text ("{}" when empty). */
static bool push_forced_call(lm_tool_parser *p, lm_tool_call_list *calls) {
    size_t skip = p->forced_skip < p->block.len ? p->forced_skip : p->block.len;
    char *raw = trimmed_copy(lm_sbuf_str(&p->block) + skip, p->block.len - skip);
    char *name = strdup(p->forced_name);
    if (!raw || !name) {
        free(raw);
        free(name);
        return false;
    }
    if (!raw[0]) {
        free(raw);
        return push_call_text(p, calls, name, strdup("{}"));
    }
    cJSON *first = cJSON_ParseWithOpts(raw, NULL, false);
    if (cJSON_IsObject(first)) {
        free(raw);
        return push_call(p, calls, name, first);
    }
    cJSON_Delete(first);
    /* What a streamed call would show of it, completed into valid JSON (a
     * value cut short by max_tokens), so that streamed and whole agree. */
    lm_call_stream st;
    lm_call_stream_init(&st);
    lm_sbuf closed = {0};
    bool shown = lm_call_stream_update(&st, lm_sbuf_str(&p->block), p->block.len, p->tools) && st.name &&
                 strcmp(st.name, p->forced_name) == 0 && st.args.len > 1 && lm_call_stream_closed(&st, &closed) &&
                 !closed.failed && is_json(lm_sbuf_str(&closed));
    lm_call_stream_free(&st);
    if (shown) {
        free(raw);
        char *args = strdup(lm_sbuf_str(&closed));
        lm_sbuf_free(&closed);
        return push_call_text(p, calls, name, args);
    }
    lm_sbuf_free(&closed);
    return push_call_text(p, calls, name, raw);
}

/* Parses one block body; false if it is in no known form. */
static bool parse_block(lm_tool_parser *p, const char *body, size_t len, bool cut_short, lm_tool_call_list *calls,
                        bool *parsed) {
    *parsed = false;
    char *text = trimmed_copy(body, len);
    if (!text) return false;
    char *name = NULL;
    cJSON *args = NULL;
    bool ok;
    if (text[0] == '{') ok = parse_json_form(text, &name, &args);
    else if (strncmp(text, "<function=", 10) == 0) ok = parse_xml_form(text, p->tools, &name, &args);
    else ok = parse_glm_form(text, p->tools, cut_short, &name, &args);
    free(text);
    if (!ok) {
        free(name);
        cJSON_Delete(args);
        return true;
    }
    *parsed = true;
    return push_call(p, calls, name, args);
}

/* Passes an unparseable block on as the text the model wrote. */
static bool block_as_content(lm_tool_parser *p, lm_sbuf *content, bool closed) {
    bool ok = lm_sbuf_puts(content, CALL_OPEN) &&
              lm_sbuf_append(content, lm_sbuf_str(&p->block), p->block.len) &&
              (!closed || lm_sbuf_puts(content, CALL_CLOSE));
    lm_sbuf_clear(&p->block);
    return ok;
}

/* Streaming: reads what the open block gained; announces the call (a new
 * id) when its name became known. */
static bool stream_update(lm_tool_parser *p) {
    if (!p->stream_calls || !p->in_call) return true;
    bool named = p->stream.name != NULL;
    bool ok = lm_call_stream_update(&p->stream, lm_sbuf_str(&p->block), p->block.len, p->tools);
    if (!named && p->stream.name) new_call_id(p, p->stream_id);
    return ok;
}

static bool starts_with(const char *text, const char *prefix, size_t n) {
    return strlen(text) >= n && memcmp(text, prefix, n) == 0;
}

/* Streaming: the finished call of an announced one continues what was
 * shown (see stream_calls).  content_len: content's length before the
 * block ended; calls_before: the calls before it. */
static bool settle_announced(lm_tool_parser *p, lm_sbuf *content, size_t content_len, lm_tool_call_list *calls,
                             int calls_before) {
    const lm_sbuf *shown = &p->stream.args;
    lm_sbuf closed = {0};
    if (calls->n == calls_before + 1) {
        lm_tool_call *c = &calls->items[calls_before];
        bool continues = shown->len == 0 || (starts_with(c->arguments, lm_sbuf_str(shown), shown->len) &&
                                             is_json(c->arguments));
        if (continues && strcmp(c->name, p->stream.name) == 0) return true;
        if (!lm_call_stream_closed(&p->stream, &closed) || closed.failed) return false;
        char *name = strdup(p->stream.name);
        char *args = strdup(lm_sbuf_str(&closed));
        lm_sbuf_free(&closed);
        if (!name || !args) {
            free(name);
            free(args);
            return false;
        }
        free(c->name);
        free(c->arguments);
        c->name = name;
        c->arguments = args;
        return true;
    }
    /* It came out as content: the call was shown, so it stays one. */
    if (content->data && content->len > content_len) {
        content->len = content_len;
        content->data[content_len] = 0;
    }
    if (!lm_call_stream_closed(&p->stream, &closed) || closed.failed) return false;
    bool ok = push_call_text(p, calls, strdup(p->stream.name), strdup(lm_sbuf_str(&closed)));
    lm_sbuf_free(&closed);
    return ok;
}

/* The open block ends (closed: its </tool_call> was seen; else the output
 * ended): a call, or content when it is in no known form and not forced. */
static bool end_block(lm_tool_parser *p, lm_sbuf *content, lm_tool_call_list *calls, bool closed) {
    bool ok = stream_update(p);
    p->in_call = false;
    size_t content_len = content->len;
    int calls_before = calls->n;
    bool parsed;
    ok = ok && parse_block(p, lm_sbuf_str(&p->block), p->block.len, !closed, calls, &parsed);
    if (ok && !parsed) ok = p->forced_name ? push_forced_call(p, calls) : block_as_content(p, content, closed);
    if (ok && p->stream_calls && p->stream.name) ok = settle_announced(p, content, content_len, calls, calls_before);
    lm_call_stream_free(&p->stream);
    free(p->forced_name);
    p->forced_name = NULL;
    lm_sbuf_clear(&p->block);
    p->after_call = true;
    return ok;
}

bool lm_tool_parser_open_call(const lm_tool_parser *p, lm_tool_call_view *out) {
    if (!p->stream_calls || !p->in_call || !p->stream.name) return false;
    *out = (lm_tool_call_view){p->stream_id, p->stream.name, lm_sbuf_str(&p->stream.args), p->stream.args.len};
    return true;
}

static bool step(lm_tool_parser *p, lm_sbuf *content, lm_tool_call_list *calls, bool final) {
    for (;;) {
        const char *s = lm_sbuf_str(&p->pending);
        size_t len = p->pending.len;
        if (!p->in_call && p->after_call) {
            size_t ws = 0;
            while (ws < len && is_space(s[ws])) ws++;
            lm_sbuf_consume(&p->pending, ws);
            if (ws < len) p->after_call = false;
            s = lm_sbuf_str(&p->pending);
            len = p->pending.len;
        }
        if (len == 0) return true;
        const char *marker = p->in_call ? CALL_CLOSE : CALL_OPEN;
        const char *stray = p->drop_stray ? (p->in_call ? CALL_OPEN : CALL_CLOSE) : NULL;
        size_t at = lm_marker_find(s, len, marker);
        size_t stray_at = stray ? lm_marker_find(s, len, stray) : len;
        lm_sbuf *out = p->in_call ? &p->block : content;
        if (stray_at < at) { /* dropped: what comes before it stays where it is */
            if (!lm_sbuf_append(out, s, stray_at)) return false;
            lm_sbuf_consume(&p->pending, stray_at + strlen(stray));
            continue;
        }
        if (at < len) {
            if (!lm_sbuf_append(out, s, at)) return false;
            lm_sbuf_consume(&p->pending, at + strlen(marker));
            if (p->in_call) {
                if (!end_block(p, content, calls, true)) return false;
            } else {
                p->in_call = true;
            }
            continue;
        }
        size_t hold = lm_marker_partial(s, len, marker);
        if (stray && lm_marker_partial(s, len, stray) > hold) hold = lm_marker_partial(s, len, stray);
        size_t n = final ? len : len - hold;
        bool ok = lm_sbuf_append(out, s, n);
        lm_sbuf_consume(&p->pending, n);
        return ok;
    }
}

lm_status lm_tool_parser_start_forced(lm_tool_parser *p, lm_tool_form form, const char *name, lm_error *err) {
    if (!name) return lm_fail(err, LM_ERR_INVALID, "a forced tool call needs a function name");
    lm_sbuf opening = {0}, content = {0};
    lm_tool_call_list calls = {0};
    lm_status st = LM_OK;
    if (!lm_tool_call_opening(form, name, &opening) ||
        !lm_tool_parser_feed(p, lm_sbuf_str(&opening), opening.len, &content, &calls))
        st = lm_fail(err, LM_ERR_NOMEM, "out of memory writing the opening of the forced call to '%.64s'", name);
    /* The opening only opens a call: nothing of it is content or a call. */
    else if (!p->in_call || content.len != 0 || calls.n != 0)
        st = lm_fail(err, LM_ERR_INVALID, "the opening of the forced call to '%.64s' does not open one call "
                     "(the name holds tool-call markup)", name);
    if (st == LM_OK) {
        p->forced_skip = opening.len - strlen(CALL_OPEN);
        p->forced_name = strdup(name);
        if (!p->forced_name) st = lm_fail(err, LM_ERR_NOMEM, "out of memory copying the forced call's name");
    }
    lm_sbuf_free(&opening);
    lm_sbuf_free(&content);
    lm_tool_call_list_free(&calls);
    return st;
}

bool lm_tool_parser_feed(lm_tool_parser *p, const char *text, size_t len, lm_sbuf *content,
                         lm_tool_call_list *calls) {
    if (!lm_sbuf_append(&p->pending, text, len)) return false;
    return step(p, content, calls, false) && stream_update(p);
}

bool lm_tool_parser_finish(lm_tool_parser *p, lm_sbuf *content, lm_tool_call_list *calls) {
    if (!step(p, content, calls, true)) return false;
    if (!p->in_call) return true;
    return end_block(p, content, calls, false);
}
