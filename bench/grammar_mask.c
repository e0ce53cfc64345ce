/* Token-mask cost of constrained decoding on a real vocabulary: random walks
 * through a JSON-schema grammar (each step takes a uniformly random allowed
 * token), timing lm_sequence_grammar_mask per token: the mask computed from
 * the state and applied to a float logits row of the vocabulary, which is
 * what the engine pays per sampled row.  Walks share one sequence grammar
 * (its frames are cached after the first walk: "warm"); the first walk's
 * numbers are reported apart ("cold"), and so are the masks that had to
 * build a frame (a position met for the first time) and those that did not
 * (the steady state).  Single thread.
 *
 * usage: grammar_mask --tokenizer DIR [--walks N] [--steps N] [--schema JSON] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sequence_grammar.h"
#include "grammar/compiled.h"
#include "text/tokenizer.h"

static const char *default_schema =
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"name\":{\"type\":\"string\"},"
    "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z]+@[a-z]+\\\\.com$\"},\"score\":{\"type\":\"number\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},\"active\":{\"type\":\"boolean\"},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\"}},"
    "\"required\":[\"city\"]}},\"required\":[\"id\",\"name\",\"role\",\"active\"]}";

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, int n) {
    if (n == 0) return;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    qsort(t, (size_t)n, sizeof *t, compare_doubles);
    printf("%s: %d masks, mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us\n", what, n, sum / n, t[n / 2],
           t[(int)((n - 1) * 0.99)], t[n - 1]);
}

int main(int argc, char **argv) {
    const char *dir = NULL, *schema = default_schema;
    int walks = 20, steps = 150;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--tokenizer") == 0) dir = argv[i + 1];
        else if (strcmp(argv[i], "--walks") == 0) walks = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--schema") == 0) schema = argv[i + 1];
    }
    if (!dir || walks < 1 || steps < 1) {
        fprintf(stderr, "usage: grammar_mask --tokenizer DIR [--walks N] [--steps N] [--schema JSON]\n");
        return 2;
    }
    lm_error err;
    lm_tokenizer *tok;
    if (lm_tokenizer_load(dir, &tok, &err) != LM_OK) {
        fprintf(stderr, "grammar_mask: %s\n", err.message);
        return 1;
    }
    int V = lm_tokenizer_vocab_size(tok);
    double t0 = now_us();
    lm_token_trie *trie;
    if (lm_grammar_vocab_trie(tok, V, &trie, &err) != LM_OK) return fprintf(stderr, "%s\n", err.message), 1;
    printf("vocabulary %d ids, trie of %u nodes built in %.1f ms\n", V, trie->n_nodes, (now_us() - t0) / 1000);
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_SCHEMA, .text = schema, .text_len = strlen(schema)};
    loom_grammar *g;
    char msg[512];
    if (loom_grammar_compile(&spec, &g, msg, sizeof msg) != LOOM_OK) return fprintf(stderr, "%s\n", msg), 1;
    lm_sequence_grammar *sg;
    if (lm_sequence_grammar_create(g, trie, NULL, &sg, &err) != LM_OK) return fprintf(stderr, "%s\n", err.message), 1;
    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t *allowed = malloc(sizeof(int32_t) * (size_t)V);
    double *cold = malloc(sizeof(double) * (size_t)steps), *warm = malloc(sizeof(double) * (size_t)steps * walks);
    double *steady = malloc(sizeof(double) * (size_t)steps * walks),
           *building = malloc(sizeof(double) * (size_t)steps * walks);
    int n_cold = 0, n_warm = 0, n_steady = 0, n_building = 0, completed = 0;
    uint64_t rng = 12345;
    lm_gstate start = {0};
    lm_gstate_copy(&start, &sg->state);
    int32_t eos = lm_tokenizer_eos_id(tok);
    for (int w = 0; w < walks; w++) {
        lm_gstate_copy(&sg->state, &start);
        for (int s = 0; s < steps; s++) {
            for (int i = 0; i < V; i++) logits[i] = 0;
            uint64_t built = sg->masker.frames->built;
            double a = now_us();
            if (lm_sequence_grammar_mask(sg, logits, V, &eos, eos >= 0, &err) != LM_OK) break;
            double t = now_us() - a;
            if (w == 0) cold[n_cold++] = t;
            else warm[n_warm++] = t;
            if (sg->masker.frames->built == built) steady[n_steady++] = t;
            else building[n_building++] = t;
            int n = 0;
            for (int i = 0; i < V; i++)
                if (logits[i] == 0 && i != eos) allowed[n++] = i;
            if (sg->complete) {
                completed++;
                break;
            }
            if (n == 0) break;
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            bool finished;
            if (lm_sequence_grammar_accept(sg, tok, allowed[rng % (uint64_t)n], &finished, &err) != LM_OK) {
                fprintf(stderr, "%s\n", err.message);
                return 1;
            }
        }
    }
    report("cold (first walk)", cold, n_cold);
    report("warm (later walks)", warm, n_warm);
    report("all walks, masks that built no frame", steady, n_steady);
    report("all walks, masks that built frames", building, n_building);
    printf("walks %d, completed %d, frames built %llu, reused %llu\n", walks, completed,
           (unsigned long long)sg->masker.frames->built, (unsigned long long)sg->masker.frames->reused);
    return 0;
}
