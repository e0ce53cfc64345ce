/* Request framing checks on a client stream, with libhttp-parser (Debian's
 * build is the non-strict one, so the checks it leaves out are made here:
 * header names are tokens, targets have no control bytes, no obsolete line
 * folding).  See request_framing.h. */
#include "server/request_framing.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static lm_request_framing *framing_of(http_parser *p) { return p->data; }

/* Records the first error; returns the callbacks' failure value. */
static int fail(lm_request_framing *f, unsigned status, const char *message) {
    if (!f->error_status) {
        f->error_status = status;
        f->error_in_body = !f->in_head;
        snprintf(f->error_message, sizeof f->error_message, "%s", message);
    }
    return -1;
}

/* RFC 9110 5.6.2 tchar. */
static bool is_token_char(unsigned char ch) {
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) return true;
    return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static int on_message_begin(http_parser *p) {
    lm_request_framing *f = framing_of(p);
    f->url_bytes = f->fields = 0;
    f->hosts = f->transfer_encodings = 0;
    f->last_was_value = false;
    f->name_len = 0;
    f->field = LM_FIELD_OTHER;
    f->te_len = 0;
    f->body_bytes = 0;
    f->origin_len = 0;
    f->origin_too_long = false;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len) {
    lm_request_framing *f = framing_of(p);
    f->url_bytes += (uint32_t)len;
    if (f->url_bytes > LM_FRAMING_MAX_URL_BYTES) return fail(f, 414, "the request target is too long");
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)at[i];
        if (ch <= 0x20 || ch == 0x7f) return fail(f, 400, "the request target has a control byte");
    }
    return 0;
}

static lm_field_kind kind_of(const lm_request_framing *f) {
    static const struct {
        const char *name;
        lm_field_kind kind;
    } known[] = {{"host", LM_FIELD_HOST},
                 {"content-length", LM_FIELD_CONTENT_LENGTH},
                 {"transfer-encoding", LM_FIELD_TRANSFER_ENCODING},
                 {"origin", LM_FIELD_ORIGIN}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (f->name_len == strlen(known[i].name) && memcmp(f->name, known[i].name, f->name_len) == 0)
            return known[i].kind;
    return LM_FIELD_OTHER;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
    lm_request_framing *f = framing_of(p);
    if (!f->in_head) return fail(f, 400, "trailer fields in a chunked request are not supported");
    if (f->last_was_value || f->fields == 0) {
        if (++f->fields > LM_FRAMING_MAX_FIELDS) return fail(f, 431, "the request has too many header lines");
        f->name_len = 0;
        f->last_was_value = false;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)at[i];
        if (!is_token_char(ch)) return fail(f, 400, "a header name has a character that is not allowed");
        if (f->name_len < sizeof f->name) f->name[f->name_len] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
        f->name_len++;
    }
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
    lm_request_framing *f = framing_of(p);
    if (!f->last_was_value) {
        f->last_was_value = true;
        f->field = kind_of(f);
        if (f->field == LM_FIELD_HOST) f->hosts++;
        if (f->field == LM_FIELD_TRANSFER_ENCODING) f->transfer_encodings++;
        if (f->field == LM_FIELD_ORIGIN) f->origin_len = 0, f->origin_too_long = false;
    }
    if (f->field == LM_FIELD_TRANSFER_ENCODING) {
        for (size_t i = 0; i < len && f->te_len <= sizeof f->te; i++) {
            if (f->te_len < sizeof f->te) f->te[f->te_len] = at[i];
            f->te_len++;
        }
    } else if (f->field == LM_FIELD_CONTENT_LENGTH) {
        /* libmicrohttpd takes digits only (no trailing white space). */
        for (size_t i = 0; i < len; i++)
            if (at[i] < '0' || at[i] > '9') return fail(f, 400, "invalid Content-Length");
    } else if (f->field == LM_FIELD_ORIGIN) {
        if (f->origin_len + len >= sizeof f->origin) f->origin_too_long = true;
        else {
            memcpy(f->origin + f->origin_len, at, len);
            f->origin_len += (uint32_t)len;
            f->origin[f->origin_len] = 0;
        }
    }
    return 0;
}

