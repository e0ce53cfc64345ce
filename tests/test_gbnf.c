/* GBNF grammars (src/grammar/gbnf.c): what they accept and refuse, against
 * independent references — PCRE2 for the regular constructs (every string
 * over a small alphabet), a counter and a palindrome check for recursion,
 * the code point ranges themselves for character classes (their UTF-8
 * forms), llama.cpp's example grammars (tests/data/gbnf/) on strings of
 * known membership — and every kind of refusal with its line and column,
 * budgets included.  LOOM_GBNF_DIR=folder also compiles each *.gbnf there
 * (llama.cpp's whole grammars/ folder, say), and LOOM_GBNF_CASES=file.json
 * checks a list of {"grammar", "pass": [strings], "fail": [strings]} or
 * {"grammar", "refused": true} (llama.cpp's grammar integration tests,
 * extracted at tool time). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <dirent.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/compiled.h"
#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "harness.h"

static int compile_gbnf(const char *text, const char *suffix, loom_grammar **g, char *msg, size_t size) {
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_GBNF, .text = text, .text_len = strlen(text), .suffix = suffix};
    return loom_grammar_compile(&spec, g, msg, size);
}

/* A matcher kept for many membership questions. */
typedef struct {
    lm_gmatcher m;
    lm_gstate a, b;
} member;

static bool member_init(member *t, const lm_grammar *g) {
    lm_error err;
    memset(t, 0, sizeof *t);
    return lm_gmatcher_init(&t->m, g, &err) == LM_OK;
}

static void member_free(member *t) {
    lm_gstate_free(&t->a);
    lm_gstate_free(&t->b);
    lm_gmatcher_free(&t->m);
}

/* Whether the len bytes of s are a sentence of the grammar. */
static bool member_has(member *t, const char *s, size_t len) {
    bool ok = lm_gmatcher_start(&t->m, &t->a);
    for (size_t i = 0; ok && i < len; i++) {
        ok = lm_gmatcher_advance(&t->m, &t->a, (uint8_t)s[i], &t->b);
        lm_gstate x = t->a;
        t->a = t->b;
        t->b = x;
    }
    return ok && lm_gstate_complete(&t->a);
}

static bool accepts(const loom_grammar *g, const char *s) {
    member t;
    if (!member_init(&t, &g->grammar)) return false;
    bool ok = member_has(&t, s, strlen(s));
    member_free(&t);
    return ok;
}

typedef struct {
    const char *text;
    bool ok;
} sample;

static void check_samples(const char *grammar, const sample *samples, int n) {
    loom_grammar *g;
    char msg[512];
    CHECK_MSG(compile_gbnf(grammar, NULL, &g, msg, sizeof msg) == LOOM_OK, "compile %s: %s", grammar, msg);
    for (int i = 0; i < n; i++)
        if (accepts(g, samples[i].text) != samples[i].ok) {
            test_failed(__FILE__, __LINE__, "grammar %s %s \"%s\"", grammar, samples[i].ok ? "refused" : "accepted",
                        samples[i].text);
            break;
        }
    loom_grammar_free(g);
}

static void test_literals_and_escapes(void) {
    const sample s[] = {{"yes.", true}, {"no.", true}, {"yes", false}, {"maybe.", false}, {"", false}};
    check_samples("root ::= (\"yes\" | \"no\") \".\"", s, 5);
    /* escapes are code points written as UTF-8: \xE9 is é (C3 A9), not the byte E9 */
    const sample e[] = {{"\n\t\r\"\\[]A\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", true}, {"\n\t\r\"\\[]A\xE9\xE2\x82\xAC", false}};
    check_samples("root ::= \"\\n\\t\\r\\\"\\\\\\[\\]\\x41\\xE9\\u20AC\\U0001F600\"", e, 2);
    const sample u[] = {{"caf\xC3\xA9 \xE2\x98\x95", true}, {"cafe \xE2\x98\x95", false}};
    check_samples("root ::= \"caf\xC3\xA9 \xE2\x98\x95\"", u, 2);
    const sample empty[] = {{"", true}, {"a", false}};
    check_samples("root ::= \"\"", empty, 2);
}

