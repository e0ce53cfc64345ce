/* Turning template values into text: Python's str() and repr(), and
 * json.dumps as transformers' tojson calls it. */
#ifndef LOOM_TEXT_JINJA_PRINT_H
#define LOOM_TEXT_JINJA_PRINT_H

#include "text/jinja_value.h"

/* A growable byte buffer bounded by jctx.max_string. */
typedef struct {
    char *data;
    size_t len, cap;
} jbuf;

bool jbuf_put(jctx *c, jbuf *b, const char *s, size_t n);
bool jbuf_puts(jctx *c, jbuf *b, const char *s);
bool jbuf_printf(jctx *c, jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void jbuf_free(jbuf *b);
/* Moves the buffer's text into a new string value and empties the buffer. */
bool jbuf_take_str(jctx *c, jbuf *b, jv *out);

/* Python str(v) as Jinja prints it ({{ v }}): undefined prints nothing. */
bool jv_print(jctx *c, jbuf *b, jv v);
/* Python repr(v). */
bool jv_repr(jctx *c, jbuf *b, jv v);
/* str(v) as a new string value (strings are returned retained, not copied). */
bool jv_to_string(jctx *c, jv v, jv *out);
/* Python repr of a float ("1.0", "1e-05", "0.1"); buf holds at least 32 bytes. */
void jfloat_repr(double x, char *buf, size_t size);

typedef struct {
    bool ensure_ascii;
    bool sort_keys;
    bool indent_set;    /* indent given (an int or a string) */
    const char *indent; /* indent text per level */
    size_t indent_len;
    const char *item_sep; /* default ", " (or "," when indenting) */
    const char *key_sep;  /* default ": " */
} jjson_opts;

void jjson_opts_default(jjson_opts *o);
/* json.dumps(v, ...) into b. */
bool jv_to_json(jctx *c, jbuf *b, jv v, const jjson_opts *o);
/* A JSON string literal for s (used for dict keys as well). */
bool jjson_string(jctx *c, jbuf *b, const char *s, size_t n, bool ensure_ascii);

#endif
