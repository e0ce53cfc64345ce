/* How both cpu attention kernels (attention.c, attention_bf16.c) deal a
 * call out to the pool's threads. */
#include "ops/cpu/kernels.h"

typedef struct {
    const lm_host_attention_batch *b;
    lm_cpu_attention_tile_fn tile;
    void *ctx;
    int window_rows, n_windows;
    int heads_per_pass; /* query heads of a GQA group taken at once */
} tiles_job;

/* Task = (window of rows, kv head).  Windows are taken last first: in a
 * prefill chunk the last rows have the longest contexts, so the big tasks
 * start early and the small ones fill in at the end. */
static void tiles_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const tiles_job *job = ctx;
    const lm_host_attention_batch *b = job->b;
    int window = job->n_windows - 1 - task / b->n_kv_heads, kvh = task % b->n_kv_heads;
    int r0 = window * job->window_rows;
    int r1 = r0 + job->window_rows < b->n_tokens ? r0 + job->window_rows : b->n_tokens;
    int group = b->n_heads / b->n_kv_heads;
    for (int first = r0; first < r1;) {
        int end = first + 1; /* a run of rows of one sequence */
        while (end < r1 && b->token_seq[end] == b->token_seq[first]) end++;
        for (int g0 = 0; g0 < group; g0 += job->heads_per_pass) {
            int n_heads = group - g0 < job->heads_per_pass ? group - g0 : job->heads_per_pass;
            job->tile(job->ctx, first, end - first, kvh, kvh * group + g0, n_heads);
        }
        first = end;
    }
}

void lm_cpu_attention_tiles(lm_pool *pool, const lm_host_attention_batch *batch, int max_tile,
                            lm_cpu_attention_tile_fn tile, void *ctx) {
    if (batch->n_tokens <= 0) return;
    int group = batch->n_heads / batch->n_kv_heads;
    int heads = group < max_tile ? group : max_tile;
    /* As many rows per window as a tile holds, fewer while that would
     * leave fewer than four tasks per thread. */
    int rows = max_tile / heads;
    long want_tasks = 4L * lm_pool_size(pool);
    while (rows > 1 && (long)((batch->n_tokens + rows - 1) / rows) * batch->n_kv_heads < want_tasks)
        rows = (rows + 1) / 2;
    tiles_job job = {.b = batch,
                     .tile = tile,
                     .ctx = ctx,
                     .window_rows = rows,
                     .n_windows = (batch->n_tokens + rows - 1) / rows,
                     .heads_per_pass = heads};
    lm_pool_run(pool, job.n_windows * batch->n_kv_heads, tiles_task, &job);
}
