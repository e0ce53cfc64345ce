/* A group of communicators over the ranks' backends (comm.h): the host
 * communicator or NCCL's, by the backends' kind. */
#include <stdlib.h>
#include <string.h>

#include "ops/backend_kinds.h"
#include "ops/comm.h"

struct lm_comm_group {
    int n_ranks;
    lm_host_comm_group *host; /* host backends */
    void *device;             /* cuda backends: NCCL's (nccl_comm.cu) */
    lm_comm *comms[LM_COMM_MAX_RANKS];
};

/* Whether two ranks' backends run on the same device (NCCL takes one rank
 * a GPU: such ranks are staged through the host communicator). */
static bool shares_a_device(lm_backend *const *ranks, int n_ranks) {
#ifdef LOOM_HAVE_CUDA
    if (strcmp(ranks[0]->ops->name, "cuda") == 0)
        for (int r = 1; r < n_ranks; r++)
            for (int q = 0; q < r; q++)
                if (lm_cuda_backend_device(ranks[q]) == lm_cuda_backend_device(ranks[r])) return true;
#else
    (void)ranks, (void)n_ranks;
#endif
    return false;
}

lm_status lm_comm_group_create(lm_backend *const *ranks, int n_ranks, lm_comm_group **out, lm_error *err) {
    *out = NULL;
    if (n_ranks < 1 || n_ranks > LM_COMM_MAX_RANKS)
        return lm_fail(err, LM_ERR_INVALID, "a communicator of %d ranks (1..%d)", n_ranks, LM_COMM_MAX_RANKS);
    for (int r = 1; r < n_ranks; r++)
        if (ranks[r]->ops != ranks[0]->ops)
            return lm_fail(err, LM_ERR_INVALID, "rank %d's backend is %s and rank 0's %s: a group takes one kind",
                           r, ranks[r]->ops->name, ranks[0]->ops->name);
    lm_comm_group *g = calloc(1, sizeof *g);
    if (!g) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    g->n_ranks = n_ranks;
    lm_status st;
    if (lm_backend_is_host(ranks[0]) || shares_a_device(ranks, n_ranks)) {
        st = lm_host_comm_group_create(n_ranks, &g->host, err);
        for (int r = 0; r < n_ranks && st == LM_OK; r++) g->comms[r] = lm_host_comm_rank(g->host, r);
    } else {
#ifdef LOOM_HAVE_CUDA
        if (strcmp(ranks[0]->ops->name, "cuda") == 0)
            st = lm_cuda_comm_group_create(ranks, n_ranks, g->comms, &g->device, err);
        else
#endif
            st = lm_fail(err, LM_ERR_UNSUPPORTED, "no communicator joins %s backends", ranks[0]->ops->name);
    }
    if (st != LM_OK) {
        lm_comm_group_destroy(g);
        return st;
    }
    *out = g;
    return LM_OK;
}

lm_comm *lm_comm_group_rank(lm_comm_group *g, int rank) {
    return g && rank >= 0 && rank < g->n_ranks ? g->comms[rank] : NULL;
}

void lm_comm_group_destroy(lm_comm_group *g) {
    if (!g) return;
    lm_host_comm_group_destroy(g->host);
#ifdef LOOM_HAVE_CUDA
    if (g->device) lm_cuda_comm_group_destroy(g->device);
#endif
    free(g);
}
