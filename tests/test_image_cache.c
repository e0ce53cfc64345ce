/* The vision-output cache (engine/image_cache.c): a hit needs the same file
 * bytes and the same processor settings (colliding hashes alone never
 * match), the budget is kept by dropping the least recently used entries,
 * entries in use outlive their eviction, and an entry larger than the
 * budget is not kept. */
#include <stdio.h>
#include <string.h>

#include "engine/image_cache.h"
#include "harness.h"

static lm_image_embedding *make(const char *file, uint64_t digest, int rows, float fill) {
    lm_image_embedding *e = lm_image_embedding_create(file, strlen(file), digest, rows, 4);
    if (e)
        for (int i = 0; i < rows * 4; i++) e->rows[i] = fill;
    return e;
}

static void test_hit_needs_same_bytes_and_settings(void) {
    lm_image_cache c;
    lm_image_cache_init(&c, 1 << 20);
    lm_image_embedding *a = make("image-a", 7, 2, 1.0f);
    CHECK(a);
    lm_image_cache_add(&c, a);
    lm_image_embedding *hit = lm_image_cache_find(&c, "image-a", 7, 7);
    CHECK(hit == a && hit->rows[0] == 1.0f);
    lm_image_embedding_unref(hit);
    CHECK(lm_image_cache_find(&c, "image-a", 7, 8) == NULL); /* other processor settings */
    CHECK(lm_image_cache_find(&c, "image-b", 7, 7) == NULL);
    CHECK(lm_image_cache_find(&c, "image-a", 6, 7) == NULL); /* a prefix of the file */
    /* An entry whose hash collides with another file's is still not that
     * file's: the bytes decide. */
    a->hash = lm_image_file_hash("image-b", 7, 7);
    CHECK(lm_image_cache_find(&c, "image-b", 7, 7) == NULL);
    CHECK(c.hits == 1 && c.misses == 4);
    lm_image_embedding_unref(a);
    lm_image_cache_free(&c);
}

static void test_budget_drops_least_recent(void) {
    lm_image_embedding *probe = make("x", 0, 8, 0);
    CHECK(probe);
    size_t cost = sizeof *probe + 1 + sizeof(float) * 8 * 4;
    lm_image_embedding_unref(probe);
    lm_image_cache c;
    lm_image_cache_init(&c, 3 * cost);
    const char *files[4] = {"1", "2", "3", "4"};
    lm_image_embedding *e[4];
    for (int i = 0; i < 3; i++) {
        CHECK((e[i] = make(files[i], 0, 8, (float)i)));
        lm_image_cache_add(&c, e[i]);
        lm_image_embedding_unref(e[i]); /* the cache's reference alone */
    }
    CHECK(c.n_entries == 3 && c.used == 3 * cost);
    lm_image_embedding *used = lm_image_cache_find(&c, "1", 1, 0); /* "1" is now the most recent */
    CHECK(used);
    CHECK((e[3] = make(files[3], 0, 8, 3.0f)));
    lm_image_cache_add(&c, e[3]);
    CHECK(c.n_entries == 3 && c.used <= c.budget);
    lm_image_embedding *gone = lm_image_cache_find(&c, "2", 1, 0);
    CHECK_MSG(gone == NULL, "the least recently used entry stayed");
    lm_image_embedding *kept = lm_image_cache_find(&c, "1", 1, 0);
    CHECK(kept == used);
    lm_image_embedding_unref(kept);
    /* evicted while held: the holder's rows stay valid */
    lm_image_embedding *big = make("big", 0, 256, 9.0f);
    CHECK(big);
    lm_image_cache_add(&c, big); /* larger than the budget: not kept, nothing dropped */
    CHECK(c.n_entries == 3 && lm_image_cache_find(&c, "big", 3, 0) == NULL);
    lm_image_embedding_unref(big);
    for (int i = 0; i < 4; i++) {
        lm_image_embedding *m = make(i % 2 ? "5" : "6", (uint64_t)i, 8, 0);
        CHECK(m);
        lm_image_cache_add(&c, m);
        lm_image_embedding_unref(m);
    }
    CHECK(lm_image_cache_find(&c, "1", 1, 0) == NULL && used->rows[0] == 0.0f && used->n_rows == 8);
    lm_image_embedding_unref(used);
    lm_image_embedding_unref(e[3]);
    lm_image_cache_free(&c);
}

static void test_zero_budget_keeps_nothing(void) {
    lm_image_cache c;
    lm_image_cache_init(&c, 0);
    lm_image_embedding *a = make("a", 0, 1, 0);
    CHECK(a);
    lm_image_cache_add(&c, a);
    CHECK(c.n_entries == 0 && lm_image_cache_find(&c, "a", 1, 0) == NULL);
    lm_image_embedding_unref(a);
    lm_image_cache_free(&c);
}

int main(void) {
    RUN_TEST(test_hit_needs_same_bytes_and_settings);
    RUN_TEST(test_budget_drops_least_recent);
    RUN_TEST(test_zero_budget_keeps_nothing);
    return test_summary("test_image_cache");
}
