/* Encode throughput of loom's tokenizer, single thread: the whole text file
 * in one lm_tokenizer_encode call (or, with --lines, one call per line),
 * best of several runs, in MB/s (1e6 bytes per second).
 * bench/tokenizer_bench.js generates the text and runs this side by side
 * with the Rust tokenizers library on the same text.
 *
 * usage: tokenizer_bench --model DIR --text FILE [--runs N] [--lines 0|1] [--ids-out FILE]
 *   --ids-out writes the ids as a JSON array, to check both agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *model = NULL, *text_path = NULL, *ids_out = NULL;
    int runs = 5, lines = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0) model = argv[i + 1];
        else if (strcmp(argv[i], "--text") == 0) text_path = argv[i + 1];
        else if (strcmp(argv[i], "--runs") == 0) runs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--ids-out") == 0) ids_out = argv[i + 1];
        else if (strcmp(argv[i], "--lines") == 0) lines = atoi(argv[i + 1]);
    }
    if (!model || !text_path || runs < 1) {
        fprintf(stderr, "usage: tokenizer_bench --model DIR --text FILE [--runs N] [--ids-out FILE]\n");
        return 2;
    }
    lm_error err;
    lm_tokenizer *tok;
    double t0 = now_seconds();
    if (lm_tokenizer_load(model, &tok, &err) != LM_OK) {
        fprintf(stderr, "tokenizer_bench: %s\n", err.message);
        return 1;
    }
    double load_s = now_seconds() - t0;
    char *text;
    size_t len;
    if (lm_tokenizer_read_file(text_path, (size_t)1 << 30, &text, &len, &err) != LM_OK) {
        fprintf(stderr, "tokenizer_bench: %s\n", err.message);
        lm_tokenizer_free(tok);
        return 1;
    }
    double best = 1e30;
    int32_t *ids = NULL;
    size_t n = 0;
    for (int r = 0; r < runs; r++) {
        free(ids);
        ids = NULL;
        n = 0;
        size_t cap = 0;
        double start = now_seconds();
        /* Whole text, or each line (with its newline) on its own. */
        for (size_t at = 0; at < len || (at == 0 && len == 0);) {
            const char *nl = lines ? memchr(text + at, '\n', len - at) : NULL;
            size_t end = nl ? (size_t)(nl - text) + 1 : len;
            int32_t *part;
            size_t n_part;
            if (lm_tokenizer_encode(tok, text + at, end - at, false, &part, &n_part, &err) != LM_OK) {
                fprintf(stderr, "tokenizer_bench: %s\n", err.message);
                return 1;
            }
            if (!ids) {
                ids = part;
                n = cap = n_part;
            } else {
                if (n + n_part > cap) {
                    cap = (n + n_part) * 2;
                    int32_t *grown = realloc(ids, cap * sizeof *ids);
                    if (!grown) return 1;
                    ids = grown;
                }
                memcpy(ids + n, part, n_part * sizeof *part);
                n += n_part;
                free(part);
            }
            at = end;
            if (len == 0) break;
        }
        double s = now_seconds() - start;
        if (s < best) best = s;
    }
    printf("loom%s: %zu bytes -> %zu tokens, best of %d: %.3f s, %.2f MB/s (tokenizer load %.2f s)\n",
           lines ? " (line by line)" : "", len, n, runs, best, (double)len / 1e6 / best, load_s);
    int rc = 0;
    if (ids_out) {
        FILE *f = fopen(ids_out, "w");
        if (!f) {
            perror(ids_out);
            rc = 1;
        } else {
            fputc('[', f);
            for (size_t i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", ids[i]);
            fputs("]\n", f);
            fclose(f);
        }
    }
    free(ids);
    free(text);
    lm_tokenizer_free(tok);
    return rc;
}
