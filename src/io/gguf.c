#include "io/gguf.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/big_alloc.h"

/* Keys and tensor names are shown at most this long in error messages. */
#define NAME_SHOWN 120
#define GGUF_MAGIC "GGUF"

struct lm_gguf {
    char *name;
    const uint8_t *bytes; /* the file image */
    size_t size;
    void *read_buffer; /* LM_LOAD_READ: the image, owned */
    void *mapping;     /* LM_LOAD_MMAP: the image, mapped */
    uint32_t version, alignment;
    lm_gguf_kv *kvs; /* file order */
    size_t n_kv;
    const lm_gguf_kv **by_key; /* the same, sorted by key */
    lm_gguf_tensor *tensors; /* sorted by name */
    size_t n_tensors;
    char *arena; /* every string (keys, values, names), NUL-terminated, back to back */
    size_t arena_used, arena_cap;
    void **blocks; /* string-array tables, owned */
    size_t n_blocks;
};

/* ---- ggml's types: block size and bytes, from ggml's type traits ---- */

typedef struct {
    const char *name;
    int64_t block_elems;
    size_t block_bytes;
    lm_dtype dtype; /* LM_DTYPE_COUNT: loom has none */
} ggml_type_info;

static const ggml_type_info GGML_TYPES[] = {
    [0] = {"F32", 1, 4, LM_DTYPE_F32},
    [1] = {"F16", 1, 2, LM_DTYPE_F16},
    [2] = {"Q4_0", 32, 18, LM_DTYPE_GGML_Q4_0},
    [3] = {"Q4_1", 32, 20, LM_DTYPE_GGML_Q4_1},
    [6] = {"Q5_0", 32, 22, LM_DTYPE_GGML_Q5_0},
    [7] = {"Q5_1", 32, 24, LM_DTYPE_GGML_Q5_1},
    [8] = {"Q8_0", 32, 34, LM_DTYPE_GGML_Q8_0},
    [9] = {"Q8_1", 32, 40, LM_DTYPE_COUNT},
    [10] = {"Q2_K", 256, 84, LM_DTYPE_COUNT},
    [11] = {"Q3_K", 256, 110, LM_DTYPE_COUNT},
    [12] = {"Q4_K", 256, 144, LM_DTYPE_GGML_Q4_K},
    [13] = {"Q5_K", 256, 176, LM_DTYPE_GGML_Q5_K},
    [14] = {"Q6_K", 256, 210, LM_DTYPE_GGML_Q6_K},
    [15] = {"Q8_K", 256, 292, LM_DTYPE_COUNT},
    [16] = {"IQ2_XXS", 256, 66, LM_DTYPE_COUNT},
    [17] = {"IQ2_XS", 256, 74, LM_DTYPE_COUNT},
    [18] = {"IQ3_XXS", 256, 98, LM_DTYPE_COUNT},
    [19] = {"IQ1_S", 256, 50, LM_DTYPE_COUNT},
    [20] = {"IQ4_NL", 32, 18, LM_DTYPE_COUNT},
    [21] = {"IQ3_S", 256, 110, LM_DTYPE_COUNT},
    [22] = {"IQ2_S", 256, 82, LM_DTYPE_COUNT},
    [23] = {"IQ4_XS", 256, 136, LM_DTYPE_COUNT},
    [24] = {"I8", 1, 1, LM_DTYPE_I8},
    [25] = {"I16", 1, 2, LM_DTYPE_I16},
    [26] = {"I32", 1, 4, LM_DTYPE_I32},
    [27] = {"I64", 1, 8, LM_DTYPE_I64},
    [28] = {"F64", 1, 8, LM_DTYPE_F64},
    [29] = {"IQ1_M", 256, 56, LM_DTYPE_COUNT},
    [30] = {"BF16", 1, 2, LM_DTYPE_BF16},
    [34] = {"TQ1_0", 256, 54, LM_DTYPE_COUNT},
    [35] = {"TQ2_0", 256, 66, LM_DTYPE_COUNT},
    [39] = {"MXFP4", 32, 17, LM_DTYPE_COUNT},
    [40] = {"NVFP4", 64, 36, LM_DTYPE_COUNT},
    [41] = {"Q1_0", 128, 18, LM_DTYPE_COUNT},
    [42] = {"Q2_0", 64, 18, LM_DTYPE_COUNT},
};

static const ggml_type_info *ggml_type(uint32_t id) {
    if (id >= sizeof GGML_TYPES / sizeof *GGML_TYPES || !GGML_TYPES[id].name) return NULL;
    return &GGML_TYPES[id];
}

const char *lm_gguf_ggml_type_name(uint32_t id, char *buf, size_t size) {
    const ggml_type_info *t = ggml_type(id);
    if (t) return t->name;
    snprintf(buf, size, "type %u", id);
    return buf;
}

