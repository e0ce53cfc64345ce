/* The host communicator (ops/comm.h): ranks as threads, each with its own
 * cpu backend.  all_reduce_sum gives every rank the sum in rank order, the
 * same bits on every rank (checked against a sum made here in that order,
 * on values whose sum depends on the order); all_gather concatenates in
 * rank order; many collectives in a row (the barrier's phases reused);
 * ranks that disagree on the count fail on every rank and leave the group
 * usable; a backend whose memory is not the host's is staged through the
 * host (and its failure is every rank's).  A device group (NCCL) when the
 * backend under test is cuda. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "model_util.h"
#include "ops/host/host_memory.h" /* the host memory ops, for a backend posing as a device */
#include "ops/comm.h"

#define MAX_RANKS 8

/* A value of rank r at element i: magnitudes from 1e-4 to 1e4, so a sum's
 * bits depend on the order of its terms. */
static float value_at(int rank, size_t i, uint64_t salt) {
    uint64_t x = (uint64_t)rank * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull ^ salt;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    float mantissa = (float)(x >> 40) / (float)(1 << 24) - 0.5f;
    int exponent = (int)((x >> 8) % 9) - 4;
    return mantissa * powf(10.0f, (float)exponent);
}

typedef enum { REDUCE, GATHER, MIXED, MISMATCH, STAGED, STAGING_FAILS } job_kind;

typedef struct {
    job_kind kind;
    int rank, n_ranks, rounds;
    size_t n;
    lm_comm *comm;
    float *result;   /* what the rank's memory held after the (last) collective */
    lm_status status; /* of the (last) collective */
    char message[sizeof(((lm_error *)0)->message)];
    bool wrong;      /* MIXED: a round's result differed from what was expected */
} rank_job;

/* Element i of the rank-order sum over n_ranks ranks. */
static float rank_order_sum(int n_ranks, size_t i, uint64_t salt) {
    float s = value_at(0, i, salt);
    for (int r = 1; r < n_ranks; r++) s += value_at(r, i, salt);
    return s;
}

static lm_status reduce_once(rank_job *j, lm_backend *be, size_t n, uint64_t salt, float **out, lm_error *err) {
    lm_buffer *buf = NULL;
    lm_status st = lm_alloc(be, sizeof(float) * (n ? n : 1), "x", &buf, err);
    if (st != LM_OK) return st;
    float *host = malloc(sizeof(float) * (n ? n : 1));
    if (!host) {
        lm_buffer_free(be, buf);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) host[i] = value_at(j->rank, i, salt);
    lm_upload(be, lm_mem_of(buf), host, sizeof(float) * n);
    st = lm_all_reduce_sum(j->comm, be, lm_mem_of(buf), n, err);
    if (st == LM_OK) st = lm_download(be, host, lm_mem_of(buf), sizeof(float) * n, err);
    lm_buffer_free(be, buf);
    if (st != LM_OK) {
        free(host);
        return st;
    }
    *out = host;
    return LM_OK;
}

static lm_status gather_once(rank_job *j, lm_backend *be, size_t n, uint64_t salt, float **out, lm_error *err) {
    size_t all = n * (size_t)j->n_ranks;
    lm_buffer *xb = NULL, *ob = NULL;
    lm_status st = lm_alloc(be, sizeof(float) * (n ? n : 1), "x", &xb, err);
    if (st == LM_OK) st = lm_alloc(be, sizeof(float) * (all ? all : 1), "out", &ob, err);
    float *host = malloc(sizeof(float) * (all ? all : 1));
    if (st == LM_OK && !host) st = lm_fail(err, LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) {
        for (size_t i = 0; i < n; i++) host[i] = value_at(j->rank, i, salt);
        lm_upload(be, lm_mem_of(xb), host, sizeof(float) * n);
        st = lm_all_gather(j->comm, be, lm_mem_of(ob), lm_mem_of(xb), n, err);
    }
    if (st == LM_OK) st = lm_download(be, host, lm_mem_of(ob), sizeof(float) * all, err);
    lm_buffer_free(be, xb);
    lm_buffer_free(be, ob);
    if (st != LM_OK) {
        free(host);
        return st;
    }
    *out = host;
    return LM_OK;
}

static bool reduce_right(const float *got, int n_ranks, size_t n, uint64_t salt) {
    for (size_t i = 0; i < n; i++) {
        float want = rank_order_sum(n_ranks, i, salt);
        if (memcmp(&got[i], &want, sizeof want) != 0) return false;
    }
    return true;
}

