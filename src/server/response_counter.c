/* See response_counter.h. */
#include "server/response_counter.h"

#include <string.h>

static int on_headers_complete(http_parser *p) {
    lm_response_counter *c = p->data;
    if (p->status_code / 100 == 1) return 0; /* interim (100 Continue): no body, not the answer */
    bool is_head = false;
    if (c->queued > 0) {
        is_head = c->head_bits & 1;
        c->head_bits >>= 1;
        c->queued--;
    }
    return is_head ? 1 : 0; /* 1: this response has no body */
}

static int on_message_complete(http_parser *p) {
    lm_response_counter *c = p->data;
    if (p->status_code / 100 != 1) c->done++;
    return 0;
}

static const http_parser_settings settings = {
    .on_headers_complete = on_headers_complete,
    .on_message_complete = on_message_complete,
};

void lm_response_counter_init(lm_response_counter *c) {
    memset(c, 0, sizeof *c);
    http_parser_init(&c->parser, HTTP_RESPONSE);
    c->parser.data = c;
}

bool lm_response_counter_full(const lm_response_counter *c) { return c->queued >= LM_RESPONSES_MAX_PENDING; }

bool lm_response_counter_expect(lm_response_counter *c, bool is_head) {
    if (lm_response_counter_full(c)) return false;
    if (is_head) c->head_bits |= (uint64_t)1 << c->queued;
    c->queued++;
    c->expected++;
    return true;
}

void lm_response_counter_feed(lm_response_counter *c, const char *data, size_t len) {
    if (c->broken || len == 0) return;
    size_t used = http_parser_execute(&c->parser, &settings, data, len);
    if (used != len || HTTP_PARSER_ERRNO(&c->parser) != HPE_OK) c->broken = true;
}

uint64_t lm_response_counter_outstanding(const lm_response_counter *c) {
    return c->done >= c->expected ? 0 : c->expected - c->done;
}
