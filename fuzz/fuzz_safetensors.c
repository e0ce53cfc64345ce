/* libFuzzer target for the safetensors parser (lm_safetensors_parse_memory),
 * entirely in memory.  Each input is tried twice:
 *   1. as a whole file image (length prefix, header, data), and
 *   2. as "header JSON \0 data", given a correct length prefix here, so the
 *      fuzzer can explore the JSON without first guessing the 8-byte length.
 * Whatever parses is read end to end so that an out-of-bounds tensor shows up
 * under AddressSanitizer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

static void use_everything(const lm_safetensors *st) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < lm_safetensors_count(st); i++) {
        const lm_tensor *t = lm_safetensors_at(st, i);
        if (lm_safetensors_find(st, t->name) != t) abort();
        if ((uintptr_t)t->data % lm_dtype_size(t->dtype) != 0) abort();
        if (t->n_bytes != (size_t)t->n_elements * lm_dtype_size(t->dtype)) abort();
        const uint8_t *p = t->data;
        for (size_t j = 0; j < t->n_bytes; j++) sink ^= p[j];
    }
    (void)lm_safetensors_metadata(st, "format");
    (void)sink;
}

static void parse_image(const uint8_t *bytes, size_t n) {
    lm_error err;
    lm_safetensors *st = NULL;
    if (lm_safetensors_parse_memory(bytes, n, "fuzz.safetensors", &st, &err) == LM_OK) {
        use_everything(st);
        lm_safetensors_close(st);
    } else if (st != NULL || err.message[0] == '\0') {
        abort(); /* a failure must clear the output and say why */
    }
}

/* "header \0 data" -> an image with the right length prefix. */
static void parse_header_and_data(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t header_len = nul ? (size_t)(nul - data) : size;
    size_t data_len = nul ? size - header_len - 1 : 0;
    uint8_t *image = malloc(8 + header_len + data_len);
    if (!image) return;
    for (int i = 0; i < 8; i++) image[i] = (uint8_t)((uint64_t)header_len >> (8 * i));
    memcpy(image + 8, data, header_len);
    if (data_len) memcpy(image + 8 + header_len, nul + 1, data_len);
    parse_image(image, 8 + header_len + data_len);
    free(image);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_image(data, size);
    parse_header_and_data(data, size);
    return 0;
}
