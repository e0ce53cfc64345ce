/* The safetensors reader: small valid files built here (aligned and
 * misaligned data, scalars, empty tensors, metadata) and many corrupt ones,
 * each of which must give a clear error naming the file, in both load modes
 * and from memory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "io/safetensors.h"

/* A file image: 8-byte little-endian header length, header, data. */
typedef struct {
    uint8_t *bytes;
    size_t size;
} image;

/* Data bytes follow the pattern i*7+1 so that copies can be checked. */
static uint8_t data_byte(size_t i) { return (uint8_t)(i * 7 + 1); }

static image make_image(const char *header, uint64_t header_len_field, size_t data_bytes) {
    size_t header_len = strlen(header);
    image im = {calloc(1, 8 + header_len + data_bytes + 1), 8 + header_len + data_bytes};
    for (int i = 0; i < 8; i++) im.bytes[i] = (uint8_t)(header_len_field >> (8 * i));
    memcpy(im.bytes + 8, header, header_len);
    for (size_t i = 0; i < data_bytes; i++) im.bytes[8 + header_len + i] = data_byte(i);
    return im;
}

static image make_valid_image(const char *header, size_t data_bytes) {
    return make_image(header, strlen(header), data_bytes);
}

static const char *write_image(const char *file_name, const image *im, char *path, size_t size) {
    snprintf(path, size, "%s/%s", test_scratch_dir(), file_name);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    size_t wrote = fwrite(im->bytes, 1, im->size, f);
    fclose(f);
    return wrote == im->size ? path : NULL;
}

static const lm_load_mode modes[] = {LM_LOAD_READ, LM_LOAD_MMAP};

/* ---- valid files ---- */

/* Header padded with spaces to a multiple of 8, as the reference writer does. */
static const char *ALIGNED_HEADER =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
    "\"d\":{\"dtype\":\"U8\",\"shape\":[3,0],\"data_offsets\":[40,40]}}";

static void check_valid_tensors(const lm_safetensors *st, const char *expected_file) {
    CHECK(lm_safetensors_count(st) == 4);
    /* sorted by name */
    CHECK(strcmp(lm_safetensors_at(st, 0)->name, "a") == 0);
    CHECK(strcmp(lm_safetensors_at(st, 3)->name, "d") == 0);
    CHECK(lm_safetensors_at(st, 4) == NULL);
    const lm_tensor *a = lm_safetensors_find(st, "a");
    CHECK(a && a->dtype == LM_DTYPE_F32 && a->n_dims == 2 && a->shape[0] == 2 && a->shape[1] == 3);
    CHECK(a->n_elements == 6 && a->n_bytes == 24);
    CHECK((uintptr_t)a->data % 4 == 0);
    CHECK(strcmp(a->file, expected_file) == 0);
    for (size_t i = 0; i < 24; i++) CHECK(((const uint8_t *)a->data)[i] == data_byte(i));
    const lm_tensor *b = lm_safetensors_find(st, "b");
    CHECK(b && b->dtype == LM_DTYPE_BF16 && b->n_dims == 1 && b->shape[0] == 4 && b->n_bytes == 8);
    CHECK(((const uint8_t *)b->data)[0] == data_byte(24));
    const lm_tensor *c = lm_safetensors_find(st, "c");
    CHECK(c && c->dtype == LM_DTYPE_I64 && c->n_dims == 0 && c->n_elements == 1 && c->n_bytes == 8);
    CHECK((uintptr_t)c->data % 8 == 0);
    CHECK(((const uint8_t *)c->data)[7] == data_byte(39));
    const lm_tensor *d = lm_safetensors_find(st, "d");
    CHECK(d && d->n_dims == 2 && d->shape[1] == 0 && d->n_elements == 0 && d->n_bytes == 0);
    CHECK(lm_safetensors_find(st, "e") == NULL);
    CHECK(lm_safetensors_find(st, "__metadata__") == NULL);
    CHECK(lm_safetensors_metadata(st, "format") && strcmp(lm_safetensors_metadata(st, "format"), "pt") == 0);
    CHECK(lm_safetensors_metadata(st, "other") == NULL);
}

static char *padded_header(const char *header, size_t pad_to, size_t extra) {
    size_t len = strlen(header);
    size_t padded = (8 + len + pad_to - 1) / pad_to * pad_to - 8 + extra;
    char *h = malloc(padded + 1);
    memcpy(h, header, len);
    memset(h + len, ' ', padded - len);
    h[padded] = '\0';
    return h;
}

