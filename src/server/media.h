/* Images in requests: the bytes behind an image part's URL.  A data: URI
 * (base64, decoded strictly) or, when the server was given a media folder
 * (--allowed-local-media-path), a local file inside it; remote URLs are
 * refused, the server makes no outbound connections.  The bytes are the
 * engine's to decode (PNG, JPEG, WebP); nothing here looks at pixels. */
#ifndef LOOM_SERVER_MEDIA_H
#define LOOM_SERVER_MEDIA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Decodes standard base64 (RFC 4648 §4: A-Z a-z 0-9 + /, '=' padding to a
 * multiple of 4, the unused bits of the last group zero); anything else
 * (white space, URL-safe letters, missing or misplaced padding) is
 * LM_ERR_INVALID.  Output larger than max_out is refused before any is
 * allocated.  *out is malloc'd (free it). */
lm_status lm_base64_decode(const char *in, size_t len, size_t max_out, uint8_t **out, size_t *out_len,
                           lm_error *err);

typedef struct {
    const char *local_dir; /* realpath of the allowed media folder, or NULL: no local files */
    size_t max_bytes;      /* one image's file */
} lm_media_options;

/* The bytes of the image at url (a data: URI, file:// URI or path).
 * LM_ERR_INVALID with a sentence (no field name: the caller adds it) for a
 * URL the server will not read. */
lm_status lm_media_load(const lm_media_options *o, const char *url, uint8_t **data, size_t *size,
                        lm_error *err);

/* The realpath of a folder for lm_media_options.local_dir (malloc'd);
 * LM_ERR_INVALID when it is not a directory. */
lm_status lm_media_dir(const char *path, char **out, lm_error *err);

#endif
