/* Host sampling cost of one row: lm_sample on a vocabulary of random
 * logits (the spread of a language model's: most far below the top), for
 * greedy and the usual sampled settings.  What a sampled step pays per
 * sequence when its logits come back from the GPU (docs/PERF.md).
 *
 * Usage: build-dev/bench/sampler [VOCAB] [ROWS] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/sampler.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int vocab = argc > 1 ? atoi(argv[1]) : 248320, rows = argc > 2 ? atoi(argv[2]) : 200;
    if (vocab <= 0 || rows <= 0) return 2;
    float *base = malloc(sizeof(float) * (size_t)vocab), *row = malloc(sizeof(float) * (size_t)vocab);
    lm_sampler_scratch scratch;
    lm_error err = {0};
    if (!base || !row || lm_sampler_scratch_init(&scratch, vocab, &err) != LM_OK) return 1;
    lm_rng rng;
    lm_rng_seed(&rng, 1);
    for (int i = 0; i < vocab; i++) /* logits around -5 with a long upper tail, a few near 15 */
        base[i] = (float)(lm_rng_uniform(&rng) * 10.0 - 10.0) + (i % 997 == 0 ? 20.0f : 0.0f);
    struct {
        const char *name;
        float temperature, top_p, min_p;
        int top_k;
    } settings[] = {{"greedy (T=0)", 0, 1, 0, -1},
                    {"T=0.8", 0.8f, 1, 0, -1},
                    {"T=0.8 top_k=40", 0.8f, 1, 0, 40},
                    {"T=0.7 top_p=0.8 top_k=20 (Qwen's)", 0.7f, 0.8f, 0, 20},
                    {"T=1 top_p=0.95", 1, 0.95f, 0, -1}};
    lm_sample_context ctx = {0};
    for (size_t s = 0; s < sizeof settings / sizeof *settings; s++) {
        loom_sampling p;
        lm_sampling_defaults(&p);
        p.temperature = settings[s].temperature;
        p.top_p = settings[s].top_p;
        p.top_k = settings[s].top_k;
        p.min_p = settings[s].min_p;
        double total = 0;
        int32_t checksum = 0;
        for (int r = 0; r < rows; r++) {
            for (int i = 0; i < vocab; i++) row[i] = base[(i + r * 7919) % vocab];
            lm_sample_result result;
            double t0 = now();
            if (lm_sample(&p, row, vocab, &ctx, &rng, &scratch, &result, &err) != LM_OK) {
                fprintf(stderr, "%s\n", err.message);
                return 1;
            }
            total += now() - t0;
            checksum += result.token;
        }
        printf("%-36s %8.3f ms a row (%d rows of %d; checksum %d)\n", settings[s].name, 1e3 * total / rows, rows,
               vocab, (int)checksum);
    }
    lm_sampler_scratch_free(&scratch);
    free(base);
    free(row);
    return 0;
}
