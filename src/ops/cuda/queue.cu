// The backend's queue of pending work, replayed as CUDA graphs when a run
// of it repeats (launch.h says why), and the per-kernel profile
// (LOOM_CUDA_PROFILE=1).
//
// The pending work is kept as one flat record of bytes: for each op a
// fixed header (what it is, the kernel, grid, block, shared memory, the
// copy's or fill's addresses) followed by the argument sizes and the
// argument bytes, padding zeroed.  Two runs of work are the same exactly
// when their records are equal bytes, which is what the graph cache
// compares (a 64-bit hash only finds the candidate).
//
// Policy: a record seen once runs as plain launches and its hash is
// remembered; the second time it is captured into a graph (the capture
// replays the launches into the graph, then the graph is launched); from
// then on it is one cudaGraphLaunch.  A decode step at a batch size seen
// before is such a record; a prefill chunk of a length seen once is not
// and pays no capture.  The cache holds GRAPH_CACHE entries, least
// recently used out first.  LOOM_CUDA_GRAPHS=0 at creation turns graphs
// off (for measurements); a failed capture falls back to plain launches.
//
// A run is cut every CHUNK_OPS ops (LOOM_CUDA_GRAPH_CHUNK=N at creation;
// 0: only at the host's waits): the GPU starts on a step's first ops while
// the host still queues, compares and launches the rest.  Uncut, the host
// queued, hashed and launched a whole step before the GPU began it: a 9B
// decode step's 350 kernels cost about 0.55 ms of host time (most of it
// in cudaGraphLaunch, which grows with the graph's nodes) ahead of 4.4 ms
// of GPU time, on the critical path of every batch-1 token.  The cuts
// fall at fixed op counts, so the runs of a repeated step repeat too.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/clock.h"
#include "ops/cuda/launch.h"

#define GRAPH_CACHE 256 /* a decode step is several runs (CHUNK_OPS) */
#define SEEN_RING 256
#define CHUNK_OPS 48
#define MIN_GRAPH_OPS 4                /* shorter runs are cheaper launched */
#define MAX_RECORD ((size_t)256 << 20) /* a run beyond this is flushed first */
#define MAX_ARGS 64
#define PROFILE_NAMES 256

enum { OP_KERNEL = 1, OP_COPY = 2, OP_FILL = 3, OP_BLAS = 4, OP_COLLECTIVE = 5 };

struct op_header {
    uint32_t kind, n_args;
    const void *kernel;
    const char *what;
    uint32_t grid[3], block[3];
    uint64_t shared;
    void *dst;
    const void *src;
    uint64_t bytes;
    int64_t byte;
    uint64_t record_bytes; /* this op's header, sizes and arguments */
    uint64_t early;        /* a kernel that may start before the one before ends */
};

struct graph_entry {
    uint64_t hash, last_used;
    unsigned char *record;
    size_t record_bytes;
    cudaGraphExec_t exec;
};

struct profile_row {
    const char *what;
    long calls;
    double ms;
};

struct lm_cuda_queue {
    unsigned char *record;
    size_t used, capacity;
    int n_ops;
    bool graphs, profile, early_launch;
    int chunk_ops; /* a run is flushed once it holds this many ops (0: never) */
    graph_entry cache[GRAPH_CACHE];
    uint64_t clock;
    uint64_t seen[SEEN_RING];
    size_t seen_bytes[SEEN_RING];
    int seen_next;
    long replays, captures, plain_runs, capture_failures;
    // LOOM_CUDA_GRAPH_STATS: where the host's time goes between flushes
    // (queuing the next run, the flush itself, waiting for the stream)
    bool stats;
    double last_flush_end, queuing_s, flush_s, hash_s, wait_s;
    long waits, ops_flushed;
    size_t largest_record;
    profile_row rows[PROFILE_NAMES];
    int n_rows;
    cudaEvent_t *events;
    int n_events;
};

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

