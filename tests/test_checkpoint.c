/* Checkpoint folders: the fixture checkpoints (sharded through an index for
 * qwen35-dense and qwen35-moe, one file for glm46v-moe) with known tensors,
 * READ and MMAP giving the same bytes, and folders built here with broken
 * indexes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "io/checkpoint.h"

static const lm_load_mode modes[] = {LM_LOAD_READ, LM_LOAD_MMAP};

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool bytes_are(const void *data, const char *hex) {
    const uint8_t *p = data;
    for (size_t i = 0; hex[2 * i]; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1 || p[i] != v) return false;
    }
    return true;
}

static bool shape_is(const lm_tensor *t, lm_dtype dtype, int n_dims, int64_t d0, int64_t d1,
                     int64_t d2) {
    const int64_t want[3] = {d0, d1, d2};
    if (!t || t->dtype != dtype || t->n_dims != n_dims) return false;
    for (int i = 0; i < n_dims; i++)
        if (t->shape[i] != want[i]) return false;
    return true;
}

/* Names strictly increasing; total_bytes the sum of the tensor sizes. */
static void check_table_invariants(const lm_checkpoint *ck, size_t count, size_t total) {
    CHECK(lm_checkpoint_count(ck) == count);
    size_t sum = 0;
    for (size_t i = 0; i < count; i++) {
        const lm_tensor *t = lm_checkpoint_at(ck, i);
        CHECK(t && lm_checkpoint_find(ck, t->name) == t);
        if (i) CHECK(strcmp(lm_checkpoint_at(ck, i - 1)->name, t->name) < 0);
        CHECK((uintptr_t)t->data % lm_dtype_size(t->dtype) == 0);
        sum += t->n_bytes;
    }
    CHECK(lm_checkpoint_at(ck, count) == NULL);
    CHECK(sum == total && lm_checkpoint_total_bytes(ck) == total);
}

static void test_qwen35_dense_sharded(void) {
    char dir[512];
    test_fixture_path(dir, sizeof dir, "models/qwen35-dense");
    lm_error err;
    lm_checkpoint *ck;
    CHECK_OK(lm_checkpoint_open(dir, LM_LOAD_READ, &ck, &err), &err);
    CHECK(strcmp(lm_checkpoint_dir(ck), dir) == 0);
    check_table_invariants(ck, 104, 1118288);
    const lm_tensor *embed = lm_checkpoint_find(ck, "model.language_model.embed_tokens.weight");
    CHECK(shape_is(embed, LM_DTYPE_BF16, 2, 2048, 64, 0));
    CHECK(embed->n_elements == 2048 * 64 && embed->n_bytes == 2048 * 64 * 2);
    CHECK(ends_with(embed->file, "/model.safetensors"));
    CHECK(bytes_are(embed->data, "82bff8be4a3f4d3f"));
    /* the MTP head lives in a second shard, found through the index */
    const lm_tensor *fc = lm_checkpoint_find(ck, "mtp.fc.weight");
    CHECK(shape_is(fc, LM_DTYPE_BF16, 2, 64, 128, 0));
    CHECK(ends_with(fc->file, "/model-mtp.safetensors"));
    CHECK(bytes_are(fc->data, "1fbd1fbd84bd0dbe"));
    CHECK(lm_checkpoint_find(ck, "mtp.fc") == NULL);
    CHECK(lm_checkpoint_find(ck, "") == NULL);
    lm_checkpoint_close(ck);
}

static void test_qwen35_moe_sharded(void) {
    char dir[512];
    test_fixture_path(dir, sizeof dir, "models/qwen35-moe");
    lm_error err;
    lm_checkpoint *ck;
    CHECK_OK(lm_checkpoint_open(dir, LM_LOAD_MMAP, &ck, &err), &err);
    check_table_invariants(ck, 212, 1461968);
    const lm_tensor *fused = lm_checkpoint_find(ck, "mtp.layers.0.mlp.experts.gate_up_proj");
    CHECK(shape_is(fused, LM_DTYPE_BF16, 3, 8, 64, 64));
    CHECK(bytes_are(fused->data, "533d2a3dc1bd013e"));
    const lm_tensor *expert =
        lm_checkpoint_find(ck, "model.language_model.layers.0.mlp.experts.3.gate_proj.weight");
    CHECK(shape_is(expert, LM_DTYPE_BF16, 2, 32, 64, 0));
    CHECK(bytes_are(expert->data, "67bea83d"));
    lm_checkpoint_close(ck);
}

static void test_glm_single_file(void) {
    char dir[512];
    test_fixture_path(dir, sizeof dir, "models/glm46v-moe");
    lm_error err;
    lm_checkpoint *ck;
    CHECK_OK(lm_checkpoint_open(dir, LM_LOAD_READ, &ck, &err), &err);
    check_table_invariants(ck, 118, 973280);
    const lm_tensor *embed = lm_checkpoint_find(ck, "model.language_model.embed_tokens.weight");
    CHECK(shape_is(embed, LM_DTYPE_BF16, 2, 2048, 64, 0));
    CHECK(bytes_are(embed->data, "0e3ebebec5be623e"));
    CHECK(bytes_are(lm_checkpoint_find(ck, "lm_head.weight")->data, "cabdac3e9cbdc4b9"));
    lm_checkpoint_close(ck);
}