static void test_layout(void) {
    /* comments, a rule going on after `|` and inside parentheses, CRLF, names of - _ and digits */
    const char *g = "# a comment line\r\n"
                    "root ::= first-part |   # after a bar the rule goes on\r\n"
                    "   \"z\"\r\n"
                    "\r\n"
                    "first-part ::= (\r\n"
                    "    \"a\" # inside a group too\r\n"
                    "    second_2\r\n"
                    ")\n"
                    "second_2::=\"b\"";
    const sample s[] = {{"ab", true}, {"z", true}, {"a", false}, {"abz", false}};
    check_samples(g, s, 4);
}

static void test_recursion(void) {
    /* balanced parentheses and palindromes: context-free, not regular */
    loom_grammar *bal, *pal;
    char msg[512];
    CHECK_MSG(compile_gbnf("root ::= (\"(\" root \")\" | \"x\")*", NULL, &bal, msg, sizeof msg) == LOOM_OK, "%s", msg);
    CHECK_MSG(compile_gbnf("root ::= \"a\" root \"a\" | \"b\" root \"b\" | \"a\" | \"b\" | \"\"", NULL, &pal, msg,
                           sizeof msg) == LOOM_OK,
              "%s", msg);
    member tb, tp;
    CHECK(member_init(&tb, &bal->grammar) && member_init(&tp, &pal->grammar));
    char s[12];
    int checked = 0;
    for (int len = 0; len <= 10 && !test_current_failed(); len++) {
        int total = 1;
        for (int k = 0; k < len; k++) total *= 3;
        for (int v = 0; v < total; v++) {
            int x = v, depth = 0;
            bool balanced = true, palindrome = true, ab = true;
            for (int k = 0; k < len; k++, x /= 3) s[k] = "()x"[x % 3];
            for (int k = 0; k < len; k++) {
                depth += s[k] == '(' ? 1 : s[k] == ')' ? -1 : 0;
                if (depth < 0) balanced = false;
            }
            balanced = balanced && depth == 0;
            if (member_has(&tb, s, (size_t)len) != balanced) {
                test_failed(__FILE__, __LINE__, "balanced parentheses: \"%.*s\" %s", len, s,
                            balanced ? "refused" : "accepted");
                break;
            }
            for (int k = 0; k < len; k++) s[k] = s[k] == '(' ? 'a' : s[k] == ')' ? 'b' : 'c';
            for (int k = 0; k < len; k++) {
                palindrome = palindrome && s[k] == s[len - 1 - k];
                ab = ab && s[k] != 'c';
            }
            if (member_has(&tp, s, (size_t)len) != (palindrome && ab)) {
                test_failed(__FILE__, __LINE__, "palindromes: \"%.*s\" %s", len, s,
                            palindrome && ab ? "refused" : "accepted");
                break;
            }
            checked++;
        }
    }
    CHECK(checked == 88573);
    /* deep nesting up to the matcher's stack bound */
    char deep[1200];
    int n = 300;
    for (int k = 0; k < n; k++) deep[k] = '(', deep[2 * n - 1 - k] = ')';
    CHECK(member_has(&tb, deep, 2 * (size_t)n));
    member_free(&tb);
    member_free(&tp);
    loom_grammar_free(bal);
    loom_grammar_free(pal);
}

/* Quantifiers, groups and classes agree with PCRE2 on every string over
 * {a, b, c} up to 7 characters. */
