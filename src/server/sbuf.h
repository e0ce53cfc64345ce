/* A growable byte buffer, always NUL-terminated, with a hard size cap so a
 * hostile input cannot grow it without bound. */
#ifndef LOOM_SERVER_SBUF_H
#define LOOM_SERVER_SBUF_H

#include <stdbool.h>
#include <stddef.h>

#define LM_SBUF_MAX ((size_t)1 << 30)

typedef struct {
    char *data; /* NULL until the first append */
    size_t len, cap;
    bool failed; /* an allocation failed or the cap was reached; later appends are dropped */
} lm_sbuf;

bool lm_sbuf_append(lm_sbuf *b, const char *s, size_t n);
bool lm_sbuf_puts(lm_sbuf *b, const char *s);
bool lm_sbuf_printf(lm_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Removes the first n bytes. */
void lm_sbuf_consume(lm_sbuf *b, size_t n);
void lm_sbuf_clear(lm_sbuf *b);
void lm_sbuf_free(lm_sbuf *b);
/* The text ("" when empty; never NULL). */
const char *lm_sbuf_str(const lm_sbuf *b);

#endif
