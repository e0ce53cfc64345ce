#include "server/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool lm_sbuf_append(lm_sbuf *b, const char *s, size_t n) {
    if (b->failed) return false;
    if (n > LM_SBUF_MAX - b->len - 1) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need) cap = cap > LM_SBUF_MAX / 2 ? LM_SBUF_MAX : cap * 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = true;
            return false;
        }
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

bool lm_sbuf_puts(lm_sbuf *b, const char *s) { return lm_sbuf_append(b, s, strlen(s)); }

bool lm_sbuf_printf(lm_sbuf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof small) return lm_sbuf_append(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = true;
        return false;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = lm_sbuf_append(b, big, (size_t)n);
    free(big);
    return ok;
}

void lm_sbuf_consume(lm_sbuf *b, size_t n) {
    if (n >= b->len) {
        lm_sbuf_clear(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = 0;
}

void lm_sbuf_clear(lm_sbuf *b) {
    b->len = 0;
    if (b->data) b->data[0] = 0;
}

void lm_sbuf_free(lm_sbuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

const char *lm_sbuf_str(const lm_sbuf *b) { return b->data ? b->data : ""; }
