#include "server/generation_defaults.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json_file.h"

#define MAX_GENERATION_CONFIG_BYTES ((size_t)1 << 20)

/* One field: its JSON key, the request field that overrides it, bounds. */
typedef struct {
    const char *key;
    double min, max;
} field_spec;

static const field_spec fields[] = {
    {"temperature", 0, 100}, {"top_p", 1e-9, 1}, {"top_k", -1, 1 << 30}, {"min_p", 0, 1},
    {"repetition_penalty", 1e-6, 100},
};

static lm_status read_field(const cJSON *doc, const char *path, int i, bool *has, double *value, lm_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, fields[i].key);
    if (!v || cJSON_IsNull(v)) return LM_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= fields[i].min && v->valuedouble <= fields[i].max))
        return lm_fail(err, LM_ERR_FORMAT, "%s: %s must be a number in [%g, %g]", path, fields[i].key, fields[i].min,
                       fields[i].max);
    *has = true;
    *value = v->valuedouble;
    return LM_OK;
}

lm_status lm_generation_defaults_load(const char *dir, lm_generation_defaults *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    char path[4200];
    if ((size_t)snprintf(path, sizeof path, "%s/generation_config.json", dir) >= sizeof path)
        return lm_fail(err, LM_ERR_INVALID, "the folder path is too long");
    struct stat st;
    if (stat(path, &st) != 0) return LM_OK;
    cJSON *doc = NULL;
    lm_status status = lm_json_read_file(path, MAX_GENERATION_CONFIG_BYTES, &doc, err);
    if (status != LM_OK) return status;
    double v[5] = {0};
    bool *has[5] = {&out->has_temperature, &out->has_top_p, &out->has_top_k, &out->has_min_p,
                    &out->has_repetition_penalty};
    for (int i = 0; i < 5 && status == LM_OK; i++) status = read_field(doc, path, i, has[i], &v[i], err);
    cJSON_Delete(doc);
    if (status != LM_OK) return status;
    out->temperature = (float)v[0];
    out->top_p = (float)v[1];
    out->top_k = (int)v[2];
    out->min_p = (float)v[3];
    out->repetition_penalty = (float)v[4];
    return LM_OK;
}

bool lm_generation_defaults_any(const lm_generation_defaults *d) {
    return d->has_temperature || d->has_top_p || d->has_top_k || d->has_min_p || d->has_repetition_penalty;
}

static bool absent(const cJSON *request, const char *key) {
    const cJSON *v = request ? cJSON_GetObjectItemCaseSensitive(request, key) : NULL;
    return !v || cJSON_IsNull(v);
}

void lm_generation_defaults_apply(const lm_generation_defaults *d, const cJSON *request, loom_sampling *s) {
    if (!d) return;
    if (d->has_temperature && absent(request, "temperature")) s->temperature = d->temperature;
    if (d->has_top_p && absent(request, "top_p")) s->top_p = d->top_p;
    if (d->has_top_k && absent(request, "top_k")) s->top_k = d->top_k;
    if (d->has_min_p && absent(request, "min_p")) s->min_p = d->min_p;
    if (d->has_repetition_penalty && absent(request, "repetition_penalty"))
        s->repetition_penalty = d->repetition_penalty;
}

void lm_generation_defaults_describe(const lm_generation_defaults *d, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
#define PUT(cond, fmt, value)                                                                         \
    if ((cond) && used < size) {                                                                      \
        int n_ = snprintf(out + used, size - used, "%s" fmt, used ? ", " : "", value);                \
        if (n_ > 0) used += (size_t)n_;                                                               \
    }
    PUT(d->has_temperature, "temperature %g", d->temperature);
    PUT(d->has_top_p, "top_p %g", d->top_p);
    PUT(d->has_top_k, "top_k %d", d->top_k);
    PUT(d->has_min_p, "min_p %g", d->min_p);
    PUT(d->has_repetition_penalty, "repetition_penalty %g", d->repetition_penalty);
#undef PUT
    if (!used) snprintf(out, size, "none");
}
