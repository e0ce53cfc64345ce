/* A sequence's token history for the sampling penalties: for each distinct
 * token id, how often it was generated and whether it is in the prompt.
 * Entries sit densely in first-seen order (the sampler walks them once per
 * token) and an open-addressing index (linear probing) finds an id; both
 * are sized by the distinct tokens seen, not by the vocabulary. */
#ifndef LOOM_ENGINE_TOKEN_COUNTS_H
#define LOOM_ENGINE_TOKEN_COUNTS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

/* Distinct ids one history may hold (far above any vocabulary). */
#define LM_TOKEN_COUNTS_MAX_DISTINCT (1 << 24)

typedef struct {
    int32_t id;
    int32_t output_count; /* times generated (saturates at INT32_MAX) */
    bool in_prompt;
} lm_token_count_entry;

typedef struct lm_token_counts {
    lm_token_count_entry *entries; /* [n_distinct] in first-seen order */
    int n_distinct, entries_capacity;
    int32_t *slots; /* [1 << hash_bits]: index into entries, -1 when empty */
    int hash_bits;
} lm_token_counts;

/* expected_distinct: a sizing hint (e.g. the prompt length, capped at 4096
 * so that long prompts of few distinct tokens stay small); both arrays grow. */
lm_status lm_token_counts_init(lm_token_counts *counts, int expected_distinct, lm_error *err);
void lm_token_counts_free(lm_token_counts *counts);
/* Forgets every token, keeping the memory. */
void lm_token_counts_clear(lm_token_counts *counts);
/* dst (uninitialised) becomes an independent copy of src: for the n choices
 * of one request, which share the prompt. */
lm_status lm_token_counts_copy(lm_token_counts *dst, const lm_token_counts *src, lm_error *err);

/* Marks the ids as prompt tokens.  Ids must be >= 0 (LM_ERR_INVALID
 * otherwise; the ids before the bad one stay added). */
lm_status lm_token_counts_add_prompt(lm_token_counts *counts, const int32_t *ids, int n,
                                     lm_error *err);
/* Counts one generated token. */
lm_status lm_token_counts_add_output(lm_token_counts *counts, int32_t id, lm_error *err);
/* Undoes one lm_token_counts_add_output (a rejected speculative token);
 * nothing happens when id was not generated. */
void lm_token_counts_remove_output(lm_token_counts *counts, int32_t id);

/* Whether id is known; fills its output count and prompt flag (0/false when not). */
bool lm_token_counts_get(const lm_token_counts *counts, int32_t id, int32_t *output_count,
                         bool *in_prompt);

#endif
