/* The tool-call parser on the Qwen3 JSON, Qwen3.5 XML and GLM-4.6V forms,
 * whole and fed in pieces cut at every byte. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/tool_parser.h"

static const char *tools_json =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"zip\":{\"type\":\"string\"},\"opts\":{\"type\":\"object\"}}}}}]";

typedef struct {
    const char *output;
    const char *content;
    int n_calls;
    const char *names[2];
    const char *arguments[2]; /* canonical JSON (cJSON unformatted) */
} tool_case;

static const tool_case cases[] = {
    {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
     "", 1, {"get_weather"}, {"{\"city\":\"Paris\",\"days\":3}"}},
    {"Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
     "<parameter=days>\n5\n</parameter>\n<parameter=zip>\n01234\n</parameter>\n</function>\n</tool_call>",
     "Sure.\n", 1, {"get_weather"}, {"{\"city\":\"New York\",\"days\":5,\"zip\":\"01234\"}"}},
    {"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n"
     "<arg_key>opts</arg_key>\n<arg_value>{\"unit\": \"C\"}</arg_value>\n</tool_call>",
     "", 1, {"get_weather"}, {"{\"city\":\"Rome\",\"opts\":{\"unit\":\"C\"}}"}},
    {"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
     "\"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>",
     "\n", 2, {"a", "b"}, {"{}", "{\"x\":1}"}},
    {"no calls, just < and <tool and </tool_call>", "no calls, just < and <tool and </tool_call>", 0, {0}, {0}},
    {"<tool_call>\nnot { a call\n</tool_call>after", "<tool_call>\nnot { a call\n</tool_call>after", 0, {0}, {0}},
    {"<tool_call>\n{\"name\": \"cut\", \"arguments\": {\"k\": 1}}", "", 1, {"cut"}, {"{\"k\":1}"}},
    {"<tool_call>\n{\"name\": \"cut\", \"argu", "<tool_call>\n{\"name\": \"cut\", \"argu", 0, {0}, {0}},
};

static void run_case(const tool_case *c, const cJSON *tools, size_t cut, size_t piece) {
    lm_tool_parser p;
    lm_tool_parser_init(&p, tools, 42);
    lm_sbuf content = {0};
    lm_tool_call_list calls = {0};
    size_t len = strlen(c->output);
    if (piece) {
        for (size_t i = 0; i < len; i += piece)
            lm_tool_parser_feed(&p, c->output + i, len - i < piece ? len - i : piece, &content, &calls);
    } else {
        lm_tool_parser_feed(&p, c->output, cut, &content, &calls);
        lm_tool_parser_feed(&p, c->output + cut, len - cut, &content, &calls);
    }
    lm_tool_parser_finish(&p, &content, &calls);
    bool ok = strcmp(lm_sbuf_str(&content), c->content) == 0 && calls.n == c->n_calls;
    for (int i = 0; ok && i < calls.n; i++)
        ok = strcmp(calls.items[i].name, c->names[i]) == 0 &&
             strcmp(calls.items[i].arguments, c->arguments[i]) == 0 &&
             strncmp(calls.items[i].id, "call_", 5) == 0 && strlen(calls.items[i].id) == 29;
    if (!ok)
        test_failed(__FILE__, __LINE__, "case '%s' cut %zu piece %zu: content '%s', %d calls%s%s %s",
                    c->output, cut, piece, lm_sbuf_str(&content), calls.n, calls.n ? ": " : "",
                    calls.n ? calls.items[0].name : "", calls.n ? calls.items[0].arguments : "");
    lm_sbuf_free(&content);
    lm_tool_call_list_free(&calls);
    lm_tool_parser_free(&p);
}

static void test_whole_and_split(void) {
    cJSON *tools = cJSON_Parse(tools_json);
    CHECK(tools);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !test_current_failed(); i++) {
        size_t len = strlen(cases[i].output);
        for (size_t cut = 0; cut <= len; cut++) run_case(&cases[i], tools, cut, 0);
        run_case(&cases[i], tools, 0, 1);
        run_case(&cases[i], tools, 0, 7);
    }
    cJSON_Delete(tools);
}

/* Without schemas, XML parameter values stay strings. */
static void test_untyped_values_stay_strings(void) {
    const char *out = "<tool_call>\n<function=f>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>";
    lm_tool_parser p;
    lm_tool_parser_init(&p, NULL, 1);
    lm_sbuf content = {0};
    lm_tool_call_list calls = {0};
    lm_tool_parser_feed(&p, out, strlen(out), &content, &calls);
    lm_tool_parser_finish(&p, &content, &calls);
    CHECK(calls.n == 1);
    CHECK(strcmp(calls.items[0].arguments, "{\"n\":\"5\"}") == 0);
    CHECK(content.len == 0);
    lm_sbuf_free(&content);
    lm_tool_call_list_free(&calls);
    lm_tool_parser_free(&p);
}

/* Content before a call streams out before the call is complete; nothing of
 * the markers leaks. */
static void test_streaming_holds_only_markers(void) {
    const char *out = "Hi <tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>";
    lm_tool_parser p;
    lm_tool_parser_init(&p, NULL, 1);
    lm_sbuf content = {0};
    lm_tool_call_list calls = {0};
    lm_tool_parser_feed(&p, out, 5, &content, &calls); /* "Hi <t" */
    CHECK(strcmp(lm_sbuf_str(&content), "Hi ") == 0);
    lm_tool_parser_feed(&p, out + 5, strlen(out) - 5 - 3, &content, &calls);
    CHECK(calls.n == 0);
    lm_tool_parser_feed(&p, out + strlen(out) - 3, 3, &content, &calls);
    CHECK(calls.n == 1);
    CHECK(strcmp(lm_sbuf_str(&content), "Hi ") == 0);
    lm_sbuf_free(&content);
    lm_tool_call_list_free(&calls);
    lm_tool_parser_free(&p);
}

int main(void) {
    RUN_TEST(test_whole_and_split);
    RUN_TEST(test_untyped_values_stay_strings);
    RUN_TEST(test_streaming_holds_only_markers);
    return test_summary("test_tool_parser");
}