static void test_regular_against_pcre(void) {
    static const char *const pairs[][2] = {
        {"root ::= (\"a\" | \"b\"){2,3} \"c\"*", "(a|b){2,3}c*"},
        {"root ::= \"a\"{2} \"b\"{1,} \"c\"?", "a{2}b{1,}c?"},
        {"root ::= ([ab] \"c\"?)* \"b\"", "([ab]c?)*b"},
        {"root ::= x+ y\nx ::= \"a\" | \"b\" \"c\"\ny ::= [^ab]{0,2}", "(a|bc)+[^ab]{0,2}"},
        {"root ::= (\"a\"*)* \"b\"", "(a*)*b"},
        {"root ::= (\"a\"? \"b\"?){3} \"c\"", "(a?b?){3}c"},
        {"root ::= . . \"a\"", "..a"},
        {"root ::= [a-b]{1,3} (\"c\" | \"\")", "[a-b]{1,3}(c|)"},
        {"root ::= [^a]+ \"a\"{0,2}", "[^a]+a{0,2}"},
        {"root ::= ((\"ab\" | \"c\"){1,2} \"a\"?){0,2}", "((ab|c){1,2}a?){0,2}"},
        {"root ::= (\"\" | \"a\" | \"ab\" | \"ab\" | \"b\" | \"bca\") \"c\"?", "(|a|ab|ab|b|bca)c?"}, /* a trie */
        {"root ::= x x\nx ::= \"a\" | \"aa\" | \"b\" | \"\"", "(a|aa|b|)(a|aa|b|)"},
        {"root ::= [c-a]", ""}, /* refused: reversed */
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        loom_grammar *g;
        char msg[512];
        int rc = compile_gbnf(pairs[i][0], NULL, &g, msg, sizeof msg);
        if (!pairs[i][1][0]) {
            CHECK_MSG(rc == LOOM_ERR_INVALID && strstr(msg, "column 11"), "%s: %s", pairs[i][0], msg);
            continue;
        }
        CHECK_MSG(rc == LOOM_OK, "%s: %s", pairs[i][0], msg);
        int code;
        PCRE2_SIZE offset;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pairs[i][1], PCRE2_ZERO_TERMINATED,
                                       PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF, &code, &offset, NULL);
        CHECK(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        member t;
        CHECK(member_init(&t, &g->grammar));
        char s[8];
        int checked = 0;
        for (int len = 0; len <= 7 && !test_current_failed(); len++) {
            int total = 1;
            for (int k = 0; k < len; k++) total *= 3;
            for (int v = 0; v < total; v++) {
                int x = v;
                for (int k = 0; k < len; k++, x /= 3) s[k] = (char)('a' + x % 3);
                bool want = pcre2_match(re, (PCRE2_SPTR)s, (PCRE2_SIZE)len, 0, 0, md, NULL) >= 0;
                if (member_has(&t, s, (size_t)len) != want) {
                    test_failed(__FILE__, __LINE__, "%s: \"%.*s\" %s, PCRE2 %s", pairs[i][0], len, s,
                                want ? "refused" : "accepted", want ? "matches" : "does not");
                    break;
                }
                checked++;
            }
        }
        member_free(&t);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        loom_grammar_free(g);
        CHECK(checked == 3280);
    }
}

static size_t utf8(uint32_t cp, char *out) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
               out[2] = (char)(0x80 | (cp & 0x3F)), 3;
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

typedef struct {
    const char *grammar;
    bool negated;
    uint32_t ranges[8][2]; /* the class as written; {0, 0} ends it unless first */
    int n;
} class_case;

static bool in_ranges(const class_case *c, uint32_t cp) {
    bool in = false;
    for (int k = 0; k < c->n; k++) in |= cp >= c->ranges[k][0] && cp <= c->ranges[k][1];
    return in != c->negated;
}

/* A class matches one character, exactly those of its ranges (negated: the
 * others), each as its UTF-8 bytes: code points sampled at a stride, and
 * every one next to a range's ends or a UTF-8 length's. */
