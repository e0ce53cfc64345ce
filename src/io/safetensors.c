#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/big_alloc.h"
#include "base/progress.h"
#include "io/json_file.h"

struct lm_safetensors {
    char *name;
    const uint8_t *bytes; /* the file image */
    size_t size;
    void *read_buffer; /* LM_LOAD_READ: the image, owned */
    void *mapping;     /* LM_LOAD_MMAP: the image, mapped */
    lm_tensor *tensors; /* sorted by name */
    size_t count;
    char *names;   /* every tensor name, NUL-terminated, back to back */
    void **copies; /* aligned copies of misaligned tensors (count slots, lazily made) */
    size_t n_copies;
    cJSON *metadata; /* the "__metadata__" object, or NULL */
};

/* JSON numbers are doubles: integers up to 2^53 are exact, which covers any
 * real file size. */
#define MAX_JSON_INTEGER ((uint64_t)1 << 53)
/* Tensor names are shown at most this long in error messages. */
#define NAME_SHOWN 200
#define DATA_ALIGNMENT 64

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static bool json_to_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= (double)MAX_JSON_INTEGER)) return false; /* also rejects NaN */
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return false;
    *out = u;
    return true;
}

/* ---- one tensor entry of the header ---- */

typedef struct {
    const char *file;     /* for errors */
    const uint8_t *data;  /* start of the data section */
    uint64_t data_offset; /* of the data section in the file */
    uint64_t data_size;
    uint64_t file_size;
} data_section;

static lm_status parse_dtype(const data_section *ds, const char *name, const cJSON *entry,
                             lm_tensor *t, lm_error *err) {
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!dtype)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' has no \"dtype\"", ds->file,
                       NAME_SHOWN, name);
    if (!cJSON_IsString(dtype))
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s': \"dtype\" must be a string",
                       ds->file, NAME_SHOWN, name);
    t->dtype = lm_dtype_from_name(dtype->valuestring);
    if (t->dtype == LM_DTYPE_COUNT)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' has unknown dtype '%.32s'", ds->file,
                       NAME_SHOWN, name, dtype->valuestring);
    return LM_OK;
}

static lm_status parse_shape(const data_section *ds, const char *name, const cJSON *entry,
                             lm_tensor *t, lm_error *err) {
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    if (!shape)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' has no \"shape\"", ds->file,
                       NAME_SHOWN, name);
    if (!cJSON_IsArray(shape))
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s': \"shape\" must be an array",
                       ds->file, NAME_SHOWN, name);
    int rank = cJSON_GetArraySize(shape);
    if (rank > LM_TENSOR_MAX_DIMS)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' has %d dimensions, at most %d allowed",
                       ds->file, NAME_SHOWN, name, rank, LM_TENSOR_MAX_DIMS);
    uint64_t elements = 1;
    int d = 0;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, d++) {
        uint64_t n;
        if (!json_to_uint(dim, &n))
            return lm_fail(err, LM_ERR_FORMAT,
                           "%s: tensor '%.*s': shape[%d] must be a non-negative integer "
                           "(at most 2^53)",
                           ds->file, NAME_SHOWN, name, d);
        if (__builtin_mul_overflow(elements, n, &elements) || elements > MAX_JSON_INTEGER)
            return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s': shape has too many elements",
                           ds->file, NAME_SHOWN, name);
        t->shape[d] = (int64_t)n;
    }
    t->n_dims = rank;
    t->n_elements = (int64_t)elements;
    uint64_t bytes;
    if (__builtin_mul_overflow(elements, (uint64_t)lm_dtype_size(t->dtype), &bytes) ||
        bytes > SIZE_MAX)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s': shape has too many bytes",
                       ds->file, NAME_SHOWN, name);
    t->n_bytes = (size_t)bytes;
    return LM_OK;
}

/* Sets *begin, *end from "data_offsets", checking they lie in the file and
 * match the tensor's size. */
static lm_status parse_offsets(const data_section *ds, const char *name, const cJSON *entry,
                               const lm_tensor *t, uint64_t *begin, uint64_t *end,
                               lm_error *err) {
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!offsets)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' has no \"data_offsets\"", ds->file,
                       NAME_SHOWN, name);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_to_uint(offsets->child, begin) || !json_to_uint(offsets->child->next, end))
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: tensor '%.*s': \"data_offsets\" must be two non-negative integers",
                       ds->file, NAME_SHOWN, name);
    if (*begin > *end)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: tensor '%.*s': data_offsets [%llu, %llu) end before they begin",
                       ds->file, NAME_SHOWN, name, (unsigned long long)*begin,
                       (unsigned long long)*end);
    if (*end > ds->data_size)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: tensor '%.*s' data [%llu, %llu) runs past the end of the file "
                       "(size %llu)",
                       ds->file, NAME_SHOWN, name, (unsigned long long)(ds->data_offset + *begin),
                       (unsigned long long)(ds->data_offset + *end),
                       (unsigned long long)ds->file_size);
    if (*end - *begin != t->n_bytes)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: tensor '%.*s' has %llu bytes of data but %s with %lld elements "
                       "needs %zu",
                       ds->file, NAME_SHOWN, name, (unsigned long long)(*end - *begin),
                       lm_dtype_name(t->dtype), (long long)t->n_elements, t->n_bytes);
    return LM_OK;
}