/* ---- metadata value types ---- */

static const char *const TYPE_NAMES[LM_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};
/* Bytes of a scalar of each type (0: string and array, not fixed). */
static const size_t TYPE_BYTES[LM_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *lm_gguf_type_name(lm_gguf_type t) {
    return (unsigned)t < LM_GGUF_TYPE_COUNT ? TYPE_NAMES[t] : "unknown";
}

bool lm_gguf_is_int_type(lm_gguf_type t) {
    return t == LM_GGUF_UINT8 || t == LM_GGUF_INT8 || t == LM_GGUF_UINT16 || t == LM_GGUF_INT16 ||
           t == LM_GGUF_UINT32 || t == LM_GGUF_INT32 || t == LM_GGUF_UINT64 || t == LM_GGUF_INT64;
}

bool lm_gguf_is_float_type(lm_gguf_type t) { return t == LM_GGUF_FLOAT32 || t == LM_GGUF_FLOAT64; }

static bool is_signed_type(lm_gguf_type t) {
    return t == LM_GGUF_INT8 || t == LM_GGUF_INT16 || t == LM_GGUF_INT32 || t == LM_GGUF_INT64;
}

static uint64_t load_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A scalar's bytes widened: integers sign- or zero-extended, floats to double. */
static void decode_scalar(lm_gguf_type t, const uint8_t *p, lm_gguf_kv *kv) {
    uint64_t bits = load_le(p, TYPE_BYTES[t]);
    switch (t) {
    case LM_GGUF_INT8: kv->scalar.i = (int8_t)bits; break;
    case LM_GGUF_INT16: kv->scalar.i = (int16_t)bits; break;
    case LM_GGUF_INT32: kv->scalar.i = (int32_t)bits; break;
    case LM_GGUF_INT64: kv->scalar.i = (int64_t)bits; break;
    case LM_GGUF_FLOAT32: {
        uint32_t b32 = (uint32_t)bits;
        float f;
        memcpy(&f, &b32, sizeof f);
        kv->scalar.f = f;
        break;
    }
    case LM_GGUF_FLOAT64: memcpy(&kv->scalar.f, &bits, sizeof bits); break;
    case LM_GGUF_BOOL: kv->scalar.b = bits != 0; break;
    default: kv->scalar.u = bits; break;
    }
}

/* ---- the cursor over the header ---- */

typedef struct {
    lm_gguf *g;
    size_t pos;
} cursor;

static size_t bytes_left(const cursor *c) { return c->g->size - c->pos; }

static lm_status take(cursor *c, size_t n, const uint8_t **out, const char *what, lm_error *err) {
    if (n > bytes_left(c))
        return lm_fail(err, LM_ERR_FORMAT, "%s: truncated: %s needs %zu bytes at byte %zu, %zu left",
                       c->g->name, what, n, c->pos, bytes_left(c));
    *out = c->g->bytes + c->pos;
    c->pos += n;
    return LM_OK;
}

static lm_status take_u32(cursor *c, uint32_t *v, const char *what, lm_error *err) {
    const uint8_t *p = NULL;
    lm_status st = take(c, 4, &p, what, err);
    if (st == LM_OK) *v = (uint32_t)load_le(p, 4);
    return st;
}

static lm_status take_u64(cursor *c, uint64_t *v, const char *what, lm_error *err) {
    const uint8_t *p = NULL;
    lm_status st = take(c, 8, &p, what, err);
    if (st == LM_OK) *v = load_le(p, 8);
    return st;
}

/* Copies n bytes into the arena, NUL-terminated.  The arena was sized from
 * the file (every string's bytes plus a NUL fit in 2x the file size), so it
 * never grows. */
static const char *arena_copy(lm_gguf *g, const uint8_t *p, size_t n) {
    if (n + 1 > g->arena_cap - g->arena_used) return NULL;
    char *s = g->arena + g->arena_used;
    memcpy(s, p, n);
    s[n] = '\0';
    g->arena_used += n + 1;
    return s;
}

/* A string: u64 length, then its bytes. */
static lm_status take_string(cursor *c, const char **out, size_t *len, const char *what, lm_error *err) {
    uint64_t n;
    lm_status st = take_u64(c, &n, what, err);
    if (st != LM_OK) return st;
    if (n > bytes_left(c))
        return lm_fail(err, LM_ERR_FORMAT, "%s: %s: a string of %llu bytes at byte %zu runs past the end of the file",
                       c->g->name, what, (unsigned long long)n, c->pos);
    const uint8_t *p = NULL;
    take(c, (size_t)n, &p, what, err);
    *out = arena_copy(c->g, p, (size_t)n);
    if (!*out) return lm_fail(err, LM_ERR_INTERNAL, "%s: string arena full", c->g->name);
    if (len) *len = (size_t)n;
    return LM_OK;
}

static lm_status take_value_type(cursor *c, const char *key, lm_gguf_type *t, lm_error *err) {
    uint32_t v;
    lm_status st = take_u32(c, &v, "a value type", err);
    if (st != LM_OK) return st;
    if (v >= LM_GGUF_TYPE_COUNT)
        return lm_fail(err, LM_ERR_FORMAT, "%s: key '%.*s': unknown value type %u", c->g->name, NAME_SHOWN, key, v);
    *t = (lm_gguf_type)v;
    return LM_OK;
}

static lm_status take_array(cursor *c, lm_gguf_kv *kv, lm_error *err) {
    lm_gguf *g = c->g;
    lm_status st = take_value_type(c, kv->key, &kv->elem_type, err);
    if (st == LM_OK) st = take_u64(c, &kv->count, "an array count", err);
    if (st != LM_OK) return st;
    if (kv->elem_type == LM_GGUF_ARRAY)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: key '%.*s': arrays of arrays are not read", g->name, NAME_SHOWN,
                       kv->key);
    /* Each element takes at least its fixed size (a string its 8-byte
     * length): a count the file cannot hold is refused before any table. */
    size_t least = kv->elem_type == LM_GGUF_STRING ? 8 : TYPE_BYTES[kv->elem_type];
    if (kv->count > bytes_left(c) / least)
        return lm_fail(err, LM_ERR_FORMAT, "%s: key '%.*s': %llu %s elements do not fit in the %zu bytes left",
                       g->name, NAME_SHOWN, kv->key, (unsigned long long)kv->count,
                       lm_gguf_type_name(kv->elem_type), bytes_left(c));
    if (kv->elem_type != LM_GGUF_STRING) {
        const uint8_t *p = NULL;
        take(c, (size_t)kv->count * least, &p, "array elements", err);
        kv->raw = p;
        return LM_OK;
    }
    size_t n = (size_t)kv->count;
    void *table = malloc((n ? n : 1) * (sizeof(char *) + sizeof(size_t)));
    if (!table) return lm_fail(err, LM_ERR_NOMEM, "%s: key '%.*s': out of memory", g->name, NAME_SHOWN, kv->key);
    g->blocks[g->n_blocks++] = table;
    kv->strs = table;
    kv->str_lens = (size_t *)((char *)table + (n ? n : 1) * sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        st = take_string(c, &kv->strs[i], &kv->str_lens[i], kv->key, err);
        if (st != LM_OK) return st;
    }
    return LM_OK;
}