static bool gather_right(const float *got, int n_ranks, size_t n, uint64_t salt) {
    for (int r = 0; r < n_ranks; r++)
        for (size_t i = 0; i < n; i++)
            if (got[(size_t)r * n + i] != value_at(r, i, salt)) return false;
    return true;
}

/* A host backend's table with another alloc: to the communicator this
 * memory is not the host's (as a device backend's is not), so it stages
 * the rank's values through downloads and uploads. */
static lm_status device_alloc(lm_backend *be, size_t bytes, const char *what, lm_buffer **out, lm_error *err) {
    return lm_host_alloc(be, bytes, what, out, err);
}
static lm_status failing_download(lm_backend *be, void *dst, lm_mem src, size_t bytes, lm_error *err) {
    (void)be, (void)dst, (void)src;
    return lm_fail(err, LM_ERR_INTERNAL, "the device lost %zu bytes", bytes);
}

static void *rank_main(void *arg) {
    rank_job *j = arg;
    lm_error err = {0};
    lm_backend *be = NULL;
    j->status = lm_backend_create("cpu", 1, &be, &err);
    if (j->status != LM_OK) goto done;
    switch (j->kind) {
    case REDUCE: j->status = reduce_once(j, be, j->n, 7, &j->result, &err); break;
    case GATHER: j->status = gather_once(j, be, j->n, 11, &j->result, &err); break;
    case MIXED:
        for (int round = 0; round < j->rounds && j->status == LM_OK; round++) {
            size_t n = (size_t)(round * 37 % 301); /* 0 included */
            float *got = NULL;
            uint64_t salt = (uint64_t)round + 100;
            if (round % 2 == 0) {
                j->status = reduce_once(j, be, n, salt, &got, &err);
                if (j->status == LM_OK && !reduce_right(got, j->n_ranks, n, salt)) j->wrong = true;
            } else {
                j->status = gather_once(j, be, n, salt, &got, &err);
                if (j->status == LM_OK && !gather_right(got, j->n_ranks, n, salt)) j->wrong = true;
            }
            free(got);
        }
        break;
    case MISMATCH: {
        /* rank 1 passes one element more; then all agree, and it must work */
        float *got = NULL;
        j->status = reduce_once(j, be, j->n + (j->rank == 1), 3, &got, &err);
        free(got);
        got = NULL;
        snprintf(j->message, sizeof j->message, "%s", err.message);
        lm_status first = j->status;
        lm_error err2 = {0};
        lm_status again = reduce_once(j, be, j->n, 5, &got, &err2);
        j->wrong = again != LM_OK || !reduce_right(got, j->n_ranks, j->n, 5);
        free(got);
        j->status = first;
        break;
    }
    case STAGED: {
        /* rank 0's backend looks like a device's: its values go through the
         * host and back; every rank must hold the rank-order sum and the
         * gathered rows */
        lm_backend_ops ops = *be->ops;
        lm_backend device = {.ops = &ops, .impl = be->impl};
        if (j->rank == 0) ops.alloc = device_alloc;
        float *got = NULL;
        j->status = reduce_once(j, &device, j->n, 9, &got, &err);
        j->wrong = j->status == LM_OK && !reduce_right(got, j->n_ranks, j->n, 9);
        free(got);
        got = NULL;
        if (j->status == LM_OK) j->status = gather_once(j, &device, j->n, 13, &got, &err);
        j->wrong |= j->status == LM_OK && !gather_right(got, j->n_ranks, j->n, 13);
        free(got);
        break;
    }
    case STAGING_FAILS: {
        /* rank 1's device loses its download: every rank fails, rank 1 with
         * its own sentence, and the group stays usable */
        lm_backend_ops ops = *be->ops;
        lm_backend device = {.ops = &ops, .impl = be->impl};
        if (j->rank == 1) ops.alloc = device_alloc, ops.download = failing_download;
        lm_buffer *buf = NULL;
        j->status = lm_alloc(be, sizeof(float) * 4, "x", &buf, &err);
        if (j->status == LM_OK) j->status = lm_all_reduce_sum(j->comm, &device, lm_mem_of(buf), 4, &err);
        snprintf(j->message, sizeof j->message, "%s", err.message);
        lm_buffer_free(be, buf);
        float *got = NULL;
        lm_error err2 = {0};
        lm_status again = reduce_once(j, be, 6, 17, &got, &err2);
        j->wrong = again != LM_OK || !reduce_right(got, j->n_ranks, 6, 17);
        free(got);
        break;
    }
    }
done:
    if (j->status != LM_OK && !j->message[0]) snprintf(j->message, sizeof j->message, "%s", err.message);
    lm_backend_destroy(be);
    return NULL;
}

