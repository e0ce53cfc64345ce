/* The names a request may give its model (see server.h: served_model_name
 * and model_aliases). */
#include <stdio.h>
#include <string.h>

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
