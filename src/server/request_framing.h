/* Validation of the framing of the requests on one client connection
 * (libhttp-parser, HTTP_REQUEST mode, across keep-alive requests), before
 * libmicrohttpd sees any of it: what MHD would refuse with its own HTML
 * body is refused here with a status and a message, so that the front
 * door can answer in JSON.
 *
 * The caller feeds the client's bytes in order.  A request head is held
 * (not released) until it is complete and passes every check; body bytes
 * are released as they are parsed.  On an error the stream is dead: every
 * later feed consumes nothing. */
#ifndef LOOM_SERVER_REQUEST_FRAMING_H
#define LOOM_SERVER_REQUEST_FRAMING_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LM_FRAMING_MAX_HEAD_BYTES 32768 /* larger request heads (or trailers) get 431 */
#define LM_FRAMING_MAX_URL_BYTES 8192   /* longer request targets get 414 */
#define LM_FRAMING_MAX_FIELDS 256       /* more header (or trailer) lines get 431 */
#define LM_FRAMING_ORIGIN_BYTES 256     /* an Origin value kept for CORS on our errors */

typedef struct {
    uint64_t max_body_bytes; /* a chunked body (or one chunk) larger than this gets 413 */
} lm_framing_limits;

typedef enum { LM_FIELD_OTHER, LM_FIELD_HOST, LM_FIELD_CONTENT_LENGTH, LM_FIELD_TRANSFER_ENCODING,
               LM_FIELD_ORIGIN } lm_field_kind;

typedef struct {
    http_parser parser;
    lm_framing_limits limits;
    /* The stream. */
    uint64_t offset;      /* bytes consumed so far */
    bool in_head;         /* consuming a request head (held until it is complete) */
    uint32_t head_bytes;  /* of the head being consumed */
    bool head_done;       /* set by a feed that completed a head that passed the checks */
    bool message_done;    /* set by a feed that ended at a request's end */
    bool head_is_HEAD;    /* the completed head's method is HEAD */
    /* The request being parsed. */
    uint32_t url_bytes, fields, trailer_bytes;
    int hosts, transfer_encodings;
    bool last_was_value;  /* the last callback was a header value: the next name is a new field */
    bool prev_was_lf;     /* the head's last byte so far was a line feed (obs-fold detection) */
    char name[24];        /* the current field name, lower-case, when it fits */
    uint32_t name_len;
    lm_field_kind field;
    bool in_chunk_line;   /* the next bytes are a chunk-size line */
    bool chunk_ext;       /* past the ';' of that line's extensions */
    char te[16];
    uint32_t te_len;
    uint64_t body_bytes; /* of a chunked body */
    char origin[LM_FRAMING_ORIGIN_BYTES];
    uint32_t origin_len;
    bool origin_too_long;
    /* The verdict. */
    unsigned error_status; /* 0 while the stream is fine */
    bool error_in_body;    /* the bad request's head had been released */
    char error_message[160];
} lm_request_framing;

void lm_framing_init(lm_request_framing *f, const lm_framing_limits *limits);
/* Consumes a prefix of the len bytes and returns its length: it stops
 * after a completed head (head_done), after a request's end (message_done),
 * at an error (error_status), or when the bytes run out.  While in_head
 * the consumed bytes belong to a head and must be held; otherwise they may
 * go on to the server.  Never consumes more than LM_FRAMING_MAX_HEAD_BYTES
 * of one head. */
size_t lm_framing_feed(lm_request_framing *f, const char *data, size_t len);
/* The client closed its side: true when that cut a request short (its
 * bytes so far are to be dropped rather than answered). */
bool lm_framing_mid_request(const lm_request_framing *f);
/* The request's Origin value (NUL-terminated), "" when none or too long. */
const char *lm_framing_origin(const lm_request_framing *f);

#endif
