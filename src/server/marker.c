#include "server/marker.h"

#include <string.h>

size_t lm_marker_find(const char *text, size_t len, const char *marker) {
    size_t m = strlen(marker);
    if (m == 0 || m > len) return len;
    for (size_t i = 0; i + m <= len; i++)
        if (text[i] == marker[0] && memcmp(text + i, marker, m) == 0) return i;
    return len;
}

size_t lm_marker_partial(const char *text, size_t len, const char *marker) {
    size_t m = strlen(marker);
    size_t k = m - 1 < len ? m - 1 : len;
    for (; k > 0; k--)
        if (memcmp(text + len - k, marker, k) == 0) return k;
    return 0;
}