/* Runs one job on n_ranks threads. */
static bool run_ranks(job_kind kind, int n_ranks, size_t n, int rounds, rank_job *jobs) {
    lm_host_comm_group *group = NULL;
    lm_error err = {0};
    if (lm_host_comm_group_create(n_ranks, &group, &err) != LM_OK) return false;
    pthread_t threads[MAX_RANKS];
    for (int r = 0; r < n_ranks; r++) {
        jobs[r] = (rank_job){.kind = kind, .rank = r, .n_ranks = n_ranks, .rounds = rounds, .n = n,
                             .comm = lm_host_comm_rank(group, r)};
        if (pthread_create(&threads[r], NULL, rank_main, &jobs[r]) != 0) return false;
    }
    for (int r = 0; r < n_ranks; r++) pthread_join(threads[r], NULL);
    lm_host_comm_group_destroy(group);
    return true;
}

static void free_results(rank_job *jobs, int n_ranks) {
    for (int r = 0; r < n_ranks; r++) free(jobs[r].result);
}

static void test_all_reduce_is_the_rank_order_sum(void) {
    static const int ranks[] = {1, 2, 3, 4, 7};
    static const size_t sizes[] = {0, 1, 5, 1000, 4099};
    /* the values are such that the order of the terms shows in the bits */
    bool order_shows = false;
    for (size_t i = 0; i < 1000 && !order_shows; i++) {
        float reverse = value_at(3, i, 7);
        for (int r = 2; r >= 0; r--) reverse += value_at(r, i, 7);
        order_shows = reverse != rank_order_sum(4, i, 7);
    }
    CHECK_MSG(order_shows, "the test's values sum the same in any order: it could not see a wrong order");
    for (size_t a = 0; a < sizeof ranks / sizeof *ranks; a++)
        for (size_t b = 0; b < sizeof sizes / sizeof *sizes; b++) {
            rank_job jobs[MAX_RANKS];
            CHECK(run_ranks(REDUCE, ranks[a], sizes[b], 1, jobs));
            for (int r = 0; r < ranks[a]; r++) {
                if (jobs[r].status != LM_OK) free_results(jobs, ranks[a]);
                CHECK_MSG(jobs[r].status == LM_OK, "%d ranks, %zu floats: rank %d: %s", ranks[a], sizes[b], r,
                          jobs[r].message);
            }
            bool right = true;
            for (int r = 0; r < ranks[a]; r++) right = right && reduce_right(jobs[r].result, ranks[a], sizes[b], 7);
            free_results(jobs, ranks[a]);
            CHECK_MSG(right, "%d ranks, %zu floats: a rank's sum is not the rank-order sum", ranks[a], sizes[b]);
        }
}

static void test_all_gather_concatenates_in_rank_order(void) {
    static const int ranks[] = {1, 2, 5};
    static const size_t sizes[] = {0, 3, 777};
    for (size_t a = 0; a < sizeof ranks / sizeof *ranks; a++)
        for (size_t b = 0; b < sizeof sizes / sizeof *sizes; b++) {
            rank_job jobs[MAX_RANKS];
            CHECK(run_ranks(GATHER, ranks[a], sizes[b], 1, jobs));
            bool ok = true, right = true;
            for (int r = 0; r < ranks[a]; r++) {
                ok = ok && jobs[r].status == LM_OK;
                right = right && ok && gather_right(jobs[r].result, ranks[a], sizes[b], 11);
            }
            free_results(jobs, ranks[a]);
            CHECK_MSG(ok && right, "all_gather, %d ranks, %zu floats: %s", ranks[a], sizes[b],
                      ok ? "wrong values" : "failed");
        }
}

static void test_many_collectives_in_a_row(void) {
    rank_job jobs[MAX_RANKS];
    CHECK(run_ranks(MIXED, 4, 0, 200, jobs));
    for (int r = 0; r < 4; r++) {
        CHECK_MSG(jobs[r].status == LM_OK, "rank %d: %s", r, jobs[r].message);
        CHECK_MSG(!jobs[r].wrong, "rank %d: a round's result was wrong", r);
    }
}