static lm_status take_kv(cursor *c, lm_gguf_kv *kv, lm_error *err) {
    size_t key_len;
    lm_status st = take_string(c, &kv->key, &key_len, "a metadata key", err);
    if (st != LM_OK) return st;
    if (key_len == 0 || key_len > LM_GGUF_MAX_KEY_BYTES || strlen(kv->key) != key_len)
        return lm_fail(err, LM_ERR_FORMAT, "%s: a metadata key at byte %zu is empty, too long or holds a NUL",
                       c->g->name, c->pos);
    st = take_value_type(c, kv->key, &kv->type, err);
    if (st != LM_OK) return st;
    kv->count = 1;
    if (kv->type == LM_GGUF_STRING) return take_string(c, &kv->str, &kv->str_len, kv->key, err);
    if (kv->type == LM_GGUF_ARRAY) return take_array(c, kv, err);
    const uint8_t *p = NULL;
    st = take(c, TYPE_BYTES[kv->type], &p, kv->key, err);
    if (st == LM_OK) decode_scalar(kv->type, p, kv);
    return st;
}

/* ---- tensor infos ---- */

static lm_status take_tensor_info(cursor *c, lm_gguf_tensor *t, lm_error *err) {
    lm_gguf *g = c->g;
    size_t name_len;
    lm_status st = take_string(c, &t->tensor.name, &name_len, "a tensor name", err);
    if (st != LM_OK) return st;
    const char *name = t->tensor.name;
    if (name_len == 0 || strlen(name) != name_len)
        return lm_fail(err, LM_ERR_FORMAT, "%s: a tensor name at byte %zu is empty or holds a NUL", g->name, c->pos);
    uint32_t n_dims;
    st = take_u32(c, &n_dims, "a tensor's dimension count", err);
    if (st != LM_OK) return st;
    if (n_dims == 0 || n_dims > LM_GGUF_MAX_DIMS)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' has %u dimensions (1 to %d)", g->name, NAME_SHOWN, name,
                       n_dims, LM_GGUF_MAX_DIMS);
    uint64_t ne[LM_GGUF_MAX_DIMS];
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        st = take_u64(c, &ne[d], "a tensor dimension", err);
        if (st != LM_OK) return st;
        /* a product past 2^62 elements is no real tensor, and keeps the
         * byte count below from overflowing */
        if (ne[d] == 0 || ne[d] > ((uint64_t)1 << 62) / elements)
            return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s': dimension %u is %llu (zero or too large)", g->name,
                           NAME_SHOWN, name, d, (unsigned long long)ne[d]);
        elements *= ne[d];
    }
    st = take_u32(c, &t->ggml_type, "a tensor type", err);
    if (st == LM_OK) st = take_u64(c, &t->offset, "a tensor offset", err);
    if (st != LM_OK) return st;
    char buf[32];
    const ggml_type_info *type = ggml_type(t->ggml_type);
    if (!type)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' has ggml %s, which ggml does not define", g->name,
                       NAME_SHOWN, name, lm_gguf_ggml_type_name(t->ggml_type, buf, sizeof buf));
    if (ne[0] % (uint64_t)type->block_elems)
        return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s': %llu columns are not a whole number of %s blocks of %lld",
                       g->name, NAME_SHOWN, name, (unsigned long long)ne[0], type->name, (long long)type->block_elems);
    t->tensor.n_dims = (int)n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->tensor.shape[n_dims - 1 - d] = (int64_t)ne[d];
    t->tensor.n_elements = (int64_t)elements;
    t->tensor.n_bytes = (size_t)(elements / (uint64_t)type->block_elems * type->block_bytes);
    t->tensor.dtype = type->dtype;
    t->tensor.file = g->name;
    return LM_OK;
}

