/* Generated text may hold NUL bytes (a model can emit token 0's byte), but
 * cJSON's strings end at the first NUL.  So text entering the server's
 * buffers has each NUL written as the two bytes C0 80 (modified UTF-8's
 * NUL: never valid UTF-8, so never text of its own, and no parser of
 * loom's looks at it), and every JSON loom sends is printed with
 * lm_json_print, which writes each C0 80 as the escape \u0000: the client
 * gets the NUL, in every API and in streams alike. */
#ifndef LOOM_SERVER_JSON_TEXT_H
#define LOOM_SERVER_JSON_TEXT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "server/sbuf.h"

/* Appends text to b with every NUL byte as C0 80. */
bool lm_text_append_marked(lm_sbuf *b, const char *text, size_t len);

/* cJSON_PrintUnformatted, then each C0 80 as \u0000 (free with
 * cJSON_free); NULL when out of memory. */
char *lm_json_print(const cJSON *json);

#endif
