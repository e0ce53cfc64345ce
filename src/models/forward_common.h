/* Pieces of a forward every family shares: the size checks of a context's
 * options, and the end of a step (final norm and lm_head on the rows that
 * want logits, the downloads). */
#ifndef LOOM_MODELS_FORWARD_COMMON_H
#define LOOM_MODELS_FORWARD_COMMON_H

#include "models/model.h"
#include "models/step_descriptor.h"
#include "ops/comm.h"

/* The KV pool and step sizes in range (state slots and speculation are the
 * family's to check). */
lm_status lm_context_check_sizes(const lm_context_options *o, lm_error *err);

/* The step's input rows into h [n_tokens, H]: the token table's embedding
 * of every token, then the batch's input_rows (image placeholders) over
 * theirs, one upload per run of rows consecutive in host memory. */
void lm_forward_embed_inputs(lm_backend *be, lm_mem h, lm_mem tokens, const lm_step_batch *b,
                             const lm_matrix *embed_tokens, int hidden);

/* One product of a block's input: y = x · wᵀ. */
typedef struct {
    lm_mem y;
    const lm_matrix *w;
} lm_product;

/* The SwiGLU MLP's first half in plain ops: y [n, gate.rows] =
 * silu(x · gateᵀ) ⊙ (x · upᵀ), the up half through up_half [n, up.rows],
 * which then dies (lm_discard: a backend that fuses the three need not
 * write it). */
void lm_forward_swiglu_in(lm_backend *be, lm_mem y, lm_mem up_half, lm_mem x, int n, const lm_matrix *gate,
                          const lm_matrix *up);
/* y += x · wᵀ in plain ops through scratch [n, w.rows], which then dies. */
void lm_forward_matmul_add(lm_backend *be, lm_mem y, lm_mem scratch, lm_mem x, int n, const lm_matrix *w);

/* max_image_patches in range, and 0 unless the model has a vision tower. */
lm_status lm_context_check_images(const lm_context_options *o, bool has_tower, lm_error *err);

/* The lm_head, whole or split by vocabulary over a tensor-parallel group:
 * rank r of n holds rows [r V/n, (r+1) V/n) (every rank reads 1/n of it a
 * step instead of all of it), and the ranks' columns are gathered. */
typedef struct {
    const lm_matrix *weight; /* [vocab, H], or this rank's [vocab / n, H] */
    int vocab;               /* the whole vocabulary */
    lm_comm *tp;             /* NULL: weight is whole */
    lm_mem scratch;          /* with tp: lm_vocab_split_scratch floats */
} lm_vocab_head;

/* Whether tensor parallelism over n ranks splits a vocabulary (when it
 * divides; else every rank keeps the lm_head whole). */
static inline bool lm_vocab_splits(int vocab, int n_ranks) { return n_ranks > 1 && vocab % n_ranks == 0; }
/* The scratch floats a split head needs for `rows` rows. */
static inline size_t lm_vocab_split_scratch(int vocab, int n_ranks, size_t rows) {
    return lm_vocab_splits(vocab, n_ranks) ? rows * ((size_t)vocab + (size_t)vocab / (size_t)n_ranks) : 0;
}
/* logits [rows, vocab] = x [rows, H] · lm_headᵀ, in vocabulary order on
 * every rank (the split's columns gathered: the same bits as the whole
 * product, a logit being one row's dot product either way). */
lm_status lm_vocab_head_matmul(lm_backend *be, const lm_vocab_head *head, lm_mem logits, lm_mem x, int rows,
                               lm_error *err);

/* The step's end: the logit rows of h [n_tokens, H] gathered into logit_x,
 * final-normed, downloaded to out->hidden / out->layer_hidden[n_layers] when
 * asked, multiplied by lm_head into logits and downloaded to out->logits
 * (the rows out->logits_wanted asks for) and, when asked, their argmax to
 * out->argmax: the one place a step waits for the backend. */
/* A context's room for a step's draws on the device (sample_rows): the
 * rows' parameters, their edits and the drew flags. */
typedef struct {
    lm_mem params;  /* lm_sample_row [rows] */
    lm_mem entries; /* lm_sample_entry [LM_FORWARD_SAMPLE_ENTRIES] */
    lm_mem drew;    /* int32 [rows] */
} lm_sample_buffers;

/* The lm_carve count (4-byte units) of one k or v pool of `elements`
 * elements of dtype (float32, or bf16 on backends that want it:
 * lm_kv_dtype). */
size_t lm_kv_pool_units(size_t elements, lm_dtype dtype);
/* Copies KV block src to block dst of both pools of each of n layers. */
void lm_kv_copy_block(lm_backend *be, const lm_kv_layer *layers, int n, int src, int dst);

/* Allocates a context's one buffer of `bytes` and zeroes it.  Zeroing
 * here, when the engine starts, is what makes the memory the context's:
 * host memory is otherwise only reserved, and the kernel maps and clears
 * each page on its first touch, so the first requests' steps (a sequence's
 * delta-rule state reset, a retiring sequence's state saved) would pay for
 * it (0.6 s of the first step of 16 sequences on the 0.8B shape,
 * docs/PERF.md), and a machine short of memory would fail mid-request
 * instead of at start-up.  llama.cpp clears its KV buffer at start-up too. */
lm_status lm_context_buffer_alloc(lm_backend *be, size_t bytes, const char *what, lm_buffer **out,
                                  lm_error *err);

/* Carves them for `rows` logit rows (nothing on a backend without
 * sample_rows: the views stay empty). */
void lm_sample_buffers_carve(lm_carver *c, const lm_backend *be, lm_sample_buffers *b, size_t rows);

/* Uploads a forward's drawn rows' parameters (out->sample_rows of `rows`
 * logit rows), if it has any: called with the step's own upload, before
 * any op of the step is queued. */
void lm_sample_upload(lm_backend *be, const lm_sample_buffers *b, const lm_forward_out *out, int rows);

typedef struct {
    lm_mem final_norm;
    float eps;
    lm_vocab_head lm_head;
    int hidden, n_layers;
    lm_mem logit_x, logits;   /* [rows, H], [rows, vocab] scratch */
    lm_mem logit_ids;         /* [rows] int32 scratch: the argmax of each row */
    const lm_sample_buffers *sample; /* NULL: no draws on the device */
} lm_logits_head;

lm_status lm_forward_logits(lm_backend *be, const lm_step_view *step, lm_mem h,
                            const lm_logits_head *head, const lm_forward_out *out, lm_error *err);

#endif
