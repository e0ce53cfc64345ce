/* The step sampler: a step's draws over its logits.  It owns the logit
 * rows as they come back from the forward (whole rows, or each row's
 * argmax with its logits left on the device), the device draws planned
 * for the rows the backend samples where the logits are, the presampler
 * that draws a step's plain rows on several threads (presample.h), the
 * sampler's scratch (sampler.h) and constrained decoding's shared parts
 * (the vocabulary trie, the token-mask frame cache, sequence_grammar.h).
 * It draws a sequence's next token; what the token does to the sequence
 * (stop rules, events) is the runner's.
 *
 * Engine thread only. */
#ifndef LOOM_ENGINE_STEP_SAMPLER_H
#define LOOM_ENGINE_STEP_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/presample.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "engine/sequence_grammar.h"
#include "engine/step_plan.h"
#include "models/model.h"
#include "text/tokenizer.h"

typedef struct {
    int vocab_size;
    lm_tokenizer *tokenizer;     /* borrowed; NULL when the model has none */
    lm_token_trie *grammar_trie; /* the vocabulary's trie, built for the first grammar */
    lm_grammar_frame_cache grammar_frames; /* token-mask frames of recent grammars */
    uint64_t grammar_token_work; /* the sequences' grammar budget per token (LM_GRAMMAR_TOKEN_WORK) */
    uint64_t grammar_masks, grammar_ns; /* constrained decoding's engine-thread time */
    float *logits, *sample_row;
    /* The step's logit rows as brought back: logits_wanted[r] false means
     * row r's draw is its argmax (lm_sample_is_raw_argmax), logit_argmax[r],
     * and its logits stayed on the device.  all_logits (the environment's
     * LOOM_DOWNLOAD_ALL_LOGITS=1, for measuring) brings every row back. */
    int32_t *logit_argmax;
    bool *logits_wanted;
    bool all_logits;
    /* Draws made where the logits are (ops.h: sample_rows; on with a
     * device backend that has it, off with LOOM_DEVICE_SAMPLING=0, on for
     * a host backend with =1): each logit row's mode and parameters, the
     * step's edits, whether each draw used its uniform, and the sequence's
     * rng from before the uniform was taken (restored when it was not). */
    bool device_sampling, any_device_draws;
    lm_sample_row *sample_rows;      /* [logit rows] */
    lm_sample_entry *sample_entries; /* [LM_FORWARD_SAMPLE_ENTRIES] */
    int n_sample_entries;
    int32_t *sample_drew;            /* [logit rows] */
    lm_rng *rng_before;              /* [logit rows] */
    lm_sampler_scratch scratch;
    bool scratch_open;
    lm_presampler presampler; /* a step's sampled rows on several threads (presample.h) */
} lm_step_sampler;

/* Rows for logit_rows logit rows of a vocab_size vocabulary; the backend
 * decides whether draws are made on the device, and how many threads
 * presample (the environment's LOOM_DEVICE_SAMPLING, LOOM_SAMPLE_THREADS). */
lm_status lm_step_sampler_init(lm_step_sampler *ss, int vocab_size, int logit_rows, lm_backend *backend,
                               lm_tokenizer *tokenizer, lm_error *err);
void lm_step_sampler_free(lm_step_sampler *ss);

/* Before the forward: which of the plan's logit rows come back whole, and
 * which are drawn on the device (plan order: a verify's k + 1 rows, a
 * sampling chunk's one row); then where the forward writes them. */
void lm_step_sampler_plan_rows(lm_step_sampler *ss, const lm_step_plan *plan);
lm_forward_out lm_step_sampler_forward_out(lm_step_sampler *ss);
/* After the forward: the plan's plain sampled rows (logits on the host, no
 * grammar, not a verify) drawn at once on the presampler's threads. */
void lm_step_sampler_presample(lm_step_sampler *ss, const lm_step_plan *plan);
/* seq's next token from logit row `row` (its grammar's mask applied):
 * *out points at the draw (in storage, or the presampler's). */
lm_status lm_step_sampler_draw(lm_step_sampler *ss, lm_sequence *seq, int row, lm_sample_result *storage,
                               const lm_sample_result **out, lm_error *err);
/* The drawn token advances seq's grammar; *done: nothing may follow. */
lm_status lm_step_sampler_grammar_accept(lm_step_sampler *ss, lm_sequence *seq, int32_t token, bool *done,
                                         lm_error *err);
/* How many of seq's n drafts its grammar allows in a row. */
int lm_step_sampler_grammar_prefix(lm_step_sampler *ss, lm_sequence *seq, const int32_t *drafts, int n);
/* Its part of the engine's stats. */
void lm_step_sampler_stats(const lm_step_sampler *ss, loom_stats *stats);

/* A monotonic clock in nanoseconds (the grammar's time counter). */
uint64_t lm_step_sampler_now_ns(void);

#endif
