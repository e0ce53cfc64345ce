#include "models/rank_share.h"

#include <string.h>

/* Whether a group's shared heads are each kept whole by several ranks:
 * fewer than the ranks, n a multiple of them, and the heads still divide. */
static bool shared_heads_repeat(const lm_share_group *g, int n) {
    int shared = *g->shared.value, heads = *g->heads.value;
    return shared > 0 && shared < n && n % shared == 0 && heads % n == 0;
}

static lm_status refuse(const char *mode, int n, const lm_share_part *p, const char *why, lm_error *err) {
    return lm_fail(err, LM_ERR_INVALID, "%s over %d ranks: %s (%d) is not a multiple of %d%s", mode, n, p->what,
                   *p->value, n, why);
}

/* The parts of group g that n ranks divide: its heads, and its shared
 * heads unless each is repeated over ranks. */
static int group_parts(const lm_share_group *g, int n, const lm_share_part **out) {
    if (!g->heads.value) return 0;
    out[0] = &g->heads;
    if (shared_heads_repeat(g, n)) return 1;
    out[1] = &g->shared;
    return 2;
}

/* After the counts are divided: this rank's first shared head. */
static lm_shared_heads shared_run(const lm_share_group *g, int total, bool repeat, int rank, int n) {
    if (!g->heads.value) return (lm_shared_heads){0, 0};
    if (repeat) {
        /* rank r's heads use shared head r / (n / total), kept whole */
        *g->shared.value = 1;
        return (lm_shared_heads){rank / (n / total), total};
    }
    return (lm_shared_heads){rank * *g->shared.value, total};
}

lm_status lm_rank_share_take(lm_rank_share *share, lm_comm *comm, bool expert_parallel, const lm_share_plan *plan,
                             lm_error *err) {
    const lm_share_group *attn = &plan->attention, *linear = &plan->linear_attention;
    bool moe = plan->experts.value != NULL;
    int n = comm ? comm->n_ranks : 1, E = moe ? *plan->experts.value : 0;
    memset(share, 0, sizeof *share);
    share->n_ranks = 1;
    share->kv = (lm_shared_heads){0, *attn->shared.value};
    if (linear->heads.value) share->linear_keys = (lm_shared_heads){0, *linear->shared.value};
    share->expert_count = E;
    if (n <= 1) return LM_OK; /* the whole model; expert parallelism over one rank changes nothing */

    /* every count is checked before any is rewritten */
    expert_parallel = expert_parallel && moe;
    if (expert_parallel && E % n != 0)
        return refuse("expert parallelism", n, &plan->experts, ": each rank keeps a whole number of experts", err);
    const lm_share_part *split[4 + LM_SHARE_MAX_PARTS + 1];
    int n_split = group_parts(attn, n, split);
    n_split += group_parts(linear, n, split + n_split);
    for (int k = 0; k < plan->n_parts && k < LM_SHARE_MAX_PARTS; k++) split[n_split++] = &plan->parts[k];
    if (moe && !expert_parallel) split[n_split++] = &plan->expert_width;
    for (int k = 0; k < n_split; k++)
        if (*split[k]->value % n != 0) return refuse("tensor parallelism", n, split[k], "", err);

    bool repeat_kv = shared_heads_repeat(attn, n), repeat_keys = linear->heads.value && shared_heads_repeat(linear, n);
    for (int k = 0; k < n_split; k++) *split[k]->value /= n;
    share->comm = comm;
    share->rank = comm->rank;
    share->n_ranks = n;
    share->kv = shared_run(attn, share->kv.total, repeat_kv, comm->rank, n);
    share->linear_keys = shared_run(linear, share->linear_keys.total, repeat_keys, comm->rank, n);
    share->expert_parallel = expert_parallel;
    if (expert_parallel) {
        share->expert_count = E / n;
        share->expert_first = comm->rank * share->expert_count;
    }
    return LM_OK;
}
