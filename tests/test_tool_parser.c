/* The tool-call parser on the Qwen3 JSON, Qwen3.5 XML and GLM-4.6V forms,
 * whole and fed in pieces cut at every byte. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "server/tool_choice.h"
#include "server/tool_parser.h"
#include "text/chat_template.h"

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
    /* GLM as its templates write it (values typed by the schema: days is an
     * integer, zip and city strings even when they look like JSON), two
     * calls after content; the same without newlines (GLM-4.7's form); a
     * call without arguments, as the template renders one. */
    {"Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>123</arg_value>\n"
     "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n<arg_key>zip</arg_key>\n<arg_value>01234</arg_value>\n"
     "</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Ça va \"q\"</arg_value>\n</tool_call>",
     "Checking.\n", 2, {"get_weather", "get_weather"},
     {"{\"city\":\"123\",\"days\":2,\"zip\":\"01234\"}", "{\"city\":\"Ça va \\\"q\\\"\"}"}},
    {"<tool_call>get_weather<arg_key>days</arg_key><arg_value>7</arg_value><arg_key>opts</arg_key>"
     "<arg_value>{\"a\": [1, null]}</arg_value></tool_call>",
     "", 1, {"get_weather"}, {"{\"days\":7,\"opts\":{\"a\":[1,null]}}"}},
    {"<tool_call>now\n</tool_call>", "", 1, {"now"}, {"{}"}},
    {"<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>two</arg_value>\n</tool_call>",
     "", 1, {"get_weather"}, {"{\"days\":\"two\"}"}},
    {"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
     "\"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>",
     "", 2, {"a", "b"}, {"{}", "{\"x\":1}"}},
    {"no calls, just < and <tool and </tool_call>", "no calls, just < and <tool and </tool_call>", 0, {0}, {0}},
    {"<tool_call>\nnot { a call\n</tool_call>after", "<tool_call>\nnot { a call\n</tool_call>after", 0, {0}, {0}},
    {"<tool_call>\n{\"name\": \"cut\", \"arguments\": {\"k\": 1}}", "", 1, {"cut"}, {"{\"k\":1}"}},
    {"<tool_call>\n{\"name\": \"cut\", \"argu", "<tool_call>\n{\"name\": \"cut\", \"argu", 0, {0}, {0}},
    /* GLM cut short (max_tokens): a key not closed ends the arguments, a
     * value not closed keeps what was written (as the XML form does) */
    {"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Ro</arg_value>\n<arg_key>da", "", 1,
     {"get_weather"}, {"{\"city\":\"Ro\"}"}},
    {"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rom", "", 1, {"get_weather"},
     {"{\"city\":\"Rom\"}"}},
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

/* drop_stray (the markers are special tokens the client asked to skip): a
 * </tool_call> outside a call and a <tool_call> inside one are dropped,
 * wherever the text is cut; without it they are content as written. */
static void test_stray_markers_dropped(void) {
    const char *out = "a</tool_call>b<tool_call>{\"name\":\"f\",<tool_call>\"arguments\":{}}</tool_call>c</tool_call>";
    size_t len = strlen(out);
    for (size_t cut = 0; cut <= len; cut++) {
        lm_tool_parser p;
        lm_tool_parser_init(&p, NULL, 1);
        p.drop_stray = true;
        lm_sbuf content = {0};
        lm_tool_call_list calls = {0};
        lm_tool_parser_feed(&p, out, cut, &content, &calls);
        lm_tool_parser_feed(&p, out + cut, len - cut, &content, &calls);
        lm_tool_parser_finish(&p, &content, &calls);
        bool ok = strcmp(lm_sbuf_str(&content), "abc") == 0 && calls.n == 1 &&
                  strcmp(calls.items[0].name, "f") == 0 && strcmp(calls.items[0].arguments, "{}") == 0;
        lm_sbuf_free(&content);
        lm_tool_call_list_free(&calls);
        lm_tool_parser_free(&p);
        CHECK_MSG(ok, "cut at %zu", cut);
    }
    const char *plain = "a</tool_call>b";
    lm_tool_parser p;
    lm_tool_parser_init(&p, NULL, 1);
    lm_sbuf content = {0};
    lm_tool_call_list calls = {0};
    lm_tool_parser_feed(&p, plain, strlen(plain), &content, &calls);
    lm_tool_parser_finish(&p, &content, &calls);
    bool same = strcmp(lm_sbuf_str(&content), plain) == 0;
    lm_sbuf_free(&content);
    lm_tool_call_list_free(&calls);
    lm_tool_parser_free(&p);
    CHECK(same);
}