static int compare_tensor_names(const void *a, const void *b) {
    return strcmp(((const lm_gguf_tensor *)a)->tensor.name, ((const lm_gguf_tensor *)b)->tensor.name);
}

/* general.alignment, when present: a uint32 power of two, a multiple of 8
 * (the spec's rule; every tensor is then aligned to its element size). */
static lm_status read_alignment(lm_gguf *g, lm_error *err) {
    g->alignment = LM_GGUF_DEFAULT_ALIGNMENT;
    const lm_gguf_kv *kv = lm_gguf_find_kv(g, "general.alignment");
    if (!kv) return LM_OK;
    if (kv->type != LM_GGUF_UINT32)
        return lm_fail(err, LM_ERR_FORMAT, "%s: general.alignment is a %s, not a uint32", g->name,
                       lm_gguf_type_name(kv->type));
    uint64_t a = kv->scalar.u;
    if (a < 8 || a > LM_GGUF_MAX_ALIGNMENT || (a & (a - 1)))
        return lm_fail(err, LM_ERR_FORMAT, "%s: general.alignment %llu is not a power of two from 8 to %u", g->name,
                       (unsigned long long)a, LM_GGUF_MAX_ALIGNMENT);
    g->alignment = (uint32_t)a;
    return LM_OK;
}

/* Tensors by offset, to check that no two overlap. */
typedef struct {
    uint64_t offset;
    size_t index;
} offset_entry;

static int compare_offsets(const void *a, const void *b) {
    uint64_t x = ((const offset_entry *)a)->offset, y = ((const offset_entry *)b)->offset;
    return x < y ? -1 : x > y;
}

/* Each tensor's offset: aligned, inside the data section; no two overlap. */
static lm_status place_tensors(lm_gguf *g, size_t data_start, lm_error *err) {
    size_t data_size = g->size - data_start;
    for (size_t i = 0; i < g->n_tensors; i++) {
        lm_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s': offset %llu is not a multiple of the alignment %u",
                           g->name, NAME_SHOWN, t->tensor.name, (unsigned long long)t->offset, g->alignment);
        if (t->offset > data_size || t->tensor.n_bytes > data_size - t->offset)
            return lm_fail(err, LM_ERR_FORMAT,
                           "%s: tensor '%.*s': %zu bytes at offset %llu run past the data section's %zu bytes",
                           g->name, NAME_SHOWN, t->tensor.name, t->tensor.n_bytes, (unsigned long long)t->offset,
                           data_size);
        t->tensor.data = g->bytes + data_start + t->offset;
    }
    offset_entry *by_offset = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *by_offset);
    if (!by_offset) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", g->name);
    for (size_t i = 0; i < g->n_tensors; i++) by_offset[i] = (offset_entry){g->tensors[i].offset, i};
    qsort(by_offset, g->n_tensors, sizeof *by_offset, compare_offsets);
    lm_status st = LM_OK;
    for (size_t i = 1; i < g->n_tensors && st == LM_OK; i++) {
        const lm_gguf_tensor *prev = &g->tensors[by_offset[i - 1].index], *next = &g->tensors[by_offset[i].index];
        if (prev->offset + prev->tensor.n_bytes > next->offset)
            st = lm_fail(err, LM_ERR_FORMAT, "%s: tensors '%.*s' and '%.*s' overlap in the data section", g->name,
                         NAME_SHOWN, prev->tensor.name, NAME_SHOWN, next->tensor.name);
    }
    free(by_offset);
    return st;
}

