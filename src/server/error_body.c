#include "server/error_body.h"

#include <cjson/cJSON.h>
#include <stddef.h>

/* One row per status loom answers with; a status not listed takes the
 * row of its class (4xx: the first, 5xx: the last). */
typedef struct {
    unsigned status;
    const char *openai, *anthropic;
} error_kind;

static const error_kind kinds[] = {
    {400, "invalid_request_error", "invalid_request_error"},
    {401, "authentication_error", "authentication_error"},
    {403, "permission_error", "permission_error"},
    {404, "not_found_error", "not_found_error"},
    {405, "invalid_request_error", "invalid_request_error"},
    {408, "invalid_request_error", "timeout_error"},
    {413, "invalid_request_error", "request_too_large"},
    {414, "invalid_request_error", "invalid_request_error"},
    {429, "rate_limit_error", "rate_limit_error"},
    {431, "invalid_request_error", "invalid_request_error"},
    {503, "server_error", "overloaded_error"},
    {505, "invalid_request_error", "invalid_request_error"},
    {529, "server_error", "overloaded_error"},
    {500, "server_error", "api_error"},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])

static const error_kind *kind_of(unsigned status) {
    for (size_t i = 0; i < N_KINDS; i++)
        if (kinds[i].status == status) return &kinds[i];
    return status >= 400 && status < 500 ? &kinds[0] : &kinds[N_KINDS - 1];
}

const char *lm_openai_error_type(unsigned status) { return kind_of(status)->openai; }
const char *lm_anthropic_error_type(unsigned status) { return kind_of(status)->anthropic; }

static char *print(cJSON *root) {
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

char *lm_error_json_body(unsigned status, const char *message, const char *param) {
    cJSON *root = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message ? message : "");
    cJSON_AddStringToObject(e, "type", lm_openai_error_type(status));
    if (param && param[0]) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    return e ? print(root) : (cJSON_Delete(root), NULL);
}

char *lm_anthropic_error_body(unsigned status, const char *message, const char *request_id) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "type", "error");
    cJSON *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "type", lm_anthropic_error_type(status));
    cJSON_AddStringToObject(e, "message", message ? message : "");
    if (request_id && request_id[0]) cJSON_AddStringToObject(root, "request_id", request_id);
    return e ? print(root) : (cJSON_Delete(root), NULL);
}
