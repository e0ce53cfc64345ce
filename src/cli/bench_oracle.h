/* Planted acceptance for `loom bench --planted-acceptance P`: a plain greedy
 * pass records each prompt's output; in the speculative pass every draft
 * the MTP head makes is replaced by the recorded next token with
 * probability P (else by a token that cannot be accepted), decided by a
 * hash of the prompt and the position so every run plants the same ones.
 * The verify keeps outputs exact, so this measures speculation's cost at
 * an acceptance the bench chooses, apart from how well the head drafts. */
#ifndef LOOM_CLI_BENCH_ORACLE_H
#define LOOM_CLI_BENCH_ORACLE_H

#include <stdint.h>

#include "base/error.h"
#include "cli/bench_prompts.h"

typedef struct {
    int count, gen_tokens, vocab;
    double acceptance;
    uint64_t *prompt_hash; /* [count] */
    int32_t *outputs;      /* [count][gen_tokens] */
    int *n_outputs;        /* [count] */
} lm_bench_oracle;

lm_status lm_bench_oracle_init(lm_bench_oracle *o, const lm_bench_prompts *prompts, int gen_tokens,
                               double acceptance, int vocab, lm_error *err);
/* The plain pass: the next output token of prompt `index`. */
void lm_bench_oracle_record(lm_bench_oracle *o, int index, int32_t token);
/* A loom_draft_override (loom.h) over a recorded oracle. */
int lm_bench_oracle_draft(void *oracle, const int32_t *tokens, int n_tokens, int n_prompt, int32_t *drafts,
                          int k);
void lm_bench_oracle_free(lm_bench_oracle *o);

#endif
