/* Reading safetensors files: an 8-byte little-endian header length N, N bytes
 * of JSON describing each tensor ({"name": {"dtype", "shape", "data_offsets"}}
 * plus an optional "__metadata__" object of strings), then the data section.
 * The file is untrusted: every size and offset is checked before use, and a
 * malformed file gets an LM_ERR_FORMAT naming the file and the problem. */
#ifndef LOOM_IO_SAFETENSORS_H
#define LOOM_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/progress.h"

/* LM_LOAD_READ reads the file into ordinary 64-byte aligned memory (the
 * default: decoding from mapped weights measured 3.6x slower on these
 * machines); LM_LOAD_MMAP maps it read-only. */
typedef enum { LM_LOAD_READ, LM_LOAD_MMAP } lm_load_mode;

#define LM_TENSOR_MAX_DIMS 8

typedef struct {
    const char *name;
    lm_dtype dtype;
    int n_dims;
    int64_t shape[LM_TENSOR_MAX_DIMS];
    int64_t n_elements;
    size_t n_bytes;
    const void *data; /* aligned to the element size (copied when the file's offset is not) */
    const char *file; /* the file name the tensor came from, as given to open/parse */
} lm_tensor;

typedef struct lm_safetensors lm_safetensors;

/* Limits on untrusted headers. */
#define LM_SAFETENSORS_MAX_HEADER_BYTES ((uint64_t)100 * 1000 * 1000)
#define LM_SAFETENSORS_MAX_TENSORS ((size_t)1 << 20)

/* Parses a file image already in memory.  `bytes` must stay alive and
 * unchanged until lm_safetensors_close; tensor data points into it (except
 * tensors whose data is misaligned, which are copied).  `name` is used in
 * error messages and as lm_tensor.file. */
lm_status lm_safetensors_parse_memory(const void *bytes, size_t n, const char *name,
                                      lm_safetensors **out, lm_error *err);

/* Reads or maps the file at `path` and parses it. */
lm_status lm_safetensors_open(const char *path, lm_load_mode mode, lm_safetensors **out,
                              lm_error *err);
/* The same, adding the bytes it reads (LM_LOAD_READ) to progress's
 * "reading" phase as they come. */
lm_status lm_safetensors_open_with(const char *path, lm_load_mode mode, const lm_progress *progress,
                                   lm_safetensors **out, lm_error *err);

void lm_safetensors_close(lm_safetensors *st);

/* Tensors, sorted by name. */
size_t lm_safetensors_count(const lm_safetensors *st);
const lm_tensor *lm_safetensors_at(const lm_safetensors *st, size_t i);
/* NULL if absent (binary search). */
const lm_tensor *lm_safetensors_find(const lm_safetensors *st, const char *name);

/* A "__metadata__" string value, or NULL if absent. */
const char *lm_safetensors_metadata(const lm_safetensors *st, const char *key);

/* The name given to open/parse. */
const char *lm_safetensors_name(const lm_safetensors *st);
/* Size of the whole file image in bytes. */
size_t lm_safetensors_file_size(const lm_safetensors *st);

#endif
