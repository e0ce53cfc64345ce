#include "server/responses_context.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESPONSE_HEX 32 /* a response id is "resp_" and 32 hex digits (generation.c) */

/* The stored responses this request read, parsed once each. */
typedef struct {
    char id[LM_RESPONSES_STORE_MAX_ID + 1];
    cJSON *response, *input;
} stored;

typedef struct {
    lm_responses_store *store;
    long long now;
    char *param;
    size_t param_size;
    lm_error *err;
    lm_responses_context *ctx;
    stored *read;
    int n_read, cap_read;
    size_t bytes_read;
} resolver;

__attribute__((format(printf, 4, 5))) static lm_status refuse(resolver *r, lm_context_refusal why, const char *param,
                                                              const char *fmt, ...) {
    if (r->param && r->param_size) snprintf(r->param, r->param_size, "%s", param ? param : "");
    char message[LM_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    r->ctx->refusal = why;
    return lm_fail(r->err, why == LM_CONTEXT_TOO_LARGE ? LM_ERR_NOMEM : LM_ERR_INVALID, "%s", message);
}

static lm_status oom(resolver *r) {
    r->ctx->refusal = LM_CONTEXT_BAD;
    return lm_fail(r->err, LM_ERR_NOMEM, "out of memory resolving the stored responses of the input");
}

/* An id for a message: printable ASCII, cut at 80 bytes. */
static void shown(const char *id, char *out, size_t size) {
    size_t k = 0;
    for (const char *p = id; *p && k + 1 < size && p - id < 80; p++) out[k++] = *p >= 0x20 && *p < 0x7f ? *p : '?';
    out[k] = 0;
}

bool lm_responses_item_owner(const char *item_id, char *response_id, size_t size) {
    const char *u = strchr(item_id, '_');
    if (!u || u == item_id || u - item_id > 8 || strlen(u + 1) != RESPONSE_HEX + 4) return false;
    for (const char *p = u + 1; *p; p++)
        if (!isxdigit((unsigned char)*p)) return false;
    return snprintf(response_id, size, "resp_%.*s", RESPONSE_HEX, u + 1) == 5 + RESPONSE_HEX;
}

/* The stored response id (read once per request); NULL with *found false
 * when the store does not have it. */
static lm_status read_stored(resolver *r, const char *id, const stored **out) {
    *out = NULL;
    for (int i = 0; i < r->n_read; i++)
        if (strcmp(r->read[i].id, id) == 0) {
            *out = &r->read[i];
            return LM_OK;
        }
    if (strlen(id) > LM_RESPONSES_STORE_MAX_ID) return LM_OK;
    bool found = false;
    char *response = NULL, *input = NULL;
    lm_status st = lm_responses_store_get(r->store, id, r->now, &found, &response, &input, r->err);
    if (st != LM_OK) {
        r->ctx->refusal = LM_CONTEXT_BAD;
        return st;
    }
    if (!found) return LM_OK;
    r->bytes_read += strlen(response) + strlen(input);
    cJSON *rj = cJSON_Parse(response), *ij = cJSON_Parse(input);
    free(response);
    free(input);
    if (r->n_read == r->cap_read) {
        int cap = r->cap_read ? 2 * r->cap_read : 4;
        stored *grown = realloc(r->read, sizeof *grown * (size_t)cap);
        if (!grown) {
            cJSON_Delete(rj);
            cJSON_Delete(ij);
            return oom(r);
        }
        r->read = grown;
        r->cap_read = cap;
    }
    stored *s = &r->read[r->n_read++];
    snprintf(s->id, sizeof s->id, "%s", id);
    s->response = rj;
    s->input = ij;
    if (!cJSON_IsObject(rj) || !cJSON_IsArray(ij) || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(rj, "output"))) {
        r->ctx->refusal = LM_CONTEXT_BAD;
        return lm_fail(r->err, LM_ERR_FORMAT, "stored response %s is damaged (not the JSON loom wrote)", s->id);
    }
    if (r->bytes_read > LM_RESPONSES_MAX_CONTEXT_BYTES)
        return refuse(r, LM_CONTEXT_TOO_LARGE, "input",
                      "the stored responses this request names hold more than %zu MiB of input and output",
                      LM_RESPONSES_MAX_CONTEXT_BYTES >> 20);
    *out = s;
    return LM_OK;
}

static lm_status append(resolver *r, cJSON *item) {
    if (!item) return oom(r);
    if (cJSON_GetArraySize(r->ctx->items) >= LM_RESPONSES_MAX_CONTEXT_ITEMS) {
        cJSON_Delete(item);
        return refuse(r, LM_CONTEXT_TOO_LARGE, "input",
                      "the input with its stored context holds more than %d items", LM_RESPONSES_MAX_CONTEXT_ITEMS);
    }
    cJSON_AddItemToArray(r->ctx->items, item);
    return LM_OK;
}

static lm_status append_all(resolver *r, const cJSON *list) {
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        lm_status st = append(r, cJSON_Duplicate(item, true));
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

static const cJSON *find_by_id(const cJSON *list, const char *id) {
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(item, "id");
        if (cJSON_IsString(v) && strcmp(v->valuestring, id) == 0) return item;
    }
    return NULL;
}

/* {"type": "item_reference", "id": ...}: the item, from the response its
 * id names (its output, else its input). */
