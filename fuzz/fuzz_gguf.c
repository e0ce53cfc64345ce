/* libFuzzer target for the GGUF reader (lm_gguf_parse_memory), entirely in
 * memory, and for what reads its metadata: the Qwen3.5 config and the
 * tokenizer and chat template built from it.  Whatever parses is read end
 * to end (every tensor's bytes, every array element) so that an
 * out-of-bounds offset shows up under AddressSanitizer; a failure must
 * leave no object and say why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "models/qwen35/qwen35_gguf.h"
#include "text/tokenizer_gguf.h"

static void use_everything(const lm_gguf *g) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < lm_gguf_tensor_count(g); i++) {
        const lm_gguf_tensor *t = lm_gguf_tensor_at(g, i);
        if (lm_gguf_find_tensor(g, t->tensor.name) != t) abort();
        if ((uintptr_t)t->tensor.data % 8 != 0) abort(); /* alignment: a multiple of 8 */
        const uint8_t *p = t->tensor.data;
        for (size_t j = 0; j < t->tensor.n_bytes; j++) sink ^= p[j];
    }
    for (size_t i = 0; i < lm_gguf_kv_count(g); i++) {
        const lm_gguf_kv *kv = lm_gguf_kv_at(g, i);
        if (lm_gguf_find_kv(g, kv->key) != kv) abort();
        if (kv->type == LM_GGUF_STRING) sink ^= (uint8_t)(kv->str_len ? kv->str[kv->str_len - 1] : 0);
        if (kv->type != LM_GGUF_ARRAY) continue;
        for (uint64_t j = 0; j < kv->count; j++) {
            if (kv->elem_type == LM_GGUF_STRING) sink ^= (uint8_t)kv->strs[j][0];
            else sink ^= (uint8_t)lm_gguf_array_int(kv, j) ^ (uint8_t)(lm_gguf_array_float(kv, j) > 0);
        }
    }
    (void)sink;
}

static void use_metadata(const lm_gguf *g) {
    lm_error err;
    lm_qwen35_config config;
    (void)lm_qwen35_gguf_config(g, &config, &err);
    lm_tokenizer *tok = NULL;
    if (lm_tokenizer_from_gguf(g, &tok, &err) == LM_OK) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (lm_tokenizer_encode(tok, "Hello <|im_end|> world", 22, true, &ids, &n, &err) == LM_OK) free(ids);
        lm_tokenizer_free(tok);
    } else if (tok) {
        abort();
    }
    lm_chat_template *t = NULL;
    if (lm_chat_template_from_gguf(g, &t, NULL, NULL, &err) == LM_OK) lm_chat_template_free(t);
    else if (t) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lm_error err = {0};
    lm_gguf *g = NULL;
    if (lm_gguf_parse_memory(data, size, "fuzz.gguf", &g, &err) == LM_OK) {
        use_everything(g);
        use_metadata(g);
        lm_gguf_close(g);
    } else if (g != NULL || err.message[0] == '\0') {
        abort();
    }
    return 0;
}