/* ---- keys, sorted for lookups (n log n: a file of many keys costs no more) ---- */

static int compare_kv_keys(const void *a, const void *b) {
    return strcmp((*(const lm_gguf_kv *const *)a)->key, (*(const lm_gguf_kv *const *)b)->key);
}

static lm_status index_keys(lm_gguf *g, lm_error *err) {
    g->by_key = malloc((g->n_kv ? g->n_kv : 1) * sizeof *g->by_key);
    if (!g->by_key) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", g->name);
    for (size_t i = 0; i < g->n_kv; i++) g->by_key[i] = &g->kvs[i];
    qsort(g->by_key, g->n_kv, sizeof *g->by_key, compare_kv_keys);
    for (size_t i = 1; i < g->n_kv; i++)
        if (strcmp(g->by_key[i - 1]->key, g->by_key[i]->key) == 0)
            return lm_fail(err, LM_ERR_FORMAT, "%s: metadata key '%.*s' appears twice", g->name, NAME_SHOWN,
                           g->by_key[i]->key);
    return LM_OK;
}

/* ---- the whole image ---- */

static lm_status parse_image(lm_gguf *g, lm_error *err) {
    cursor c = {g, 0};
    const uint8_t *magic = NULL;
    lm_status st = take(&c, 4, &magic, "the magic", err);
    if (st != LM_OK) return st;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0)
        return lm_fail(err, LM_ERR_FORMAT, "%s: not a GGUF file (it does not start with \"GGUF\")", g->name);
    uint64_t n_tensors, n_kv;
    st = take_u32(&c, &g->version, "the version", err);
    if (st != LM_OK) return st;
    if (g->version != 2 && g->version != 3)
        return lm_fail(err, LM_ERR_UNSUPPORTED, "%s: GGUF version %u; loom reads versions 2 and 3", g->name,
                       g->version);
    st = take_u64(&c, &n_tensors, "the tensor count", err);
    if (st == LM_OK) st = take_u64(&c, &n_kv, "the metadata count", err);
    if (st != LM_OK) return st;
    /* a key/value takes at least 8 + 1 + 4 + 1 bytes and a tensor info
     * 8 + 1 + 4 + 8 + 4 + 8: counts the file cannot hold are refused here */
    if (n_kv > LM_GGUF_MAX_KV || n_kv > bytes_left(&c) / 14)
        return lm_fail(err, LM_ERR_FORMAT, "%s: %llu metadata entries (at most %llu, and what the file holds)", g->name,
                       (unsigned long long)n_kv, (unsigned long long)LM_GGUF_MAX_KV);
    if (n_tensors > LM_GGUF_MAX_TENSORS || n_tensors > bytes_left(&c) / 33)
        return lm_fail(err, LM_ERR_FORMAT, "%s: %llu tensors (at most %llu, and what the file holds)", g->name,
                       (unsigned long long)n_tensors, (unsigned long long)LM_GGUF_MAX_TENSORS);
    /* Every string copied out is at most its bytes in the file plus a NUL,
     * and each takes 8 bytes of length there: 2x the file bounds them all. */
    g->arena_cap = g->size * 2 + 1;
    g->arena = malloc(g->arena_cap);
    g->kvs = calloc(n_kv ? n_kv : 1, sizeof *g->kvs);
    g->blocks = calloc(n_kv ? n_kv : 1, sizeof *g->blocks);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->arena || !g->kvs || !g->blocks || !g->tensors)
        return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory reading the header", g->name);
    for (; g->n_kv < n_kv; g->n_kv++) {
        st = take_kv(&c, &g->kvs[g->n_kv], err);
        if (st != LM_OK) return st;
    }
    st = index_keys(g, err);
    if (st != LM_OK) return st;
    st = read_alignment(g, err);
    if (st != LM_OK) return st;
    for (; g->n_tensors < n_tensors; g->n_tensors++) {
        st = take_tensor_info(&c, &g->tensors[g->n_tensors], err);
        if (st != LM_OK) return st;
    }
    qsort(g->tensors, g->n_tensors, sizeof *g->tensors, compare_tensor_names);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i - 1].tensor.name, g->tensors[i].tensor.name) == 0)
            return lm_fail(err, LM_ERR_FORMAT, "%s: tensor '%.*s' appears twice", g->name, NAME_SHOWN,
                           g->tensors[i].tensor.name);
    size_t data_start = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors && data_start > g->size)
        return lm_fail(err, LM_ERR_FORMAT, "%s: truncated: the data section would start at byte %zu of %zu", g->name,
                       data_start, g->size);
    if (data_start > g->size) data_start = g->size;
    return place_tensors(g, data_start, err);
}

static lm_gguf *new_gguf(const char *name) {
    lm_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->name = strdup(name);
    if (!g->name) {
        free(g);
        return NULL;
    }
    return g;
}

