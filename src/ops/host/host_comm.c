/* The host communicator (ops/comm.h): ranks are threads of one process.
 * A rank whose backend keeps its memory on the host publishes its view in
 * place; a device backend's rank (ranks sharing one GPU, which NCCL does
 * not take: the tests run a GPU's ranks this way on a machine of one GPU)
 * is staged: it downloads its x to the host, takes part, and uploads the
 * result.  Each collective publishes every rank's view, then works in
 * phases separated by the group's barrier:
 *
 *   all_reduce_sum: publish | rank r adds its share of the elements over
 *   the ranks, in rank order, into the group's scratch | every rank copies
 *   the whole scratch into its x | (the scratch is free again)
 *   all_gather: publish | every rank copies every rank's x | (the x are
 *   free again)
 *
 * The host backends run their ops at once (host_memory.h), so the views
 * hold the values of every op queued before the call; a staged rank's
 * download waits for its backend's queued work. */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/comm.h"
#include "ops/host/host_memory.h"

typedef struct {
    lm_comm comm;
    lm_host_comm_group *group;
} host_rank;

struct lm_host_comm_group {
    int n_ranks;
    pthread_barrier_t barrier;
    host_rank ranks[LM_COMM_MAX_RANKS];
    float *x[LM_COMM_MAX_RANKS]; /* the published views of the current collective */
    size_t n[LM_COMM_MAX_RANKS];
    float *scratch; /* all_reduce's sums, grown by rank 0 between barriers */
    size_t scratch_floats;
    bool scratch_failed;
};

static const lm_comm_ops host_comm_ops;

static bool host_backend(const lm_backend *be) { return be && be->ops->alloc == lm_host_alloc; }

/* Publishes x and n; after it every rank's are visible.  Returns whether
 * all ranks agree on n (the same answer on every rank). */
static bool publish(lm_host_comm_group *g, int rank, float *x, size_t n) {
    g->x[rank] = x;
    g->n[rank] = n;
    pthread_barrier_wait(&g->barrier);
    for (int r = 0; r < g->n_ranks; r++)
        if (g->n[r] != n) return false;
    return true;
}

static lm_status count_mismatch(lm_host_comm_group *g, const char *what, lm_error *err) {
    char counts[256] = "";
    size_t used = 0;
    for (int r = 0; r < g->n_ranks && used + 24 < sizeof counts; r++)
        used += (size_t)snprintf(counts + used, sizeof counts - used, "%s%zu", r ? ", " : "", g->n[r]);
    pthread_barrier_wait(&g->barrier); /* nobody republishes before all have read the counts */
    return lm_fail(err, LM_ERR_INVALID, "%s: the ranks disagree on the element count (%s%s)", what, counts,
                   used + 24 >= sizeof counts ? ", ..." : "");
}

/* A rank's view of its x: the host memory itself, or a staged copy. */
typedef struct {
    float *x;
    float *staged; /* malloc'd copy of a device backend's x, or NULL */
} rank_view;

/* A collective's first phase: publishes this rank's view (staging a
 * device backend's x on the host first) and count, and checks that the
 * counts agree.  Every rank takes the same path through the barriers
 * whatever fails, and a failure is every rank's (after one more barrier). */
static lm_status begin(lm_host_comm_group *g, const lm_comm *c, lm_backend *be, lm_mem xm, size_t n,
                       const char *what, rank_view *v, lm_error *err) {
    memset(v, 0, sizeof *v);
    lm_error mine = {0};
    lm_status staged_st = LM_OK;
    if (host_backend(be)) {
        v->x = lm_host_f32(xm);
    } else if (n > 0) {
        v->staged = malloc(sizeof(float) * n);
        staged_st = v->staged ? lm_download(be, v->staged, xm, sizeof(float) * n, &mine)
                              : lm_fail(&mine, LM_ERR_NOMEM, "%s: out of memory staging %zu floats", what, n);
        v->x = v->staged;
    }
    if (publish(g, c->rank, v->x, staged_st == LM_OK ? n : SIZE_MAX)) return LM_OK;
    bool any_failed = false;
    for (int r = 0; r < g->n_ranks; r++) any_failed |= g->n[r] == SIZE_MAX;
    free(v->staged);
    v->staged = NULL;
    if (!any_failed) return count_mismatch(g, what, err);
    pthread_barrier_wait(&g->barrier);
    if (staged_st != LM_OK) {
        *err = mine;
        return staged_st;
    }
    return lm_fail(err, LM_ERR_INTERNAL, "%s: another rank could not stage its values", what);
}

