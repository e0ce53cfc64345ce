/* The forward's linear layers the same at one rank and many (issue 49,
 * after vLLM's parallel linear layers).  Under tensor parallelism
 * (rank_share.h) a rank holds:
 *   - a column-parallel projection's rows (q/k/v, gate/up, in_proj): its
 *     output is the rank's own slice, nothing to sum: a plain lm_matmul;
 *   - a row-parallel projection's columns (o_proj, out_proj, down_proj)
 *     fed by the slice its column-parallel partner made: each rank's
 *     product is a partial sum, summed over the ranks here.
 * At one rank (comm NULL) a sum is nothing at all: no op is issued, so the
 * op stream — and a device backend's fusion of it, a residual product's
 * matmul + add into matmul_add — is exactly the one-rank forward's.
 *
 * A collective can fail (a rank gone); the forward does not branch on
 * each: the first failure is kept, later sums are skipped, and the
 * forward returns it at its end (lm_rank_sums_status). */
#ifndef LOOM_MODELS_SHARDED_LINEAR_H
#define LOOM_MODELS_SHARDED_LINEAR_H

#include <stddef.h>

#include "base/error.h"
#include "ops/comm.h"
#include "ops/ops.h"

typedef struct {
    lm_comm *comm; /* NULL: the whole model on one rank */
    lm_status status;
    lm_error error;
} lm_rank_sums;

/* A forward's sums over comm's ranks begin (comm NULL: one rank). */
void lm_rank_sums_begin(lm_rank_sums *sums, lm_comm *comm);

/* Keeps st (with its message) when it is the forward's first failure. */
void lm_rank_sums_keep(lm_rank_sums *sums, lm_status st, const lm_error *error);

/* LM_OK, or the first failure, reported into err. */
lm_status lm_rank_sums_status(const lm_rank_sums *sums, lm_error *err);

/* x [count floats] becomes the sum of every rank's x. */
void lm_rank_sum(lm_rank_sums *sums, lm_backend *be, lm_mem x, size_t count);

/* A row-parallel projection: y [n, w.rows] = Σ over the ranks of x · wᵀ,
 * x [n, w.cols] the rank's slice of the input, w its columns. */
void lm_row_parallel_matmul(lm_rank_sums *sums, lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w);

/* A residual block's last product: h [n, w.rows] += the row-parallel
 * product of x, made in `product` [n, w.rows], which then dies. */
void lm_row_parallel_residual(lm_rank_sums *sums, lm_backend *be, lm_mem h, lm_mem product, lm_mem x, int n,
                              const lm_matrix *w);

#endif
