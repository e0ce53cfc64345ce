/* Incremental tool-call streaming (lm_tool_parser's stream_calls): for many
 * random cuttings of model output in the three forms, the open call's
 * arguments only grow, the finished call's arguments continue what was
 * shown and are valid JSON, and the finished result (content, names,
 * arguments) is the one the parser gives without streaming. */
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

/* Model outputs, well formed and not. */
static const char *outputs[] = {
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
    /* escapes, surrogate pairs, UTF-8, numbers and literals re-printed as cJSON prints them */
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"S\\u00e3o \\\"P\\\"\\n"
    "\\ud83d\\ude00 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80" "\", \"days\": 1.50, \"e\": 1E2, \"l\": [true, null, "
    "{\"k\": -0, \"z\": []}, \"\\/\"], \"o\": {}}}\n</tool_call>",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\nand a second line\n</parameter>\n"
    "<parameter=days>\n5\n</parameter>\n<parameter=zip>\n01234\n</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n"
    "</parameter>\n</function>\n</tool_call>",
    "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Ca va \"q\" \xc3\xa7" "a\n</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n<tool_call>get_weather\n<arg_key>opts"
    "</arg_key>\n<arg_value>{\"unit\": \"C\"}</arg_value>\n</tool_call>",
    "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
    "\"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call> after",
    "<tool_call>\n{\"arguments\": {\"x\": 1}, \"name\": \"late\"}\n</tool_call>",
    "<tool_call>now\n</tool_call>",
    /* an XML value the model forgot to close */
    "<tool_call>\n<function=f>\n<parameter=a>\nx\n<parameter=b>\ny\n</function>\n</tool_call>",
    "no calls, just < and <tool and </tool_call>",
    "<tool_call>\nnot { a call\n</tool_call>after",
    "<tool_call>\n{\"name\": \"cut\", \"arguments\": {\"k\": 1}}",
};
/* Outputs whose call is announced and then stops parsing: streamed, the
 * call stays a call with what was shown completed (non-streaming, content). */
static const struct {
    const char *output, *name, *arguments;
} announced_then_broken[] = {
    {"<tool_call>\n{\"name\": \"cut\", \"argu", "cut", "{}"},
    {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"abc", "f", "{\"s\":\"abc\"}"},
    {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": tru", "f", "{\"a\":[1,{}]}"},
    {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1 \"b\": 2}}\n</tool_call>", "f", "{\"a\":1}"},
    {"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Ro", "get_weather", "{\"city\":\"Ro\"}"},
    /* a bad escape inside a string being written: the string is closed */
    {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"c\": \"\\,Pa\", \"d\": 3}}\n</tool_call>", "f", "{\"c\":\"\"}"},
};

typedef struct {
    lm_sbuf content;
    lm_tool_call_list calls;
} result;

static void result_free(result *r) {
    lm_sbuf_free(&r->content);
    lm_tool_call_list_free(&r->calls);
}

/* Feeds output in pieces ending at cuts[0..n_cuts); with streaming, checks
 * after every piece that what is shown of each call only grows. */
static void run_counting(const char *output, const cJSON *tools, bool stream, const size_t *cuts, int n_cuts,
                         result *r, int *announced, int *fully_shown) {
    lm_tool_parser p;
    lm_tool_parser_init(&p, tools, 7);
    p.stream_calls = stream;
    memset(r, 0, sizeof *r);
    char shown_id[40] = "";
    lm_sbuf shown = {0};
    int shown_index = -1;
    *announced = 0;
    *fully_shown = 0;
    size_t at = 0, len = strlen(output);
    for (int k = 0; k <= n_cuts; k++) {
        size_t end = k < n_cuts ? cuts[k] : len;
        CHECK(lm_tool_parser_feed(&p, output + at, end - at, &r->content, &r->calls));
        at = end;
        if (k == n_cuts) CHECK(lm_tool_parser_finish(&p, &r->content, &r->calls));
        /* a call shown before must have finished with what was shown as a prefix */
        if (shown_index >= 0 && shown_index < r->calls.n) {
            const lm_tool_call *c = &r->calls.items[shown_index];
            CHECK_MSG(strcmp(c->id, shown_id) == 0, "'%s': call %d changed its id", output, shown_index);
            CHECK_MSG(strncmp(c->arguments, lm_sbuf_str(&shown), shown.len) == 0,
                      "'%s': the call's arguments '%s' do not continue what was shown '%s'", output, c->arguments,
                      lm_sbuf_str(&shown));
            if (shown.len) {
                cJSON *doc = cJSON_Parse(c->arguments);
                CHECK_MSG(cJSON_IsObject(doc), "'%s': a streamed call ended with arguments '%s', not a JSON object",
                          output, c->arguments);
                cJSON_Delete(doc);
            }
            /* all but the closing brace was shown before the call ended */
            *fully_shown += shown.len + 1 >= strlen(c->arguments);
            shown_index = -1;
            lm_sbuf_clear(&shown);
        }
        lm_tool_call_view v;
        if (lm_tool_parser_open_call(&p, &v)) {
            CHECK(stream);
            if (shown_index != r->calls.n) { /* a new call */
                shown_index = r->calls.n;
                snprintf(shown_id, sizeof shown_id, "%s", v.id);
                lm_sbuf_clear(&shown);
                (*announced)++;
            }
            CHECK_MSG(strcmp(v.id, shown_id) == 0, "'%s': the open call changed its id", output);
            CHECK_MSG(v.arguments_len >= shown.len && strncmp(v.arguments, lm_sbuf_str(&shown), shown.len) == 0,
                      "'%s': shown arguments went from '%s' to '%s'", output, lm_sbuf_str(&shown), v.arguments);
            lm_sbuf_clear(&shown);
            lm_sbuf_append(&shown, v.arguments, v.arguments_len);
        }
    }
    lm_sbuf_free(&shown);
    lm_tool_parser_free(&p);
}