static void test_valid_file_both_modes(void) {
    char *header = padded_header(ALIGNED_HEADER, 8, 0);
    image im = make_valid_image(header, 40);
    char path[512];
    CHECK(write_image("valid.safetensors", &im, path, sizeof path));
    for (int m = 0; m < 2; m++) {
        lm_error err;
        lm_safetensors *st;
        CHECK_OK(lm_safetensors_open(path, modes[m], &st, &err), &err);
        CHECK(lm_safetensors_file_size(st) == im.size);
        CHECK(strcmp(lm_safetensors_name(st), path) == 0);
        check_valid_tensors(st, path);
        lm_safetensors_close(st);
        if (test_current_failed()) break;
    }
    free(im.bytes);
    free(header);
}

static void test_valid_image_from_memory(void) {
    char *header = padded_header(ALIGNED_HEADER, 8, 0);
    image im = make_valid_image(header, 40);
    /* An 8-byte aligned copy, so the tensors are used in place. */
    uint64_t *aligned = calloc(im.size / 8 + 1, 8);
    memcpy(aligned, im.bytes, im.size);
    lm_error err;
    lm_safetensors *st;
    CHECK_OK(lm_safetensors_parse_memory(aligned, im.size, "mem.safetensors", &st, &err), &err);
    check_valid_tensors(st, "mem.safetensors");
    const lm_tensor *a = lm_safetensors_find(st, "a");
    CHECK(a && (const uint8_t *)a->data == (const uint8_t *)aligned + 8 + strlen(header));
    lm_safetensors_close(st);
    free(aligned);
    free(im.bytes);
    free(header);
}

/* A header whose length puts the data section at an odd offset: every
 * tensor wider than a byte must come back aligned, through a copy. */
static void test_misaligned_data_is_copied(void) {
    char *header = padded_header(ALIGNED_HEADER, 8, 1);
    image im = make_valid_image(header, 40);
    CHECK((8 + strlen(header)) % 2 == 1);
    char path[512];
    CHECK(write_image("misaligned.safetensors", &im, path, sizeof path));
    for (int m = 0; m < 2; m++) {
        lm_error err;
        lm_safetensors *st;
        CHECK_OK(lm_safetensors_open(path, modes[m], &st, &err), &err);
        check_valid_tensors(st, path);
        lm_safetensors_close(st);
        if (test_current_failed()) break;
    }
    /* from memory too, with the image itself at an odd address */
    uint8_t *shifted = malloc(im.size + 1);
    memcpy(shifted + 1, im.bytes, im.size);
    lm_error err;
    lm_safetensors *st;
    CHECK_OK(lm_safetensors_parse_memory(shifted + 1, im.size, "mem", &st, &err), &err);
    check_valid_tensors(st, "mem");
    lm_safetensors_close(st);
    free(shifted);
    free(im.bytes);
    free(header);
}

/* Read mode lays the image out so that the data section starts at a
 * multiple of 64 bytes, whatever the header's length: a tensor at a
 * 64-byte multiple of the section (a, at 0) is then aligned for 64-byte
 * vector loads in place (the cpu's bf16 products ran about 1.3x slower on
 * rows split across cache lines), and its bytes are still the file's. */
static void test_read_mode_aligns_the_data_section(void) {
    for (size_t extra = 0; extra < 64 && !test_current_failed(); extra += 7) {
        char *header = padded_header(ALIGNED_HEADER, 8, extra);
        image im = make_valid_image(header, 40);
        char path[512];
        CHECK(write_image("aligned64.safetensors", &im, path, sizeof path));
        lm_error err;
        lm_safetensors *st;
        CHECK_OK(lm_safetensors_open(path, LM_LOAD_READ, &st, &err), &err);
        check_valid_tensors(st, path);
        const lm_tensor *a = lm_safetensors_find(st, "a");
        CHECK_MSG(a && (uintptr_t)a->data % 64 == 0, "header of %zu bytes: tensor a at %p, not 64-byte aligned",
                  strlen(header), a ? a->data : NULL);
        lm_safetensors_close(st);
        free(im.bytes);
        free(header);
    }
}

static void test_empty_header(void) {
    image im = make_valid_image("{}      ", 0);
    lm_error err;
    lm_safetensors *st;
    CHECK_OK(lm_safetensors_parse_memory(im.bytes, im.size, "empty", &st, &err), &err);
    CHECK(lm_safetensors_count(st) == 0);
    CHECK(lm_safetensors_find(st, "a") == NULL);
    CHECK(lm_safetensors_at(st, 0) == NULL);
    CHECK(lm_safetensors_metadata(st, "format") == NULL);
    lm_safetensors_close(st);
    free(im.bytes);
}

static void test_missing_file(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/does-not-exist.safetensors", test_scratch_dir());
    lm_error err;
    lm_safetensors *st = (lm_safetensors *)1;
    CHECK(lm_safetensors_open(path, LM_LOAD_READ, &st, &err) == LM_ERR_IO);
    CHECK(st == NULL);
    CHECK_MSG(strstr(err.message, "does-not-exist.safetensors"), "message: %s", err.message);
}

