#include "io/json_fields.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

lm_json_fields lm_json_fields_of(const char *source, const cJSON *object, lm_error *err) {
    lm_json_fields f = {.source = source, .object = object, .err = err};
    return f;
}

lm_status lm_json_fields_sub(const lm_json_fields *f, const char *key, lm_json_fields *sub) {
    const cJSON *v = lm_json_field(f, key);
    if (v && !cJSON_IsObject(v)) return lm_json_type_error(f, key, "an object");
    lm_json_fields s = lm_json_fields_of(f->source, v, f->err);
    int n = snprintf(s.path, sizeof s.path, "%s%s.", f->path, key);
    if (n < 0 || (size_t)n >= sizeof s.path)
        return lm_fail(f->err, LM_ERR_INTERNAL, "%s: field path %s%s. is too long", f->source,
                       f->path, key);
    *sub = s;
    return LM_OK;
}

const cJSON *lm_json_field(const lm_json_fields *f, const char *key) {
    const cJSON *v = f->object ? cJSON_GetObjectItemCaseSensitive(f->object, key) : NULL;
    return cJSON_IsNull(v) ? NULL : v;
}

bool lm_json_int_value(const cJSON *v, int *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= INT_MIN && d <= INT_MAX) || d != (double)(int)d) return false;
    *out = (int)d;
    return true;
}

lm_status lm_json_field_error(const lm_json_fields *f, lm_status code, const char *key,
                              const char *fmt, ...) {
    char detail[LM_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return lm_fail(f->err, code, "%s: %s%s %s", f->source, f->path, key, detail);
}

lm_status lm_json_type_error(const lm_json_fields *f, const char *key, const char *what) {
    return lm_json_field_error(f, LM_ERR_FORMAT, key, "must be %s", what);
}

lm_status lm_json_read_int(const lm_json_fields *f, const char *key, int min, int max, int *out) {
    const cJSON *v = lm_json_field(f, key);
    if (!v) return LM_OK;
    int value;
    if (!lm_json_int_value(v, &value)) return lm_json_type_error(f, key, "an integer");
    if (value < min || value > max)
        return lm_json_field_error(f, LM_ERR_FORMAT, key, "is %d; it must be between %d and %d",
                                   value, min, max);
    *out = value;
    return LM_OK;
}

lm_status lm_json_read_double(const lm_json_fields *f, const char *key, double above,
                              double max, double *out) {
    const cJSON *v = lm_json_field(f, key);
    if (!v) return LM_OK;
    if (!cJSON_IsNumber(v)) return lm_json_type_error(f, key, "a number");
    double d = v->valuedouble;
    if (!(d > above && d <= max))
        return lm_json_field_error(f, LM_ERR_FORMAT, key,
                                   "is %g; it must be above %g and at most %g", d, above, max);
    *out = d;
    return LM_OK;
}

lm_status lm_json_read_float(const lm_json_fields *f, const char *key, double above, double max,
                             float *out) {
    double d = (double)*out;
    lm_status s = lm_json_read_double(f, key, above, max, &d);
    if (s == LM_OK) *out = (float)d;
    return s;
}

lm_status lm_json_read_bool(const lm_json_fields *f, const char *key, bool *out) {
    const cJSON *v = lm_json_field(f, key);
    if (!v) return LM_OK;
    if (!cJSON_IsBool(v)) return lm_json_type_error(f, key, "true or false");
    *out = cJSON_IsTrue(v);
    return LM_OK;
}

lm_status lm_json_read_string(const lm_json_fields *f, const char *key, char *out, size_t size) {
    const cJSON *v = lm_json_field(f, key);
    if (!v) return LM_OK;
    size_t len = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
    if (!cJSON_IsString(v) || size == 0 || len >= size) {
        char what[64];
        snprintf(what, sizeof what, "a string of at most %zu characters", size ? size - 1 : 0);
        return lm_json_type_error(f, key, what);
    }
    memcpy(out, v->valuestring, len + 1);
    return LM_OK;
}

static lm_status int_array_error(const lm_json_fields *f, const char *key, int min, int max,
                                 size_t min_n, size_t max_n, bool allow_scalar) {
    char count[48], what[160];
    if (min_n == max_n)
        snprintf(count, sizeof count, "%zu", min_n);
    else if (min_n == 0)
        snprintf(count, sizeof count, "at most %zu", max_n);
    else
        snprintf(count, sizeof count, "%zu to %zu", min_n, max_n);
    snprintf(what, sizeof what, "%sa list of %s integers between %d and %d",
             allow_scalar ? "an integer or " : "", count, min, max);
    return lm_json_type_error(f, key, what);
}

lm_status lm_json_read_int_array(const lm_json_fields *f, const char *key, int min, int max,
                                 size_t min_n, size_t max_n, bool allow_scalar, int *out,
                                 size_t *n) {
    const cJSON *v = lm_json_field(f, key);
    if (!v) return LM_OK;
    int value;
    if (allow_scalar && cJSON_IsNumber(v) && min_n <= 1 && max_n >= 1) {
        if (!lm_json_int_value(v, &value) || value < min || value > max)
            return int_array_error(f, key, min, max, min_n, max_n, allow_scalar);
        out[0] = value;
        *n = 1;
        return LM_OK;
    }
    int size = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (size < 0 || (size_t)size < min_n || (size_t)size > max_n)
        return int_array_error(f, key, min, max, min_n, max_n, allow_scalar);
    for (const cJSON *e = v->child; e; e = e->next)
        if (!lm_json_int_value(e, &value) || value < min || value > max)
            return int_array_error(f, key, min, max, min_n, max_n, allow_scalar);
    size_t i = 0; /* all valid: now store, so a failure leaves out untouched */
    for (const cJSON *e = v->child; e; e = e->next, i++) lm_json_int_value(e, &out[i]);
    *n = i;
    return LM_OK;
}

lm_status lm_json_read_array(const lm_json_fields *f, const char *key, size_t max_n,
                             const char *entries, const cJSON **out, size_t *n) {
    *out = NULL;
    *n = 0;
    const cJSON *v = lm_json_field(f, key);
    if (!v) return LM_OK;
    int size = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (size < 0 || (size_t)size > max_n) {
        char what[128];
        if (size < 0)
            snprintf(what, sizeof what, "a list of %.64s", entries);
        else
            snprintf(what, sizeof what, "a list of at most %zu %.64s", max_n, entries);
        return lm_json_type_error(f, key, what);
    }
    *out = v;
    *n = (size_t)size;
    return LM_OK;
}
