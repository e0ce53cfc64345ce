#include "models/sharded_linear.h"

void lm_rank_sums_begin(lm_rank_sums *sums, lm_comm *comm) {
    sums->comm = comm;
    sums->status = LM_OK;
    sums->error = (lm_error){0};
}

void lm_rank_sums_keep(lm_rank_sums *sums, lm_status st, const lm_error *error) {
    if (st == LM_OK || sums->status != LM_OK) return;
    sums->status = st;
    sums->error = *error;
}

lm_status lm_rank_sums_status(const lm_rank_sums *sums, lm_error *err) {
    return sums->status == LM_OK ? LM_OK : lm_fail(err, sums->status, "%s", sums->error.message);
}

void lm_rank_sum(lm_rank_sums *sums, lm_backend *be, lm_mem x, size_t count) {
    if (!sums->comm || sums->status != LM_OK) return;
    lm_error error = {0};
    lm_rank_sums_keep(sums, lm_all_reduce_sum(sums->comm, be, x, count, &error), &error);
}

void lm_row_parallel_matmul(lm_rank_sums *sums, lm_backend *be, lm_mem y, lm_mem x, int n, const lm_matrix *w) {
    lm_matmul(be, y, x, n, w);
    lm_rank_sum(sums, be, y, (size_t)n * w->rows);
}

void lm_row_parallel_residual(lm_rank_sums *sums, lm_backend *be, lm_mem h, lm_mem product, lm_mem x, int n,
                              const lm_matrix *w) {
    lm_row_parallel_matmul(sums, be, product, x, n, w);
    lm_add(be, h, product, (int64_t)n * w->rows);
    lm_discard(be, product, sizeof(float) * (size_t)n * w->rows);
}
