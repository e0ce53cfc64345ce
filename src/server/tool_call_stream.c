#include "server/tool_call_stream.h"

#include <stdlib.h>
#include <string.h>

#include "server/marker.h"
#include "server/tool_parser.h"

/* What the JSON form's scanner expects next at a level. */
enum { E_VALUE, E_VALUE_OR_CLOSE, E_KEY_OR_CLOSE, E_KEY, E_COLON, E_COMMA_OR_CLOSE, E_DONE };
/* The XML and GLM forms' steps. */
enum { S_NAME, S_SEEK, S_KEY, S_VALUE_SEEK, S_VALUE };
/* What a top-level key of the JSON form names. */
enum { ROLE_OTHER, ROLE_NAME, ROLE_ARGUMENTS };
/* step bits of the JSON form: the first "name" / "arguments" keys were seen */
#define SEEN_NAME 1
#define SEEN_ARGS 2

void lm_call_stream_init(lm_call_stream *s) {
    memset(s, 0, sizeof *s);
    s->first_param = true;
}

void lm_call_stream_free(lm_call_stream *s) {
    free(s->name);
    free(s->param);
    lm_sbuf_free(&s->args);
    lm_sbuf_free(&s->key);
    lm_call_stream_init(s);
}

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static char *trimmed(const char *s, size_t n) {
    while (n && is_space(*s)) s++, n--;
    while (n && is_space(s[n - 1])) n--;
    char *out = malloc(n + 1);
    if (!out) return NULL;
    memcpy(out, s, n);
    out[n] = 0;
    return out;
}

static bool freeze(lm_call_stream *s) {
    s->frozen = true;
    return true;
}

static bool oom(lm_call_stream *s) {
    s->frozen = true;
    return false;
}

/* Appends text as the body of a JSON string, escaped as cJSON prints it
 * (its escaping works byte by byte, so pieces escape as the whole would). */
static bool append_escaped(lm_sbuf *out, const char *text, size_t n) {
    char *copy = malloc(n + 1);
    if (!copy) return false;
    memcpy(copy, text, n);
    copy[n] = 0;
    cJSON *str = cJSON_CreateString(copy);
    free(copy);
    char *printed = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    if (!printed) return false;
    bool ok = lm_sbuf_append(out, printed + 1, strlen(printed) - 2);
    cJSON_free(printed);
    return ok;
}

/* A JSON string's raw body (escapes included) decoded by cJSON; NULL when
 * cJSON would refuse it. */
static cJSON *decode_string(const char *raw, size_t n) {
    char *quoted = malloc(n + 3);
    if (!quoted) return NULL;
    quoted[0] = '"';
    memcpy(quoted + 1, raw, n);
    quoted[n + 1] = '"';
    quoted[n + 2] = 0;
    cJSON *str = cJSON_ParseWithLength(quoted, n + 2);
    free(quoted);
    if (!cJSON_IsString(str)) {
        cJSON_Delete(str);
        return NULL;
    }
    return str;
}

/* Bytes of s[0..n) that end on a whole UTF-8 character (a delta must not
 * split one: it travels as a JSON string of its own). */