static void test_classes_by_code_point(void) {
    static const class_case cases[] = {
        {"root ::= [a-z\\xE9-\\xFF\\u0100-\\u07FF\\u4E00-\\u9FFF\\U0001F600-\\U0001F64F]", false,
         {{'a', 'z'}, {0xE9, 0xFF}, {0x100, 0x7FF}, {0x4E00, 0x9FFF}, {0x1F600, 0x1F64F}}, 5},
        {"root ::= [^\\n\"\\u2028]", true, {{'\n', '\n'}, {'"', '"'}, {0x2028, 0x2028}}, 3},
        {"root ::= [\\x00-\\x7F\\u0800-\\uFFFF]", false, {{0, 0x7F}, {0x800, 0xFFFF}}, 2},
        {"root ::= .", true, {{0, 0}}, 0},
        {"root ::= [^\\U00010000-\\U0010FFFF]", true, {{0x10000, 0x10FFFF}}, 1},
        {"root ::= [\xE3\x81\x81-\xE3\x82\x9F\\U000FFFFF-\\U0010FFFF]", false, {{0x3041, 0x309F}, {0xFFFFF, 0x10FFFF}}, 2},
    };
    int stride = test_rounds(13, 997), checked = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !test_current_failed(); i++) {
        const class_case *c = &cases[i];
        loom_grammar *g;
        char msg[512];
        CHECK_MSG(compile_gbnf(c->grammar, NULL, &g, msg, sizeof msg) == LOOM_OK, "%s: %s", c->grammar, msg);
        member t;
        CHECK(member_init(&t, &g->grammar));
        uint32_t edges[64];
        int n_edges = 0;
        static const uint32_t fixed[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
        for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) edges[n_edges++] = fixed[k];
        for (int k = 0; k < c->n; k++) edges[n_edges++] = c->ranges[k][0], edges[n_edges++] = c->ranges[k][1];
        for (uint32_t k = 0; k <= 0x10FFFF / (uint32_t)stride + (uint32_t)n_edges * 3 && !test_current_failed(); k++) {
            uint32_t j = k - 0x10FFFF / (uint32_t)stride - 1; /* past the stride: the edges, each -1, 0, +1 */
            uint32_t x = k <= 0x10FFFF / (uint32_t)stride ? k * (uint32_t)stride : edges[j / 3] + j % 3 - 1;
            if (x > 0x10FFFF || (x >= 0xD800 && x <= 0xDFFF)) continue;
            char s[4];
            size_t len = utf8(x, s);
            bool want = in_ranges(c, x);
            if (member_has(&t, s, len) != want) {
                test_failed(__FILE__, __LINE__, "%s: U+%04X %s", c->grammar, x, want ? "refused" : "accepted");
                break;
            }
            checked++;
        }
        /* never malformed UTF-8: overlong, surrogate, past U+10FFFF, a lone continuation */
        static const char *const bad[] = {"\xC0\x80", "\xC1\xBF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                                          "\xF5\x80\x80\x80", "\x80", "\xC3", "\xE2\x82"};
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
            CHECK_MSG(!member_has(&t, bad[k], strlen(bad[k])), "%s accepts malformed UTF-8 (#%zu)", c->grammar, k);
        member_free(&t);
        loom_grammar_free(g);
    }
    CHECK(checked > 6 * (0x10F800 / stride));
}

static const char *data_path(char *buf, size_t size, const char *relative) {
    const char *data = getenv("LOOM_TEST_DATA");
    snprintf(buf, size, "%s/%s", data && *data ? data : "tests/data", relative);
    return buf;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = malloc(LM_GBNF_MAX_LENGTH + 1);
    size_t n = text ? fread(text, 1, LM_GBNF_MAX_LENGTH, f) : 0;
    fclose(f);
    if (text) text[n] = 0;
    return text;
}

static void check_file(const char *name, const sample *samples, int n) {
    char path[512];
    char *text = read_text(data_path(path, sizeof path, name));
    CHECK_MSG(text, "cannot read %s", path);
    check_samples(text, samples, n);
    free(text);
}

/* llama.cpp's example grammars (tests/data/gbnf/, MIT) on strings whose
 * membership follows from what each describes. */
