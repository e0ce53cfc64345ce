// The cuda backend: device memory, the stream, and the table of ops.  The
// kernels live in the other files of this folder.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/launch.h"

static lm_cuda_state *state_of(lm_backend *be) { return (lm_cuda_state *)be->impl; }

extern "C" void lm_cuda_note_error(lm_backend *be, cudaError_t e, const char *what) {
    lm_cuda_state *s = state_of(be);
    if (e != cudaSuccess && s->first_error == cudaSuccess) {
        s->first_error = e;
        snprintf(s->first_error_what, sizeof s->first_error_what, "%s", what);
    }
}

static lm_status take_error(lm_backend *be, lm_error *err) {
    lm_cuda_state *s = state_of(be);
    cudaError_t e = s->first_error;
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess) return LM_OK;
    lm_status st = lm_fail(err, e == cudaErrorMemoryAllocation ? LM_ERR_NOMEM : LM_ERR_INTERNAL,
                           "cuda: %s%s%s", cudaGetErrorString(e), s->first_error_what[0] ? " in " : "",
                           s->first_error_what);
    s->first_error = cudaSuccess;
    s->first_error_what[0] = '\0';
    return st;
}

extern "C" lm_status lm_cuda_alloc(lm_backend *be, size_t bytes, const char *what, lm_buffer **out,
                            lm_error *err) {
    *out = NULL;
    lm_cuda_use_device(state_of(be));
    lm_buffer *b = (lm_buffer *)calloc(1, sizeof *b);
    if (!b) return lm_fail(err, LM_ERR_NOMEM, "out of host memory for a buffer handle (%s)", what);
    cudaError_t e = cudaMalloc(&b->device, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        free(b);
        return lm_fail(err, LM_ERR_NOMEM, "cuda: cannot allocate %zu bytes of device memory for %s: %s",
                       bytes, what, cudaGetErrorString(e));
    }
    b->size = bytes;
    *out = b;
    return LM_OK;
}

extern "C" lm_status lm_cuda_import(lm_backend *be, const void *data, size_t bytes, const char *what,
                             lm_buffer **out, lm_error *err) {
    lm_status st = lm_cuda_alloc(be, bytes, what, out, err);
    if (st != LM_OK) return st;
    cudaError_t e = bytes ? cudaMemcpy((*out)->device, data, bytes, cudaMemcpyHostToDevice) : cudaSuccess;
    if (e != cudaSuccess) {
        cudaFree((*out)->device);
        free(*out);
        *out = NULL;
        return lm_fail(err, LM_ERR_INTERNAL, "cuda: uploading %s: %s", what, cudaGetErrorString(e));
    }
    return LM_OK;
}

extern "C" void lm_cuda_free(lm_backend *be, lm_buffer *b) {
    if (!b) return;
    lm_cuda_flush(be); /* pending kernels may still use it */
    lm_cuda_use_device(state_of(be));
    cudaFree(b->device);
    free(b);
}

extern "C" size_t lm_cuda_buffer_size(const lm_buffer *b) { return b->size; }

extern "C" void lm_cuda_upload(lm_backend *be, lm_mem dst, const void *src, size_t bytes) {
    if (!bytes) return;
    lm_cuda_flush(be); /* the queued work runs first, in order */
    lm_cuda_use_device(state_of(be));
    // From pageable memory the copy is staged before it returns, so the
    // caller may reuse src at once (ops.h).
    lm_cuda_note_error(be, lm_cuda_host_copy(be, lm_cuda_ptr(dst), src, bytes, cudaMemcpyHostToDevice), "upload");
}

extern "C" lm_status lm_cuda_download(lm_backend *be, void *dst, lm_mem src, size_t bytes, lm_error *err) {
    lm_cuda_flush(be);
    lm_cuda_use_device(state_of(be));
    if (bytes)
        lm_cuda_note_error(be, lm_cuda_host_copy(be, dst, lm_cuda_ptr(src), bytes, cudaMemcpyDeviceToHost),
                           "download");
    lm_cuda_note_error(be, lm_cuda_wait_stream(be), "download");
    return take_error(be, err);
}

