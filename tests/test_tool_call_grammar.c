/* A forced call's grammar in each call form (server/tool_call_grammar.h)
 * and its pieces: text avoiding markers (grammar/text_avoiding.h) and a
 * finished grammar embedded in another (grammar/grammar_compose.h).  The
 * calls accepted are written as the templates write them (Qwen3's JSON,
 * Qwen3.5's XML from tests/data/tool-forms/qwen35-xml.jinja, GLM-4.6's
 * from tests/data/templates/glm-4.6.jinja), and each goes back through the
 * tool parser to the arguments it was written from. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compiled.h"
#include "grammar/grammar_compose.h"
#include "grammar/matcher.h"
#include "grammar/regex_compile.h"
#include "grammar/text_avoiding.h"
#include "harness.h"
#include "server/tool_call_grammar.h"
#include "server/tool_parser.h"

static bool accepts(const lm_grammar *g, const char *s) {
    lm_gmatcher m;
    lm_error err;
    if (lm_gmatcher_init(&m, g, &err) != LM_OK) return false;
    lm_gstate a = {0}, b = {0};
    bool ok = lm_gmatcher_start(&m, &a);
    for (size_t i = 0; ok && s[i]; i++) {
        ok = lm_gmatcher_advance(&m, &a, (uint8_t)s[i], &b);
        lm_gstate t = a;
        a = b;
        b = t;
    }
    ok = ok && lm_gstate_complete(&a);
    lm_gstate_free(&a);
    lm_gstate_free(&b);
    lm_gmatcher_free(&m);
    return ok;
}

static void avoiding_grammar(bool no_edge_newline, lm_grammar *g) {
    static const char *const words[] = {"</p>", "<t>"};
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    lm_error err = {0};
    uint32_t rule = 0;
    CHECK_OK(lm_grammar_text_avoiding(&b, words, 2, no_edge_newline, &rule, &err), &err);
    CHECK_OK(lm_grammar_finish(&b, rule, g, &err), &err);
    lm_grammar_builder_free(&b);
}

static void test_text_avoiding(void) {
    lm_grammar g = {0};
    avoiding_grammar(false, &g);
    const char *yes[] = {"", "abc", "a</pb", "<</", "</</p", "<t", "t>", "\xc3\xa9t\xe2\x82\xac", "\na\n", "<<t"};
    const char *no[] = {"x</p>", "<t>", "<<t>", "</</p>", "a\xff", "\xc3", "\xed\xa0\x80"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) CHECK_MSG(accepts(&g, yes[i]), "accepts '%s'", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) CHECK_MSG(!accepts(&g, no[i]), "refuses '%s'", no[i]);
    lm_grammar_free(&g);
    avoiding_grammar(true, &g);
    CHECK(accepts(&g, "") && accepts(&g, "a\nb") && accepts(&g, "a\n\nb"));
    CHECK(!accepts(&g, "\nab") && !accepts(&g, "ab\n") && !accepts(&g, "\n") && !accepts(&g, "a</p>"));
    lm_grammar_free(&g);
}

static void test_embed(void) {
    /* "k=" then a regular expression's grammar, embedded, then ";" */
    lm_grammar piece = {0}, whole = {0};
    lm_error err = {0};
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_REGEX, .text = "[a-c]+(x|yz)", .text_len = 12};
    CHECK_OK(lm_grammar_compile_spec(&spec, &piece, &err), &err);
    lm_grammar_builder b;
    lm_grammar_builder_init(&b);
    lm_gseq s = {0};
    uint32_t inner = 0, root = 0;
    CHECK_OK(lm_gseq_literal(&b, &s, "k=", 2, &err), &err);
    CHECK_OK(lm_grammar_embed(&b, &piece, &inner, &err), &err);
    lm_gseq_ref(&s, inner);
    CHECK_OK(lm_gseq_literal(&b, &s, ";", 1, &err), &err);
    CHECK_OK(lm_grammar_rule_of(&b, &s, &root, &err), &err);
    CHECK_OK(lm_grammar_finish(&b, root, &whole, &err), &err);
    CHECK(accepts(&whole, "k=abx;") && accepts(&whole, "k=cyz;"));
    CHECK(!accepts(&whole, "abx") && !accepts(&whole, "k=x;") && !accepts(&whole, "k=ay;") && !accepts(&whole, "k=ax"));
    lm_gseq_free(&s);
    lm_grammar_builder_free(&b);
    lm_grammar_free(&piece);
    lm_grammar_free(&whole);
}