/* Points t->data at the tensor's bytes, or at an aligned copy of them when
 * the file places them at an address not aligned for the element type. */
static lm_status place_data(lm_safetensors *st, const data_section *ds, uint64_t begin,
                            lm_tensor *t, lm_error *err) {
    const uint8_t *p = ds->data + begin;
    if ((uintptr_t)p % lm_dtype_size(t->dtype) == 0) {
        t->data = p;
        return LM_OK;
    }
    if (!st->copies && !(st->copies = calloc(st->count, sizeof *st->copies)))
        return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", ds->file);
    void *copy = aligned_alloc(DATA_ALIGNMENT, round_up(t->n_bytes, DATA_ALIGNMENT));
    if (!copy)
        return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory copying tensor '%.*s' (%zu bytes)",
                       ds->file, NAME_SHOWN, t->name, t->n_bytes);
    memcpy(copy, p, t->n_bytes);
    st->copies[st->n_copies++] = copy;
    t->data = copy;
    return LM_OK;
}

static lm_status parse_tensor(lm_safetensors *st, const data_section *ds, const cJSON *entry,
                              lm_tensor *t, lm_error *err) {
    const char *name = entry->string;
    if (!cJSON_IsObject(entry))
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s': entry must be an object", ds->file,
                       NAME_SHOWN, name);
    lm_status s = parse_dtype(ds, name, entry, t, err);
    if (s == LM_OK) s = parse_shape(ds, name, entry, t, err);
    uint64_t begin = 0, end = 0;
    if (s == LM_OK) s = parse_offsets(ds, name, entry, t, &begin, &end, err);
    if (s == LM_OK) s = place_data(st, ds, begin, t, err);
    return s;
}

/* ---- the header as a whole ---- */

static lm_status take_metadata(lm_safetensors *st, cJSON *root, cJSON *item, lm_error *err) {
    if (st->metadata)
        return lm_fail(err, LM_ERR_FORMAT, "%s: \"__metadata__\" appears twice", st->name);
    if (!cJSON_IsObject(item))
        return lm_fail(err, LM_ERR_FORMAT, "%s: \"__metadata__\" must be an object", st->name);
    for (const cJSON *v = item->child; v; v = v->next)
        if (!cJSON_IsString(v))
            return lm_fail(err, LM_ERR_FORMAT, "%s: \"__metadata__\" value '%.*s' must be a string",
                           st->name, NAME_SHOWN, v->string);
    st->metadata = cJSON_DetachItemViaPointer(root, item);
    return LM_OK;
}

static int compare_tensor_names(const void *a, const void *b) {
    return strcmp(((const lm_tensor *)a)->name, ((const lm_tensor *)b)->name);
}

/* Counts the tensor entries and the bytes their names need. */
static lm_status count_entries(lm_safetensors *st, const cJSON *root, size_t *names_bytes,
                               lm_error *err) {
    size_t count = 0, bytes = 0;
    for (const cJSON *item = root->child; item; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) continue;
        if (++count > LM_SAFETENSORS_MAX_TENSORS)
            return lm_fail(err, LM_ERR_FORMAT, "%s: more than %zu tensors", st->name,
                           LM_SAFETENSORS_MAX_TENSORS);
        bytes += strlen(item->string) + 1; /* bounded by the header size */
    }
    st->count = count;
    *names_bytes = bytes;
    return LM_OK;
}

static lm_status parse_entries(lm_safetensors *st, const data_section *ds, cJSON *root,
                               lm_error *err) {
    size_t names_bytes = 0;
    lm_status s = count_entries(st, root, &names_bytes, err);
    if (s != LM_OK) return s;
    st->tensors = calloc(st->count ? st->count : 1, sizeof *st->tensors);
    st->names = malloc(names_bytes ? names_bytes : 1);
    if (!st->tensors || !st->names) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", st->name);
    size_t i = 0;
    char *name = st->names;
    cJSON *next;
    for (cJSON *item = root->child; item; item = next) {
        next = item->next; /* take_metadata detaches item */
        if (strcmp(item->string, "__metadata__") == 0) {
            s = take_metadata(st, root, item, err);
        } else {
            lm_tensor *t = &st->tensors[i++];
            size_t len = strlen(item->string) + 1;
            memcpy(name, item->string, len);
            t->name = name;
            t->file = st->name;
            name += len;
            s = parse_tensor(st, ds, item, t, err);
        }
        if (s != LM_OK) return s;
    }
    return LM_OK;
}

