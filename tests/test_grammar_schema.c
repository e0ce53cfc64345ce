/* JSON Schema as users write it (issue 52): each keyword's grammar against
 * instances whose validity JSON Schema defines (written out here, checked
 * by hand against the specification; tests/test_grammar_schema_cases.sh
 * checks a wider corpus against python3-jsonschema), the numeric bounds
 * and multiples against random walks of the grammar (each walk's number
 * checked with strtod), exact const text, string lengths in characters,
 * ignored annotations (the same grammar as without them) and the JSON
 * whitespace modes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compiled.h"
#include "grammar/json_number.h"
#include "grammar/matcher.h"
#include "grammar_walk.h"
#include "harness.h"

static bool compile_ws(const char *schema, loom_json_whitespace ws, const char *pattern, loom_grammar **g, char *msg,
                       size_t size) {
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_SCHEMA, .text = schema, .text_len = strlen(schema),
                              .whitespace = ws, .whitespace_pattern = pattern};
    return loom_grammar_compile(&spec, g, msg, size) == LOOM_OK;
}

static bool compile(const char *schema, loom_grammar **g, char *msg, size_t size) {
    return compile_ws(schema, LOOM_JSON_WHITESPACE_COMPACT, NULL, g, msg, size);
}

typedef struct {
    const char *text;
    bool ok;
} sample;

static void check_schema_ws(const char *schema, loom_json_whitespace ws, const char *pattern, const sample *s, int n) {
    loom_grammar *g = NULL;
    char msg[512];
    CHECK_MSG(compile_ws(schema, ws, pattern, &g, msg, sizeof msg), "compile %s: %s", schema, msg);
    if (!g) return;
    for (int i = 0; i < n; i++)
        CHECK_MSG(test_grammar_accepts(&g->grammar, s[i].text) == s[i].ok, "%s %s %s", schema, s[i].ok ? "refused" : "accepted",
                  s[i].text);
    loom_grammar_free(g);
}

#define CHECK_SCHEMA(schema, ...)                                                                      \
    do {                                                                                               \
        const sample s_[] = {__VA_ARGS__};                                                             \
        check_schema_ws(schema, LOOM_JSON_WHITESPACE_COMPACT, NULL, s_, (int)(sizeof s_ / sizeof s_[0])); \
    } while (0)

static void check_refused(const char *schema, const char *words) {
    loom_grammar *g = NULL;
    char msg[512] = "";
    CHECK_MSG(!compile(schema, &g, msg, sizeof msg), "%s compiled", schema);
    CHECK_MSG(strstr(msg, words), "%s: '%s' does not say '%s'", schema, msg, words);
    if (g) loom_grammar_free(g);
}

/* ------------------------------------------------------------ defects */

/* issue 52: {"x": 216.5E686} answered `maximum: 1e15`; a bounded number now
 * has no exponent and its digits are compared with the bound's. */
