/* llama_logits: the logits llama.cpp computes for a list of token ids, written
 * as `loom logits` writes them (float32 [T, V], row-major, no header), so the
 * two engines can be compared on the same weights (tools/llama_compare/).
 *
 * Build against a llama.cpp build tree (not part of loom's Makefile):
 *   cc -std=c17 -O2 -Wall -Wextra -Werror -I$LLAMA/include -I$LLAMA/ggml/include \
 *      tools/llama_compare/llama_logits.c -o /work/llama-work/llama_logits \
 *      -L$LLAMA/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin
 * Run:
 *   llama_logits MODEL.gguf --ids 1,2,3 --out F [--threads N] [--kv-f32]
 * --kv-f32 keeps llama.cpp's KV cache in float32 (its default is f16). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet_log(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* Parses "1,2,3" into a new array; returns 0 or -1 with a message. */
static int parse_ids(const char *text, llama_token **out, int *n_out) {
    int cap = 16, n = 0;
    llama_token *ids = malloc(sizeof *ids * (size_t)cap);
    if (!ids) return fprintf(stderr, "llama_logits: out of memory\n"), -1;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff || (*end && *end != ',')) {
            free(ids);
            return fprintf(stderr, "llama_logits: --ids: not a list of token ids: %s\n", text), -1;
        }
        if (n == cap) {
            cap *= 2;
            llama_token *bigger = realloc(ids, sizeof *ids * (size_t)cap);
            if (!bigger) {
                free(ids);
                return fprintf(stderr, "llama_logits: out of memory\n"), -1;
            }
            ids = bigger;
        }
        ids[n++] = (llama_token)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        free(ids);
        return fprintf(stderr, "llama_logits: --ids is empty\n"), -1;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *ids_text = NULL, *out_path = NULL;
    int threads = 2;
    int kv_f32 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_text = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv-f32")) kv_f32 = 1;
        else if (argv[i][0] != '-' && !model_path) model_path = argv[i];
        else {
            fprintf(stderr, "llama_logits: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!model_path || !ids_text || !out_path || threads < 1) {
        fprintf(stderr, "usage: llama_logits MODEL.gguf --ids 1,2,3 --out F [--threads N] [--kv-f32]\n");
        return 2;
    }
    llama_token *ids;
    int n;
    if (parse_ids(ids_text, &ids, &n) != 0) return 2;

    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "llama_logits: cannot load %s\n", model_path);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n + 16);
    cp.n_batch = (uint32_t)n;
    cp.n_ubatch = (uint32_t)n;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    if (kv_f32) {
        cp.type_k = GGML_TYPE_F32;
        cp.type_v = GGML_TYPE_F32;
    }
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama_logits: cannot make a context for %s\n", model_path);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int i = 0; i < n; i++) {
        if (ids[i] >= n_vocab) {
            fprintf(stderr, "llama_logits: token id %d is past the vocabulary (%d)\n", ids[i], n_vocab);
            return 2;
        }
    }
    struct llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    int rc = llama_decode(ctx, batch);
    if (rc != 0) {
        fprintf(stderr, "llama_logits: llama_decode failed (%d)\n", rc);
        return 1;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f) {
        fprintf(stderr, "llama_logits: cannot write %s: %s\n", out_path, strerror(errno));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        if (!row || fwrite(row, sizeof *row, (size_t)n_vocab, f) != (size_t)n_vocab) {
            fprintf(stderr, "llama_logits: no logits for position %d, or writing %s failed\n", i,
                    out_path);
            fclose(f);
            return 1;
        }
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "llama_logits: writing %s failed\n", out_path);
        return 1;
    }
    printf("wrote %s: [%d, %d] float32\n", out_path, n, n_vocab);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return 0;
}
