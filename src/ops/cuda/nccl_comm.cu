// The cuda backend's communicator (ops/comm.h): NCCL, opened at run time
// like cuBLASLt (a process that never splits a model never loads it), one
// rank a GPU, every rank driven by its own thread.  A collective is not
// run when it is called but queued on the rank's stream like a kernel
// (launch.h), so a decode step's all-reduces sit in the step's CUDA graph
// between its kernels; NCCL supports being captured.
//
// Bits: NCCL's sum for 2 ranks is one addition a + b, the same on both
// ranks and whatever the message size.  With more ranks its ring adds in
// an order that depends on where an element falls in the message, so a
// row's sum may differ in the last bits between batch sizes (every rank
// still holds the same result).
//
// NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set before the
// communicators are made (a program that uses it can take a shared host's
// GPUs out of service).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/launch.h" /* first: ops.h with C linkage */
extern "C" {
#include "ops/backend_kinds.h"
#include "ops/comm.h"
}

// The few entry points loom uses, declared here (NCCL's ABI: ncclComm_t is
// a pointer, ncclResult_t / ncclDataType_t / ncclRedOp_t are C enums) so
// that building needs no NCCL headers.
enum { NCCL_SUCCESS = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0 };
typedef int nccl_result;
struct lm_nccl_api {
    void *lib;
    int version;
    nccl_result (*GetVersion)(int *version);
    const char *(*GetErrorString)(nccl_result result);
    nccl_result (*CommInitAll)(void **comms, int n_devices, const int *devices);
    nccl_result (*CommDestroy)(void *comm);
    nccl_result (*CommFinalize)(void *comm);
    nccl_result (*GroupStart)(void);
    nccl_result (*GroupEnd)(void);
    nccl_result (*AllReduce)(const void *send, void *recv, size_t count, int dtype, int op, void *comm,
                             cudaStream_t stream);
    nccl_result (*AllGather)(const void *send, void *recv, size_t count, int dtype, void *comm,
                             cudaStream_t stream);
};

typedef struct {
    lm_comm comm;
    lm_backend *be;
    void *nccl; // ncclComm_t
    const lm_nccl_api *api;
} nccl_rank;

typedef struct {
    lm_nccl_api api;
    int n_ranks;
    nccl_rank ranks[LM_COMM_MAX_RANKS];
} nccl_group;

