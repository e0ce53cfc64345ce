/* The token sampler: turns one sequence's logits into its next token,
 * following vLLM V1.  Processing order on the float32 logits [V]:
 *
 *   0. (the engine, before lm_sample) a request's grammar: tokens it does
 *      not allow get -inf, the stop ids too unless the grammar is complete
 *      (engine/sequence_grammar.h); the raw logprobs below see this mask;
 *
 *   1. logit_bias added (ids outside [0, V) are skipped; reject them first
 *      with lm_sampling_validate);
 *   2. min_tokens: while n_generated < min_tokens the stop ids (eos ids and
 *      stop_token_ids, as the caller lists them) get -inf;
 *   3. repetition penalty on tokens in the prompt or the output
 *      (logit > 0 ? logit / p : logit * p), then frequency (minus p * output
 *      count) and presence (minus p once if generated) penalties;
 *   4. temperature < 1e-5: greedy argmax (lowest id on ties) and stop here;
 *      otherwise logits / temperature;
 *   5. min_p: tokens with prob < min_p * max_prob are dropped;
 *   6. top_k (> 0): tokens below the k-th largest logit are dropped (ties
 *      with the k-th are kept, as in vLLM);
 *   7. top_p (< 1): the smallest set of most probable tokens (ties: lower id
 *      first) whose renormalised mass reaches top_p, at least one token.  A
 *      set within 1e-7 of top_p counts as reaching it: top_p is a float
 *      (0.3 is stored as 0.30000001), and a set of mass exactly 0.3 should
 *      reach it;
 *   8. one draw from the renormalised distribution with the sequence's rng:
 *      u in [0, 1) times the kept mass, walked over the kept tokens in id
 *      order (a device's sample_rows walks them the same way, so a seed
 *      gives the same tokens wherever the row is drawn, up to rounding).
 *
 * Logprobs (params->logprobs >= 0) are vLLM's default "raw" ones: the
 * log_softmax of the logits as given, before step 1.
 *
 * Cost: steps 1-3 touch only the listed ids and the history's entries;
 * greedy is one pass over V; sampling is a few linear passes (max, exp, a
 * masking pass that also sums each block of LM_SAMPLER_BLOCK tokens, so the
 * draw walks block sums and then one block).  top_k up to the number of
 * blocks (the common 20-50 at a real vocabulary) weighs only the tokens at
 * or above the k-th largest block maximum, which hold the top k: a max
 * pass, one compare pass, then a few hundred tokens sorted (top_p after it
 * walks those).  Otherwise top_k / top_p add a histogram
 * of each token's distance to the max (32 buckets per unit of
 * (max - logit) / temperature) and sort only the tokens of the bucket that
 * holds a boundary, never the vocabulary (the last bucket gathers every
 * token 32 units or more below the max, so only a top_k reaching that far
 * sorts many).  Work memory comes from an lm_sampler_scratch made once per
 * vocabulary size (about 22 bytes per token); nothing is
 * allocated per token.  One scratch serves one thread. */
#ifndef LOOM_ENGINE_SAMPLER_H
#define LOOM_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "engine/rng.h"
#include "engine/token_counts.h"
#include "loom.h"
#include "ops/ops.h"

#define LM_SAMPLER_MAX_LOGPROBS 20
#define LM_SAMPLER_GREEDY_TEMPERATURE LM_SAMPLE_GREEDY_TEMPERATURE /* below this, greedy (ops/ops.h) */
#define LM_SAMPLER_MAX_VOCAB (1 << 28)
#define LM_SAMPLER_TOP_P_TOLERANCE LM_SAMPLE_TOP_P_TOLERANCE
#define LM_SAMPLER_BLOCK 1024 /* tokens per block of the kept-mass index */
#define LM_SAMPLER_HIST_BUCKETS 1024 /* < UINT16_MAX */

typedef struct {
    int32_t id;
    float logit;  /* processed logit (before temperature) */
    float weight; /* exp((logit - max) / temperature) */
} lm_sampler_candidate;

struct lm_sampler_vectors;