lm_status lm_gguf_parse_memory(const void *bytes, size_t n, const char *name, lm_gguf **out, lm_error *err) {
    *out = NULL;
    lm_gguf *g = new_gguf(name);
    if (!g) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", name);
    g->bytes = bytes;
    g->size = n;
    lm_status st = parse_image(g, err);
    if (st != LM_OK) {
        lm_gguf_close(g);
        return st;
    }
    *out = g;
    return LM_OK;
}

/* ---- files ---- */

static lm_status read_whole_file(int fd, lm_gguf *g, lm_error *err) {
    uint8_t *buf = lm_big_alloc(g->size ? g->size : 1); /* 64-byte aligned at least */
    if (!buf) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory reading %zu bytes", g->name, g->size);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    size_t done = 0;
    while (done < g->size) {
        size_t chunk = g->size - done < ((size_t)64 << 20) ? g->size - done : (size_t)64 << 20;
        ssize_t got = pread(fd, buf + done, chunk, (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            free(buf);
            return lm_fail(err, LM_ERR_IO, "%s: read failed at byte %zu of %zu: %s", g->name, done, g->size,
                           got < 0 ? strerror(errno) : "unexpected end of file");
        }
        done += (size_t)got;
    }
    g->read_buffer = buf;
    g->bytes = buf;
    return LM_OK;
}

static lm_status load_image(lm_gguf *g, lm_load_mode mode, lm_error *err) {
    int fd = open(g->name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lm_fail(err, LM_ERR_IO, "%s: cannot open: %s", g->name, strerror(errno));
    struct stat info;
    lm_status st = LM_OK;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        st = lm_fail(err, LM_ERR_IO, "%s: not a regular file", g->name);
    } else if ((uint64_t)info.st_size > SIZE_MAX / 2 - 1) {
        st = lm_fail(err, LM_ERR_IO, "%s: file too large", g->name);
    } else {
        g->size = (size_t)info.st_size;
        if (mode == LM_LOAD_MMAP && g->size > 0) {
            void *map = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (map == MAP_FAILED)
                st = lm_fail(err, LM_ERR_IO, "%s: mmap failed: %s", g->name, strerror(errno));
            else
                g->mapping = map, g->bytes = map;
        } else {
            st = read_whole_file(fd, g, err);
        }
    }
    close(fd);
    return st;
}

lm_status lm_gguf_open(const char *path, lm_load_mode mode, lm_gguf **out, lm_error *err) {
    *out = NULL;
    if (mode != LM_LOAD_READ && mode != LM_LOAD_MMAP)
        return lm_fail(err, LM_ERR_INVALID, "%s: unknown load mode %d", path, (int)mode);
    lm_gguf *g = new_gguf(path);
    if (!g) return lm_fail(err, LM_ERR_NOMEM, "%s: out of memory", path);
    lm_status st = load_image(g, mode, err);
    if (st == LM_OK) st = parse_image(g, err);
    if (st != LM_OK) {
        lm_gguf_close(g);
        return st;
    }
    *out = g;
    return LM_OK;
}

void lm_gguf_close(lm_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_blocks; i++) free(g->blocks[i]);
    free(g->blocks);
    if (g->mapping) munmap(g->mapping, g->size);
    free(g->read_buffer);
    free(g->kvs);
    free(g->by_key);
    free(g->tensors);
    free(g->arena);
    free(g->name);
    free(g);
}

/* ---- finding the file ---- */

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

static bool starts_with_magic(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char head[4];
    bool yes = fread(head, 1, 4, f) == 4 && memcmp(head, GGUF_MAGIC, 4) == 0;
    fclose(f);
    return yes;
}

static bool regular_file_in(const char *dir, const char *name) {
    char path[4096];
    struct stat info;
    return (size_t)snprintf(path, sizeof path, "%s/%s", dir, name) < sizeof path && stat(path, &info) == 0 &&
           S_ISREG(info.st_mode);
}

lm_status lm_gguf_locate(const char *path, bool *found, char *file, size_t size, lm_error *err) {
    *found = false;
    struct stat info;
    if (stat(path, &info) != 0) return LM_OK;
    if (S_ISREG(info.st_mode)) {
        if (!ends_with(path, ".gguf") && !starts_with_magic(path)) return LM_OK;
        if ((size_t)snprintf(file, size, "%s", path) >= size)
            return lm_fail(err, LM_ERR_INVALID, "%.200s: path too long", path);
        *found = true;
        return LM_OK;
    }
    /* a checkpoint folder (config.json) or a tokenizer folder wins over a stray GGUF beside it */
    if (!S_ISDIR(info.st_mode) || regular_file_in(path, "config.json") || regular_file_in(path, "tokenizer.json"))
        return LM_OK;
    DIR *d = opendir(path);
    if (!d) return LM_OK;
    char first[256] = "";
    lm_status st = LM_OK;
    for (struct dirent *e; st == LM_OK && (e = readdir(d));) {
        if (!ends_with(e->d_name, ".gguf") || !regular_file_in(path, e->d_name)) continue;
        if (first[0])
            st = lm_fail(err, LM_ERR_INVALID, "%.200s holds several GGUF files (%.100s, %.100s, ...): name one, "
                         "e.g. --model %.200s/%.100s", path, first, e->d_name, path, first);
        else
            snprintf(first, sizeof first, "%s", e->d_name);
    }
    closedir(d);
    if (st != LM_OK || !first[0]) return st;
    if ((size_t)snprintf(file, size, "%s/%s", path, first) >= size)
        return lm_fail(err, LM_ERR_INVALID, "%.200s: path too long", path);
    *found = true;
    return LM_OK;
}

