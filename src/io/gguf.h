/* Reading GGUF files (llama.cpp's model format, versions 2 and 3): a header
 * (magic "GGUF", version, tensor and key/value counts), typed metadata
 * key/values (scalars, strings, arrays of either), tensor infos (name, ggml
 * dims, ggml type, offset in the data section), padding to
 * general.alignment, the data section.  All integers are little-endian.
 *
 * The file is untrusted: every count, length and offset is checked against
 * the bytes left in the file (with overflow checks) before anything is
 * allocated for it, so a hostile header costs at most the file's own size.
 * A malformed file gets an LM_ERR_FORMAT naming the file and the field.
 *
 * Tensors are lm_tensors: shape in row-major order (ggml's dims reversed:
 * ggml's ne[0], the contiguous one, is the last), dtype the lm_dtype of the
 * ggml type.  A ggml type that loom has no dtype for (Q2_K, the IQ types,
 * ...) still has its size checked; such a tensor carries LM_DTYPE_COUNT and
 * its ggml type id, and whoever uses it refuses it by name
 * (lm_gguf_ggml_type_name).  A type id ggml does not define is an error at
 * open, naming the tensor and the id: its size, hence the file's layout,
 * is unknown. */
#ifndef LOOM_IO_GGUF_H
#define LOOM_IO_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "io/safetensors.h" /* lm_tensor, lm_load_mode */

/* Metadata value types, numbered as the file numbers them. */
typedef enum {
    LM_GGUF_UINT8 = 0,
    LM_GGUF_INT8 = 1,
    LM_GGUF_UINT16 = 2,
    LM_GGUF_INT16 = 3,
    LM_GGUF_UINT32 = 4,
    LM_GGUF_INT32 = 5,
    LM_GGUF_FLOAT32 = 6,
    LM_GGUF_BOOL = 7,
    LM_GGUF_STRING = 8,
    LM_GGUF_ARRAY = 9,
    LM_GGUF_UINT64 = 10,
    LM_GGUF_INT64 = 11,
    LM_GGUF_FLOAT64 = 12,
    LM_GGUF_TYPE_COUNT
} lm_gguf_type;

/* Bounds on untrusted headers (beyond "fits in the file"). */
#define LM_GGUF_MAX_TENSORS ((uint64_t)1 << 20)
#define LM_GGUF_MAX_KV ((uint64_t)1 << 16)
#define LM_GGUF_MAX_KEY_BYTES 65535
#define LM_GGUF_MAX_DIMS 4 /* ggml's GGML_MAX_DIMS */
#define LM_GGUF_DEFAULT_ALIGNMENT 32
#define LM_GGUF_MAX_ALIGNMENT ((uint32_t)1 << 16)

typedef struct lm_gguf lm_gguf;

/* One metadata entry.  Strings are copied out of the file and
 * NUL-terminated (their length is kept: a string may hold a NUL). */
typedef struct {
    const char *key;
    lm_gguf_type type;
    lm_gguf_type elem_type; /* arrays: the elements' type (never ARRAY: nested arrays are refused) */
    uint64_t count;         /* arrays: the elements; 1 otherwise */
    union {
        uint64_t u;
        int64_t i;
        double f;
        bool b;
    } scalar; /* numeric and bool scalars, widened */
    const char *str; /* STRING */
    size_t str_len;
    const char **strs; /* arrays of strings: count of them */
    size_t *str_lens;
    const uint8_t *raw; /* arrays of numbers: the first element's bytes in the file image */
} lm_gguf_kv;

typedef struct {
    lm_tensor tensor;   /* dtype LM_DTYPE_COUNT when loom has none for the ggml type */
    uint32_t ggml_type; /* the file's type id */
    uint64_t offset;    /* in the data section */
} lm_gguf_tensor;

/* Whether `path` names a GGUF model, and which file: a regular file whose
 * name ends in ".gguf" or that starts with "GGUF", or a folder without
 * config.json or tokenizer.json that holds exactly one ".gguf" file.  *found false (LM_OK) for
 * anything else; a folder of several .gguf files (and no config.json) is an
 * error naming two of them. */
lm_status lm_gguf_locate(const char *path, bool *found, char *file, size_t size, lm_error *err);

lm_status lm_gguf_parse_memory(const void *bytes, size_t n, const char *name, lm_gguf **out,
                               lm_error *err);
lm_status lm_gguf_open(const char *path, lm_load_mode mode, lm_gguf **out, lm_error *err);
void lm_gguf_close(lm_gguf *g);

uint32_t lm_gguf_version(const lm_gguf *g);
uint32_t lm_gguf_alignment(const lm_gguf *g);
const char *lm_gguf_name(const lm_gguf *g);
size_t lm_gguf_file_size(const lm_gguf *g);

/* Metadata in file order; lookup by key (NULL if absent). */
size_t lm_gguf_kv_count(const lm_gguf *g);
const lm_gguf_kv *lm_gguf_kv_at(const lm_gguf *g, size_t i);
const lm_gguf_kv *lm_gguf_find_kv(const lm_gguf *g, const char *key);

/* Typed lookups.  LM_OK with the value; LM_ERR_FORMAT naming the key when
 * it is absent (and required) or of another type; an absent optional key
 * leaves *out as it was and returns LM_OK.  Integers of any integer type
 * are accepted when the value fits the target. */
lm_status lm_gguf_get_string(const lm_gguf *g, const char *key, bool required, const char **out,
                             lm_error *err);
lm_status lm_gguf_get_u32(const lm_gguf *g, const char *key, bool required, uint32_t *out, lm_error *err);
lm_status lm_gguf_get_i32(const lm_gguf *g, const char *key, bool required, int32_t *out, lm_error *err);
lm_status lm_gguf_get_u64(const lm_gguf *g, const char *key, bool required, uint64_t *out, lm_error *err);
lm_status lm_gguf_get_f32(const lm_gguf *g, const char *key, bool required, float *out, lm_error *err);
lm_status lm_gguf_get_bool(const lm_gguf *g, const char *key, bool required, bool *out, lm_error *err);
/* Arrays: the kv when it is an array of strings / integers / floats (NULL
 * and LM_ERR_FORMAT naming the key otherwise, or when required and absent;
 * NULL and LM_OK when optional and absent). */
lm_status lm_gguf_get_array(const lm_gguf *g, const char *key, bool required, lm_gguf_kv const **out,
                            lm_error *err);
/* Element i of an array of integers (any integer type) or floats, widened. */
int64_t lm_gguf_array_int(const lm_gguf_kv *kv, uint64_t i);
double lm_gguf_array_float(const lm_gguf_kv *kv, uint64_t i);
bool lm_gguf_is_int_type(lm_gguf_type t);
bool lm_gguf_is_float_type(lm_gguf_type t);
const char *lm_gguf_type_name(lm_gguf_type t);

/* Tensors, sorted by name; lookup by name (NULL if absent). */
size_t lm_gguf_tensor_count(const lm_gguf *g);
const lm_gguf_tensor *lm_gguf_tensor_at(const lm_gguf *g, size_t i);
const lm_gguf_tensor *lm_gguf_find_tensor(const lm_gguf *g, const char *name);

/* "Q4_K", "IQ2_XS", ...; "type 99" style for an id ggml does not define
 * (written into buf). */
const char *lm_gguf_ggml_type_name(uint32_t ggml_type, char *buf, size_t size);

#endif
