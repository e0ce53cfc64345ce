/* The grammar engine (src/grammar/): what each kind of grammar accepts and
 * refuses, schema features refused by name, and the token mask against a
 * brute-force mask (every token advanced byte by byte) over a real
 * tokenizer's vocabulary along random paths. */
#include <math.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sequence_grammar.h"
#include "grammar/compiled.h"
#include "grammar/cost.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "grammar_walk.h"
#include "harness.h"
#include "text/tokenizer.h"

static bool compile(loom_grammar_kind kind, const char *text, loom_grammar **g, char *msg, size_t size) {
    loom_grammar_spec spec = {.kind = kind, .text = text, .text_len = text ? strlen(text) : 0};
    return loom_grammar_compile(&spec, g, msg, size) == LOOM_OK;
}

typedef struct {
    const char *text;
    bool ok;
} sample;

static void check_samples(loom_grammar_kind kind, const char *spec, const sample *samples, int n) {
    loom_grammar *g;
    char msg[512];
    CHECK_MSG(compile(kind, spec, &g, msg, sizeof msg), "compile %s: %s", spec, msg);
    for (int i = 0; i < n; i++)
        if (test_grammar_accepts(&g->grammar, samples[i].text) != samples[i].ok) {
            test_failed(__FILE__, __LINE__, "grammar %s %s \"%s\"", spec, samples[i].ok ? "refused" : "accepted",
                        samples[i].text);
            break;
        }
    loom_grammar_free(g);
}

