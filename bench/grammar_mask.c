/* Token-mask cost of constrained decoding on a real vocabulary: random walks
 * through a grammar (each step takes a uniformly random allowed token),
 * timing lm_sequence_grammar_mask per token: the mask computed from the
 * state and applied to a float logits row of the vocabulary, which is what
 * the engine pays per sampled row.  Walks share one sequence grammar (its
 * frames are cached after the first walk: "warm"); the first walk's numbers
 * are reported apart ("cold"), and so are the masks that had to build a
 * frame (a position met for the first time) and those that did not (the
 * steady state).  Also per case: the compile time (loom_grammar_compile,
 * with its cost check), the matcher's work units per mask (what the
 * engine's per-token budget, LM_GRAMMAR_TOKEN_WORK, counts) and the time
 * to advance the state by a token.  Single thread.
 *
 * Without --schema / --regex it runs four cases: a JSON schema (8
 * properties, bench/schemas/record.json's), a regex, any JSON, a
 * pathological-but-accepted regex (nested repetitions, near the compile
 * budget), and (a*){1000}, which is refused.
 *
 * usage: grammar_mask --tokenizer DIR [--walks N] [--steps N] [--schema JSON | --regex PATTERN] */
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

static const char *default_regex = "(\\+\\d{1,3} )?\\(?\\d{3}\\)?[ .-]\\d{3}[ .-]\\d{4}( x\\d{1,5})?|[a-z]+@[a-z]+\\.(com|org)";

/* Nested repetitions of something that may be empty: every copy of the
 * inner loop may be where the input is, so states hold 151 stacks; near the
 * compile-time budget (grammar/cost.h: (a*){200} is refused). */
static const char *pathological_regex = "(a*){150}";

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
    printf("  %s: %d, mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us\n", what, n, sum / n, t[n / 2],
           t[(int)((n - 1) * 0.99)], t[n - 1]);
}

