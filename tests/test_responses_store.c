/* The responses store alone (src/server/responses_store.c): put / get /
 * delete, eviction of the oldest past the count and the bytes, expiry past
 * the age, a file that keeps its responses across a reopen, and clean
 * errors for a file that is not a store or cannot be written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "server/responses_store.h"

#define NOW 1700000000LL

static lm_status put(lm_responses_store *s, const char *id, const char *response, const char *input, long long now,
                     lm_error *err) {
    lm_stored_response r = {.id = id, .created_at = now, .response = response, .input = input};
    return lm_responses_store_put(s, &r, now, err);
}

/* Whether id is kept (at now), its response text equal to want when given. */
static bool kept(lm_responses_store *s, const char *id, const char *want, long long now) {
    bool found = false;
    char *response = NULL, *input = NULL;
    lm_error err = {0};
    if (lm_responses_store_get(s, id, now, &found, &response, &input, &err) != LM_OK) {
        fprintf(stderr, "get %s: %s\n", id, err.message);
        return false;
    }
    bool ok = found && (!want || strcmp(response, want) == 0);
    free(response);
    free(input);
    return ok;
}

static void test_put_get_delete(void) {
    lm_responses_store *s = NULL;
    lm_error err = {0};
    CHECK_OK(lm_responses_store_open(NULL, &s, &err), &err);
    CHECK_OK(put(s, "resp_a", "{\"id\":\"resp_a\"}", "[{\"type\":\"message\"}]", NOW, &err), &err);
    bool found = false;
    char *response = NULL, *input = NULL;
    CHECK_OK(lm_responses_store_get(s, "resp_a", NOW, &found, &response, &input, &err), &err);
    bool same = found && strcmp(response, "{\"id\":\"resp_a\"}") == 0 && strcmp(input, "[{\"type\":\"message\"}]") == 0;
    free(response);
    free(input);
    CHECK(same);
    CHECK_OK(lm_responses_store_get(s, "resp_b", NOW, &found, &response, &input, &err), &err);
    CHECK(!found && !response && !input);
    /* an id with SQL in it is only an id (bound, never spliced) */
    CHECK_OK(put(s, "resp_'; DROP TABLE responses; --", "{}", "[]", NOW, &err), &err);
    CHECK(kept(s, "resp_'; DROP TABLE responses; --", "{}", NOW) && kept(s, "resp_a", NULL, NOW));
    /* the same id again replaces it */
    CHECK_OK(put(s, "resp_a", "{\"v\":2}", "[]", NOW, &err), &err);
    CHECK(kept(s, "resp_a", "{\"v\":2}", NOW));
    int count = 0;
    int64_t bytes = 0;
    lm_responses_store_usage(s, &count, &bytes);
    CHECK(count == 2);
    CHECK(bytes == (int64_t)(strlen("resp_a") + strlen("{\"v\":2}") + 2 + strlen("resp_'; DROP TABLE responses; --") + 4));
    CHECK_OK(lm_responses_store_delete(s, "resp_a", &found, &err), &err);
    CHECK(found && !kept(s, "resp_a", NULL, NOW));
    CHECK_OK(lm_responses_store_delete(s, "resp_a", &found, &err), &err);
    CHECK(!found);
    lm_responses_store_close(s);
}

static void test_evicts_oldest_by_count(void) {
    lm_responses_store_options o = {.max_responses = 3};
    lm_responses_store *s = NULL;
    lm_error err = {0};
    CHECK_OK(lm_responses_store_open(&o, &s, &err), &err);
    char id[32];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "resp_%d", i);
        CHECK_OK(put(s, id, "{}", "[]", NOW + i, &err), &err);
    }
    CHECK(!kept(s, "resp_0", NULL, NOW + 5) && !kept(s, "resp_1", NULL, NOW + 5));
    CHECK(kept(s, "resp_2", NULL, NOW + 5) && kept(s, "resp_3", NULL, NOW + 5) && kept(s, "resp_4", NULL, NOW + 5));
    int count = 0;
    int64_t bytes = 0;
    lm_responses_store_usage(s, &count, &bytes);
    CHECK(count == 3);
    lm_responses_store_close(s);
}

static void test_evicts_oldest_by_bytes(void) {
    /* each response: 6 bytes of id + 100 + 2 = 108; 350 bytes hold three */
    lm_responses_store_options o = {.max_bytes = 350};
    lm_responses_store *s = NULL;
    lm_error err = {0};
    CHECK_OK(lm_responses_store_open(&o, &s, &err), &err);
    char body[101];
    memset(body, 'x', 100);
    body[100] = 0;
    char id[32];
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "resp_%d", i);
        CHECK_OK(put(s, id, body, "[]", NOW, &err), &err);
    }
    CHECK(!kept(s, "resp_0", NULL, NOW) && kept(s, "resp_1", NULL, NOW) && kept(s, "resp_3", NULL, NOW));
    int count = 0;
    int64_t bytes = 0;
    lm_responses_store_usage(s, &count, &bytes);
    CHECK(count == 3 && bytes == 3 * 108);
    /* one larger than the whole store is refused, and evicts nothing */
    char big[400];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CHECK(put(s, "resp_big", big, "[]", NOW, &err) == LM_ERR_NOMEM && strstr(err.message, "resp_big"));
    CHECK(kept(s, "resp_1", NULL, NOW) && !kept(s, "resp_big", NULL, NOW));
    lm_responses_store_close(s);
}

