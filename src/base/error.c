#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

lm_status lm_fail(lm_error *err, lm_status code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

lm_status lm_fail_context(lm_error *err, const char *fmt, ...) {
    if (!err) return LM_ERR_INTERNAL;
    char prefix[LM_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Build "prefix: message" and truncate to the buffer. */
    char joined[2 * LM_ERROR_MESSAGE_MAX + 2];
    snprintf(joined, sizeof joined, "%s: %s", prefix, err->message);
    snprintf(err->message, sizeof err->message, "%.*s", LM_ERROR_MESSAGE_MAX - 1, joined);
    return err->code;
}

void lm_error_clear(lm_error *err) {
    if (!err) return;
    err->code = LM_OK;
    err->message[0] = '\0';
}

const char *lm_status_name(lm_status code) {
    switch (code) {
    case LM_OK: return "ok";
    case LM_ERR_IO: return "io error";
    case LM_ERR_FORMAT: return "format error";
    case LM_ERR_INVALID: return "invalid argument";
    case LM_ERR_NOMEM: return "out of memory";
    case LM_ERR_UNSUPPORTED: return "unsupported";
    case LM_ERR_INTERNAL: return "internal error";
    }
    return "unknown error";
}