// FNV-1a over 8-byte words (a record is a multiple of 16 bytes, 16-byte
// aligned) of the first 64 KB, then over every 8th word.  The hash only
// finds the candidate: the cache compares every byte, and a false "seen
// before" costs one capture (the first 64 KB hold the first layer's
// launches, whose grids and sizes differ with the step's tokens).  The
// GPU idles while it runs: a byte at a time over a 9B decode step's
// 182 KB record took about 0.3 ms, every word of a 35B-A3B step's 900 KB
// 0.16 ms (H100 host).
#define HASH_WHOLE ((size_t)64 << 10)
static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    size_t i = 0;
    for (; i + 8 <= n; i += i < HASH_WHOLE ? 8 : 64) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h ^ n;
}

extern "C" lm_status lm_cuda_queue_init(lm_cuda_state *s, lm_error *err) {
    lm_cuda_queue *q = (lm_cuda_queue *)calloc(1, sizeof *q);
    if (!q) return lm_fail(err, LM_ERR_NOMEM, "out of memory for the cuda queue");
    const char *graphs = getenv("LOOM_CUDA_GRAPHS"), *profile = getenv("LOOM_CUDA_PROFILE");
    q->profile = profile && strcmp(profile, "0") != 0;
    q->graphs = !(graphs && strcmp(graphs, "0") == 0) && !q->profile; // the profile times each kernel
    const char *pdl = getenv("LOOM_CUDA_PDL");
    q->early_launch = !(pdl && strcmp(pdl, "0") == 0) && !q->profile;
    q->stats = q->profile || getenv("LOOM_CUDA_GRAPH_STATS");
    const char *chunk = getenv("LOOM_CUDA_GRAPH_CHUNK");
    q->chunk_ops = CHUNK_OPS;
    if (chunk && *chunk) {
        char *end = NULL;
        long n = strtol(chunk, &end, 10);
        if (*end || n < 0 || n > 1000000) {
            free(q);
            return lm_fail(err, LM_ERR_INVALID, "LOOM_CUDA_GRAPH_CHUNK: '%s' is not an op count from 0 to 1000000",
                           chunk);
        }
        q->chunk_ops = (int)n;
    }
    s->queue = q;
    return LM_OK;
}

static void print_profile(lm_cuda_queue *q) {
    double total = 0;
    for (int i = 0; i < q->n_rows; i++)
        total += q->rows[i].ms;
    // Largest first (a few hundred rows at most: a simple selection).
    fprintf(stderr, "cuda profile: %.3f ms of kernels in all\n", total);
    fprintf(stderr, "  %10s %8s %10s %6s  %s\n", "ms", "calls", "us/call", "share", "op");
    bool *done = (bool *)calloc((size_t)q->n_rows + 1, 1);
    if (!done) return;
    for (int k = 0; k < q->n_rows; k++) {
        int best = -1;
        for (int i = 0; i < q->n_rows; i++)
            if (!done[i] && (best < 0 || q->rows[i].ms > q->rows[best].ms)) best = i;
        done[best] = true;
        profile_row *r = &q->rows[best];
        fprintf(stderr, "  %10.3f %8ld %10.2f %5.1f%%  %s\n", r->ms, r->calls,
                1000.0 * r->ms / (double)r->calls, total > 0 ? 100.0 * r->ms / total : 0.0, r->what);
    }
    free(done);
}