static void test_llama_cpp_examples(void) {
    const sample json[] = {
        {"{\"a\": 1}", true},
        {"{\"a\": [1, 2.5, \"x\", true, null], \"b\": {\"c\": -0.5e3}}", true},
        {"{\"s\": \"\\u00e9\\n caf\xC3\xA9\"}", true},
        {"{}", true},
        {"{\"a\" 1}", false},
        {"[1]", false}, /* root is an object */
        {"{\"a\": \"\x01\"}", false},
        {"{\"a\": tru}", false},
        {"{\"a\": 1,}", false},
        {"{\"a\": \"\\q\"}", false},
    };
    check_file("gbnf/json.gbnf", json, (int)(sizeof json / sizeof json[0]));
    const sample arith[] = {
        {"1+2= 3\n", true}, {"(a +b1) *c=x\n", true}, {"((((1))))=2\nx=y\n", true},
        {"1+2=3", false},   {"=3\n", false},          {"1++2=3\n", false},
        {"((1)=2\n", false},
    };
    check_file("gbnf/arithmetic.gbnf", arith, (int)(sizeof arith / sizeof arith[0]));
    const sample chess[] = {
        {"1. e4 e5\n2. Nf3 Nc6\n", true}, {"1. e4 e5\n2. O-O-O Qxf7#\n12. exd8=Q+ Kxd8\n", true},
        {"1. e4 e5\n", false},           {"1. e9 e5\n2. a3 a4\n", false},
        {"1. e4 e5\n0. a3 a4\n", false},
    };
    check_file("gbnf/chess.gbnf", chess, (int)(sizeof chess / sizeof chess[0]));
    /* list.gbnf leaves out \x85 (U+0085, C2 85) and U+2028: code points, not bytes */
    const sample list[] = {
        {"- apples\n- pears\n", true}, {"- caf\xC3\xA9 \xC2\xA0\n", true}, {"- \n", false}, {"* a\n", false},
        {"- a\xE2\x80\xA8" "b\n", false}, {"- a\xC2\x85" "b\n", false}, {"- a\rb\n", false},
    };
    check_file("gbnf/list.gbnf", list, (int)(sizeof list / sizeof list[0]));
}

/* Every *.gbnf of $LOOM_GBNF_DIR compiles (skipped when unset). */
static void test_grammar_folder(void) {
    const char *dir = getenv("LOOM_GBNF_DIR");
    if (!dir || !*dir) return;
    DIR *d = opendir(dir);
    CHECK_MSG(d, "cannot open %s", dir);
    int compiled = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".gbnf") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *text = read_text(path);
        CHECK_MSG(text, "cannot read %s", path);
        loom_grammar *g;
        char msg[512];
        int rc = compile_gbnf(text, NULL, &g, msg, sizeof msg);
        free(text);
        if (rc != LOOM_OK) {
            test_failed(__FILE__, __LINE__, "%s: %s", path, msg);
            continue;
        }
        printf("  %s: %u rules, %u elements\n", e->d_name, g->grammar.n_rules, g->grammar.n_elems);
        loom_grammar_free(g);
        compiled++;
    }
    closedir(d);
    printf("  %d grammars of %s compiled\n", compiled, dir);
    CHECK(compiled > 0);
}

/* Every case of $LOOM_GBNF_CASES (skipped when unset). */
static void test_case_file(void) {
    const char *path = getenv("LOOM_GBNF_CASES");
    if (!path || !*path) return;
    char *text = malloc(1 << 22);
    FILE *f = fopen(path, "rb");
    CHECK_MSG(text && f, "cannot read %s", path);
    size_t n = fread(text, 1, (1 << 22) - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *cases = cJSON_Parse(text);
    free(text);
    CHECK_MSG(cJSON_IsArray(cases), "%s is no JSON list", path);
    int strings = 0, grammars = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const cJSON *grammar = cJSON_GetObjectItem(c, "grammar"), *name = cJSON_GetObjectItem(c, "name");
        loom_grammar *g = NULL;
        char msg[512];
        int rc = compile_gbnf(grammar->valuestring, NULL, &g, msg, sizeof msg);
        grammars++;
        if (cJSON_IsTrue(cJSON_GetObjectItem(c, "refused"))) {
            if (rc == LOOM_OK) test_failed(__FILE__, __LINE__, "%s: compiled, should be refused", name->valuestring);
            else printf("  %s: refused: %s\n", name->valuestring, msg);
            loom_grammar_free(g);
            continue;
        }
        if (rc != LOOM_OK) {
            test_failed(__FILE__, __LINE__, "%s: %s", name->valuestring, msg);
            continue;
        }
        static const char *const lists[2] = {"pass", "fail"};
        for (int k = 0; k < 2; k++) {
            const cJSON *s;
            cJSON_ArrayForEach(s, cJSON_GetObjectItem(c, lists[k])) {
                strings++;
                if (accepts(g, s->valuestring) != (k == 0))
                    test_failed(__FILE__, __LINE__, "%s: \"%s\" %s", name->valuestring, s->valuestring,
                                k == 0 ? "refused" : "accepted");
            }
        }
        loom_grammar_free(g);
    }
    cJSON_Delete(cases);
    printf("  %d grammars, %d strings of %s checked\n", grammars, strings, path);
}

