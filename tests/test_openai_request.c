/* The request parser's bounds on untrusted bodies (src/server/openai_request.c):
 * the byte pre-scan (depth, value count, NUL escapes), the errors it gives,
 * unknown fields dropped, tool names, and lists of prompts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/openai_request.h"

static lm_status parse(lm_api_kind kind, const char *body, lm_openai_request *r, char *param, lm_error *err) {
    return lm_openai_request_parse(kind, body, strlen(body), r, param, 64, err);
}

/* Values are counted exactly on valid JSON: 1 + commas + non-empty containers. */
static void test_prescan_counts(void) {
    static const struct {
        const char *json;
        int depth;
        size_t values;
    } cases[] = {
        {"1", 0, 1},
        {"[]", 1, 1},
        {"[1]", 1, 2},
        {"[1,2]", 1, 3},
        {"{\"a\":[1,2]}", 2, 4},
        {"[[1],[2]]", 2, 5},
        {"{\"a\":\"[,{\",\"b\":{}}", 2, 3},          /* brackets and commas in strings do not count */
        {" [ 1 , [ ] , { \"k\" : null } ] ", 2, 5},
        {"[\"\\\"\",\"\\\\\"]", 1, 3},               /* escaped quote and backslash */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lm_json_scan scan;
        lm_json_prescan(cases[i].json, strlen(cases[i].json), 64, 1000, NULL, 0, &scan);
        CHECK_MSG(scan.depth == cases[i].depth && scan.values == cases[i].values && !scan.nul,
                  "%s: depth %d values %zu", cases[i].json, scan.depth, scan.values);
    }
}

/* The bounds: depth 64 -> 400, more than 524288 values -> 413 (too_large),
 * refused before cJSON builds a tree. */
static void test_bounds(void) {
    char param[64];
    lm_error err = {0};
    lm_openai_request r;
    size_t n = 70;
    char *deep = malloc(2 * n + 64);
    int k = sprintf(deep, "{\"prompt\":\"hi\",\"x\":");
    for (size_t i = 0; i < n; i++) deep[k++] = '[';
    for (size_t i = 0; i < n; i++) deep[k++] = ']';
    strcpy(deep + k, "}");
    lm_status st = parse(LM_API_COMPLETION, deep, &r, param, &err);
    bool too_large = r.too_large;
    lm_openai_request_free(&r);
    free(deep);
    CHECK(st == LM_ERR_INVALID && !too_large && strstr(err.message, "64"));

    size_t values = LM_REQUEST_MAX_VALUES + 10;
    char *wide = malloc(2 * values + 64);
    k = sprintf(wide, "{\"prompt\":\"hi\",\"x\":[");
    for (size_t i = 0; i < values; i++) wide[k++] = '1', wide[k++] = ',';
    strcpy(wide + k - 1, "]}");
    st = parse(LM_API_COMPLETION, wide, &r, param, &err);
    too_large = r.too_large;
    lm_openai_request_free(&r);
    CHECK(st != LM_OK && too_large && strstr(err.message, "524288"));
    /* Just under the bound parses, and the unknown field is not kept. */
    k = sprintf(wide, "{\"prompt\":\"hi\",\"x\":[");
    for (size_t i = 0; i < LM_REQUEST_MAX_VALUES - 10; i++) wide[k++] = '1', wide[k++] = ',';
    strcpy(wide + k - 1, "]}");
    st = parse(LM_API_COMPLETION, wide, &r, param, &err);
    free(wide);
    bool dropped = st == LM_OK && !cJSON_HasObjectItem(r.doc, "x") && cJSON_HasObjectItem(r.doc, "prompt");
    lm_openai_request_free(&r);
    CHECK_MSG(dropped, "%s", err.message);
}

/* \u0000 in a field that is read: 400 naming it; elsewhere ignored; an
 * escaped backslash before "u0000" is no NUL. */