static void test_number_bounds(void) {
    CHECK_SCHEMA("{\"type\":\"number\",\"maximum\":1e15}", {"216.5E686", false}, {"216.5", true},
                 {"999999999999999", true}, {"-1e3", false}, {"-1000", true});
    CHECK_SCHEMA("{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"maximum\":0.3}", {"0.1", false}, {"0.10000001", true},
                 {"0.3", true}, {"0.30001", false}, {"0.2999", true}, {"-1", false}, {"0", false});
    CHECK_SCHEMA("{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":-1}", {"-2.5", true}, {"-2.51", false},
                 {"-1", true}, {"-0.99", false}, {"0", false}, {"-1.0", true});
    CHECK_SCHEMA("{\"type\":\"integer\",\"minimum\":1e20}", {"100000000000000000000", true},
                 {"99999999999999999999", false}, {"1e20", false});
    CHECK_SCHEMA("{\"type\":\"integer\",\"minimum\":3,\"exclusiveMaximum\":5}", {"2", false}, {"3", true},
                 {"4", true}, {"5", false}, {"3.5", false});
    check_refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no number");
    check_refused("{\"type\":\"number\",\"exclusiveMinimum\":0.30000000000000004}", "more than 15 significant digits");
    /* random walks: every number the grammar completes lies within its bounds */
    const struct {
        const char *schema;
        double lo, hi;
        bool lo_ex, hi_ex;
        int multiple;
    } cases[] = {
        {"{\"type\":\"number\",\"minimum\":-12.75,\"maximum\":1e15}", -12.75, 1e15, false, false, 0},
        {"{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", 0, 1, true, true, 0},
        {"{\"type\":\"integer\",\"minimum\":-1000,\"maximum\":-10}", -1000, -10, false, false, 0},
        {"{\"type\":\"number\",\"minimum\":123.456,\"maximum\":123.457}", 123.456, 123.457, false, false, 0},
        {"{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":-50,\"exclusiveMaximum\":100}", -50, 100, false, true, 7},
        {"{\"type\":\"integer\",\"multipleOf\":12}", -INFINITY, INFINITY, false, false, 12},
    };
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        loom_grammar *g = NULL;
        char msg[512], text[256];
        CHECK_MSG(compile(cases[c].schema, &g, msg, sizeof msg), "%s: %s", cases[c].schema, msg);
        if (!g) continue;
        int done = 0;
        for (int i = 0; i < 300; i++) {
            if (!test_grammar_walk(&g->grammar, &rng, NULL, 5, text, sizeof text)) continue;
            done++;
            char *end = NULL;
            double v = strtod(text, &end);
            bool ok = end && !*end && (cases[c].lo_ex ? v > cases[c].lo : v >= cases[c].lo) &&
                      (cases[c].hi_ex ? v < cases[c].hi : v <= cases[c].hi) && !strpbrk(text, "eE");
            if (cases[c].multiple) ok = ok && fmod(v, cases[c].multiple) == 0 && !strchr(text, '.');
            CHECK_MSG(ok, "%s generated %s", cases[c].schema, text);
            if (!ok) break;
        }
        CHECK_MSG(done > 100, "%s: %d of 300 walks completed", cases[c].schema, done);
        loom_grammar_free(g);
    }
}

/* issue 52: 9007199254740992 came back as 9.00719925474099e+15 */
static void test_exact_values(void) {
    CHECK_SCHEMA("{\"const\":9007199254740993}", {"9007199254740993", true}, {"9007199254740992", false});
    CHECK_SCHEMA("{\"enum\":[9007199254740992,0.1,1.0,-2E3]}", {"9007199254740992", true}, {"0.1", true},
                 {"1.0", true}, {"-2E3", true}, {"9.00719925474099e+15", false}, {"1", false});
    const struct {
        double v;
        const char *text;
    } t[] = {{9007199254740992.0, "9007199254740992"}, {0.1, "0.1"}, {-2.5e-300, "-2.5e-300"}, {1e21, "1e+21"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char buf[64];
        lm_json_number_text(t[i].v, buf, sizeof buf);
        CHECK_MSG(strcmp(buf, t[i].text) == 0 && strtod(buf, NULL) == t[i].v, "%.17g written %s", t[i].v, buf);
    }
    char buf[64];
    lm_json_number_text(1.0 / 3.0, buf, sizeof buf);
    CHECK_MSG(strtod(buf, NULL) == 1.0 / 3.0 && strlen(buf) <= 19, "1/3 written %s", buf);
}

/* issue 52: minLength counted a \uXXXX surrogate pair as two characters */
static void test_string_lengths(void) {
    CHECK_SCHEMA("{\"type\":\"string\",\"minLength\":2,\"maxLength\":2}", {"\"\\ud83d\\ude00\"", false},
                 {"\"\\ud83d\\ude00a\"", true}, {"\"\xf0\x9f\x98\x80\xc3\xa9\"", true}, {"\"\\u00e9\\n\"", true},
                 {"\"\\ud83d\"", false}, {"\"abc\"", false});
    /* above LM_SCHEMA_MAX_LENGTH a maxLength is generated up to it (fewer is still valid) */
    loom_grammar *g = NULL;
    char msg[512];
    CHECK_MSG(compile("{\"type\":\"string\",\"maxLength\":100000}", &g, msg, sizeof msg), "%s", msg);
    if (g) loom_grammar_free(g);
    check_refused("{\"type\":\"string\",\"minLength\":100000}", "minLength");
}

/* ------------------------------------------------------------ keywords */

/* Annotations and unknown keywords change nothing: the same grammar. */
static void test_ignored_keywords(void) {
    const char *plain = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}";
    const char *annotated =
        "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"id\":\"x\",\"$id\":\"y\",\"$comment\":\"c\","
        "\"title\":\"t\",\"description\":\"d\",\"self\":{\"vendor\":\"v\"},\"_format\":\"z\",\"x-kubernetes-kind\":1,"
        "\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"readonly\":true,\"readOnly\":true,"
        "\"writeOnly\":false,\"deprecated\":true,\"example\":3,\"examples\":[4],\"default\":5,\"requird\":[\"typo\"]}},"
        "\"required\":[\"a\"],\"contentMediaType\":\"text/plain\"}";
    loom_grammar *a = NULL, *b = NULL;
    char msg[512];
    CHECK_MSG(compile(plain, &a, msg, sizeof msg), "%s", msg);
    CHECK_MSG(compile(annotated, &b, msg, sizeof msg), "%s", msg);
    if (a && b) CHECK(lm_grammar_equal(&a->grammar, &b->grammar));
    if (a) loom_grammar_free(a);
    if (b) loom_grammar_free(b);
    /* assertions loom cannot honour are still refused by name */
    check_refused("{\"$recursiveRef\":\"#\"}", "'$recursiveRef' is not supported");
    check_refused("{\"type\":\"string\",\"format\":\"color\"}", "\"color\" is not supported");
}