/* The Transfer-Encoding value is exactly "chunked" (any case, surrounding
 * spaces): libmicrohttpd understands nothing else. */
static bool te_is_chunked(const lm_request_framing *f) {
    if (f->te_len > sizeof f->te) return false;
    const char *s = f->te, *e = f->te + f->te_len;
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t')) e--;
    return e - s == 7 && strncasecmp(s, "chunked", 7) == 0;
}

static int on_headers_complete(http_parser *p) {
    lm_request_framing *f = framing_of(p);
    if (p->http_major != 1 || p->http_minor > 1) {
        char message[80];
        snprintf(message, sizeof message, "HTTP/%u.%u is not supported (HTTP/1.0 and HTTP/1.1 are)",
                 p->http_major, p->http_minor);
        return fail(f, 505, message);
    }
    if (p->method == HTTP_CONNECT) return fail(f, 400, "CONNECT is not supported");
    if (f->hosts > 1) return fail(f, 400, "the request has more than one Host header");
    if (f->hosts == 0 && p->http_minor == 1) return fail(f, 400, "an HTTP/1.1 request needs a Host header");
    if (f->transfer_encodings > 1 || (f->transfer_encodings == 1 && !te_is_chunked(f)))
        return fail(f, 400, "unsupported Transfer-Encoding (only chunked, without Content-Length)");
    f->in_head = false;
    f->head_done = true;
    f->in_chunk_line = (p->flags & F_CHUNKED) != 0;
    f->chunk_ext = false;
    f->head_is_HEAD = p->method == HTTP_HEAD;
    /* Stop here, so that one feed never holds both head and body bytes. */
    http_parser_pause(p, 1);
    return 0;
}

static int on_chunk_header(http_parser *p) {
    lm_request_framing *f = framing_of(p);
    uint64_t max = f->limits.max_body_bytes;
    if (p->content_length > max || f->body_bytes + p->content_length > max)
        return fail(f, 413, "the request body is larger than the server accepts");
    f->body_bytes += p->content_length;
    f->in_chunk_line = false;
    http_parser_pause(p, 1); /* so that a feed holds at most one chunk-size line */
    return 0;
}

static int on_chunk_complete(http_parser *p) {
    lm_request_framing *f = framing_of(p);
    f->in_chunk_line = true;
    f->chunk_ext = false;
    http_parser_pause(p, 1);
    return 0;
}

static int on_message_complete(http_parser *p) {
    lm_request_framing *f = framing_of(p);
    f->in_head = true;
    f->head_bytes = 0;
    f->in_chunk_line = false;
    f->message_done = true;
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_chunk_header = on_chunk_header,
    .on_chunk_complete = on_chunk_complete,
    .on_message_complete = on_message_complete,
};

void lm_framing_init(lm_request_framing *f, const lm_framing_limits *limits) {
    memset(f, 0, sizeof *f);
    f->limits = *limits;
    http_parser_init(&f->parser, HTTP_REQUEST);
    f->parser.data = f;
    f->in_head = true;
}