static void test_nul(void) {
    static const struct {
        lm_api_kind kind;
        const char *body;
        const char *param; /* NULL: parses */
    } cases[] = {
        {LM_API_COMPLETION, "{\"prompt\":\"a\\u0000b\"}", "prompt"},
        {LM_API_COMPLETION, "{\"prompt\":[\"a\",\"b\\u0000\"]}", "prompt"},
        {LM_API_COMPLETION, "{\"model\":\"m\\u0000\",\"prompt\":\"a\"}", "model"},
        {LM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", "messages"},
        {LM_API_CHAT, "{\"messages\":[{\"role\\u0000\":\"user\",\"content\":\"a\"}]}", "messages"},
        {LM_API_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"x\\u0000\"]}", "stop"},
        {LM_API_COMPLETION, "{\"prompt\":\"a\",\"pro\\u0000mpt\":1}", ""},
        {LM_API_COMPLETION, "{\"prompt\":\"a\",\"unknown\":\"\\u0000\"}", NULL},
        {LM_API_COMPLETION, "{\"prompt\":\"a\\\\u0000b\"}", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char param[64];
        lm_error err = {0};
        lm_openai_request r;
        lm_status st = parse(cases[i].kind, cases[i].body, &r, param, &err);
        bool ok = cases[i].param ? st == LM_ERR_INVALID && strcmp(param, cases[i].param) == 0 && strstr(err.message, "NUL")
                                 : st == LM_OK;
        if (ok && !cases[i].param && cases[i].kind == LM_API_COMPLETION)
            ok = r.n_prompts == 1 && r.prompts[0].text_len == strlen(r.prompts[0].text);
        lm_openai_request_free(&r);
        CHECK_MSG(ok, "%s: status %d param '%s' message '%s'", cases[i].body, (int)st, param, err.message);
    }
}

static void test_tool_names(void) {
    static const struct {
        const char *name;
        bool ok;
    } cases[] = {
        {"get_weather", true}, {"a-b_C9", true}, {"x</tool_call>", false}, {"", false}, {"a b", false},
        {"\\u00e9", false},    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", true},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512], param[64];
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\","
                 "\"function\":{\"name\":\"ok\"}},{\"type\":\"function\",\"function\":{\"name\":\"%s\"}}]}",
                 cases[i].name);
        lm_error err = {0};
        lm_openai_request r;
        lm_status st = parse(LM_API_CHAT, body, &r, param, &err);
        lm_openai_request_free(&r);
        bool ok = cases[i].ok ? st == LM_OK
                              : st == LM_ERR_INVALID && strcmp(param, "tools") == 0 && strstr(err.message, "tools[1]");
        CHECK_MSG(ok, "%s: status %d '%s'", cases[i].name, (int)st, err.message);
    }
}

static void test_prompt_lists(void) {
    char param[64];
    lm_error err = {0};
    lm_openai_request r;
    CHECK_OK(parse(LM_API_COMPLETION, "{\"prompt\":[\"a\",\"bc\"],\"n\":2}", &r, param, &err), &err);
    bool ok = r.n_prompts == 2 && strcmp(r.prompts[1].text, "bc") == 0 && r.params.n == 2;
    lm_openai_request_free(&r);
    CHECK(ok);
    CHECK_OK(parse(LM_API_COMPLETION, "{\"prompt\":[[1,2],[3]]}", &r, param, &err), &err);
    ok = r.n_prompts == 2 && r.prompts[0].n_ids == 2 && r.prompts[1].n_ids == 1 && r.prompts[1].ids[0] == 3;
    lm_openai_request_free(&r);
    CHECK(ok);
    CHECK_OK(parse(LM_API_COMPLETION, "{\"prompt\":[1,2,3]}", &r, param, &err), &err);
    ok = r.n_prompts == 1 && r.prompts[0].n_ids == 3;
    lm_openai_request_free(&r);
    CHECK(ok);
    lm_status st = parse(LM_API_COMPLETION, "{\"prompt\":[\"a\",{}]}", &r, param, &err);
    lm_openai_request_free(&r);
    CHECK(st == LM_ERR_INVALID && strcmp(param, "prompt") == 0);
    st = parse(LM_API_COMPLETION, "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":64}", &r, param, &err);
    lm_openai_request_free(&r);
    CHECK(st == LM_ERR_INVALID && strcmp(param, "prompt") == 0);
}

/* A message whose content key differs in case: the content is "", nothing
 * leaks (found by fuzz_request; ASan checks the leak). */
static void test_content_key_case(void) {
    char param[64];
    lm_error err = {0};
    lm_openai_request r;
    CHECK_OK(parse(LM_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"Content\":\"a\"}]}", &r, param, &err), &err);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(r.messages, 0), "content");
    bool ok = cJSON_IsString(content) && content->valuestring[0] == 0;
    lm_openai_request_free(&r);
    CHECK(ok);
}

int main(void) {
    RUN_TEST(test_prescan_counts);
    RUN_TEST(test_bounds);
    RUN_TEST(test_nul);
    RUN_TEST(test_tool_names);
    RUN_TEST(test_prompt_lists);
    RUN_TEST(test_content_key_case);
    return test_summary("test_openai_request");
}
