/* Helpers for finding fixed markers in streamed text. */
#ifndef LOOM_SERVER_MARKER_H
#define LOOM_SERVER_MARKER_H

#include <stddef.h>

/* Offset of the first occurrence of marker in text[0..len), or len if none. */
size_t lm_marker_find(const char *text, size_t len, const char *marker);
/* Length of the longest proper suffix of text[0..len) that is a prefix of
 * marker: bytes to hold back because the marker may continue in the next piece. */
size_t lm_marker_partial(const char *text, size_t len, const char *marker);

#endif
