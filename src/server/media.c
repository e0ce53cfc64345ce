#include "server/media.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ base64 */

static int b64_value(unsigned char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

lm_status lm_base64_decode(const char *in, size_t len, size_t max_out, uint8_t **out, size_t *out_len,
                           lm_error *err) {
    *out = NULL;
    *out_len = 0;
    if (len % 4 != 0)
        return lm_fail(err, LM_ERR_INVALID,
                       "is not valid base64: its length (%zu) is not a multiple of 4 (missing '=' padding?)", len);
    size_t pad = 0;
    if (len >= 1 && in[len - 1] == '=') pad++;
    if (len >= 2 && in[len - 2] == '=') pad++;
    size_t n = len / 4 * 3 - pad;
    if (n > max_out) return lm_fail(err, LM_ERR_INVALID, "is %zu bytes; the limit is %zu", n, max_out);
    for (size_t i = 0; i < len - pad; i++) {
        if (b64_value((unsigned char)in[i]) >= 0) continue;
        unsigned char ch = (unsigned char)in[i];
        if (ch == '=')
            return lm_fail(err, LM_ERR_INVALID, "is not valid base64: '=' padding at offset %zu, before the end", i);
        if (ch > 0x20 && ch < 0x7f)
            return lm_fail(err, LM_ERR_INVALID, "is not valid base64: '%c' at offset %zu", ch, i);
        return lm_fail(err, LM_ERR_INVALID, "is not valid base64: byte 0x%02x at offset %zu", ch, i);
    }
    /* The bits after the last byte must be zero (one encoding per value). */
    if (pad == 2 && (b64_value((unsigned char)in[len - 3]) & 0x0f))
        return lm_fail(err, LM_ERR_INVALID, "is not valid base64: nonzero bits after its last byte");
    if (pad == 1 && (b64_value((unsigned char)in[len - 2]) & 0x03))
        return lm_fail(err, LM_ERR_INVALID, "is not valid base64: nonzero bits after its last byte");
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return lm_fail(err, LM_ERR_NOMEM, "out of memory decoding %zu bytes of base64", n);
    size_t k = 0;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        for (int j = 0; j < 4; j++) {
            int d = in[i + j] == '=' ? 0 : b64_value((unsigned char)in[i + j]);
            v = v << 6 | (uint32_t)d;
        }
        if (k < n) buf[k++] = (uint8_t)(v >> 16);
        if (k < n) buf[k++] = (uint8_t)(v >> 8);
        if (k < n) buf[k++] = (uint8_t)v;
    }
    *out = buf;
    *out_len = n;
    return LM_OK;
}

/* ------------------------------------------------------------ URLs */

/* Up to max bytes of s for a message: printable ASCII, '?' for the rest. */
static void shown(const char *s, size_t n, size_t max, char *out, size_t size) {
    size_t k = 0;
    for (size_t i = 0; i < n && i < max && k + 4 < size; i++)
        out[k++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    if (n > max && k + 4 < size) out[k++] = '.', out[k++] = '.', out[k++] = '.';
    out[k] = 0;
}

static bool has_prefix(const char *s, const char *prefix) { return strncasecmp(s, prefix, strlen(prefix)) == 0; }

/* The length of a URL's scheme ("data", "https"), 0 when it has none (a path). */
static size_t scheme_length(const char *url) {
    size_t i = 0;
    if (!((url[0] >= 'a' && url[0] <= 'z') || (url[0] >= 'A' && url[0] <= 'Z'))) return 0;
    for (i = 1; url[i]; i++) {
        char ch = url[i];
        if (ch == ':') return i;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '+' ||
              ch == '-' || ch == '.'))
            return 0;
    }
    return 0;
}

static const char *const image_types[] = {"image/png", "image/jpeg", "image/jpg", "image/webp"};

