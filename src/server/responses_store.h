/* Stored Responses (OpenAI's `store`): keeps each finished response --
 * its object as created and its whole input (the earlier turns included) --
 * and looks them up by id, for previous_response_id, item_reference and
 * GET / DELETE /v1/responses/{id}.  One job: keep and find; what a response
 * holds is the caller's JSON text.
 *
 * SQLite in both cases (one code path, prepared statements): in memory by
 * default, or a file (WAL) that survives restarts.  Bounded three ways: a
 * count, the bytes of the texts kept, and an age; past a bound the oldest
 * go first.  One connection behind a mutex, so any thread may call; calls
 * take milliseconds and never run on the engine's thread.  One server per
 * file.  `now` is passed in (seconds since the epoch), so the age bound is
 * testable without waiting. */
#ifndef LOOM_SERVER_RESPONSES_STORE_H
#define LOOM_SERVER_RESPONSES_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define LM_RESPONSES_STORE_DEFAULT_MAX 10000
#define LM_RESPONSES_STORE_DEFAULT_MAX_BYTES ((int64_t)256 << 20)
#define LM_RESPONSES_STORE_DEFAULT_TTL_S ((int64_t)30 * 24 * 3600) /* OpenAI keeps responses 30 days */
#define LM_RESPONSES_STORE_MAX_ID 128

typedef struct {
    const char *path;  /* NULL or "": in memory; else an SQLite file, created if missing */
    int max_responses; /* 0: the default */
    int64_t max_bytes; /* of the texts kept; 0: the default */
    int64_t ttl_s;     /* a response older than this is gone; 0: the default */
} lm_responses_store_options;

typedef struct lm_responses_store lm_responses_store;

/* What one stored response is. */
typedef struct {
    const char *id;        /* "resp_...", at most LM_RESPONSES_STORE_MAX_ID bytes */
    long long created_at;  /* the response's */
    const char *response;  /* the response object, JSON text */
    const char *input;     /* its input items, a JSON array (text) */
} lm_stored_response;

/* Opens (or creates) the store; a file that is not a store, is not
 * writable or was made by another version of the schema is an error
 * naming the path. */
lm_status lm_responses_store_open(const lm_responses_store_options *options, lm_responses_store **out,
                                  lm_error *err);
void lm_responses_store_close(lm_responses_store *s);

/* Keeps r (replacing one of the same id), then drops the expired and, past
 * the count or the bytes, the oldest.  A response larger than the byte
 * bound on its own is LM_ERR_NOMEM (nothing kept). */
lm_status lm_responses_store_put(lm_responses_store *s, const lm_stored_response *r, long long now, lm_error *err);

/* *found: whether id is kept and younger than the age bound; then
 * *response and *input are its texts (free them), else NULL. */
lm_status lm_responses_store_get(lm_responses_store *s, const char *id, long long now, bool *found, char **response,
                                 char **input, lm_error *err);

/* *found: whether id was kept (and is now gone). */
lm_status lm_responses_store_delete(lm_responses_store *s, const char *id, bool *found, lm_error *err);

/* What is kept now (the count and the bytes the bound counts). */
void lm_responses_store_usage(lm_responses_store *s, int *count, int64_t *bytes);

/* The bounds in force (the defaults filled in). */
void lm_responses_store_bounds(const lm_responses_store *s, lm_responses_store_options *out);

#endif
