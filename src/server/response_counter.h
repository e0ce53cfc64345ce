/* Counts the responses libmicrohttpd writes on one connection (libhttp-parser
 * in HTTP_RESPONSE mode over the bytes as they pass), so that the front door
 * knows when every request it let through has been answered.  The bytes
 * are only read, never changed. */
#ifndef LOOM_SERVER_RESPONSE_COUNTER_H
#define LOOM_SERVER_RESPONSE_COUNTER_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LM_RESPONSES_MAX_PENDING 64 /* requests let through and not yet answered, at most */

typedef struct {
    http_parser parser;
    uint64_t head_bits; /* bit i: the i-th request not yet answered was a HEAD (its response has no body) */
    int queued;         /* requests whose response has not started */
    uint64_t expected;  /* requests let through */
    uint64_t done;      /* final (non-1xx) responses complete */
    bool broken;        /* the bytes did not parse as responses: counts are unknown */
} lm_response_counter;

void lm_response_counter_init(lm_response_counter *c);
/* A request was let through; false (and nothing recorded) when
 * LM_RESPONSES_MAX_PENDING are already waiting for their response. */
bool lm_response_counter_expect(lm_response_counter *c, bool is_head);
bool lm_response_counter_full(const lm_response_counter *c);
void lm_response_counter_feed(lm_response_counter *c, const char *data, size_t len);
/* Requests let through and not yet completely answered. */
uint64_t lm_response_counter_outstanding(const lm_response_counter *c);

#endif
