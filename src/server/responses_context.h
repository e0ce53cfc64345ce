/* The whole input of a /v1/responses request, as Responses items, with
 * what the store keeps put back in: previous_response_id's stored input and
 * output items first, then this request's input, each item_reference
 * replaced by the item it names (an input or output item of a stored
 * response), messages in their long form (type "message", content a list
 * of parts).  `instructions` are not part of it: OpenAI does not carry them
 * over to the next response, and neither does loom.
 *
 * Stored responses are self-contained (each keeps the whole input it was
 * given, earlier turns included), so a chain of previous_response_id is one
 * lookup, never a walk; what bounds it is the whole input's size: at most
 * LM_RESPONSES_MAX_CONTEXT_ITEMS items and LM_RESPONSES_MAX_CONTEXT_BYTES of
 * stored text read (a 413), and then the rendered prompt's context-length
 * check as any prompt's. */
#ifndef LOOM_SERVER_RESPONSES_CONTEXT_H
#define LOOM_SERVER_RESPONSES_CONTEXT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "server/responses_store.h"

#define LM_RESPONSES_MAX_CONTEXT_ITEMS 16384
#define LM_RESPONSES_MAX_CONTEXT_BYTES ((size_t)64 << 20)
/* A new input item's index in its id is this plus its place (output items
 * count from 0), so item ids stay 4 hex digits and never collide. */
#define LM_RESPONSES_INPUT_ID_BASE 0x8000

/* Why a stored response may not be there (the 404s' words). */
#define LM_RESPONSES_GONE                                                                                         \
    "it was created with store: false, deleted, or has left the store (the oldest go first past "                \
    "--responses-store-max, --responses-store-max-bytes or --responses-store-ttl, and an in-memory store is empty " \
    "after a restart)"

typedef enum { LM_CONTEXT_OK, LM_CONTEXT_BAD, LM_CONTEXT_NOT_FOUND, LM_CONTEXT_TOO_LARGE } lm_context_refusal;

typedef struct {
    cJSON *items;     /* the whole input (cJSON_Delete it) */
    int n_history;    /* of them, the first n_history came from previous_response_id */
    lm_context_refusal refusal; /* why it failed */
} lm_responses_context;

/* Resolves body's previous_response_id and input into ctx->items (store
 * may be NULL: then either is a 400 saying the server keeps nothing).  On
 * failure: a message naming the field (and the id) in err, the field in
 * param, and ctx->refusal says 400, 404 or 413. */
lm_status lm_responses_context_resolve(const cJSON *body, lm_responses_store *store, long long now,
                                       lm_responses_context *ctx, char *param, size_t param_size, lm_error *err);

/* The response id an item id loom made belongs to ("msg_HEX32HEX4" ->
 * "resp_HEX32"); false for an id of another form. */
bool lm_responses_item_owner(const char *item_id, char *response_id, size_t size);

#endif