static const char *tools_json =
    "[{\"type\":\"function\",\"function\":{\"name\":\"forecast\",\"strict\":true,\"parameters\":{"
    "\"type\":\"object\",\"$defs\":{\"unit\":{\"enum\":[\"c\",\"f\"]}},\"properties\":{"
    "\"city\":{\"type\":\"string\"},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14},"
    "\"unit\":{\"$ref\":\"#/$defs/unit\"},"
    "\"mode\":{\"type\":\"string\",\"enum\":[\"fast\",\"full report\"]},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"},"
    "\"code\":{\"type\":\"string\",\"maxLength\":3},"
    "\"where\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"}},\"required\":[\"lat\"],"
    "\"additionalProperties\":false},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}},"
    "\"required\":[\"city\",\"days\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]";

typedef struct {
    const char *output;    /* after the forced opening of "forecast" */
    bool ok;
    const char *arguments; /* the first call's, as the parser reads them back (ok only) */
} call_case;

/* Checks each case against the form's grammar, and the accepted ones'
 * parse after the forced opening. */
static void check_form(lm_tool_form form, bool parallel, const call_case *cases, int n) {
    cJSON *tools = cJSON_Parse(tools_json);
    CHECK(tools != NULL);
    lm_tool_call_grammar_spec spec = {.tools = tools, .form = form, .first = "forecast", .parallel = parallel};
    loom_grammar *g = NULL;
    lm_error err = {0};
    CHECK_OK(lm_tool_call_grammar(&spec, 0, &g, &err), &err);
    for (int i = 0; g && i < n; i++) {
        bool got = accepts(&g->grammar, cases[i].output);
        CHECK_MSG(got == cases[i].ok, "form %d case %d: %s", (int)form, i, cases[i].output);
        if (!cases[i].ok || !got) continue;
        lm_tool_parser p;
        lm_tool_parser_init(&p, tools, 7);
        CHECK_OK(lm_tool_parser_start_forced(&p, form, "forecast", &err), &err);
        lm_sbuf content = {0};
        lm_tool_call_list calls = {0};
        CHECK(lm_tool_parser_feed(&p, cases[i].output, strlen(cases[i].output), &content, &calls));
        CHECK(lm_tool_parser_finish(&p, &content, &calls));
        CHECK_MSG(calls.n >= 1 && strcmp(calls.items[0].name, "forecast") == 0 &&
                      strcmp(calls.items[0].arguments, cases[i].arguments) == 0,
                  "form %d case %d parses to %s (want %s)", (int)form, i, calls.n ? calls.items[0].arguments : "-",
                  cases[i].arguments);
        lm_sbuf_free(&content);
        lm_tool_call_list_free(&calls);
        lm_tool_parser_free(&p);
    }
    loom_grammar_free(g);
    cJSON_Delete(tools);
}

static void test_xml_form(void) {
    static const call_case cases[] = {
        {"<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>", true,
         "{\"city\":\"New York\",\"days\":3}"},
        /* every property, in the schema's order; strings raw (even when they
         * look like JSON), the others JSON text */
        {"<parameter=city>\n\"a\" <b> & 12\nline two\n</parameter>\n<parameter=days>\n14\n</parameter>\n"
         "<parameter=unit>\n\"f\"\n</parameter>\n<parameter=mode>\nfull report\n</parameter>\n"
         "<parameter=zip>\n01234\n</parameter>\n<parameter=code>\nab\n</parameter>\n"
         "<parameter=where>\n{\"lat\":1.5}\n</parameter>\n<parameter=tags>\n[true,false]\n</parameter>\n</function>",
         true,
         "{\"city\":\"\\\"a\\\" <b> & 12\\nline two\",\"days\":14,\"unit\":\"f\",\"mode\":\"full report\","
         "\"zip\":\"01234\",\"code\":\"ab\",\"where\":{\"lat\":1.5},\"tags\":[true,false]}"},
        {"<parameter=city>\n\n</parameter>\n<parameter=days>\n1\n</parameter>\n</function>", true,
         "{\"city\":\"\",\"days\":1}"},
        {"<parameter=days>\n3\n</parameter>\n</function>", false, NULL},                                /* city missing */
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n15\n</parameter>\n</function>", false, NULL}, /* maximum */
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=other>\n1\n</parameter>\n"
         "</function>", false, NULL},                                                                   /* unknown */
        {"<parameter=city>\na</parameter>b\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>", false, NULL},
        {"<parameter=city>\na<tool_call>\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>", false, NULL},
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=unit>\nc\n</parameter>\n"
         "</function>", false, NULL},                                                                   /* unit is JSON */
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=mode>\nslow\n</parameter>\n"
         "</function>", false, NULL},
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=zip>\n1234\n</parameter>\n"
         "</function>", false, NULL},
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=code>\nabcd\n</parameter>\n"
         "</function>", false, NULL},
        {"<parameter=days>\n3\n</parameter>\n<parameter=city>\nx\n</parameter>\n</function>", false, NULL}, /* order */
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", false, NULL},
    };
    check_form(LM_TOOL_FORM_XML, false, cases, (int)(sizeof cases / sizeof cases[0]));
    /* parallel: more calls, each whole, the last one closed or not */
    static const call_case more[] = {
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>", true,
         "{\"city\":\"x\",\"days\":3}"},
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", true,
         "{\"city\":\"x\",\"days\":3}"},
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n"
         "<tool_call>\n<function=ping>\n</function>\n</tool_call>", true, "{\"city\":\"x\",\"days\":3}"},
        {"<parameter=city>\nx\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n"
         "<tool_call>\n<function=nope>\n</function>", false, NULL},
    };
    check_form(LM_TOOL_FORM_XML, true, more, (int)(sizeof more / sizeof more[0]));
}