static size_t utf8_whole(const char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The end of the whole characters and escapes of a JSON string's body in
 * b[from..to): never inside an escape, a surrogate pair or a UTF-8
 * character. */
static size_t json_string_whole(const char *b, size_t from, size_t to) {
    size_t i = from;
    while (i < to) {
        unsigned char c = (unsigned char)b[i];
        size_t unit = 1;
        if (c == '\\') {
            if (i + 1 >= to) break;
            if (b[i + 1] == 'u') {
                if (i + 6 > to) break;
                int v = hex4(b + i + 2);
                unit = 6;
                if (v >= 0xD800 && v <= 0xDBFF) { /* the pair's low half must come with it */
                    if (i + 12 > to) break;
                    unit = 12;
                }
            } else {
                unit = 2;
            }
        } else if (c >= 0x80) {
            unit = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        }
        if (i + unit > to) break;
        i += unit;
    }
    return i;
}

/* Writes a JSON string body's piece re-escaped as cJSON prints it. */
static bool write_json_piece(lm_call_stream *s, const char *raw, size_t n) {
    if (n == 0) return true;
    /* \u0000 ends a cJSON string early: what follows would not be printed */
    for (size_t i = 0; i + 6 <= n; i++)
        if (raw[i] == '\\' && raw[i + 1] == 'u' && memcmp(raw + i + 2, "0000", 4) == 0) return freeze(s);
    cJSON *str = decode_string(raw, n);
    if (!str) return freeze(s);
    bool ok = append_escaped(&s->args, str->valuestring, strlen(str->valuestring));
    cJSON_Delete(str);
    return ok ? true : oom(s);
}

/* ------------------------------------------------------------ the JSON form */

static bool emitting(const lm_call_stream *s) { return s->emit_depth > 0 && s->depth >= s->emit_depth; }

/* A value starts at the current level: writes what precedes it (a comma,
 * the held key).  False: out of memory. */
static bool value_prefix(lm_call_stream *s) {
    if (!emitting(s)) return true;
    bool ok = true;
    if (s->stack[s->depth] == '{') {
        ok = lm_sbuf_append(&s->args, lm_sbuf_str(&s->key), s->key.len);
        lm_sbuf_clear(&s->key);
    } else if (s->count[s->depth] > 0) {
        ok = lm_sbuf_puts(&s->args, ",");
    }
    return ok;
}

static void value_done(lm_call_stream *s) {
    s->count[s->depth]++;
    s->expect[s->depth] = s->depth == 0 ? E_DONE : E_COMMA_OR_CLOSE;
}

static bool string_done(lm_call_stream *s, const char *b, size_t end) {
    const char *raw = b + s->tok;
    size_t n = end - s->tok;
    if (s->tok_is_key) {
        cJSON *key = decode_string(raw, n);
        if (!key) return freeze(s);
        if (s->depth == 1) {
            int role = ROLE_OTHER;
            if (strcmp(key->valuestring, "name") == 0 && !(s->step & SEEN_NAME)) role = ROLE_NAME, s->step |= SEEN_NAME;
            if (strcmp(key->valuestring, "arguments") == 0 && !(s->step & SEEN_ARGS))
                role = ROLE_ARGUMENTS, s->step |= SEEN_ARGS;
            s->key_role = role;
        }
        bool ok = true;
        if (emitting(s)) {
            lm_sbuf_clear(&s->key);
            ok = (s->count[s->depth] == 0 || lm_sbuf_puts(&s->key, ",")) && lm_sbuf_puts(&s->key, "\"") &&
                 append_escaped(&s->key, key->valuestring, strlen(key->valuestring)) && lm_sbuf_puts(&s->key, "\":");
        }
        cJSON_Delete(key);
        s->expect[s->depth] = E_COLON;
        return ok ? true : oom(s);
    }
    if (s->tok_emit) {
        if (!write_json_piece(s, raw + s->tok_sent, n - s->tok_sent)) return false;
        if (s->frozen) return true;
        if (!lm_sbuf_puts(&s->args, "\"")) return oom(s);
    } else if (s->depth == 1 && s->key_role == ROLE_NAME) {
        cJSON *name = decode_string(raw, n);
        if (!name) return freeze(s);
        if (name->valuestring[0] && !(s->name = strdup(name->valuestring))) {
            cJSON_Delete(name);
            return oom(s);
        }
        cJSON_Delete(name);
    }
    value_done(s);
    return true;
}

static bool is_atom_char(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '+' || c == '.' || c == 'E';
}

static bool atom_done(lm_call_stream *s, const char *b, size_t end) {
    size_t n = end - s->tok;
    char text[64];
    if (n >= sizeof text) return freeze(s);
    memcpy(text, b + s->tok, n);
    text[n] = 0;
    cJSON *atom = cJSON_ParseWithOpts(text, NULL, true);
    if (!atom || cJSON_IsObject(atom) || cJSON_IsArray(atom) || cJSON_IsString(atom)) {
        cJSON_Delete(atom);
        return freeze(s);
    }
    bool ok = true;
    if (emitting(s)) {
        char *printed = cJSON_PrintUnformatted(atom);
        ok = printed && value_prefix(s) && lm_sbuf_puts(&s->args, printed);
        cJSON_free(printed);
    }
    cJSON_Delete(atom);
    if (!ok) return oom(s);
    value_done(s);
    return true;
}

static bool json_update(lm_call_stream *s, const char *b, size_t len) {
    while (!s->frozen && s->pos < len) {
        if (s->in_string) {
            size_t i = s->pos;
            while (i < len && b[i] != '"') {
                if (b[i] == '\\') {
                    if (i + 1 >= len) break;
                    i++;
                }
                i++;
            }
            if (i >= len || b[i] != '"') { /* not closed yet: write what is whole */
                s->pos = i > len ? len : i;
                if (s->tok_emit) {
                    size_t whole = json_string_whole(b, s->tok + s->tok_sent, s->pos);
                    if (!write_json_piece(s, b + s->tok + s->tok_sent, whole - s->tok - s->tok_sent)) return false;
                    s->tok_sent = whole - s->tok;
                }
                return true;
            }
            s->pos = i + 1;
            if (!string_done(s, b, i)) return false;
            /* frozen on a string it had begun writing: what was written ends inside it */
            if (!s->frozen) s->in_string = false;
            continue;
        }
        if (s->in_atom) {
            size_t i = s->pos;
            while (i < len && is_atom_char(b[i])) i++;
            if (i >= len) {
                s->pos = i;
                return true;
            }
            s->in_atom = false;
            s->pos = i;
            if (!atom_done(s, b, i)) return false;
            continue;
        }
        char c = b[s->pos];
        if (is_space(c)) {
            s->pos++;
            continue;
        }
        int expect = s->expect[s->depth];
        if (expect == E_DONE) return freeze(s); /* the block's object is over */
        bool value = expect == E_VALUE || expect == E_VALUE_OR_CLOSE;
        bool key = expect == E_KEY || expect == E_KEY_OR_CLOSE;
        if ((c == '}' && (expect == E_KEY_OR_CLOSE || expect == E_COMMA_OR_CLOSE) && s->stack[s->depth] == '{') ||
            (c == ']' && (expect == E_VALUE_OR_CLOSE || expect == E_COMMA_OR_CLOSE) && s->stack[s->depth] == '[')) {
            if (emitting(s) && !lm_sbuf_append(&s->args, &c, 1)) return oom(s);
            if (s->depth == s->emit_depth) s->emit_depth = 0, s->args_done = true;
            s->depth--;
            s->pos++;
            value_done(s);
        } else if (c == ',' && expect == E_COMMA_OR_CLOSE) {
            s->expect[s->depth] = s->stack[s->depth] == '{' ? E_KEY : E_VALUE;
            s->pos++;
        } else if (c == ':' && expect == E_COLON) {
            s->expect[s->depth] = E_VALUE;
            s->pos++;
        } else if (c == '"' && key) {
            s->in_string = true;
            s->tok_is_key = true;
            s->tok_emit = false;
            s->tok = ++s->pos;
            s->tok_sent = 0;
        } else if (value && (c == '{' || c == '[')) {
            if (s->depth + 1 >= LM_CALL_STREAM_MAX_DEPTH) return freeze(s);
            /* The arguments object of a call whose name is known: written from here. */
            bool start = s->depth == 1 && s->key_role == ROLE_ARGUMENTS && c == '{' && s->name && !s->args_done &&
                         s->emit_depth == 0;
            if (!value_prefix(s)) return oom(s);
            if (start) s->emit_depth = s->depth + 1;
            s->depth++;
            s->stack[s->depth] = c;
            s->expect[s->depth] = c == '{' ? E_KEY_OR_CLOSE : E_VALUE_OR_CLOSE;
            s->count[s->depth] = 0;
            if (emitting(s) && !lm_sbuf_append(&s->args, &c, 1)) return oom(s);
            s->pos++;
        } else if (value && c == '"') {
            s->in_string = true;
            s->tok_is_key = false;
            s->tok_emit = emitting(s);
            if (s->tok_emit && !(value_prefix(s) && lm_sbuf_puts(&s->args, "\""))) return oom(s);
            s->tok = ++s->pos;
            s->tok_sent = 0;
        } else if (value && is_atom_char(c)) {
            s->in_atom = true;
            s->tok = s->pos;
        } else {
            return freeze(s); /* not JSON: the finished call (or content) says what it was */
        }
    }
    return true;
}

/* ------------------------------------------------------------ the XML and GLM forms */

static size_t find(const char *b, size_t from, size_t len, const char *marker) {
    return from + lm_marker_find(b + from, len - from, marker);
}

static bool announce(lm_call_stream *s, char *name) {
    if (!name) return oom(s);
    if (!name[0] || (s->form == LM_CALL_STREAM_GLM && strpbrk(name, "<>{}\" "))) {
        free(name);
        return freeze(s);
    }
    s->name = name;
    return lm_sbuf_puts(&s->args, "{") ? true : oom(s);
}

/* A parameter's key is read; its value starts at vstart. */
static bool open_value(lm_call_stream *s, const cJSON *tools, size_t vstart, const char *close) {
    s->typed = lm_tool_param_is_json(tools, s->name, s->param);
    s->vstart = s->vsent = vstart;
    s->in_value = false;
    s->value_close = close;
    s->step = S_VALUE;
    if (s->typed) return true;
    bool ok = (s->first_param || lm_sbuf_puts(&s->args, ",")) && lm_sbuf_puts(&s->args, "\"") &&
              append_escaped(&s->args, s->param, strlen(s->param)) && lm_sbuf_puts(&s->args, "\":\"");
    return ok ? true : oom(s);
}

static bool write_text(lm_call_stream *s, const char *b, size_t from, size_t to) {
    if (to <= from) return true;
    return append_escaped(&s->args, b + from, to - from) ? true : oom(s);
}

/* The open value: closed (written whole) or, for a string, what is sure of
 * it so far.  Returns false on out of memory; *closed when it ended. */
static bool value_update(lm_call_stream *s, const char *b, size_t len, const cJSON *tools, bool *closed) {
    *closed = false;
    size_t end = find(b, s->vstart, len, s->value_close);
    if (end < len) {
        size_t v0 = s->vstart + (end > s->vstart && b[s->vstart] == '\n');
        size_t v1 = end > v0 && b[end - 1] == '\n' ? end - 1 : end;
        if (s->vsent < v0) s->vsent = v0;
        if (s->typed) {
            char *value = malloc(v1 - v0 + 1);
            if (!value) return oom(s);
            memcpy(value, b + v0, v1 - v0);
            value[v1 - v0] = 0;
            cJSON *item = lm_tool_param_value(tools, s->name, s->param, value);
            free(value);
            char *printed = item ? cJSON_PrintUnformatted(item) : NULL;
            cJSON_Delete(item);
            bool ok = printed && (s->first_param || lm_sbuf_puts(&s->args, ",")) && lm_sbuf_puts(&s->args, "\"") &&
                      append_escaped(&s->args, s->param, strlen(s->param)) && lm_sbuf_puts(&s->args, "\":") &&
                      lm_sbuf_puts(&s->args, printed);
            cJSON_free(printed);
            if (!ok) return oom(s);
        } else {
            if (!write_text(s, b, s->vsent, v1)) return false;
            if (!lm_sbuf_puts(&s->args, "\"")) return oom(s);
        }
        s->first_param = false;
        free(s->param);
        s->param = NULL;
        s->pos = end + strlen(s->value_close);
        s->step = S_SEEK;
        *closed = true;
        return true;
    }
    if (s->typed) return true;
    /* Not closed: hold back what may start a marker that ends the value, and
     * (XML) stop at a marker the parser would end an unclosed value at. */
    size_t limit = len - lm_marker_partial(b + s->vstart, len - s->vstart, s->value_close);
    if (s->form == LM_CALL_STREAM_XML) {
        static const char *const ends[] = {"<parameter=", "</function>"};
        for (int k = 0; k < 2; k++) {
            size_t at = find(b, s->vstart, len, ends[k]);
            if (at < limit) limit = at;
            size_t hold = len - lm_marker_partial(b + s->vstart, len - s->vstart, ends[k]);
            if (hold < limit) limit = hold;
        }
    }
    if (!s->in_value) {
        if (limit <= s->vstart) return true;
        if (b[s->vstart] == '\n') s->vsent = s->vstart + 1;
        s->in_value = true;
    }
    if (limit > s->vsent && b[limit - 1] == '\n') limit--; /* may be the newline the parser trims */
    if (limit <= s->vsent) return true;
    limit = s->vsent + utf8_whole(b + s->vsent, limit - s->vsent);
    if (!write_text(s, b, s->vsent, limit)) return false;
    s->vsent = limit;
    return true;
}

static bool markup_update(lm_call_stream *s, const char *b, size_t len, const cJSON *tools) {
    bool xml = s->form == LM_CALL_STREAM_XML;
    while (!s->frozen) {
        if (s->step == S_NAME) {
            size_t end;
            if (xml) {
                end = find(b, s->pos, len, ">");
            } else {
                size_t k = find(b, s->pos, len, "<arg_key>"), nl = find(b, s->pos, len, "\n");
                end = k < nl ? k : nl;
            }
            if (end >= len) return true;
            if (!announce(s, trimmed(b + s->pos, end - s->pos))) return false;
            s->pos = xml ? end + 1 : end;
            s->step = S_SEEK;
        } else if (s->step == S_SEEK) {
            const char *open = xml ? "<parameter=" : "<arg_key>";
            size_t at = find(b, s->pos, len, open);
            if (at >= len) return true;
            s->pos = at + strlen(open);
            s->step = S_KEY;
        } else if (s->step == S_KEY) {
            size_t end = find(b, s->pos, len, xml ? ">" : "</arg_key>");
            if (end >= len) return true;
            char *key = trimmed(b + s->pos, end - s->pos);
            if (!key) return oom(s);
            if (!key[0]) {
                free(key);
                return freeze(s);
            }
            free(s->param);
            s->param = key;
            if (xml) {
                s->pos = end + 1;
                if (!open_value(s, tools, s->pos, "</parameter>")) return false;
            } else {
                s->pos = end + strlen("</arg_key>");
                s->step = S_VALUE_SEEK;
            }
        } else if (s->step == S_VALUE_SEEK) {
            size_t at = find(b, s->pos, len, "<arg_value>");
            if (at >= len) return true;
            s->pos = at + strlen("<arg_value>");
            if (!open_value(s, tools, s->pos, "</arg_value>")) return false;
        } else {
            bool closed;
            if (!value_update(s, b, len, tools, &closed)) return false;
            if (!closed) return true;
        }
    }
    return true;
}

bool lm_call_stream_update(lm_call_stream *s, const char *block, size_t len, const cJSON *tools) {
    if (s->frozen || s->args.failed) return !s->args.failed;
    if (s->form == LM_CALL_STREAM_DETECT) {
        while (s->pos < len && is_space(block[s->pos])) s->pos++;
        if (s->pos >= len) return true;
        const char *xml = "<function=";
        size_t n = strlen(xml), have = len - s->pos;
        if (block[s->pos] == '{') {
            s->form = LM_CALL_STREAM_JSON;
            s->expect[0] = E_VALUE;
        } else if (block[s->pos] == '<' && memcmp(block + s->pos, xml, have < n ? have : n) == 0) {
            if (have < n) return true;
            s->form = LM_CALL_STREAM_XML;
            s->pos += n;
        } else {
            s->form = LM_CALL_STREAM_GLM;
        }
    }
    return s->form == LM_CALL_STREAM_JSON ? json_update(s, block, len) : markup_update(s, block, len, tools);
}

bool lm_call_stream_closed(const lm_call_stream *s, lm_sbuf *out) {
    if (s->args.len == 0 || s->args.failed) return lm_sbuf_puts(out, "{}");
    if (!lm_sbuf_append(out, s->args.data, s->args.len)) return false;
    if (s->form == LM_CALL_STREAM_JSON) {
        if (s->args_done) return true;
        if (s->in_string && s->tok_emit && !lm_sbuf_puts(out, "\"")) return false;
        for (int level = s->depth; level >= s->emit_depth && level > 0; level--)
            if (!lm_sbuf_puts(out, s->stack[level] == '{' ? "}" : "]")) return false;
        return true;
    }
    if (s->step == S_VALUE && !s->typed && !lm_sbuf_puts(out, "\"")) return false;
    return lm_sbuf_puts(out, "}");
}