extern "C" void lm_cuda_queue_free(lm_cuda_state *s) {
    lm_cuda_queue *q = s->queue;
    if (!q) return;
    if (q->profile) print_profile(q);
    if (q->stats) {
        long runs = q->replays + q->plain_runs;
        fprintf(stderr, "cuda graphs: %ld replays, %ld captures (%ld failed), %ld runs of plain launches\n",
                q->replays, q->captures, q->capture_failures, q->plain_runs);
        if (runs > 0)
            fprintf(stderr,
                    "cuda host: per run %.1f us queuing (since the last flush), %.1f us flushing (%.1f us of it "
                    "hashing), largest record %zu bytes; %.1f us per copy to or from the host or wait for the stream (%ld)\n",
                    1e6 * q->queuing_s / (double)runs, 1e6 * q->flush_s / (double)runs,
                    1e6 * q->hash_s / (double)runs, q->largest_record,
                    q->waits ? 1e6 * q->wait_s / (double)q->waits : 0.0, q->waits);
        if (q->waits > 0) // a decode step ends in one wait: about a step's ops
            fprintf(stderr, "cuda ops: %ld in all, %.1f per wait for the stream\n", q->ops_flushed,
                    (double)q->ops_flushed / (double)q->waits);
    }
    for (int i = 0; i < GRAPH_CACHE; i++) {
        if (q->cache[i].exec) cudaGraphExecDestroy(q->cache[i].exec);
        free(q->cache[i].record);
    }
    for (int i = 0; i < q->n_events; i++)
        cudaEventDestroy(q->events[i]);
    free(q->events);
    free(q->record);
    free(q);
    s->queue = NULL;
}

// Destroys the captured graphs (the queue itself stays usable: a run seen
// again is captured anew).  A graph that holds NCCL collectives holds
// their communicator's resources, which it frees only when the graph goes.
void lm_cuda_drop_graphs(lm_backend *be) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    lm_cuda_queue *q = s->queue;
    if (!q) return;
    lm_cuda_use_device(s);
    for (int i = 0; i < GRAPH_CACHE; i++) {
        if (q->cache[i].exec) cudaGraphExecDestroy(q->cache[i].exec);
        free(q->cache[i].record);
        memset(&q->cache[i], 0, sizeof q->cache[i]);
    }
}

// Room for `bytes` more at the end of the record; flushes first when the
// record would pass MAX_RECORD or cannot grow (so appending never fails).
static unsigned char *reserve(lm_backend *be, size_t bytes) {
    lm_cuda_fusion_flush(be); /* an op the window does not know: the window's ops go first */
    lm_cuda_queue *q = lm_cuda_state_of(be)->queue;
    if (q->used + bytes > q->capacity) {
        size_t want = q->capacity ? q->capacity : (size_t)64 << 10;
        while (want < q->used + bytes)
            want *= 2;
        unsigned char *grown = want <= MAX_RECORD ? (unsigned char *)realloc(q->record, want) : NULL;
        if (grown) {
            q->record = grown;
            q->capacity = want;
        } else {
            lm_cuda_flush(be);
            if (bytes > q->capacity) {
                unsigned char *fresh = (unsigned char *)realloc(q->record, bytes);
                if (!fresh) return NULL;
                q->record = fresh;
                q->capacity = bytes;
            }
        }
    }
    unsigned char *at = q->record + q->used;
    memset(at, 0, bytes);
    return at;
}

static void append(lm_backend *be, const op_header *h, void **args, const size_t *sizes) {
    lm_cuda_queue *q = lm_cuda_state_of(be)->queue;
    size_t bytes = h->record_bytes;
    unsigned char *at = reserve(be, bytes);
    if (!at) {
        lm_cuda_note_error(be, cudaErrorMemoryAllocation, h->what);
        return;
    }
    memcpy(at, h, sizeof *h);
    size_t off = round16(sizeof *h);
    uint32_t *size_table = (uint32_t *)(at + off);
    for (uint32_t i = 0; i < h->n_args; i++)
        size_table[i] = (uint32_t)sizes[i];
    off += round16(sizeof(uint32_t) * h->n_args);
    for (uint32_t i = 0; i < h->n_args; i++) {
        memcpy(at + off, args[i], sizes[i]);
        off += round16(sizes[i]);
    }
    q->used += bytes;
    q->n_ops++;
    if (q->chunk_ops > 0 && q->n_ops >= q->chunk_ops) lm_cuda_flush(be); /* the GPU starts on it now */
}

