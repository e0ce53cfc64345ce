/* Reading small JSON files (config.json, index files) into a cJSON tree, with
 * a size bound and an error that names the file and the line of a syntax
 * error. */
#ifndef LOOM_IO_JSON_FILE_H
#define LOOM_IO_JSON_FILE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "base/error.h"

/* Parses `len` bytes of JSON text (need not be NUL-terminated).  Only
 * whitespace may follow the value.  `source_name` names the text in errors.
 * The caller frees *out with cJSON_Delete. */
lm_status lm_json_parse(const char *text, size_t len, const char *source_name, cJSON **out,
                        lm_error *err);

/* Reads the file at `path` (LM_ERR_IO if missing, LM_ERR_FORMAT if larger
 * than max_bytes or not JSON) and parses it. */
lm_status lm_json_read_file(const char *path, size_t max_bytes, cJSON **out, lm_error *err);

/* Reads a whole file of at most max_bytes into a NUL-terminated malloc'd
 * buffer (*len excludes the NUL). */
lm_status lm_read_small_file(const char *path, size_t max_bytes, char **data, size_t *len,
                             lm_error *err);

#endif
