/* NUL bytes of generated text through cJSON (see json_text.h). */
#include "server/json_text.h"

#include <string.h>

static const char nul_mark[] = "\xC0\x80"; /* 2 bytes and the terminator */

bool lm_text_append_marked(lm_sbuf *b, const char *text, size_t len) {
    for (const char *end = text + len; text < end;) {
        const char *nul = memchr(text, '\0', (size_t)(end - text));
        size_t run = nul ? (size_t)(nul - text) : (size_t)(end - text);
        if (run && !lm_sbuf_append(b, text, run)) return false;
        if (!nul) break;
        if (!lm_sbuf_append(b, nul_mark, 2)) return false;
        text = nul + 1;
    }
    return true;
}

char *lm_json_print(const cJSON *json) {
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    if (!text || !strstr(text, nul_mark)) return text;
    /* Inside a printed string (the only place the mark can be) each
     * 2-byte mark becomes the 6-byte escape: at most 3x the length. */
    size_t n = strlen(text), marks = 0;
    for (const char *p = text; (p = strstr(p, nul_mark)); p += 2) marks++;
    char *out = cJSON_malloc(n + marks * 4 + 1);
    if (!out) {
        cJSON_free(text);
        return NULL;
    }
    char *w = out;
    for (const char *p = text; *p;) {
        if (p[0] == nul_mark[0] && p[1] == nul_mark[1]) {
            memcpy(w, "\\u0000", 6);
            w += 6;
            p += 2;
        } else {
            *w++ = *p++;
        }
    }
    *w = '\0';
    cJSON_free(text);
    return out;
}
