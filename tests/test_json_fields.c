/* io/json_fields: the family-independent typed field reader (absent or null
 * keeps the default, nested paths in errors, bounded strings and int lists). */
#include <string.h>

#include "harness.h"
#include "io/json_fields.h"

static const char *doc =
    "{\"n\":7,\"nul\":null,\"x\":0.5,\"b\":true,\"s\":\"silu\",\"one\":3,\"list\":[1,2,3],"
    "\"strs\":[\"a\",\"b\"],\"inner\":{\"deep\":{\"k\":\"v\",\"bad\":1.5}}}";

static void test_reads_and_defaults(void) {
    cJSON *root = cJSON_Parse(doc);
    CHECK(root);
    lm_error err = {0};
    lm_json_fields f = lm_json_fields_of("c.json", root, &err);
    int n = -1, absent = 42, nul = 43;
    float x = 0;
    bool b = false;
    char s[8] = "";
    CHECK_OK(lm_json_read_int(&f, "n", 0, 10, &n), &err);
    CHECK_OK(lm_json_read_int(&f, "missing", 0, 10, &absent), &err);
    CHECK_OK(lm_json_read_int(&f, "nul", 0, 10, &nul), &err);
    CHECK(n == 7 && absent == 42 && nul == 43);
    CHECK_OK(lm_json_read_float(&f, "x", 0.0, 1.0, &x), &err);
    CHECK_OK(lm_json_read_bool(&f, "b", &b), &err);
    CHECK_OK(lm_json_read_string(&f, "s", s, sizeof s), &err);
    CHECK(x == 0.5f && b && strcmp(s, "silu") == 0);

    int list[4] = {0};
    size_t count = 99;
    CHECK_OK(lm_json_read_int_array(&f, "list", 0, 9, 3, 3, false, list, &count), &err);
    CHECK(count == 3 && list[0] == 1 && list[2] == 3);
    CHECK_OK(lm_json_read_int_array(&f, "one", 0, 9, 0, 4, true, list, &count), &err);
    CHECK(count == 1 && list[0] == 3);
    count = 99;
    CHECK_OK(lm_json_read_int_array(&f, "nul", 0, 9, 0, 4, true, list, &count), &err);
    CHECK(count == 99);

    const cJSON *arr;
    CHECK_OK(lm_json_read_array(&f, "strs", 4, "strings", &arr, &count), &err);
    CHECK(arr && count == 2 && cJSON_IsString(arr->child));
    CHECK_OK(lm_json_read_array(&f, "missing", 4, "strings", &arr, &count), &err);
    CHECK(!arr && count == 0);

    lm_json_fields inner, deep, none;
    CHECK_OK(lm_json_fields_sub(&f, "inner", &inner), &err);
    CHECK_OK(lm_json_fields_sub(&inner, "deep", &deep), &err);
    CHECK_OK(lm_json_fields_sub(&deep, "absent", &none), &err);
    CHECK(strcmp(deep.path, "inner.deep.") == 0 && none.object == NULL);
    CHECK_OK(lm_json_read_int(&none, "k", 0, 1, &absent), &err); /* an absent object reads as empty */
    CHECK_OK(lm_json_read_string(&deep, "k", s, sizeof s), &err);
    CHECK(strcmp(s, "v") == 0 && absent == 42);
    cJSON_Delete(root);
}

static void test_errors(void) {
    cJSON *root = cJSON_Parse(doc);
    CHECK(root);
    lm_error err = {0};
    lm_json_fields f = lm_json_fields_of("c.json", root, &err), inner, deep;
    CHECK_OK(lm_json_fields_sub(&f, "inner", &inner), &err);
    CHECK_OK(lm_json_fields_sub(&inner, "deep", &deep), &err);
    int i = 0, list[3];
    size_t count = 0;
    float x;
    bool b;
    char s[4];
    const cJSON *arr;

    CHECK(lm_json_read_int(&f, "n", 8, 10, &i) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "c.json: n is 7; it must be between 8 and 10"), "%s", err.message);
    CHECK(lm_json_read_int(&deep, "bad", 0, 10, &i) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "c.json: inner.deep.bad must be an integer"), "%s", err.message);
    CHECK(lm_json_read_float(&f, "x", 0.5, 1.0, &x) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "c.json: x is 0.5; it must be above 0.5"), "%s", err.message);
    CHECK(lm_json_read_bool(&f, "n", &b) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "c.json: n must be true or false"), "%s", err.message);
    CHECK(lm_json_read_string(&f, "s", s, sizeof s) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "c.json: s must be a string of at most 3 characters"), "%s",
              err.message);
    CHECK(lm_json_read_int_array(&f, "list", 0, 9, 2, 2, false, list, &count) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "c.json: list must be a list of 2 integers between 0 and 9"), "%s",
              err.message);
    CHECK(lm_json_read_int_array(&f, "list", 0, 2, 1, 3, false, list, &count) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "list must be a list of 1 to 3 integers between 0 and 2"), "%s",
              err.message);
    CHECK(lm_json_read_int_array(&f, "one", 0, 9, 0, 3, false, list, &count) == LM_ERR_FORMAT);
    CHECK(lm_json_read_array(&f, "strs", 1, "strings", &arr, &count) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "c.json: strs must be a list of at most 1 strings"), "%s",
              err.message);
    CHECK(lm_json_read_array(&f, "s", 4, "strings", &arr, &count) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "c.json: s must be a list of strings"), "%s", err.message);
    CHECK(lm_json_fields_sub(&f, "n", &deep) == LM_ERR_FORMAT);
    CHECK_MSG(strstr(err.message, "c.json: n must be an object"), "%s", err.message);
    CHECK(lm_json_field_error(&inner, LM_ERR_UNSUPPORTED, "k", "is '%s'; no", "v") ==
          LM_ERR_UNSUPPORTED);
    CHECK_MSG(strcmp(err.message, "c.json: inner.k is 'v'; no") == 0, "%s", err.message);
    cJSON_Delete(root);
}

int main(void) {
    RUN_TEST(test_reads_and_defaults);
    RUN_TEST(test_errors);
    return test_summary("test_json_fields");
}