typedef struct {
    const char *grammar;
    int code;
    const char *message; /* a part of the error message */
} refusal;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void check_refusals(const refusal *r, int n) {
    for (int i = 0; i < n; i++) {
        loom_grammar *g = NULL;
        char msg[512] = "";
        double t0 = now_ms();
        int rc = compile_gbnf(r[i].grammar, NULL, &g, msg, sizeof msg);
        double ms = now_ms() - t0;
        if (rc != r[i].code || !strstr(msg, r[i].message)) {
            test_failed(__FILE__, __LINE__, "grammar %.60s: code %d \"%s\", wanted %d \"%s\"", r[i].grammar, rc, msg,
                        r[i].code, r[i].message);
            loom_grammar_free(g);
            return;
        }
        CHECK_MSG(!g, "a refused grammar came back");
        /* bounded work: far below the release tree's cost deadline in any build */
        CHECK_MSG(ms < 5000, "grammar %.60s took %.0f ms to refuse", r[i].grammar, ms);
    }
}

static void test_syntax_errors(void) {
    const refusal r[] = {
        {"root ::= foo", LOOM_ERR_INVALID, "line 1 column 10: rule `foo` is used but never defined"},
        {"a ::= \"x\"", LOOM_ERR_INVALID, "no `root` rule"},
        {"", LOOM_ERR_INVALID, "empty"},
        {"  # only a comment\n", LOOM_ERR_INVALID, "empty"},
        {"root ::= \"a\"\nroot ::= \"b\"", LOOM_ERR_INVALID, "line 2 column 1: rule `root` is defined twice (first at line 1)"},
        {"root ::= \"abc", LOOM_ERR_INVALID, "line 1 column 10: a string literal that is never closed"},
        {"root ::= [a-z", LOOM_ERR_INVALID, "line 1 column 10: a character class that is never closed"},
        {"root ::= (\"a\" | \"b\"\n", LOOM_ERR_INVALID, "expected `)` to close the group of line 1 column 10"},
        {"root ::= \"a\")", LOOM_ERR_INVALID, "line 1 column 13: expected the end of rule `root`, found a `)` that closes no group"},
        {"root ::= \"\\q\"", LOOM_ERR_INVALID, "line 1 column 11: unknown escape `\\q`"},
        {"root ::= \"\\x4\"", LOOM_ERR_INVALID, "\\x needs 2 hex digits"},
        {"root ::= \"\\uD800\"", LOOM_ERR_INVALID, "surrogate"},
        {"root ::= \"\\U00110000\"", LOOM_ERR_INVALID, "past U+10FFFF"},
        {"root ::= [z-a]", LOOM_ERR_INVALID, "line 1 column 11: a class range whose end comes before its start"},
        {"root ::= [^\\x00-\\U0010FFFF]", LOOM_ERR_INVALID, "a character class that matches no character"},
        {"root ::= []{1,3}", LOOM_ERR_INVALID, "line 1 column 10: a character class that matches no character"},
        {"root ::= \"a\"{3,2}", LOOM_ERR_INVALID, "{3,2} has n < m"},
        {"root ::= \"a\"{,2}", LOOM_ERR_INVALID, "needs a count"},
        {"root ::= \"a\"{2", LOOM_ERR_INVALID, "not closed by `}`"},
        {"root ::= \"\xC3\x28\"", LOOM_ERR_INVALID, "invalid UTF-8"},
        {"root = \"a\"", LOOM_ERR_INVALID, "line 1 column 6: expected `::=` after the rule name `root`, found `=`"},
        {"root ::= \"a\"\n| \"b\"", LOOM_ERR_INVALID, "line 2 column 1: a line that begins with `|`"},
        {"root ::= \"a\" @", LOOM_ERR_INVALID, "line 1 column 14: expected the end of rule `root`, found `@`"},
        {"root ::= *", LOOM_ERR_INVALID, "expected the end of rule `root`, found `*`"},
        /* llama.cpp's token references and Lark's notation: named */
        {"root ::= <think> \"a\"", LOOM_ERR_UNSUPPORTED, "token references"},
        {"root ::= !<[1000]>", LOOM_ERR_UNSUPPORTED, "token references"},
        {"start: \"a\" | \"b\"", LOOM_ERR_UNSUPPORTED, "line 1 column 1: a rule `name: ...` is Lark grammar syntax"},
        {"?start: value\nvalue: \"a\"", LOOM_ERR_UNSUPPORTED, "Lark grammar syntax"},
        {"%import common.WS\nroot ::= \"a\"", LOOM_ERR_UNSUPPORTED, "a `%` directive is Lark grammar syntax"},
    };
    check_refusals(r, (int)(sizeof r / sizeof r[0]));
}