/* Both load modes see the same tensors and the same bytes. */
static void test_read_and_mmap_agree(void) {
    const char *folders[] = {"models/qwen35-dense", "models/qwen35-moe", "models/glm46v-moe"};
    for (int f = 0; f < 3; f++) {
        char dir[512];
        test_fixture_path(dir, sizeof dir, folders[f]);
        lm_error err;
        lm_checkpoint *read, *mapped;
        CHECK_OK(lm_checkpoint_open(dir, LM_LOAD_READ, &read, &err), &err);
        lm_status s = lm_checkpoint_open(dir, LM_LOAD_MMAP, &mapped, &err);
        if (s != LM_OK) lm_checkpoint_close(read);
        CHECK_OK(s, &err);
        bool same = lm_checkpoint_count(read) == lm_checkpoint_count(mapped);
        for (size_t i = 0; same && i < lm_checkpoint_count(read); i++) {
            const lm_tensor *a = lm_checkpoint_at(read, i), *b = lm_checkpoint_at(mapped, i);
            same = strcmp(a->name, b->name) == 0 && a->dtype == b->dtype &&
                   a->n_bytes == b->n_bytes && a->data != b->data &&
                   memcmp(a->data, b->data, a->n_bytes) == 0;
        }
        lm_checkpoint_close(read);
        lm_checkpoint_close(mapped);
        CHECK_MSG(same, "%s: READ and MMAP differ", folders[f]);
    }
}

/* ---- folders built here ---- */

static const char *make_dir(const char *name, char *path, size_t size) {
    snprintf(path, size, "%s/%s", test_scratch_dir(), name);
    mkdir(path, 0755);
    return path;
}