static void test_expires_by_age(void) {
    lm_responses_store_options o = {.ttl_s = 60};
    lm_responses_store *s = NULL;
    lm_error err = {0};
    CHECK_OK(lm_responses_store_open(&o, &s, &err), &err);
    CHECK_OK(put(s, "resp_old", "{}", "[]", NOW, &err), &err);
    CHECK(kept(s, "resp_old", NULL, NOW + 60));
    CHECK(!kept(s, "resp_old", NULL, NOW + 61)); /* gone to a reader at once */
    CHECK_OK(put(s, "resp_new", "{}", "[]", NOW + 61, &err), &err);
    int count = 0;
    int64_t bytes = 0;
    lm_responses_store_usage(s, &count, &bytes);
    CHECK(count == 1); /* and dropped at the next put */
    lm_responses_store_close(s);
}

static void test_file_persists(void) {
    char dir[256], path[300];
    CHECK(test_make_temp_folder(dir, sizeof dir, "responses-store"));
    snprintf(path, sizeof path, "%s/responses.db", dir);
    lm_responses_store_options o = {.path = path, .max_responses = 2};
    lm_responses_store *s = NULL;
    lm_error err = {0};
    CHECK_OK(lm_responses_store_open(&o, &s, &err), &err);
    CHECK_OK(put(s, "resp_1", "{\"n\":1}", "[1]", NOW, &err), &err);
    CHECK_OK(put(s, "resp_2", "{\"n\":2}", "[2]", NOW, &err), &err);
    lm_responses_store_close(s);
    CHECK_OK(lm_responses_store_open(&o, &s, &err), &err);
    CHECK(kept(s, "resp_1", "{\"n\":1}", NOW) && kept(s, "resp_2", "{\"n\":2}", NOW));
    int count = 0;
    int64_t bytes = 0;
    lm_responses_store_usage(s, &count, &bytes);
    CHECK(count == 2 && bytes == 2 * (6 + 7 + 3)); /* the totals are read back */
    /* the bounds hold across the reopen: a third evicts the first */
    CHECK_OK(put(s, "resp_3", "{\"n\":3}", "[3]", NOW, &err), &err);
    CHECK(!kept(s, "resp_1", NULL, NOW) && kept(s, "resp_3", NULL, NOW));
    lm_responses_store_close(s);
    /* WAL mode: the file says so in its header (bytes 18 and 19 are 2) */
    FILE *f = fopen(path, "rb");
    unsigned char head[20] = {0};
    CHECK(f && fread(head, 1, sizeof head, f) == sizeof head);
    fclose(f);
    CHECK(memcmp(head, "SQLite format 3", 15) == 0 && head[18] == 2 && head[19] == 2);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

static void test_bad_files_are_clean_errors(void) {
    char dir[256], path[300];
    CHECK(test_make_temp_folder(dir, sizeof dir, "responses-store-bad"));
    lm_responses_store *s = NULL;
    lm_error err = {0};
    /* not a database */
    snprintf(path, sizeof path, "%s/garbage.db", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f);
    for (int i = 0; i < 4096; i++) fputc("not a database at all"[i % 21], f);
    fclose(f);
    lm_responses_store_options o = {.path = path};
    CHECK(lm_responses_store_open(&o, &s, &err) != LM_OK && !s);
    CHECK_MSG(strstr(err.message, path) && strstr(err.message, "not a database"), "%s", err.message);
    /* a folder that does not exist */
    snprintf(path, sizeof path, "%s/missing/responses.db", dir);
    CHECK(lm_responses_store_open(&o, &s, &err) != LM_OK && !s && strstr(err.message, path));
    /* a folder in the file's place */
    snprintf(o.path == path ? path : path, sizeof path, "%s", dir);
    CHECK(lm_responses_store_open(&o, &s, &err) != LM_OK && !s && strstr(err.message, dir));
    /* a read-only file (root ignores the mode: skipped there) */
    if (geteuid() != 0) {
        snprintf(path, sizeof path, "%s/readonly.db", dir);
        CHECK_OK(lm_responses_store_open(&o, &s, &err), &err);
        lm_responses_store_close(s);
        CHECK(chmod(path, 0444) == 0);
        CHECK(lm_responses_store_open(&o, &s, &err) != LM_OK && !s);
        CHECK_MSG(strstr(err.message, path) && strstr(err.message, "read-only"), "%s", err.message);
    }
    /* a store of another schema version */
    snprintf(path, sizeof path, "%s/other.db", dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "command -v sqlite3 >/dev/null && sqlite3 '%s' 'PRAGMA user_version=7'", path);
    if (system(cmd) == 0) {
        CHECK(lm_responses_store_open(&o, &s, &err) == LM_ERR_FORMAT && !s);
        CHECK_MSG(strstr(err.message, "version 7"), "%s", err.message);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    RUN_TEST(test_put_get_delete);
    RUN_TEST(test_evicts_oldest_by_count);
    RUN_TEST(test_evicts_oldest_by_bytes);
    RUN_TEST(test_expires_by_age);
    RUN_TEST(test_file_persists);
    RUN_TEST(test_bad_files_are_clean_errors);
    return test_summary("test_responses_store");
}