static void test_rule_refusals(void) {
    const refusal r[] = {
        {"root ::= root \"a\" | \"a\"", LOOM_ERR_INVALID, "line 1 column 1: rule `root` is left-recursive"},
        {"root ::= a \"x\"\na ::= b | \"y\"\nb ::= root \"z\"", LOOM_ERR_INVALID, "is left-recursive through"},
        {"root ::= \"a\"? root \"b\" | \"c\"", LOOM_ERR_INVALID, "rule `root` is left-recursive"},
        {"root ::= e\ne ::= (e \"+\")? \"1\"", LOOM_ERR_INVALID, "left-recursive"},
        {"root ::= \"x\" root", LOOM_ERR_INVALID, "line 1 column 1: rule `root` matches no finite string"},
        {"root ::= \"a\" | b\nb ::= \"x\" b", LOOM_ERR_INVALID, "line 2 column 1: rule `b` matches no finite string"},
        {"root ::= (\"x\" root)+", LOOM_ERR_INVALID, "matches no finite string"},
    };
    check_refusals(r, (int)(sizeof r / sizeof r[0]));
    /* a cycle of tail references is no left recursion: the same language as a loop */
    const sample loop[] = {{"", true}, {"aaa", true}, {"ab", false}};
    check_samples("root ::= (\"a\"*)*", loop, 3);
    const sample tail[] = {{"", true}, {"a", true}, {"aa", true}, {"b", false}};
    check_samples("root ::= x\nx ::= \"a\"? x | \"\"", tail, 4);
}