static lm_status referenced_item(resolver *r, const cJSON *ref, const char *path) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(ref, "id");
    char where[80];
    snprintf(where, sizeof where, "%s.id", path);
    if (!cJSON_IsString(id)) return refuse(r, LM_CONTEXT_BAD, where, "'%s' must be a string (an item's id)", where);
    char show[96];
    shown(id->valuestring, show, sizeof show);
    if (!r->store)
        return refuse(r, LM_CONTEXT_BAD, path, "'%s' is an item_reference, but this server keeps no responses "
                      "(--responses-store-max 0): send the item itself", path);
    char owner[64];
    const stored *s = NULL;
    if (lm_responses_item_owner(id->valuestring, owner, sizeof owner)) {
        lm_status st = read_stored(r, owner, &s);
        if (st != LM_OK) return st;
    }
    const cJSON *item = s ? find_by_id(cJSON_GetObjectItemCaseSensitive(s->response, "output"), id->valuestring) : NULL;
    if (s && !item) item = find_by_id(s->input, id->valuestring);
    if (!item)
        return refuse(r, LM_CONTEXT_NOT_FOUND, where, "'%s': no stored item '%s': the response it came from is not "
                      "kept: " LM_RESPONSES_GONE, where, show);
    return append(r, cJSON_Duplicate(item, true));
}

/* A message in its long form: type "message", content a list of parts. */
static cJSON *long_message(const cJSON *item) {
    cJSON *m = cJSON_Duplicate(item, true);
    if (!m) return NULL;
    if (!cJSON_GetObjectItemCaseSensitive(m, "type")) cJSON_AddStringToObject(m, "type", "message");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (cJSON_IsString(content)) {
        bool assistant = cJSON_IsString(role) && strcmp(role->valuestring, "assistant") == 0;
        cJSON *parts = cJSON_CreateArray(), *part = cJSON_CreateObject();
        if (!parts || !part || !cJSON_AddStringToObject(part, "type", assistant ? "output_text" : "input_text") ||
            !cJSON_AddStringToObject(part, "text", content->valuestring)) {
            cJSON_Delete(parts);
            cJSON_Delete(part);
            cJSON_Delete(m);
            return NULL;
        }
        cJSON_AddItemToArray(parts, part);
        cJSON_ReplaceItemInObjectCaseSensitive(m, "content", parts);
    }
    return m;
}

static lm_status previous_items(resolver *r, const cJSON *body) {
    const cJSON *prev = cJSON_GetObjectItemCaseSensitive(body, "previous_response_id");
    if (!prev || cJSON_IsNull(prev)) return LM_OK;
    if (!cJSON_IsString(prev))
        return refuse(r, LM_CONTEXT_BAD, "previous_response_id", "'previous_response_id' must be a string");
    if (!r->store)
        return refuse(r, LM_CONTEXT_BAD, "previous_response_id", "'previous_response_id' names a stored response, "
                      "but this server keeps no responses (--responses-store-max 0): send the whole conversation in "
                      "'input'");
    const stored *s = NULL;
    lm_status st = read_stored(r, prev->valuestring, &s);
    if (st != LM_OK) return st;
    char show[96];
    shown(prev->valuestring, show, sizeof show);
    if (!s)
        return refuse(r, LM_CONTEXT_NOT_FOUND, "previous_response_id",
                      "'previous_response_id': no stored response '%s': " LM_RESPONSES_GONE, show);
    if ((st = append_all(r, s->input)) != LM_OK) return st;
    if ((st = append_all(r, cJSON_GetObjectItemCaseSensitive(s->response, "output"))) != LM_OK) return st;
    r->ctx->n_history = cJSON_GetArraySize(r->ctx->items);
    return LM_OK;
}

static lm_status new_items(resolver *r, const cJSON *body) {
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(body, "input");
    if (!input || cJSON_IsNull(input)) return refuse(r, LM_CONTEXT_BAD, "input", "'input' is required");
    if (cJSON_IsString(input)) {
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddStringToObject(m, "role", "user") || !cJSON_AddStringToObject(m, "content", input->valuestring)) {
            cJSON_Delete(m);
            return oom(r);
        }
        cJSON *longer = long_message(m);
        cJSON_Delete(m);
        return append(r, longer);
    }
    if (!cJSON_IsArray(input)) return refuse(r, LM_CONTEXT_BAD, "input", "'input' must be a string or a list of items");
    const cJSON *item;
    int i = 0;
    cJSON_ArrayForEach(item, input) {
        char path[48];
        snprintf(path, sizeof path, "input[%d]", i++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
        bool is_ref = cJSON_IsString(type) && strcmp(type->valuestring, "item_reference") == 0;
        bool is_message = cJSON_IsObject(item) && (!type || cJSON_IsNull(type) ||
                                                   (cJSON_IsString(type) && strcmp(type->valuestring, "message") == 0));
        lm_status st = is_ref       ? referenced_item(r, item, path)
                       : is_message ? append(r, long_message(item))
                                    : append(r, cJSON_Duplicate(item, true)); /* checked when translated */
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

lm_status lm_responses_context_resolve(const cJSON *body, lm_responses_store *store, long long now,
                                       lm_responses_context *ctx, char *param, size_t param_size, lm_error *err) {
    *ctx = (lm_responses_context){.items = cJSON_CreateArray()};
    resolver r = {.store = store, .now = now, .param = param, .param_size = param_size, .err = err, .ctx = ctx};
    lm_status st = ctx->items ? previous_items(&r, body) : oom(&r);
    if (st == LM_OK) st = new_items(&r, body);
    for (int i = 0; i < r.n_read; i++) {
        cJSON_Delete(r.read[i].response);
        cJSON_Delete(r.read[i].input);
    }
    free(r.read);
    if (st != LM_OK) {
        cJSON_Delete(ctx->items);
        ctx->items = NULL;
    }
    return st;
}
