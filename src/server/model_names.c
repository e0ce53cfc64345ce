/* The names a request may give its model (see server.h: served_model_name
 * and model_aliases), and the models routes' objects in each API's shape. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/server_internal.h"

bool lm_server_serves_model(const lm_server *s, const char *name) {
    if (!name) return true; /* a request without a model takes the one served */
    if (strcmp(name, s->options.served_model_name) == 0) return true;
    for (int i = 0; i < s->options.n_model_aliases; i++)
        if (strcmp(name, s->options.model_aliases[i]) == 0) return true;
    return false;
}

void lm_server_unknown_model_message(const lm_server *s, const char *name, char *out, size_t size) {
    int n = snprintf(out, size, "The model `%.200s` does not exist; this server serves `%.200s`", name,
                     s->options.served_model_name);
    for (int i = 0; i < s->options.n_model_aliases && n > 0 && (size_t)n < size; i++)
        n += snprintf(out + n, size - (size_t)n, ", `%.200s`", s->options.model_aliases[i]);
    if (n > 0 && (size_t)n < size) snprintf(out + n, size - (size_t)n, ".");
}

cJSON *lm_model_object(const lm_server *s, const char *id, bool anthropic) {
    cJSON *m = cJSON_CreateObject();
    if (anthropic) {
        /* Anthropic's ModelInfo; created_at is its release date, which loom
         * does not know: the epoch, as Anthropic's docs allow. */
        cJSON_AddStringToObject(m, "type", "model");
        cJSON_AddStringToObject(m, "id", id);
        cJSON_AddStringToObject(m, "display_name", id);
        cJSON_AddStringToObject(m, "created_at", "1970-01-01T00:00:00Z");
        cJSON_AddNumberToObject(m, "max_input_tokens", s->options.max_model_len);
        cJSON_AddNumberToObject(m, "max_tokens", s->options.max_model_len);
    } else {
        cJSON_AddStringToObject(m, "id", id);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", (double)time(NULL));
        cJSON_AddStringToObject(m, "owned_by", "loom");
        cJSON_AddStringToObject(m, "root", s->options.served_model_name);
        cJSON_AddNullToObject(m, "parent");
        cJSON_AddNumberToObject(m, "max_model_len", s->options.max_model_len);
    }
    if (m && !cJSON_GetObjectItemCaseSensitive(m, anthropic ? "max_tokens" : "max_model_len")) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

cJSON *lm_model_list(const lm_server *s, bool anthropic) {
    cJSON *root = cJSON_CreateObject();
    cJSON *data = root && (anthropic || cJSON_AddStringToObject(root, "object", "list"))
                      ? cJSON_AddArrayToObject(root, "data")
                      : NULL;
    bool ok = data != NULL;
    int n = 1 + (s->options.n_listed_aliases < s->options.n_model_aliases ? s->options.n_listed_aliases
                                                                          : s->options.n_model_aliases);
    for (int i = 0; ok && i < n; i++) {
        cJSON *m = lm_model_object(s, i == 0 ? s->options.served_model_name : s->options.model_aliases[i - 1], anthropic);
        ok = m && cJSON_AddItemToArray(data, m);
    }
    /* Anthropic's list is a page: every name fits in the first. */
    if (ok && anthropic)
        ok = cJSON_AddFalseToObject(root, "has_more") &&
             cJSON_AddStringToObject(root, "first_id", s->options.served_model_name) &&
             cJSON_AddStringToObject(root, "last_id", n > 1 ? s->options.model_aliases[n - 2] : s->options.served_model_name);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