static lm_status check_unique_names(const lm_safetensors *st, lm_error *err) {
    for (size_t i = 1; i < st->count; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' appears twice", st->name,
                           NAME_SHOWN, st->tensors[i].name);
    return LM_OK;
}

/* The header is not one: the file is something else, or cut short. */
#define NOT_SAFETENSORS "not a safetensors file (or a damaged one: download it again)"

/* The file's first 8 bytes: the header's length, little-endian. */
static uint64_t header_length(const uint8_t b[8]) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return n;
}

/* Reads the header length and finds the data section. */
static lm_status locate_sections(const lm_safetensors *st, data_section *ds, lm_error *err) {
    if (st->size < 8)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: " NOT_SAFETENSORS ": %zu bytes, too short for the 8-byte header length", st->name,
                       st->size);
    uint64_t header_len = header_length(st->bytes);
    if (header_len > LM_SAFETENSORS_MAX_HEADER_BYTES)
        return lm_fail(err, LM_ERR_FORMAT, "%s: " NOT_SAFETENSORS ": header length %llu is over the limit of %llu bytes",
                       st->name, (unsigned long long)header_len,
                       (unsigned long long)LM_SAFETENSORS_MAX_HEADER_BYTES);
    if (header_len > st->size - 8)
        return lm_fail(err, LM_ERR_FORMAT,
                       "%s: " NOT_SAFETENSORS ": header length %llu runs past the end of the file (size %zu)",
                       st->name,
                       (unsigned long long)header_len, st->size);
    ds->file = st->name;
    ds->data_offset = 8 + header_len;
    ds->data = st->bytes + ds->data_offset;
    ds->data_size = st->size - ds->data_offset;
    ds->file_size = st->size;
    return LM_OK;
}

static lm_status parse_image(lm_safetensors *st, lm_error *err) {
    data_section ds = {0};
    lm_status s = locate_sections(st, &ds, err);
    if (s != LM_OK) return s;
    char source[300];
    snprintf(source, sizeof source, "%s: " NOT_SAFETENSORS ": header", st->name);
    cJSON *root;
    s = lm_json_parse((const char *)st->bytes + 8, ds.data_offset - 8, source, &root, err);
    if (s != LM_OK) return s;
    if (!cJSON_IsObject(root))
        s = lm_fail(err, LM_ERR_FORMAT, "%s: " NOT_SAFETENSORS ": header is not a JSON object", st->name);
    if (s == LM_OK) s = parse_entries(st, &ds, root, err);
    cJSON_Delete(root);
    if (s != LM_OK) return s;
    qsort(st->tensors, st->count, sizeof *st->tensors, compare_tensor_names);
    return check_unique_names(st, err);
}

static lm_safetensors *new_safetensors(const char *name) {
    lm_safetensors *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->name = strdup(name);
    if (!st->name) {
        free(st);
        return NULL;
    }
    return st;
}

lm_status lm_safetensors_parse_memory(const void *bytes, size_t n, const char *name,
                                      lm_safetensors **out, lm_error *err) {
    *out = NULL;
    lm_safetensors *st = new_safetensors(name);
    if (!st) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", name);
    st->bytes = bytes;
    st->size = n;
    lm_status s = parse_image(st, err);
    if (s != LM_OK) {
        lm_safetensors_close(st);
        return s;
    }
    *out = st;
    return LM_OK;
}

/* ---- files ---- */

/* Where the file's data section starts: 8 bytes of header length, then the
 * header; 0 when the file is too short to say (parse_image reports it). */
static uint64_t data_section_start(int fd, size_t size) {
    uint8_t b[8];
    if (size < 8 || pread(fd, b, 8, 0) != 8) return 0;
    uint64_t header_len = header_length(b);
    return header_len <= size - 8 ? 8 + header_len : 0;
}

/* Reads all of fd into a buffer, at `*shift` bytes (0-63) past its
 * 64-byte aligned start so that the data section lands at a multiple of 64
 * bytes: a tensor whose offset in the section is one too (as every tensor
 * of loom's own and most converters' files) is then aligned for 64-byte
 * vector loads.  The header's length is rarely a multiple of 64, and rows
 * read across two cache lines made the cpu's bf16 products about 1.3x
 * slower (docs/PERF.md). */