static void test_glm_form(void) {
    static const call_case cases[] = {
        {"<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n"
         "</tool_call>", true, "{\"city\":\"Rome\",\"days\":2}"},
        {"<arg_key>city</arg_key>\n<arg_value>a\nb</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n"
         "<arg_key>where</arg_key>\n<arg_value>{\"lat\":-3}</arg_value>\n</tool_call>", true,
         "{\"city\":\"a\\nb\",\"days\":2,\"where\":{\"lat\":-3}}"},
        /* GLM's parser trims a newline at a value's edges: none is written there */
        {"<arg_key>city</arg_key>\n<arg_value>\nRome</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n"
         "</tool_call>", false, NULL},
        {"<arg_key>city</arg_key>\n<arg_value>Rome\n</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n"
         "</tool_call>", false, NULL},
        {"<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n</tool_call>", false, NULL},
        {"<arg_key>city</arg_key>\n<arg_value>R</arg_value>me</arg_value>\n<arg_key>days</arg_key>\n"
         "<arg_value>2</arg_value>\n</tool_call>", false, NULL},
    };
    check_form(LM_TOOL_FORM_GLM, false, cases, (int)(sizeof cases / sizeof cases[0]));
}

static void test_json_form(void) {
    static const call_case cases[] = {
        {"{\"city\":\"x\",\"days\":3}}", true, "{\"city\":\"x\",\"days\":3}"},
        {"{\"city\": \"<b>\", \"days\": 3, \"unit\": \"c\"}}", true, "{\"city\":\"<b>\",\"days\":3,\"unit\":\"c\"}"},
        {"{\"city\":\"x\"}}", false, NULL},
        {"{\"city\":\"x\",\"days\":3}", false, NULL},
        {"{\"city\":\"x\",\"days\":3}}\n</tool_call>", false, NULL},
    };
    check_form(LM_TOOL_FORM_JSON, false, cases, (int)(sizeof cases / sizeof cases[0]));
    static const call_case more[] = {
        {"{\"city\":\"x\",\"days\":3}}\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}", true,
         "{\"city\":\"x\",\"days\":3}"},
    };
    check_form(LM_TOOL_FORM_JSON, true, more, 1);
}

/* A strict tool whose schema the form cannot write is refused by name; the
 * same tool not strict gets the form's generic arguments. */
static void test_unenforceable(void) {
    const char *strict = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,\"parameters\":{"
                         "\"type\":\"object\",\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}}}]";
    const char *loose = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{"
                        "\"type\":\"object\",\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}}}]";
    cJSON *t1 = cJSON_Parse(strict), *t2 = cJSON_Parse(loose);
    lm_tool_call_grammar_spec spec = {.tools = t1, .form = LM_TOOL_FORM_XML, .first = "f"};
    loom_grammar *g = NULL;
    lm_error err = {0};
    CHECK(lm_tool_call_grammar(&spec, 0, &g, &err) != LM_OK && !g);
    CHECK_MSG(strstr(err.message, "tool 'f'") && strstr(err.message, "anyOf"), "%s", err.message);
    spec.tools = t2;
    CHECK_OK(lm_tool_call_grammar(&spec, 0, &g, &err), &err);
    CHECK(g && accepts(&g->grammar, "<parameter=a>\nanything\n</parameter>\n</function>"));
    CHECK(g && accepts(&g->grammar, "</function>"));
    loom_grammar_free(g);
    g = NULL;
    /* a raw string's marker-holding enum value cannot be written */
    const char *marker = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,\"parameters\":{"
                         "\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"enum\":[\"a</parameter>\"]}}}}}]";
    cJSON *t3 = cJSON_Parse(marker);
    spec.tools = t3;
    CHECK(lm_tool_call_grammar(&spec, 0, &g, &err) != LM_OK && !g);
    CHECK_MSG(strstr(err.message, "parameter 's'"), "%s", err.message);
    cJSON_Delete(t1);
    cJSON_Delete(t2);
    cJSON_Delete(t3);
}

int main(void) {
    RUN_TEST(test_text_avoiding);
    RUN_TEST(test_embed);
    RUN_TEST(test_xml_form);
    RUN_TEST(test_glm_form);
    RUN_TEST(test_json_form);
    RUN_TEST(test_unenforceable);
    return test_summary("test_tool_call_grammar");
}
