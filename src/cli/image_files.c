#include "cli/image_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/image_decode.h"
#include "io/json_file.h"

lm_status lm_cli_images_add(lm_cli_images *im, const char *path, lm_error *err) {
    if (im->n >= LOOM_MAX_IMAGES)
        return lm_fail(err, LM_ERR_INVALID, "at most %d images", LOOM_MAX_IMAGES);
    char *data = NULL;
    size_t len = 0;
    lm_status st = lm_read_small_file(path, LM_IMAGE_DEFAULT_MAX_BYTES, &data, &len, err);
    if (st != LM_OK) return st;
    if (len == 0) {
        free(data);
        return lm_fail(err, LM_ERR_INVALID, "%s is empty", path);
    }
    im->images[im->n++] = (loom_image){data, len};
    return LM_OK;
}

void lm_cli_images_clear(lm_cli_images *im) {
    for (int i = 0; i < im->n; i++) free((void *)im->images[i].data);
    memset(im, 0, sizeof *im);
}

char *lm_cli_text_with_images(const char *text, const char *marker, int n_images) {
    int present = 0;
    size_t mlen = strlen(marker);
    for (const char *p = text; mlen && (p = strstr(p, marker)); p += mlen) present++;
    int add = present == n_images ? 0 : n_images;
    size_t n = strlen(text) + (size_t)add * mlen + 1;
    char *out = malloc(n);
    if (!out) return NULL;
    out[0] = '\0';
    for (int i = 0; i < add; i++) strcat(out, marker);
    strcat(out, text);
    return out;
}

bool lm_cli_parse_image_path(const char *value, void *field, char *message, size_t size) {
    lm_cli_image_paths *list = field;
    if (list->n == LOOM_MAX_IMAGES) {
        snprintf(message, size, "at most %d images", LOOM_MAX_IMAGES);
        return false;
    }
    list->paths[list->n++] = value;
    return true;
}
