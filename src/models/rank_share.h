/* What one rank of a tensor-parallel group keeps of a model (issue 19),
 * decided once at load from the config, the same way for every family:
 *   - 1/n of the heads of each group of heads that share fewer heads
 *     (attention's query heads over its kv heads, Gated DeltaNet's value
 *     heads over its key heads) and 1/n of the shared ones; with fewer
 *     shared heads than ranks (n a multiple of them) each is kept whole by
 *     the n / shared ranks whose heads use it (vLLM's replication);
 *   - 1/n of each other count or width the family lists (the dense MLP's
 *     width, the shared experts' width);
 *   - of the routed experts, either 1/n of every expert's width (tensor
 *     parallelism), or with expert parallelism whole experts: rank r keeps
 *     experts [r·E/n, (r+1)·E/n).  The router stays whole either way: every
 *     rank routes every token and computes the pairs its experts serve,
 *     and the all-reduce after the MoE block sums the ranks' shares.
 * The family's config is rewritten in place to the rank's share; the
 * share says where the rank's slices begin in the checkpoint. */
#ifndef LOOM_MODELS_RANK_SHARE_H
#define LOOM_MODELS_RANK_SHARE_H

#include <stdbool.h>

#include "base/error.h"
#include "ops/comm.h"

/* A rank's run of shared heads (kv heads, Gated DeltaNet key heads). */
typedef struct {
    int first; /* its first of the checkpoint's: rank · local, or with each
                * head repeated over several ranks the one its heads use */
    int total; /* the checkpoint's */
} lm_shared_heads;

typedef struct {
    lm_comm *comm;              /* NULL: the whole model on one rank */
    int rank, n_ranks;          /* 0 and 1 for the whole model */
    lm_shared_heads kv;         /* attention's kv heads */
    lm_shared_heads linear_keys; /* Gated DeltaNet's key heads (none: 0, 0) */
    bool expert_parallel;       /* routed experts dealt out whole (MoE models only) */
    int expert_first;           /* this rank's routed experts: [expert_first, */
    int expert_count;           /*   expert_first + expert_count) of each layer's */
} lm_rank_share;

/* A count or width of config.json a rank keeps 1/n of: its name (for the
 * refusal) and the config's value, rewritten in place to the rank's. */
typedef struct {
    const char *what;
    int *value;
} lm_share_part;

/* Heads over the fewer heads they share (heads a multiple of shared). */
typedef struct {
    lm_share_part heads, shared;
} lm_share_group;

#define LM_SHARE_MAX_PARTS 4

/* What a family splits. */
typedef struct {
    lm_share_group attention;        /* query heads over kv heads */
    lm_share_group linear_attention; /* value heads over key heads (heads.value NULL: none) */
    lm_share_part parts[LM_SHARE_MAX_PARTS]; /* split evenly in either mode */
    int n_parts;
    /* MoE (experts.value NULL: a dense model, where expert parallelism
     * changes nothing): the routed experts' count, never rewritten (the
     * router scores them all), and each one's width, divided under tensor
     * parallelism, whole under expert parallelism. */
    lm_share_part experts, expert_width;
} lm_share_plan;

/* Rank comm->rank of comm->n_ranks' share of the plan's counts (comm NULL
 * or one rank: the whole model, nothing rewritten).  A count the ranks do
 * not divide is refused with a sentence naming it (LM_ERR_INVALID), before
 * anything is rewritten. */
lm_status lm_rank_share_take(lm_rank_share *share, lm_comm *comm, bool expert_parallel, const lm_share_plan *plan,
                             lm_error *err);

#endif