static void test_regex(void) {
    const sample s[] = {{"abc", true},   {"ab", false},  {"abcc", false}, {"a1b", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "abc", s, 4);
    const sample d[] = {{"2024-01-31", true}, {"2024-1-31", false}, {"20240131", false}, {"", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "\\d{4}-\\d{2}-\\d{2}", d, 4);
    const sample alt[] = {{"cat", true}, {"dog", true}, {"cats", true}, {"ca", false}, {"catdog", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "(cat|dog)s?", alt, 5);
    const sample cls[] = {{"a_Z9", true}, {"", true}, {"a-b", false}, {"é", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "[a-zA-Z0-9_]*", cls, 4);
    const sample neg[] = {{"xé", true}, {"x\"", true}, {"xa", false}, {"x", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "x[^a-c]", neg, 4);
    const sample rep[] = {{"ab", false}, {"abab", true}, {"ababab", true}, {"abababab", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "(?:ab){2,3}", rep, 4);
    const sample dot[] = {{"a€b", true}, {"a\nb", false}, {"ab", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "^a.b$", dot, 3);
    const sample plus[] = {{"", false}, {"1", true}, {"123", true}, {"12a", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "[0-9]+", plus, 4);
    const sample esc[] = {{"a.b", true}, {"axb", false}, {"(x)", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "a\\.b|\\(x\\)\\?", esc, 3);
}

static void test_regex_refusals(void) {
    const char *bad[][2] = {{"(a)\\1", "backreference"}, {"(?=a)", "group construct"}, {"\\bx", "assertion"},
                            {"\\p{L}", "Unicode property"}, {"a{2000}", "above"}, {"[a", "unclosed"},
                            {"(a", "unclosed"}, {"*a", "nothing before"}, {"a)", "unmatched"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        loom_grammar *g = NULL;
        char msg[512] = "";
        CHECK_MSG(!compile(LOOM_GRAMMAR_REGEX, bad[i][0], &g, msg, sizeof msg), "%s compiled", bad[i][0]);
        CHECK_MSG(strstr(msg, bad[i][1]), "%s: message '%s' does not say '%s'", bad[i][0], msg, bad[i][1]);
    }
}

static void test_choice(void) {
    const char *const choices[] = {"yes", "no", "maybe so"};
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_CHOICE, .choices = choices, .n_choices = 3};
    loom_grammar *g;
    char msg[256];
    CHECK(loom_grammar_compile(&spec, &g, msg, sizeof msg) == LOOM_OK);
    CHECK(test_grammar_accepts(&g->grammar, "yes") && test_grammar_accepts(&g->grammar, "no") && test_grammar_accepts(&g->grammar, "maybe so"));
    CHECK(!test_grammar_accepts(&g->grammar, "ye") && !test_grammar_accepts(&g->grammar, "yesno") && !test_grammar_accepts(&g->grammar, "maybe"));
    loom_grammar_free(g);
    spec.n_choices = 0;
    CHECK(loom_grammar_compile(&spec, &g, msg, sizeof msg) == LOOM_ERR_INVALID);
}

static void test_json_any(void) {
    const sample s[] = {{"{}", true},
                        {"[1, -2.5e+3, \"x\\u00e9\\n\", true, false, null, {\"a\": [[]]}]", true},
                        {" {\"k\" : \"v\"}", false}, /* no leading whitespace */
                        {"{\"k\": \"v\"} ", false},
                        {"\"caf\xc3\xa9\"", true},
                        {"\"\xc3\"", false},         /* broken UTF-8 */
                        {"\"\xed\xa0\x80\"", false}, /* a surrogate */
                        {"01", false},
                        {"1.", false},
                        {"{\"a\" 1}", false},
                        {"[1,]", false},
                        {"\"a\tb\"", false}, /* raw control character */
                        {"nul", false}};
    check_samples(LOOM_GRAMMAR_JSON, NULL, s, (int)(sizeof s / sizeof s[0]));
    const sample o[] = {{"{\"a\": 1}", true}, {"[1]", false}, {"1", false}};
    check_samples(LOOM_GRAMMAR_JSON_OBJECT, NULL, o, 3);
}

static void test_json_schema(void) {
    const char *person = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                         "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},"
                         "\"maxItems\":2},\"nick\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"name\",\"age\"],"
                         "\"additionalProperties\":false}";
    const sample s[] = {{"{\"name\": \"Al\", \"age\": 3}", true},
                        {"{\"name\":\"Al\",\"age\":-3,\"tags\":[\"a\",\"b\"],\"nick\":null}", true},
                        {"{\"name\": \"Al\", \"age\": 3, \"nick\": \"x\"}", true},
                        {"{\"age\": 3, \"name\": \"Al\"}", false}, /* schema order */
                        {"{\"name\": \"Al\"}", false},
                        {"{\"name\": \"Al\", \"age\": 3.5}", false},
                        {"{\"name\": \"Al\", \"age\": 3, \"tags\": [\"a\", \"b\", \"a\"]}", false},
                        {"{\"name\": \"Al\", \"age\": 3, \"tags\": [\"c\"]}", false},
                        {"{\"name\": \"Al\", \"age\": 3, \"x\": 1}", false}};
    check_samples(LOOM_GRAMMAR_JSON_SCHEMA, person, s, (int)(sizeof s / sizeof s[0]));

    const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\",\"kids\"],"
                       "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
    const sample t[] = {{"{\"v\": 1, \"kids\": []}", true},
                        {"{\"v\": 1, \"kids\": [{\"v\": 2, \"kids\": [{\"v\": 3, \"kids\": []}]}]}", true},
                        {"{\"v\": 1, \"kids\": [{\"v\": 2}]}", false}};
    check_samples(LOOM_GRAMMAR_JSON_SCHEMA, tree, t, 3);

    const char *strs = "{\"anyOf\":[{\"type\":\"string\",\"minLength\":2,\"maxLength\":3},"
                       "{\"type\":\"string\",\"pattern\":\"^x[0-9]+$\"},{\"const\":{\"k\":[1]}},{\"type\":\"boolean\"}]}";
    const sample u[] = {{"\"ab\"", true},   {"\"a\\nb\"", true}, {"\"a\"", false},      {"\"abcd\"", false},
                        {"\"x123456\"", true}, {"{\"k\":[1]}", true}, {"{\"k\": [1]}", false}, {"true", true},
                        {"\"\xe2\x82\xac\xe2\x82\xac\"", true}};
    check_samples(LOOM_GRAMMAR_JSON_SCHEMA, strs, u, (int)(sizeof u / sizeof u[0]));

    const char *search = "{\"type\":\"string\",\"pattern\":\"ab\"}";
    const sample v[] = {{"\"xxabyy\"", true}, {"\"ab\"", true}, {"\"a b\"", false}};
    check_samples(LOOM_GRAMMAR_JSON_SCHEMA, search, v, 3);

    /* enum / const with the type their values have */
    const char *typed = "{\"anyOf\":[{\"type\":\"integer\",\"enum\":[1,2]},{\"type\":[\"string\",\"null\"],"
                        "\"enum\":[\"a\",null]},{\"type\":\"number\",\"const\":2.5}]}";
    const sample x[] = {{"1", true}, {"\"a\"", true}, {"null", true}, {"2.5", true}, {"3", false}};
    check_samples(LOOM_GRAMMAR_JSON_SCHEMA, typed, x, 5);

    const char *map = "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"number\",\"minimum\":0}}";
    /* a bounded number has no exponent (the bounds are checked on its digits) */
    const sample w[] = {{"{}", true}, {"{\"a\": 1.5, \"b\": 2000}", true}, {"{\"a\": -1}", false}, {"{\"a\": 2e3}", false}};
    check_samples(LOOM_GRAMMAR_JSON_SCHEMA, map, w, 4);
}

static void test_schema_refusals(void) {
    const char *bad[][2] = {
        {"{\"type\":\"string\",\"format\":\"color\"}", "'format' \"color\" is not supported"},
        {"{\"oneOf\":[{\"type\":\"string\",\"pattern\":\"a\"},{\"type\":\"string\",\"pattern\":\"b\"}]}", "'oneOf' whose branches all may match another (0 and 1)"},
        {"{\"type\":\"array\",\"contains\":{},\"minContains\":2,\"maxContains\":1}", "maxContains below minContains"},
        {"{\"not\":{\"pattern\":\"a\"}}", "not (of keywords without a bounded complement"},
        {"{\"type\":\"number\",\"multipleOf\":0.5}", "multipleOf (a fraction)"},
        {"{\"type\":\"array\",\"uniqueItems\":true,\"minItems\":2}", "uniqueItems"},
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"minLength\":2}", "no string of the pattern has the length"},
        {"{\"$recursiveRef\":\"#\"}", "'$recursiveRef' is not supported"},
        {"{\"$ref\":\"http://x/y\"}", "'$ref' to 'http://x/y'"},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":true,\"minimum\":1}", "boolean 'exclusiveMinimum'"},
        {"{\"$ref\":\"#/$defs/missing\"}", "not defined"},
        {"{\"type\":\"string\",\"pattern\":\"(?=x)\"}", "pattern"},
        {"{\"type\":\"strin\"}", "unknown type 'strin'"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"a\"],\"additionalProperties\":false}", "required property 'a'"},
        {"{\"type\":\"array\",\"minItems\":100000}", "minItems"},
        {"[1,2", "not valid JSON"},
        /* issue 48: a type the enum / const values do not have matches nothing */
        {"{\"type\":\"integer\",\"enum\":[\"x\"]}", "enum value \"x\" is not of type \"integer\""},
        {"{\"type\":\"integer\",\"enum\":[1,2.5]}", "enum value 2.5 is not of type"},
        {"{\"type\":\"string\",\"const\":3}", "const value 3 is not of type \"string\""},
        {"{\"type\":[\"integer\",\"null\"],\"enum\":[1,\"a\"]}", "enum value \"a\" is not of type"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        loom_grammar *g = NULL;
        char msg[512] = "";
        CHECK_MSG(!compile(LOOM_GRAMMAR_JSON_SCHEMA, bad[i][0], &g, msg, sizeof msg), "%s compiled", bad[i][0]);
        CHECK_MSG(strstr(msg, bad[i][1]), "%s: message '%s' does not say '%s'", bad[i][0], msg, bad[i][1]);
    }
    /* nesting past the bound is an error, not a crash */
    char deep[8192] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++) strcat(deep, "}");
    loom_grammar *g = NULL;
    char msg[512];
    CHECK(!compile(LOOM_GRAMMAR_JSON_SCHEMA, deep, &g, msg, sizeof msg));
    CHECK_MSG(strstr(msg, "deeper"), "%s", msg);
}

/* ------------------------------------------------------------ the costs */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Grammars whose automaton explodes (issue 48: `(a*){1000}` cost seconds of
 * the engine thread per token) are refused when compiled, quickly, with
 * LOOM_ERR_UNSUPPORTED and a message naming the construct and its size;
 * the same inside a JSON schema's pattern names the pattern. */
static void test_cost_refusals(void) {
    static char long_pattern[256];
    memset(long_pattern, 'b', 120);
    memcpy(long_pattern + 120, "(a*){1000}", 11);
    const struct {
        loom_grammar_kind kind;
        const char *text, *names, *says;
    } bad[] = {
        {LOOM_GRAMMAR_REGEX, "(a*){1000}", "regular expression `(a*){1000}`", "more than 512 stacks"},
        {LOOM_GRAMMAR_REGEX, "x(a?){600}y", "regular expression `x(a?){600}y`", "more than 512 stacks"},
        {LOOM_GRAMMAR_REGEX, "(a*){200}", "`(a*){200}`", "201 stacks at once"},
        {LOOM_GRAMMAR_REGEX, "[a-z]+(a*b*){150}", "`[a-z]+(a*b*){150}`", "work units"},
        {LOOM_GRAMMAR_REGEX, long_pattern, "`bbbbbbbb", "...`"},
        {LOOM_GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"(a*){1000}\"}",
         "JSON schema 'pattern' `(a*){1000}`", "stacks"},
        {LOOM_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"code\":{\"type\":\"string\","
         "\"pattern\":\"^(x?){700}$\"}}}",
         "JSON schema 'pattern' `^(x?){700}$`", "stacks"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        loom_grammar_spec spec = {.kind = bad[i].kind, .text = bad[i].text, .text_len = strlen(bad[i].text)};
        loom_grammar *g = NULL;
        char msg[512] = "";
        double t0 = now_ms();
        int rc = loom_grammar_compile(&spec, &g, msg, sizeof msg);
        double ms = now_ms() - t0;
        if (rc == LOOM_OK) loom_grammar_free(g);
        CHECK_MSG(rc == LOOM_ERR_UNSUPPORTED, "%.60s: compiled (%d) in %.1f ms", bad[i].text, rc, ms);
        CHECK_MSG(strstr(msg, bad[i].names) && strstr(msg, bad[i].says), "%.60s: message '%s' does not say '%s' and '%s'",
                  bad[i].text, msg, bad[i].names, bad[i].says);
        /* bounded: the check stops at LM_GRAMMAR_CHECK_WORK units (a few
         * ms); 4x the compile deadline leaves room for a loaded machine */
        CHECK_MSG(ms < 4 * LM_GRAMMAR_COMPILE_MS, "%.60s: refused after %.0f ms", bad[i].text, ms);
    }
    /* past its deadline the check refuses, saying so */
    loom_grammar *ok = NULL;
    char okmsg[512];
    CHECK(compile(LOOM_GRAMMAR_REGEX, "[a-z]+@[a-z]+", &ok, okmsg, sizeof okmsg));
    lm_error late;
    CHECK(lm_grammar_check_cost(&ok->grammar, "the test's grammar", 1, &late) == LM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(late.message, "the test's grammar") && strstr(late.message, "250 ms"), "%s", late.message);
    CHECK(lm_grammar_check_cost(&ok->grammar, "the test's grammar", 0, &late) == LM_OK);
    loom_grammar_free(ok);
    /* an object of 600 optional properties: more than 512 may come next */
    size_t cap = 64 * 1024;
    char *schema = malloc(cap);
    size_t n = (size_t)snprintf(schema, cap, "{\"type\":\"object\",\"properties\":{");
    for (int k = 0; k < 600; k++) n += (size_t)snprintf(schema + n, cap - n, "%s\"p%d\":{\"type\":\"integer\"}", k ? "," : "", k);
    snprintf(schema + n, cap - n, "}}");
    loom_grammar *g = NULL;
    char msg[512] = "";
    CHECK(!compile(LOOM_GRAMMAR_JSON_SCHEMA, schema, &g, msg, sizeof msg));
    free(schema);
    CHECK_MSG(strstr(msg, "JSON schema: ") && strstr(msg, "stacks"), "%s", msg);
}

/* What the check must not refuse: ordinary grammars, and repetitions of
 * what may be empty that the matcher now runs without cycling ((a*)* used
 * to spend its 65,536 expansion steps on every byte and drop paths), with
 * the language unchanged. */
static void test_cost_accepts(void) {
    const sample star[] = {{"", true}, {"aaa", true}, {"ab", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "(a*)*", star, 3);
    const sample opt[] = {{"", true}, {"aaa", true}, {"b", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "(a?)*", opt, 3);
    const sample plus[] = {{"", true}, {"abba", true}, {"abc", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "(a|b?)+", plus, 3);
    const sample nested[] = {{"c", true}, {"aac", true}, {"aaca", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "((a|a)*)*c", nested, 3);
    const sample mid[] = {{"aaaa", true}, {"", true}, {"b", false}};
    check_samples(LOOM_GRAMMAR_REGEX, "(a*){100}", mid, 3);
    const char *const ok[] = {"(a*)*", "(a?)*", "(a|b?)+", "(\\d+\\.?)*", "(a*){24}", "[a-z]{0,1000}"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        loom_grammar *g;
        char msg[512];
        CHECK_MSG(compile(LOOM_GRAMMAR_REGEX, ok[i], &g, msg, sizeof msg), "%s: %s", ok[i], msg);
        lm_gmatcher m;
        lm_error err;
        CHECK_OK(lm_gmatcher_init(&m, &g->grammar, &err), &err);
        lm_gstate a = {0}, b = {0};
        CHECK(lm_gmatcher_start(&m, &a));
        for (int k = 0; k < 4; k++) {
            lm_gmatcher_advance(&m, &a, k % 2 ? '1' : 'a', &b);
            lm_gstate t = a;
            a = b;
            b = t;
        }
        CHECK_MSG(!m.truncated, "%s: the matcher dropped paths (bounds %u)", ok[i], m.bounds_hit);
        lm_gstate_free(&a);
        lm_gstate_free(&b);
        lm_gmatcher_free(&m);
        loom_grammar_free(g);
    }
}

/* The matcher's remembered expansions change no language: regexes of
 * nested repetitions of what may be empty agree with PCRE2 on every string
 * over their alphabet up to 7 characters. */
static void test_nullable_repetitions_against_pcre(void) {
    const char *const patterns[] = {"(a*)*b",      "(a|b?)+c",     "((ab)?c*)*",  "(a*b*)*c",  "(a?){3}b",
                                    "((a|)b?)*",   "(a*|b)*(c|)",  "((a*)*b)*",   "(a?b?)*a",  "(a*){5}b{2}",
                                    "(ab|a?)*b",   "((a|b)*c?)*",  "a(b*|c*)*a"};
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        loom_grammar *g;
        char msg[512];
        CHECK_MSG(compile(LOOM_GRAMMAR_REGEX, patterns[i], &g, msg, sizeof msg), "%s: %s", patterns[i], msg);
        int code;
        PCRE2_SIZE offset;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)patterns[i], PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                                       &code, &offset, NULL);
        CHECK(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        int checked = 0;
        char s[8];
        for (int len = 0; len <= 7 && !test_current_failed(); len++) {
            int total = 1;
            for (int k = 0; k < len; k++) total *= 3;
            for (int v = 0; v < total; v++) {
                int x = v;
                for (int k = 0; k < len; k++, x /= 3) s[k] = (char)('a' + x % 3);
                s[len] = 0;
                bool want = pcre2_match(re, (PCRE2_SPTR)s, (PCRE2_SIZE)len, 0, 0, md, NULL) >= 0;
                if (test_grammar_accepts(&g->grammar, s) != want) {
                    test_failed(__FILE__, __LINE__, "%s: \"%s\" %s, PCRE2 %s", patterns[i], s,
                                want ? "refused" : "accepted", want ? "matches" : "does not");
                    break;
                }
                checked++;
            }
        }
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        loom_grammar_free(g);
        CHECK(checked == 3280);
    }
}

/* An enum or a choice of thousands of values is one trie: every value can
 * be written (flat alternatives kept the first 512 and dropped the rest). */
static void test_many_values(void) {
    enum { N = 3000 };
    static char storage[N][24];
    const char *choices[N];
    for (int i = 0; i < N; i++) {
        snprintf(storage[i], sizeof storage[i], "value_%d", i);
        choices[i] = storage[i];
    }
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_CHOICE, .choices = choices, .n_choices = N};
    loom_grammar *g;
    char msg[512];
    CHECK_MSG(loom_grammar_compile(&spec, &g, msg, sizeof msg) == LOOM_OK, "%s", msg);
    CHECK(test_grammar_accepts(&g->grammar, "value_0") && test_grammar_accepts(&g->grammar, "value_2999") && test_grammar_accepts(&g->grammar, "value_29"));
    CHECK(!test_grammar_accepts(&g->grammar, "value_3000") && !test_grammar_accepts(&g->grammar, "value_") && !test_grammar_accepts(&g->grammar, "value_01"));
    loom_grammar_free(g);
    const char *const dup[] = {"ab", "a", "ab", "abc"};
    spec = (loom_grammar_spec){.kind = LOOM_GRAMMAR_CHOICE, .choices = dup, .n_choices = 4, .suffix = "!"};
    CHECK_MSG(loom_grammar_compile(&spec, &g, msg, sizeof msg) == LOOM_OK, "%s", msg);
    CHECK(test_grammar_accepts(&g->grammar, "a!") && test_grammar_accepts(&g->grammar, "ab!") && test_grammar_accepts(&g->grammar, "abc!"));
    CHECK(!test_grammar_accepts(&g->grammar, "a") && !test_grammar_accepts(&g->grammar, "abcd!") && !test_grammar_accepts(&g->grammar, "!"));
    loom_grammar_free(g);
    size_t cap = 64 * 1024;
    char *schema = malloc(cap);
    size_t n = (size_t)snprintf(schema, cap, "{\"enum\":[");
    for (int i = 0; i < N; i++) n += (size_t)snprintf(schema + n, cap - n, "%s\"v%d\"", i ? "," : "", i);
    snprintf(schema + n, cap - n, ",1.5,null,{\"k\":[1]}]}");
    CHECK_MSG(compile(LOOM_GRAMMAR_JSON_SCHEMA, schema, &g, msg, sizeof msg), "%s", msg);
    free(schema);
    CHECK(test_grammar_accepts(&g->grammar, "\"v2999\"") && test_grammar_accepts(&g->grammar, "\"v0\"") && test_grammar_accepts(&g->grammar, "null"));
    CHECK(test_grammar_accepts(&g->grammar, "1.5") && test_grammar_accepts(&g->grammar, "{\"k\":[1]}"));
    CHECK(!test_grammar_accepts(&g->grammar, "\"v3000\"") && !test_grammar_accepts(&g->grammar, "\"v\"") && !test_grammar_accepts(&g->grammar, "1"));
    loom_grammar_free(g);
}

/* The server's cache of compiled grammars (grammar/grammar_cache.h): a
 * spec sent again is answered from it, refusals included; a burst of one
 * spec is one compile; no more compiles run at once than its slots; its
 * entries are bounded and a spec too large to keep is compiled anyway. */
typedef struct {
    lm_grammar_cache *cache;
    loom_grammar_spec spec;
    int rc;
    loom_grammar *g;
} cache_job;

static void *cache_compile_thread(void *arg) {
    cache_job *j = arg;
    char msg[512];
    j->rc = lm_grammar_cache_compile(j->cache, &j->spec, &j->g, msg, sizeof msg);
    return NULL;
}

static void test_grammar_cache(void) {
    lm_grammar_cache *cache;
    lm_error err;
    CHECK(lm_grammar_cache_create(0, &cache, &err) == LM_ERR_INVALID);
    CHECK_OK(lm_grammar_cache_create(2, &cache, &err), &err);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}";
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_JSON_SCHEMA, .text = schema, .text_len = strlen(schema)};
    loom_grammar *a, *b;
    char msg[512], again[512];
    CHECK(lm_grammar_cache_compile(cache, &spec, &a, msg, sizeof msg) == LOOM_OK);
    CHECK(lm_grammar_cache_compile(cache, &spec, &b, msg, sizeof msg) == LOOM_OK);
    lm_grammar_cache_stats st;
    lm_grammar_cache_get_stats(cache, &st);
    CHECK_MSG(a == b && st.compiles == 1 && st.hits == 1, "a %p b %p, %llu compiles, %llu hits", (void *)a, (void *)b,
              (unsigned long long)st.compiles, (unsigned long long)st.hits);
    loom_grammar_free(a);
    loom_grammar_free(b);
    /* the same text with a suffix is another grammar */
    spec.suffix = "}";
    CHECK(lm_grammar_cache_compile(cache, &spec, &a, msg, sizeof msg) == LOOM_OK);
    CHECK(test_grammar_accepts(&a->grammar, "{\"a\": \"x\"}}") && !test_grammar_accepts(&a->grammar, "{\"a\": \"x\"}"));
    loom_grammar_free(a);
    /* a refusal is kept: the same message, no second compile */
    loom_grammar_spec bad = {.kind = LOOM_GRAMMAR_REGEX, .text = "(a*){1000}", .text_len = 10};
    CHECK(lm_grammar_cache_compile(cache, &bad, &a, msg, sizeof msg) == LOOM_ERR_UNSUPPORTED && !a);
    CHECK(lm_grammar_cache_compile(cache, &bad, &a, again, sizeof again) == LOOM_ERR_UNSUPPORTED && !a);
    lm_grammar_cache_get_stats(cache, &st);
    CHECK_MSG(strcmp(msg, again) == 0 && strstr(msg, "(a*){1000}") && st.compiles == 3, "'%s' / '%s', %llu compiles",
              msg, again, (unsigned long long)st.compiles);
    /* 8 threads, one costly spec: one compile, the others wait for it */
    enum { T = 8 };
    cache_job jobs[T];
    pthread_t threads[T];
    for (int i = 0; i < T; i++) {
        jobs[i] = (cache_job){.cache = cache,
                              .spec = {.kind = LOOM_GRAMMAR_REGEX, .text = "(a*){150}", .text_len = 9}};
        CHECK(pthread_create(&threads[i], NULL, cache_compile_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < T; i++) pthread_join(threads[i], NULL);
    lm_grammar_cache_get_stats(cache, &st);
    for (int i = 0; i < T; i++) {
        CHECK_MSG(jobs[i].rc == LOOM_OK && jobs[i].g == jobs[0].g, "thread %d: %d", i, jobs[i].rc);
        loom_grammar_free(jobs[i].g);
    }
    CHECK_MSG(st.compiles == 4 && st.max_active <= 2, "%llu compiles, %d at once", (unsigned long long)st.compiles,
              st.max_active);
    /* 8 threads, 8 specs: at most the 2 slots compile at once */
    static char texts[T][32];
    for (int i = 0; i < T; i++) {
        snprintf(texts[i], sizeof texts[i], "(a*){%d}x", 100 + i);
        jobs[i] = (cache_job){.cache = cache, .spec = {.kind = LOOM_GRAMMAR_REGEX, .text = texts[i],
                                                       .text_len = strlen(texts[i])}};
        CHECK(pthread_create(&threads[i], NULL, cache_compile_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < T; i++) pthread_join(threads[i], NULL);
    for (int i = 0; i < T; i++) {
        CHECK_MSG(jobs[i].rc == LOOM_OK, "spec %d: %d", i, jobs[i].rc);
        loom_grammar_free(jobs[i].g);
    }
    lm_grammar_cache_get_stats(cache, &st);
    CHECK_MSG(st.compiles == 12 && st.max_active <= 2, "%llu compiles, %d at once", (unsigned long long)st.compiles,
              st.max_active);
    /* bounded: more specs than entries */
    for (int i = 0; i < LM_GRAMMAR_CACHE_ENTRIES + 10; i++) {
        char text[32];
        snprintf(text, sizeof text, "x{%d}", i + 1);
        loom_grammar_spec s = {.kind = LOOM_GRAMMAR_REGEX, .text = text, .text_len = strlen(text)};
        CHECK(lm_grammar_cache_compile(cache, &s, &a, msg, sizeof msg) == LOOM_OK);
        loom_grammar_free(a);
    }
    lm_grammar_cache_get_stats(cache, &st);
    CHECK_MSG(st.entries == LM_GRAMMAR_CACHE_ENTRIES && st.bytes <= LM_GRAMMAR_CACHE_BYTES, "%d entries, %zu bytes",
              st.entries, st.bytes);
    /* a spec larger than an entry may be: compiled, not kept */
    size_t big = LM_GRAMMAR_CACHE_MAX_KEY + 100;
    char *text = malloc(big + 64);
    int n = snprintf(text, big + 64, "{\"type\":\"string\",\"description\":\"");
    memset(text + n, 'd', big);
    strcpy(text + n + big, "\"}");
    loom_grammar_spec large = {.kind = LOOM_GRAMMAR_JSON_SCHEMA, .text = text, .text_len = strlen(text)};
    uint64_t compiles = st.compiles;
    for (int k = 0; k < 2; k++) {
        CHECK_MSG(lm_grammar_cache_compile(cache, &large, &a, msg, sizeof msg) == LOOM_OK, "%s", msg);
        CHECK(test_grammar_accepts(&a->grammar, "\"x\""));
        loom_grammar_free(a);
    }
    free(text);
    lm_grammar_cache_get_stats(cache, &st);
    CHECK_MSG(st.compiles == compiles + 2, "%llu compiles", (unsigned long long)(st.compiles - compiles));
    lm_grammar_cache_free(cache);
}

/* ------------------------------------------------------------ the mask */

typedef struct {
    lm_tokenizer *tok;
    int vocab;
    const char **bytes;
    size_t *lens;
    lm_token_trie *trie;
} vocab_fixture;

static bool load_vocab(vocab_fixture *v, const char *relative) {
    char path[1024];
    lm_error err;
    memset(v, 0, sizeof *v);
    if (lm_tokenizer_load(test_fixture_path(path, sizeof path, relative), &v->tok, &err) != LM_OK) {
        test_failed(__FILE__, __LINE__, "tokenizer %s: %s", path, err.message);
        return false;
    }
    v->vocab = lm_tokenizer_vocab_size(v->tok);
    v->bytes = calloc((size_t)v->vocab, sizeof *v->bytes);
    v->lens = calloc((size_t)v->vocab, sizeof *v->lens);
    for (int id = 0; id < v->vocab; id++)
        if (!lm_tokenizer_is_added(v->tok, id)) v->bytes[id] = lm_tokenizer_token_bytes(v->tok, id, &v->lens[id]);
    if (lm_token_trie_build(v->vocab, v->bytes, v->lens, &v->trie, &err) != LM_OK) {
        test_failed(__FILE__, __LINE__, "trie: %s", err.message);
        return false;
    }
    return true;
}

static void free_vocab(vocab_fixture *v) {
    lm_token_trie_free(v->trie);
    free(v->bytes);
    free(v->lens);
    lm_tokenizer_free(v->tok);
}

/* Every token advanced byte by byte from state. */
static void brute_force_mask(lm_gmatcher *m, const vocab_fixture *v, const lm_gstate *state, uint64_t *bits) {
    memset(bits, 0, sizeof(uint64_t) * (size_t)((v->vocab + 63) / 64));
    lm_gstate a = {0}, b = {0};
    for (int id = 0; id < v->vocab; id++) {
        if (!v->bytes[id] || v->lens[id] == 0) continue;
        const lm_gstate *from = state;
        bool ok = true;
        for (size_t k = 0; ok && k < v->lens[id]; k++) {
            ok = lm_gmatcher_advance(m, from, (uint8_t)v->bytes[id][k], &a);
            lm_gstate t = a;
            a = b;
            b = t;
            from = &b;
        }
        if (ok) bits[id >> 6] |= 1ull << (id & 63);
    }
    lm_gstate_free(&a);
    lm_gstate_free(&b);
}

/* Random walks: at each step the mask must equal the brute-force mask,
 * then a random allowed token is taken. */
static void check_mask_walks_shared(const vocab_fixture *v, loom_grammar_kind kind, const char *spec, int walks,
                                    int steps, lm_mask_frames *shared, uint64_t seed) {
    loom_grammar *g;
    char msg[512];
    CHECK_MSG(compile(kind, spec, &g, msg, sizeof msg), "%s", msg);
    lm_masker masker;
    lm_gmatcher brute;
    lm_error err;
    CHECK_OK(lm_masker_init(&masker, &g->grammar, v->trie, shared, &err), &err);
    CHECK_OK(lm_gmatcher_init(&brute, &g->grammar, &err), &err);
    size_t words = (size_t)(v->vocab + 63) / 64;
    uint64_t *fast = malloc(8 * words), *slow = malloc(8 * words);
    int32_t *allowed = malloc(sizeof(int32_t) * (size_t)v->vocab);
    lm_gstate state = {0}, scratch = {0};
    uint64_t rng = seed;
    int taken = 0;
    for (int w = 0; w < walks && !test_current_failed(); w++) {
        CHECK(lm_gmatcher_start(&brute, &state));
        for (int s = 0; s < steps; s++) {
            bool complete;
            CHECK_OK(lm_masker_compute(&masker, &state, fast, &complete, &err), &err);
            brute_force_mask(&brute, v, &state, slow);
            CHECK_MSG(complete == lm_gstate_complete(&state), "complete differs");
            int n = 0;
            for (int id = 0; id < v->vocab; id++) {
                bool a = (fast[id >> 6] >> (id & 63)) & 1, b = (slow[id >> 6] >> (id & 63)) & 1;
                CHECK_MSG(a == b, "%s walk %d step %d: token %d '%.*s' %s by the mask, %s by brute force", spec, w, s,
                          id, (int)v->lens[id], v->bytes[id] ? v->bytes[id] : "", a ? "allowed" : "refused",
                          b ? "allowed" : "refused");
                if (a) allowed[n++] = id;
            }
            if (n == 0) break;
            taken++;
            int32_t id = allowed[test_grammar_random(&rng) % (uint64_t)n];
            CHECK(lm_masker_accept_token(&masker, &state, &scratch, v->bytes[id], v->lens[id]));
        }
    }
    /* the walks must get somewhere for the comparison to mean much */
    CHECK_MSG(taken >= walks * 3, "%s: only %d tokens taken in %d walks", spec, taken, walks);
    if (getenv("LOOM_TEST_VERBOSE")) fprintf(stderr, "%s: %d tokens taken, %llu frames built\n", spec, taken, (unsigned long long)masker.frames->built);
    free(fast);
    free(slow);
    free(allowed);
    lm_gstate_free(&state);
    lm_gstate_free(&scratch);
    lm_gmatcher_free(&brute);
    lm_masker_free(&masker);
    loom_grammar_free(g);
}

static void check_mask_walks(const vocab_fixture *v, loom_grammar_kind kind, const char *spec, int walks, int steps) {
    check_mask_walks_shared(v, kind, spec, walks, steps, NULL, 0x9e3779b97f4a7c15ull);
}

static const char *const mask_schema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"n\":{\"type\":\"number\"},"
    "\"kind\":{\"enum\":[\"cat\",\"dog\"]},\"xs\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},"
    "\"s\":{\"type\":\"string\",\"maxLength\":4}},\"required\":[\"name\",\"n\"]}";

static void test_mask_small_vocab(void) {
    vocab_fixture v;
    if (!load_vocab(&v, "models/qwen35-dense")) return;
    check_mask_walks(&v, LOOM_GRAMMAR_JSON_SCHEMA, mask_schema, 12, 40);
    check_mask_walks(&v, LOOM_GRAMMAR_JSON, NULL, 12, 40);
    check_mask_walks(&v, LOOM_GRAMMAR_REGEX, "(ab|[0-9]+\\.)*x{2,5}[^q]?", 12, 20);
    free_vocab(&v);
}

/* Frames built for one grammar object serve a masker of an equal grammar
 * compiled apart (the engine shares them across requests): the masks stay
 * equal to brute force along other walks, and the frames are reused, not
 * rebuilt. */
static void test_mask_shared_frames(void) {
    vocab_fixture v;
    if (!load_vocab(&v, "models/qwen35-dense")) return;
    loom_grammar *a, *b, *c;
    char msg[512];
    CHECK_MSG(compile(LOOM_GRAMMAR_JSON_SCHEMA, mask_schema, &a, msg, sizeof msg), "%s", msg);
    CHECK_MSG(compile(LOOM_GRAMMAR_JSON_SCHEMA, mask_schema, &b, msg, sizeof msg), "%s", msg);
    CHECK_MSG(compile(LOOM_GRAMMAR_JSON, NULL, &c, msg, sizeof msg), "%s", msg);
    CHECK(lm_grammar_equal(&a->grammar, &b->grammar));
    CHECK(!lm_grammar_equal(&a->grammar, &c->grammar));
    lm_mask_frames *table;
    lm_error err;
    CHECK_OK(lm_mask_frames_create(v.trie, &table, &err), &err);
    check_mask_walks_shared(&v, LOOM_GRAMMAR_JSON_SCHEMA, mask_schema, 8, 40, table, 1);
    uint64_t built = table->built, reused = table->reused;
    CHECK(built > 0);
    check_mask_walks_shared(&v, LOOM_GRAMMAR_JSON_SCHEMA, mask_schema, 8, 40, table, 2);
    CHECK_MSG(table->reused > reused, "no frame reused");
    CHECK_MSG(table->built - built < built, "frames rebuilt: %llu then %llu", (unsigned long long)built,
              (unsigned long long)table->built);
    CHECK(table->refs == 1);
    lm_masker other;
    CHECK(lm_masker_init(&other, &c->grammar, v.trie, table, &err) == LM_ERR_INTERNAL); /* not its grammar */
    lm_mask_frames_unref(table);
    /* a memo of 3 states fills in every walk: emptied between walks and
     * bypassed within them, the masks stay exact */
    CHECK_OK(lm_mask_frames_create(v.trie, &table, &err), &err);
    table->memo.max_states = 3;
    check_mask_walks_shared(&v, LOOM_GRAMMAR_JSON_SCHEMA, mask_schema, 6, 40, table, 3);
    lm_mask_frames_unref(table);
    CHECK_OK(lm_mask_frames_create(v.trie, &table, &err), &err);
    table->memo.max_states = 3;
    check_mask_walks_shared(&v, LOOM_GRAMMAR_JSON, NULL, 6, 40, table, 4);
    lm_mask_frames_unref(table);
    /* frames with more than 0, 4 or 32 tails deepened (up to
     * LM_MASK_MAX_FRAME_DEPTH positions): the masks stay exact (the nested
     * loops of the last regex use tails below a deeper frame), and with 0
     * deeper frames were built */
    const char *regex = "(ab|[0-9]+\\.)*x{2,5}[^q]?";
    const struct {
        loom_grammar_kind kind;
        const char *spec;
    } deepened[] = {{LOOM_GRAMMAR_JSON_SCHEMA, mask_schema},
                    {LOOM_GRAMMAR_JSON, NULL},
                    {LOOM_GRAMMAR_REGEX, regex},
                    {LOOM_GRAMMAR_REGEX, "(([a-z]+[ ,.])+[0-9]*\\n)+"}};
    for (int k = 0; k < 12; k++) {
        CHECK_OK(lm_mask_frames_create(v.trie, &table, &err), &err);
        table->deep_tails = (uint32_t[]){0, 4, 32}[k / 4];
        check_mask_walks_shared(&v, deepened[k % 4].kind, deepened[k % 4].spec, 6, 40, table, 5 + (uint64_t)k);
        uint32_t deepest = 0;
        for (uint32_t i = 0; i < 2 * LM_MASK_MAX_FRAMES; i++)
            if (table->slots[i] && lm_frame_depth(table->slots[i]) > deepest) deepest = lm_frame_depth(table->slots[i]);
        CHECK_MSG(table->deep_tails > 0 || deepest > 1, "kind %d: no deeper frame built", (int)deepened[k % 4].kind);
        lm_mask_frames_unref(table);
    }
    loom_grammar_free(a);
    loom_grammar_free(b);
    loom_grammar_free(c);
    free_vocab(&v);
}

/* lm_sequence_grammar_mask on a logits row: every refused token -inf, every
 * allowed one untouched (the vocabulary padded past the tokenizer's, as a
 * model's may be: the padding is refused), the stop id kept only where the
 * grammar may end. */
static void test_mask_applied_to_logits(void) {
    vocab_fixture v;
    if (!load_vocab(&v, "models/qwen35-dense")) return;
    loom_grammar *g;
    char msg[512];
    CHECK_MSG(compile(LOOM_GRAMMAR_JSON_SCHEMA, mask_schema, &g, msg, sizeof msg), "%s", msg);
    lm_sequence_grammar *sg;
    lm_error err;
    CHECK_OK(lm_sequence_grammar_create(g, v.trie, NULL, &sg, &err), &err);
    int padded = v.vocab + 37;
    float *logits = malloc(sizeof(float) * (size_t)padded);
    lm_masker fresh;
    CHECK_OK(lm_masker_init(&fresh, &g->grammar, v.trie, NULL, &err), &err);
    uint64_t *bits = malloc(sizeof(uint64_t) * (size_t)((v.vocab + 63) / 64));
    int32_t stop = v.vocab - 1; /* an added token in this vocabulary: never text */
    uint64_t rng = 7;
    int steps = 0, ended = 0;
    for (int walk = 0; walk < 6 && !test_current_failed(); walk++) {
        lm_gmatcher_start(&sg->masker.matcher, &sg->state);
        for (int step = 0; step < 40 && !test_current_failed(); step++) {
            for (int i = 0; i < padded; i++) logits[i] = (float)(test_grammar_random(&rng) % 1000) * 0.01f - 5.0f;
            float stop_logit = logits[stop];
            float *before = malloc(sizeof(float) * (size_t)padded);
            memcpy(before, logits, sizeof(float) * (size_t)padded);
            CHECK_OK(lm_sequence_grammar_mask(sg, logits, padded, &stop, 1, &err), &err);
            bool complete;
            CHECK_OK(lm_masker_compute(&fresh, &sg->state, bits, &complete, &err), &err);
            CHECK(complete == sg->complete);
            int n = 0, pick = -1;
            for (int id = 0; id < padded; id++) {
                bool allowed = id < v.vocab && ((bits[id >> 6] >> (id & 63)) & 1);
                if (id == stop) {
                    CHECK(logits[id] == (complete ? stop_logit : -INFINITY));
                    continue;
                }
                CHECK_MSG(allowed ? logits[id] == before[id] : logits[id] == -INFINITY,
                          "walk %d step %d: token %d %s but its logit is %g (was %g)", walk, step, id,
                          allowed ? "allowed" : "refused", logits[id], before[id]);
                if (allowed && test_grammar_random(&rng) % (uint64_t)(++n) == 0) pick = id;
            }
            free(before);
            steps++;
            if (pick < 0 || complete) {
                ended += complete;
                break;
            }
            bool finished;
            CHECK_OK(lm_sequence_grammar_accept(sg, v.tok, pick, &finished, &err), &err);
        }
    }
    CHECK_MSG(steps > 40, "only %d steps", steps);
    free(bits);
    free(logits);
    lm_masker_free(&fresh);
    lm_sequence_grammar_free(sg);
    loom_grammar_free(g);
    free_vocab(&v);
}

/* The engine's per-token budget (engine/sequence_grammar.h): a grammar that
 * passed its compile-time check but costs more per token than the
 * sequence's budget fails its mask, or its advance, saying so, instead of
 * running on; within the budget the same grammar masks as before. */
static void test_token_budget(void) {
    vocab_fixture v;
    if (!load_vocab(&v, "models/qwen35-dense")) return;
    loom_grammar *g;
    char msg[512];
    CHECK_MSG(compile(LOOM_GRAMMAR_REGEX, "(a*){100}b", &g, msg, sizeof msg), "%s", msg);
    lm_sequence_grammar *sg;
    lm_error err;
    CHECK_OK(lm_sequence_grammar_create(g, v.trie, NULL, &sg, &err), &err);
    CHECK(sg->token_work == LM_GRAMMAR_TOKEN_WORK);
    float *logits = calloc((size_t)v.vocab, sizeof(float));
    int32_t a = lm_tokenizer_token_to_id(v.tok, "a"), stop = v.vocab - 1;
    CHECK(a >= 0);
    CHECK_OK(lm_sequence_grammar_mask(sg, logits, v.vocab, &stop, 1, &err), &err);
    CHECK(logits[a] == 0);
    uint64_t spent = sg->masker.matcher.spent;
    bool finished;
    CHECK_OK(lm_sequence_grammar_accept(sg, v.tok, a, &finished, &err), &err);
    uint64_t accept_cost = sg->masker.matcher.spent - spent;
    /* a budget below what the mask costs: refused, saying why */
    sg->token_work = 200;
    memset(logits, 0, sizeof(float) * (size_t)v.vocab);
    lm_masker_free(&sg->masker); /* a cold table: the frames are built again */
    CHECK_OK(lm_masker_init(&sg->masker, &g->grammar, v.trie, NULL, &err), &err);
    sg->token_work = 200;
    lm_status st = lm_sequence_grammar_mask(sg, logits, v.vocab, &stop, 1, &err);
    CHECK_MSG(st == LM_ERR_UNSUPPORTED && strstr(err.message, "budget") && strstr(err.message, "200 units"),
              "mask over its budget: status %d '%s'", (int)st, err.message);
    /* and an advance past it */
    sg->token_work = accept_cost / 2 > 0 ? accept_cost / 2 : 1;
    st = lm_sequence_grammar_accept(sg, v.tok, a, &finished, &err);
    CHECK_MSG(st == LM_ERR_UNSUPPORTED && strstr(err.message, "budget"), "advance over its budget: status %d '%s'",
              (int)st, err.message);
    /* given its budget back, the sequence goes on */
    sg->token_work = LM_GRAMMAR_TOKEN_WORK;
    CHECK_OK(lm_sequence_grammar_mask(sg, logits, v.vocab, &stop, 1, &err), &err);
    free(logits);
    lm_sequence_grammar_free(sg);
    loom_grammar_free(g);
    free_vocab(&v);
}

static void test_mask_qwen3_vocab(void) {
    vocab_fixture v;
    if (!load_vocab(&v, "tokenizers/qwen3")) return;
    check_mask_walks(&v, LOOM_GRAMMAR_JSON_SCHEMA, mask_schema, 2, 12);
    /* a pattern's loop may end after any letter: on this vocabulary its
     * frame has more than LM_MASK_DEEP_TAILS tails and the masks inside
     * the address come from frames of two positions */
    check_mask_walks_shared(&v, LOOM_GRAMMAR_JSON_SCHEMA,
                            "{\"type\":\"object\",\"properties\":{\"email\":{\"type\":\"string\","
                            "\"pattern\":\"^[a-z]+@[a-z]+\\\\.com$\"},\"n\":{\"type\":\"integer\"}},"
                            "\"required\":[\"email\",\"n\"],\"additionalProperties\":false}",
                            2, 14, NULL, 11);
    free_vocab(&v);
}

int main(void) {
    RUN_TEST(test_regex);
    RUN_TEST(test_regex_refusals);
    RUN_TEST(test_choice);
    RUN_TEST(test_json_any);
    RUN_TEST(test_json_schema);
    RUN_TEST(test_schema_refusals);
    RUN_TEST(test_cost_refusals);
    RUN_TEST(test_cost_accepts);
    RUN_TEST(test_nullable_repetitions_against_pcre);
    RUN_TEST(test_many_values);
    RUN_TEST(test_grammar_cache);
    RUN_TEST(test_mask_small_vocab);
    RUN_TEST(test_mask_shared_frames);
    RUN_TEST(test_mask_applied_to_logits);
    RUN_TEST(test_token_budget);
    RUN_TEST(test_mask_qwen3_vocab);
    return test_summary("test_grammar");
}
