/* Status reporting: every function that can fail returns an lm_status code and,
 * on failure, fills an lm_error with a human-readable message.  No globals. */
#ifndef LOOM_BASE_ERROR_H
#define LOOM_BASE_ERROR_H

#include <stddef.h>

typedef enum {
    LM_OK = 0,
    LM_ERR_IO,          /* a file could not be opened or read */
    LM_ERR_FORMAT,      /* input bytes are malformed (checkpoint, JSON, template...) */
    LM_ERR_INVALID,     /* a caller passed an invalid argument */
    LM_ERR_NOMEM,       /* an allocation failed or a size bound was exceeded */
    LM_ERR_UNSUPPORTED, /* valid input that loom does not implement */
    LM_ERR_INTERNAL,    /* an invariant broke: a bug */
} lm_status;

#define LM_ERROR_MESSAGE_MAX 512

typedef struct {
    lm_status code;
    char message[LM_ERROR_MESSAGE_MAX];
} lm_error;

/* Sets err (when non-NULL) and returns code, so callers can write
 * `return lm_fail(err, LM_ERR_FORMAT, "bad %s", what);`. */
lm_status lm_fail(lm_error *err, lm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends context ("while loading X: ") to an existing message. */
lm_status lm_fail_context(lm_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void lm_error_clear(lm_error *err);
const char *lm_status_name(lm_status code);

#endif
