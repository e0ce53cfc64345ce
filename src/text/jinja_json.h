/* Template values from JSON: an exact parser (keeps 1 and 1.0 apart, as
 * Python's json.loads does) and a converter from cJSON trees. */
#ifndef LOOM_TEXT_JINJA_JSON_H
#define LOOM_TEXT_JINJA_JSON_H

#include <cjson/cJSON.h>

#include "text/jinja_value.h"

#define JJSON_DEPTH_MAX 128

/* Parses one JSON document (Python json.loads rules, NaN/Infinity accepted). */
bool jjson_parse(jctx *c, const char *text, size_t len, jv *out);

/* Converts a cJSON tree.  cJSON keeps no int/float distinction, so an integral
 * number becomes an int; a cJSON_Raw item is parsed exactly with jjson_parse
 * (use cJSON_CreateRaw("1.0") to pass a float that prints as 1.0). */
bool jv_from_cjson(jctx *c, const cJSON *j, jv *out);

#endif