typedef struct {
    int vocab;                       /* largest vocabulary it serves */
    const struct lm_sampler_vectors *vectors; /* the loops of the kernel set chosen at init (sampler_vectors.h) */
    float *weights;                  /* [vocab] unnormalised probabilities */
    float *raw_logits;               /* [vocab] copy for the chosen token's logprob */
    lm_sampler_candidate *candidates; /* [vocab] top_k / top_p candidates */
    uint16_t *buckets;               /* [vocab] histogram bucket of each token */
    double *block_mass;              /* [vocab / LM_SAMPLER_BLOCK, rounded up] kept mass per block */
    int hist_count[LM_SAMPLER_HIST_BUCKETS];
    double hist_mass[LM_SAMPLER_HIST_BUCKETS];
    int bucket_start[LM_SAMPLER_HIST_BUCKETS + 1];
} lm_sampler_scratch;

lm_status lm_sampler_scratch_init(lm_sampler_scratch *scratch, int vocab, lm_error *err);
void lm_sampler_scratch_free(lm_sampler_scratch *scratch);

/* What one sequence brings to a draw besides its parameters and logits. */
typedef struct {
    const lm_token_counts *counts; /* prompt + output history; NULL: none */
    int n_generated;               /* output tokens so far */
    int min_tokens;                /* stop ids are masked while n_generated < min_tokens */
    const int32_t *stop_ids;       /* eos ids + stop_token_ids (ids outside [0, V) skipped) */
    int n_stop_ids;
} lm_sample_context;

typedef struct {
    int32_t token;
    float logprob; /* raw logprob of token, when params->logprobs >= 0 (else 0) */
    int n_top;     /* min(params->logprobs, 20, V) when logprobs >= 0, else 0 */
    loom_token_logprob top[LM_SAMPLER_MAX_LOGPROBS]; /* best first, ties: lower id first */
} lm_sample_result;

/* Draws the next token.  logits [vocab] are processed in place (steps 1-3
 * change them).  Consumes exactly one lm_rng_uniform unless greedy (none).
 * Parameters are used as given (run lm_sampling_validate first); values
 * out of range never crash: a NaN or non-positive temperature means greedy,
 * out-of-range top_p / min_p / penalties mean off.  If no token is left to
 * sample (all masked, NaN or infinite) the result is the argmax of the
 * processed logits: token 0 when none is above -inf.  Fails only on misuse
 * (a scratch smaller than vocab, vocab <= 0, NULL pointers, no rng when not
 * greedy). */
lm_status lm_sample(const loom_sampling *params, float *logits, int vocab,
                    const lm_sample_context *ctx, lm_rng *rng, lm_sampler_scratch *scratch,
                    lm_sample_result *result, lm_error *err);

/* True when lm_sample would return the argmax of the logits as given
 * (lowest id among the largest, NaN never): greedy, no logprobs, and no
 * logit_bias, stop-id mask or penalty that would change a logit.  The
 * engine then takes the backend's argmax of the row and leaves the row's
 * logits on the device. */
bool lm_sample_is_raw_argmax(const loom_sampling *params, const lm_sample_context *ctx);

/* The distribution lm_sample draws from, as probs [vocab] (zeros for dropped
 * tokens; one-hot for greedy).  For tests and for speculative acceptance.
 * logits are processed in place as in lm_sample. */
lm_status lm_sampler_distribution(const loom_sampling *params, float *logits, int vocab,
                                  const lm_sample_context *ctx, lm_sampler_scratch *scratch,
                                  float *probs, lm_error *err);

/* The draw lm_sample would make, as a row of the backend's sample_rows
 * (ops/ops.h) with `uniform` as its random number: the row's parameters
 * into *row and its edits (logit_bias, the masked stop ids, the penalised
 * history) appended to entries from *n_entries on.  False, with nothing
 * written, when the edits do not fit below max_entries or the draw needs
 * the host (logprobs). */
bool lm_sampler_device_row(const loom_sampling *params, const lm_sample_context *ctx, double uniform,
                           lm_sample_row *row, lm_sample_entry *entries, int max_entries, int *n_entries);

/* Checks the parameters as vLLM does; on failure writes a message such as
 * "top_p must be in (0, 1], got 1.5" into err (when err_size > 0) and
 * returns false.  vocab <= 0 means unknown: logit_bias ids are then only
 * checked to be >= 0. */
bool lm_sampling_validate(const loom_sampling *s, int vocab, char *err, size_t err_size);

/* temperature 1, top_k -1, top_p 1, min_p 0, repetition 1, presence and
 * frequency 0, no logit_bias, no seed, logprobs -1. */
void lm_sampling_defaults(loom_sampling *s);

#endif