/* data:<type>[;params];base64,<data> */
static lm_status load_data_uri(const lm_media_options *o, const char *url, uint8_t **data, size_t *size,
                               lm_error *err) {
    const char *header = url + 5;
    const char *comma = strchr(header, ',');
    if (!comma) return lm_fail(err, LM_ERR_INVALID, "is a data: URI without the ',' before its data");
    size_t header_len = (size_t)(comma - header);
    const char *semi = memchr(header, ';', header_len);
    size_t type_len = semi ? (size_t)(semi - header) : header_len;
    char type[64];
    shown(header, type_len, 40, type, sizeof type);
    bool base64 = header_len >= 7 && strncasecmp(comma - 7, ";base64", 7) == 0;
    if (!base64)
        return lm_fail(err, LM_ERR_INVALID,
                       "is a data: URI that is not base64: send data:image/png;base64,... (or jpeg, webp)");
    if (type_len == 0)
        return lm_fail(err, LM_ERR_INVALID, "is a data: URI without a media type: send data:image/png;base64,...");
    bool known = false;
    for (size_t i = 0; !known && i < sizeof image_types / sizeof image_types[0]; i++)
        known = type_len == strlen(image_types[i]) && strncasecmp(header, image_types[i], type_len) == 0;
    if (!known && has_prefix(header, "image/"))
        return lm_fail(err, LM_ERR_INVALID, "is a data: URI of type '%s': loom reads PNG, JPEG and WebP images",
                       type);
    if (!known) return lm_fail(err, LM_ERR_INVALID, "is a data: URI of type '%s', not an image", type);
    const char *payload = comma + 1;
    size_t n = strlen(payload);
    if (n == 0) return lm_fail(err, LM_ERR_INVALID, "is a data: URI without data");
    lm_error why = {0};
    lm_status st = lm_base64_decode(payload, n, o->max_bytes, data, size, &why);
    if (st != LM_OK) return lm_fail(err, st, "%s", why.message);
    return LM_OK;
}