static lm_status host_all_reduce_sum(lm_comm *c, lm_backend *be, lm_mem xm, size_t n, lm_error *err) {
    lm_host_comm_group *g = ((host_rank *)c)->group;
    rank_view v;
    lm_status st = begin(g, c, be, xm, n, "all_reduce_sum", &v, err);
    if (st != LM_OK) return st;
    if (c->rank == 0 && g->scratch_floats < n) {
        float *grown = realloc(g->scratch, sizeof(float) * n);
        g->scratch_failed = !grown;
        if (grown) g->scratch = grown, g->scratch_floats = n;
    } else if (c->rank == 0) {
        g->scratch_failed = false;
    }
    pthread_barrier_wait(&g->barrier);
    if (g->scratch_failed) {
        pthread_barrier_wait(&g->barrier);
        free(v.staged);
        return lm_fail(err, LM_ERR_NOMEM, "all_reduce_sum: out of memory for %zu floats", n);
    }
    size_t lo = n * (size_t)c->rank / (size_t)g->n_ranks, hi = n * (size_t)(c->rank + 1) / (size_t)g->n_ranks;
    for (size_t i = lo; i < hi; i++) {
        float s = g->x[0][i];
        for (int r = 1; r < g->n_ranks; r++) s += g->x[r][i];
        g->scratch[i] = s;
    }
    pthread_barrier_wait(&g->barrier);
    if (n) memcpy(v.x, g->scratch, sizeof(float) * n);
    pthread_barrier_wait(&g->barrier);
    if (v.staged) lm_upload(be, xm, v.staged, sizeof(float) * n); /* the sum back to the device */
    free(v.staged);
    return LM_OK;
}

static lm_status host_all_gather(lm_comm *c, lm_backend *be, lm_mem outm, lm_mem xm, size_t n, lm_error *err) {
    lm_host_comm_group *g = ((host_rank *)c)->group;
    rank_view v;
    lm_status st = begin(g, c, be, xm, n, "all_gather", &v, err);
    if (st != LM_OK) return st;
    size_t all = n * (size_t)g->n_ranks;
    bool staged = !host_backend(be);
    float *out = !staged ? lm_host_f32(outm) : all ? malloc(sizeof(float) * all) : NULL;
    for (int r = 0; r < g->n_ranks && n && out; r++) memcpy(out + (size_t)r * n, g->x[r], sizeof(float) * n);
    pthread_barrier_wait(&g->barrier);
    free(v.staged);
    if (staged && all) {
        if (!out) return lm_fail(err, LM_ERR_NOMEM, "all_gather: out of memory for %zu floats", all);
        lm_upload(be, outm, out, sizeof(float) * all);
        free(out);
    }
    return LM_OK;
}

static const lm_comm_ops host_comm_ops = {
    .name = "host",
    .all_reduce_sum = host_all_reduce_sum,
    .all_gather = host_all_gather,
};

lm_status lm_host_comm_group_create(int n_ranks, lm_host_comm_group **out, lm_error *err) {
    *out = NULL;
    if (n_ranks < 1 || n_ranks > LM_COMM_MAX_RANKS)
        return lm_fail(err, LM_ERR_INVALID, "a communicator of %d ranks (1..%d)", n_ranks, LM_COMM_MAX_RANKS);
    lm_host_comm_group *g = calloc(1, sizeof *g);
    if (!g) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    if (pthread_barrier_init(&g->barrier, NULL, (unsigned)n_ranks) != 0) {
        free(g);
        return lm_fail(err, LM_ERR_INTERNAL, "cannot make a barrier of %d threads", n_ranks);
    }
    g->n_ranks = n_ranks;
    for (int r = 0; r < n_ranks; r++)
        g->ranks[r] = (host_rank){.comm = {.ops = &host_comm_ops, .rank = r, .n_ranks = n_ranks}, .group = g};
    *out = g;
    return LM_OK;
}

lm_comm *lm_host_comm_rank(lm_host_comm_group *g, int rank) {
    return g && rank >= 0 && rank < g->n_ranks ? &g->ranks[rank].comm : NULL;
}

void lm_host_comm_group_destroy(lm_host_comm_group *g) {
    if (!g) return;
    pthread_barrier_destroy(&g->barrier);
    free(g->scratch);
    free(g);
}