static void test_count_mismatch_fails_everywhere(void) {
    rank_job jobs[MAX_RANKS];
    CHECK(run_ranks(MISMATCH, 3, 10, 1, jobs));
    for (int r = 0; r < 3; r++) {
        CHECK_MSG(jobs[r].status == LM_ERR_INVALID, "rank %d: status %d", r, (int)jobs[r].status);
        CHECK_MSG(strstr(jobs[r].message, "10, 11, 10") != NULL, "rank %d: '%s' does not name the counts", r,
                  jobs[r].message);
        CHECK_MSG(!jobs[r].wrong, "rank %d: the group was not usable after the refusal", r);
    }
}

static void test_stages_memory_not_on_the_host(void) {
    rank_job jobs[MAX_RANKS];
    CHECK(run_ranks(STAGED, 3, 1001, 1, jobs));
    for (int r = 0; r < 3; r++) {
        CHECK_MSG(jobs[r].status == LM_OK, "rank %d: %s", r, jobs[r].message);
        CHECK_MSG(!jobs[r].wrong, "rank %d: a staged collective gave wrong values", r);
    }
    CHECK(run_ranks(STAGING_FAILS, 3, 4, 1, jobs));
    for (int r = 0; r < 3; r++) {
        CHECK_MSG(jobs[r].status != LM_OK, "rank %d: a failed staging did not fail the collective", r);
        CHECK_MSG(strstr(jobs[r].message, r == 1 ? "lost 16 bytes" : "could not stage") != NULL, "rank %d: '%s'", r,
                  jobs[r].message);
        CHECK_MSG(!jobs[r].wrong, "rank %d: the group was not usable after the failure", r);
    }
}

static void test_group_bounds(void) {
    lm_host_comm_group *g = NULL;
    lm_error err = {0};
    CHECK(lm_host_comm_group_create(0, &g, &err) == LM_ERR_INVALID && g == NULL);
    CHECK(lm_host_comm_group_create(LM_COMM_MAX_RANKS + 1, &g, &err) == LM_ERR_INVALID && g == NULL);
    CHECK_OK(lm_host_comm_group_create(2, &g, &err), &err);
    bool ok = lm_host_comm_rank(g, 0) && lm_host_comm_rank(g, 1) && !lm_host_comm_rank(g, 2) &&
              !lm_host_comm_rank(g, -1) && lm_host_comm_rank(g, 1)->rank == 1 &&
              lm_host_comm_rank(g, 1)->n_ranks == 2;
    lm_host_comm_group_destroy(g);
    CHECK(ok);
}

/* ---- a device backend's group (cuda: NCCL), when the backend under test
 * is one: every GPU of the machine a rank (up to 4; one GPU makes a group
 * of one, where a collective is the identity but still goes through NCCL,
 * the queue and its graphs) ---- */

typedef struct {
    lm_backend *be;
    lm_comm *comm;
    int rank, n_ranks, rounds;
    size_t n;
    float *reduced, *doubled, *gathered; /* the last round's */
    bool unequal_rounds;                 /* a round's results differed from the first's */
    lm_status status;
    char message[sizeof(((lm_error *)0)->message)];
} device_job;

/* Each round queues copy, all_reduce, copy, all_reduce, all_gather
 * between an upload and the downloads: one run of the backend's queue with
 * collectives among kernels, the same bytes every round (a GPU backend
 * replays such a run as a captured graph from the second time on). */