static int hex_value(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* file:// URIs are percent-decoded (as RFC 8089 paths); a %00 is refused. */
static lm_status file_uri_path(const char *url, char *path, size_t size, lm_error *err) {
    const char *p = url + 7;
    if (has_prefix(p, "localhost/")) p += 9;
    if (p[0] != '/')
        return lm_fail(err, LM_ERR_INVALID, "is a file:// URI that names a host: use file:///PATH");
    size_t k = 0;
    for (; *p; p++) {
        char ch = *p;
        if (ch == '%') {
            int hi = hex_value(p[1]), lo = hi >= 0 ? hex_value(p[2]) : -1;
            if (lo < 0 || (hi == 0 && lo == 0))
                return lm_fail(err, LM_ERR_INVALID, "is a file:// URI with a bad %%-escape (or %%00)");
            ch = (char)(hi << 4 | lo);
            p += 2;
        }
        if (k + 1 >= size) return lm_fail(err, LM_ERR_INVALID, "is a file path longer than %zu bytes", size - 1);
        path[k++] = ch;
    }
    path[k] = 0;
    return LM_OK;
}

static bool inside(const char *dir, const char *path) {
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/') return path[0] == '/';
    return strncmp(path, dir, n) == 0 && path[n] == '/';
}

static lm_status load_local(const lm_media_options *o, const char *url, bool uri, uint8_t **data, size_t *size,
                            lm_error *err) {
    if (!o->local_dir)
        return lm_fail(err, LM_ERR_INVALID,
                       "is a local file, and this server reads none (start it with --allowed-local-media-path "
                       "DIR to allow files under DIR); send the image as a data: URI");
    char given[PATH_MAX], joined[PATH_MAX], real[PATH_MAX], show[160];
    if (uri) {
        lm_status st = file_uri_path(url, given, sizeof given, err);
        if (st != LM_OK) return st;
    } else if ((size_t)snprintf(given, sizeof given, "%s", url) >= sizeof given) {
        return lm_fail(err, LM_ERR_INVALID, "is a file path longer than %d bytes", PATH_MAX - 1);
    }
    shown(given, strlen(given), 120, show, sizeof show);
    /* A relative path is taken inside the media folder. */
    if (given[0] != '/') {
        if ((size_t)snprintf(joined, sizeof joined, "%s/%s", o->local_dir, given) >= sizeof joined)
            return lm_fail(err, LM_ERR_INVALID, "is a file path longer than %d bytes", PATH_MAX - 1);
    } else {
        memcpy(joined, given, strlen(given) + 1);
    }
    /* Symlinks and .. are resolved first, then the file must lie inside
     * the folder; once open, the descriptor's own path is checked again,
     * so a link swapped in between is caught too. */
    if (!realpath(joined, real) || !inside(o->local_dir, real))
        return lm_fail(err, LM_ERR_INVALID,
                       "names '%s', which is not a file inside the folder given by --allowed-local-media-path", show);
    int fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return lm_fail(err, LM_ERR_INVALID, "names '%s', which cannot be opened: %s", show, strerror(errno));
    char link[64], opened[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t ln = readlink(link, opened, sizeof opened - 1);
    if (ln > 0) {
        opened[ln] = 0;
        if (!inside(o->local_dir, opened)) {
            close(fd);
            return lm_fail(err, LM_ERR_INVALID,
                           "names '%s', which is not a file inside the folder given by --allowed-local-media-path", show);
        }
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return lm_fail(err, LM_ERR_INVALID, "names '%s', which is not a regular file", show);
    }
    if ((uint64_t)sb.st_size > o->max_bytes) {
        close(fd);
        return lm_fail(err, LM_ERR_INVALID, "names '%s', a file of %lld bytes; the limit is %zu", show, (long long)sb.st_size,
                       o->max_bytes);
    }
    if (sb.st_size == 0) {
        close(fd);
        return lm_fail(err, LM_ERR_INVALID, "names '%s', an empty file", show);
    }
    size_t cap = (size_t)sb.st_size, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory reading %zu bytes of '%s'", cap, show);
    }
    while (n < cap) {
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += (size_t)got;
    }
    int read_errno = errno;
    close(fd);
    if (n != cap) {
        free(buf);
        return lm_fail(err, LM_ERR_INVALID, "names '%s', which could not be read whole: %s", show,
                       n < cap && read_errno ? strerror(read_errno) : "it changed while being read");
    }
    *data = buf;
    *size = n;
    return LM_OK;
}

lm_status lm_media_load(const lm_media_options *o, const char *url, uint8_t **data, size_t *size,
                        lm_error *err) {
    *data = NULL;
    *size = 0;
    if (!url[0]) return lm_fail(err, LM_ERR_INVALID, "is empty");
    size_t scheme = scheme_length(url);
    if (scheme == 4 && has_prefix(url, "data:")) return load_data_uri(o, url, data, size, err);
    if ((scheme == 4 && has_prefix(url, "http:")) || (scheme == 5 && has_prefix(url, "https:")))
        return lm_fail(err, LM_ERR_INVALID,
                       "is a remote URL, and the server makes no outbound connections: send the image as a "
                       "data: URI (data:image/png;base64,...)");
    if (scheme == 4 && has_prefix(url, "file://")) return load_local(o, url, true, data, size, err);
    if (scheme > 0) {
        char name[48];
        shown(url, scheme, 32, name, sizeof name);
        return lm_fail(err, LM_ERR_INVALID, "is a URL of scheme '%s', which loom does not read: send the image "
                       "as a data: URI", name);
    }
    return load_local(o, url, false, data, size, err);
}

lm_status lm_media_dir(const char *path, char **out, lm_error *err) {
    char real[PATH_MAX];
    struct stat sb;
    if (!realpath(path, real) || stat(real, &sb) != 0)
        return lm_fail(err, LM_ERR_INVALID, "--allowed-local-media-path %s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return lm_fail(err, LM_ERR_INVALID, "--allowed-local-media-path %s is not a folder", path);
    *out = strdup(real);
    return *out ? LM_OK : lm_fail(err, LM_ERR_NOMEM, "out of memory");
}
