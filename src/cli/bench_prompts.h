/* The prompts `loom bench --concurrency` sends: random ids of a fixed length
 * (the default), or the lines of a text file encoded with the model's
 * tokenizer (raw, or as one user message through the chat template), which
 * is what makes speculative acceptance figures mean something. */
#ifndef LOOM_CLI_BENCH_PROMPTS_H
#define LOOM_CLI_BENCH_PROMPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

#define LM_BENCH_MAX_PROMPTS 100000

typedef struct {
    int32_t **ids;
    int *lengths;
    int count;
    int max_length;
} lm_bench_prompts;

/* `count` prompts of `length` ids drawn uniformly from [0, vocab). */
lm_status lm_bench_prompts_random(lm_bench_prompts *p, int count, int length, int vocab, uint64_t seed,
                                  lm_error *err);

/* One prompt per non-empty line of `path` (a literal "\n" in a line stands for
 * a newline), encoded with `model_dir`'s tokenizer; `chat` applies the chat
 * template to each as one user message. */
lm_status lm_bench_prompts_file(lm_bench_prompts *p, const char *path, const char *model_dir, bool chat,
                                lm_error *err);

void lm_bench_prompts_free(lm_bench_prompts *p);

#endif