/* tool_choice forcing: the prompt ends with a call's opening, the parser
 * starts inside that call and sees only what the model writes after it. */
typedef struct {
    lm_tool_form form;
    const char *name;
    const char *output; /* what the model writes after the opening */
    const char *content;
    int n_calls;
    const char *arguments[2];
} forced_case;

static const forced_case forced_cases[] = {
    {LM_TOOL_FORM_JSON, "get_weather", "{\"city\": \"Paris\", \"days\": 3}}\n</tool_call>", "", 1,
     {"{\"city\":\"Paris\",\"days\":3}"}},
    {LM_TOOL_FORM_JSON, "get_weather", "{\"city\": \"Rome\"}}\n</tool_call>\nDone.", "Done.", 1,
     {"{\"city\":\"Rome\"}"}},
    /* a second call after the forced one is parsed as usual */
    {LM_TOOL_FORM_JSON, "get_weather", "{}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n</tool_call>",
     "", 2, {"{}", "{\"x\":1}"}},
    /* cut by max_tokens: the first JSON object written, else what was
     * written completed into JSON as a stream shows it, else the raw text */
    {LM_TOOL_FORM_JSON, "get_weather", "{\"city\": \"Paris\"}", "", 1, {"{\"city\":\"Paris\"}"}},
    {LM_TOOL_FORM_JSON, "get_weather", "{\"city\": \"Par", "", 1, {"{\"city\":\"Par\"}"}},
    {LM_TOOL_FORM_JSON, "get_weather", "", "", 1, {"{}"}},
    {LM_TOOL_FORM_JSON, "get_weather", " gibberish <b> ", "", 1, {"gibberish <b>"}},
    {LM_TOOL_FORM_JSON, "get_weather", "noise</tool_call>after", "after", 1, {"noise"}},
    {LM_TOOL_FORM_JSON, "we\"ird", "{}}</tool_call>", "", 1, {"{}"}},
    {LM_TOOL_FORM_XML, "get_weather",
     "<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>", "", 1,
     {"{\"city\":\"Oslo\",\"days\":2}"}},
    {LM_TOOL_FORM_XML, "get_weather", "<parameter=city>\nOs", "", 1, {"{\"city\":\"Os\"}"}},
    {LM_TOOL_FORM_XML, "get_weather", "", "", 1, {"{}"}},
    {LM_TOOL_FORM_XML, "get_weather", "<parameter=>x</tool_call>", "", 1, {"<parameter=>x"}},
    {LM_TOOL_FORM_GLM, "get_weather", "<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n</tool_call>", "", 1,
     {"{\"city\":\"Rome\"}"}},
    /* cut short: the value keeps what was written, as in the XML form */
    {LM_TOOL_FORM_GLM, "get_weather", "<arg_key>city</arg_key>\n<arg_value>Ro", "", 1, {"{\"city\":\"Ro\"}"}},
    {LM_TOOL_FORM_GLM, "get_weather", "<arg_key>ci", "", 1, {"{}"}},
    {LM_TOOL_FORM_GLM, "get_weather", "", "", 1, {"{}"}},
};