extern "C" void lm_cuda_copy(lm_backend *be, lm_mem dst, lm_mem src, size_t bytes) {
    lm_cuda_enqueue_copy(be, "copy", lm_cuda_ptr(dst), lm_cuda_ptr(src), bytes);
}

extern "C" void lm_cuda_fill(lm_backend *be, lm_mem dst, uint8_t byte, size_t bytes) {
    lm_cuda_enqueue_fill(be, "fill", lm_cuda_ptr(dst), byte, bytes);
}

extern "C" lm_status lm_cuda_synchronize(lm_backend *be, lm_error *err) {
    lm_cuda_flush(be);
    lm_cuda_use_device(state_of(be));
    lm_cuda_note_error(be, lm_cuda_wait_stream(be), "synchronize");
    return take_error(be, err);
}


extern "C" lm_status lm_cuda_memory_info(lm_backend *be, size_t *free_bytes, size_t *total_bytes,
                                          lm_error *err) {
    lm_status st = lm_cuda_synchronize(be, err); /* frees of the queue's past are done */
    if (st != LM_OK) return st;
    lm_cuda_use_device(state_of(be));
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess) return lm_fail(err, LM_ERR_INTERNAL, "cuda: reading the memory in use: %s", cudaGetErrorString(e));
    return LM_OK;
}

extern "C" int lm_cuda_backend_device(const lm_backend *be) { return ((const lm_cuda_state *)be->impl)->device; }

extern "C" int lm_cuda_device_count(void) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}

extern "C" lm_status lm_backend_cuda_create(int device, lm_backend **out, lm_error *err) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        int driver = 0, runtime = 0;
        cudaDriverGetVersion(&driver);
        cudaRuntimeGetVersion(&runtime);
        if (e == cudaErrorInsufficientDriver && driver == 0)
            return lm_fail(err, LM_ERR_UNSUPPORTED,
                           "--device cuda: no NVIDIA driver here (libcuda.so.1 not found; this loom's CUDA runtime "
                           "is %d.%d): install the NVIDIA driver, or run on the cpu",
                           runtime / 1000, runtime % 1000 / 10);
        if (e == cudaErrorInsufficientDriver)
            return lm_fail(err, LM_ERR_UNSUPPORTED,
                           "--device cuda: the NVIDIA driver is too old: it supports CUDA %d.%d, this loom's runtime "
                           "is %d.%d; update the driver",
                           driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        return lm_fail(err, LM_ERR_UNSUPPORTED,
                       "--device cuda: no NVIDIA GPU found (%s; driver CUDA %d.%d, runtime %d.%d; "
                       "CUDA_VISIBLE_DEVICES=%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "no devices", driver / 1000, driver % 1000 / 10,
                       runtime / 1000, runtime % 1000 / 10,
                       getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
    }
    if (device < 0 || device >= count)
        return lm_fail(err, LM_ERR_INVALID, "cuda: no device %d (this machine has %d)", device, count);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return lm_fail(err, LM_ERR_INTERNAL, "cuda: device %d: %s", device, cudaGetErrorString(e));
    lm_backend *be = (lm_backend *)calloc(1, sizeof *be);
    lm_cuda_state *s = (lm_cuda_state *)calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        return lm_fail(err, LM_ERR_NOMEM, "out of memory");
    }
    be->ops = &lm_cuda_backend_ops;
    be->impl = s;
    s->device = device;
    lm_status st = lm_cuda_state_init(s, err);
    if (st != LM_OK) {
        lm_cuda_backend_destroy(be);
        return st;
    }
    *out = be;
    return LM_OK;
}

extern "C" void lm_cuda_backend_destroy(lm_backend *be) {
    if (!be) return;
    lm_cuda_state *s = state_of(be);
    if (s) {
        lm_cuda_use_device(s);
        if (s->queue && s->stream) {
            lm_cuda_flush(be);
            cudaStreamSynchronize(s->stream);
        }
        lm_cuda_state_free(s);
        free(s);
    }
    free(be);
}