static void run(const char *output, const cJSON *tools, bool stream, const size_t *cuts, int n_cuts, result *r,
                int *announced) {
    int fully_shown;
    run_counting(output, tools, stream, cuts, n_cuts, r, announced, &fully_shown);
}

static bool same(const result *a, const result *b) {
    if (strcmp(lm_sbuf_str(&a->content), lm_sbuf_str(&b->content)) != 0 || a->calls.n != b->calls.n) return false;
    for (int i = 0; i < a->calls.n; i++)
        if (strcmp(a->calls.items[i].name, b->calls.items[i].name) ||
            strcmp(a->calls.items[i].arguments, b->calls.items[i].arguments) ||
            strcmp(a->calls.items[i].id, b->calls.items[i].id))
            return false;
    return true;
}

static uint64_t next_random(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Sorted distinct cut points, about one every `mean` bytes. */
static int random_cuts(uint64_t *rng, size_t len, size_t mean, size_t *cuts, int max) {
    int n = 0;
    for (size_t i = 1; i < len && n < max; i++)
        if (next_random(rng) % mean == 0) cuts[n++] = i;
    return n;
}

static void test_streamed_equals_whole(void) {
    cJSON *tools = cJSON_Parse(tools_json);
    CHECK(tools);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    size_t cuts[1024];
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0] && !test_current_failed(); i++) {
        const char *out = outputs[i];
        result whole, streamed;
        int announced;
        run(out, tools, false, NULL, 0, &whole, &announced);
        for (int trial = 0; trial < 300 && !test_current_failed(); trial++) {
            size_t mean = 1 + trial % 9;
            int n = trial == 0 ? 0 : random_cuts(&rng, strlen(out), mean, cuts, 1024);
            run(out, tools, true, cuts, n, &streamed, &announced);
            CHECK_MSG(same(&whole, &streamed), "'%s' (%d cuts): streamed content '%s', %d calls%s%s differ",
                      out, n, lm_sbuf_str(&streamed.content), streamed.calls.n, streamed.calls.n ? ": " : "",
                      streamed.calls.n ? streamed.calls.items[0].arguments : "");
            result_free(&streamed);
        }
        result_free(&whole);
    }
    cJSON_Delete(tools);
}

/* Cut at every byte: each call is shown before it ends, and a long string
 * value is shown while it is written, not only when it is closed. */
static void test_shown_while_written(void) {
    cJSON *tools = cJSON_Parse(tools_json);
    size_t cuts[2048];
    for (size_t i = 0; i < 4; i++) {
        const char *out = outputs[i];
        size_t len = strlen(out);
        int n = 0;
        for (size_t k = 1; k < len && n < 2048; k++) cuts[n++] = k;
        result r;
        int announced, fully_shown;
        run_counting(out, tools, true, cuts, n, &r, &announced, &fully_shown);
        CHECK_MSG(announced == r.calls.n && r.calls.n > 0, "'%s': %d calls announced of %d", out, announced, r.calls.n);
        CHECK_MSG(fully_shown == r.calls.n, "'%s': %d of %d calls shown whole before they ended", out, fully_shown,
                  r.calls.n);
        result_free(&r);
    }
    /* the XML value "New York\nand a second line" is visible half written */
    const char *out = outputs[2];
    const char *half = strstr(out, "and a second");
    lm_tool_parser p;
    lm_tool_parser_init(&p, tools, 1);
    p.stream_calls = true;
    result r = {0};
    lm_tool_parser_feed(&p, out, (size_t)(half - out) + 3, &r.content, &r.calls);
    lm_tool_call_view v;
    CHECK(lm_tool_parser_open_call(&p, &v));
    CHECK_MSG(strcmp(v.arguments, "{\"city\":\"New York\\nand") == 0, "shown: '%s'", v.arguments);
    CHECK(strcmp(v.name, "get_weather") == 0 && strncmp(v.id, "call_", 5) == 0);
    lm_tool_parser_free(&p);
    result_free(&r);
    cJSON_Delete(tools);
}

static void test_announced_then_broken(void) {
    uint64_t rng = 12345;
    size_t cuts[512];
    for (size_t i = 0; i < sizeof announced_then_broken / sizeof announced_then_broken[0]; i++) {
        const char *out = announced_then_broken[i].output;
        for (int trial = 0; trial < 50 && !test_current_failed(); trial++) {
            int n = random_cuts(&rng, strlen(out), 1 + trial % 5, cuts, 512);
            result r;
            int announced;
            run(out, NULL, true, cuts, n, &r, &announced);
            CHECK_MSG(r.calls.n == 1 && strcmp(r.calls.items[0].name, announced_then_broken[i].name) == 0 &&
                          strcmp(r.calls.items[0].arguments, announced_then_broken[i].arguments) == 0 &&
                          r.content.len == 0,
                      "'%s': %d calls (%s), content '%s'", out, r.calls.n, r.calls.n ? r.calls.items[0].arguments : "",
                      lm_sbuf_str(&r.content));
            result_free(&r);
        }
    }
}

int main(void) {
    RUN_TEST(test_streamed_equals_whole);
    RUN_TEST(test_shown_while_written);
    RUN_TEST(test_announced_then_broken);
    return test_summary("test_tool_call_stream");
}