/* Feeds c->output cut at `cut` (piece 0) or in pieces of `piece` bytes. */
static void run_forced_case(const forced_case *c, const cJSON *tools, size_t cut, size_t piece) {
    lm_tool_parser p;
    lm_tool_parser_init(&p, tools, 42);
    lm_sbuf content = {0};
    lm_tool_call_list calls = {0};
    lm_error err = {0};
    bool ok = lm_tool_parser_start_forced(&p, c->form, c->name, &err) == LM_OK;
    size_t len = strlen(c->output);
    if (piece) {
        for (size_t i = 0; i < len; i += piece)
            ok &= lm_tool_parser_feed(&p, c->output + i, len - i < piece ? len - i : piece, &content, &calls);
    } else {
        ok &= lm_tool_parser_feed(&p, c->output, cut, &content, &calls);
        /* nothing of the forced call reaches the content while it is open */
        const char *close = strstr(c->output, "</tool_call>");
        ok &= content.len == 0 || (close && close + strlen("</tool_call>") <= c->output + cut);
        ok &= lm_tool_parser_feed(&p, c->output + cut, len - cut, &content, &calls);
    }
    ok &= lm_tool_parser_finish(&p, &content, &calls);
    ok &= strcmp(lm_sbuf_str(&content), c->content) == 0 && calls.n == c->n_calls;
    for (int i = 0; ok && i < calls.n; i++)
        ok = strcmp(calls.items[i].arguments, c->arguments[i]) == 0 && strncmp(calls.items[i].id, "call_", 5) == 0;
    ok = ok && strcmp(calls.items[0].name, c->name) == 0;
    if (!ok)
        test_failed(__FILE__, __LINE__, "forced %d '%s' + '%s' cut %zu piece %zu: content '%s', %d calls%s%s %s",
                    (int)c->form, c->name, c->output, cut, piece, lm_sbuf_str(&content), calls.n,
                    calls.n ? ": " : "", calls.n ? calls.items[0].name : "", calls.n ? calls.items[0].arguments : "");
    lm_sbuf_free(&content);
    lm_tool_call_list_free(&calls);
    lm_tool_parser_free(&p);
}

static void test_forced_call_split_everywhere(void) {
    cJSON *tools = cJSON_Parse(tools_json);
    CHECK(tools);
    for (size_t i = 0; i < sizeof forced_cases / sizeof forced_cases[0] && !test_current_failed(); i++) {
        size_t len = strlen(forced_cases[i].output);
        for (size_t cut = 0; cut <= len; cut++) run_forced_case(&forced_cases[i], tools, cut, 0);
        run_forced_case(&forced_cases[i], tools, 0, 1);
        run_forced_case(&forced_cases[i], tools, 0, 3);
    }
    cJSON_Delete(tools);
}

/* A forced opening followed by a complete call parses exactly like the model
 * having written the whole call itself. */
static void test_forced_equals_written(void) {
    const lm_tool_form forms[] = {LM_TOOL_FORM_JSON, LM_TOOL_FORM_XML, LM_TOOL_FORM_GLM};
    const char *rests[] = {"{\"city\": \"Lima\", \"days\": 1}}\n</tool_call>",
                           "<parameter=city>\nLima\n</parameter>\n<parameter=days>\n1\n</parameter>\n</function>\n</tool_call>",
                           "<arg_key>city</arg_key>\n<arg_value>Lima</arg_value>\n<arg_key>days</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"};
    cJSON *tools = cJSON_Parse(tools_json);
    for (int f = 0; f < 3; f++) {
        lm_sbuf whole = {0}, content = {0};
        lm_tool_call_list calls = {0};
        CHECK(lm_tool_call_opening(forms[f], "get_weather", &whole));
        lm_sbuf_puts(&whole, rests[f]);
        lm_tool_parser p;
        lm_tool_parser_init(&p, tools, 7);
        lm_tool_parser_feed(&p, lm_sbuf_str(&whole), whole.len, &content, &calls);
        lm_tool_parser_finish(&p, &content, &calls);
        CHECK_MSG(calls.n == 1 && content.len == 0, "form %d: %d calls, content '%s'", f, calls.n, lm_sbuf_str(&content));
        CHECK(calls.n == 1 && strcmp(calls.items[0].arguments, "{\"city\":\"Lima\",\"days\":1}") == 0);
        lm_tool_parser_free(&p);
        lm_tool_call_list_free(&calls);
        lm_sbuf_free(&whole);
        lm_sbuf_free(&content);
    }
    cJSON_Delete(tools);
}