static lm_status read_whole_file(int fd, const char *path, size_t size, const lm_progress *progress,
                                 void **out, size_t *shift, lm_error *err) {
    *shift = (DATA_ALIGNMENT - data_section_start(fd, size) % DATA_ALIGNMENT) % DATA_ALIGNMENT;
    uint8_t *base = lm_big_alloc(size + *shift ? size + *shift : 1); /* DATA_ALIGNMENT-aligned at least */
    if (!base) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
    uint8_t *buf = base + *shift;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    size_t done = 0;
    while (done < size) {
        /* 64 MiB reads: large enough for the disk, small enough for a
         * progress line that moves. */
        size_t chunk = size - done < ((size_t)64 << 20) ? size - done : (size_t)64 << 20;
        ssize_t got = pread(fd, buf + done, chunk, (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            free(base);
            return lm_fail(err, LM_ERR_IO, "%s: read failed at byte %zu of %zu: %s", path, done,
                           size, got < 0 ? strerror(errno) : "unexpected end of file");
        }
        done += (size_t)got;
        lm_progress_add(progress, LM_PROGRESS_READING, (uint64_t)got, 0);
    }
    *out = base;
    return LM_OK;
}

static lm_status load_image(lm_safetensors *st, lm_load_mode mode, const lm_progress *progress, lm_error *err) {
    int fd = open(st->name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lm_fail(err, LM_ERR_IO, "%s: cannot open: %s", st->name, strerror(errno));
    struct stat info;
    lm_status s = LM_OK;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        s = lm_fail(err, LM_ERR_IO, "%s: not a regular file", st->name);
    } else if ((uint64_t)info.st_size > SIZE_MAX) {
        s = lm_fail(err, LM_ERR_IO, "%s: file too large", st->name);
    } else if (mode == LM_LOAD_MMAP && info.st_size > 0) {
        st->size = (size_t)info.st_size;
        void *map = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            s = lm_fail(err, LM_ERR_IO, "%s: mmap failed: %s", st->name, strerror(errno));
        else
            st->mapping = map;
        st->bytes = st->mapping;
    } else {
        st->size = (size_t)info.st_size;
        size_t shift = 0;
        s = read_whole_file(fd, st->name, st->size, progress, &st->read_buffer, &shift, err);
        st->bytes = (const uint8_t *)st->read_buffer + shift;
    }
    close(fd);
    return s;
}

lm_status lm_safetensors_open(const char *path, lm_load_mode mode, lm_safetensors **out,
                              lm_error *err) {
    return lm_safetensors_open_with(path, mode, NULL, out, err);
}

lm_status lm_safetensors_open_with(const char *path, lm_load_mode mode, const lm_progress *progress,
                                   lm_safetensors **out, lm_error *err) {
    *out = NULL;
    if (mode != LM_LOAD_READ && mode != LM_LOAD_MMAP)
        return lm_fail(err, LM_ERR_INVALID, "%s: unknown load mode %d", path, (int)mode);
    lm_safetensors *st = new_safetensors(path);
    if (!st) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", path);
    lm_status s = load_image(st, mode, progress, err);
    if (s == LM_OK) s = parse_image(st, err);
    if (s != LM_OK) {
        lm_safetensors_close(st);
        return s;
    }
    *out = st;
    return LM_OK;
}

void lm_safetensors_close(lm_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_copies; i++) free(st->copies[i]);
    free(st->copies);
    if (st->mapping) munmap(st->mapping, st->size);
    free(st->read_buffer);
    cJSON_Delete(st->metadata);
    free(st->tensors);
    free(st->names);
    free(st->name);
    free(st);
}

/* ---- lookups ---- */

size_t lm_safetensors_count(const lm_safetensors *st) { return st->count; }

const lm_tensor *lm_safetensors_at(const lm_safetensors *st, size_t i) {
    return i < st->count ? &st->tensors[i] : NULL;
}

static int compare_name_to_tensor(const void *key, const void *element) {
    return strcmp((const char *)key, ((const lm_tensor *)element)->name);
}

const lm_tensor *lm_safetensors_find(const lm_safetensors *st, const char *name) {
    if (!st->count) return NULL;
    return bsearch(name, st->tensors, st->count, sizeof *st->tensors, compare_name_to_tensor);
}

const char *lm_safetensors_metadata(const lm_safetensors *st, const char *key) {
    const cJSON *v = st->metadata ? cJSON_GetObjectItemCaseSensitive(st->metadata, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

const char *lm_safetensors_name(const lm_safetensors *st) { return st->name; }

size_t lm_safetensors_file_size(const lm_safetensors *st) { return st->size; }