/* ---- corrupt files ---- */

#define FULL ((size_t)-1)
#define HEADER_LEN ((uint64_t)-1)

typedef struct {
    const char *label;
    const char *header;
    size_t data_bytes;
    uint64_t header_len; /* HEADER_LEN: the real length */
    size_t file_len;     /* FULL: the whole image; else cut to this many bytes */
    const char *expect;  /* part of the error message */
    size_t cut;          /* bytes cut from the end of the image */
} corrupt_case;

#define T(body) "{\"t\":{" body "}}"
static const corrupt_case corrupt_cases[] = {
    {"empty file", "", 0, HEADER_LEN, 0, "too short for the 8-byte header length", 0},
    {"truncated header length", "{}", 0, HEADER_LEN, 5, "too short", 0},
    {"header length past the end", "{}", 0, 1000, FULL, "header length 1000 runs past the end", 0},
    {"header length over the limit", "{}", 0, (uint64_t)1 << 40, FULL, "over the limit", 0},
    {"header cut short", "{\"t\":{\"dtype\":\"F32\"}}", 0, HEADER_LEN, 20, "header length 21 runs past the end", 0},
    {"header not JSON", "{\"t\": ", 0, HEADER_LEN, FULL, "not valid JSON", 0},
    {"header empty", "", 0, HEADER_LEN, FULL, "not valid JSON", 0},
    {"trailing garbage", "{} x", 0, HEADER_LEN, FULL, "unexpected text after", 0},
    {"header not an object", "[1, 2]", 0, HEADER_LEN, FULL, "header is not a JSON object", 0},
    {"header a string", "\"x\"", 0, HEADER_LEN, FULL, "header is not a JSON object", 0},
    {"entry not an object", "{\"t\": 5}", 0, HEADER_LEN, FULL, "tensor 't': entry must be an object", 0},
    {"missing dtype", T("\"shape\":[1],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "tensor 't' has no \"dtype\"", 0},
    {"missing shape", T("\"dtype\":\"F32\",\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "tensor 't' has no \"shape\"", 0},
    {"missing offsets", T("\"dtype\":\"F32\",\"shape\":[1]"), 4, HEADER_LEN, FULL, "has no \"data_offsets\"", 0},
    {"dtype not a string", T("\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "\"dtype\" must be a string", 0},
    {"unknown dtype", T("\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "unknown dtype 'Q4'", 0},
    {"lowercase dtype", T("\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "unknown dtype 'f32'", 0},
    {"shape not an array", T("\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "\"shape\" must be an array", 0},
    {"shape element a string", T("\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]"), 8, HEADER_LEN, FULL, "shape[1] must be a non-negative integer", 0},
    {"negative shape", T("\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "shape[0] must be a non-negative integer", 0},
    {"fractional shape", T("\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "shape[0] must be", 0},
    {"huge shape", T("\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "shape[0] must be", 0},
    {"shape product overflows", T("\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "too many elements", 0},
    {"shape over 2^53 elements", T("\"dtype\":\"F64\",\"shape\":[4503599627370496,1024],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "too many elements", 0},
    {"nine dimensions", T("\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]"), 1, HEADER_LEN, FULL, "has 9 dimensions", 0},
    {"offsets not an array", T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":0"), 4, HEADER_LEN, FULL, "\"data_offsets\" must be two non-negative integers", 0},
    {"one offset", T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]"), 4, HEADER_LEN, FULL, "\"data_offsets\" must be two", 0},
    {"three offsets", T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]"), 8, HEADER_LEN, FULL, "\"data_offsets\" must be two", 0},
    {"negative offset", T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]"), 4, HEADER_LEN, FULL, "\"data_offsets\" must be two", 0},
    {"offset a string", T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]"), 4, HEADER_LEN, FULL, "\"data_offsets\" must be two", 0},
    {"offset beyond 2^53", T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]"), 4, HEADER_LEN, FULL, "\"data_offsets\" must be two", 0},
    {"offsets reversed", T("\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]"), 4, HEADER_LEN, FULL, "end before they begin", 0},
    {"offsets past EOF", T("\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]"), 4, HEADER_LEN, FULL, "tensor 't' data [", 0},
    {"size mismatch", T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]"), 4, HEADER_LEN, FULL, "has 4 bytes of data but F32 with 2 elements needs 8", 0},
    {"truncated data section", T("\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]"), 16, HEADER_LEN, FULL, "tensor 't' data [", 5},
    {"duplicate name", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, HEADER_LEN, FULL, "tensor 't' appears twice", 0},
    {"metadata not an object", "{\"__metadata__\":3}", 0, HEADER_LEN, FULL, "\"__metadata__\" must be an object", 0},
    {"metadata value not a string", "{\"__metadata__\":{\"format\":1}}", 0, HEADER_LEN, FULL, "value 'format' must be a string", 0},
    {"metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, HEADER_LEN, FULL, "\"__metadata__\" appears twice", 0},
};
#undef T

static image make_corrupt_image(const corrupt_case *c) {
    uint64_t len = c->header_len == HEADER_LEN ? strlen(c->header) : c->header_len;
    image im = make_image(c->header, len, c->data_bytes);
    if (c->file_len != FULL && c->file_len < im.size) im.size = c->file_len;
    im.size -= c->cut < im.size ? c->cut : im.size;
    return im;
}

/* The exact message for a tensor past the end names the file positions. */
static void test_past_eof_message(void) {
    const char *header = "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    image im = make_valid_image(header, 16);
    size_t data_start = 8 + strlen(header);
    im.size -= 3;
    lm_error err;
    lm_safetensors *st;
    CHECK(lm_safetensors_parse_memory(im.bytes, im.size, "model.safetensors", &st, &err) ==
          LM_ERR_FORMAT);
    char expected[256];
    snprintf(expected, sizeof expected,
             "model.safetensors: tensor 'x' data [%zu, %zu) runs past the end of the file (size %zu)",
             data_start, data_start + 16, im.size);
    CHECK_MSG(strcmp(err.message, expected) == 0, "got: %s\nwant: %s", err.message, expected);
    free(im.bytes);
}

static void check_rejected(const corrupt_case *c, lm_status got, const lm_safetensors *st,
                           const lm_error *err, const char *file, const char *how) {
    CHECK_MSG(got == LM_ERR_FORMAT, "%s (%s): status %s, message: %s", c->label, how,
              lm_status_name(got), err->message);
    CHECK_MSG(st == NULL, "%s (%s): output not cleared", c->label, how);
    CHECK_MSG(strstr(err->message, file), "%s (%s): message does not name the file: %s", c->label,
              how, err->message);
    CHECK_MSG(strstr(err->message, c->expect), "%s (%s): message '%s' lacks '%s'", c->label, how,
              err->message, c->expect);
}

static void test_corrupt_files_are_rejected(void) {
    for (size_t i = 0; i < sizeof corrupt_cases / sizeof *corrupt_cases; i++) {
        const corrupt_case *c = &corrupt_cases[i];
        image im = make_corrupt_image(c);
        char path[512], file[64];
        snprintf(file, sizeof file, "corrupt%zu.safetensors", i);
        const char *written = write_image(file, &im, path, sizeof path);
        for (int m = 0; written && m < 2; m++) {
            lm_error err = {0};
            lm_safetensors *st = (lm_safetensors *)1;
            lm_status got = lm_safetensors_open(path, modes[m], &st, &err);
            check_rejected(c, got, st, &err, file, m ? "mmap" : "read");
        }
        lm_error err = {0};
        lm_safetensors *st = (lm_safetensors *)1;
        lm_status got = lm_safetensors_parse_memory(im.bytes, im.size, file, &st, &err);
        if (getenv("LOOM_TEST_VERBOSE")) fprintf(stderr, "    %s: %s\n", c->label, err.message);
        check_rejected(c, got, st, &err, file, "memory");
        free(im.bytes);
        CHECK_MSG(written, "could not write %s", file);
        if (test_current_failed()) return;
    }
}

/* Every prefix of a valid file must be rejected cleanly (or, for the whole
 * file, accepted). */
static void test_every_truncation(void) {
    char *header = padded_header(ALIGNED_HEADER, 8, 0);
    image im = make_valid_image(header, 40);
    for (size_t n = 0; n < im.size; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size, so ASan sees any overread */
        memcpy(copy, im.bytes, n);
        lm_error err;
        lm_safetensors *st;
        lm_status got = lm_safetensors_parse_memory(copy, n, "cut", &st, &err);
        free(copy);
        CHECK_MSG(got == LM_ERR_FORMAT, "prefix of %zu bytes: %s", n, lm_status_name(got));
        CHECK_MSG(strstr(err.message, "cut"), "prefix of %zu bytes: %s", n, err.message);
    }
    free(im.bytes);
    free(header);
}

int main(void) {
    RUN_TEST(test_valid_file_both_modes);
    RUN_TEST(test_valid_image_from_memory);
    RUN_TEST(test_misaligned_data_is_copied);
    RUN_TEST(test_read_mode_aligns_the_data_section);
    RUN_TEST(test_empty_header);
    RUN_TEST(test_missing_file);
    RUN_TEST(test_past_eof_message);
    RUN_TEST(test_corrupt_files_are_rejected);
    RUN_TEST(test_every_truncation);
    return test_summary("test_safetensors");
}
