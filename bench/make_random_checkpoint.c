/* Writes a checkpoint folder (config.json + model.safetensors) with the
 * random bf16 weights `loom bench --random-weights` would make, so that the
 * read and mmap load modes can be compared on a real file:
 *   build/bench/make_random_checkpoint CONFIG.json OUT_DIR [SEED] */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/qwen35/qwen35.h"
#include "models/registry.h"

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    if (!in || !out) {
        if (in) fclose(in);
        if (out) fclose(out);
        return -1;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    fclose(in);
    return fclose(out);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s CONFIG.json OUT_DIR [SEED]\n", argv[0]);
        return 2;
    }
    lm_error err = {0};
    lm_backend *backend = NULL;
    lm_model *model = NULL;
    if (lm_backend_create("cpu", 1, &backend, &err) != LM_OK ||
        lm_model_open_random(argv[1], argc > 3 ? strtoull(argv[3], NULL, 10) : 1, false, backend, &model,
                             &err) != LM_OK) {
        fprintf(stderr, "error: %s\n", err.message);
        lm_backend_destroy(backend);
        return 1;
    }
    if (strcmp(lm_model_describe(model)->family, lm_qwen35_family.name) != 0) {
        fprintf(stderr, "error: only Qwen3.5 shapes are written so far\n");
        return 1;
    }
    mkdir(argv[2], 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", argv[2]);
    if (copy_file(argv[1], path) != 0) {
        fprintf(stderr, "error: cannot write %s\n", path);
        return 1;
    }
    /* Header: every tensor handed out, data laid out in that order. */
    cJSON *header = cJSON_CreateObject();
    size_t offset = 0;
    const lm_weights *w = &((const lm_qwen35_model *)model)->weights;
    for (size_t i = 0; i < w->n_used; i++) {
        const lm_tensor *t = w->used[i];
        cJSON *entry = cJSON_AddObjectToObject(header, t->name);
        cJSON_AddStringToObject(entry, "dtype", lm_dtype_name(t->dtype));
        cJSON *shape = cJSON_AddArrayToObject(entry, "shape");
        for (int d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON *offsets = cJSON_AddArrayToObject(entry, "data_offsets");
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)offset));
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)(offset + t->n_bytes)));
        offset += t->n_bytes;
    }
    char *text = cJSON_PrintUnformatted(header);
    size_t len = strlen(text);
    size_t padded = (len + 7) / 8 * 8;
    snprintf(path, sizeof path, "%s/model.safetensors", argv[2]);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "error: cannot write %s\n", path);
        return 1;
    }
    unsigned char size_le[8];
    for (int i = 0; i < 8; i++) size_le[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    fwrite(size_le, 1, 8, f);
    fwrite(text, 1, len, f);
    for (size_t i = len; i < padded; i++) fputc(' ', f);
    for (size_t i = 0; i < w->n_used; i++) fwrite(w->used[i]->data, 1, w->used[i]->n_bytes, f);
    if (fclose(f) != 0) {
        fprintf(stderr, "error: writing %s failed\n", path);
        return 1;
    }
    printf("wrote %s: %zu tensors, %.1f MB\n", path, w->n_used, (double)offset / 1e6);
    free(text);
    cJSON_Delete(header);
    lm_model_free(model);
    lm_backend_destroy(backend);
    return 0;
}