static bool write_text(const char *dir, const char *file, const char *text, size_t len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(text, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* A safetensors file of 4-byte U8 tensors, tensor i filled with fill + i. */
static bool write_shard(const char *dir, const char *file, const char *const *names, int n,
                        uint8_t fill) {
    char header[2048] = "{";
    for (int i = 0; i < n; i++) {
        size_t len = strlen(header);
        snprintf(header + len, sizeof header - len,
                 "%s\"%s\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[%d,%d]}", i ? "," : "",
                 names[i], 4 * i, 4 * i + 4);
    }
    strcat(header, "}");
    size_t header_len = strlen(header);
    char image[4096];
    for (int i = 0; i < 8; i++) image[i] = (char)((uint64_t)header_len >> (8 * i));
    memcpy(image + 8, header, header_len);
    for (int i = 0; i < 4 * n; i++) image[8 + header_len + (size_t)i] = (char)(fill + i / 4);
    return write_text(dir, file, image, 8 + header_len + 4 * (size_t)n);
}

static bool write_index(const char *dir, const char *json) {
    return write_text(dir, "model.safetensors.index.json", json, strlen(json));
}

/* Opens dir and expects `status` with a message containing each of the parts. */
static void expect_failure(const char *dir, lm_status status, const char *part1,
                           const char *part2) {
    for (int m = 0; m < 2; m++) {
        lm_error err = {0};
        lm_checkpoint *ck = (lm_checkpoint *)1;
        lm_status got = lm_checkpoint_open(dir, modes[m], &ck, &err);
        CHECK_MSG(got == status, "%s: got %s (%s), want %s", dir, lm_status_name(got), err.message,
                  lm_status_name(status));
        CHECK(ck == NULL);
        CHECK_MSG(strstr(err.message, part1), "message '%s' lacks '%s'", err.message, part1);
        CHECK_MSG(!part2 || strstr(err.message, part2), "message '%s' lacks '%s'", err.message,
                  part2);
    }
}

static void test_empty_folder(void) {
    char dir[512], expected[700];
    make_dir("empty", dir, sizeof dir);
    snprintf(expected, sizeof expected,
             "no model.safetensors or model.safetensors.index.json in %s", dir);
    expect_failure(dir, LM_ERR_IO, expected, NULL);
}

static void test_missing_folder(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/not-there", test_scratch_dir());
    expect_failure(dir, LM_ERR_IO, "not-there", NULL);
}

static void test_single_file_folder(void) {
    char dir[512];
    make_dir("single", dir, sizeof dir);
    const char *names[] = {"w.b", "w.a"};
    CHECK(write_shard(dir, "model.safetensors", names, 2, 10));
    lm_error err;
    lm_checkpoint *ck;
    CHECK_OK(lm_checkpoint_open(dir, LM_LOAD_READ, &ck, &err), &err);
    check_table_invariants(ck, 2, 8);
    CHECK(((const uint8_t *)lm_checkpoint_find(ck, "w.b")->data)[0] == 10);
    CHECK(((const uint8_t *)lm_checkpoint_find(ck, "w.a")->data)[3] == 11);
    lm_checkpoint_close(ck);
}

/* Tensors a shard holds but the index does not list are still available;
 * a tensor in two shards resolves to the one the index names. */
static void test_index_unlisted_and_duplicates(void) {
    char dir[512];
    make_dir("indexed", dir, sizeof dir);
    const char *first[] = {"a", "shared"}, *second[] = {"b", "shared", "extra"};
    CHECK(write_shard(dir, "one.safetensors", first, 2, 100));
    CHECK(write_shard(dir, "two.safetensors", second, 3, 200));
    CHECK(write_index(dir, "{\"metadata\":{},\"weight_map\":{\"a\":\"one.safetensors\","
                           "\"b\":\"two.safetensors\",\"shared\":\"two.safetensors\"}}"));
    lm_error err;
    lm_checkpoint *ck;
    CHECK_OK(lm_checkpoint_open(dir, LM_LOAD_MMAP, &ck, &err), &err);
    check_table_invariants(ck, 4, 16);
    const lm_tensor *shared = lm_checkpoint_find(ck, "shared");
    CHECK(shared && ((const uint8_t *)shared->data)[0] == 201);
    CHECK(ends_with(shared->file, "two.safetensors"));
    const lm_tensor *extra = lm_checkpoint_find(ck, "extra");
    CHECK(extra && ((const uint8_t *)extra->data)[0] == 202);
    lm_checkpoint_close(ck);

    /* the same duplicate, unlisted: ambiguous */
    CHECK(write_index(dir, "{\"weight_map\":{\"a\":\"one.safetensors\",\"b\":\"two.safetensors\"}}"));
    expect_failure(dir, LM_ERR_FORMAT, "tensor 'shared' is in both one.safetensors and two.safetensors",
                   NULL);
}

static void test_bad_indexes(void) {
    char dir[512];
    make_dir("bad-index", dir, sizeof dir);
    const char *names[] = {"a"};
    CHECK(write_shard(dir, "one.safetensors", names, 1, 1));
    static const struct {
        const char *index;
        lm_status status;
        const char *part1, *part2;
    } cases[] = {
        {"{\"weight_map\": ", LM_ERR_FORMAT, "model.safetensors.index.json", "not valid JSON"},
        {"[]", LM_ERR_FORMAT, "model.safetensors.index.json", "\"weight_map\" must be an object"},
        {"{}", LM_ERR_FORMAT, "model.safetensors.index.json", "\"weight_map\" must be an object"},
        {"{\"weight_map\":[]}", LM_ERR_FORMAT, "index.json", "\"weight_map\" must be an object"},
        {"{\"weight_map\":{}}", LM_ERR_FORMAT, "index.json", "weight_map is empty"},
        {"{\"weight_map\":{\"a\":1}}", LM_ERR_FORMAT, "index.json", "weight_map value of 'a' must be a string"},
        {"{\"weight_map\":{\"a\":\"../one.safetensors\"}}", LM_ERR_FORMAT, "index.json", "not a plain file name"},
        {"{\"weight_map\":{\"a\":\"sub/one.safetensors\"}}", LM_ERR_FORMAT, "'sub/one.safetensors'", "not a plain file name"},
        {"{\"weight_map\":{\"a\":\"/etc/passwd\"}}", LM_ERR_FORMAT, "index.json", "not a plain file name"},
        {"{\"weight_map\":{\"a\":\"..\"}}", LM_ERR_FORMAT, "index.json", "not a plain file name"},
        {"{\"weight_map\":{\"a\":\"\"}}", LM_ERR_FORMAT, "index.json", "not a plain file name"},
        {"{\"weight_map\":{\"a\":\"one.safetensors\",\"zz\":\"one.safetensors\"}}", LM_ERR_FORMAT,
         "index.json: tensor 'zz' is listed in one.safetensors but that file does not contain it", NULL},
        {"{\"weight_map\":{\"a\":\"gone.safetensors\"}}", LM_ERR_IO, "gone.safetensors", "cannot open"},
        {"{\"weight_map\":{\"a\":\"corrupt.safetensors\"}}", LM_ERR_FORMAT, "corrupt.safetensors", "header length"},
    };
    CHECK(write_text(dir, "corrupt.safetensors", "\xff\xff\xff\x00\x00\x00\x00\x00{}", 10));
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(write_index(dir, cases[i].index));
        expect_failure(dir, cases[i].status, cases[i].part1, cases[i].part2);
        if (test_current_failed()) {
            fprintf(stderr, "  (index: %s)\n", cases[i].index);
            return;
        }
    }
}

int main(void) {
    RUN_TEST(test_qwen35_dense_sharded);
    RUN_TEST(test_qwen35_moe_sharded);
    RUN_TEST(test_glm_single_file);
    RUN_TEST(test_read_and_mmap_agree);
    RUN_TEST(test_empty_folder);
    RUN_TEST(test_missing_folder);
    RUN_TEST(test_single_file_folder);
    RUN_TEST(test_index_unlisted_and_duplicates);
    RUN_TEST(test_bad_indexes);
    return test_summary("test_checkpoint");
}
