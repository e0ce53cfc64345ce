/* The stored Responses' own routes: GET /v1/responses/{id} (the response
 * object as it was created, streamed or not), DELETE /v1/responses/{id}
 * (OpenAI's {"id", "object": "response", "deleted": true}) and GET
 * /v1/responses/{id}/input_items (OpenAI's list: data, first_id, last_id,
 * has_more; limit 1-100, default 20; order asc or desc, default desc;
 * after an item id).  A response not kept is a 404 naming it.  Run on a
 * preparation thread (the store is SQLite). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/responses_context.h"
#include "server/server_internal.h"

#define ROUTE_PREFIX "/v1/responses/"
#define MAX_LIST_LIMIT 100
#define DEFAULT_LIST_LIMIT 20

/* An id for a message: printable ASCII, cut at 80 bytes. */
static void shown(const char *id, char *out, size_t size) {
    size_t k = 0;
    for (const char *p = id; *p && k + 1 < size && p - id < 80; p++) out[k++] = *p >= 0x20 && *p < 0x7f ? *p : '?';
    out[k] = 0;
}

static enum MHD_Result not_kept(struct MHD_Connection *c, const char *id) {
    char show[96], message[LM_ERROR_MESSAGE_MAX];
    shown(id, show, sizeof show);
    snprintf(message, sizeof message, "no stored response '%s': " LM_RESPONSES_GONE, show);
    return lm_reply_error(c, 404, message, "response_id");
}

static enum MHD_Result store_failed(struct MHD_Connection *c, const lm_error *err) {
    return lm_reply_error(c, err->code == LM_ERR_NOMEM ? 500 : 503, err->message, NULL);
}

/* The list of input items: order, after, limit from the query. */
static enum MHD_Result list_input_items(struct MHD_Connection *c, const char *input_text) {
    const char *order = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "order");
    const char *after = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after");
    const char *limit_text = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0)
        return lm_reply_error(c, 400, "'order' must be asc or desc", "order");
    int limit = DEFAULT_LIST_LIMIT;
    if (limit_text) {
        char *end = NULL;
        long v = strtol(limit_text, &end, 10);
        if (!limit_text[0] || *end || v < 1 || v > MAX_LIST_LIMIT)
            return lm_reply_error(c, 400, "'limit' must be a whole number from 1 to 100", "limit");
        limit = (int)v;
    }
    bool ascending = order && strcmp(order, "asc") == 0;
    cJSON *input = cJSON_Parse(input_text);
    if (!cJSON_IsArray(input)) {
        cJSON_Delete(input);
        return lm_reply_error(c, 500, "the stored input is damaged (not the JSON loom wrote)", NULL);
    }
    int n = cJSON_GetArraySize(input), start = 0;
    if (after) {
        int at = -1;
        for (int k = 0; k < n && at < 0; k++) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(input, ascending ? k : n - 1 - k), "id");
            if (cJSON_IsString(id) && strcmp(id->valuestring, after) == 0) at = k;
        }
        if (at < 0) {
            cJSON_Delete(input);
            char show[96], message[200];
            shown(after, show, sizeof show);
            snprintf(message, sizeof message, "'after': no item '%s' in this response's input", show);
            return lm_reply_error(c, 400, message, "after");
        }
        start = at + 1;
    }
    cJSON *list = cJSON_CreateObject(), *data = list ? cJSON_AddArrayToObject(list, "data") : NULL;
    bool ok = data && cJSON_AddStringToObject(list, "object", "list");
    const cJSON *first = NULL, *last = NULL;
    int k = start;
    for (; ok && k < n && k - start < limit; k++) {
        cJSON *item = cJSON_GetArrayItem(input, ascending ? k : n - 1 - k);
        cJSON *dup = cJSON_Duplicate(item, true);
        ok = dup != NULL;
        if (ok) cJSON_AddItemToArray(data, dup);
        if (!first) first = item;
        last = item;
    }
    const cJSON *first_id = cJSON_GetObjectItemCaseSensitive(first, "id");
    const cJSON *last_id = cJSON_GetObjectItemCaseSensitive(last, "id");
    ok = ok && cJSON_AddItemToObject(list, "first_id", cJSON_IsString(first_id) ? cJSON_CreateString(first_id->valuestring)
                                                                                 : cJSON_CreateNull());
    ok = ok && cJSON_AddItemToObject(list, "last_id", cJSON_IsString(last_id) ? cJSON_CreateString(last_id->valuestring)
                                                                               : cJSON_CreateNull());
    ok = ok && cJSON_AddBoolToObject(list, "has_more", k < n);
    enum MHD_Result ret = ok ? lm_reply_json(c, 200, list)
                             : lm_reply_error(c, 500, "out of memory listing the input items", NULL);
    cJSON_Delete(list);
    cJSON_Delete(input);
    return ret;
}

enum MHD_Result lm_handle_stored_response(lm_server *s, struct MHD_Connection *c, const char *method, const char *url) {
    const char *rest = url + strlen(ROUTE_PREFIX);
    const char *slash = strchr(rest, '/');
    size_t id_len = slash ? (size_t)(slash - rest) : strlen(rest);
    const char *suffix = slash ? slash + 1 : "";
    bool items = strcmp(suffix, "input_items") == 0;
    if ((suffix[0] && !items) || id_len == 0) {
        char message[300];
        snprintf(message, sizeof message, "no route %.8s %.200s", method, url);
        return lm_reply_error(c, 404, message, NULL);
    }
    bool deleting = strcmp(method, "DELETE") == 0;
    if (items && deleting) return lm_reply_error(c, 405, "method DELETE not allowed on input_items (allowed: GET, HEAD)", NULL);
    char id[LM_RESPONSES_STORE_MAX_ID + 1];
    if (id_len > LM_RESPONSES_STORE_MAX_ID) return not_kept(c, rest);
    memcpy(id, rest, id_len);
    id[id_len] = 0;
    if (!s->responses)
        return lm_reply_error(c, 404, "this server keeps no responses (--responses-store-max 0)", "response_id");
    lm_error err = {0};
    bool found = false;
    if (deleting) {
        if (lm_responses_store_delete(s->responses, id, &found, &err) != LM_OK) return store_failed(c, &err);
        if (!found) return not_kept(c, id);
        cJSON *r = cJSON_CreateObject();
        bool ok = r && cJSON_AddStringToObject(r, "id", id) && cJSON_AddStringToObject(r, "object", "response") &&
                  cJSON_AddBoolToObject(r, "deleted", true);
        enum MHD_Result ret = ok ? lm_reply_json(c, 200, r) : lm_reply_error(c, 500, "out of memory", NULL);
        cJSON_Delete(r);
        return ret;
    }
    char *response = NULL, *input = NULL;
    if (lm_responses_store_get(s->responses, id, (long long)time(NULL), &found, &response, &input, &err) != LM_OK)
        return store_failed(c, &err);
    if (!found) return not_kept(c, id);
    enum MHD_Result ret = items ? list_input_items(c, input)
                                : lm_reply_text(c, 200, "application/json", response, strlen(response));
    free(response);
    free(input);
    return ret;
}
