#include "models/rank_share.h"

#include <string.h>

/* Whether the kv heads are kept whole by several ranks each: fewer than
 * the ranks, n a multiple of them, and the query heads still divide. */
static bool kv_heads_repeat(const lm_share_plan *plan, int n) {
    int kv = *plan->kv_heads.value, q = *plan->query_heads.value;
    return kv < n && n % kv == 0 && q % n == 0;
}

static lm_status refuse(const char *mode, int n, const lm_share_part *p, const char *why, lm_error *err) {
    return lm_fail(err, LM_ERR_INVALID, "%s over %d ranks: %s (%d) is not a multiple of %d%s", mode, n, p->what,
                   *p->value, n, why);
}

lm_status lm_rank_share_take(lm_rank_share *share, lm_comm *comm, bool expert_parallel, const lm_share_plan *plan,
                             lm_error *err) {
    bool moe = plan->experts.value != NULL;
    int n = comm ? comm->n_ranks : 1, E = moe ? *plan->experts.value : 0;
    memset(share, 0, sizeof *share);
    share->n_ranks = 1;
    share->config_kv_heads = *plan->kv_heads.value;
    share->expert_count = E;
    if (n <= 1) return LM_OK; /* the whole model; expert parallelism over one rank changes nothing */

    /* every count is checked before any is rewritten */
    expert_parallel = expert_parallel && moe;
    if (expert_parallel && E % n != 0)
        return refuse("expert parallelism", n, &plan->experts, ": each rank keeps a whole number of experts", err);
    bool repeat_kv = kv_heads_repeat(plan, n);
    const lm_share_part *split[2 + LM_SHARE_MAX_PARTS + 1];
    int n_split = 0;
    split[n_split++] = &plan->query_heads;
    if (!repeat_kv) split[n_split++] = &plan->kv_heads;
    for (int k = 0; k < plan->n_parts && k < LM_SHARE_MAX_PARTS; k++) split[n_split++] = &plan->parts[k];
    if (moe && !expert_parallel) split[n_split++] = &plan->expert_width;
    for (int k = 0; k < n_split; k++)
        if (*split[k]->value % n != 0) return refuse("tensor parallelism", n, split[k], "", err);

    for (int k = 0; k < n_split; k++) *split[k]->value /= n;
    share->comm = comm;
    share->rank = comm->rank;
    share->n_ranks = n;
    if (repeat_kv) {
        /* rank r's query heads use kv head r / (n / kv) */
        share->kv_head_first = comm->rank / (n / share->config_kv_heads);
        *plan->kv_heads.value = 1;
    } else {
        share->kv_head_first = comm->rank * *plan->kv_heads.value;
    }
    share->expert_parallel = expert_parallel;
    if (expert_parallel) {
        share->expert_count = E / n;
        share->expert_first = comm->rank * share->expert_count;
    }
    return LM_OK;
}
