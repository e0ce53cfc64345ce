/* How the cuda backend's ops reach the stream: not launched at once but
 * appended to the backend's queue of pending work (queue.cu), which is run
 * at the next point where the host waits or hands the stream to another
 * API (download, synchronize, upload, free, a cuBLASLt call).
 *
 * Why: a decode step issues hundreds of small kernels, and launching each
 * costs the host a few microseconds while the GPU waits.  A run of pending
 * work that is identical, launch for launch (kernel, grid, block, shared
 * memory and every argument byte), to one seen before is replayed as a
 * CUDA graph captured from it: one launch instead of hundreds.  Equality is
 * checked byte for byte, never trusted to a hash, so a replay does exactly
 * what launching the same kernels would.  Nothing outside this folder
 * knows: models and the engine see ops.h only.
 *
 * Every kernel launch of the backend goes through lm_cuda_launch; device
 * to device copies and fills through lm_cuda_enqueue_copy / _fill. */
#ifndef LOOM_OPS_CUDA_LAUNCH_H
#define LOOM_OPS_CUDA_LAUNCH_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "ops/cuda/cuda_state.h"

/* One cuBLASLt product y = x·aᵀ, or y += x·aᵀ with `accumulate`
 * (matmul.cu), planned when queued: the algorithm cuBLASLt's heuristic
 * chose travels in `algo`, so running the record later (or capturing it)
 * repeats exactly that call.  Plain bytes: zero it before filling. */
typedef struct {
    const void *a, *b;
    float *y;
    int64_t m, n, k;
    int64_t ldy;        /* y's leading dimension; 0: m */
    int32_t type;       /* cudaDataType_t of a and b */
    int32_t accumulate; /* 1: y is also C, beta 1 */
    uint64_t algo[8]; /* cublasLtMatmulAlgo_t */
} lm_cuda_blas_call;
cudaError_t lm_cuda_blas_run(lm_backend *be, const lm_cuda_blas_call *call);

/* One NCCL collective on the rank's stream (nccl_comm.cu): plain bytes
 * like the blas call, zeroed before filling. */
enum { LM_CUDA_ALL_REDUCE_SUM = 1, LM_CUDA_ALL_GATHER = 2 };
typedef struct {
    const struct lm_nccl_api *api; /* the opened library */
    void *comm;                    /* ncclComm_t */
    const void *send;
    void *recv;
    uint64_t count; /* floats sent by each rank */
    int32_t kind;
    int32_t unused;
} lm_cuda_collective_call;
cudaError_t lm_cuda_collective_run(lm_backend *be, const lm_cuda_collective_call *call);

/* The queue's entry points (queue.cu). */
void lm_cuda_enqueue_blas(lm_backend *be, const char *what, const lm_cuda_blas_call *call);
void lm_cuda_enqueue_kernel(lm_backend *be, const char *what, const void *kernel, dim3 grid, dim3 block,
                            size_t shared, void **args, const size_t *sizes, int n_args);
void lm_cuda_enqueue_collective(lm_backend *be, const char *what, const lm_cuda_collective_call *call);
void lm_cuda_enqueue_copy(lm_backend *be, const char *what, void *dst, const void *src, size_t bytes);
void lm_cuda_enqueue_fill(lm_backend *be, const char *what, void *dst, int byte, size_t bytes);
/* Runs the pending work on the stream (replayed or captured as a graph
 * when it repeats); after it, the stream holds every op queued so far. */
void lm_cuda_flush(lm_backend *be);
/* cudaMemcpyAsync between the host and the device on the backend's
 * stream, and cudaStreamSynchronize of it; their time counted for
 * LOOM_CUDA_GRAPH_STATS. */