void lm_cuda_enqueue_kernel(lm_backend *be, const char *what, const void *kernel, dim3 grid, dim3 block,
                            size_t shared, void **args, const size_t *sizes, int n_args) {
    if (n_args < 0 || n_args > MAX_ARGS) {
        lm_cuda_note_error(be, cudaErrorInvalidValue, what);
        return;
    }
    op_header h;
    memset(&h, 0, sizeof h);
    h.kind = OP_KERNEL;
    h.n_args = (uint32_t)n_args;
    h.kernel = kernel;
    h.what = what;
    h.grid[0] = grid.x, h.grid[1] = grid.y, h.grid[2] = grid.z;
    h.block[0] = block.x, h.block[1] = block.y, h.block[2] = block.z;
    h.shared = shared;
    h.early = lm_cuda_state_of(be)->queue->early_launch; /* every kernel (launch.h) */
    size_t bytes = round16(sizeof h) + round16(sizeof(uint32_t) * (size_t)n_args);
    for (int i = 0; i < n_args; i++)
        bytes += round16(sizes[i]);
    h.record_bytes = bytes;
    append(be, &h, args, sizes);
}

// A copy or a fill: a header alone (no arguments).
static void enqueue_memory_op(lm_backend *be, uint32_t kind, const char *what, void *dst, const void *src, int byte,
                              size_t bytes) {
    if (!bytes) return;
    op_header h;
    memset(&h, 0, sizeof h);
    h.kind = kind;
    h.what = what;
    h.dst = dst;
    h.src = src;
    h.byte = byte;
    h.bytes = bytes;
    h.record_bytes = round16(sizeof h);
    append(be, &h, NULL, NULL);
}

void lm_cuda_enqueue_copy(lm_backend *be, const char *what, void *dst, const void *src, size_t bytes) {
    enqueue_memory_op(be, OP_COPY, what, dst, src, 0, bytes);
}

void lm_cuda_enqueue_fill(lm_backend *be, const char *what, void *dst, int byte, size_t bytes) {
    enqueue_memory_op(be, OP_FILL, what, dst, NULL, byte, bytes);
}

// An op whose one argument is a plain struct the runner reads (a cuBLASLt
// product, an NCCL collective).
static void enqueue_call(lm_backend *be, uint32_t kind, const char *what, const void *call, size_t size) {
    op_header h;
    memset(&h, 0, sizeof h);
    h.kind = kind;
    h.n_args = 1;
    h.what = what;
    void *arg = (void *)call;
    h.record_bytes = round16(sizeof h) + round16(sizeof(uint32_t)) + round16(size);
    append(be, &h, &arg, &size);
}

void lm_cuda_enqueue_blas(lm_backend *be, const char *what, const lm_cuda_blas_call *call) {
    enqueue_call(be, OP_BLAS, what, call, sizeof *call);
}

void lm_cuda_enqueue_collective(lm_backend *be, const char *what, const lm_cuda_collective_call *call) {
    enqueue_call(be, OP_COLLECTIVE, what, call, sizeof *call);
}

static profile_row *profile_row_of(lm_cuda_queue *q, const char *what) {
    for (int i = 0; i < q->n_rows; i++)
        if (q->rows[i].what == what || strcmp(q->rows[i].what, what) == 0) return &q->rows[i];
    if (q->n_rows == PROFILE_NAMES) return &q->rows[PROFILE_NAMES - 1]; /* lumped in the last */
    profile_row *r = &q->rows[q->n_rows++];
    r->what = what;
    return r;
}

static bool events_at_least(lm_cuda_queue *q, int n) {
    if (q->n_events >= n) return true;
    cudaEvent_t *grown = (cudaEvent_t *)realloc(q->events, sizeof(cudaEvent_t) * (size_t)n);
    if (!grown) return false;
    q->events = grown;
    while (q->n_events < n) {
        if (cudaEventCreate(&q->events[q->n_events]) != cudaSuccess) return false;
        q->n_events++;
    }
    return true;
}

