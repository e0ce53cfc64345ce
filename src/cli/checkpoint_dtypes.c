#include "cli/checkpoint_dtypes.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/dtype.h"
#include "io/checkpoint.h"
#include "io/gguf.h"

/* A GGUF file: counts by ggml type, in type-id order (the order ggml lists them). */
static lm_status gguf_summary(const char *path, lm_checkpoint_summary *out, lm_error *err) {
    lm_gguf *g;
    lm_status st = lm_gguf_open(path, LM_LOAD_MMAP, &g, err);
    if (st != LM_OK) return st;
    const char *arch = "?";
    (void)lm_gguf_get_string(g, "general.architecture", false, &arch, err);
    snprintf(out->format, sizeof out->format, "GGUF v%u, architecture %.40s", lm_gguf_version(g), arch);
    enum { TYPES = 64 };
    size_t by_type[TYPES] = {0}, other = 0;
    out->tensors = lm_gguf_tensor_count(g);
    for (size_t i = 0; i < out->tensors; i++) {
        const lm_gguf_tensor *t = lm_gguf_tensor_at(g, i);
        if (t->ggml_type < TYPES) by_type[t->ggml_type]++;
        else other++;
        out->parameters += t->tensor.n_elements;
        out->bytes += t->tensor.n_bytes;
    }
    size_t used = 0;
    char buf[32];
    for (uint32_t type = 0; type < TYPES && used < sizeof out->dtypes; type++)
        if (by_type[type]) {
            int n = snprintf(out->dtypes + used, sizeof out->dtypes - used, "%s%s x%zu", used ? ", " : "",
                             lm_gguf_ggml_type_name(type, buf, sizeof buf), by_type[type]);
            if (n > 0) used += (size_t)n;
        }
    (void)other; /* ggml defines no type id past 63: the reader refused it */
    lm_gguf_close(g);
    return LM_OK;
}

lm_status lm_cli_checkpoint_summary(const char *dir, lm_checkpoint_summary *out, lm_error *err) {
    memset(out, 0, sizeof *out);
    char gguf[4096];
    bool is_gguf = false;
    lm_status located = lm_gguf_locate(dir, &is_gguf, gguf, sizeof gguf, err);
    if (located != LM_OK) return located;
    if (is_gguf) return gguf_summary(gguf, out, err);
    lm_checkpoint *ck = NULL;
    lm_status st = lm_checkpoint_open(dir, LM_LOAD_MMAP, &ck, err);
    if (st != LM_OK) return st;
    size_t by_dtype[LM_DTYPE_COUNT] = {0};
    out->tensors = lm_checkpoint_count(ck);
    for (size_t i = 0; i < out->tensors; i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        by_dtype[t->dtype]++;
        out->parameters += t->n_elements;
    }
    out->bytes = lm_checkpoint_total_bytes(ck);
    lm_checkpoint_close(ck);
    size_t used = 0;
    for (int d = 0; d < LM_DTYPE_COUNT && used < sizeof out->dtypes; d++)
        if (by_dtype[d]) {
            int n = snprintf(out->dtypes + used, sizeof out->dtypes - used, "%s%s x%zu", used ? ", " : "",
                             lm_dtype_name((lm_dtype)d), by_dtype[d]);
            if (n > 0) used += (size_t)n;
        }
    return LM_OK;
}
