/* The scaffolding of a family's step context that is the same in every
 * family: how many logit rows a step may want, carving every array from one
 * backend allocation, the geometry the KV layers share and the limits a
 * step is checked against.  Which arrays there are and how big stays the
 * family's (its layout function, in its folder). */
#ifndef LOOM_MODELS_STEP_CONTEXT_H
#define LOOM_MODELS_STEP_CONTEXT_H

#include "models/model.h"
#include "models/step_descriptor.h"

/* Logit rows a step may want: the last row of each sequence, or
 * max_logit_rows (all rows of a verify) when set; never more than the
 * step's tokens. */
int lm_context_logit_rows(const lm_context_options *o);

/* Lays out every array of ctx; with c->buffer NULL it only adds up the size. */
typedef void (*lm_context_layout)(void *ctx, lm_carver *c);

/* layout run twice: once to add up the bytes, which are allocated (and
 * zeroed: lm_context_buffer_alloc) into *buffer, then to carve them. */
lm_status lm_context_carve(lm_backend *be, lm_context_layout layout, void *ctx, const char *what,
                           lm_buffer **buffer, lm_error *err);

/* Gives each of layers[0..n) the KV geometry every layer of a context
 * shares, keeping the k and v pools the carve assigned. */
void lm_context_kv_shape(lm_kv_layer *layers, int n, const lm_context_options *o, int n_kv_heads,
                         int head_dim, lm_dtype dtype);

/* The step limits the options set; uses_kv, state_slots and record_rows
 * are left false/0 for the family to say. */
lm_step_limits lm_context_step_limits(const lm_context_options *o, int max_logit_rows, int vocab_size);

#endif