/* ---- lookups ---- */

uint32_t lm_gguf_version(const lm_gguf *g) { return g->version; }
uint32_t lm_gguf_alignment(const lm_gguf *g) { return g->alignment; }
const char *lm_gguf_name(const lm_gguf *g) { return g->name; }
size_t lm_gguf_file_size(const lm_gguf *g) { return g->size; }
size_t lm_gguf_kv_count(const lm_gguf *g) { return g->n_kv; }
const lm_gguf_kv *lm_gguf_kv_at(const lm_gguf *g, size_t i) { return i < g->n_kv ? &g->kvs[i] : NULL; }

static int compare_key_to_kv(const void *key, const void *element) {
    return strcmp((const char *)key, (*(const lm_gguf_kv *const *)element)->key);
}

const lm_gguf_kv *lm_gguf_find_kv(const lm_gguf *g, const char *key) {
    if (!g->n_kv || !g->by_key) return NULL;
    const lm_gguf_kv *const *found = bsearch(key, g->by_key, g->n_kv, sizeof *g->by_key, compare_key_to_kv);
    return found ? *found : NULL;
}

size_t lm_gguf_tensor_count(const lm_gguf *g) { return g->n_tensors; }
const lm_gguf_tensor *lm_gguf_tensor_at(const lm_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

static int compare_name_to_tensor(const void *key, const void *element) {
    return strcmp((const char *)key, ((const lm_gguf_tensor *)element)->tensor.name);
}

const lm_gguf_tensor *lm_gguf_find_tensor(const lm_gguf *g, const char *name) {
    if (!g->n_tensors) return NULL;
    return bsearch(name, g->tensors, g->n_tensors, sizeof *g->tensors, compare_name_to_tensor);
}

/* The kv of key with the type check shared by the typed getters: *kv NULL
 * and LM_OK when optional and absent. */
static lm_status lookup(const lm_gguf *g, const char *key, bool required, bool (*type_ok)(const lm_gguf_kv *),
                        const char *wanted, const lm_gguf_kv **kv, lm_error *err) {
    *kv = lm_gguf_find_kv(g, key);
    if (!*kv)
        return required ? lm_fail(err, LM_ERR_FORMAT, "%s: metadata key '%.*s' is missing", g->name, NAME_SHOWN, key)
                        : LM_OK;
    if (!type_ok(*kv))
        return lm_fail(err, LM_ERR_FORMAT, "%s: metadata key '%.*s' is a %s, not %s", g->name, NAME_SHOWN, key,
                       (*kv)->type == LM_GGUF_ARRAY ? "array" : lm_gguf_type_name((*kv)->type), wanted);
    return LM_OK;
}

static bool is_string(const lm_gguf_kv *kv) { return kv->type == LM_GGUF_STRING; }
static bool is_int(const lm_gguf_kv *kv) { return lm_gguf_is_int_type(kv->type); }
static bool is_number(const lm_gguf_kv *kv) { return is_int(kv) || lm_gguf_is_float_type(kv->type); }
static bool is_bool(const lm_gguf_kv *kv) { return kv->type == LM_GGUF_BOOL; }
static bool is_array(const lm_gguf_kv *kv) {
    return kv->type == LM_GGUF_ARRAY && (kv->elem_type == LM_GGUF_STRING || lm_gguf_is_int_type(kv->elem_type) ||
                                         lm_gguf_is_float_type(kv->elem_type) || kv->elem_type == LM_GGUF_BOOL);
}

lm_status lm_gguf_get_string(const lm_gguf *g, const char *key, bool required, const char **out, lm_error *err) {
    const lm_gguf_kv *kv;
    lm_status st = lookup(g, key, required, is_string, "a string", &kv, err);
    if (st == LM_OK && kv) *out = kv->str;
    return st;
}

/* An integer scalar in [lo, hi] (as signed 128-bit-free comparisons: the
 * unsigned and signed cases apart). */
static lm_status get_int(const lm_gguf *g, const char *key, bool required, int64_t lo, uint64_t hi, bool *found,
                         uint64_t *bits, lm_error *err) {
    const lm_gguf_kv *kv;
    *found = false;
    lm_status st = lookup(g, key, required, is_int, "an integer", &kv, err);
    if (st != LM_OK || !kv) return st;
    bool negative = is_signed_type(kv->type) && kv->scalar.i < 0;
    if (negative ? kv->scalar.i < lo : kv->scalar.u > hi) {
        if (negative)
            return lm_fail(err, LM_ERR_FORMAT, "%s: metadata key '%.*s' is %lld, out of range", g->name, NAME_SHOWN,
                           key, (long long)kv->scalar.i);
        return lm_fail(err, LM_ERR_FORMAT, "%s: metadata key '%.*s' is %llu, out of range", g->name, NAME_SHOWN, key,
                       (unsigned long long)kv->scalar.u);
    }
    *found = true;
    *bits = kv->scalar.u;
    return LM_OK;
}

lm_status lm_gguf_get_u32(const lm_gguf *g, const char *key, bool required, uint32_t *out, lm_error *err) {
    bool found;
    uint64_t v;
    lm_status st = get_int(g, key, required, 0, UINT32_MAX, &found, &v, err);
    if (st == LM_OK && found) *out = (uint32_t)v;
    return st;
}

lm_status lm_gguf_get_i32(const lm_gguf *g, const char *key, bool required, int32_t *out, lm_error *err) {
    bool found;
    uint64_t v;
    lm_status st = get_int(g, key, required, INT32_MIN, INT32_MAX, &found, &v, err);
    if (st == LM_OK && found) *out = (int32_t)(int64_t)v;
    return st;
}

lm_status lm_gguf_get_u64(const lm_gguf *g, const char *key, bool required, uint64_t *out, lm_error *err) {
    bool found;
    uint64_t v;
    lm_status st = get_int(g, key, required, 0, UINT64_MAX, &found, &v, err);
    if (st == LM_OK && found) *out = v;
    return st;
}

lm_status lm_gguf_get_f32(const lm_gguf *g, const char *key, bool required, float *out, lm_error *err) {
    const lm_gguf_kv *kv;
    lm_status st = lookup(g, key, required, is_number, "a number", &kv, err);
    if (st != LM_OK || !kv) return st;
    double v = lm_gguf_is_float_type(kv->type) ? kv->scalar.f
               : is_signed_type(kv->type)          ? (double)kv->scalar.i
                                                   : (double)kv->scalar.u;
    if (!(v >= -FLT_MAX && v <= FLT_MAX)) /* also NaN */
        return lm_fail(err, LM_ERR_FORMAT, "%s: metadata key '%.*s' is %g, not a float32 number", g->name, NAME_SHOWN,
                       key, v);
    *out = (float)v;
    return LM_OK;
}

lm_status lm_gguf_get_bool(const lm_gguf *g, const char *key, bool required, bool *out, lm_error *err) {
    const lm_gguf_kv *kv;
    lm_status st = lookup(g, key, required, is_bool, "a bool", &kv, err);
    if (st == LM_OK && kv) *out = kv->scalar.b;
    return st;
}

lm_status lm_gguf_get_array(const lm_gguf *g, const char *key, bool required, const lm_gguf_kv **out,
                            lm_error *err) {
    *out = NULL;
    return lookup(g, key, required, is_array, "an array", out, err);
}

int64_t lm_gguf_array_int(const lm_gguf_kv *kv, uint64_t i) {
    if (kv->type != LM_GGUF_ARRAY || i >= kv->count || !kv->raw) return 0;
    lm_gguf_kv e = {0};
    if (lm_gguf_is_float_type(kv->elem_type)) {
        double d = lm_gguf_array_float(kv, i); /* truncated; NaN and what int64 cannot hold give 0 */
        return d > -9.2e18 && d < 9.2e18 ? (int64_t)d : 0;
    }
    size_t n = TYPE_BYTES[kv->elem_type];
    decode_scalar(kv->elem_type, kv->raw + i * n, &e);
    return is_signed_type(kv->elem_type) ? e.scalar.i : (int64_t)e.scalar.u;
}

double lm_gguf_array_float(const lm_gguf_kv *kv, uint64_t i) {
    if (kv->type != LM_GGUF_ARRAY || i >= kv->count || !kv->raw) return 0;
    lm_gguf_kv e = {0};
    size_t n = TYPE_BYTES[kv->elem_type];
    decode_scalar(kv->elem_type, kv->raw + i * n, &e);
    if (lm_gguf_is_float_type(kv->elem_type)) return e.scalar.f;
    if (kv->elem_type == LM_GGUF_BOOL) return e.scalar.b;
    return is_signed_type(kv->elem_type) ? (double)e.scalar.i : (double)e.scalar.u;
}