static lm_status open_nccl(lm_nccl_api *api, lm_error *err) {
    memset(api, 0, sizeof *api);
    const char *named = getenv("LOOM_NCCL_LIBRARY"); // a file, e.g. a Python wheel's libnccl.so.2
    char why[512] = "";
    if (named && named[0]) {
        api->lib = dlopen(named, RTLD_NOW | RTLD_LOCAL);
        if (!api->lib)
            return lm_fail(err, LM_ERR_UNSUPPORTED, "cannot load NCCL from LOOM_NCCL_LIBRARY=%s: %s", named,
                           dlerror());
    } else {
        api->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (!api->lib) snprintf(why, sizeof why, "%s", dlerror());
#ifdef LM_CUDA_LIB_DIR
        if (!api->lib) api->lib = dlopen(LM_CUDA_LIB_DIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#endif
        if (!api->lib)
            return lm_fail(err, LM_ERR_UNSUPPORTED,
                           "tensor parallelism on GPUs needs NCCL (libnccl.so.2: install libnccl2, or name the "
                           "file with LOOM_NCCL_LIBRARY): %s", why);
    }
    const char *missing = NULL;
#define RESOLVE(field, symbol)                                                    \
    do {                                                                          \
        api->field = (decltype(api->field))dlsym(api->lib, #symbol);              \
        if (!api->field && !missing) missing = #symbol;                           \
    } while (0)
    RESOLVE(GetVersion, ncclGetVersion);
    RESOLVE(GetErrorString, ncclGetErrorString);
    RESOLVE(CommInitAll, ncclCommInitAll);
    RESOLVE(CommDestroy, ncclCommDestroy);
    RESOLVE(CommFinalize, ncclCommFinalize);
    RESOLVE(GroupStart, ncclGroupStart);
    RESOLVE(GroupEnd, ncclGroupEnd);
    RESOLVE(AllReduce, ncclAllReduce);
    RESOLVE(AllGather, ncclAllGather);
#undef RESOLVE
    if (missing) {
        dlclose(api->lib);
        api->lib = NULL;
        return lm_fail(err, LM_ERR_UNSUPPORTED, "the NCCL library has no %s", missing);
    }
    if (api->GetVersion(&api->version) != NCCL_SUCCESS) api->version = 0;
    return LM_OK;
}

static nccl_rank *rank_of(lm_comm *c) { return (nccl_rank *)c; }

// The rank's own backend, or a sentence: a collective queues on the stream
// of the backend whose GPU the communicator was made for.
static lm_status check_backend(lm_comm *c, lm_backend *be, const char *what, lm_error *err) {
    if (be != rank_of(c)->be)
        return lm_fail(err, LM_ERR_INVALID, "%s: rank %d's communicator takes its own backend's memory only", what,
                       c->rank);
    return LM_OK;
}

// Queues one collective on the rank's stream.
static lm_status enqueue(lm_comm *c, lm_backend *be, int32_t kind, const void *send, void *recv, size_t n,
                         const char *what, lm_error *err) {
    lm_status st = check_backend(c, be, what, err);
    if (st != LM_OK || n == 0) return st;
    nccl_rank *r = rank_of(c);
    lm_cuda_collective_call call;
    memset(&call, 0, sizeof call);
    call.api = r->api;
    call.comm = r->nccl;
    call.send = send;
    call.recv = recv;
    call.count = n;
    call.kind = kind;
    lm_cuda_enqueue_collective(be, kind == LM_CUDA_ALL_REDUCE_SUM ? "nccl all_reduce_sum" : "nccl all_gather", &call);
    return LM_OK;
}

static lm_status nccl_all_reduce_sum(lm_comm *c, lm_backend *be, lm_mem x, size_t n, lm_error *err) {
    return enqueue(c, be, LM_CUDA_ALL_REDUCE_SUM, lm_cuda_ptr(x), lm_cuda_ptr(x), n, "all_reduce_sum", err);
}

static lm_status nccl_all_gather(lm_comm *c, lm_backend *be, lm_mem out, lm_mem x, size_t n, lm_error *err) {
    return enqueue(c, be, LM_CUDA_ALL_GATHER, lm_cuda_ptr(x), lm_cuda_ptr(out), n, "all_gather", err);
}

static const lm_comm_ops nccl_comm_ops = {
    "nccl",
    nccl_all_reduce_sum,
    nccl_all_gather,
};

// Runs a queued collective on the stream (or into the graph being
// captured); queue.cu calls it in the queue's order.
cudaError_t lm_cuda_collective_run(lm_backend *be, const lm_cuda_collective_call *call) {
    const lm_nccl_api *api = call->api;
    cudaStream_t stream = lm_cuda_stream(be);
    nccl_result r = call->kind == LM_CUDA_ALL_REDUCE_SUM
                        ? api->AllReduce(call->send, call->recv, (size_t)call->count, NCCL_FLOAT32, NCCL_SUM,
                                         call->comm, stream)
                        : api->AllGather(call->send, call->recv, (size_t)call->count, NCCL_FLOAT32, call->comm,
                                         stream);
    if (r == NCCL_SUCCESS) return cudaSuccess;
    char what[64];
    snprintf(what, sizeof what, "nccl: %s", api->GetErrorString(r));
    lm_cuda_note_error(be, cudaErrorUnknown, what); // the first error is kept: this sentence wins
    return cudaErrorUnknown;
}

extern "C" lm_status lm_cuda_comm_group_create(lm_backend *const *ranks, int n_ranks, lm_comm **comms, void **out,
                                                lm_error *err) {
    *out = NULL;
    if (n_ranks < 1 || n_ranks > LM_COMM_MAX_RANKS)
        return lm_fail(err, LM_ERR_INVALID, "a communicator of %d ranks (1..%d)", n_ranks, LM_COMM_MAX_RANKS);
    int devices[LM_COMM_MAX_RANKS];
    for (int r = 0; r < n_ranks; r++) {
        devices[r] = lm_cuda_state_of(ranks[r])->device;
        for (int q = 0; q < r; q++)
            if (devices[q] == devices[r])
                return lm_fail(err, LM_ERR_INVALID,
                               "ranks %d and %d are both on GPU %d: NCCL takes one rank a GPU", q, r, devices[r]);
    }
    nccl_group *g = (nccl_group *)calloc(1, sizeof *g);
    if (!g) return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    lm_status st = open_nccl(&g->api, err);
    if (st != LM_OK) {
        free(g);
        return st;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 1); // NVLink multicast off, always (see the top of this file)
    void *nccl[LM_COMM_MAX_RANKS] = {0};
    int current = 0;
    cudaGetDevice(&current);
    nccl_result r = g->api.CommInitAll(nccl, n_ranks, devices);
    cudaSetDevice(current); // NCCL moved this thread from GPU to GPU
    if (r != NCCL_SUCCESS) {
        st = lm_fail(err, LM_ERR_INTERNAL, "NCCL %d.%d.%d could not join %d GPUs: %s", g->api.version / 10000,
                     g->api.version / 100 % 100, g->api.version % 100, n_ranks, g->api.GetErrorString(r));
        dlclose(g->api.lib);
        free(g);
        return st;
    }
    g->n_ranks = n_ranks;
    for (int k = 0; k < n_ranks; k++) {
        g->ranks[k].comm.ops = &nccl_comm_ops;
        g->ranks[k].comm.rank = k;
        g->ranks[k].comm.n_ranks = n_ranks;
        g->ranks[k].be = ranks[k];
        g->ranks[k].nccl = nccl[k];
        g->ranks[k].api = &g->api;
        comms[k] = &g->ranks[k].comm;
    }
    *out = g;
    return LM_OK;
}

extern "C" void lm_cuda_comm_group_destroy(void *group) {
    nccl_group *g = (nccl_group *)group;
    if (!g) return;
    // Every rank's pending work is launched before any is waited for: a
    // rank's collective finishes only when its peers' has started.
    for (int k = 0; k < g->n_ranks; k++) lm_cuda_flush(g->ranks[k].be);
    for (int k = 0; k < g->n_ranks; k++) {
        cudaSetDevice(lm_cuda_state_of(g->ranks[k].be)->device);
        cudaStreamSynchronize(lm_cuda_stream(g->ranks[k].be));
    }
    // The captured graphs hold NCCL's plans of their collectives, which a
    // communicator waits for when it is destroyed: they go first.
    for (int k = 0; k < g->n_ranks; k++) lm_cuda_drop_graphs(g->ranks[k].be);
    // Finalizing is collective: one thread finalizing every rank's
    // communicator does it inside a group (alone, the first would wait for
    // the others forever); destroying is then local.
    g->api.GroupStart();
    for (int k = 0; k < g->n_ranks; k++) g->api.CommFinalize(g->ranks[k].nccl);
    g->api.GroupEnd();
    for (int k = 0; k < g->n_ranks; k++) g->api.CommDestroy(g->ranks[k].nccl);
    if (g->api.lib) dlclose(g->api.lib);
    free(g);
}