static int run_case(const char *name, const loom_grammar_spec *spec, lm_tokenizer *tok, const lm_token_trie *trie,
                    int walks, int steps) {
    int V = lm_tokenizer_vocab_size(tok);
    printf("%s\n", name);
    loom_grammar *g;
    char msg[512];
    double c0 = now_us();
    int rc = loom_grammar_compile(spec, &g, msg, sizeof msg);
    double compile_us = now_us() - c0;
    if (rc != LOOM_OK) {
        printf("  refused in %.1f ms: %s\n", compile_us / 1000, msg);
        return 0;
    }
    printf("  compiled in %.2f ms\n", compile_us / 1000);
    lm_error err;
    lm_sequence_grammar *sg;
    if (lm_sequence_grammar_create(g, trie, NULL, &sg, &err) != LM_OK) return fprintf(stderr, "%s\n", err.message), 1;
    float *logits = malloc(sizeof(float) * (size_t)V);
    int32_t *allowed = malloc(sizeof(int32_t) * (size_t)V);
    size_t cap = (size_t)steps * (size_t)walks;
    double *cold = malloc(sizeof(double) * (size_t)steps), *warm = malloc(sizeof(double) * cap);
    double *steady = malloc(sizeof(double) * cap), *building = malloc(sizeof(double) * cap);
    double *accepts = malloc(sizeof(double) * cap);
    int n_cold = 0, n_warm = 0, n_steady = 0, n_building = 0, n_accepts = 0, completed = 0, failed = 0;
    uint64_t rng = 12345, max_mask_work = 0, sum_mask_work = 0, max_accept_work = 0;
    lm_gstate start = {0};
    lm_gstate_copy(&start, &sg->state);
    int32_t eos = lm_tokenizer_eos_id(tok);
    for (int w = 0; w < walks && !failed; w++) {
        lm_gstate_copy(&sg->state, &start);
        for (int s = 0; s < steps; s++) {
            for (int i = 0; i < V; i++) logits[i] = 0;
            uint64_t built = sg->masker.frames->built, spent = sg->masker.matcher.spent;
            double a = now_us();
            if (lm_sequence_grammar_mask(sg, logits, V, &eos, eos >= 0, &err) != LM_OK) {
                printf("  mask failed: %s\n", err.message);
                failed = 1;
                break;
            }
            double t = now_us() - a;
            uint64_t work = sg->masker.matcher.spent - spent;
            sum_mask_work += work;
            if (work > max_mask_work) max_mask_work = work;
            if (w == 0) cold[n_cold++] = t;
            else warm[n_warm++] = t;
            if (sg->masker.frames->built == built) steady[n_steady++] = t;
            else building[n_building++] = t;
            int n = 0;
            for (int i = 0; i < V; i++)
                if (logits[i] == 0 && i != eos) allowed[n++] = i;
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            /* where the grammar may end, a walk ends one time in 16 */
            if (sg->complete && (n == 0 || rng % 16 == 0)) {
                completed++;
                break;
            }
            if (n == 0) break;
            bool finished;
            spent = sg->masker.matcher.spent;
            a = now_us();
            if (lm_sequence_grammar_accept(sg, tok, allowed[rng % (uint64_t)n], &finished, &err) != LM_OK) {
                printf("  accept failed: %s\n", err.message);
                failed = 1;
                break;
            }
            accepts[n_accepts++] = now_us() - a;
            if (sg->masker.matcher.spent - spent > max_accept_work) max_accept_work = sg->masker.matcher.spent - spent;
            if (finished) {
                completed++;
                break;
            }
        }
    }
    report("masks, cold (first walk)", cold, n_cold);
    report("masks, warm (later walks)", warm, n_warm);
    report("masks that built no frame", steady, n_steady);
    report("masks that built frames", building, n_building);
    report("accepting a token", accepts, n_accepts);
    int masks = n_cold + n_warm;
    printf("  matcher work per mask: mean %.0f, max %llu units; per accepted token max %llu (budget %llu)\n",
           masks ? (double)sum_mask_work / masks : 0.0, (unsigned long long)max_mask_work,
           (unsigned long long)max_accept_work, (unsigned long long)LM_GRAMMAR_TOKEN_WORK);
    printf("  walks %d, completed %d, frames built %llu, reused %llu\n", walks, completed,
           (unsigned long long)sg->masker.frames->built, (unsigned long long)sg->masker.frames->reused);
    lm_gstate_free(&start);
    free(logits);
    free(allowed);
    free(cold);
    free(warm);
    free(steady);
    free(building);
    free(accepts);
    lm_sequence_grammar_free(sg);
    loom_grammar_free(g);
    return failed;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *schema = NULL, *regex = NULL;
    int walks = 20, steps = 150;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--tokenizer") == 0) dir = argv[i + 1];
        else if (strcmp(argv[i], "--walks") == 0) walks = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--schema") == 0) schema = argv[i + 1];
        else if (strcmp(argv[i], "--regex") == 0) regex = argv[i + 1];
    }
    if (!dir || walks < 1 || steps < 1 || (schema && regex)) {
        fprintf(stderr, "usage: grammar_mask --tokenizer DIR [--walks N] [--steps N] [--schema JSON | --regex PATTERN]\n");
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
    int failed = 0;
    if (schema || regex) {
        loom_grammar_spec spec = {.kind = schema ? LOOM_GRAMMAR_JSON_SCHEMA : LOOM_GRAMMAR_REGEX,
                                  .text = schema ? schema : regex,
                                  .text_len = strlen(schema ? schema : regex)};
        failed |= run_case(schema ? "the schema" : "the regex", &spec, tok, trie, walks, steps);
    } else {
        loom_grammar_spec cases[] = {
            {.kind = LOOM_GRAMMAR_JSON_SCHEMA, .text = default_schema, .text_len = strlen(default_schema)},
            {.kind = LOOM_GRAMMAR_REGEX, .text = default_regex, .text_len = strlen(default_regex)},
            {.kind = LOOM_GRAMMAR_JSON},
            {.kind = LOOM_GRAMMAR_REGEX, .text = pathological_regex, .text_len = strlen(pathological_regex)},
            {.kind = LOOM_GRAMMAR_REGEX, .text = "(a*){1000}", .text_len = 10},
        };
        char names[5][160];
        snprintf(names[0], sizeof names[0], "JSON schema (8 properties, bench/schemas/record.json's)");
        snprintf(names[1], sizeof names[1], "regex %s", default_regex);
        snprintf(names[2], sizeof names[2], "any JSON");
        snprintf(names[3], sizeof names[3], "pathological but accepted: regex %s", pathological_regex);
        snprintf(names[4], sizeof names[4], "pathological: regex (a*){1000}");
        for (int c = 0; c < 5; c++) failed |= run_case(names[c], &cases[c], tok, trie, walks, steps);
    }
    lm_token_trie_free(trie);
    lm_tokenizer_free(tok);
    return failed;
}
