/* Collectives between the ranks of a tensor- or expert-parallel group
 * (issue 19: a model split across the devices of a host).  Each rank is one
 * backend driven by its own thread; a communicator joins the ranks of one
 * group.  Every rank calls a collective, in the same order as the others,
 * with its own backend and its own memory; the collective is ordered after
 * the ops the rank queued before it.
 *
 * Bits: every rank ends with the same result.  The host communicator adds
 * in rank order (rank 0's value + rank 1's + ...), so a run of N ranks is
 * reproducible, and with N = 1 a collective is the identity.
 *
 * Plain C vtable, like the backends' table: the host communicator below
 * (threads of one process over host backends, for the cpu and the tests)
 * and NCCL's for the cuda backend (ops/cuda/nccl_comm.cu: a collective is
 * queued on the rank's stream like a kernel, and captured in its graphs).
 * NCCL cannot check that the ranks agree on a count (a disagreement hangs
 * there): the ranks run the same model code, so they do. */
#ifndef LOOM_OPS_COMM_H
#define LOOM_OPS_COMM_H

#include <stddef.h>

#include "ops/ops.h"

typedef struct lm_comm lm_comm;

typedef struct {
    const char *name;
    /* x [n] floats on be: every rank's x becomes the sum over the ranks. */
    lm_status (*all_reduce_sum)(lm_comm *c, lm_backend *be, lm_mem x, size_t n, lm_error *err);
    /* out [n_ranks * n] floats on be = rank 0's x | rank 1's x | ...;
     * out may not overlap x. */
    lm_status (*all_gather)(lm_comm *c, lm_backend *be, lm_mem out, lm_mem x, size_t n, lm_error *err);
} lm_comm_ops;

struct lm_comm {
    const lm_comm_ops *ops;
    int rank, n_ranks;
    void *impl;
};

static inline lm_status lm_all_reduce_sum(lm_comm *c, lm_backend *be, lm_mem x, size_t n, lm_error *err) {
    return c->ops->all_reduce_sum(c, be, x, n, err);
}
static inline lm_status lm_all_gather(lm_comm *c, lm_backend *be, lm_mem out, lm_mem x, size_t n,
                                      lm_error *err) {
    return c->ops->all_gather(c, be, out, x, n, err);
}

/* ---- a group of ranks, one backend each ---- */

typedef struct lm_comm_group lm_comm_group;

/* Communicators joining ranks[0..n_ranks): NCCL when they are cuda
 * backends on distinct GPUs (one rank a device; NCCL is opened here, at run
 * time: libnccl.so.2, or the file LOOM_NCCL_LIBRARY names); else the host
 * communicator (host backends in place; cuda ranks sharing a GPU staged
 * through the host: slow, for tests on a machine of one GPU).  Mixed kinds
 * are refused.  The backends outlive the group. */
lm_status lm_comm_group_create(lm_backend *const *ranks, int n_ranks, lm_comm_group **out, lm_error *err);
lm_comm *lm_comm_group_rank(lm_comm_group *group, int rank);
/* After every rank's last collective. */
void lm_comm_group_destroy(lm_comm_group *group);

/* ---- the host communicator: ranks are threads of this process ---- */

typedef struct lm_host_comm_group lm_host_comm_group;

/* A group of n_ranks (1..LM_COMM_MAX_RANKS) ranks; rank r's communicator
 * is lm_host_comm_rank(group, r).  A rank whose backend keeps its memory
 * elsewhere (ranks sharing one GPU, which NCCL does not take) is staged
 * through the host: its values downloaded, the result uploaded.  A collective whose ranks disagree on n fails on
 * every rank, naming the counts. */
#define LM_COMM_MAX_RANKS 64
lm_status lm_host_comm_group_create(int n_ranks, lm_host_comm_group **out, lm_error *err);
lm_comm *lm_host_comm_rank(lm_host_comm_group *group, int rank);
/* After every rank's last collective. */
void lm_host_comm_group_destroy(lm_host_comm_group *group);

#endif