static void test_openings_and_forms(void) {
    static const struct {
        lm_tool_form form;
        const char *name, *opening;
    } openings[] = {
        {LM_TOOL_FORM_JSON, "f", "<tool_call>\n{\"name\": \"f\", \"arguments\": "},
        {LM_TOOL_FORM_JSON, NULL, "<tool_call>\n{\"name\": \""},
        {LM_TOOL_FORM_JSON, "a\"b\\c", "<tool_call>\n{\"name\": \"a\\\"b\\\\c\", \"arguments\": "},
        {LM_TOOL_FORM_XML, "f", "<tool_call>\n<function=f>\n"},
        {LM_TOOL_FORM_XML, NULL, "<tool_call>\n<function="},
        {LM_TOOL_FORM_GLM, "f", "<tool_call>f\n"},
        {LM_TOOL_FORM_GLM, NULL, "<tool_call>"},
    };
    for (size_t i = 0; i < sizeof openings / sizeof openings[0]; i++) {
        lm_sbuf b = {0};
        CHECK(lm_tool_call_opening(openings[i].form, openings[i].name, &b));
        CHECK_MSG(strcmp(lm_sbuf_str(&b), openings[i].opening) == 0, "opening %zu: '%s'", i, lm_sbuf_str(&b));
        lm_sbuf_free(&b);
    }
    CHECK(lm_tool_form_of_template(NULL) == LM_TOOL_FORM_JSON);
    CHECK(lm_tool_form_of_template("{{ '<tool_call>\\n<function=' + name + '>' }}") == LM_TOOL_FORM_XML);
    CHECK(lm_tool_form_of_template("<tool_call>{{ name }}<arg_key>k</arg_key>") == LM_TOOL_FORM_GLM);
    CHECK(lm_tool_form_of_template("<tool_call>\n{\"name\": <function-name>}") == LM_TOOL_FORM_JSON);
    /* the fixture's Qwen3-style template teaches the JSON form */
    char path[1024];
    FILE *f = fopen(test_fixture_path(path, sizeof path, "models/qwen35-dense/chat_template.jinja"), "rb");
    CHECK(f);
    if (f) {
        static char source[65536];
        size_t n = fread(source, 1, sizeof source - 1, f);
        fclose(f);
        source[n] = 0;
        CHECK(n > 0 && lm_tool_form_of_template(source) == LM_TOOL_FORM_JSON);
    }
}

/* Qwen3.5's generation prompt leaves <think> open when thinking is on: a
 * forced call first closes it (an empty thinking block, as the template
 * writes when thinking is off).  GLM's empty block is "\n<think></think>\n"
 * after <|assistant|>, completed from wherever the generation prompt ends. */