static void *device_rank_main(void *arg) {
    device_job *j = arg;
    lm_error err = {0};
    lm_backend *be = j->be;
    size_t n = j->n, all = n * (size_t)j->n_ranks;
    lm_buffer *x = NULL, *y = NULL, *z = NULL, *g = NULL;
    float *host = malloc(sizeof(float) * all), *first = malloc(sizeof(float) * (2 * n + all));
    j->reduced = malloc(sizeof(float) * n);
    j->doubled = malloc(sizeof(float) * n);
    j->gathered = malloc(sizeof(float) * all);
    lm_status st = host && first && j->reduced && j->doubled && j->gathered ? LM_OK
                                                                          : lm_fail(&err, LM_ERR_NOMEM, "out of memory");
    if (st == LM_OK) st = lm_alloc(be, sizeof(float) * n, "x", &x, &err);
    if (st == LM_OK) st = lm_alloc(be, sizeof(float) * n, "y", &y, &err);
    if (st == LM_OK) st = lm_alloc(be, sizeof(float) * n, "z", &z, &err);
    if (st == LM_OK) st = lm_alloc(be, sizeof(float) * all, "gathered", &g, &err);
    for (int round = 0; round < j->rounds && st == LM_OK; round++) {
        for (size_t i = 0; i < n; i++) host[i] = value_at(j->rank, i, 21);
        lm_upload(be, lm_mem_of(x), host, sizeof(float) * n);
        lm_copy(be, lm_mem_of(y), lm_mem_of(x), sizeof(float) * n);
        st = lm_all_reduce_sum(j->comm, be, lm_mem_of(y), n, &err);
        lm_copy(be, lm_mem_of(z), lm_mem_of(y), sizeof(float) * n);
        if (st == LM_OK) st = lm_all_reduce_sum(j->comm, be, lm_mem_of(z), n, &err);
        if (st == LM_OK) st = lm_all_gather(j->comm, be, lm_mem_of(g), lm_mem_of(x), n, &err);
        if (st == LM_OK) st = lm_download(be, j->reduced, lm_mem_of(y), sizeof(float) * n, &err);
        if (st == LM_OK) st = lm_download(be, j->doubled, lm_mem_of(z), sizeof(float) * n, &err);
        if (st == LM_OK) st = lm_download(be, j->gathered, lm_mem_of(g), sizeof(float) * all, &err);
        if (st != LM_OK) break;
        if (round == 0) {
            memcpy(first, j->reduced, sizeof(float) * n);
            memcpy(first + n, j->doubled, sizeof(float) * n);
            memcpy(first + 2 * n, j->gathered, sizeof(float) * all);
        } else if (memcmp(first, j->reduced, sizeof(float) * n) || memcmp(first + n, j->doubled, sizeof(float) * n) ||
                   memcmp(first + 2 * n, j->gathered, sizeof(float) * all)) {
            j->unequal_rounds = true;
        }
    }
    if (st == LM_OK && strcmp(j->comm->ops->name, "nccl") == 0) {
        /* a rank's NCCL communicator takes its own backend only */
        lm_error refused = {0};
        device_job *other = j; /* any backend but this rank's: a copy of its table */
        lm_backend shadow = {.ops = other->be->ops, .impl = other->be->impl};
        if (lm_all_reduce_sum(j->comm, &shadow, lm_mem_of(x), n, &refused) != LM_ERR_INVALID ||
            !strstr(refused.message, "its own backend"))
            st = lm_fail(&err, LM_ERR_INTERNAL, "a foreign backend was not refused: '%s'", refused.message);
    }
    j->status = st;
    if (st != LM_OK) snprintf(j->message, sizeof j->message, "%s", err.message);
    lm_buffer_free(be, x);
    lm_buffer_free(be, y);
    lm_buffer_free(be, z);
    lm_buffer_free(be, g);
    free(host);
    free(first);
    return NULL;
}

/* n_ranks ranks of `kind`, on GPUs 0, 1, ... (or all on GPU 0), through
 * the communicator lm_comm_group_create picks (want: its name). */