// Launches the record's ops on the stream, in order (into a capture when
// one is open).  Returns the first error; with `note`, errors are kept for
// the next synchronize as a direct launch's would be.
static cudaError_t launch_record(lm_backend *be, const unsigned char *record, size_t used, bool note,
                                 bool timed) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    lm_cuda_queue *q = s->queue;
    cudaError_t first = cudaSuccess;
    int op = 0;
    timed = timed && events_at_least(q, 2 * q->n_ops + 2);
    for (size_t at = 0; at < used; op++) {
        const op_header *h = (const op_header *)(record + at);
        cudaError_t e = cudaSuccess;
        if (timed) cudaEventRecord(q->events[2 * op], s->stream);
        void *args[MAX_ARGS];
        const uint32_t *sizes = (const uint32_t *)(record + at + round16(sizeof *h));
        size_t off = at + round16(sizeof *h) + round16(sizeof(uint32_t) * h->n_args);
        for (uint32_t i = 0; i < h->n_args; i++) {
            args[i] = (void *)(record + off);
            off += round16(sizes[i]);
        }
        if (h->kind == OP_BLAS) {
            e = lm_cuda_blas_run(be, (const lm_cuda_blas_call *)args[0]);
        } else if (h->kind == OP_COLLECTIVE) {
            e = lm_cuda_collective_run(be, (const lm_cuda_collective_call *)args[0]);
        } else if (h->kind == OP_KERNEL && h->early) {
            cudaLaunchConfig_t config = {};
            cudaLaunchAttribute attr[1] = {};
            attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr[0].val.programmaticStreamSerializationAllowed = 1;
            config.gridDim = dim3(h->grid[0], h->grid[1], h->grid[2]);
            config.blockDim = dim3(h->block[0], h->block[1], h->block[2]);
            config.dynamicSmemBytes = (size_t)h->shared;
            config.stream = s->stream;
            config.attrs = attr;
            config.numAttrs = 1;
            e = cudaLaunchKernelExC(&config, h->kernel, args);
        } else if (h->kind == OP_KERNEL) {
            e = cudaLaunchKernel(h->kernel, dim3(h->grid[0], h->grid[1], h->grid[2]),
                                 dim3(h->block[0], h->block[1], h->block[2]), args, (size_t)h->shared,
                                 s->stream);
        } else if (h->kind == OP_COPY) {
            e = cudaMemcpyAsync(h->dst, h->src, (size_t)h->bytes, cudaMemcpyDeviceToDevice, s->stream);
        } else {
            e = cudaMemsetAsync(h->dst, (int)h->byte, (size_t)h->bytes, s->stream);
        }
        if (timed) cudaEventRecord(q->events[2 * op + 1], s->stream);
        if (e != cudaSuccess) {
            if (first == cudaSuccess) first = e;
            if (note) lm_cuda_note_error(be, e, h->what);
            (void)cudaGetLastError();
        }
        at += (size_t)h->record_bytes;
    }
    if (timed) {
        cudaStreamSynchronize(s->stream);
        op = 0;
        for (size_t at = 0; at < used; op++) {
            const op_header *h = (const op_header *)(record + at);
            float ms = 0;
            if (cudaEventElapsedTime(&ms, q->events[2 * op], q->events[2 * op + 1]) == cudaSuccess) {
                profile_row *r = profile_row_of(q, h->what);
                r->calls++;
                r->ms += ms;
            }
            at += (size_t)h->record_bytes;
        }
    }
    return first;
}

static graph_entry *cached(lm_cuda_queue *q, uint64_t hash) {
    for (int i = 0; i < GRAPH_CACHE; i++) {
        graph_entry *g = &q->cache[i];
        if (g->exec && g->hash == hash && g->record_bytes == q->used &&
            memcmp(g->record, q->record, q->used) == 0)
            return g;
    }
    return NULL;
}

static bool seen_before(lm_cuda_queue *q, uint64_t hash) {
    for (int i = 0; i < SEEN_RING; i++)
        if (q->seen[i] == hash && q->seen_bytes[i] == q->used) return true;
    q->seen[q->seen_next] = hash;
    q->seen_bytes[q->seen_next] = q->used;
    q->seen_next = (q->seen_next + 1) % SEEN_RING;
    return false;
}

