#include "cli/cli_common.h"

#include "models/tensor_parallel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/registry.h"

lm_status lm_cli_parse_ids(const char *text, int vocab, int32_t **ids, int *n, lm_error *err) {
    size_t cap = 1;
    for (const char *p = text; *p; p++) cap += *p == ',';
    if (cap > (1u << 24)) return lm_fail(err, LM_ERR_INVALID, "too many ids");
    int32_t *out = malloc(sizeof(int32_t) * cap);
    if (!out) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    int count = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ') p++;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno) {
            free(out);
            return lm_fail(err, LM_ERR_INVALID, "bad token id list at '%.20s'", p);
        }
        if (v < 0 || v >= vocab) {
            free(out);
            return lm_fail(err, LM_ERR_INVALID, "token id %ld is outside the vocabulary (size %d)", v,
                           vocab);
        }
        out[count++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') {
            p++;
            if (!*p) break;
        } else if (*p && *p != '\n') {
            free(out);
            return lm_fail(err, LM_ERR_INVALID, "bad token id list at '%.20s'", p);
        } else if (*p == '\n') {
            p++;
        }
    }
    if (count == 0) {
        free(out);
        return lm_fail(err, LM_ERR_INVALID, "empty token id list");
    }
    *ids = out;
    *n = count;
    return LM_OK;
}

lm_status lm_cli_open_model(const lm_cli_model_spec *spec, lm_backend **backend, lm_model **model,
                            lm_error *err) {
    *backend = NULL;
    *model = NULL;
    lm_status st = lm_backend_create(spec->backend ? spec->backend : "cpu", spec->threads, backend, err);
    if (st == LM_OK && spec->compute) st = lm_backend_set_compute(*backend, spec->compute, err);
    if (st == LM_OK && spec->tensor_parallel_size > 1) {
        lm_model_load_options o = spec->load;
        o.random_weights = !spec->dir;
        o.random_seed = spec->seed;
        st = lm_tensor_parallel_open(spec->dir, spec->random_config, &o, *backend, spec->tensor_parallel_size, model,
                                     err);
    }
    else if (st == LM_OK && spec->dir)
        st = lm_model_open(spec->dir, &spec->load, *backend, model, err);
    else if (st == LM_OK) {
        lm_model_load_options o = spec->load; /* its quantization too */
        o.random_weights = true;
        o.random_seed = spec->seed;
        st = lm_model_open_random_with(spec->random_config, &o, *backend, model, err);
    }
    if (st != LM_OK) {
        lm_backend_destroy(*backend);
        *backend = NULL;
    }
    return st;
}

void lm_cli_close_model(lm_backend *backend, lm_model *model) {
    lm_model_free(model);
    lm_backend_destroy(backend);
}

char *lm_cli_read_stdin(size_t max, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(buf);
                return NULL;
            }
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
    }
    if (ferror(stdin) || n > max) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}