static void check_device_group(const char *kind, int n_ranks, bool one_device, const char *comm_name) {
    const size_t n = 100003; /* NCCL's pipeline cuts it in chunks */
    lm_backend *backends[MAX_RANKS] = {0};
    lm_error err = {0};
    for (int r = 0; r < n_ranks; r++)
        CHECK_OK(lm_backend_create_on(kind, one_device ? 0 : r, 1, &backends[r], &err), &err);
    lm_comm_group *group = NULL;
    CHECK_OK(lm_comm_group_create(backends, n_ranks, &group, &err), &err);
    CHECK_MSG(strcmp(lm_comm_group_rank(group, 0)->ops->name, comm_name) == 0, "%d ranks%s: the %s communicator, not %s",
              n_ranks, one_device ? " on one GPU" : "", lm_comm_group_rank(group, 0)->ops->name, comm_name);
    device_job jobs[MAX_RANKS];
    pthread_t threads[MAX_RANKS];
    for (int r = 0; r < n_ranks; r++) {
        jobs[r] = (device_job){.be = backends[r], .comm = lm_comm_group_rank(group, r), .rank = r,
                               .n_ranks = n_ranks, .rounds = 4, .n = n};
        CHECK(pthread_create(&threads[r], NULL, device_rank_main, &jobs[r]) == 0);
    }
    for (int r = 0; r < n_ranks; r++) pthread_join(threads[r], NULL);
    char why[400] = "";
    for (int r = 0; r < n_ranks && !why[0]; r++) {
        device_job *j = &jobs[r];
        if (j->status != LM_OK) {
            snprintf(why, sizeof why, "rank %d: %s", r, j->message);
            break;
        }
        if (j->unequal_rounds) snprintf(why, sizeof why, "rank %d: a later round (a replayed graph) differed", r);
        for (size_t i = 0; i < n && !why[0]; i++) {
            float want = rank_order_sum(n_ranks, i, 21);
            /* 1 or 2 ranks: no addition or one, exact; more: NCCL's order, within rounding */
            bool close = n_ranks <= 2 ? memcmp(&j->reduced[i], &want, sizeof want) == 0
                                      : fabsf(j->reduced[i] - want) <= 1e-5f * (fabsf(want) + 1e-3f) * n_ranks;
            if (!close) snprintf(why, sizeof why, "rank %d: element %zu summed to %.9g, want %.9g", r, i, j->reduced[i], want);
            else if (memcmp(&j->reduced[i], &jobs[0].reduced[i], sizeof want) != 0)
                snprintf(why, sizeof why, "rank %d: element %zu differs from rank 0's", r, i);
            else if (j->doubled[i] != (float)n_ranks * j->reduced[i] && n_ranks <= 2)
                snprintf(why, sizeof why, "rank %d: the second all_reduce gave %.9g at %zu", r, j->doubled[i], i);
        }
        for (int q = 0; q < n_ranks && !why[0]; q++)
            for (size_t i = 0; i < n && !why[0]; i += 97)
                if (j->gathered[(size_t)q * n + i] != value_at(q, i, 21))
                    snprintf(why, sizeof why, "rank %d: gathered rank %d's element %zu wrong", r, q, i);
    }
    for (int r = 0; r < n_ranks; r++) {
        free(jobs[r].reduced);
        free(jobs[r].doubled);
        free(jobs[r].gathered);
    }
    lm_comm_group_destroy(group);
    for (int r = 0; r < n_ranks; r++) lm_backend_destroy(backends[r]);
    CHECK_MSG(!why[0], "%d ranks on %s (%s): %s", n_ranks, kind, comm_name, why);
}

static void test_device_group(void) {
    const char *kind = test_backend_name();
    int devices = lm_backend_device_count(kind);
    if (strcmp(kind, "cuda") != 0 || devices < 1) {
        printf("  skipped: needs LOOM_TEST_BACKEND=cuda and a GPU (%s, %d devices)\n", kind, devices);
        return;
    }
    check_device_group(kind, devices < 4 ? devices : 4, false, "nccl"); /* one GPU: a group of one */
    check_device_group(kind, 2, true, "host");                          /* two ranks on GPU 0: staged */
}

/* Groups refuse ranks of mixed kinds, and host groups work through the
 * same entry point. */
static void test_group_of_backends(void) {
    lm_backend *cpu = NULL, *ref = NULL;
    lm_error err = {0};
    CHECK_OK(lm_backend_create("cpu", 1, &cpu, &err), &err);
    CHECK_OK(lm_backend_create("ref", 1, &ref, &err), &err);
    lm_backend *mixed[2] = {cpu, ref}, *same[2] = {cpu, cpu};
    lm_comm_group *g = NULL;
    lm_status st = lm_comm_group_create(mixed, 2, &g, &err);
    bool refused = st == LM_ERR_INVALID && g == NULL && strstr(err.message, "one kind");
    st = lm_comm_group_create(same, 2, &g, &err);
    bool made = st == LM_OK && lm_comm_group_rank(g, 1) && lm_comm_group_rank(g, 1)->rank == 1 &&
                !lm_comm_group_rank(g, 2) && strcmp(lm_comm_group_rank(g, 0)->ops->name, "host") == 0;
    lm_comm_group_destroy(g);
    lm_backend_destroy(cpu);
    lm_backend_destroy(ref);
    CHECK_MSG(refused, "mixed kinds: '%s'", err.message);
    CHECK(made);
}

int main(void) {
    RUN_TEST(test_device_group);
    RUN_TEST(test_group_of_backends);
    RUN_TEST(test_all_reduce_is_the_rank_order_sum);
    RUN_TEST(test_all_gather_concatenates_in_rank_order);
    RUN_TEST(test_many_collectives_in_a_row);
    RUN_TEST(test_count_mismatch_fails_everywhere);
    RUN_TEST(test_stages_memory_not_on_the_host);
    RUN_TEST(test_group_bounds);
    return test_summary("test_comm");
}