// Captures the pending record into a graph and stores it (evicting the
// least recently used).  NULL if anything fails: the caller launches plainly.
static graph_entry *capture(lm_backend *be, uint64_t hash) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    lm_cuda_queue *q = s->queue;
    unsigned char *copy = (unsigned char *)malloc(q->used);
    if (!copy) return NULL;
    memcpy(copy, q->record, q->used);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) goto fail;
    {
        cudaError_t launched = launch_record(be, q->record, q->used, false, false);
        cudaError_t ended = cudaStreamEndCapture(s->stream, &graph);
        if (launched != cudaSuccess || ended != cudaSuccess || !graph) goto fail;
    }
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) goto fail;
    cudaGraphDestroy(graph);
    {
        graph_entry *slot = &q->cache[0];
        for (int i = 0; i < GRAPH_CACHE; i++) {
            if (!q->cache[i].exec) {
                slot = &q->cache[i];
                break;
            }
            if (q->cache[i].last_used < slot->last_used) slot = &q->cache[i];
        }
        if (slot->exec) cudaGraphExecDestroy(slot->exec);
        free(slot->record);
        slot->hash = hash;
        slot->record = copy;
        slot->record_bytes = q->used;
        slot->exec = exec;
        q->captures++;
        return slot;
    }
fail:
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    free(copy);
    q->capture_failures++;
    return NULL;
}

// The stats' count of host time blocked on the stream, from t0 on
// (blocked time is not queuing).
static void count_blocked(lm_cuda_queue *q, double t0) {
    double t = lm_monotonic_seconds() - t0;
    q->wait_s += t;
    q->waits++;
    if (q->last_flush_end > 0) q->last_flush_end += t; // 0: no flush yet, nothing queued to count from
}

// The backend's upload and download copies (a copy into pageable host
// memory blocks until the stream reaches it) and its waits, timed for the
// stats.
cudaError_t lm_cuda_host_copy(lm_backend *be, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    lm_cuda_queue *q = s->queue;
    double t0 = q && q->stats ? lm_monotonic_seconds() : 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, s->stream);
    if (q && q->stats) count_blocked(q, t0);
    return e;
}

cudaError_t lm_cuda_wait_stream(lm_backend *be) {
    lm_cuda_state *s = lm_cuda_state_of(be);
    lm_cuda_queue *q = s->queue;
    double t0 = q && q->stats ? lm_monotonic_seconds() : 0;
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (q && q->stats) count_blocked(q, t0);
    return e;
}

void lm_cuda_flush(lm_backend *be) {
    lm_cuda_fusion_flush(be); /* a host wait or another API: the window is lowered first */
    lm_cuda_state *s = lm_cuda_state_of(be);
    lm_cuda_queue *q = s->queue;
    if (!q || q->used == 0) return;
    double t0 = q->stats ? lm_monotonic_seconds() : 0;
    if (q->stats) {
        if (q->last_flush_end > 0) q->queuing_s += t0 - q->last_flush_end;
        if (q->used > q->largest_record) q->largest_record = q->used;
        q->ops_flushed += q->n_ops;
    }
    lm_cuda_use_device(s);
    graph_entry *g = NULL;
    if (q->graphs && q->n_ops >= MIN_GRAPH_OPS) {
        uint64_t hash = hash_bytes(q->record, q->used);
        if (q->stats) q->hash_s += lm_monotonic_seconds() - t0;
        g = cached(q, hash);
        if (!g && seen_before(q, hash)) g = capture(be, hash);
        if (g) {
            g->last_used = ++q->clock;
            cudaError_t e = cudaGraphLaunch(g->exec, s->stream);
            if (e == cudaSuccess) {
                q->replays++;
            } else {
                (void)cudaGetLastError();
                g = NULL; // launched plainly below
            }
        }
    }
    if (!g) {
        launch_record(be, q->record, q->used, true, q->profile);
        q->plain_runs++;
    }
    q->used = 0;
    q->n_ops = 0;
    if (q->stats) {
        q->last_flush_end = lm_monotonic_seconds();
        q->flush_s += q->last_flush_end - t0;
    }
}
