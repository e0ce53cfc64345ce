/* Typed reads of the fields of a JSON object (config.json and its kin), for
 * any model family's config parser.  Knows JSON, not architectures.
 *
 * Conventions shared by every reader:
 *  - a field that is absent or JSON null means "use the default": the reader
 *    returns LM_OK and leaves *out untouched, so callers set defaults first;
 *  - a present field of the wrong type, or out of range, fails with
 *    LM_ERR_FORMAT and a message naming the source, the path and the field:
 *    "config.json: text_config.hidden_size is 0; it must be between 1 and 65536";
 *  - a reader over an absent object (see lm_json_fields_sub) reads every field
 *    as absent.
 * The readers borrow the cJSON tree; it must outlive them. */
#ifndef LOOM_IO_JSON_FIELDS_H
#define LOOM_IO_JSON_FIELDS_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "base/error.h"

#define LM_JSON_PATH_MAX 128

typedef struct {
    const char *source;          /* names the text in errors, e.g. the file path */
    char path[LM_JSON_PATH_MAX]; /* prefix of field names in errors: "" or "text_config." */
    const cJSON *object;         /* NULL: an absent object */
    lm_error *err;               /* receives every failure of these readers */
} lm_json_fields;

/* A reader of the top-level object (object may be NULL). */
lm_json_fields lm_json_fields_of(const char *source, const cJSON *object, lm_error *err);

/* A reader of the object field `key` of f, whose errors say "<path><key>.<field>".
 * Absent or null: a reader of an absent object.  Not an object: LM_ERR_FORMAT. */
lm_status lm_json_fields_sub(const lm_json_fields *f, const char *key, lm_json_fields *sub);

/* The field's value, or NULL when it is absent or null. */
const cJSON *lm_json_field(const lm_json_fields *f, const char *key);

/* Whether the value is a JSON number holding an exact int. */
bool lm_json_int_value(const cJSON *v, int *out);

/* Fails with `code` and the message "<source>: <path><key> <fmt...>", e.g.
 * lm_json_field_error(f, LM_ERR_UNSUPPORTED, "hidden_act", "is '%s'; ...", act). */
lm_status lm_json_field_error(const lm_json_fields *f, lm_status code, const char *key,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* LM_ERR_FORMAT: "<source>: <path><key> must be <what>". */
lm_status lm_json_type_error(const lm_json_fields *f, const char *key, const char *what);

/* An integer in [min, max]. */
lm_status lm_json_read_int(const lm_json_fields *f, const char *key, int min, int max, int *out);

/* A number in (above, max]: the lower bound is exclusive, the upper inclusive. */
lm_status lm_json_read_double(const lm_json_fields *f, const char *key, double above,
                              double max, double *out);
lm_status lm_json_read_float(const lm_json_fields *f, const char *key, double above, double max,
                             float *out);

/* true or false (not 0/1). */
lm_status lm_json_read_bool(const lm_json_fields *f, const char *key, bool *out);

/* A string of at most size-1 bytes, copied NUL-terminated into out[size]. */
lm_status lm_json_read_string(const lm_json_fields *f, const char *key, char *out, size_t size);

/* A list of between min_n and max_n integers, each in [min, max], stored in
 * out[0..*n) (out holds max_n).  Absent or null: *n and out untouched.  When
 * allow_scalar, a bare integer reads as a list of one (as HF allows for
 * eos_token_id). */
lm_status lm_json_read_int_array(const lm_json_fields *f, const char *key, int min, int max,
                                 size_t min_n, size_t max_n, bool allow_scalar, int *out,
                                 size_t *n);

/* A list of at most max_n values, for the caller to walk and check (e.g. with
 * lm_json_int_value or cJSON_IsString): *out is the array and *n its length;
 * absent or null: *out = NULL and *n = 0.  `entries` names the values in
 * errors ("strings": "... must be a list of strings"). */
lm_status lm_json_read_array(const lm_json_fields *f, const char *key, size_t max_n,
                             const char *entries, const cJSON **out, size_t *n);

#endif