static void test_budget_refusals(void) {
    /* text past its bound, repetition counts, nesting, names, rules and elements */
    char *big = malloc(LM_GBNF_MAX_LENGTH + 64);
    CHECK(big);
    memset(big, ' ', LM_GBNF_MAX_LENGTH + 16);
    memcpy(big, "root ::= \"a\"", 12);
    big[LM_GBNF_MAX_LENGTH + 16] = 0;
    char *nest = malloc(4096), *names = malloc(LM_GBNF_MAX_NAMES * 24 + 64), *rules = malloc(8192);
    CHECK(nest && names && rules);
    int k = snprintf(nest, 4096, "root ::= ");
    for (int d = 0; d < LM_GBNF_MAX_NESTING + 1; d++) nest[k++] = '(';
    nest[k++] = '"', nest[k++] = 'a', nest[k++] = '"';
    for (int d = 0; d < LM_GBNF_MAX_NESTING + 1; d++) nest[k++] = ')';
    nest[k] = 0;
    k = snprintf(names, 64, "root ::= \"a\"");
    for (int i = 0; i <= LM_GBNF_MAX_NAMES; i++) k += sprintf(names + k, "\nr%d ::= \"a\"", i);
    k = snprintf(rules, 64, "root ::=");
    for (int i = 0; i < 70; i++) k += sprintf(rules + k, " (\"a\"{0,1000})");
    const refusal r[] = {
        {big, LOOM_ERR_NOMEM, "GBNF grammar longer than"},
        {"root ::= \"a\"{1001}", LOOM_ERR_NOMEM, "line 1 column 13: a repetition count above 1000"},
        {"root ::= \"a\"{0,99999999999999999999}", LOOM_ERR_NOMEM, "a repetition count above 1000"},
        {"root ::= \"aaaa\"{1000}{1000}", LOOM_ERR_NOMEM, "this repetition makes the grammar larger than"},
        {nest, LOOM_ERR_NOMEM, "groups nested deeper than 64"},
        {names, LOOM_ERR_NOMEM, "more than 4096 rule names"},
        {rules, LOOM_ERR_NOMEM, "(repetitions count)"}, /* rules or elements: they grow together */
        /* issue 48's costly automaton, in GBNF: refused by the cost check, naming the grammar */
        {"root ::= (\"a\"*){1000}", LOOM_ERR_UNSUPPORTED, "GBNF grammar"},
    };
    check_refusals(r, (int)(sizeof r / sizeof r[0]));
    free(big);
    free(nest);
    free(names);
    free(rules);
}

/* Thousands of literal alternatives that begin alike are one trie, not a
 * stack per alternative (which the cost check would refuse). */
static void test_many_literals(void) {
    char *text = malloc(64 << 10);
    CHECK(text);
    int k = sprintf(text, "root ::= \"v0\"");
    for (int i = 1; i < 3000; i++) k += sprintf(text + k, " | \"v%d\"", i);
    k += sprintf(text + k, "\nname ::= \"x\"");
    loom_grammar *g;
    char msg[512];
    int rc = compile_gbnf(text, NULL, &g, msg, sizeof msg);
    free(text);
    CHECK_MSG(rc == LOOM_OK, "%s", msg);
    CHECK(accepts(g, "v0") && accepts(g, "v2999") && accepts(g, "v29") && accepts(g, "v300"));
    CHECK(!accepts(g, "v3000") && !accepts(g, "v") && !accepts(g, "v01") && !accepts(g, "x"));
    loom_grammar_free(g);
}

static void test_suffix_and_cache_kind(void) {
    loom_grammar *g;
    char msg[512];
    CHECK_MSG(compile_gbnf("root ::= [0-9]+", "</done>", &g, msg, sizeof msg) == LOOM_OK, "%s", msg);
    CHECK(accepts(g, "42</done>") && !accepts(g, "42") && !accepts(g, "</done>"));
    loom_grammar_free(g);
    /* the same text as a regex is another language */
    loom_grammar_spec spec = {.kind = LOOM_GRAMMAR_REGEX, .text = "a|b", .text_len = 3};
    CHECK(loom_grammar_compile(&spec, &g, msg, sizeof msg) == LOOM_OK);
    loom_grammar_free(g);
    CHECK(compile_gbnf("a|b", NULL, &g, msg, sizeof msg) == LOOM_ERR_INVALID);
}

int main(void) {
    RUN_TEST(test_literals_and_escapes);
    RUN_TEST(test_layout);
    RUN_TEST(test_recursion);
    RUN_TEST(test_regular_against_pcre);
    RUN_TEST(test_classes_by_code_point);
    RUN_TEST(test_llama_cpp_examples);
    RUN_TEST(test_grammar_folder);
    RUN_TEST(test_case_file);
    RUN_TEST(test_syntax_errors);
    RUN_TEST(test_rule_refusals);
    RUN_TEST(test_budget_refusals);
    RUN_TEST(test_many_literals);
    RUN_TEST(test_suffix_and_cache_kind);
    return test_summary("test_gbnf");
}