static void test_formats(void) {
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-02-28T23:59:59Z\"", true},
                 {"\"2024-02-28T23:59:59.123+05:30\"", true}, {"\"2024-02-30T00:00:00Z\"", false},
                 {"\"2024-13-01T00:00:00Z\"", false}, {"\"2024-02-28 23:59:59Z\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"date\"}", {"\"1999-12-01\"", true}, {"\"1999-12-1\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\"", true},
                 {"\"123e4567e89b12d3a456426614174000\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"ipv4\"}", {"\"192.168.0.255\"", true}, {"\"256.1.1.1\"", false},
                 {"\"01.1.1.1\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b@example.com\"", true}, {"\"a@b\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"uri\"}", {"\"https://example.com/a/b?x=1#f\"", true},
                 {"\"example.com\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"duration\"}", {"\"P1Y2M3DT4H5M6S\"", true}, {"\"PT5M\"", true},
                 {"\"P\"", false}, {"\"P1DT\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"ipv6\"}", {"\"2001:db8:0:0:0:0:2:1\"", true}, {"\"2001:db8::1\"", false});
    /* formats that are annotations only constrain nothing */
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"int32\"}", {"\"anything\"", true});
    /* formats of literal-enough forms (a subset every checker accepts) */
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"json-pointer\"}", {"\"/a/b~1c/~0\"", true}, {"\"\"", true},
                 {"\"a/b\"", false}, {"\"/a~2\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"relative-json-pointer\"}", {"\"0#\"", true}, {"\"1/a\"", true},
                 {"\"/a\"", false}, {"\"01\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"idn-hostname\"}", {"\"a.b\"", true}, {"\"-a\"", false});
    /* the format's length within minLength/maxLength, and beside a tighter one */
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":10}", {"\"2000-01-01\"", true});
    CHECK_SCHEMA("{\"type\":\"string\",\"format\":\"ipv4\",\"maxLength\":9}", {"\"1.2.3.4\"", true},
                 {"\"10.20.30.40\"", false});
}

/* 2020-12 references (issue 52): $id and $anchor by URI, resolved against
 * the base URI where the $ref stands; another document refused; a
 * $dynamicRef whose dynamic anchor is the document's only one */
static void test_references(void) {
    CHECK_SCHEMA("{\"$id\":\"http://x/root\",\"type\":\"object\",\"$defs\":{\"a\":{\"$id\":\"a.json\",\"type\":\"integer\"},"
                 "\"b\":{\"$anchor\":\"bee\",\"type\":\"string\"}},\"properties\":{\"p\":{\"$ref\":\"a.json\"},"
                 "\"q\":{\"$ref\":\"http://x/root#bee\"}},\"additionalProperties\":false}",
                 {"{\"p\":1,\"q\":\"s\"}", true}, {"{\"p\":\"x\"}", false}, {"{\"q\":1}", false});
    /* "#/..." within an embedded resource is that resource's pointer */
    CHECK_SCHEMA("{\"$defs\":{\"r\":{\"$id\":\"http://e/r\",\"$defs\":{\"i\":{\"type\":\"boolean\"}},\"$ref\":\"#/$defs/i\"},"
                 "\"i\":{\"type\":\"integer\"}},\"$ref\":\"http://e/r\"}",
                 {"true", true}, {"1", false});
    CHECK_SCHEMA("{\"$id\":\"http://e/x/y.json\",\"$defs\":{\"z\":{\"$id\":\"../z.json\",\"type\":\"null\"}},"
                 "\"$ref\":\"http://e/z.json\"}",
                 {"null", true}, {"0", false});
    check_refused("{\"$ref\":\"http://other/x.json\"}", "another document");
    CHECK_SCHEMA("{\"$dynamicAnchor\":\"node\",\"type\":\"array\",\"items\":{\"$dynamicRef\":\"#node\"}}",
                 {"[[],[[]]]", true}, {"[1]", false});
}

/* unevaluatedProperties / unevaluatedItems see the in-place subschemas'
 * evaluations; a subschema's own are closed before it is merged */
static void test_unevaluated(void) {
    CHECK_SCHEMA("{\"type\":\"object\",\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}}}],"
                 "\"unevaluatedProperties\":false}",
                 {"{\"a\":1}", true}, {"{}", true}, {"{\"a\":1,\"b\":2}", false}, {"{\"a\":\"x\"}", false});
    /* the inner unevaluatedProperties sees only "a": "b" fails it */
    CHECK_SCHEMA("{\"type\":\"object\",\"allOf\":[{\"properties\":{\"a\":{}},\"unevaluatedProperties\":false}],"
                 "\"properties\":{\"b\":{}}}",
                 {"{\"a\":1}", true}, {"{\"b\":1}", false}, {"{\"a\":1,\"b\":1}", false});
    CHECK_SCHEMA("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"allOf\":[{\"prefixItems\":[true,"
                 "{\"type\":\"number\"}]}],\"unevaluatedItems\":false}",
                 {"[\"a\",1]", true}, {"[\"a\"]", true}, {"[\"a\",1,2]", false}, {"[\"a\",\"b\"]", false});
    CHECK_SCHEMA("{\"type\":\"object\",\"$ref\":\"#/$defs/b\",\"properties\":{\"a\":{}},\"unevaluatedProperties\":false,"
                 "\"$defs\":{\"b\":{\"properties\":{\"b\":{\"type\":\"null\"}}}}}",
                 {"{\"b\":null,\"a\":1}", true}, {"{\"b\":1}", false}, {"{\"c\":1}", false}); /* the $ref's properties first */
}

/* not as a bounded complement, if / then / else, oneOf narrowed apart */
static void test_not_and_conditionals(void) {
    CHECK_SCHEMA("{\"type\":\"integer\",\"not\":{\"minimum\":10}}", {"9", true}, {"-3", true}, {"10", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"not\":{\"maxLength\":2}}", {"\"abc\"", true}, {"\"ab\"", false});
    CHECK_SCHEMA("{\"type\":[\"string\",\"boolean\"],\"not\":{\"const\":\"x\"}}", {"true", true}, {"\"x\"", false});
    CHECK_SCHEMA("{\"type\":\"object\",\"not\":{\"required\":[\"a\"]}}", {"{}", true}, {"{\"a\":1}", false});
    CHECK_SCHEMA("{\"not\":{\"not\":{\"type\":\"string\"}}}", {"\"s\"", true}, {"1", false});
    CHECK_SCHEMA("{\"not\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"object\"}]}}", {"1", true}, {"null", true},
                 {"\"s\"", false}, {"{}", false});
    check_refused("{\"not\":{}}", "nothing matches");
    check_refused("{\"type\":\"string\",\"not\":{\"pattern\":\"a\"}}", "not (of keywords without a bounded complement");
    /* (if and then) or (not-if and else) */
    CHECK_SCHEMA("{\"type\":\"integer\",\"if\":{\"minimum\":10},\"then\":{\"multipleOf\":2},\"else\":{\"maximum\":3}}",
                 {"12", true}, {"2", true}, {"11", false}, {"5", false});
    CHECK_SCHEMA("{\"if\":false,\"then\":{\"type\":\"string\"},\"else\":{\"type\":\"integer\"}}", {"1", true},
                 {"\"s\"", false});
    /* oneOf: the integer branch where {"minimum":2} fails, the other where integer does */
    CHECK_SCHEMA("{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}", {"1", true}, {"\"s\"", true}, {"2", false},
                 {"7", false});
    check_refused("{\"oneOf\":[{\"type\":\"string\",\"pattern\":\"a\"},{\"type\":\"string\",\"pattern\":\"b\"}]}",
                  "'oneOf' whose branches all may match");
}

/* contains with maxContains, propertyNames, false subschemas */
static void test_contains_names_false(void) {
    CHECK_SCHEMA("{\"type\":\"array\",\"contains\":{\"type\":\"integer\"},\"maxContains\":2}", {"[1,2]", true},
                 {"[1]", true}, {"[1,2,3]", false}, {"[]", false});
    check_refused("{\"type\":\"array\",\"contains\":{},\"minContains\":3,\"maxContains\":1}", "maxContains below minContains");
    CHECK_SCHEMA("{\"type\":\"object\",\"propertyNames\":{\"maxLength\":2},\"additionalProperties\":{\"type\":\"integer\"}}",
                 {"{\"ab\":1}", true}, {"{}", true}, {"{\"abc\":1}", false}, {"{\"ab\":\"x\"}", false});
    CHECK_SCHEMA("{\"type\":\"object\",\"properties\":{\"long\":{},\"ok\":{}},\"propertyNames\":{\"maxLength\":2}}",
                 {"{\"ok\":1}", true}, {"{\"long\":1}", false});
    CHECK_SCHEMA("{\"type\":\"object\",\"propertyNames\":false,\"additionalProperties\":{}}", {"{}", true},
                 {"{\"a\":1}", false});
    CHECK_SCHEMA("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},false]}", {"[1]", true}, {"[]", true},
                 {"[1,2]", false});
    CHECK_SCHEMA("{\"anyOf\":[{\"type\":\"string\",\"allOf\":[{\"type\":\"integer\"}]},{\"type\":\"null\"}]}",
                 {"null", true}, {"\"s\"", false});
}

static void test_combinators(void) {
    /* oneOf apart by type / by a discriminator: exact */
    CHECK_SCHEMA("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", {"\"a\"", true}, {"3", true},
                 {"null", false});
    CHECK_SCHEMA("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},"
                 "\"required\":[\"k\"]},{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"b\"}},\"required\":[\"k\"]}]}",
                 {"{\"k\":\"a\",\"x\":1}", true}, {"{\"k\":\"b\"}", true}, {"{\"k\":\"c\"}", false});
    /* overlapping branches: only what no other branch matches ("number"
     * overlaps "integer", so only the string branch is generated) */
    CHECK_SCHEMA("{\"oneOf\":[{\"type\":\"number\"},{\"type\":\"integer\"},{\"type\":\"string\"}]}", {"\"s\"", true},
                 {"1", false}, {"1.5", false});
    check_refused("{\"oneOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", "'oneOf' whose branches all may match");
    /* allOf: merged */
    CHECK_SCHEMA("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0}},"
                 "\"required\":[\"a\"]},{\"properties\":{\"a\":{\"maximum\":5},\"b\":{\"type\":\"string\"}},"
                 "\"additionalProperties\":false}]}",
                 {"{\"a\":3}", true}, {"{\"a\":3,\"b\":\"x\"}", true}, {"{\"a\":6}", false}, {"{\"b\":\"x\"}", false});
    check_refused("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "none in common");
    /* $ref, anyOf, enum beside siblings: intersected */
    CHECK_SCHEMA("{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/n\",\"minimum\":10}", {"10", true},
                 {"9", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"maxLength\":2,\"anyOf\":[{\"pattern\":\"^a\"},{\"pattern\":\"^b\"}]}",
                 {"\"ax\"", true}, {"\"b\"", true}, {"\"axx\"", false}, {"\"c\"", false});
    CHECK_SCHEMA("{\"enum\":[\"ab\",\"abcdef\",3,\"x\"],\"type\":\"string\",\"maxLength\":3}", {"\"ab\"", true},
                 {"\"x\"", true}, {"\"abcdef\"", false}, {"3", false});
    /* not of types */
    CHECK_SCHEMA("{\"not\":{\"type\":[\"null\",\"object\",\"array\",\"string\",\"boolean\"]}}", {"1.5", true},
                 {"null", false}, {"\"a\"", false});
    /* a $ref to a JSON pointer */
    CHECK_SCHEMA("{\"properties\":{\"a\":{\"type\":\"boolean\"}},\"type\":\"object\",\"required\":[\"b\"],"
                 "\"additionalProperties\":{\"$ref\":\"#/properties/a\"}}",
                 {"{\"b\":true}", true}, {"{\"b\":1}", false});
}

static void test_objects(void) {
    /* additionalProperties a schema beside properties: extra keys no listed name spells */
    CHECK_SCHEMA("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"ab\":{\"type\":\"string\"}},"
                 "\"additionalProperties\":{\"type\":\"integer\"}}",
                 {"{\"a\":\"x\",\"zz\":1}", true}, {"{\"abc\":1,\"b\":2}", true}, {"{\"a\":\"x\",\"a\":1}", false},
                 {"{\"ab\":1}", false}, {"{\"\":1}", true});
    /* patternProperties: keys of the pattern, values of its schema */
    CHECK_SCHEMA("{\"type\":\"object\",\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},\"additionalProperties\":false}",
                 {"{\"x-a\":1,\"x-\":2}", true}, {"{\"y\":1}", false}, {"{\"x-a\":\"s\"}", false});
    /* min/maxProperties over the listed properties */
    CHECK_SCHEMA("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"minProperties\":2,\"maxProperties\":2}",
                 {"{\"a\":1,\"b\":2}", true}, {"{\"a\":1,\"c\":2}", true}, {"{\"a\":1}", false},
                 {"{\"a\":1,\"b\":2,\"c\":3}", false});
    CHECK_SCHEMA("{\"type\":\"object\",\"minProperties\":1}", {"{}", false}, {"{\"k\":[1]}", true});
    /* dependentRequired: a property whose dependents are not required is left out */
    CHECK_SCHEMA("{\"type\":\"object\",\"properties\":{\"card\":{\"type\":\"string\"},\"addr\":{\"type\":\"string\"}},"
                 "\"dependentRequired\":{\"card\":[\"addr\"]}}",
                 {"{\"addr\":\"x\"}", true}, {"{\"card\":\"1\",\"addr\":\"x\"}", false}, {"{}", true});
    CHECK_SCHEMA("{\"type\":\"object\",\"properties\":{\"card\":{\"type\":\"string\"},\"addr\":{\"type\":\"string\"}},"
                 "\"required\":[\"card\"],\"dependencies\":{\"card\":[\"addr\"]}}",
                 {"{\"card\":\"1\",\"addr\":\"x\"}", true}, {"{\"card\":\"1\"}", false});
    /* a required property without a schema of its own */
    CHECK_SCHEMA("{\"type\":\"object\",\"required\":[\"id\"],\"properties\":{}}", {"{\"id\":[null]}", true},
                 {"{}", false});
}

static void test_arrays_and_strings(void) {
    CHECK_SCHEMA("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"items\":false}",
                 {"[]", true}, {"[1]", true}, {"[1,\"a\"]", true}, {"[1,\"a\",2]", false}, {"[\"a\"]", false});
    CHECK_SCHEMA("{\"type\":\"array\",\"items\":[{\"type\":\"integer\"}],\"additionalItems\":{\"type\":\"boolean\"},"
                 "\"minItems\":2}",
                 {"[1,true]", true}, {"[1,true,false]", true}, {"[1]", false}, {"[1,2]", false});
    /* uniqueItems: listed values as a subsequence of their list; other items at most one */
    CHECK_SCHEMA("{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"uniqueItems\":true}", {"[]", true},
                 {"[\"a\",\"c\"]", true}, {"[\"a\",\"a\"]", false}, {"[\"a\",\"b\",\"c\"]", true});
    CHECK_SCHEMA("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"uniqueItems\":true}", {"[1]", true},
                 {"[1,2]", false}, {"[]", true});
    /* pattern with lengths: its automaton times a count of characters */
    CHECK_SCHEMA("{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":2,\"maxLength\":3}", {"\"ab\"", true},
                 {"\"abc\"", true}, {"\"a\"", false}, {"\"abcd\"", false}, {"\"aB\"", false});
    CHECK_SCHEMA("{\"type\":\"string\",\"pattern\":\"b\",\"maxLength\":2}", {"\"\xc3\xa9\x62\"", true},
                 {"\"ab\"", true}, {"\"aab\"", false}, {"\"aa\"", false});
    CHECK_SCHEMA("{\"type\":\"number\",\"multipleOf\":5}", {"10", true}, {"-15", true}, {"12", false}, {"10.0", false});
    check_refused("{\"type\":\"number\",\"multipleOf\":0.01}", "multipleOf (a fraction)");
}

/* Compact by default: one optional space after ':' and ','; any: up to 16
 * whitespace bytes in every gap; a pattern: every gap matches it. */
static void test_whitespace(void) {
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}},"
                         "\"required\":[\"a\"]}";
    const sample compact[] = {{"{\"a\":[1,2]}", true},  {"{\"a\": [1, 2]}", true}, {"{ \"a\":[1]}", false},
                              {"{\"a\" :[1]}", false},  {"{\"a\":  [1]}", false},  {"{\"a\":[1 ,2]}", false},
                              {"{\"a\":[1]} ", false}, {"{\"a\":\n[1]}", false}};
    check_schema_ws(schema, LOOM_JSON_WHITESPACE_COMPACT, NULL, compact, 8);
    const sample any[] = {{"{\"a\":[1,2]}", true}, {"{ \"a\" :\n\t[ 1 , 2 ]\r}", true},
                          {"{\"a\":                  [1]}", false}}; /* 18 spaces: past the bound */
    check_schema_ws(schema, LOOM_JSON_WHITESPACE_ANY, NULL, any, 3);
    const sample pattern[] = {{"{\n\"a\"\n:\n[\n1\n,\n2\n]\n}", true}, {"{\"a\":[1]}", false},
                              {"{\n\"a\"\n: \n[\n1\n]\n}", false}};
    check_schema_ws(schema, LOOM_JSON_WHITESPACE_COMPACT, "\\n", pattern, 3);
    /* the JSON kinds too */
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_OBJECT};
    loom_grammar *g = NULL;
    char msg[512];
    CHECK(loom_grammar_compile(&spec, &g, msg, sizeof msg) == LOOM_OK);
    if (g) {
        CHECK(test_grammar_accepts(&g->grammar, "{\"k\": {\"v\":[true, null]}}"));
        CHECK(!test_grammar_accepts(&g->grammar, "{ \"k\":1}"));
        loom_grammar_free(g);
    }
    /* a pattern is compiled under the regex budgets */
    loom_grammar_spec bad = {.kind = LOOM_GRAMMAR_JSON, .whitespace_pattern = "(a*){1000}"};
    g = NULL;
    CHECK(loom_grammar_compile(&bad, &g, msg, sizeof msg) != LOOM_OK);
    CHECK_MSG(strstr(msg, "whitespace pattern"), "%s", msg);
}

/* Bounded work on hostile schemas: refusals naming the bound, no crash. */
static void test_hostile_bounds(void) {
    char *schema = malloc(8192);
    if (!schema) return;
    char name[301];
    memset(name, 'k', 300);
    name[300] = 0;
    snprintf(schema, 8192, "{\"type\":\"object\",\"properties\":{\"%s\":{}},\"additionalProperties\":{\"type\":\"integer\"}}", name);
    check_refused(schema, "longer than 256 bytes");
    size_t n = (size_t)snprintf(schema, 8192, "{\"oneOf\":[");
    for (int i = 0; i < 65; i++) n += (size_t)snprintf(schema + n, 8192 - n, "%s{\"const\":%d}", i ? "," : "", i);
    snprintf(schema + n, 8192 - n, "]}");
    check_refused(schema, "more than 64 branches");
    /* a recursive $ref beside other keywords merges without end: bounded */
    check_refused("{\"$ref\":\"#\",\"minProperties\":1}", "merged more than");
    free(schema);
}

int main(void) {
    RUN_TEST(test_number_bounds);
    RUN_TEST(test_exact_values);
    RUN_TEST(test_string_lengths);
    RUN_TEST(test_ignored_keywords);
    RUN_TEST(test_formats);
    RUN_TEST(test_combinators);
    RUN_TEST(test_references);
    RUN_TEST(test_unevaluated);
    RUN_TEST(test_not_and_conditionals);
    RUN_TEST(test_contains_names_false);
    RUN_TEST(test_objects);
    RUN_TEST(test_arrays_and_strings);
    RUN_TEST(test_whitespace);
    RUN_TEST(test_hostile_bounds);
    return test_summary("test_grammar_schema");
}