static void test_think_closed_before_forced_call(void) {
    const char *open = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n";
    const char *closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    const char *plain = "<|im_start|>assistant\n";
    CHECK(strcmp(lm_forced_call_bridge(LM_TOOL_FORM_XML, open, strlen(open), true), "\n</think>\n\n") == 0);
    CHECK(strcmp(lm_forced_call_bridge(LM_TOOL_FORM_JSON, open, strlen(open), true), "\n</think>\n\n") == 0);
    CHECK(strcmp(lm_forced_call_bridge(LM_TOOL_FORM_XML, open, strlen(open), false), "") == 0);
    CHECK(strcmp(lm_forced_call_bridge(LM_TOOL_FORM_XML, closed, strlen(closed), true), "") == 0);
    CHECK(strcmp(lm_forced_call_bridge(LM_TOOL_FORM_XML, plain, strlen(plain), true), "") == 0);
    static const struct {
        const char *prompt, *bridge;
    } glm[] = {
        {"<|user|>\nhi<|assistant|>\n", "<think></think>\n"},               /* GLM-4.6V, thinking */
        {"<|user|>\nhi<|assistant|>\n<think></think>\n", ""},               /* GLM-4.6V, no thinking */
        {"<|user|>\nhi<|assistant|>", "\n<think></think>\n"},               /* GLM-4.6, thinking */
        {"<|user|>\nhi<|assistant|>\n<think></think>", "\n"},               /* GLM-4.6, no thinking */
        {"<|user|>\nhi<|assistant|>\n<think>", "</think>\n"},               /* a template opening <think> */
        {"<|user|>\nhi<|assistant|>\n<think>x</think>\nok", ""},
        {"<|user|>\nno assistant turn", ""},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof glm / sizeof glm[0]; i++) {
        const char *got = lm_forced_call_bridge(LM_TOOL_FORM_GLM, glm[i].prompt, strlen(glm[i].prompt), true);
        CHECK_MSG(strcmp(got, glm[i].bridge) == 0, "GLM prompt [%s]: bridge [%s], want [%s]", glm[i].prompt, got,
                  glm[i].bridge);
    }
    CHECK(strcmp(lm_forced_call_bridge(LM_TOOL_FORM_GLM, glm[0].prompt, strlen(glm[0].prompt), false), "") == 0);
    lm_openai_request r = {0};
    cJSON *tools = cJSON_Parse(tools_json);
    r.tools = tools;
    r.add_generation_prompt = true;
    r.tool_choice = LM_TOOL_CHOICE_AUTO;
    CHECK(!lm_tool_choice_forces_call(&r));
    r.tool_choice = LM_TOOL_CHOICE_REQUIRED;
    CHECK(lm_tool_choice_forces_call(&r));
    r.tool_choice = LM_TOOL_CHOICE_NAMED;
    CHECK(lm_tool_choice_forces_call(&r));
    r.continue_final_message = true;
    CHECK(!lm_tool_choice_forces_call(&r));
    cJSON_Delete(tools);
}

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0, *len = (size_t)n;
    return buf;
}

static lm_status render(const char *source, size_t len, const char *ctx, char **out, lm_error *err) {
    lm_chat_template *t = NULL;
    lm_status st = lm_chat_template_compile(source, len, &t, err);
    size_t out_len;
    if (!st) st = lm_chat_template_render_json(t, ctx, strlen(ctx), NULL, out, &out_len, err);
    lm_chat_template_free(t);
    return st;
}

/* A forced call's prompt (generation prompt + bridge + opening) is exactly
 * the start of the turn the real template writes for an assistant message
 * that calls that tool without content or reasoning: for the published GLM
 * templates (tests/data/templates), thinking on and off, and the Qwen3.5
 * fixture with thinking off, so the model sees its own trained form.  (With
 * thinking on, that Qwen template's generation prompt opens no <think> while
 * its history writes an empty block before a call: not bridged yet.) */