/* The parser's own verdicts, as statuses. */
static void parser_failed(lm_request_framing *f, enum http_errno e, unsigned char at) {
    switch (e) {
    case HPE_HEADER_OVERFLOW: fail(f, 431, "the request head is too large"); break;
    case HPE_INVALID_CONTENT_LENGTH:
        /* A number too large for 64 bits (a length, or in a body a chunk
         * size) is a body too large. */
        if ((at >= '0' && at <= '9') || (!f->in_head && ((at >= 'a' && at <= 'f') || (at >= 'A' && at <= 'F'))))
            fail(f, 413, "the request body is larger than the server accepts");
        else fail(f, 400, "invalid Content-Length");
        break;
    case HPE_UNEXPECTED_CONTENT_LENGTH:
        fail(f, 400, "Content-Length given twice, or with Transfer-Encoding");
        break;
    case HPE_INVALID_TRANSFER_ENCODING:
        fail(f, 400, "unsupported Transfer-Encoding (only chunked, without Content-Length)");
        break;
    case HPE_INVALID_CHUNK_SIZE: fail(f, 400, "invalid chunk size in a chunked body"); break;
    case HPE_INVALID_METHOD: fail(f, 400, "invalid or unknown HTTP method"); break;
    case HPE_INVALID_VERSION: fail(f, 400, "malformed HTTP version"); break;
    case HPE_INVALID_URL: fail(f, 400, "invalid request target"); break;
    case HPE_INVALID_HEADER_TOKEN: fail(f, 400, "invalid character in a header line"); break;
    default: {
        char message[120];
        snprintf(message, sizeof message, "malformed request: %s", http_errno_description(e));
        fail(f, 400, message);
    }
    }
}

/* Obsolete line folding (RFC 9112 5.2), and a header line that starts with
 * white space right after the request line: a line feed followed by a space
 * or tab anywhere in a head. */
static bool has_folded_line(lm_request_framing *f, const char *data, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (f->prev_was_lf && (data[i] == ' ' || data[i] == '\t')) return true;
        f->prev_was_lf = data[i] == '\n';
    }
    return false;
}

/* A chunk-size line is hex digits, then CRLF or ';' and extensions:
 * libmicrohttpd refuses white space after the size (so does RFC 9112). */
static bool bad_chunk_line(lm_request_framing *f, const char *data, size_t len) {
    for (size_t i = 0; i < len && !f->chunk_ext; i++) {
        char ch = data[i];
        if (ch == ';') f->chunk_ext = true;
        else if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F') || ch == '\r' ||
                   ch == '\n'))
            return true;
    }
    return false;
}

size_t lm_framing_feed(lm_request_framing *f, const char *data, size_t len) {
    f->head_done = f->message_done = false;
    if (f->error_status || len == 0) return 0;
    bool was_in_head = f->in_head, was_in_chunk_line = f->in_chunk_line;
    if (was_in_head) {
        size_t room = LM_FRAMING_MAX_HEAD_BYTES - f->head_bytes;
        if (room == 0) {
            fail(f, 431, "the request head is larger than 32768 bytes");
            return 0;
        }
        if (len > room) len = room;
        if (f->head_bytes == 0) f->prev_was_lf = false;
    }
    size_t used = http_parser_execute(&f->parser, &settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&f->parser);
    if (e == HPE_PAUSED) http_parser_pause(&f->parser, 0);
    else if (e != HPE_OK && !f->error_status) parser_failed(f, e, used < len ? (unsigned char)data[used] : 0);
    /* A head's bytes are all in feeds that start in it (the parser pauses at
     * its end), so they can be checked for folding here. */
    if (was_in_head && !f->error_status && has_folded_line(f, data, used)) {
        f->in_head = true;
        f->head_done = false;
        fail(f, 400, "obsolete line folding or a header line starting with white space");
    }
    /* Likewise a chunk-size line: the parser pauses at its end. */
    if (was_in_chunk_line && !f->error_status && bad_chunk_line(f, data, used))
        fail(f, 400, "invalid chunk size line in a chunked body");
    f->offset += used;
    if (f->error_status) return used;
    if (f->in_head) f->head_bytes = was_in_head && !f->message_done ? f->head_bytes + (uint32_t)used : 0;
    if (f->message_done && f->parser.upgrade) {
        /* An Upgrade request: loom answers it as plain HTTP, so the next
         * bytes are the next request. */
        http_parser_init(&f->parser, HTTP_REQUEST);
        f->parser.data = f;
    }
    return used;
}

bool lm_framing_mid_request(const lm_request_framing *f) { return !f->in_head || f->head_bytes > 0; }

const char *lm_framing_origin(const lm_request_framing *f) {
    return f->origin_too_long || f->origin_len == 0 ? "" : f->origin;
}