cudaError_t lm_cuda_host_copy(lm_backend *be, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t lm_cuda_wait_stream(lm_backend *be);
/* Destroys the graphs captured so far (before a communicator whose
 * collectives they hold). */
void lm_cuda_drop_graphs(lm_backend *be);

namespace lm_cuda_detail {
template <typename Tuple, size_t... I>
inline void enqueue_tuple(lm_backend *be, const char *what, const void *kernel, dim3 grid, dim3 block,
                          size_t shared, Tuple &values, std::index_sequence<I...>) {
    void *args[sizeof...(I) > 0 ? sizeof...(I) : 1] = {(void *)&std::get<I>(values)...};
    size_t sizes[sizeof...(I) > 0 ? sizeof...(I) : 1] = {sizeof(std::get<I>(values))...};
    lm_cuda_enqueue_kernel(be, what, kernel, grid, block, shared, args, sizes, (int)sizeof...(I));
}

template <typename... Params, typename... Args>
inline void launch(lm_backend *be, const char *what, void (*kernel)(Params...), dim3 grid, dim3 block,
                   size_t shared, Args... args) {
    static_assert(sizeof...(Params) == sizeof...(Args), "lm_cuda_launch: argument count");
    static_assert((std::is_trivially_copyable<Params>::value && ...), "lm_cuda_launch: plain arguments only");
    // A struct argument must be zeroed before it is filled: its padding and
    // unused entries are bytes the queue compares.
    std::tuple<Params...> values(static_cast<Params>(args)...);
    enqueue_tuple(be, what, (const void *)kernel, grid, block, shared, values,
                  std::index_sequence_for<Params...>{});
}
} // namespace lm_cuda_detail

/* kernel<<<grid, block, shared>>>(args...), queued.  The arguments are
 * converted to the kernel's parameter types first (as a launch would), so
 * the bytes recorded are the bytes the kernel receives.
 *
 * Every kernel is launched early (Hopper's programmatic dependent launch):
 * its blocks may be placed while the kernel before it still runs, so a
 * decode step's hundreds of small kernels do not each wait for the one
 * before to drain and the next to be set up.  So every kernel must call
 * lm_cuda_wait_for_prior() — most as their first statement, through
 * lm_cuda_let_next_then_wait() — before it reads anything earlier
 * work writes or writes anything it reads; the products load their weights
 * first (nothing earlier writes them).  That one kernel's end implies the
 * end of all before it holds only if each kernel waits in some block:
 * tests/test_cuda_kernels_wait.sh checks that every kernel of this folder
 * calls the wait.  LOOM_CUDA_PDL=0 at creation launches every kernel
 * plainly (the wait is then a no-op), as does LOOM_CUDA_PROFILE. */
template <typename... Params, typename... Args>
inline void lm_cuda_launch(lm_backend *be, const char *what, void (*kernel)(Params...), dim3 grid, dim3 block,
                           size_t shared, Args... args) {
    lm_cuda_detail::launch(be, what, kernel, grid, block, shared, args...);
}

#ifdef __CUDACC__
/* Waits until every kernel queued before this one has finished and its
 * writes are visible (a no-op for a kernel launched plainly). */
__device__ __forceinline__ void lm_cuda_wait_for_prior(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }
/* Lets a kernel launched early after this one be placed now (it still
 * waits for this one's end in lm_cuda_wait_for_prior). */
__device__ __forceinline__ void lm_cuda_let_next_start(void) { asm volatile("griddepcontrol.launch_dependents;"); }
/* The first statement of a kernel with nothing to do before its inputs
 * are ready: let the next kernel be placed, then wait for the kernels
 * before.  Letting first means the product after a small kernel is placed
 * (and loads its weights) while the kernel before that one still ends,
 * not only once this one starts its work; it waits for this one's end in
 * turn.  No kernel is placed before every block of the one before it has
 * been (a block lets only once it runs), so a chain of placed kernels
 * always ends in one that runs: no deadlock. */
__device__ __forceinline__ void lm_cuda_let_next_then_wait(void) {
    lm_cuda_let_next_start();
    lm_cuda_wait_for_prior();
}

/* A thread's first NORM_W_HELD elements of a row's weight (i = tid, tid +
 * blockDim, ...), for loading before the wait for the kernel before: no
 * kernel writes a weight, so the load overlaps that kernel's tail instead
 * of following the row's sums (the norms, attention_prepare, the MoE
 * route's bias).  A row block of lm_cuda_row_threads threads has up to 4
 * elements a thread (dim <= 4096); wider rows read the rest when they use
 * it (weight_at). */
constexpr int NORM_W_HELD = 4; /* a constant the unroll pragmas can name */
struct held_weight {
    float w[NORM_W_HELD];
};
__device__ static inline held_weight hold_weight(const float *w, int dim) {
    held_weight h;
#pragma unroll
    for (int k = 0; k < NORM_W_HELD; k++) {
        int i = threadIdx.x + k * blockDim.x;
        h.w[k] = i < dim ? w[i] : 0.0f;
    }
    return h;
}
/* w[i] for the thread's k-th element i (loops over i unrolled by
 * NORM_W_HELD, so k is a constant and h stays in registers). */
__device__ static inline float weight_at(const held_weight &h, const float *w, int k, int i) {
    return k < NORM_W_HELD ? h.w[k] : w[i];
}
#endif

#endif