static void test_forced_prompt_is_the_templates_call_turn(void) {
    static const struct {
        const char *where, *path; /* where: "data" (tests/data) or "fixture" */
    } templates[] = {
        {"data", "templates/glm-ocr.jinja"},
        {"data", "templates/glm-4.6.jinja"},
        {"fixture", "models/qwen35-dense/chat_template.jinja"},
    };
    const char *messages = "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Weather?\"}";
    const char *call = ",{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\","
                       "\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\",\"days\":2}}}]}";
    const char *data = getenv("LOOM_TEST_DATA");
    for (size_t i = 0; i < sizeof templates / sizeof templates[0]; i++) {
        char path[600];
        if (strcmp(templates[i].where, "data") == 0)
            snprintf(path, sizeof path, "%s/%s", data && *data ? data : "tests/data", templates[i].path);
        else
            test_fixture_path(path, sizeof path, templates[i].path);
        size_t len;
        char *source = read_text(path, &len);
        CHECK_MSG(source, "cannot read %s", path);
        lm_tool_form form = lm_tool_form_of_template(source);
        CHECK_MSG(!strstr(templates[i].path, "glm") || form == LM_TOOL_FORM_GLM, "%s: form %d", path, form);
        for (int thinking = 0; thinking < (form == LM_TOOL_FORM_GLM ? 2 : 1); thinking++) {
            char ctx_prompt[1024], ctx_turn[1024];
            snprintf(ctx_prompt, sizeof ctx_prompt,
                     "{\"messages\":%s],\"tools\":%s,\"add_generation_prompt\":true,\"enable_thinking\":%s}",
                     messages, tools_json, thinking ? "true" : "false");
            snprintf(ctx_turn, sizeof ctx_turn,
                     "{\"messages\":%s%s],\"tools\":%s,\"add_generation_prompt\":false,\"enable_thinking\":%s}",
                     messages, call, tools_json, thinking ? "true" : "false");
            lm_error err = {0};
            char *prompt = NULL, *turn = NULL;
            lm_status st = render(source, len, ctx_prompt, &prompt, &err);
            if (!st) st = render(source, len, ctx_turn, &turn, &err);
            lm_sbuf forced = {0};
            bool ok = !st && lm_sbuf_puts(&forced, prompt) &&
                      lm_sbuf_puts(&forced, lm_forced_call_bridge(form, prompt, strlen(prompt), strstr(source, "<think>"))) &&
                      lm_tool_call_opening(form, "get_weather", &forced);
            if (st)
                test_failed(__FILE__, __LINE__, "%s: %s", path, err.message);
            else if (!ok || strncmp(turn, lm_sbuf_str(&forced), forced.len) != 0)
                test_failed(__FILE__, __LINE__, "%s thinking %d:\n  forced [%s]\n  turn   [%s]", path, thinking,
                            lm_sbuf_str(&forced), turn);
            lm_sbuf_free(&forced);
            free(prompt);
            free(turn);
        }
        free(source);
    }
}

/* The markers kept from skip_special_tokens: GLM's argument tags too, so a
 * tokenizer that marks them special does not blank every argument. */
static void test_output_markers(void) {
    const char *m[LM_OUTPUT_MARKERS];
    lm_output_markers(true, true, LM_TOOL_FORM_GLM, m);
    static const char *const glm[LM_OUTPUT_MARKERS] = {"<think>",   "</think>",    "<tool_call>", "</tool_call>",
                                                       "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
    for (int k = 0; k < LM_OUTPUT_MARKERS; k++) CHECK_MSG(m[k] && strcmp(m[k], glm[k]) == 0, "marker %d", k);
    lm_output_markers(false, true, LM_TOOL_FORM_XML, m);
    CHECK(!m[0] && !m[1] && strcmp(m[2], "<tool_call>") == 0 && strcmp(m[3], "</tool_call>") == 0);
    for (int k = 4; k < LM_OUTPUT_MARKERS; k++) CHECK(!m[k]);
    lm_output_markers(true, false, LM_TOOL_FORM_GLM, m);
    CHECK(strcmp(m[0], "<think>") == 0 && strcmp(m[1], "</think>") == 0);
    for (int k = 2; k < LM_OUTPUT_MARKERS; k++) CHECK(!m[k]);
}

int main(void) {
    RUN_TEST(test_whole_and_split);
    RUN_TEST(test_untyped_values_stay_strings);
    RUN_TEST(test_streaming_holds_only_markers);
    RUN_TEST(test_stray_markers_dropped);
    RUN_TEST(test_forced_call_split_everywhere);
    RUN_TEST(test_forced_equals_written);
    RUN_TEST(test_openings_and_forms);
    RUN_TEST(test_think_closed_before_forced_call);
    RUN_TEST(test_forced_prompt_is_the_templates_call_turn);
    RUN_TEST(test_output_markers);
    return test_summary("test_tool_parser");
}
